"""Pulsar schemas announced in the capture, and the decoders only Pulsar needs.

Strategy: Pulsar clients carry their schema on the wire: ``PRODUCER`` and ``SUBSCRIBE``
hold a ``Schema`` (type, ``schema_data``, properties), ``PRODUCER_SUCCESS`` answers with the
``schema_version`` the broker registered it under (and every message the producer sends
carries that version in its metadata), and ``GET_SCHEMA_RESPONSE`` hands a schema to a
client that asked for a version (matched to its ``GET_SCHEMA`` by request id on the same
connection).  ``PulsarSchemaSource`` watches the ``pulsar_commands`` rows as they go to the
sink -- they come before the message rows they govern -- and registers each schema by
(topic, schema_version) with the decoding engine; a message is then decoded with the
schema of its topic and version, or, when the version was never seen, the last schema
announced for its topic.

``schema_data`` per type (Pulsar's ``SchemaInfo``): AVRO and JSON hold an Avro schema as
JSON text (JSON payloads are plain JSON: the Avro schema only describes them);
PROTOBUF_NATIVE holds JSON with a base64 ``FileDescriptorSet`` and the root message name;
PROTOBUF holds an Avro rendering of the message (no descriptors: decoded by field
numbers); KEY_VALUE holds the key and value schemas, each behind a 4-byte big-endian
length, with the ``kv.encoding.type`` property saying whether the payload holds both
(INLINE: again two length-prefixed parts) or only the value (SEPARATED: the key is the
message key); the primitive types have no schema data and a fixed big-endian encoding.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from typing import Any

from google.protobuf import descriptor_pb2

from dissectors.payload import Binding, DecodeError, PayloadDecoder, PayloadDecoding
from dissectors.payload.schemas import avro_schema, protobuf_class

__all__ = ["KeyValueDecoder", "PrimitiveDecoder", "PulsarSchemaSource", "binding_for"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# primitive schema type -> struct format (big-endian, as Pulsar's Java serdes write them)
_FIXED = {"Bool": ">?", "Int8": ">b", "Int16": ">h", "Int32": ">i", "Int64": ">q",
          "Float": ">f", "Double": ">d", "Date": ">q", "Time": ">q", "Timestamp": ">q",
          "LocalDate": ">q", "LocalTime": ">q", "LocalDateTime": ">q"}
# pending requests remembered per run (PRODUCER / GET_SCHEMA awaiting their answer)
MAX_PENDING = 4096
# (topic, version) schemas kept per run: a capture announcing more (a flood of producers on
# distinct topics) stops teaching new ones; their messages stay undecoded
MAX_ANNOUNCED = 100_000


class PrimitiveDecoder(PayloadDecoder):
    """Pulsar's primitive schemas (the schema object is the type name)."""

    name = "pulsar_primitive"
    detect = False

    def decode(self, data: bytes, schema: Any = None) -> Any:
        if schema in ("String", None):
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DecodeError(f"String schema: not UTF-8 at byte {e.start}") from None
        if schema == "Instant":  # seconds (int64) then nanoseconds (int32)
            if len(data) != 12:
                raise DecodeError(f"Instant: {len(data)} bytes, not 12")
            sec, nano = struct.unpack(">qi", data)
            return {"seconds": sec, "nanos": nano}
        if schema == "Bytes":
            return data
        fmt = _FIXED.get(schema)
        if fmt is None:
            raise DecodeError(f"schema type {schema} has no decoder")
        if len(data) != struct.calcsize(fmt):
            raise DecodeError(f"{schema}: {len(data)} bytes, not {struct.calcsize(fmt)}")
        (v,) = struct.unpack(fmt, data)
        if schema in ("Date", "Timestamp"):  # milliseconds since the epoch
            return {"epoch_ms": v, "utc": (_EPOCH + dt.timedelta(milliseconds=v)).isoformat()}
        return v


