"""Schema-driven decoders (Protobuf, Avro) and where their schemas come from.

Strategy: a schema is loaded once (user ``--schema PATTERN=FILE``, or announced in the
capture by a Pulsar producer/consumer) into a ``Binding``: the pattern it applies to, the
decoder name and the loaded schema object.  The libraries decode (``protobuf`` message
classes built from descriptors in a private pool, ``fastavro``'s schemaless reader); only
the choice of schema is ours.

Patterns: a pattern with ``://`` is a Pulsar topic pattern, a regular expression matched
against the whole topic name (as Pulsar's own ``topicsPattern`` subscriptions are); any
other pattern is a NATS subject with ``*`` / ``>`` wildcards, and also matches a Pulsar
topic whose local name (after the last ``/``) it matches, so ``--schema orders=...``
reaches ``persistent://public/default/orders``.
"""

from __future__ import annotations

import io
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.types import Schema as AvroSchema
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, json_format, message_factory
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from dissectors.dispatch import subject_matches
from dissectors.payload import Binding, DecodeError, PayloadDecoder, PayloadDecoding

__all__ = [
    "AvroDecoder",
    "ProtobufDecoder",
    "SchemaSpecError",
    "absolute_spec",
    "avro_schema",
    "check_json_schema",
    "decoding_for",
    "load_schema_spec",
    "pattern_matches",
    "protobuf_class",
]


class SchemaSpecError(ValueError):
    """A ``--schema`` argument that cannot be used; ``fix`` says what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str] | tuple[str, ...]:
    if "://" in pattern:
        return re.compile(pattern)
    return tuple(pattern.split("."))


def pattern_matches(pattern: str, subject: str) -> bool:
    """Whether a ``--schema`` pattern applies to a NATS subject or Pulsar topic."""
    p = _compiled(pattern)
    if isinstance(p, re.Pattern):
        return p.fullmatch(subject) is not None
    if subject_matches(p, tuple(subject.split("."))):
        return True
    if "://" in subject:
        local = subject.rsplit("/", 1)[-1]
        return subject_matches(p, tuple(local.split(".")))
    return False


# --------------------------------------------------------------------------- Protobuf


def _pool_from(files: list[descriptor_pb2.FileDescriptorProto]
               ) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pending = list(files)
    # add in dependency order (a descriptor set from protoc is, a Pulsar schema may not be)
    while pending:
        progress = False
        for f in list(pending):
            try:
                pool.Add(f)
            except TypeError:
                continue
            pending.remove(f)
            progress = True
        if not progress:
            missing = ", ".join(f.name for f in pending)
            raise DecodeError(f"descriptor set: cannot resolve imports of {missing}")
    return pool


def protobuf_class(files: list[descriptor_pb2.FileDescriptorProto], message: str | None
                   ) -> tuple[Any, str]:
    """The message class named ``message`` (full name) from ``files``; without a name, the
    only top-level message of the last file.  Returns ``(class, full name)``."""
    pool = _pool_from(files)
    if message is None:
        last = files[-1]
        if len(last.message_type) != 1:
            names = [m.name for m in last.message_type]
            raise SchemaSpecError(
                f"{last.name} defines {len(names)} messages ({', '.join(names)})",
                "name the message type: --schema 'PATTERN=FILE#package.Message'")
        message = (last.package + "." if last.package else "") + last.message_type[0].name
    try:
        desc = pool.FindMessageTypeByName(message)
    except KeyError:
        raise SchemaSpecError(f"no message type {message!r} in the schema",
                              "give the full name, package included") from None
    return message_factory.GetMessageClass(desc), message


class ProtobufDecoder(PayloadDecoder):
    """Protobuf with a schema (a message class): the JSON mapping with proto field names.
    Without a schema (only when bound explicitly, ``--schema PATTERN=protobuf``): field
    numbers and wire types, as the library's unknown-field set reads them."""

    name = "protobuf"
    detect = False  # almost any bytes parse as some protobuf: never guessed

    def decode(self, data: bytes, schema: Any = None) -> Any:
        from google.protobuf.message import DecodeError as PbDecodeError

        msg = (schema or empty_pb2.Empty)()
        try:
            msg.ParseFromString(data)
        except (PbDecodeError, ValueError, RuntimeError) as e:
            raise DecodeError(str(e) or "not a protobuf message") from None
        if schema is None:
            return _raw_fields(msg)
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def _raw_fields(msg: Message, depth: int = 0) -> list[dict[str, Any]]:
    out = []
    fields = UnknownFieldSet(msg)
    for i in range(len(fields)):  # the stub gives it no __iter__, only the sequence protocol
        f = fields[i]
        v = f.data
        entry: dict[str, Any] = {"field": f.field_number, "wire_type": f.wire_type}
        if isinstance(v, UnknownFieldSet):  # group
            v = [{"field": v[j].field_number, "wire_type": v[j].wire_type, "value": v[j].data}
                 for j in range(len(v))]
        entry["value"] = v
        out.append(entry)
    return out


# ------------------------------------------------------------------------------- Avro


def avro_schema(definition: AvroSchema) -> AvroSchema:
    """A parsed (fastavro) schema from its JSON definition (a dict, list or string)."""
    try:
        return fastavro.parse_schema(definition)
    except Exception as e:  # noqa: BLE001 - fastavro raises several kinds
        raise SchemaSpecError(f"not a valid Avro schema: {e}",
                              "give an .avsc file with one Avro schema") from None


