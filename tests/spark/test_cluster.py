"""``msgcap spark ingest`` on a real standalone cluster: one master and two workers started
from the installed PySpark (``bin/spark-class``), the CLI run as a separate driver process
(the test process already holds the shared local session).

What it pins: the output equals ``msgcap dissect`` when executors run tasks in their own
processes and scratch directories (split and whole-file), also when one worker's executor
is killed mid-job; a relative ``-o`` lands next to the driver; executors whose Python lacks
msgcap give ``error:``/``fix:`` and exit 2 instead of a traceback after four task attempts;
and docs/spark.md's shipping recipe works with ``spark-submit``, captures and dataset in S3.
The cluster (and the S3 server) are session fixtures (tests/spark/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analyzer.pipeline import Options, dissect_capture
from tests.analyzer.conftest import JVM_OPTIONS
from tests.spark.conftest import S3, Cluster
from tests.spark.helpers import assert_same_dataset

pytestmark = pytest.mark.spark

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"  # a Python without msgcap (nor pyarrow)


# every application of these tests: no web UI (nobody looks; it costs each driver a server);
# its driver's and executors' JVMs as the shared session's (``JVM_OPTIONS``: why)
APP_CONF = ("spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1",
            "spark.executor.memory=512m", "spark.ui.enabled=false",
            f"spark.driver.extraJavaOptions={JVM_OPTIONS}",
            f"spark.executor.extraJavaOptions={JVM_OPTIONS}")


def _ingest(cluster: Cluster, cwd: Path, *args: str, python: str | None = None,
            env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    conf = [a for c in (*APP_CONF, *extra) for a in ("--conf", c)]
    for key, value in (env or {}).items():  # the documented way executors get AWS_*
        conf += ["--conf", f"spark.executorEnv.{key}={value}"]
    if python:
        conf += ["--conf", f"spark.pyspark.python={python}"]
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", **(env or {})}
    run_env.pop("PYSPARK_PYTHON", None)
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "spark", "ingest", *args, "--master",
         cluster.url, *conf], cwd=cwd, env=run_env, capture_output=True, text=True,
        timeout=600)


def _executors_of(worker: subprocess.Popen) -> list[int]:
    """Process ids of the executor JVMs a worker (a process the fixture started) runs."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == worker.pid and b"CoarseGrainedExecutorBackend" in cmd:
            found.append(int(stat.parent.name))
    return found


class _ExecutorKiller(threading.Thread):
    """Kills one worker's executor (SIGKILL, by pid) as soon as ``ready()`` is true, so a
    job loses an executor -- its running tasks and the shuffle files it held -- midway."""

    def __init__(self, worker: subprocess.Popen, ready) -> None:
        super().__init__(daemon=True)
        self.worker, self.ready = worker, ready
        self.killed: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 400
        while not self.done.is_set() and time.monotonic() < deadline:
            if self.ready():
                for pid in _executors_of(self.worker):
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                if self.killed:
                    return
            time.sleep(0.05)


def test_cluster_output_equals_local_and_relative_output_is_the_drivers(
        cluster: Cluster, tmp_path: Path) -> None:
    """Also the recovery of a lost worker's executor: it is killed once the dissection
    stage of the split capture is under way (its staging directory exists); Spark reruns
    the lost tasks and shuffle output on the other executor or a replacement, the attempt
    files of the lost tasks are removed, and the output is still the local run's.  (In
    the same job, to spare the suite another application start.)"""
    nats = SAMPLES / "nats-basic.pcap"
    quic = SAMPLES / "felix-quic.pcap"
    opts = Options(keylog=str(SAMPLES / "felix-quic.keys"))
    for p in (nats, quic):
        dissect_capture(p, tmp_path / "local", opts)
    out = tmp_path / "rel-out"
    killer = _ExecutorKiller(cluster.workers[0], lambda: out.is_dir() and any(
        p.name.startswith(".msgcap-spark-staging-") for p in out.iterdir()))
    killer.start()
    # nats-basic split into two ranges, felix-quic one task; -o relative to the cwd
    try:
        run = _ingest(cluster, tmp_path, str(nats), str(quic), "-o", "rel-out",
                      "--split-bytes", str(nats.stat().st_size // 2 + 1),
                      "--keylog", str(SAMPLES / "felix-quic.keys"))
    finally:
        killer.done.set()
        killer.join()
    assert killer.killed, "no executor was running when the dissection stage started"
    assert run.returncode == 1, run.stderr[-3000:]  # degraded: felix-quic's own anomalies
    assert f"{nats}: split:2" in run.stderr
    # stderr is not a terminal: progress as plain lines
    assert "nats-basic.pcap: dissecting by connection · " in run.stderr
    assert_same_dataset(tmp_path / "local", tmp_path / "rel-out")
    # nothing of any attempt is left behind, nothing landed in the workers' directories
    leftovers = [p for p in (tmp_path / "rel-out").rglob(".*") if p.name != ".msgcap-run"]
    assert [p for p in leftovers if "inprogress" in p.name or "staging" in p.name] == []


def test_executors_without_msgcap_are_refused_with_a_fix(cluster: Cluster, tmp_path: Path) -> None:
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON}")
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import analyzer.pipeline"],
                           cwd="/", capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} has msgcap")
    # one executor is enough to be refused (the second one's JVM start only cost time)
    run = _ingest(cluster, tmp_path, str(SAMPLES / "nats-basic.pcap"), "-o", "out",
                  python=SYSTEM_PYTHON, extra=("spark.cores.max=1",))
    assert run.returncode == 2, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    err = next(ln for ln in lines if ln.startswith("error:"))
    assert "the Spark executors cannot import msgcap" in err, err
    assert "ModuleNotFoundError" in err and SYSTEM_PYTHON in err
    assert lines[lines.index(err) + 1].startswith("fix: give the executors a Python")
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out" / "nats").exists()


