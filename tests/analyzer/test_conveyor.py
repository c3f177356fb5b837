"""The pipeline is a conveyor that names no protocol (issue 21).

* ``analyzer/pipeline.py`` mentions none of the built-in dissectors, layers or their
  tables, in an identifier, a string or a comment;
* a protocol with a columnar fast path of its own (a toy one, defined here the way a
  plugin would: its session returns ``ColumnBatch`` records of its own ``ColumnFormat``)
  goes through the unchanged conveyor to Parquet, with ids and envelope as for ``Record``
  rows, interleaved in order with them, and its reference path gives the same table;
* every sink the product hands the conveyor is a ``Sink``.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import Options, dissect_capture
from analyzer.sink import DatasetWriter, RowSink, Sink
from dissectors.api import (
    ColumnarSession,
    ColumnBatch,
    Direction,
    Dissector,
    Field,
    Record,
    Session,
    Span,
    TableSpec,
    Transport,
    Verdict,
)
from dissectors.layers import builtin_layers
from dissectors.registry import Registry, discover
from dissectors.schema import rows_to_batch
from dissectors.sdk.testing import Data, PcapFlow, write_pcap

C2S, S2C = Direction.C2S, Direction.S2C
PIPELINE = Path(__file__).resolve().parents[2] / "analyzer" / "pipeline.py"
BUILT_IN = {"nats", "stan", "liftbridge", "pulsar", "felix", "quic", "tls", "websocket",
            "jetstream"}


# f-strings are STRING tokens up to Python 3.11, pieces of them from 3.12
_WORDY = {tokenize.NAME, tokenize.STRING, tokenize.COMMENT,
          getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def _words(source: str) -> set[str]:
    """Lower-case words of every identifier, string and comment: ``QuicPacket`` gives
    quic and packet, ``nats_cluster`` gives nats, cluster and nats_cluster, ``"tls-x"``
    gives tls and x."""
    out: set[str] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _WORDY:
            continue
        for ident in re.findall(r"[A-Za-z0-9_]+", tok.string):
            out.add(ident.lower())
            for part in ident.split("_"):
                out.update(w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+",
                                                         part))
    return out


def test_the_word_finder_sees_protocol_names_where_they_hide():
    src = ('from dissectors.nats import fastpath\nx = QuicPacket\n'
           'y = "tls-encrypted"  # WebSocket\nz = f"{a} of QUIC stream"\nisinstance(a, b)\n')
    words = _words(src)
    assert {"nats", "quic", "tls", "websocket"} <= words
    assert "stan" not in words  # isinstance is one word


def test_pipeline_names_no_builtin_protocol():
    words = _words(PIPELINE.read_text())
    reg = discover()
    names = {n.lower() for n in (*reg.dissectors, *reg.payload)}
    layer_tables = {t.name for layer in builtin_layers() for t in layer.tables}
    # the list above still names the built-ins (jetstream_api is "jetstream")
    assert BUILT_IN - {"jetstream"} <= names | {"quic", "tls", "websocket"}
    assert not words & BUILT_IN
    assert not words & names
    assert not words & layer_tables


# ------------------------------------------------------------- a toy columnar protocol

TOY_TABLE = TableSpec("toy_words", 1, "One row per word of the toy protocol (tests).", (
    Field("word", pa.string(), "The word."),
    Field("word_len", pa.int64(), "Its length."),
))


class _ToyColumns:
    """A session's column buffer: the rows its "compiled" scanner found."""

    def __init__(self) -> None:
        self.words: list[str] = []


class _ToyAccumulator:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return len(self.cols.get("word", ()))

    @property
    def nbytes(self) -> int:
        return sum(len(w) for w in self.cols.get("word", ()))

    def move(self, rows: _ToyColumns, n: int, flow_id: int, record_id: int, direction: int,
             stream_id: int | None, src_ip: str, src_port: int, dst_ip: str,
             dst_port: int) -> None:
        taken, rows.words = rows.words[:n], rows.words[n:]
        c = self.cols
        for k, v in (("flow_id", flow_id), ("direction", Direction(direction).short),
                     ("stream_id", stream_id), ("src_ip", src_ip), ("src_port", src_port),
                     ("dst_ip", dst_ip), ("dst_port", dst_port)):
            c.setdefault(k, []).extend([v] * n)
        c.setdefault("record_id", []).extend(range(record_id, record_id + n))
        c.setdefault("word", []).extend(taken)
        c.setdefault("word_len", []).extend(len(w) for w in taken)

    def to_batch(self, schema: pa.Schema, capture_id: str) -> pa.RecordBatch:
        n = len(self)
        c, self.cols = self.cols, {}
        arrays = []
        for f in schema:
            if f.name in c:
                arrays.append(pa.array(c[f.name], f.type))
            elif f.name == "capture_id":
                arrays.append(pa.array([capture_id] * n, f.type))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _ToyFormat:
    def accumulator(self) -> _ToyAccumulator:
        return _ToyAccumulator()


TOY_FORMAT = _ToyFormat()


