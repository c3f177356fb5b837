"""The columnar fast path of the Pulsar dissector: batch entries straight into columns.

Why (cProfile of ``msgcap dissect`` on the first 15 MB of bench_pulsar.py's codec-mix
capture, 51,000 messages in 100-message batches, 11.2 s): the conversion of dict rows
to Arrow took 3.3 s, the batch split 3.0 s (the tolerant protobuf reader once per
entry: 1.6 s), the pipeline's per-row envelope and record walk ~1.5 s, the frames
themselves (one per 100 messages: command, CRC-32C, metadata, decompression) ~0.3 s.
So the per-frame work stays in the reference and only the per-message work changes:
``_speedups.split_batch`` (C) walks a decompressed batch in one pass and returns, as
packed arrays and Arrow-layout buffers, each entry's sequence id, payload length, kept
payload bytes and SHA-256 (libcrypto's, handed over below; hashlib when absent); the
session keeps one ``Chunk`` per frame (the values every entry shares, once, plus the
per-entry buffers) and returns a ``dissectors.api.ColumnBatch`` standing for the
frame's message rows right after the frame's command row, so the pipeline numbers them
exactly where the reference's child records would be (their parent is the row just
before them).  ``MessageAccumulator.to_batch`` converts the shared values of all chunks
with the pipeline's own ``rows_to_batch`` (one dict per frame, not per message),
repeats them with one ``take`` (all-null columns are made, not gathered) and wraps the
per-entry buffers: no Python object per message.  Why C and not numpy: the entries are
variable-length protobuf, a sequential walk; numpy has nothing to vectorise until the
offsets are known, which is the walk itself.

Per frame, ``frame`` takes a clean frame apart in C (``_speedups.parse_frame``: the
reference's ``Frame``, or None and ``frame.parse_frame`` decides), ``decode`` hands the
command and metadata to ``_speedups.decode_clean`` (C), which gives the tolerant reader's
own ``Decoded`` for a clean, plain message and leaves anything else to the reader, and
``plain_json`` writes the command's ``command_json`` in C.  What is left per frame in
Python: the command row's columns, the metadata columns, the ``Chunk``, decompression and
CRC-32C (in C libraries), and outside this package the layers, the framer, the
conveyor's per-row work for command rows and Parquet (its own thread).  ``to_batch``
repeats the chunks' shared values in C too (``_speedups.repeat_values``).  A payload equal
to a recent one (``decompress``: a broker delivers the batch a producer sent with the
same bytes, so a capture at the broker holds it once per SEND and once per subscription)
reuses that one's decompression and split (bench_pulsar.py, 150 MB, 512,000 messages,
load ~14: 4.7 CPU s against 18.1 for the reference; 2,631 of its 5,262 payload frames
repeat an earlier one; docs/performance.md "Pulsar columns" has the profile).

What stays the definition of the output: the reference (``session.py``).  A batch goes
to the columns only when the reference would give plain rows for it: not chunked, not
encrypted, decompressed without a problem, and every entry's metadata made of
payload_size, sequence_id and what real clients add (properties and partition_key, UTF-8
strings, which come back as Arrow-layout buffers: the map column of properties is built
from offsets, keys and values, no Python object per entry); ``split_batch`` refuses the
rest and the reference splits that batch, anomalies and all.
``tests/pulsar/test_fastpath.py`` dissects hand-built and hypothesis-generated frame
streams both ways, tests/perf/test_pulsar_fastpath.py every Pulsar capture.

Set ``MSGCAP_PULSAR_FAST=0`` (or ``Options(fast=False)``) to run the reference alone.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dissectors import libcrypto
from dissectors.arrowops import from_numpy, nulls, repeated_bytes, take
from dissectors.checksum import crc32c
from dissectors.proto.wire import Decoded, Kind, MessageSchema
from dissectors.proto.wire import decode as wire_decode
from dissectors.pulsar import codec
from dissectors.pulsar.codes import CommandType
from dissectors.pulsar.frame import Frame, parse_frame
from dissectors.pulsar.table import PULSAR_MESSAGES
from dissectors.schema import TYPED_BINARY, rows_to_batch, timestamp_from_ns, typed_kind
from dissectors.tables import NS_SUFFIX, Field
from reassembly.events import DIRECTION_SHORT

_speedups: Any  # C, no stub (imported by name: the package's lazy __getattr__ is untyped)
try:
    _speedups = importlib.import_module("dissectors.pulsar._speedups")
except ImportError:  # not built (no C compiler at install time): reference only
    _speedups = None

__all__ = ["AVAILABLE", "FORMAT", "Chunk", "MessageAccumulator", "MessageRows", "decode",
           "decompress", "enabled", "frame", "split"]

AVAILABLE = _speedups is not None


def _hook_sha256() -> str:
    """Hand libcrypto's ``SHA256_Init/Update/Final`` to the extension (SHA-NI where the
    CPU has it; hashing in C saves hashlib's per-call objects); return which is in use."""
    if _speedups is None:
        return "none"
    found = libcrypto.functions("SHA256_Init", "SHA256_Update", "SHA256_Final")
    if found is None:
        return "hashlib"
    name, fns = found
    _speedups.use_sha256(*fns)
    # never trust a foreign function blindly: it must agree with hashlib
    probe = libcrypto.SELF_TEST_INPUT
    if _speedups.sha256_hex(probe) != hashlib.sha256(probe).hexdigest():
        _speedups.use_sha256(0, 0, 0)
        return "hashlib"
    return name


