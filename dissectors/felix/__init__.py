"""Felix client wire protocol dissector (tables ``felix``, ``felix_messages``).

Felix (github.com/gabloe/felix, later GetFelix/felix) speaks only QUIC: its frames are
visible once the QUIC layer decrypts the connection with a TLS key log, and each QUIC
stream is dissected on its own (the pipeline gives every stream its session).  The
protocol itself is transport-agnostic, so the same session decodes a TCP stream of
frames.  Layout after our Pulsar package: ``wire`` (pure functions over frame bytes),
``session`` (per-stream state), ``table`` (the two tables' declarations).  Options are
listed in ``dissectors.felix.session``.

Light on import, as ``dissectors.pulsar``: the registry loads this class on every run;
the frame reader and the session are imported by the first flow that needs them (the
probe, run on every flow, needs only ``magic``).
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
from dissectors.felix.table import FELIX, FELIX_MESSAGES
from reassembly.lazy import lazy_names

if TYPE_CHECKING:
    from dissectors.felix.session import FelixSession

__all__ = ["FELIX", "FELIX_MESSAGES", "FelixDissector", "FelixSession"]


class FelixDissector(Dissector):
    name: ClassVar[str] = "felix"
    description: ClassVar[str] = (
        "Felix broker client protocol (FLX1 frames: JSON messages, binary publish / event "
        "batches and acks) on QUIC streams (needs the TLS key log) or TCP"
    )
    # QUIC streams arrive on UDP flows.  The protocol is transport-agnostic: `transports`
    # lists every transport the session can decode, for a detector that reads it.
    transport: ClassVar[Transport] = Transport.UDP
    transports: ClassVar[tuple[Transport, ...]] = (Transport.UDP, Transport.TCP)
    default_ports: ClassVar[tuple[int, ...]] = (5000,)
    tables: ClassVar[tuple[TableSpec, ...]] = (FELIX, FELIX_MESSAGES)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        from dissectors.felix.magic import probe

        return probe(prefix)

    @classmethod
    def session(cls, options: SessionOptions) -> Session:
        from dissectors.felix.session import FelixSession

        return FelixSession(options)


# ``FelixSession`` stays importable from here, loaded when first asked for
__getattr__ = lazy_names(__name__, {"FelixSession": "dissectors.felix.session"})
