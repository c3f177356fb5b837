"""The native engine over pcapng files (reassembly/_pcapng_walk.c, ``native.reader_batches``,
``PcapngReader.walked``) against the Python reader and reference.

* every pcapng of the corpus: ``capture_events`` with the engine on equals
  ``MSGCAP_NATIVE_ENGINE=0`` (events, with and without coalesced chunks; frame count,
  digest, damage, secrets, interfaces, sections), the walked batches hold exactly the
  reader's frames and ``NativeReassembler`` over them equals the reference;
* a Decryption Secrets Block moved among the frames of a TLS capture: the keys reach
  the layers after the frames before the block, wherever it is (the outcome changes
  with the place, the engine's does alike);
* hypothesis-generated files: TCP segment streams written as Enhanced, Simple and
  obsolete Packet Blocks among blocks of every other kind (sections of either byte
  order, interfaces of every time scale and offset, secrets, name resolution,
  statistics, custom and unknown blocks, packets on undefined interfaces), whole,
  cut short or with a corrupt block.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reassembly import native
from reassembly.capture import Frame, open_capture
from reassembly.engine import capture_events
from reassembly.limits import Limits
from tests.perf.test_engine_native import (
    ACK,
    CORPUS,
    PSH,
    ROOT,
    SYN,
    _eth,
    _expanded,
    _frames,
    _is_format,
    _key,
    assert_engine_equal,
    segment_streams,
    tcp_packet,
)
from tests.reassembly.test_readers import block, dsb, epb, idb, opt, shb, spb

pytestmark = pytest.mark.skipif(
    not native.AVAILABLE or not hasattr(native._engine, "walk_pcapng"),
    reason="reassembly._engine not built with the pcapng walk")

TLSK = 0x544C534B


PCAPNG = [p for p in CORPUS if _is_format(p, "pcapng")]


@contextmanager
def _engine(on: bool) -> Iterator[None]:
    """``MSGCAP_NATIVE_ENGINE`` unset (on) or ``0`` (off) for the block's runs."""
    saved = os.environ.pop(native.ENV_SWITCH, None)
    if not on:
        os.environ[native.ENV_SWITCH] = "0"
    try:
        yield
    finally:
        os.environ.pop(native.ENV_SWITCH, None)
        if saved is not None:
            os.environ[native.ENV_SWITCH] = saved


def _run(path: Path, chunks: bool = False) -> tuple[list, tuple]:
    """``capture_events`` over ``path`` (chunks split): its events and the reader's facts."""
    with open_capture(path) as reader:
        events = list(capture_events(reader, chunks=chunks))
        info = reader.info
        facts = (info.packets, info.sha256, [(d.offset, d.reason, d.frame) for d in info.damage],
                 info.secrets, info.link_types, info.interface_ts_resolutions,
                 info.section_byte_orders, info.unknown_blocks)
    return [_key(e) for e in _expanded(events)], facts


def _walked(path: Path, max_records: int) -> tuple[list[Frame], int]:
    """The frames of the batches of ``reader_batches`` and how many the C walk took."""
    walked = 0
    out: list[Frame] = []
    real = native._engine.walk_pcapng

    def counting(*args):  # type: ignore[no-untyped-def]
        nonlocal walked
        run, last = real(*args)
        walked += len(run)
        return run, last

    native._engine.walk_pcapng = counting
    try:
        with open_capture(path) as reader:
            for batch in native.reader_batches(reader, max_records):
                out.extend(Frame(*batch.frame(i)) for i in range(len(batch)))
    finally:
        native._engine.walk_pcapng = real
    return out, walked


def assert_same_with_the_engine_off(path: Path, max_records: int = 5,
                                    limits: Limits | None = None) -> int:
    """Everything above, for one file (``limits``: of the ``NativeReassembler``
    comparison); returns how many frames the C walk took."""
    with _engine(True):
        made: list = []
        real = native.NativeReassembler

        class Spy(real):  # type: ignore[misc, valid-type]
            def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
                super().__init__(*args, **kwargs)
                made.append(self)

        native.NativeReassembler = Spy  # type: ignore[misc]
        try:
            on, chunked = _run(path), _run(path, chunks=True)
        finally:
            native.NativeReassembler = real  # type: ignore[misc]
        assert len(made) == 2
    with _engine(False):
        off = _run(path)
    assert on == off
    assert chunked == off
    frames = _frames(path)
    got, walked = _walked(path, max_records)
    assert got == frames
    assert_engine_equal(lambda: _batches(path, max_records), frames, limits)
    return walked


