"""Apache Pulsar binary protocol dissector (tables ``pulsar_commands``, ``pulsar_messages``).

Layout after Suricata's app-layer parsers and our NATS package: ``frame`` (pure functions
over frame bytes), ``codec`` (bounded decompression), ``session`` (per-connection state),
``table`` (the two tables' declarations), ``pb`` (schemas from our own ``pulsar.proto``,
compiled to ``_descriptors.py`` by ``python -m dissectors.pulsar.build``).  Options are
listed in ``dissectors.pulsar.session``.

Light on import: every run loads this class (``dissectors.registry``) for its name, ports
and tables, but only a run that meets a flow Pulsar may own needs the frame reader (which
loads protobuf) and the session (numpy, the compiled fast path); ``probe`` and ``session``
import them on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from dissectors.api import (
    Direction,
    Dissector,
    Session,
    SessionOptions,
    TableSpec,
    Transport,
    Verdict,
)
from dissectors.pulsar.table import PULSAR_COMMANDS, PULSAR_MESSAGES

if TYPE_CHECKING:
    from dissectors.pulsar.session import PulsarSession

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
        from dissectors.pulsar import frame

        return frame.probe(prefix)

    @classmethod
    def session(cls, options: SessionOptions) -> Session:
        from dissectors.pulsar.session import PulsarSession

        return PulsarSession(options)


def __getattr__(name: str) -> object:
    """``PulsarSession`` stays importable from here, loaded when first asked for."""
    if name == "PulsarSession":
        from dissectors.pulsar.session import PulsarSession

        return PulsarSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
