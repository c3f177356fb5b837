"""Conversation views over a dataset: the decoded transcript of one flow (`msgcap follow
--decoded`) and terminal ladder diagrams (`msgcap ladder`).

Strategy: rows of every message table of one flow are read (pyarrow filter on
``flow_id`` and ``capture``), rows decoded from inside another row's payload (STAN and
Liftbridge in NATS, Pulsar messages in their frame, Felix messages in their frame) are
hung under that row, anomalies of the flow are interleaved, and the result is sorted by
capture time (then stream offset).  The ladder of one message follows it across
connections with the pairings of ``analyzer.summary`` (publish -> deliveries,
request -> reply), so both views and `summary` agree on what belongs together.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from rich.console import Console
from rich.control import strip_control_codes
from rich.text import Text

from analyzer.cliutil import flow_ids_text, format_ts, time_label
from analyzer.summary import (
    MESSAGE_KIND,
    MSGS,
    PUBS,
    Dataset,
    UserError,
    _rows,
    deliveries,
    nats_request_reply,
    ts_text,
)
from dissectors.tables import ENVELOPE_NAMES, PARTITION_KEY

__all__ = [
    "Msg",
    "find_record",
    "flow_info",
    "flow_messages",
    "message_path",
    "render_flow_ladder",
    "render_path_ladder",
    "render_transcript",
]

PREVIEW_BYTES = 48  # payload bytes shown per line
LABEL_FIELDS = 6  # key fields shown per line at most

# (column, label or None for the column name) shown per table, in this order
KEY_FIELDS: dict[str, list[tuple[str, str | None]]] = {
    "nats": [
        ("subject", None), ("reply_to", "reply"), ("sid", None), ("queue_group", "queue"),
        ("max_msgs", "max"), ("payload_len", "len"), ("status_code", "status"),
        ("status_description", None), ("error", None), ("server_name", "server"),
        ("server_version", "version"), ("client_name", "name"), ("client_lang", "lang"),
        ("client_version", "version"),
    ],
    "pulsar_commands": [
        ("topic", None), ("request_id", "req"), ("producer_id", "producer"),
        ("consumer_id", "consumer"), ("sequence_id", "seq"), ("subscription", "sub"),
        ("ledger_id", "ledger"), ("entry_id", "entry"), ("message_permits", "permits"),
        ("error_code", "error"), ("crc_status", "crc"),
    ],
    "pulsar_messages": [
        ("topic", None), ("producer_name", "producer"), ("sequence_id", "seq"),
        ("ledger_id", "ledger"), ("entry_id", "entry"), ("batch_index", "batch"),
        ("compression", None), ("payload_len", "len"),
    ],
    "stan": [
        ("channel", None), ("subject", None), ("guid", None), ("sequence", "seq"),
        ("client_id", "client"), ("error", None), ("data_len", "len"),
    ],
    "liftbridge": [
        ("stream", None), ("subject", None), ("partition", None), ("offset", None),
        ("correlation_id", "corr"), ("ack_error", "error"), ("value_len", "len"),
    ],
    "liftbridge_entries": [("offset", None), ("leader_epoch", "epoch"), ("value_len", "len")],
    "felix": [
        ("stream", None), ("request_id", "req"), ("subscription_id", "sub"), ("offset", None),
        ("ack_status", "ack"), ("error_code", "error"), ("length", "len"),
    ],
    "felix_messages": [
        ("stream", None), ("key", None), ("offset", None), ("request_id", "req"),
        ("payload_len", "len"),
    ],
    "quic_packets": [
        ("packet_number", "pn"), ("frame_types", "frames"), ("undecrypted_reason", "encrypted"),
        ("length", "len"),
    ],
    "nats_cluster": [
        ("link", None), ("origin", None), ("account", None), ("gateway_cmd", "cmd"),
        ("subject", None), ("reply_to", "reply"), ("queue", None), ("queues", None),
        ("queue_weight", "weight"), ("payload_len", "len"), ("server_name", "server"),
        ("gateway", None), ("cluster", None), ("error", None), ("compression", None),
    ],
}
# tables no pairing of ``analyzer.summary`` reads (not in MESSAGE_KIND) whose rows are
# still named by a column here rather than by their first string column
TRANSCRIPT_KIND = {"nats_cluster": "op"}
PREVIEW_COLUMN = {
    "nats": ("payload", "json_raw"),
    "pulsar_messages": ("payload",),
    "stan": ("data",),
    "liftbridge": ("value",),
    "liftbridge_entries": ("value",),
    "felix": ("json",),
    "felix_messages": ("payload",),
    "nats_cluster": ("payload", "json_raw"),
}
# columns every table has (the declared envelope, the partition key): never a row's label
ENVELOPE = ENVELOPE_NAMES | {PARTITION_KEY}


@dataclass(slots=True)
class Msg:
    table: str
    record_id: int | None
    parent_record_id: int | None
    ts_ns: int
    ts_last_ns: int
    direction: str | None
    kind: str
    fields: list[tuple[str, str]]
    preview: str | None
    frame: int | None
    offset: int | None
    stream_id: int | None = None
    anomaly: bool = False
    children: list[Msg] = field(default_factory=list)

    def label(self, max_fields: int = LABEL_FIELDS) -> str:
        parts = [self.kind]
        parts += [f"{k}={v}" for k, v in self.fields[:max_fields]]
        return " ".join(parts)


def preview(value: Any, limit: int = PREVIEW_BYTES) -> str | None:
    """Printable preview of bytes or text: ASCII as is, \\r \\n \\t escaped, other bytes
    as \\xNN; cut at ``limit`` bytes with an ellipsis."""
    if value is None:
        return None
    data = value.encode("utf-8", "replace") if isinstance(value, str) else bytes(value)
    out = []
    for b in data[:limit]:
        if b == 0x0D:
            out.append("\\r")
        elif b == 0x0A:
            out.append("\\n")
        elif b == 0x09:
            out.append("\\t")
        elif b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    text = "".join(out)
    return f'"{text}"' + ("…" if len(data) > limit else "")


def _fmt(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    if isinstance(v, bytes):
        return preview(v, 16) or ""
    return str(v)


def _kind(table: str, row: dict) -> str:
    col = MESSAGE_KIND.get(table) or TRANSCRIPT_KIND.get(table)
    value = row.get(col) if col else None
    if table == "felix" and not value:
        value = row.get("kind")
    if table == "liftbridge" and not value:
        value = "plain" if row.get("magic_ok") is False else f"type{row.get('msg_type_code')}"
    if table == "liftbridge_entries":
        value = f"entry[{value}]"
    if table == "quic_packets":
        value = f"quic {value}"
    if value is None:  # a plugin's table: its first non-envelope string column
        for k, v in row.items():
            if k not in ENVELOPE and isinstance(v, str):
                return f"{table}:{v}"
        return table
    prefix = {"nats": "", "pulsar_commands": "", "quic_packets": ""}.get(table, f"{table} ")
    return f"{prefix}{value}"


def _fields(table: str, row: dict) -> list[tuple[str, str]]:
    spec = KEY_FIELDS.get(table)
    if spec is None:  # unknown table: a few non-null scalar columns
        spec = [(k, None) for k, v in row.items()
                if k not in ENVELOPE and v is not None and not isinstance(v, bytes | list | dict)]
        spec = spec[1:LABEL_FIELDS + 1]
    out = []
    for col, label in spec:
        v = row.get(col)
        if v is None or v == [] or v == "":
            continue
        if table == "quic_packets" and col == "undecrypted_reason" and row.get("decrypted"):
            continue
        out.append((label or col, _fmt(v)))
    return out


def _preview_of(table: str, row: dict) -> str | None:
    decoded = row.get("payload_decoded")  # dissect --decode / --schema (dissectors.payload)
    if decoded is not None:
        cut = decoded if len(decoded) <= 4 * PREVIEW_BYTES else decoded[:4 * PREVIEW_BYTES] + "…"
        return f"{row.get('payload_decoder')} {cut}"
    for col in PREVIEW_COLUMN.get(table, ()):
        v = row.get(col)
        if v is not None and (table != "nats" or col != "json_raw" or row.get("op") in
                              ("INFO", "CONNECT")):
            return preview(v)
    return None


def _capture_filter(capture_id: str | None):
    return pads.field("capture") == capture_id if capture_id else None


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def flow_info(ds: Dataset, flow_id: int, capture_id: str | None = None) -> dict[str, Any]:
    """The ``flows`` row of a flow (plus ``client_name`` when a CONNECT named it)."""
    if not ds.has("flows"):
        raise UserError(f"{ds.origin} has no flows table",
                        "give a dataset written by `msgcap dissect`, or the capture itself")
    rows = _read_rows(ds, "flows", pads.field("flow_id") == flow_id)
    if capture_id:
        rows = [r for r in rows if r["capture_id"].startswith(capture_id)]
    if not rows:
        # the ids of the capture(s) the user means, not of the whole dataset
        all_flows = ds.read("flows", ["capture_id", "flow_id"])
        pairs = zip(all_flows["capture_id"].to_pylist(), all_flows["flow_id"].to_pylist(),
                    strict=True) if all_flows is not None else ()
        shown = flow_ids_text(f for c, f in pairs if not capture_id or c.startswith(capture_id))
        raise UserError(
            f"no flow {flow_id} in {ds.origin}" + (f" capture {capture_id}" if capture_id else "")
            + f" (flow ids: {shown})",
            "list the flows with `msgcap flows CAPTURE` or `msgcap summary`",
        )
    if len(rows) > 1:
        caps = ", ".join(sorted(r["capture_id"] for r in rows))
        raise UserError(
            f"flow {flow_id} exists in {len(rows)} captures ({caps})",
            "pick one with --capture ID",
        )
    info = rows[0]
    names = _client_names(ds, info["capture_id"], [flow_id])
    info["client_name"] = names.get(flow_id)
    return info


def _client_names(ds: Dataset, capture_id: str, flow_ids: list[int]) -> dict[int, str]:
    nats = ds.read("nats", ["capture_id", "flow_id", "op", "client_name"],
                   where=(pads.field("capture") == capture_id) & (pads.field("op") == "CONNECT"))
    if nats is None or "client_name" not in nats.column_names:
        return {}
    out = {}
    for _cap, flow, _op, name in _rows(nats, ["capture_id", "flow_id", "op", "client_name"]):
        if flow in flow_ids and name and flow not in out:
            out[flow] = name
    return out


def _row_msg(table: str, row: dict) -> Msg:
    ts_ns = row.get("ts_first") or 0
    tl_ns = row.get("ts_last") or ts_ns
    return Msg(
        table=table,
        record_id=row.get("record_id"),
        parent_record_id=row.get("parent_record_id"),
        ts_ns=ts_ns,
        ts_last_ns=tl_ns,
        direction=row.get("direction"),
        kind=_kind(table, row),
        fields=_fields(table, row),
        preview=_preview_of(table, row),
        frame=row.get("frame_first"),
        offset=row.get("offset_start"),
        stream_id=row.get("stream_id"),
    )


def _read_rows(ds: Dataset, table: str, where, among: tuple[str, pa.Array] | None = None
               ) -> list[dict]:
    """Rows of ``table`` matching ``where`` as dicts (timestamps as ns); ``among``: only
    those whose column is one of the ids given (``Dataset.read_ids``)."""
    t = ds.read(table, where=where) if among is None else ds.read_ids(table, *among, where)
    if t is None or t.num_rows == 0:
        return []
    cols = [c for c in t.column_names if pa.types.is_timestamp(t[c].type)]
    for c in cols:
        t = t.set_column(t.column_names.index(c), c, pc.cast(t[c], pa.int64()))
    return t.to_pylist()


def message_tables(ds: Dataset) -> list[str]:
    return [n for n in ds.tables() if n not in ("flows", "anomalies")]


def flow_messages(ds: Dataset, info: dict[str, Any], anomalies: bool = True) -> list[Msg]:
    """The decoded rows of one flow in time order, children attached to their parents."""
    where = (pads.field("capture") == info["capture_id"]) & (
        pads.field("flow_id") == info["flow_id"])
    by_table: dict[str, list[Msg]] = {}
    for table in message_tables(ds):
        if "flow_id" not in ds.columns(table):
            continue
        rows = _read_rows(ds, table, where)
        if rows:
            by_table[table] = [_row_msg(table, r) for r in rows]
    if len(by_table) > 1:  # QUIC packets only when nothing above QUIC was decoded
        by_table.pop("quic_packets", None)
    msgs = [m for lst in by_table.values() for m in lst]
    by_id = {m.record_id: m for m in msgs}
    top: list[Msg] = []
    for m in msgs:
        parent = by_id.get(m.parent_record_id) if m.parent_record_id is not None else None
        if parent is not None:
            parent.children.append(m)
        else:
            top.append(m)
    if anomalies:
        top += [_anomaly_msg(r) for r in _read_rows(ds, "anomalies", where)]
    top.sort(key=lambda m: (m.ts_ns, m.offset if m.offset is not None else -1, m.record_id or 0))
    for m in top:
        m.children.sort(key=lambda c: (c.record_id or 0))
    return top


_ORDER_COLUMNS = ("record_id", "parent_record_id", "ts_first", "offset_start")


class FlowHead(NamedTuple):
    """``flow_head``'s answer."""

    messages: list[Msg]  # the first top-level messages, each with its children
    total: int  # the flow's top-level messages (its anomalies too when asked for)
    anomalies: int  # the flow's anomaly rows (0 when not asked for)


