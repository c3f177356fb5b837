"""Datasets of the samples for the analyses' tests, and the shared Spark session."""

from __future__ import annotations

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
