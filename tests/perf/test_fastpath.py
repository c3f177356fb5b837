"""The compiled NATS fast path gives exactly the reference's rows (issue 8).

Three levels: SHA-256 of the C code against hashlib; one session fed the same script
both ways (hand-built streams of every kind of operation, good and malformed, cut at
random points, with gaps, with and without payload dissectors); and whole captures
through the pipeline (every sample capture, a real bulk recording when present).
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.pipeline import Options, dissect_capture
from dissectors.api import Direction, Record, Span
from dissectors.nats import fastpath
from dissectors.nats.session import NatsSession
from dissectors.nats.table import NATS_TABLE
from dissectors.schema import arrow_schema, rows_to_batch
from dissectors.sdk.testing import Data, Gap, run_session

C2S, S2C = Direction.C2S, Direction.S2C
SAMPLES = Path(__file__).resolve().parents[2] / "samples"

pytestmark = pytest.mark.skipif(not fastpath.AVAILABLE, reason="extension not built")


def test_the_extension_is_built_and_used():
    # CI installs with pip, which must build it: a silent fallback would leave the
    # fast path untested and the benchmark measuring the reference
    assert fastpath.AVAILABLE
    assert fastpath.enabled()


@pytest.mark.parametrize("n", [0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000, 70000])
def test_sha256_matches_hashlib(n):
    data = random.Random(n).randbytes(n)
    want = hashlib.sha256(data).hexdigest()
    assert fastpath._speedups.sha256_hex(data) == want
    assert fastpath._speedups.sha256_hex(data, True) == want  # the portable code


@st.composite
def protobuf_like(draw) -> bytes:
    """Valid messages, and valid ones with a cut, a bad wire type or junk appended."""
    out = b""
    for _ in range(draw(st.integers(0, 4))):
        number = draw(st.integers(0, 40))
        wt = draw(_pick([0, 1, 2, 5, 3, 7]))
        out += _uvarint(number << 3 | wt)
        if wt == 0:
            out += _uvarint(draw(st.integers(0, 2**64 - 1)))
        elif wt == 2:
            body = draw(st.binary(max_size=20))
            out += _uvarint(len(body) + draw(_pick([0, 0, 0, 1, -1, 2**63]))) + body
        elif wt in (1, 5):
            out += draw(st.binary(min_size=8 if wt == 1 else 4, max_size=8 if wt == 1 else 4))
    return out[: draw(st.integers(0, len(out)))] if draw(st.booleans()) else out


def _uvarint(v: int) -> bytes:
    v &= 2**70 - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=60), protobuf_like()), min_size=10, max_size=10))
def test_protobuf_precheck_agrees_with_wire_scan(batch):
    """3,000 inputs as 300 examples of 10: the check is a few microseconds, Hypothesis's
    own cost per example is not (5.0 s of CPU as 3,000 examples, 1.3-1.6 s as 300 x 10)."""
    from dissectors.proto.wire import scan

    for data in batch:
        assert fastpath._speedups.protobuf_ok(data) == (scan(data) is not None), data


# ------------------------------------------------------------------ one session


_SCHEMA = arrow_schema(NATS_TABLE)
_NAMES = {f.name for f in NATS_TABLE.fields}
_INTS = ("ts_first_ns", "ts_last_ns", "offset_start", "offset_end", "frame_first", "frame_last")


def expand(records: list, session: NatsSession) -> list[Record]:
    """Replace the FastRows markers by the Records their rows stand for.  The rows of
    all markers go through one accumulator and one Arrow batch, in order, as the
    pipeline gathers them (not one batch per marker)."""
    acc = fastpath.new_columns()
    for rec in records:
        if type(rec) is fastpath.FastRows:
            acc.move(session.fast_rows, rec.n, 0, 0, int(rec.direction), None, "a", 1, "b", 2)
    batch = fastpath.batch_from_export(_SCHEMA, acc.export(), "x" * 16)
    ints = {c: batch.column(c).cast(pa.int64()).to_pylist() for c in _INTS}
    rows = batch.to_pylist()
    out: list[Record] = []
    start = 0
    for rec in records:
        if type(rec) is not fastpath.FastRows:
            out.append(rec)
            continue
        for i in range(start, start + rec.n):
            values = {k: v for k, v in rows[i].items() if k in _NAMES}
            out.append(Record("nats", rec.direction, ints["offset_start"][i],
                              ints["offset_end"][i], ints["ts_first_ns"][i], ints["ts_last_ns"][i],
                              ints["frame_first"][i], ints["frame_last"][i], values))
        start += rec.n
        out[-1].children.extend(rec.children)  # a carried message's: the last row's
    assert start == len(rows)
    return out


def normalise(records: list[Record]) -> tuple[list, list]:
    """Order, provenance and anomalies as tuples; rows through the table's Arrow
    conversion (so a column the reference leaves out equals an explicit null)."""
    shape, rows = [], []
    for rec in records:
        shape.append((rec.table, int(rec.direction), rec.offset_start, rec.offset_end,
                       rec.ts_first_ns, rec.ts_last_ns, rec.frame_first, rec.frame_last,
                       rec.values.get("kind"), rec.values.get("detail"),
                       normalise(rec.children)[0] if rec.children else ()))
        if rec.table == "nats":
            rows.append({"capture_id": "x", "flow_id": 0, "record_id": len(rows),
                         "direction": "c2s", **rec.values})
    table = rows_to_batch(NATS_TABLE, rows).to_pylist() if rows else []
    return shape, table


def both_ways(script, split, options=None, hook=None):
    """(reference run, fast run) of one script."""
    def ref():
        s = NatsSession(dict(options or {}))
        if hook:
            s.on_message = hook[0]
        return s

    def fast():
        s = ref()
        if hook:
            s.enable_fast(fastpath.new_columns(), *hook[1:])
        else:
            s.enable_fast(fastpath.new_columns())
        return s

    a = run_session(ref, script, split=random.Random(split))
    b = run_session(fast, script, split=random.Random(split))
    return a, b


def assert_same(a, b):
    ra = a.records
    rb = expand(b.records, b.session)
    assert normalise(ra) == normalise(rb)
    assert a.session.decoded_bytes == b.session.decoded_bytes
    assert a.session.undecoded_bytes == b.session.undecoded_bytes
    assert a.session.ops == b.session.ops


SUBJECTS = [b"a", b"orders.new", b"wc.a.b", b"_INBOX.x1y2", b"sub\xc3\xa9", b"q"]
HEADER_BLOCKS = [
    b"NATS/1.0\r\n\r\n",
    b"NATS/1.0\r\nX-A: 1\r\n\r\n",
    b"NATS/1.0\r\nX-A: 1\r\nX-B:  two \t\r\nX-A: 3\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
    b"NATS/1.0 503 No Responders\r\n\r\n",
    b"NATS/1.0  404   Not Found \r\n\r\n",
    b"NATS/1.0\r\n: empty name\r\n\r\n",  # problem: no name
    b"NATS/1.0\nX-A: 1\n\n",  # bare LF
    b"NATS/1.0\r\nX-A: 1\r\n\r\ntrailing",  # bytes after the empty line
    b"NATS/1.0\r\nX-A: 1\r\n",  # no empty line
    b"NATS/2.0\r\n\r\n",
    b"NATS/1.0 5x3\r\n\r\n",
    b"HTTP/1.1\r\n\r\n",
    b"NATS/1.0\r\n \t:x\r\n\r\n",
    b"NATS/1.0\r\nK\xc3\xa9: v\r\n\r\n",
]


_PICKS: dict[tuple, st.SearchStrategy] = {}


def _pick(options: list) -> st.SearchStrategy:
    """``st.sampled_from(options)``, built once per list: Hypothesis validates every new
    strategy object at its first draw, so a fresh one per draw is validated every time."""
    key = tuple(options)
    if key not in _PICKS:
        _PICKS[key] = st.sampled_from(key)
    return _PICKS[key]


@st.composite
def c2s_op(draw) -> bytes:
    subj = draw(st.sampled_from(SUBJECTS))
    payload = draw(st.binary(max_size=40))
    kind = draw(st.integers(0, 19))
    verb = draw(_pick([b"PUB", b"pub", b"Pub"])) if kind < 8 else b"PUB"
    sep = draw(_pick([b" ", b" ", b"\t", b"  ", b" \r"]))
    eol = draw(_pick([b"\r\n", b"\r\n", b"\r\n", b"\n"]))
    if kind < 6:
        reply = draw(_pick([b"", b"_INBOX.r"]))
        args = [subj] + ([reply] if reply else []) + [str(len(payload)).encode()]
        trailer = draw(_pick([b"\r\n"] * 6 + [b"\n", b"xx", b""]))
        return verb + sep + sep.join(args) + eol + payload + trailer
    if kind < 9:
        block = draw(st.sampled_from(HEADER_BLOCKS))
        reply = draw(_pick([b"", b"r.1"]))
        sizes = [str(len(block)).encode(), str(len(block) + len(payload)).encode()]
        args = [subj] + ([reply] if reply else []) + sizes
        return b"HPUB" + sep + sep.join(args) + eol + block + payload + b"\r\n"
    if kind < 11:
        queue = draw(_pick([b"", b"workers"]))
        return b"SUB " + subj + (b" " + queue if queue else b"") + b" 17" + eol
    if kind < 13:
        n = draw(_pick([b"", b" 5", b" x", b" 0"]))
        return b"UNSUB 17" + n + eol
    if kind < 15:
        return draw(_pick([b"PING", b"PONG", b"ping", b"PING x", b"PINGX"])) + eol
    if kind == 15:
        return b'CONNECT {"verbose":false,"pass":"s3cret","name":"c"}' + eol
    if kind == 16:
        return draw(_pick([b"PUB a 99999999999", b"PUB a -1", b"PUB", b"HPUB a 5 3",
                                     b"FOO bar", b" PUB a 1", b"PUB a\x0b 1", b""])) + eol
    if kind == 17:
        return b"MSG wrong.way 1 " + str(len(payload)).encode() + eol + payload + b"\r\n"
    if kind == 18:
        return b"PUB big 2000000\r\n" + b"z" * 50
    return b"PUB over.max 70000\r\n" + b"y" * 70000 + b"\r\n"


@st.composite
def s2c_op(draw) -> bytes:
    subj = draw(st.sampled_from(SUBJECTS))
    payload = draw(st.binary(max_size=40))
    kind = draw(st.integers(0, 12))
    eol = draw(_pick([b"\r\n", b"\r\n", b"\n"]))
    if kind < 5:
        reply = draw(_pick([b"", b"_INBOX.r"]))
        args = [subj, b"9"] + ([reply] if reply else []) + [str(len(payload)).encode()]
        return b"MSG " + b" ".join(args) + eol + payload + b"\r\n"
    if kind < 8:
        block = draw(st.sampled_from(HEADER_BLOCKS))
        sizes = [str(len(block)).encode(), str(len(block) + len(payload)).encode()]
        return b"HMSG " + b" ".join([subj, b"9", *sizes]) + eol + block + payload + b"\r\n"
    if kind == 8:
        return draw(_pick([b"+OK", b"PING", b"PONG", b"-ERR 'bad'"])) + eol
    if kind == 9:
        return b'INFO {"server_id":"S","max_payload":20,"headers":true}' + eol
    if kind == 10:
        return b"PUB wrong.way " + str(len(payload)).encode() + eol + payload + b"\r\n"
    if kind == 11:
        return b"MSG a 1 " + str(len(payload) + 3).encode() + eol + payload + b"\r\n"
    return b"\x16\x03\x01\x00\x05hello"


_OPS = {C2S: st.lists(c2s_op(), min_size=1, max_size=4),
        S2C: st.lists(s2c_op(), min_size=1, max_size=4)}


@st.composite
def scripts(draw):
    items = []
    for _ in range(draw(st.integers(1, 25))):
        d = draw(_pick([C2S, S2C]))
        if draw(st.integers(0, 30)) == 0:
            items.append(Gap(d, draw(st.integers(1, 60))))
            continue
        ops = draw(_OPS[d])
        items.append(Data(d, b"".join(ops)))
    return items


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts(), st.integers(0, 10_000))
def test_a_session_gives_the_same_records_both_ways(script, split):
    a, b = both_ways(script, split)
    assert_same(a, b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts(), st.integers(0, 10_000), st.sets(st.sampled_from(SUBJECTS)),
       st.sets(st.integers(0, 255), max_size=40), st.booleans())
def test_payload_dissector_candidates_go_to_the_reference(script, split, bound, firsts,
                                                         proto):
    """With a carrier hook: a bound subject or a payload a probe claims is offered,
    in order, exactly as the reference offers it; the rest stays on the fast path."""
    from dissectors.proto.wire import scan

    def probe(payload):  # a probe that may need a well-formed protobuf (like STAN's)
        return (payload[0] in firsts and payload[0] % 2 == 0
                and (not proto or scan(payload) is not None))

    flags = bytes((2 if proto else 1) if b in firsts else 0 for b in range(256))
    _offers_match(script, split, bound, flags, probe)


def _offers_match(script, split, bound, flags, probe):
    """The reference, the fast path behind a plain hook and the fast path behind
    ``carry`` (the scan offers them itself) offer the same messages in the same order and
    give the same rows; ``flags``/``probe`` as a scope's ``first_bytes``/``probed``."""
    bound_txt = {s.decode(errors="backslashreplace") for s in bound}
    offered: list[list] = [[], []]
    which = [0]

    def hook(row, payload):
        offered[which[0]].append((row.values["subject"], payload))
        # a claimed message gets a child row, as STAN/Liftbridge give
        return [Record.anomaly("test.claimed", row.values["subject"], row.direction,
                               row.offset_start, row.offset_end, row.ts_first_ns,
                               row.ts_last_ns, row.frame_first, row.frame_last)]

    def claims(subject, payload):
        return subject in bound_txt or (payload[:1] != b"" and probe(payload))

    def filtered_hook(row, payload):
        return hook(row, payload) if claims(row.values["subject"], payload) else []

    verdicts: dict[str, bool] = {}
    fast_hook = (filtered_hook, flags, verdicts, lambda s: s in bound_txt, probe)
    which[0] = 0
    a = run_session(lambda: _hooked(filtered_hook), script, split=random.Random(split))
    which[0] = 1
    b = run_session(lambda: _hooked(filtered_hook, fast_hook), script,
                    split=random.Random(split))
    assert offered[0] == offered[1]
    assert_same(a, b)
    # through carry(): the scanner takes bound and claimed PUB/MSG itself
    # and offers them as the reference does, their records the last row's children
    offered.append([])
    which[0] = 2
    asked = []  # (claimed, no headers) of every message offered to the scope

    def offer(m):
        asked.append((claims(m.subject, m.payload), m.headers is None))
        return filtered_hook(_row_of(m), m.payload)

    scope = _Scope(offer, flags, lambda s: s in bound_txt, probe)
    c = run_session(lambda: _carried(scope, True), script, split=random.Random(split))
    assert offered[2] == offered[0]
    assert_same(a, c)
    return asked