def flow_head(ds: Dataset, info: dict[str, Any], n: int, anomalies: bool = False
              ) -> FlowHead:
    """The first ``n`` top-level messages of one flow in ``flow_messages``' order (its
    anomalies among them when ``anomalies``), each with its children (one level: a
    carrier's carried messages), how many top-level messages the flow has, and how many
    anomalies.

    Why: a sequence diagram draws a few dozen arrows (the report's, ``msgcap ladder``'s
    ``--limit``), and reading a bulk flow whole (as ``flow_messages`` does for a
    transcript) made hundreds of thousands of dicts of every column: ``msgcap report`` of
    a 1 GB bulk NATS recording's dataset peaked at 16.7 GB.  Here only the ordering
    columns of the flow are read whole (and its anomalies, when asked for); full rows only
    for the chosen messages and their children."""
    where = (pads.field("capture") == info["capture_id"]) & (
        pads.field("flow_id") == info["flow_id"])
    keys: dict[str, pa.Table] = {}
    for table in message_tables(ds):
        if "flow_id" not in ds.columns(table):
            continue
        t = ds.read(table, list(_ORDER_COLUMNS), where)
        if t is not None and t.num_rows:
            keys[table] = t
    if len(keys) > 1:  # QUIC packets only when nothing above QUIC was decoded
        keys.pop("quic_packets", None)
    flagged = [_anomaly_msg(r) for r in _read_rows(ds, "anomalies", where)] if anomalies else []
    if not keys and not flagged:
        return FlowHead([], 0, 0)
    ids = pa.chunked_array([t["record_id"] for t in keys.values()], pa.int64())
    names = [*keys, "anomalies"]
    tops = []
    for i, t in enumerate(keys.values()):
        parents = t["parent_record_id"] if "parent_record_id" in t.column_names else None
        top = t if parents is None else t.filter(
            pc.or_(pc.is_null(parents), pc.invert(pc.is_in(parents, value_set=ids))))
        tops.append(_order_keys(i, top["record_id"], _column(top, "ts_first"),
                                _column(top, "offset_start")))
    tops.append(_order_keys(len(keys), pa.array([m.record_id for m in flagged], pa.int64()),
                            pa.array([m.ts_ns for m in flagged], pa.int64()),
                            pa.array([m.offset for m in flagged], pa.int64())))
    # (a stable sort of messages then anomalies: ``flow_messages``' order, ties included)
    order = pa.concat_tables(tops).sort_by(
        [("ts", "ascending"), ("offset", "ascending"), ("rid", "ascending")])
    first = order.slice(0, n)
    picked = list(zip(first["table"].to_pylist(), first["record_id"].to_pylist(),
                      first["row"].to_pylist(), strict=True))
    chosen = pa.array([r for i, r, _ in picked if names[i] != "anomalies" and r is not None],
                      pa.int64())
    msgs: dict[int, Msg] = {}
    for i in sorted({i for i, _, _ in picked if names[i] != "anomalies"}):
        rows = _read_rows(ds, names[i], where, ("record_id", chosen))
        msgs.update((r["record_id"], _row_msg(names[i], r)) for r in rows)
    head = [flagged[row] if names[i] == "anomalies" else msgs[rid] for i, rid, row in picked]
    for table, t in keys.items():
        if "parent_record_id" not in t.column_names:
            continue
        for r in _read_rows(ds, table, where, ("parent_record_id", chosen)):
            parent = msgs.get(r["parent_record_id"])
            if parent is not None:
                parent.children.append(_row_msg(table, r))
    for m in head:
        m.children.sort(key=lambda c: (c.record_id or 0))
    return FlowHead(head, order.num_rows, len(flagged))


