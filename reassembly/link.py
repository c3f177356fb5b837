"""Link-layer decoding: find where the IP header starts inside a captured frame.

Strategy: one small function per link type (DLT / LINKTYPE value), looked up in a
dict, each returning a plain tuple ``(kind, value, vlans)``:

* ``kind`` is ``L3_IPV4`` / ``L3_IPV6`` (the link layer says which), ``L3_IP`` (the
  link layer carries "IP" and the version nibble decides, e.g. LINKTYPE_RAW),
  ``NON_IP`` (a valid frame that does not carry IP: ARP, LLDP, 802.3 LLC ...),
  ``SHORT`` (the frame ends inside the link header) or ``UNKNOWN`` (link type we
  do not decode).
* ``value`` is the offset of the IP header for the three IP kinds, and the protocol
  value that was not IP (ethertype, address family, PPP protocol) for ``NON_IP``.
* ``vlans`` are the VLAN ids met on the way, outermost first (``()`` when none).

No objects are built per frame; everything is integer arithmetic over ``bytes``.
Values come from the tcpdump.org LINKTYPE registry and the IEEE ethertype list.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Literal

L3_IPV4 = 4
L3_IPV6 = 6
L3_IP = 1
NON_IP = 0
SHORT = -1
UNKNOWN = -2

# LINKTYPE_* values
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_PPP = 9
LINKTYPE_RAW_OPENBSD = 12  # DLT_RAW on some BSDs; libpcap maps it to 101 in files
LINKTYPE_RAW_BSDOS = 14
LINKTYPE_PPP_HDLC = 50
LINKTYPE_RAW = 101
LINKTYPE_C_HDLC = 104
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_NFLOG = 239
LINKTYPE_IPOIB = 242
LINKTYPE_PKTAP = 258
LINKTYPE_LINUX_SLL2 = 276

LINKTYPE_NAMES = {
    LINKTYPE_NULL: "NULL",
    LINKTYPE_ETHERNET: "EN10MB",
    LINKTYPE_PPP: "PPP",
    LINKTYPE_RAW_OPENBSD: "RAW",
    LINKTYPE_RAW_BSDOS: "RAW",
    LINKTYPE_PPP_HDLC: "PPP_HDLC",
    LINKTYPE_RAW: "RAW",
    LINKTYPE_C_HDLC: "C_HDLC",
    LINKTYPE_LOOP: "LOOP",
    LINKTYPE_LINUX_SLL: "LINUX_SLL",
    LINKTYPE_IPV4: "IPV4",
    LINKTYPE_IPV6: "IPV6",
    LINKTYPE_NFLOG: "NFLOG",
    LINKTYPE_IPOIB: "IPOIB",
    LINKTYPE_PKTAP: "PKTAP",
    LINKTYPE_LINUX_SLL2: "LINUX_SLL2",
}

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
ETH_VLAN_TPIDS = frozenset((0x8100, 0x88A8, 0x9100, 0x9200))
ETH_PPPOE_SESSION = 0x8864
ETH_MPLS_UC = 0x8847
ETH_MPLS_MC = 0x8848

PPP_IPV4 = 0x0021
PPP_IPV6 = 0x0057

# BSD address families seen in DLT_NULL / DLT_LOOP headers
AF_INET = 2
AF_INET6_VALUES = frozenset((24, 28, 30))  # NetBSD/OpenBSD, FreeBSD, Darwin

_U16 = struct.Struct("!H")
_unpack_u16 = _U16.unpack_from

_NO_VLANS: tuple[int, ...] = ()

Result = tuple[int, int, tuple[int, ...]]


def _ethertype(data: bytes, etype: int, off: int, vlans: tuple[int, ...] = _NO_VLANS) -> Result:
    """Continue from an ethertype whose payload starts at ``off``.

    Follows any depth of VLAN tags, a PPPoE session header and an MPLS label stack.
    """
    n = len(data)
    while True:
        if etype == ETH_IPV4:
            return L3_IPV4, off, vlans
        if etype == ETH_IPV6:
            return L3_IPV6, off, vlans
        if etype in ETH_VLAN_TPIDS:
            # 2 bytes TCI (PCP 3 bits, DEI 1 bit, VID 12 bits) + 2 bytes inner type
            if off + 4 > n:
                return SHORT, 0, vlans
            tci, etype = struct.unpack_from("!HH", data, off)
            vlans = (*vlans, tci & 0x0FFF)
            off += 4
            continue
        if etype == ETH_PPPOE_SESSION:
            # ver/type, code, session id (2), length (2), then the PPP protocol (2)
            if off + 8 > n:
                return SHORT, 0, vlans
            proto = _unpack_u16(data, off + 6)[0]
            off += 8
            if proto == PPP_IPV4:
                return L3_IPV4, off, vlans
            if proto == PPP_IPV6:
                return L3_IPV6, off, vlans
            return NON_IP, proto, vlans
        if etype in (ETH_MPLS_UC, ETH_MPLS_MC):
            # label stack entries of 4 bytes; bit 8 of the third byte = bottom of stack
            while True:
                if off + 4 > n:
                    return SHORT, 0, vlans
                bottom = data[off + 2] & 0x01
                off += 4
                if bottom:
                    break
            return L3_IP, off, vlans
        return NON_IP, etype, vlans


def _ethernet(data: bytes) -> Result:
    if len(data) < 14:
        return SHORT, 0, _NO_VLANS
    etype = (data[12] << 8) | data[13]
    if etype == ETH_IPV4:
        return L3_IPV4, 14, _NO_VLANS
    if etype < 0x0600:
        # 802.3 frame: the field is a length and an LLC header follows.
        return NON_IP, etype, _NO_VLANS
    return _ethertype(data, etype, 14)


def _af(data: bytes, value: int) -> Result:
    if value == AF_INET:
        return L3_IPV4, 4, _NO_VLANS
    if value in AF_INET6_VALUES:
        return L3_IPV6, 4, _NO_VLANS
    return NON_IP, value, _NO_VLANS


def _null(data: bytes) -> Result:
    # 4-byte address family in the byte order of the machine that captured.
    # Families are small numbers, so a value >= 2**16 read as little-endian means
    # the header is big-endian.
    if len(data) < 4:
        return SHORT, 0, _NO_VLANS
    value = int.from_bytes(data[:4], "little")
    if value >= 0x10000:
        value = int.from_bytes(data[:4], "big")
    return _af(data, value)


def _loop(data: bytes) -> Result:
    # Like NULL but always network byte order; some writers get it wrong, so the
    # same byte-order guess is applied.
    if len(data) < 4:
        return SHORT, 0, _NO_VLANS
    value = int.from_bytes(data[:4], "big")
    if value >= 0x10000:
        value = int.from_bytes(data[:4], "little")
    return _af(data, value)


def _raw(data: bytes) -> Result:
    return L3_IP, 0, _NO_VLANS


def _ipv4(data: bytes) -> Result:
    return L3_IPV4, 0, _NO_VLANS


def _ipv6(data: bytes) -> Result:
    return L3_IPV6, 0, _NO_VLANS


def _ppp(data: bytes) -> Result:
    # Optional HDLC address/control bytes ff 03, then the protocol field, which is
    # 1 byte when protocol-field compression is on (its low bit is then set).
    n = len(data)
    off = 0
    if n >= 2 and data[0] == 0xFF and data[1] == 0x03:
        off = 2
    if off >= n:
        return SHORT, 0, _NO_VLANS
    if data[off] & 0x01:
        proto = data[off]
        off += 1
    else:
        if off + 2 > n:
            return SHORT, 0, _NO_VLANS
        proto = (data[off] << 8) | data[off + 1]
        off += 2
    if proto == PPP_IPV4:
        return L3_IPV4, off, _NO_VLANS
    if proto == PPP_IPV6:
        return L3_IPV6, off, _NO_VLANS
    return NON_IP, proto, _NO_VLANS


def _c_hdlc(data: bytes) -> Result:
    # Cisco HDLC: address, control, then an ethertype.
    if len(data) < 4:
        return SHORT, 0, _NO_VLANS
    return _ethertype(data, (data[2] << 8) | data[3], 4)


def _sll(data: bytes) -> Result:
    # Linux cooked v1: pkttype(2) arphrd(2) addrlen(2) addr(8) protocol(2)
    if len(data) < 16:
        return SHORT, 0, _NO_VLANS
    return _ethertype(data, (data[14] << 8) | data[15], 16)


def _sll2(data: bytes) -> Result:
    # Linux cooked v2: protocol(2) reserved(2) ifindex(4) arphrd(2) pkttype(1)
    # addrlen(1) addr(8)
    if len(data) < 20:
        return SHORT, 0, _NO_VLANS
    return _ethertype(data, (data[0] << 8) | data[1], 20)


_NFULA_PAYLOAD = 9


def _nflog(data: bytes) -> Result:
    # family(1) version(1) resource id(2), then TLVs: length(2) type(2) in host byte
    # order, length includes the 4-byte TLV header, padded to 4 bytes.
    n = len(data)
    if n < 4:
        return SHORT, 0, _NO_VLANS
    family = data[0]
    off = 4
    order: Literal["little", "big"] = "little"
    if n >= 8 and int.from_bytes(data[6:8], "little") > 0xFF:
        order = "big"
    while off + 4 <= n:
        tlv_len = int.from_bytes(data[off : off + 2], order)
        tlv_type = int.from_bytes(data[off + 2 : off + 4], order) & 0x7FFF
        if tlv_len < 4:
            return NON_IP, family, _NO_VLANS
        if tlv_type == _NFULA_PAYLOAD:
            if family == AF_INET:
                return L3_IPV4, off + 4, _NO_VLANS
            if family == 10:  # Linux AF_INET6
                return L3_IPV6, off + 4, _NO_VLANS
            return L3_IP, off + 4, _NO_VLANS
        off += (tlv_len + 3) & ~3
    return NON_IP, family, _NO_VLANS


_IPOIB_PREFIX = 40  # GRH, or the 20-byte destination address block padded to 40
_PKTAP_HEADER = struct.Struct("<III")  # length, record type, inner DLT (little-endian)
_PKTAP_PACKET = 1  # PTH_TYPE_PACKET: a captured packet follows the header


def _ipoib(data: bytes) -> Result:
    # IP over InfiniBand as libpcap writes it and tshark reads it: a 40-byte block (the
    # Global Route Header, or the destination address), then the RFC 4391 section 6
    # header: ethertype(2) reserved(2).
    if len(data) < _IPOIB_PREFIX + 4:
        return SHORT, 0, _NO_VLANS
    return _ethertype(data, _unpack_u16(data, _IPOIB_PREFIX)[0], _IPOIB_PREFIX + 4)


def _pktap(data: bytes) -> Result:
    # Apple PKTAP (macOS ``tcpdump -i any`` / ``-i pktap``): a header in host (little-
    # endian) byte order whose first fields are its own length, the record type and the
    # DLT of the packet that follows it (plus interface, process, ... not needed here).
    if len(data) < _PKTAP_HEADER.size:
        return SHORT, 0, _NO_VLANS
    hlen, rtype, dlt = _PKTAP_HEADER.unpack_from(data)
    if hlen < _PKTAP_HEADER.size or hlen > len(data):
        return SHORT, 0, _NO_VLANS
    if rtype != _PKTAP_PACKET:
        return NON_IP, rtype, _NO_VLANS
    inner = LINK_DECODERS.get(dlt)
    if inner is None or inner is _pktap:
        return UNKNOWN, dlt, _NO_VLANS
    kind, value, vlans = inner(data[hlen:])
    if kind in (L3_IPV4, L3_IPV6, L3_IP):
        value += hlen
    return kind, value, vlans


LINK_DECODERS: dict[int, Callable[[bytes], Result]] = {
    LINKTYPE_NULL: _null,
    LINKTYPE_ETHERNET: _ethernet,
    LINKTYPE_PPP: _ppp,
    LINKTYPE_RAW_OPENBSD: _raw,
    LINKTYPE_RAW_BSDOS: _raw,
    LINKTYPE_PPP_HDLC: _ppp,
    LINKTYPE_RAW: _raw,
    LINKTYPE_C_HDLC: _c_hdlc,
    LINKTYPE_LOOP: _loop,
    LINKTYPE_LINUX_SLL: _sll,
    LINKTYPE_IPV4: _ipv4,
    LINKTYPE_IPV6: _ipv6,
    LINKTYPE_NFLOG: _nflog,
    LINKTYPE_IPOIB: _ipoib,
    LINKTYPE_PKTAP: _pktap,
    LINKTYPE_LINUX_SLL2: _sll2,
}

_get_decoder = LINK_DECODERS.get


def decode_link(linktype: int, data: bytes) -> Result:
    """Locate the network layer of one frame; see the module docstring."""
    fn = _get_decoder(linktype)
    if fn is None:
        return UNKNOWN, linktype, _NO_VLANS
    return fn(data)


def linktype_name(linktype: int) -> str:
    return LINKTYPE_NAMES.get(linktype, f"LINKTYPE_{linktype}")
