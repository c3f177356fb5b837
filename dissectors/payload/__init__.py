"""Payload decoders: what was *in* a message (JSON, MessagePack, CBOR, text, Protobuf, Avro).

Strategy: a payload decoder is a plugin of its own kind (entry-point group
``msgcap.payload_decoders``; the built-ins register the same way, see ``pyproject.toml``).
It turns the bytes of one message into a JSON-able value, or declines.  It never sees a
flow, a file or a table: the ``PayloadDecoding`` engine picks the decoder for a message --
a schema bound to the message's subject or topic first, then detection by structure --
and produces the ``payload_decoded`` column family (``decoded_fields``) that every message
table carries.  A decoder that raises never loses the row: the exception becomes the
``payload_decode_error`` column.

Wrappers (gzip, zstd, snappy) are decoders that return bytes: the engine unwraps (bounded
by ``MAX_INFLATE_BYTES``) and decodes what is inside; the decoder column then reads
``gzip+json``.

Decoded values pass the redaction gate before they become a column value: a member whose
name holds one of the gate's credential stems (``dissectors.redaction.SECRET_STEMS``, read
with Go's case folds) becomes a marker, every string value passes ``redact_text``.  So a
``password`` inside a decoded payload is a secret by the same rules as anywhere else, and
the column stays valid JSON (the gate on the JSON *text* could cut a string in two).
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from functools import lru_cache
from typing import Any, ClassVar, NamedTuple

import pyarrow as pa

from dissectors.entrypoints import entry_points
from dissectors.redaction import SECRET_STEMS, fold_name, marker, redact_text, secrets_kept
from dissectors.tables import Field

__all__ = [
    "DECODED_COLUMNS",
    "ENTRY_POINT_GROUP",
    "MAX_DEPTH",
    "MAX_INFLATE_BYTES",
    "DecodeError",
    "DecodedSource",
    "PayloadDecoder",
    "PayloadDecoding",
    "Strength",
    "decoded_fields",
    "decoded_source",
    "load_decoders",
    "to_json_text",
]

ENTRY_POINT_GROUP = "msgcap.payload_decoders"

# A wrapper (gzip/zstd/snappy) may inflate at most this much: a decompression bomb in a
# 4 KiB payload must not take the run's memory.  Beyond it the row gets an error.
MAX_INFLATE_BYTES = 16 * 1024 * 1024
# Wrappers inside wrappers: gzip(zstd(json)) is plausible, deeper is an attack.
MAX_UNWRAP = 3
# Nesting kept in the JSON text; a deeper value is cut with a marker (a hostile CBOR or
# MessagePack payload nests arrays thousands deep for a few bytes).
MAX_DEPTH = 64
_NOT_ALNUM = re.compile(r"[\W_]+")


class DecodeError(ValueError):
    """Raised by a decoder for bytes it recognised but could not decode."""


class Strength(Enum):
    """How sure a structural sniff is.

    ``STRONG``: the bytes look like this format and nothing else (a JSON object, a CBOR
    self-describe tag): if decoding then fails, the row says why.  ``WEAK``: the first
    byte fits, but so would many binary payloads: a failure is silent and the next
    decoder is tried.  ``NO``: not this format."""

    NO = 0
    WEAK = 1
    STRONG = 2


class PayloadDecoder(ABC):
    """One payload format.  Subclasses are registered as entry points.

    ``name`` is the column value (``json``, ``msgpack``); ``wrapper`` decoders return
    bytes (a decompressed body) instead of a value; ``detect`` says whether the engine
    may pick this decoder by structure when no schema is bound (Protobuf without a schema
    is only used when asked).  Instances are created once per run and must be stateless
    per message."""

    name: ClassVar[str]
    wrapper: ClassVar[bool] = False
    detect: ClassVar[bool] = True

    def sniff(self, data: bytes) -> Strength:
        """Cheap structural check of ``data``; never raises."""
        return Strength.NO

    @abstractmethod
    def decode(self, data: bytes, schema: Any = None) -> Any:
        """The decoded value (JSON-able after ``to_json_text``), or bytes for a wrapper.
        ``schema`` is what a schema source loaded for this decoder (None without one).
        Raise (``DecodeError`` preferably) on bytes that do not decode."""


# ------------------------------------------------------------------- the column family

DECODED_COLUMNS = ("payload_decoder", "payload_schema_id", "payload_decoded",
                   "payload_decode_error")


class DecodedSource(NamedTuple):
    """Which columns of a message table feed its decoder: the kept bytes, whether they
    were cut by ``--payload-cap``, and the subject/topic that schemas are bound to."""

    payload: str
    truncated: str | None
    subject: str | None


_SOURCES: dict[str, DecodedSource] = {}


def decoded_fields(
    table: str, *, payload: str = "payload", truncated: str | None = "payload_truncated",
    subject: str | None = "subject",
) -> tuple[Field, ...]:
    """The ``payload_decoded`` column family for message table ``table`` (call it in the
    table's declaration); also records which columns feed it (``decoded_source``)."""
    _SOURCES[table] = DecodedSource(payload, truncated, subject)
    return (
        Field(
            "payload_decoder", pa.string(),
            f"Decoder that read `{payload}` (`json`, `msgpack`, `cbor`, `text`, `protobuf`, "
            "`avro`, ...; a wrapper is prefixed: `gzip+json`); null when payload decoding "
            "was not asked for (`--decode` / `--schema`) or no decoder recognised the bytes "
            "(they stay as they are).",
        ),
        Field(
            "payload_schema_id", pa.string(),
            "Schema the value was decoded with: `user:<file>[#<message>]` for `--schema`, "
            "`pulsar:<topic>@<schema_version>` for a schema announced in the capture; null "
            "when decoded by structure.",
        ),
        Field(
            "payload_decoded", pa.string(),
            "The decoded value as JSON text (query it with DuckDB `json_extract` or Spark "
            "`get_json_object`); bytes inside become base64 strings, non-string map keys "
            "strings. Passed through the redaction gate: secret members are markers.",
        ),
        Field(
            "payload_decode_error", pa.string(),
            "Why the payload could not be decoded (malformed bytes for the decoder its "
            "schema or its structure selected, payload cut by `--payload-cap`, inflate "
            "limit); the row and its bytes are kept.",
        ),
    )


def decoded_source(table: str) -> DecodedSource | None:
    """The source columns of a table declared with ``decoded_fields`` (None otherwise)."""
    return _SOURCES.get(table)


# ------------------------------------------------------------------------- JSON output


def _jsonable(v: object, depth: int = 0) -> object:
    """``v`` made of JSON types only: bytes as base64, keys as strings, NaN as a string;
    redacted on the way (see ``_member``)."""
    if depth > MAX_DEPTH:
        return "<nested too deep>"
    if v is None or isinstance(v, bool | int):
        return v
    if isinstance(v, str):
        return redact_text(v)  # a text payload, or a string holding a CONNECT line
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, Mapping):
        return dict(_member(k if isinstance(k, str) else _key_text(k), x, depth)
                    for k, x in v.items())
    if isinstance(v, list | tuple | set | frozenset):
        return [_jsonable(x, depth + 1) for x in v]
    if isinstance(v, _dt.datetime | _dt.date | _dt.time):
        return v.isoformat()
    if isinstance(v, Decimal | uuid.UUID):
        return str(v)
    tag = getattr(v, "tag", None)  # cbor2.CBORTag and msgpack.ExtType look alike
    if tag is not None and hasattr(v, "value"):
        return {"$tag": tag, "value": _jsonable(v.value, depth + 1)}
    code = getattr(v, "code", None)
    if code is not None and hasattr(v, "data"):
        return {"$ext": code, "data": _jsonable(v.data, depth + 1)}
    return str(v)


