"""Shared pytest configuration (kept tiny; several test packages add to it)."""

import os
from pathlib import Path

import pytest

# The shared folder (captures, expected.json, DESIGN.md): ../../shared next to the repo,
# else wherever MSGCAP_SHARED points.
SHARED = Path(__file__).resolve().parents[2] / "shared"
if not SHARED.is_dir() and os.environ.get("MSGCAP_SHARED"):
    SHARED = Path(os.environ["MSGCAP_SHARED"])


@pytest.fixture(scope="session")
def shared() -> Path:
    return SHARED
