"""Shared pieces of the dissect / Pulsar benchmarks: measuring a child process tree,
finding the ``msgcap`` command, counting Parquet rows, formatting.

Why a process-tree sampler: ``msgcap dissect --workers N`` runs its work in child
processes, and the kernel only keeps a peak (``VmHWM``) per process and forgets it when
the process exits; ``wait4``'s ``ru_maxrss`` is the largest single process, never a sum.
So the tree's peak is sampled: every ~20 ms the sum of ``VmRSS`` over the process and
all its descendants is read from ``/proc`` and the largest sum kept.  A peak shorter
than the sampling interval can be missed; the single-process peak mostly does not have
that problem (``VmHWM`` of each process, read while it is alive: only growth in its last
~20 ms is missed).  ``ru_maxrss`` cannot stand in: see ``run_measured``.
Shared pages (a forked worker's copy-on-write pages, shared libraries) are counted once
per process that maps them, so the tree sum is an upper bound of the physical memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_INTERVAL_S = 0.02
# Issue 22's "today", measured beside this tree by the benchmarks' ``--baseline``: the
# commit that added the STAN and Liftbridge benchmarks (2026-11-26 20:43), 40 minutes
# after the work began (5be0b7a) and before the native engine or any Pulsar,
# STAN or Liftbridge fast path was wired in (22ce1ad, 4843b68)
BASELINE_REV = "cfccea9"
# issue 22's ratio for the Pulsar, STAN and Liftbridge lines
TARGET_RATIO = 10.0
MIB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- /proc --------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Direct children of every thread of ``pid`` (``/proc/PID/task/TID/children``).

    Every thread is read because a process pool may be started from a helper thread.
    """
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    return kids


def _children_by_scan(root: int) -> list[int]:
    """Fallback when the kernel has no ``children`` files: scan all of /proc for ppids."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # field 4 is the ppid; the command name (field 2) may contain spaces: split after ')'
        parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        tree.extend(kids)
        todo.extend(kids)
    return tree


_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def process_tree(root: int) -> list[int]:
    """``root`` and all its live descendants."""
    if not _HAVE_CHILDREN_FILE:
        return [root, *_children_by_scan(root)]
    tree, todo = [], [root]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(_children(p))
    return tree


def _status_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in KiB, or None when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    rss = hwm = -1
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    if rss < 0:  # zombie: no memory lines any more
        return None
    return rss, max(hwm, rss)


def _cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


@dataclass
class ProcStats:
    pid: int
    cmdline: str
    peak_hwm_mib: float = 0.0
    cpu_s: float = 0.0


class TreeSampler(threading.Thread):
    """Samples the RSS of a process tree every ``interval`` seconds until stopped."""

    def __init__(self, root: int, interval: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.peak_tree_kib = 0
        self.samples = 0
        self.max_procs = 0
        self.procs: dict[int, ProcStats] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        total = 0
        live = 0
        for pid in process_tree(self.root):
            st = _status_kib(pid)
            if st is None:
                continue
            rss, hwm = st
            live += 1
            total += rss
            ps = self.procs.get(pid)
            if ps is None:
                ps = self.procs[pid] = ProcStats(pid, _cmdline(pid))
            ps.peak_hwm_mib = max(ps.peak_hwm_mib, hwm / 1024)
            cpu = _cpu_s(pid)
            if cpu is not None:
                ps.cpu_s = cpu
        self.samples += 1
        self.max_procs = max(self.max_procs, live)
        self.peak_tree_kib = max(self.peak_tree_kib, total)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


@dataclass
class Measured:
    """One child-process run: wall time, exit code and memory of its whole tree."""

    cmd: list[str]
    wall_s: float
    rc: int
    peak_rss_tree_mib: float  # largest sampled sum of VmRSS over the tree
    peak_rss_single_mib: float  # largest single process (its VmHWM, read while alive)
    max_procs: int  # most processes alive in the tree at one sample
    busy_children: int  # descendants that used a noticeable share of CPU (workers)
    samples: int
    ru_maxrss_mib: float  # wait4's, for the record: includes the parent's (see run_measured)
    cpu_user_s: float  # of the root and its reaped descendants (wait4)
    cpu_sys_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    procs: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def run_measured(
    cmd: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    keep_stdout: bool = False,
    interval: float = SAMPLE_INTERVAL_S,
) -> Measured:
    """Run ``cmd`` to completion; time it and sample its process tree's memory.

    stdout/stderr go to temporary files (a pipe the child fills could stall it; a
    terminal would turn on progress bars); their tails are kept for error messages.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=out if keep_stdout else subprocess.DEVNULL, stderr=err,
        )
        sampler = TreeSampler(proc.pid, interval)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace") if keep_stdout else ""
        stderr = err.read().decode(errors="replace")
    # ru_maxrss is not used for the peaks: Linux carries the parent's high-water mark
    # over a vfork+exec into the child's, so a small child of a big parent (this one
    # after pyarrow was imported) reports the parent's size.  Kept in the JSON only.
    single = max((p.peak_hwm_mib for p in sampler.procs.values()), default=0.0)
    children = [p for pid, p in sampler.procs.items() if pid != proc.pid]
    busy = sum(1 for p in children if p.cpu_s >= max(0.05, 0.05 * wall))
    return Measured(
        cmd=list(cmd),
        wall_s=wall,
        rc=proc.returncode,
        peak_rss_tree_mib=sampler.peak_tree_kib / 1024,
        peak_rss_single_mib=single,
        max_procs=sampler.max_procs,
        busy_children=busy,
        samples=sampler.samples,
        ru_maxrss_mib=usage.ru_maxrss / 1024,
        cpu_user_s=usage.ru_utime,
        cpu_sys_s=usage.ru_stime,
        stdout_tail=stdout[-4000:] if keep_stdout else "",
        stderr_tail=stderr[-2000:],
        procs=[asdict(p) for p in sampler.procs.values()],
    )


