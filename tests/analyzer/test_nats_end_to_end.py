"""Issue 3 acceptance, end to end: capture file → ``dissect_capture`` → Parquet dataset →
read back, compared with facts that were *not* produced by msgcap:

1. ``samples/nats-basic.pcap``: a real nats-server + nats-py capture whose ground truth was
   counted on the client side (``samples/README.md``, ``nats-basic.truth.json``);
2. DeepFlow's expected decodes (``deepflow/nats/*.result``, Rust Debug lines, parsed by
   ``tests.analyzer.deepflow_result``);
3. the spicy-nats captures: per-stream op counts from ``captures/README.md`` /
   ``expected.json`` and Zeek's ``nats.log`` baseline of the INFO/CONNECT JSON;
4. every capture of ``tests/data/captures``: no exception with ``strict``/``validate``,
   byte accounting in ``flows``, manifest row counts = Parquet row counts;
5. determinism; 6. read back with pyarrow.dataset and Spark; 7. the ``msgcap`` CLI.

Each capture is dissected once per module (module-scoped fixtures): all ~140 shared
captures take about 2 s; the module takes about 15 s without Spark, most of it the
``msgcap`` subprocesses, plus the Spark session start when the shared one is not up yet.
The last section holds tests for pipeline bugs found while writing these.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import CaptureResult, Options, dissect_capture
from analyzer.sink import open_dataset
from dissectors.core_tables import ANOMALIES, FLOWS
from dissectors.nats import NatsDissector
from dissectors.nats.table import NATS_TABLE
from dissectors.registry import Registry
from dissectors.schema import DESCRIPTION_KEY, META_TABLE, META_VERSION, arrow_schema
from dissectors.tables import TableSpec
from tests.analyzer.deepflow_result import read_result
from tests.conftest import SHARED
from tests.reassembly.synth import ACK, PSH, PcapWriter, tcp_frame

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
BASIC = SAMPLES / "nats-basic.pcap"
TRUTH_FILE = json.loads((SAMPLES / "nats-basic.truth.json").read_text())
TRUTH = TRUTH_FILE["connections"]
CAPTURES = SHARED / "captures"
EXPECTED: dict[str, dict] = json.loads((CAPTURES / "expected.json").read_text())
DEEPFLOW = sorted(p.stem for p in (CAPTURES / "deepflow/nats").glob("*.result"))
NATS_KEYS = sorted(k for k, v in EXPECTED.items() if "nats_ops" in v)
MSGCAP = Path(sys.executable).with_name("msgcap")

# Larger than every payload in these captures, so the payload column holds each whole
# payload (the truth digest is over payload bytes).  The widest one in nats-basic is
# the JetStream stream-create response (831 bytes), under the default cap, but the
# truth must not depend on that.
PAYLOAD_CAP = 1 << 20
MESSAGE_OPS = ("PUB", "HPUB", "MSG", "HMSG")
TABLES: tuple[TableSpec, ...] = (NATS_TABLE, FLOWS, ANOMALIES)

# The two special payloads of the `basic` workload (samples/nats_workload.py)
CRLF_PAYLOAD = b"line one\r\nline two\r\n\r\nMSG fake.subject 1 5\r\nhello\r\nPING\r\n"
BINARY_PAYLOAD = bytes(range(256)) + b"\x00\r\n\x00" + bytes(range(255, -1, -1))


class Dissected:
    """One capture dissected into its own dataset directory; tables read back once."""

    def __init__(
        self, path: Path, out: Path, options: Options, registry: Registry | None = None
    ) -> None:
        self.path = path
        self.out = out
        self.result: CaptureResult = dissect_capture(path, out, options, registry=registry)
        self._rows: dict[str, list[dict[str, Any]]] = {}

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.out / "manifest.json").read_text())

    def rows(self, spec: TableSpec) -> list[dict[str, Any]]:
        if spec.name not in self._rows:
            self._rows[spec.name] = open_dataset(self.out, spec).to_table().to_pylist()
        return self._rows[spec.name]

    def nats(self, flow_id: int, direction: str) -> list[dict[str, Any]]:
        """``nats`` rows of one flow direction in stream order."""
        rows = [
            r for r in self.rows(NATS_TABLE)
            if r["flow_id"] == flow_id and r["direction"] == direction
        ]
        return sorted(rows, key=lambda r: r["offset_start"])

    def flow_by_client_port(self, port: int) -> dict[str, Any]:
        found = [f for f in self.rows(FLOWS) if f["client_port"] == port]
        assert len(found) == 1, (port, found)
        return found[0]


def _options(**kw: Any) -> Options:
    return Options(strict=True, validate=True, **kw)


@pytest.fixture(scope="module")
def basic(tmp_path_factory) -> Dissected:
    return Dissected(BASIC, tmp_path_factory.mktemp("basic"), _options(payload_cap=PAYLOAD_CAP))


@pytest.fixture(scope="module")
def shared_capture(tmp_path_factory) -> Callable[[str], Dissected]:
    """``get(key)`` dissects ``captures/<key>`` on first use (default payload cap, as a
    user would run it) and caches it for the module."""
    cache: dict[str, Dissected] = {}

    def get(key: str) -> Dissected:
        if key not in cache:
            out = tmp_path_factory.mktemp("cap")
            cache[key] = Dissected(CAPTURES / key, out, _options())
        return cache[key]

    return get


def _ops(rows: list[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(r["op"] for r in rows))


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def _digest(payloads: list[bytes]) -> str:
    """The truth file's payload_sha256_scheme: for each message in order,
    uint64 big-endian len(payload) || payload."""
    h = hashlib.sha256()
    for p in payloads:
        h.update(struct.pack(">Q", len(p)))
        h.update(p)
    return h.hexdigest()


def _headers(row: dict[str, Any]) -> dict[str, list[str]]:
    """The map column as read by pyarrow (a list of (name, values) pairs), as a dict."""
    return dict(row["headers"] or [])


# ==================================================================================
# 1. the real nats-server + nats-py capture against its client-side truth
# ==================================================================================


def test_truth_file_is_the_committed_capture() -> None:
    assert TRUTH_FILE["problems"] == []
    assert hashlib.sha256(BASIC.read_bytes()).hexdigest() == (
        "56a6e5576f68569dcdb3c396953d3b9655fb1282fe3a9a6a95cc9c970c61e4c1"
    )
    assert len(TRUTH) == 6


def test_truth_run_is_clean_and_every_flow_is_nats(basic: Dissected) -> None:
    m = basic.manifest
    assert m["status"] == "clean" and m["exit_code"] == 0
    assert basic.rows(ANOMALIES) == []
    assert basic.result.flows_by_protocol == Counter({"nats": 6})
    flows = basic.rows(FLOWS)
    assert len(flows) == 6
    assert {f["client_port"] for f in flows} == {c["client_port"] for c in TRUTH.values()}
    for name, conn in TRUTH.items():
        f = basic.flow_by_client_port(conn["client_port"])
        assert f["protocol"] == "nats", name
        assert f["transport"] == "tcp" and f["role_source"] == "syn"
        assert (f["server_ip"], f["server_port"]) == (conn["server_ip"], conn["server_port"])
        for d, side in (("c2s", "sent"), ("s2c", "received")):
            stream = conn[side]["stream_bytes"]
            assert f[f"stream_bytes_{d}"] == stream, (name, d)
            assert f[f"gap_bytes_{d}"] == 0
            assert f[f"undecoded_bytes_{d}"] == 0, (name, d)
            assert f[f"decoded_bytes_{d}"] == stream, (name, d)
            assert (
                f[f"decoded_bytes_{d}"] + f[f"undecoded_bytes_{d}"] + f[f"gap_bytes_{d}"]
                == stream
            )
            # every stream byte belongs to exactly one row: rows tile the stream
            rows = basic.nats(f["flow_id"], d)
            assert rows[0]["offset_start"] == 0
            pairs = zip(rows, rows[1:], strict=False)
            assert all(a["offset_end"] == b["offset_start"] for a, b in pairs)
            assert rows[-1]["offset_end"] == stream


@pytest.mark.parametrize("side", ["sent", "received"])
@pytest.mark.parametrize("name", sorted(TRUTH))
def test_truth_ops_payload_bytes_and_digest(basic: Dissected, name: str, side: str) -> None:
    conn = TRUTH[name]
    truth = conn[side]
    f = basic.flow_by_client_port(conn["client_port"])
    rows = basic.nats(f["flow_id"], "c2s" if side == "sent" else "s2c")

    assert _ops(rows) == _nonzero(truth["ops"])
    messages = [r for r in rows if r["op"] in MESSAGE_OPS]
    assert len(messages) == truth["messages"]
    for r in messages:
        assert r["incomplete"] is False and r["payload_truncated"] is False
        assert len(r["payload"]) == r["payload_len"]
        assert r["payload_sha256"] == hashlib.sha256(r["payload"]).hexdigest()
    assert sum(r["payload_len"] for r in messages) == truth["payload_bytes"]
    assert sum(r["header_len"] or 0 for r in messages) == truth["header_bytes"]
    assert _digest([r["payload"] for r in messages]) == truth["payload_sha256"]


def test_truth_info_and_connect_columns(basic: Dissected) -> None:
    server, client = TRUTH_FILE["server"], TRUTH_FILE["client"]
    for name, conn in TRUTH.items():
        f = basic.flow_by_client_port(conn["client_port"])
        (connect,) = [r for r in basic.nats(f["flow_id"], "c2s") if r["op"] == "CONNECT"]
        assert connect["client_name"] == name
        assert connect["client_lang"] == "python3"
        assert connect["client_version"] == client["version"]
        assert connect["verbose"] is False and connect["connect_headers"] is True
        assert connect["no_responders"] is True and connect["auth_fields"] == []
        assert json.loads(connect["json_raw"])["name"] == name
        infos = [r for r in basic.nats(f["flow_id"], "s2c") if r["op"] == "INFO"]
        assert len(infos) == 2  # one before CONNECT, one after it
        for info in infos:
            assert info["server_version"] == server["version"].removeprefix("v")
            assert info["server_port"] == server["port"]
            assert info["jetstream"] is True and info["info_headers"] is True
            assert info["max_payload"] == 1048576
            assert info["client_ip"] == conn["client_ip"]
        assert infos[0]["connect_info"] is None and infos[1]["connect_info"] is True
        assert infos[0]["client_id"] == infos[1]["client_id"]


def _conn_rows(basic: Dissected, name: str, direction: str) -> list[dict[str, Any]]:
    return basic.nats(basic.flow_by_client_port(TRUTH[name]["client_port"])["flow_id"], direction)


def test_truth_headers_multi_valued_and_in_order(basic: Dissected) -> None:
    raw = b"NATS/1.0\r\nX-Multi: first\r\nX-Multi: second\r\nX-Single: one\r\n\r\n"
    (pub,) = [r for r in _conn_rows(basic, "publisher", "c2s")
              if r["payload"] == b"multi-valued header"]
    got = [r for r in _conn_rows(basic, "subscriber", "s2c") if r["subject"] == "demo.hdr"]
    assert [r["payload"] for r in got] == [b"with headers", b"", b"multi-valued header"]
    hmsg = got[2]
    for row, op in ((pub, "HPUB"), (hmsg, "HMSG")):
        assert row["op"] == op and row["subject"] == "demo.hdr"
        assert row["headers"] == [("X-Multi", ["first", "second"]), ("X-Single", ["one"])]
        assert row["headers_raw"] == raw and row["header_len"] == len(raw) == 60
        assert row["payload_len"] == 19 and row["status_code"] is None
    assert hmsg["sid"] == "2"  # SUB demo.hdr 2
    # the nats-py headers-dict publishes, whole
    assert got[0]["headers"] == [("X-Trace", ["t-0"]), ("Content-Type", ["text/plain"])]
    assert got[1]["headers"] == [("X-Empty-Payload", ["yes"])]
    assert got[1]["payload_len"] == 0 and got[1]["payload"] == b""


def test_truth_no_responders_503(basic: Dissected) -> None:
    c2s = _conn_rows(basic, "publisher", "c2s")
    (req,) = [r for r in c2s if r["subject"] == "svc.nobody"]
    assert req["op"] == "PUB" and req["payload"] == b"nobody listens"
    (mux,) = [r for r in c2s if r["op"] == "SUB"]
    assert mux["subject"].startswith("_INBOX.") and mux["subject"].endswith(".*")
    assert req["reply_to"].startswith(mux["subject"][:-1])
    (resp,) = [r for r in _conn_rows(basic, "publisher", "s2c") if r["status_code"] is not None]
    assert resp["op"] == "HMSG"
    assert resp["status_code"] == 503
    assert resp["status_description"] is None  # nats-server sends "NATS/1.0 503" bare
    assert resp["headers_raw"] == b"NATS/1.0 503\r\nNats-Subject: svc.nobody\r\n\r\n"
    assert _headers(resp) == {"Nats-Subject": ["svc.nobody"]}
    assert resp["subject"] == req["reply_to"] and resp["sid"] == mux["sid"]
    assert resp["payload_len"] == 0 and resp["payload"] == b""


def test_truth_request_reply_round_trips(basic: Dissected) -> None:
    pub_out = _conn_rows(basic, "publisher", "c2s")
    pub_in = {r["subject"]: r for r in _conn_rows(basic, "publisher", "s2c")}
    resp_in = {r["reply_to"]: r for r in _conn_rows(basic, "responder", "s2c") if r["reply_to"]}
    resp_out = {r["subject"]: r for r in _conn_rows(basic, "responder", "c2s")}
    requests = [r for r in pub_out if r["subject"] == "svc.echo"]
    assert [r["op"] for r in requests] == ["PUB", "PUB", "PUB", "HPUB"]
    for req in requests:
        inbox = req["reply_to"]
        delivered = resp_in[inbox]  # the responder got the request ...
        assert delivered["subject"] == "svc.echo" and delivered["payload"] == req["payload"]
        answer = resp_out[inbox]  # ... answered on the reply subject ...
        assert answer["payload"] == b"echo:" + req["payload"]
        back = pub_in[inbox]  # ... and the requester got the answer
        assert back["payload"] == answer["payload"]
        if req["op"] == "HPUB":  # msg.respond echoes the request's headers
            assert (delivered["op"], answer["op"], back["op"]) == ("HMSG", "HPUB", "HMSG")
            assert _headers(req) == _headers(delivered) == _headers(back) == {"X-Req": ["1"]}
        else:
            assert (delivered["op"], answer["op"], back["op"]) == ("MSG", "PUB", "MSG")


def test_truth_subscriptions_queue_groups_wildcards_unsub(basic: Dissected) -> None:
    pubs = [r for r in _conn_rows(basic, "publisher", "c2s") if r["op"] == "PUB"]
    sub_out = _conn_rows(basic, "subscriber", "c2s")
    sub_in = _conn_rows(basic, "subscriber", "s2c")
    sids = {r["subject"]: r["sid"] for r in sub_out if r["op"] == "SUB"}
    assert sids == {
        "demo.plain": "1", "demo.hdr": "2", "wc.*": "3", "wc.>": "4",
        "demo.limited.0": "5", "demo.temp.0": "6",
    }  # fmt: skip
    assert all(r["queue_group"] is None for r in sub_out if r["op"] == "SUB")

    # UNSUB with max_msgs: 5 published, 3 delivered; plain UNSUB: 1 before, none after
    unsubs = [(r["sid"], r["max_msgs"]) for r in sub_out if r["op"] == "UNSUB"]
    assert unsubs == [("5", 3), ("6", None)]
    assert sum(r["subject"] == "demo.limited.0" for r in pubs) == 5
    limited = [r for r in sub_in if r["subject"] == "demo.limited.0"]
    assert [r["payload"] for r in limited] == [b"limited 0", b"limited 1", b"limited 2"]
    assert {r["sid"] for r in limited} == {"5"}
    temp = [r["payload"] for r in sub_in if r["subject"] == "demo.temp.0"]
    assert temp == [b"before unsub"]

    # wildcards: wc.a matches wc.* and wc.>, wc.a.b only wc.>
    wc = Counter((r["subject"], r["sid"]) for r in sub_in if (r["subject"] or "").startswith("wc."))
    assert wc == {("wc.a", "3"): 1, ("wc.a", "4"): 1, ("wc.a.b", "4"): 1}

    # queue group: each member SUBs with queue "workers"; the 6 jobs are split, none twice
    jobs = [r["payload"] for r in pubs if r["subject"] == "work.jobs"]
    assert len(jobs) == 6
    got = []
    for member in ("queue-a", "queue-b"):
        (sub,) = [r for r in _conn_rows(basic, member, "c2s") if r["op"] == "SUB"]
        assert (sub["subject"], sub["queue_group"], sub["sid"]) == ("work.jobs", "workers", "1")
        msgs = [r for r in _conn_rows(basic, member, "s2c") if r["op"] == "MSG"]
        assert msgs and all(r["subject"] == "work.jobs" for r in msgs)
        assert len(msgs) == TRUTH[member]["received"]["ops"]["MSG"]
        got += [r["payload"] for r in msgs]
    assert sorted(got) == sorted(jobs)


def test_truth_special_payloads_are_whole_rows(basic: Dissected) -> None:
    plain = [r for r in _conn_rows(basic, "publisher", "c2s") if r["subject"] == "demo.plain"]
    assert [r["payload"] for r in plain[5:]] == [b"", CRLF_PAYLOAD, BINARY_PAYLOAD]
    empty, crlf, binary = plain[5:]
    assert empty["payload_len"] == 0
    assert empty["payload_sha256"] == hashlib.sha256(b"").hexdigest()
    assert crlf["payload_len"] == len(CRLF_PAYLOAD) == 57
    assert binary["payload_len"] == len(BINARY_PAYLOAD) == 516
    received = [r["payload"] for r in _conn_rows(basic, "subscriber", "s2c")
                if r["subject"] == "demo.plain"]
    assert received == [r["payload"] for r in plain]
    # the fake "MSG ..."/"PING" lines inside the payload did not become rows
    assert not any(r["subject"] == "fake.subject" for r in basic.rows(NATS_TABLE))


def test_truth_jetstream_publish_fetch_and_acks(basic: Dissected) -> None:
    out = _conn_rows(basic, "jetstream", "c2s")
    into = _conn_rows(basic, "jetstream", "s2c")
    replies = {r["subject"]: r for r in into if r["op"] in ("MSG", "HMSG")}
    # js.publish: PUB/HPUB orders.new with a reply inbox, each answered by a PubAck
    pubs = [r for r in out if r["subject"] == "orders.new"]
    assert [r["op"] for r in pubs] == ["HPUB", "PUB", "PUB"]
    assert _headers(pubs[0]) == {"Nats-Msg-Id": ["ord-0-0"]}
    for seq, r in enumerate(pubs, 1):
        assert json.loads(replies[r["reply_to"]]["payload"]) == {"stream": "ORDERS", "seq": seq}
    # JetStream API requests are PUBs to $JS.API.* with a reply subject
    api = [r["subject"] for r in out if (r["subject"] or "").startswith("$JS.API.")]
    assert api == [
        "$JS.API.STREAM.CREATE.ORDERS", "$JS.API.STREAM.NAMES",
        "$JS.API.CONSUMER.INFO.ORDERS.proc", "$JS.API.CONSUMER.CREATE.ORDERS.proc.orders.>",
        "$JS.API.CONSUMER.MSG.NEXT.ORDERS.proc",
    ]  # fmt: skip
    (fetch,) = [r for r in out if r["subject"] == "$JS.API.CONSUMER.MSG.NEXT.ORDERS.proc"]
    assert json.loads(fetch["payload"])["batch"] == 3
    # fetch(3): three deliveries on the pull inbox, each with a $JS.ACK reply subject ...
    delivered = [r for r in into if r["subject"] == "orders.new"]
    assert [r["payload"] for r in delivered] == [r["payload"] for r in pubs]
    (pull_sub,) = [r for r in out if r["op"] == "SUB" and r["subject"] == fetch["reply_to"]]
    assert {r["sid"] for r in delivered} == {pull_sub["sid"]}
    assert all(r["reply_to"].startswith("$JS.ACK.ORDERS.proc.") for r in delivered)
    # ... and msg.ack(): an empty PUB to each of those subjects, in order
    acks = [r for r in out if (r["subject"] or "").startswith("$JS.ACK.")]
    assert [r["subject"] for r in acks] == [r["reply_to"] for r in delivered]
    assert all(r["op"] == "PUB" and r["payload_len"] == 0 and r["reply_to"] is None for r in acks)


# ==================================================================================
# 2. DeepFlow's expected decodes
# ==================================================================================

# DeepFlow's msg_type is not a direction: it pairs INFO→CONNECT and PING→PONG as
# request/response (for its RTT) and calls every other op a "Session" message.
DEEPFLOW_MSG_TYPE = {"INFO": "Request", "PING": "Request", "CONNECT": "Response",
                     "PONG": "Response"}
# message field -> our column, compared whenever the DeepFlow variant has the field
DEEPFLOW_FIELDS = {
    "subject": "subject", "reply_to": "reply_to", "sid": "sid", "queue_group": "queue_group",
    "max_msgs": "max_msgs", "payload_size": "payload_len", "header_size": "header_len",
    "payload": "payload",
}  # fmt: skip
DEEPFLOW_INFO = {
    "server_id": "server_id", "server_name": "server_name", "version": "server_version",
    "go_version": "server_go", "host": "server_host", "port": "server_port",
    "max_payload": "max_payload", "tls_required": "tls_required",
}  # fmt: skip
DEEPFLOW_CONNECT = {
    "verbose": "verbose", "pedantic": "pedantic", "tls_required": "tls_required",
    "name": "client_name", "version": "client_version",
}  # fmt: skip


def trace_context(headers: dict[str, list[str]]) -> tuple[list[str], str | None]:
    """Trace id(s) and span id from our decoded headers, the way DeepFlow derives them:
    W3C ``traceparent`` = version-traceid-spanid-flags; SkyWalking ``sw8`` =
    sample-b64(traceid)-b64(segmentid)-spanid-... (span id = segmentid-spanid)."""
    if "traceparent" in headers:
        _, trace, span, _ = headers["traceparent"][0].split("-")
        return [trace], span
    if "sw8" in headers:
        parts = headers["sw8"][0].split("-")
        trace = base64.b64decode(parts[1]).decode()
        segment = base64.b64decode(parts[2]).decode()
        return [trace], f"{segment}-{parts[3]}"
    return [], None


def _our_sequence(d: Dissected) -> list[dict[str, Any]]:
    """Our rows of the (single) flow in capture order, with each ``nats.unknown_op``
    anomaly in its place (DeepFlow prints ``None`` for such a line)."""
    items = [((r["frame_first"], r["offset_start"]), r) for r in d.rows(NATS_TABLE)]
    items += [
        ((a["frame"], a["offset"]), {"op": None, "anomaly": a})
        for a in d.rows(ANOMALIES)
        if a["kind"] == "nats.unknown_op"
    ]
    return [r for _, r in sorted(items, key=lambda kv: kv[0])]


def _deepflow_mismatches(ours: dict, theirs: dict | None, info: dict | None) -> list[str]:
    if theirs is None:
        return [] if ours["op"] is None else [f"DeepFlow: undecodable; ours: {ours['op']}"]
    op = theirs["op"]
    if ours["op"] != op:
        return [f"op: ours {ours['op']} DeepFlow {op}"]
    bad = []

    def same(what: str, mine: Any, want: Any) -> None:
        if mine != want:
            bad.append(f"{op} {what}: ours {mine!r} DeepFlow {want!r}")

    m = theirs["message"]
    same("msg_type", DEEPFLOW_MSG_TYPE.get(op, "Session"), theirs["msg_type"])
    for key, col in DEEPFLOW_FIELDS.items():
        if key in m:
            same(key, ours[col], m[key])
    if "headers" in m:  # DeepFlow keeps one value per name, in its map's order
        headers = _headers(ours)
        same("header names", sorted(headers), sorted(m["headers"]))
        same("headers", {k: v[-1] for k, v in headers.items()}, m["headers"])
        same("repeated headers", [k for k, v in headers.items() if len(v) > 1], [])
        same("trace_ids", trace_context(headers)[0], theirs["trace_ids"])
        same("span_id", trace_context(headers)[1], theirs["span_id"])
    else:
        same("trace_ids", [], theirs["trace_ids"])
    if "header_version" in m:
        same("header_version", ours["headers_raw"].split(b"\r\n", 1)[0].decode(),
             m["header_version"])
    if "error_message" in m:  # DeepFlow keeps the quotes, our column drops them
        same("error", ours["error"], m["error_message"].strip("'"))
    if op == "INFO":
        for key, col in DEEPFLOW_INFO.items():
            same(key, ours[col], m[key])  # both null when INFO omits tls_required
    if op == "CONNECT":
        sent = json.loads(ours["json_raw"])
        for key, col in DEEPFLOW_CONNECT.items():
            mine = ours[col]
            if mine is None and key not in sent and isinstance(m[key], bool):
                # DeepFlow fills a boolean the client left out with false (the server's
                # default); our column says "not sent" (null). nats.js omits tls_required.
                mine = False
            same(key, mine, m[key])
    # req_len / resp_len: the op's length on the wire (given for INFO/CONNECT/PING/PONG)
    wire = theirs["req_len"] if theirs["req_len"] is not None else theirs["resp_len"]
    if wire is not None:
        same("wire length", ours["offset_end"] - ours["offset_start"], wire)
    # every line repeats the version / server_name of the connection's INFO
    if info is not None:
        same("server version", info["server_version"], theirs["version"])
        same("server name", info["server_name"], theirs["server_name"])
    return bad


@pytest.mark.parametrize("name", DEEPFLOW)
def test_deepflow_results_agree(shared_capture, name: str) -> None:
    """Line by line, in capture order: ops, subjects, reply subjects, sids, queue groups,
    max_msgs, payload and header sizes, payload bytes, header values, trace/span ids,
    -ERR text, INFO/CONNECT fields and wire lengths agree with DeepFlow's decode.

    Not compared (DeepFlow-only, or not a fact about the bytes): ``rtt``,
    ``captured_request_byte``/``captured_response_byte`` (per packet, not per op),
    ``endpoint`` (the subject's first token), ``is_tls``/``is_async``/``is_reversed``,
    ``attributes``, and header *order* (DeepFlow prints its own map order)."""
    d = shared_capture(f"deepflow/nats/{name}.pcap")
    theirs = read_result(CAPTURES / f"deepflow/nats/{name}.result")
    ours = _our_sequence(d)
    assert len(ours) == len(theirs), ([o["op"] for o in ours], [t and t["op"] for t in theirs])
    info = next((r for r in ours if r["op"] == "INFO"), None)
    problems = []
    for i, (o, t) in enumerate(zip(ours, theirs, strict=True)):
        problems += [f"line {i + 1}: {p}" for p in _deepflow_mismatches(o, t, info)]
    assert problems == []
    for r in d.rows(NATS_TABLE):
        assert r["payload_truncated"] in (None, False)


def test_deepflow_trace_ids_from_readme(shared_capture) -> None:
    """The trace ids named in captures/README.md, read from our `headers` column."""
    otel = shared_capture("deepflow/nats/nats-opentelemetry.pcap").rows(NATS_TABLE)
    for op in ("HPUB", "HMSG"):
        ids = [trace_context(_headers(r))[0][0] for r in otel if r["op"] == op]
        assert ids == ["11b4862a313e8a9c059cda4a49e626fa", "9aa18516c1eb1b6866ad107b1ba1ed79"]
    sky = shared_capture("deepflow/nats/nats-skywalking.pcap").rows(NATS_TABLE)
    (hpub,) = [r for r in sky if r["op"] == "HPUB"]
    assert hpub["subject"] == "hello.subject.world"
    sw8_trace = "8e2ecbb0c75b476892d69513a2dd060d.1.17059953094180001"
    assert trace_context(_headers(hpub))[0] == [sw8_trace]


def test_deepflow_err_unknown_op_and_error_text(shared_capture) -> None:
    d = shared_capture("deepflow/nats/nats-err.pcap")
    (a,) = d.rows(ANOMALIES)
    assert a["kind"] == "nats.unknown_op" and a["direction"] == "c2s"
    assert a["source"] == "dissector:nats" and "DEADBEEF" in a["detail"]
    assert (a["offset"], a["nbytes"]) == (172, len(b"DEADBEEF\r\n"))
    (err,) = [r for r in d.rows(NATS_TABLE) if r["op"] == "-ERR"]
    assert err["error"] == "Unknown Protocol Operation" and err["direction"] == "s2c"
    (f,) = d.rows(FLOWS)
    assert f["protocol"] == "nats"
    assert (f["decoded_bytes_c2s"], f["undecoded_bytes_c2s"]) == (172, 10)
    assert d.manifest["status"] == "degraded"
    assert d.manifest["anomalies_by_kind"] == {"nats.unknown_op": 1}


# ==================================================================================
# 3. spicy-nats: per-stream op counts and Zeek's INFO/CONNECT baseline
# ==================================================================================


def _storage_stream(pub: int, hpub: int) -> dict[str, dict[str, int]]:
    return {
        "c2s": {"CONNECT": 1, "PING": 1, "SUB": 1, "PUB": pub, "HPUB": hpub},
        "s2c": {"INFO": 1, "PONG": 1, "MSG": pub, "HMSG": hpub},
    }


# expected.json notes: "stream 0 is IPv6, stream 1 IPv4; each stream alone has CONNECT,
# INFO, PING, PONG, SUB 1, PUB 5, HPUB 2, MSG 5, HMSG 2" (nats-storage) and "Stream 0
# (IPv6 ::1): PUB 5, HPUB 3, MSG 5, HMSG 3; stream 1 (IPv4 127.0.0.1): PUB 5, HPUB 2,
# MSG 5, HMSG 2; each stream has CONNECT, INFO, PING, PONG, SUB 1" (nats-storage-err)
SPICY_STORAGE = {
    "nats-storage": {"ipv6": _storage_stream(5, 2), "ipv4": _storage_stream(5, 2)},
    "nats-storage-err": {"ipv6": _storage_stream(5, 3), "ipv4": _storage_stream(5, 2)},
}


@pytest.mark.parametrize("name", sorted(SPICY_STORAGE))
def test_spicy_storage_per_stream_counts(shared_capture, name: str) -> None:
    d = shared_capture(f"spicy-nats/{name}.pcap")
    flows = d.rows(FLOWS)
    assert sorted(":" in f["client_ip"] for f in flows) == [False, True]
    for f in flows:
        want = SPICY_STORAGE[name]["ipv6" if ":" in f["client_ip"] else "ipv4"]
        assert f["protocol"] == "nats" and f["server_port"] == 4222
        for direction in ("c2s", "s2c"):
            assert _ops(d.nats(f["flow_id"], direction)) == want[direction], (f, direction)


def test_spicy_storage_double_space_sub_and_kv_headers(shared_capture) -> None:
    d = shared_capture("spicy-nats/nats-storage.pcap")
    subs = [r for r in d.rows(NATS_TABLE) if r["op"] == "SUB"]
    assert len(subs) == 2  # both written as "SUB _INBOX.<id>.*  1" (two spaces)
    for r in subs:
        assert r["sid"] == "1" and r["queue_group"] is None
        assert r["subject"].startswith("_INBOX.") and r["subject"].endswith(".*")
    hmsgs = [r for r in d.rows(NATS_TABLE) if r["op"] == "HMSG"]
    assert len(hmsgs) == 4
    for r in hmsgs:
        assert list(_headers(r)) == ["Nats-Stream", "Nats-Subject", "Nats-Sequence",
                                     "Nats-Time-Stamp"]
        assert _headers(r)["Nats-Stream"] == ["KV_TEST_BUCKET"]
    # KV subjects carry literal backslash text (backslash, x, 2, 2), kept as sent
    assert _headers(hmsgs[0])["Nats-Subject"] == ["$KV.TEST_BUCKET.\\x22one\\x22"]
    assert any(r["subject"] == "$KV.TEST_BUCKET.\\x22one\\x22" for r in d.rows(NATS_TABLE))


def test_spicy_simple_nats_per_stream(shared_capture) -> None:
    """README: four NATS CLI connections, three publishers and one subscriber; totals
    CONNECT 4, INFO 4, PUB 3, SUB 1, MSG 1; expected.json: "only stream 2 (client port
    60462) subscribes; it receives the single MSG and also answers one server PING"."""
    d = shared_capture("spicy-nats/simple-nats.pcap")
    flows = {f["client_port"]: f for f in d.rows(FLOWS)}
    assert sorted(flows) == [60459, 60460, 60462, 60463]
    for port, f in flows.items():
        c2s = _ops(d.nats(f["flow_id"], "c2s"))
        s2c = _ops(d.nats(f["flow_id"], "s2c"))
        assert c2s["CONNECT"] == 1 and s2c["INFO"] == 1
        subscriber = port == 60462
        assert c2s.get("SUB", 0) == s2c.get("MSG", 0) == int(subscriber), port
        assert c2s.get("PONG", 0) == s2c.get("PING", 0) == int(subscriber), port
        assert c2s.get("PUB", 0) == int(not subscriber), port
    (msg,) = [r for r in d.rows(NATS_TABLE) if r["op"] == "MSG"]
    (sub,) = [r for r in d.rows(NATS_TABLE) if r["op"] == "SUB"]
    assert msg["sid"] == sub["sid"]


