"""Names a module offers but loads from another module when first asked for (PEP 562).

Why: every ``msgcap dissect`` imports the reassembly layers and the dissectors' modules
before its first packet, and most captures need only part of them (no QUIC, no TLS, no
``cryptography``).  A module keeps its public names, and ``from m import Name`` keeps
working, while the module that defines ``Name`` is imported only by the first user of
it.  The one implementation of the module ``__getattr__`` that does it, for every such
module of ``reassembly`` and ``dissectors``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_names"]


def lazy_names(module: str, names: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``module``: each name of ``names`` (name -> the
    module that defines it) is imported on first use and then stored in ``module``'s
    namespace, so later lookups do not come here; any other name is an
    ``AttributeError`` worded as Python words it."""
    namespace = sys.modules[module].__dict__

    def __getattr__(name: str) -> object:
        source = names.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