class KeyValueDecoder(PayloadDecoder):
    """KEY_VALUE: the schema object is ``(key binding, value binding, inline)``."""

    name = "pulsar_keyvalue"
    detect = False

    def decode(self, data: bytes, schema: Any = None) -> Any:
        if schema is None:
            raise DecodeError("KEY_VALUE needs its announced schema")
        (kdec, kschema), (vdec, vschema), inline = schema
        if not inline:
            return {"value": vdec.decode(data, vschema)}
        if len(data) < 4:
            raise DecodeError("KEY_VALUE: cut short")
        (klen,) = struct.unpack_from(">i", data)
        key = data[4:4 + klen] if klen >= 0 else None
        rest = data[4 + max(klen, 0):]
        if len(rest) < 4:
            raise DecodeError("KEY_VALUE: cut short")
        (vlen,) = struct.unpack_from(">i", rest)
        value = rest[4:4 + vlen] if vlen >= 0 else None
        if key is not None and len(key) != klen or value is not None and len(value) != vlen:
            raise DecodeError("KEY_VALUE: a part is cut short")
        return {"key": None if key is None else kdec.decode(key, kschema),
                "value": None if value is None else vdec.decode(value, vschema)}


def binding_for(schema: dict[str, Any], topic: str, schema_id: str) -> Binding | None:
    """A ``Binding`` for one ``Schema`` as the ``pulsar_commands`` ``command_json`` shows it
    (``type`` by name, ``schema_data`` hex, ``properties`` a list of key/value).  None for
    types without a payload encoding to apply (NONE/BYTES, AUTO_CONSUME, EXTERNAL).
    Raises (``DecodeError`` and others) on schema data that cannot be used."""
    kind = schema.get("type", "None")
    data = bytes.fromhex(schema.get("schema_data") or "")
    props = {p.get("key"): p.get("value") for p in schema.get("properties") or []
             if isinstance(p, dict)}
    if kind == "Avro":
        return Binding(topic, "avro", avro_schema(json.loads(data)), schema_id)
    if kind == "Json":
        return Binding(topic, "json", None, schema_id)
    if kind == "ProtobufNative":
        d = json.loads(data)
        fds = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(d["fileDescriptorSet"]))
        cls, _ = protobuf_class(list(fds.file), d["rootMessageTypeName"])
        return Binding(topic, "protobuf", cls, schema_id)
    if kind == "Protobuf":
        return Binding(topic, "protobuf", None, schema_id)
    if kind == "String" or kind in _FIXED or kind == "Instant":
        return Binding(topic, "pulsar_primitive", kind, schema_id)
    if kind == "KeyValue":
        (klen,) = struct.unpack_from(">i", data)
        kdata = data[4:4 + klen]
        (vlen,) = struct.unpack_from(">i", data, 4 + klen)
        vdata = data[8 + klen:8 + klen + vlen]

        def part(which: str, raw: bytes) -> Binding:
            sub: dict[str, Any] = {"type": props.get(f"{which}.schema.type", "Bytes"),
                                   "schema_data": raw.hex(), "properties": []}
            b = binding_for(sub, topic, schema_id)
            if b is None:  # BYTES: the part kept as it is (base64 in the JSON)
                return Binding(topic, "pulsar_primitive", "Bytes", schema_id)
            return b

        inline = props.get("kv.encoding.type", "INLINE") != "SEPARATED"
        return Binding(topic, "pulsar_keyvalue",
                       (part("key", kdata), part("value", vdata), inline), schema_id)
    return None


