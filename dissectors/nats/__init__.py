"""NATS client protocol dissector (table ``nats``).

Layout after Suricata's app-layer parsers: ``parser`` (pure functions), ``session``
(per-flow state), ``table`` (the output table's declaration).  Options (the ``options``
dict given to ``NatsDissector.session``):

``payload_cap``       payload bytes kept per row (default 4096; None keeps all)
``header_cap``        header block bytes kept per row (default 65536; None keeps all)
``max_control_line``  longest client control line accepted (default 4096, as nats-server)
``max_server_line``   longest server control line accepted (default 65536)
``carry_max``         largest payload handed whole to ``NatsSession.on_message`` (64 MiB)
``keep_secrets``      keep CONNECT credentials in ``json_raw`` (default False: redacted)
``joined``            directions whose start was not captured (set by detection): read
                      from the first line the resync rule finds

Joining late (``probe_joined``): a direction whose start was not captured usually begins
inside an operation (the tail of a payload, half a control line).  It is claimed on the
first line further in that the session would also resynchronise on and that checks out
whole: a known op of this direction whose control line parses, and whose payload, when
the prefix holds its end, ends in CRLF.  The bytes before it stay undecoded.
"""

from __future__ import annotations

from typing import ClassVar

from dissectors.api import (
    Direction,
    Dissector,
    Session,
    SessionOptions,
    TableSpec,
    Transport,
    Verdict,
)
from dissectors.nats import parser
from dissectors.nats.session import NatsSession
from dissectors.nats.table import NATS_TABLE

__all__ = ["NATS_TABLE", "NatsDissector", "NatsSession"]

# a joined direction is given up on when this much of it holds no line that checks out
# (the detector stops at its own PROBE_LIMIT_BYTES first)
_JOINED_LOOK_BYTES = 8192


class NatsDissector(Dissector):
    name: ClassVar[str] = "nats"
    description: ClassVar[str] = "NATS client protocol (INFO/CONNECT/PUB/HPUB/SUB/MSG/...)"
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = (4222,)
    tables: ClassVar[tuple[TableSpec, ...]] = (NATS_TABLE,)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return parser.probe(direction, prefix)

    @classmethod
    def probe_joined(cls, direction: Direction, prefix: bytes) -> Verdict:
        """A YES needs a whole op (see the module docstring): a PUB or MSG line in the
        middle of somebody's payload is not enough."""
        try:
            p, prev = 0, None
            while p < len(prefix):
                skip, found = parser.resync(prefix[p:], prev)
                if not found:
                    break
                at = p + skip
                verdict = _checks_out(direction, prefix, at)
                if verdict is not Verdict.NO:
                    return verdict
                p, prev = at + 1, prefix[at]
            return Verdict.NO if len(prefix) >= _JOINED_LOOK_BYTES else Verdict.NEED_MORE
        except Exception:  # a probe never raises
            return Verdict.NO

    @classmethod
    def session(cls, options: SessionOptions) -> Session:
        return NatsSession(options)


def _checks_out(direction: Direction, prefix: bytes, at: int) -> Verdict:
    """Does the line at ``at`` open a NATS direction, and is its first op whole?"""
    rest = prefix[at:]
    verdict = parser.probe(direction, rest)
    if verdict is not Verdict.YES:
        return verdict
    # the probe passed keep-alives to reach the op that decided: check each line up to
    # and including it
    p = 0
    while True:
        lf = rest.find(b"\n", p)
        if lf < 0:
            return Verdict.NEED_MORE
        op, _, _, total, _ = parser.parse_line(rest[p:lf].rstrip(b"\r"))
        if op is None:
            return Verdict.NO
        if total >= 0:
            end = lf + 1 + total
            if len(rest) >= end + 2 and rest[end : end + 2] != b"\r\n":
                return Verdict.NO
            return Verdict.YES
        if op not in ("PING", "PONG", "+OK", "-ERR"):
            return Verdict.YES
        p = lf + 1