class ToySession(Session, ColumnarSession):
    """Lines of words.  ``!`` lines are "refused" by the fast path: a ``Record`` row
    (``word`` with the ``!``); other words go to the columns when ``columnar`` is on.
    Envelope offsets/times are not filled by the columns (null), as a fast path may."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: _ToyColumns | None = None
        self.fast = False
        self.buf = [b"", b""]

    def columnar(self, keep_rows: bool) -> None:
        self.fast = True
        self.rows = _ToyColumns() if keep_rows else None

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        out: list[Any] = []
        self.decoded_bytes[direction] += len(data)
        buf = self.buf[direction] + data
        *lines, self.buf[direction] = buf.split(b"\n")
        for line in lines:
            for word in line.decode().split():
                if self.fast and not word.startswith("!"):
                    if self.rows is not None:
                        self.rows.words.append(word)
                    last = out[-1] if out else None
                    if type(last) is ColumnBatch:
                        out[-1] = last._replace(n=last.n + 1)
                    else:
                        out.append(ColumnBatch(TOY_TABLE.name, direction, 1, self.rows,
                                               TOY_FORMAT))
                else:
                    out.append(Record(TOY_TABLE.name, direction, span.offset, span.offset,
                                      span.ts_first_ns, span.ts_last_ns, span.frame_first,
                                      span.frame_last, {"word": word, "word_len": len(word)}))
        return out

    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]:
        return []

    def close(self, ts_ns: int) -> list[Record]:
        return []


class ToyDissector(Dissector):
    name: ClassVar[str] = "toy"
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = (7777,)
    tables: ClassVar[tuple[TableSpec, ...]] = (TOY_TABLE,)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return Verdict.YES if prefix[:4] == b"toy " else Verdict.NO

    @classmethod
    def session(cls, options: dict[str, Any]) -> Session:
        return ToySession()


def _toy_capture(tmp_path: Path) -> Path:
    script = [Data(C2S, b"toy a bb !c ddd\n"), Data(S2C, b"toy ok\n"),
              Data(C2S, b"e !f\ng h\n")]
    flows = [PcapFlow(script, 7777) for _ in range(3)]
    path = tmp_path / "toy.pcap"
    write_pcap(path, flows)
    return path


def _table(out: Path, name: str) -> pa.Table:
    files = sorted(out.glob(f"{name}/*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).sort_by("record_id")


def test_a_new_columnar_protocol_needs_no_pipeline_edit(tmp_path):
    reg = Registry()
    assert reg.add(ToyDissector)
    pcap = _toy_capture(tmp_path)
    runs = {}
    for fast in (False, True):
        out = tmp_path / str(fast)
        dissect_capture(pcap, out, Options(fast=fast, strict=True, validate=True),
                        registry=reg)
        runs[fast] = _table(out, TOY_TABLE.name)
    ref, fast = runs[False], runs[True]
    # per connection: toy a bb !c ddd | toy ok | e !f g h, in emission order
    assert ref.num_rows == fast.num_rows == 3 * 11
    assert fast.column("word").to_pylist()[:11] == [
        "toy", "a", "bb", "!c", "ddd", "toy", "ok", "e", "!f", "g", "h"]
    cols = ["capture_id", "flow_id", "record_id", "direction", "src_ip", "src_port",
            "dst_ip", "dst_port", "word", "word_len"]
    assert fast.select(cols).equals(ref.select(cols))
    # ids: per flow, in emission order, whichever path made the row
    ids = np.array(fast.column("record_id").to_pylist())
    flows = np.array(fast.column("flow_id").to_pylist())
    for fid in set(flows.tolist()):
        assert (ids[flows == fid] & 0xFFFFFFFF).tolist() == list(range(11))
    # the fast rows really took the columnar path: their offsets are null
    fast_rows = [w for w, off in zip(fast.column("word").to_pylist(),
                                     fast.column("offset_start").to_pylist(), strict=True)
                 if off is None]
    assert len(fast_rows) == 3 * 9 and not any(w.startswith("!") for w in fast_rows)


def test_a_row_sink_keeps_columnar_sessions_off(tmp_path):
    """A ``RowSink`` never gets a batch: the toy session is not switched to columns."""
    from analyzer.pipeline import CaptureDissection
    from reassembly.capture import open_capture
    from reassembly.engine import capture_events

    class Rows(RowSink):
        def __init__(self) -> None:
            self.rows: dict[str, list[dict]] = {}

        def write_rows(self, spec, rows) -> None:
            self.rows.setdefault(spec.name, []).extend(rows)

    reg = Registry()
    reg.add(ToyDissector)
    sink = Rows()
    job = CaptureDissection("0" * 16, sink, reg, Options(strict=True))
    with open_capture(_toy_capture(tmp_path)) as reader:
        for ev in capture_events(reader, job.limits):
            job.handle(ev)
    job.finish()
    words = [r["word"] for r in sink.rows[TOY_TABLE.name]]
    assert len(words) == 33 and all(r["offset_start"] is not None
                                    for r in sink.rows[TOY_TABLE.name])
    with pytest.raises(TypeError, match="dict rows only"):
        sink.write_batch(TOY_TABLE, rows_to_batch(TOY_TABLE, []))


def test_the_product_sinks_are_sinks():
    from analyzer.parallel import OwnedRowsWriter
    from analyzer.spark.task import RunSink

    assert DatasetWriter.columnar is True and OwnedRowsWriter.columnar is True
    assert RowSink.columnar is False
    for cls in (DatasetWriter, OwnedRowsWriter, RunSink):
        assert type(cls.columnar) is bool  # Spark's task sink may take batches or not
        for member in ("write_rows", "write_batch", "owns"):
            assert callable(getattr(cls, member)), (cls, member)
    assert Sink.__annotations__["columnar"] in (bool, "bool")