_ASCII_SUBJECTS = [s for s in SUBJECTS if s.isascii()]


@st.composite
def _near(draw, prefixes: list[bytes]) -> bytes:
    """A payload that starts with one of ``prefixes``, with a cut or changed one, or not."""
    p = draw(st.sampled_from(prefixes))
    how = draw(st.integers(0, 4))
    if how == 1:
        p = p[: draw(st.integers(0, len(p) - 1))]  # cut: shorter than the prefix
    elif how == 2:
        i = draw(st.integers(0, len(p) - 1))
        p = p[:i] + bytes([p[i] ^ draw(st.integers(1, 255))]) + p[i + 1:]
    elif how == 3:
        return draw(st.binary(max_size=6))
    return p + draw(st.binary(max_size=6))


@st.composite
def _prefix_scripts(draw):
    """Scripts of PUB/MSG/HPUB/HMSG whose payloads are near some probe prefixes."""
    prefixes = draw(st.lists(st.binary(min_size=1, max_size=5), min_size=1, max_size=3))
    ops = []
    for _ in range(draw(st.integers(1, 12))):
        subj = draw(st.sampled_from(_ASCII_SUBJECTS))  # (the scanner refuses the others)
        payload = draw(_near(prefixes))
        kind = draw(st.integers(0, 3))
        if kind < 2:
            ops.append(Data(C2S, b"PUB %s %d\r\n%s\r\n" % (subj, len(payload), payload)))
        elif kind == 2:
            ops.append(Data(S2C, b"MSG %s 9 %d\r\n%s\r\n" % (subj, len(payload), payload)))
        else:
            block = HEADER_BLOCKS[0]
            ops.append(Data(S2C, b"HMSG %s 9 %d %d\r\n%s%s\r\n" % (
                subj, len(block), len(block) + len(payload), block, payload)))
    return prefixes, ops


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_prefix_scripts(), st.integers(0, 10_000), st.sets(st.sampled_from(_ASCII_SUBJECTS)),
       st.sets(st.integers(0, 255), max_size=3), st.booleans(), st.booleans())
