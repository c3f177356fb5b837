"""Payload dispatch: NATS wildcards, specificity, learned bindings, probes, errors."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissectors.api import MAX_VERDICTS, CarriedMessage, Direction, PayloadDissector, Verdict
from dissectors.dispatch import (
    MAX_EXACT_BINDINGS,
    PayloadDispatcher,
    _tokens,
    specificity,
    subject_matches,
)


@pytest.mark.parametrize(
    ("pattern", "subject", "match"),
    [
        ("a.b", "a.b", True),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        (">", "a", True),
        ("*.b.*", "x.b.y", True),
        ("*.b.*", "x.c.y", False),
        ("a.b", "a.b.c", False),
        ("_STAN.pub.*.>", "_STAN.pub.test-cluster.orders", True),
    ],
)
def test_subject_matches(pattern, subject, match):
    assert subject_matches(_tokens(pattern), _tokens(subject)) is match


def test_specificity_orders_literals_first_and_full_wildcard_last():
    pats = ["a.>", "a.*", "a.b", ">", "*.*"]
    assert sorted(pats, key=lambda p: specificity(_tokens(p))) == ["a.b", "a.*", "a.>", "*.*", ">"]


def _msg(subject: str, payload: bytes = b"x") -> CarriedMessage:
    return CarriedMessage("nats", "PUB", subject, None, None, None, payload, Direction.C2S,
                          7, 10, 20, 100, 200, 3, 4)


class Echo(PayloadDissector):
    name = "echo"
    subjects = (("echo.>", "wild"), ("echo.one", "one"))

    @classmethod
    def new_state(cls, options):
        return []

    @classmethod
    def decode(cls, state, bindings, msg, hint):
        state.append(hint)
        if msg.payload == b"learn":
            bindings.bind_subject("reply.inbox", cls.name, "learned")
            bindings.bind_pattern("dyn.*", cls.name, "pattern")
        if msg.payload == b"boom":
            raise ValueError("bug")
        return [msg.record("echo", {"hint": hint})]


class Magic(PayloadDissector):
    name = "magic"

    @classmethod
    def probe_payload(cls, payload):
        return Verdict.YES if payload.startswith(b"\xb9\x0e") else Verdict.NO

    @classmethod
    def new_state(cls, options):
        return None

    @classmethod
    def decode(cls, state, bindings, msg, hint):
        return [msg.record("magic", {"len": len(msg.payload)})]


def test_dispatch_order_exact_then_patterns_then_probe():
    scope = PayloadDispatcher([Echo, Magic]).scope(("10.0.0.1", 4222))
    (rec,) = scope.dispatch(_msg("echo.one"))
    assert rec.values == {"hint": "one"}  # the literal pattern beats echo.>
    assert (rec.offset_start, rec.frame_last, rec.ts_first_ns) == (10, 4, 100)
    assert scope.dispatch(_msg("echo.two.three"))[0].values == {"hint": "wild"}
    assert scope.dispatch(_msg("reply.inbox")) == []
    scope.dispatch(_msg("echo.x", b"learn"))
    assert scope.dispatch(_msg("reply.inbox"))[0].values == {"hint": "learned"}
    assert scope.dispatch(_msg("dyn.q"))[0].values == {"hint": "pattern"}
    assert scope.dispatch(_msg("other", b"\xb9\x0e\x43\xb4"))[0].values == {"len": 4}
    assert scope.dispatch(_msg("other", b"plain")) == []


def test_scopes_are_separate_per_server():
    disp = PayloadDispatcher([Echo])
    disp.scope("a").dispatch(_msg("echo.x", b"learn"))
    assert disp.scope("b").dispatch(_msg("reply.inbox")) == []
    assert disp.scope("a").dispatch(_msg("reply.inbox"))


def test_payload_dissector_bug_becomes_anomaly_unless_strict():
    (rec,) = PayloadDispatcher([Echo]).scope(1).dispatch(_msg("echo.x", b"boom"))
    assert rec.table == "anomalies" and rec.values["kind"] == "pipeline.payload_dissector_error"
    with pytest.raises(ValueError):
        PayloadDispatcher([Echo], strict=True).scope(1).dispatch(_msg("echo.x", b"boom"))


class Delegating(Echo):
    """A shell whose ``decoder`` hands out another function (as STAN's and Liftbridge's
    hand out their decoder module's); it raises until ``ready``."""

    name = "delegating"
    asked = 0
    ready = False

    @classmethod
    def decode(cls, state, bindings, msg, hint):
        raise AssertionError("the dispatcher calls decoder()'s function")

    @classmethod
    def decoder(cls):
        cls.asked += 1
        if not cls.ready:
            raise RuntimeError("not yet")
        return Echo.decode.__func__.__get__(Echo)


def test_decoder_is_asked_at_the_first_message_and_kept(monkeypatch):
    monkeypatch.setattr(Delegating, "asked", 0)
    monkeypatch.setattr(Delegating, "ready", False)
    scope = PayloadDispatcher([Delegating]).scope(1)
    scope.bind_subject("s", "delegating", "h")
    assert Delegating.asked == 0  # (not when the scope is made)
    (rec,) = scope.dispatch(_msg("s"))  # what decoder() raised: the dissector's error
    assert rec.values["kind"] == "pipeline.payload_dissector_error" and "not yet" in \
        rec.values["detail"]
    Delegating.ready = True
    assert [r.values for r in scope.dispatch(_msg("s"))] == [{"hint": "h"}]
    assert [r.values for r in scope.dispatch(_msg("s"))] == [{"hint": "h"}]
    assert Delegating.asked == 2 and scope.states["delegating"] == ["h", "h"]
    assert scope.decoded == 3


def test_exact_bindings_are_capped():
    scope = PayloadDispatcher([Echo]).scope(1)
    for i in range(MAX_EXACT_BINDINGS + 5):
        scope.bind_subject(f"_INBOX.{i}", "echo", "r")
    assert len(scope.exact) == MAX_EXACT_BINDINGS and scope.dropped_bindings == 5
    assert "_INBOX.0" not in scope.exact


_OPS = st.lists(st.tuples(st.sampled_from(["bind", "unbind", "pattern", "ask", "fill"]),
                          st.sampled_from(["a.b", "a.c", "echo.x", "dyn.q", "x", "a.*"])),
                max_size=30)


@given(_OPS)
def test_verdicts_stay_what_bound_answers(ops):
    """The fast path's verdict cache (subject -> a binding covers it) is kept per subject
    when bindings change instead of emptied: after any run of binds, unbinds, patterns,
    cache fills and the exact bindings' cap, every cached verdict is ``bound``'s."""
    scope = PayloadDispatcher([Echo]).scope(1)
    for op, subject in ops:
        if op == "bind":
            scope.bind_subject(subject, "echo", "r")
        elif op == "unbind":
            scope.unbind_subject(subject)
        elif op == "pattern":
            scope.bind_pattern(subject, "echo", "p")
        elif op == "ask":  # as the NATS session fills it
            scope.verdicts[subject] = scope.bound(subject)
        else:
            for i in range(MAX_VERDICTS):
                scope.verdicts[f"fill.{i}"] = False
        assert len(scope.verdicts) <= MAX_VERDICTS + len(_OPS_SUBJECTS)
        for s, v in scope.verdicts.items():
            assert v is scope.bound(s), (s, v)


_OPS_SUBJECTS = ("a.b", "a.c", "echo.x", "dyn.q", "x", "a.*")


def test_verdicts_follow_the_exact_bindings_cap():
    scope = PayloadDispatcher([Echo]).scope(1)
    with mock.patch("dissectors.dispatch.MAX_EXACT_BINDINGS", 3):
        for i in range(5):
            scope.bind_subject(f"r.{i}", "echo", "r")
    assert scope.verdicts == {"r.2": True, "r.3": True, "r.4": True}
    assert not scope.bound("r.0")


@pytest.mark.parametrize("name", ["stan", "liftbridge"])
def test_a_subclass_that_decodes_otherwise_is_called_as_it_decodes(name):
    # STAN's and Liftbridge's decoder() hand out their decoder module's function; a
    # subclass overriding decode alone must still be called through its own decode
    from dissectors.liftbridge import LiftbridgeDissector
    from dissectors.stan import StanDissector

    base = {"stan": StanDissector, "liftbridge": LiftbridgeDissector}[name]

    class Mine(base):  # type: ignore[valid-type, misc]
        @classmethod
        def decode(cls, state, bindings, msg, hint):
            return ["mine"]

    assert Mine.decoder()(None, None, None, "") == ["mine"]
    assert base.decoder() is not base.decode  # (the module's function: no shell call)
