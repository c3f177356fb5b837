"""Runs joined per flow through the conveyor (``reassembly.native`` ``coalesce="flow"``,
``analyzer.pipeline.CaptureDissection.may_reorder``): every row, its record id and each
flow's row order are those of the reference order, only rows of different flows may
come out in another file order.

The captures are generated (``tests.perf.nats_bulk``: publishers and subscribers whose
bursts interleave, round robin with ``burst=1``): the samples are too sparse for a
stretch to hold two flows' runs apart (``test_the_samples_reorder_nothing``), so
``tests/analyzer/test_golden.py`` shows little of this mode.  Each test counts what it
exercised (stretches taken joined per flow, events, runs repeated), never time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import pipeline
from analyzer.pipeline import FLOW_COALESCE_SWITCH, CaptureDissection, Options
from reassembly import native
from reassembly.flows import FLOW_BYTES, LIGHT_FLOW_BYTES
from reassembly.limits import Limits
from tests.perf.nats_bulk import BulkWriter

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="reassembly._engine not built")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _flow_tables(out: Path) -> dict:
    """Every table as {flow id: its rows in file order} (rows tied to no flow under
    None, in file order too): rows, record ids and each flow's order compared exactly,
    the interleaving of flows not."""
    import pyarrow.parquet as pq

    from tests.analyzer.golden_tables import _plain

    tables: dict = {}
    for tdir in sorted(p for p in out.iterdir() if p.is_dir()):
        per_flow: dict = {}
        for f in sorted(tdir.glob("*/*.parquet")):
            for row in pq.read_table(f).to_pylist():
                per_flow.setdefault(row.get("flow_id"), []).append(_plain(row))
        tables[tdir.name] = per_flow
    return tables


class _Spread(BulkWriter):
    """``BulkWriter`` with ``step_us`` between frames (its own 37 µs put a small capture
    in one capture second: one stretch, taken before any flow direction was seen to pass
    the layers; a real capture's stretches end at least every second, at the sweep)."""

    def __init__(self, path: Path, step_us: int = 10_000, at: int = -1, **options: int) -> None:
        super().__init__(path, **options)
        self.step_us = step_us
        self.at = at  # the message that carries a Liftbridge envelope (-1: none)

    def _frame(self, conn, side: int, flags: int, data: bytes = b"") -> None:  # noqa: ANN001
        self.t += self.step_us - 37
        super()._frame(conn, side, flags, data)

    def _ops(self, n: int, subject: bytes, msg: bool) -> bytes:
        if not self.messages <= self.at < self.messages + n:
            return super()._ops(n, subject, msg)
        from dissectors.liftbridge.envelope import MAGIC

        payload = MAGIC + bytes(20)  # its probe says yes: a payload dissector decodes it
        self.messages += 1
        head = (b"MSG %s 1 %d\r\n" if msg else b"PUB %s %d\r\n") % (subject, len(payload))
        return head + payload + b"\r\n" + super()._ops(n - 1, subject, msg)


def _write(path: Path, nbytes: int, seed: int, **options: int) -> Path:
    _Spread(path, seed=seed, **options).write(nbytes)
    return path


class _Counts:
    """What a dissection did: events handled, stretches taken joined per flow, runs of
    the read loop (more than one: a run thrown away, ``FlowOrderUnproven``)."""

    def __init__(self, monkeypatch) -> None:
        self.events = self.joined = self.runs = 0
        handle, may = CaptureDissection.handle, CaptureDissection.may_reorder
        run = pipeline.run_dissection

        def counted_handle(job, ev) -> None:
            self.events += 1
            handle(job, ev)

        def counted_may(job, flows):
            verdict = may(job, flows)
            self.joined += bool(verdict)
            return verdict

        def counted_run(*args, **kwargs):
            self.runs += 1
            return run(*args, **kwargs)

        monkeypatch.setattr(CaptureDissection, "handle", counted_handle)
        monkeypatch.setattr(CaptureDissection, "may_reorder", counted_may)
        monkeypatch.setattr(pipeline, "run_dissection", counted_run)


def _dissect(monkeypatch, path: Path, out: Path, mode: str, **options) -> tuple[dict, _Counts]:
    """``mode``: ``flow`` (the default), ``adjacent`` (``MSGCAP_FLOW_COALESCE=0``) or
    ``reference`` (``MSGCAP_NATIVE_ENGINE=0``)."""
    counts = _Counts(monkeypatch)
    monkeypatch.setenv(FLOW_COALESCE_SWITCH, "0" if mode == "adjacent" else "1")
    monkeypatch.setenv(native.ENV_SWITCH, "0" if mode == "reference" else "1")
    pipeline.dissect_capture(path, out, Options(strict=True, validate=True, **options))
    monkeypatch.undo()
    return _flow_tables(out), counts


def test_round_robin_flows_join_per_flow(tmp_path, monkeypatch) -> None:
    """Round-robin bulk traffic: the stretches are taken joined per flow (counted), the
    conveyor handles about half the events it does with adjacent runs (a client side
    stays in the layers' order until it is past the TLS layer's STARTTLS window, 64 KiB),
    and the tables are the reference's flow by flow."""
    path = tmp_path / "bulk.pcap"
    _write(path, 400_000, 1, burst=1, publishers=1, subscribers=2)
    got, flow = _dissect(monkeypatch, path, tmp_path / "flow", "flow")
    assert flow.joined >= 3 and flow.runs == 1
    assert sum(len(rows) for t in got.values() for rows in t.values()) > 150
    adjacent, adj = _dissect(monkeypatch, path, tmp_path / "adjacent", "adjacent")
    assert adjacent == got and adj.joined == 0
    assert 2 * flow.events < adj.events
    reference, _ = _dissect(monkeypatch, path, tmp_path / "reference", "reference")
    assert reference == got
    # two light workers join their own flows' runs too (worker 0 runs in this process:
    # its stretches are counted; six connections, so each worker has several)
    path = tmp_path / "six.pcap"
    _write(path, 400_000, 2, burst=1, publishers=3, subscribers=3)
    result, counts = _dissect_parallel(monkeypatch, path, tmp_path / "two")
    assert (result.split, result.fallback) == ("light", [])
    assert counts.joined >= 1
    reference, _ = _dissect(monkeypatch, path, tmp_path / "six-ref", "reference")
    assert _flow_tables(tmp_path / "two") == reference


def _dissect_parallel(monkeypatch, path: Path, out: Path) -> tuple:
    """``dissect_parallel`` with 2 workers (flow coalescing on): its result and what
    worker 0 (this process) did."""
    from analyzer.parallel import dissect_parallel

    counts = _Counts(monkeypatch)
    monkeypatch.setenv(FLOW_COALESCE_SWITCH, "1")
    monkeypatch.setenv(native.ENV_SWITCH, "1")
    result = dissect_parallel(path, out, 2, Options(strict=True, validate=True))
    monkeypatch.undo()
    return result, counts


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 1 << 16), burst=st.integers(1, 4), publishers=st.integers(1, 4),
       subscribers=st.integers(1, 3), payload=st.sampled_from([40, 900, 5000]))
