"""Sans-IO decoder of S2 streams: the compressed form of NATS route, gateway and leaf-node
links (nats-server 2.10+, ``compression: s2_*``).

Facts (the Snappy framing format, ``framing_format.txt`` of google/snappy, and the S2
extensions of klauspost/compress ``s2/README.md``; restated here, written from the
descriptions, no code copied):

* A stream is a sequence of chunks: 1 type byte, 3 bytes little-endian body length, body.
  ``0xff`` stream identifier (body ``S2sTwO``; Snappy's ``sNaPpY`` is accepted too),
  ``0x00`` compressed data, ``0x01`` uncompressed data (both start with the masked
  CRC-32C of the *uncompressed* bytes, 4 bytes little endian), ``0x02``-``0x7f``
  reserved and unskippable (an error), ``0x80``-``0xfe`` skippable (``0xfe`` padding,
  ``0x99`` S2's seek index).  The CRC mask is ``((crc >> 15) | (crc << 17)) +
  0xa282ead8`` modulo 2**32.  A chunk's uncompressed data is at most 4 MiB in S2 (64 KiB
  in Snappy).
* A compressed body is a block: the uncompressed length as a varint, then elements whose
  tag's low two bits say the kind: ``00`` literal (length-1 in the upper six bits, or
  60..63 = 1..4 little-endian bytes of length-1 follow), ``01`` copy with an 11-bit
  offset (length 4..11), ``10`` copy with a 2-byte offset (length 1..64), ``11`` copy with
  a 4-byte offset (length 1..64).  S2 adds *repeat*: a ``01`` copy whose offset is 0
  reuses the previous copy's offset, its length code 0..4 meaning 4..8, 5 / 6 / 7
  meaning 1 / 2 / 3 extra bytes of length (plus 8, 260, 65540).

Strategy: ``S2Stream`` buffers at most one chunk of wire bytes (bounded by
``max_chunk_bytes`` and, when the session options carry the run's
``reassembly.limits.MemoryBudget``, drawn from it) and turns each complete chunk into a
``Data`` event (decoded bytes, the chunk's wire span, the CRC verdict) or a ``Corrupt``
event.  A chunk that cannot be decoded is skipped by its length: the stream goes on with
the next chunk.  After a gap, or a header that cannot be a chunk, the next chunk is found
by scanning for a header whose body decodes and whose CRC matches (``resync``), so junk
never becomes data.  Byte accounting: the wire bytes of every chunk read are
``decoded_bytes``; skipped, corrupt and cut bytes are ``undecoded_bytes``.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, NamedTuple

from dissectors.api import Span

if TYPE_CHECKING:
    from reassembly.limits import MemoryBudget

__all__ = [
    "STREAM_IDENTIFIER",
    "ChunkType",
    "Corrupt",
    "CrcStatus",
    "Data",
    "S2Error",
    "S2Stream",
    "decode_block",
    "masked_crc32c",
]

STREAM_IDENTIFIER = b"\xff\x06\x00\x00S2sTwO"
_SNAPPY_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
# S2's largest block (uncompressed bytes of one chunk); Snappy's is 64 KiB.
MAX_BLOCK_BYTES = 4 << 20
_CRC_MASK_DELTA = 0xA282EAD8
# While resynchronising, a candidate chunk is waited for (its bytes kept buffered) only
# if it is at most this long: bounds what junk can make the stream hold.
_RESYNC_WINDOW_BYTES = 1 << 20


class ChunkType(IntEnum):
    COMPRESSED = 0x00
    UNCOMPRESSED = 0x01
    INDEX = 0x99  # S2 seek index, skippable
    PADDING = 0xFE
    STREAM_IDENTIFIER = 0xFF


class CrcStatus(StrEnum):
    OK = "ok"
    MISMATCH = "mismatch"


class S2Error(ValueError):
    """A block or chunk that is not valid S2 (the reason is the message)."""


class Data(NamedTuple):
    """Uncompressed bytes of one data chunk and where its wire bytes were."""

    data: bytes
    crc: CrcStatus
    kind: ChunkType
    start: int  # wire stream offset of the chunk header
    end: int  # exclusive
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


class Corrupt(NamedTuple):
    """Wire bytes that were not turned into data (``reason`` says why)."""

    reason: str
    start: int
    end: int
    ts_first_ns: int
    ts_last_ns: int
    frame_first: int
    frame_last: int


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data`` as the framing format stores it (masked).  The checksum
    is imported here, at the first S2 chunk: a run with no S2 stream loads no CRC-32C
    (``dissectors.checksum`` falls back to the whole crc32c package, ~20 ms of start-up,
    when it cannot load its compiled module alone)."""
    from dissectors.checksum import crc32c

    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def max_encoded_len(n: int) -> int:
    """Largest compressed block for ``n`` uncompressed bytes (worst case: literals)."""
    return 32 + n + n // 6


