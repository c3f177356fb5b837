"""`msgcap summary`, and the dataset access and local analyses that `follow --decoded`,
`ladder` and `report` share with it.

Strategy: everything here reads a dataset written by `msgcap dissect` (a capture given
on the command line is first dissected into a temporary directory) with pyarrow, one
table and a few columns at a time; no Spark, so a summary of a sample takes well under
a second.  Tables other than `flows` and `anomalies` may be absent (the dissectors of a
dataset vary): every reader returns ``None`` for a missing table or column and every
section is skipped or empty, never an error.

The cross-flow numbers (request/reply, publish -> delivery, publish -> ack) are not
computed here: they are the results of the analyses (``analyzer.analyses``, one SQL
definition each, run on the embedded DuckDB by ``analysis_results``), the same tables
``msgcap analyze`` and ``msgcap spark analyze`` write (docs/analyses.md).  In short:

* NATS *request*: a PUB/HPUB sent by a client (c2s) with a reply subject.  Its *replies*
  are the MSG/HMSG the server delivers on the requester's own connection for that reply
  subject -- ``subject`` = the reply subject, or a delivery on a subscription whose
  subject is exactly the reply subject (how JetStream pull requests are answered) --
  from the request until the next request with the same reply subject on that
  connection.  A delivery with header status 503 is the server's *no responders*
  answer, not a reply.  ``answered`` = at least one reply; latency = first reply's
  ``ts_last`` - request's ``ts_first``.
* *publish -> delivery*: a MSG/HMSG (s2c) belongs to the most recent PUB/HPUB (c2s) of
  the same capture with the same subject and payload SHA-256, at most
  ``DELIVERY_WINDOW_NS`` before it; latency = delivery ``ts_last`` - publish
  ``ts_first``.  Pulsar: a MESSAGE entry belongs to the SEND entry with the same topic,
  producer name and sequence id.
* *acks* (the ``publish_ack_latency`` and ``slow_consumers`` analyses, counted):
  JetStream deliveries (reply subject ``$JS.ACK.…``) acked by a PUB to that subject on
  the same connection; JetStream publishes answered by a PubAck; Pulsar SEND ->
  SEND_RECEIPT / SEND_ERROR by (connection, producer id, sequence id) and MESSAGE -> ACK
  by (connection, consumer id, message id), cumulative acks covering every earlier id;
  STAN PubMsg -> PubAck by guid and MsgProto -> Ack by (channel, sequence) on the
  subscriber's connection; Liftbridge publish -> Ack by correlation id; Felix publishes
  that asked for an ack -> the first frame back with an ack status by (connection,
  request id).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analyzer.analyses import DELIVERY_WINDOW_NS  # the one named window (docs/analyses.md)
from analyzer.cliutil import (
    FlexTable,
    UserError,
    check_capture,
    check_keylog,
    format_ts,
    name_stdin_input,
    out_console,
    parse_decode_as,
    print_user_error,
    stdin_spooled,
    time_label,
)

__all__ = [
    "DELIVERY_WINDOW_NS",
    "Dataset",
    "Delivery",
    "RequestPair",
    "UserError",
    "ack_health",
    "build_summary",
    "deliveries",
    "nats_request_reply",
    "open_source",
    "render_summary",
]

PUBS = ("PUB", "HPUB")
MSGS = ("MSG", "HMSG")
NO_RESPONDERS = 503
TOP_DEFAULT = 10
CORE_TABLES = ("flows", "anomalies")
# tables whose rows are application messages; first column names the message kind
MESSAGE_KIND = {
    "nats": "op",
    "pulsar_commands": "command",
    "pulsar_messages": "command",
    "stan": "msg_type",
    "liftbridge": "msg_type",
    "liftbridge_entries": "entry_index",
    "felix": "type",
    "felix_messages": "type",
    "quic_packets": "packet_type",
}




# ------------------------------------------------------------------------ dataset access


def ts_text(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ns(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Timestamps (or ints) as int64 nanoseconds."""
    if pa.types.is_timestamp(col.type):
        return pc.cast(col, pa.int64())
    return col


