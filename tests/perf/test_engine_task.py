"""A Spark task's reassembly (``analyzer.spark.task``) on the native engine against the
reference alone, without Spark: the split path's pass 2 (``range_stats``,
``sweep_schedule``) over a whole capture, its frames shared among tasks by connection
(``conn_key``) as pass 3 does, and each task's ``TaskReassembler`` run alone and under a
``NativeReassembler`` (``TaskReassembler.batches``: a frame the schedule's events come
before goes to the reference; and ``column_batches``, the same from pass 3's Arrow
batches, cut at random sizes).  Events, the flow table's state at the end-of-capture
flush and the counters must be the same; and the C core must take packets.  Random
schedules (a sweep or a restamp before any frame) check the hand-back where a capture's
own schedule has few events."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from analyzer.spark.task import (
    PACKET_SCHEMA,
    TaskReassembler,
    conn_key,
    range_stats,
    sweep_schedule,
)
from reassembly import native
from reassembly.limits import SECOND_NS, Limits
from tests.perf.test_engine_native import (
    CORPUS,
    ROOT,
    _expanded,
    _frames,
    _key,
    _state_at_finish,
)
from tests.reassembly.test_light_flows import SMALL, write_random_capture

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="reassembly._engine not built")

SAMPLES = [ROOT / "samples" / n for n in (
    "nats-basic.pcap", "pulsar-client.pcap", "liftbridge-basic.pcap", "nats-ws.pcap",
    "nats-cluster.pcap")]


def _tasks(frames: list, n: int) -> list[list]:
    """The frames of each of ``n`` tasks: whole connections, in frame order."""
    out: list[list] = [[] for _ in range(n)]
    for frame in frames:
        out[zlib.crc32(conn_key(frame.linktype, frame.data).key) % n].append(frame)
    return out


def _schedule(frames: list, limits: Limits) -> list[tuple[int, int, int]]:
    return sweep_schedule([range_stats(iter(frames), limits, False)])


def assert_task_equal(frames: list, schedule: list, limits: Limits | None = None,
                      max_records: int = 64, coalesce: str = "none") -> dict[str, int]:
    """One task's events and state: reference alone == native engine.  Returns the
    engine's counters."""
    states: list = []
    ref = TaskReassembler(limits, schedule, frag_max=None)
    _state_at_finish(ref, states)
    want = [_key(e) for e in ref.process(frames)]
    task = TaskReassembler(limits, schedule, frag_max=None)
    _state_at_finish(task, states)
    engine = native.NativeReassembler(reference=task, coalesce=coalesce)
    got = [_key(e) for e in _expanded(list(engine.process(
        task.batches(frames, engine.hand_back, max_records))))]
    assert got == want
    assert states[1] == states[0]
    assert task.network.counters == ref.network.counters
    assert task.flows.counters == ref.flows.counters
    assert task.clock.applied == ref.clock.applied == len(schedule)
    # the same from pass 3's Arrow batches (``column_batches``), cut every max_records
    columns = TaskReassembler(limits, schedule, frag_max=None)
    _state_at_finish(columns, states)
    on_columns = native.NativeReassembler(reference=columns, coalesce=coalesce)
    got = [_key(e) for e in _expanded(list(on_columns.process(
        columns.column_batches(_packets(frames, max_records), on_columns.hand_back))))]
    assert got == want
    assert states[2] == states[0]
    assert columns.network.counters == ref.network.counters
    assert on_columns.counters == engine.counters
    return engine.counters


def _packets(frames: list, size: int) -> list[pa.RecordBatch]:
    """``frames`` as pass 3's Arrow batches of ``size`` rows (``PACKET_SCHEMA``), each
    a slice of one table (non-zero offsets into shared buffers, as Spark may hand them)."""
    if not frames:
        return []
    cols = [[b""] * len(frames)] + [list(c) for c in zip(*frames, strict=True)]
    batch = pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(
        cols, PACKET_SCHEMA, strict=True)], schema=PACKET_SCHEMA)
    return [batch.slice(i, size) for i in range(0, len(frames), size)]


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT)))
def test_tasks_on_the_engine_give_the_reference_events(path: Path) -> None:
    frames = _frames(path)
    schedule = _schedule(frames, Limits())
    for part in _tasks(frames, 2):
        assert_task_equal(part, schedule)


@pytest.mark.parametrize("seed", range(8))
def test_tasks_on_random_flow_soups(tmp_path, seed: int) -> None:
    """Idle pauses, port reuse and eviction under small limits: sweeps that expire."""
    path = tmp_path / "soup.pcap"
    write_random_capture(path, seed, packets=400)
    frames = _frames(path)
    schedule = _schedule(frames, SMALL)
    assert len(schedule) > 3
    for part in _tasks(frames, 3):
        assert_task_equal(part, schedule, SMALL, max_records=16, coalesce="adjacent")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_tasks_under_random_schedules(path: Path) -> None:
    """Sweeps and restamps before random frames, at times up to seconds past them (a
    flow put to sleep or closed while its next packet is near): every one is a
    hand-back, and the C core still takes the frames between them."""
    frames = _frames(path)
    rng = random.Random(path.name)
    schedule = []
    for frame in sorted(rng.sample(frames, min(len(frames), 40)), key=lambda f: f.number):
        schedule.append((frame.number, rng.choice((0, 1, 1, 1)), frame.ts_ns + rng.choice(
            (0, 10**6, 2 * SECOND_NS, 20 * SECOND_NS))))
    limits = Limits(tcp_idle_timeout_ns=SECOND_NS, closed_linger_ns=SECOND_NS,
                    tcp_sleep_max_ns=10 * SECOND_NS)
    counters = assert_task_equal(frames, schedule, limits, rng.choice((7, 50, 4096)))
    assert counters["taken"] > counters["reference"]


@pytest.mark.parametrize("name,keys", [
    ("pulsar-client.pcap", None), ("nats-tls.pcap", "nats-tls.keys"),
    ("nats-ws.pcap", "nats-ws.keys"), ("felix-quic.pcap", "felix-quic.keys")])
def test_task_events_take_packets_in_c(monkeypatch, name: str, keys: str | None) -> None:
    """``task_events`` (what a Spark task runs: reassembly, then QUIC, TLS and WebSocket,
    runs no layer takes handed past them) gives the same events on the engine as with
    ``MSGCAP_NATIVE_ENGINE=0``, and its C core takes packets (a deterministic count)."""
    from analyzer.pipeline import Options
    from analyzer.spark.ingest import task_events

    frames = _frames(ROOT / "samples" / name)
    schedule = _schedule(frames, Limits())
    options = Options(keylog=None if keys is None else str(ROOT / "samples" / keys))
    made: list = []
    init = native.NativeReassembler.__init__

    def spy(self, *args, **kwargs) -> None:  # noqa: ANN001
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(native.NativeReassembler, "__init__", spy)
    got = [_key(e) for e in _expanded(list(task_events(
        TaskReassembler(options.limits, schedule), frames, options)))]
    counters = made[0].counters
    if name == "pulsar-client.pcap":
        assert counters["taken"] > 4 * counters["reference"]
    elif name != "felix-quic.pcap":  # (QUIC: UDP, which the C core does not take)
        assert counters["taken"] > 0
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    want = [_key(e) for e in task_events(TaskReassembler(options.limits, schedule), frames,
                                         options)]
    assert got == want and len(made) == 1
