"""Which worker of ``msgcap dissect --workers N`` reassembles and dissects which flow: a
plan made by one pass of the C record walk over the capture, balanced by bytes.

Why: a worker's work is its flows' bytes (reassembly, parsing, rows); the flows of the
others cost it only the C record walk and the C core's bookkeeping of their ACKs
(``reassembly.native``, light flows).  Shares by ``flow_id % N`` put a capture of a few
big flows off balance (two of them on one worker, none on the other); the plan gives
each flow to the worker with the fewest bytes so far, biggest flows first (greedy
longest-first bin packing), which is within 4/3 of the best split.

How: ``reassembly._engine.flow_bytes`` sums the captured bytes of every TCP/UDP
4-tuple of a batch; the flows are numbered in order of their first record, which is
how the flow table numbers them (``FlowTable``: ids in order of first packet).  The
plan only *predicts* ids: a 4-tuple reused after its flow ended, a record the C walk
does not decode (a fragment, an unusual link layer) or a packet the flow table refuses
shifts the numbering of later flows, which then land on another worker than planned.
That costs balance, never correctness: every worker asks the same plan
(``FlowPlan.worker_of``) for every flow id, so each flow has exactly one owner.  The
walk takes classic pcap and pcapng files (gzip/zstd too: ``native.reader_batches``, the
records of a pcapng file that its C walk leaves to the reader copied into batches).
Flow ids past the plan (more than ``MAX_PLANNED`` flows, or a capture the walk does not
take: the engine switched off or not built, a range) are shared by ``flow_id % N``,
which balances many small flows.
"""

from __future__ import annotations

import heapq
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from reassembly import native
from reassembly.capture import open_capture

# Flows whose bytes are counted (their keys are held during the pass: ~200 bytes each);
# the others, seen later, are shared by flow id.
MAX_PLANNED = 1 << 16


@dataclass(frozen=True)
class FlowPlan:
    """The worker of each planned flow id (``shares[flow_id]``), ``flow_id % workers``
    past them.  Small and picklable: the parent makes it, every worker gets a copy."""

    workers: int
    shares: array[int]  # array("H"): worker of flow id i

    def worker_of(self, flow_id: int) -> int:
        """The worker that owns the flow ``flow_id``."""
        shares = self.shares
        return shares[flow_id] if flow_id < len(shares) else flow_id % self.workers

    def owner(self, worker: int) -> FlowOwner:
        """``owns(flow_id)`` for ``worker`` (``FlowSplit``, ``FlowTable``)."""
        return FlowOwner(self, worker)


@dataclass(frozen=True)
class FlowOwner:
    """Whether ``worker`` owns a flow, by ``plan`` (a picklable ``owns`` callable)."""

    plan: FlowPlan
    worker: int

    def __call__(self, flow_id: int) -> bool:
        return self.plan.worker_of(flow_id) == self.worker


def by_flow_id(workers: int) -> FlowPlan:
    """The plan with no flow planned: every flow by ``flow_id % workers``."""
    return FlowPlan(workers, array("H"))


def balance(sizes: Sequence[int], workers: int) -> FlowPlan:
    """Flows of ``sizes[flow_id]`` bytes over ``workers``: biggest first, each to the
    worker with the fewest bytes so far (ties: the lower worker, then the lower id)."""
    if not 1 <= workers <= 0xFFFF:
        raise ValueError(f"workers must be in 1..65535, got {workers}")
    shares = array("H", bytes(2 * len(sizes)))
    loads = [(0, k) for k in range(workers)]
    for flow_id in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, k = heapq.heappop(loads)
        shares[flow_id] = k
        heapq.heappush(loads, (load + sizes[flow_id], k))
    return FlowPlan(workers, shares)


def flow_sizes(path: str | os.PathLike[str], limit: int = MAX_PLANNED) -> list[int] | None:
    """Captured bytes of each flow of a classic pcap or pcapng file, in order of first
    record (the first ``limit`` flows); None when the C walk cannot read the capture
    (not built, switched off, or not a whole capture file)."""
    if not native.enabled():
        return None
    from reassembly import _engine  # built: ``enabled`` says so

    sizes: dict[bytes, int] = {}
    try:
        with open_capture(path, digest=False) as reader:
            for batch in native.reader_batches(reader):
                for key, nbytes in _engine.flow_bytes(batch):
                    if key in sizes:
                        sizes[key] += nbytes
                    elif len(sizes) < limit:
                        sizes[key] = nbytes
    except ValueError:  # a cut file header: no C walk
        return None
    return list(sizes.values())


def plan_flows(path: str | os.PathLike[str], workers: int) -> FlowPlan:
    """The plan for dissecting ``path`` with ``workers`` workers (``balance`` of
    ``flow_sizes``, or ``by_flow_id`` when there are none)."""
    sizes = flow_sizes(path) if workers > 1 else None
    return balance(sizes, workers) if sizes else by_flow_id(workers)