def test_probes_with_an_exact_prefix_rule_are_decided_by_the_scan(case, split, bound, other,
                                                                    protobuf, other_first):
    """A prober declaring ``probe_prefixes`` (Liftbridge's magic) is decided in C (flag 3,
    ``dispatch.probe_first_bytes``), no stop to ask it; another prober that may claim the
    same first byte (``other``, protobuf-only or not, before or after it) sends that byte
    back to the probe: the offers and rows are the reference's either way."""
    from dissectors import dispatch

    prefixes, script = case

    class Exact:
        probe_prefixes = tuple(prefixes)

    class Other:
        probe_prefixes = None
        probe_first_bytes = frozenset(other)
        probe_needs_protobuf = protobuf

    probers = ([Other, Exact] if other_first else [Exact, Other]) if other else [Exact]
    flags = dispatch.probe_first_bytes(probers)  # type: ignore[arg-type]
    assert all(flags[b] == (1 if b in other else 3) for b in {p[0] for p in prefixes})

    from dissectors.proto.wire import scan

    def probe(payload):  # the other prober claims only what its declaration lets it
        return payload.startswith(tuple(prefixes)) or (
            payload[0] in other and (not protobuf or scan(payload) is not None))

    asked = _offers_match(script, split, bound, flags, probe)
    # the scan carries only what a probe claims (the reference offers every HMSG)
    assert all(claimed for claimed, plain in asked if plain)


