"""Offers messages carried in NATS to payload dissectors (STAN, Liftbridge, plugins).

Strategy: one ``ScopeDispatcher`` per capture and carrier server endpoint, because the
facts that type a payload (a STAN ConnectResponse naming the publish prefix, a request
naming its reply inbox) are learned on one connection and used on another.  Lookup
order: exact subjects bound during the capture, then wildcard patterns — static ones
declared by the dissectors and learned ones — most specific first, then payload
probes.  Exact bindings are capped (oldest dropped first) so a capture full of one-shot
reply inboxes cannot grow memory without bound.

A payload dissector is plugin code: whatever it raises (any ``BaseException`` but
``KeyboardInterrupt``, so a library's ``sys.exit()`` too) becomes a
``pipeline.payload_dissector_error`` row on the message, never the end of the run.  A
``probe_payload`` that raised is not asked again in that scope (it would raise on every
message); ``probed`` answers "maybe" for it so that the reference path, which records
the row, sees the message whether the NATS fast path runs or not.

``decoded`` counts the messages handed to a dissector's ``decode`` (the only place a
scope's state changes): a process that dissects only some flows of a capture
(``analyzer.parallel``) knows its scopes stayed as a full run's while it is 0 in
every such process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from dissectors.api import (
    MAX_VERDICTS,
    Bindings,
    CarriedMessage,
    CarrierSession,
    PayloadDecode,
    PayloadDissector,
    Record,
    Verdict,
)
from dissectors.options import SessionOptions

MAX_EXACT_BINDINGS = 100_000
_SUBJECT_CACHE = 4096


def _tokens(subject: str) -> tuple[str, ...]:
    return tuple(subject.split("."))


def subject_matches(pattern: tuple[str, ...], subject: tuple[str, ...]) -> bool:
    """NATS wildcard match: ``*`` is exactly one token, a final ``>`` one or more."""
    for i, tok in enumerate(pattern):
        if tok == ">":
            return len(subject) > i
        if i >= len(subject) or (tok != "*" and tok != subject[i]):
            return False
    return len(subject) == len(pattern)


def specificity(pattern: tuple[str, ...]) -> tuple[int, int, int]:
    """Sort key, most specific first: more literal tokens, no ``>``, more tokens."""
    literals = sum(1 for t in pattern if t not in ("*", ">"))
    return (-literals, pattern[-1] == ">" if pattern else 0, -len(pattern))


def _exact_prefixes(d: type[PayloadDissector]) -> tuple[bytes, ...] | None:
    """``d.probe_prefixes`` when the fast path can state it as bytes, else None."""
    prefixes = d.probe_prefixes
    if prefixes is None or not all(0 < len(p) < 256 for p in prefixes):
        return None
    return tuple(prefixes)


def probe_first_bytes(probers: list[type[PayloadDissector]]) -> bytes:
    """256 flags for the payload first bytes, then a prefix table: flag 0 no probe may
    answer YES, 2 only probes that need a well-formed protobuf message
    (``probe_needs_protobuf``) may, 1 others may (every byte for a prober that declares
    neither ``probe_first_bytes`` nor ``probe_prefixes``), 3 only probes that declared
    their exact rule (``probe_prefixes``) may: then one of the table's prefixes starting
    the payload is their YES, so the compiled NATS scan decides without asking them.
    The table: each prefix as one length byte and its bytes."""
    flags = bytearray(256)
    table = bytearray()
    for d in probers:
        exact = _exact_prefixes(d)
        if exact is not None:
            for p in exact:
                table += bytes((len(p),)) + p
            for b in {p[0] for p in exact}:
                flags[b] = _merged(flags[b], 3)
            continue
        allowed = d.probe_first_bytes
        level = 2 if d.probe_needs_protobuf else 1
        for b in range(256) if allowed is None else allowed:
            flags[b] = _merged(flags[b], level)
    return bytes(flags + table)


def _merged(flag: int, level: int) -> int:
    """A first byte's flag once another prober may claim it at ``level``: a byte that an
    exact rule (3) and any other prober share goes back to the probes (1), whichever came
    first: neither the prefix table nor the protobuf check alone decides for both."""
    if flag == 0 or flag == level:
        return level
    if 3 in (flag, level):
        return 1
    return min(flag, level)


class ScopeDispatcher(Bindings):
    def __init__(
        self, dissectors: list[type[PayloadDissector]], options: SessionOptions, strict: bool
    ) -> None:
        self.strict = strict
        self.states: dict[str, Any] = {}
        # (dissector, exception) of a new_state that raised: that dissector is left out
        # of the scope; the pipeline reports them once (and empties the list)
        self.setup_errors: list[tuple[str, BaseException]] = []
        for d in dissectors:
            try:
                self.states[d.name] = d.new_state(options)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - plugin code, SystemExit too
                if strict:
                    raise
                self.setup_errors.append((d.name, exc))
        dissectors = [d for d in dissectors if d.name in self.states]
        self.by_name = {d.name: d for d in dissectors}
        # name -> (decode, state, counted in ``decoded``): what ``dispatch`` calls, looked
        # up once per scope rather than per message; the decode is first ``_resolving``'s,
        # which puts the dissector's ``decoder()`` in its place
        self._targets: dict[str, tuple[PayloadDecode, Any, bool]] = {
            d.name: (self._resolving(d), self.states[d.name], not d.flow_local)
            for d in dissectors}
        self.exact: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.patterns: list[tuple[tuple[str, ...], str, str]] = []
        for d in dissectors:
            for pattern, hint in d.subjects:
                self.patterns.append((_tokens(pattern), d.name, hint))
        self._sort()
        # the function behind each bound classmethod (typed as a plain callable, hence getattr)
        default_probe = getattr(PayloadDissector.probe_payload, "__func__", None)
        self.probers = [
            d for d in dissectors
            if getattr(d.probe_payload, "__func__", None) is not default_probe
        ]
        self.probe_failed: set[str] = set()  # probers that raised (given "maybe" by probed)
        self._cache: dict[str, tuple[str, str] | None] = {}
        self.dropped_bindings = 0
        self.decoded = 0  # messages given to a dissector's decode
        # subject -> "some binding covers it", for the NATS fast path: kept exact when a
        # binding changes (a subject's own entry set or dropped; emptied, in place since
        # sessions hold it, when a pattern changes)
        self.verdicts: dict[str, bool] = {}
        self.first_bytes = probe_first_bytes(self.probers)

    # -- Bindings -------------------------------------------------------------------

    def bind_subject(self, subject: str, dissector: str, hint: str) -> None:
        # only this subject's verdict changes (it is covered now): set it, rather than
        # empty them all, so that the NATS fast path does not stop to ask again for every
        # subject it met (a STAN capture binds a reply inbox per request: ~30,000 times
        # in bench_stan's 20 MB capture)
        verdicts = self.verdicts
        if subject in verdicts or len(verdicts) < MAX_VERDICTS:
            verdicts[subject] = True
        self.exact[subject] = (dissector, hint)
        self.exact.move_to_end(subject)
        if len(self.exact) > MAX_EXACT_BINDINGS:
            old, _ = self.exact.popitem(last=False)
            verdicts.pop(old, None)  # (a pattern may still cover it: asked again)
            self.dropped_bindings += 1

    def bind_pattern(self, pattern: str, dissector: str, hint: str) -> None:
        entry = (_tokens(pattern), dissector, hint)
        # a binding already there changes no verdict (STAN binds a publish prefix again
        # with every ConnectResponse naming it); a new one may cover any subject
        if entry not in self.patterns:
            self.verdicts.clear()
            self.patterns.append(entry)
            self._sort()

    def unbind_subject(self, subject: str) -> None:
        self.verdicts.pop(subject, None)  # (a pattern may still cover it: asked again)
        self.exact.pop(subject, None)

    def _sort(self) -> None:
        self.patterns.sort(key=lambda p: (specificity(p[0]), p[1], p[0]))
        self._cache = {}

    # -- dispatch -------------------------------------------------------------------

    def _resolving(self, d: type[PayloadDissector]) -> PayloadDecode:
        """The decode of ``d``'s first message in this scope: asks ``d.decoder()`` (not
        before: it may import the dissector's decoding modules), keeps it for the next
        messages, and decodes.  (Whatever ``decoder`` raises is the dissector's error, as
        its ``decode``'s: ``dispatch`` reports it, and asks again at the next message.)"""
        def first(state: Any, bindings: Bindings, msg: CarriedMessage,  # noqa: ANN401
                  hint: str) -> list[Record]:
            decode = d.decoder()
            self._targets[d.name] = (decode, state, not d.flow_local)
            return decode(state, bindings, msg, hint)

        return first

    def probed(self, payload: bytes) -> bool:
        """Whether a probe claims ``payload`` (as ``dispatch`` asks them)."""
        for cand in self.probers:
            if cand.name in self.probe_failed:
                continue
            try:
                if cand.probe_payload(payload) == Verdict.YES:
                    return True
            except KeyboardInterrupt:
                raise
            except BaseException:  # noqa: BLE001 - ``dispatch`` records and drops it
                return True
        return False

    def bound(self, subject: str) -> bool:
        """Whether a binding (exact or pattern) covers ``subject``."""
        return self._match(subject) is not None

    def _match(self, subject: str) -> tuple[str, str] | None:
        hit = self.exact.get(subject)
        if hit is not None:
            return hit
        return self._pattern(subject)

    def _pattern(self, subject: str) -> tuple[str, str] | None:
        """The most specific pattern binding covering ``subject`` (cached per subject)."""
        if subject in self._cache:
            return self._cache[subject]
        toks = _tokens(subject)
        found = None
        for pattern, name, hint in self.patterns:
            if subject_matches(pattern, toks):
                found = (name, hint)
                break
        if len(self._cache) >= _SUBJECT_CACHE:
            self._cache.clear()
        self._cache[subject] = found
        return found

    def dispatch(self, msg: CarriedMessage) -> list[Record]:
        """Rows decoded from ``msg`` by whichever payload dissector it belongs to."""
        # (an exact binding, the common case, looked up here: ``_match``'s first step)
        hit = self.exact.get(msg.subject)
        failed: list[Record] | tuple[()] = ()  # (no list built for a bound message)
        if hit is None:
            hit = self._pattern(msg.subject)
            if hit is None:
                failed = raised = []
                for cand in self.probers:
                    if cand.name in self.probe_failed:
                        continue
                    try:
                        verdict = cand.probe_payload(msg.payload)
                    except KeyboardInterrupt:
                        raise
                    except BaseException as exc:  # noqa: BLE001 - plugin code, SystemExit too
                        if self.strict:
                            raise
                        self.probe_failed.add(cand.name)
                        raised.append(msg.anomaly(
                            "pipeline.payload_dissector_error",
                            f"{cand.name} probe_payload raised {exc!r}; it is not asked "
                            "again for messages of this server"))
                        continue
                    if verdict == Verdict.YES:
                        hit = (cand.name, "")
                        break
                if hit is None:
                    return raised
        name, hint = hit
        target = self._targets.get(name)
        if target is None:
            return []
        decode, state, counted = target
        if counted:  # its rows depend on other flows' messages
            self.decoded += 1
        try:
            records = decode(state, self, msg, hint)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - plugin code, SystemExit too
            if self.strict:
                raise
            return [*failed,
                    msg.anomaly("pipeline.payload_dissector_error", f"{name} raised {exc!r}")]
        return [*failed, *records] if failed else records


class FlowScope:
    """One flow's view of its server's ``ScopeDispatcher``: the ``CarrierScope`` a
    ``CarrierSession`` is given (``dissectors.api``)."""

    __slots__ = ("bound", "first_bytes", "flow_id", "offer", "probed", "verdicts")

    def __init__(self, scope: ScopeDispatcher, flow_id: int) -> None:
        self.flow_id = flow_id
        self.first_bytes = scope.first_bytes
        self.verdicts = scope.verdicts  # emptied in place: the same dict for every flow
        self.bound = scope.bound
        self.probed = scope.probed
        self.offer = scope.dispatch


class PayloadDispatcher:
    """All scopes of one capture: one ``ScopeDispatcher`` per carrier server endpoint."""

    def __init__(
        self,
        dissectors: list[type[PayloadDissector]],
        options: SessionOptions | None = None,
        strict: bool = False,
    ) -> None:
        self.dissectors = sorted(dissectors, key=lambda d: d.name)
        self.options: SessionOptions = options or {}
        self.strict = strict
        # scope key: the carrier server endpoint, as the caller names it (ip, port)
        self.scopes: dict[Hashable, ScopeDispatcher] = {}

    @property
    def decoded(self) -> int:
        """Messages given to a payload dissector's ``decode``, over all scopes."""
        return sum(sd.decoded for sd in self.scopes.values())

    def scope(self, server: Hashable) -> ScopeDispatcher:
        sd = self.scopes.get(server)
        if sd is None:
            sd = self.scopes[server] = ScopeDispatcher(self.dissectors, self.options, self.strict)
        return sd

    def carry(self, session: object, carrier: str, server: Hashable,
              flow_id: int) -> list[tuple[str, BaseException]]:
        """Hook a new session into payload dispatch when it is a ``CarrierSession`` and
        some payload dissector rides in ``carrier`` (the session's dissector name):
        ``session.carry`` gets the flow's view of ``server``'s scope.  Returns the
        ``(dissector, exception)`` of payload dissectors whose ``new_state`` raised in
        that scope and were not reported yet (the caller records them)."""
        if not isinstance(session, CarrierSession):
            return []
        if not any(carrier in d.carriers for d in self.dissectors):
            return []
        scope = self.scope(server)
        errors = list(scope.setup_errors)
        scope.setup_errors.clear()
        session.carry(FlowScope(scope, flow_id))
        return errors
