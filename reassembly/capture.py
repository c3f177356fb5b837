"""Capture-file reading: the public types and ``open_capture``.

Strategy: ``open_capture`` opens a :class:`~reassembly.compression.ByteSource`
(hashing + optional gzip/zstd), reads the first chunk of the decompressed stream and
picks the format by its magic bytes only (file extensions are ignored).  The format
readers in :mod:`reassembly.pcap` and :mod:`reassembly.pcapng` are subclasses of
:class:`CaptureReader`; each parses its records out of a large ``bytes`` buffer with
precompiled ``struct.Struct.unpack_from`` and yields plain :class:`Frame` tuples, so
the per-frame cost is one header unpack, one slice and one tuple.

A reader reads a ``ByteStream``: the whole (possibly compressed) file, or one byte
range of an uncompressed one (``reassembly.ranges``).

Anything wrong with the bytes of the file is never raised out of iteration: reading
stops (or, for a self-contained bad record, skips it) and a :class:`CaptureDamage` is
appended to ``info.damage``.  ``CaptureFormatError`` is raised by ``open_capture`` only
when the file is not a capture at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from .compression import ByteSource

# Size of one read from the (decompressed) stream.  Records are sliced out of a buffer
# of about this size, so memory stays bounded by CHUNK + the largest accepted record.
CHUNK = 1 << 20

# Any record with a captured length above this is treated as corrupt, whatever the
# file header's snaplen says (keeps memory bounded on garbage headers).
MAX_RECORD = 64 << 20

# Lower bound of the pcap caplen sanity limit: max(snaplen, this) (capped at MAX_RECORD).
MIN_CAPLEN_LIMIT = 262144

# Non-fatal damage entries kept one by one (each becomes a ``capture.damaged`` anomaly
# row); the rest are counted in one entry, so memory stays bounded on a file of bad blocks.
MAX_NOTED_DAMAGE = 1000

# What a frame's time may be: int64 nanoseconds since the epoch (years 1677-2262), the
# ``ts_ns`` columns' type.  A pcapng timestamp outside it is not taken (``pcapng``).
TS_NS_MIN, TS_NS_MAX = -(1 << 63), (1 << 63) - 1


# The capture path that means standard input, and the device it is opened through.
STDIN = "-"
STDIN_DEVICE = "/dev/stdin"


class CaptureFormatError(Exception):
    """The file is not a capture at all (empty, or unknown magic bytes)."""


class Frame(NamedTuple):
    number: int  # 1-based frame number across the whole file (all sections)
    ts_ns: int  # Unix epoch nanoseconds (UTC)
    linktype: int  # LINKTYPE_* of the interface the frame came from
    data: bytes  # captured bytes (caplen)
    orig_len: int  # original length on the wire
    interface: int  # global interface index (pcapng: across sections, 0-based; pcap: 0)


@dataclass
class CaptureDamage:
    offset: int  # offset in the decompressed stream where the bad data starts
    reason: str  # human readable
    frame: int | None  # number of the last good frame before the damage (or None)


@dataclass
class CaptureInfo:
    path: str
    format: str  # "pcap" | "pcapng"
    byte_order: str  # "little-endian" | "big-endian" (pcapng: of the first section)
    ts_resolution: str  # pcap: "us" | "ns"; pcapng: "per-interface"
    compression: str  # "none" | "gzip" | "zstd"
    variant: str  # pcap: "standard" | "modified"; pcapng: ""
    link_types: list[int] = field(default_factory=list)  # per interface, global order
    packets: int = 0  # frames yielded so far
    file_size: int = 0  # bytes on disk
    sha256: str = ""  # SHA-256 of the stored file; set when iteration reached the end
    damage: list[CaptureDamage] = field(default_factory=list)
    secrets: list[tuple[int, bytes]] = field(default_factory=list)  # pcapng DSBs
    unknown_blocks: int = 0  # pcapng blocks of unknown type (skipped)
    # Additions beyond the original contract (informational):
    # byte order of every pcapng section, in file order (pcap: one entry)
    section_byte_orders: list[str] = field(default_factory=list)
    # timestamp resolution of every interface, global order: "s", "ms", "us", "ns",
    # "10^-N" or "2^-N" (pcap: one entry equal to ts_resolution)
    interface_ts_resolutions: list[str] = field(default_factory=list)


class ByteStream(Protocol):
    """What a reader reads: ``compression.ByteSource`` (a whole file) or
    ``ranges.RangeSource`` (a range).  Never raises: an error ends the stream and is
    kept in ``error``."""

    compression: str
    error: str | None

    @property
    def bytes_read(self) -> int: ...

    def read_at_least(self, size: int, chunk: int) -> bytes: ...

    def finish_hash(self) -> str: ...

    def close(self) -> None: ...


class CaptureReader:
    """``open_capture(path) -> CaptureReader``; iterate for frames, ``info`` updates live.

    Iterating a second time continues the same (possibly exhausted) iterator; the file
    is read exactly once.  ``info.sha256`` becomes final when iteration reached the end
    of the capture data (including a stop on damage: the rest of the file is then
    hashed without being parsed).
    """

    info: CaptureInfo

    def __init__(self, source: ByteStream, info: CaptureInfo, buf: bytes) -> None:
        self._src = source
        self.info = info
        self._buf = buf  # decompressed bytes not yet consumed, starting at self._base
        self._base = 0  # offset of self._buf[0] in the decompressed stream
        self._number = 0  # frames numbered so far (the format readers set the start)
        self._iter: Iterator[Frame] | None = None
        self._closed = False
        self._stopped = False  # a fatal damage ended reading
        self._unnoted = 0  # non-fatal damage entries past MAX_NOTED_DAMAGE (counted only)

    # -- public API --------------------------------------------------------------------
    def __iter__(self) -> Iterator[Frame]:
        if self._iter is None:
            self._iter = self._frames()
        return self._iter

    @property
    def bytes_read(self) -> int:
        """Bytes consumed from the file on disk so far."""
        return self._src.bytes_read

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._src.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        i = self.info
        return f"<{type(self).__name__} {i.path!r} {i.format} packets={i.packets}>"

    # -- bulk reading (reassembly.native) ----------------------------------------------
    # A bulk walker parses the reader's records itself (in C) out of the same buffer
    # and byte stream, so reading, the file digest and damage stay the reader's: it
    # starts from ``unread``, grows the buffer with ``read_more`` and, where it stops
    # (a record it would not take, or the end), hands the rest back with ``resume``
    # and iterates the reader for it.
    def unread(self) -> tuple[bytes, int]:
        """``(buffer, offset)``: the bytes read and not yet parsed (before iteration:
        from the start of the stream, file header included) and the stream offset of
        the first of them."""
        return self._buf, self._base

    def read_more(self, buf: bytes, pos: int, need: int) -> bytes:
        """``buf[pos:]`` extended from the stream to ``need`` bytes if it can be (the
        result is shorter at the end of the stream); the walker restarts at 0."""
        return self._fill(buf, pos, need)

    def resume(self, buf: bytes, pos: int, number: int) -> None:
        """The walker parsed the records before ``buf[pos]``, frames up to ``number``:
        iterating the reader (not started yet) goes on from there."""
        self._base += pos
        self._buf = buf[pos:] if pos else buf
        self._number = number
        self.info.packets = number

    # -- helpers for the format readers ------------------------------------------------
    def _frames(self) -> Iterator[Frame]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _fill(self, buf: bytes, pos: int, need: int) -> bytes:
        """Return the unconsumed tail ``buf[pos:]`` extended to ``need`` bytes if possible.

        Advances ``self._base`` by ``pos``; the caller restarts at position 0.
        """
        self._base += pos
        tail = buf[pos:] if pos else buf
        more = self._src.read_at_least(need - len(tail), CHUNK)
        return tail + more if tail else more

    def _damage(self, offset: int, reason: str, frame: int, fatal: bool = True) -> None:
        """A damage entry; a non-fatal one (a block skipped, a timestamp not taken) past
        the first ``MAX_NOTED_DAMAGE`` is only counted, so a file made of such blocks
        cannot grow ``info.damage`` without bound (``_finish`` writes the count)."""
        if fatal:
            self._stopped = True
            if self._src.error is not None:
                reason = f"{reason} ({self._src.error})"
        elif len(self.info.damage) >= MAX_NOTED_DAMAGE:
            self._unnoted += 1
            return
        self.info.damage.append(CaptureDamage(offset, reason, frame or None))

    def _finish(self) -> None:
        """End of the capture data: report a stream error and finalize the digest."""
        if self._unnoted:
            self.info.damage.append(CaptureDamage(
                self._base, f"{self._unnoted} more non-fatal problems of the kinds above,"
                f" not listed one by one (the first {MAX_NOTED_DAMAGE} are)",
                self.info.packets or None))
            self._unnoted = 0
        if self._src.error is not None and not self._stopped:
            self.info.damage.append(
                CaptureDamage(self._base, self._src.error, self.info.packets or None)
            )
        self._buf = b""
        if not self._closed:
            self.info.sha256 = self._src.finish_hash()


def open_capture(path: str | os.PathLike[str], *, digest: bool = True) -> CaptureReader:
    """Open a pcap or pcapng file (optionally gzip/zstd compressed) for streaming reads.

    ``digest=False``: do not hash the file while reading (``info.sha256`` stays empty),
    for callers that hashed it already."""
    from .pcap import PCAP_MAGICS, PcapReader
    from .pcapng import SHB_MAGIC, PcapngReader

    spath = os.fspath(path)
    # "-": standard input, read as it arrives (a pipe from `tcpdump -w -`), CHUNK bytes
    # at a time like any file; the digest is of the bytes read, file_size stays 0
    source = ByteSource(STDIN_DEVICE if spath == STDIN else spath, digest)
    try:
        head = source.read_at_least(max(CHUNK, 64), CHUNK)
        if not head:
            if source.error is not None:
                what = source.error
            elif source.compression == "none":
                what = "empty file"
            else:
                what = f"empty {source.compression} stream"
            raise CaptureFormatError(f"{spath}: not a capture: {what}")
        info = CaptureInfo(
            path=spath,
            format="",
            byte_order="",
            ts_resolution="",
            compression=source.compression,
            variant="",
            file_size=source.file_size,
        )
        magic = head[:4]
        if magic in PCAP_MAGICS:
            return PcapReader(source, info, head)
        if magic == SHB_MAGIC:
            return PcapngReader(source, info, head)
        inner = "" if source.compression == "none" else f" (inside {source.compression})"
        if len(head) < 4:
            found = f"only {len(head)} byte(s): {head.hex()}"
        else:
            found = f"unknown magic {magic.hex()}"
        raise CaptureFormatError(f"{spath}: not a pcap/pcapng capture{inner}: {found}")
    except BaseException:
        source.close()
        raise
