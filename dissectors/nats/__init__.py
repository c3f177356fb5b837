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
"""

from __future__ import annotations

from typing import Any, ClassVar

from dissectors.api import Direction, Dissector, Session, TableSpec, Transport, Verdict
from dissectors.nats import parser
from dissectors.nats.session import NatsSession
from dissectors.nats.table import NATS_TABLE

__all__ = ["NATS_TABLE", "NatsDissector", "NatsSession"]


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
    def session(cls, options: dict[str, Any]) -> Session:
        return NatsSession(options)
