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
from dissectors.stan import _STATIC_TOKENS, MAX_PENDING_DISCOVER, NAME, StanState
from dissectors.stan.decode import (
    KINDS,
    REPLY_KINDS,
    Problem,
    clean_values,
    decode_kind,
    infer,
    plausible_subject,
    score,
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
    """The columns saying how a row was typed (added to its values in one update)."""
    stamp: dict[str, Any] = {"typed_by": typed_by, "inferred": inferred,
                             "inferred_alternatives": alternatives}
    if typed_by == "inference" and kind in ("UnsubscribeRequest", "SubCloseRequest"):
        stamp["sub_close"] = None  # the subject that would tell was never learned
    return stamp


_DEFAULT_SUBJECT = ("default_subject", False, _stamp("default_subject", False))


@lru_cache(maxsize=1024)
def _read_hint(hint: str) -> tuple[str, str, bool, dict[str, Any], bool] | None:
    """(kind, typed_by, inferred, stamp, learns) of a binding's hint ``<kind>|<source>``
    (``stamp``: ``_stamp``'s; ``learns``: ``_learn`` has something to learn from it);
    None for a kind STAN does not have.  (Hints are the few strings ``_learn`` and the
    static subjects make: read once each.)"""
    kind, _, source = hint.partition("|")
    if kind not in KINDS:
        return None
    typed_by = "learned" if source else "default_subject"
    inferred = source == _INFERRED
    return kind, typed_by, inferred, _stamp(typed_by, inferred), kind in _LEARNS


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
        payload = msg.payload
        if hint:
            read = _read_hint(hint)
            if read is None:
                return [msg.anomaly("stan.internal", f"unknown binding hint {hint!r}")]
            # (learns: ConnectRequest and Ping below both learn; a hint never infers)
            kind, typed_by, inferred, stamp, learns = read
            if inferred and _static_kind(msg.subject) == kind:
                typed_by, inferred, stamp = _DEFAULT_SUBJECT
            if kind == "ConnectRequest" and msg.subject.rsplit(".", 1)[-1] == "pings":
                kind = "Ping"  # <prefix>.<cluster id with dots>.pings
        else:
            decision = infer(payload, bool(msg.reply_to))
            if decision is None:
                return []
            kind, typed_by, inferred, learns = decision.kind, "inference", True, True
            stamp = _stamp(typed_by, inferred, list(decision.alternatives), kind)

        # the compiled walk's values when the message is clean, else the reader's; not
        # for a ConnectResponse that may confirm a discovery (``_learn`` scores its decode)
        values = None if kind == "ConnectResponse" and msg.subject in state.pending_discover \
            else clean_values(kind, payload, state.payload_cap)
        decoded: Decoded | None = None
        problems: list[Problem] = []
        if values is None:
            values, decoded, problems = decode_kind(kind, payload, state.payload_cap)
        values.update(stamp)
        fmt = None if problems else rows_for(state.columns, bindings)
        if fmt is not None:
            out = [fmt.record(msg, values)]
        else:
            out = [msg.record(NAME, values)]
            out.extend(msg.anomaly(p.kind, p.detail) for p in problems)
        if learns:
            cls._learn(state, bindings, msg, kind, values, decoded, inferred, typed_by)
        return out

    # -- learning -------------------------------------------------------------------

    @classmethod
    def _learn(
        cls,
        state: StanState,
        bindings: Bindings,
        msg: CarriedMessage,
        kind: str,
        values: dict[str, Any],
        decoded: Decoded | None,
        inferred: bool,
        typed_by: str,
    ) -> None:
        suffix = _INFERRED if inferred else _LEARNED
        reply = msg.reply_to
        if reply and kind in REPLY_KINDS:
            _bind(bindings, reply, REPLY_KINDS[kind], suffix)
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
