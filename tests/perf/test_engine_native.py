"""The native packet engine (reassembly._engine via reassembly.native) against the
Python reference (reassembly.network, reassembly.flows, reassembly.tcp).

* decode: every record the C core calls fast is decoded by ``NetworkDecoder`` to the
  same packet, with no anomaly and no counter but frames/ipv4|ipv6/l4_packets moved;
* record walk: ``pcap_batches`` yields exactly the reference reader's frames;
* engine: ``NativeReassembler`` gives the reference's events one for one (coalesced
  chunks split by their segment table), the same final ``FlowInfo`` of every flow and
  the same decoder and flow-table counters, over every capture of the corpus and over
  hypothesis-generated segment streams (reordering, duplicates, overlaps with other
  bytes, gaps, retransmissions, IPv4/IPv6, VLAN tags, idle pauses, small limits).
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reassembly import native
from reassembly.capture import CaptureFormatError, Frame, open_capture
from reassembly.engine import Reassembler
from reassembly.events import Anomaly
from reassembly.limits import SECOND_NS, Limits
from reassembly.network import NetworkDecoder
from tests.conftest import SHARED
from tests.reassembly.synth import PcapWriter, tcp_frame, write_syn_flood
from tests.reassembly.test_light_flows import SMALL, write_random_capture

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="reassembly._engine not built")

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted(
    p
    for folder in (ROOT / "samples", SHARED / "captures", SHARED / "crafted")
    for p in folder.rglob("*")
    if p.is_file() and p.suffix in (".pcap", ".pcapng", ".cap", ".gz", ".zst")
)
_TCP = struct.Struct("!HHIIBBH")
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
T0 = 1_700_000_000 * SECOND_NS


def _frames(path: Path) -> list:
    try:
        with open_capture(path) as reader:
            return list(reader)
    except CaptureFormatError:
        return []


def _is_format(path: Path, fmt: str) -> bool:
    """Whether ``path`` is a capture of format ``fmt`` (``"pcap"``, ``"pcapng"``)."""
    try:
        with open_capture(path) as reader:
            return reader.info.format == fmt
    except CaptureFormatError:
        return False


def _is_pcap(path: Path) -> bool:
    return _is_format(path, "pcap")


# -- decode -----------------------------------------------------------------------------


def _check_decode(frames: list) -> int:
    """Every frame through the reference decoder in order; the ones C calls fast must
    agree.  Returns how many were fast."""
    reported: list[Anomaly] = []
    dec = NetworkDecoder(Limits(), reported.append)
    fast = 0
    for frame in frames:
        row = native.decode(frame.linktype, frame.data)
        before = dict(dec.counters)
        seen = len(reported)
        pkt = dec.decode(frame)
        if row is None:
            continue
        fast += 1
        assert pkt is not None and len(reported) == seen, frame.number
        moved = {k: v - before[k] for k, v in dec.counters.items() if v != before[k]}
        ipkey = "ipv4" if row.ip_version == 4 else "ipv6"
        assert moved == {"frames": 1, ipkey: 1, "l4_packets": 1}, (frame.number, moved)
        payload = frame.data[row.l4_offset:row.l4_offset + row.l4_len]
        assert (pkt.ip_version, pkt.src, pkt.dst, pkt.proto, pkt.payload, pkt.truncated,
                pkt.vlans, pkt.l4_len) == (row.ip_version, row.src, row.dst, row.proto,
                                           payload, False, row.vlans, row.l4_len)
        if row.proto == 6:
            sport, dport, seq, ack, doff, flags, window = _TCP.unpack_from(payload)
            assert (sport, dport, seq, ack, flags, window, (doff >> 4) * 4) == (
                row.sport, row.dport, row.seq, row.ack, row.flags, row.window, row.header_len)
            assert 20 <= row.header_len <= len(payload)
        else:
            assert row.proto == 17 and len(payload) >= 8
            assert struct.unpack_from("!HH", payload) == (row.sport, row.dport)
    return fast


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT)))
def test_decode_agrees_with_the_reference(path: Path) -> None:
    _check_decode(_frames(path))


def test_decode_takes_the_common_records() -> None:
    frames = _frames(ROOT / "samples" / "nats-basic.pcap")
    assert _check_decode(frames) == len(frames)


def _eth(payload: bytes, ethertype: int, vlans: tuple[int, ...]) -> bytes:
    head = b"\x02" * 6 + b"\x04" * 6
    if not vlans:
        return head + struct.pack("!H", ethertype) + payload
    inner = [0x8100] * (len(vlans) - 1) + [ethertype]  # each tag names what follows it
    tags = b"".join(struct.pack("!HH", v, nxt) for v, nxt in zip(vlans, inner, strict=True))
    return head + b"\x81\x00" + tags + payload


def tcp_packet(v6: bool, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int,
               flags: int, data: bytes = b"", window: int = 65535, options: bytes = b"",
               vlans: tuple[int, ...] = ()) -> bytes:
    """An Ethernet frame (VLAN tags if any) with an IPv4 or IPv6 TCP segment."""
    options += b"\x00" * (-len(options) % 4)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq % (1 << 32), ack % (1 << 32),
                      (5 + len(options) // 4) << 4, flags, window, 0, 0) + options + data
    if v6:
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(tcp), 6, 64, src, dst)
        return _eth(ip + tcp, 0x86DD, vlans)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, src, dst)
    return _eth(ip + tcp, 0x0800, vlans)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_decode_of_damaged_frames_agrees(data) -> None:
    """Frames cut, with bytes changed, odd header lengths, tags and versions."""
    v6 = data.draw(st.booleans())
    src = bytes(16 if v6 else 4)
    vlans = tuple(data.draw(st.lists(st.integers(0, 4095), max_size=3)))
    frame = tcp_packet(v6, src, src, 1, 2, 3, 4, ACK, data.draw(st.binary(max_size=40)),
                       vlans=vlans)
    raw = bytearray(frame)
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[:data.draw(st.integers(0, len(raw)))]
    lt = data.draw(st.sampled_from((1, 1, 1, 101, 228, 229, 113, 276, 0, 108, 9)))
    if lt != 1:  # the same bytes after another link header (or none)
        raw = raw[14 + 4 * len(vlans):]
    _check_decode([Frame(1, T0, lt, bytes(raw), len(raw), 0)])


_OPTION = st.one_of(
    st.just(b"\x00"), st.just(b"\x01"),  # end of list, no-op
    st.binary(min_size=1, max_size=1).map(lambda s: b"\x03\x03" + s),  # window scale
    st.tuples(st.integers(0, 255), st.binary(max_size=12)).map(
        lambda o: bytes([o[0], len(o[1]) + 2]) + o[1]),  # any option, its length right
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=44), st.lists(_OPTION, max_size=8).map(b"".join)),
       st.integers(0, 3))
def test_wscale_in_c_is_the_reference(options: bytes, cut: int) -> None:
    """``_engine.wscale`` (what the flow table reads of a SYN) answers as the Python
    ``_wscale_option``, its definition: well-formed option lists, cut ones, any bytes."""
    from reassembly.flows import _wscale_option

    options = options[:len(options) - cut] if cut < len(options) else options
    assert native._engine.wscale(options) == _wscale_option(options)
    assert native._engine.wscale(memoryview(options)) == _wscale_option(memoryview(options))


# -- record walk --------------------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p in CORPUS if _is_pcap(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_pcap_walk_gives_the_readers_frames(path: Path) -> None:
    want = [tuple(f) for f in _frames(path)]
    got = [batch.frame(i) for batch in native.pcap_batches(path, max_records=7)
           for i in range(len(batch))]
    assert got == want


def test_pcap_walk_reads_compressed_captures(tmp_path) -> None:
    """gzip and zstd captures are walked from their decompressed bytes, in batches that
    straddle the reads."""
    import gzip

    import zstandard

    path = ROOT / "samples" / "nats-basic.pcap"
    raw = path.read_bytes()
    gz, zst = tmp_path / "c.pcap.gz", tmp_path / "c.pcap.zst"
    gz.write_bytes(gzip.compress(raw))
    zst.write_bytes(zstandard.ZstdCompressor().compress(raw))
    want = [tuple(f) for f in _frames(path)]
    for packed in (gz, zst):
        got = [b.frame(i) for b in native.pcap_batches(packed, max_records=5)
               for i in range(len(b))]
        assert got == want


def test_pcap_walk_stops_where_the_reader_reports_damage(tmp_path) -> None:
    """A record claiming a caplen over the limit, then a record cut at the end: the walk
    yields the good frames before each and stops (the reader reports the damage)."""
    raw = (ROOT / "samples" / "nats-basic.pcap").read_bytes()
    first = 24 + 16 + struct.unpack_from("<I", raw, 24 + 8)[0]  # end of record 1
    bad = bytearray(raw)
    struct.pack_into("<II", bad, first + 8, 300_000_000, 300_000_000)
    for data in (bytes(bad), raw[:-3]):
        path = tmp_path / "damaged.pcap"
        path.write_bytes(data)
        want = [tuple(f) for f in _frames(path)]
        got = [b.frame(i) for b in native.pcap_batches(path) for i in range(len(b))]
        assert got == want and want


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_pcap_walk_of_generated_files(tmp_path, data) -> None:
    """Both byte orders, µs/ns and the "modified" variant, header versions before, at
    and after 2.3 (caplen/len swapped, maybe, or not), snaplens, odd caplens, a cut
    end: the walk yields the reader's frames, in batches of any size."""
    order = data.draw(st.sampled_from("<>"))
    magic = data.draw(st.sampled_from([0xA1B2C3D4, 0xA1B23C4D, 0xA1B2CD34]))
    version = data.draw(st.sampled_from([(2, 4), (2, 3), (2, 2), (1, 0)]))
    snaplen = data.draw(st.sampled_from([0, 64, 65535, 300_000, 1 << 30]))
    linktype = data.draw(st.sampled_from([1, 101, 0x10001, 113]))
    out = struct.pack(order + "IHHiIII", magic, *version, 0, 0, snaplen, linktype)
    rec_len = 24 if magic == 0xA1B2CD34 else 16
    for _ in range(data.draw(st.integers(0, 12))):
        body = data.draw(st.binary(max_size=80))
        orig = len(body) + data.draw(st.sampled_from([0, 0, 3, -1]))
        first, second = (len(body), max(orig, 0))
        if version < (2, 3) or (version == (2, 3) and data.draw(st.booleans())):
            first, second = second, first
        if data.draw(st.integers(0, 30)) == 0:
            first = 300_000  # over the limit of small snaplens
        out += struct.pack(order + "IIII", data.draw(st.integers(0, (1 << 32) - 1)),
                           data.draw(st.integers(0, (1 << 32) - 1)), first, second)
        out += b"\x00" * (rec_len - 16) + body
    out = out[:len(out) - data.draw(st.integers(0, 5))]
    path = tmp_path / "gen.pcap"
    path.write_bytes(out)
    want = [tuple(f) for f in _frames(path)]
    if not _is_pcap(path) or len(out) < 24:
        return
    batch = data.draw(st.integers(1, 5))
    got = [b.frame(i) for b in native.pcap_batches(path, max_records=batch)
           for i in range(len(b))]
    assert got == want


