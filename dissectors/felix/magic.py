"""The magic that starts every Felix frame (§5.3), and the probe on it.

A module of its own, apart from ``wire`` (the whole frame codec): the registry's probe
runs on every flow of every capture, and a flow that is not Felix must not import the
codec to be told so.  ``wire`` re-exports both names.
"""

from __future__ import annotations

from dissectors.api import Verdict

__all__ = ["MAGIC", "probe"]

MAGIC = b"FLX1"  # 0x464C5831


def probe(prefix: bytes) -> Verdict:
    """YES when a stream direction starts with the FLX1 magic (§5.3), NEED_MORE while the
    prefix is shorter than the magic and could still be it, else NO."""
    if len(prefix) < len(MAGIC):
        return Verdict.NEED_MORE if MAGIC.startswith(bytes(prefix)) else Verdict.NO
    return Verdict.YES if prefix[:4] == MAGIC else Verdict.NO
