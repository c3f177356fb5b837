"""Run msgcap's fuzz targets (tests/fuzz/targets.py) for a chosen time.

    python -m benchmarks.fuzz --list
    python -m benchmarks.fuzz --target nats --seconds 60            # atheris if installed
    python -m benchmarks.fuzz --target pcap --seconds 60 --engine random --seed 7
    python -m benchmarks.fuzz --all --seconds 90 --markdown          # the docs table
    python -m benchmarks.fuzz --target nats --reproduce crash-abc    # run one input
    python -m benchmarks.fuzz --target nats --minimize crash-abc     # shrink it

Run from the repository root.  Engines:

* ``atheris`` (default when ``pip install atheris`` worked): libFuzzer with Python
  coverage of ``reassembly`` and ``dissectors``, in a child process per target; the
  seeds and ``tests/fuzz/corpus/<target>`` are its starting corpus, new coverage-raising
  inputs go to a scratch corpus.  Hangs (``--timeout``) and memory blow-ups
  (``--rss-limit-mb``) are libFuzzer's own checks.
* ``random``: the coverage-free mutator of ``tests/fuzz/mutator.py`` (fixed ``--seed``).

A failing input is written under ``--artifacts`` (default
``$TMPDIR/msgcap-fuzz-artifacts/<target>/``); minimize it, commit it to
``tests/fuzz/corpus/<target>/`` with a name saying what it found, and fix the bug: the CI
pass (``tests/fuzz/test_fuzz.py``) runs every corpus file.
Exit code: 0 no failure, 1 failures found, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def have_atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------ atheris


def _atheris_child(target: str, argv: list[str]) -> None:
    """Runs inside the child: instrument our packages, then hand over to libFuzzer."""
    import importlib
    import pkgutil

    import atheris

    with atheris.instrument_imports(include=["reassembly", "dissectors"]):
        for pkg in ("reassembly", "dissectors"):
            mod = importlib.import_module(pkg)
            for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
                if ".build" in info.name:
                    continue
                with contextlib.suppress(Exception):  # optional modules (pyspark bits)
                    importlib.import_module(info.name)
    from tests.fuzz.targets import TARGETS

    fn = TARGETS[target].fn

    def one(data: bytes) -> None:
        fn(data)

    atheris.Setup([sys.argv[0], *argv], one)
    atheris.Fuzz()


def run_atheris(target: str, seconds: int, seed: int, timeout: int, rss_limit_mb: int,
                artifacts: Path, max_len: int, verbose: bool) -> dict:
    from tests.fuzz.mutator import load_corpus
    from tests.fuzz.targets import TARGETS

    work = Path(tempfile.mkdtemp(prefix=f"msgcap-fuzz-{target}-"))
    seeds = work / "seeds"
    found = work / "corpus"
    seeds.mkdir()
    found.mkdir()
    for i, data in enumerate(load_corpus(TARGETS[target])):
        (seeds / f"seed-{i:04d}").write_bytes(data)
    artifacts.mkdir(parents=True, exist_ok=True)
    argv = [
        str(found), str(seeds),
        f"-max_total_time={seconds}", f"-seed={seed}", f"-timeout={timeout}",
        f"-rss_limit_mb={rss_limit_mb}", f"-max_len={max_len}", "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/", "-close_fd_mask=1",
    ]
    cmd = [sys.executable, "-m", "benchmarks.fuzz", "--atheris-child", target, "--", *argv]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    elapsed = time.perf_counter() - started
    log = proc.stderr
    if verbose:
        sys.stderr.write(log[-20000:])
    execs = _stat(log, "number_of_executed_units")
    if execs is None:
        m = re.findall(r"Done (\d+) runs", log)
        execs = int(m[-1]) if m else None
    crashes = re.findall(r"(?:Test unit written to|artifact_prefix.*?) (\S+)", log)
    error = None
    if proc.returncode != 0:
        tail = [ln for ln in log.splitlines() if ln.strip()][-25:]
        error = "\n".join(tail)
    shutil.rmtree(work, ignore_errors=True)
    return {"target": target, "engine": "atheris", "seconds": elapsed, "executions": execs,
            "failures": crashes if proc.returncode else [], "error": error,
            "new_coverage_inputs": None, "returncode": proc.returncode}


def _stat(log: str, name: str) -> int | None:
    m = re.search(rf"stat::{name}:\s+(\d+)", log)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------------------- random


def run_random(target: str, seconds: int, seed: int, timeout: int, rss_limit_mb: int,
               artifacts: Path, keep_going: bool) -> dict:
    from tests.fuzz.mutator import fuzz

    stats = fuzz(target, seconds=seconds, seed=seed, timeout=timeout,
                 rss_limit_mb=rss_limit_mb, artifacts=artifacts, keep_going=keep_going,
                 log=lambda s: print(s, file=sys.stderr))
    return {"target": target, "engine": "random", "seconds": stats.seconds,
            "executions": stats.executions,
            "failures": [str(f.path or f.error) for f in stats.failures], "error": None,
            "returncode": 1 if stats.failures else 0}


# ---------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--atheris-child"]:
        target = argv[1]
        rest = argv[3:] if argv[2:3] == ["--"] else argv[2:]
        _atheris_child(target, rest)
        return 0
    from tests.fuzz.targets import TARGETS

    p = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--target", choices=sorted(TARGETS))
    which.add_argument("--all", action="store_true", help="every target, one after another")
    which.add_argument("--list", action="store_true", help="list the targets")
    p.add_argument("--seconds", type=int, default=60, help="time per target (default 60)")
    p.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=int, default=10, help="seconds per input before a hang")
    p.add_argument("--rss-limit-mb", type=int, default=2048)
    p.add_argument("--max-len", type=int, default=65536, help="atheris: largest input")
    p.add_argument("--artifacts", type=Path,
                   default=Path(tempfile.gettempdir()) / "msgcap-fuzz-artifacts",
                   help="where failing inputs go (default: TMPDIR/msgcap-fuzz-artifacts)")
    p.add_argument("--keep-going", action="store_true", help="random: do not stop at a failure")
    p.add_argument("--reproduce", type=Path, metavar="FILE", help="run one input and show why")
    p.add_argument("--minimize", type=Path, metavar="FILE", help="shrink a failing input")
    p.add_argument("--markdown", action="store_true", help="print a markdown table at the end")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)

    if args.list:
        for name, t in TARGETS.items():
            print(f"{name:11s} {t.what}")
        return 0
    if args.reproduce or args.minimize:
        if not args.target:
            p.error("--reproduce/--minimize need --target")
        from tests.fuzz.mutator import minimize, run_one

        path = args.reproduce or args.minimize
        data = path.read_bytes()
        if args.minimize:
            small = minimize(args.target, data, args.timeout)
            out = path.with_name(path.name + ".min")
            out.write_bytes(small)
            print(f"{len(data)} -> {len(small)} bytes: {out}")
            return 0
        try:
            run_one(TARGETS[args.target], data, args.timeout)
        except Exception:
            traceback.print_exc()
            return 1
        print("no failure")
        return 0

    engine = args.engine
    if engine == "auto":
        engine = "atheris" if have_atheris() else "random"
    if engine == "atheris" and not have_atheris():
        print("atheris is not installed (pip install atheris); use --engine random",
              file=sys.stderr)
        return 2
    results = []
    for name in sorted(TARGETS) if args.all else [args.target]:
        artifacts = args.artifacts / name
        if engine == "atheris":
            r = run_atheris(name, args.seconds, args.seed, args.timeout, args.rss_limit_mb,
                            artifacts, args.max_len, args.verbose)
        else:
            r = run_random(name, args.seconds, args.seed, args.timeout, args.rss_limit_mb,
                           artifacts, args.keep_going)
        results.append(r)
        rate = (r["executions"] or 0) / max(r["seconds"], 1e-9)
        fails = r["failures"]
        shown = ", ".join(map(str, fails[:3])) + (f" (+{len(fails) - 3} more)" if len(fails) > 3
                                                  else "")
        status = "ok" if not r["returncode"] else f"FAILED {len(fails)}: {shown or r['error']}"
        print(f"{name:11s} {engine:8s} {r['seconds']:7.1f} s {r['executions'] or 0:>10,} execs "
              f"{rate:>9,.0f}/s  {status}", flush=True)
        if r["error"] and r["returncode"]:
            print(r["error"], file=sys.stderr)
    if args.markdown:
        print("\n| target | engine | seconds | executions | exec/s | failures |")
        print("|---|---|---:|---:|---:|---|")
        for r in results:
            rate = (r["executions"] or 0) / max(r["seconds"], 1e-9)
            fails = "none" if not r["returncode"] else f"{len(r['failures'])} (see artifacts)"
            print(f"| {r['target']} | {r['engine']} | {r['seconds']:.0f} | "
                  f"{r['executions'] or 0:,} | {rate:,.0f} | {fails} |")
    return 1 if any(r["returncode"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