class PulsarSchemaSource:
    """Learns schemas from ``pulsar_commands`` rows (see the module docstring)."""

    tables = frozenset({"pulsar_commands"})  # the rows it reads (``observe``)

    def __init__(self) -> None:
        # (flow_id, request_id) -> (topic, Schema dict) of a PRODUCER / GET_SCHEMA in flight
        # (keys as the rows and commands hold them: either may be missing, None)
        self._producers: dict[tuple[object, object], tuple[str, dict[str, Any]]] = {}
        self._gets: dict[tuple[object, object], str] = {}

    def observe(self, engine: PayloadDecoding, table: str, rows: list[dict[str, Any]]) -> None:
        if table not in self.tables:
            return
        for row in rows:
            cmd = row.get("command")
            if cmd not in ("PRODUCER", "SUBSCRIBE", "PRODUCER_SUCCESS", "GET_SCHEMA",
                           "GET_SCHEMA_RESPONSE"):
                continue
            try:
                body = json.loads(row.get("command_json") or "{}")
            except ValueError:
                continue
            if not isinstance(body, dict):
                continue
            self._command(engine, cmd, row, body)

    def _command(self, engine: PayloadDecoding, cmd: str, row: dict[str, Any], body: dict[str, Any]
                 ) -> None:
        flow, rid = row.get("flow_id"), body.get("request_id")
        topic = body.get("topic")
        if cmd in ("PRODUCER", "SUBSCRIBE") and isinstance(body.get("schema"), dict) \
                and isinstance(topic, str):
            _learned_on(engine, row)
            self._register(engine, topic, None, body["schema"])
            if cmd == "PRODUCER" and len(self._producers) < MAX_PENDING:
                self._producers[(flow, rid)] = (topic, body["schema"])
        elif cmd == "PRODUCER_SUCCESS":
            known = self._producers.pop((flow, rid), None)
            if known is not None and isinstance(body.get("schema_version"), str):
                _learned_on(engine, row)
                self._register(engine, known[0], body["schema_version"], known[1])
        elif cmd == "GET_SCHEMA" and isinstance(topic, str) and len(self._gets) < MAX_PENDING:
            self._gets[(flow, rid)] = topic
        elif cmd == "GET_SCHEMA_RESPONSE":
            topic = self._gets.pop((flow, rid), None)
            if topic is not None and isinstance(body.get("schema"), dict):
                _learned_on(engine, row)
                self._register(engine, topic, body.get("schema_version"), body["schema"])

    def _register(self, engine: PayloadDecoding, topic: str, version_hex: str | None,
                  schema: dict[str, Any]) -> None:
        if len(engine.announced) >= MAX_ANNOUNCED:
            return
        try:
            version = bytes.fromhex(version_hex) if version_hex else None
        except ValueError:
            return
        shown = "?" if version is None else (
            str(int.from_bytes(version, "big", signed=True)) if len(version) == 8
            else version.hex())
        sid = f"pulsar:{topic}@{shown}"
        try:
            b = binding_for(schema, topic, sid)
        except Exception as e:  # noqa: BLE001 - unusable schema data: every message says so
            b = Binding(topic, "pulsar_primitive", DecodeError(
                f"announced {schema.get('type')} schema unusable: {type(e).__name__}: {e}"), sid)
        if b is None:
            return
        if b.decoder == "pulsar_keyvalue" and not isinstance(b.schema, Exception):
            (k, v, inline) = b.schema  # the parts' decoders, resolved once
            b = Binding(topic, b.decoder, ((engine.decoders[k.decoder], k.schema),
                                           (engine.decoders[v.decoder], v.schema), inline),
                        sid)
        engine.announced[(topic, version)] = b
        if version is not None or (topic, None) not in engine.announced:
            # the topic's latest: for messages whose version was never announced
            engine.announced[(topic, None)] = b


def _learned_on(engine: PayloadDecoding, row: dict[str, Any]) -> None:
    """Note the server of the connection ``row`` came on (``engine.learned_from``): the
    schema it announces may decode messages of that server's other connections."""
    c2s = row.get("direction") == "c2s"
    ip, port = (row.get("dst_ip"), row.get("dst_port")) if c2s else (
        row.get("src_ip"), row.get("src_port"))
    if isinstance(ip, str) and isinstance(port, int):
        engine.learned_from.add((ip, port))
