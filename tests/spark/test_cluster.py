"""``msgcap spark ingest`` on a real standalone cluster: one master and two workers started
from the installed PySpark (``bin/spark-class``), the CLI run as a separate driver process
(the test process already holds the shared local session).

What it pins: the output equals ``msgcap dissect`` when executors run tasks in their own
processes and scratch directories (split and whole-file), a relative ``-o`` lands next
to the driver, and executors whose Python lacks msgcap give ``error:``/``fix:`` and exit
2 instead of a traceback after four task attempts."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyzer.pipeline import Options, dissect_capture
from tests.spark.helpers import assert_same_dataset

pytestmark = pytest.mark.spark

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"  # a Python without msgcap (nor pyarrow)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not seen in {path}:\n{path.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` with two one-core workers."""
    pyspark = pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark")
    home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(logs / "work")}
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

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
        _wait_for(mlog, "I have been elected leader", master)
        for k in range(2):
            w, wlog = start(f"worker{k}", "org.apache.spark.deploy.worker.Worker", url,
                            "--cores", "1", "--memory", "768m", "--webui-port", "0")
            _wait_for(wlog, "Successfully registered with master", w)
        yield url
    finally:
        for p in reversed(procs):  # only the processes this fixture started
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _ingest(url: str, cwd: Path, *args: str, python: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    conf = ["--conf", "spark.driver.host=127.0.0.1", "--conf",
            "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.executor.memory=512m"]
    if python:
        conf += ["--conf", f"spark.pyspark.python={python}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("PYSPARK_PYTHON", None)
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "spark", "ingest", *args, "--master", url,
         *conf], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_cluster_output_equals_local_and_relative_output_is_the_drivers(
        cluster: str, tmp_path: Path) -> None:
    nats = SAMPLES / "nats-basic.pcap"
    quic = SAMPLES / "felix-quic.pcap"
    opts = Options(keylog=str(SAMPLES / "felix-quic.keys"))
    for p in (nats, quic):
        dissect_capture(p, tmp_path / "local", opts)
    # nats-basic split into two ranges, felix-quic one task; -o relative to the cwd
    run = _ingest(cluster, tmp_path, str(nats), str(quic), "-o", "rel-out",
                  "--split-bytes", str(nats.stat().st_size // 2 + 1),
                  "--keylog", str(SAMPLES / "felix-quic.keys"))
    assert run.returncode == 1, run.stderr[-3000:]  # degraded: felix-quic's own anomalies
    assert f"{nats}: split:2" in run.stderr
    assert_same_dataset(tmp_path / "local", tmp_path / "rel-out")
    # nothing of any attempt is left behind, nothing landed in the workers' directories
    leftovers = [p for p in (tmp_path / "rel-out").rglob(".*") if p.name != ".msgcap-run"]
    assert [p for p in leftovers if "inprogress" in p.name or "staging" in p.name] == []


def test_executors_without_msgcap_are_refused_with_a_fix(cluster: str, tmp_path: Path) -> None:
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON}")
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import analyzer.pipeline"],
                           cwd="/", capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} has msgcap")
    run = _ingest(cluster, tmp_path, str(SAMPLES / "nats-basic.pcap"), "-o", "out",
                  python=SYSTEM_PYTHON)
    assert run.returncode == 2, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    err = next(ln for ln in lines if ln.startswith("error:"))
    assert "the Spark executors cannot import msgcap" in err, err
    assert "ModuleNotFoundError" in err and SYSTEM_PYTHON in err
    assert lines[lines.index(err) + 1].startswith("fix: give the executors a Python")
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out" / "nats").exists()
