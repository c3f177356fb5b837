"""The Redis example plugin on zeek/redis/pubsub.pcap, row by row, in-process (imported
from its source tree; ``test_redis_installed`` covers the pip-installed path).

Expected rows come from reading the four reassembled streams (``msgcap follow``); see
samples/plugins/redis-resp/README.md.
"""

from __future__ import annotations

import sys

import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import Options, dissect_capture
from dissectors.api import ColumnBatch, Direction
from dissectors.registry import discover
from dissectors.sdk.testing import Data, Gap, PcapFlow, run_session, write_pcap
from dissectors.tables import unregister_table
from tests.conftest import SHARED
from tests.plugins.pluginhelp import REDIS_PLUGIN

CAPTURE = SHARED / "captures" / "zeek" / "redis" / "pubsub.pcap"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    assert CAPTURE.exists(), f"{CAPTURE} is committed (tests/data/captures/README.md)"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REDIS_PLUGIN / "src"))
        from msgcap_redis import RedisDissector

        reg = discover()
        assert reg.add(RedisDissector, "msgcap_redis:RedisDissector")
        out = tmp_path_factory.mktemp("redis") / "out"
        try:
            result = dissect_capture(CAPTURE, out, Options(strict=True, validate=True),
                                     registry=reg)
        finally:
            for spec in RedisDissector.tables:
                unregister_table(spec.name)
            sys.modules.pop("msgcap_redis", None)
    tables = {t: pq.read_table(out / t).to_pylist() for t in ("redis", "redis_pubsub", "flows")}
    return result, tables


def test_every_row(dataset) -> None:
    result, tables = dataset
    assert not result.anomalies
    got = [(r["flow_id"], r["direction"], r["kind"], r["summary"]) for r in tables["redis"]]
    assert sorted(got) == sorted([
        (0, "c2s", "command", "SUBSCRIBE Foo"),
        (0, "c2s", "command", "PSUBSCRIBE F*"),
        (0, "c2s", "command", "RESET"),
        (0, "c2s", "command", "GET sanity_check"),
        (0, "s2c", "reply", '["subscribe", "Foo", 1]'),
        (0, "s2c", "reply", '["psubscribe", "F*", 2]'),
        (0, "s2c", "push", '["message", "Foo", "Hi there :)"]'),
        (0, "s2c", "push", '["pmessage", "F*", "Foo", "Hi there :)"]'),
        (0, "s2c", "push", '["pmessage", "F*", "FeeFooFiiFum", "Hello! :)"]'),
        (0, "s2c", "reply", "RESET"),
        (0, "s2c", "reply", '"you_are_sane"'),
        (1, "c2s", "command", 'PUBLISH Foo "Hi there :)"'),
        (1, "s2c", "reply", "(integer) 2"),
        (2, "c2s", "command", 'PUBLISH FeeFooFiiFum "Hello! :)"'),
        (2, "s2c", "reply", "(integer) 1"),
        (3, "c2s", "command", "SET sanity_check you_are_sane"),
        (3, "s2c", "reply", "OK"),
    ])
    # replies pair with commands by msg_index (flow 0 is in pub/sub mode until RESET)
    get = next(r for r in tables["redis"] if r["command"] == "GET")
    answer = next(r for r in tables["redis"] if r["flow_id"] == 0
                  and r["direction"] == "s2c" and r["resp_type"] == "bulk_string")
    assert (get["msg_index"], answer["msg_index"]) == (3, 6)
    assert answer["bulk"] == b"you_are_sane" and answer["bulk_len"] == 12


def test_pubsub_rows(dataset) -> None:
    _, tables = dataset
    got = [(r["flow_id"], r["event"], r["channel"], r["pattern"], r["subscriptions"],
            r["payload"]) for r in tables["redis_pubsub"]]
    assert sorted(got, key=repr) == sorted([
        (0, "subscribe", "Foo", None, 1, None),
        (0, "psubscribe", None, "F*", 2, None),
        (1, "publish", "Foo", None, None, b"Hi there :)"),
        (0, "message", "Foo", None, None, b"Hi there :)"),
        (0, "pmessage", "Foo", "F*", None, b"Hi there :)"),
        (2, "publish", "FeeFooFiiFum", None, None, b"Hello! :)"),
        (0, "pmessage", "FeeFooFiiFum", "F*", None, b"Hello! :)"),
    ], key=repr)
    # the published payload and the delivered one hash the same
    sha = {r["payload_sha256"] for r in tables["redis_pubsub"] if r["channel"] == "Foo"
           and r["payload"]}
    assert len(sha) == 1


