"""Datasets of the samples for the analyses' tests, the shared Spark session, and every
analysis run once on Spark over all the samples (``spark_results``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analyzer.conftest import spark  # noqa: F401  (the one session-scoped Spark)

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SAMPLE_NAMES = sorted(p.stem for p in SAMPLES.glob("*.pcap"))
UNENCRYPTED = ("liftbridge-basic", "nats-basic", "nats-cluster", "pulsar-client", "stan-basic")
TWO_VANTAGE = SAMPLES / "two-vantage"
VANTAGE_ANALYSES = ("vantage_matches", "clock_offsets", "one_way_delays")
"""The analyses that pair captures: they give rows only on a dataset of several captures of
the same traffic (``two_vantage``), never on the separate samples."""


def dissect_into(out: Path, names) -> Path:
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


@pytest.fixture(scope="session")
def all_samples(tmp_path_factory) -> Path:
    """One dataset holding every sample capture (the encrypted ones with their keys) and
    the two captures of samples/two-vantage/, so one run of every analysis on each engine
    covers them all (a Spark run costs seconds per analysis, whatever the rows)."""
    out = dissect_into(tmp_path_factory.mktemp("all") / "ds", SAMPLE_NAMES)
    return dissect_two_vantage(out)


@pytest.fixture(scope="session")
def five_samples(tmp_path_factory) -> Path:
    """The five unencrypted samples together (the dataset issue 20 quotes)."""
    return dissect_into(tmp_path_factory.mktemp("five") / "ds", UNENCRYPTED)


@pytest.fixture(scope="session")
def two_vantage(tmp_path_factory) -> Path:
    """samples/two-vantage/: the same NATS traffic captured at the client host and at the
    broker (its clock shifted +250 ms), as one dataset."""
    return dissect_two_vantage(tmp_path_factory.mktemp("two-vantage") / "ds")


SparkResults = dict[str, tuple[list[str], list[tuple]]]
"""Analysis name -> (column names, rows as tuples of the values Spark collected)."""


@pytest.fixture(scope="session")
def spark_results(spark, all_samples) -> SparkResults:  # noqa: F811  (spark: the import)
    """Every analysis run on Spark once over ``all_samples``, collected.

    A Spark run of the analyses costs seconds per analysis whatever the rows, so the tests
    that ask Spark about some of the samples read those captures' rows from here
    (``rows_of``) instead of a run of their own: every analysis but the cross-capture ones
    keys every match on capture_id, so a capture's rows do not depend on what else the
    dataset holds (test_engines.py checks the whole of it against DuckDB)."""
    from analyzer.spark import analyses as S

    try:
        res = S.run(S.load(spark, str(all_samples)))
        return {name: (df.columns, [tuple(r) for r in df.collect()]) for name, df in res.items()}
    finally:
        spark.catalog.clearCache()  # the cached intermediate results of S.run


def capture_ids(dataset: Path) -> set[str]:
    """The capture ids a dataset holds (its manifest's inputs)."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    return {i["capture_id"] for i in manifest["inputs"]}


def rows_of(results: SparkResults, name: str, ids: set[str]) -> list[dict]:
    """The rows of analysis ``name`` about the captures ``ids``, as dicts."""
    cols, rows = results[name]
    found = [dict(zip(cols, r, strict=True)) for r in rows]
    return [r for r in found if r["capture_id"] in ids]
