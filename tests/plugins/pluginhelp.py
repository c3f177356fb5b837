"""Helpers for the plugin tests: pip-install a plugin package into this venv for the
duration of a test module, offline, and run msgcap as a program (entry points are read
afresh by every run, as in real use).

Installs copy the package to a temporary directory first so that the build (setuptools
writes ``build/`` and ``*.egg-info`` next to the sources) never touches the repository.
Uninstall is in a ``finally``: an installed test plugin would show up in every later run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REDIS_PLUGIN = REPO / "samples" / "plugins" / "redis-resp"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def pip_install(*paths: Path) -> None:
    proc = subprocess.run(
        [*PIP, "install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir",
         "-q", *map(str, paths)],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, f"pip install {paths} failed:\n{proc.stdout}\n{proc.stderr}"


def pip_uninstall(*dists: str) -> None:
    subprocess.run([*PIP, "uninstall", "-y", "-q", *dists], capture_output=True, check=False)


@contextmanager
def installed(package_dirs: Path | list[Path], dists: str | list[str], tmp: Path
              ) -> Iterator[list[Path]]:
    """The packages copied under ``tmp`` and pip-installed (one pip call) while inside;
    yields the copies."""
    dirs = [package_dirs] if isinstance(package_dirs, Path) else package_dirs
    names = [dists] if isinstance(dists, str) else dists
    copies = []
    for d in dirs:
        copy = tmp / d.name
        shutil.copytree(d, copy, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__", ".pytest_cache"))
        copies.append(copy)
    try:
        pip_install(*copies)
        yield copies
    finally:
        pip_uninstall(*names)


def msgcap(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``msgcap ARGS`` in a subprocess, with a wide console so tables are not folded."""
    import os

    full = {**os.environ, "COLUMNS": "250", **(env or {})}
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *args], capture_output=True,
                          text=True, check=False, env=full, cwd=REPO)