def _member(key: str, value: object, depth: int) -> tuple[str, object]:
    """One member, its value a redaction marker when the key may name a credential.
    Redacting the decoded value, not its JSON text, keeps the column valid JSON whatever
    the payload held."""
    value = _jsonable(value, depth + 1)
    if secrets_kept() or not _secret_name(key):
        return key, value
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
    else:
        raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return key, marker(raw)


@lru_cache(maxsize=8192)  # member names repeat message after message
def _secret_name(key: str) -> bool:
    """The gate's stems (``SECRET_STEMS``) in the member name read as Go reads names
    (case and Unicode folds, separators ignored).  A decoded name is whole, so the gate's
    allowance for names cut at their start (``n`` may be what is left of ``token``) does
    not apply: it would withhold every short key."""
    folded = _NOT_ALNUM.sub("", fold_name(key).casefold())
    return not folded or any(stem in folded for stem in SECRET_STEMS)


def _key_text(k: object) -> str:
    if isinstance(k, bytes | bytearray):
        return base64.b64encode(bytes(k)).decode("ascii")
    return json.dumps(_jsonable(k), separators=(",", ":"), sort_keys=True) \
        if isinstance(k, Mapping | list | tuple) else str(k)


def to_json_text(value: object) -> str:
    """The decoded value as compact JSON text (member order as decoded), redacted:
    secret members are markers, string values passed the gate."""
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


