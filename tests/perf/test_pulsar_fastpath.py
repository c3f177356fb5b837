"""Whole Pulsar captures give the same tables with the columnar fast path on and off
(issue 22): every sample Pulsar capture, the DeepFlow test captures, and a bulk
recording when ``MSGCAP_PULSAR_CAPTURE`` names one (bench_pulsar.py records one:
/tmp/msgcap-bench/pulsar-batch.pcap).  Session-level differential tests (generated frame
streams, random cuts, malformed frames) are in tests/pulsar/test_fastpath.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dissectors.pulsar import fastpath
from tests.perf.test_fastpath import dissect_both

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted([*ROOT.glob("samples/pulsar*.pcap"),
                   *ROOT.glob("tests/data/captures/deepflow/pulsar/*.pcap")])

pytestmark = pytest.mark.skipif(not fastpath.AVAILABLE, reason="extension not built")


def test_there_are_captures_to_compare():
    assert len(CAPTURES) >= 4


def _assert_same_tables(path: Path, tmp: Path) -> None:
    ref, fast = dissect_both(path, tmp)
    assert ref.keys() == fast.keys()
    for table in ref:
        assert ref[table].equals(fast[table]), table


def _spy_split(monkeypatch) -> list[bool]:
    """Whether each batch offered to the fast path was taken, in order."""
    taken: list[bool] = []
    split = fastpath.split

    def spy(*args):
        chunk = split(*args)
        taken.append(chunk is not None)
        return chunk

    monkeypatch.setattr(fastpath, "split", spy)
    return taken


# batches each capture's fast run must take (real clients' entries carry properties and
# partition keys; none may go back to the reference)
BATCHES = {"pulsar-client.pcap": 16}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_pulsar_capture_gives_the_same_tables(path, tmp_path, monkeypatch):
    taken = _spy_split(monkeypatch)
    _assert_same_tables(path, tmp_path)
    assert taken == [True] * BATCHES.get(path.name, 0)


@pytest.mark.skipif(not os.environ.get("MSGCAP_PULSAR_CAPTURE"),
                    reason="set MSGCAP_PULSAR_CAPTURE to a recorded Pulsar capture")
def test_a_bulk_recording_gives_the_same_tables(tmp_path):
    _assert_same_tables(Path(os.environ["MSGCAP_PULSAR_CAPTURE"]), tmp_path)


def test_a_written_capture_that_takes_the_fast_path(tmp_path, monkeypatch):
    """A capture of batches (every codec, five connections, one with a gap, entries with
    and without properties and partition keys, hand-built by tests/pulsar/test_fastpath.py)
    goes through the pipeline both ways too, and the fast run must have taken them."""
    from dissectors.sdk.testing import Gap, PcapFlow, write_pcap
    from tests.pulsar.test_fastpath import C2S, _plain_frames

    scripts = [[*_plain_frames(codec), *_plain_frames((codec + 1) % 5)] for codec in range(5)]
    scripts[1].insert(2, Gap(C2S, 7))
    path = write_pcap(tmp_path / "plain.pcap",
                      [PcapFlow(s, 6650, client_port=41000 + i) for i, s in enumerate(scripts)])
    taken = _spy_split(monkeypatch)
    _assert_same_tables(path, tmp_path)
    assert sum(taken) >= 30
