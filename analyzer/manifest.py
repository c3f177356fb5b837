"""``OUT/manifest.json``: what went into a dataset and how each run went.

Strategy: one entry per capture (keyed by capture id, so re-running a capture
replaces its entry and adding a capture merges into the existing file); every
dataset-level figure (rows, anomalies by kind, flows by protocol, status) is
recomputed from the entries, never accumulated, so merging is idempotent.
Anomaly and flow tallies are read back from the capture's Parquet partitions (one
column each, every part file: ``--workers N`` writes one per worker), i.e. they
describe what is on disk.  The file is written atomically
under an exclusive lock (several processes may add captures to one OUT), as
key-sorted JSON so equal content gives equal bytes.  "Now" appears only here, never
in the tables.

Run status and exit code (the CLI exits with the code of its run):

====  ==========  ====================================================
code  status      meaning
====  ==========  ====================================================
0     clean       completed, no anomaly rows, no input damage
1     degraded    completed, but with anomalies (data lost, skipped,
                  malformed, limits hit, damaged input)
2     failed      did not complete; tables hold what was written first
====  ==========  ====================================================

The dataset-level status is the worst status of its captures.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.sink import DatasetWriter, part_files, partition_dir
from dissectors.arrowops import call
from dissectors.redaction import redact_text

__all__ = [
    "EXIT_CODES",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "UNCLAIMED",
    "CaptureRun",
    "InputInfo",
    "RunStatus",
    "read_manifest",
    "update_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
UNCLAIMED = "(unclaimed)"  # flows_by_protocol key for flows no dissector claimed


class RunStatus(StrEnum):
    CLEAN = "clean"
    DEGRADED = "degraded"
    FAILED = "failed"

    @property
    def exit_code(self) -> int:
        return _ORDER.index(self)


_ORDER = (RunStatus.CLEAN, RunStatus.DEGRADED, RunStatus.FAILED)

EXIT_CODES: dict[str, str] = {
    "0": "clean: completed, no anomalies",
    "1": "degraded: completed with anomalies (see anomalies_by_kind)",
    "2": "failed: did not complete (see error); tables may be partial",
}


@dataclass(slots=True)
class InputInfo:
    """Facts about one input capture file."""

    path: str
    size: int
    sha256: str
    format: str  # e.g. "pcap", "pcapng", "pcapng+gzip"
    link_types: list[str] = field(default_factory=list)
    packets: int = 0
    damage: list[Any] = field(default_factory=list)  # read-up-to-damage reports (str or dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "size": int(self.size),
            "sha256": self.sha256,
            "format": self.format,
            "link_types": [str(x) for x in self.link_types],
            "packets": int(self.packets),
            "damage": [str(x) if not isinstance(x, dict) else x for x in self.damage],
        }


@dataclass(slots=True)
class CaptureRun:
    """One run over one capture, as recorded in the manifest."""

    capture_id: str
    input: InputInfo
    tool_version: str
    options: dict[str, Any]
    rows: dict[str, int]  # rows per table (DatasetWriter.close())
    table_versions: dict[str, int]
    error: str | None = None  # set when the run failed

    @classmethod
    def from_writer(
        cls, writer: DatasetWriter, input: InputInfo, error: str | None = None
    ) -> CaptureRun:
        """From a closed ``DatasetWriter`` (rows, versions, options, tool version)."""
        if not writer.closed:
            raise RuntimeError("close the DatasetWriter before recording its run")
        return cls(
            capture_id=writer.capture_id,
            input=input,
            tool_version=writer.tool_version,
            options=dict(writer.options),
            rows=writer.close(),
            table_versions={n: s.version for n, s in writer.tables.items()},
            error=error,
        )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def value_counts(col: pa.Array | pa.ChunkedArray, null_key: str | None = None) -> Counter:
    """How often each value of ``col`` occurs (nulls under ``null_key``, or skipped)."""
    counts: Counter = Counter()
    # the kernel without ``pyarrow.compute`` (~0.05 s to import; see dissectors.arrowops):
    # every dissect run tallies its flows and anomalies here
    for item in call("value_counts", col).to_pylist():
        key = item["values"]
        if key is None:
            if null_key is None:
                continue
            key = null_key
        counts[key] += int(item["counts"])
    return counts


def _value_counts(part_dir: Path, column: str, null_key: str | None = None) -> dict[str, int]:
    """Values of ``column`` counted over every part file of a partition directory."""
    counts: Counter = Counter()
    for path in part_files(part_dir):
        # ParquetFile, not read_table: one file needs no pyarrow.dataset (~0.02 s to import)
        counts.update(value_counts(pq.ParquetFile(path).read(columns=[column]).column(column),
                                   null_key))
    return dict(sorted(counts.items()))


def _status(anomalies: int, damage: list, error: str | None) -> RunStatus:
    if error is not None:
        return RunStatus.FAILED
    if anomalies or damage:
        return RunStatus.DEGRADED
    return RunStatus.CLEAN


def _capture_entry(out_dir: Path, run: CaptureRun, now: str) -> dict[str, Any]:
    cid = run.capture_id
    by_kind = _value_counts(partition_dir(out_dir, "anomalies", cid), "kind")
    by_proto = _value_counts(partition_dir(out_dir, "flows", cid), "protocol", UNCLAIMED)
    status = _status(sum(by_kind.values()), run.input.damage, run.error)
    return {
        "capture_id": cid,
        "input": run.input.to_json(),
        "tool_version": run.tool_version,
        "options": run.options,
        "processed": now,
        "status": status.value,
        "exit_code": status.exit_code,
        # an error text may quote input bytes: the redaction gate (dissectors.redaction)
        "error": run.error if run.error is None or run.options.get("keep_secrets") is True
        else redact_text(run.error),
        "rows": dict(sorted(run.rows.items())),
        "table_versions": dict(sorted(run.table_versions.items())),
        "anomalies_by_kind": by_kind,
        "flows_by_protocol": by_proto,
    }


def _sum_maps(maps: list[Mapping[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for m in maps:
        total.update(m)
    return dict(sorted(total.items()))


def _aggregate(old: Mapping[str, Any] | None, inputs: list[dict[str, Any]], run: CaptureRun,
               now: str) -> dict[str, Any]:
    status = max((RunStatus(i["status"]) for i in inputs), key=lambda s: s.exit_code)
    canon = [json.dumps(i["options"], sort_keys=True, default=str) for i in inputs]
    shared_options = inputs[0]["options"] if len(set(canon)) == 1 else None
    tables: dict[str, dict[str, Any]] = {}
    for i in inputs:
        for name, n in i["rows"].items():
            t = tables.setdefault(name, {"rows": 0, "versions": set()})
            t["rows"] += n
            if name in i["table_versions"]:
                t["versions"].add(i["table_versions"][name])
    return {
        "manifest_version": MANIFEST_VERSION,
        "tool_version": run.tool_version,
        "created": old.get("created", now) if old else now,
        "updated": now,
        "status": status.value,
        "exit_code": status.exit_code,
        "exit_codes": EXIT_CODES,
        "options": shared_options,
        "inputs": inputs,
        "rows": _sum_maps([i["rows"] for i in inputs]),
        "tables": {
            n: {"rows": t["rows"], "versions": sorted(t["versions"])}
            for n, t in sorted(tables.items())
        },
        "anomalies_by_kind": _sum_maps([i["anomalies_by_kind"] for i in inputs]),
        "flows_by_protocol": _sum_maps([i["flows_by_protocol"] for i in inputs]),
    }


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of ``out_dir``, or None when there is none yet."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def dumps(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def update_manifest(
    out_dir: str | os.PathLike[str], run: CaptureRun, *, now: str | None = None
) -> dict[str, Any]:
    """Record ``run`` in ``OUT/manifest.json`` (replacing an earlier entry for the same
    capture, keeping the others) and return the whole manifest.  ``now`` (ISO 8601)
    is for tests; by default the current UTC time."""
    out = Path(out_dir)
    now = now or _now()
    with _locked(out):
        old = read_manifest(out)
        if old is not None and old.get("manifest_version") != MANIFEST_VERSION:
            raise ValueError(
                f"{out / MANIFEST_NAME}: manifest_version {old.get('manifest_version')} "
                f"is not {MANIFEST_VERSION}"
            )
        entries = {i["capture_id"]: i for i in (old or {}).get("inputs", [])}
        entries[run.capture_id] = _capture_entry(out, run, now)
        inputs = [entries[k] for k in sorted(entries)]
        manifest = _aggregate(old, inputs, run, now)
        tmp = out / f".{MANIFEST_NAME}.tmp"
        tmp.write_text(dumps(manifest), encoding="utf-8")
        os.replace(tmp, out / MANIFEST_NAME)
    return manifest