# Zeek field name -> our column
ZEEK_INFO = {
    "server_id": "server_id", "server_name": "server_name", "version": "server_version",
    "go": "server_go", "host": "server_host", "port": "server_port",
    "max_payload": "max_payload", "headers": "info_headers", "proto": "proto",
    "jetstream": "jetstream", "client_id": "client_id", "client_ip": "client_ip",
}  # fmt: skip
ZEEK_CONNECT = {
    "name": "client_name", "lang": "client_lang", "version": "client_version",
    "verbose": "verbose", "pedantic": "pedantic", "tls_required": "tls_required",
    "echo": "echo", "protocol": "protocol", "headers": "connect_headers",
    "no_responders": "no_responders",
}  # fmt: skip


def _zeek_log(path: Path) -> list[dict[str, str]]:
    fields: list[str] = []
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#fields"):
            fields = line.split("\t")[1:]
        elif line and not line.startswith("#"):
            out.append(dict(zip(fields, line.split("\t"), strict=True)))
    return out


def test_spicy_info_connect_match_zeek_log(shared_capture) -> None:
    d = shared_capture("spicy-nats/simple-nats.pcap")
    log = _zeek_log(CAPTURES / "spicy-nats/nats.log")
    assert len(log) == 8
    for entry in log:
        f = d.flow_by_client_port(int(entry["id.orig_p"]))
        assert (f["client_ip"], f["server_ip"]) == (entry["id.orig_h"], entry["id.resp_h"])
        assert f["server_port"] == int(entry["id.resp_p"])
        op = entry["message"]
        (row,) = [r for r in d.rows(NATS_TABLE) if r["flow_id"] == f["flow_id"] and r["op"] == op]
        assert row["direction"] == ("s2c" if op == "INFO" else "c2s")
        zeek = json.loads(entry["payload"])
        assert json.loads(row["json_raw"]) == zeek
        for key, col in (ZEEK_INFO if op == "INFO" else ZEEK_CONNECT).items():
            assert row[col] == zeek[key], (op, key)