class _Scope:
    """A ``CarrierScope`` of one flow (``dissectors.dispatch.FlowScope``'s members)."""

    def __init__(self, offer, first_bytes, bound, probed):
        self.flow_id = 7
        self.first_bytes = first_bytes
        self.verdicts: dict[str, bool] = {}
        self.bound = bound
        self.probed = probed
        self.offer = offer


def _row_of(m) -> Record:
    """The carrier row a ``CarriedMessage`` was built from, as the test hooks read it."""
    return Record("nats", m.direction, m.offset_start, m.offset_end, m.ts_first_ns,
                  m.ts_last_ns, m.frame_first, m.frame_last, {"subject": m.subject})


def _carried(scope, fast, options=None):
    s = NatsSession(dict(options or {}))
    s.carry(scope)
    if fast:
        s.columnar(True)
    return s


def test_carried_messages_stay_on_the_fast_path():
    # bound PUB/MSG: rows in the columns, the offer's records their children, and no
    # Record of the reference's in between
    def offer(m):  # as a dispatcher: records for a bound subject only
        return ([m.anomaly("test.claimed", f"{m.op} {m.subject} {m.reply_to} {m.sid}")]
                if m.subject.startswith("s.") else [])

    ops = b"".join(b"PUB s.%d r 3\r\nabc\r\n" % i for i in range(5)) + b"PUB t 1\r\nx\r\n"
    scope = _Scope(offer, bytes(256), lambda s: s.startswith("s."), lambda p: False)
    b = run_session(lambda: _carried(scope, True), [Data(C2S, ops)])
    assert all(type(r) is fastpath.FastRows for r in b.records)
    assert [len(r.children) for r in b.records] == [1, 1, 1, 1, 1, 0]
    a = run_session(lambda: _carried(scope, False), [Data(C2S, ops)])
    assert_same(a, b)
    # a payload over carry_max is offered only when the reference keeps it whole anyway
    # (payload_cap None or not below it): 3-byte payloads, carry_max 2
    for cap, kids in ((None, 1), (3, 1), (2, 0)):
        opts = {"carry_max": 2, "payload_cap": cap}
        b = run_session(lambda o=opts: _carried(scope, True, o), [Data(C2S, ops)])
        a = run_session(lambda o=opts: _carried(scope, False, o), [Data(C2S, ops)])
        assert_same(a, b)
        assert sum(len(r.children) for r in b.records) == 5 * kids