def _deps_only_venv(at: Path) -> Path:
    """A plain venv (``python -m venv``) whose site-packages hold msgcap's dependencies
    -- symlinks to this environment's, so nothing is downloaded -- but not msgcap (no
    package, no dist-info, no editable finder) and not PySpark (executors use the
    ``pyspark.zip`` Spark puts on their path).  Its Python."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(at)], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = next((at / "lib").glob("python3*/site-packages"))
    skip = ("msgcap", "__editable__", "pyspark", "py4j", "_virtualenv", "distutils-precedence")
    for entry in ours.iterdir():
        if not entry.name.startswith(skip) and not entry.name.endswith(".pth"):
            (theirs / entry.name).symlink_to(entry)
    python = at / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import pyarrow, numpy; import analyzer"],
                           cwd="/", capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert "No module named 'analyzer'" in probe.stderr, probe.stderr
    return python


def test_spark_submit_msgcap_shipped_as_an_archive_s3_in_and_out(
        cluster: Cluster, s3: S3, tmp_path: Path) -> None:
    """docs/spark.md's recipe, step by step, as one job (one application start: the
    cluster tests are the slow part of the suite):

    * executors run a Python *without* msgcap; msgcap (with its compiled NATS fast path
      and its entry points) is installed into a directory, zipped, shipped with
      ``--archives`` and put on the executors' path with ``spark.executorEnv.PYTHONPATH``;
    * the job is started with ``spark-submit`` and ``analyzer/spark/submit.py``;
    * captures are read from an S3 bucket (moto's server): one split into byte ranges
      read through S3, one whole, copied by its task; the dataset is written to the bucket
      by the executors and committed by copy + delete; AWS_* reach the executors as
      ``spark.executorEnv``.

    Read back over the same endpoint (pyarrow), every table and the manifest equal the
    local ``msgcap dissect``."""
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs
    import pyspark

    import analyzer.spark.submit as submit

    lib, src = tmp_path / "msgcap-lib", tmp_path / "src"
    for name in ("analyzer", "dissectors", "reassembly"):  # a copy: pip builds in the tree
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(lib), str(src)], check=True,
                   capture_output=True)
    assert list(lib.glob("dissectors/nats/_speedups*.so"))  # a zip import could not load it
    archive = shutil.make_archive(str(tmp_path / "msgcap-lib"), "zip", lib)

    python = _deps_only_venv(tmp_path / "exec-venv")
    nats, js = SAMPLES / "nats-basic.pcap", SAMPLES / "nats-js.pcap"  # split / one task
    for p in (nats, js):
        dissect_capture(p, tmp_path / "local", Options())
    fs = pafs.S3FileSystem(endpoint_override=s3.endpoint, access_key="testing",
                           secret_key="testing", region="us-east-1")
    for p in (nats, js):
        pafs.copy_files(str(p), f"{s3.bucket}/caps/{p.name}", destination_filesystem=fs)
    uris = [f"s3://{s3.bucket}/caps/{p.name}" for p in (nats, js)]

    env = {**os.environ, "NO_COLOR": "1", **s3.env}
    for key in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(key, None)
    conf = [f"spark.executorEnv.{k}={v}" for k, v in s3.env.items()] + [
        "spark.executorEnv.PYTHONPATH=msgcap", f"spark.pyspark.python={python}",
        f"spark.pyspark.driver.python={sys.executable}", *APP_CONF]
    run = subprocess.run(
        [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", cluster.url,
         "--archives", f"{archive}#msgcap", *[a for c in conf for a in ("--conf", c)],
         submit.__file__, "spark", "ingest", *uris, "-o", f"s3://{s3.bucket}/ds",
         "--split-bytes", str(nats.stat().st_size // 2 + 1)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    # spark-submit passes the Python driver's stderr on to its own stdout
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-4000:]
    assert f"{uris[0]}: split:2" in said and f"{uris[1]}: file" in said

    names = [i.path for i in fs.get_file_info(pafs.FileSelector(f"{s3.bucket}/ds",
                                                                recursive=True))
             if i.type == pafs.FileType.File]
    assert not [n for n in names if "inprogress" in n or "staging" in n], names
    # read straight from the bucket, as another tool would
    nats_rows = pads.dataset(f"{s3.bucket}/ds/nats", filesystem=fs, format="parquet",
                             partitioning="hive").count_rows()
    local_rows = pads.dataset(str(tmp_path / "local" / "nats"), format="parquet",
                              partitioning="hive").count_rows()
    assert nats_rows == local_rows > 100
    # and every table, row by row, and the manifest (whose inputs name the URIs)
    got = tmp_path / "from-s3"
    pafs.copy_files(f"{s3.bucket}/ds", str(got), source_filesystem=fs)
    manifest = json.loads((got / "manifest.json").read_text())
    assert sorted(i["input"]["path"] for i in manifest["inputs"]) == sorted(uris)
    for entry in manifest["inputs"]:
        entry["input"]["path"] = str(SAMPLES / entry["input"]["path"].rsplit("/", 1)[1])
    (got / "manifest.json").write_text(json.dumps(manifest))
    assert_same_dataset(tmp_path / "local", got)
    # the executors ran the shipped copy: no import failure in any executor's log
    logs = "".join(p.read_text(errors="replace") for p in cluster.work.rglob("stderr"))
    assert "No module named" not in logs