SHA256_IMPL = _hook_sha256()

# the per-entry columns a chunk fills (everything else is the frame's, shared)
_PER_ENTRY = ("record_id", "batch_index", "sequence_id", "payload_len", "payload_sha256",
              "payload", "payload_truncated")
_ROW_OVERHEAD = 120  # rough bytes per entry beyond its payload, for ``nbytes``
# Larger batches go to the reference: the pipeline turns an accumulator into a batch once
# it holds 256 MiB, so with this bound the kept payloads of one Arrow batch stay far
# below the 2 GiB that binary columns' int32 offsets can address.
_MAX_BATCH_BYTES = 256 << 20


def enabled(requested: bool = True) -> bool:
    """Whether sessions should use the fast path (built, asked for, not disabled)."""
    return requested and AVAILABLE and os.environ.get("MSGCAP_PULSAR_FAST", "1") != "0"


class Chunk(NamedTuple):
    """The message rows of one frame's batch: ``shared`` values (the reference's
    ``base`` plus what every entry gets alike), the frame's provenance, and the
    per-entry columns as the extension wrote them (native-endian bytes: made into arrays
    once per Arrow batch, ``MessageAccumulator.to_batch``, not once per frame)."""

    shared: dict[str, Any]
    provenance: tuple[int, int, int, int, int, int]  # offsets, ts (ns), frames
    n: int
    sequence_id: bytes  # int64 per entry
    payload_len: bytes  # int64 per entry
    payload_sha256: bytes  # 64 hex characters per entry
    payload: bytes  # the kept payloads back to back ...
    payload_offsets: bytes  # ... and where each starts (int32, n + 1, from 0)
    payload_truncated: bytes  # one bool byte per entry
    # each entry's properties: map offsets (n + 1, from 0) into the key and value strings
    # (data, offsets), or None when no entry has one
    properties: tuple[npt.NDArray[np.int32], bytes, npt.NDArray[np.int32], bytes,
                      npt.NDArray[np.int32]] | None
    # each entry's partition_key: (set, data, offsets), or None when no entry has one
    partition_key: tuple[npt.NDArray[np.bool_], bytes, npt.NDArray[np.int32]] | None
    nbytes: int


