"""QUIC frames inside a decrypted packet payload (RFC 9000 §12.4, §19; RFC 9221).

``parse_frames`` walks the payload once and returns a :class:`Frames` summary: the
frame type names in order (runs of PADDING counted once, as Wireshark shows them) and
the frames whose contents the layer acts on (CRYPTO, STREAM, RESET_STREAM,
NEW_CONNECTION_ID, CONNECTION_CLOSE).  An unknown frame type or a frame cut short ends
the walk with ``error`` set: frame lengths are implicit, so nothing after it can be
trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from reassembly.quic.buffer import Cursor, NeedMore

__all__ = ["FrameType", "Frames", "parse_frames", "stream_kind"]

MAX_STREAM_OFFSET = (1 << 62) - 1  # RFC 9000 §19.8


class FrameType(IntEnum):
    PADDING = 0x00
    PING = 0x01
    ACK = 0x02
    ACK_ECN = 0x03
    RESET_STREAM = 0x04
    STOP_SENDING = 0x05
    CRYPTO = 0x06
    NEW_TOKEN = 0x07
    STREAM = 0x08  # 0x08..0x0f: OFF 0x04, LEN 0x02, FIN 0x01
    MAX_DATA = 0x10
    MAX_STREAM_DATA = 0x11
    MAX_STREAMS_BIDI = 0x12
    MAX_STREAMS_UNI = 0x13
    DATA_BLOCKED = 0x14
    STREAM_DATA_BLOCKED = 0x15
    STREAMS_BLOCKED_BIDI = 0x16
    STREAMS_BLOCKED_UNI = 0x17
    NEW_CONNECTION_ID = 0x18
    RETIRE_CONNECTION_ID = 0x19
    PATH_CHALLENGE = 0x1A
    PATH_RESPONSE = 0x1B
    CONNECTION_CLOSE = 0x1C
    CONNECTION_CLOSE_APP = 0x1D
    HANDSHAKE_DONE = 0x1E
    DATAGRAM = 0x30  # RFC 9221; 0x31 has a length
    DATAGRAM_LEN = 0x31


# names as users know them from Wireshark / RFC 9000 §19 (both ACK codes are "ACK" etc.)
_NAMES = {
    0x00: "PADDING", 0x01: "PING", 0x02: "ACK", 0x03: "ACK", 0x04: "RESET_STREAM",
    0x05: "STOP_SENDING", 0x06: "CRYPTO", 0x07: "NEW_TOKEN", 0x10: "MAX_DATA",
    0x11: "MAX_STREAM_DATA", 0x12: "MAX_STREAMS", 0x13: "MAX_STREAMS", 0x14: "DATA_BLOCKED",
    0x15: "STREAM_DATA_BLOCKED", 0x16: "STREAMS_BLOCKED", 0x17: "STREAMS_BLOCKED",
    0x18: "NEW_CONNECTION_ID", 0x19: "RETIRE_CONNECTION_ID", 0x1A: "PATH_CHALLENGE",
    0x1B: "PATH_RESPONSE", 0x1C: "CONNECTION_CLOSE", 0x1D: "CONNECTION_CLOSE",
    0x1E: "HANDSHAKE_DONE", 0x30: "DATAGRAM", 0x31: "DATAGRAM",
}
for _t in range(0x08, 0x10):
    _NAMES[_t] = "STREAM"

# RFC 9000 §12.4 Table 3: frames an Initial or Handshake packet may carry
HANDSHAKE_ALLOWED = frozenset({0x00, 0x01, 0x02, 0x03, 0x06, 0x1C})
# ... and the ones a 0-RTT packet may not carry
ZERO_RTT_FORBIDDEN = frozenset({0x02, 0x03, 0x06, 0x07, 0x19, 0x1B, 0x1E})


@dataclass(slots=True)
class Frames:
    types: list[str] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    crypto: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, data)
    # (stream id, offset, data, fin)
    streams: list[tuple[int, int, bytes, bool]] = field(default_factory=list)
    resets: list[tuple[int, int, int]] = field(default_factory=list)  # (id, error, final size)
    new_cids: list[tuple[int, bytes]] = field(default_factory=list)  # (sequence, cid)
    # (error code, frame type or None for the application variant, reason)
    close: tuple[int, int | None, str] | None = None
    error: str | None = None


def stream_kind(stream_id: int) -> str:
    """RFC 9000 §2.1: the two low bits say who opened the stream and which way it goes."""
    opener = "server" if stream_id & 0x01 else "client"
    way = "uni" if stream_id & 0x02 else "bidi"
    return f"{way}-{opener}"


def parse_frames(payload: bytes) -> Frames:
    """Walk every frame of a decrypted payload (never raises)."""
    out = Frames()
    buf = Cursor(payload)
    types, codes = out.types, out.codes
    while not buf.eof():
        start = buf.pos
        ftype = -1
        try:
            ftype = buf.pull_varint()
            if ftype == 0x00:
                # a run of PADDING bytes is one entry
                data, end = buf.data, buf.end
                pos = buf.pos
                while pos < end and data[pos] == 0:
                    pos += 1
                buf.pos = pos
            elif not _parse_one(buf, ftype, out):
                out.error = f"unknown frame type 0x{ftype:x} at payload offset {start}"
                types.append(f"UNKNOWN_0x{ftype:x}")
                codes.append(ftype)
                return out
        except NeedMore as exc:
            name = _NAMES.get(ftype, f"0x{ftype:x}") if ftype >= 0 else "frame type"
            out.error = f"{name} frame at payload offset {start} truncated ({exc})"
            return out
        except ValueError as exc:
            out.error = f"frame at payload offset {start}: {exc}"
            return out
        types.append(_NAMES[ftype])
        codes.append(ftype)
    return out


def _parse_one(buf: Cursor, ftype: int, out: Frames) -> bool:
    """Parse the body of one frame; False for an unknown type."""
    pull = buf.pull_varint
    if ftype == 0x01 or ftype == 0x1E:  # PING, HANDSHAKE_DONE
        return True
    if ftype in (0x02, 0x03):  # ACK (§19.3)
        pull()  # largest acknowledged
        pull()  # ack delay
        ranges = pull()
        pull()  # first range
        if ranges > buf.remaining:
            raise NeedMore(f"{ranges} ACK ranges cannot fit")
        for _ in range(ranges):
            pull()  # gap
            pull()  # range length
        if ftype == 0x03:
            pull()
            pull()
            pull()
        return True
    if ftype == 0x04:  # RESET_STREAM (§19.4)
        sid = pull()
        err = pull()
        final = pull()
        out.resets.append((sid, err, final))
        return True
    if ftype == 0x05:  # STOP_SENDING
        pull()
        pull()
        return True
    if ftype == 0x06:  # CRYPTO (§19.6)
        off = pull()
        n = pull()
        data = buf.pull_bytes(n)
        if off + n > MAX_STREAM_OFFSET:
            raise ValueError(f"CRYPTO data ends past 2^62 ({off}+{n})")
        out.crypto.append((off, data))
        return True
    if ftype == 0x07:  # NEW_TOKEN
        buf.skip(pull())
        return True
    if 0x08 <= ftype <= 0x0F:  # STREAM (§19.8)
        sid = pull()
        off = pull() if ftype & 0x04 else 0
        n = pull() if ftype & 0x02 else buf.remaining
        data = buf.pull_bytes(n)
        if off + n > MAX_STREAM_OFFSET:
            raise ValueError(f"STREAM data ends past 2^62 ({off}+{n})")
        out.streams.append((sid, off, data, bool(ftype & 0x01)))
        return True
    if ftype in (0x10, 0x12, 0x13, 0x14, 0x16, 0x17, 0x19):  # one varint
        pull()
        return True
    if ftype in (0x11, 0x15):  # MAX_STREAM_DATA, STREAM_DATA_BLOCKED
        pull()
        pull()
        return True
    if ftype == 0x18:  # NEW_CONNECTION_ID (§19.15)
        seq = pull()
        pull()  # retire prior to
        n = buf.pull_u8()
        if not 1 <= n <= 20:
            raise ValueError(f"NEW_CONNECTION_ID length {n} not in 1..20")
        cid = buf.pull_bytes(n)
        buf.skip(16)  # stateless reset token
        out.new_cids.append((seq, cid))
        return True
    if ftype in (0x1A, 0x1B):  # PATH_CHALLENGE / PATH_RESPONSE
        buf.skip(8)
        return True
    if ftype in (0x1C, 0x1D):  # CONNECTION_CLOSE (§19.19)
        code = pull()
        frame_type = pull() if ftype == 0x1C else None
        reason = buf.pull_bytes(pull())
        out.close = (code, frame_type, reason.decode("utf-8", "backslashreplace"))
        return True
    if ftype == 0x30:  # DATAGRAM without length: to the end
        buf.skip(buf.remaining)
        return True
    if ftype == 0x31:
        buf.skip(pull())
        return True
    return False
