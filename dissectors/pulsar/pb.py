"""Pulsar's protobuf schemas: wire schemas for decoding, message classes for encoding.

Strategy (as ``dissectors.proto`` does for STAN and Liftbridge): ``pulsar.proto`` is the
source of truth, ``_descriptors.py`` its compiled ``FileDescriptorProto``.  Decoding uses
the tolerant, bounds-checked reader ``dissectors.proto.wire`` (never raises, keeps what
was decoded before damage, lists unknown field numbers), driven by ``MessageSchema``s
built here from what ``build.py`` read of the descriptor (``MESSAGES``, ``ENUMS``: no
protobuf runtime in a run).  ``message_class`` builds real protobuf classes in a
private descriptor pool, for tests and the sample broker emulator to *encode*.

``double`` fields (only in CONSUMER_STATS_RESPONSE) have no ``wire.Kind``: they are left
out of the wire schemas and skipped like unknown fields; ``OMITTED`` names them so they
are not reported as unknown.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (protobuf is imported inside the functions that encode)
    from google.protobuf import descriptor_pool
    from google.protobuf.message import Message

from dissectors.proto.wire import Decoded, FieldSpec, Kind, MessageSchema, decode
from dissectors.pulsar._descriptors import ENUMS, FILE, MESSAGES

__all__ = [
    "OMITTED",
    "PACKAGE",
    "Decoded",
    "decode",
    "enum_names",
    "message_class",
    "schema",
]

PACKAGE = "msgcap.pulsar"

# FieldDescriptorProto.Type values (descriptor.proto)
_TYPE_KIND = {
    9: Kind.STRING,
    12: Kind.BYTES,
    5: Kind.INT32,
    3: Kind.INT64,
    13: Kind.UINT32,
    4: Kind.UINT64,
    8: Kind.BOOL,
    14: Kind.ENUM,
    11: Kind.MESSAGE,
}
_TYPE_DOUBLE = 1
_LABEL_REPEATED = 3

OMITTED: dict[str, frozenset[int]] = {}
"""Message full name → numbers of fields left out of its wire schema (doubles)."""


@cache
def _index() -> tuple[dict[str, MessageSchema], dict[str, dict[int, str]]]:
    """The wire schemas and enums by full name, from ``_descriptors``' ``MESSAGES`` and
    ``ENUMS`` (what ``build.index`` read from the descriptor: no protobuf runtime at run
    time, ~13 ms of a Pulsar run's start)."""
    enums = {name: dict(values) for name, values in ENUMS}
    schemas = {name: MessageSchema(name) for name, _ in MESSAGES}
    for name, fields in MESSAGES:
        sch = schemas[name]
        skipped = []
        for number, fname, ftype, label, type_name in fields:
            if ftype == _TYPE_DOUBLE:
                skipped.append(number)
                continue
            kind = _TYPE_KIND.get(ftype)
            if kind is None:  # pragma: no cover - pulsar.proto uses none
                raise TypeError(f"{name}.{fname}: field type {ftype} not supported")
            ref = type_name.lstrip(".")
            sub = schemas.get(ref) if kind is Kind.MESSAGE else None
            enum = enums.get(ref) if kind is Kind.ENUM else None
            sch.fields[number] = FieldSpec(number, fname, kind, label == _LABEL_REPEATED, sub,
                                           enum)
        if skipped:
            OMITTED[name] = frozenset(skipped)
    return schemas, enums


def schema(name: str) -> MessageSchema:
    """Wire schema of a message, e.g. ``schema("BaseCommand")`` (package optional)."""
    if not name.startswith(PACKAGE + "."):
        name = f"{PACKAGE}.{name}"
    return _index()[0][name]


def enum_names(name: str) -> dict[int, str]:
    """Number → name of an enum, e.g. ``enum_names("BaseCommand.Type")``."""
    if not name.startswith(PACKAGE + "."):
        name = f"{PACKAGE}.{name}"
    return _index()[1][name]


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(FILE)
    return pool


@cache
def message_class(name: str) -> type[Message]:
    """A protobuf message class (private pool; for encoding in tests and emulators)."""
    from google.protobuf import message_factory

    if not name.startswith(PACKAGE + "."):
        name = f"{PACKAGE}.{name}"
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(name))