def _column(t: pa.Table, name: str) -> Any:
    """A column of the ordering keys as int64 (timestamps as ns), all null where absent."""
    if name not in t.column_names:
        return pa.nulls(t.num_rows, pa.int64())
    return pc.cast(t[name], pa.int64())


def _order_keys(table: int, record_ids: Any, ts: Any, offsets: Any) -> pa.Table:
    """``flow_messages``' sort key of each top-level message (``ts or 0``, ``offset`` or
    -1, ``record_id or 0``), with where it came from."""
    n = len(record_ids)
    return pa.table({
        "table": pa.repeat(pa.scalar(table, pa.int32()), n),
        "row": pa.array(range(n), pa.int64()),
        "record_id": record_ids,
        "ts": pc.fill_null(ts, 0),
        "offset": pc.fill_null(offsets, -1),
        "rid": pc.fill_null(record_ids, 0),
    })


def _anomaly_msg(r: dict) -> Msg:
    return Msg("anomalies", r.get("record_id"), None, r.get("ts") or 0, r.get("ts") or 0,
               r.get("direction"), r["kind"], [("detail", r["detail"])], None, r.get("frame"),
               r.get("offset"), anomaly=True)


# ------------------------------------------------------------------------ transcript


def _endpoint(info: dict, side: str) -> str:
    return f"{info[f'{side}_ip']}:{info[f'{side}_port']}"


