"""A minimal S2 *encoder* for tests: it writes exactly the elements it is told to
(literals, copies with 1/2/4-byte offsets, repeat offsets in every length form) so the
decoder is checked on each form, and frames blocks into a stream with masked CRCs.

Written from the format description in dissectors/nats/s2.py; the reference output of an
element list is computed byte by byte (``expand``), independently of the decoder's
slicing.
"""

from __future__ import annotations

from dissectors.nats.s2 import STREAM_IDENTIFIER, masked_crc32c

Lit = tuple[str, bytes]  # ("lit", data)
Copy = tuple[str, int, int]  # ("copy", offset, length) / ("copy4", offset, length)
Rep = tuple[str, int]  # ("rep", length)
Op = Lit | Copy | Rep


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def literal(data: bytes) -> bytes:
    n = len(data) - 1
    if n < 60:
        return bytes([n << 2]) + data
    for extra, code in ((1, 60), (2, 61), (3, 62), (4, 63)):
        if n < 1 << (8 * extra):
            return bytes([code << 2]) + n.to_bytes(extra, "little") + data
    raise ValueError("literal too long")


def copy(offset: int, length: int, force4: bool = False) -> bytes:
    """One copy element (length 4..11 with offset < 2048 uses the 1-byte-offset form)."""
    assert offset > 0
    if not force4 and 4 <= length <= 11 and offset < 2048:
        return bytes([((offset >> 8) << 5) | ((length - 4) << 2) | 1, offset & 0xFF])
    assert 1 <= length <= 64
    if not force4 and offset < 65536:
        return bytes([((length - 1) << 2) | 2]) + offset.to_bytes(2, "little")
    return bytes([((length - 1) << 2) | 3]) + offset.to_bytes(4, "little")


def repeat(length: int) -> bytes:
    """Copy with the previous offset (S2): a 1-byte-offset copy whose offset is 0."""
    assert length >= 4
    if length <= 8:
        return bytes([((length - 4) << 2) | 1, 0])
    if length - 8 < 256:
        return bytes([(5 << 2) | 1, 0, length - 8])
    if length - 260 < 65536:
        return bytes([(6 << 2) | 1, 0]) + (length - 260).to_bytes(2, "little")
    return bytes([(7 << 2) | 1, 0]) + (length - 65540).to_bytes(3, "little")


def expand(ops: list[Op]) -> bytes:
    """What the elements mean, one byte at a time."""
    out = bytearray()
    offset = 0
    for op in ops:
        if op[0] == "lit":
            out += op[1]
            continue
        if op[0] in ("copy", "copy4"):
            offset, length = op[1], op[2]
        else:
            length = op[1]
        for _ in range(length):
            out.append(out[-offset])
    return bytes(out)


def encode_block(ops: list[Op]) -> bytes:
    body = bytearray(uvarint(len(expand(ops))))
    for op in ops:
        if op[0] == "lit":
            body += literal(op[1])
        elif op[0] == "copy":
            body += copy(op[1], op[2])
        elif op[0] == "copy4":
            body += copy(op[1], op[2], force4=True)
        else:
            body += repeat(op[1])
    return bytes(body)


def chunk(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


def data_chunk(plain: bytes, ops: list[Op] | None = None) -> bytes:
    """A compressed chunk of ``ops`` (which must expand to ``plain``), or an uncompressed
    chunk of ``plain`` when ``ops`` is None."""
    crc = masked_crc32c(plain).to_bytes(4, "little")
    if ops is None:
        return chunk(0x01, crc + plain)
    assert expand(ops) == plain
    return chunk(0x00, crc + encode_block(ops))


def stream(*chunks: bytes) -> bytes:
    return STREAM_IDENTIFIER + b"".join(chunks)