# ==================================================================================
# 4. every shared capture
# ==================================================================================


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_capture_dissects_and_accounts_for_every_byte(shared_capture, key: str) -> None:
    d = shared_capture(key)  # strict: a dissector exception would fail here
    m = d.manifest
    (entry,) = m["inputs"]
    assert entry["error"] is None and m["status"] in ("clean", "degraded")
    # manifest row counts = Parquet row counts (from the files' own metadata)
    for spec in TABLES:
        files = list((d.out / spec.name).glob("capture=*/*.parquet"))
        assert len(files) == 1, spec.name
        assert pq.read_metadata(files[0]).num_rows == m["rows"][spec.name], spec.name
        assert len(d.rows(spec)) == m["rows"][spec.name]
    # anomalies: manifest tallies = rows; status follows them; damage is reported
    kinds = Counter(a["kind"] for a in d.rows(ANOMALIES))
    assert kinds == Counter(m["anomalies_by_kind"])
    assert m["status"] == ("degraded" if kinds else "clean")
    assert ("capture.damaged" in kinds) == bool(EXPECTED[key].get("damaged")), kinds
    assert bool(entry["input"]["damage"]) == bool(EXPECTED[key].get("damaged"))
    # byte accounting per flow direction (DESIGN §7)
    for f in d.rows(FLOWS):
        for dr in ("c2s", "s2c"):
            decoded, undecoded = f[f"decoded_bytes_{dr}"], f[f"undecoded_bytes_{dr}"]
            gap, captured = f[f"gap_bytes_{dr}"], f[f"stream_bytes_{dr}"]
            assert min(decoded, undecoded, gap, captured) >= 0
            length = captured + gap  # stream_bytes counts captured bytes, gaps apart
            assert decoded + undecoded + gap == length, (f["flow_id"], dr)
            if f["protocol"] is None:
                assert decoded == 0
    # NATS rows only where the capture has NATS (no false positives elsewhere)
    assert (m["rows"]["nats"] > 0) == ("nats_ops" in EXPECTED[key])