def test_generated_interleavings(tmp_path_factory, seed: int, burst: int, publishers: int,
                                 subscribers: int, payload: int) -> None:
    """Hypothesis-chosen interleavings (bursts, connection counts, payload sizes): the
    tables are those of adjacent runs (the reference's order) flow by flow."""
    tmp = tmp_path_factory.mktemp("gen")
    path = tmp / "bulk.pcap"
    _write(path, 60_000, seed, burst=burst, publishers=publishers,
           subscribers=subscribers, max_payload=payload)
    with pytest.MonkeyPatch.context() as mp:
        got, _ = _dissect(mp, path, tmp / "flow", "flow")
    with pytest.MonkeyPatch.context() as mp:
        expected, _ = _dissect(mp, path, tmp / "adjacent", "adjacent")
    assert got == expected


@pytest.mark.parametrize("limit,window", [(4096, None), (20_000, None), (65536, None),
                                          (120_000, 1024)])
def test_tight_memory_budgets(tmp_path, monkeypatch, limit: int, window: int | None) -> None:
    """Budgets that make holders give memory back (the first three: the overlap-check
    windows alone outgrow them, so no stretch is joined) or nearly so (the last: small
    windows: a stretch that fits in the room is joined; at 60 kB none does); a run that
    joined a stretch and then saw the budget reclaim would be made again.  The rows are
    the reference's."""
    path = tmp_path / "bulk.pcap"
    _write(path, 200_000, 7, burst=2, publishers=3, subscribers=2,
           max_payload=4000 if window is None else 20_000)
    # (chosen when a flow was charged LIGHT_FLOW_BYTES: the same room beside the charge
    # of the capture's five flows)
    limit += 5 * (FLOW_BYTES - LIGHT_FLOW_BYTES)
    limits = Limits(memory_limit_bytes=limit) if window is None else Limits(
        memory_limit_bytes=limit, overlap_check_bytes=window)
    got, counts = _dissect(monkeypatch, path, tmp_path / "flow", "flow", limits=limits)
    released = any(row["kind"] == "limit.memory" for rows in got["anomalies"].values()
                   for row in rows)
    assert released == (window is None)
    assert counts.runs == 1 + (counts.joined > 0 and released)
    assert (counts.joined > 0) == (window is not None)
    reference, _ = _dissect(monkeypatch, path, tmp_path / "reference", "reference",
                            limits=limits)
    assert reference == got


