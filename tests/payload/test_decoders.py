"""Payload decoders: exact values, detection by structure, wrappers, limits, redaction, and
fuzzed malformed inputs (a decode error column, never an exception)."""

from __future__ import annotations

import gzip
import json

import cbor2
import cramjam
import msgpack
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from dissectors.payload import (
    DECODED_COLUMNS,
    MAX_INFLATE_BYTES,
    Binding,
    PayloadDecoding,
    decoded_source,
    load_decoders,
    to_json_text,
)

ENGINE = PayloadDecoding()
DOC = {"order": 17, "sku": "A-9", "qty": [1, 2], "ok": True, "price": 9.5, "note": None}


def cols(data: bytes, subject: str | None = "s", *, engine: PayloadDecoding = ENGINE,
         truncated: bool = False) -> dict:
    out = engine.columns(data, truncated, subject)
    assert set(out) == set(DECODED_COLUMNS)
    return out


def forced(name: str) -> PayloadDecoding:
    return PayloadDecoding(ENGINE.decoders, [Binding(">", name, None, f"user:{name}")])


def test_builtins_are_registered_as_entry_points() -> None:
    assert sorted(load_decoders()) == [
        "avro", "cbor", "gzip", "json", "msgpack", "protobuf", "pulsar_keyvalue",
        "pulsar_primitive", "snappy", "text", "zstd"]


class _Ep:
    """An entry point as ``load_decoders`` sees one: a name and ``load()``."""

    def __init__(self, name: str, load) -> None:
        self.name, self._load = name, load

    def load(self):
        return self._load()


def test_a_plugin_decoder_is_used_and_a_broken_one_skipped(monkeypatch) -> None:
    """A third party's decoder (entry-point group msgcap.payload_decoders) takes part in
    detection like the built-ins; one that fails to load costs only its own decoder."""
    import dissectors.payload as payload
    from dissectors.payload import PayloadDecoder, Strength

    class Upper(PayloadDecoder):
        name = "upper"

        def sniff(self, data: bytes) -> Strength:
            return Strength.STRONG if data[:3] == b"\xffUP" else Strength.NO

        def decode(self, data: bytes, schema=None):
            return {"upper": data[3:].decode("ascii").upper()}

    def broken():
        raise ImportError("no module named msgcap_bson")

    builtin = list(payload.entry_points(group=payload.ENTRY_POINT_GROUP))
    monkeypatch.setattr(payload, "entry_points", lambda group: [
        *builtin, _Ep("upper", lambda: Upper), _Ep("bson", broken)])
    monkeypatch.setattr(load_decoders, "errors", {})
    engine = PayloadDecoding()
    assert "upper" in engine.decoders and "bson" not in engine.decoders
    assert "msgcap_bson" in load_decoders.errors["bson"]
    out = cols(b"\xffUPabc", engine=engine)  # not text: plugins come after the built-ins
    assert (out["payload_decoder"], out["payload_decoded"]) == ("upper", '{"upper":"ABC"}')
    assert cols(json.dumps(DOC).encode(), engine=engine)["payload_decoder"] == "json"


def test_message_tables_carry_the_family() -> None:
    import dissectors.felix.table  # noqa: F401 - registers
    import dissectors.liftbridge.table  # noqa: F401
    import dissectors.nats.table  # noqa: F401
    import dissectors.pulsar.table  # noqa: F401
    import dissectors.stan.table  # noqa: F401

    assert decoded_source("nats") == ("payload", "payload_truncated", "subject")
    assert decoded_source("pulsar_messages") == ("payload", "payload_truncated", "topic")
    assert decoded_source("stan") == ("data", "data_truncated", "channel")
    assert decoded_source("felix_messages") == ("payload", "payload_truncated", "stream")
    for lb in ("liftbridge", "liftbridge_entries"):
        assert decoded_source(lb) == ("value", "value_truncated", "subject")


@pytest.mark.parametrize(
    ("data", "decoder"),
    [
        (json.dumps(DOC).encode(), "json"),
        (msgpack.packb(DOC), "msgpack"),
        (cbor2.dumps(DOC), "cbor"),
        (b"\xd9\xd9\xf7" + cbor2.dumps(DOC), "cbor"),
        (gzip.compress(json.dumps(DOC).encode()), "gzip+json"),
        (zstandard.ZstdCompressor().compress(msgpack.packb(DOC)), "zstd+msgpack"),
        (bytes(cramjam.snappy.compress(cbor2.dumps(DOC))), "snappy+cbor"),
        (gzip.compress(zstandard.ZstdCompressor().compress(json.dumps(DOC).encode())),
         "gzip+zstd+json"),
    ],
)
def test_detected_by_structure(data: bytes, decoder: str) -> None:
    out = cols(data)
    assert out["payload_decoder"] == decoder
    assert out["payload_decode_error"] is None and out["payload_schema_id"] is None
    assert json.loads(out["payload_decoded"]) == DOC  # cbor2 drops the self-describe tag