@pytest.mark.parametrize("key", NATS_KEYS)
def test_nats_capture_op_counts_per_direction(shared_capture, key: str) -> None:
    """expected.json ``nats_ops`` per direction (UNKNOWN = lines that are no NATS op)."""
    d = shared_capture(key)
    want = EXPECTED[key]["nats_ops"]
    unknown = Counter(a["direction"] for a in d.rows(ANOMALIES) if a["kind"] == "nats.unknown_op")
    for direction in ("c2s", "s2c"):
        got = _ops([r for r in d.rows(NATS_TABLE) if r["direction"] == direction])
        if unknown[direction]:
            got["UNKNOWN"] = unknown[direction]
        assert got == want[direction], direction
    flows = d.rows(FLOWS)
    assert len(flows) == EXPECTED[key]["tcp_streams"]
    assert all(f["protocol"] == "nats" for f in flows)


# ==================================================================================
# 5. determinism
# ==================================================================================

_RUN_TIMES = ("created", "updated", "processed")


def _without_times(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _without_times(v) for k, v in obj.items() if k not in _RUN_TIMES}
    if isinstance(obj, list):
        return [_without_times(v) for v in obj]
    return obj


def test_same_input_same_options_identical_dataset(basic: Dissected, tmp_path) -> None:
    again = Dissected(BASIC, tmp_path / "again", _options(payload_cap=PAYLOAD_CAP))
    for spec in TABLES:
        (a,) = (basic.out / spec.name).glob("capture=*/*.parquet")
        (b,) = (again.out / spec.name).glob("capture=*/*.parquet")
        ta, tb = pq.read_table(a), pq.read_table(b)
        assert ta.schema.equals(tb.schema, check_metadata=True), spec.name
        assert ta.equals(tb), spec.name  # same rows in the same order
        assert a.read_bytes() == b.read_bytes(), spec.name  # and byte-identical files
    assert _without_times(basic.manifest) == _without_times(again.manifest)


