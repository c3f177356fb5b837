"""Faults in the output end with the right code and a way on (issue 17, part 5).

Each case runs ``msgcap dissect`` as a program, as a user would: a full disk (a 2 MiB
tmpfs mounted by the test), a run killed with ``kill -9`` and run again, two runs writing
the same capture into one OUT at once, and a capture already in OUT.  Expected every
time: exit 2, ``error: ...`` then ``fix: ...`` naming command-line flags, no traceback,
and an OUT that says what happened (manifest entry ``failed``, or the run lock of a run
that did not finish) without blocking the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.cli import main
from dissectors.api import Direction
from dissectors.sdk.testing import Data, PcapFlow, write_pcap

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
PULSAR = SAMPLES / "pulsar-client.pcap"  # ~410 KB of Parquet: more than the disk we leave
C, S = Direction.C2S, Direction.S2C


def _msgcap(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)],
                          capture_output=True, text=True, check=False, cwd=REPO,
                          env={**os.environ, "COLUMNS": "250"}, timeout=600)


def _start(*args: str | Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "analyzer.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "COLUMNS": "250"})


def _capture_id(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def _assert_error_fix(proc: subprocess.CompletedProcess, error: str, fix: str) -> None:
    """Exit 2; an ``error:`` line starting with ``error`` and a ``fix:`` line containing
    ``fix``; no traceback (neither ours nor one printed by a destructor at exit)."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    lines = _lines(proc.stderr)
    err = [line for line in lines if line.startswith("error: ")]
    fixes = [line for line in lines if line.startswith("fix: ")]
    assert len(err) == 1 and err[0].startswith(f"error: {error}"), proc.stderr
    assert len(fixes) == 1 and fix in fixes[0], proc.stderr
    assert "overwrite=True" not in proc.stderr  # hints name CLI flags, never Python's


def _leftovers(out: Path) -> list[str]:
    """Files of unfinished runs: in-progress Parquet files and run locks."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.name.endswith(".inprogress") or p.name.startswith(".msgcap-run-"))


def _nats_rows(out: Path) -> int:
    return pq.read_table(out / "nats").num_rows


@pytest.fixture(scope="module")
def big_capture(tmp_path_factory) -> Path:
    """One NATS connection publishing 200,000 distinct 32-byte messages (~13 MB of
    Parquet, several 65,536-row groups written by the Parquet thread while the run
    goes on); a PING/PONG every 200 messages keeps the client inside the server's
    receive window."""
    script = [Data(S, b'INFO {"server_id":"x","max_payload":1048576}\r\n'),
              Data(C, b"CONNECT {}\r\n")]
    n, per = 200_000, 200
    for k in range(0, n, per):
        body = b"".join(b"PUB s.%d 32\r\n%s\r\n" % (i, hashlib.sha256(b"%d" % i).hexdigest()[
            :32].encode()) for i in range(k, k + per))
        script += [Data(C, body + b"PING\r\n"), Data(S, b"PONG\r\n")]
    return write_pcap(tmp_path_factory.mktemp("big") / "big.pcap", [PcapFlow(script, 4222)])


BIG_NATS_ROWS = 2 + 200_000 + 2 * 1000  # INFO, CONNECT, the PUBs, a PING and PONG each


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 2 MiB tmpfs (we are root in CI); skipped only where mounting is impossible."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _fill(disk: Path, leave_kib: int) -> Path:
    """A file that leaves about ``leave_kib`` KiB of ``disk`` free."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_kib * 1024))
    return filler


def _assert_failed_in_manifest(out: Path, capture_id: str) -> None:
    """What was written is marked: the capture's manifest entry says failed, why, and
    lists no rows; no file of the run is left to pass for data."""
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = [i for i in manifest["inputs"] if i["capture_id"] == capture_id]
    assert entry["status"] == "failed" and entry["exit_code"] == 2
    assert entry["error"] == f"output: cannot write the dataset in {out}: No space left on device"
    assert entry["rows"] == {}
    assert manifest["status"] == "failed"
    assert _leftovers(out) == []
    assert not list(out.rglob("part-*.parquet"))
    assert not [p for p in out.iterdir() if p.is_dir()]  # no empty partition left


def test_regression_disk_full_at_the_end_of_a_sample_run_exits_2_with_error_and_fix(
        small_disk, tmp_path) -> None:
    """Disk full while the files of a sample capture are finished (their last row groups
    and footers): exit 2, ``error: ... No space left on device``, a ``fix:``, no
    traceback, the capture recorded as failed; freeing the space and following the fix
    gives the dataset a run on a roomy disk gives."""
    out = small_disk / "out"
    filler = _fill(small_disk, 150)
    proc = _msgcap("dissect", PULSAR, "-o", out)
    _assert_error_fix(proc, f"cannot write the dataset in {out}: No space left on device",
                      "then run the same command again with --overwrite")
    assert "free space on the file system that holds" in proc.stderr
    _assert_failed_in_manifest(out, _capture_id(PULSAR))

    filler.unlink()
    ref = _start("dissect", PULSAR, "-o", tmp_path / "ref")  # beside the run it checks
    again = _msgcap("dissect", PULSAR, "-o", out, "--overwrite")
    _, ref_err = ref.communicate(timeout=600)
    assert again.returncode == ref.returncode == 0, again.stderr + ref_err
    for table in ("pulsar_commands", "pulsar_messages", "flows"):
        assert pq.read_table(out / table).num_rows == pq.read_table(tmp_path / "ref" / table
                                                                    ).num_rows > 0
    assert json.loads((out / "manifest.json").read_text())["status"] == "clean"


