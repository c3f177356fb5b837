"""Acceptance: the example Redis plugin, pip-installed like any third-party plugin, is
found through its entry point and decodes tests/data/captures/zeek/redis/pubsub.pcap.

Expected counts were made by hand from ``msgcap follow`` on the four TCP streams (see
samples/plugins/redis-resp/README.md): flow 0 subscribes to ``Foo`` and ``F*``, gets one
``message`` and two ``pmessage``, then ``RESET`` and ``GET``; flows 1-3 send one inline
command each (two PUBLISH, one SET).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from analyzer.testing import dissect_with_cli
from tests.conftest import SHARED
from tests.plugins.pluginhelp import REDIS_PLUGIN, installed, msgcap, pip_uninstall

CAPTURE = SHARED / "captures" / "zeek" / "redis" / "pubsub.pcap"
DIST = "msgcap-redis-resp"


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    with installed(REDIS_PLUGIN, DIST, tmp_path_factory.mktemp("redis-plugin")) as copies:
        yield copies[0]


def test_protocols_lists_the_plugin(plugin) -> None:
    proc = msgcap("protocols")
    row = [line for line in proc.stdout.splitlines() if " redis " in line]
    assert row, proc.stdout
    assert "tcp" in row[0] and "6379" in row[0] and "msgcap_redis:RedisDissector" in row[0]
    assert "redis, redis_pubsub" in row[0]
    assert "msgcap_redis" not in proc.stderr  # loaded, not reported as broken


def test_dissect_writes_the_redis_tables(plugin, tmp_path) -> None:
    assert CAPTURE.exists(), f"{CAPTURE} is committed (tests/data/captures/README.md)"
    run = dissect_with_cli(CAPTURE, tmp_path / "out")
    assert run.returncode == 0, run.stderr  # clean: no anomaly at all
    redis = run.tables["redis"]
    commands = Counter(r["command"] for r in redis if r["kind"] == "command")
    assert commands == {"PUBLISH": 2, "SUBSCRIBE": 1, "PSUBSCRIBE": 1, "RESET": 1, "GET": 1,
                        "SET": 1}
    assert Counter(r["kind"] for r in redis) == {"command": 7, "reply": 7, "push": 3}
    assert Counter(r["resp_type"] for r in redis if r["kind"] == "command") == {
        "array": 4, "inline": 3}
    pubsub = run.tables["redis_pubsub"]
    assert Counter(r["event"] for r in pubsub) == {
        "publish": 2, "subscribe": 1, "psubscribe": 1, "message": 1, "pmessage": 2}
    by_id = {r["record_id"]: r for r in redis}
    for r in pubsub:  # every pub/sub row is the child of a redis row of its flow
        parent = by_id[r["parent_record_id"]]
        assert parent["flow_id"] == r["flow_id"]
    flows = run.tables["flows"]
    assert len(flows) == 4 and {f["protocol"] for f in flows} == {"redis"}
    for f in flows:  # every stream byte decoded
        assert f["decoded_bytes_c2s"] == f["stream_bytes_c2s"]
        assert f["decoded_bytes_s2c"] == f["stream_bytes_s2c"]
    assert "anomalies" not in run.tables or not run.tables["anomalies"]


def test_schema_shows_plugin_tables(plugin) -> None:
    proc = msgcap("schema", "redis_pubsub")
    assert proc.returncode == 0, proc.stderr
    assert "redis_pubsub (v1)" in proc.stdout and "subscriptions" in proc.stdout


def test_plugin_own_tests_pass_against_the_installed_copy(plugin) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=plugin, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_uninstall_removes_it(plugin) -> None:
    pip_uninstall(DIST)
    proc = msgcap("protocols")
    assert " redis " not in proc.stdout
