"""Key log, frame and TLS parsers on byte literals."""

from __future__ import annotations

from reassembly.quic.buffer import Cursor, NeedMore
from reassembly.quic.frames import parse_frames, stream_kind
from reassembly.quic.keylog import KeyLog, redacted_line
from reassembly.quic.packet import HeaderError, is_plausible_first_packet, parse_long_header
from reassembly.quic.tls import (
    HandshakeReader,
    parse_client_hello,
    parse_server_hello,
)
from tests.quic import vectors as v
from tests.quic.helpers import (
    close_frame,
    crypto_frame,
    new_cid_frame,
    reset_frame,
    stream_frame,
    varint,
)

R1 = "11" * 32
R2 = "22" * 32


def test_varint_rfc9000_a1_examples():
    for raw, value in [
        ("c2197c5eff14e88c", 151_288_809_941_952_652),
        ("9d7f3e7d", 494_878_333),
        ("7bbd", 15_293),
        ("25", 37),
        ("4025", 37),
    ]:
        assert Cursor(bytes.fromhex(raw)).pull_varint() == value
    for value in (0, 63, 64, 16383, 16384, 2**30, 2**62 - 1):
        assert Cursor(varint(value)).pull_varint() == value


def test_cursor_bounds():
    buf = Cursor(b"\x00\x05abc")
    try:
        buf.pull_opaque(2)
    except NeedMore:
        pass
    else:
        raise AssertionError("a length past the end must raise NeedMore")


def test_keylog_lines_comments_and_pieces():
    log = KeyLog()
    text = (
        "# comment\n"
        f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {R1} {'aa' * 32}\n"
        f"SERVER_TRAFFIC_SECRET_0 {R1} {'bb' * 48}\r\n"
        "garbage line\n"
        f"CLIENT_TRAFFIC_SECRET_0 {R2} {'cc' * 32}"
    )
    # fed in arbitrary pieces, the result is the same
    for i in range(0, len(text), 7):
        log.add(text[i : i + 7])
    assert log.get(bytes.fromhex(R2), "CLIENT_TRAFFIC_SECRET_0") is None  # no newline yet
    log.add("\n")
    assert log.get(bytes.fromhex(R1), "CLIENT_HANDSHAKE_TRAFFIC_SECRET") == bytes(32 * [0xAA])
    assert log.get(bytes.fromhex(R1), "SERVER_TRAFFIC_SECRET_0") == bytes(48 * [0xBB])
    assert log.get(bytes.fromhex(R2), "CLIENT_TRAFFIC_SECRET_0") == bytes(32 * [0xCC])
    assert log.lines == 3 and log.bad_lines == 1 and len(log) == 2
    assert log.first_bad == redacted_line("garbage line")  # never a secret in a report


def test_keylog_complete_block_and_bytes():
    log = KeyLog()
    assert log.add(f"CLIENT_RANDOM {R1} {'dd' * 48}".encode(), complete=True) == 1
    assert log.get(bytes.fromhex(R1), "CLIENT_RANDOM") == bytes(48 * [0xDD])
    assert log.add(b"X " + b"zz" * 32 + b" 00\n") == 0 and log.bad_lines == 1


def test_frames_every_kind_we_act_on():
    payload = (
        b"\x00\x00\x00"  # PADDING run
        + b"\x01"  # PING
        + b"\x02" + varint(5) + varint(0) + varint(1) + varint(0) + varint(1) + varint(1)
        + crypto_frame(10, b"hello")
        + stream_frame(4, 3, b"abc", fin=True)
        + b"\x08" + varint(8) + b"to-the-end"  # STREAM without offset and length
    )
    f = parse_frames(payload)
    assert f.error is None
    assert f.types == ["PADDING", "PING", "ACK", "CRYPTO", "STREAM", "STREAM"]
    assert f.crypto == [(10, b"hello")]
    assert f.streams == [(4, 3, b"abc", True), (8, 0, b"to-the-end", False)]
    g = parse_frames(reset_frame(4, 7, 99) + new_cid_frame(1, b"\x01\x02\x03\x04")
                     + close_frame(0x0A, b"bye") + b"\x1e")
    assert g.types == ["RESET_STREAM", "NEW_CONNECTION_ID", "CONNECTION_CLOSE", "HANDSHAKE_DONE"]
    assert g.resets == [(4, 7, 99)] and g.new_cids == [(1, b"\x01\x02\x03\x04")]
    assert g.close == (0x0A, 0, "bye")


def test_frames_errors_stop_the_walk():
    f = parse_frames(b"\x01\x40\x21\x01")  # PING, then unknown type 0x21
    assert f.types == ["PING", "UNKNOWN_0x21"] and "unknown frame type 0x21" in f.error
    g = parse_frames(b"\x01" + b"\x06" + varint(0) + varint(50) + b"short")
    assert g.types == ["PING"] and "CRYPTO frame" in g.error and "truncated" in g.error
    h = parse_frames(b"\x18" + varint(1) + varint(0) + b"\x00" + bytes(16))
    assert h.error is not None  # zero-length NEW_CONNECTION_ID is invalid


def test_stream_kind():
    assert [stream_kind(i) for i in range(4)] == [
        "bidi-client", "bidi-server", "uni-client", "uni-server"
    ]


def test_client_hello_of_rfc9001_a2():
    body = v.CLIENT_CRYPTO_FRAME[4 + 4 :]  # CRYPTO frame header, then handshake header
    ch = parse_client_hello(body)
    assert ch.random == v.CLIENT_RANDOM
    assert ch.sni == "example.com"
    assert ch.alpn == ("alpn",)
    assert ch.supported_versions == (0x0304,)
    assert ch.cipher_suites == (0x1301, 0x1302)
    assert 0x39 in ch.extensions


def test_server_hello_of_rfc9001_a3():
    body = v.SERVER_PAYLOAD[5 + 4 + 4 :]  # ACK frame, CRYPTO frame header, message header
    sh = parse_server_hello(body)
    assert sh.cipher_suite == 0x1301 and sh.selected_version == 0x0304
    assert not sh.hello_retry


def test_handshake_reader_split_anywhere_and_limit():
    msg = v.CLIENT_CRYPTO_FRAME[4:]
    for step in (1, 3, 100):
        r = HandshakeReader(4096)
        got = []
        for i in range(0, len(msg), step):
            got += r.feed(msg[i : i + step])
        assert [(t, len(b)) for t, b in got] == [(1, 237)]
    r = HandshakeReader(100)
    assert r.feed(msg) == [] and "237 bytes" in r.error


def test_long_header_probe():
    assert is_plausible_first_packet(v.V1_CLIENT_PACKET)
    assert is_plausible_first_packet(v.V2_CLIENT_PACKET)
    assert not is_plausible_first_packet(v.V1_CLIENT_PACKET[:30])  # Length runs past the end
    assert not is_plausible_first_packet(b"\x16\x03\x01\x00\x10" + bytes(20))  # TLS record
    greased = b"\xc0\x1a\x2a\x3a\x4a\x08" + bytes(8) + b"\x00" + bytes(1200)
    assert is_plausible_first_packet(greased)
    assert not is_plausible_first_packet(greased[:100])  # too small to be a client probe
    vn = b"\x80\x00\x00\x00\x00\x00\x08" + bytes(8) + b"\x00\x00\x00\x01"
    assert parse_long_header(vn).supported_versions == (1,)
    try:
        parse_long_header(vn + b"\x00")
    except HeaderError:
        pass
    else:
        raise AssertionError("a version list not a multiple of 4 is an error")
