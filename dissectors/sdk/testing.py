"""Test helpers for dissector authors, used by msgcap's own tests and by every
scaffolded plugin.  A module of its own (``dissectors.sdk.testing``): the plugin API
(``dissectors.api``) does not import it, so a run never loads it.

Strategy (after the h11 / wsproto test suites): a test describes one flow as a *script*,
a list of ``Data(direction, bytes)`` and ``Gap(direction, nbytes)`` items in the order
they happen, and the helpers feed it to a fresh session in many ways:

* ``run_session`` feeds a script once (whole items, byte by byte, or cut at random
  points) and returns the records with the session;
* ``assert_split_invariant`` checks that every way of cutting the bytes gives the same
  records (offsets, times, frames and values) and that the byte accounting adds up;
* ``assert_never_raises`` mutates a corpus of scripts (bit flips, insertions, deletions,
  truncation, duplicated or swapped items, gaps, random bytes) and checks that neither
  ``probe`` nor the session raises and that the accounting still adds up;
* ``assert_rows_valid`` builds Arrow batches from the records with the declared tables
  and runs the schema validator, so a typo in a column name fails the test;
* ``carried_message`` / ``run_payload`` do the same job for payload dissectors;
* ``write_pcap`` writes a tiny capture (Ethernet / IPv4 / TCP with handshake and FIN, or
  UDP) from scripts; ``analyzer.testing.dissect_with_cli`` runs ``msgcap dissect`` on it.

Every item ``k`` of a script is stamped as capture frame ``k + 1`` at ``T0_NS + k`` ms, and
so is every piece it is cut into: records must not depend on how bytes were cut.

Nothing here imports ``analyzer``: the product's lower floors never call its top.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

from dissectors.api import (
    CarriedMessage,
    Direction,
    Dissector,
    PayloadDissector,
    Record,
    Session,
    SessionOptions,
    Span,
    Verdict,
)

__all__ = [
    "T0_NS",
    "Data",
    "Gap",
    "PcapFlow",
    "Run",
    "assert_accounting",
    "assert_never_raises",
    "assert_rows_valid",
    "assert_split_invariant",
    "carried_message",
    "mutate_script",
    "run_payload",
    "run_session",
    "write_pcap",
]

T0_NS = 1_700_000_000_000_000_000
"""Capture time of the first script item (2023-11-14T22:13:20Z); items are 1 ms apart."""
STEP_NS = 1_000_000
# Byte-by-byte feeding costs one session call per byte: skip it past this many bytes.
MAX_BYTEWISE_BYTES = 64 * 1024


class Data(NamedTuple):
    """Stream bytes sent in ``direction`` (one packet, unless ``run_session`` cuts it)."""

    direction: Direction
    data: bytes


class Gap(NamedTuple):
    """``nbytes`` of ``direction`` never captured (a hole in the stream, not zeros)."""

    direction: Direction
    nbytes: int


ScriptItem = Data | Gap | tuple[Direction, bytes] | tuple[Direction, int]
# how ``run_session`` cuts each item: "whole", "bytes", random points, or n -> lengths
Split = str | random.Random | Callable[[int], Iterable[int]]


def _items(script: Iterable[ScriptItem]) -> list[Data | Gap]:
    out: list[Data | Gap] = []
    for item in script:
        if isinstance(item, Data | Gap):
            out.append(item)
            continue
        direction, what = item
        direction = Direction(direction)
        if isinstance(what, bytes | bytearray | memoryview):
            out.append(Data(direction, bytes(what)))
        elif isinstance(what, int) and what > 0:
            out.append(Gap(direction, what))
        else:
            raise TypeError(f"script item {item!r}: want (direction, bytes) or (direction, n>0)")
    return out


@dataclass
class Run:
    """What one ``run_session`` did: the records, the session (for its counters and any
    state a test wants to look at), and the stream length and gap bytes per direction."""

    records: list[Record]
    session: Session
    stream_bytes: list[int] = field(default_factory=lambda: [0, 0])
    gap_bytes: list[int] = field(default_factory=lambda: [0, 0])
    closed: bool = True


def _new_session(dissector: type[Dissector] | Callable[[], Session],
                 options: dict[str, Any] | None) -> Session:
    if isinstance(dissector, type) and issubclass(dissector, Dissector):
        return dissector.session(cast(SessionOptions, dict(options or {})))
    if callable(dissector):  # a factory: lambda: MySession(...)
        return cast(Session, dissector())
    raise TypeError(f"want a Dissector class or a session factory, got {dissector!r}")


def _cuts(n: int, split: Split) -> list[int]:
    """Piece lengths for ``n`` bytes."""
    if n == 0:
        return [0]
    if split == "whole":
        return [n]
    if split == "bytes":
        return [1] * n
    if isinstance(split, random.Random):
        rng = split
        mode = rng.random()
        if mode < 0.15:
            return [n]
        if mode < 0.3:  # many tiny pieces
            points = sorted({rng.randrange(1, n) for _ in range(min(n - 1, 64))}) if n > 1 else []
        else:
            k = rng.randint(0, min(n - 1, 6))
            points = sorted(rng.sample(range(1, n), k)) if n > 1 else []
        pieces, last = [], 0
        for p in points:
            pieces.append(p - last)
            last = p
        pieces.append(n - last)
        return pieces
    if callable(split):
        pieces = list(split(n))
        if sum(pieces) != n or any(p < 0 for p in pieces):
            raise ValueError(f"split function returned {pieces} for {n} bytes")
        return pieces
    raise ValueError(f"split must be 'whole', 'bytes', a random.Random or a function: {split!r}")


def run_session(
    dissector: type[Dissector] | Callable[[], Session],
    script: Iterable[ScriptItem],
    *,
    options: dict[str, Any] | None = None,
    split: Split = "whole",
    close: bool = True,
) -> Run:
    """Feed ``script`` to a new session of ``dissector`` (a ``Dissector`` class, or a
    factory returning a ``Session``) and return a ``Run``.

    ``split``: ``"whole"`` (one ``feed`` per item), ``"bytes"`` (one per byte), a
    ``random.Random`` (random cut points), or a function ``n -> piece lengths``.
    """
    session = _new_session(dissector, options)
    offsets = [0, 0]
    gaps = [0, 0]
    records: list[Record] = []
    items = _items(script)
    for k, item in enumerate(items):
        d = item.direction
        ts = T0_NS + k * STEP_NS
        if isinstance(item, Gap):
            records += session.gap(d, offsets[d], item.nbytes, ts)
            offsets[d] += item.nbytes
            gaps[d] += item.nbytes
            continue
        data = item.data
        pos = 0
        for size in _cuts(len(data), split):
            if size == 0 and data:
                continue
            span = Span(offsets[d], ts, ts, k + 1, k + 1)
            records += session.feed(d, data[pos : pos + size], span)
            offsets[d] += size
            pos += size
    if close:
        records += session.close(T0_NS + len(items) * STEP_NS)
    return Run(records, session, offsets, gaps, close)


def _fmt(rec: Record | None) -> str:
    if rec is None:
        return "(none)"
    text = repr(rec)
    return text if len(text) <= 600 else text[:600] + "..."


def _first_difference(a: list[Record], b: list[Record]) -> str:
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return f"record {i} differs:\n  whole: {_fmt(x)}\n  split: {_fmt(y)}"
    return ""


def assert_accounting(run: Run) -> None:
    """Every stream byte of each direction is decoded, undecoded or a gap, exactly once
    (DESIGN §7): ``decoded + undecoded + gap == stream length`` after ``close``."""
    if not run.closed:
        raise ValueError("assert_accounting needs a run that was closed")
    s = run.session
    for d in Direction:
        dec, und = s.decoded_bytes[d], s.undecoded_bytes[d]
        total = dec + und + run.gap_bytes[d]
        if dec < 0 or und < 0 or total != run.stream_bytes[d]:
            raise AssertionError(
                f"byte accounting broken for {d.short}: decoded {dec} + undecoded {und} + "
                f"gap {run.gap_bytes[d]} = {total}, stream length {run.stream_bytes[d]}"
            )


def assert_split_invariant(
    dissector: type[Dissector] | Callable[[], Session],
    script: Iterable[ScriptItem],
    *,
    options: dict[str, Any] | None = None,
    rounds: int = 20,
    seed: int = 0,
    bytewise: bool = True,
) -> list[Record]:
    """Feed ``script`` whole, byte by byte (up to 64 KiB) and cut at random points
    (``rounds`` times, seeded) and assert that every run gives the same records and keeps
    the byte accounting.  Returns the records of the whole-items run."""
    items = _items(script)
    whole = run_session(dissector, items, options=options)
    assert_accounting(whole)
    total = sum(len(i.data) for i in items if isinstance(i, Data))
    splits: list[tuple[str, Any]] = []
    if bytewise and total <= MAX_BYTEWISE_BYTES:
        splits.append(("byte by byte", "bytes"))
    splits += [(f"random split, seed {seed + r}", random.Random(seed + r)) for r in range(rounds)]
    for label, split in splits:
        got = run_session(dissector, items, options=options, split=split)
        if got.records != whole.records:
            raise AssertionError(
                f"{label}: records differ from feeding whole items "
                f"({len(whole.records)} vs {len(got.records)} records); "
                + _first_difference(whole.records, got.records)
            )
        try:
            assert_accounting(got)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
    return whole.records


# ------------------------------------------------------------------------ fuzzing


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(n)


def mutate_script(  # noqa: C901 - one branch per kind of mutation, listed in one place
    rng: random.Random, corpus: Sequence[Sequence[ScriptItem]]
) -> list[Data | Gap]:
    """One mutant of a random script of ``corpus`` (1 to 4 mutations)."""
    items = _items(rng.choice(corpus)) if corpus else []
    if not items or rng.random() < 0.05:
        items = [Data(Direction(rng.randrange(2)), _random_bytes(rng, rng.randrange(1, 200)))
                 for _ in range(rng.randint(1, 4))]
    for _ in range(rng.randint(1, 4)):
        if not items:
            break
        i = rng.randrange(len(items))
        it = items[i]
        op = rng.randrange(10)
        if isinstance(it, Gap):
            if op < 5:
                items[i] = Gap(it.direction, rng.randint(1, 4096))
            else:
                del items[i]
            continue
        b = bytearray(it.data)
        if op == 0 and b:  # flip bits
            for _ in range(rng.randint(1, 8)):
                j = rng.randrange(len(b))
                b[j] ^= 1 << rng.randrange(8)
        elif op == 1:  # insert random bytes
            j = rng.randrange(len(b) + 1)
            b[j:j] = _random_bytes(rng, rng.randint(1, 32))
        elif op == 2 and b:  # delete a slice
            j = rng.randrange(len(b))
            del b[j : j + rng.randint(1, 32)]
        elif op == 3:  # truncate the script here
            del items[i + 1 :]
            b = b[: rng.randrange(len(b) + 1)]
        elif op == 4:  # duplicate the item
            items.insert(i, it)
            continue
        elif op == 5:  # send it the other way
            items[i] = Data(it.direction.flip(), bytes(b))
            continue
        elif op == 6 and len(b) > 1:  # lose a middle part to a gap
            j = rng.randrange(1, len(b))
            k = rng.randint(j, len(b))
            items[i : i + 1] = [x for x in (
                Data(it.direction, bytes(b[:j])),
                Gap(it.direction, max(1, k - j)),
                Data(it.direction, bytes(b[k:])) if k < len(b) else None,
            ) if x is not None]
            continue
        elif op == 7:  # replace with random bytes
            b = bytearray(_random_bytes(rng, rng.randint(1, max(1, len(b)))))
        elif op == 8 and len(corpus) > 1:  # splice in an item of another script
            other = _items(rng.choice(corpus))
            if other:
                items.insert(i + 1, rng.choice(other))
            continue
        elif op == 9 and b:  # repeat a slice (length fields now point elsewhere)
            j = rng.randrange(len(b))
            b[j:j] = b[j : j + rng.randint(1, 64)]
        items[i] = Data(it.direction, bytes(b))
    return [it for it in items if not (isinstance(it, Data) and not it.data)]


def _check_probe(dissector: type[Dissector], items: list[Data | Gap], rng: random.Random) -> None:
    streams = [bytearray(), bytearray()]
    for it in items:
        if isinstance(it, Data):
            streams[it.direction] += it.data
    for d in Direction:
        data = bytes(streams[d])
        if not data:
            continue  # the pipeline only probes directions that sent something
        for n in {len(data), rng.randint(1, len(data)), min(len(data), rng.randint(1, 16))}:
            verdict = dissector.probe(d, data[:n])
            if verdict not in tuple(Verdict):
                raise AssertionError(
                    f"probe({d.short}, {data[:n][:64]!r}) returned {verdict!r}, not a Verdict"
                )


def assert_never_raises(
    dissector: type[Dissector] | type[PayloadDissector] | Callable[[], Session],
    corpus: Sequence[Any],
    *,
    rounds: int = 300,
    seed: int = 0,
    options: dict[str, Any] | None = None,
) -> None:
    """Fuzz ``dissector`` with ``rounds`` mutants of ``corpus`` (deterministic for a
    ``seed``) and fail with a reproducer if anything raises.

    For a ``Dissector`` (or a session factory, as for ``run_session``), ``corpus`` holds
    scripts; each mutant is also cut at random points, ``probe`` is asked about prefixes
    of both directions, and the byte accounting is checked.  For a ``PayloadDissector``,
    ``corpus`` holds payloads (``bytes``) or ``CarriedMessage``s; mutants go through
    ``run_payload``.
    """
    rng = random.Random(seed)
    if isinstance(dissector, type) and issubclass(dissector, PayloadDissector):
        _fuzz_payload(dissector, list(corpus), rng, rounds, options)
        return
    probed = dissector if isinstance(dissector, type) and issubclass(dissector, Dissector) else None
    fed = cast("type[Dissector] | Callable[[], Session]", dissector)
    for r in range(rounds):
        items = mutate_script(rng, corpus)
        split = random.Random(rng.random())
        try:
            if probed is not None:
                _check_probe(probed, items, rng)
            run = run_session(fed, items, options=options, split=split)
            assert_accounting(run)
        except Exception as exc:
            raise AssertionError(
                f"round {r} (seed {seed}) raised {exc!r} on script {items!r}"
            ) from exc


def _fuzz_payload(
    dissector: type[PayloadDissector],
    corpus: list[Any],
    rng: random.Random,
    rounds: int,
    options: dict[str, Any] | None,
) -> None:
    msgs = [m if isinstance(m, CarriedMessage) else carried_message(bytes(m)) for m in corpus]
    if not msgs:
        msgs = [carried_message(b"")]
    for r in range(rounds):
        base = rng.choice(msgs)
        mutant = mutate_script(rng, [[Data(Direction.C2S, base.payload)]])
        payload = b"".join(it.data for it in mutant if isinstance(it, Data))
        msg = carried_message(payload, base.subject, op=base.op, reply_to=base.reply_to,
                              sid=base.sid, headers=base.headers, direction=base.direction)
        try:
            verdict = dissector.probe_payload(payload)
            if verdict not in tuple(Verdict):
                raise AssertionError(f"probe_payload returned {verdict!r}, not a Verdict")
            run_payload(dissector, [msg], options=options)
        except Exception as exc:
            raise AssertionError(
                f"round {r} raised {exc!r} on subject {msg.subject!r} payload {payload!r}"
            ) from exc


# ------------------------------------------------------------------ payload dissectors


def carried_message(
    payload: bytes,
    subject: str = "test.subject",
    *,
    op: str = "PUB",
    reply_to: str | None = None,
    sid: str | None = None,
    headers: dict[str, list[str]] | None = None,
    direction: Direction = Direction.C2S,
    offset: int = 0,
    carrier: str = "nats",
) -> CarriedMessage:
    """A ``CarriedMessage`` as the NATS dissector would offer it (provenance made up:
    frame 1 at ``T0_NS``, offsets ``offset`` .. ``offset + len(payload)``)."""
    return CarriedMessage(
        carrier, op, subject, reply_to, sid, headers, payload, direction, 0,
        offset, offset + len(payload), T0_NS, T0_NS, 1, 1,
    )


def run_payload(
    dissector: type[PayloadDissector],
    messages: Iterable[CarriedMessage],
    *,
    options: dict[str, Any] | None = None,
) -> list[Record]:
    """Offer ``messages`` in order to ``dissector`` through the same dispatcher the
    pipeline uses (exact bindings, subject patterns, payload probe; one scope), with
    exceptions propagating.  Returns every record decoded."""
    from dissectors.dispatch import ScopeDispatcher

    scope = ScopeDispatcher([dissector], cast(SessionOptions, dict(options or {})), strict=True)
    out: list[Record] = []
    for msg in messages:
        out += scope.dispatch(msg)
    return out


# ------------------------------------------------------------------------ validation


def _walk(records: Iterable[Record], parent: int | None,
          out: list[tuple[Record, int | None]]) -> None:
    for rec in records:
        out.append((rec, parent))
        if rec.children:
            _walk(rec.children, len(out) - 1, out)


def assert_rows_valid(
    dissector: type[Dissector] | type[PayloadDissector], records: Iterable[Record]
) -> None:
    """Check ``records`` (children included) against ``dissector.tables``: each row is
    for a declared table (or ``anomalies``, with a ``<name>.`` kind), has sane offsets,
    and builds an Arrow batch that passes the schema validator with the envelope added."""
    from dissectors.schema import rows_to_batch, validate_batch

    specs = {s.name: s for s in dissector.tables}
    flat: list[tuple[Record, int | None]] = []
    _walk(records, None, flat)
    rows: dict[str, list[dict[str, Any]]] = {}
    for i, (rec, parent) in enumerate(flat):
        where = f"record {i} ({rec.table})"
        if not isinstance(rec.direction, Direction):
            raise AssertionError(f"{where}: direction {rec.direction!r} is not a Direction")
        if not 0 <= rec.offset_start <= rec.offset_end:
            raise AssertionError(
                f"{where}: offsets {rec.offset_start}..{rec.offset_end} are not ordered"
            )
        if rec.table == "anomalies":
            kind = rec.values.get("kind")
            extra = set(rec.values) - {"kind", "detail"}
            if extra:
                raise AssertionError(f"{where}: anomaly values may only hold kind and detail")
            if not isinstance(kind, str) or not kind.startswith(f"{dissector.name}."):
                raise AssertionError(
                    f"{where}: anomaly kind {kind!r} should start with {dissector.name!r}."
                )
            continue
        spec = specs.get(rec.table)
        if spec is None:
            raise AssertionError(
                f"{where}: table {rec.table!r} is not in {dissector.__name__}.tables"
            )
        row = {
            "capture_id": "0" * 16,
            "flow_id": 0,
            "record_id": i,
            "parent_record_id": parent,
            "direction": rec.direction.short,
            "src_ip": "10.0.0.1",
            "src_port": 1,
            "dst_ip": "10.0.0.2",
            "dst_port": 2,
            "ts_first": rec.ts_first_ns,
            "ts_last": rec.ts_last_ns,
            "offset_start": rec.offset_start,
            "offset_end": rec.offset_end,
            "frame_first": rec.frame_first,
            "frame_last": rec.frame_last,
        }
        overlap = set(rec.values) & set(row)
        if overlap and spec.envelope:
            raise AssertionError(f"{where}: values set envelope columns {sorted(overlap)}")
        row.update(rec.values)
        rows.setdefault(rec.table, []).append(row)
    for name, table_rows in rows.items():
        validate_batch(specs[name], rows_to_batch(specs[name], table_rows))


# --------------------------------------------------------------------------- captures

_PCAP_HEADER = struct.Struct("<IHHiIII")
_PCAP_RECORD = struct.Struct("<IIII")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
_UDP = struct.Struct("!HHHH")
_FIN, _SYN, _PSH, _ACK = 0x01, 0x02, 0x08, 0x10
_MSS = 1460


class PcapFlow(NamedTuple):
    """One connection for ``write_pcap``: its script and endpoints.  ``client_port`` 0
    picks ``40000 + flow index``."""

    script: Sequence[ScriptItem]
    server_port: int
    transport: str = "tcp"
    client_port: int = 0
    client_ip: str = "10.0.0.1"
    server_ip: str = "10.0.0.2"


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return int(~s & 0xFFFF)


def _ip(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def _frame(src: bytes, dst: bytes, proto: int, l4: bytes, ident: int) -> bytes:
    hdr = _IPV4.pack(0x45, 0, 20 + len(l4), ident & 0xFFFF, 0x4000, 64, proto, 0, src, dst)
    hdr = hdr[:10] + struct.pack("!H", _checksum(hdr)) + hdr[12:]
    return b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + hdr + l4


def _tcp(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
         data: bytes = b"") -> bytes:
    seg = _TCP.pack(sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(seg) + len(data))
    csum = _checksum(pseudo + seg + data)
    return seg[:16] + struct.pack("!H", csum) + seg[18:] + data


def write_pcap(path: str | Path, flows: Sequence[PcapFlow], *, start_ns: int = T0_NS) -> Path:
    """Write ``flows`` one after the other to a classic pcap (Ethernet, µs) at ``path``.

    TCP flows get a three-way handshake, one segment per ``Data`` item (cut at 1460
    bytes), a sequence jump for each ``Gap`` (reassembly reports it as missing bytes), and
    FIN / FIN / ACK.  UDP flows get one datagram per ``Data`` item (no gaps).  Packets are
    1 ms apart from ``start_ns``.
    """
    path = Path(path)
    packets: list[bytes] = []
    for n, flow in enumerate(flows):
        c_ip, s_ip = _ip(flow.client_ip), _ip(flow.server_ip)
        cport = flow.client_port or 40000 + n
        sport = flow.server_port
        items = _items(flow.script)
        if flow.transport == "udp":
            for it in items:
                if isinstance(it, Gap):
                    raise ValueError("UDP flows cannot have gaps")
                src, dst, a, b = ((c_ip, s_ip, cport, sport) if it.direction == Direction.C2S
                                  else (s_ip, c_ip, sport, cport))
                udp = _UDP.pack(a, b, 8 + len(it.data), 0) + it.data
                packets.append(_frame(src, dst, 17, udp, len(packets)))
            continue
        if flow.transport != "tcp":
            raise ValueError(f"transport must be 'tcp' or 'udp', not {flow.transport!r}")
        seq = [1000, 5000]  # next sequence number per direction (ISN + 1 after the SYN)
        ends = ((c_ip, s_ip, cport, sport), (s_ip, c_ip, sport, cport))

        def seg(d: int, flags: int, data: bytes = b"",
                _e: tuple[tuple[bytes, bytes, int, int], ...] = ends,
                _s: list[int] = seq) -> None:
            src, dst, a, b = _e[d]
            packets.append(
                _frame(src, dst, 6, _tcp(src, dst, a, b, _s[d], _s[1 - d], flags, data),
                       len(packets))
            )

        seq[0] -= 1
        seg(0, _SYN)
        seq[0] += 1
        seq[1] -= 1
        packets.append(_frame(s_ip, c_ip, 6, _tcp(s_ip, c_ip, sport, cport, seq[1], seq[0],
                                                  _SYN | _ACK), len(packets)))
        seq[1] += 1
        seg(0, _ACK)
        for it in items:
            d = int(it.direction)
            if isinstance(it, Gap):
                seq[d] += it.nbytes
                continue
            for i in range(0, len(it.data), _MSS):
                chunk = it.data[i : i + _MSS]
                seg(d, _PSH | _ACK, chunk)
                seq[d] += len(chunk)
        seg(0, _FIN | _ACK)
        seq[0] += 1
        seg(1, _FIN | _ACK)
        seq[1] += 1
        seg(0, _ACK)
    with open(path, "wb") as f:
        f.write(_PCAP_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for i, pkt in enumerate(packets):
            ts_us = start_ns // 1000 + i * 1000
            f.write(_PCAP_RECORD.pack(ts_us // 1_000_000, ts_us % 1_000_000, len(pkt), len(pkt)))
            f.write(pkt)
    return path
