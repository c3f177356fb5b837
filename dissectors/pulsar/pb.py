"""Pulsar's protobuf schemas: wire schemas for decoding, message classes for encoding.

Strategy (as ``dissectors.proto`` does for STAN and Liftbridge): ``pulsar.proto`` is the
source of truth, ``_descriptors.py`` its compiled ``FileDescriptorProto``.  Decoding uses
the tolerant, bounds-checked reader ``dissectors.proto.wire`` (never raises, keeps what
was decoded before damage, lists unknown field numbers), driven by ``MessageSchema``s
built here from the descriptor.  ``message_class`` builds real protobuf classes in a
private descriptor pool, for tests and the sample broker emulator to *encode*.

``double`` fields (only in CONSUMER_STATS_RESPONSE) have no ``wire.Kind``: they are left
out of the wire schemas and skipped like unknown fields; ``OMITTED`` names them so they
are not reported as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (at run time protobuf is imported inside the functions, as before)
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import Message

from dissectors.proto.wire import Decoded, FieldSpec, Kind, MessageSchema, decode
from dissectors.pulsar._descriptors import FILE

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


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    from google.protobuf import descriptor_pb2

    return descriptor_pb2.FileDescriptorProto.FromString(FILE)


@cache
def _index() -> tuple[dict[str, MessageSchema], dict[str, dict[int, str]]]:
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    enums: dict[str, dict[int, str]] = {}

    def walk(prefix: str, msgs: Iterable[descriptor_pb2.DescriptorProto],
             enum_types: Iterable[descriptor_pb2.EnumDescriptorProto]) -> None:
        for e in enum_types:
            enums[f"{prefix}.{e.name}"] = {v.number: v.name for v in e.value}
        for m in msgs:
            full = f"{prefix}.{m.name}"
            messages[full] = m
            walk(full, m.nested_type, m.enum_type)

    fp = _file_proto()
    walk(fp.package, fp.message_type, fp.enum_type)
    schemas = {name: MessageSchema(name) for name in messages}
    for name, m in messages.items():
        sch = schemas[name]
        skipped = []
        for f in m.field:
            if f.type == _TYPE_DOUBLE:
                skipped.append(f.number)
                continue
            kind = _TYPE_KIND.get(f.type)
            if kind is None:  # pragma: no cover - pulsar.proto uses none
                raise TypeError(f"{name}.{f.name}: field type {f.type} not supported")
            ref = f.type_name.lstrip(".")
            sub = schemas.get(ref) if kind is Kind.MESSAGE else None
            enum = enums.get(ref) if kind is Kind.ENUM else None
            sch.fields[f.number] = FieldSpec(
                f.number, f.name, kind, f.label == _LABEL_REPEATED, sub, enum
            )
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