def _batches(path: Path, max_records: int) -> Iterator:
    with open_capture(path, digest=False) as reader:
        yield from native.reader_batches(reader, max_records)


@pytest.mark.parametrize("path", PCAPNG, ids=lambda p: str(p.relative_to(ROOT)))
def test_pcapng_capture_events_are_the_same_with_the_engine_off(path: Path) -> None:
    assert_same_with_the_engine_off(path)


def test_the_walk_takes_the_corpus_packet_blocks() -> None:
    """The C walk, not the reader, reads the packet blocks (all 83 EPBs of a file whose
    first frame follows a DSB and an IDB; 6 on two interfaces of another)."""
    captures = ROOT / "tests" / "data" / "captures"
    assert _walked(captures / "ja4" / "chrome-cloudflare-quic-with-secrets.pcapng", 64)[1] == 83
    assert _walked(captures / "zeek" / "pcapng-multi-interface.pcapng", 64)[1] == 6


def _blocks(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from("<I", data, pos + 4)[0]
        out.append(data[pos:pos + size])
        pos += size
    return out


def test_secrets_reach_the_layers_where_their_block_is(tmp_path) -> None:
    """The TLS capture's DSB (first there) moved after the k-th frame: TLS over TCP is
    decrypted from that frame on, with the engine (and chunks) as without."""
    src = ROOT / "tests/data/captures/ja4/chrome-cloudflare-quic-with-secrets.pcapng"
    head, secrets, interface, *packets = _blocks(src.read_bytes())
    outcomes = set()
    for k in (0, 5, 6, 40, len(packets)):
        path = tmp_path / f"dsb-after-{k}.pcapng"
        path.write_bytes(head + interface + b"".join(packets[:k]) + secrets
                         + b"".join(packets[k:]))
        with _engine(True):
            on, chunked = _run(path), _run(path, chunks=True)
        with _engine(False):
            off = _run(path)
        assert on == off, k
        assert chunked == off, k
        outcomes.add(repr(off[0]))
    assert len(outcomes) == 3  # before the ClientHello, after it, after every frame


def test_a_secrets_anomaly_comes_before_the_runs_after_its_block(tmp_path) -> None:
    """A DSB with a line that does not parse, amid a server's runs that every layer
    passes (``reassembly.passing``): its ``quic.keylog`` anomaly comes out before the
    first event after the block with chunks too, where the runs after it would skip
    the layers (and their ``out``) past it without the veto ``capture_events`` sets."""
    client, server = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 100])
    seq = [1000, 5000]
    packets = [tcp_packet(False, client, server, 40000, 4222, seq[0] - 1, 0, SYN),
               tcp_packet(False, server, client, 4222, 40000, seq[1] - 1, seq[0], SYN | ACK),
               tcp_packet(False, client, server, 40000, 4222, seq[0], seq[1], ACK)]
    for i in range(30):
        data = bytes(range(200))
        packets.append(tcp_packet(False, server, client, 4222, 40000, seq[1], seq[0],
                                  ACK | PSH, data))
        seq[1] += len(data)
        if i % 3 == 2:  # an ARP frame (the reference's) ends the engine's stretch: a run
            packets.append(_eth(b"\x00" * 28, 0x0806, ()))
    e = "<"
    blocks = [shb(e), idb(e, 1)]
    for i, packet in enumerate(packets):
        if i in (14, 30):
            blocks.append(dsb(e, TLSK, b"CLIENT_RANDOM 00 11\n"))
        blocks.append(epb(e, 0, 1_700_000_000_000_000 + i, packet))
    path = tmp_path / "bad-keys.pcapng"
    path.write_bytes(b"".join(blocks))
    with _engine(False):
        off = _run(path)
    assert [k[0] for k in off[0]].count("Anomaly") == 2
    with _engine(True):
        assert _run(path) == off
        assert _run(path, chunks=True) == off