# -- msgcap ---------------------------------------------------------------------------


def compile_bytecode(root: Path = ROOT) -> None:
    """Bring the packages' bytecode (of the tree at ``root``) up to date before anything
    is timed.

    Why: where ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it), Python never
    writes ``__pycache__``, so after an edit every timed run compiles the changed
    modules again (~10 % of a 100 MB run).  A user's install has current bytecode after
    its first run (pip compiles a wheel's; an editable install writes it on first
    import), and that is what the benchmarks mean to measure."""
    import compileall

    for package in ("analyzer", "dissectors", "reassembly"):
        compileall.compile_dir(root / package, quiet=2)


def tree_at(rev: str, scratch: Path) -> Path:
    """A checkout of commit ``rev`` of this repository under ``scratch`` (kept between
    runs), its C extensions built in place and its bytecode compiled: an earlier version
    to measure beside this one in the same run, as ``python -m analyzer.cli`` with the
    checkout as working directory (its packages then come before the installed ones)."""
    full = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout.strip()
    tree = scratch / f"tree-{full[:12]}"
    if not (tree / ".built").is_file():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", full], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                       check=True, capture_output=True)
        (tree / ".built").write_text(full + "\n")
    compile_bytecode(tree)
    return tree



def baseline_tree(rev: str, scratch: Path) -> Path | None:
    """``tree_at(rev, scratch)`` for a benchmark's ``--baseline``, what it does printed;
    None, with the reason, when it cannot be made (no git, no such commit, no build)."""
    print(f"  baseline {rev}: building a checkout in {scratch}", flush=True)
    try:
        return tree_at(rev, scratch)
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", None) or ""
        err = (err.decode(errors="replace") if isinstance(err, bytes) else err).strip()[-300:]
        print(f"  baseline {rev}: n/a ({e}{': ' + err if err else ''})")
        return None


