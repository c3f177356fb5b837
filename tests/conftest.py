"""Shared pytest configuration (kept tiny; several test packages add to it)."""

from pathlib import Path

import pytest
from hypothesis import settings

# Session fixtures that more than one test package reads are defined (or imported) here,
# in the one conftest above them all: a fixture imported into two conftests is two
# fixtures, each computed once.  The shared Spark session, the dataset of every sample and
# the one Spark run of every analysis over it (tests/analyses and tests/spark read it).
from tests.analyses.datasets import all_samples, spark_analyzed, spark_results  # noqa: F401
from tests.analyzer.conftest import spark  # noqa: F401

# Hypothesis's per-example deadline (200 ms) is a wall-clock assertion that a loaded
# machine can fail: no test here has one.
settings.register_profile("msgcap", deadline=None)
settings.load_profile("msgcap")

# Third-party captures (with expected.json, their facts) and conformance vectors live in
# the repository under tests/data, each folder with a README naming its source and
# licence: a fresh clone needs nothing beside it to run the tests.
SHARED = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def shared() -> Path:
    return SHARED

