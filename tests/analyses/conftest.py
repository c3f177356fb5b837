"""Datasets of the samples for the analyses' tests.

The shared Spark session (``spark``), the dataset of every sample (``all_samples``) and
the one Spark run of every analysis over it (``spark_analyzed``, ``spark_results``) are
session fixtures of tests/conftest.py, defined in tests/analyses/datasets.py: the Spark
tests (tests/spark) read them too, and a fixture defined in two conftests runs twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analyses.datasets import UNENCRYPTED, dissect_into, dissect_two_vantage


@pytest.fixture(scope="session")
def five_samples(tmp_path_factory) -> Path:
    """The five unencrypted samples together (the dataset issue 20 quotes)."""
    return dissect_into(tmp_path_factory.mktemp("five") / "ds", UNENCRYPTED)


@pytest.fixture(scope="session")
def two_vantage(tmp_path_factory) -> Path:
    """samples/two-vantage/: the same NATS traffic captured at the client host and at the
    broker (its clock shifted +250 ms), as one dataset."""
    return dissect_two_vantage(tmp_path_factory.mktemp("two-vantage") / "ds")
