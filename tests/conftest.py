"""Shared pytest configuration (kept tiny; several test packages add to it)."""

from pathlib import Path

import pytest
from hypothesis import settings

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

