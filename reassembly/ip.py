"""IPv4 / IPv6 header parsing helpers.

Strategy: precompiled ``struct.Struct`` objects read the fixed headers straight out of
the frame's ``bytes``; results are plain tuples, never per-packet objects.  Malformed
input raises ``PacketError`` carrying the anomaly kind and a readable detail; the
caller (``network.NetworkDecoder``) turns it into an ``Anomaly`` and drops the packet.
Raising is only paid for on broken packets; the good path has no ``try`` cost in 3.11.

Field layouts follow RFC 791 (IPv4) and RFC 8200 (IPv6, extension headers,
fragment header); AH lengths follow RFC 4302.
"""

from __future__ import annotations

import socket
import struct

# version/IHL, TOS, total length, id, flags/fragment offset, TTL, protocol, checksum,
# source, destination
IPV4_HEADER = struct.Struct("!BBHHHBBH4s4s")
# version/class/flow label, payload length, next header, hop limit, source, destination
IPV6_HEADER = struct.Struct("!IHBB16s16s")
# next header, reserved, offset/flags, identification
IPV6_FRAG = struct.Struct("!BBHI")

IPV4_MF = 0x2000
IPV4_OFFSET_MASK = 0x1FFF

PROTO_HOPOPTS = 0
PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ROUTING = 43
PROTO_FRAGMENT = 44
PROTO_ESP = 50
PROTO_AH = 51
PROTO_ICMPV6 = 58
PROTO_NONE = 59
PROTO_DSTOPTS = 60
PROTO_MOBILITY = 135
PROTO_HIP = 139
PROTO_SHIM6 = 140

# Extension headers whose length is (hdr_ext_len + 1) * 8 and that we step over.
IPV6_GENERIC_EXT = frozenset(
    (PROTO_HOPOPTS, PROTO_ROUTING, PROTO_DSTOPTS, PROTO_MOBILITY, PROTO_HIP, PROTO_SHIM6)
)

KIND_BAD_HEADER = "ip.bad_header"
KIND_TRUNCATED = "ip.truncated"


class PacketError(Exception):
    """A packet that cannot be decoded; ``kind`` is the anomaly kind to report."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(kind, detail)
        self.kind = kind
        self.detail = detail


def addr_str(addr: bytes) -> str:
    """Printable form of a 4- or 16-byte address (anomaly details only)."""
    try:
        if len(addr) == 4:
            return socket.inet_ntop(socket.AF_INET, addr)
        if len(addr) == 16:
            return socket.inet_ntop(socket.AF_INET6, addr)
    except (OSError, ValueError):
        pass
    return addr.hex()


def walk_ipv6_ext(
    data: bytes, off: int, end: int, nh: int, cut: bool
) -> tuple[int, int, tuple[int, bool, int, int] | None]:
    """Step over IPv6 extension headers in ``data[off:end]`` starting with ``nh``.

    Returns ``(next_header, offset, frag)`` where ``offset`` is where the upper-layer
    header (or the fragment data) starts and ``frag`` is ``None`` or, when a fragment
    header was met, ``(fragment_offset_bytes, more_fragments, ident, next_header)``;
    the walk stops right after the fragment header (what follows is fragment data).
    An atomic fragment (offset 0, M=0, RFC 6946) is stepped over like any other
    header and reported as ``frag=None``.

    ``cut`` tells whether ``end`` is the capture's end rather than the declared
    payload end, which decides between ``ip.truncated`` and ``ip.bad_header``.
    """
    while True:
        if nh in IPV6_GENERIC_EXT:
            if off + 2 > end:
                _ext_error(nh, off, end, cut)
            hlen = (data[off + 1] + 1) << 3
        elif nh == PROTO_AH:
            if off + 2 > end:
                _ext_error(nh, off, end, cut)
            hlen = (data[off + 1] + 2) << 2
        elif nh == PROTO_FRAGMENT:
            if off + 8 > end:
                _ext_error(nh, off, end, cut)
            nxt, _res, offflags, ident = IPV6_FRAG.unpack_from(data, off)
            off += 8
            frag_off = offflags & 0xFFF8
            more = bool(offflags & 1)
            if frag_off == 0 and not more:
                nh = nxt  # atomic fragment: nothing to reassemble
                continue
            return nxt, off, (frag_off, more, ident, nxt)
        else:
            return nh, off, None
        if off + hlen > end:
            _ext_error(nh, off, end, cut)
        nh = data[off]
        off += hlen


def _ext_error(nh: int, off: int, end: int, cut: bool) -> None:
    if cut:
        raise PacketError(
            KIND_TRUNCATED, f"IPv6 extension header {nh} at offset {off} cut by the capture"
        )
    raise PacketError(
        KIND_BAD_HEADER, f"IPv6 extension header {nh} at offset {off} runs past payload end {end}"
    )
