"""libcrypto's SHA-256 entry points for the compiled fast paths (``dissectors/nats``,
``dissectors/pulsar``): hashing in C with OpenSSL's code (SHA-NI where the CPU has it)
saves hashlib's per-call objects.  Found with ctypes, so nothing links against OpenSSL at
build time; a fast path hands the addresses to its extension and checks the result
against its own code before trusting it."""

from __future__ import annotations

import ctypes
import ctypes.util

SELF_TEST_INPUT = b"msgcap" * 50
"""What a fast path hashes both ways before it keeps a foreign function."""


def functions(*names: str) -> tuple[str, list[int]] | None:
    """The library's name and the addresses of ``names`` in it; None when libcrypto or
    one of the functions is missing (the fast path then keeps its own code)."""
    name = ctypes.util.find_library("crypto")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        addresses = [ctypes.cast(getattr(lib, f), ctypes.c_void_p).value for f in names]
    except (OSError, AttributeError):
        return None
    if not all(addresses):
        return None
    return name, [a for a in addresses if a is not None]