def test_shared_state_used_after_joining_repeats_the_run(tmp_path, monkeypatch) -> None:
    """A payload dissector decodes a message after stretches were joined per flow: that
    run is not proven, so it is thrown away and made again in the reference's order
    (two read loops, counted); the rows are the reference's."""
    path = tmp_path / "late.pcap"
    _write(path, 400_000, 3, at=120, burst=1, publishers=1, subscribers=2)
    got, counts = _dissect(monkeypatch, path, tmp_path / "flow", "flow")
    assert counts.joined > 0 and counts.runs == 2
    reference, _ = _dissect(monkeypatch, path, tmp_path / "reference", "reference")
    assert reference == got
    # light workers: a worker that joined runs and then decoded a payload is not kept
    result, _ = _dissect_parallel(monkeypatch, path, tmp_path / "two")
    assert result.split == "exact" and result.fallback, result.fallback
    assert _flow_tables(tmp_path / "two") == got


def test_the_samples_reorder_nothing(tmp_path, monkeypatch) -> None:
    """The sample captures (small, sparse) never hold two flows' runs apart in one
    stretch: their golden tables say nothing of this mode, the tests above do."""
    for pcap in ("nats-basic.pcap", "pulsar-client.pcap"):
        _, counts = _dissect(monkeypatch, SAMPLES / pcap, tmp_path / pcap, "flow")
        assert counts.joined == 0 and counts.runs == 1


def _events(path: Path, movable: set[int] | None, verdict: bool | None) -> tuple[list, int]:
    """The engine's events over ``path`` joined per flow, the runs split back into the
    reference's events, and how many stretches were asked about."""
    from reassembly.provenance import CoalescedData

    engine = native.NativeReassembler(coalesce="flow")
    engine.movable = movable
    asked = []

    def reorder(runs: list) -> bool | None:
        asked.append(len(runs))
        return verdict

    engine.reorder = reorder
    out: list = []
    for ev in engine.process(native.pcap_batches(path)):
        out.extend(ev.split() if type(ev) is CoalescedData else [ev])
    return out, len(asked)


def _order(events: list, keep) -> list:  # noqa: ANN001
    return [(type(e).__name__, e.flow.flow_id if getattr(e, "flow", None) else None,
             getattr(e, "direction", None), getattr(e, "offset", None),
             getattr(e, "frame_first", None)) for e in events if keep(e)]


def test_engine_moves_only_the_movable_directions(tmp_path) -> None:
    """``movable``: the runs of the other flow directions keep the reference's order
    among themselves, every flow its own order; a stretch refused (``reorder`` False)
    comes in the reference's order exactly (``Engine.regroup``)."""
    from reassembly.capture import open_capture
    from reassembly.engine import Reassembler

    path = tmp_path / "rr.pcap"
    _write(path, 200_000, 5, burst=1, publishers=3, subscribers=2, step_us=300)
    with open_capture(path) as reader:
        want = list(Reassembler().process(reader))
    every = _order(want, lambda e: True)
    flows = {e.flow.flow_id for e in want if getattr(e, "flow", None) is not None}
    movable = {f << 1 | d for f in sorted(flows)[:2] for d in (0, 1)}

    def fixed(e) -> bool:  # noqa: ANN001
        flow, direction = getattr(e, "flow", None), getattr(e, "direction", None)
        return flow is None or direction is None or flow.flow_id << 1 | direction not in movable

    got, asked = _events(path, movable, True)
    assert asked > 0 and _order(got, lambda e: True) != every  # something moved
    assert _order(got, fixed) == _order(want, fixed)
    for f in flows:
        def mine(e, f=f) -> bool:  # noqa: ANN001
            return getattr(e, "flow", None) is not None and e.flow.flow_id == f
        assert _order(got, mine) == _order(want, mine)
    refused, asked = _events(path, movable, False)
    assert asked > 0 and _order(refused, lambda e: True) == every


def test_engine_caps_a_run_joined_per_flow(tmp_path) -> None:
    """A stretch of two flows sending in turn, 600 segments each: joined per flow, each
    flow's data comes in runs of at most 256 segments (one bytes object per run stays
    small), and each flow's events are the reference's."""
    from reassembly.provenance import SEGMENT, CoalescedData
    from tests.perf.test_engine_native import _frames, assert_engine_equal
    from tests.reassembly.synth import PcapWriter, tcp_frame

    path = tmp_path / "rr.pcap"
    w = PcapWriter(path)
    a, b, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 3]), bytes([10, 0, 0, 2])
    for n in range(1200):
        c, port = (a, 40000) if n % 2 else (b, 40001)
        w.write(1_700_000_000_000_000 + n, tcp_frame(c, s, port, 4222, 1000 + (n // 2) * 10,
                                                     7, 0x18, b"0123456789"))
    w.close()
    assert_engine_equal(lambda: native.pcap_batches(path), _frames(path), coalesce="flow")
    runs = [len(e.segments) // SEGMENT.size for e in
            native.NativeReassembler(coalesce="flow").process(native.pcap_batches(path))
            if type(e) is CoalescedData]
    assert max(runs) == 256 and sum(runs) > 1100
