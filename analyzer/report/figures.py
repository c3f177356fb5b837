"""The plots of the HTML report, as plotly figures (``plotly.graph_objects`` only: no
pandas, no plotly express).

Strategy: everything heavy is aggregated with pyarrow before it reaches plotly -- rates
are (series, time bin) group-bys, latency histograms get at most ``MAX_POINTS`` raw
values (a uniform sample beyond that, the CDF is computed on all of them and thinned),
ladders are capped at ``LADDER_MAX_MESSAGES`` arrows per conversation -- so a report of
a large dataset stays a few MB beyond the embedded plotly.js.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc
from plotly.subplots import make_subplots

from analyzer.summary import MSGS, PUBS, Dataset, latency_stats, ts_text
from analyzer.transcript import Msg

MAX_SERIES = 12  # subjects/topics drawn separately in the rate plots; the rest is "other"
TARGET_BINS = 120  # time bins of rate and anomaly plots (their width follows the span)
MAX_POINTS = 20_000  # latency values given to a histogram / CDF trace
LADDER_MAX_MESSAGES = 40  # arrows per conversation in the ladder plot
TEMPLATE = "plotly_white"
_LAYOUT = {"template": TEMPLATE, "margin": {"l": 60, "r": 20, "t": 50, "b": 40}}


def empty_figure(title: str, message: str) -> go.Figure:
    """A figure that says why there is nothing to draw (kept so the page layout is fixed)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font={"size": 15, "color": "#777"},
                       xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_layout(title=title, height=260, xaxis={"visible": False},
                      yaxis={"visible": False}, **_LAYOUT)
    return fig


