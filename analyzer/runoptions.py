"""The run's ``Options`` from a command's arguments: built in one function, checked once.

Why a module: ``dissect``, ``flows``, ``summary`` (and ``ladder``/``report``/``follow
--decoded`` through it) and ``spark ingest`` each built ``Options`` themselves with
different checks (``spark ingest`` set the key log only when given, ``summary`` never
looked at a payload cap), so the same arguments could give different runs.  Every command
now calls :func:`options_from_args`; a user's mistake found here is a ``UserError``
(``error:`` + ``fix:``, exit 2) before any work.

Light at import time, like ``analyzer.cliutil``: ``analyzer.pipeline`` (pyarrow) is
imported when an ``Options`` is built.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from analyzer.cliutil import UserError, check_decode_as, check_keylog, parse_decode_as
from dissectors.options import DEFAULT_PAYLOAD_CAP, read_payload_cap

if TYPE_CHECKING:  # pragma: no cover
    from analyzer.pipeline import Options
    from dissectors.registry import Registry

__all__ = ["add_payload_decoding_args", "build_options", "options_from_args"]


def options_from_args(args: argparse.Namespace, registry: Registry) -> Options:
    """``Options`` from the arguments of any command that dissects.

    A command without some flag (``flows`` has no ``--payload-cap``, ``spark ingest`` no
    ``--memory-limit``) gets that option's default, so identical arguments give identical
    ``Options`` whichever command parsed them."""
    return build_options(
        registry,
        payload_cap=getattr(args, "payload_cap", DEFAULT_PAYLOAD_CAP),
        decode_as=parse_decode_as(getattr(args, "decode_as", None)),
        keylog=getattr(args, "keylog", None),
        keep_secrets=getattr(args, "keep_secrets", False) is True,
        overwrite=getattr(args, "overwrite", False) is True,
        memory_limit=getattr(args, "memory_limit", None),
        decode=getattr(args, "decode", False) is True,
        schemas=getattr(args, "schema", None) or (),
    )


def build_options(
    registry: Registry,
    *,
    payload_cap: Any = DEFAULT_PAYLOAD_CAP,
    decode_as: Mapping[int, str] | None = None,
    keylog: str | None = None,
    keep_secrets: bool = False,
    overwrite: bool = False,
    memory_limit: int | None = None,
    decode: bool = False,
    schemas: Sequence[str] = (),
) -> Options:
    """Every check on a run's options, then the ``Options``.

    ``decode_as`` is already parsed (``parse_decode_as``); its names must be dissectors of
    ``registry``.  The payload cap is checked by the sessions' own policy
    (``dissectors.options``), so the CLI cannot accept a value a session would refuse.
    Raises ``UserError``."""
    try:
        read_payload_cap({"payload_cap": payload_cap})
    except ValueError:
        raise UserError(f"--payload-cap {payload_cap!r} is not a number of bytes",
                        "give --payload-cap 0 or more (bytes kept per message; its length "
                        "and SHA-256 are always kept)") from None
    decode_as = dict(decode_as or {})
    check_decode_as(decode_as, registry)
    if keylog:
        check_keylog(keylog)
    payload_schemas = _payload_schemas(decode, schemas)
    from analyzer.pipeline import Options
    from reassembly.limits import Limits

    return Options(
        payload_cap=payload_cap,
        decode_as=decode_as,
        overwrite=overwrite,
        keep_secrets=keep_secrets,
        keylog=keylog or None,
        limits=Limits() if memory_limit is None else Limits(memory_limit_bytes=memory_limit),
        payload_schemas=payload_schemas,
    )


def _payload_schemas(decode: bool, schemas: Sequence[str]) -> tuple[str, ...] | None:
    """``--decode`` / ``--schema`` as ``Options.payload_schemas``, each spec checked now
    (a bad one is the user's mistake: error + fix, exit 2) and its file made absolute
    (worker processes and Spark executors read it from another working directory)."""
    if not decode and not schemas:
        return None
    from dissectors.payload.schemas import SchemaSpecError, absolute_spec, decoding_for

    try:
        decoding_for(list(schemas))
    except SchemaSpecError as e:
        raise UserError(str(e), e.fix) from None
    return tuple(absolute_spec(s) for s in schemas)


def add_payload_decoding_args(p: argparse.ArgumentParser) -> None:
    """``--decode`` and ``--schema``, declared once for every command that writes a
    dataset (``dissect``, ``spark ingest``); ``options_from_args`` reads them."""
    p.add_argument("--decode", action="store_true",
                   help="decode payloads (JSON, MessagePack, CBOR, text, gzip/zstd/snappy) "
                   "into the payload_decoded columns")
    p.add_argument("--schema", action="append", default=[], metavar="PATTERN=FILE",
                   help="decode payloads of subjects/topics matching PATTERN with a .proto "
                   "(FILE#pkg.Message), descriptor set, .avsc or JSON Schema (implies "
                   "--decode); FILE must be readable where the run's tasks run")
