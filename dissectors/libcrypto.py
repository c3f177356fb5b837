"""libcrypto's SHA-256 entry points for the compiled fast paths (``dissectors/nats``,
``dissectors/pulsar``): hashing in C with OpenSSL's code (SHA-NI where the CPU has it)
saves hashlib's per-call objects.  Found with ctypes, so nothing links against OpenSSL at
build time; a fast path hands the addresses to its extension and checks the result
against its own code before trusting it."""

from __future__ import annotations

import ctypes
import os
from functools import cache

SELF_TEST_INPUT = b"msgcap" * 50
"""What a fast path hashes both ways before it keeps a foreign function."""


def functions(*names: str) -> tuple[str, list[int]] | None:
    """The library's name and the addresses of ``names`` in it; None when libcrypto or
    one of the functions is missing (the fast path then keeps its own code)."""
    found = _library()
    if found is None:
        return None
    name, lib = found
    try:
        addresses = [ctypes.cast(getattr(lib, f), ctypes.c_void_p).value for f in names]
    except AttributeError:
        return None
    if not all(addresses):
        return None
    return name, [a for a in addresses if a is not None]


# the sonames of the OpenSSL releases Python's ``_hashlib`` links against (3.x, 1.1)
_SONAMES = ("libcrypto.so.3", "libcrypto.so.1.1")


@cache
def _library() -> tuple[str, ctypes.CDLL] | None:
    """libcrypto's name and handle, looked up once a process.  Why not only
    ``find_library``: it runs ``ldconfig -p`` in a subprocess (7-15 ms of every start-up
    here), while the library ``hashlib`` already loaded is found with no search at all
    (``RTLD_NOLOAD``: only a library already in the process)."""
    import hashlib  # noqa: F401  (loads ``_hashlib``, and with it libcrypto)

    noload: int | None = getattr(os, "RTLD_NOLOAD", None)  # (POSIX only)
    for soname in _SONAMES if noload is not None else ():
        try:
            return soname, ctypes.CDLL(soname, mode=noload or 0)
        except OSError:
            continue
    # imported only here: ctypes.util imports subprocess, tempfile and random (~3 ms)
    from ctypes.util import find_library

    name = find_library("crypto")
    if not name:
        return None
    try:
        return name, ctypes.CDLL(name)
    except OSError:
        return None
