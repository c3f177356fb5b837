"""The datasets of the samples that the analyses' tests (tests/analyses) and the Spark tests
(tests/spark) share, and the one Spark run of every analysis over all of them.

Why a module and not tests/analyses/conftest.py: a session fixture is computed once per
conftest that defines (or imports) it, so a fixture both packages read must be defined in
one conftest above both.  ``all_samples``, ``spark_analyzed`` and ``spark_results`` are
imported by tests/conftest.py only; a Spark run of the analyses costs seconds per analysis
whatever the rows, so one run serves every test that asks Spark about a sample.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SAMPLE_NAMES = sorted(p.stem for p in SAMPLES.glob("*.pcap"))
UNENCRYPTED = ("liftbridge-basic", "nats-basic", "nats-cluster", "pulsar-client", "stan-basic")
TWO_VANTAGE = SAMPLES / "two-vantage"
VANTAGE_ANALYSES = ("vantage_matches", "clock_offsets", "one_way_delays")
"""The analyses that pair captures: they give rows only on a dataset of several captures of
the same traffic (``two_vantage``), never on the separate samples."""

SparkResults = dict[str, tuple[list[str], list[tuple]]]
"""Analysis name -> (column names, rows as tuples of the values `spark analyze` wrote)."""


def dissect_into(out: Path, names: Iterable[str]) -> Path:
    """The samples ``names`` dissected into one dataset (each with its key log, if any)."""
    from analyzer.pipeline import Options, dissect_capture

    for n in names:
        keys = SAMPLES / f"{n}.keys"
        opts = Options(keylog=str(keys)) if keys.exists() else Options()
        dissect_capture(SAMPLES / f"{n}.pcap", out, opts)
    return out


def dissect_two_vantage(out: Path) -> Path:
    from analyzer.pipeline import Options, dissect_capture

    for side in ("client", "broker"):
        dissect_capture(TWO_VANTAGE / f"nats-{side}.pcap", out, Options())
    return out


def capture_ids(dataset: Path) -> set[str]:
    """The capture ids a dataset holds (its manifest's inputs)."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    return {i["capture_id"] for i in manifest["inputs"]}


def capture_id_of(dataset: Path, name: str) -> str:
    """The id of the capture ``samples/<name>.pcap`` in ``dataset`` (from its manifest)."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    (cid,) = [i["capture_id"] for i in manifest["inputs"]
              if Path(i["input"]["path"]) == SAMPLES / f"{name}.pcap"]
    return cid


def rows_of(results: SparkResults, name: str, ids: set[str]) -> list[dict]:
    """The rows of analysis ``name`` about the captures ``ids``, as dicts."""
    cols, rows = results[name]
    found = [dict(zip(cols, r, strict=True)) for r in rows]
    return [r for r in found if r["capture_id"] in ids]


# ------------------------------------------------- fixtures (registered by tests/conftest.py)


@pytest.fixture(scope="session")
def all_samples(tmp_path_factory) -> Path:
    """One dataset holding every sample capture (the encrypted ones with their keys) and
    the two captures of samples/two-vantage/, so one run of every analysis on each engine
    covers them all (a Spark run costs seconds per analysis, whatever the rows)."""
    out = dissect_into(tmp_path_factory.mktemp("all") / "ds", SAMPLE_NAMES)
    return dissect_two_vantage(out)


@pytest.fixture(scope="session")
def spark_analyzed(spark, all_samples: Path, tmp_path_factory) -> Path:
    """``msgcap spark analyze`` of ``all_samples`` on the shared session: its output
    directory (every analysis, Parquet).  tests/spark/test_analyses.py reads nats-basic's
    rows from it; ``spark_results`` is every row of it."""
    from analyzer.cli import main

    out = tmp_path_factory.mktemp("spark-analyze") / "an"
    assert main(["spark", "analyze", str(all_samples), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def spark_results(spark_analyzed: Path) -> SparkResults:
    """Every analysis's rows over ``all_samples`` as ``msgcap spark analyze`` wrote them
    (read with pyarrow, as another tool would: the same values Spark reads back, without
    a Spark job per analysis).

    The tests that ask Spark about some of the samples read those captures' rows from here
    (``rows_of``) instead of a run of their own: every analysis but the cross-capture ones
    keys every match on capture_id, so a capture's rows do not depend on what else the
    dataset holds (tests/analyses/test_engines.py checks the whole of it against DuckDB)."""
    import pyarrow.parquet as pq

    from analyzer.analyses import ANALYSES

    results: SparkResults = {}
    for name in ANALYSES:
        table = pq.read_table(spark_analyzed / name)
        rows = [tuple(r.values()) for r in table.to_pylist()]
        results[name] = (table.column_names, rows)
    return results
