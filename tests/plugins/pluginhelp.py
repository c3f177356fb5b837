"""Helpers for the plugin tests: pip-install a plugin package for the duration of a test
module, offline, and run msgcap as a program (entry points are read afresh by every run,
as in real use).

Installs go to a directory of their own (``pip install --target``) put on ``PYTHONPATH``
for the programs the test starts, never into this venv: a plugin installed into the
shared venv shows up in every other msgcap run on the machine meanwhile (another test
run, a benchmark), which then sees tables it did not expect.

Installs copy the package to a temporary directory first so that the build (setuptools
writes ``build/`` and ``*.egg-info`` next to the sources) never touches the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REDIS_PLUGIN = REPO / "samples" / "plugins" / "redis-resp"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def pip_install(target: Path, *paths: Path) -> None:
    proc = subprocess.run(
        [*PIP, "install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir",
         "-q", "--target", str(target), *map(str, paths)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, f"pip install {paths} failed:\n{proc.stdout}\n{proc.stderr}"


def pip_uninstall(dist: str) -> None:
    """What ``pip uninstall`` does, in the directories ``installed`` put on ``PYTHONPATH``
    (pip refuses to uninstall outside its environment): every file the distribution's
    ``RECORD`` lists, then its ``.dist-info``."""
    name = dist.replace("-", "_").lower()
    for entry in filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        for info in Path(entry).glob("*.dist-info"):
            if info.name.lower().split("-")[0] != name:
                continue
            for line in (info / "RECORD").read_text().splitlines():
                (Path(entry) / line.split(",")[0]).unlink(missing_ok=True)
            shutil.rmtree(info, ignore_errors=True)


@contextmanager
def installed(package_dirs: Path | list[Path], dists: str | list[str], tmp: Path
              ) -> Iterator[list[Path]]:
    """The packages copied under ``tmp`` and pip-installed (one pip call) into
    ``tmp/site``, which is on ``PYTHONPATH`` while inside; yields the copies.  (``dists``
    names what is installed, for the reader; leaving drops the whole directory.)"""
    dirs = [package_dirs] if isinstance(package_dirs, Path) else package_dirs
    copies = []
    for d in dirs:
        copy = tmp / d.name
        shutil.copytree(d, copy, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__", ".pytest_cache"))
        copies.append(copy)
    site = tmp / "site"
    before = os.environ.get("PYTHONPATH")
    try:
        pip_install(site, *copies)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [before])])
        yield copies
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
        shutil.rmtree(site, ignore_errors=True)


def msgcap(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``msgcap ARGS`` in a subprocess, with a wide console so tables are not folded."""
    proc = msgcap_started(*args, env=env)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def msgcap_started(*args: str, env: dict | None = None) -> subprocess.Popen:
    """``msgcap ARGS`` started and not waited for (``communicate()`` ends it), so that a
    test can run it beside another program instead of after it."""
    full = {**os.environ, "COLUMNS": "250", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "analyzer.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full, cwd=REPO)
