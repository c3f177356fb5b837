"""Fixtures for analyzer tests, including one local Spark session shared by all of them.

The session is created once per test run (``scope="session"``): starting Spark costs
seconds, running a small query a fraction of that.  Tests that need it take the
``spark`` fixture and are marked ``spark`` (``pytest -m "not spark"`` skips them); the
fixture skips cleanly when pyspark or Java is missing.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest

# Every JVM the tests start (the shared session's driver, the test cluster's master,
# workers, drivers and executors) compiles with the client compiler only: Spark's JVMs here
# live a few minutes on tiny data, and nearly half of their CPU went to the optimising compiler
# (C2) compiling Spark's own code and each query's generated classes, work that never pays
# back.  Measured, the empty-dataset run of every analysis (test_engines.py): 87.6 CPU s
# of the driver JVM with the default, 47.0 s with this.  Which compiler runs the byte code
# changes no result: the queries, their plans and partitions are the same.  They also
# collect garbage with the serial collector: G1's concurrent and parallel threads cost CPU
# that two shared cores do not have to spare, on heaps this small.  Measured, every analysis
# over all the samples on a fresh session (driver JVM CPU, alternated, load 6-8): 90.7, 94.5
# and 88.2 s with G1, 78.7 and 79.1 s with it.  The collector changes no plan either.
# The client compiler alone also shrinks the JVM's default code cache from 240 MB to 48 MB,
# and the shared session compiles every query of the run into it: with -XX:+PrintCodeCache
# the Spark tests' driver ended at max_used=48,223 of 49,152 KB, and CI once failed eight
# tests on "Out of space in CodeCache for method handle intrinsic" (method handles cannot
# be flushed).  So the cache gets back the size the JVM gives it by default; it is reserved
# address space, committed only as it fills.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs a local Spark session (slow start)")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("msgcap-tests")
        # one session serves the whole run (every ingest and analysis test): Spark's
        # default 1g driver ran out of room for a broadcast join late in the run
        .config("spark.driver.memory", "3g")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)  # local[2]: executors too
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


# ------------------------------------------------------------------ row factories

CAPTURE_ID = "0123456789abcdef"
SHA = "0123456789abcdef" + "ab" * 24
T0 = 1_700_000_000_123_456_789  # ns; the last three digits exercise ns precision


def flow_row(i: int, capture_id: str = CAPTURE_ID) -> dict:
    """A plausible ``flows`` row; varies nulls, VLAN stacks, IPv6 and protocols."""
    row = {
        "capture_id": capture_id,
        "flow_id": i,
        "transport": "udp" if i % 7 == 3 else "tcp",
        "client_ip": f"10.0.{i // 250 % 250}.{i % 250}" if i % 5 else f"2001:db8::{i:x}",
        "client_port": 32768 + i % 20000,
        "server_ip": "10.1.0.1",
        "server_port": 4222 if i % 3 else 6650,
        "role_source": ("syn", "syn-ack", "port", "first-packet")[i % 4],
        "vlan": [] if i % 4 else [100, i % 4096],
        "ts_first": T0 + i * 1_000,
        "ts_last": T0 + i * 1_000 + 999,
        "frame_first": 2 * i + 1,
        "frame_last": 2 * i + 40,
        "protocol": (None, "nats", "pulsar")[i % 3],
        "close_reason": "closed" if i % 2 else "end-of-capture",
    }
    for n, base in enumerate(
        ("packets", "payload_bytes", "stream_bytes", "gap_bytes", "overlap_conflicts",
         "decoded_bytes", "undecoded_bytes")
    ):
        row[f"{base}_c2s"] = i * 10 + n
        row[f"{base}_s2c"] = i * 20 + n
    row["mid_stream_c2s"] = i % 11 == 0
    row["mid_stream_s2c"] = False
    return row


def anomaly_row(i: int, capture_id: str = CAPTURE_ID) -> dict:
    """An ``anomalies`` row; every fourth one concerns no flow (nulls)."""
    if i % 4 == 0:
        return {
            "capture_id": capture_id,
            "record_id": i,
            "kind": "capture.truncated",
            "detail": f"record {i} cut short",
            "frame": i,
            "source": "capture",
        }
    return {
        "capture_id": capture_id,
        "record_id": i,
        "flow_id": i // 3,
        "direction": "c2s" if i % 2 else "s2c",
        "kind": ("tcp.gap", "nats.unknown_op", "tcp.overlap_conflict")[i % 3],
        "detail": f"detail {i}",
        "ts": T0 + i,
        "frame": i + 1,
        "offset": i * 100,
        "nbytes": i % 50,
        "source": ("tcp", "dissector:nats", "tcp")[i % 3],
    }