def test_the_scan_reads_a_verdict_after_the_offer_before_it():
    # the scan offers a carried message itself and goes on: the next operation's
    # verdict must be the one after that offer, whose decode may bind or unbind
    # subjects -- the same subject again included (q: a probe's exact prefix claims its
    # first message, whose decode binds q; the next one on q is bound, not claimed)
    from dissectors import dispatch

    class Exact:
        probe_prefixes = (b"M",)

    flags = dispatch.probe_first_bytes([Exact])  # type: ignore[list-item]

    def run(fast):
        bound = {"s"}

        def offer(m):  # a decode that learns: binds q and s's reply, a bare s unbinds s
            if m.subject not in bound and m.payload[:1] != b"M":
                return []
            if m.subject == "s" and m.reply_to:
                bound.add(m.reply_to)
                scope.verdicts[m.reply_to] = True
            elif m.subject == "s":
                bound.discard("s")
                scope.verdicts.pop("s", None)
            elif m.subject == "q":
                bound.add("q")
                scope.verdicts["q"] = True
            return [m.anomaly("test.claimed", f"{m.subject} {m.payload!r}")]

        scope = _Scope(offer, flags, lambda s: s in bound, lambda p: p[:1] == b"M")
        ops = (b"PUB r 1\r\na\r\nPUB s r 1\r\nb\r\nPUB r 1\r\nc\r\nPUB s 1\r\nd\r\n"
               b"PUB s 1\r\ne\r\nPUB q 1\r\nM\r\nPUB q 1\r\nf\r\n")
        return run_session(lambda: _carried(scope, fast), [Data(C2S, ops)])

    a, b = run(False), run(True)
    assert_same(a, b)
    kids = [k.values["detail"] for r in b.records for k in r.children]
    assert kids == ["s b'b'", "r b'c'", "s b'd'", "q b'M'", "q b'f'"]


