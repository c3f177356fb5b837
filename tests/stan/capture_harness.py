"""Capture → reassembly → NATS dissector → payload dispatcher, for the sample captures.

The pipeline does this wiring for real; the tests use this small copy so that they
check the payload dissectors against the recorders' truth on their own.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dissectors.api import CarriedMessage, Record, Span
from dissectors.dispatch import PayloadDispatcher
from dissectors.liftbridge import LiftbridgeDissector
from dissectors.nats import NatsDissector
from dissectors.stan import StanDissector
from reassembly.engine import read_events
from reassembly.events import StreamClose, StreamData, StreamGap

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
CARRYING_OPS = ("PUB", "HPUB", "MSG", "HMSG")


@dataclass
class Carried:
    client_port: int
    nats: Record
    records: list[Record]  # what the payload dispatcher returned


def _chunks(ev: StreamData, rng: random.Random | None) -> Iterator[tuple[bytes, Span]]:
    span = Span(ev.offset, ev.ts_first_ns, ev.ts_last_ns, ev.frame_first, ev.frame_last)
    if rng is None or len(ev.data) < 2:
        yield ev.data, span
        return
    pos = 0
    while pos < len(ev.data):
        n = rng.randint(1, 7)
        yield ev.data[pos : pos + n], span._replace(offset=ev.offset + pos)
        pos += n


def dispatch_capture(path: Path, rechunk_seed: int | None = None,
                     options: dict[str, Any] | None = None) -> tuple[list[Carried], list[Record]]:
    """(carried messages with their payload rows, NATS-level anomalies)."""
    options = {"payload_cap": None, **(options or {})}
    disp = PayloadDispatcher([StanDissector, LiftbridgeDissector], options, strict=True)
    rng = random.Random(rechunk_seed) if rechunk_seed is not None else None
    sessions: dict[int, Any] = {}
    out: list[Carried] = []
    nats_anomalies: list[Record] = []

    def handle(flow, recs: list[Record]) -> None:
        for rec in recs:
            if rec.table != "nats":
                nats_anomalies.append(rec)
                continue
            v = rec.values
            if v["op"] not in CARRYING_OPS or v.get("payload") is None or v.get("incomplete"):
                continue
            cm = CarriedMessage(
                "nats", v["op"], v["subject"], v.get("reply_to"), v.get("sid"), v.get("headers"),
                v["payload"], rec.direction, flow.flow_id, rec.offset_start, rec.offset_end,
                rec.ts_first_ns, rec.ts_last_ns, rec.frame_first, rec.frame_last,
            )
            scope = disp.scope((flow.server.ip, flow.server.port))
            out.append(Carried(flow.client.port, rec, scope.dispatch(cm)))

    for ev in read_events(path):
        if isinstance(ev, StreamData):
            sess = sessions.get(ev.flow.flow_id)
            if sess is None:
                sess = sessions[ev.flow.flow_id] = NatsDissector.session(options)
            for data, span in _chunks(ev, rng):
                handle(ev.flow, sess.feed(ev.direction, data, span))
        elif isinstance(ev, StreamGap):
            sess = sessions.get(ev.flow.flow_id)
            if sess is not None:
                handle(ev.flow, sess.gap(ev.direction, ev.offset, ev.nbytes, ev.ts_ns))
        elif isinstance(ev, StreamClose):
            sess = sessions.pop(ev.flow.flow_id, None)
            if sess is not None:
                handle(ev.flow, sess.close(ev.ts_ns))
    return out, nats_anomalies
