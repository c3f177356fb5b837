"""`msgcap report`: one self-contained HTML file with interactive plots of a dataset.

The plots are plotly figures (``analyzer.report.figures``); plotly.js is embedded once,
inline, from the ``plotly`` package (``plotly.offline.get_plotlyjs()``), so the page needs
no network: no CDN, no fonts or images fetched.  Why plotly: it is a maintained,
widely used library whose PyPI package ships the complete minified plotly.js, it gives
zoom / pan / hover / legend toggling without any code of ours, and its Python side builds
figures from plain lists (no pandas needed).  The flows table is filtered and sorted by a
few lines of plain JavaScript in the template.

Strategy: ``build_report`` reads the dataset through ``analyzer.summary.Dataset`` (the
same numbers as `msgcap summary`), builds each figure, turns it into a ``<div>`` with its
own ``Plotly.newPlot`` call, and fills ``template.html`` (``string.Template``; values are
HTML-escaped, JSON embedded in ``<script>`` has ``</`` escaped).
"""

from __future__ import annotations

import html
import json
import os
import string
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from analyzer.summary import (
    Dataset,
    UserError,
    analysis_results,
    build_summary,
    ts_text,
)
from dissectors.redaction import redact_text

__all__ = ["PLOT_IDS", "build_report"]

# element ids of the plots, in page order (tests look them up)
PLOT_IDS = (
    "plot-rates",
    "plot-latency-delivery",
    "plot-latency-request",
    "plot-ladder",
    "plot-anomalies",
)
_PLOT_CONFIG = {"displaylogo": False, "responsive": True,
                "modeBarButtonsToRemove": ["sendDataToCloud"]}


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _json_script(obj: Any) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(obj, separators=(",", ":"), default=str).replace("</", "<\\/")


def _div(fig, div_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config=_PLOT_CONFIG, default_width="100%").replace(
        "<div>", '<div class="plot-wrap">', 1)


def _plot(fig, div_id: str) -> str:
    inner = _div(fig, div_id)
    return f'<div class="plot" data-plot="{div_id}">{inner}</div>'


def _card(value: Any, label: str, cls: str = "") -> str:
    return (f'<div class="card"><div class="v {cls}">{_esc(value)}</div>'
            f'<div class="k">{_esc(label)}</div></div>')


