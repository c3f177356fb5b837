"""S2-compressed route and leaf links from real nats-server recordings
(samples/nats-s2-{fast,better,best}.pcap, samples/record_nats_s2.py): every message the
client-side truth says crossed a link is found on that link with crc_status ok; a
corrupted chunk of the real stream is an anomaly and decoding goes on with the next."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dissectors.nats.cluster import NatsClusterDissector
from dissectors.nats.s2 import STREAM_IDENTIFIER
from dissectors.sdk.testing import assert_never_raises, run_session
from reassembly.events import StreamData
from reassembly.limits import MemoryBudget
from tests.tls.helpers import Dissected, assert_accounting, events

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
MODES = ("fast", "better", "best")
MSG_OPS = ("RMSG", "LMSG", "HMSG")


def truth(mode: str) -> dict:
    return json.loads((SAMPLES / f"nats-s2-{mode}.truth.json").read_text())


@pytest.fixture(scope="module", params=MODES)
def recording(request, tmp_path_factory) -> tuple[dict, Dissected]:
    mode = request.param
    out = tmp_path_factory.mktemp(mode) / "out"
    return truth(mode), Dissected(SAMPLES / f"nats-s2-{mode}.pcap", out)


def test_recordings_negotiated_compression(recording):
    t, d = recording
    assert t["problems"] == []
    infos = [r for r in d.rows("nats_cluster") if r["op"] == "INFO" and r["compression"] is None]
    # each side's INFO in clear names the mode it was configured with
    assert infos and all(json.loads(r["json_raw"])["compression"] == t["compression"]
                         for r in infos)


def test_every_crossing_is_found_on_its_link_with_crc_ok(recording):
    t, d = recording
    assert d.rows("anomalies") == []
    assert_accounting(d)
    hops = d.rows("nats_cluster")
    after_info = [r for r in hops if r["op"] not in ("INFO", "CONNECT")
                  or r["compression"] is not None]
    # everything after the INFO exchange came out of the S2 streams
    assert {(r["compression"], r["crc_status"]) for r in after_info
            if not (r["op"] == "CONNECT" and r["link"] == "route")} == {("s2", "ok")}
    for msg in t["published"]:
        found = sorted((r["op"], r["link"], r["subject"], r["reply_to"], r["payload_len"])
                       for r in hops if r["payload_sha256"] == msg["sha256"])
        op = "HMSG" if msg["headers"] else None
        assert found == sorted([(op or "LMSG", "leaf", msg["subject"], msg["reply"], msg["len"]),
                                (op or "RMSG", "route", msg["subject"], msg["reply"],
                                 msg["len"])]), msg
        assert all(r["crc_status"] == "ok" for r in hops if r["payload_sha256"] == msg["sha256"])
    for req in t["requests"]:
        there = [(r["op"], r["link"], r["origin"], r["payload_len"]) for r in hops
                 if r["payload_sha256"] == req["request_sha256"]]
        assert there == [("LMSG", "leaf", None, req["len"]), ("LMSG", "route", "L", req["len"])]
        back = [(r["op"], r["link"], r["subject"]) for r in hops
                if r["payload_sha256"] == req["reply_sha256"]]
        assert back == [("RMSG", "route", req["reply_subject"]),
                        ("LMSG", "leaf", req["reply_subject"])]
    received = {m["sha256"] for m in t["received"]["sub-b"]} | {
        m["sha256"] for m in t["received"]["sub-l"]}
    assert received == {m["sha256"] for m in t["published"]}


def test_rows_carry_the_wire_offsets_of_their_chunks(recording):
    _, d = recording
    flows = {f["flow_id"]: f for f in d.rows("flows")}
    for r in d.rows("nats_cluster"):
        if r["compression"] == "s2" and r["op"] in ("RMSG", "LMSG", "HMSG"):
            f = flows[r["flow_id"]]
            size = f["stream_bytes_c2s" if r["direction"] == "c2s" else "stream_bytes_s2c"]
            # a row spans whole chunks: at least its payload in compressed form, within
            # the stream, and never past the end
            assert 0 < r["offset_start"] < r["offset_end"] <= size


# -- a corrupted chunk in a real stream --------------------------------------------------


def _flow_scripts(mode: str = "fast") -> list[list]:
    """The (direction, bytes) script of every connection of a recording."""
    by_flow: dict[int, list] = {}
    for ev in events(SAMPLES / f"nats-s2-{mode}.pcap"):
        if isinstance(ev, StreamData):
            by_flow.setdefault(ev.flow.flow_id, []).append((ev.direction, ev.data))
    return list(by_flow.values())


def _messages_chunk(script, d_want=None):
    from dissectors.nats.s2 import decode_chunk_body
    for d in (0, 1):
        stream = b"".join(b for dd, b in script if dd == d)
        i = stream.find(STREAM_IDENTIFIER)
        if i < 0:
            continue
        p = i + 10
        while p + 4 <= len(stream):
            n = int.from_bytes(stream[p + 1 : p + 4], "little")
            data, _ = decode_chunk_body(stream[p], stream[p + 4 : p + 4 + n], 1 << 22)
            if data.count(b"demo.order.") == 8:
                return d, p, n
            p += 4 + n
    return None


def _corrupt(script, d: int, offset: int, value: int) -> list:
    out, pos = [], 0
    for dd, b in script:
        if dd == d and pos <= offset < pos + len(b):
            b = b[: offset - pos] + bytes([value]) + b[offset - pos + 1 :]
        if dd == d:
            pos += len(b)
        out.append((dd, b))
    return out


@pytest.fixture(scope="module")
def link():
    """A compressed server link of the s2_fast recording (the first in capture order that
    carried the 8 published messages in one chunk: the leaf A->L), with the direction,
    wire offset and body length of that chunk."""
    for script in _flow_scripts():
        found = _messages_chunk(script)
        if found:
            return (script, *found)
    raise AssertionError("no compressed chunk holding the 8 messages")


def _ops(records):
    rows = [r for r in records if r.table == "nats_cluster"]
    anomalies = [(r.values["kind"], r.values["detail"], r.offset_start, r.offset_end)
                 for r in records if r.table == "anomalies"]
    return rows, anomalies


def test_real_link_stream_split_anyhow_gives_the_same_rows(link):
    script, d, p, n = link
    whole = run_session(NatsClusterDissector, script)
    rows, anomalies = _ops(whole.records)
    assert anomalies == []
    msgs = [r.values for r in rows if r.direction == d and r.values["op"] in MSG_OPS]
    assert sorted(m["subject"] for m in msgs)[2:] == [f"demo.order.{i}" for i in range(8)]
    assert [m["subject"][:7] for m in msgs[8:]] == ["_INBOX."] * 2  # the 2 replies
    bytewise = run_session(NatsClusterDissector, script, split="bytes")
    assert [(r.table, r.offset_start, r.offset_end, r.values) for r in bytewise.records] == [
        (r.table, r.offset_start, r.offset_end, r.values) for r in whole.records]
    # the 8 messages came from the one chunk at p: their rows span exactly its wire bytes
    for r in rows:
        if r.direction == d and r.values.get("subject", "").startswith("demo.order."):
            assert (r.offset_start, r.offset_end) == (p, p + 4 + n)


def test_a_chunk_failing_its_crc_is_an_anomaly_and_its_rows_say_mismatch(link):
    script, d, p, n = link
    stream = b"".join(b for dd, b in script if dd == d)
    bad = _corrupt(script, d, p + 4, stream[p + 4] ^ 0xFF)  # a byte of the stored CRC
    rows, anomalies = _ops(run_session(NatsClusterDissector, bad).records)
    assert [(k, s, e) for k, _, s, e in anomalies] == [("nats_cluster.s2_crc", p, p + 4 + n)]
    crc = Counter((r.values["op"], r.values["crc_status"]) for r in rows if r.direction == d
                  and r.values["op"] in MSG_OPS)
    # the 8 messages of that chunk; the 2 replies came in later chunks
    assert crc == Counter({("LMSG", "mismatch"): 7, ("HMSG", "mismatch"): 1, ("LMSG", "ok"): 2})


def test_a_corrupt_chunk_header_resyncs_on_the_next_chunk(link):
    script, d, p, n = link
    good_rows, _ = _ops(run_session(NatsClusterDissector, script).records)
    bad = _corrupt(script, d, p, 0x05)  # reserved unskippable chunk type
    for split in ("whole", "bytes"):
        rows, anomalies = _ops(run_session(NatsClusterDissector, bad, split=split).records)
        assert anomalies[0][0] == "nats_cluster.s2_corrupt"
        assert anomalies[0][1].startswith(
            "S2 stream: reserved unskippable chunk type 0x05; skipped ")
        assert anomalies[0][2:] == (p, p + 4 + n)  # exactly that chunk was skipped
        # the 8 messages were in it; every row of other chunks is still there
        lost = [r.values for r in good_rows if r.direction == d
                and (r.offset_start, r.offset_end) == (p, p + 4 + n)]
        assert sorted(v["subject"] for v in lost if v["op"] in MSG_OPS) == [
            f"demo.order.{i}" for i in range(8)]
        kept = [(r.direction, r.offset_start, r.values["op"], r.values.get("subject"))
                for r in good_rows if (r.offset_start, r.offset_end) != (p, p + 4 + n)
                or r.direction != d]
        got = [(r.direction, r.offset_start, r.values["op"], r.values.get("subject"))
               for r in rows]
        assert [x for x in got if x in kept] == kept
        assert all(r.values.get("crc_status") in (None, "ok") for r in rows)


def test_the_s2_buffer_draws_from_the_memory_budget(link):
    script, d, p, n = link
    budget = MemoryBudget(1 << 20)
    run = run_session(NatsClusterDissector, script, options={"memory_budget": budget},
                      split="bytes")
    assert budget.peak >= n  # the big chunk was held whole before it was decoded
    assert budget.used == 0  # and given back at close
    small = MemoryBudget(1024)
    rows, anomalies = _ops(run_session(NatsClusterDissector, script, split="bytes",
                                       options={"memory_budget": small}).records)
    kinds = Counter(k for k, *_ in anomalies)
    assert kinds["limit.memory"] >= 1 and small.peak <= 1025
    assert set(kinds) == {"limit.memory"}
    assert not any(r.values.get("subject", "").startswith("demo.order") for r in rows
                   if r.direction == d)
    assert len(run.records) > len(rows)


def test_mutated_compressed_links_never_raise():
    from tests.nats_s2.s2_encoder import data_chunk, stream

    info = b'INFO {"server_id":"NA","compression":"s2_fast","info_on_connect":true}\r\n'
    one = b"LMSG demo.1 5\r\nhello\r\n"
    wire = stream(data_chunk(b"LS+ svc.echo\r\n"),
                  data_chunk(one * 3, [("lit", one), ("copy", len(one), len(one)),
                                       ("rep", len(one))]))
    assert_never_raises(NatsClusterDissector, [[(1, info), (1, wire), (0, b"PING\r\n")]],
                        rounds=150)