def bin_width_ns(span_ns: int) -> int:
    """A round bin width (1, 2 or 5 x 10^k ms, at least 10 ms) giving about TARGET_BINS
    bins over ``span_ns`` (so a 3 s sample and a 3 h capture both get readable bars)."""
    want = max(10_000_000, max(1, span_ns) // TARGET_BINS)
    scale = 1_000_000
    while True:
        for m in (1, 2, 5):
            if m * scale >= want:
                return m * scale
        scale *= 10


def active_span_ns(ts: list[int], idle_ns: int = 60_000_000_000) -> int:
    """Time covered by ``ts`` (sorted) not counting pauses longer than ``idle_ns`` (the
    hours between captures of one dataset)."""
    return sum(b - a for a, b in zip(ts, ts[1:], strict=False) if b - a <= idle_ns) or 1


def time_categories(bins: list[int], width_ns: int) -> tuple[list[int], dict[int, str], bool]:
    """The time bins to draw on a category axis: every bin of a burst of activity (empty
    ones too, so a pause shows as a pause) but not the long idle stretches between bursts
    (e.g. between the captures of a dataset) -- a date axis would squeeze the bursts into
    slivers, and plotly's date rangebreaks do not work with bar widths.  Returns (bins,
    label of each bin, whether something was left out)."""
    gap_min = max(20 * width_ns, 60_000_000_000)
    out: list[int] = []
    skipped = False
    for b in sorted(set(bins)):
        if out and b - out[-1] <= gap_min:
            out.extend(range(out[-1] + width_ns, b, width_ns))
        elif out:
            skipped = True
        out.append(b)
    return out, {b: time_label(b, out, width_ns) for b in out}, skipped


def time_label(b: int, bins: list[int], width_ns: int) -> str:
    """HH:MM:SS, with milliseconds for sub-second bins and the date for several days."""
    t = ts_text(b)
    end = 23 if width_ns % 1_000_000_000 else 19
    several_days = ts_text(bins[0])[:10] != ts_text(bins[-1])[:10]
    return (t[5:10] + " " if several_days else "") + t[11:end]


def series_name(subject: str) -> str:
    """Reply inboxes and ack subjects grouped: each one is used once or a few times."""
    for prefix in ("_INBOX.", "_STAN.acks.", "_STAN.subacks."):
        if subject.startswith(prefix):
            return prefix + ">"
    if subject.startswith("$JS.ACK."):
        parts = subject.split(".")
        return ".".join(parts[:4]) + ".>"
    return subject


def _short_topic(topic: str) -> str:
    for prefix in ("persistent://", "non-persistent://"):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return topic


def published_messages(ds: Dataset) -> pa.Table | None:
    """(series, ts, bytes) of every published message: NATS PUB/HPUB by subject, Pulsar
    SEND entries by topic, STAN PubMsg by channel, Liftbridge publishes by stream, Felix
    client messages by stream."""
    parts: list[pa.Table] = []

    def add(t: pa.Table | None, mask, name_col: str, bytes_col: str, prefix: str, fn=None):
        if t is None or t.num_rows == 0 or name_col not in t.column_names:
            return
        if mask is not None:
            t = t.filter(mask)
        t = t.filter(pc.is_valid(t[name_col]))
        if t.num_rows == 0:
            return
        names = t[name_col].to_pylist()
        if fn is not None:
            names = [fn(n) for n in names]
        parts.append(pa.table({
            "series": pa.array([f"{prefix}: {n}" for n in names], pa.string()),
            "ts": pc.cast(t["ts_first"], pa.int64()),
            "bytes": pc.fill_null(pc.cast(t[bytes_col], pa.int64()), 0)
            if bytes_col in t.column_names else pa.array([0] * t.num_rows, pa.int64()),
        }))

    nats = ds.read("nats", ["ts_first", "op", "direction", "subject", "payload_len"])
    if nats is not None and nats.num_rows:
        add(nats, pc.and_(pc.is_in(nats["op"], pa.array(PUBS)), pc.equal(nats["direction"], "c2s")),
            "subject", "payload_len", "nats", series_name)
    pm = ds.read("pulsar_messages", ["ts_first", "command", "topic", "payload_len"])
    if pm is not None and pm.num_rows:
        add(pm, pc.equal(pm["command"], "SEND"), "topic", "payload_len", "pulsar", _short_topic)
    stan = ds.read("stan", ["ts_first", "msg_type", "direction", "channel", "data_len"])
    if stan is not None and stan.num_rows:
        add(stan, pc.and_(pc.equal(stan["msg_type"], "PubMsg"), pc.equal(stan["direction"], "c2s")),
            "channel", "data_len", "stan")
    lb = ds.read("liftbridge", ["ts_first", "msg_type", "direction", "stream", "value_len"])
    if lb is not None and lb.num_rows:
        add(lb, pc.and_(pc.fill_null(pc.equal(lb["msg_type"], "Publish"), False),
                        pc.equal(lb["direction"], "c2s")), "stream", "value_len", "liftbridge")
    fm = ds.read("felix_messages", ["ts_first", "direction", "stream", "payload_len"])
    if fm is not None and fm.num_rows:
        add(fm, pc.equal(fm["direction"], "c2s"), "stream", "payload_len", "felix")
    if not parts:
        return None
    return pa.concat_tables(parts)


def rates_figure(ds: Dataset) -> go.Figure:
    title = "Messages and bytes per second per subject / topic (published)"
    t = published_messages(ds)
    if t is None or t.num_rows == 0:
        return empty_figure(title, "no published messages in this dataset")
    t0 = pc.min(t["ts"]).as_py()
    width = bin_width_ns(active_span_ns(sorted(set(t["ts"].to_pylist()))))
    totals = t.group_by("series").aggregate([([], "count_all")]).sort_by(
        [("count_all", "descending"), ("series", "ascending")])
    keep = totals["series"].to_pylist()[:MAX_SERIES]
    series = pc.if_else(pc.is_in(t["series"], pa.array(keep)), t["series"], "other")
    b = pc.multiply(pc.divide(pc.subtract(t["ts"], t0), width), width)
    g = pa.table({"series": series, "bin": pc.add(b, t0), "bytes": t["bytes"]}).group_by(
        ["series", "bin"]).aggregate([([], "count_all"), ("bytes", "sum")])
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for s, bn, n, by in zip(g["series"].to_pylist(), g["bin"].to_pylist(),
                            g["count_all"].to_pylist(), g["bytes_sum"].to_pylist(), strict=True):
        rows.setdefault(s, []).append((bn, n, by))
    per_s = width / 1e9
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("messages / s", "payload bytes / s"))
    order = [s for s in keep if s in rows] + (["other"] if "other" in rows else [])
    cats, label, skipped = time_categories([p[0] for v in rows.values() for p in v], width)
    for i, s in enumerate(order):
        pts = sorted(rows[s])
        x = [label[p[0]] for p in pts]
        color = _color(i)
        fig.add_trace(go.Bar(x=x, y=[p[1] / per_s for p in pts], name=s, legendgroup=s,
                             marker_color=color,
                             hovertemplate="%{x}<br>" + s + ": %{y:.1f} msg/s<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Bar(x=x, y=[p[2] / per_s for p in pts], name=s, legendgroup=s,
                             showlegend=False, marker_color=color,
                             hovertemplate="%{x}<br>" + s + ": %{y:.0f} B/s<extra></extra>"),
                      row=2, col=1)
    fig.update_layout(title=f"{title}; bins of {_secs(width)}", barmode="stack", height=560,
                      legend={"orientation": "v"}, bargap=0.1, **_LAYOUT)
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[label[b] for b in cats], tickangle=-30, nticks=14)
    fig.update_xaxes(title_text=_time_title(skipped), row=2, col=1)
    return fig


