"""Cross-flow analyses, each defined once as SQL and run by DuckDB or by Spark (issue 20).

Strategy: every analysis is one file ``sql/<name>.sql`` holding one ``SELECT`` in the
subset of SQL both engines read alike (Spark SQL names; DuckDB gets the few Spark
functions it lacks as macros, see ``duck.SPARK_SHIMS``).  The dataset's tables are
views named after the tables; each analysis's result becomes a view too, so a later
analysis reads an earlier one (``delivery_fanout`` reads ``deliveries``), which is why
``ANALYSES`` is ordered.  Times are exact int64 nanoseconds (the ``*_ns`` columns): no
engine-specific timestamp arithmetic, no rounding to Spark's microseconds.

Parameters are named here, documented in docs/analyses.md, and written into the SQL
where it says ``{{name}}``; there is no bare number standing for one in any definition.

Two runners read these definitions: ``analyzer.analyses.duck`` (embedded, no JVM:
``msgcap analyze``, ``msgcap query``, and what ``summary`` and ``report`` show) and
``analyzer.analyses.spark`` (``msgcap spark analyze``).  tests/analyses checks that
both give the same rows for every analysis on every sample.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources

__all__ = [
    "ANALYSES",
    "DEFAULT_PARAMS",
    "DELIVERY_WINDOW_NS",
    "RATE_WINDOW_NS",
    "definition",
    "render",
    "run_order",
]

DELIVERY_WINDOW_NS = 10_000_000_000
"""A NATS delivery belongs to a publish of the same subject and payload at most this long
(10 s) before it: longer than any broker-side delay in a healthy system, short enough
that a periodic identical message (a heartbeat) is not paired with an old copy."""

RATE_WINDOW_NS = 1_000_000_000
"""Width of the ``rates`` time buckets (1 s, aligned on the Unix epoch)."""

DEFAULT_PARAMS: dict[str, int] = {
    "delivery_window_ns": DELIVERY_WINDOW_NS,
    "rate_window_ns": RATE_WINDOW_NS,
}

# in dependency order: a definition may read the results named before it
ANALYSES: tuple[str, ...] = (
    "nats_clients",
    "nats_request_reply",
    "deliveries",
    "delivery_fanout",
    "publish_ack_latency",
    "sequence_gaps",
    "rates",
    "top_talkers",
    "error_counts",
    "latency_percentiles",
    "unanswered_requests",
    "consumer_lag",
    "slow_consumers",
    "cluster_trace",
    "vantage_matches",
    "clock_offsets",
    "one_way_delays",
)

_PARAM_RE = re.compile(r"\{\{(\w+)\}\}")


def definition(name: str) -> str:
    """The SQL text of analysis ``name`` as stored (parameters not yet filled in)."""
    if name not in ANALYSES:
        raise KeyError(f"no analysis {name!r} (known: {', '.join(ANALYSES)})")
    return resources.files("analyzer.analyses").joinpath("sql", f"{name}.sql").read_text("utf-8")


def render(name: str, params: dict[str, int] | None = None) -> str:
    """The SQL of ``name`` with its ``{{parameter}}`` places filled (integers only, so
    nothing a caller passes can change the statement's shape)."""
    values = {**DEFAULT_PARAMS, **(params or {})}

    def fill(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"analysis {name}: no value for parameter {key!r}")
        return str(int(values[key]))

    return _PARAM_RE.sub(fill, definition(name))


def parameters(name: str) -> list[str]:
    """Names of the parameters analysis ``name`` uses (for the docs)."""
    return sorted(set(_PARAM_RE.findall(definition(name))))


_COMMENT_RE = re.compile(r"--[^\n]*")


def run_order(names: Iterable[str] | None = None) -> list[str]:
    """The analyses to run for ``names`` (all when ``None``): those, and every earlier
    result their SQL reads (an analysis name appearing as a word outside comments; a name
    that is also a column only runs one more), in ``ANALYSES`` order.  Lets a caller
    asking for one result skip the unrelated ones, which costs Spark seconds each."""
    if names is None:
        return list(ANALYSES)
    wanted = set(names)
    unknown = wanted - set(ANALYSES)
    if unknown:
        raise KeyError(f"no analysis {', '.join(sorted(unknown))}")
    for name in reversed(ANALYSES):  # a definition reads only names before it
        if name in wanted:
            sql = _COMMENT_RE.sub("", definition(name))
            wanted.update(n for n in ANALYSES[: ANALYSES.index(name)]
                          if re.search(rf"\b{n}\b", sql))
    return [n for n in ANALYSES if n in wanted]
