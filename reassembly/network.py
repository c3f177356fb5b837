"""Frames -> IP packets ready for the transport layer.

Strategy: ``NetworkDecoder.decode`` takes one captured frame, finds the IP header
through the link layer (``link.decode_link``), checks the IPv4/IPv6 header, walks IPv6
extension headers, hands fragments to the ``Defragmenter`` and returns an ``L4Packet``
(a NamedTuple: no per-layer objects) carrying the transport header and data, trimmed
to the length the IP header declares so Ethernet padding never reaches TCP/UDP.

Nothing here raises on input bytes: broken packets become ``Anomaly`` events through
the ``report`` callback and ``decode`` returns ``None``.  Counters record everything
that was skipped so the run summary can account for every frame.

Truncation policy: a packet whose IP header declares more bytes than the frame holds
is still decoded with ``truncated=True``.  When the frame itself is whole
(``orig_len == caplen``) the IP header lies, and every such packet is reported as
``ip.truncated``.  When the capture's snaplen cut the frame, which in a snaplen-limited
capture is every frame, only the first one is reported as it happens; the rest are
counted (``counters["truncated"]``) and one summary ``ip.truncated`` anomaly with the
total is emitted by ``flush(None)`` at the end of the capture.  Which report is "the
first" (of snaplen cuts, and of each undecodable link type) is a ``FirstReports``
policy, so a decoder that sees only part of a capture can be told the capture's firsts.

Fragment keys include the capture interface and the VLAN stack besides the fields RFC
791 / RFC 8200 name (addresses, identification, and for IPv4 the protocol), so equal
private addresses on different VLANs or interfaces are never mixed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from .capture import Frame
from .defrag import Defragmenter
from .events import Anomaly
from .ip import (
    IPV4_HEADER,
    IPV4_MF,
    IPV4_OFFSET_MASK,
    IPV6_HEADER,
    KIND_BAD_HEADER,
    KIND_TRUNCATED,
    PROTO_TCP,
    PROTO_UDP,
    PacketError,
    addr_str,
    walk_ipv6_ext,
)
from .limits import Limits
from .link import L3_IP, L3_IPV4, L3_IPV6, NON_IP, SHORT, decode_link, linktype_name


class L4Packet(NamedTuple):
    """One IP datagram (possibly reassembled) ready for the transport layer."""

    frame: int  # frame number (reassembled: the frame of the fragment that completed it)
    ts_ns: int  # timestamp of that frame
    ip_version: int  # 4 or 6
    src: bytes  # 4 or 16 raw address bytes
    dst: bytes
    proto: int  # IPv4 protocol / IPv6 final next header
    payload: bytes  # transport header + data as captured, trimmed to the IP length
    truncated: bool  # the capture holds fewer bytes than the IP header declares
    vlans: tuple[int, ...]  # VLAN ids, outermost first
    # transport bytes the IP header(s) declare; == len(payload) unless truncated
    l4_len: int


_new_packet = tuple.__new__
_NO_VLANS: tuple[int, ...] = ()
# fast-path views of the fixed headers, only the fields the fast path needs
# IPv4: version/IHL, total length, flags/offset, protocol, source, destination
_V4_FAST = struct.Struct("!BxH2xHxB2x4s4s").unpack_from
# IPv6: version/class/flow, payload length, next header, source, destination
_V6_FAST = struct.Struct("!IHBx16s16s").unpack_from

_COUNTER_NAMES = (
    "frames",
    "non_ip",
    "unknown_linktype",
    "link_truncated",
    "ipv4",
    "ipv6",
    "bad_header",
    "truncated",
    "ip_zero_length",
    "ipv6_ext_headers",
    "fragments",
    "reassembled",
    "frag_duplicates",
    "frag_overlaps",
    "frag_incomplete",
    "frag_too_big",
    "frag_evicted",
    "frag_bad",
    "l4_packets",
)


class FirstReports:
    """Which of the reports a capture makes once are made: the default policy.

    Two anomalies would flood a run if every frame made one: a packet cut by the
    capture's snaplen (in a snaplen-limited capture that is every packet) and a frame
    of a link type that is not decoded.  A whole-capture run reports the first of each
    as it meets it, counts the rest and, with ``summary``, adds one anomaly with that
    count at the end of the capture (``NetworkDecoder.flush(None)``).

    A decoder that sees only some of a capture's frames (a Spark task) cannot know
    which frame is the capture's first: it is given a subclass that does (see
    ``analyzer.spark.task``), and the driver writes the one summary itself."""

    summary = True  # flush(None) reports how many snaplen cuts were only counted

    def __init__(self) -> None:
        self.snaplen_reported = False
        self.unknown_reported: set[int] = set()

    def snaplen_cut(self, frame: Frame) -> bool:
        """True: report this snaplen-cut packet on its own; False: only count it."""
        if self.snaplen_reported:
            return False
        self.snaplen_reported = True
        return True

    def unknown_linktype(self, frame: Frame) -> bool:
        """True: report that ``frame.linktype`` is not decoded, at this frame."""
        lt = frame.linktype
        if lt in self.unknown_reported:
            return False
        self.unknown_reported.add(lt)
        return True


class NetworkDecoder:
    """Link layer -> IP -> (defrag) -> ``L4Packet``; see the module docstring.

    ``firsts``: which once-per-capture reports to make (``FirstReports``, the default
    for a decoder that sees the whole capture)."""

    def __init__(
        self,
        limits: Limits,
        report: Callable[[Anomaly], None],
        firsts: FirstReports | None = None,
    ) -> None:
        self.limits = limits
        self.report = report
        self.firsts = firsts if firsts is not None else FirstReports()
        self.counters: dict[str, int] = dict.fromkeys(_COUNTER_NAMES, 0)
        # non-IP frames per (link type, protocol value: ethertype, address family ...)
        self.non_ip_types: dict[tuple[int, int], int] = {}
        self._snaplen_unreported = 0
        self._defrag = Defragmenter(limits, report, self.counters)
        # frames per link type, settled lazily: only a change of link type costs a
        # dict update (see ``link_types_seen``)
        self._lt_counts: dict[int, int] = {}
        self._lt_cur: int | None = None
        self._lt_since = 0

    @property
    def link_types_seen(self) -> dict[int, int]:
        """Frames per link type value, in order of first appearance."""
        seen = dict(self._lt_counts)
        if self._lt_cur is not None:
            seen[self._lt_cur] = (
                seen.get(self._lt_cur, 0) + self.counters["frames"] - self._lt_since
            )
        return seen

    def _switch_linktype(self, lt: int, frames_before: int) -> None:
        cur = self._lt_cur
        if cur is not None:
            self._lt_counts[cur] = self._lt_counts.get(cur, 0) + frames_before - self._lt_since
        self._lt_counts.setdefault(lt, 0)
        self._lt_cur = lt
        self._lt_since = frames_before

    # ------------------------------------------------------------------ public
    def decode(self, frame: Frame) -> L4Packet | None:
        """Decode one frame; ``None`` for non-IP, unknown link types, fragments still
        waiting and broken packets (those are reported).  Never raises on input bytes."""
        c = self.counters
        nframes = c["frames"]
        c["frames"] = nframes + 1
        lt = frame.linktype
        if lt != self._lt_cur:
            self._switch_linktype(lt, nframes)
        data = frame.data
        if type(data) is not bytes:
            data = bytes(data)

        # Fast path: untagged Ethernet II carrying IPv4 without options or
        # fragmentation, or IPv6 with TCP/UDP right after the fixed header, complete
        # in the frame.  Anything else takes the general path below, which makes the
        # same checks one by one and reports what fails.
        if lt == 1:
            etype = data[12:14]
            if etype == b"\x08\x00":
                if len(data) >= 34:
                    vihl, tot, frag, proto, src, dst = _V4_FAST(data, 14)
                    if vihl == 0x45 and not frag & 0x3FFF and 20 <= tot <= len(data) - 14:
                        c["ipv4"] += 1
                        c["l4_packets"] += 1
                        return _new_packet(
                            L4Packet,
                            (
                                frame.number,
                                frame.ts_ns,
                                4,
                                src,
                                dst,
                                proto,
                                data[34 : 14 + tot],
                                False,
                                _NO_VLANS,
                                tot - 20,
                            ),
                        )
            elif etype == b"\x86\xdd" and len(data) >= 54:
                vcf, plen, nh, src, dst = _V6_FAST(data, 14)
                if vcf >> 28 == 6 and nh in (PROTO_TCP, PROTO_UDP) and 0 < plen <= len(data) - 54:
                    c["ipv6"] += 1
                    c["l4_packets"] += 1
                    return _new_packet(
                        L4Packet,
                        (
                            frame.number,
                            frame.ts_ns,
                            6,
                            src,
                            dst,
                            nh,
                            data[54 : 54 + plen],
                            False,
                            _NO_VLANS,
                            plen,
                        ),
                    )

        kind, off, vlans = decode_link(lt, data)
        try:
            if kind == L3_IPV4:
                return self._ipv4(frame, data, off, vlans)
            if kind == L3_IPV6:
                return self._ipv6(frame, data, off, vlans)
            if kind == L3_IP:
                if off >= len(data):
                    raise self._cut(frame, data, "frame ends before the IP header")
                version = data[off] >> 4
                if version == 4:
                    return self._ipv4(frame, data, off, vlans)
                if version == 6:
                    return self._ipv6(frame, data, off, vlans)
                raise PacketError(KIND_BAD_HEADER, f"IP version {version} (expected 4 or 6)")
        except PacketError as err:
            if err.kind == KIND_BAD_HEADER:
                c["bad_header"] += 1
            else:
                c["truncated"] += 1
            self.report(
                Anomaly(
                    err.kind,
                    f"{err.detail} ({linktype_name(lt)}, frame {frame.number})",
                    frame.ts_ns,
                    frame.number,
                )
            )
            return None
        if kind == NON_IP:
            c["non_ip"] += 1
            key = (lt, off)
            self.non_ip_types[key] = self.non_ip_types.get(key, 0) + 1
            return None
        if kind == SHORT:
            c["link_truncated"] += 1
            self.report(
                Anomaly(
                    "link.truncated",
                    f"frame of {len(data)} bytes (on the wire {frame.orig_len}) ends inside "
                    f"the {linktype_name(lt)} header",
                    frame.ts_ns,
                    frame.number,
                )
            )
            return None
        # UNKNOWN link type
        c["unknown_linktype"] += 1
        if self.firsts.unknown_linktype(frame):
            self.report(
                Anomaly(
                    "link.unknown_type",
                    f"link type {lt} ({linktype_name(lt)}) is not decoded; its frames are "
                    "skipped and counted in unknown_linktype",
                    frame.ts_ns,
                    frame.number,
                )
            )
        return None

    def flush(self, now_ns: int | None = None) -> None:
        """Expire fragment sets older than ``fragment_timeout_ns`` at ``now_ns``;
        ``None`` (end of capture) expires all and reports suppressed truncations."""
        self._defrag.flush(now_ns)
        if now_ns is None and self._snaplen_unreported:
            if self.firsts.summary:
                self.report(
                    Anomaly(
                        KIND_TRUNCATED,
                        f"{self._snaplen_unreported} more packets were cut by the capture "
                        f"snaplen ({self.counters['truncated']} truncated packets in all); "
                        "only the first was reported individually",
                        None,
                        None,
                        nbytes=self._snaplen_unreported,
                    )
                )
            self._snaplen_unreported = 0

    @property
    def fragments_pending(self) -> int:
        return len(self._defrag)

    # ------------------------------------------------------------------ IPv4
    def _ipv4(self, frame: Frame, data: bytes, off: int, vlans: tuple[int, ...]) -> L4Packet | None:
        c = self.counters
        c["ipv4"] += 1
        n = len(data)
        avail = n - off
        if avail < 20:
            if avail > 0 and data[off] >> 4 != 4:
                raise PacketError(KIND_BAD_HEADER, f"IPv4 header with version {data[off] >> 4}")
            raise self._cut(frame, data, f"IPv4 header cut after {avail} of 20 bytes")
        vihl, _tos, tot, ident, frag, _ttl, proto, _ck, src, dst = IPV4_HEADER.unpack_from(
            data, off
        )
        if vihl >> 4 != 4:
            raise PacketError(
                KIND_BAD_HEADER,
                f"IPv4 header with version {vihl >> 4} {addr_str(src)} -> {addr_str(dst)}",
            )
        hl = (vihl & 0x0F) << 2
        if hl < 20:
            raise PacketError(
                KIND_BAD_HEADER,
                f"IPv4 header length {hl} < 20 {addr_str(src)} -> {addr_str(dst)} id 0x{ident:04x}",
            )
        if tot < hl:
            if tot != 0:
                raise PacketError(
                    KIND_BAD_HEADER,
                    f"IPv4 total length {tot} < header length {hl} "
                    f"{addr_str(src)} -> {addr_str(dst)} id 0x{ident:04x}",
                )
            # total length 0: segmentation offload on the capturing host; the frame
            # holds the whole (oversized) packet.
            c["ip_zero_length"] += 1
            tot = avail
        if hl > avail:
            raise self._cut(
                frame,
                data,
                f"IPv4 options cut ({avail} of {hl} header bytes) "
                f"{addr_str(src)} -> {addr_str(dst)} id 0x{ident:04x}",
            )
        if tot > avail:
            truncated = True
            end = n
            self._truncated(
                frame,
                f"IPv4 total length {tot} > {avail} bytes captured "
                f"{addr_str(src)} -> {addr_str(dst)} proto {proto} id 0x{ident:04x}",
            )
        else:
            truncated = False
            end = off + tot
        if frag & 0x3FFF:  # MF or a fragment offset
            result = self._defrag.add(
                (frame.interface, vlans, 4, src, dst, proto, ident),
                4,
                src,
                dst,
                ident,
                proto,
                (frag & IPV4_OFFSET_MASK) << 3,
                bool(frag & IPV4_MF),
                tot - hl,
                data[off + hl : end],
                frame.number,
                frame.ts_ns,
                hl,
            )
            if result is None:
                return None
            payload, truncated, _proto, l4_len = result
        else:
            payload = data[off + hl : end]
            l4_len = tot - hl
        c["l4_packets"] += 1
        return _new_packet(
            L4Packet,
            (frame.number, frame.ts_ns, 4, src, dst, proto, payload, truncated, vlans, l4_len),
        )

    # ------------------------------------------------------------------ IPv6
    def _ipv6(self, frame: Frame, data: bytes, off: int, vlans: tuple[int, ...]) -> L4Packet | None:
        c = self.counters
        c["ipv6"] += 1
        n = len(data)
        avail = n - off
        if avail < 40:
            if avail > 0 and data[off] >> 4 != 6:
                raise PacketError(KIND_BAD_HEADER, f"IPv6 header with version {data[off] >> 4}")
            raise self._cut(frame, data, f"IPv6 header cut after {avail} of 40 bytes")
        vcf, plen, nh, _hops, src, dst = IPV6_HEADER.unpack_from(data, off)
        if vcf >> 28 != 6:
            raise PacketError(
                KIND_BAD_HEADER,
                f"IPv6 header with version {vcf >> 28} {addr_str(src)} -> {addr_str(dst)}",
            )
        if plen == 0:
            # jumbogram (RFC 2675) or segmentation offload: trust the capture
            c["ip_zero_length"] += 1
            plen = avail - 40
        declared_end = off + 40 + plen
        if declared_end > n:
            truncated = True
            end = n
            self._truncated(
                frame,
                f"IPv6 payload length {plen} > {avail - 40} bytes captured "
                f"{addr_str(src)} -> {addr_str(dst)} next header {nh}",
            )
        else:
            truncated = False
            end = declared_end
        p = off + 40
        if nh != PROTO_TCP and nh != PROTO_UDP:
            try:
                nh, p, fr = walk_ipv6_ext(data, p, end, nh, truncated)
            except PacketError as err:
                if truncated and err.kind == KIND_TRUNCATED:
                    return None  # already counted and reported as truncated
                raise
            if p != off + 40:
                c["ipv6_ext_headers"] += 1
            if fr is not None:
                fo, more, ident, nxt = fr
                result = self._defrag.add(
                    (frame.interface, vlans, 6, src, dst, ident),
                    6,
                    src,
                    dst,
                    ident,
                    nxt if fo == 0 else None,
                    fo,
                    more,
                    declared_end - p,
                    data[p:end],
                    frame.number,
                    frame.ts_ns,
                    p - off - 40,
                )
                if result is None:
                    return None
                payload, truncated, nh, l4_len = result
                if nh != PROTO_TCP and nh != PROTO_UDP:
                    nh, q, fr2 = walk_ipv6_ext(payload, 0, len(payload), nh, truncated)
                    if fr2 is not None:
                        self._defrag.counters["frag_bad"] += 1
                        self.report(
                            Anomaly(
                                "ip.frag_bad",
                                f"IPv6 {addr_str(src)} -> {addr_str(dst)} id 0x{ident:08x}: "
                                "reassembled datagram holds another fragment header; dropped",
                                frame.ts_ns,
                                frame.number,
                            )
                        )
                        return None
                    if q:
                        payload = payload[q:]
                        l4_len -= q
                c["l4_packets"] += 1
                return _new_packet(
                    L4Packet,
                    (frame.number, frame.ts_ns, 6, src, dst, nh, payload, truncated, vlans, l4_len),
                )
        c["l4_packets"] += 1
        return _new_packet(
            L4Packet,
            (
                frame.number,
                frame.ts_ns,
                6,
                src,
                dst,
                nh,
                data[p:end],
                truncated,
                vlans,
                declared_end - p,
            ),
        )

    # ------------------------------------------------------------------ reporting
    def _snaplen_cut(self, frame: Frame, data: bytes) -> bool:
        orig = frame.orig_len
        return orig is not None and orig > len(data)

    def _truncated(self, frame: Frame, detail: str) -> None:
        """A decodable packet with fewer bytes than its IP header declares."""
        self.counters["truncated"] += 1
        if self._snaplen_cut(frame, frame.data):
            if not self.firsts.snaplen_cut(frame):
                self._snaplen_unreported += 1
                return
            detail += (
                f"; frame cut by the capture snaplen ({len(frame.data)} of {frame.orig_len} "
                "bytes); further snaplen cuts are counted, not reported one by one"
            )
        else:
            detail += f"; the frame is complete ({frame.orig_len} bytes): the IP length lies"
        self.report(Anomaly(KIND_TRUNCATED, detail, frame.ts_ns, frame.number))

    def _cut(self, frame: Frame, data: bytes, detail: str) -> PacketError:
        """The IP header itself is incomplete: nothing can be decoded."""
        if self._snaplen_cut(frame, data):
            return PacketError(
                KIND_TRUNCATED,
                f"{detail}; frame cut by the capture snaplen ({len(data)} of "
                f"{frame.orig_len} bytes)",
            )
        return PacketError(KIND_BAD_HEADER, f"{detail}; the frame itself ends there")
