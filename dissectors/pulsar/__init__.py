"""Apache Pulsar binary protocol dissector (tables ``pulsar_commands``, ``pulsar_messages``).

Layout after Suricata's app-layer parsers and our NATS package: ``frame`` (pure functions
over frame bytes), ``codec`` (bounded decompression), ``session`` (per-connection state),
``table`` (the two tables' declarations), ``pb`` (schemas from our own ``pulsar.proto``,
compiled to ``_descriptors.py`` by ``python -m dissectors.pulsar.build``).  Options are
listed in ``dissectors.pulsar.session``.
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
from dissectors.pulsar import frame
from dissectors.pulsar.session import PulsarSession
from dissectors.pulsar.table import PULSAR_COMMANDS, PULSAR_MESSAGES

__all__ = ["PULSAR_COMMANDS", "PULSAR_MESSAGES", "PulsarDissector", "PulsarSession"]


class PulsarDissector(Dissector):
    name: ClassVar[str] = "pulsar"
    description: ClassVar[str] = (
        "Apache Pulsar binary protocol (BaseCommand frames, SEND/MESSAGE payloads, batches, "
        "chunks, CRC-32C)"
    )
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = (6650,)
    tables: ClassVar[tuple[TableSpec, ...]] = (PULSAR_COMMANDS, PULSAR_MESSAGES)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return frame.probe(prefix)

    @classmethod
    def session(cls, options: SessionOptions) -> Session:
        return PulsarSession(options)
