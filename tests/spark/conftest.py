"""Spark tests reuse the one session-scoped ``spark`` fixture of ``tests/analyzer`` (one
SparkSession, ``local[2]``, two shuffle partitions, for the whole test run), which
tests/conftest.py imports with the session's one Spark run of the analyses.

``cluster``: a standalone cluster (one master, two one-core workers started from the
installed PySpark's ``bin/spark-class``), started once for the session and shared by every
test that needs one.  ``s3``: a local S3-API server (moto in server mode) on a free port,
with a bucket, for the tests of URIs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.analyzer.conftest import JVM_OPTIONS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not seen in {path}:\n{path.read_text(errors='replace')}")


@dataclass
class Cluster:
    url: str
    work: Path  # SPARK_WORKER_DIR of both workers (executor logs and scratch)
    workers: list[subprocess.Popen]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """``spark://127.0.0.1:<port>`` with two one-core workers."""
    pyspark = pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(logs / "work"),
           "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS}  # the master's and workers' JVMs
    env.pop("PYTHONPATH", None)  # executors see msgcap only through their own Python
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    workers: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = logs / f"{name}.log"
        with open(log, "wb") as f:
            p = subprocess.Popen(["bash", str(home / "bin" / "spark-class"), *args], env=env,
                                 stdout=f, stderr=subprocess.STDOUT)
        procs.append(p)
        return p, log

    try:
        master, mlog = start("master", "org.apache.spark.deploy.master.Master", "--host",
                             "127.0.0.1", "--port", str(port), "--webui-port", "0")
        wait_for(mlog, "I have been elected leader", master)
        # both workers' JVMs start side by side (one after the other cost seconds more)
        started = [start(f"worker{k}", "org.apache.spark.deploy.worker.Worker", url,
                         "--cores", "1", "--memory", "768m", "--webui-port", "0")
                   for k in range(2)]
        for w, wlog in started:
            wait_for(wlog, "Successfully registered with master", w)
            workers.append(w)
        yield Cluster(url, logs / "work", workers)
    finally:
        for p in reversed(procs):  # only the processes this fixture started
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@dataclass
class S3:
    endpoint: str
    bucket: str
    env: dict[str, str]  # AWS_* settings that reach this server


@pytest.fixture(scope="session")
def s3(tmp_path_factory) -> Iterator[S3]:
    """moto's S3 server on a free port with one bucket; ``env`` are the standard AWS_*
    variables (``AWS_ENDPOINT_URL`` included) that point boto3 and pyarrow at it."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                 str(port)], stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_for(log, "Running on", proc, timeout=60)
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                              aws_access_key_id="testing", aws_secret_access_key="testing",
                              region_name="us-east-1")
        client.create_bucket(Bucket="msgcap")
        yield S3(env["AWS_ENDPOINT_URL"], "msgcap", env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
