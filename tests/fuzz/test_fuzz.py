"""The CI fuzz pass: every regression-corpus input, every seed, and a short fixed-seed
mutation run per target (coverage-free mutator, deterministic).  Longer runs, with
atheris when it is installed: ``python -m benchmarks.fuzz --all --seconds 90``
(docs/robustness.md).  About 30 s in all on an idle machine."""

from __future__ import annotations

import pytest

from tests.fuzz.mutator import fuzz, mutate, run_one
from tests.fuzz.targets import CORPUS, TARGETS, corpus_files, decode_script, encode_script

# mutations per target: ~1-3 s each (the stream dissectors feed every input twice)
ITERATIONS = {
    "pcap": 1500, "pcapng": 1500, "gzip": 1500, "zstd": 1500, "nats": 500,
    "nats_cluster": 500, "pulsar": 300, "felix": 500, "stan": 1000, "liftbridge": 1000,
    "protobuf": 10000, "quic": 1500, "tls_ws": 1000,
}

CORPUS_CASES = [(t, p) for t in sorted(TARGETS) for p in corpus_files(t)]


def test_every_target_has_a_ci_budget():
    assert set(ITERATIONS) == set(TARGETS)


@pytest.mark.parametrize(("target", "path"), CORPUS_CASES,
                         ids=[f"{t}/{p.name}" for t, p in CORPUS_CASES])
def test_regression_corpus(target, path):
    """Inputs that once made a target fail (named after what they found)."""
    run_one(TARGETS[target], path.read_bytes(), timeout=30)


def test_regression_corpus_dirs_name_real_targets():
    assert {p.name for p in CORPUS.iterdir() if p.is_dir()} <= set(TARGETS)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fixed_seed_mutation_pass(target):
    stats = fuzz(target, iterations=ITERATIONS[target], seed=20261122, timeout=30,
                 rss_limit_mb=4096)
    assert stats.corpus > 0, f"{target}: no seeds"
    assert not stats.failures, "\n".join(f"{f.kind}: {f.error}\ninput: {f.data[:300]!r}"
                                         for f in stats.failures[:3])


def test_script_encoding_round_trips():
    items = [(0, b"abc"), (1, 7), (1, b"\xfe\xfd"), (0, 65536)]
    seed, back = decode_script(encode_script(items, seed=42))
    assert seed == 42 and back == items


def test_mutator_is_deterministic():
    import random

    a = [mutate(random.Random(5), b"PUB a 3\r\nabc\r\n" * 3, [b"x"], True) for _ in range(3)]
    b = [mutate(random.Random(5), b"PUB a 3\r\nabc\r\n" * 3, [b"x"], True) for _ in range(3)]
    assert a == b