# -- generated files ---------------------------------------------------------------------

_SCALES = [  # (if_tsresol option byte or None, ns per unit as (mul, div))
    (None, (1000, 1)), (9, (1, 1)), (6, (1000, 1)), (3, (10**6, 1)), (0x80 | 20, (10**9, 1 << 20)),
    (0x80 | 100, (10**9, 1 << 100)),  # too fine for the walk's arithmetic: the reader's
    (12, (1, 1000)),
]


@st.composite
def pcapng_files(draw) -> tuple[bytes, Limits]:
    """A segment stream written as a pcapng file with blocks of every kind among them,
    and the limits of the stream."""
    frames, times, limits = draw(segment_streams())
    blocks: list[bytes] = []
    e = draw(st.sampled_from("<>"))
    ifs: list[tuple[int, int, int]] = []  # (mul, div, offset ns) of the section's interfaces

    def section(order: str) -> None:
        nonlocal e, ifs
        e, ifs = order, []
        blocks.append(shb(e))

    def interface() -> None:
        resol, (mul, div) = draw(st.sampled_from(_SCALES))
        offset = draw(st.sampled_from([0, 0, 5, -3]))
        linktype = draw(st.sampled_from([1, 1, 1, 101]))
        options = b""
        if resol is not None:
            options += opt(e, 9, bytes([resol]))
        if offset:
            options += opt(e, 14, struct.pack(e + "q", offset))
        blocks.append(idb(e, linktype, draw(st.sampled_from([0, 0, 60, 65535])), options))
        ifs.append((mul, div, offset * 10**9))

    section(e)
    interface()
    for frame, t in zip(frames, times, strict=True):
        for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
            kind = draw(st.sampled_from(
                ["idb", "dsb", "nrb", "isb", "custom", "unknown", "shb", "undefined"]))
            if kind == "idb":
                interface()
            elif kind == "dsb":
                blocks.append(dsb(e, TLSK, b"CLIENT_RANDOM 00 11\n"))
            elif kind == "nrb":
                blocks.append(block(e, 4, b"\x00" * 4))
            elif kind == "isb":
                blocks.append(block(e, 5, struct.pack(e + "III", 0, 0, 0)))
            elif kind == "custom":
                blocks.append(block(e, 0xBAD, b"\x00\x00\x7e\x00opaque"))
            elif kind == "unknown":
                blocks.append(block(e, 0x80000001, b"local"))
            elif kind == "shb":
                section(draw(st.sampled_from("<>")))
                interface()
            else:  # a packet naming an interface the section does not have
                blocks.append(epb(e, len(ifs) + 2, 1, frame))
        how = draw(st.sampled_from(["epb"] * 6 + ["spb", "pb"]))
        iface = draw(st.integers(0, len(ifs) - 1))
        mul, div, offset = ifs[iface]
        units = max(0, (t - offset) * div // mul) & ((1 << 64) - 1)
        if how == "spb":
            blocks.append(spb(e, frame))
        elif how == "pb":
            blocks.append(block(e, 2, struct.pack(e + "HHIIII", iface, 0, units >> 32,
                                                  units & 0xFFFFFFFF, len(frame), len(frame))
                                + frame))
        else:
            blocks.append(epb(e, iface, units, frame))
    data = b"".join(blocks)
    damage = draw(st.sampled_from(["none"] * 4 + ["cut", "trailer"]))
    if damage == "cut":
        data = data[:draw(st.integers(28, len(data)))]
    elif damage == "trailer" and len(blocks) > 2:
        at = draw(st.integers(2, len(blocks) - 1))
        before = sum(map(len, blocks[:at]))
        end = before + len(blocks[at]) - 4
        data = data[:end] + b"\xff\xff\xff\xff" + data[end + 4:]
    return data, limits


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pcapng_files(), st.integers(1, 12))
def test_engine_on_generated_pcapng_files(tmp_path, file: tuple[bytes, Limits],
                                          max_records: int) -> None:
    data, limits = file
    path = tmp_path / "generated.pcapng"
    path.write_bytes(data)
    assert_same_with_the_engine_off(path, max_records, limits)