def test_the_verdict_cache_stays_bounded(monkeypatch):
    # a reply subject per request (_INBOX.<id>.<n>): the verdicts the fast path caches
    # start again from empty at the bound, and the rows and offers stay the reference's
    from dissectors.nats import session as nats_session

    monkeypatch.setattr(nats_session, "MAX_VERDICTS", 3)
    offered: list[list] = [[], []]
    which = [0]

    def hook(row, payload):
        if row.values["subject"].endswith(".7"):
            offered[which[0]].append(payload)
        return []

    ops = b"".join(b"MSG _INBOX.x.%d 1 2\r\nhi\r\n" % i for i in range(10))
    verdicts: dict[str, bool] = {}
    fast = (hook, None, verdicts, lambda s: s.endswith(".7"), lambda p: False)
    a = run_session(lambda: _hooked(hook), [Data(S2C, ops)])
    which[0] = 1
    b = run_session(lambda: _hooked(hook, fast), [Data(S2C, ops)])
    assert offered[0] == offered[1] == [b"hi"]
    assert_same(a, b)
    assert 0 < len(verdicts) <= 3


def _hooked(hook, fast=None):
    s = NatsSession({})
    s.on_message = hook
    if fast:
        s.enable_fast(fastpath.new_columns(), *fast[1:])
    return s


def test_cut_operations_are_reported_as_the_reference_reports_them():
    # the fast path waits for a whole operation; a gap or the end must still give the
    # row without payload and the gap anomaly the reference gives
    script = [Data(C2S, b"PUB a 10\r\n01234"), Gap(C2S, 3), Data(C2S, b"89\r\nPING\r\n"),
              Data(S2C, b"MSG a 1 5\r\nhel")]
    for split in range(20):
        a, b = both_ways(script, split)
        assert_same(a, b)
    kinds = [r.values.get("kind") for r in a.records if r.table == "anomalies"]
    assert "nats.gap_in_payload" in kinds and "nats.eof_in_payload" in kinds


def test_the_fast_path_takes_ordinary_operations():
    # not only equal, but actually fast: ordinary traffic leaves no Record behind
    ops = b"".join(b"PUB s.%d 3\r\nabc\r\n" % i for i in range(100)) + b"PING\r\n"
    a, b = both_ways([Data(C2S, ops)], 0)
    assert_same(a, b)
    assert all(type(r) is fastpath.FastRows for r in b.records)
    assert sum(r.n for r in b.records) == 101


def test_repeated_large_payloads_keep_their_own_digests():
    # fan-out: the scanner takes the digest of an equal payload it hashed recently
    # (same length, then every byte compared); payloads of that length differing in one
    # byte, and one repeated after more bytes than it keeps (8 MiB), get their own
    rng = random.Random(7)
    big = rng.randbytes(40_000)
    flip = bytes([big[-1] ^ 1])
    variants = [big, big[:-1] + flip, flip + big[1:], big[:20_000] + flip + big[20_001:], big]
    variants += [rng.randbytes(150_000) for _ in range(60)] + [big]
    c2s = b"".join(b"PUB s %d\r\n%s\r\n" % (len(v), v) for v in variants)
    s2c = b"".join(b"MSG s 1 %d\r\n%s\r\n" % (len(v), v) for v in variants)
    script = [Data(C2S, c2s), Data(S2C, s2c)]
    want = [hashlib.sha256(v).hexdigest() for v in variants] * 2
    hits, misses = fastpath._speedups.reuse_stats()[:2]
    runs = [both_ways(script, 0), (run_session(lambda: NatsSession({}), script),
                                   run_session(_fast_session, script, split=_pieces))]
    for a, b in runs:
        assert [r.values["payload_sha256"] for r in a.records] == want
        assert_same(a, b)  # (the fast rows, digests included, are the reference's)
    now = fastpath._speedups.reuse_stats()
    assert now[0] > hits and now[1] > misses


def test_big_column_buffers_keep_their_bytes_while_recycled():
    # payload columns past 256 KiB are mapped regions that return to a pool when Arrow
    # lets go of them (_speedups.c, "Big buffers"): batches made while earlier ones live,
    # and from regions of batches dropped, each keep their own rows
    rng = random.Random(11)
    mapped, reused = fastpath._speedups.region_stats()[:2]
    kept: list[tuple[pa.RecordBatch, list[bytes]]] = []
    for turn in range(24):
        payloads = [rng.randbytes(rng.randrange(20_000, 90_000))
                    for _ in range(rng.randrange(4, 14))]
        ops = b"".join(b"PUB s %d\r\n%s\r\n" % (len(p), p) for p in payloads)
        run = run_session(lambda: _fast_session({"payload_cap": None}), [Data(C2S, ops)],
                          split=_pieces)
        acc = fastpath.new_columns()
        for rec in run.records:
            acc.move(run.session.fast_rows, rec.n, 0, 0, int(rec.direction), None, "a", 1,
                     "b", 2)
        kept.append((fastpath.batch_from_export(_SCHEMA, acc.export(), "x" * 16), payloads))
        if turn % 3 == 2:  # (Arrow lets go of one of the older batches)
            del kept[rng.randrange(len(kept))]
    for batch, payloads in kept:
        assert batch.column("payload").to_pylist() == payloads
    now = fastpath._speedups.region_stats()
    assert now[0] > mapped and now[1] > reused  # (both ways of getting one were taken)
    assert now[3] <= 32 << 20  # the pool's bound