def split(data: bytes, n: int, seq: int | None, cap: int | None, shared: dict[str, Any],
          provenance: tuple[int, int, int, int, int, int]) -> Chunk | None:
    """The rows of a plain batch of ``n`` entries, or None when the reference must split
    it.  ``seq``: the metadata's sequence_id; ``cap``: payload bytes kept per row;
    ``shared`` and ``provenance``: the frame's, as ``Chunk`` keeps them.  A batch
    ``decompress`` gave out again (a MESSAGE of a batch that was SENT) reuses its first
    split: the same inputs, the same columns."""
    recent = _recent()
    entry = recent.by_data.get(id(data))
    if entry is not None and entry.data is data:
        key = (n, seq, cap)
        got = entry.splits.get(key)
        if got is None:
            got = entry.splits[key] = _split(data, n, seq, cap)
            recent.grew(entry, 0 if got is None else got.nbytes)
        else:
            recent.reused += 1
        return None if got is None else Chunk._make((shared, provenance) + got[2:])
    return _split(data, n, seq, cap, shared, provenance)


_NO_SHARED: dict[str, Any] = {}
_NO_PROVENANCE = (0, 0, 0, 0, 0, 0)


def _split(data: bytes, n: int, seq: int | None, cap: int | None,
           shared: dict[str, Any] = _NO_SHARED,
           provenance: tuple[int, int, int, int, int, int] = _NO_PROVENANCE) -> Chunk | None:
    if len(data) > _MAX_BATCH_BYTES:
        return None
    keep_all = cap is None or cap >= len(data)  # (any cap above the data keeps it all)
    got = _speedups.split_batch(data, n, seq is not None, 0 if seq is None else seq,
                                -1 if keep_all else cap)
    if got is None:
        return None
    digests: bytes | None = got[6]
    if digests is None:  # no libcrypto handed over: hashlib, one call per entry
        starts = np.frombuffer(got[0], dtype=np.int64)
        sizes = np.frombuffer(got[1], dtype=np.int64)
        mv = memoryview(data)
        sha = hashlib.sha256
        digests = "".join([
            sha(mv[a:b]).hexdigest()
            for a, b in zip(starts.tolist(), (starts + sizes).tolist(), strict=True)
        ]).encode("ascii")
    kept: bytes = got[3]
    nbytes = len(kept) + _ROW_OVERHEAD * n
    props = got[7]
    if props is not None:
        props = (np.frombuffer(props[0], dtype=np.int32), props[1],
                 np.frombuffer(props[2], dtype=np.int32), props[3],
                 np.frombuffer(props[4], dtype=np.int32))
        nbytes += len(props[1]) + len(props[3]) + 8 * len(props[2])
    keys = got[8]
    if keys is not None:
        keys = (np.frombuffer(keys[0], dtype=np.bool_), keys[1],
                np.frombuffer(keys[2], dtype=np.int32))
        nbytes += len(keys[1]) + 4 * n
    return Chunk(shared, provenance, n, got[2], got[1], digests, kept, got[4], got[5],
                 props, keys, nbytes)


# Recent payloads kept for ``decompress`` and ``split``: a broker delivers the batch a
# producer sent with the same bytes (metadata and payload), so a capture that sees both
# sides (at the broker) holds each batch once per SEND and once per subscription.  A few
# recent ones are enough (in bench_pulsar.py's capture each MESSAGE follows its SEND
# within two payload frames); bounded in entries and bytes, outside the run's memory
# budget like the NATS scan's kept digests (a cache loses nothing when it forgets, and
# holding it there would change which holder the budget asks first).
_RECENT_ENTRIES = 32
_RECENT_BYTES = 8 << 20
_RECENT_MAX_PAYLOAD = 1 << 20  # larger payloads are not kept


_Key = tuple[int, int | None, int, int, bytes, bytes, bytes]


class _Entry:
    __slots__ = ("key", "raw", "result", "data", "splits", "nbytes")

    def __init__(self, key: _Key, raw: bytes,
                 result: codec.Result) -> None:
        self.key = key
        self.raw = raw
        self.result = result
        self.data = result.data
        self.splits: dict[tuple[int, int | None, int | None], Chunk | None] = {}
        self.nbytes = len(raw) + (len(result.data) if result.data is not None
                                  and result.data is not raw else 0)


