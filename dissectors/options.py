"""Run options as a session sees them: the keys, their one default, their one check.

Why a module: the payload cap's default used to be written in seven modules and the
option read by five helpers with different policies (one fell back to 4096 on a bad
value, the others raised).  Every built-in dissector, and any plugin, now reads its
options with :func:`session_option`, so a bad value fails the same way everywhere: a
``ValueError`` naming the option, raised when the session is created.

Kept free of imports from the rest of ``dissectors`` so that ``dissectors.api`` can
re-export it without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # (for the type checker only: no import at run time)
    from reassembly.limits import MemoryBudget

__all__ = ["DEFAULT_PAYLOAD_CAP", "SessionOptions", "read_payload_cap", "session_option"]

DEFAULT_PAYLOAD_CAP = 4096
"""Payload bytes kept per row when the run does not say (``msgcap dissect --payload-cap``):
enough for a typical JSON or protobuf message; the length and SHA-256 of the whole payload
are always kept, so a capped row still identifies its message."""


class SessionOptions(TypedDict, total=False):
    """The options dict handed to ``Dissector.session`` and ``PayloadDissector.new_state``.

    Every key may be missing (a session built in a test gets ``{}``); a session reads the
    ones it uses with :func:`session_option`.  The pipeline fills the first five; the
    others are per-dissector knobs that tests and fuzzers set."""

    payload_cap: int | None  # payload bytes kept per row; None keeps all
    keep_secrets: bool  # credentials kept in the rows instead of length + SHA-256
    memory_budget: MemoryBudget | None  # shared by the run (None or absent: no budget)
    columnar: bool  # the run's sink takes ColumnBatch records (payload rows as columns)
    # tables whose rows the sink reads as they come (payload decoding learns Pulsar
    # schemas from command rows): a session hands their rows as Records, in order
    watched_tables: frozenset[str]
    stream_id: int  # QUIC stream id of the session's stream (Felix)


def session_option(
    options: Mapping[str, Any],
    name: str,
    default: int | None,
    *,
    minimum: int = 0,
    none_ok: bool = False,
    owner: str = "",
) -> int | None:
    """The integer option ``name`` of ``options``, or ``default`` when it is missing.

    The one policy: a value that is not an ``int`` (``bool`` included) or is below
    ``minimum`` raises ``ValueError`` naming the option (prefixed with ``owner``, the
    dissector's name, when given); ``None`` is accepted only with ``none_ok``.  Raising,
    not falling back, because an option is the user's or the caller's choice: silently
    replacing it would write rows that do not say what was asked."""
    v = options.get(name, default)
    if v is None and none_ok:
        return None
    if type(v) is not int or v < minimum:
        who = f"{owner} option" if owner else "option"
        raise ValueError(f"{who} {name} must be an int >= {minimum}"
                         f"{' or None' if none_ok else ''}, got {v!r}")
    return v


def read_payload_cap(options: Mapping[str, Any], owner: str = "") -> int | None:
    """The ``payload_cap`` option: an int >= 0, or None (keep every byte); default
    :data:`DEFAULT_PAYLOAD_CAP`.  Raises ``ValueError`` like :func:`session_option`."""
    return session_option(options, "payload_cap", DEFAULT_PAYLOAD_CAP, none_ok=True,
                          owner=owner)
