"""The compiled fast path of the NATS dissector, and the Arrow batches it fills.

Why: on bulk traffic the reference session (``session.py``) costs ~25 µs per operation;
the pipeline's dict rows and their conversion to Arrow about as much again.  The C
module ``_speedups`` parses runs of *ordinary* operations straight out of the framer's
buffer into column buffers (~0.3 µs each, SHA-256 included) and the pipeline moves those
rows into one accumulator per capture that becomes Arrow batches without a Python
object per row.  The session hands them on as ``dissectors.api.ColumnBatch`` records
(``FORMAT`` below says how to gather them), the generic columnar record any protocol's
fast path may return: the pipeline knows nothing of this module.

What stays the definition of the output: the reference.  ``scan`` takes an operation
only when the reference would produce exactly one row for it and nothing else — no
anomaly, no payload dissector involved, all bytes present — and otherwise stops and
lets the reference handle that operation (``REFUSE``) before trying again after it.
While an operation is not complete in the buffer the fast path waits for more bytes
instead of letting the reference start on it (``NEED_MORE``); a gap or the end of the
stream first runs the reference over what is buffered (the session driver,
``dissectors.sessions.FramedSession``, drains before every gap and the end), so a cut
operation is reported exactly as the reference reports it.
``tests/perf/test_fastpath.py`` dissects every sample capture (and hostile and hand-built
streams) both ways and compares the tables.

Large payloads (issue 22's offload capture: tens of kB per packet, payloads up to 1 MiB)
cost their SHA-256 and little else, so the scanner hashes a payload only once while an
equal one is kept (a fan-out's PUB and its MSGs, a JetStream message and its fetch; see
``sha256_payload`` in ``_speedups.c``), and a session whose scanner waits for a payload's
bytes does not scan again until they are all in (``NatsSession.drain_fed``).  An
operation over ``MAX_FAST_TOTAL`` (1 MiB, nats-server's default ``max_payload``) goes to
the reference, which streams it through hashlib: per byte that is as fast (both are
bound by the hash; measured 0.8-1.1 GB/s of CPU either way, 64 kB segments), and one
row's overhead is nothing next to hashing a megabyte.

Payload dissectors (STAN, Liftbridge, plugins): an operation is offered to them when
its payload's first byte is one a probe may claim (``PayloadDissector.probe_first_bytes``;
a prober that declares none gets every payload) and a probe claims it, or when a
binding covers its subject.  A first byte only probes with an exact rule
(``PayloadDissector.probe_prefixes``, Liftbridge's magic) may claim is decided by the
scanner from the prefixes themselves, without a stop to ask the probe (29,010 stops per
run of bench_liftbridge's 20 MB capture).  Subject verdicts are cached per server scope and kept
true as bindings change (``ScopeDispatcher.verdicts``).  A PUB/MSG so offered stays
on the fast path (issue 22): its row goes to the columns like any other,
and the scan itself offers the ``CarriedMessage`` the reference would build to the
carrier scope (made by ``MAKE_CARRIED`` below; the table and op names are shared
constants, and the payload is copied out only once the message is to be offered); the
records returned are the ``children`` of the ``ColumnBatch`` ending with that message's
row (the conveyor ids them after the batch's last row, as it ids a reference row's
children), and the scan goes on.  The session passes its list of records to the scan,
which appends the ``ColumnBatch`` records itself: no stop, Python loop turn or
``__init__`` per carried message (on bench_stan's capture nearly every operation is
one; they cost ~300 of the ~3,060 bytecodes per STAN row).  Offers are made in order
and the next operation's verdict is read after the offer returns, so the order of
decodes, hence of bindings, is the reference's.  HPUB/HMSG (the offer
carries their parsed headers) and every operation the scanner refuses anyway go to the
reference, which offers them itself; so does everything when the hook is not the one
``carry`` set.  ``MSGCAP_NATS_CARRY=0`` sends every offered operation to the reference.

A feed that starts at a line boundary while the framer holds nothing (on STAN and
Liftbridge captures, nearly every TCP segment: one whole operation) is scanned straight
from the fed bytes, not copied into the framer's buffer first; only what the scan does
not take goes into the buffer (``NatsSession.feed_framer``, ``LineFramer.took``).

Set ``MSGCAP_NATS_FAST=0`` (or ``Options(fast=False)``) to run the reference alone.
The session switches the fast path on in ``NatsSession.columnar`` (the
``dissectors.api.ColumnarSession`` capability), which the pipeline calls when its sink
takes Arrow batches.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa

from dissectors import arrowops, libcrypto
from dissectors.api import CarriedMessage, ColumnBatch
from dissectors.nats.jetstream import ack_arrays
from dissectors.schema import timestamp_from_ns
from dissectors.tables import NS_SUFFIX
from reassembly.native import maker

try:
    from dissectors.nats import _speedups  # type: ignore[attr-defined]  # C, no stub
except ImportError:  # not built (no C compiler at install time): reference only
    _speedups = None

__all__ = ["AVAILABLE", "FORMAT", "FastRows", "batch_from_export", "enabled", "new_columns"]

AVAILABLE = _speedups is not None
if AVAILABLE:
    scan_with = _speedups.scan_with
    NEED_MORE: int = _speedups.NEED_MORE
    REFUSE: int = _speedups.REFUSE
    NEED_VERDICT: int = _speedups.NEED_VERDICT
    NEED_PROBE: int = _speedups.NEED_PROBE


def _hook_openssl() -> str:
    """Give the C code libcrypto's SHA-256 (SHA-NI where the CPU has it, ~5x the
    portable code); return which implementation is in use."""
    if _speedups is None:
        return "none"
    found = libcrypto.functions("SHA256_Init", "SHA256_Update", "SHA256_Final")
    if found is None:
        return "portable"
    name, fns = found
    _speedups.use_openssl(*fns)
    # never trust a foreign function blindly: it must agree with the portable code
    probe = libcrypto.SELF_TEST_INPUT
    if _speedups.sha256_hex(probe) != _speedups.sha256_hex(probe, True):
        _speedups.use_openssl(0, 0, 0)
        return "portable"
    return name


SHA256_IMPL = _hook_openssl()

# what the scan calls with a carried message's fields, in ``CarriedMessage``'s order (as
# the reference's ``on_message`` passes them): its slots filled in C
# (``reassembly.native.maker``), not the dataclass's Python ``__init__``
MAKE_CARRIED = maker(CarriedMessage)


def enabled(requested: bool = True) -> bool:
    """Whether sessions should use the fast path (built, asked for, not disabled)."""
    return requested and AVAILABLE and os.environ.get("MSGCAP_NATS_FAST", "1") != "0"


def carry_enabled() -> bool:
    """Whether the scanner takes PUB/MSG bound to a payload dissector (and offers them
    itself) instead of leaving them to the reference; ``MSGCAP_NATS_CARRY=0`` turns it off."""
    return os.environ.get("MSGCAP_NATS_CARRY", "1") != "0"


def new_columns() -> object:
    return _speedups.Columns()


# the records the session returns: ``ColumnBatch(table, direction, n, rows, FORMAT)``
FastRows = ColumnBatch


class _Accumulator(_speedups.Columns if AVAILABLE else object):  # type: ignore[misc]
    """A ``dissectors.api.ColumnAccumulator``: the extension's ``Columns`` with
    ``to_batch``.  A subclass, not a wrapper: ``len``, ``nbytes`` and ``move``, which the
    conveyor asks after every batch it moves, stay the C type's own (a wrapper's Python
    ``__len__`` and ``nbytes`` cost ~15 bytecodes a batch, one batch per STAN row)."""

    __slots__ = ()

    def to_batch(self, schema: pa.Schema, capture_id: str) -> pa.RecordBatch:
        return batch_from_export(schema, self.export(), capture_id)


class _Format:
    """The ``dissectors.api.ColumnFormat`` of the scanner's buffers."""

    def accumulator(self) -> _Accumulator:
        return _Accumulator()