class _Recent:
    """One thread's recently decompressed payloads and their splits, least recent first."""

    __slots__ = ("entries", "by_data", "nbytes", "reused", "inflated")

    def __init__(self) -> None:
        self.entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self.by_data: dict[int, _Entry] = {}  # id of an entry's data (it holds the data)
        self.nbytes = 0
        self.reused = 0  # splits and decompressions not done again
        self.inflated = 0

    def add(self, entry: _Entry) -> None:
        self.entries[entry.key] = entry
        if entry.data is not None:
            self.by_data[id(entry.data)] = entry
        self.nbytes += entry.nbytes
        self._trim()

    def grew(self, entry: _Entry, nbytes: int) -> None:
        """``entry`` keeps a split of ``nbytes`` more (counted while it is kept)."""
        if self.entries.get(entry.key) is entry:
            entry.nbytes += nbytes
            self.nbytes += nbytes
            self._trim()

    def _trim(self) -> None:
        entries = self.entries
        while entries and (len(entries) > _RECENT_ENTRIES or self.nbytes > _RECENT_BYTES):
            self.drop(next(iter(entries.values())))

    def drop(self, entry: _Entry) -> None:
        del self.entries[entry.key]
        if self.by_data.get(id(entry.data)) is entry:
            del self.by_data[id(entry.data)]
        self.nbytes -= entry.nbytes  # (its payloads and its splits)


_LOCAL = threading.local()


def _recent() -> _Recent:
    recent: _Recent | None = getattr(_LOCAL, "recent", None)
    if recent is None:
        recent = _LOCAL.recent = _Recent()
    return recent


def reuse_stats() -> tuple[int, int]:
    """(decompressions and splits reused, payloads decompressed) in this thread."""
    recent = _recent()
    return recent.reused, recent.inflated


def decompress(compression: int, raw: bytes, declared: int | None, cap: int) -> codec.Result:
    """``codec.decompress``, the same ``Result``; a payload equal to a recent one (same
    codec, declared size, cap and bytes) gets that one's result (the same objects, so
    ``split`` finds its columns too)."""
    if len(raw) > _RECENT_MAX_PAYLOAD:
        return codec.decompress(compression, raw, declared, cap)
    recent = _recent()
    # (a few of its bytes pick the entry, the whole payload is compared: a checksum of
    # every payload read each one once more for nothing)
    mid = len(raw) >> 1
    key = (compression, declared, cap, len(raw), raw[:16], raw[mid:mid + 16], raw[-16:])
    entry = recent.entries.get(key)
    if entry is not None and entry.raw == raw:
        recent.entries.move_to_end(key)
        recent.reused += 1
        return entry.result
    recent.inflated += 1
    result = codec.decompress(compression, raw, declared, cap)
    if result.data is not None and len(result.data) <= _RECENT_MAX_PAYLOAD:
        if entry is not None:  # (another payload with the same key: the newer wins)
            recent.drop(entry)
        recent.add(_Entry(key, raw, result))
    return result


def _table(schema: MessageSchema, seen: dict[str, list[Any]]) -> list[Any]:
    """``decode_clean``'s table of ``schema``: (name, kind, repeated, sub-table,
    sub-schema) by field number (None: unknown; map fields get None too, so the reader
    takes them).  A list, filled after it is registered in ``seen``: a message may
    contain itself."""
    table = seen.get(schema.full_name)
    if table is not None:
        return table
    table = seen[schema.full_name] = [None] * (max(schema.fields, default=0) + 1)
    for number, spec in schema.fields.items():
        if spec.kind is not Kind.MAP:
            sub = _table(spec.message, seen) if spec.message is not None else None
            table[number] = (spec.name, int(spec.kind), spec.repeated, sub, spec.message)
    return table


_TABLES: dict[str, list[Any]] = {}


