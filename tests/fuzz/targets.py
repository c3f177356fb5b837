"""Fuzz targets: one per capture reader and per dissector, each ``fn(data: bytes)``.

A target raises only when msgcap has a bug: an uncaught exception from the code under
test, or a broken invariant (``FuzzFailure``).  The same functions serve the atheris
engine and the coverage-free mutator of ``benchmarks/fuzz.py``, and the CI pass in
``tests/fuzz/test_fuzz.py`` (fixed seed, regression corpus in ``tests/fuzz/corpus``).

Input encodings (so that a byte-level mutator reaches structure):

* readers (``pcap``, ``pcapng``, ``gzip``, ``zstd``): the bytes are the capture file;
  the whole engine (link, IP, defragmentation, TCP/UDP, QUIC, TLS, WebSocket) runs over
  it.  Invariants: never raises; per stream direction the event offsets are contiguous
  (data and gaps tile the stream); the reader's packet count matches the frames seen.
* stream dissectors (``nats``, ``nats_cluster``, ``pulsar``, ``felix``) and the stream layers
  (``tls_ws``): a *script*.  Two bytes seed the way data items are cut into pieces, then
  items separated by ``SEP``; an item's first byte says the direction (bit 0) and, if
  its bits 1-2 are both set, that the item is a gap of ``1 + u16`` bytes rather than
  data.  Invariants (dissectors): ``probe`` answers a ``Verdict``; byte accounting holds
  (decoded + undecoded = fed, per direction); records are well-formed (declared table,
  ordered offsets, anomaly kinds named after the dissector, declared columns; every
  16th input also builds Arrow batches through the schema validator); the records do
  not depend on how the bytes were cut (split invariance).
* payload dissectors (``stan``, ``liftbridge``): messages separated by ``SEP``, each
  ``flags, len(subject), subject, len(reply), reply, payload`` (flags bit 0: MSG from
  the server instead of PUB), offered in order through the pipeline's dispatcher.
* ``protobuf``: first byte picks one of the STAN / Liftbridge / Pulsar message schemas,
  the rest is decoded with the tolerant wire reader.
* ``quic``: datagrams separated by ``SEP`` (first byte: direction); first byte of the
  whole input odd: the first datagram's bytes are instead sealed as the *plaintext* of a
  client Initial (valid protection), so mutations reach frame, CRYPTO and ClientHello
  parsing.
"""

from __future__ import annotations

import atexit
import functools
import gzip
import os
import random
import struct
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tests.conftest import SHARED

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
CAPTURES = SHARED / "captures"
CORPUS = Path(__file__).resolve().parent / "corpus"
SEP = b"\xfe\xfd\xfc"
T0 = 1_700_000_000_000_000_000
MAX_SEED = 16 * 1024  # bytes per generated seed (small inputs fuzz faster)


class FuzzFailure(AssertionError):
    """An invariant broken by some input."""


def check(cond: Any, what: str) -> None:
    if not cond:
        raise FuzzFailure(what)


# ---------------------------------------------------------------------------- readers

_TMP: dict[str, Path] = {}


def _scratch(suffix: str) -> Path:
    """One reusable file per process (in /dev/shm when there is one)."""
    p = _TMP.get(suffix)
    if p is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        fd, name = tempfile.mkstemp(prefix="msgcap-fuzz-", suffix=suffix, dir=base)
        os.close(fd)
        p = _TMP[suffix] = Path(name)
        atexit.register(p.unlink, missing_ok=True)
    return p


def _check_events(events: Iterable[Any]) -> int:
    """Consume engine events; stream offsets must tile each stream direction; a flow is
    done (``StreamDone``) at most once, and before it is closed."""
    from reassembly.events import StreamClose, StreamData, StreamDone, StreamGap

    ends: dict[tuple[int, int, int | None], int] = {}
    done: set[int] = set()
    closed: set[int] = set()
    n = 0
    for ev in events:
        n += 1
        t = type(ev)
        if t is StreamDone:
            fid = ev.flow.flow_id
            check(fid not in done and fid not in closed, f"flow {fid}: StreamDone again")
            done.add(fid)
        elif t is StreamClose:
            closed.add(ev.flow.flow_id)
        if t is StreamData or t is StreamGap:
            key = (ev.flow.flow_id, int(ev.direction), ev.stream_id)
            size = len(ev.data) if t is StreamData else ev.nbytes
            check(size > 0, f"empty {t.__name__} at {ev.offset}")
            prev = ends.get(key)
            if prev is not None:
                check(ev.offset == prev, f"{key}: event at {ev.offset}, stream was at {prev}")
            ends[key] = ev.offset + size
    return n