# -- engine -----------------------------------------------------------------------------


def _key(event: object) -> tuple:
    """An event as comparable values (its flow by id: the objects differ by run)."""
    values = []
    for name in type(event).__slots__:  # type: ignore[attr-defined]
        value = getattr(event, name)
        if name == "flow" and value is not None:
            value = value.flow_id
        values.append((name, value))
    return (type(event).__name__, *values)


def _expanded(events: list) -> list:
    out: list = []
    for event in events:
        if isinstance(event, native.CoalescedData):
            parts = event.split()
            assert len(parts) > 1 and event.data == b"".join(p.data for p in parts)
            out.extend(parts)
        else:
            out.append(event)
    return out


def _half_state(half: object) -> tuple:
    """Everything a direction's state holds but its links to the flow and the run."""
    if half is None:
        return (None,)
    values = []
    for name in type(half).__slots__:  # type: ignore[attr-defined]
        if name in ("flow", "limits", "emit"):
            continue
        value = getattr(half, name)
        if name in ("pieces", "held"):
            value = [(p.start, p.data, p.ts_ns, p.frame) for p in value]
        elif name == "recent":
            value = (bytes(value), getattr(value, "held", None))
        values.append((name, value))
    return (type(half).__name__, *values)


def _holder(holder: object) -> tuple:
    """A budget holder by what it is (the objects differ by run)."""
    half = getattr(holder, "half", None)  # an overlap-check window
    if half is not None:
        return ("window", half.flow.flow_id, int(half.direction))
    flow = getattr(holder, "flow", None)  # a reorder buffer
    if flow is not None:
        return ("buffer", flow.flow_id, int(holder.direction))  # type: ignore[attr-defined]
    return (type(holder).__name__,)