FORMAT = _Format()


# the ``direction`` values' bytes by the scanner's direction code
_DIRECTIONS = np.frombuffer(b"c2ss2c", np.uint8).reshape(2, 3)


def _validity(buf: object) -> pa.Buffer | None:
    return None if buf is None else pa.py_buffer(buf)


def _column(t: pa.DataType, n: int, parts: tuple[Any, ...]) -> pa.Array:
    # ``parts``: a column's validity bitmap, null count and buffers as the extension
    # exports them (buffer objects and ints, by position)
    if pa.types.is_map(t):
        valid, nulls, h_off, k_off, k_data, l_off, i_off, i_data = parts
        nkeys = memoryview(k_off).nbytes // 4 - 1
        nitems = memoryview(i_off).nbytes // 4 - 1
        entries_t = t.key_field, t.item_field
        keys = pa.Array.from_buffers(t.key_type, nkeys,
                                     [None, pa.py_buffer(k_off), pa.py_buffer(k_data)])
        items_t = t.item_type.value_type
        items = pa.Array.from_buffers(items_t, nitems,
                                      [None, pa.py_buffer(i_off), pa.py_buffer(i_data)])
        values = pa.Array.from_buffers(t.item_type, nkeys, [None, pa.py_buffer(l_off)],
                                       children=[items])
        entries = pa.StructArray.from_arrays([keys, values], fields=list(entries_t))
        return pa.Array.from_buffers(t, n, [_validity(valid), pa.py_buffer(h_off)],
                                     null_count=nulls, children=[entries])
    return arrowops.from_parts(t, n, parts)


def batch_from_export(schema: pa.Schema, exported: tuple[int, dict[str, tuple[Any, ...]]],
                      capture_id: str) -> pa.RecordBatch:
    """The Arrow batch of an accumulator's ``export()``, in ``schema``'s column order.

    Columns the fast path never fills (INFO/CONNECT fields, ``error``) are null;
    ``incomplete`` is false (the fast path only takes complete operations)."""
    n, cols = exported
    arrays = []
    for f in schema:
        name = f.name
        if name == "direction":
            codes = np.frombuffer(cols[name][2], dtype=np.uint8)
            arrays.append(arrowops.fixed_width_strings(f.type, _DIRECTIONS[codes]))
        elif pa.types.is_timestamp(f.type) and name in cols:
            # the scanner fills int64 nanoseconds: the column and its exact ``_ns`` twin
            arrays.append(timestamp_from_ns(_column(pa.int64(), n, cols[name])))
        elif name.endswith(NS_SUFFIX) and name[: -len(NS_SUFFIX)] in cols:
            arrays.append(_column(pa.int64(), n, cols[name[: -len(NS_SUFFIX)]]))
        elif name in cols:
            arrays.append(_column(f.type, n, cols[name]))
        elif name == "capture_id":
            arrays.append(arrowops.repeated_bytes(f.type, capture_id.encode(), n))
        elif name == "incomplete":
            arrays.append(pa.Array.from_buffers(f.type, n, [None, pa.py_buffer(
                bytes((n + 7) // 8))]))
        else:
            arrays.append(arrowops.nulls(f.type, n))
    if "js_stream" in schema.names and "reply_to" in cols:  # JetStream deliveries
        acks = ack_arrays(arrays[schema.get_field_index("op")],
                          arrays[schema.get_field_index("reply_to")])
        if acks is not None:
            for name, arr in acks.items():
                arrays[schema.get_field_index(name)] = arr
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