def _fast_session(options: dict | None = None) -> NatsSession:
    s = NatsSession(options or {})
    s.enable_fast(fastpath.new_columns())
    return s


def _pieces(n: int) -> list[int]:
    """Segments of 16,000 bytes (an offload capture's): a 150 kB payload in ~10 feeds."""
    return [16_000] * (n // 16_000) + ([n % 16_000] if n % 16_000 else [])


def test_a_held_operation_waits_without_rescanning_and_meets_a_new_max_payload(monkeypatch):
    # the scanner is not called again while the payload it waits for is short, and an
    # INFO setting max_payload meanwhile reaches the held operation as in the reference
    from dissectors.nats import session as nats_session

    calls = []
    scan = fastpath.scan_with

    def counting(*args):
        calls.append(args[2])
        return scan(*args)

    monkeypatch.setattr(nats_session, "_scan_with", counting)  # (the session's binding)
    body = bytes(range(256)) * 40
    script = [Data(C2S, b"PUB a %d\r\n" % len(body) + body[:100])]
    script += [Data(C2S, body[i:i + 1000]) for i in range(100, len(body), 1000)]
    script += [Data(C2S, b"\r\nPING\r\n")]
    a = run_session(lambda: NatsSession({}), script)
    calls.clear()
    b = run_session(_fast_session, script)
    assert_same(a, b)
    assert 0 < len(calls) <= 3  # the line, the last piece (payload in), the trailer
    for cut in (3, 6):  # before and while the payload comes
        info = Data(S2C, b'INFO {"server_id":"S","max_payload":100}\r\n')
        held = [*script[:cut], info, *script[cut:]]
        a = run_session(lambda: NatsSession({}), held)
        b = run_session(_fast_session, held)
        assert_same(a, b)  # (the line came before the INFO: checked against no limit)


# --------------------------------------------- the scan straight on the fed bytes


def _framer_state(session: NatsSession, budget) -> list:
    """What a later feed, gap, close or budget reclaim can see of both framers, and of
    the run's budget: counters, position, bytes held, the byte before them (a resync
    rule's ``prev_byte``), the provenance of the next byte, what was told the budget."""
    out = []
    for d, fr in enumerate(session.framers):
        b = fr._b
        st = session._dirs[d]
        out.append((fr.fed_bytes, fr.decoded_bytes, fr.undecoded_bytes, fr.pending_bytes,
                    fr.offset, fr.next_offset, fr.at_line, fr._told, fr._waiting, fr._mode,
                    bytes(b.data[b.pos:]), b.data[b.pos - 1] if b.pos else fr._prev_byte,
                    b.chunk_at(b.base + b.pos), st.values is None, st.wait_for,
                    st.wait_at if st.wait_for else None))
    held = [[(session.framers.index(h), n) for h, n in tier.items()] for tier in budget._tiers]
    out.append((budget.used, budget.peak, budget.releases, held))
    out.append((session.decoded_bytes, session.undecoded_bytes, session.ops))
    return out


def _shape(records: list) -> list:
    return [(type(r).__name__, int(r.direction), getattr(r, "n", None),
             _shape(r.children), None if type(r) is fastpath.FastRows else
             (r.offset_start, r.offset_end, r.ts_first_ns, r.frame_first, r.frame_last,
              r.values.get("kind"), r.values.get("detail"))) for r in records]


@st.composite
def _feeds(draw):
    """A script cut into packets, fed one packet at a time (``feed``) or as runs
    (``feed_chunks``), gaps between."""
    script = draw(scripts())
    steps = []
    for item in script:
        if isinstance(item, Gap):
            steps.append(item)
            continue
        data, pos, packets = item.data, 0, []
        while pos < len(data):
            n = draw(st.sampled_from((1, 3, 9, 14, 40, 200, len(data))))
            packets.append(data[pos:pos + n])
            pos += n
        while packets:
            k = draw(st.integers(1, 4))
            steps.append((item.direction, packets[:k], draw(st.booleans())))
            packets = packets[k:]
    return steps


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_feeds(), st.sets(st.sampled_from(SUBJECTS)), st.sets(st.integers(0, 255), max_size=40),
       st.sampled_from((1 << 30, 400, 60, 12)), st.sampled_from(((), (C2S,), (S2C,))))