def _uvarint(src: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(pos, min(pos + 5, len(src))):
        b = src[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    raise S2Error("bad uncompressed-length varint")


def block_length(src: bytes | memoryview) -> int:
    """The uncompressed length a block declares (its leading varint)."""
    return _uvarint(src, 0)[0]


def decode_block(src: bytes | bytearray | memoryview, max_len: int = MAX_BLOCK_BYTES) -> bytes:
    """Decode one S2 (or Snappy) block; raises ``S2Error`` saying what is wrong.

    The output never exceeds the declared length, itself at most ``max_len``: a block
    cannot make the decoder allocate more than that (decompression bombs stop here)."""
    n = len(src)
    dlen, s = _uvarint(src, 0)
    if dlen > max_len:
        raise S2Error(f"block declares {dlen} bytes, more than the limit of {max_len}")
    dst = bytearray()
    offset = 0
    while s < n:
        tag = src[s]
        kind = tag & 3
        if kind == 0:  # literal
            x = tag >> 2
            if x < 60:
                s += 1
            else:
                nb = x - 59
                if s + 1 + nb > n:
                    raise S2Error("literal length cut short")
                x = int.from_bytes(src[s + 1 : s + 1 + nb], "little")
                s += 1 + nb
            length = x + 1
            if s + length > n:
                raise S2Error("literal runs past the block")
            if len(dst) + length > dlen:
                raise S2Error("literal runs past the declared length")
            dst += src[s : s + length]
            s += length
            continue
        if kind == 1:
            if s + 2 > n:
                raise S2Error("copy cut short")
            length = (tag >> 2) & 7
            toff = ((tag & 0xE0) << 3) | src[s + 1]
            s += 2
            if toff == 0:  # S2 repeat: keep the previous offset
                if length == 5:
                    if s + 1 > n:
                        raise S2Error("repeat length cut short")
                    length = src[s] + 4
                    s += 1
                elif length == 6:
                    if s + 2 > n:
                        raise S2Error("repeat length cut short")
                    length = (src[s] | src[s + 1] << 8) + 256
                    s += 2
                elif length == 7:
                    if s + 3 > n:
                        raise S2Error("repeat length cut short")
                    length = (src[s] | src[s + 1] << 8 | src[s + 2] << 16) + 65536
                    s += 3
            else:
                offset = toff
            length += 4
        elif kind == 2:
            if s + 3 > n:
                raise S2Error("copy cut short")
            length = 1 + (tag >> 2)
            offset = src[s + 1] | src[s + 2] << 8
            s += 3
        else:
            if s + 5 > n:
                raise S2Error("copy cut short")
            length = 1 + (tag >> 2)
            offset = int.from_bytes(src[s + 1 : s + 5], "little")
            s += 5
        d = len(dst)
        if offset <= 0 or offset > d:
            raise S2Error(f"copy offset {offset} outside the {d} bytes decoded so far")
        if length > dlen - d:
            raise S2Error("copy runs past the declared length")
        if offset >= length:
            dst += dst[d - offset : d - offset + length]
        else:  # overlapping: the last `offset` bytes repeat
            pattern = dst[d - offset :]
            dst += (pattern * (length // offset + 1))[:length]
    if len(dst) != dlen:
        raise S2Error(f"block decodes to {len(dst)} bytes, declared {dlen}")
    return bytes(dst)


def decode_chunk_body(kind: int, body: bytes | bytearray | memoryview,
                      max_block: int) -> tuple[bytes, bool]:
    """(uncompressed bytes, CRC matches) of a data chunk's body; raises ``S2Error``."""
    if len(body) < 4:
        raise S2Error(f"data chunk of {len(body)} bytes has no room for its CRC")
    want = int.from_bytes(body[:4], "little")
    if kind == ChunkType.COMPRESSED:
        data = decode_block(body[4:], max_block)
    else:
        data = bytes(body[4:])
        if len(data) > max_block:
            raise S2Error(f"uncompressed chunk of {len(data)} bytes, over the limit")
    return data, masked_crc32c(data) == want


class S2Stream:
    """One direction's S2 stream: wire bytes in, ``Data`` / ``Corrupt`` events out.

    ``budget`` (a ``reassembly.limits.MemoryBudget``, optional) is told how many wire
    bytes are buffered; asked to give memory back, the stream drops its partial chunk
    (a ``Corrupt`` event) and goes on from the next chunk.
    """

    def __init__(self, *, start_offset: int, max_block_bytes: int = MAX_BLOCK_BYTES,
                 budget: MemoryBudget | None = None, expect_identifier: bool = True) -> None:
        self.max_block = max_block_bytes
        self.max_chunk = max_encoded_len(max_block_bytes) + 4
        self.budget = budget
        self._buf = bytearray()
        self._base = start_offset  # wire offset of _buf[0]
        self._chunks: deque[tuple[int, int, int, int, int]] = deque()  # provenance
        self._events: list[Data | Corrupt] = []
        self._skip_to = -1  # wire offset the next chunk starts at, when known past _buf
        self._resync = False
        self._rs_start = -1  # where the bytes skipped by the current resync began
        self._rs_reason = ""
        self._rs_scan = 0  # next wire offset the resync scan looks at
        self._rs_pending: list[int] = []  # candidates waiting for their bytes
        self._rs_first = (0, 0)  # (ts_ns, frame) of the first and last skipped bytes
        self._rs_last = (0, 0)
        self._seen_identifier = not expect_identifier
        self.decoded_bytes = 0
        self.undecoded_bytes = 0
        self.chunks_ok = 0
        self.chunks_bad_crc = 0

    # -- feeding --------------------------------------------------------------------------

    def feed(self, data: bytes, span: Span) -> list[Data | Corrupt]:
        if span.offset != self._base + len(self._buf):
            raise ValueError(f"non-contiguous feed at {span.offset}")
        if not data:
            return []
        if self._skip_to > span.offset:  # still inside a chunk cut by a gap
            take = min(len(data), self._skip_to - span.offset)
            self.undecoded_bytes += take
            self._base += take
            data = data[take:]
            if not data:
                return []
            span = span._replace(offset=span.offset + take)
        self._buf += data
        self._chunks.append((self._base + len(self._buf), span.ts_first_ns, span.ts_last_ns,
                             span.frame_first, span.frame_last))
        self._parse()
        self._hold()
        out, self._events = self._events, []
        return out

    def gap(self, offset: int, nbytes: int, ts_ns: int) -> list[Data | Corrupt]:
        """``nbytes`` never captured at ``offset``: the chunk they cut is lost."""
        if offset != self._base + len(self._buf):
            raise ValueError(f"gap at {offset}")
        out = self._events
        self._events = []
        known_end = -1
        if self._buf and not self._resync and len(self._buf) >= 4:
            known_end = self._base + 4 + int.from_bytes(self._buf[1:4], "little")
        if self._resync:
            if self._buf:
                self._resync_drop(len(self._buf))
            self._end_resync("up to a gap")
            out.extend(self._events)
            self._events = []
        elif self._buf:
            out.append(self._corrupt("chunk cut by a gap (bytes never captured)",
                                     len(self._buf)))
        self._drop(len(self._buf))
        self._base = offset + nbytes
        self._chunks.clear()
        if known_end > self._base:
            self._skip_to = known_end
            self._resync = False
        elif known_end == self._base:
            self._resync = False
        else:
            self._resync = True
        self._rs_start = -1
        self._rs_scan = self._base
        self._rs_pending = []
        self._hold()
        return out

    def close(self) -> list[Data | Corrupt]:
        self._parse()
        if self._resync:
            if self._buf:
                self._resync_drop(len(self._buf))
            self._end_resync("up to the end of the stream")
        out, self._events = self._events, []
        if self._buf:
            out.append(self._corrupt("stream ended inside a chunk", len(self._buf)))
            self._drop(len(self._buf))
        self._hold()
        return out

    # -- memory budget --------------------------------------------------------------------

    def release_memory(self, need: int) -> None:
        """The run's memory budget is reached and this partial chunk is the oldest holder."""
        if self._buf and self._resync:
            self._resync_drop(len(self._buf))
            self._end_resync("(memory budget reached, buffer dropped)")
        elif self._buf:
            known_end = -1
            if not self._resync and len(self._buf) >= 4:
                known_end = self._base + 4 + int.from_bytes(self._buf[1:4], "little")
            limit = self.budget.limit_bytes if self.budget is not None else 0
            self._events.append(self._corrupt(
                f"limit.memory: memory budget of {limit} bytes reached, partial S2 chunk "
                "dropped", len(self._buf)))
            self._drop(len(self._buf))
            if known_end > self._base:
                self._skip_to = known_end
            else:
                self._resync = True
                self._rs_scan = self._base
                self._rs_pending = []
        self._hold()

    def take_events(self) -> list[Data | Corrupt]:
        """Events raised outside ``feed`` (a memory release)."""
        out, self._events = self._events, []
        return out

    def _hold(self) -> None:
        if self.budget is not None:
            self.budget.hold(self, len(self._buf))

    # -- internals ------------------------------------------------------------------------

    def _prov(self, start: int, end: int) -> tuple[int, int, int, int]:
        first = last = None
        for c in self._chunks:
            if first is None and c[0] > start:
                first = c
            if c[0] >= end:
                last = c
                break
        first = first or (self._chunks[-1] if self._chunks else (0, 0, 0, 0, 0))
        last = last or (self._chunks[-1] if self._chunks else first)
        return first[1], last[2], first[3], last[4]

    def _corrupt(self, reason: str, nbytes: int) -> Corrupt:
        start = self._base
        ts0, ts1, f0, f1 = self._prov(start, start + nbytes)
        return Corrupt(reason, start, start + nbytes, ts0, ts1, f0, f1)

    def _drop(self, nbytes: int) -> None:
        """Forget ``nbytes`` at the head of the buffer as undecoded."""
        self.undecoded_bytes += nbytes
        self._consume(nbytes)

    def _consume(self, nbytes: int) -> None:
        del self._buf[:nbytes]
        self._base += nbytes
        while self._chunks and self._chunks[0][0] <= self._base:
            self._chunks.popleft()

    def _parse(self) -> None:
        while True:
            if self._resync and not self._resync_step():
                return
            buf = self._buf
            if len(buf) < 4:
                return
            kind = buf[0]
            length = int.from_bytes(buf[1:4], "little")
            if kind == ChunkType.STREAM_IDENTIFIER:
                if length != 6:
                    self._start_resync(f"stream identifier chunk of length {length}")
                    continue
                if len(buf) < 10:
                    return
                ident = bytes(buf[:10])
                if ident not in (STREAM_IDENTIFIER, _SNAPPY_IDENTIFIER):
                    self._start_resync(f"unknown stream identifier {ident[4:]!r}")
                    continue
                self._seen_identifier = True
                self.decoded_bytes += 10
                self._consume(10)
                continue
            if 0x02 <= kind <= 0x7F:
                self._start_resync(f"reserved unskippable chunk type 0x{kind:02x}")
                continue
            if kind > 0x7F:  # skippable: padding, S2 index, reserved
                if length > self.max_chunk:
                    self._start_resync(f"skippable chunk of {length} bytes, over the limit")
                    continue
                if len(buf) < 4 + length:
                    return
                self.decoded_bytes += 4 + length
                self._consume(4 + length)
                continue
            if length > self.max_chunk:
                self._start_resync(f"data chunk of {length} bytes, over the limit of "
                                   f"{self.max_chunk}")
                continue
            if len(buf) < 4 + length:
                return
            start, end = self._base, self._base + 4 + length
            ts0, ts1, f0, f1 = self._prov(start, end)
            try:
                # a copy: a view would pin the buffer (an exception's traceback keeps it)
                data, crc_ok = decode_chunk_body(kind, buf[4 : 4 + length], self.max_block)
            except S2Error as exc:
                self._events.append(Corrupt(f"{ChunkType(kind).name.lower()} chunk: {exc}",
                                            start, end, ts0, ts1, f0, f1))
                self._drop(4 + length)  # go on with the next chunk
                continue
            if crc_ok:
                self.chunks_ok += 1
            else:
                self.chunks_bad_crc += 1
            self._events.append(Data(data, CrcStatus.OK if crc_ok else CrcStatus.MISMATCH,
                                     ChunkType(kind), start, end, ts0, ts1, f0, f1))
            self.decoded_bytes += 4 + length
            self._consume(4 + length)

    def _start_resync(self, reason: str) -> None:
        self._resync = True
        self._rs_reason = reason
        self._rs_start = self._base
        ts0, _, f0, _ = self._prov(self._base, self._base + 1)
        self._rs_first = (ts0, f0)
        self._rs_last = (ts0, f0)
        self._resync_drop(1)
        self._rs_scan = self._base
        self._rs_pending = []

    def _resync_drop(self, nbytes: int) -> None:
        _, ts1, _, f1 = self._prov(self._base, self._base + nbytes)
        self._rs_last = (ts1, f1)
        self._drop(nbytes)

    def _end_resync(self, how: str) -> None:
        """Report the bytes the resync skipped (one event per episode)."""
        if self._rs_start >= 0 and self._base > self._rs_start:
            self._events.append(Corrupt(
                f"{self._rs_reason}; skipped {self._base - self._rs_start} bytes {how}",
                self._rs_start, self._base, self._rs_first[0], self._rs_last[0],
                self._rs_first[1], self._rs_last[1]))
        self._rs_start = -1

    def _candidate(self, rel: int) -> bool | None:
        """Could a chunk start at ``_buf[rel]``?  True: a whole chunk that verifies (the
        identifier, or a data chunk whose CRC matches); False: no; None: perhaps, once
        more bytes are here."""
        buf = self._buf
        kind = buf[rel]
        if kind == ChunkType.STREAM_IDENTIFIER:
            if len(buf) - rel < 10:
                return None if buf[rel : rel + 10] == STREAM_IDENTIFIER[: len(buf) - rel] \
                    or buf[rel : rel + 10] == _SNAPPY_IDENTIFIER[: len(buf) - rel] else False
            return bytes(buf[rel : rel + 10]) in (STREAM_IDENTIFIER, _SNAPPY_IDENTIFIER)
        if kind > 1 or rel + 4 > len(buf):
            return False if kind > 1 else None
        length = int.from_bytes(buf[rel + 1 : rel + 4], "little")
        if not 4 <= length <= min(self.max_chunk, _RESYNC_WINDOW_BYTES):
            return False
        if rel + 4 + length > len(buf):
            return None
        try:
            return decode_chunk_body(kind, buf[rel + 4 : rel + 4 + length], self.max_block)[1]
        except S2Error:
            return False

    def _resync_step(self) -> bool:
        """Skip to the next position where a whole chunk verifies.  Positions are looked
        at once each: a candidate whose chunk is not complete yet is kept pending (the
        buffer is kept from the earliest one) and verified when its bytes are here; the
        earliest candidate that verifies wins.  True when found (parsing resumes there)."""
        base = self._base
        found = -1
        pending: list[int] = []
        for pos in self._rs_pending:
            v = self._candidate(pos - base)
            if v is None:
                pending.append(pos)
            elif v and found < 0:
                found = pos
        rel = max(self._rs_scan - base, 0)
        if found < 0:
            n = len(self._buf)
            while rel < n:
                v = self._candidate(rel)
                if v:
                    found = base + rel
                    break
                if v is None:
                    if rel + 4 > n and self._buf[rel] <= 1:
                        break  # the length is not here yet: look again later
                    pending.append(base + rel)
                rel += 1
        self._rs_scan = base + rel
        self._rs_pending = pending
        if found >= 0:
            if self._rs_start < 0:
                self._rs_reason = "bytes after a gap are not a chunk"
                self._rs_start = base
                ts0, _, f0, _ = self._prov(base, base + 1)
                self._rs_first = (ts0, f0)
            if found > base:
                self._resync_drop(found - base)
            self._resync = False
            self._rs_pending = []
            self._end_resync("to the next chunk")
            return True
        keep = min(pending[0], self._rs_scan) if pending else self._rs_scan
        if keep > base:
            if self._rs_start < 0:
                self._rs_reason = "bytes after a gap are not a chunk"
                self._rs_start = base
                ts0, _, f0, _ = self._prov(base, base + 1)
                self._rs_first = (ts0, f0)
            self._resync_drop(keep - base)
        return False