class Dataset:
    """A msgcap dataset directory: ``manifest.json`` plus ``<table>/capture=<id>/``."""

    def __init__(self, root: str | os.PathLike[str], capture: str | None = None) -> None:
        from analyzer.manifest import read_manifest

        self.root = Path(root)
        self.capture = capture  # the capture this temporary dataset was dissected from
        self.origin = capture or str(root)  # what the user named
        try:
            self.manifest = read_manifest(self.root) or {}
        except (OSError, ValueError) as exc:
            raise UserError(
                f"{self.root / 'manifest.json'} cannot be read ({exc})",
                "re-create the dataset with `msgcap dissect CAPTURE -o DIR --overwrite`",
            ) from None
        self._cache: dict[tuple, pa.Table | None] = {}
        self._datasets: dict[str, Any] = {}
        self._tables: list[str] | None = None

    @staticmethod
    def looks_like(path: Path) -> bool:
        return (path / "manifest.json").is_file() or (path / "flows").is_dir()

    def tables(self) -> list[str]:
        """Names of the tables present (a directory with at least one Parquet file)."""
        if self._tables is None:
            self._tables = sorted(
                p.name
                for p in self.root.iterdir()
                if p.is_dir() and not p.name.startswith(".") and any(p.glob("*/*.parquet"))
            ) if self.root.is_dir() else []
        return self._tables

    def has(self, name: str) -> bool:
        return name in self.tables()

    def _dataset(self, name: str):
        import pyarrow.dataset as ds

        from dissectors.tables import PARTITION_KEY, get_table

        if name in self._datasets:
            return self._datasets[name]
        _register_tables()
        try:
            from analyzer.sink import open_dataset

            dset = open_dataset(self.root, get_table(name))
        except KeyError:  # a table of a dissector not installed here: read as stored
            part = ds.partitioning(pa.schema([(PARTITION_KEY, pa.string())]), flavor="hive")
            dset = ds.dataset(self.root / name, format="parquet", partitioning=part)
        self._datasets[name] = dset
        return dset

    def read(
        self,
        name: str,
        columns: Sequence[str] | None = None,
        where: Any = None,
    ) -> pa.Table | None:
        """Table ``name`` (the given columns that exist, in that order), or None when the
        dataset has no such table.  ``where``: a pyarrow expression."""
        key = (name, tuple(columns) if columns else None, str(where) if where is not None else None)
        if key in self._cache:
            return self._cache[key]
        if not self.has(name):
            self._cache[key] = None
            return None
        from analyzer.sink import exact_timestamps, with_exact_columns

        dset = self._dataset(name)
        cols = with_exact_columns(dset.schema, columns) if columns else None
        # timestamps exact to the nanosecond (the ``X_ns`` columns), as ``timestamp[ns]``
        table = exact_timestamps(_scanner(dset, cols, where).to_table())
        self._cache[key] = table
        return table

    def read_ids(self, name: str, column: str, ids: pa.Array, where: Any = None
                 ) -> pa.Table | None:
        """The rows of table ``name`` (every column) whose ``column`` is one of ``ids``
        and that match ``where``, reading whole only the row groups holding one.  Why: the
        rows of one flow are spread over every row group of its capture (flows interleave,
        so ``column``'s statistics skip none), and a filtered scan of the table read every
        column of every row group: 3.8 GB for the first 200 messages of a flow of a 1 GB
        bulk recording's dataset.  Not cached (``read`` is)."""
        if not self.has(name):
            return None
        import pyarrow.dataset as pads

        from analyzer.sink import exact_timestamps

        dset = self._dataset(name)
        match = pads.field(column).isin(ids)
        expr = match if where is None else where & match
        parts = []
        for fragment in dset.get_fragments(filter=where):
            for group in fragment.split_by_row_group():
                if group.to_table(schema=dset.schema, columns=[column], filter=expr).num_rows:
                    parts.append(group.to_table(schema=dset.schema, filter=expr))
        return exact_timestamps(pa.concat_tables(parts) if parts else
                                dset.schema.empty_table())

    def columns(self, name: str) -> list[str]:
        if not self.has(name):
            return []
        return list(self._dataset(name).schema.names)

    def inputs(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("inputs", []))


_REGISTERED = False


def _scanner(dset: Any, columns: Sequence[str] | None, where: Any) -> Any:
    """A scan of ``dset`` reading a batch or two ahead, not whole files' column chunks:
    pyarrow's defaults (``pre_buffer``, 16 batches and 4 files ahead) made reading one
    flow of a 1 GB bulk recording's ``nats`` table (233 MB of result) peak at 2.4 GB RSS
    in 3.2 s, these at 0.7 GB in 1.6 s (local files, where reading ahead buys little)."""
    import pyarrow.dataset as pads

    return dset.scanner(columns=columns, filter=where, batch_readahead=2,
                        fragment_readahead=1,
                        fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))