def _budget_state(ref: Reassembler) -> tuple | None:
    """The memory budget: totals and, per tier, its holders in order with their sizes."""
    budget = ref.limits.budget
    if budget is None:
        return None
    tiers = [[(_holder(h), n) for h, n in tier.items()] for tier in budget._tiers]
    return (budget.used, budget.peak, budget.releases, tiers)


def _table_state(ref: Reassembler) -> tuple:
    """The flow table, every flow's TCP state and the clock, where the reference's own
    decisions are read from (the end-of-capture flush is about to run)."""
    flows = ref.flows
    conns = sorted(flows._tcp_keys.values(), key=lambda c: c.info.flow_id)
    return (
        list(flows._open), list(flows._closing), list(flows._asleep), list(flows._udp),
        flows._ticks, sorted(flows._young_keys), dict(ref.network.counters), _budget_state(ref),
        vars(ref.clock) if hasattr(ref, "clock") else None,
        [(c.info.flow_id, repr(c.info), c.key, c.tick, c.fin, c.rst, c.closing, c.wscale,
          _half_state(c.c2s), _half_state(c.s2c)) for c in conns],
    )


def _state_at_finish(ref: Reassembler, into: list) -> None:
    """Record ``_table_state`` when ``ref.finish`` is called."""
    finish = ref.finish

    def snapshot():  # noqa: ANN202
        into.append(_table_state(ref))
        return finish()

    ref.finish = snapshot  # type: ignore[method-assign]


def _per_flow(events: list) -> dict:
    """Each flow's events in order (None: those of no flow)."""
    out: dict = {}
    for event in events:
        flow = getattr(event, "flow", None)
        out.setdefault(None if flow is None else flow.flow_id, []).append(_key(event))
    return out


def assert_engine_equal(batches_of, frames: list, limits: Limits | None = None,
                        coalesce: str = "adjacent", owns=None) -> native.NativeReassembler:
    """The reference's events and state over ``frames`` equal the native engine's over
    the batches ``batches_of()`` makes of them (``StreamDone`` events on, as the
    conveyor has them)."""
    ref = Reassembler(limits, owns)
    ref.flows.stream_done = True
    states: list = []
    _state_at_finish(ref, states)
    want = list(ref.process(frames))
    nat = native.NativeReassembler(limits, owns, coalesce=coalesce)
    nat.ref.flows.stream_done = True
    _state_at_finish(nat.ref, states)
    raw = list(nat.process(batches_of()))
    got = _expanded(raw)
    if coalesce == "flow":
        assert _per_flow(got) == _per_flow(want)
    else:
        assert [_key(e) for e in got] == [_key(e) for e in want]
    assert states[1] == states[0]
    flows_want = {e.flow.flow_id: e.flow for e in want if getattr(e, "flow", None) is not None}
    flows_got = {e.flow.flow_id: e.flow for e in got if getattr(e, "flow", None) is not None}
    assert flows_got == flows_want
    assert nat.ref.network.counters == ref.network.counters
    assert nat.ref.flows.counters == ref.flows.counters
    assert nat.ref.counters == ref.counters
    assert nat.ref.flows._ticks == ref.flows._ticks
    if coalesce == "none":
        assert not any(isinstance(e, native.CoalescedData) for e in raw)
    return nat


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT)))
def test_engine_gives_the_reference_events(path: Path) -> None:
    frames = _frames(path)
    if _is_pcap(path):
        assert_engine_equal(lambda: native.pcap_batches(path, max_records=64), frames)
    assert_engine_equal(lambda: native.frame_batches(frames, max_records=50), frames,
                        coalesce="none")
    assert_engine_equal(lambda: native.frame_batches(frames, max_records=300), frames,
                        coalesce="flow")


def test_engine_takes_the_bulk_of_a_nats_capture() -> None:
    path = ROOT / "samples" / "pulsar-client.pcap"
    nat = assert_engine_equal(lambda: native.pcap_batches(path), _frames(path))
    assert nat.counters["taken"] > 4 * nat.counters["reference"]


@pytest.mark.skipif(not os.environ.get("MSGCAP_BULK_CAPTURE"),
                    reason="MSGCAP_BULK_CAPTURE=path adds a bulk recording")
def test_engine_on_a_bulk_recording() -> None:
    path = Path(os.environ["MSGCAP_BULK_CAPTURE"])
    frames = _frames(path)
    for mode in ("adjacent", "flow"):
        assert_engine_equal(lambda: native.pcap_batches(path), frames, coalesce=mode)


@pytest.mark.parametrize("seed", range(12))
def test_engine_on_random_flow_soups(tmp_path, seed: int) -> None:
    """tests/reassembly/test_light_flows.py's soups: port reuse, eviction, idle expiry,
    linger, bad headers, UDP, against small limits."""
    path = tmp_path / "soup.pcap"
    write_random_capture(path, seed, packets=400)
    frames = _frames(path)
    assert_engine_equal(lambda: native.pcap_batches(path, max_records=32), frames, SMALL)
    assert_engine_equal(lambda: native.pcap_batches(path, max_records=32), frames, SMALL,
                        owns=lambda flow_id: flow_id % 2 == 1)


@pytest.mark.parametrize("seed", range(3))
def test_write_back_loops_are_the_reference_too(tmp_path, monkeypatch, seed: int) -> None:
    """``NativeReassembler._write_back`` and ``_effects``, the Python loops
    ``_engine.write_back`` and ``_engine.apply_effects`` (which every other test here
    runs) do in C, give the reference's flows and budget as well: soups with flows of
    this table's and light ones (``owns``), and a lossy capture (reorder buffers taken
    and drained, windows growing) under a tight budget."""
    monkeypatch.setattr(native.NativeReassembler, "compiled_sync", False)
    path = tmp_path / "soup.pcap"
    write_random_capture(path, seed, packets=400)
    frames = _frames(path)
    assert_engine_equal(lambda: native.pcap_batches(path, max_records=32), frames, SMALL)
    assert_engine_equal(lambda: native.pcap_batches(path, max_records=32), frames, SMALL,
                        owns=lambda flow_id: flow_id % 2 == 1)
    if seed == 0:
        path = tmp_path / "lossy.pcap"
        _write_lossy_bulk(path, seed=7)
        frames = _frames(path)
        for limits in (None, Limits(memory_limit_bytes=40_000)):
            assert_engine_equal(lambda: native.pcap_batches(path, max_records=16), frames,
                                limits)