def _overview(s: dict[str, Any]) -> str:
    tot = s["totals"]
    status = s["status"]
    cls = {"clean": "ok", "degraded": "warn"}.get(status, "bad")
    cards = [
        _card(status, "status", cls),
        _card(tot["captures"], "captures"),
        _card(f"{tot['packets']:,}", "packets"),
        _card(f"{tot['flows']:,}", "flows"),
        _card(f"{tot['duration_s']:.3f} s" if tot["duration_s"] is not None else "-",
              "capture span"),
        _card(f"{s['anomalies']['total']:,}", "anomalies", "warn" if s["anomalies"]["total"]
              else "ok"),
    ]
    rr = s["request_reply"].get("nats")
    if rr:
        cards.append(_card(f"{rr['answered']}/{rr['requests']}", "NATS requests answered",
                           "ok" if rr["answered"] == rr["requests"] else "warn"))
        cards.append(_card(rr["no_responders"], "no responders",
                           "warn" if rr["no_responders"] else "ok"))
        if rr["latency"]["p50_ms"] is not None:
            cards.append(_card(f"{rr['latency']['p50_ms']} ms", "request → reply p50"))
    out = [f'<div class="cards">{"".join(cards)}</div>']
    rows = []
    for c in s["captures"]:
        lts = ", ".join(lt["name"] for lt in c["link_types"])
        rows.append(
            f"<tr><td class='mono'>{_esc(c['capture_id'])}</td><td>{_esc(c['path'])}</td>"
            f"<td class='mono' title='{_esc(c['sha256'])}'>{_esc((c['sha256'] or '')[:16])}…"
            f"</td><td>{_esc(c['format'])}</td><td>{_esc(lts)}</td>"
            f"<td class='num'>{_esc(c['packets'])}</td><td>{_esc(c['ts_first'])}</td>"
            f"<td class='num'>{_esc(c['duration_s'])}</td><td>{_esc(c['status'])}</td></tr>"
        )
    out.append(
        "<table class='facts'><tr><th>capture</th><th>file</th><th>sha256</th><th>format</th>"
        "<th>link types</th><th>packets</th><th>first packet (UTC)</th><th>secs</th>"
        "<th>status</th></tr>" + "".join(rows) + "</table>"
    )
    fl = s["flows"]["by_protocol"]
    facts = [("flows by protocol", ", ".join(f"{k} {v}" for k, v in fl.items()) or "-")]
    p = s["protocols"]
    if "nats" in p:
        n = p["nats"]
        facts.append(("NATS", f"published {n['published']:,} messages "
                      f"({n['published_payload_bytes']:,} B), delivered {n['delivered']:,} "
                      f"({n['delivered_payload_bytes']:,} B)"))
    if "pulsar" in p and "messages_sent" in p["pulsar"]:
        facts.append(("Pulsar", f"sent {p['pulsar']['messages_sent']:,} messages, delivered "
                      f"{p['pulsar']['messages_delivered']:,}"))
    for name, label in (("stan", "STAN"), ("liftbridge", "Liftbridge"), ("felix", "Felix")):
        if name in p:
            facts.append((label, f"{p[name]['rows']:,} rows"))
    if rr:
        lat = rr["latency"]
        facts.append(("NATS request/reply",
                      f"{rr['requests']} requests: {rr['answered']} answered "
                      f"({rr['replies']} replies), {rr['no_responders']} no responders, "
                      f"{rr['unanswered']} unanswered; latency p50 {lat['p50_ms']} ms, "
                      f"p90 {lat['p90_ms']} ms, max {lat['max_ms']} ms"))
    for proto, parts in s["acks"].items():
        bits = []
        for what, v in parts.items():
            total = v.get("sent", v.get("published", v.get("delivered", 0)))
            acked = v.get("acked", v.get("receipts", 0))
            extra = f", {v['errors']} errors" if v.get("errors") else ""
            bits.append(f"{what}: {acked}/{total} acked{extra}")
        facts.append((f"{proto} acks", "; ".join(bits)))
    u = s["undecoded"]
    und = (f"{u['unclaimed_flows']} unclaimed flows ({u['unclaimed_stream_bytes']:,} B), "
           f"{u['undecoded_bytes']:,} undecoded bytes, {u['gap_bytes']:,} bytes never captured")
    if u.get("quic"):
        q = u["quic"]
        und += (f"; QUIC: {q['packets_undecrypted']:,} of {q['packets']:,} packets not "
                f"decrypted ({', '.join(f'{k} {v}' for k, v in q['undecrypted_by_reason'].items()) or '-'})")  # noqa: E501
    facts.append(("not decoded", und))
    top = []
    for name, key in (("nats", "subjects"), ("pulsar", "topics"), ("stan", "channels"),
                      ("liftbridge", "streams"), ("felix", "streams")):
        t = p.get(name, {}).get(key)
        if t:
            top.append(f"{name}: " + ", ".join(
                f"{r['name'] or '(empty)'} ({r['messages']})" for r in t["by_messages"][:5]))
    if top:
        facts.append(("top by messages", "<br>".join(_esc(x) for x in top)))
    out.append("<table class='facts'>" + "".join(
        f"<tr><th>{_esc(k)}</th><td>{v if k == 'top by messages' else _esc(v)}</td></tr>"
        for k, v in facts) + "</table>")
    return "\n".join(out)


def _anomalies_table(s: dict[str, Any]) -> str:
    an = s["anomalies"]
    if not an["total"]:
        return "<p class='note'>No anomalies: every captured byte was accounted for.</p>"
    rows = "".join(
        f"<tr><td>{_esc(a['kind'])}</td><td class='num'>{a['count']:,}</td>"
        f"<td>{_esc(a['example']['capture_id'])} flow {_esc(a['example']['flow_id'])} frame "
        f"{_esc(a['example']['frame'])}: {_esc(redact_text(a['example']['detail']))}</td></tr>"
        for a in an["by_kind"]
    )
    return ("<table class='facts'><tr><th>kind</th><th>count</th><th>first example</th></tr>"
            + rows + "</table>")