def test_the_scan_on_the_fed_bytes_leaves_what_the_framer_would(steps, bound, firsts, limit,
                                                                 joined):
    """``NatsSession.feed_framer``'s direct scan against the same session fed through its
    framer's buffer (``direct_feed`` False), in lockstep: after every feed and gap the
    same records, framer state (counters, position, bytes held, provenance, resync
    byte), budget holders and charges; at the end the same rows, which are the
    reference's.  Packets cut anywhere (partial operations, a line split), runs of
    them, refused and carried operations, verdict and probe stops, gaps, a late join,
    a budget small enough to take lines back."""
    from reassembly.limits import MemoryBudget

    bound_txt = {s.decode(errors="backslashreplace") for s in bound}
    flags = bytes(1 if b in firsts else 0 for b in range(256))

    def probe(payload):
        return payload[0] in firsts and payload[0] % 2 == 0

    def offer(m):
        if m.subject in bound_txt or (m.payload[:1] != b"" and probe(m.payload)):
            return [m.anomaly("test.claimed", f"{m.op} {m.subject} {len(m.payload)}")]
        return []

    def make(fast: bool, direct: bool):
        budget = MemoryBudget(limit)
        s = NatsSession({"memory_budget": budget, "joined": joined})
        s.carry(_Scope(offer, flags, lambda x: x in bound_txt, probe))
        if fast:
            s.columnar(True)
        s.direct_feed = direct
        return s, budget

    (ref, _), (a, a_budget), (b, b_budget) = make(False, False), make(True, False), \
        make(True, True)
    got: list[list] = [[], [], []]
    offsets = [0, 0]
    frame = 0
    for step in steps:
        frame += 1
        if isinstance(step, Gap):
            d = step.direction
            for k, s in enumerate((ref, a, b)):
                got[k] += s.gap(d, offsets[d], step.nbytes, frame)
            offsets[d] += step.nbytes
        else:
            d, packets, run = step
            start = offsets[d]
            chunks = []
            for i, p in enumerate(packets):
                offsets[d] += len(p)
                chunks.append((offsets[d], frame * 10 + i, frame * 10 + i, frame, frame + i))
            span = Span(start, chunks[0][1], chunks[-1][2], chunks[0][3], chunks[-1][4])
            for k, s in enumerate((ref, a, b)):
                if run:
                    got[k] += s.feed_chunks(d, b"".join(packets), span, chunks)
                else:
                    pos = start
                    for c in chunks:
                        got[k] += s.feed(d, b"".join(packets)[pos - start:c[0] - start],
                                         Span(pos, c[1], c[2], c[3], c[4]))
                        pos = c[0]
        assert _shape(got[1]) == _shape(got[2])
        assert _framer_state(a, a_budget) == _framer_state(b, b_budget)
    for k, s in enumerate((ref, a, b)):
        got[k] += s.close(frame + 1)
    assert _framer_state(a, a_budget) == _framer_state(b, b_budget)
    want = normalise(got[0])
    assert normalise(expand(got[1], a)) == want
    assert normalise(expand(got[2], b)) == want
    assert ref.decoded_bytes == b.decoded_bytes and ref.undecoded_bytes == b.undecoded_bytes


# ------------------------------------------------------------------ whole captures


def _tables(out: Path) -> dict[str, pa.Table]:
    res = {}
    for tdir in sorted(out.iterdir()):
        files = sorted(glob.glob(str(tdir / "*" / "*.parquet")))
        if not files:
            continue
        tab = pa.concat_tables([pq.read_table(f) for f in files])
        res[tdir.name] = tab.sort_by("record_id" if "record_id" in tab.column_names
                                     else "flow_id")
    return res


def dissect_both(path: Path, tmp: Path) -> tuple[dict, dict]:
    keys = path.with_suffix(".keys")
    keylog = str(keys) if keys.exists() else None
    res = []
    for fast in (False, True):
        out = tmp / ("fast" if fast else "ref")
        shutil.rmtree(out, ignore_errors=True)
        dissect_capture(path, out, Options(fast=fast, keylog=keylog, strict=True,
                                           validate=True))
        res.append(_tables(out))
    return res[0], res[1]


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.pcap")))
def test_every_sample_capture_gives_the_same_tables(name, tmp_path):
    ref, fast = dissect_both(SAMPLES / name, tmp_path)
    assert ref.keys() == fast.keys()
    for table in ref:
        assert ref[table].equals(fast[table]), table


@pytest.mark.skipif(not os.environ.get("MSGCAP_BULK_CAPTURE"),
                    reason="set MSGCAP_BULK_CAPTURE to a recorded bulk capture")
def test_a_bulk_recording_gives_the_same_tables(tmp_path):
    ref, fast = dissect_both(Path(os.environ["MSGCAP_BULK_CAPTURE"]), tmp_path)
    for table in ref:
        assert ref[table].equals(fast[table]), table
