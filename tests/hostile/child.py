"""Run ``dissect_capture`` on captures in a fresh process and report on each as JSON.

``python -m tests.hostile.child JOBS_JSON`` (a list of ``{"path", "out", "spec"}``) prints
one JSON list, an object per job:
``peak_mb`` (VmHWM, read right after the dissection and before anything is read back),
``cpu_s`` (process time of the dissection alone), ``wall_s`` (both for reading, never for
asserting: a loaded machine changes them), ``calls`` (with ``"count_calls": true`` in the
spec: the Python and built-in function calls the dissection made, counted by cProfile; a
measure of work that the machine's load cannot change), ``status``, ``anomalies``
(kind -> count), ``anomaly_rows`` (kind -> up to ``rows_per_kind`` rows), ``flows`` (the
flows table, without the endpoint text), ``accounting_errors`` (flow directions where
decoded + undecoded + gap != stream length, or where the ``tcp.gap``/``quic.stream_gap``
rows do not add up to the flow's gap bytes) and ``tables`` (the rows of the tables named
in ``read``, restricted to ``columns``).

VmHWM rather than ``ru_maxrss``: the latter is inherited from the (large) pytest parent
across fork/exec (the same reasoning as tests/reassembly/test_bounded_memory.py).  Before
each job the high-water mark is reset to the current resident set (``/proc/self/clear_refs``
``5``), so several small jobs can share one process; memory a previous job left behind
can only make a later job's peak look larger, never smaller.
"""

from __future__ import annotations

import cProfile
import json
import sys
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def _hwm_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"hex": v.hex()} if len(v) <= 4096 else {"hex": v[:4096].hex(), "len": len(v)}
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if hasattr(v, "isoformat"):
        return str(v)
    return v


def _reset_hwm() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not permitted here: the peak is then cumulative (an upper bound)
        pass


def _anomaly_summary(anomalies: pa.Table, per_kind: int) -> tuple[Counter, Counter, dict]:
    """Count per kind, count per pattern (the detail with its numbers as ``N``) and the
    first ``per_kind`` rows of each kind, in the order the kinds first appear.  Computed
    on the columns: a Python pass over every row took seconds for the floods (a million
    eviction rows with ``MSGCAP_HOSTILE_FULL=1``)."""
    kinds: Counter = Counter()
    for v in pc.value_counts(anomalies["kind"]).to_pylist():
        kinds[v["values"]] = v["counts"]
    pattern = pc.binary_join_element_wise(
        anomalies["kind"], pc.replace_substring_regex(anomalies["detail"], "[0-9]+", "N"), ": ")
    patterns: Counter = Counter()
    for v in pc.value_counts(pattern).to_pylist():
        patterns[v["values"]] += v["counts"]
    rows = {kind: anomalies.filter(pc.equal(anomalies["kind"], kind)).slice(0, per_kind)
            .to_pylist() for kind in kinds}
    return kinds, patterns, rows


def _accounting_suspects(flows: pa.Table, gap_flows: set[int]) -> pa.Table:
    """The flow rows the accounting check (``run_job``) must look at: every row where a
    direction's counts do not add up, are negative, were decoded without a protocol, or
    have gap bytes or gap rows.  The others pass that check by construction, and the
    floods write hundreds of thousands of them (a Python pass over 200,000 flow rows
    took seconds); a null anywhere makes the row a suspect."""
    suspect = pc.is_in(flows["flow_id"], pa.array(sorted(gap_flows), pa.int64()))
    for d in ("c2s", "s2c"):
        decoded, undecoded = flows[f"decoded_bytes_{d}"], flows[f"undecoded_bytes_{d}"]
        gap, captured = flows[f"gap_bytes_{d}"], flows[f"stream_bytes_{d}"]
        for odd in (pc.not_equal(pc.add(decoded, undecoded), captured),
                    pc.less(pc.min_element_wise(decoded, undecoded, gap, captured), 0),
                    pc.and_(pc.is_null(flows["protocol"]), pc.not_equal(decoded, 0)),
                    pc.not_equal(gap, 0)):
            suspect = pc.or_(suspect, pc.fill_null(odd, True))
    return flows.filter(suspect)


