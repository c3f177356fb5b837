"""The payload decoders msgcap ships (registered as entry points like any plugin).

Strategy: each sniff looks at a few bytes only (it runs on every message when decoding is
on); the libraries do the decoding (``json``, ``msgpack``, ``cbor2``, ``zstandard``,
``cramjam``), each asked to consume the payload exactly: trailing bytes after a value are
an error, not a silently ignored tail.
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import cbor2
import cramjam
import msgpack
import zstandard

from dissectors.payload import MAX_INFLATE_BYTES, DecodeError, PayloadDecoder, Strength

__all__ = [
    "CborDecoder",
    "GzipDecoder",
    "JsonDecoder",
    "MsgpackDecoder",
    "SnappyDecoder",
    "TextDecoder",
    "ZstdDecoder",
]

_WS = b" \t\r\n"
# cap on what the unpackers may allocate for one payload (a 5-byte array header may
# declare 2**32 entries)
_MAX_ITEMS = 1 << 20


class JsonDecoder(PayloadDecoder):
    """RFC 8259 text.  Structure: an object or array (first and last non-blank bytes);
    bare scalars are left to ``text`` (``42`` is as likely an ASCII counter)."""

    name = "json"

    def sniff(self, data: bytes) -> Strength:
        body = data.strip(_WS)
        if body[:1] == b"{" and body[-1:] == b"}" or body[:1] == b"[" and body[-1:] == b"]":
            return Strength.STRONG
        return Strength.NO

    def decode(self, data: bytes, schema: Any = None) -> Any:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise DecodeError(f"not UTF-8 at byte {e.start}") from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise DecodeError(f"{e.msg} at byte {e.pos}") from None
        if schema is not None:
            from dissectors.payload.schemas import check_json_schema

            check_json_schema(value, schema)
        return value


class MsgpackDecoder(PayloadDecoder):
    """MessagePack.  Structure: a map or array header (fixmap/fixarray, map16/32,
    array16/32) -- weak: many binary payloads start with such a byte."""

    name = "msgpack"

    def sniff(self, data: bytes) -> Strength:
        b = data[0]
        return Strength.WEAK if 0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF else Strength.NO

    def decode(self, data: bytes, schema: Any = None) -> Any:
        up = msgpack.Unpacker(
            raw=False, strict_map_key=False, max_buffer_size=len(data) or 1,
            max_array_len=_MAX_ITEMS, max_map_len=_MAX_ITEMS,
            max_str_len=len(data), max_bin_len=len(data), max_ext_len=len(data))
        up.feed(data)
        try:
            value = up.unpack()
        except msgpack.OutOfData:
            raise DecodeError("cut short") from None
        except (ValueError, msgpack.UnpackException, TypeError) as e:
            raise DecodeError(str(e) or type(e).__name__) from None
        if up.tell() != len(data):
            raise DecodeError(f"{len(data) - up.tell()} trailing bytes after the value")
        return value


class CborDecoder(PayloadDecoder):
    """CBOR (RFC 8949).  Structure: the self-describe tag 55799 (strong), else a map or
    array head (weak)."""

    name = "cbor"

    def sniff(self, data: bytes) -> Strength:
        if data[:3] == b"\xd9\xd9\xf7":
            return Strength.STRONG
        return Strength.WEAK if 0xA0 <= data[0] <= 0xBB or 0x80 <= data[0] <= 0x9B \
            else Strength.NO

    def decode(self, data: bytes, schema: Any = None) -> Any:
        fp = io.BytesIO(data)
        try:
            value = cbor2.CBORDecoder(fp).decode()
        except (cbor2.CBORDecodeError, ValueError, OverflowError, MemoryError,
                LookupError, TypeError) as e:
            raise DecodeError(str(e) or type(e).__name__) from None
        if fp.tell() != len(data):
            raise DecodeError(f"{len(data) - fp.tell()} trailing bytes after the value")
        return value


class TextDecoder(PayloadDecoder):
    """UTF-8 text without control characters other than tab/CR/LF: kept as a JSON
    string, so a text payload is queryable like the others."""

    name = "text"

    def sniff(self, data: bytes) -> Strength:
        return Strength.WEAK

    def decode(self, data: bytes, schema: Any = None) -> Any:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"not UTF-8 at byte {e.start}") from None
        if any(c < " " and c not in "\t\r\n" or c == "\x7f" for c in text):
            raise DecodeError("control characters: not text")
        return text


def _bounded(chunks: Iterable[bytes]) -> bytes:
    out = bytearray()
    for chunk in chunks:
        out += chunk
        if len(out) > MAX_INFLATE_BYTES:
            raise DecodeError(f"inflates beyond {MAX_INFLATE_BYTES} bytes (limit)")
    return bytes(out)


class GzipDecoder(PayloadDecoder):
    """gzip (RFC 1952) wrapper, all members, inflated up to ``MAX_INFLATE_BYTES``."""

    name = "gzip"
    wrapper = True

    def sniff(self, data: bytes) -> Strength:
        return Strength.STRONG if data[:3] == b"\x1f\x8b\x08" else Strength.NO

    def decode(self, data: bytes, schema: Any = None) -> bytes:
        def chunks() -> Iterator[bytes]:
            rest = data
            while rest:
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                yield d.decompress(rest, MAX_INFLATE_BYTES + 1)
                if not d.eof:
                    if d.unconsumed_tail:
                        raise DecodeError(f"inflates beyond {MAX_INFLATE_BYTES} bytes (limit)")
                    raise DecodeError("gzip stream cut short")
                rest = d.unused_data.lstrip(b"\0")

        try:
            return _bounded(chunks())
        except zlib.error as e:
            raise DecodeError(str(e)) from None


class ZstdDecoder(PayloadDecoder):
    """Zstandard frame wrapper (RFC 8878 magic ``28 b5 2f fd``)."""

    name = "zstd"
    wrapper = True

    def sniff(self, data: bytes) -> Strength:
        return Strength.STRONG if data[:4] == b"\x28\xb5\x2f\xfd" else Strength.NO

    def decode(self, data: bytes, schema: Any = None) -> bytes:
        # fed in small steps so one step cannot inflate far past the limit (a zstd block
        # is at most 128 KiB, an RLE block costs 4 bytes); every frame must end
        def chunks() -> Iterator[bytes]:
            rest = data
            while rest:
                d = zstandard.ZstdDecompressor().decompressobj()
                for i in range(0, len(rest), 64):
                    yield d.decompress(rest[i:i + 64])
                    if d.eof:
                        break
                if not d.eof:
                    raise DecodeError("zstd frame cut short")
                rest = d.unused_data

        try:
            return _bounded(chunks())
        except zstandard.ZstdError as e:
            raise DecodeError(str(e)) from None


class SnappyDecoder(PayloadDecoder):
    """Snappy framing format wrapper (stream identifier chunk ``ff 06 00 00 sNaPpY``);
    raw snappy blocks carry no magic and are not detected."""

    name = "snappy"
    wrapper = True

    def sniff(self, data: bytes) -> Strength:
        return Strength.STRONG if data[:10] == b"\xff\x06\x00\x00sNaPpY" else Strength.NO

    def decode(self, data: bytes, schema: Any = None) -> bytes:
        # the framing format bounds each data chunk at 64 KiB uncompressed and cramjam
        # takes no output limit: count the chunks from their 4-byte headers first
        chunks, pos = 0, 0
        while pos + 4 <= len(data):
            kind, size = data[pos], int.from_bytes(data[pos + 1:pos + 4], "little")
            chunks += kind in (0x00, 0x01)
            pos += 4 + size
        if chunks * 65536 > MAX_INFLATE_BYTES:
            raise DecodeError(f"may inflate beyond {MAX_INFLATE_BYTES} bytes (limit)")
        try:
            out = bytes(cramjam.snappy.decompress(data))
        except Exception as e:  # noqa: BLE001 - cramjam raises its own DecompressionError
            raise DecodeError(str(e) or type(e).__name__) from None
        if len(out) > MAX_INFLATE_BYTES:
            raise DecodeError(f"inflates beyond {MAX_INFLATE_BYTES} bytes (limit)")
        return out
