"""Regression tests for the bugs the fuzzers and the hostile suite found (issue 9), each
named after its bug.  Inputs that crashed a fuzz target live in tests/fuzz/corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.pipeline import Options, dissect_capture
from dissectors.api import Direction, Span
from dissectors.framing import (
    NEED_MORE,
    Invalid,
    LengthPrefixedFramer,
    LineFramer,
    TrailerStatus,
)
from reassembly.engine import capture_events
from reassembly.events import Anomaly, QuicPacket
from reassembly.quic.keylog import KeyLog
from samples.hostile.generate import CLIENT, SERVER, quic_initial_datagram, udp_frame
from tests.conftest import SHARED
from tests.reassembly.synth import PcapWriter

CAPTURES = SHARED / "captures"


def _drain(framer):
    out = []
    while (ev := framer.next_event()) is not NEED_MORE:
        out.append(ev)
    return out


def _blocks(data: bytes, cut: int | None) -> list:
    """``B <n>`` lines announce n bytes then CRLF (the NATS pattern); the blocks seen."""
    framer = LineFramer()
    pieces = [data] if cut is None else [data[:cut], data[cut:]]
    out, off = [], 0
    for p in pieces:
        framer.feed(p, Span(off, 1, 1, 1, 1))
        off += len(p)
        while (ev := framer.next_event()) is not NEED_MORE:
            if hasattr(ev, "trailer"):
                out.append(ev)
                if ev.trailer is TrailerStatus.BAD:
                    framer.start_resync()
            elif ev.data.startswith(b"B "):
                framer.read_exact(int(ev.data[2:]), trailer=b"\r\n", lenient_trailers=(b"\n",))
    return out


def test_regression_bad_trailer_found_depends_on_how_the_stream_is_cut():
    """``Block.trailer_found`` held whatever was buffered when a bad trailer was decided
    (``!`` or ``!\\r``), so NATS's ``nats.bad_trailer`` detail changed with the TCP
    segmentation (found by the nats target: split invariance)."""
    data = b"B 2\r\nab!\rnext\r\n"
    whole = _blocks(data, None)
    for cut in range(6, len(data)):
        cut_run = _blocks(data, cut)
        assert [(b.trailer, b.trailer_found) for b in cut_run] == \
            [(b.trailer, b.trailer_found) for b in whole], cut
    assert whole[0].trailer is TrailerStatus.BAD and whole[0].trailer_found == b"!\r"


def _invalid_heads(data: bytes, cut: int | None) -> list[bytes]:
    def pdu_length(view):  # 8-byte header "LEN:" + u32; decided on the first 4 bytes
        if len(view) < 4:
            return None
        return 0 if bytes(view[:4]) != b"LEN:" else (None if len(view) < 8 else
                                                     8 + int.from_bytes(view[4:8], "big"))

    framer = LengthPrefixedFramer(pdu_length, max_pdu_bytes=1024)
    pieces = [data] if cut is None else [data[:cut], data[cut:]]
    off, heads = 0, []
    for p in pieces:
        framer.feed(p, Span(off, 1, 1, 1, 1))
        off += len(p)
        heads += [ev.head for ev in _drain(framer) if type(ev) is Invalid]
    return heads


def test_regression_invalid_head_depends_on_how_the_stream_is_cut():
    """``Invalid.head`` was the next 64 buffered bytes, so Pulsar's ``pulsar.bad_header``
    and Felix's ``felix.bad_magic`` details changed with the segmentation (found by the
    pulsar and felix targets).  Now it is the prefix ``pdu_length`` decided on."""
    data = b"XXXX" + b"garbage that follows the bad header" * 2
    whole = _invalid_heads(data, None)
    assert whole == [b"XXXX"]
    for cut in range(1, len(data)):
        assert _invalid_heads(data, cut) == whole, cut


def test_regression_quic_trailing_garbage_reported_as_an_encrypted_1rtt_packet(tmp_path):
    """Bytes after the last coalesced packet of a datagram became a "1-RTT packet" with a
    made-up DCID, stayed "encrypted" for lack of keys and made the connection report
    missing TLS secrets.  RFC 9000 §12.2: coalesced packets share the first packet's
    DCID; anything else is junk, now ``quic.bad_packet``."""
    initial = quic_initial_datagram()
    garbage = bytes((i * 37 + 11) % 256 for i in range(600))
    path = tmp_path / "q.pcap"
    w = PcapWriter(path)
    w.write(1_700_000_000_000_000, udp_frame(CLIENT, SERVER, 50000, 443, initial + garbage))
    w.close()
    from reassembly.engine import read_events

    events = list(read_events(path))
    packets = [e for e in events if isinstance(e, QuicPacket)]
    assert [p.packet_type for p in packets] == ["initial"]
    kinds = [a.kind for a in events if isinstance(a, Anomaly)]
    assert kinds == ["quic.bad_packet"]


def test_regression_capture_with_only_missing_data_said_clean(tmp_path):
    """A capture whose only problem is missing TCP data (a gap no dissector noticed)
    produced no anomaly row, so the run was "clean" and exited 0 while bytes were lost.
    Now every gap is a ``tcp.gap`` (``quic.stream_gap``) anomaly."""
    src = CAPTURES / "suricata-verify/eve-payload-05-tcp-data-gap/tcp-simple-gap2.pcap"
    result = dissect_capture(src, tmp_path / "out", Options())
    assert result.manifest["status"] == "degraded"
    assert result.anomalies == {"tcp.gap": 1}


def test_regression_key_log_file_lines_that_do_not_parse_were_silent(tmp_path):
    """Malformed lines of a ``--keylog`` file were dropped without a word (only pcapng
    Decryption Secrets Blocks were checked)."""
    log = tmp_path / "keys.txt"
    log.write_text("CLIENT_RANDOM nothex 00\nthis is not a key log line\n")
    from reassembly.capture import open_capture

    src = CAPTURES / "illustrated-quic/capture.pcap"
    with open_capture(src) as reader:
        events = list(capture_events(reader, None, KeyLog.from_file(log)))
    (a,) = [e for e in events if isinstance(e, Anomaly) and e.kind == "quic.keylog"]
    assert a.detail.startswith("2 key-log line(s) of the key log file do not parse")


def test_regression_malformed_key_log_line_put_its_secret_into_the_anomaly_detail():
    """``quic.keylog`` quoted the first bad line verbatim: a line with one token too many
    carried a TLS secret into the anomalies table."""
    rnd, secret = "11" * 32, "ab" * 32
    log = KeyLog()
    log.add(f"CLIENT_TRAFFIC_SECRET_0 {rnd} {secret} trailing\n")
    assert log.bad_lines == 1
    assert secret not in log.first_bad and rnd in log.first_bad
    assert log.first_bad.startswith("CLIENT_TRAFFIC_SECRET_0 ")
    log = KeyLog()
    log.add(f"{secret.upper()}\n")  # a bare secret, in upper case: not kept as a label
    assert secret.upper() not in log.first_bad


def test_regression_pulsar_oversize_frame_cut_by_the_end_hid_its_declared_size():
    """A 4 GiB frame cut by the end of the stream was reported as "oversize frame being
    skipped was cut ... after N bytes": the declared size, the evidence, was missing."""
    from dissectors.pulsar import PulsarDissector
    from tests.pulsar import wire

    s = PulsarDissector.session({})
    ping = wire.frame(wire.cmd("PING"))
    data = (0xFFFFFFFF).to_bytes(4, "big") + ping[4:] + b"\0" * 100
    recs = s.feed(Direction.C2S, data, Span(0, 1, 1, 1, 1)) + s.close(2)
    (a,) = [r for r in recs if r.table == "anomalies"]
    assert a.values["kind"] == "pulsar.eof_in_frame"
    assert "oversize frame of 4294967299 bytes" in a.values["detail"]


