"""Named, configurable limits of the reassembly layer.

Every limit exists because hostile or broken traffic could otherwise make memory grow
with the capture.  Exceeding any of them is never silent: the component that hits it
emits an ``Anomaly`` whose kind starts with ``limit.``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

SECOND_NS = 1_000_000_000
MIB = 1024 * 1024
# Default of ``Limits.memory_limit_bytes`` (``msgcap dissect --memory-limit``): what the
# reassembly layer may hold at once.  The rest of a default run (interpreter, pyarrow,
# the sink's row batches) peaks at ~250 MB, so a run stays under ~400 MB of RSS.
DEFAULT_MEMORY_LIMIT = 80 * MIB


class OverlapPolicy(StrEnum):
    """Which copy wins when two segments carry different bytes for the same offsets.

    ``first`` is what Suricata's default and tshark's follow show, and what most
    end hosts (Linux, BSD) do for data they already hold.
    """

    FIRST = "first"
    LAST = "last"


_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": MIB, "MB": MIB,
          "MIB": MIB, "G": 1024 * MIB, "GB": 1024 * MIB, "GIB": 1024 * MIB}


def parse_memory_size(text: str) -> int:
    """``400M``, ``1.5G``, ``262144``, ``0`` (off) -> bytes; binary units, case ignored.
    Raises ``ValueError`` with a message fit for the user."""
    t = text.strip().upper()
    num = t.rstrip("BKMGI")
    unit = t[len(num):]
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (examples: 400M, 1G, 0 for no budget)"
                         ) from None
    if unit not in _UNITS or value < 0 or value != value:
        raise ValueError(f"{text!r} is not a size (examples: 400M, 1G, 0 for no budget)")
    return int(value * _UNITS[unit])


# Tiers of holders, given back in the order of RECLAIM_ORDER: buffers first (an
# out-of-order buffer is flushed and delivered, a partial line, datagram or inflater given
# up), then TCP overlap-check windows (later retransmissions of delivered bytes are no
# longer compared: a window is given up for good, so a busy run does not trade windows
# back and forth), then pools (the flow table evicts flows).
TIER_BUFFERS = 0
TIER_POOLS = 1
TIER_WINDOWS = 2
RECLAIM_ORDER = (TIER_BUFFERS, TIER_WINDOWS, TIER_POOLS)


class MemoryHolder(Protocol):
    """Something that holds memory drawn from a ``MemoryBudget`` and can give it back."""

    def release_memory(self, need: int) -> None:
        """Give up what is held (or, for a pool such as the flow table, at least ``need``
        bytes of it), each loss reported as a ``limit.memory`` anomaly, and tell the
        budget the new size with ``hold``."""


class MemoryBudget:
    """One byte budget for everything a run holds (DESIGN §7): reorder buffers, fragment
    tables, the flow table, decompressors.

    Strategy: each holder reports its current size with ``hold`` (an estimate of what it
    costs in memory, not only its payload bytes), which also marks it as the most recently
    active.  When the total passes ``limit_bytes`` the budget asks holders to give memory
    back, oldest first: first the buffers (``TIER_BUFFERS``: an out-of-order buffer is
    flushed, its holes become gaps; an incomplete datagram is dropped; an inflater is
    given up), then the TCP overlap-check windows (``TIER_WINDOWS``: later retransmissions
    of delivered bytes are no longer compared), then the pools (``TIER_POOLS``: the flow
    table evicts its least recently active flows).  Each
    holder reports what it gave up as a ``limit.memory`` anomaly, and the run goes on.
    """

    __slots__ = ("limit_bytes", "used", "peak", "releases", "_tiers", "_reclaiming")

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.used = 0
        self.peak = 0
        self.releases = 0  # holders asked to give memory back
        self._tiers: tuple[OrderedDict[MemoryHolder, int], ...] = (
            OrderedDict(), OrderedDict(), OrderedDict())
        self._reclaiming = False

    def hold(self, holder: MemoryHolder, nbytes: int, tier: int = 0) -> None:
        """``holder`` now holds ``nbytes`` (0: nothing, it is forgotten)."""
        held = self._tiers[tier]
        self.used = used = self.used + nbytes - held.pop(holder, 0)
        if nbytes > 0:
            held[holder] = nbytes
        if used > self.peak:
            self.peak = used
        if used > self.limit_bytes and not self._reclaiming:
            self._reclaim()

    def _reclaim(self) -> None:
        self._reclaiming = True
        try:
            for tier in RECLAIM_ORDER:
                held = self._tiers[tier]
                while held and self.used > self.limit_bytes:
                    holder = next(iter(held))
                    before = held[holder]
                    self.releases += 1
                    holder.release_memory(self.used - self.limit_bytes)
                    if held.get(holder) == before:  # it could not give anything back
                        held.move_to_end(holder)
                        break
        finally:
            self._reclaiming = False


@dataclass(slots=True)
class Limits:
    # Flows held at once (TCP + UDP).  Past it the least recently active flow is
    # closed early (reason "evicted"), so a SYN flood cannot grow the table.
    max_flows: int = 200_000
    # Out-of-order bytes buffered per stream direction while waiting for a hole to
    # fill.  Past it the hole is declared a gap and buffered data is delivered.
    max_buffered_bytes: int = 4 * 1024 * 1024
    # Out-of-order segments per direction (many tiny segments cost more than bytes).
    max_buffered_segments: int = 4096
    # Recently delivered bytes kept per direction so a later retransmission can be
    # compared with what was delivered and differing overlaps reported.
    overlap_check_bytes: int = 64 * 1024
    # A flow idle this long (capture time) is closed -- for TCP: put to sleep, its
    # buffers freed; a segment continuing its sequence numbers wakes the same flow,
    # anything else on its 4-tuple closes it (docs/transport.md).
    tcp_idle_timeout_ns: int = 300 * SECOND_NS
    udp_idle_timeout_ns: int = 120 * SECOND_NS
    # After FIN in both directions or RST, a flow lingers this long for late or
    # retransmitted segments before it is closed.
    closed_linger_ns: int = 10 * SECOND_NS
    # A sleeping TCP flow (idle past ``tcp_idle_timeout_ns``) is closed when it has been
    # idle this long in all, or when anything but a continuation uses its 4-tuple.
    tcp_sleep_max_ns: int = 3600 * SECOND_NS
    # IP fragment reassembly: datagrams in progress, bytes per datagram, timeout.
    max_fragment_datagrams: int = 8192
    max_fragment_bytes: int = 65_535 + 40
    fragment_timeout_ns: int = 30 * SECOND_NS
    overlap_policy: OverlapPolicy = OverlapPolicy.FIRST
    # QUIC (reassembly.quic).  Connections tracked at once: past it the least recently
    # active one is closed early and its flow is no longer decoded as QUIC.
    quic_max_connections: int = 10_000
    # Connection IDs remembered per QUIC connection (NEW_CONNECTION_ID frames add them;
    # peers usually offer a handful): bounds the CID → connection map.
    quic_max_cids: int = 64
    # CRYPTO bytes buffered per connection, encryption level and direction, and the
    # largest TLS handshake message read (a ClientHello is a few KiB).
    quic_max_crypto_bytes: int = 256 * 1024
    # QUIC streams (per direction) reassembled at once per connection; each buffers
    # like a TCP direction.  Data of further streams is reported, not reassembled.
    quic_max_streams: int = 1024
    # TLS over TCP (reassembly.tls).  Bytes of one direction held while it is not yet
    # known whether a connection can be decrypted (from the ClientHello to the
    # ServerHello), and the largest TLS handshake message read (certificate chains are
    # a few KiB; a bigger one is skipped, the record layer goes on).
    tls_max_held_bytes: int = 256 * 1024
    tls_max_handshake_bytes: int = 256 * 1024
    # WebSocket (reassembly.websocket).  Largest HTTP upgrade request/response header
    # block read, and the most bytes one permessage-deflate message may inflate to
    # (a decompression bomb is cut there: the rest of the message becomes a gap).
    ws_max_handshake_bytes: int = 16 * 1024
    ws_max_inflated_bytes: int = 64 * 1024 * 1024
    # Decompression ratio: once a direction has inflated more than
    # ``ws_inflate_ratio_floor_bytes``, its output may not exceed this many times the
    # compressed bytes fed in.  Real text compresses 3-20x; a bomb (``\r\n`` runs) ~1000x.
    # Past it the direction is given up (``limit.websocket_inflate``, the rest gaps).
    ws_max_inflate_ratio: int = 200
    ws_inflate_ratio_floor_bytes: int = 1024 * 1024
    # Bytes all WebSocket decompression of a run may produce (a per-run budget: many
    # flows each under the per-message cap still cannot add up to hours of parsing).
    ws_max_inflated_total_bytes: int = 1024 * 1024 * 1024
    # One budget for all of the above that holds memory (``MemoryBudget``): reorder
    # buffers, fragment tables, the flow table, WebSocket inflaters.  Reached, the
    # oldest holders give memory back (``limit.memory``).  0: no budget.
    memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT
    # The run's budget object (``with_budget``); not a setting.
    budget: MemoryBudget | None = field(default=None, compare=False, repr=False)

    def with_budget(self) -> Limits:
        """These limits with a fresh budget of ``memory_limit_bytes`` for one run (the
        same object when it already has one, or when the budget is off)."""
        if self.budget is not None or self.memory_limit_bytes <= 0:
            return self
        return replace(self, budget=MemoryBudget(self.memory_limit_bytes))
