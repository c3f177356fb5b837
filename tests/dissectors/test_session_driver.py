"""The one session driver (``dissectors.sessions.FramedSession``): what it does for every
stream dissector — drain before a gap or the end, ``closing``, ``limit.memory`` rows,
the keep-secrets context, layers, and plain-string anomaly kinds."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from dissectors.api import Direction, Record, Span
from dissectors.framing import Dropped, Line, LineFramer, Released
from dissectors.redaction import secrets_kept
from dissectors.sessions import LIMIT_MEMORY, FramedSession

C, S = Direction.C2S, Direction.S2C


class Kind(StrEnum):
    LINE = "toy.line"
    CUT = "toy.cut"


def span(offset: int) -> Span:
    return Span(offset, 1000 + offset, 1000 + offset, 1, 1)


class Toy(FramedSession):
    """One anomaly per line (so kinds are visible) and one per cut unit; ``lazy`` makes
    ``drain_fed`` leave every event for later, as a compiled fast path waiting for bytes
    does."""

    redact_details = True

    def __init__(self, *, lazy: bool = False, keep_secrets: bool = False) -> None:
        super().__init__(LineFramer(max_line_bytes=64), LineFramer(max_line_bytes=64))
        self.lazy = lazy
        self.keep_secrets = keep_secrets
        self.seen: list[tuple[str, bool, bool]] = []  # (what, closing, secrets kept)

    def drain_fed(self, direction: Direction, out: list[Record]) -> None:
        if not self.lazy:
            self.drain(direction, out)

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        self.seen.append((type(ev).__name__, self.closing, secrets_kept()))
        if type(ev) is Line:
            self.anomaly(out, Kind.LINE, ev.data.decode(), direction, ev)
        elif type(ev) is Dropped:
            self.anomaly(out, Kind.CUT, "eof" if self.closing else "gap", direction, ev)

    def on_close(self, ts_ns: int, out: list[Record]) -> None:
        self.seen.append(("on_close", self.closing, secrets_kept()))


def details(records: list[Record]) -> list[str]:
    return [r.values["detail"] for r in records]


def test_what_came_before_a_gap_is_drained_before_the_gap_is_flushed() -> None:
    s = Toy(lazy=True)
    assert s.feed(C, b"one\ntwo\npart", span(0)) == []
    got = s.gap(C, 12, 5, 2000)
    assert details(got) == ["one", "two", "gap"]
    assert s.decoded_bytes[C] == 8 and s.undecoded_bytes[C] == 4


def test_the_end_drains_too_and_closing_is_set_for_its_flush_and_on_close() -> None:
    s = Toy(lazy=True)
    s.feed(C, b"a\nrest", span(0))
    s.feed(S, b"b\n", span(0))
    got = s.close(3000)
    assert details(got) == ["a", "eof", "b"]
    assert s.seen == [("Line", True, False), ("Dropped", True, False), ("Line", True, False),
                      ("on_close", True, False)]


def test_kinds_are_plain_strings_and_details_pass_the_gate() -> None:
    s = Toy()
    got = s.feed(C, b'{"pass":"hunter2"}\n', span(0))
    assert type(got[0].values["kind"]) is str and got[0].values["kind"] == "toy.line"
    assert "hunter2" not in got[0].values["detail"]


def test_keep_secrets_runs_the_session_with_the_gate_off() -> None:
    s = Toy(keep_secrets=True)
    got = s.feed(C, b'{"pass":"hunter2"}\n', span(0))
    assert "hunter2" in got[0].values["detail"]
    s.close(1)
    assert all(kept for _, _, kept in s.seen)
    assert not secrets_kept()


def test_a_released_unit_is_a_limit_memory_row() -> None:
    s = Toy()
    ev = Released(8, None, 0, 8, 1000, 1001, 1, 2)
    out: list[Record] = []
    s.handle(C, ev, out)
    assert out[0].values == {"kind": LIMIT_MEMORY, "detail": ev.detail()}
    assert s.seen == []  # not the protocol's business


class Upper:
    """A layer: decodes wire bytes (upper-cases them) into the session's framer."""

    def __init__(self, session: Toy, direction: Direction) -> None:
        self.session, self.direction = session, direction
        self.calls: list[str] = []

    def feed(self, data: bytes, span: Span, out: list[Record]) -> None:
        self.calls.append("feed")
        self.session.framers[self.direction].feed(data.upper(), span)
        self.session.drain(self.direction, out)

    def gap(self, offset: int, nbytes: int, ts_ns: int, out: list[Record]) -> None:
        self.calls.append("gap")
        fr = self.session.framers[self.direction]
        self.session.flush(self.direction, fr.gap(offset, nbytes), out)

    def close(self, out: list[Record]) -> None:
        self.calls.append("close")
        fr = self.session.framers[self.direction]
        self.session.flush(self.direction, fr.close(), out, closing=True)


def test_a_layer_takes_the_directions_bytes_gaps_and_end() -> None:
    s = Toy()
    layer = Upper(s, S)
    s.layers[S] = layer
    assert details(s.feed(S, b"abc\n", span(0))) == ["ABC"]
    assert details(s.feed(C, b"abc\n", span(0))) == ["abc"]
    s.gap(S, 4, 2, 1)
    s.feed(S, b"x\nyz", span(6))  # resynchronises after the LF; "yz" is cut by the end
    assert details(s.close(2)) == ["eof"]
    assert layer.calls == ["feed", "gap", "feed", "close"]


def test_an_idle_session_end_reads_as_before() -> None:
    s = Toy()
    s.feed(C, b"a\n", span(0))
    s.feed(S, b"b\nc", span(0))
    assert details(s.close(3000)) == ["eof"]
    assert s.decoded_bytes == [2, 2] and s.undecoded_bytes == [0, 1]
    assert [fr.abandoned for fr in s.framers] == [True, True]
    assert s.seen[-2:] == [("Dropped", True, False), ("on_close", True, False)]