def run_capture_file(path: Path) -> None:
    from reassembly.capture import CaptureFormatError, open_capture
    from reassembly.engine import capture_events
    from reassembly.limits import Limits

    limits = Limits(max_flows=64, max_buffered_bytes=64 * 1024, max_buffered_segments=64,
                    max_fragment_datagrams=64, quic_max_connections=16, quic_max_streams=16,
                    quic_max_crypto_bytes=16 * 1024)
    try:
        reader = open_capture(path)
    except CaptureFormatError:
        return  # not a capture at all: the one error open_capture may raise
    with reader:
        counting = _Counting(reader)
        _check_events(capture_events(counting, limits,  # type: ignore[arg-type]
                                     stream_done=True))
        info = reader.info
        check(info.packets == counting.frames,
              f"reader says {info.packets} packets, {counting.frames} frames were read")
        check(all(d.offset >= 0 for d in info.damage), "damage at a negative offset")


class _Counting:
    """A reader stand-in that counts the frames the engine takes from it."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.frames = 0

    @property
    def info(self) -> Any:
        return self.reader.info

    def __iter__(self):
        last = 0
        for f in self.reader:
            self.frames += 1
            check(f.number == last + 1, f"frame {f.number} follows frame {last}")
            last = f.number
            yield f


def fuzz_capture(data: bytes) -> None:
    p = _scratch(".cap")
    p.write_bytes(data)
    run_capture_file(p)


def fuzz_gzip(data: bytes) -> None:
    """Raw gzip bytes (seeds are gzip-compressed captures)."""
    if data[:2] != b"\x1f\x8b":
        data = b"\x1f\x8b" + data
    fuzz_capture(data)


def fuzz_zstd(data: bytes) -> None:
    if data[:4] != b"\x28\xb5\x2f\xfd":
        data = b"\x28\xb5\x2f\xfd" + data
    fuzz_capture(data)


# ---------------------------------------------------------------------------- scripts


def encode_script(items: Iterable[tuple[int, bytes | int]], seed: int = 0) -> bytes:
    """``items``: (direction, bytes) for data, (direction, int) for a gap."""
    out = [struct.pack("<H", seed & 0xFFFF)]
    for d, x in items:
        if isinstance(x, int):
            out.append(bytes([6 | d]) + struct.pack("<H", (x - 1) & 0xFFFF))
        else:
            out.append(bytes([d]) + x)
    return out[0] + SEP.join(out[1:])


def decode_script(data: bytes) -> tuple[int, list[tuple[int, bytes | int]]]:
    seed = int.from_bytes(data[:2], "little")
    items: list[tuple[int, bytes | int]] = []
    for part in data[2:].split(SEP):
        if not part:
            continue
        ctl = part[0]
        d = ctl & 1
        if ctl & 6 == 6:
            items.append((d, 1 + int.from_bytes(part[1:3].ljust(2, b"\0"), "little")))
        elif len(part) > 1:
            items.append((d, part[1:]))
    return seed, items


def _cuts(rng: random.Random, n: int) -> list[int]:
    if n <= 1:
        return [0, n]
    k = rng.choice((0, 1, 2, 4, 8))
    pts = sorted({rng.randrange(1, n) for _ in range(k)})
    return [0, *pts, n]


def _feed(dissector: Any, items: list[tuple[int, bytes | int]], rng: random.Random | None,
          options: dict[str, Any]) -> tuple[Any, list[Any], list[int]]:
    from dissectors.api import Direction, Span

    session = dissector.session(dict(options))
    off = [0, 0]
    fed = [0, 0]
    records: list[Any] = []
    for k, (d, x) in enumerate(items):
        direction = Direction(d)
        ts = T0 + k * 1_000_000
        if isinstance(x, int):
            records += session.gap(direction, off[d], x, ts)
            off[d] += x
            continue
        bounds = _cuts(rng, len(x)) if rng is not None else [0, len(x)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            piece = x[a:b]
            records += session.feed(direction, piece, Span(off[d], ts, ts, k + 1, k + 1))
            off[d] += len(piece)
            fed[d] += len(piece)
    records += session.close(T0 + len(items) * 1_000_000)
    return session, records, fed


def _flatten(records: Iterable[Any], out: list[Any] | None = None) -> list[Any]:
    out = [] if out is None else out
    for r in records:
        out.append(r)
        if r.children:
            _flatten(r.children, out)
    return out


def _shape(records: list[Any]) -> list[tuple]:
    return [(r.table, int(r.direction), r.offset_start, r.offset_end, r.ts_first_ns,
             r.ts_last_ns, r.frame_first, r.frame_last, repr(sorted(r.values.items())),
             len(r.children)) for r in _flatten(records)]


def check_records(name: str, tables: Iterable[Any], records: list[Any], validate: bool) -> None:
    from dissectors.api import Direction

    specs = {s.name: s for s in tables}
    flat = _flatten(records)
    rows: dict[str, list[dict[str, Any]]] = {}
    for i, rec in enumerate(flat):
        check(isinstance(rec.direction, Direction), f"record {i}: direction {rec.direction!r}")
        check(0 <= rec.offset_start <= rec.offset_end,
              f"record {i} ({rec.table}): offsets {rec.offset_start}..{rec.offset_end}")
        if rec.table == "anomalies":
            kind = rec.values.get("kind")
            check(isinstance(kind, str) and kind.startswith(f"{name}."),
                  f"record {i}: anomaly kind {kind!r}")
            check(isinstance(rec.values.get("detail"), str), f"record {i}: detail not text")
            continue
        spec = specs.get(rec.table)
        check(spec is not None, f"record {i}: undeclared table {rec.table!r}")
        cols = {f.name for f in spec.columns}
        extra = set(rec.values) - cols
        check(not extra, f"record {i} ({rec.table}): undeclared columns {sorted(extra)}")
        if validate:
            row = {"capture_id": "0" * 16, "flow_id": 0, "record_id": i,
                   "parent_record_id": None, "direction": rec.direction.short,
                   "stream_id": None, "src_ip": "10.0.0.1", "src_port": 1,
                   "dst_ip": "10.0.0.2", "dst_port": 2, "ts_first": rec.ts_first_ns,
                   "ts_last": rec.ts_last_ns, "offset_start": rec.offset_start,
                   "offset_end": rec.offset_end, "frame_first": rec.frame_first,
                   "frame_last": rec.frame_last}
            row = {k: v for k, v in row.items() if k in cols}
            row.update(rec.values)
            rows.setdefault(rec.table, []).append(row)
    if validate and rows:
        from dissectors.schema import rows_to_batch, validate_batch

        for table, trows in rows.items():
            validate_batch(specs[table], rows_to_batch(specs[table], trows))


def fuzz_stream_dissector(dissector: Any, data: bytes, options: dict[str, Any]) -> None:
    from dissectors.api import Direction, Verdict

    seed, items = decode_script(data)
    rng = random.Random(seed)
    # probe: prefixes of each direction never raise and answer a Verdict
    for d in (0, 1):
        stream = b"".join(x for dd, x in items if dd == d and isinstance(x, bytes))
        if stream:
            for n in {len(stream), 1 + rng.randrange(len(stream)), min(len(stream), 8)}:
                v = dissector.probe(Direction(d), stream[:n])
                check(v in tuple(Verdict), f"probe returned {v!r}")
    session, records, fed = _feed(dissector, items, rng, options)
    for d in (0, 1):
        got = session.decoded_bytes[d] + session.undecoded_bytes[d]
        check(got == fed[d], f"accounting {Direction(d).short}: decoded "
              f"{session.decoded_bytes[d]} + undecoded {session.undecoded_bytes[d]} "
              f"!= fed {fed[d]}")
    check_records(dissector.name, dissector.tables, records, validate=seed % 16 == 0)
    _, whole, _ = _feed(dissector, items, None, options)
    a, b = _shape(records), _shape(whole)
    if a != b:
        diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                    min(len(a), len(b)))
        raise FuzzFailure(f"records depend on how the bytes were cut: first difference at "
                          f"record {diff}: {a[diff:diff + 1]} vs {b[diff:diff + 1]}")


@functools.cache
def _dissector(name: str) -> Any:
    """The built-in dissector class ``name``, looked up once per process: ``discover``
    reads every installed distribution's entry points afresh (as a msgcap run must), which
    was three quarters of each NATS execution when done per input."""
    from dissectors.registry import discover

    return discover().dissectors[name]


def fuzz_nats(data: bytes) -> None:
    fuzz_stream_dissector(_dissector("nats"), data,
                          {"payload_cap": 64, "max_control_line": 256, "max_server_line": 512})


def fuzz_nats_cluster(data: bytes) -> None:
    fuzz_stream_dissector(_dissector("nats_cluster"), data, {"payload_cap": 64})


def fuzz_pulsar(data: bytes) -> None:
    fuzz_stream_dissector(_dissector("pulsar"), data, {"payload_cap": 64})


def fuzz_felix(data: bytes) -> None:
    fuzz_stream_dissector(_dissector("felix"), data, {"payload_cap": 64})


# -------------------------------------------------------------------- payload dissectors


def encode_messages(msgs: Iterable[tuple[int, str, str | None, bytes]]) -> bytes:
    """(flags, subject, reply, payload) -> the payload-target encoding."""
    out = []
    for flags, subject, reply, payload in msgs:
        s, r = subject.encode()[:255], (reply or "").encode()[:255]
        out.append(bytes([flags, len(s)]) + s + bytes([len(r)]) + r + payload)
    return SEP.join(out)


def decode_messages(data: bytes) -> list[tuple[int, str, str | None, bytes]]:
    out = []
    for part in data.split(SEP):
        if len(part) < 3:
            continue
        flags, n = part[0], part[1]
        subject = part[2 : 2 + n].decode("utf-8", "replace")
        rest = part[2 + n :]
        if not rest:
            continue
        m = rest[0]
        reply = rest[1 : 1 + m].decode("utf-8", "replace") or None
        out.append((flags, subject, reply, rest[1 + m :]))
    return out


def fuzz_payload_dissector(dissector: Any, data: bytes) -> None:
    from dissectors.api import Direction, Verdict
    from dissectors.dispatch import ScopeDispatcher
    from dissectors.sdk.testing import carried_message

    scope = ScopeDispatcher([dissector], {"payload_cap": 64}, strict=True)
    records: list[Any] = []
    offset = 0
    for flags, subject, reply, payload in decode_messages(data)[:64]:
        v = dissector.probe_payload(payload)
        check(v in tuple(Verdict), f"probe_payload returned {v!r}")
        server = bool(flags & 1)
        msg = carried_message(payload, subject, op="MSG" if server else "PUB",
                              reply_to=reply, sid="1" if server else None,
                              direction=Direction.S2C if server else Direction.C2S,
                              offset=offset)
        offset += len(payload) + 1
        records += scope.dispatch(msg)
    check_records(dissector.name, dissector.tables, records, validate=len(data) % 16 == 0)


def fuzz_stan(data: bytes) -> None:
    from dissectors.stan import StanDissector

    fuzz_payload_dissector(StanDissector, data)


def fuzz_liftbridge(data: bytes) -> None:
    from dissectors.liftbridge import LiftbridgeDissector

    fuzz_payload_dissector(LiftbridgeDissector, data)


# ----------------------------------------------------------------------------- protobuf


@cache
def _schemas() -> list[Any]:
    from dissectors import proto
    from dissectors.pulsar import pb

    found = {**proto._index()[0], **pb._index()[0]}
    return [found[k] for k in sorted(found)]


def fuzz_protobuf(data: bytes) -> None:
    from dissectors.proto.wire import decode, scan

    if not data:
        return
    schemas = _schemas()
    d = decode(data[1:], schemas[data[0] % len(schemas)])
    check(d.error is None or isinstance(d.error, str), "decode error is not text")
    scan(data[1:])


# ---------------------------------------------------------------------------------- QUIC


def _quic_initial(plaintext: bytes) -> bytes:
    from reassembly.quic.crypto import initial_protections
    from tests.quic.helpers import crypto_frame, seal_long

    dcid = bytes(range(8))
    client, _ = initial_protections(1, dcid)
    payload = plaintext if plaintext[:1] and plaintext[0] in (0x00, 0x01, 0x06) else (
        crypto_frame(0, plaintext))
    payload = payload.ljust(1162, b"\0")  # pad to a 1200-byte datagram, like clients do
    return seal_long(client, 0, dcid, b"\xaa" * 8, 0, payload)


def fuzz_quic(data: bytes) -> None:
    from reassembly.events import Direction
    from reassembly.limits import Limits
    from tests.quic.helpers import Run, make_flow

    if not data:
        return
    sealed = data[0] & 1
    parts = [p for p in data[1:].split(SEP) if p][:32]
    run = Run(limits=Limits(quic_max_streams=8, quic_max_crypto_bytes=16 * 1024,
                            quic_max_connections=4))
    flow = make_flow()
    for i, p in enumerate(parts):
        d, body = Direction(p[0] & 1), p[1:]
        if sealed and i == 0:
            d, body = Direction.C2S, _quic_initial(body)
        if body:
            run.send(flow, d, body)
    run.layer.close_flow(flow, flow.ts_last_ns)
    run.layer.flush()
    _check_events(run.events)


# ----------------------------------------------------------------- TLS / WebSocket layers


def fuzz_tls_ws(data: bytes) -> None:
    """The layers above TCP (reassembly.tls, reassembly.websocket) over a script."""
    from reassembly.engine import stream_layers
    from reassembly.events import (
        Direction,
        Endpoint,
        FlowInfo,
        RoleSource,
        StreamClose,
        StreamData,
        StreamGap,
        Transport,
    )
    from reassembly.limits import Limits
    from reassembly.quic.keylog import KeyLog

    seed, items = decode_script(data)
    rng = random.Random(seed)
    flow = FlowInfo(0, Transport.TCP, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 443),
                    RoleSource.SYN, T0, T0, 1, 1)
    events: list[Any] = []
    off = [0, 0]
    for k, (d, x) in enumerate(items):
        ts = T0 + k
        if isinstance(x, int):
            events.append(StreamGap(flow, Direction(d), off[d], x, ts, k + 1, "fuzz"))
            flow.gap_bytes[d] += x
            off[d] += x
            continue
        bounds = _cuts(rng, len(x))
        for a, b in zip(bounds, bounds[1:], strict=False):
            events.append(StreamData(flow, Direction(d), off[d], x[a:b], ts, ts, k + 1, k + 1))
            off[d] += b - a
            flow.stream_bytes[d] += b - a
    events.append(StreamClose(flow, T0 + len(items), "fin"))
    _check_events(stream_layers(events, Limits(), KeyLog()))


# ------------------------------------------------------------------------------- seeds


def _streams(path: Path, keylog: Path | None = None, quic_streams: bool = False,
             ) -> list[list[tuple[int, bytes | int]]]:
    """Per flow (or QUIC stream), its stream items in capture order (from reassembly)."""
    from reassembly.engine import read_events
    from reassembly.events import StreamData, StreamGap
    from reassembly.quic.keylog import KeyLog

    if not path.exists():
        return []
    kl = KeyLog.from_file(keylog) if keylog is not None and keylog.exists() else None
    flows: dict[tuple[int, int | None], list[tuple[int, bytes | int]]] = {}
    for ev in read_events(path, None, kl):
        if isinstance(ev, StreamData | StreamGap):
            if (ev.stream_id is not None) != quic_streams:
                continue
            item = ev.data if isinstance(ev, StreamData) else ev.nbytes
            flows.setdefault((ev.flow.flow_id, ev.stream_id), []).append((int(ev.direction), item))
    return list(flows.values())


def _cap_items(items: list[tuple[int, bytes | int]], limit: int = MAX_SEED
               ) -> list[tuple[int, bytes | int]]:
    out, size = [], 0
    for d, x in items:
        n = x if isinstance(x, int) else len(x)
        if size + (0 if isinstance(x, int) else n) > limit:
            break
        out.append((d, x))
        size += 0 if isinstance(x, int) else n
    return out


def _script_seeds(paths: Iterable[Path], **kw: Any) -> list[bytes]:
    seeds = []
    for p in paths:
        for items in _streams(p, **kw):
            items = _cap_items(items)
            if items:
                seeds.append(encode_script(items, seed=len(seeds)))
    return seeds


def _glob(pattern: str) -> list[Path]:
    return sorted(CAPTURES.glob(pattern)) if CAPTURES.is_dir() else []


def seeds_nats() -> list[bytes]:
    from tests.dissectors.test_nats import CONVERSATION

    out = [encode_script([(int(d), b) for d, b in CONVERSATION])]
    paths = [SAMPLES / "nats-basic.pcap", *_glob("spicy-nats/*.pcap"),
             *_glob("deepflow/nats/*.pcap"), *_glob("ntop-nDPI/nats.pcap")]
    return out + _script_seeds(paths)


def seeds_nats_cluster() -> list[bytes]:
    from tests.cluster.test_cluster import GATEWAY, LEAF_C, LEAF_S, ROUTE_C, ROUTE_S

    out = [encode_script([*[(0, b) for b in ROUTE_C], *[(1, b) for b in ROUTE_S]]),
           encode_script([*[(0, b) for b in LEAF_C], *[(1, b) for b in LEAF_S]]),
           encode_script([(int(d), b) for d, b in GATEWAY])]
    return (out + _script_seeds([SAMPLES / "nats-cluster.pcap"])[:20]
            + _script_seeds([SAMPLES / "nats-s2-fast.pcap"])[:10])  # S2-compressed links


def _pulsar_frames() -> list[bytes]:
    from tests.pulsar import wire

    md = wire.metadata(producer_name="p", sequence_id=1, publish_time=1)
    items = [
        wire.frame(wire.cmd("CONNECT", client_version="x", protocol_version=19,
                            auth_method_name="token", auth_data=b"t")),
        wire.frame(wire.cmd("PRODUCER", topic="persistent://a/b/c", producer_id=1,
                            request_id=1)),
        wire.frame(wire.cmd("SEND", producer_id=1, sequence_id=1), md, b"hello"),
        wire.frame(wire.cmd("SEND", producer_id=1, sequence_id=2, num_messages=2),
                   wire.metadata(producer_name="p", sequence_id=2, publish_time=1,
                                 num_messages_in_batch=2),
                   wire.batch([(b"a", {}), (b"bb", {"partition_key": "k"})])),
    ]
    import zlib

    import zstandard

    raw = wire.batch([(b"x" * 50, {}), (b"y" * 70, {})])
    ctype = wire.MessageMetadata.DESCRIPTOR.fields_by_name["compression"].enum_type
    for codec, comp in (("ZLIB", zlib.compress(raw)),
                        ("ZSTD", zstandard.ZstdCompressor().compress(raw))):
        items.append(wire.frame(
            wire.cmd("SEND", producer_id=1, sequence_id=3, num_messages=2),
            wire.metadata(producer_name="p", sequence_id=3, publish_time=1,
                          num_messages_in_batch=2, uncompressed_size=len(raw),
                          compression=ctype.values_by_name[codec].number), comp))
    return items


def seeds_pulsar() -> list[bytes]:
    out = [encode_script([(0, f) for f in _pulsar_frames()])]
    paths = [SAMPLES / "pulsar-client.pcap", *_glob("deepflow/pulsar/*.pcap")]
    return out + _script_seeds(paths)


def seeds_felix() -> list[bytes]:
    out = []
    vec = SHARED / "vectors/felix"
    frames = [bytes.fromhex(p.read_text().strip()) for p in sorted(vec.glob("*.hex"))]
    if frames:
        out.append(encode_script([(0, f) for f in frames]))
        out += [encode_script([(i % 2, f)]) for i, f in enumerate(frames)]
    out += _script_seeds([SAMPLES / "felix-quic.pcap"], keylog=SAMPLES / "felix-quic.keys",
                         quic_streams=True)[:20]
    return out


def _carried(path: Path) -> list[tuple[int, str, str | None, bytes]]:
    """(flags, subject, reply, payload) of the NATS messages of a capture."""
    from dissectors.nats import NatsDissector

    msgs = []
    for items in _streams(path):
        session = NatsDissector.session({"payload_cap": None})
        from dissectors.api import Direction, Span

        off = [0, 0]
        recs = []
        for d, x in items:
            if isinstance(x, int):
                recs += session.gap(Direction(d), off[d], x, 0)
                off[d] += x
            else:
                recs += session.feed(Direction(d), x, Span(off[d], 0, 0, 1, 1))
                off[d] += len(x)
        recs += session.close(0)
        for r in recs:
            v = r.values
            if r.table == "nats" and v.get("op") in ("PUB", "MSG", "HPUB", "HMSG") \
                    and v.get("payload") is not None:
                msgs.append((int(v["op"] in ("MSG", "HMSG")), v["subject"], v.get("reply_to"),
                             v["payload"]))
    return msgs


def _message_seeds(path: Path, per_seed: int = 12) -> list[bytes]:
    msgs = _carried(path)
    return [encode_messages(msgs[i : i + per_seed]) for i in range(0, len(msgs), per_seed)][:40]


def seeds_stan() -> list[bytes]:
    return _message_seeds(SAMPLES / "stan-basic.pcap")


def seeds_liftbridge() -> list[bytes]:
    return _message_seeds(SAMPLES / "liftbridge-basic.pcap")


def seeds_protobuf() -> list[bytes]:
    out = []
    schemas = _schemas()
    names = [s.full_name for s in schemas]
    for _flags, _subject, _reply, payload in _carried(SAMPLES / "stan-basic.pcap")[:40]:
        out.append(bytes([names.index("msgcap.stan.PubMsg") % 256]) + payload)
    for f in _pulsar_frames():
        (cmd_size,) = struct.unpack(">I", f[4:8])
        out.append(bytes([names.index("msgcap.pulsar.BaseCommand") % 256]) + f[8 : 8 + cmd_size])
    return out


def seeds_quic() -> list[bytes]:
    from tests.quic import vectors

    out = [b"\x00" + bytes([0]) + vectors.V1_CLIENT_PACKET + SEP + bytes([1])
           + vectors.V1_SERVER_PACKET]
    for p in [*_glob("illustrated-quic/*.pcap"), *_glob("ja4/quic-tls-handshake.pcapng"),
              *_glob("ntop-nDPI/quic*.pcap*"), *_glob("zeek/quic/*.pcap")][:8]:
        # the QUIC layer does not re-emit the datagrams it takes: read them from the file
        grams = _udp_payloads(p)
        if grams:
            out.append(b"\x00" + SEP.join(grams[:6]))
    # sealed Initials: ClientHello CRYPTO frames as plaintext
    from tests.quic import vectors as v

    hello = getattr(v, "CLIENT_HELLO", None)
    if isinstance(hello, bytes):
        out.append(b"\x01" + b"\x00" + hello)
    out.append(b"\x01" + b"\x00" + b"\x06\x00\x40\x20" + b"\x01\x00\x00\x1c\x03\x03" + bytes(26))
    return out


def _udp_payloads(path: Path) -> list[bytes]:
    from reassembly.capture import open_capture
    from reassembly.limits import Limits
    from reassembly.network import NetworkDecoder

    out = []
    with open_capture(path) as reader:
        dec = NetworkDecoder(Limits(), lambda ev: None)
        for frame in reader:
            pkt = dec.decode(frame)
            if pkt is not None and pkt.proto == 17 and len(pkt.payload) > 8:
                sport = int.from_bytes(bytes(pkt.payload[0:2]), "big")
                d = 1 if sport in (443, 4433, 853) else 0
                out.append(bytes([d]) + bytes(pkt.payload)[8:])
            if len(out) >= 6:
                break
    return out


def seeds_tls_ws() -> list[bytes]:
    ws = [
        (0, b"GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"),
        (1, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"),
        (0, b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"),  # masked "Hello"
        (1, b"\x81\x05Hello"),
        (0, b"\x88\x82\x00\x00\x00\x00\x03\xe8"),
    ]
    out = [encode_script(ws)]
    paths = [*_glob("zeek/tls/*.pcap"), *_glob("ja4/chrome-cloudflare-quic-without-secrets.pcapng")]
    out += _script_seeds(paths)[:20]
    return out


def _file_seeds(patterns: Iterable[str], max_size: int = 64 * 1024) -> list[bytes]:
    out, seen = [], set()
    for pat in patterns:
        for p in [*_glob(pat), *sorted(SAMPLES.glob(pat))]:
            if not p.is_file() or p in seen:
                continue
            seen.add(p)
            with open(p, "rb") as f:
                out.append(f.read(max_size))  # a truncated capture is a fine seed too
    return out


def seeds_pcap() -> list[bytes]:
    from samples.hostile.generate import pcap_caplen_cases

    files = _file_seeds(["**/*.pcap", "*.pcap"])
    files = [f for f in files if f[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4",
                                          b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                                          b"\x34\xcd\xb2\xa1", b"\xa1\xb2\xcd\x34")]
    return [c.data for c in pcap_caplen_cases()] + files[:60]


def seeds_pcapng() -> list[bytes]:
    from samples.hostile.generate import pcapng_bad_length_cases

    files = [f for f in _file_seeds(["**/*.pcapng", "**/*.pcap", "**/*.ntar", "**/*"])
             if f[:4] == b"\x0a\x0d\x0d\x0a"]
    return [c.data for c in pcapng_bad_length_cases()] + files[:60]


def _compression_plain() -> list[bytes]:
    """Hostile and real captures of both formats, small ones (compressed fuzzing is about
    the byte source, not the formats)."""
    pcap, pcapng = seeds_pcap(), seeds_pcapng()
    return [*pcap[:6], *pcapng[:4], *sorted(pcap[6:], key=len)[:10],
            *sorted(pcapng[10:], key=len)[:10]]


def seeds_gzip() -> list[bytes]:
    return [gzip.compress(s, 6, mtime=0) for s in _compression_plain()]


def seeds_zstd() -> list[bytes]:
    import zstandard

    c = zstandard.ZstdCompressor(level=3)
    return [c.compress(s) for s in _compression_plain()]


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Target:
    name: str
    fn: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]
    what: str
    # coverage-free mutator: also try the structure-aware script mutations
    script: bool = False


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("pcap", fuzz_capture, seeds_pcap, "pcap reader + whole reassembly engine"),
    Target("pcapng", fuzz_capture, seeds_pcapng, "pcapng reader + whole reassembly engine"),
    Target("gzip", fuzz_gzip, seeds_gzip, "gzip-compressed captures (ByteSource)"),
    Target("zstd", fuzz_zstd, seeds_zstd, "zstd-compressed captures (ByteSource)"),
    Target("nats", fuzz_nats, seeds_nats, "NATS session (LineFramer)", script=True),
    Target("nats_cluster", fuzz_nats_cluster, seeds_nats_cluster,
           "NATS route / gateway / leaf-node session", script=True),
    Target("pulsar", fuzz_pulsar, seeds_pulsar, "Pulsar session (LengthPrefixedFramer, "
           "protobuf, batches, codecs)", script=True),
    Target("felix", fuzz_felix, seeds_felix, "Felix session (FLX1 frames)", script=True),
    Target("stan", fuzz_stan, seeds_stan, "STAN payload dissector (via the dispatcher)"),
    Target("liftbridge", fuzz_liftbridge, seeds_liftbridge,
           "Liftbridge payload dissector (via the dispatcher)"),
    Target("protobuf", fuzz_protobuf, seeds_protobuf, "tolerant protobuf wire reader"),
    Target("quic", fuzz_quic, seeds_quic, "QUIC layer: headers, protection, frames, CRYPTO, "
           "TLS handshake parsing"),
    Target("tls_ws", fuzz_tls_ws, seeds_tls_ws, "TLS-over-TCP and WebSocket layers",
           script=True),
)}


def corpus_files(target: str) -> list[Path]:
    d = CORPUS / target
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []
