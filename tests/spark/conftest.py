"""Spark tests reuse the one session-scoped ``spark`` fixture of ``tests/analyzer`` (one
SparkSession, ``local[2]``, two shuffle partitions, for the whole test run)."""

from __future__ import annotations

from tests.analyzer.conftest import spark  # noqa: F401  (the shared session fixture)