def decode(buf: bytes, schema: MessageSchema) -> Decoded:
    """``dissectors.proto.wire.decode(buf, schema)``, the same ``Decoded``: a clean,
    plain message (every field known, strings UTF-8, nothing packed; most commands and
    metadata) decoded in C, anything else by the reader itself."""
    table = _TABLES.get(schema.full_name)
    if table is None:
        table = _TABLES[schema.full_name] = _table(schema, {})
    got: Decoded | None = _speedups.decode_clean(buf, table, schema, Decoded)
    return wire_decode(buf, schema) if got is None else got


_FRAME_ARGS: tuple[Any, ...] | None = None


def frame(data: bytes) -> Frame:
    """``frame.parse_frame(data, decode)``, the same ``Frame``: a clean frame (nothing to
    report, every message clean) taken apart in C (``_speedups.parse_frame``), anything
    else by the reference."""
    global _FRAME_ARGS
    args = _FRAME_ARGS
    if args is None:
        from dissectors.pulsar import frame as fr  # (its schemas, read once)

        pairs = []
        for schema in (fr._BASE, fr._BEM, fr._METADATA):
            table = _TABLES.get(schema.full_name)
            if table is None:
                table = _TABLES[schema.full_name] = _table(schema, {})
            pairs.append((table, schema))
        args = _FRAME_ARGS = (*pairs, Decoded, fr.Frame,
                              frozenset(int(t) for t in fr.PAYLOAD_COMMANDS),
                              int(CommandType.SEND), crc32c)
    got: Frame | None = _speedups.parse_frame(data, *args)
    return parse_frame(data, decode) if got is None else got


# message full name -> {field name: enum map, or None for a field shown another way}
_JSON_SPECS: dict[str, dict[str, dict[int, str] | None]] = {}


def _json_specs(schema: MessageSchema, shown: frozenset[str]) -> None:
    """Fill ``_JSON_SPECS`` for ``schema`` and the messages it contains: the fields whose
    values ``session._plain`` does not keep as they are (enums it names; ``shown``)."""
    if schema.full_name in _JSON_SPECS:
        return
    special = _JSON_SPECS[schema.full_name] = {}
    for spec in schema.fields.values():
        if spec.name in shown:
            special[spec.name] = None
        elif spec.kind is Kind.ENUM and spec.enum is not None:
            special[spec.name] = spec.enum
    for spec in schema.fields.values():
        if spec.message is not None and spec.kind is not Kind.MAP:
            _json_specs(spec.message, shown)


def plain_json(d: Decoded, shown: frozenset[str]) -> str | None:
    """``session._COMPACT_JSON(session._plain(d))`` for a command ``decode`` made, in C;
    None when the reference must make it (``shown``: the fields it shows another way,
    auth data, which the reference replaces by their length and digest)."""
    if d.schema.full_name not in _JSON_SPECS:
        _json_specs(d.schema, shown)
    got: str | None = _speedups.plain_json(d, _JSON_SPECS, Decoded)
    return got