def msgcap_command() -> list[str]:
    """The installed ``msgcap`` console script of this interpreter's environment (what a
    user runs), else ``python -m analyzer.cli`` from the source tree; its bytecode
    brought up to date first (``compile_bytecode``)."""
    compile_bytecode()
    script = Path(sys.executable).parent / "msgcap"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("msgcap")
    if found:
        return [found]
    return [sys.executable, "-m", "analyzer.cli"]


def dissect_help(msgcap: Sequence[str]) -> str:
    proc = subprocess.run(
        [*msgcap, "dissect", "--help"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    return proc.stdout + proc.stderr


def workers_help_line(help_text: str) -> str | None:
    """The ``--workers`` entry of ``msgcap dissect --help`` (with its wrapped lines)."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("--workers"):
            text = [line.strip()]
            for more in lines[i + 1 :]:
                if not more.startswith(" " * 10) or more.strip().startswith("-"):
                    break
                text.append(more.strip())
            return " ".join(" ".join(text).split())
    return None


def dissect_command(
    msgcap: Sequence[str], capture: str | os.PathLike[str], out: str | os.PathLike[str],
    workers: int | None, extra: Iterable[str] = (),
) -> list[str]:
    cmd = [*msgcap, "dissect", str(capture), "-o", str(out), "--overwrite", *extra]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    return cmd


def refusal(m: Measured) -> str | None:
    """Why a run failed, when the CLI refused it (exit 2) rather than measured it."""
    if m.rc in (0, 1):
        return None
    tail = [ln.strip() for ln in m.stderr_tail.splitlines() if ln.strip()]
    return f"exit {m.rc}: {tail[-1] if tail else '(no message)'}"


def count_rows(dataset: Path, table: str, column: str | None = None) -> dict[str, Any] | None:
    """Rows of one table of a dataset ``msgcap dissect`` wrote, and (optionally) the
    rows per value of ``column``; None when the table is absent."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    path = dataset / table
    if not path.is_dir():
        return None
    d = ds.dataset(path, format="parquet", partitioning="hive")
    if column is None:
        return {"rows": d.count_rows(), "by": {}}
    col = d.to_table(columns=[column])[column]
    counts = pc.value_counts(col).to_pylist()
    by = {str(c["values"]): int(c["counts"]) for c in counts}
    return {"rows": len(col), "by": dict(sorted(by.items()))}


# -- numbers and text -----------------------------------------------------------------


def median(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(value: float | None, spec: str, na: str = "n/a") -> str:
    return na if value is None else format(value, spec)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> None:
    """Fixed-width text table; the first ``left`` columns are left-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def environment() -> dict[str, Any]:
    """What a result depends on besides the capture: versions, machine, load, commit."""
    from importlib.metadata import PackageNotFoundError, version

    def run(*cmd: str) -> str:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
        except OSError:
            return ""
        return p.stdout.strip()

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
    except OSError:
        pass
    try:
        msgcap_version = version("msgcap")
    except PackageNotFoundError:
        msgcap_version = "not installed"
    tshark = shutil.which("tshark")
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "msgcap": msgcap_version,
        "git_commit": run("git", "rev-parse", "HEAD"),
        "git_dirty_files": run("git", "status", "--porcelain").splitlines(),
        "tshark": run(tshark, "--version").splitlines()[0] if tshark else None,
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "source_digest_start": source_digest(),
        "loadavg_start": loadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def source_digest() -> str:
    """SHA-256 over msgcap's Python sources (analyzer/, dissectors/, reassembly/).

    The install is editable and the hot path is being changed while benchmarks run: a
    digest taken before and after a run says whether all numbers came from one version.
    """
    import hashlib

    h = hashlib.sha256()
    for pkg in ("analyzer", "dissectors", "reassembly"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            h.update(str(f.relative_to(ROOT)).encode() + b"\0")
            with contextlib.suppress(OSError):
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def loadavg() -> list[float]:
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return []


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)