def test_all_bytes_decoded(dataset) -> None:
    _, tables = dataset
    for f in tables["flows"]:
        assert f["protocol"] == "redis"
        assert f["undecoded_bytes_c2s"] == f["undecoded_bytes_s2c"] == 0
        assert f["decoded_bytes_c2s"] == f["stream_bytes_c2s"] > 0


# ------------------------------------------- the columnar fast path writes the same rows

C, S = Direction.C2S, Direction.S2C


def _bulk(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


# every kind of row: multibulk and inline commands (PUBLISH: a row with children), RESP3
# replies, a pub/sub session, a bad command, a message cut by a gap, pipelining
SCRIPTS = [
    [Data(C, _bulk(b"HELLO", b"3") + _bulk(b"SET", b"k", b"v" * 5000) + b"PING\r\n"),
     Data(S, b"%2\r\n+server\r\n+redis\r\n+proto\r\n:3\r\n+OK\r\n+PONG\r\n"),
     Data(C, b"PUBLISH ch hello\r\nGET k\r\n" + _bulk(b"GET")),
     Data(S, b":1\r\n$5000\r\n" + b"v" * 5000 + b"\r\n-ERR wrong number of arguments\r\n"),
     Data(C, _bulk(b"MGET", b"a", b"b")), Gap(C, 7), Data(C, _bulk(b"DEL", b"a")),
     Data(S, b"*2\r\n$-1\r\n,3.5\r\n:1\r\n")],
    [Data(C, _bulk(b"SUBSCRIBE", b"news")),
     Data(S, b">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
             b">3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"),
     Data(C, _bulk(b"PING")), Data(S, b"+PONG\r\n#t\r\n_\r\n(12345678901234567890\r\n")],
]


def _dissect(tmp_path, fast: bool) -> dict[str, list[dict]]:
    pcap = write_pcap(tmp_path / "redis.pcap",
                      [PcapFlow(s, 6379) for s in SCRIPTS for _ in range(3)])
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REDIS_PLUGIN / "src"))
        from msgcap_redis import RedisDissector

        reg = discover()
        assert reg.add(RedisDissector, "msgcap_redis:RedisDissector")
        out = tmp_path / f"fast-{fast}"
        try:
            dissect_capture(pcap, out, Options(fast=fast, strict=True, validate=True),
                            registry=reg)
        finally:
            for spec in RedisDissector.tables:
                unregister_table(spec.name)
            sys.modules.pop("msgcap_redis", None)
    return {t: sorted(pq.read_table(out / t).to_pylist(), key=repr)
            for t in ("redis", "redis_pubsub", "anomalies", "flows")}


def test_fast_path_rows_equal_the_row_path(tmp_path) -> None:
    plain, fast = _dissect(tmp_path, False), _dissect(tmp_path, True)
    assert len(plain["redis"]) == 78 and plain["redis_pubsub"] and plain["anomalies"]
    for table in plain:
        assert fast[table] == plain[table], table


def test_fast_path_is_taken(tmp_path) -> None:
    """The columnar path really runs: a session switched to columns returns
    ``ColumnBatch`` records for its childless rows (one per run of rows)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REDIS_PLUGIN / "src"))
        from msgcap_redis import RedisDissector

        try:
            session = RedisDissector.session({})
            session.columnar(True)
            run = run_session(lambda: session, SCRIPTS[1])
        finally:
            sys.modules.pop("msgcap_redis", None)
    kinds = [type(r).__name__ for r in run.records]
    assert "ColumnBatch" in kinds and "Record" in kinds  # subscribe reply: has children
    assert sum(r.n for r in run.records if isinstance(r, ColumnBatch)) == len(session.rows)