class MessageRows:
    """One session's message rows waiting for the pipeline, oldest frame first (the
    pipeline takes them in the order of the session's ``ColumnBatch``es)."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: deque[Chunk] = deque()

    def __len__(self) -> int:
        return sum(c.n for c in self.chunks)


class MessageAccumulator:
    """A ``dissectors.api.ColumnAccumulator`` of ``pulsar_messages`` rows."""

    __slots__ = ("_chunks", "_nbytes", "_rows")

    def __init__(self) -> None:
        self._chunks: list[tuple[Chunk, tuple[Any, ...], int]] = []
        self._rows = 0
        self._nbytes = 0

    def __len__(self) -> int:
        return self._rows

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def move(self, rows: MessageRows, n: int, flow_id: int, record_id: int, direction: int,
             stream_id: int | None, src_ip: str, src_port: int, dst_ip: str,
             dst_port: int) -> None:
        """Take the oldest chunk (one ``ColumnBatch`` is one frame's chunk), its rows
        numbered from ``record_id``, children of the command row just before them."""
        chunk = rows.chunks.popleft()
        if chunk.n != n:  # pragma: no cover - the session makes one batch per chunk
            raise ValueError(f"pulsar fast path: batch of {n} rows for a chunk of {chunk.n}")
        start, end, ts_first, ts_last, frame_first, frame_last = chunk.provenance
        # (the values of _ENVELOPE, in its order)
        envelope = (flow_id, record_id - 1, DIRECTION_SHORT[direction], stream_id, src_ip,
                    src_port, dst_ip, dst_port, ts_first, ts_last, start, end, frame_first,
                    frame_last)
        self._chunks.append((chunk, envelope, record_id))
        self._rows += n
        self._nbytes += chunk.nbytes

    def to_batch(self, schema: pa.Schema, capture_id: str) -> pa.RecordBatch:
        chunks, self._chunks, self._rows, self._nbytes = self._chunks, [], 0, 0
        cs = [c for c, _, _ in chunks]
        envelopes = [env for _, env, _ in chunks]
        counts = np.fromiter((c.n for c in cs), dtype=np.int64, count=len(cs))
        first = np.fromiter((r for _, _, r in chunks), dtype=np.int64, count=len(chunks))
        ends = np.cumsum(counts)
        total = int(ends[-1]) if len(ends) else 0
        offsets = np.arange(total) - np.repeat(ends - counts, counts)
        per_entry: dict[str, Any] = {
            "record_id": np.repeat(first, counts) + offsets,
            "batch_index": offsets.astype(np.int32),
            "sequence_id": np.frombuffer(b"".join([c.sequence_id for c in cs]), np.int64),
            "payload_len": np.frombuffer(b"".join([c.payload_len for c in cs]), np.int64),
            "payload_truncated": np.frombuffer(b"".join([c.payload_truncated for c in cs]),
                                               np.bool_),
        }
        # the variable-width columns straight from the chunks' Arrow-layout buffers
        payload_offsets = np.frombuffer(b"".join([c.payload_offsets for c in cs]), np.int32)
        built = {
            "payload": _variable(pa.binary(), b"".join([c.payload for c in cs]),
                                 _joined(payload_offsets, counts + 1)),
            "payload_sha256": pa.Array.from_buffers(pa.string(), total, [
                None, pa.py_buffer(np.arange(0, 64 * (total + 1), 64, dtype=np.int32)),
                pa.py_buffer(b"".join([c.payload_sha256 for c in cs]))]),
            "properties": _properties(cs, total),
            "partition_key": _partition_keys(cs, total),
        }
        for name, values in per_entry.items():
            built[name] = from_numpy(values, schema.field(name).type)
        shared = _shared_columns(cs, envelopes, counts, total, capture_id)
        if shared is None:  # a value the columns refused: converted as the reference's rows
            shared = _shared_by_rows(cs, envelopes, counts, total, capture_id)
        return pa.RecordBatch.from_arrays(
            [built[f.name] if f.name in built else shared[f.name] for f in schema],
            schema=schema)


# the envelope values ``MessageAccumulator.move`` keeps per chunk, in this order
_ENVELOPE = ("flow_id", "parent_record_id", "direction", "stream_id", "src_ip", "src_port",
             "dst_ip", "dst_port", "ts_first", "ts_last", "offset_start", "offset_end",
             "frame_first", "frame_last")
# the columns a chunk's values (or the capture id) fill, not its entries
_SHARED = tuple(f for f in PULSAR_MESSAGES.columns if f.name not in _PER_ENTRY
                and f.name not in ("properties", "partition_key", "capture_id")
                and f.exact_of is None)

# ``_speedups.repeat_values``' kind of a shared column's Arrow type (``typed_kind``: a
# timestamp's values are its nanoseconds); lists have none (converted and gathered)
_KINDS = tuple(k if (k := typed_kind(f.type)) <= TYPED_BINARY else None for f in _SHARED)


def _shared_columns(chunks: list[Chunk], envelopes: list[tuple[Any, ...]],
                    counts: npt.NDArray[np.int64], total: int, capture_id: str
                    ) -> dict[str, pa.Array] | None:
    """The columns every row of a chunk shares, each value repeated for the chunk's rows
    (``counts``), one column at a time: the values each chunk has are converted as
    ``rows_to_batch`` converts them (``pa.array`` of the column's type; a timestamp from
    its nanoseconds, with its exact ``_ns`` companion), a column no chunk sets is the
    kept nulls.  Why not ``rows_to_batch`` over one dict per chunk, then a repeat of
    every column: most of the 75 columns are null throughout, and the dicts were built
    only to be taken apart again (the two were ~half of ``to_batch``).  None when a value
    does not convert (``_shared_by_rows`` then fails, or not, as the reference does)."""
    from dissectors.pulsar.runs import repeat_runs  # (imported with the first batch)

    dicts = [c.shared for c in chunks]
    by_envelope = dict(zip(_ENVELOPE, zip(*envelopes, strict=True), strict=True)) \
        if envelopes else {}
    keys = set().union(*dicts)
    out = {"capture_id": repeated_bytes(pa.string(), capture_id.encode(), total)}
    index: pa.Array | None = None
    repeat = getattr(_speedups, "repeat_values", None)
    try:
        for f, kind in zip(_SHARED, _KINDS, strict=True):
            name = f.name
            values: Sequence[Any] | None = by_envelope.get(name)
            if values is None and name not in keys:
                out[name] = nulls(f.type, total)
                if pa.types.is_timestamp(f.type):
                    out[name + NS_SUFFIX] = nulls(pa.int64(), total)
                continue
            if kind is not None and repeat is not None:
                # in C, straight from the chunks' values (None: one it does not take)
                got = repeat(dicts, name, counts, kind) if values is None \
                    else repeat(values, None, counts, kind)
                if got is not None:
                    _repeated_column(out, f, got)
                    continue
            if values is None:
                values = [d.get(name) for d in dicts]
            if pa.types.is_timestamp(f.type):
                ns = repeat_runs(pa.array(values, pa.int64()), counts)
                assert ns is not None  # (integers always repeat)
                out[name + NS_SUFFIX] = ns
                out[name] = timestamp_from_ns(ns)
                continue
            column = pa.array(values, f.type)
            got = repeat_runs(column, counts)
            if got is None:  # lists: gathered
                if index is None:
                    index = from_numpy(np.repeat(np.arange(len(chunks)), counts))
                got = take(column, index)
            out[name] = got
    except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeEncodeError):
        return None
    return out


def _repeated_column(out: dict[str, pa.Array], f: Field,
                     got: tuple[int, int, bytes | None, bytes, bytes | None]) -> None:
    """``out[f.name]`` (and a timestamp's ``_ns``) from ``_speedups.repeat_values``'
    buffers: the values ``repeat_runs(pa.array(values, type), counts)`` gives."""
    n, null_count, bitmap, data, offsets = got
    typ = pa.int64() if pa.types.is_timestamp(f.type) else f.type
    if null_count == n:
        column = nulls(typ, n)
    else:
        buffers = [None if bitmap is None else pa.py_buffer(bitmap)]
        if offsets is not None:
            buffers.append(pa.py_buffer(offsets))
        buffers.append(pa.py_buffer(data))
        column = pa.Array.from_buffers(typ, n, buffers, null_count=null_count)
    if typ is f.type:
        out[f.name] = column
    else:
        out[f.name + NS_SUFFIX] = column
        out[f.name] = timestamp_from_ns(column)


def _shared_by_rows(chunks: list[Chunk], envelopes: list[tuple[Any, ...]],
                    counts: npt.NDArray[np.int64], total: int, capture_id: str
                    ) -> dict[str, pa.Array]:
    """``_shared_columns`` by the reference's own conversion: one dict row per chunk
    through ``rows_to_batch`` (which raises ``SchemaError`` where the rows would), then
    each column repeated (the way before ``_shared_columns``; also its test's oracle)."""
    rows = [{**c.shared, **dict(zip(_ENVELOPE, env, strict=True)),
             "capture_id": capture_id, "record_id": 0}
            for c, env in zip(chunks, envelopes, strict=True)]
    base = rows_to_batch(PULSAR_MESSAGES, rows)
    index = from_numpy(np.repeat(np.arange(len(chunks)), counts))
    return {name: _repeated(base.column(name), counts, index, total)
            for name in base.schema.names}


def _joined(flat: npt.NDArray[np.int32], sizes: npt.NDArray[np.int64]
            ) -> npt.NDArray[np.int32]:
    """Arrow offsets of pieces laid end to end: ``flat`` holds each piece's offsets (each
    from 0), ``sizes`` how many each has (its values + 1)."""
    lengths = np.delete(np.diff(flat.astype(np.int64)), np.cumsum(sizes)[:-1] - 1)
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out.astype(np.int32)


def _pieces(pieces: list[tuple[bytes, npt.NDArray[np.int32]]]
            ) -> tuple[bytes, npt.NDArray[np.int32]]:
    """Arrow-layout pieces (data, offsets from 0) laid end to end."""
    return b"".join([d for d, _ in pieces]), _joined(
        np.concatenate([o for _, o in pieces]),
        np.fromiter((len(o) for _, o in pieces), np.int64, len(pieces)))


def _variable(typ: pa.DataType, data: bytes, offsets: npt.NDArray[np.int32],
              valid: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    """One binary or string column from its data and offsets; ``valid``: which values
    are set (None: all)."""
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, len(offsets) - 1, [
        bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


_NO_STRINGS = (b"", np.zeros(1, np.int32))


def _properties(chunks: list[Chunk], total: int) -> pa.Array:
    """The map column of the entries' properties (an empty map where an entry has none,
    as the reference's ``[]``)."""
    if all(c.properties is None for c in chunks):
        # (from buffers: ``pa.array`` over a list or numpy imports ``numpy.ma``, ~10 ms)
        empty = _variable(pa.string(), *_NO_STRINGS)
        return pa.MapArray.from_arrays(from_numpy(np.zeros(total + 1, np.int32)), empty, empty)
    lists, keys, values = [], [], []
    for c in chunks:
        p = c.properties
        if p is None:
            lists.append(np.zeros(c.n + 1, np.int32))
            keys.append(_NO_STRINGS)
            values.append(_NO_STRINGS)
        else:
            lists.append(p[0])
            keys.append((p[1], p[2]))
            values.append((p[3], p[4]))
    maps = _joined(np.concatenate(lists), np.fromiter((c.n + 1 for c in chunks), np.int64,
                                                      len(chunks)))
    return pa.MapArray.from_arrays(from_numpy(maps), _variable(pa.string(), *_pieces(keys)),
                                   _variable(pa.string(), *_pieces(values)))


def _partition_keys(chunks: list[Chunk], total: int) -> pa.Array:
    """The entries' partition_key column (null where an entry has none)."""
    if all(c.partition_key is None for c in chunks):
        return pa.nulls(total, pa.string())
    valid, pieces = [], []
    for c in chunks:
        k = c.partition_key
        if k is None:
            valid.append(np.zeros(c.n, np.bool_))
            pieces.append((b"", np.zeros(c.n + 1, np.int32)))
        else:
            valid.append(k[0])
            pieces.append((k[1], k[2]))
    return _variable(pa.string(), *_pieces(pieces), np.concatenate(valid))


def _repeated(column: pa.Array, counts: npt.NDArray[np.int64], index: pa.Array, n: int
              ) -> pa.Array:
    """A shared column, one value per chunk, repeated for each chunk's rows (``counts``;
    ``index``: the same as positions): most columns are null in every row, the rest
    repeat in runs (``runs.repeat_runs``); lists are gathered."""
    from dissectors.pulsar.runs import repeat_runs  # (imported with the first batch)

    if column.null_count == len(column):
        return nulls(column.type, n)
    got = repeat_runs(column, counts)
    return take(column, index) if got is None else got


class _Format:
    """The ``dissectors.api.ColumnFormat`` of ``MessageRows``."""

    def accumulator(self) -> MessageAccumulator:
        return MessageAccumulator()


FORMAT = _Format()

