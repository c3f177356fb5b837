"""A bounds-checked read cursor over bytes (after aioquic's ``Buffer``).

Every ``pull_*`` checks that the bytes are there and raises :class:`NeedMore` (a
``ValueError``) when they are not, so parsers are written as straight-line code and a
malformed input costs one ``except`` at the layer boundary, never a wrong read.
Variable-length integers follow RFC 9000 §16.
"""

from __future__ import annotations

import struct

__all__ = ["Cursor", "NeedMore", "varint_size"]

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")


class NeedMore(ValueError):
    """The input ended (or a length pointed) before the field it announced."""


class Cursor:
    """Reads ``data[pos:end]``; ``pos`` only moves forward."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else min(end, len(data))

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def eof(self) -> bool:
        return self.pos >= self.end

    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise NeedMore(f"{n} bytes wanted at {pos}, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def peek_u8(self) -> int:
        if self.pos >= self.end:
            raise NeedMore("1 byte wanted at end of input")
        return self.data[self.pos]

    def pull_u8(self) -> int:
        return self.data[self._need(1)]

    def pull_u16(self) -> int:
        value: int = _U16.unpack_from(self.data, self._need(2))[0]
        return value

    def pull_u24(self) -> int:
        p = self._need(3)
        d = self.data
        return (d[p] << 16) | (d[p + 1] << 8) | d[p + 2]

    def pull_u32(self) -> int:
        value: int = _U32.unpack_from(self.data, self._need(4))[0]
        return value

    def pull_bytes(self, n: int) -> bytes:
        p = self._need(n)
        return bytes(self.data[p : p + n])

    def skip(self, n: int) -> None:
        self._need(n)

    def pull_varint(self) -> int:
        """RFC 9000 §16: the two top bits of the first byte give the length (1/2/4/8)."""
        p = self._need(1)
        d = self.data
        first = d[p]
        size = 1 << (first >> 6)
        if size == 1:
            return first
        self._need(size - 1)
        if size == 2:
            return ((first & 0x3F) << 8) | d[p + 1]
        value: int
        if size == 4:
            value = _U32.unpack_from(d, p)[0] & 0x3FFFFFFF
        else:
            value = _U64.unpack_from(d, p)[0] & 0x3FFFFFFFFFFFFFFF
        return value

    def pull_block(self, len_size: int) -> Cursor:
        """A sub-cursor over a block prefixed by a 1/2/3-byte big-endian length."""
        if len_size == 1:
            n = self.pull_u8()
        elif len_size == 2:
            n = self.pull_u16()
        else:
            n = self.pull_u24()
        start = self._need(n)
        return Cursor(self.data, start, start + n)

    def pull_opaque(self, len_size: int) -> bytes:
        """Bytes prefixed by a 1/2/3-byte length (TLS ``opaque x<..>``)."""
        sub = self.pull_block(len_size)
        return bytes(self.data[sub.pos : sub.end])


def varint_size(value: int) -> int:
    """Bytes a varint needs for ``value`` (RFC 9000 §16)."""
    if value < 0x40:
        return 1
    if value < 0x4000:
        return 2
    if value < 0x40000000:
        return 4
    return 8