class AvroDecoder(PayloadDecoder):
    """Avro binary encoding of one datum (no container header), as Pulsar and most
    brokers carry it; the schema must be given (``.avsc`` or announced in the capture)."""

    name = "avro"
    detect = False

    def decode(self, data: bytes, schema: Any = None) -> Any:
        if schema is None:
            raise DecodeError("Avro needs a schema")
        fp = io.BytesIO(data)
        try:
            value = fastavro.schemaless_reader(fp, schema, None)
        except (EOFError, StopIteration):
            raise DecodeError("cut short") from None
        except Exception as e:  # noqa: BLE001 - fastavro raises many kinds on bad bytes
            raise DecodeError(f"{type(e).__name__}: {e}") from None
        if fp.tell() != len(data):
            raise DecodeError(f"{len(data) - fp.tell()} trailing bytes after the datum")
        return value


# ------------------------------------------------------------------------ JSON Schema


def check_json_schema(value: object, schema: object) -> None:
    """Validate a decoded JSON value against a JSON Schema (``jsonschema`` when
    installed; without it the value is kept unvalidated)."""
    try:
        import jsonschema
    except ImportError:
        return
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        path = "/".join(str(p) for p in e.absolute_path)
        raise DecodeError(f"JSON Schema: {e.message} at /{path}") from None


# ----------------------------------------------------------------- user --schema specs

_NAMED = {"json", "msgpack", "cbor", "text", "protobuf", "avro"}


def _split_spec(spec: str) -> tuple[str, str]:
    """``PATTERN=TARGET`` split at the first ``=``; ``SchemaSpecError`` unless both are
    there."""
    pattern, sep, target = spec.partition("=")
    if not sep or not pattern or not target:
        raise SchemaSpecError(f"--schema {spec!r} is not PATTERN=FILE",
                              "write it as --schema 'orders.*=orders.proto#shop.Order'")
    return pattern, target


def absolute_spec(spec: str) -> str:
    """``spec`` with its FILE made absolute (a decoder name is left as it is).

    Why: the spec is read again wherever the run's ``Options`` go -- ``--workers``
    processes, Spark executors, whose working directory is not the user's -- so a
    relative path must name the file the user meant when the command was parsed."""
    pattern, target = _split_spec(spec)
    if target in _NAMED:
        return spec
    file, sep, message = target.partition("#")
    return f"{pattern}={Path(file).absolute()}{sep}{message}"


def load_schema_spec(spec: str) -> Binding:
    """``PATTERN=FILE[#Message]`` (or ``PATTERN=DECODER`` to force a decoder by name) as a
    ``Binding``.  Raises ``SchemaSpecError`` with a fix for a user mistake."""
    pattern, target = _split_spec(spec)
    if "://" in pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise SchemaSpecError(f"--schema topic pattern {pattern!r}: {e}",
                                  "a Pulsar topic pattern is a regular expression") from None
    if target in _NAMED:
        return Binding(pattern, target, None, f"user:{target}")
    file, _, message = target.partition("#")
    path = Path(file)
    if not path.is_file():
        raise SchemaSpecError(f"--schema {pattern}: no file {file}",
                              "give the path of a .proto, .desc/.pb, .avsc or .json file")
    suffix = path.suffix.lower()
    sid = f"user:{path.name}" + (f"#{message}" if message else "")
    if suffix == ".proto":
        from dissectors.proto.build import compile_protos

        try:
            files = compile_protos(path.parent.resolve(), (path.name,))
        except Exception as e:  # noqa: BLE001 - protoc's own message says what is wrong
            raise SchemaSpecError(f"cannot compile {file}: {e}",
                                  "fix the .proto, or give a descriptor set "
                                  "(protoc --include_imports --descriptor_set_out)") from None
        protos = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in files.values()]
        cls, full = protobuf_class(protos, message or None)
        return Binding(pattern, "protobuf", cls, f"user:{path.name}#{full}")
    if suffix in (".desc", ".pb", ".binpb", ".protoset"):
        try:
            fds = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())
        except Exception:  # noqa: BLE001
            raise SchemaSpecError(f"{file} is not a FileDescriptorSet",
                                  "make one with protoc --include_imports "
                                  "--descriptor_set_out=FILE") from None
        cls, full = protobuf_class(list(fds.file), message or None)
        return Binding(pattern, "protobuf", cls, f"user:{path.name}#{full}")
    try:
        definition = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaSpecError(f"{file} is not JSON: {e}",
                              "an .avsc or a JSON Schema file is JSON text") from None
    if suffix == ".avsc":
        return Binding(pattern, "avro", avro_schema(definition), sid)
    if suffix == ".json":
        return Binding(pattern, "json", definition, sid)
    raise SchemaSpecError(f"--schema {file}: unknown kind {suffix or '(no suffix)'}",
                          "use .proto, .desc (descriptor set), .avsc or .json (JSON Schema)")


def decoding_for(specs: tuple[str, ...] | list[str]) -> PayloadDecoding:
    """The ``PayloadDecoding`` engine of a run: the registered decoders plus one binding
    per ``--schema`` spec (later specs win over earlier ones)."""
    from dissectors.payload.pulsar import PulsarSchemaSource

    engine = PayloadDecoding()
    engine.observers.append(PulsarSchemaSource())
    for spec in specs:
        engine.bind(load_schema_spec(spec))
    return engine