def test_text_and_binary() -> None:
    assert cols(b"plain 0.0|304qp1u")["payload_decoded"] == '"plain 0.0|304qp1u"'
    assert cols("grüße\n".encode())["payload_decoded"] == '"grüße\\n"'
    assert cols(b"\x00\x01\xff\xfe") == dict.fromkeys(DECODED_COLUMNS)  # declined: as is
    assert cols(b"") == dict.fromkeys(DECODED_COLUMNS)
    assert cols(None) == dict.fromkeys(DECODED_COLUMNS)


def test_binary_values_keys_and_nan_become_json() -> None:
    out = cols(msgpack.packb({1: b"\x00\xff", "f": float("nan")}))
    assert out["payload_decoded"] == '{"1":"AP8=","f":"nan"}'


def test_malformed_json_object_is_an_error_not_text() -> None:
    out = cols(b'{"a": 1,, "b": 2}')
    assert out["payload_decoder"] == "json"
    assert out["payload_decoded"] is None
    assert out["payload_decode_error"] == "json: Expecting property name enclosed in double " \
        "quotes at byte 8"


def test_capped_payload_is_marked_not_decoded() -> None:
    out = cols(b'{"a":', truncated=True)
    assert out["payload_decoded"] is None
    assert out["payload_decode_error"].startswith("payload cut by --payload-cap")


def test_inflate_bomb_is_bounded() -> None:
    bomb = gzip.compress(b"\0" * (MAX_INFLATE_BYTES + 1))
    assert len(bomb) < 64 * 1024
    out = cols(bomb)
    assert out["payload_decoder"] == "gzip"
    assert out["payload_decode_error"] == f"gzip: inflates beyond {MAX_INFLATE_BYTES} bytes " \
        "(limit)"
    zbomb = zstandard.ZstdCompressor().compress(b"\0" * (MAX_INFLATE_BYTES + 1))
    assert cols(zbomb)["payload_decode_error"].startswith("zstd: inflates beyond")


def test_nesting_bomb_is_cut_not_a_crash() -> None:
    deep = b"\x91" * 5000 + b"\x01"  # msgpack: 5000 nested one-element arrays
    out = cols(deep, engine=forced("msgpack"))
    assert out["payload_decode_error"] is not None or "<nested too deep>" in (
        out["payload_decoded"] or "")


def test_secret_member_inside_a_decoded_payload_is_redacted() -> None:
    for data in (json.dumps({"user": "bob", "password": "hunter2"}).encode(),
                 msgpack.packb({"user": "bob", "password": "hunter2"}),
                 cbor2.dumps({"user": "bob", "Password": "hunter2"})):
        text = cols(data)["payload_decoded"]
        assert "hunter2" not in text
        assert json.loads(text)["user"] == "bob"
        assert "<redacted len=7 sha256=f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94b" \
            "cf526a3f6c7>" in text


def test_to_json_text_keeps_member_order() -> None:
    assert to_json_text({"b": 1, "a": [b"\x01"]}) == '{"b":1,"a":["AQ=="]}'


# ------------------------------------------------------------------------------ fuzzing

VALID = {
    "json": json.dumps(DOC).encode(),
    "msgpack": msgpack.packb(DOC),
    "cbor": cbor2.dumps(DOC),
    "text": b"hello",
    "gzip": gzip.compress(b'{"a":1}'),
    "zstd": zstandard.ZstdCompressor().compress(b'{"a":1}'),
    "snappy": bytes(cramjam.snappy.compress(b'{"a":1}')),
    "protobuf": b"\x08\x96\x01\x12\x03abc",
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_cut_valid_payload_gives_an_error_column(name: str) -> None:
    """Each decoder, forced by a binding, on its own valid bytes cut short: an error."""
    data = VALID[name]
    whole = cols(data, engine=forced(name))
    assert whole["payload_decode_error"] is None, whole
    cut = cols(data[:-2] if name != "text" else b"\xff" + data, engine=forced(name))
    assert cut["payload_decoded"] is None
    assert cut["payload_decode_error"], cut


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(VALID) + ["avro"]), junk=st.binary(max_size=300),
       flip=st.integers(min_value=0, max_value=10_000))
def test_fuzzed_payloads_never_raise(name: str, junk: bytes, flip: int) -> None:
    """Random bytes and mutated valid encodings, decoded by structure and by each forced
    decoder: always four columns, a value or an error, never an exception."""
    data = bytearray(VALID.get(name, b"\x02\x06abc"))
    if data:
        data[flip % len(data)] ^= 0xFF
    for payload in (bytes(data), junk, bytes(data) + junk, junk + bytes(data)):
        for engine in (ENGINE, forced(name)):
            out = cols(payload, engine=engine)
            if out["payload_decoded"] is not None:
                json.loads(out["payload_decoded"])
                assert out["payload_decode_error"] is None