def _write_short_flows(path: Path, flows: int, seed: int) -> None:
    """Many short connections one after another, a few at a time: handshake, a request
    and its answer, FINs; some left half-open, some SYNs repeated, some 4-tuples used
    again, a pause now and then (sweeps and idle expiry amid handshakes)."""
    rng = random.Random(seed)
    w = PcapWriter(path)
    server = bytes([10, 9, 9, 9])
    t = 1_700_000_000_000_000
    live: list[list] = []  # [client, port, c_seq, s_seq, step]
    for k in range(flows):
        client = bytes([10, 1, k >> 8 & 0xFF, k & 0xFF]) if rng.random() < 0.9 else bytes(
            [10, 1, 0, 1])  # the last: a 4-tuple met again (port reuse, repeats)
        live.append([client, 1024 + rng.randrange(64), rng.randrange(1 << 32),
                     rng.randrange(1 << 32), 0])
        while live and (len(live) > 3 or k == flows - 1):
            conn = live[rng.randrange(len(live))]
            c, port, cs, ss, step = conn
            t += rng.choice((3, 40, 900, 20_000, 400_000, 1_300_000))
            if step == 0:
                w.write(t, tcp_frame(c, server, port, 4222, cs, 0, SYN))
                if rng.random() < 0.15:  # half-open: a SYN flood's flow
                    live.remove(conn)
                elif rng.random() < 0.1:  # repeated
                    w.write(t + 1, tcp_frame(c, server, port, 4222, cs, 0, SYN))
            elif step == 1:
                w.write(t, tcp_frame(server, c, 4222, port, ss, cs + 1, SYN | ACK))
            elif step == 2:
                w.write(t, tcp_frame(c, server, port, 4222, cs + 1, ss + 1, ACK))
            elif step == 3:
                w.write(t, tcp_frame(c, server, port, 4222, cs + 1, ss + 1, ACK | PSH, b"ping"))
            elif step == 4:
                w.write(t, tcp_frame(server, c, 4222, port, ss + 1, cs + 5, ACK | PSH, b"pong!"))
            elif step == 5:
                w.write(t, tcp_frame(c, server, port, 4222, cs + 5, ss + 6, FIN | ACK))
            elif step == 6:
                w.write(t, tcp_frame(server, c, 4222, port, ss + 6, cs + 6, FIN | ACK))
            else:
                w.write(t, tcp_frame(c, server, port, 4222, cs + 6, ss + 7, ACK))
                live.remove(conn)
            conn[4] = step + 1
    w.close()


