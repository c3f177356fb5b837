"""CRC-32C (Castagnoli): the checksum of Pulsar frames, Liftbridge messages and S2
streams, one function for all of them (``crc32c``).

It is the PyPI ``crc32c`` package's (hardware-accelerated) function, taken from the
package's compiled module ``crc32c._crc32c`` without running the package's
``__init__``.  Why: that ``__init__`` reads the package's own version through
``importlib.metadata`` (which imports ``email``, ``zipfile``, ``csv`` ...) and its
command-line module: ~15 ms of a ``msgcap dissect`` run that meets one of these protocols
(``python -X importtime``), 30-40 ms alone, for a function the compiled module holds.
Anything unexpected (another layout of the package, a module that does not give the
standard check value) imports the package as usual: the package stays the definition
(``tests/dissectors/test_checksum.py`` compares the two).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from collections.abc import Callable
from typing import Any

__all__ = ["CHECK_VALUE", "crc32c", "loaded_directly"]

# CRC-32C of b"123456789" (the catalogue's check value for CRC-32/ISCSI)
CHECK_VALUE = 0xE3069283
_MODULE = "crc32c._crc32c"


def _compiled() -> Callable[..., int] | None:
    """``crc32c._crc32c.crc32c`` loaded from its file, the package not imported; None
    when it cannot be found or does not check out."""
    try:
        spec = importlib.util.find_spec("crc32c")  # (finds, does not run, the package)
        where = spec.submodule_search_locations if spec is not None else None
        if not where:
            return None
        for folder in where:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "_crc32c" + suffix)
                if not os.path.isfile(path):
                    continue
                loader = importlib.machinery.ExtensionFileLoader(_MODULE, path)
                mod_spec = importlib.util.spec_from_file_location(_MODULE, path, loader=loader)
                if mod_spec is None:
                    return None
                module: Any = importlib.util.module_from_spec(mod_spec)
                loader.exec_module(module)
                fn = module.crc32c
                return fn if fn(b"123456789") == CHECK_VALUE else None
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        return None
    return None


def _package() -> Callable[..., int]:
    import crc32c as package

    return package.crc32c


_direct = _compiled()
loaded_directly = _direct is not None
crc32c: Callable[..., int] = _direct if _direct is not None else _package()