# ==================================================================================
# 6. read back: pyarrow.dataset (Hive partitioning) and Spark local mode
# ==================================================================================


@pytest.mark.parametrize("spec", TABLES, ids=lambda s: s.name)
def test_pyarrow_dataset_reads_declared_schema(basic: Dissected, spec: TableSpec) -> None:
    declared = arrow_schema(spec)
    # as is: a plain Hive-partitioned dataset, nothing of ours involved
    plain = ds.dataset(basic.out / spec.name, format="parquet", partitioning="hive")
    assert plain.schema.names == [*declared.names, "capture"]
    assert plain.schema.field("capture").type == pa.string()
    for want in declared:
        got = plain.schema.field(want.name)
        # Parquet names list items "element" (Arrow: "item"); DataType equality ignores it
        assert got.type == want.type, want.name
        assert got.nullable == want.nullable, want.name
        assert got.metadata[DESCRIPTION_KEY] == want.metadata[DESCRIPTION_KEY], want.name
    meta = plain.schema.metadata
    assert meta[META_TABLE] == spec.name.encode()
    assert meta[META_VERSION] == str(spec.version).encode()
    rows = basic.manifest["rows"][spec.name]
    assert plain.count_rows() == rows
    # with our helper (declared schema + string partition column)
    table = open_dataset(basic.out, spec).to_table()
    assert table.num_rows == rows
    assert table.schema.remove(table.schema.get_field_index("capture")).equals(
        declared, check_metadata=False
    )
    assert set(table.column("capture").to_pylist()) <= {basic.result.capture_id}
    # pandas reads the table directory as is
    pd = pytest.importorskip("pandas")
    assert len(pd.read_parquet(basic.out / spec.name)) == rows