_FLOW_COLUMNS = [
    ("capture_id", "capture", False), ("flow_id", "flow", True), ("protocol", "protocol", False),
    ("transport", "transport", False), ("client", "client", False),
    ("client_name", "client name", False), ("server", "server", False),
    ("first", "first packet (UTC)", False), ("secs", "secs", True),
    ("packets", "packets", True), ("stream_bytes", "stream bytes", True),
    ("decoded_bytes", "decoded bytes", True), ("undecoded_bytes", "undecoded bytes", True),
    ("gap_bytes", "gap bytes", True), ("anomalies", "anomalies", True),
    ("close_reason", "closed by", False), ("problem", "problem", False),
]


def _flows_data(ds: Dataset) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from analyzer.transcript import _read_rows

    flows = _read_rows(ds, "flows", None)
    an = ds.read("anomalies", ["capture_id", "flow_id"])
    per_flow: dict[tuple, int] = {}
    if an is not None:
        for c, f in zip(an["capture_id"].to_pylist(), an["flow_id"].to_pylist(), strict=True):
            per_flow[(c, f)] = per_flow.get((c, f), 0) + 1
    names: dict[tuple, str] = {}
    nats = ds.read("nats", ["capture_id", "flow_id", "op", "client_name"])
    if nats is not None and "client_name" in nats.column_names:
        for c, f, op, n in zip(*(nats[k].to_pylist() for k in ("capture_id", "flow_id", "op",
                                                                "client_name")), strict=True):
            if op == "CONNECT" and n:
                names.setdefault((c, f), n)
    rows = []
    for r in sorted(flows, key=lambda r: (r["capture_id"], r["flow_id"])):
        key = (r["capture_id"], r["flow_id"])
        r["client_name"] = names.get(key)
        gap = (r["gap_bytes_c2s"] or 0) + (r["gap_bytes_s2c"] or 0)
        und = (r["undecoded_bytes_c2s"] or 0) + (r["undecoded_bytes_s2c"] or 0)
        n_an = per_flow.get(key, 0)
        rows.append([
            r["capture_id"], r["flow_id"], r["protocol"] or "(unclaimed)", r["transport"],
            f"{r['client_ip']}:{r['client_port']}", r["client_name"] or "",
            f"{r['server_ip']}:{r['server_port']}", ts_text(r["ts_first"]),
            round((r["ts_last"] - r["ts_first"]) / 1e9, 3),
            (r["packets_c2s"] or 0) + (r["packets_s2c"] or 0),
            (r["stream_bytes_c2s"] or 0) + (r["stream_bytes_s2c"] or 0),
            (r["decoded_bytes_c2s"] or 0) + (r["decoded_bytes_s2c"] or 0), und, gap, n_an,
            r["close_reason"], bool(gap or und or n_an),
        ])
    cols = [{"key": k, "label": label, "num": num, "hidden": k == "problem"}
            for k, label, num in _FLOW_COLUMNS]
    return {"columns": cols, "rows": rows}, flows