@pytest.mark.parametrize("workers", [1, 2])
def test_regression_disk_full_mid_run_was_an_arrow_invalid_from_the_writer_thread(
        small_disk, big_capture, workers) -> None:
    """Disk full while the Parquet thread writes row groups of a large run: was an
    uncaught ``ArrowInvalid: Operation on closed file`` and exit 1.  With 2 workers the
    worker that meets it ends the run (no second, exact-mode attempt)."""
    out = small_disk / "out"
    proc = _msgcap("dissect", big_capture, "-o", out, "--workers", str(workers))
    _assert_error_fix(proc, f"cannot write the dataset in {out}: No space left on device",
                      "--overwrite")
    assert "closed file" not in proc.stderr
    _assert_failed_in_manifest(out, _capture_id(big_capture))


def _wait_for(what, timeout_s: float = 120.0, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout_s
    while not what():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended before the test could act: {proc.communicate()}")
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def _lock_of(out: Path, capture: Path) -> Path:
    return out / f".msgcap-run-{_capture_id(capture)}.lock"


def _lock_pid(lock: Path) -> int | None:
    try:
        return json.loads(lock.read_text()).get("pid")
    except (OSError, ValueError):
        return None


def test_regression_kill_9_left_files_that_refused_the_next_run(tmp_path, big_capture) -> None:
    """A run killed with ``kill -9`` while writing leaves its in-progress files and its
    run lock; the next run (no --overwrite) is not blocked by them: it sees the lock is
    no longer held, removes the dead run's files and writes the capture whole."""
    out = tmp_path / "out"
    run = _start("dissect", big_capture, "-o", out)
    try:
        _wait_for(lambda: any(out.rglob(".part-0.parquet.inprogress")), proc=run)
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.communicate()
    assert run.returncode == -signal.SIGKILL
    lock = _lock_of(out, big_capture)
    assert _lock_pid(lock) == run.pid  # the dead run's marks are there ...
    assert any(p.name.endswith(".inprogress") for p in out.rglob("*"))

    again = _msgcap("dissect", big_capture, "-o", out)  # ... and block nothing
    assert again.returncode == 0, again.stderr
    assert f"pid {run.pid}" in again.stderr and "did not finish" in again.stderr
    assert _leftovers(out) == []
    assert _nats_rows(out) == BIG_NATS_ROWS
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "clean" and manifest["rows"]["nats"] == BIG_NATS_ROWS


@pytest.mark.parametrize("workers", [1, 2])
def test_two_runs_of_one_capture_into_one_out_at_once_one_is_refused(
        tmp_path, big_capture, workers) -> None:
    """While one run writes a capture into OUT, a second run of the same capture into
    the same OUT — even with --overwrite — is refused (exit 2, error: + fix:, naming the
    first run's pid) and changes nothing; the first run completes."""
    out = tmp_path / "out"
    first = _start("dissect", big_capture, "-o", out, "--workers", str(workers))
    try:
        lock = _lock_of(out, big_capture)
        _wait_for(lambda: _lock_pid(lock) is not None, proc=first)
        second = _msgcap("dissect", big_capture, "-o", out, "--overwrite")
        assert first.poll() is None, "the first run ended before the second tried"
    finally:
        first.communicate()
    _assert_error_fix(
        second,
        f"capture {_capture_id(big_capture)} is being written into {out} by another msgcap "
        f"run (pid {first.pid} on ",
        "wait for that run to end, or give -o another directory")
    assert first.returncode == 0
    assert _leftovers(out) == []
    assert _nats_rows(out) == BIG_NATS_ROWS


def test_capture_already_in_out_names_the_overwrite_flag(tmp_path) -> None:
    """The hint names the command-line flag (it said "pass overwrite=True")."""
    out = tmp_path / "out"
    assert main(["dissect", str(PULSAR), "-o", str(out), "-q"]) == 0  # the capture in OUT
    proc = _msgcap("dissect", PULSAR, "-o", out)
    _assert_error_fix(proc, f"capture {_capture_id(PULSAR)} is already in {out} (",
                      "add --overwrite to replace it")
    assert _leftovers(out) == []


def test_read_only_out_is_refused_with_error_and_fix(tmp_path) -> None:
    """An OUT that cannot be written at all (a read-only mount) is refused before any
    dissection, with the error the OS gave and a fix that does not mention --overwrite
    (nothing was written)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        out = mnt / "out"
        run = _msgcap("dissect", PULSAR, "-o", out)
        _assert_error_fix(run, f"cannot write the dataset in {out}: Read-only file system",
                          "give -o a directory you can write to")
        assert "--overwrite" not in run.stderr
        assert not out.exists()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)