def _arrow_rows_for_spark(out: Path, spec: TableSpec) -> list[dict[str, Any]]:
    """Our rows as Spark should show them: timestamps as epoch microseconds (Spark's
    precision, rounded down), maps as dicts."""
    table = open_dataset(out, spec).to_table()
    rows = table.to_pylist()
    for f in spec.columns:
        if pa.types.is_timestamp(f.type):  # stored in microseconds: compare as integers
            us = table.column(f.name).cast(pa.int64()).to_pylist()
            ns = table.column(f.name + "_ns").to_pylist()
            for r, v, exact in zip(rows, us, ns, strict=True):
                assert v == (None if exact is None else exact // 1000), f.name
                r[f.name] = v
        elif pa.types.is_map(f.type):
            for r in rows:
                r[f.name] = None if r[f.name] is None else dict(r[f.name])
    return rows


def _spark_rows(df, spec: TableSpec) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    ts = {f.name for f in spec.columns if pa.types.is_timestamp(f.type)}
    cols = [F.unix_micros(F.col(c)).alias(c) if c in ts else F.col(f"`{c}`") for c in df.columns]
    out = []
    for row in df.select(*cols).collect():
        r = row.asDict()
        out.append({k: bytes(v) if isinstance(v, bytearray) else v for k, v in r.items()})
    return out


@pytest.mark.spark
def test_spark_reads_declared_schema_and_every_value(spark, basic: Dissected) -> None:
    """Spark (local mode, the shared session) reads each table with the declared schema
    and exactly our values: one collect per table, compared row by row and column by
    column with what pyarrow reads (timestamps at Spark's microsecond precision)."""
    from analyzer.sink import read_spark_table
    from tests.analyzer.test_spark_read import _expected_schema

    for spec in TABLES:
        df = read_spark_table(spark, basic.out, spec)
        assert df.schema == _expected_schema(spec), spec.name
        key = "flow_id" if spec is FLOWS else "record_id"
        got = sorted(_spark_rows(df, spec), key=lambda r: r[key])
        want = sorted(_arrow_rows_for_spark(basic.out, spec), key=lambda r: r[key])
        assert len(got) == basic.manifest["rows"][spec.name], spec.name
        assert got == want, spec.name
        if spec is NATS_TABLE:  # a value Spark had to map: repeated header, values in order
            (hmsg,) = [r for r in got if r["op"] == "HMSG" and r["payload_len"] == 19]
            assert hmsg["headers"] == {"X-Multi": ["first", "second"], "X-Single": ["one"]}


# ==================================================================================
# 7. the msgcap command line
# ==================================================================================


def _msgcap(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MSGCAP), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=REPO
    )