def test_corpus_files_are_small():
    root = Path(__file__).resolve().parent / "corpus"
    for p in root.rglob("*"):
        if p.is_file():
            assert p.stat().st_size <= 64 * 1024, p


def test_regression_nats_control_line_of_carriage_returns_raised_index_error():
    """``\\r\\r\\n`` is a control line of one CR: ``split_args`` found no token and
    ``parse_line`` raised IndexError, so the pipeline gave up on the whole connection
    (``pipeline.dissector_error``, the rest undecoded): one junk line hid everything
    after it.  Found by the nats target (random engine, seed 7); minimized input in
    tests/fuzz/corpus/nats/index-error-on-a-line-of-carriage-returns."""
    from dissectors.nats import NatsDissector

    s = NatsDissector.session({})
    data = b'INFO {"server_id":"x"}\r\n\r\r\nPING\r\n'
    recs = s.feed(Direction.S2C, data, Span(0, 1, 1, 1, 1)) + s.close(2)
    assert [r.values.get("op") for r in recs if r.table == "nats"] == ["INFO", "PING"]
    (a,) = [r for r in recs if r.table == "anomalies"]
    assert a.values["kind"] == "nats.unknown_op" and "white space only" in a.values["detail"]
    assert s.decoded_bytes[1] + s.undecoded_bytes[1] == len(data)


@pytest.mark.parametrize("status", [b"1" * 5000, b"\xb201"], ids=["5000-digits", "superscript"])
def test_regression_http_status_line_failed_the_whole_run(tmp_path, status):
    """The WebSocket layer read an HTTP status with ``int(s) if s.isdigit()``: a status of
    5,000 digits (int() refuses more than 4,300) or with a latin-1 superscript digit
    raised out of the engine, and the run *failed* (exit 2, tables cut short).  Found by
    the tls_ws target (random engine, seed 7); corpus in tests/fuzz/corpus/tls_ws."""
    from samples.hostile.generate import Conversation

    path = tmp_path / "ws.pcap"
    w = PcapWriter(path)
    conv = Conversation(w, 40000, 80).handshake()
    conv.send(0, b"GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n")
    conv.send(1, b"HTTP/1.1 " + status + b" Switching Protocols\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\n\r\n")
    conv.fin()
    w.close()
    result = dissect_capture(path, tmp_path / "out", Options())
    assert result.manifest["status"] != "failed", result.manifest["inputs"][0]["error"]
    assert result.rows["flows"] == 1