@pytest.mark.parametrize("limits", [
    Limits(max_flows=50), Limits(max_flows=5000, memory_limit_bytes=24_000),
    Limits(max_flows=12, tcp_idle_timeout_ns=SECOND_NS, closed_linger_ns=SECOND_NS // 2)],
    ids=["flow-cap", "budget", "idle"])
def test_engine_on_new_flows_past_the_caps(tmp_path, monkeypatch, limits: Limits) -> None:
    """The records the C core hands the flow table without the Python decode
    (``Engine.handshakes``: SYN, FIN, RST, and the plain ACK a stretch stopped at:
    ``lead_rows``) give the reference's events and state: a SYN flood evicting at the
    flow cap or by the memory budget, and many short connections (port reuse, repeated
    SYNs, sweeps and idle expiry amid handshakes), with and without ``lead_rows``."""
    flood = tmp_path / "flood.pcap"
    write_syn_flood(flood, 600)
    nat = assert_engine_equal(lambda: native.pcap_batches(flood, max_records=100),
                              _frames(flood), limits)
    assert nat.counters["reference"] == 600 and not nat.counters["taken"]
    short = tmp_path / "short.pcap"
    _write_short_flows(short, 250, seed=len(str(limits)))
    frames = _frames(short)
    nat = assert_engine_equal(lambda: native.pcap_batches(short, max_records=64), frames, limits)
    assert nat.counters["taken"] > 0
    assert_engine_equal(lambda: native.pcap_batches(short, max_records=64), frames, limits,
                        coalesce="flow", owns=lambda flow_id: flow_id % 3 != 1)
    # the frames decoded in Python (``_reference_frame``): with ``lead_rows`` only those
    # a tick or the link type sends there (here many pauses), no plain ACK stopped at
    stepped: list[bool] = []
    through = native.NativeReassembler._reference_frame

    def counted(self: native.NativeReassembler, frame: Frame) -> None:
        stepped.append(self.lead_rows)
        through(self, frame)

    monkeypatch.setattr(native.NativeReassembler, "_reference_frame", counted)
    monkeypatch.setattr(native.NativeReassembler, "lead_rows", False)
    assert_engine_equal(lambda: native.pcap_batches(short, max_records=64), frames, limits)
    monkeypatch.setattr(native.NativeReassembler, "lead_rows", True)
    assert_engine_equal(lambda: native.pcap_batches(short, max_records=64), frames, limits)
    assert 3 * stepped.count(True) < 2 * stepped.count(False)


def test_a_sweep_reviews_the_flows_it_touched_not_every_flow(tmp_path, monkeypatch) -> None:
    """A sweep comes every second of capture time; the C core's copy of the flows is
    reviewed for the ones the sweep slept or ended (``FlowTable.swept``), not for every
    flow: 300 connections left open, then 60 short ones one every 10 s (600 s of
    capture; a sweep at each of their handshakes).  Reviewing every flow after each
    sweep made 10,140 reviews for these 1,620 frames (and 5,000 open connections with
    600 short ones over 600 s took 7.6 s against 1.5 s now); the events and state are
    the reference's either way."""
    from samples.hostile.generate import Conversation

    path = tmp_path / "trickle.pcap"
    w = PcapWriter(path)
    t0 = 1_700_000_000_000_000
    for i in range(300):
        Conversation(w, 40000 + i, 4222, client=bytes([10, 1, i >> 8, i & 255]),
                     t_us=t0 + i * 100).handshake().send(0, b"CONNECT {}\r\n")
    for j in range(60):
        Conversation(w, 30000 + j, 4222, client=bytes([10, 2, 0, j]),
                     t_us=t0 + 1_000_000 + j * 10_000_000).handshake().send(
            0, b"PING\r\n").send(1, b"PONG\r\n").fin()
    w.close()
    frames = _frames(path)
    reviews = [0]
    review = native.NativeReassembler._review

    def counted(self: native.NativeReassembler, conn) -> None:
        reviews[0] += 1
        review(self, conn)

    monkeypatch.setattr(native.NativeReassembler, "_review", counted)
    assert_engine_equal(lambda: native.pcap_batches(path, max_records=64), frames)
    assert reviews[0] < 3 * len(frames), (reviews[0], len(frames))


# -- hypothesis segment streams -----------------------------------------------------------

_PERTURB = st.sampled_from(
    ["none"] * 8 + ["swap", "duplicate", "overlap", "drop", "retransmit", "ack-only",
                    "window", "pause", "untimed", "fin", "rst", "keepalive"])


@st.composite
def segment_streams(draw) -> tuple[list[bytes], list[int], Limits]:
    """A few TCP connections, mostly in order, interleaved, each segment possibly
    perturbed; returns the frames, their times and the limits to run them under."""
    rng = random.Random(draw(st.integers(0, 1 << 30)))
    nconn = draw(st.integers(1, 4))
    conns = []
    for i in range(nconn):
        v6 = draw(st.booleans())
        size = 16 if v6 else 4
        conns.append({
            "v6": v6,
            "c": bytes([10] + [0] * (size - 2) + [1 + i]),
            "s": bytes([10] + [0] * (size - 2) + [100]),
            "cport": 40000 + i % 2,  # two connections may share a 4-tuple: port reuse
            "vlans": tuple(draw(st.lists(st.integers(0, 4095), max_size=2))),
            "seq": [draw(st.integers(0, (1 << 32) - 1)), draw(st.integers(0, (1 << 32) - 1))],
            "wscale": draw(st.sampled_from([None, 0, 7])),
            "handshake": draw(st.booleans()),
        })
    frames: list[bytes] = []
    times: list[int] = []
    t = T0

    def put(conn: dict, d: int, seq: int, ack: int, flags: int, data: bytes = b"",
            window: int = 65535, options: bytes = b"") -> None:
        src, dst = (conn["c"], conn["s"]) if d == 0 else (conn["s"], conn["c"])
        sp, dp = (conn["cport"], 4222) if d == 0 else (4222, conn["cport"])
        frames.append(tcp_packet(conn["v6"], src, dst, sp, dp, seq, ack, flags, data, window,
                                 options, conn["vlans"]))
        times.append(t)

    for conn in conns:
        if conn["handshake"]:
            opt = b"" if conn["wscale"] is None else bytes([1, 3, 3, conn["wscale"]])
            put(conn, 0, conn["seq"][0] - 1, 0, SYN, options=opt)
            put(conn, 1, conn["seq"][1] - 1, conn["seq"][0], SYN | ACK, options=opt)
            put(conn, 0, conn["seq"][0], conn["seq"][1], ACK)
    for _ in range(draw(st.integers(1, 60))):
        conn = rng.choice(conns)
        d = rng.randrange(2)
        t += rng.choice((1, 1000, 50_000))
        seq, ack = conn["seq"][d], conn["seq"][1 - d]
        data = rng.randbytes(rng.choice((1, 5, 100, 1400)))
        how = draw(_PERTURB)
        if how == "swap" and len(frames) > 1:
            put(conn, d, seq, ack, ACK | PSH, data)
            frames[-1], frames[-2] = frames[-2], frames[-1]
        elif how == "duplicate":
            put(conn, d, seq, ack, ACK | PSH, data)
            put(conn, d, seq, ack, ACK | PSH, data)
        elif how == "overlap":
            put(conn, d, seq, ack, ACK | PSH, data)
            put(conn, d, seq + len(data) // 2, ack, ACK | PSH, rng.randbytes(len(data)))
            conn["seq"][d] = seq + len(data) // 2 + len(data)
            continue
        elif how == "drop":
            pass  # a gap: the bytes are never sent
        elif how == "retransmit":
            put(conn, d, seq - len(data), ack, ACK | PSH, data)
            continue
        elif how == "ack-only":
            put(conn, d, seq, ack + rng.choice((0, 0, 10, 100_000)), ACK)
            continue
        elif how == "window":
            put(conn, d, seq, ack, ACK, window=rng.choice((0, 1, 512)))
            continue
        elif how == "pause":
            t += rng.choice((2, 6, 20)) * SECOND_NS
            put(conn, d, seq, ack, ACK | PSH, data)
        elif how == "untimed":
            t_saved = t
            t = 0
            put(conn, d, seq, ack, ACK | PSH, data)
            t = t_saved
        elif how == "fin":
            put(conn, d, seq, ack, FIN | ACK, data)
            conn["seq"][d] = seq + len(data) + 1
            continue
        elif how == "rst":
            put(conn, d, seq, ack, RST | ACK)
            continue
        elif how == "keepalive":
            put(conn, d, seq - 1, ack, ACK, b"\x00")
            continue
        else:
            put(conn, d, seq, ack, ACK | PSH, data)
        conn["seq"][d] = seq + len(data)
    limits = draw(st.sampled_from([
        Limits(),
        SMALL,
        Limits(max_flows=2, overlap_check_bytes=64, tcp_idle_timeout_ns=5 * SECOND_NS),
        Limits(overlap_check_bytes=0, max_buffered_segments=2),
        # the budget reached: windows dropped, buffers flushed, flows evicted
        Limits(memory_limit_bytes=6_000, overlap_check_bytes=2048),
    ]))
    return frames, times, limits


def _write(path: Path, frames: list[bytes], times: list[int]) -> None:
    w = PcapWriter(path)
    for frame, t in zip(frames, times, strict=True):
        w.write(t // 1000, frame)
    w.close()


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(segment_streams(), st.integers(1, 40), st.sampled_from(native.COALESCE_MODES),
       st.sampled_from([None, 2, 3]))
def test_engine_on_generated_segment_streams(tmp_path, stream, batch, coalesce, split) -> None:
    """``split``: a worker's share (``flow_id % split == 0``): the other flows are light."""
    frames, times, limits = stream
    path = tmp_path / "stream.pcap"
    _write(path, frames, times)
    owns = None if split is None else (lambda flow_id: flow_id % split == 0)
    assert_engine_equal(lambda: native.pcap_batches(path, max_records=batch), _frames(path),
                        limits, coalesce, owns)


def test_flow_coalescing_joins_round_robin_flows(tmp_path) -> None:
    """Two connections sending in turn: adjacent coalescing cannot join anything, per
    flow it makes one chunk per flow direction and stretch."""
    from tests.reassembly.synth import tcp_frame

    path = tmp_path / "rr.pcap"
    w = PcapWriter(path)
    a, b, s = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 3]), bytes([10, 0, 0, 2])
    for n in range(40):
        c, port = (a, 40000) if n % 2 else (b, 40001)
        seq = 1000 + (n // 2) * 10
        w.write(1_700_000_000_000_000 + n, tcp_frame(c, s, port, 4222, seq, 7, ACK | PSH,
                                                     b"0123456789"))
    w.close()
    frames = _frames(path)
    adjacent = assert_engine_equal(lambda: native.pcap_batches(path), frames)
    per_flow = assert_engine_equal(lambda: native.pcap_batches(path), frames, coalesce="flow")
    assert adjacent.counters["taken"] == per_flow.counters["taken"] > 30
    events = list(native.NativeReassembler(coalesce="flow").process(native.pcap_batches(path)))
    coalesced = [e for e in events if isinstance(e, native.CoalescedData)]
    assert len(coalesced) == 2 and sum(len(e.segments) for e in coalesced) // 24 > 30


def _write_lossy_bulk(path: Path, seed: int) -> int:
    """Two connections sending 1,400-byte segments in turn, the receiver ACKing every
    eight with the sender's next sequence number, and packets the capture lost: a data
    segment now and then (a hole, the segments after it out of order until the next
    ACK proves it), sometimes two close together, sometimes retransmitted before the
    ACK (it fills the hole), and now and then an ACK.  Returns the segments sent after
    a hole and before the ACK that proves it (what the reference buffers)."""
    rng = random.Random(seed)
    w = PcapWriter(path)
    s = bytes([10, 0, 0, 2])
    conns = [[bytes([10, 0, 0, 1 + i]), 40000 + i, rng.randrange(1 << 32), rng.randrange(1 << 32),
              0, None] for i in range(2)]  # client, port, seq, peer seq, unacked, lost seq
    t = T0
    behind = 0
    for conn in conns:
        c, port, seq, pseq = conn[:4]
        w.write(t // 1000, tcp_frame(c, s, port, 4222, seq - 1, 0, SYN))
        w.write(t // 1000 + 1, tcp_frame(s, c, 4222, port, pseq - 1, seq, SYN | ACK))
        w.write(t // 1000 + 2, tcp_frame(c, s, port, 4222, seq, pseq, ACK))
        t += 10_000
    for n in range(600):
        conn = conns[n % 2]
        c, port, seq, pseq, unacked, lost = conn
        t += 7_000
        data = rng.randbytes(1400)
        if rng.random() < 0.06:
            conn[5] = lost if lost is not None else (seq, data)  # not in the capture
        else:
            w.write(t // 1000, tcp_frame(c, s, port, 4222, seq, pseq, ACK | PSH, data))
            behind += lost is not None
        if lost is not None and rng.random() < 0.1:  # the sender's retransmission
            w.write(t // 1000 + 1, tcp_frame(c, s, port, 4222, lost[0], pseq, ACK, lost[1]))
            conn[5] = None
        conn[2] = seq + 1400
        conn[4] = unacked + 1
        if conn[4] == 8:
            conn[4] = 0
            conn[5] = None
            if rng.random() < 0.95:
                w.write(t // 1000 + 2, tcp_frame(s, c, 4222, port, pseq, conn[2], ACK))
    w.close()
    return behind


@pytest.mark.parametrize("limits", [
    None, Limits(max_buffered_segments=3), Limits(memory_limit_bytes=40_000)],
    ids=["default", "few-pieces", "budget"])
def test_engine_on_holes_followed_by_many_segments(tmp_path, monkeypatch,
                                                   limits: Limits | None) -> None:
    """A capture that lost packets (``_write_lossy_bulk``): the C core takes the
    segments after a hole into the reorder buffer and the ACK that proves the hole (the
    gap, then the pieces), and hands the reference what fills a hole, what proves one
    it did not buffer whole, or what would pass the buffer's limits or the budget's
    room; events and state (the budget's holders, sizes and peak too) are the
    reference's in every mode."""
    path = tmp_path / "lossy.pcap"
    behind = _write_lossy_bulk(path, seed=7)
    frames = _frames(path)
    handed = []
    for mode in native.COALESCE_MODES:
        for batch in (16, 5000):
            nat = assert_engine_equal(lambda b=batch: native.pcap_batches(path, max_records=b),
                                      frames, limits, mode)
            handed.append(nat.counters["reference"])
    if limits is None:  # the segments behind the holes were the C core's
        monkeypatch.setattr(native.NativeReassembler, "take_pieces", False)
        nat = assert_engine_equal(lambda: native.pcap_batches(path), frames)
        assert behind > 50 and nat.counters["reference"] > behind
        assert max(handed) < nat.counters["reference"] // 3


# -- wiring: capture_events ----------------------------------------------------------------


def _capture_run(path: Path) -> tuple[list, tuple]:
    """``capture_events`` over ``path``: its events and the reader's facts after."""
    from reassembly.engine import capture_events

    with open_capture(path) as reader:
        events = [_key(e) for e in capture_events(reader)]
        info = reader.info
        facts = (info.packets, info.sha256, [(d.offset, d.reason, d.frame) for d in info.damage])
    return events, facts


def _spy(monkeypatch) -> list:
    """The ``NativeReassembler``s made from now on."""
    made: list = []

    class Spy(native.NativeReassembler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(native, "NativeReassembler", Spy)
    return made


@pytest.mark.parametrize("path", [p for p in CORPUS if _is_pcap(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_capture_events_are_the_same_with_the_engine_off(path: Path, monkeypatch) -> None:
    """The whole-file path (layers above TCP, damage, digest) with the engine on equals
    ``MSGCAP_NATIVE_ENGINE=0``; the engine ran."""
    made = _spy(monkeypatch)
    got = _capture_run(path)
    assert len(made) == 1
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert _capture_run(path) == got
    assert len(made) == 1


def test_capture_events_of_damaged_and_compressed_files(tmp_path, monkeypatch) -> None:
    """The reader reports the damage where the C walk stops, and hashes the file, as
    without the engine; gzip is walked from the reader's decompressed stream."""
    import gzip

    raw = (ROOT / "samples" / "nats-basic.pcap").read_bytes()
    first = 24 + 16 + struct.unpack_from("<I", raw, 24 + 8)[0]
    bad = bytearray(raw)
    struct.pack_into("<II", bad, first + 8, 300_000_000, 300_000_000)
    made = _spy(monkeypatch)
    for name, data in (("over.pcap", bytes(bad)), ("cut.pcap", raw[:-3]),
                       ("header.pcap", raw[:24 + 9]), ("z.pcap.gz", gzip.compress(raw))):
        path = tmp_path / name
        path.write_bytes(data)
        monkeypatch.delenv(native.ENV_SWITCH, raising=False)
        got = _capture_run(path)
        monkeypatch.setenv(native.ENV_SWITCH, "0")
        assert _capture_run(path) == got, name
        assert got[1][1] and (got[1][2] or name.endswith(".gz")), name
    assert len(made) == 4


def test_dissect_runs_the_engine(tmp_path, monkeypatch) -> None:
    """``msgcap dissect``'s path (the one tests/analyzer/test_golden.py checks) takes
    the bulk of a sample's packets in C, so the golden test is not running the
    reference alone."""
    from analyzer.pipeline import Options, dissect_capture

    made = _spy(monkeypatch)
    dissect_capture(ROOT / "samples" / "pulsar-client.pcap", tmp_path / "out", Options())
    assert len(made) == 1
    assert made[0].counters["taken"] > 4 * made[0].counters["reference"]


# -- the conveyor: CoalescedData fed to sessions whole --------------------------------------


def _ordered_tables(out: Path) -> dict:
    """Every table of a dataset as its rows in file order (ids and order compared, not
    just the sorted rows ``tests/analyzer/golden_tables`` hashes)."""
    import pyarrow.parquet as pq

    from tests.analyzer.golden_tables import _plain

    tables = {}
    for tdir in sorted(p for p in out.iterdir() if p.is_dir()):
        rows = []
        for f in sorted(tdir.glob("*/*.parquet")):
            rows += [_plain(r) for r in pq.read_table(f).to_pylist()]
        tables[tdir.name] = rows
    return tables


def _feeds(monkeypatch) -> dict:
    """Counts of ``FramedSession.feed_chunks`` calls and the segments they carried."""
    from dissectors.sessions import FramedSession

    seen = {"calls": 0, "segments": 0}
    original = FramedSession.feed_chunks

    def counted(self, direction, data, span, chunks):
        seen["calls"] += 1
        seen["segments"] += len(chunks)
        return original(self, direction, data, span, chunks)

    monkeypatch.setattr(FramedSession, "feed_chunks", counted)
    return seen


def _dissect(path: Path, out: Path, **options) -> dict:
    from analyzer.pipeline import Options, dissect_capture

    dissect_capture(path, out, Options(strict=True, validate=True, **options))
    return _ordered_tables(out)


@pytest.mark.parametrize("seed,burst,conns", [(1, 12, 4), (2, 3, 4), (3, 40, 1)])
def test_sessions_take_coalesced_runs_whole(tmp_path, monkeypatch, seed: int, burst: int,
                                            conns: int) -> None:
    """A capture where connections send several segments in a row: the conveyor feeds
    the engine's runs to the sessions in one call each (counted), and every table, row
    order and record id included, equals the reference's (``MSGCAP_NATIVE_ENGINE=0``)
    and the engine's one-event-per-segment output (``chunks=False``)."""
    import reassembly.engine
    from tests.perf.nats_bulk import write_bulk

    path = tmp_path / "bulk.pcap"
    write_bulk(path, 600_000, seed, burst=burst, max_payload=3000 * seed, publishers=conns,
               subscribers=(conns + 1) // 2)
    seen = _feeds(monkeypatch)
    got = _dissect(path, tmp_path / "chunks")
    assert seen["calls"] >= 5 and seen["segments"] > 2 * seen["calls"]
    assert sum(len(rows) for rows in got.values()) > 100
    calls = seen["calls"]
    plain = reassembly.engine.capture_events

    def per_segment(*args, chunks=False, **kwargs):
        return plain(*args, **kwargs)

    monkeypatch.setattr("analyzer.pipeline.capture_events", per_segment)
    assert _dissect(path, tmp_path / "segments") == got
    assert seen["calls"] == calls  # that run fed no run whole
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert _dissect(path, tmp_path / "reference") == got


def test_coalesced_runs_of_flows_nobody_decodes(tmp_path, monkeypatch) -> None:
    """NATS traffic with only the Pulsar dissector registered: the flows stay unclaimed,
    their runs are dropped whole once detection gave up (not split into segments for
    the detector), and the flows table counts their bytes undecoded as the reference."""
    from analyzer.detect import Detector
    from analyzer.pipeline import Options, dissect_capture
    from dissectors.pulsar import PulsarDissector
    from dissectors.registry import Registry
    from tests.perf.nats_bulk import write_bulk

    path = tmp_path / "bulk.pcap"
    write_bulk(path, 600_000, 4)
    calls = {"n": 0}
    original = Detector.data

    def counted(self, *args):
        calls["n"] += 1
        return original(self, *args)

    monkeypatch.setattr(Detector, "data", counted)
    registry = Registry()
    registry.add(PulsarDissector)

    def dissect(out: Path) -> dict:
        calls["n"] = 0
        dissect_capture(path, out, Options(strict=True, validate=True), registry)
        return _ordered_tables(out)

    got = dissect(tmp_path / "chunks")
    with_chunks = calls["n"]
    assert all(f["protocol"] is None and f["undecoded_bytes_c2s"] > 0 for f in got["flows"])
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert dissect(tmp_path / "reference") == got
    assert 2 * with_chunks < calls["n"]  # (the rest: segments seen before detection gave up)


def test_coalesced_runs_under_a_tight_memory_budget(tmp_path, monkeypatch) -> None:
    """A budget that makes holders give memory back: the conveyor feeds a run whole only
    when the budget has room for all of it (else its segments), so the ``limit.memory``
    anomalies and every other row are those of the reference."""
    from reassembly.flows import FLOW_BYTES, LIGHT_FLOW_BYTES
    from reassembly.limits import Limits
    from tests.perf.nats_bulk import write_bulk

    path = tmp_path / "bulk.pcap"
    write_bulk(path, 1_500_000, 5)
    seen = _feeds(monkeypatch)
    # 100,000 bytes when a flow was charged LIGHT_FLOW_BYTES: the same room beside the
    # charge of the capture's six flows
    limits = Limits(memory_limit_bytes=100_000 + 6 * (FLOW_BYTES - LIGHT_FLOW_BYTES))
    got = _dissect(path, tmp_path / "chunks", limits=limits)
    assert seen["calls"] > 20
    assert any(row["kind"] == "limit.memory" for row in got["anomalies"])
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert _dissect(path, tmp_path / "reference", limits=limits) == got


@pytest.mark.parametrize("path", [p for p in CORPUS if _is_pcap(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_capture_events_with_chunks_stand_for_the_same_events(path: Path) -> None:
    """``capture_events(chunks=True)``: the ``CoalescedData`` that come through the QUIC,
    TLS and WebSocket layers, split in place, give ``capture_events()``'s events (a layer
    splits a run of a flow it owns or may still take, and passes the others on), the
    runs handed past the layers (``reassembly.passing``) included; key logs are used
    where a sample has one, so TLS is decrypted."""
    from reassembly.engine import capture_events
    from reassembly.quic.keylog import KeyLog

    keys = path.with_suffix(".keys")

    def run(**kw: bool) -> list:
        keylog = KeyLog.from_file(str(keys)) if keys.exists() else None
        with open_capture(path) as reader:
            return list(capture_events(reader, None, keylog, **kw))

    plain = [_key(e) for e in run()]
    assert [_key(e) for e in _expanded(run(chunks=True))] == plain


def test_maker_makes_what_the_class_makes() -> None:
    """``native.maker``: the C constructor of ``StreamData`` (a frozen slots dataclass with
    a default) and ``Span`` (a NamedTuple) makes objects equal to the class's own, still
    frozen; a class it cannot make so (a dataclass with ``__post_init__``, no slots) is
    returned as it is."""
    import dataclasses

    from reassembly.events import Direction, StreamData, StreamGap
    from reassembly.provenance import Span

    if not hasattr(native._engine, "Maker"):
        pytest.skip("engine built without Maker")
    make = native.maker(StreamData)
    assert make is not StreamData
    args = (object(), Direction.S2C, 5, b"abc", 1, 2, 3, 4)
    assert make(*args) == StreamData(*args) and make(*args, 7) == StreamData(*args, 7)
    assert type(make(*args)) is StreamData and make(*args).stream_id is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        make(*args).offset = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        make(*args[:-1])
    assert native.maker(Span)(1, 2, 3, 4, 5) == Span(1, 2, 3, 4, 5)
    assert type(native.maker(Span)(1, 2, 3, 4, 5)) is Span
    gap = native.maker(StreamGap)(None, Direction.C2S, 1, 2, 3, 4, "x")
    assert gap == StreamGap(None, Direction.C2S, 1, 2, 3, 4, "x")

    @dataclasses.dataclass(slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            assert self.a > 0

    @dataclasses.dataclass
    class Plain:
        a: int

    assert native.maker(Checked) is Checked and native.maker(Plain) is Plain


def test_window_slide_in_c_is_the_reference() -> None:
    """``_engine.slide`` leaves every direction's overlap-check window as
    ``NativeReassembler._slide_windows`` (its definition) does, over random stretches of
    runs: gaps, several runs a direction, windows not made yet, full or empty."""
    import copy

    from reassembly.tcp import _Window

    if native._slide is None:
        pytest.skip("engine built without slide")

    class Obj:  # a flow's ``_Tcp`` / a ``TcpHalfStream``: the attributes slide reads
        def __init__(self, **kw: object) -> None:
            self.__dict__.update(kw)

    def state(conns: list) -> list:
        return [[(type(h.recent), bytes(h.recent), getattr(h.recent, "held", None),
                  getattr(h.recent, "half", None) is h) for h in (c.c2s, c.s2c)]
                for c in conns]

    rng = random.Random(7)
    for _ in range(400):
        conns = [Obj(c2s=Obj(keep=rng.choice((0, 4, 16, 64)), recent=b""),
                     s2c=Obj(keep=rng.choice((0, 4, 16, 64)), recent=b"")) for _ in range(3)]
        for half in (h for c in conns for h in (c.c2s, c.s2c)):
            if rng.random() < 0.5:
                window = half.recent = _Window(rng.randbytes(rng.randrange(half.keep + 1)))
                window.half, window.held = half, 256
        runs = [(None, rng.choice(conns), rng.randrange(2), 0,
                 None if rng.random() < 0.1 else rng.randbytes(rng.randrange(1, 40)), b"")
                for _ in range(rng.randrange(1, 12))]
        twins = copy.deepcopy(conns)
        index = {id(c): i for i, c in enumerate(conns)}
        native.NativeReassembler._slide_windows(runs)
        native._slide([(r[0], twins[index[id(r[1])]], *r[2:]) for r in runs], _Window)
        assert state(twins) == state(conns)


@pytest.mark.parametrize("limit", [None, 60_000])
def test_stretch_events_in_c_are_the_loops(monkeypatch, limit: int | None) -> None:
    """``_engine.events`` makes the events of a stretch (and places the budget charges
    among them) as ``NativeReassembler._stretch``'s Python loop does, joined per flow or
    not, under a budget that evicts or not."""
    if native._events is None:
        pytest.skip("engine built without events")
    path = Path(__file__).resolve().parents[2] / "samples" / "nats-s2-fast.pcap"
    for coalesce in ("adjacent", "flow"):
        got = []
        for compiled in (True, False):
            monkeypatch.setattr(native.NativeReassembler, "compiled_events", compiled)
            with open_capture(path, digest=False) as reader:
                engine = native.NativeReassembler(
                    None if limit is None else Limits(memory_limit_bytes=limit), coalesce=coalesce)
                held = []
                budget = engine.ref.limits.budget
                assert budget is not None
                events = []
                for ev in engine.process(native.reader_batches(reader)):
                    events.append(repr(ev))
                    held.append(budget.used)  # the charges made by each event
                got.append((events, held))
        assert got[0] == got[1]