def test_cli_dissect_clean_capture(tmp_path) -> None:
    out = tmp_path / "out"
    res = _msgcap("dissect", BASIC, "-o", out)
    assert res.returncode == 0, res.stderr
    summary = " ".join(res.stderr.split())  # rich writes the summary to stderr
    for text in ("rows per table", "nats │ 205", "flows │ 6", "anomalies │ 0",
                 "flows by protocol", "1 capture(s), 244 packets", "status clean"):
        assert text in summary, text
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "clean"
    assert m["rows"] | {"anomalies": 0, "flows": 6, "nats": 205} == m["rows"]
    assert m["rows"]["jetstream_api"] == 9  # the JetStream connection's $JS.API calls
    assert sum(m["rows"].values()) == 220  # other protocols' tables exist, empty
    assert m["options"]["payload_cap"] == 4096  # the CLI default


def test_cli_dissect_damaged_capture_is_degraded(tmp_path) -> None:
    out = tmp_path / "out"
    res = _msgcap("dissect", CAPTURES / "suricata-verify/bug-6875-01/fuzz.pcap", "-o", out)
    assert res.returncode == 1, res.stderr
    assert "capture.damaged" in res.stderr and "degraded" in res.stderr
    rows = open_dataset(out, ANOMALIES).to_table().to_pylist()
    damaged = [a for a in rows if a["kind"] == "capture.damaged"]
    assert len(damaged) == 1
    assert damaged[0]["source"] == "capture" and damaged[0]["flow_id"] is None
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "degraded" and m["exit_code"] == 1
    assert m["inputs"][0]["input"]["damage"]


def test_cli_schema_lists_the_columns() -> None:
    res = _msgcap("schema", "nats")
    assert res.returncode == 0, res.stderr
    listed = {line.split("│")[1].strip() for line in res.stdout.splitlines()
              if line.startswith("│") and line.split("│")[1].strip()}
    assert set(NATS_TABLE.column_names) <= listed
    res = _msgcap("schema", "nosuch")
    assert res.returncode == 2 and "nosuch" in res.stderr


def test_cli_protocols_lists_nats() -> None:
    res = _msgcap("protocols")
    assert res.returncode == 0, res.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines()
            if line.startswith("│")]
    (nats,) = [r for r in rows if r[0] == "nats"]
    assert nats[1:4] == ["tcp", "4222", "nats"]


def test_cli_decode_as_unknown_dissector_fails_clearly(tmp_path) -> None:
    out = tmp_path / "out"
    res = _msgcap("dissect", BASIC, "-o", out, "--decode-as", "4222=nosuch")
    assert res.returncode == 2
    assert "no dissector named 'nosuch'" in res.stderr and "nats" in res.stderr
    assert not out.exists()  # nothing written
    res = _msgcap("dissect", BASIC, "-o", out, "--decode-as", "nats")
    assert res.returncode == 2 and "PORT=NAME" in res.stderr


def _mid_payload_capture(path: Path) -> bytes:
    """A TCP connection to port 9999 joined mid-stream: no SYN, and the first captured
    client bytes are the tail of a PUB payload (``orld\\r\\n``) before real ops."""
    c, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    c2s = b"orld\r\nPUB demo 5\r\nhello\r\nPING\r\n"
    w = PcapWriter(path)
    t = 1_700_000_000_000_000
    w.write(t, tcp_frame(c, s, 40000, 9999, 5000, 7000, ACK | PSH, c2s))
    w.write(t + 10, tcp_frame(s, c, 9999, 40000, 7000, 5000 + len(c2s), ACK | PSH, b"PONG\r\n"))
    w.close()
    return c2s


