"""Shared pytest configuration (kept tiny; several test packages add to it)."""

from pathlib import Path

import pytest

# Third-party captures (with expected.json, their facts) and conformance vectors live in
# the repository under tests/data, each folder with a README naming its source and
# licence: a fresh clone needs nothing beside it to run the tests.
SHARED = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def shared() -> Path:
    return SHARED
