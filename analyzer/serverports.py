"""The ports that tell a flow's server side when its handshake was not captured.

Why here: ``reassembly`` is the lower floor and knows no protocol, so its flow table
takes these ports as a parameter (``reassembly.flows.FlowTable(server_ports=...)``,
``Reassembler``, ``capture_events``).  The analyzer knows the dissectors: every one of
them, plugins included, declares the ports its servers listen on
(``Dissector.default_ports``, listed by ``msgcap protocols``), and ``--decode-as PORT=NAME``
says a port is a protocol's.  Every command that reassembles with dissectors loaded
(dissect, flows, follow, Spark tasks) passes this set, so they agree on who is the
client of a flow picked up mid-stream.  ``--transport-only`` runs load no dissector and
keep the reassembly default.
"""

from __future__ import annotations

from collections.abc import Iterable

from dissectors.registry import Registry
from reassembly.flows import DEFAULT_SERVER_PORTS

__all__ = ["server_ports"]


def server_ports(registry: Registry, decode_as: Iterable[int] = ()) -> frozenset[int]:
    """The reassembly default, every registered dissector's ``default_ports`` and the
    ``--decode-as`` ports (``decode_as``: the ports, e.g. ``Options.decode_as``)."""
    ports = set(DEFAULT_SERVER_PORTS)
    for cls in registry.dissectors.values():
        ports.update(cls.default_ports)
    ports.update(decode_as)
    return frozenset(ports)
