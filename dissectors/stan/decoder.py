"""The STAN decoder: one carried message typed, decoded to its row, and what it teaches
(``dissectors.stan``'s strategy).

A module apart from the dissector's declaration (``dissectors.stan``, which the registry
loads on every run), so that a run whose captures carry no STAN reads none of its
schemas: ``StanDissector.decode`` imports it with the first message it is asked about.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from dissectors.api import Bindings, CarriedMessage, Record
from dissectors.dispatch import subject_matches
from dissectors.proto import Decoded
from dissectors.proto.columns import rows_for
from dissectors.proto.walk import WalkPlan
from dissectors.stan import _STATIC_TOKENS, MAX_PENDING_DISCOVER, NAME, StanState
from dissectors.stan.decode import (
    KINDS,
    REPLY_KINDS,
    decode_kind,
    infer,
    plausible_subject,
    score,
    stamped_plan,
    walked_values,
)

__all__ = ["StanDecoder"]

_LEARNED = "learned"
_INFERRED = "inferred"
_PINGS = ("_STAN", "discover", "*", "pings")
# a ConnectResponse's subjects -> the kind each one's messages are
_RESPONSE_SUBJECTS = (
    ("sub_requests", "SubscriptionRequest"),
    ("unsub_requests", "UnsubscribeRequest"),
    ("close_requests", "CloseRequest"),
    ("sub_close_requests", "SubCloseRequest"),
    ("ping_requests", "Ping"),
)


# the kinds ``_learn`` learns from whoever typed them (the others: only when inferred)
_LEARNS = frozenset({*REPLY_KINDS, "ConnectResponse", "SubscriptionResponse"})


@lru_cache(maxsize=4096)  # (asked for every message typed by an inferred binding)
def _static_kind(subject: str) -> str | None:
    """The kind a STAN default subject gives ``subject`` (most specific pattern)."""
    toks = tuple(subject.split("."))
    if subject_matches(_PINGS, toks):
        return "Ping"
    for pattern, kind in _STATIC_TOKENS:
        if subject_matches(pattern, toks):
            return kind
    return None


def _stamp(typed_by: str, inferred: bool, alternatives: list[str] | None = None,
           kind: str = "") -> dict[str, Any]:
    """The columns saying how a row was typed (a walked row starts with them:
    ``stamped_plan``; the reader's values get them in one update)."""
    stamp: dict[str, Any] = {"typed_by": typed_by, "inferred": inferred,
                             "inferred_alternatives": alternatives}
    if typed_by == "inference" and kind in ("UnsubscribeRequest", "SubCloseRequest"):
        stamp["sub_close"] = None  # the subject that would tell was never learned
    return stamp


class _Route:
    """What a binding's hint settles for every message it types, worked out once per
    hint (``_read_hint``).  Why: per message, only its walk, its row and the inbox it
    teaches are left to do.  (A class with slots, not a NamedTuple: its fields are read
    per message, and a slot read is the faster one, ~0.1 µs a message.)"""

    __slots__ = ("inferred", "kind", "learns", "more", "plan", "reply_hint", "settled",
                 "source", "stamp", "typed_by")

    def __init__(self, kind: str, typed_by: str, inferred: bool, stamp: dict[str, Any],
                 learns: bool, source: str, plan: WalkPlan | None, settled: bool,
                 reply_hint: str | None, more: bool) -> None:
        self.kind = kind
        self.typed_by = typed_by
        self.inferred = inferred
        self.stamp = stamp  # ``_stamp``'s columns
        self.learns = learns  # ``kind`` teaches something (reply inbox or ``_learn``)
        self.source = source  # the hint's source ("": a STAN default subject)
        # ``stamped_plan``: the walk's plan whose rows start stamped (None: the reader)
        self.plan = plan
        self.settled = settled  # False: the message may change the route (``_settle``)
        # the hint a NATS reply inbox is bound with (``REPLY_KINDS``)
        self.reply_hint = reply_hint
        self.more = more  # ``_learn`` has more than the reply inbox to learn

    def to_reader(self) -> _Route:
        """This route with no walk: the message goes to the reader."""
        return _Route(self.kind, self.typed_by, self.inferred, self.stamp, self.learns,
                      self.source, None, self.settled, self.reply_hint, self.more)


# what ``_learn`` learns besides the reply inbox (from whoever typed them; inferred
# MsgProto and Ack: their own subject)
_LEARN_MORE = frozenset({"ConnectRequest", "ConnectResponse", "SubscriptionRequest",
                         "SubscriptionResponse"})


def _route(kind: str, typed_by: str, inferred: bool, stamp: dict[str, Any], learns: bool,
           source: str) -> _Route:
    """The route of ``kind`` typed so (``_stamp``'s columns: ``stamp``)."""
    suffix = _INFERRED if inferred else _LEARNED
    reply = REPLY_KINDS.get(kind) if learns else None
    more = learns and (kind in _LEARN_MORE or
                       typed_by == "inference" and kind in ("MsgProto", "Ack"))
    settled = not inferred and kind not in ("ConnectRequest", "ConnectResponse")
    return _Route(kind, typed_by, inferred, stamp, learns, source, stamped_plan(kind, stamp),
                  settled, None if reply is None else f"{reply}|{suffix}", more)


@lru_cache(maxsize=1024)
def _read_hint(hint: str) -> _Route | None:
    """The route of a binding's hint ``<kind>|<source>``; None for a kind STAN does not
    have.  (Hints are the few strings ``_learn`` and the static subjects make: read once
    each.)"""
    kind, _, source = hint.partition("|")
    if kind not in KINDS:
        return None
    typed_by = "learned" if source else "default_subject"
    inferred = source == _INFERRED
    # (a hint never infers: only the kinds that teach whoever typed them learn)
    return _route(kind, typed_by, inferred, _stamp(typed_by, inferred), kind in _LEARNS,
                  source)


def _settle(route: _Route, state: StanState, msg: CarriedMessage) -> _Route:
    """The route of a message whose hint's route is not ``settled``: what its subject
    and the scope's pending discoveries change."""
    if route.inferred and _static_kind(msg.subject) == route.kind:
        route = _read_hint(route.kind)  # type: ignore[assignment]  # (a kind: not None)
    kind = route.kind
    if kind == "ConnectRequest" and msg.subject.rsplit(".", 1)[-1] == "pings":
        # <prefix>.<cluster id with dots>.pings (typed as the hint says)
        route = _read_hint(f"Ping|{route.source}")  # type: ignore[assignment]
    elif kind == "ConnectResponse":
        route = _pending(route, state, msg)
    return route


def _inferred(state: StanState, msg: CarriedMessage) -> _Route | None:
    """The route of a message no binding typed: inference's kind (``decode.infer``), or
    None (not STAN)."""
    decision = infer(msg.payload, bool(msg.reply_to))
    if decision is None:
        return None
    kind = decision.kind
    stamp = _stamp("inference", True, list(decision.alternatives), kind)
    return _pending(_route(kind, "inference", True, stamp, True, _INFERRED), state, msg)


def _pending(route: _Route, state: StanState, msg: CarriedMessage) -> _Route:
    """``route``, to the reader for a ConnectResponse that may confirm a discovery
    (``_learn`` scores its decode)."""
    if route.kind == "ConnectResponse" and msg.subject in state.pending_discover:
        return route.to_reader()
    return route


# ``plausible_subject`` of a str, once per subject (it costs ~25 bytecodes): a client
# binds its PubAck inbox again with each PubMsg, its heartbeat inbox with each reply
_plausible_str = lru_cache(maxsize=4096)(plausible_subject)


def _bind(bindings: Bindings, subject: object, kind: str, suffix: str) -> None:
    if isinstance(subject, str) and _plausible_str(subject):
        bindings.bind_subject(subject, NAME, f"{kind}|{suffix}")


class StanDecoder:
    """``StanDissector.decode`` and its learning (the dissector's shell delegates here:
    see the module docstring)."""

    @classmethod
    def decode(
        cls, state: StanState, bindings: Bindings, msg: CarriedMessage, hint: str
    ) -> list[Record]:
        if hint:
            route = _read_hint(hint)
            if route is None:
                return [msg.anomaly("stan.internal", f"unknown binding hint {hint!r}")]
            if not route.settled:
                route = _settle(route, state, msg)
        else:
            route = _inferred(state, msg)
            if route is None:
                return []

        # the compiled walk's values, stamped, when the message is clean; else the reader's
        plan = route.plan
        values = None if plan is None else walked_values(plan, msg.payload, state.payload_cap)
        decoded: Decoded | None = None
        if values is not None:
            fmt = rows_for(state.columns, bindings)
            out = [msg.record(NAME, values) if fmt is None else fmt.record(msg, values)]
        else:
            out, values, decoded = cls._read(state, bindings, msg, route)
        if route.learns:
            # every request's reply inbox gets the matching response type
            reply, reply_hint = msg.reply_to, route.reply_hint
            if reply and reply_hint is not None and _plausible_str(reply):
                bindings.bind_subject(reply, NAME, reply_hint)
            if route.more:
                cls._learn(state, bindings, msg, route, values, decoded)
        return out

    @staticmethod
    def _read(state: StanState, bindings: Bindings, msg: CarriedMessage, route: _Route
              ) -> tuple[list[Record], dict[str, Any], Decoded | None]:
        """The records, values and decode of a message the walk did not take: the
        reader's, its problems as anomaly rows after the row."""
        values, decoded, problems = decode_kind(route.kind, msg.payload, state.payload_cap)
        values.update(route.stamp)
        fmt = None if problems else rows_for(state.columns, bindings)
        if fmt is not None:
            return [fmt.record(msg, values)], values, decoded
        out = [msg.record(NAME, values)]
        out.extend(msg.anomaly(p.kind, p.detail) for p in problems)
        return out, values, decoded

    # -- learning -------------------------------------------------------------------

    @classmethod
    def _learn(
        cls,
        state: StanState,
        bindings: Bindings,
        msg: CarriedMessage,
        route: _Route,
        values: dict[str, Any],
        decoded: Decoded | None,
    ) -> None:
        """What ``route.more`` says there is to learn besides the reply inbox."""
        kind, typed_by = route.kind, route.typed_by
        suffix = _INFERRED if route.inferred else _LEARNED
        reply = msg.reply_to
        if kind == "ConnectRequest":
            _bind(bindings, values.get("heartbeat_inbox"), "Heartbeat", suffix)
            if typed_by == "inference" and reply and "." in msg.subject:
                prefix = msg.subject.rsplit(".", 1)[0]
                if prefix not in state.discover_prefixes:
                    state.pending_discover[reply] = (prefix, values.get("heartbeat_inbox"))
                    state.pending_discover.move_to_end(reply)
                    while len(state.pending_discover) > MAX_PENDING_DISCOVER:
                        state.pending_discover.popitem(last=False)
        elif kind == "ConnectResponse":
            pending = state.pending_discover.pop(msg.subject, None)
            if pending is not None and decoded is not None and decoded.clean and \
                    score("ConnectResponse", decoded) > 0:
                # a ConnectRequest-looking message whose reply got a ConnectResponse:
                # <prefix> is a discover prefix, and this client's subjects are learned
                prefix, hb_inbox = pending
                state.discover_prefixes.add(prefix)
                bindings.bind_pattern(f"{prefix}.*", NAME, f"ConnectRequest|{_LEARNED}")
                bindings.bind_pattern(f"{prefix}.*.pings", NAME, f"Ping|{_LEARNED}")
                _bind(bindings, hb_inbox, "Heartbeat", _LEARNED)
                state.confirmed[msg.subject] = None
                while len(state.confirmed) > MAX_PENDING_DISCOVER:
                    state.confirmed.popitem(last=False)
            if msg.subject in state.confirmed:
                suffix = _LEARNED
            pub = values.get("pub_prefix")
            if plausible_subject(pub):
                bindings.bind_pattern(f"{pub}.>", NAME, f"PubMsg|{suffix}")
            for col, k in _RESPONSE_SUBJECTS:
                _bind(bindings, values.get(col), k, suffix)
        elif kind == "SubscriptionRequest":
            _bind(bindings, values.get("inbox"), "MsgProto", suffix)
        elif kind == "SubscriptionResponse":
            _bind(bindings, values.get("ack_inbox"), "Ack", suffix)
        elif typed_by == "inference" and kind in ("MsgProto", "Ack"):
            _bind(bindings, msg.subject, kind, suffix)
