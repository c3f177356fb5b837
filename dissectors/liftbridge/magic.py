"""The 4-byte magic that starts every Liftbridge envelope.

A module of its own, apart from ``envelope`` (the envelope reader): the dissector's
probe, which every NATS payload that starts with its first byte meets, needs only this.
``envelope`` re-exports it.
"""

from __future__ import annotations

__all__ = ["MAGIC"]

MAGIC = b"\xb9\x0e\x43\xb4"
