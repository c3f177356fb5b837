"""The flow plan of ``msgcap dissect --workers N`` (``reassembly.flowplan``): flows
numbered as the flow table numbers them, their captured bytes summed by the C walk,
shared out biggest first to the least loaded worker; anything the walk cannot read
falls back to ``flow_id % N``."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reassembly.capture import CaptureFormatError, open_capture
from reassembly.engine import capture_events
from reassembly.events import StreamClose
from reassembly.flowplan import (
    MAX_PLANNED,
    FlowOwner,
    balance,
    by_flow_id,
    flow_sizes,
    plan_flows,
)
from tests.conftest import SHARED
from tests.reassembly.synth import ACK, PSH, SYN, PcapWriter, tcp_frame
from tests.reassembly.test_light_flows import udp_frame
from tests.reassembly.test_readers import block, epb, idb, shb

T0 = 1_700_000_000_000_000
SERVER = bytes([10, 0, 0, 2])


def _capture(path: Path, sizes: list[int]) -> list[int]:
    """One connection per entry of ``sizes`` (that many data segments), started in
    order and sending in turn, plus a UDP flow; returns each flow's captured bytes in
    order of its first packet."""
    w = PcapWriter(path)
    total = [0] * (len(sizes) + 1)

    def put(t: int, flow: int, frame: bytes) -> None:
        w.write(t, frame)
        total[flow] += len(frame)

    t = T0
    for i in range(len(sizes)):
        c = bytes([10, 0, 1, 1 + i])
        put(t, i, tcp_frame(c, SERVER, 40000 + i, 4222, 99, 0, SYN))
        put(t + 1, i, tcp_frame(SERVER, c, 4222, 40000 + i, 499, 100, SYN | ACK))
        t += 2
    put(t, len(sizes), udp_frame(bytes([10, 0, 9, 9]), SERVER, 5353, 5353, b"q" * 30))
    seq = [100] * len(sizes)
    for n in range(max(sizes)):
        for i, size in enumerate(sizes):
            if n < size:
                c = bytes([10, 0, 1, 1 + i])
                t += 1
                data = b"PUB x 3\r\nabc\r\n" * (1 + i)
                # replies come from the server: the same flow in the other direction
                put(t, i, tcp_frame(c, SERVER, 40000 + i, 4222, seq[i], 500, ACK | PSH, data))
                put(t, i, tcp_frame(SERVER, c, 4222, 40000 + i, 500, seq[i] + len(data), ACK))
                seq[i] += len(data)
    w.close()
    return total


def test_flow_sizes_number_flows_as_the_flow_table_does(tmp_path) -> None:
    path = tmp_path / "flows.pcap"
    want = _capture(path, [3, 40, 1, 25, 7])
    assert flow_sizes(path) == want
    # the flow table's ids of those flows (client port 40000 + i) are the same
    with open_capture(path) as reader:
        closes = [e for e in capture_events(reader) if isinstance(e, StreamClose)]
    assert {e.flow.flow_id: e.flow.client.port - 40000 for e in closes} == {
        i: i for i in range(5)}
    assert flow_sizes(path, limit=2) == want[:2]
    # a compressed pcap is walked too
    gz = tmp_path / "flows.pcap.gz"
    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert flow_sizes(gz) == want


def test_balance_puts_the_biggest_flows_apart() -> None:
    plan = balance([100, 1, 1, 90, 5, 5, 3], 2)
    loads = [0, 0]
    for fid, size in enumerate([100, 1, 1, 90, 5, 5, 3]):
        loads[plan.worker_of(fid)] += size
    assert plan.worker_of(0) != plan.worker_of(3)
    assert abs(loads[0] - loads[1]) <= 5
    # past the plan: by flow id
    assert [plan.worker_of(f) for f in (7, 8, 9)] == [1, 0, 1]
    assert list(balance([], 3).shares) == []
    assert set(balance([5] * 9, 3).shares) == {0, 1, 2}
    assert set(balance([5, 4], 1).shares) == {0}
    with pytest.raises(ValueError):
        balance([1], 0)


def test_by_flow_id_shares_like_flow_id_mod_n() -> None:
    plan = by_flow_id(3)
    assert [plan.worker_of(f) for f in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_owners_are_one_per_flow_and_pickle(tmp_path) -> None:
    import pickle

    path = tmp_path / "flows.pcap"
    _capture(path, [30, 2, 2, 2, 28, 1])
    plan = plan_flows(path, 3)
    owners = [pickle.loads(pickle.dumps(plan.owner(k))) for k in range(3)]
    assert all(isinstance(o, FlowOwner) for o in owners)
    for fid in range(50):
        assert sum(o(fid) for o in owners) == 1


def _as_pcapng(pcap: Path, out: Path, e: str = "<") -> None:
    """The records of ``pcap`` as a pcapng file: its link type on two interfaces, the
    packets alternating between them, a block the C walk leaves to the reader (an
    interface statistics block) between the first two."""
    with open_capture(pcap) as reader:
        frames = list(reader)
        linktype = reader.info.link_types[0]
    blocks = [shb(e), idb(e, linktype), idb(e, linktype)]
    for i, f in enumerate(frames):
        blocks.append(epb(e, i % 2, f.ts_ns // 1000, f.data))
        if i == 0:
            blocks.append(block(e, 5, struct.pack(e + "III", 0, 0, 0)))
    out.write_bytes(b"".join(blocks))


@pytest.mark.parametrize("e", ["<", ">"])
def test_pcapng_is_planned_like_the_same_records_in_pcap(tmp_path, e) -> None:
    """The pre-pass reads pcapng with the C pcapng walk (``native.reader_batches``):
    flows numbered and sized as in the classic pcap of the same records, so the plan is
    the same (before 2026-11-28 a pcapng file was shared by ``flow_id % N``)."""
    path = tmp_path / "flows.pcap"
    want = _capture(path, [3, 40, 1, 25, 7])
    ng = tmp_path / "flows.pcapng"
    _as_pcapng(path, ng, e)
    assert flow_sizes(ng) == want
    assert plan_flows(ng, 3) == plan_flows(path, 3)
    with open_capture(ng) as reader:  # and the flow table numbers them so
        closes = [ev for ev in capture_events(reader) if isinstance(ev, StreamClose)]
    assert {ev.flow.flow_id: ev.flow.client.port - 40000 for ev in closes} == {
        i: i for i in range(5)}


def test_corpus_pcapng_on_two_interfaces_is_sized() -> None:
    """A third-party pcapng file (zeek's, two interfaces, three DNS exchanges over
    Ethernet/IPv4/UDP): each flow's captured bytes, in order of first record, as a plain
    parse of its frames counts them."""
    pcapng = SHARED / "captures" / "zeek" / "pcapng-multi-interface.pcapng"
    want: dict[frozenset[tuple[bytes, int]], int] = {}
    with open_capture(pcapng) as reader:
        for frame in reader:
            d = frame.data
            assert d[12:14] == b"\x08\x00" and d[23] == 17  # IPv4, UDP
            ihl = (d[14] & 15) * 4
            sport, dport = struct.unpack_from("!HH", d, 14 + ihl)
            key = frozenset(((d[26:30], sport), (d[30:34], dport)))
            want[key] = want.get(key, 0) + len(d)
    assert len(want) == 3
    assert flow_sizes(pcapng) == list(want.values())


def test_one_worker_plans_nothing(tmp_path) -> None:
    path = tmp_path / "flows.pcap"
    _capture(path, [3, 4])
    assert len(plan_flows(path, 1).shares) == 0  # one worker: nothing to plan


def test_without_the_native_engine_flows_are_shared_by_flow_id(tmp_path, monkeypatch) -> None:
    from reassembly import native

    path = tmp_path / "flows.pcap"
    _capture(path, [3, 4])
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert flow_sizes(path) is None
    assert len(plan_flows(path, 2).shares) == 0


@pytest.fixture(scope="module")
def damage_base(tmp_path_factory) -> tuple[Path, bytes, bytes]:  # noqa: ANN001
    """A directory, and a synthetic capture as classic pcap and as pcapng."""
    d = tmp_path_factory.mktemp("flowplan-damage")
    _capture(d / "base.pcap", [3, 9, 1, 5])
    _as_pcapng(d / "base.pcap", d / "base.pcapng")
    return d, (d / "base.pcap").read_bytes(), (d / "base.pcapng").read_bytes()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_damaged_captures_are_planned_or_left_to_flow_ids(damage_base, data) -> None:
    """Bytes changed or the file cut short, pcap or pcapng: the pre-pass never raises,
    and what it sizes is what the reader reads up to the damage (its sizes sum to at
    most the captured bytes)."""
    d, pcap, ng = damage_base
    raw = bytearray(data.draw(st.sampled_from([pcap, ng])))
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    path = d / "damaged.cap"
    path.write_bytes(bytes(raw[:cut]))
    try:
        sizes = flow_sizes(path)
    except CaptureFormatError:  # not a capture at all (its magic was hit): as dissect says
        return
    if sizes is not None:
        assert all(n > 0 for n in sizes) and sum(sizes) <= cut
        assert len(sizes) <= MAX_PLANNED
    plan = plan_flows(path, 2)
    for fid in range(12):
        assert plan.worker_of(fid) in (0, 1)