def flow_title(info: dict) -> str:
    name = f" ({info['client_name']})" if info.get("client_name") else ""
    return (
        f"flow {info['flow_id']} {info['transport']} {_endpoint(info, 'client')}{name} ⇄ "
        f"{_endpoint(info, 'server')} [{info.get('protocol') or 'unclaimed'}], capture "
        f"{info['capture_id']}, from {ts_text(info['ts_first'])}"
    )


_CLOCK_NOTE = {"utc": "time is UTC", "local": "time is local", "epoch": "time is epoch s",
               "relative": "time"}


def render_transcript(info: dict, msgs: list[Msg], console: Console,
                      time_mode: str = "utc") -> None:
    """One line per decoded message: time, +seconds, direction, op, key fields, preview.

    Header lines are not wrapped (a transcript line is as long as its message)."""
    t0 = info["ts_first"]
    console.print(Text(flow_title(info), style="bold"), soft_wrap=True)
    n = sum(1 for m in msgs if not m.anomaly)
    console.print(Text(f"{n} decoded messages, {len(msgs) - n} anomalies; "
                       f"{_CLOCK_NOTE.get(time_mode, 'time')}, +s "
                       "from the flow's first packet; C→S client to server", style="dim"),
                  soft_wrap=True)
    lines = (parts for m in msgs for parts in _message_lines(m, t0, time_mode))
    if console.is_terminal:  # (styled by rich, a line at a time)
        for parts in lines:
            line = Text(no_wrap=True, overflow="ellipsis")
            for text, style in parts:
                line.append(text, style=style)
            console.print(line, soft_wrap=True)
        return
    # a file or a pipe: the characters rich writes there for these lines (no styles, no
    # wrapping, control codes stripped, tabs expanded), written a chunk at a time; rich
    # line by line was ~250 us a line (a 345,701-message flow: 98 s)
    chunk: list[str] = []
    for parts in lines:
        chunk.append(strip_control_codes("".join(t for t, _ in parts)).expandtabs(8) + "\n")
        if len(chunk) >= _PRINT_CHUNK:
            console.file.write("".join(chunk))
            chunk.clear()
    console.file.write("".join(chunk))


_PRINT_CHUNK = 1024
"""Transcript lines written to a file or pipe at once (each write passes the secrets
gate, ``dissectors.redaction``)."""


def _clock(ns: int, time_mode: str) -> str:
    """The first column of a transcript line: time of day (UTC or local), epoch
    seconds, or nothing for ``relative`` (the +s column is there already)."""
    if not ns:
        return "?"
    if time_mode == "relative":
        return ""
    text = format_ts(ns, time_mode)
    return text if time_mode == "epoch" else text[11:26]


def _message_lines(m: Msg, t0: int, time_mode: str) -> Iterator[list[tuple[str, str]]]:
    """The transcript lines of a message and its children, each as (text, style) parts."""
    yield _line_parts(m, t0, "", time_mode)
    for c in m.children:
        yield _line_parts(c, t0, "  ↳ ", time_mode)


def _line_parts(m: Msg, t0: int, indent: str, time_mode: str) -> list[tuple[str, str]]:
    clock = _clock(m.ts_ns, time_mode)
    arrow = {"c2s": "C→S", "s2c": "S→C"}.get(m.direction or "", " · ")
    parts = [(f"{clock} ", "dim")] if clock else []
    parts.append((f"{(m.ts_ns - t0) / 1e9:+11.6f} ", "dim"))
    parts.append((f"{arrow} ", "cyan" if m.direction == "c2s" else "magenta"))
    if m.anomaly:
        parts.append((f"{indent}!! {m.kind} ", "bold red"))
        parts.append((m.fields[0][1] if m.fields else "", "red"))
        return parts
    parts.append((f"{indent}{m.kind:<10}", "bold"))
    for k, v in m.fields[:LABEL_FIELDS + 2]:
        parts.append((f" {k}=", "dim"))
        parts.append((v, ""))
    if m.preview is not None:
        parts.append((f"  {m.preview}", "green"))
    return parts


# ------------------------------------------------------------------------ ladders


@dataclass(slots=True)
class Step:
    src: int  # lane index
    dst: int
    label: str
    gutter: str
    style: str = ""
    note: str = ""
    t_ns: int = 0  # for ordering the steps of a message path


