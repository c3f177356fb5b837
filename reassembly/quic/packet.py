"""QUIC packet headers: parsing what is visible before decryption (RFC 9000 §17, RFC 8999).

Pure functions over one UDP payload.  A long header states its own length, so several
packets can be coalesced in one datagram (RFC 9000 §12.2); a short header runs to the
end of the datagram and does not state its DCID length, which the caller supplies from
the connection IDs it has learnt.  Malformed input raises :class:`HeaderError`
(a ``ValueError``), caught by the layer and turned into an anomaly.
"""

from __future__ import annotations

from dataclasses import dataclass

from reassembly.quic.buffer import Cursor, NeedMore
from reassembly.quic.versions import is_greased, version_params

__all__ = [
    "MAX_CID_BYTES",
    "HeaderError",
    "LongHeader",
    "is_plausible_first_packet",
    "parse_long_header",
]

MAX_CID_BYTES = 20  # RFC 9000 §17.2: v1 connection IDs are at most 20 bytes
MIN_INITIAL_DATAGRAM = 1200  # RFC 9000 §14.1: client Initial datagrams are padded to this
FORM_LONG = 0x80
FIXED_BIT = 0x40
KEY_PHASE_BIT = 0x04


class HeaderError(ValueError):
    """The bytes do not form a QUIC header."""


@dataclass(slots=True)
class LongHeader:
    """A long-header packet as seen on the wire (fields before header protection)."""

    start: int  # offset of the first byte in the datagram
    first_byte: int  # still protected (low bits) for Initial/0-RTT/Handshake
    version: int
    dcid: bytes
    scid: bytes
    packet_type: str  # initial / 0rtt / handshake / retry / vn / unknown
    token: bytes = b""
    token_length: int | None = None
    pn_offset: int = 0  # where the (protected) packet number starts
    end: int = 0  # one past the last byte of this packet
    supported_versions: tuple[int, ...] = ()  # Version Negotiation
    retry_tag: bytes = b""  # Retry integrity tag (last 16 bytes)
    length_field: int | None = None  # the Length field (packet number + payload)


def parse_long_header(data: bytes, start: int = 0) -> LongHeader:
    """Parse the long header at ``data[start:]`` (RFC 9000 §17.2, RFC 8999 §5.1)."""
    try:
        return _parse_long(data, start)
    except NeedMore as exc:
        raise HeaderError(f"long header truncated: {exc}") from None


def _parse_long(data: bytes, start: int) -> LongHeader:
    buf = Cursor(data, start)
    first = buf.pull_u8()
    version = buf.pull_u32()
    dcid_len = buf.pull_u8()
    params = version_params(version)
    if params is not None and dcid_len > MAX_CID_BYTES:
        raise HeaderError(f"DCID length {dcid_len} > {MAX_CID_BYTES}")
    dcid = buf.pull_bytes(dcid_len)
    scid_len = buf.pull_u8()
    if params is not None and scid_len > MAX_CID_BYTES:
        raise HeaderError(f"SCID length {scid_len} > {MAX_CID_BYTES}")
    scid = buf.pull_bytes(scid_len)
    hdr = LongHeader(start, first, version, dcid, scid, "unknown")
    if version == 0:  # Version Negotiation (RFC 9000 §17.2.1)
        hdr.packet_type = "vn"
        n = buf.remaining
        if n < 4 or n % 4:
            raise HeaderError(f"version negotiation list of {n} bytes is not a multiple of 4")
        hdr.supported_versions = tuple(buf.pull_u32() for _ in range(n // 4))
        hdr.end = buf.pos
        return hdr
    if params is None:
        # an unknown version: only the invariant header is known; it takes the rest
        hdr.end = len(data)
        return hdr
    # the fixed bit may be 0: peers that negotiated grease_quic_bit (RFC 9287) do that
    ptype = params.long_types[(first & 0x30) >> 4]
    hdr.packet_type = ptype
    if ptype == "retry":
        n = buf.remaining - 16
        if n < 0:
            raise HeaderError("retry packet shorter than its integrity tag")
        hdr.token = buf.pull_bytes(n)
        hdr.token_length = n
        hdr.retry_tag = buf.pull_bytes(16)
        hdr.end = buf.pos
        return hdr
    if ptype == "initial":
        tlen = buf.pull_varint()
        hdr.token_length = tlen
        hdr.token = buf.pull_bytes(tlen)
    length = buf.pull_varint()
    hdr.length_field = length
    hdr.pn_offset = buf.pos
    if length > buf.remaining:
        raise HeaderError(
            f"{ptype} packet Length {length} exceeds the {buf.remaining} bytes left in the "
            "datagram"
        )
    hdr.end = buf.pos + length
    return hdr


def is_plausible_first_packet(data: bytes) -> bool:
    """Cheap probe: does this UDP payload start with a QUIC long header we recognise?

    Yes for a version we can decrypt whose header parses, for Version Negotiation with
    a well-formed version list, and for a greased version (0x?a?a?a?a) in a datagram of
    at least 1200 bytes (a client probing version negotiation).  Never raises.
    """
    if len(data) < 7 or not data[0] & FORM_LONG:
        return False
    version = int.from_bytes(data[1:5], "big")
    known = version == 0 or version_params(version) is not None
    if not known and not (is_greased(version) and len(data) >= MIN_INITIAL_DATAGRAM):
        return False
    try:
        hdr = parse_long_header(data, 0)
    except HeaderError:
        return False
    if not known:
        return len(hdr.dcid) <= 255 and len(hdr.scid) <= 255
    return True