def build_report(
    ds: Dataset,
    out: str | os.PathLike[str],
    *,
    flow: int | None = None,
    capture: str | None = None,
    title: str | None = None,
    step: Callable[[str], None] = lambda label: None,
) -> dict[str, Any]:
    """Write the report of ``ds`` to ``out``; returns the summary it shows.  ``flow`` (and
    ``capture``) pick the conversation the sequence diagram opens with; ``step(label)`` is
    called before each stage (progress)."""
    import plotly
    import pyarrow.compute as pc
    from plotly.offline import get_plotlyjs

    from analyzer.report import figures as F
    from analyzer.transcript import flow_head, flow_info

    out = check_output(out)
    step("summary")
    summary = build_summary(ds)
    step("flows")
    flows_json, flows = _flows_data(ds)
    step("rates")
    rates = F.rates_figure(ds)
    step("latencies")
    # the analyses' rows in Arrow, not as ``summary.deliveries``' objects: millions of rows
    res = analysis_results(ds, names=["deliveries", "nats_request_reply"])
    dl = res["deliveries"].filter(pc.is_valid(res["deliveries"]["pub_record_id"]))
    by_proto = {f"{proto} publish → delivery":
                dl.filter(pc.equal(dl["protocol"], proto))["latency_ns"].to_pylist()
                for proto in dl["protocol"].unique().to_pylist()}
    lat_delivery = F.latency_figure("Publish → delivery latency", by_proto,
                                    "no publish was matched to a delivery in this dataset")
    pairs = res["nats_request_reply"]
    answered = pairs.filter(pc.and_(pc.greater(pairs["replies"], 0),
                                    pc.is_valid(pairs["latency_ns"])))
    rr = {"nats request → reply": answered["latency_ns"].to_pylist()}
    lat_request = F.latency_figure("Request → reply latency", rr,
                                   "no answered request in this dataset")
    step("sequence diagram")
    chosen = F.conversation_choices(ds, flows)
    if flow is not None:
        info = flow_info(ds, flow, capture)  # UserError when unknown / ambiguous
        chosen = [info] + [f for f in chosen if (f["capture_id"], f["flow_id"]) !=
                           (info["capture_id"], info["flow_id"])]
    convs = []
    for f in chosen:
        info = flow_info(ds, f["flow_id"], f["capture_id"])
        label = (f"flow {info['flow_id']} {info.get('protocol') or ''} "
                 f"{info.get('client_name') or info['client_ip'] + ':' + str(info['client_port'])}"
                 f" ({info['capture_id'][:8]})")
        head = flow_head(ds, info, F.LADDER_MAX_MESSAGES)
        convs.append((label, head.messages, head.total, info))
    ladder = F.ladder_figure(convs)
    step("anomalies")
    anomalies = F.anomalies_figure(ds)
    step("write")
    origin = ds.origin
    title = title or f"msgcap report: {Path(origin).name}"
    tot = summary["totals"]
    template = string.Template(
        resources.files("analyzer.report").joinpath("template.html").read_text("utf-8"))
    page = template.substitute(
        title=_esc(title),
        version=_esc(_version()),
        subtitle=_esc(f"{origin} · {tot['captures']} capture(s) · {tot['ts_first']} → "
                      f"{tot['ts_last']} · status {summary['status']}"),
        plotly_version=_esc(plotly.__version__),
        plotly_js=get_plotlyjs().replace("</script", "<\\/script"),
        overview=_overview(summary),
        max_series=F.MAX_SERIES,
        plot_rates=_plot(rates, "plot-rates"),
        plot_latency_delivery=_plot(lat_delivery, "plot-latency-delivery"),
        plot_latency_request=_plot(lat_request, "plot-latency-request"),
        plot_ladder=_plot(ladder, "plot-ladder"),
        anomalies_table=_anomalies_table(summary),
        plot_anomalies=_plot(anomalies, "plot-anomalies"),
        flows_json=_json_script(flows_json),
        footer=_esc(f"Generated by msgcap {_version()} with plotly {plotly.__version__} "
                    f"from {origin}. Times are UTC. Works offline: everything is in this file."),
    )
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return summary


def check_output(out: str | os.PathLike[str]) -> Path:
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{out} is a directory", "give a file name, e.g. -o report.html")
    if not out.parent.exists():
        raise UserError(f"the directory of {out} does not exist",
                        f"create it first (mkdir -p {out.parent}) or write elsewhere")
    return out


def _version() -> str:
    from analyzer.pipeline import TOOL_VERSION

    return TOOL_VERSION


def run_report(args) -> int:
    """`msgcap report SOURCE -o FILE [--flow ID [--capture ID]] [--title T]`."""
    import sys

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from analyzer.summary import (
        exit_status,
        open_source,
        parse_decode_as,
        print_user_error,
        stderr_console,
    )

    err = stderr_console(args.quiet)
    show = not args.quiet and sys.stderr.isatty()
    progress = Progress(TextColumn("[bold]report[/] {task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        console=err, transient=True, disable=not show)
    task = progress.add_task("", total=len(_STAGES))

    def step(label: str) -> None:
        progress.update(task, description=label, completed=_STAGES.index(label))

    try:
        check_output(args.output)
        with progress, open_source(args.source, keylog=args.keylog,
                                   decode_as=parse_decode_as(args.decode_as),
                                   quiet=args.quiet) as ds:
            summary = build_report(ds, args.output, flow=args.flow, capture=args.capture_id,
                                   title=args.title, step=step)
            progress.update(task, completed=len(_STAGES))
    except UserError as exc:
        return print_user_error(exc)
    size = Path(args.output).stat().st_size
    err.print(f"report written to [bold]{args.output}[/] ({size / 1e6:.1f} MB, self-contained; "
              "open it in a browser)")
    return exit_status(summary)


_STAGES = ["summary", "flows", "rates", "latencies", "sequence diagram", "anomalies", "write"]