def _draw(lanes: list[str], steps: list[Step], console: Console, gutter_title: str,
          width: int | None = None) -> None:
    width = max(60, width or console.width or 100)
    if any(s.note for s in steps):
        width = max(60, width - max(len(s.note) for s in steps) - 2)
    gutter = max(12, max((len(s.gutter) for s in steps), default=0) + 2, len(gutter_title) + 2)
    n = len(lanes)
    span = (width - gutter - 2) / max(1, n - 1) if n > 1 else width - gutter - 2
    pos = [gutter + 1 + round(i * span) for i in range(n)]
    head = [" "] * width
    title = list(gutter_title.ljust(gutter))
    head[:gutter] = title
    spans = _lane_spans(lanes, pos, gutter, width)
    if spans is None:  # names would overlap or be cut: numbered lanes and a legend
        tags = [f"[{i + 1}]" for i in range(n)]
        for tag, name in zip(tags, lanes, strict=True):
            console.print(Text(f"{tag} {name}", style="bold"), soft_wrap=True)
        spans = _lane_spans(tags, pos, gutter, width) or []
    for start, name in spans:
        head[start:start + len(name)] = list(name)
    console.print(Text("".join(head).rstrip(), style="bold"), soft_wrap=True)
    bar = [" "] * width
    for p in pos:
        bar[p] = "│"
    console.print(Text("".join(bar).rstrip(), style="dim"), soft_wrap=True)
    for s in steps:
        chars = [" "] * width
        for p in pos:
            chars[p] = "│"
        chars[:gutter] = list(s.gutter.rjust(gutter - 2).ljust(gutter))
        a, b = pos[s.src], pos[s.dst]
        lo, hi = min(a, b), max(a, b)
        for x in range(lo + 1, hi):
            chars[x] = "┼" if x in pos else "─"
        if b > a:
            chars[hi - 1] = "▶"
        elif b < a:
            chars[lo + 1] = "◀"
        room = hi - lo - 6  # label between the heads: ◀ at lo+1, ▶ at hi-1, a blank each
        label = s.label if len(s.label) <= room else s.label[: max(0, room - 1)] + "…"
        if label and room > 0:
            start = lo + 3 + max(0, (room - len(label)) // 2)
            chars[start - 1:start + len(label) + 1] = list(f" {label} ")
        text = Text("".join(chars).rstrip(), no_wrap=True)
        text.stylize("dim", 0, gutter)
        text.stylize(s.style or ("cyan" if b > a else "magenta"), lo, hi + 1)
        if s.note:
            text.append(f"  {s.note}", style="dim")
        console.print(text, soft_wrap=True)


def _lane_spans(names: list[str], pos: list[int], gutter: int,
                width: int) -> list[tuple[int, str]] | None:
    """Where each lane's name starts above its line (the first left-aligned, the last
    right-aligned, the others centred), or None when two would overlap or one does not
    fit whole: the ladder then prints a legend rather than fragments of names."""
    n = len(names)
    out: list[tuple[int, str]] = []
    for i, name in enumerate(names):
        start = max(gutter, min(width - len(name), pos[i] - len(name) // 2))
        if i == 0:
            start = max(gutter, pos[i] - 1)
        if i == n - 1 and n > 1:
            start = min(width - len(name), pos[i] - len(name) + 1)
        if start < gutter or start + len(name) > width:
            return None
        if out and start <= out[-1][0] + len(out[-1][1]) + 1:  # two blanks between names
            return None
        out.append((start, name))
    return out


def render_flow_ladder(info: dict, msgs: list[Msg], console: Console,
                       width: int | None = None, time_mode: str = "relative") -> None:
    """client ↔ server arrows of one flow, one per message of ``msgs``.  The gutter
    shows seconds into the flow, or the ``--time`` clock asked for."""
    t0 = info["ts_first"]

    def when(ns: int) -> str:
        if time_mode == "relative":
            return f"{(ns - t0) / 1e9:.6f}"
        return _clock(ns, time_mode)

    console.print(Text(flow_title(info), style="bold"), soft_wrap=True)
    client = f"client {_endpoint(info, 'client')}" + (
        f" ({info['client_name']})" if info.get("client_name") else "")
    server = f"server {_endpoint(info, 'server')}"
    steps = []
    prev_ts: int | None = None
    for m in msgs:
        if m.anomaly:
            steps.append(Step(0, 0, "", when(m.ts_ns), "red",
                              note=f"!! {m.kind}: {m.fields[0][1] if m.fields else ''}"))
            continue
        label = m.kind
        if m.children:
            label += " [" + ", ".join(c.kind for c in m.children[:2]) + (
                ", …" if len(m.children) > 2 else "") + "]"
        label += "".join(f" {k}={v}" for k, v in m.fields[:3])
        delta = "" if prev_ts is None else f" Δ{(m.ts_ns - prev_ts) / 1e6:.3f}ms"
        prev_ts = m.ts_ns
        src, dst = (0, 1) if m.direction == "c2s" else (1, 0)
        steps.append(Step(src, dst, label, when(m.ts_ns), note=delta.strip()))
    _draw([client, server], steps, console, time_label(time_mode), width)


# --- one message's path -----------------------------------------------------------------


def find_record(ds: Dataset, record_id: int, capture_id: str | None = None) -> tuple[str, dict]:
    """(table, row) of the row with this record id; UserError if none or ambiguous."""
    hits: list[tuple[str, dict]] = []
    where = pads.field("record_id") == record_id
    for table in message_tables(ds):
        if "record_id" not in ds.columns(table):
            continue
        for r in _read_rows(ds, table, where):
            if capture_id and not r["capture_id"].startswith(capture_id):
                continue
            hits.append((table, r))
    if not hits:
        raise UserError(
            f"no record {record_id} in {ds.origin}"
            + (f" capture {capture_id}" if capture_id else ""),
            "take a record_id from the nats / pulsar_messages tables (e.g. `msgcap follow "
            "CAPTURE --flow ID --decoded` shows flows; record ids are in the Parquet rows)",
        )
    caps = sorted({r["capture_id"] for _t, r in hits})
    if len(caps) > 1:
        raise UserError(f"record {record_id} exists in {len(caps)} captures ({', '.join(caps)})",
                        "pick one with --capture ID")
    return hits[0]


def _lane_name(ds: Dataset, cap: str, flow_id: int, names: dict[int, str]) -> str:
    flows = ds.read("flows", ["capture_id", "flow_id", "client_ip", "client_port"],
                    where=(pads.field("capture") == cap) & (pads.field("flow_id") == flow_id))
    ep = ""
    if flows is not None and flows.num_rows:
        r = flows.to_pylist()[0]
        ep = f"{r['client_ip']}:{r['client_port']}"
    name = names.get(flow_id)
    return f"{name} {ep} f{flow_id}" if name else f"{ep} f{flow_id}"


def _server_name(ds: Dataset, cap: str, flow_id: int, what: str) -> str:
    flows = ds.read("flows", ["capture_id", "flow_id", "server_ip", "server_port"],
                    where=(pads.field("capture") == cap) & (pads.field("flow_id") == flow_id))
    if flows is None or flows.num_rows == 0:
        return what
    r = flows.to_pylist()[0]
    return f"{what} {r['server_ip']}:{r['server_port']}"


def _ms(ns: int) -> str:
    return f"+{ns / 1e6:.3f} ms"


def message_path(ds: Dataset, record_id: int, capture_id: str | None = None
                 ) -> tuple[str, list[str], list[Step], list[str]]:
    """(title, lanes, steps, notes) of one message's way publisher -> server ->
    subscribers (and back to the requester for a request)."""
    table, row = find_record(ds, record_id, capture_id)
    cap = row["capture_id"]
    if table in ("stan", "liftbridge", "liftbridge_entries") and row.get("parent_record_id"):
        parent = row["parent_record_id"]
        if table == "liftbridge_entries":  # entry -> liftbridge row -> nats row
            t2, r2 = find_record(ds, parent, cap)
            parent = r2.get("parent_record_id") or parent
        table, row = find_record(ds, parent, cap)
    if table == "nats":
        return _nats_path(ds, row)
    if table in ("pulsar_messages", "pulsar_commands"):
        return _pulsar_path(ds, table, row)
    raise UserError(
        f"record {record_id} is a {table} row; message paths are drawn for NATS and Pulsar "
        "messages (and STAN / Liftbridge rows carried in NATS)",
        f"draw its connection instead with `msgcap ladder ... --flow {row.get('flow_id')}`",
    )


def _nats_path(ds: Dataset, row: dict) -> tuple[str, list[str], list[Step], list[str]]:
    cap = row["capture_id"]
    notes: list[str] = []
    dl = [d for d in deliveries(ds) if d.protocol == "nats" and d.capture_id == cap]
    pub_id = row["record_id"]
    if row["op"] in MSGS:
        hit = next((d for d in dl if d.delivery_record_id == row["record_id"]), None)
        if hit is None:
            pub_id = None
            notes.append("the publish of this delivery is not in the capture (or its payload "
                         "was cut): only the delivery is drawn")
        else:
            pub_id = hit.pub_record_id
    elif row["op"] not in PUBS:
        raise UserError(
            f"record {row['record_id']} is a NATS {row['op']}, not a message",
            "give the record id of a PUB, HPUB, MSG or HMSG row",
        )
    nats = ds.read("nats", where=pads.field("capture") == cap)
    by_id = {r["record_id"]: r for r in _table_rows(nats)}
    names = _client_names(ds, cap, sorted({r["flow_id"] for r in by_id.values()}))
    t0 = by_id[pub_id]["ts_first"] if pub_id is not None else row["ts_first"]
    lanes: list[str] = []
    lane_of: dict[int, int] = {}

    def lane(flow_id: int) -> int:
        if flow_id not in lane_of:
            lane_of[flow_id] = len(lanes)
            lanes.append(_lane_name(ds, cap, flow_id, names))
        return lane_of[flow_id]

    steps: list[Step] = []
    server_flow = row["flow_id"]
    if pub_id is not None:
        pub = by_id[pub_id]
        server_flow = pub["flow_id"]
        lane(pub["flow_id"])
        lanes.append(_server_name(ds, cap, pub["flow_id"], "nats-server"))
        server = 1
        lab = f"{pub['op']} {pub['subject']}" + (f" reply={pub['reply_to']}"
                                                 if pub.get("reply_to") else "")
        steps.append(Step(lane_of[pub["flow_id"]], server, lab + f" len={pub['payload_len']}",
                          _ms(0)))
        mine = sorted((d for d in dl if d.pub_record_id == pub_id),
                      key=lambda d: (d.latency_ns, d.delivery_record_id))
        if not mine and not pub.get("reply_to"):
            notes.append("no subscriber in the capture received it")
        for d in mine:
            r = by_id[d.delivery_record_id]
            steps.append(Step(server, lane(d.delivery_flow_id),
                              f"{r['op']} {r['subject']} sid={r['sid']}", _ms(d.latency_ns),
                              t_ns=d.latency_ns))
        if pub.get("reply_to"):
            _reply_steps(ds, pub, by_id, lane, server, steps, notes, t0)
        steps.sort(key=lambda st: st.t_ns)
        title = (f"{pub['op']} {pub['subject']} (record {pub_id}, capture {cap}): "
                 f"{len(mine)} deliveries")
    else:
        lanes.append(_server_name(ds, cap, server_flow, "nats-server"))
        lane(row["flow_id"])
        steps.append(Step(0, 1, f"{row['op']} {row['subject']} sid={row['sid']}", _ms(0)))
        title = f"{row['op']} {row['subject']} (record {row['record_id']}, capture {cap})"
    return title, lanes, steps, notes


def _table_rows(t: pa.Table | None) -> list[dict]:
    if t is None:
        return []
    for c in [c for c in t.column_names if pa.types.is_timestamp(t[c].type)]:
        t = t.set_column(t.column_names.index(c), c, pc.cast(t[c], pa.int64()))
    return t.to_pylist()


def _reply_steps(ds, pub, by_id, lane, server, steps, notes, t0) -> None:
    pair = next((p for p in nats_request_reply(ds) if p.record_id == pub["record_id"]
                 and p.capture_id == pub["capture_id"]), None)
    # responders: PUB/HPUB to the reply subject from other connections, from the request
    # until the next request with the same reply subject on its connection
    later = [r["ts_first"] for r in by_id.values()
             if r["op"] in PUBS and r["direction"] == "c2s" and r["flow_id"] == pub["flow_id"]
             and r.get("reply_to") == pub["reply_to"] and r["ts_first"] > pub["ts_first"]]
    until = min(later) if later else None
    responders = sorted(
        (r for r in by_id.values() if r["op"] in PUBS and r["direction"] == "c2s"
         and r["subject"] == pub["reply_to"] and r["flow_id"] != pub["flow_id"]
         and r["ts_first"] >= pub["ts_first"] and (until is None or r["ts_first"] < until)),
        key=lambda r: (r["ts_first"], r["record_id"]),
    )[:3]
    for r in responders:
        steps.append(Step(lane(r["flow_id"]), server, f"(reply) {r['op']} {r['subject']} "
                          f"len={r['payload_len']}", _ms(r["ts_first"] - t0),
                          t_ns=r["ts_first"] - t0))
    if pair is None:
        return
    for rid, what in ((pair.first_reply_record_id, "reply"),
                      (pair.no_responders_record_id, "no responders")):
        if rid is None:
            continue
        r = by_id[rid]
        status = f" {r['status_code']} {r.get('status_description') or ''}".rstrip() if r.get(
            "status_code") else ""
        steps.append(Step(server, lane(pub["flow_id"]),
                          f"({what}) {r['op']} {r['subject']}{status}",
                          _ms(r["ts_last"] - t0), style="green" if what == "reply" else "yellow",
                          t_ns=r["ts_last"] - t0))
    if not pair.answered and not pair.no_responders:
        notes.append("the request was not answered in the capture")
    elif pair.latency_ns is not None:
        notes.append(f"request → reply latency {pair.latency_ns / 1e6:.3f} ms "
                     f"({pair.replies} repl{'y' if pair.replies == 1 else 'ies'})")


def _pulsar_path(ds: Dataset, table: str, row: dict):
    cap = row["capture_id"]
    notes: list[str] = []
    pm = _table_rows(ds.read("pulsar_messages", where=pads.field("capture") == cap))
    if table == "pulsar_commands":
        kids = [r for r in pm if r.get("parent_record_id") == row["record_id"]]
        if not kids:
            raise UserError(
                f"record {row['record_id']} is a Pulsar {row['command']} frame without messages",
                "give the record id of a SEND or MESSAGE frame, or of a pulsar_messages row",
            )
        row = kids[0]
    if row["command"] == "MESSAGE":
        send = next((r for r in pm if r["command"] == "SEND" and r["topic"] == row["topic"]
                     and r["producer_name"] == row["producer_name"]
                     and r["sequence_id"] == row["sequence_id"]), None)
        if send is None:
            notes.append("the SEND of this message is not in the capture")
            send = row
        row = send
    key = (row["topic"], row["producer_name"], row["sequence_id"])
    msgs = sorted((r for r in pm if r["command"] == "MESSAGE"
                   and (r["topic"], r["producer_name"], r["sequence_id"]) == key),
                  key=lambda r: (r["ts_last"], r["record_id"]))
    cmds = _table_rows(ds.read("pulsar_commands", where=pads.field("capture") == cap))
    lanes: list[str] = []
    lane_of: dict[int, int] = {}

    def lane(flow_id: int, what: str) -> int:
        if flow_id not in lane_of:
            lane_of[flow_id] = len(lanes)
            lanes.append(_lane_name(ds, cap, flow_id, {}).replace(" f", f" {what} f", 1))
        return lane_of[flow_id]

    t0 = row["ts_first"]
    steps: list[Step] = []
    if row["command"] == "SEND":
        p = lane(row["flow_id"], "producer")
        lanes.append(_server_name(ds, cap, row["flow_id"], "broker"))
        broker = 1
        steps.append(Step(p, broker, f"SEND {row['topic']} seq={row['sequence_id']} "
                          f"len={row['payload_len']}", _ms(0)))
        parent = next((c for c in cmds if c["record_id"] == row.get("parent_record_id")), None)
        if parent is not None:
            rec = next((c for c in cmds if c["command"] in ("SEND_RECEIPT", "SEND_ERROR")
                        and c["flow_id"] == row["flow_id"]
                        and c["producer_id"] == parent["producer_id"]
                        and c["sequence_id"] == parent["sequence_id"]
                        and c["ts_first"] >= parent["ts_first"]), None)
            if rec is not None:
                steps.append(Step(broker, p, f"{rec['command']} ledger={rec['ledger_id']} "
                                  f"entry={rec['entry_id']}", _ms(rec["ts_last"] - t0),
                                  style="green" if rec["command"] == "SEND_RECEIPT" else "red",
                                  t_ns=rec["ts_last"] - t0))
    else:
        lanes.append(_server_name(ds, cap, row["flow_id"], "broker"))
        broker = 0
    for m in msgs:
        c = lane(m["flow_id"], "consumer")
        steps.append(Step(broker, c, f"MESSAGE ledger={m['ledger_id']} entry={m['entry_id']} "
                          f"sub={m.get('subscription')}", _ms(m["ts_last"] - t0),
                          t_ns=m["ts_last"] - t0))
        ack = next((a for a in cmds if a["command"] == "ACK" and a["flow_id"] == m["flow_id"]
                    and a["ts_first"] >= m["ts_first"] and _acks(a, m)), None)
        if ack is not None:
            steps.append(Step(c, broker, f"ACK {ack.get('ack_type') or ''}".rstrip(),
                              _ms(ack["ts_first"] - t0), style="green",
                              t_ns=ack["ts_first"] - t0))
    steps.sort(key=lambda st: st.t_ns)
    if not msgs:
        notes.append("no consumer in the capture received it")
    title = (f"Pulsar {row['topic']} seq={row['sequence_id']} (record {row['record_id']}, "
             f"capture {cap}): {len(msgs)} deliveries")
    return title, lanes, steps, notes


def _acks(ack: dict, msg: dict) -> bool:
    ids = ack.get("message_ids") or [{"ledger_id": ack.get("ledger_id"),
                                      "entry_id": ack.get("entry_id")}]
    want = (msg["ledger_id"], msg["entry_id"])
    for i in ids:
        got = (i.get("ledger_id"), i.get("entry_id"))
        if got == want or (ack.get("ack_type") == "Cumulative" and got >= want):
            return True
    return False


def render_path_ladder(title: str, lanes: list[str], steps: list[Step], notes: list[str],
                       console: Console, width: int | None = None) -> None:
    console.print(Text(title, style="bold"), soft_wrap=True)
    _draw(lanes, steps, console, "latency", width)
    for n in notes:
        console.print(Text(n, style="dim"))


def flow_has_anomalies(msgs: list[Msg]) -> bool:
    return any(m.anomaly for m in msgs)


# ------------------------------------------------------------------------ NDJSON


def msg_objects(info: dict, msgs: list[Msg]) -> Iterator[dict[str, Any]]:
    """One plain-JSON object per message (children after their parent, with its
    record id in ``parent_record_id``), for `follow --decoded --json` and `ladder
    --flow --json`: the same facts as a transcript line, none cut short but the
    payload preview."""
    t0 = info["ts_first"]
    ends = {"c2s": ("client", "server"), "s2c": ("server", "client")}

    def obj(m: Msg) -> dict[str, Any]:
        src, dst = ends.get(m.direction or "", (None, None))
        return {
            "capture_id": info["capture_id"], "flow_id": info["flow_id"],
            "table": m.table, "record_id": m.record_id,
            "parent_record_id": m.parent_record_id, "ts": ts_text(m.ts_ns),
            "ts_ns": m.ts_ns, "rel_s": round((m.ts_ns - t0) / 1e9, 9),
            "direction": m.direction, "from": src, "to": dst, "kind": m.kind,
            "anomaly": m.anomaly, "fields": dict(m.fields), "preview": m.preview,
            "frame": m.frame, "offset": m.offset, "stream_id": m.stream_id,
        }

    for m in msgs:
        yield obj(m)
        for c in m.children:
            yield obj(c)


def step_objects(lanes: list[str], steps: list[Step]) -> Iterator[dict[str, Any]]:
    """One object per arrow of a message's path (`ladder --message --json`)."""
    for st in steps:
        yield {"from": lanes[st.src], "to": lanes[st.dst], "label": st.label,
               "latency": st.gutter.strip(), "latency_ns": st.t_ns, "note": st.note or None}


def write_ndjson(objects: Iterator[dict[str, Any]]) -> None:
    """One JSON object per line on stdout (``jq -c``, ``| head`` and line tools work);
    values pass the redaction gate before they are escaped."""
    import json
    import sys

    from dissectors.redaction import redact_values, write_gated

    for o in objects:
        write_gated(json.dumps(redact_values(o), ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------ command line


def run_follow_decoded(args) -> int:
    """`msgcap follow SOURCE --flow ID --decoded [--capture ID] [--keylog FILE]`."""
    from analyzer.summary import open_source, parse_decode_as, print_user_error, stdout_console

    try:
        with open_source(args.capture, keylog=args.keylog,
                         decode_as=parse_decode_as(args.decode_as), quiet=args.quiet) as ds:
            info = flow_info(ds, args.flow, args.capture_id)
            msgs = flow_messages(ds, info)
            if args.direction != "both":
                msgs = [m for m in msgs if m.direction in (args.direction, None)]
    except UserError as exc:
        return print_user_error(exc)
    if getattr(args, "json", False):
        write_ndjson(msg_objects(info, msgs))
    else:
        render_transcript(info, msgs, stdout_console(), getattr(args, "time", "utc"))
    return 1 if flow_has_anomalies(msgs) else 0


def run_ladder(args) -> int:
    """`msgcap ladder SOURCE (--flow ID | --message RECORD_ID) [--capture ID] [--limit N]`."""
    from analyzer.summary import (
        open_source,
        parse_decode_as,
        print_user_error,
        stderr_console,
        stdout_console,
    )

    console = stdout_console()
    try:
        if args.limit < 0:
            raise UserError(f"--limit {args.limit} is negative", "give 0 (all) or more")
        with open_source(args.source, keylog=args.keylog,
                         decode_as=parse_decode_as(args.decode_as), quiet=args.quiet) as ds:
            if args.message is not None:
                title, lanes, steps, notes = message_path(ds, args.message, args.capture_id)
                if getattr(args, "json", False):
                    write_ndjson(step_objects(lanes, steps))
                else:
                    render_path_ladder(title, lanes, steps, notes, console, width=args.width)
                return 0
            info = flow_info(ds, args.flow, args.capture_id)
            if args.limit:  # (only what is drawn is read: ``flow_head``)
                msgs, total, n_anomalies = flow_head(ds, info, args.limit, anomalies=True)
                flagged = n_anomalies > 0
            else:
                msgs = flow_messages(ds, info)
                total, flagged = len(msgs), flow_has_anomalies(msgs)
    except UserError as exc:
        return print_user_error(exc)
    if getattr(args, "json", False):
        write_ndjson(msg_objects(info, msgs))
        return 1 if flagged else 0
    render_flow_ladder(info, msgs, console, width=args.width,
                       time_mode=getattr(args, "time", "relative"))
    if total > len(msgs):
        stderr_console(args.quiet).print(
            f"[dim]{total - len(msgs)} more messages not drawn (--limit {args.limit}; "
            "--limit 0 for all)[/]")
    return 1 if flagged else 0