def _secs(width_ns: int) -> str:
    return f"{width_ns / 1e9:g} s" if width_ns >= 1_000_000_000 else f"{width_ns / 1e6:g} ms"


def _time_title(skipped: bool) -> str:
    return "time (UTC)" + (", idle stretches of over a minute left out" if skipped else "")


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31")


def _color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def _thin(values: Sequence[float], n: int) -> list[float]:
    if len(values) <= n:
        return list(values)
    step = len(values) / n
    return [values[int(i * step)] for i in range(n)]


def latency_figure(title: str, series: dict[str, list[int]], empty: str) -> go.Figure:
    """Histogram (left) and CDF (right, log x) of latencies in ms, one trace per series."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return empty_figure(title, empty)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("histogram", "CDF"),
                        horizontal_spacing=0.1)
    stats = []
    for i, (name, ns) in enumerate(sorted(series.items())):
        ms = sorted(v / 1e6 for v in ns)
        color = _color(i)
        fig.add_trace(go.Histogram(x=_thin(ms, MAX_POINTS), name=name, legendgroup=name,
                                   marker_color=color, opacity=0.75, nbinsx=60,
                                   hovertemplate="%{x} ms: %{y}<extra>" + name + "</extra>"),
                      row=1, col=1)
        n = len(ms)
        idx = sorted(set(_thin(list(range(n)), 2000)) | {n - 1})
        fig.add_trace(go.Scatter(x=[ms[j] for j in idx], y=[(j + 1) / n for j in idx],
                                 mode="lines", line={"shape": "hv", "color": color},
                                 name=name, legendgroup=name, showlegend=False,
                                 hovertemplate="%{x:.3f} ms: %{y:.1%}<extra>" + name
                                 + "</extra>"),
                      row=1, col=2)
        st = latency_stats(list(ns))  # the summary's and latency_percentiles' definition
        stats.append(f"{name}: n={n}, p50 {st['p50_ms']:.3f} ms, "
                     f"p90 {st['p90_ms']:.3f} ms, max {st['max_ms']:.3f} ms")
    fig.update_xaxes(title_text="latency (ms)", row=1, col=1)
    fig.update_xaxes(title_text="latency (ms, log)", type="log", row=1, col=2)
    fig.update_yaxes(title_text="count", row=1, col=1)
    fig.update_yaxes(title_text="fraction ≤ x", range=[0, 1.02], row=1, col=2)
    fig.update_layout(title={"text": f"{title}<br><sup>{'; '.join(stats)}</sup>"},
                      barmode="overlay", height=440,
                      **{**_LAYOUT, "margin": {"l": 60, "r": 20, "t": 90, "b": 40}})
    return fig


def anomalies_figure(ds: Dataset) -> go.Figure:
    title = "Anomalies over time, by kind"
    t = ds.read("anomalies", ["ts", "kind", "detail", "flow_id"])
    if t is None or t.num_rows == 0:
        return empty_figure(title, "no anomalies in this dataset")
    t = t.filter(pc.is_valid(t["ts"]))
    if t.num_rows == 0:
        return empty_figure(title, "the anomalies of this dataset carry no time")
    ts = pc.cast(t["ts"], pa.int64())
    t0 = pc.min(ts).as_py()
    width = bin_width_ns(active_span_ns(sorted(set(ts.to_pylist()))))
    b = pc.add(pc.multiply(pc.divide(pc.subtract(ts, t0), width), width), t0)
    g = pa.table({"kind": t["kind"], "bin": b}).group_by(["kind", "bin"]).aggregate(
        [([], "count_all")])
    rows: dict[str, list[tuple[int, int]]] = {}
    for k, bn, n in zip(g["kind"].to_pylist(), g["bin"].to_pylist(), g["count_all"].to_pylist(),
                        strict=True):
        rows.setdefault(k, []).append((bn, n))
    cats, label, skipped = time_categories([p[0] for v in rows.values() for p in v], width)
    # a little context on each side, so a single burst is not one full-width bar
    cats = [cats[0] - (i + 1) * width for i in reversed(range(3))] + cats + [
        cats[-1] + (i + 1) * width for i in range(3)]
    for b in cats:
        label.setdefault(b, time_label(b, cats, width))
    fig = go.Figure()
    for i, k in enumerate(sorted(rows)):
        pts = sorted(rows[k])
        fig.add_trace(go.Bar(x=[label[p[0]] for p in pts], y=[p[1] for p in pts], name=k,
                             marker_color=_color(i + 3),
                             hovertemplate="%{x}<br>" + k + ": %{y}<extra></extra>"))
    fig.update_layout(title=f"{title}; bins of {_secs(width)}", barmode="stack", height=380,
                      yaxis_title="anomalies per bin", xaxis_title=_time_title(skipped),
                      **_LAYOUT)
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[label[b] for b in cats], tickangle=-30, nticks=14)
    return fig


# ------------------------------------------------------------------------ ladder


def ladder_figure(conversations: list[tuple[str, list[Msg], int, dict[str, Any]]]
                  ) -> go.Figure:
    """Sequence diagram (client lane left, server lane right, one arrow per message,
    time downwards), with a menu to switch between conversations: each its name, its
    first decoded messages (``transcript.flow_head``), how many it has, and its flow."""
    title = "Sequence diagram of a conversation"
    conversations = [c for c in conversations if any(not m.anomaly for m in c[1])]
    if not conversations:
        return empty_figure(title, "no decoded conversation in this dataset")
    fig = go.Figure()
    annotations: list[list[dict]] = []
    heights = []
    ranges = []
    for ci, (name, msgs, total, info) in enumerate(conversations):
        shown = [m for m in msgs if not m.anomaly][:LADDER_MAX_MESSAGES]
        t0 = shown[0].ts_ns if shown else 0
        xs, ys, texts, hovers = [], [], [], []
        anns: list[dict] = []
        for i, m in enumerate(shown):
            y = -i
            c2s = m.direction == "c2s"
            x0, x1 = (0.0, 1.0) if c2s else (1.0, 0.0)
            anns.append({"x": x1, "y": y, "ax": x0, "ay": y, "xref": "x", "yref": "y",
                         "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 2,
                         "arrowsize": 1.2, "arrowwidth": 1.5, "text": "",
                         "arrowcolor": "#1f77b4" if c2s else "#d62728"})
            label = m.kind
            if m.children:
                label += " [" + ", ".join(c.kind for c in m.children[:2]) + "]"
            label += "".join(f" {k}={v}" for k, v in m.fields[:2])
            xs.append(0.5)
            ys.append(y + 0.28)
            texts.append(label if len(label) <= 70 else label[:69] + "…")
            hovers.append(
                f"{ts_text(m.ts_ns)}<br>+{(m.ts_ns - t0) / 1e6:.3f} ms<br>"
                f"{'client → server' if c2s else 'server → client'}<br>{_html(m.label(8))}"
                + (f"<br>payload {_html(m.preview)}" if m.preview else "")
            )
            xs.append(-0.04)
            ys.append(y)
            texts.append(f"+{(m.ts_ns - t0) / 1e6:.3f} ms")
            hovers.append(ts_text(m.ts_ns))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="text", text=texts, hovertext=hovers, hoverinfo="text",
            textposition=["middle center" if i % 2 == 0 else "middle left"
                          for i in range(len(xs))],
            textfont={"size": 11}, visible=ci == 0, showlegend=False,
            name=name,
        ))
        if total > len(shown):
            anns.append({"x": 0.5, "y": -len(shown), "xref": "x", "yref": "y",
                         "showarrow": False, "text": f"… {total - len(shown)} more messages "
                         f"(see `msgcap ladder --flow {info['flow_id']}`)",
                         "font": {"color": "#777"}})
        anns += [
            {"x": 0, "y": 1.0, "xref": "x", "yref": "paper", "showarrow": False,
             "yanchor": "bottom", "text": f"<b>client</b><br>{_html(_client(info))}"},
            {"x": 1, "y": 1.0, "xref": "x", "yref": "paper", "showarrow": False,
             "yanchor": "bottom", "text": f"<b>server</b><br>{info['server_ip']}:"
             f"{info['server_port']}"},
        ]
        annotations.append(anns)
        heights.append(max(360, 160 + 34 * (len(shown) + 1)))
        ranges.append([-len(shown) - 0.2 - (total > len(shown)), 0.8])
    buttons = []
    for ci, (name, _msgs, _total, _info) in enumerate(conversations):
        vis = [i == ci for i in range(len(conversations))]
        buttons.append({"label": name, "method": "update", "args": [
            {"visible": vis},
            {"annotations": annotations[ci], "height": heights[ci],
             "yaxis.range": ranges[ci]},
        ]})
    fig.update_layout(
        title={"text": title, "y": 0.995, "yanchor": "top"},
        annotations=annotations[0],
        height=heights[0],
        xaxis={"range": [-0.35, 1.15], "visible": False, "fixedrange": True},
        yaxis={"visible": False, "range": ranges[0], "fixedrange": False},
        shapes=[{"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0,
                 "y1": 1, "line": {"color": "#999", "width": 2}} for x in (0, 1)],
        updatemenus=[{"buttons": buttons, "direction": "down", "x": 0, "xanchor": "left",
                      "y": 1.0, "yanchor": "bottom", "pad": {"b": 60},
                      "showactive": True}] if len(buttons) > 1 else [],
        **{**_LAYOUT, "margin": {"l": 20, "r": 20, "t": 150, "b": 20}},
    )
    return fig


def _client(info: dict[str, Any]) -> str:
    ep = f"{info['client_ip']}:{info['client_port']}"
    return f"{info['client_name']} {ep}" if info.get("client_name") else ep


def _html(text: str | None) -> str:
    import html

    return html.escape(text or "")


def conversation_choices(ds: Dataset, flows: list[dict[str, Any]], limit: int = 8
                         ) -> list[dict[str, Any]]:
    """The flows most worth drawing: most decoded rows first (request/reply traffic is
    where a ladder helps most, so flows with NATS requests go first)."""
    counts: dict[tuple[str, int], int] = {}
    for table in ("nats", "pulsar_commands", "felix", "stan", "liftbridge"):
        t = ds.read(table, ["capture_id", "flow_id"])
        if t is None or t.num_rows == 0:
            continue
        g = t.group_by(["capture_id", "flow_id"]).aggregate([([], "count_all")])
        for c, f, n in zip(g["capture_id"].to_pylist(), g["flow_id"].to_pylist(),
                           g["count_all"].to_pylist(), strict=True):
            counts[(c, f)] = counts.get((c, f), 0) + n
    req: set[tuple[str, int]] = set()
    nats = ds.read("nats", ["capture_id", "flow_id", "op", "direction", "reply_to"])
    if nats is not None and nats.num_rows:
        r = nats.filter(pc.and_(pc.is_in(nats["op"], pa.array(PUBS + MSGS)),
                                pc.is_valid(nats["reply_to"])))
        req = set(zip(r["capture_id"].to_pylist(), r["flow_id"].to_pylist(), strict=True))
    ranked = sorted(
        (f for f in flows if counts.get((f["capture_id"], f["flow_id"]))),
        key=lambda f: (-((f["capture_id"], f["flow_id"]) in req),
                       -counts[(f["capture_id"], f["flow_id"])], f["capture_id"], f["flow_id"]),
    )
    return ranked[:limit]