def run_job(path: str, out: str, spec: dict[str, Any]) -> dict[str, Any]:
    from analyzer.pipeline import Options, dissect_capture
    from reassembly.limits import Limits, OverlapPolicy

    limits = dict(spec.get("limits", {}))
    if "overlap_policy" in limits:
        limits["overlap_policy"] = OverlapPolicy(limits["overlap_policy"])
    options = Options(
        limits=Limits(**limits),
        payload_cap=spec.get("payload_cap", 4096),
        keep_secrets=spec.get("keep_secrets", False),
        overwrite=True,
    )
    profile = cProfile.Profile(builtins=True) if spec.get("count_calls") else None
    _reset_hwm()
    wall = time.perf_counter()
    cpu = time.process_time()
    if profile is not None:
        profile.enable()
    result = dissect_capture(path, out, options)
    if profile is not None:
        profile.disable()
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    peak = _hwm_mb()

    from analyzer.sink import open_dataset
    from dissectors.tables import get_table

    def rows(table: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
        spec_t = get_table(table)
        t = open_dataset(out, spec_t).to_table(columns=columns)
        return t.to_pylist()

    per_kind = spec.get("rows_per_kind", 50)
    cols = ["kind", "detail", "flow_id", "direction", "offset", "nbytes", "frame", "source"]
    anomalies = open_dataset(out, get_table("anomalies")).to_table(columns=cols)
    kinds, patterns, anomaly_rows = _anomaly_summary(anomalies, per_kind)
    gap_rows: Counter = Counter()  # (flow, direction) -> bytes reported missing
    gaps = anomalies.filter(pc.is_in(anomalies["kind"],
                                     pa.array(["tcp.gap", "quic.stream_gap"])))
    for r in gaps.select(["flow_id", "direction", "nbytes"]).to_pylist():
        gap_rows[(r["flow_id"], r["direction"])] += r["nbytes"]
    flows_table = open_dataset(out, get_table("flows")).to_table()
    errors = []
    for f in _accounting_suspects(flows_table, {flow for flow, _ in gap_rows}).to_pylist():
        for d in ("c2s", "s2c"):
            decoded, undecoded = f[f"decoded_bytes_{d}"], f[f"undecoded_bytes_{d}"]
            gap, captured = f[f"gap_bytes_{d}"], f[f"stream_bytes_{d}"]
            if min(decoded, undecoded, gap, captured) < 0 or decoded + undecoded != captured:
                errors.append((f["flow_id"], d, decoded, undecoded, gap, captured))
            if f["protocol"] is None and decoded:
                errors.append((f["flow_id"], d, "decoded bytes in an unclaimed flow"))
            if gap_rows[(f["flow_id"], d)] != gap:
                errors.append((f["flow_id"], d, "gap rows", gap_rows[(f["flow_id"], d)], gap))
    keep = ("flow_id", "transport", "client_port", "server_port", "protocol", "packets_c2s",
            "packets_s2c", "stream_bytes_c2s", "stream_bytes_s2c", "gap_bytes_c2s",
            "gap_bytes_s2c", "decoded_bytes_c2s", "decoded_bytes_s2c", "undecoded_bytes_c2s",
            "undecoded_bytes_s2c", "overlap_conflicts_c2s", "overlap_conflicts_s2c")
    max_flows = spec.get("max_flow_rows", 1000)
    flows = flows_table.slice(0, max_flows).to_pylist()
    tables = {name: rows(name, spec.get("columns", {}).get(name))
              for name in spec.get("read", [])}
    return _jsonable({
        "peak_mb": peak,
        "cpu_s": cpu,
        "wall_s": wall,
        "calls": None if profile is None else sum(e.callcount for e in profile.getstats()),
        "status": result.manifest["status"],
        "packets": result.packets,
        "rows": result.rows,
        "anomalies": dict(kinds),
        "anomaly_rows": anomaly_rows,
        "anomaly_patterns": dict(patterns),
        "flow_count": flows_table.num_rows,
        "flows": [{k: f.get(k) for k in keep} for f in flows],
        "accounting_errors": errors[:20],
        "damage": result.manifest["inputs"][0]["input"]["damage"]
        if "inputs" in result.manifest else None,
        "tables": tables,
    })


if __name__ == "__main__":
    jobs = json.loads(sys.argv[1])
    print(json.dumps([run_job(j["path"], j["out"], j.get("spec", {})) for j in jobs]))
