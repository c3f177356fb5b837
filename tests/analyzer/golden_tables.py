"""Content hashes of every output table of every sample capture (the golden baseline).

Why: issue 21 rebuilds the pipeline driver (the conveyor) without changing a single
output value.  ``tests/analyzer/test_golden.py`` dissects each ``samples/*.pcap*`` the
ways the product can (one process; two worker processes; with payload decoding on) and
compares, table by table, the schema and a SHA-256 of the sorted rows with the hashes
recorded in ``tests/data/golden/sample_tables.json`` before the rebuild.

Nothing run-specific is hashed: rows hold only capture facts (``capture_id`` is the
file's SHA-256 prefix, timestamps are the packets'), and the Parquet key/value metadata
(options, tool version) is left out.  Rows are compared as sorted canonical JSON lines,
so a change of row order alone (two workers write two part files) is not a difference,
but any changed value, type, column or row count is.

Regenerate (only when an output change is intended, and say so in the commit):

    python -m tests.analyzer.golden_tables
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.pipeline import Options, dissect_capture

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
GOLDEN = ROOT / "tests" / "data" / "golden" / "sample_tables.json"
# mode name -> (workers, extra Options keyword arguments)
MODES: dict[str, tuple[int, dict[str, Any]]] = {
    "w1": (1, {}),
    "w2": (2, {}),
    "decode": (1, {"payload_schemas": ()}),  # --decode: payload_decoded columns
}


def sample_captures() -> list[Path]:
    """``samples/*.pcap*`` and those one folder down (``samples/two-vantage``)."""
    return sorted(p for pattern in ("*.pcap*", "*/*.pcap*") for p in SAMPLES.glob(pattern)
                  if p.is_file())


def capture_key(pcap: Path, mode: str) -> str:
    return f"{pcap.relative_to(SAMPLES).as_posix()}:{mode}"


def _plain(value: Any) -> Any:
    """A JSON-able stand-in for a cell that keeps every bit of its value."""
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return {"t": value.isoformat()}
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dt.timedelta):
        return {"td": value.total_seconds()}
    return value


def table_digest(table: pa.Table) -> dict[str, Any]:
    """Schema (no metadata), row count, and SHA-256 of the sorted canonical rows."""
    lines = sorted(json.dumps(_plain(r), sort_keys=True, separators=(",", ":"))
                   for r in table.to_pylist())
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode())
        h.update(b"\n")
    schema = table.schema.remove_metadata()
    return {
        "rows": table.num_rows,
        "schema": hashlib.sha256(str(schema).encode()).hexdigest()[:16],
        "sha256": h.hexdigest(),
    }


def dataset_tables(out: Path) -> Iterator[tuple[str, pa.Table]]:
    """Every table directory of a dataset, all its part files as one table."""
    for tdir in sorted(p for p in out.iterdir() if p.is_dir()):
        files = sorted(tdir.glob("*/*.parquet"))
        if not files:
            continue
        parts = [pq.read_table(f) for f in files]
        schema = parts[0].schema.remove_metadata()
        yield tdir.name, pa.concat_tables([t.replace_schema_metadata(None).cast(schema)
                                           for t in parts])


def digest_capture(pcap: Path, mode: str, scratch: Path) -> dict[str, Any]:
    workers, extra = MODES[mode]
    keys = pcap.with_suffix(".keys")
    options = Options(keylog=str(keys) if keys.exists() else None, strict=True,
                      validate=True, **extra)
    out = scratch / f"{pcap.parent.name}-{pcap.stem}-{mode}"
    dissect_capture(pcap, out, options, workers=workers)
    return {name: table_digest(t) for name, t in dataset_tables(out)}


def digest_all(scratch: Path) -> dict[str, dict[str, Any]]:
    return {capture_key(p, mode): digest_capture(p, mode, scratch)
            for p in sample_captures() for mode in MODES}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="msgcap-golden-") as tmp:
        result = digest_all(Path(tmp))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(result)} capture runs, "
          f"{sum(len(v) for v in result.values())} tables)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