def _register_tables() -> None:
    """Import the dissectors once so that plugin tables' declarations are known."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    try:
        from dissectors.registry import discover

        discover()
    except Exception:  # a broken plugin must not stop a read-only view
        pass


@contextlib.contextmanager
def open_source(
    path: str,
    *,
    keylog: str | None = None,
    decode_as: dict[int, str] | None = None,
    quiet: bool = False,
) -> Iterator[Dataset]:
    """A dataset for ``path``: a dataset directory as is, or a capture dissected into a
    temporary directory (removed afterwards).  User mistakes raise ``UserError``."""
    p = Path(path)
    check_capture(path, dataset_ok=True)
    if p.is_file() and p.name == "manifest.json":
        p = p.parent
    if p.is_dir():
        if not Dataset.looks_like(p):
            raise UserError(
                f"{path} is a directory but not a msgcap dataset (no manifest.json, no flows/)",
                f"create one with `msgcap dissect CAPTURE -o {path}`, or give the capture file",
            )
        if keylog:
            raise UserError(
                "--keylog only applies to a capture, and a dataset was given",
                "dissect again with `msgcap dissect CAPTURE --keylog FILE -o DIR --overwrite`",
            )
        yield Dataset(p)
        return
    if keylog:
        check_keylog(keylog)
    with tempfile.TemporaryDirectory(prefix="msgcap-") as tmp, \
            stdin_spooled([path]) as ((capture,), spooled):  # "-": standard input
        _dissect_into(capture, tmp, keylog=keylog, decode_as=decode_as or {}, quiet=quiet)
        if spooled is not None:
            name_stdin_input(Path(tmp), spooled)
        yield Dataset(tmp, capture=path)


def _dissect_into(path: str, out: str, *, keylog, decode_as, quiet: bool) -> None:
    from analyzer.pipeline import dissect_capture
    from analyzer.progress import capture_progress
    from analyzer.runoptions import build_options
    from dissectors.registry import discover

    registry = discover()
    options = build_options(registry, decode_as=decode_as, keylog=keylog)

    def wrap(reader, events):
        if quiet:
            yield from events
            return
        with capture_progress(reader, f"dissect {Path(path).name}") as bar:
            yield from bar(events)

    dissect_capture(path, out, options, registry=registry, wrap=wrap)


# ------------------------------------------------------------------------ request / reply


@dataclass(slots=True)
class RequestPair:
    capture_id: str
    flow_id: int
    record_id: int
    subject: str
    reply_to: str
    ts_ns: int
    replies: int = 0
    no_responders: bool = False
    latency_ns: int | None = None
    first_reply_record_id: int | None = None
    no_responders_record_id: int | None = None

    @property
    def answered(self) -> bool:
        return self.replies > 0


def _rows(t: pa.Table, cols: Sequence[str]) -> list[tuple]:
    """Rows of ``t`` as tuples of the given columns (None for a missing column)."""
    arrays = []
    for c in cols:
        if c in t.column_names:
            a = t[c]
            if pa.types.is_timestamp(a.type):
                a = _ns(a)
            arrays.append(a.to_pylist())
        else:
            arrays.append([None] * t.num_rows)
    return list(zip(*arrays, strict=True)) if arrays else []


def analysis_results(ds: Dataset, window_ns: int | None = None,
                     names: Sequence[str] | None = None) -> dict[str, pa.Table]:
    """The analyses ``names`` (all when None: ``analyzer.analyses``, run on the embedded
    DuckDB) of ``ds``, each run once per dataset object and window, and only when asked
    for (with the earlier results it reads): summary, report, ladder and transcript all
    read these tables, so they show the numbers ``msgcap analyze`` and Spark write.
    Why by name: the summary reads five of the seventeen, and the others cost seconds on
    a large dataset."""
    from analyzer.analyses import ANALYSES, duck
    from analyzer.analyses import DELIVERY_WINDOW_NS as DEFAULT_WINDOW

    window = DEFAULT_WINDOW if window_ns is None else int(window_ns)
    cache = ds.__dict__.setdefault("_analysis_results", {})
    if window not in cache:
        root = ds.root if ds.root.is_dir() else None
        cache[window] = (duck.connect(root), set(), {})
    con, made, results = cache[window]
    wanted = list(names) if names is not None else list(ANALYSES)
    missing = [n for n in wanted if n not in results]
    if missing:
        results.update(duck.run(None, missing, {"delivery_window_ns": window}, con, made))
    return {n: results[n] for n in wanted}


def nats_request_reply(ds: Dataset) -> list[RequestPair]:
    """Every NATS request of the dataset with its outcome (the ``nats_request_reply``
    analysis, docs/analyses.md)."""
    t = analysis_results(ds, names=["nats_request_reply"])["nats_request_reply"]
    out = [
        RequestPair(r["capture_id"], r["flow_id"], r["request_record_id"], r["request_subject"],
                    r["reply_subject"], r["request_ts_ns"] or 0, r["replies"],
                    r["no_responders"], r["latency_ns"], r["first_reply_record_id"],
                    r["no_responders_record_id"])
        for r in t.to_pylist()
    ]
    out.sort(key=lambda r: (r.capture_id, r.ts_ns, r.record_id))
    return out


# ------------------------------------------------------------------------ deliveries


@dataclass(slots=True)
class Delivery:
    protocol: str
    capture_id: str
    pub_record_id: int
    pub_flow_id: int
    delivery_record_id: int
    delivery_flow_id: int
    subject: str
    latency_ns: int


def deliveries(ds: Dataset, window_ns: int = DELIVERY_WINDOW_NS) -> list[Delivery]:
    """Publish -> delivery pairs of NATS and Pulsar (the ``deliveries`` analysis, rows
    matched to a publish)."""
    t = analysis_results(ds, window_ns, ["deliveries"])["deliveries"]
    return [
        Delivery(r["protocol"], r["capture_id"], r["pub_record_id"], r["pub_flow_id"],
                 r["delivery_record_id"], r["delivery_flow_id"], r["subject"], r["latency_ns"])
        for r in t.to_pylist() if r["pub_record_id"] is not None
    ]


def fanout_summary(ds: Dataset) -> dict[str, Any]:
    """NATS publish -> delivery matching in numbers (``deliveries`` and
    ``delivery_fanout``): deliveries seen, matched to a publish of the capture, and
    publishes nobody received.  Counted in Arrow: a large capture's results have
    millions of rows (as Python dicts they took GBs)."""
    res = analysis_results(ds, names=["deliveries", "delivery_fanout"])
    dl = res["deliveries"]
    dl = dl.filter(pc.equal(dl["protocol"], "nats"))
    matched = dl.filter(pc.is_valid(dl["pub_record_id"]))["latency_ns"]
    fan = res["delivery_fanout"]
    return {
        "deliveries": dl.num_rows,
        "matched_to_publish": len(matched),
        "publishes": fan.num_rows,
        "never_delivered": fan.num_rows - _true_count(fan["delivered"]),
        "latency": latency_stats(matched),
    }


def _true_count(column: pa.ChunkedArray | pa.Array) -> int:
    """Rows whose value is true (null: not)."""
    return pc.sum(pc.fill_null(pc.cast(column, pa.bool_()), False)).as_py() or 0


# ------------------------------------------------------------------------ acks


def latency_stats(values_ns: Sequence[int] | pa.ChunkedArray | pa.Array
                  ) -> dict[str, float | int | None]:
    """count, min, p50, p90, p99, max in milliseconds (None when no value; nulls are not
    values).  Percentiles are discrete, SQL's ``percentile_disc(q)``: the smallest value
    with at least a fraction ``q`` of the values at or below it (what
    ``latency_percentiles`` gives)."""
    import numpy as np

    if isinstance(values_ns, pa.ChunkedArray | pa.Array):
        values = np.sort(pc.drop_null(values_ns).to_numpy(zero_copy_only=False))
    else:
        values = np.sort(np.array([v for v in values_ns if v is not None], dtype=np.int64))
    n = len(values)

    def at(q: float) -> float | None:
        if not n:
            return None
        return round(int(values[min(max(0, math.ceil(q * n) - 1), n - 1)]) / 1e6, 3)

    return {"count": n, "min_ms": at(0.0), "p50_ms": at(0.5), "p90_ms": at(0.9),
            "p99_ms": at(0.99), "max_ms": at(1.0)}


def request_reply_summary(t: pa.Table) -> dict[str, Any]:
    """The ``nats_request_reply`` analysis in numbers, with the first five unanswered
    requests (by capture, time, record id)."""
    answered = pc.fill_null(pc.greater(t["replies"], 0), False)
    nr = pc.fill_null(t["no_responders"], False)
    unanswered = t.filter(pc.and_(pc.invert(answered), pc.invert(nr)))
    first = unanswered.sort_by([("capture_id", "ascending"), ("request_ts_ns", "ascending"),
                                ("request_record_id", "ascending")]).slice(0, 5)
    return {
        "requests": t.num_rows,
        "answered": _true_count(answered),
        "no_responders": _true_count(nr),
        "unanswered": unanswered.num_rows,
        "replies": pc.sum(t["replies"]).as_py() or 0,
        "latency": latency_stats(t.filter(answered)["latency_ns"]),
        "unanswered_examples": [
            {"capture_id": r["capture_id"], "flow_id": r["flow_id"],
             "record_id": r["request_record_id"], "subject": r["request_subject"],
             "ts": ts_text(r["request_ts_ns"] or 0)}
            for r in first.to_pylist()
        ],
    }


ACK_PROTOCOLS = ("jetstream", "pulsar", "stan", "liftbridge", "felix")
"""The order ack health lists protocols in."""


def ack_health(ds: Dataset) -> dict[str, Any]:
    """Per protocol: publishes answered by an ack (the ``publish_ack_latency`` analysis;
    Pulsar's are ``sends`` answered by ``receipts``) and deliveries acked by their
    consumer (``slow_consumers``).  Nothing is paired here: these are the analyses' own
    rows counted, so summary, report, ``msgcap analyze`` and Spark give the same numbers
    (tests/analyses/test_consistency.py)."""
    res = analysis_results(ds, names=["publish_ack_latency", "slow_consumers"])
    pubs = res["publish_ack_latency"]
    dels = res["slow_consumers"].group_by("protocol").aggregate(
        [("delivered", "sum"), ("acked", "sum")])
    delivered = dict(zip(dels["protocol"].to_pylist(),
                         zip(dels["delivered_sum"].to_pylist(), dels["acked_sum"].to_pylist(),
                             strict=True), strict=True))
    out: dict[str, Any] = {}
    for proto in sorted(set(pubs["protocol"].unique().to_pylist()) | set(delivered),
                        key=lambda p: (ACK_PROTOCOLS + (p,)).index(p)):
        part: dict[str, Any] = {}
        rows = pubs.filter(pc.equal(pubs["protocol"], proto))
        if rows.num_rows:
            is_acked = pc.fill_null(rows["acked"], False)
            answered = pc.is_valid(rows["ack_record_id"])
            acked = _true_count(is_acked)
            errors = _true_count(pc.and_(pc.invert(is_acked), answered))
            unacked = rows.num_rows - acked - errors
            if proto == "pulsar":
                lat = rows.filter(answered)["latency_ns"]
                part["sends"] = {"sent": rows.num_rows, "receipts": acked, "errors": errors,
                                 "unacked": unacked, "latency": latency_stats(lat)}
            else:
                part["publishes"] = {"published": rows.num_rows, "acked": acked,
                                     "errors": errors, "unacked": unacked}
        if proto in delivered:
            n, acked = (v or 0 for v in delivered[proto])
            part["deliveries"] = {"delivered": n, "acked": acked, "unacked": n - acked}
        out[proto] = part
    return out


# ------------------------------------------------------------------------ the summary


def _group_count(t: pa.Table, keys: list[str]) -> dict[tuple, int]:
    if t is None or t.num_rows == 0:
        return {}
    g = t.group_by(keys).aggregate([([], "count_all")])
    cols = [g[k].to_pylist() for k in keys]
    return {tuple(c[i] for c in cols): n for i, n in enumerate(g["count_all"].to_pylist())}


def _top_names(
    t: pa.Table | None, name_col: str, bytes_col: str | None, pub_mask, del_mask, top: int
) -> dict[str, Any] | None:
    """Messages and bytes per name (subject / topic / stream), published and delivered."""
    if t is None or t.num_rows == 0 or name_col not in t.column_names:
        return None
    stats: dict[str, dict[str, int]] = defaultdict(
        lambda: {"published": 0, "published_bytes": 0, "delivered": 0, "delivered_bytes": 0}
    )
    for kind, mask in (("published", pub_mask), ("delivered", del_mask)):
        if mask is None:
            continue
        part = t.filter(mask)
        part = part.filter(pc.is_valid(part[name_col]))
        if part.num_rows == 0:
            continue
        if bytes_col and bytes_col in part.column_names:
            part = part.set_column(
                part.column_names.index(bytes_col), bytes_col,
                pc.fill_null(pc.cast(part[bytes_col], pa.int64()), 0),
            )
            g = part.group_by(name_col).aggregate([([], "count_all"), (bytes_col, "sum")])
            sums = g[f"{bytes_col}_sum"].to_pylist()
        else:
            g = part.group_by(name_col).aggregate([([], "count_all")])
            sums = [0] * g.num_rows
        for name, n, b in zip(g[name_col].to_pylist(), g["count_all"].to_pylist(), sums,
                              strict=True):
            stats[name][kind] += n
            stats[name][f"{kind}_bytes"] += b or 0
    if not stats:
        return None
    rows = [
        {"name": k, **v, "messages": v["published"] + v["delivered"],
         "bytes": v["published_bytes"] + v["delivered_bytes"]}
        for k, v in stats.items()
    ]
    return {
        "distinct": len(rows),
        "by_messages": sorted(rows, key=lambda r: (-r["messages"], -r["bytes"], r["name"]))[:top],
        "by_bytes": sorted(rows, key=lambda r: (-r["bytes"], -r["messages"], r["name"]))[:top],
    }


def _eq(t: pa.Table, col: str, value) -> Any:
    return pc.equal(t[col], value) if col in t.column_names else None


def _and(*masks):
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    out = masks[0]
    for m in masks[1:]:
        out = pc.and_(out, m)
    return out


def _protocols(ds: Dataset, top: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    nats = ds.read("nats", ["direction", "op", "subject", "payload_len", "header_len"])
    if nats is not None and nats.num_rows:
        ops = _group_count(nats, ["direction", "op"])
        by_dir: dict[str, dict[str, int]] = {"c2s": {}, "s2c": {}}
        for (d, op), n in sorted(ops.items()):
            by_dir.setdefault(d, {})[op] = n
        pub = _and(pc.is_in(nats["op"], pa.array(PUBS)), _eq(nats, "direction", "c2s"))
        dlv = _and(pc.is_in(nats["op"], pa.array(MSGS)), _eq(nats, "direction", "s2c"))
        published, delivered = nats.filter(pub), nats.filter(dlv)
        out["nats"] = {
            "rows": nats.num_rows,
            "ops": by_dir,
            "published": published.num_rows,
            "published_payload_bytes": int(pc.sum(published["payload_len"]).as_py() or 0),
            "delivered": delivered.num_rows,
            "delivered_payload_bytes": int(pc.sum(delivered["payload_len"]).as_py() or 0),
            "subjects": _top_names(nats, "subject", "payload_len", pub, dlv, top),
        }
    pcmd = ds.read("pulsar_commands", ["direction", "command"])
    if pcmd is not None and pcmd.num_rows:
        cmds = _group_count(pcmd, ["direction", "command"])
        by_dir = {"c2s": {}, "s2c": {}}
        for (d, c), n in sorted(cmds.items()):
            by_dir.setdefault(d, {})[c] = n
        pm = ds.read("pulsar_messages", ["direction", "command", "topic", "payload_len"])
        entry = {"rows": pcmd.num_rows, "commands": by_dir}
        if pm is not None and pm.num_rows:
            entry["topics"] = _top_names(pm, "topic", "payload_len",
                                         _eq(pm, "command", "SEND"),
                                         _eq(pm, "command", "MESSAGE"), top)
            entry["messages_sent"] = int(pc.sum(pc.equal(pm["command"], "SEND")).as_py() or 0)
            entry["messages_delivered"] = int(
                pc.sum(pc.equal(pm["command"], "MESSAGE")).as_py() or 0)
        out["pulsar"] = entry
    stan = ds.read("stan", ["direction", "msg_type", "channel", "data_len"])
    if stan is not None and stan.num_rows:
        types = _group_count(stan, ["direction", "msg_type"])
        by_dir = {"c2s": {}, "s2c": {}}
        for (d, mt), n in sorted(types.items()):
            by_dir.setdefault(d, {})[mt] = n
        out["stan"] = {
            "rows": stan.num_rows,
            "msg_types": by_dir,
            "channels": _top_names(
                stan, "channel", "data_len",
                _and(_eq(stan, "msg_type", "PubMsg"), _eq(stan, "direction", "c2s")),
                _and(_eq(stan, "msg_type", "MsgProto"), _eq(stan, "direction", "s2c")), top),
        }
    lb = ds.read("liftbridge", ["direction", "msg_type", "magic_ok", "stream", "value_len"])
    if lb is not None and lb.num_rows:
        types = _group_count(lb, ["direction", "msg_type"])
        by_dir = {"c2s": {}, "s2c": {}}
        for (d, mt), n in sorted(types.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            by_dir.setdefault(d, {})[mt or "(plain)"] = n
        pub = _and(_eq(lb, "direction", "c2s"),
                   pc.or_(pc.fill_null(pc.equal(lb["msg_type"], "Publish"), False),
                          pc.invert(lb["magic_ok"])) if "magic_ok" in lb.column_names else None)
        out["liftbridge"] = {
            "rows": lb.num_rows,
            "msg_types": by_dir,
            "streams": _top_names(lb, "stream", "value_len", pub, None, top),
        }
    fx = ds.read("felix", ["direction", "kind", "type"])
    if fx is not None and fx.num_rows:
        kinds = _group_count(fx, ["direction", "kind", "type"])
        by_dir = {"c2s": {}, "s2c": {}}
        for (d, k, ty), n in sorted(kinds.items(), key=lambda kv: tuple(x or "" for x in kv[0])):
            label = ty if ty else k
            by_dir.setdefault(d, {})[label] = by_dir.get(d, {}).get(label, 0) + n
        fm = ds.read("felix_messages", ["direction", "type", "stream", "payload_len"])
        entry = {"rows": fx.num_rows, "frames": by_dir}
        if fm is not None and fm.num_rows:
            entry["streams"] = _top_names(fm, "stream", "payload_len",
                                          _eq(fm, "direction", "c2s"),
                                          _eq(fm, "direction", "s2c"), top)
        out["felix"] = entry
    # tables of other dissectors (plugins): row counts only
    known = set(MESSAGE_KIND) | set(CORE_TABLES)
    for name in ds.tables():
        if name not in known:
            t = ds.read(name, ["capture_id"])
            out.setdefault("other_tables", {})[name] = t.num_rows if t is not None else 0
    return out


def _captures(ds: Dataset) -> list[dict[str, Any]]:
    from reassembly.link import LINKTYPE_NAMES

    flows = ds.read("flows", ["capture_id", "ts_first", "ts_last"])
    span: dict[str, tuple[int, int]] = {}
    if flows is not None and flows.num_rows:
        g = pa.table({
            "capture_id": flows["capture_id"],
            "t0": _ns(flows["ts_first"]),
            "t1": _ns(flows["ts_last"]),
        }).group_by("capture_id").aggregate([("t0", "min"), ("t1", "max")])
        for cid, t0, t1 in zip(g["capture_id"].to_pylist(), g["t0_min"].to_pylist(),
                               g["t1_max"].to_pylist(), strict=True):
            span[cid] = (t0, t1)
    out = []
    inputs = ds.inputs()
    seen = set()
    for entry in inputs:
        cid = entry["capture_id"]
        seen.add(cid)
        inp = entry.get("input", {})
        t0, t1 = span.get(cid, (None, None))
        lts = []
        for lt in inp.get("link_types", []):
            try:
                value = int(lt)
            except (TypeError, ValueError):
                lts.append({"value": None, "name": str(lt)})
                continue
            lts.append({"value": value, "name": LINKTYPE_NAMES.get(value, f"LINKTYPE_{value}")})
        out.append({
            "capture_id": cid,
            "path": inp.get("path"),
            "sha256": inp.get("sha256"),
            "size": inp.get("size"),
            "format": inp.get("format"),
            "link_types": lts,
            "packets": inp.get("packets"),
            "damage": inp.get("damage", []),
            "status": entry.get("status"),
            "error": entry.get("error"),
            "ts_first": ts_text(t0),
            "ts_last": ts_text(t1),
            "ts_first_ns": t0,
            "ts_last_ns": t1,
            "duration_s": None if t0 is None else round((t1 - t0) / 1e9, 6),
            "rows": entry.get("rows", {}),
        })
    for cid in sorted(set(span) - seen):  # a dataset without manifest entries
        t0, t1 = span[cid]
        out.append({"capture_id": cid, "path": None, "sha256": None, "size": None,
                    "format": None, "link_types": [], "packets": None, "damage": [],
                    "status": None, "error": None, "ts_first": ts_text(t0),
                    "ts_last": ts_text(t1), "ts_first_ns": t0, "ts_last_ns": t1,
                    "duration_s": round((t1 - t0) / 1e9, 6), "rows": {}})
    return out


def _sum(t: pa.Table, *cols: str) -> int:
    return int(sum((pc.sum(t[c]).as_py() or 0) for c in cols if c in t.column_names))


def _flows(ds: Dataset) -> tuple[dict[str, Any], dict[str, Any]]:
    cols = ["capture_id", "flow_id", "transport", "client_ip", "client_port", "server_ip",
            "server_port", "protocol", "stream_bytes_c2s", "stream_bytes_s2c",
            "undecoded_bytes_c2s", "undecoded_bytes_s2c", "gap_bytes_c2s", "gap_bytes_s2c"]
    flows = ds.read("flows", cols)
    if flows is None or flows.num_rows == 0:
        return {"total": 0, "by_protocol": {}, "by_transport": {}}, {
            "unclaimed_flows": 0, "unclaimed_stream_bytes": 0, "undecoded_bytes": 0,
            "gap_bytes": 0, "examples": []}
    protocol = pc.fill_null(flows["protocol"], "(unclaimed)")
    by_proto = _group_count(pa.table({"p": protocol}), ["p"])
    by_transport = _group_count(flows.select(["transport"]), ["transport"])
    unclaimed = flows.filter(pc.is_null(flows["protocol"]))
    size = pc.add(unclaimed["stream_bytes_c2s"], unclaimed["stream_bytes_s2c"])
    top = unclaimed.take(pc.select_k_unstable(pa.table({"n": size}), k=min(
        5, unclaimed.num_rows), sort_keys=[("n", "descending")])) if unclaimed.num_rows else (
        unclaimed)
    flows_out = {
        "total": flows.num_rows,
        "by_protocol": {k[0]: n for k, n in sorted(by_proto.items())},
        "by_transport": {k[0]: n for k, n in sorted(by_transport.items())},
    }
    undecoded_out = {
        "unclaimed_flows": unclaimed.num_rows,
        "unclaimed_stream_bytes": _sum(unclaimed, "stream_bytes_c2s", "stream_bytes_s2c"),
        "undecoded_bytes": _sum(flows, "undecoded_bytes_c2s", "undecoded_bytes_s2c"),
        "gap_bytes": _sum(flows, "gap_bytes_c2s", "gap_bytes_s2c"),
        "examples": [
            {"capture_id": r["capture_id"], "flow_id": r["flow_id"], "transport": r["transport"],
             "client": f"{r['client_ip']}:{r['client_port']}",
             "server": f"{r['server_ip']}:{r['server_port']}",
             "stream_bytes": (r["stream_bytes_c2s"] or 0) + (r["stream_bytes_s2c"] or 0)}
            for r in top.to_pylist()
        ],
    }
    return flows_out, undecoded_out


def _quic(ds: Dataset) -> dict[str, Any] | None:
    q = ds.read("quic_packets", ["capture_id", "conn_flow_id", "decrypted", "undecrypted_reason"])
    if q is None or q.num_rows == 0:
        return None
    bad = q.filter(pc.equal(pc.fill_null(q["decrypted"], True), False))
    reasons = _group_count(
        pa.table({"r": pc.fill_null(bad["undecrypted_reason"], "unknown")}), ["r"])
    # Initial packets that arrive before the client's first Initial are not a key problem
    keyless = bad.filter(pc.not_equal(pc.fill_null(bad["undecrypted_reason"], ""),
                                      "no-initial-dcid"))
    return {
        "connections": len(_group_count(q, ["capture_id", "conn_flow_id"])),
        "packets": q.num_rows,
        "packets_undecrypted": bad.num_rows,
        "connections_with_undecrypted_packets": len(
            _group_count(keyless, ["capture_id", "conn_flow_id"])),
        "undecrypted_by_reason": {k[0]: n for k, n in sorted(reasons.items())},
    }


def _anomalies(ds: Dataset) -> dict[str, Any]:
    t = ds.read("anomalies", ["capture_id", "flow_id", "kind", "detail", "ts", "frame",
                              "record_id"])
    if t is None or t.num_rows == 0:
        return {"total": 0, "by_kind": []}
    counts = {k[0]: n for k, n in _group_count(t, ["kind"]).items()}
    # first of each kind by time (rows without a time last), then capture and record id
    order = pa.table({"untimed": pc.is_null(t["ts"]), "ts": pc.fill_null(_ns(t["ts"]), 0),
                      "capture_id": t["capture_id"], "record_id": t["record_id"]})
    t = t.take(pc.sort_indices(order, sort_keys=[
        ("untimed", "ascending"), ("ts", "ascending"), ("capture_id", "ascending"),
        ("record_id", "ascending")]))
    by_kind = []
    for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        first = t.slice(pc.index(t["kind"], kind).as_py(), 1).to_pylist()[0]
        ts = first["ts"]
        by_kind.append({"kind": kind, "count": n, "example": {
            "capture_id": first["capture_id"], "flow_id": first["flow_id"],
            "frame": first["frame"],
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if ts is not None else None,
            "detail": first["detail"]}})
    return {"total": t.num_rows, "by_kind": by_kind}


def build_summary(ds: Dataset, top: int = TOP_DEFAULT) -> dict[str, Any]:
    """The whole summary as plain JSON-able data (what ``--json`` prints)."""
    captures = _captures(ds)
    flows, undecoded = _flows(ds)
    quic = _quic(ds)
    if quic is not None:
        undecoded["quic"] = quic
    pairs = analysis_results(ds, names=["nats_request_reply"])["nats_request_reply"]
    starts = [c["ts_first_ns"] for c in captures if c["ts_first_ns"] is not None]
    ends = [c["ts_last_ns"] for c in captures if c["ts_last_ns"] is not None]
    t0, t1 = (min(starts), max(ends)) if starts else (None, None)
    anomalies = _anomalies(ds)
    status = ds.manifest.get("status")
    if status is None:
        status = "degraded" if anomalies["total"] else "clean"
    rows = {}
    for name in ds.tables():
        t = ds.read(name, ["capture_id"])
        rows[name] = t.num_rows if t is not None else 0
    return {
        "format": "msgcap-summary/1",
        "source": {"path": ds.origin, "kind": "capture" if ds.capture else "dataset"},
        "status": status,
        "captures": captures,
        "totals": {
            "captures": len(captures),
            "packets": sum(c["packets"] or 0 for c in captures),
            "bytes": sum(c["size"] or 0 for c in captures),
            "flows": flows["total"],
            "ts_first": ts_text(t0),
            "ts_last": ts_text(t1),
            "duration_s": None if t0 is None else round((t1 - t0) / 1e9, 6),
        },
        "rows": rows,
        "flows": flows,
        "protocols": _protocols(ds, top),
        "request_reply": {"nats": request_reply_summary(pairs)} if pairs.num_rows else {},
        "fanout": {"nats": fanout_summary(ds)} if ds.has("nats") else {},
        "acks": ack_health(ds),
        "anomalies": anomalies,
        "undecoded": undecoded,
    }


# ------------------------------------------------------------------------ rendering


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


def _count_map(m: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in m.items()) or "-"


def _iso_ns(iso: str | None) -> int | None:
    """Nanoseconds of a ``ts_text`` string (microsecond precision)."""
    if not iso:
        return None
    dt = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (int(dt.timestamp()) * 1_000_000 + dt.microsecond) * 1000


def render_summary(s: dict[str, Any], console, time_mode: str = "utc") -> None:
    """The summary as rich tables on ``console``; times as ``--time`` asks (relative:
    seconds since the first packet of all captures)."""
    from rich.text import Text

    t0 = _iso_ns(s["totals"]["ts_first"])

    def when(iso: str | None) -> str:
        return format_ts(_iso_ns(iso), time_mode, t0) if iso else "-"

    def table(title: str, *cols: str, right: Sequence[str] = ()) -> FlexTable:
        # values wrap, headers do not; a block per row when the columns cannot fit
        return FlexTable(title, list(cols), tuple(right))

    tot = s["totals"]
    status = s["status"]
    style = {"clean": "green", "degraded": "yellow"}.get(status, "red")
    head = Text.assemble(
        ("msgcap summary ", "bold"), (s["source"]["path"], "bold cyan"), "  status ",
        (status, f"bold {style}"),
    )
    console.print(head)
    console.print(
        f"{tot['captures']} capture(s), {tot['packets']:,} packets, "
        f"{_human_bytes(tot['bytes'])}, {tot['flows']:,} flows; "
        f"{when(tot['ts_first'])} → {when(tot['ts_last'])} "
        f"({tot['duration_s'] if tot['duration_s'] is not None else '-'} s)"
    )
    t = table("captures", "capture", "file", "sha256", "format", "link types", "packets",
              f"first packet ({time_label(time_mode)})", "secs", "status",
              right=("packets", "secs"))
    for c in s["captures"]:
        t.add_row(
            c["capture_id"], c["path"] or "-", (c["sha256"] or "-")[:16] + "…",
            c["format"] or "-", ", ".join(lt["name"] for lt in c["link_types"]) or "-",
            f"{c['packets']:,}" if c["packets"] is not None else "-",
            when(c["ts_first"]), f"{c['duration_s']:.3f}" if c["duration_s"] is not None else "-",
            c["status"] or "-",
        )
    console.print(t)

    fl = s["flows"]
    t = table("flows by protocol", "protocol", "flows", right=("flows",))
    for k, v in fl["by_protocol"].items():
        t.add_row(k, f"{v:,}")
    console.print(t)

    protos = s["protocols"]
    if "nats" in protos:
        n = protos["nats"]
        console.print(
            f"[bold]NATS[/] ops client→server: {_count_map(n['ops'].get('c2s', {}))}\n"
            f"     ops server→client: {_count_map(n['ops'].get('s2c', {}))}\n"
            f"     published {n['published']:,} messages "
            f"({_human_bytes(n['published_payload_bytes'])}), delivered {n['delivered']:,} "
            f"({_human_bytes(n['delivered_payload_bytes'])})"
        )
    if "pulsar" in protos:
        p = protos["pulsar"]
        console.print(
            f"[bold]Pulsar[/] commands client→broker: {_count_map(p['commands'].get('c2s', {}))}"
            f"\n       broker→client: {_count_map(p['commands'].get('s2c', {}))}"
        )
    for name, key, label in (("stan", "msg_types", "STAN"), ("liftbridge", "msg_types",
                                                               "Liftbridge"),
                             ("felix", "frames", "Felix")):
        if name in protos:
            e = protos[name]
            both = Counter(e[key].get("c2s", {})) + Counter(e[key].get("s2c", {}))
            console.print(f"[bold]{label}[/] {e['rows']:,} rows: {_count_map(dict(both))}")
    for name, key, what in (("nats", "subjects", "subject"), ("pulsar", "topics", "topic"),
                            ("stan", "channels", "channel"), ("liftbridge", "streams", "stream"),
                            ("felix", "streams", "stream")):
        top = protos.get(name, {}).get(key)
        if not top:
            continue
        for order in ("by_messages", "by_bytes"):
            t = table(f"top {name} {what}s {order.replace('_', ' ')} "
                      f"(of {top['distinct']:,})", what, "published", "bytes", "delivered",
                      "bytes ", right=("published", "bytes", "delivered", "bytes "))
            for r in top[order]:
                t.add_row(r["name"], f"{r['published']:,}", _human_bytes(r["published_bytes"]),
                          f"{r['delivered']:,}", _human_bytes(r["delivered_bytes"]))
            console.print(t)
    if "other_tables" in protos:
        console.print(f"[bold]other tables[/]: {_count_map(protos['other_tables'])}")

    rr = s["request_reply"].get("nats")
    if rr:
        lat = rr["latency"]
        console.print(
            f"[bold]NATS request/reply[/]: {rr['requests']:,} requests, "
            f"[green]{rr['answered']:,} answered[/] ({rr['replies']:,} replies), "
            f"[yellow]{rr['no_responders']:,} no responders[/], "
            f"[red]{rr['unanswered']:,} unanswered[/]; latency ms p50 {lat['p50_ms']} "
            f"p90 {lat['p90_ms']} max {lat['max_ms']}"
        )
    fan = s.get("fanout", {}).get("nats")
    if fan and fan["deliveries"]:
        lat = fan["latency"]
        console.print(
            f"[bold]NATS publish → delivery[/]: {fan['deliveries']:,} deliveries, "
            f"{fan['matched_to_publish']:,} matched to a publish in the capture; "
            f"{fan['publishes']:,} publishes, [red]{fan['never_delivered']:,} never "
            f"delivered[/]; latency ms p50 {lat['p50_ms']} p90 {lat['p90_ms']} "
            f"max {lat['max_ms']}"
        )
    if s["acks"]:
        t = table("ack health", "protocol", "what", "total", "acked", "errors", "unacked",
                  right=("total", "acked", "errors", "unacked"))
        for proto, parts in s["acks"].items():
            for what, v in parts.items():
                total = v.get("sent", v.get("published", v.get("delivered", 0)))
                acked = v.get("acked", v.get("receipts", 0))
                t.add_row(proto, what, f"{total:,}", f"{acked:,}", f"{v.get('errors', 0):,}",
                          f"{v.get('unacked', 0):,}")
        console.print(t)

    an = s["anomalies"]
    if an["total"]:
        t = table(f"anomalies by kind ({an['total']:,})", "kind", "count", "example",
                  right=("count",))
        for a in an["by_kind"]:
            ex = a["example"]
            where = f"flow {ex['flow_id']}" if ex["flow_id"] is not None else "no flow"
            t.add_row(a["kind"], f"{a['count']:,}",
                      f"{where}, frame {ex['frame']}: {ex['detail']}")
        console.print(t)
    else:
        console.print("[green]no anomalies[/]")

    u = s["undecoded"]
    lines = [
        f"unclaimed flows {u['unclaimed_flows']:,} ({_human_bytes(u['unclaimed_stream_bytes'])}),"
        f" undecoded bytes {_human_bytes(u['undecoded_bytes'])}, "
        f"never captured (gaps) {_human_bytes(u['gap_bytes'])}"
    ]
    for ex in u["examples"]:
        lines.append(f"  flow {ex['flow_id']} {ex['transport']} {ex['client']} → {ex['server']}"
                     f" {_human_bytes(ex['stream_bytes'])}")
    q = u.get("quic")
    if q:
        lines.append(
            f"QUIC: {q['connections']} connection(s), {q['packets_undecrypted']:,} of "
            f"{q['packets']:,} packets not decrypted"
            + (f" ({_count_map(q['undecrypted_by_reason'])})" if q["undecrypted_by_reason"]
               else "")
        )
        if q["undecrypted_by_reason"].get("no-keys"):
            lines.append("  fix: give the client's SSLKEYLOGFILE with --keylog FILE "
                         "(summary of the capture, or `msgcap dissect --keylog`)")
    console.print("[bold]not decoded[/]: " + "\n".join(lines))


def exit_status(s: dict[str, Any]) -> int:
    return {"clean": 0, "degraded": 1}.get(s["status"], 2)


def summary_json(s: dict[str, Any]) -> str:
    """``--json``: every value passes the redaction gate before it is escaped."""
    from dissectors.redaction import redact_values

    return json.dumps(redact_values(s), indent=1, default=str)



# ------------------------------------------------------------------------ command line


def stdout_console(quiet: bool = False):
    """Console for results on stdout (``analyzer.cliutil.out_console``: the terminal's
    width, or a readable one in a pipe; a closed pipe ends the command quietly)."""
    return out_console()


def stderr_console(quiet: bool = False):
    from rich.console import Console

    return Console(stderr=True, quiet=quiet, highlight=False, soft_wrap=True)


def run_summary(args) -> int:
    """`msgcap summary SOURCE [--json] [--top N] [--keylog FILE] [--decode-as P=N]`."""
    try:
        if args.top < 1:
            raise UserError(f"--top {args.top} shows nothing", "give --top 1 or more")
        with open_source(args.source, keylog=args.keylog,
                         decode_as=parse_decode_as(args.decode_as), quiet=args.quiet) as ds:
            s = build_summary(ds, top=args.top)
    except UserError as exc:
        return print_user_error(exc)
    if args.json:
        from dissectors.redaction import write_gated

        write_gated(summary_json(s) + "\n")
    else:
        render_summary(s, stdout_console(), getattr(args, "time", "utc"))
    return exit_status(s)
