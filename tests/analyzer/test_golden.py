"""Every output table of every sample capture is what it was before the conveyor
rebuild (issue 21): schema, row count and a hash of the sorted rows, per dissection
mode (one process, two workers, payload decoding).  See ``golden_tables``."""

from __future__ import annotations

import json

import pytest

from tests.analyzer.golden_tables import (
    GOLDEN,
    MODES,
    capture_key,
    digest_capture,
    sample_captures,
)

RUNS = [(p, mode) for p in sample_captures() for mode in MODES]


def test_the_baseline_covers_every_sample_capture():
    golden = json.loads(GOLDEN.read_text())
    assert len(sample_captures()) >= 16
    assert sorted(golden) == sorted(capture_key(p, m) for p, m in RUNS)


@pytest.mark.parametrize("pcap,mode", RUNS, ids=[capture_key(p, m) for p, m in RUNS])
def test_tables_match_the_golden_baseline(pcap, mode, tmp_path):
    want = json.loads(GOLDEN.read_text())[capture_key(pcap, mode)]
    got = digest_capture(pcap, mode, tmp_path)
    assert sorted(got) == sorted(want)
    for table in want:
        assert got[table] == want[table], table