# ------------------------------------------------------------------------------ engine


@dataclass(frozen=True, slots=True)
class Binding:
    """A schema bound to subjects/topics: ``match(subject)`` decides, ``decoder`` (a
    registered name) decodes with ``schema``; ``schema_id`` goes into the row."""

    pattern: str
    decoder: str
    schema: Any
    schema_id: str

    def match(self, subject: str) -> bool:
        from dissectors.payload.schemas import pattern_matches

        return pattern_matches(self.pattern, subject)


def load_decoders() -> dict[str, PayloadDecoder]:
    """Every registered payload decoder, by name (entry points; the built-ins are among
    them).  A plugin that fails to load is skipped with its error kept in ``errors``."""
    found: dict[str, PayloadDecoder] = {}
    for ep in sorted(entry_points(ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            cls = ep.load()
            dec = cls()
        except Exception as e:  # noqa: BLE001 - a broken plugin costs its decoder only
            load_decoders.errors[ep.name] = repr(e)  # type: ignore[attr-defined]  # see below
            continue
        found[getattr(cls, "name", ep.name)] = dec
    return found


load_decoders.errors = {}  # type: ignore[attr-defined]  # a function's attribute: mypy has none


class PayloadDecoding:
    """Chooses a decoder per message and builds the column values.

    Order: (1) the most recently added binding whose pattern matches the subject/topic
    (user ``--schema`` and schemas announced in the capture); its decoder alone is used
    and a failure is the row's error; (2) without a binding, wrappers are unwrapped and
    the detecting decoders are tried by structure in ``detect_order``.
    """

    detect_order: ClassVar[tuple[str, ...]] = ("json", "cbor", "msgpack", "text")

    def __init__(self, decoders: Mapping[str, PayloadDecoder] | None = None,
                 bindings: Iterable[Binding] = ()) -> None:
        self.decoders = dict(load_decoders() if decoders is None else decoders)
        self.bindings: list[Binding] = list(bindings)
        self._wrappers = [d for d in self.decoders.values() if d.wrapper]
        order = [n for n in self.detect_order if n in self.decoders]
        order += sorted(n for n, d in self.decoders.items()
                        if d.detect and not d.wrapper and n not in order)
        self._detectors = [self.decoders[n] for n in order if self.decoders[n].detect]
        # schemas announced in the capture (Pulsar), by (topic, schema_version); the
        # sources that learn them from rows (``observe``)
        self.announced: dict[tuple[str, bytes | None], Binding] = {}
        self.observers: list[Any] = []
        # server endpoints (ip, port) on whose connections a schema was announced: state
        # their other connections' messages may be decoded with (the Spark split path
        # keeps such a server's connections in one task, ``analyzer.spark.ingest``)
        self.learned_from: set[tuple[str, int]] = set()

    def bind(self, binding: Binding) -> None:
        if binding.decoder not in self.decoders:
            raise KeyError(f"no payload decoder named {binding.decoder!r}")
        self.bindings.append(binding)

    def _binding(self, subject: str | None, version: bytes | None) -> Binding | None:
        """The user's ``--schema`` first (an explicit choice), then what the capture
        announced for this topic and version (else the topic's latest)."""
        if subject is None:
            return None
        for b in reversed(self.bindings):
            if b.match(subject):
                return b
        return self.announced.get((subject, version)) or self.announced.get((subject, None))

    @property
    def watched_tables(self) -> frozenset[str]:
        """The tables whose rows the schema sources read (``observe``): their rows must
        come to the sink one by one, as dict rows, before the rows they govern."""
        return frozenset(t for source in self.observers for t in source.tables)

    def observe(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Show rows on their way to the sink to the schema sources (Pulsar's commands
        announce schemas); a source that fails learns nothing from those rows."""
        for source in self.observers:
            try:
                source.observe(self, table, rows)
            except Exception:  # noqa: BLE001 - a schema missed is a row undecoded, no more
                continue

    def columns(self, data: bytes | None, truncated: bool | None = False,
                subject: str | None = None, schema_version: bytes | None = None
                ) -> dict[str, str | None]:
        """The four ``payload_decoded`` column values for one message; never raises."""
        out: dict[str, str | None] = dict.fromkeys(DECODED_COLUMNS)
        if data is None or not len(data):
            return out
        binding = self._binding(subject, schema_version)
        if truncated:
            if binding is not None:
                out["payload_decoder"] = binding.decoder
                out["payload_schema_id"] = binding.schema_id
            out["payload_decode_error"] = (
                "payload cut by --payload-cap: not decoded (raise --payload-cap)")
            return out
        try:
            self._decode(bytes(data), binding, out)
        except RecursionError:
            out["payload_decoded"] = None
            out["payload_decode_error"] = "value nested too deep"
        except Exception as e:  # noqa: BLE001 - the engine's own last line: keep the row
            out["payload_decoded"] = None
            out["payload_decode_error"] = f"decoder failed: {_why(e)}"
        return out

    def _decode(self, data: bytes, binding: Binding | None, out: dict[str, str | None]
                ) -> None:
        prefix = ""
        if binding is not None and self.decoders[binding.decoder].wrapper:
            # a subject bound to a wrapper: unwrap without sniffing, detect what is inside
            w = self.decoders[binding.decoder]
            out["payload_schema_id"] = binding.schema_id
            binding = None
            try:
                data = w.decode(data)
            except Exception as e:  # noqa: BLE001
                out["payload_decoder"] = w.name
                out["payload_decode_error"] = f"{w.name}: {_why(e)}"
                return
            prefix = w.name + "+"
        for _ in range(MAX_UNWRAP):
            for w in self._wrappers:
                if w.sniff(data) is Strength.NO:
                    continue
                try:
                    data = w.decode(data)
                except Exception as e:  # noqa: BLE001 - a bad wrapper is the row's error
                    if binding is not None:
                        # only looked like a wrapper (an Avro datum may begin 1f 8b): the
                        # schema bound to the subject reads the bytes as they are
                        break
                    out["payload_decoder"] = prefix + w.name
                    out["payload_decode_error"] = f"{w.name}: {_why(e)}"
                    return
                prefix += w.name + "+"
                break
            else:
                break
        if binding is not None:
            dec = self.decoders[binding.decoder]
            out["payload_decoder"] = prefix + dec.name
            out["payload_schema_id"] = binding.schema_id
            if isinstance(binding.schema, Exception):  # a schema that could not be loaded
                out["payload_decode_error"] = str(binding.schema)
                return
            try:
                out["payload_decoded"] = to_json_text(dec.decode(data, binding.schema))
            except Exception as e:  # noqa: BLE001
                out["payload_decode_error"] = f"{dec.name}: {_why(e)}"
            return
        self._detect(data, prefix, out)

    def _detect(self, data: bytes, prefix: str, out: dict[str, str | None]) -> None:
        """``data`` (unwrapped by ``prefix``) bound to no schema: the first detecting
        decoder that takes it, in order; a strong sniff that fails to decode is the error."""
        for dec in self._detectors:
            strength = dec.sniff(data)
            if strength is Strength.NO:
                continue
            try:
                value = dec.decode(data)
            except Exception as e:  # noqa: BLE001
                if strength is Strength.STRONG:
                    out["payload_decoder"] = prefix + dec.name
                    out["payload_decode_error"] = f"{dec.name}: {_why(e)}"
                    return
                continue
            out["payload_decoder"] = prefix + dec.name
            out["payload_decoded"] = to_json_text(value)
            return
        if prefix:  # inflated, but nothing recognised inside: say what was unwrapped
            out["payload_decoder"] = prefix.rstrip("+")
            out["payload_decode_error"] = "no decoder recognised the unwrapped bytes"


def _why(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return redact_text(text[:300])
