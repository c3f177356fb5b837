"""Real captures through the real pipeline (``dissect_capture`` → Parquet → read back):
the DeepFlow Pulsar captures against their README counts and ``.result`` files, and our
recorded official-client capture against its client-side ground truth."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from analyzer.pipeline import Options, dissect_capture

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "pulsar-client.pcap"
U64 = 1 << 64


def _table(out: Path, name: str) -> list[dict]:
    path = out / name
    if not path.exists():
        return []
    return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist()


def _dissect(path: Path, tmp_path: Path, **options) -> dict[str, list[dict]]:
    out = tmp_path / "out"
    dissect_capture(path, out, Options(strict=True, validate=True, **options))
    return {n: _table(out, n) for n in ("pulsar_commands", "pulsar_messages", "anomalies",
                                        "flows")}


def _ordered(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["frame_first"], r["flow_id"], r["direction"],
                                       r["offset_start"]))


# ------------------------------------------------------------------------- DeepFlow

DEEPFLOW = ["deepflow/pulsar/pulsar-producer.pcap", "deepflow/pulsar/pulsar-consumer.pcap"]


@pytest.fixture(scope="module")
def deepflow(shared, tmp_path_factory) -> dict[str, dict]:
    out = {}
    for name in DEEPFLOW:
        path = shared / "captures" / name
        out[name] = _dissect(path, tmp_path_factory.mktemp("df"))
    return out


@pytest.mark.parametrize("name", DEEPFLOW)
def test_deepflow_command_counts(shared, deepflow, name):
    expected = json.loads((shared / "captures" / "expected.json").read_text())[name]
    tables = deepflow[name]
    assert Counter(r["command"] for r in tables["pulsar_commands"]) == \
        Counter(expected["pulsar_commands"])
    assert tables["anomalies"] == []
    assert len(tables["flows"]) == expected["tcp_streams"]
    for f in tables["flows"]:
        assert f["protocol"] == "pulsar"
        for d in ("c2s", "s2c"):
            assert f[f"undecoded_bytes_{d}"] == 0
            assert f[f"decoded_bytes_{d}"] == f[f"stream_bytes_{d}"]
    # README: the 10 payload frames carry the 0x0e01 checksum, verified
    payload = [r for r in tables["pulsar_commands"] if r["command"] in ("SEND", "MESSAGE")]
    assert len(payload) == 10 and {r["crc_status"] for r in payload} == {"ok"}
    versions = {r["protocol_version"] for r in tables["pulsar_commands"]} - {None}
    assert versions == {19}
    topics = {r["topic"] for r in tables["pulsar_commands"]} - {None}
    assert topics == {"persistent://public/default/my-topic"}


def _u64(v):
    return v - U64 if isinstance(v, int) and v >= 1 << 63 else v


# DeepFlow's field names → our columns (values compared as DeepFlow prints them)
_FIELDS = {
    "client_version": "client_version", "server_version": "server_version",
    "protocol_version": "protocol_version", "max_message_size": "max_message_size",
    "auth_method_name": "auth_method", "proxy_to_broker_url": "proxy_to_broker_url",
    "topic": "topic", "request_id": "request_id", "producer_id": "producer_id",
    "consumer_id": "consumer_id", "sequence_id": "sequence_id",
    "highest_sequence_id": "highest_sequence_id", "subscription": "subscription",
    "consumer_name": "consumer_name", "producer_name": "producer_name",
    "last_sequence_id": "last_sequence_id", "partitions": "partitions",
    "authoritative": "authoritative", "broker_service_url": "broker_service_url",
    "proxy_through_service_url": "proxy_through_service_url",
    "message_permits": "message_permits", "producer_ready": None,
}
_ENUMS = {
    "sub_type": ("sub_type", {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}),
    "ack_type": ("ack_type", {0: "Individual", 1: "Cumulative"}),
    "initial_position": ("initial_position", {0: "Latest", 1: "Earliest"}),
}
_RESPONSE = {22: {0: "Success", 1: "Failed"}, 24: {0: "Redirect", 1: "Connect", 2: "Failed"}}


@pytest.mark.parametrize("name", DEEPFLOW)
def test_deepflow_result_files(shared, deepflow, name):
    from dissectors.pulsar.frame import COMMAND_NAMES

    lines = [json.loads(x) for x in
             (shared / "captures" / name.replace(".pcap", ".result")).read_text().splitlines()
             if x.strip()]
    rows = _ordered(deepflow[name]["pulsar_commands"])
    msgs = {r["parent_record_id"]: r for r in deepflow[name]["pulsar_messages"]}
    assert len(lines) == len(rows)
    compared = 0
    for line, row in zip(lines, rows, strict=True):
        command = line["command"]
        t = command["type"]
        assert row["command"] == COMMAND_NAMES[t]
        # DeepFlow's req_len/resp_len is totalSize; captured_*_byte the whole frame
        size = line.get("req_len", line.get("resp_len"))
        assert row["frame_size"] - 4 == size
        assert row["frame_size"] in (line["captured_request_byte"],
                                     line["captured_response_byte"]) or t == 9
        (sub,) = [v for k, v in command.items() if k != "type"]
        for key, value in sub.items():
            if key in _FIELDS:
                col = _FIELDS[key]
                if col is not None:
                    assert row[col] == _u64(value), (t, key)
                    compared += 1
            elif key in _ENUMS:
                col, names = _ENUMS[key]
                assert row[col] == names[value], (t, key)
                compared += 1
            elif key == "response":
                assert row["lookup_response"] == _RESPONSE[t][value]
                compared += 1
            elif key == "feature_flags":
                assert row["feature_flags"] == [k for k, v in value.items() if v]
                compared += 1
            elif key == "message_id":
                ids = value if isinstance(value, list) else [value]
                got = row["message_ids"] if isinstance(value, list) else [row]
                assert [(m["ledger_id"], m["entry_id"]) for m in got] == [
                    (m["ledger_id"], m["entry_id"]) for m in ids]
                for m, g in zip(ids, got, strict=True):
                    if "partition" in m:
                        assert g["partition"] == m["partition"]
                compared += 1
        md = line.get("message_metadata")
        if md is not None:
            m = msgs[row["record_id"]]
            assert m["producer_name"] == md["producer_name"]
            assert m["sequence_id"] == md["sequence_id"]
            assert m["publish_time_ns"] == md["publish_time"] * 1_000_000
            assert m["properties"] == md["properties"]
            compared += 4
    assert compared > 100


@pytest.mark.parametrize("name", DEEPFLOW)
def test_deepflow_payloads(deepflow, name):
    msgs = sorted(deepflow[name]["pulsar_messages"], key=lambda r: r["sequence_id"])
    assert [m["payload"] for m in msgs] == [f"hello-pulsar-{i}".encode() for i in range(10)]
    assert all(m["topic"] == "persistent://public/default/my-topic" for m in msgs)
    assert {m["incomplete"] for m in msgs} == {False}


# ------------------------------------------------------- the official client, recorded

class Digest:
    def __init__(self) -> None:
        self.n = 0
        self.nbytes = 0
        self.sha = hashlib.sha256()

    def add(self, payload: bytes) -> None:
        self.n += 1
        self.nbytes += len(payload)
        self.sha.update(len(payload).to_bytes(8, "big"))
        self.sha.update(payload)

    def as_json(self) -> dict:
        return {"messages": self.n, "payload_bytes": self.nbytes,
                "payload_sha256": self.sha.hexdigest()}


@pytest.fixture(scope="module")
def client_capture(tmp_path_factory) -> tuple[dict, dict]:
    truth = json.loads(SAMPLE.with_suffix(".truth.json").read_text())
    # payload_cap above the largest payload (40 000 bytes), so that the digests in send
    # order can be recomputed from the payload column itself
    return truth, _dissect(SAMPLE, tmp_path_factory.mktemp("client"), payload_cap=65536)


def test_client_capture_is_clean_and_fully_decoded(client_capture):
    truth, t = client_capture
    assert truth["problems"] == []
    assert t["anomalies"] == []
    assert t["flows"] and all(f["protocol"] == "pulsar" for f in t["flows"])
    for f in t["flows"]:
        for d in ("c2s", "s2c"):
            assert f[f"decoded_bytes_{d}"] == f[f"stream_bytes_{d}"] > 0
            assert f[f"gap_bytes_{d}"] == 0
    cmds = t["pulsar_commands"]
    assert {r["crc_status"] for r in cmds if r["command"] in ("SEND", "MESSAGE")} == {"ok"}
    # broker entry metadata on every delivery (the client announced support)
    assert all(r["broker_index"] is not None for r in cmds if r["command"] == "MESSAGE")
    n_prod = sum(max(1, p["partitions"]) for p in truth["producers"].values())
    n_cons = sum(3 if c["topic"].endswith("parted") else 1 for c in truth["consumers"].values())
    counts = Counter(r["command"] for r in cmds)
    assert counts["PRODUCER"] == counts["PRODUCER_SUCCESS"] == counts["CLOSE_PRODUCER"] == n_prod
    assert counts["SUBSCRIBE"] == counts["CLOSE_CONSUMER"] == n_cons
    assert counts["SEND"] == counts["SEND_RECEIPT"] == counts["MESSAGE"]
    assert counts["CONNECT"] == counts["CONNECTED"] == len(t["flows"])
    assert counts["ACTIVE_CONSUMER_CHANGE"] == 1  # the Failover subscription


def test_client_capture_sent_messages_match_the_truth(client_capture):
    """Per topic (partition topics apart): messages, payload bytes and the SHA-256 over
    payloads in send order, exactly as the producing application counted them."""
    truth, t = client_capture
    want: dict[str, dict] = {}
    for p in truth["producers"].values():
        want.update(p["sent"])
    rows = [m for m in t["pulsar_messages"] if m["command"] == "SEND"]
    rows.sort(key=lambda m: (m["flow_id"], m["offset_start"], m["batch_index"] or 0))
    assert _digests(rows, key=lambda m: m["topic"]) == want


def _digests(rows: list[dict], key) -> dict[str, dict]:
    got: dict[str, Digest] = defaultdict(Digest)
    for m in rows:
        assert m["incomplete"] is False and m["payload_truncated"] is False
        assert hashlib.sha256(m["payload"]).hexdigest() == m["payload_sha256"]
        got[key(m)].add(m["payload"])
    return {k: d.as_json() for k, d in got.items()}


def test_client_capture_received_messages_match_the_truth(client_capture):
    truth, t = client_capture
    names = {(r["flow_id"], r["consumer_id"]): r["consumer_name"]
             for r in t["pulsar_commands"] if r["command"] == "SUBSCRIBE"}
    rows = [m for m in t["pulsar_messages"] if m["command"] == "MESSAGE"]
    rows.sort(key=lambda m: (m["flow_id"], m["offset_start"], m["batch_index"] or 0))
    want = {f"{c}|{topic}": d for c, v in truth["consumers"].items()
            for topic, d in v["received"].items()}
    got = _digests(rows, key=lambda m: f"{names[(m['flow_id'], m['consumer_id'])]}|"
                                       f"{m['topic']}")
    assert got == want


def test_client_capture_every_sent_payload_is_delivered_once(client_capture):
    _, t = client_capture
    sent = Counter((m["topic"], m["payload_sha256"], m["payload_len"])
                   for m in t["pulsar_messages"] if m["command"] == "SEND")
    got = Counter((m["topic"], m["payload_sha256"], m["payload_len"])
                  for m in t["pulsar_messages"] if m["command"] == "MESSAGE")
    assert sent == got
    big = [m for m in t["pulsar_messages"] if m["chunk_uuid"]]
    assert len(big) == 2 and {m["payload_len"] for m in big} == {40_000}
    assert {len(m["chunk_ids"]) for m in big} == {3}


def test_client_capture_codecs_batches_subscriptions_and_acks(client_capture):
    truth, t = client_capture
    msgs = t["pulsar_messages"]
    assert {m["compression"] for m in msgs} == {"NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"}
    for p in truth["producers"].values():
        topic_rows = [m for m in msgs if m["command"] == "SEND"
                      and m["topic"].split("-partition-")[0] == p["topic"]]
        batched = {m["num_messages_in_batch"] is not None for m in topic_rows}
        assert batched == {p["batching"]}, p["topic"]
    cmds = t["pulsar_commands"]
    assert {r["sub_type"] for r in cmds if r["command"] == "SUBSCRIBE"} == {
        "Exclusive", "Shared", "Failover", "Key_Shared"}
    assert {r["topic"] for r in cmds if r["command"] == "SEND"} >= {
        f"persistent://public/default/parted-partition-{i}" for i in range(3)}
    # every delivered entry is acknowledged by its consumer (individually or cumulatively)
    names = {(r["flow_id"], r["consumer_id"]): r["consumer_name"]
             for r in cmds if r["command"] == "SUBSCRIBE"}
    acked: dict[str, set] = defaultdict(set)
    cumulative: set[str] = set()
    for r in cmds:
        if r["command"] == "ACK":
            name = names[(r["flow_id"], r["consumer_id"])]
            if r["ack_type"] == "Cumulative":
                cumulative.add(name)
            acked[name] |= {(m["ledger_id"], m["entry_id"]) for m in r["message_ids"]}
    for r in cmds:
        if r["command"] == "MESSAGE":
            name = names[(r["flow_id"], r["consumer_id"])]
            if truth["consumers"][name]["ack"] == "individual":
                assert (r["ledger_id"], r["entry_id"]) in acked[name], name
    assert cumulative == {n for n, c in truth["consumers"].items() if c["ack"] == "cumulative"}