def test_cli_decode_as_forces_nats_where_the_probe_says_no(tmp_path) -> None:
    pcap = tmp_path / "mid.pcap"
    c2s = _mid_payload_capture(pcap)

    res = _msgcap("dissect", pcap, "-o", tmp_path / "probed")
    assert res.returncode == 1, res.stderr  # degraded: the partial line is an anomaly
    (flow,) = open_dataset(tmp_path / "probed", FLOWS).to_table().to_pylist()
    # "orld" is no NATS op, so the probe says no at the first byte; but the direction
    # was joined mid-stream and resynchronises on the PUB (issue 23: joining late)
    assert flow["protocol"] == "nats"
    assert flow["mid_stream_c2s"] is True and flow["server_port"] == 9999
    assert (flow["decoded_bytes_c2s"], flow["undecoded_bytes_c2s"]) == (len(c2s) - 6, 6)

    out = tmp_path / "forced"
    res = _msgcap("dissect", pcap, "-o", out, "--decode-as", "9999=nats")
    assert res.returncode == 1, res.stderr  # degraded: the partial line is an anomaly
    (flow,) = open_dataset(out, FLOWS).to_table().to_pylist()
    assert flow["protocol"] == "nats"
    assert (flow["decoded_bytes_c2s"], flow["undecoded_bytes_c2s"]) == (len(c2s) - 6, 6)
    assert (flow["decoded_bytes_s2c"], flow["undecoded_bytes_s2c"]) == (6, 0)
    rows = sorted(open_dataset(out, NATS_TABLE).to_table().to_pylist(),
                  key=lambda r: (r["direction"], r["offset_start"]))
    got = [(r["direction"], r["op"], r["subject"], r["payload"], r["offset_start"],
            r["offset_end"]) for r in rows]
    assert got == [
        ("c2s", "PUB", "demo", b"hello", 6, 25),
        ("c2s", "PING", None, None, 25, 31),
        ("s2c", "PONG", None, None, 0, 6),
    ]
    (a,) = open_dataset(out, ANOMALIES).to_table().to_pylist()
    assert (a["kind"], a["direction"], a["offset"], a["nbytes"]) == ("nats.unknown_op", "c2s", 0, 6)
    m = json.loads((out / "manifest.json").read_text())
    assert m["options"]["decode_as"] == {"9999": "nats"}


def test_cli_rejects_negative_payload_cap(tmp_path) -> None:
    """Bad arguments are exit 2 ("failed", cli.py docstring) with a message, before any
    work.  BUG (analyzer/cli.py, ``--payload-cap`` is a plain ``type=int``): -1 is
    accepted, every NATS flow's ``NatsSession`` raises ValueError, and the run ends
    "degraded" (exit 1) with one ``pipeline.dissector_error`` anomaly per flow."""
    out = tmp_path / "out"
    res = _msgcap("dissect", BASIC, "-o", out, "--payload-cap", "-1")
    assert res.returncode == 2, res.stderr
    assert "payload-cap" in res.stderr
    assert not (out / "manifest.json").exists()


# ==================================================================================
# the pipeline's contract for a dissector that raises (found while writing the above)
# ==================================================================================


class _NoSession(NatsDissector):
    """NATS probe, but ``session()`` raises: a plugin bug, or a bad option."""

    name = "nosession"

    @classmethod
    def session(cls, options: dict[str, Any]):
        raise RuntimeError("session() is broken")


def _broken_registry() -> Registry:
    registry = Registry()
    registry.add(_NoSession, "tests")
    return registry


def _assert_one_error_per_flow(d: Dissected) -> None:
    assert d.manifest["inputs"][0]["error"] is None
    assert d.manifest["status"] == "degraded"
    assert len(d.rows(FLOWS)) == len(TRUTH)
    errors = [a for a in d.rows(ANOMALIES) if a["kind"] == "pipeline.dissector_error"]
    assert sorted(a["flow_id"] for a in errors) == sorted(f["flow_id"] for f in d.rows(FLOWS))
    assert all("nosession raised RuntimeError" in a["detail"] for a in errors)
    for f in d.rows(FLOWS):  # the flow's bytes are still all accounted for
        for dr in ("c2s", "s2c"):
            assert f[f"decoded_bytes_{dr}"] == 0
            assert f[f"undecoded_bytes_{dr}"] == f[f"stream_bytes_{dr}"] > 0


def test_dissector_error_in_session_creation_is_one_anomaly_per_flow(tmp_path) -> None:
    """pipeline.py: a dissector that raises costs its flow one ``pipeline.dissector_error``
    and the flow is not fed again.  Was (fixed in ``CaptureDissection._abandon``): when
    ``session()`` itself raised, the flow kept probing, relocked and raised on every
    later segment: 147 anomalies for the 6 flows of nats-basic."""
    d = Dissected(BASIC, tmp_path / "out", Options(validate=True), _broken_registry())
    _assert_one_error_per_flow(d)


def test_forced_dissector_error_in_session_creation_does_not_fail_the_run(tmp_path) -> None:
    """The same contract with ``--decode-as``.  BUG (analyzer/detect.py
    ``Detector.start`` creates a forced flow's session, called from
    ``CaptureDissection._dispatch`` outside ``_guarded``): the exception escapes the
    event loop and the whole capture ends "failed" after its first packets, with
    empty tables."""
    options = Options(validate=True, decode_as={41005: "nosession"})
    d = Dissected(BASIC, tmp_path / "out", options, _broken_registry())
    _assert_one_error_per_flow(d)


def test_decode_as_applies_to_its_transport_only(tmp_path) -> None:
    """``--decode-as 53=nats`` must not claim UDP flows on port 53 (NATS is TCP).  Was
    (fixed in ``Detector.start``): the UDP flows were labelled ``nats`` with a session
    that never saw a byte, so decoded + undecoded = 0 != stream bytes in ``flows``."""
    pcap = CAPTURES / "zeek/ipv6-fragmented-dns.pcap"
    d = Dissected(pcap, tmp_path / "out", _options(decode_as={53: "nats"}))
    flows = d.rows(FLOWS)
    assert flows and {(f["transport"], f["server_port"]) for f in flows} == {("udp", 53)}
    for f in flows:
        assert f["protocol"] is None
        for dr in ("c2s", "s2c"):
            assert f[f"decoded_bytes_{dr}"] == 0
            assert f[f"undecoded_bytes_{dr}"] == f[f"stream_bytes_{dr}"]
    assert d.rows(NATS_TABLE) == []
