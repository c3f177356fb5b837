"""Acceptance: ``msgcap new-dissector`` writes a package that installs with pip and whose
generated tests pass — including the one that runs ``msgcap dissect`` on a tiny capture
through the installed entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest

from analyzer.scaffold import ScaffoldError, scaffold
from tests.plugins.pluginhelp import installed, msgcap, msgcap_started


def _pytest(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_scaffolds_install_and_their_tests_pass(tmp_path) -> None:
    """One package per transport (the first through the CLI), installed with one pip call,
    their generated tests run in one pytest process."""
    gen = tmp_path / "gen"
    proc = msgcap("new-dissector", "zz-demo-tcp", "-o", str(gen))  # dashes become _
    assert proc.returncode == 0, proc.stderr
    roots = [gen / "msgcap-zz-demo-tcp",
             scaffold("zz_demo_udp", "udp", gen),
             scaffold("zz_demo_carried", "nats-payload", gen)]
    names = ["zz_demo_tcp", "zz_demo_udp", "zz_demo_carried"]
    assert 'zz_demo_tcp = "msgcap_zz_demo_tcp:ZzDemoTcpDissector"' in (
        roots[0] / "pyproject.toml").read_text()
    dists = [r.name for r in roots]
    with installed(roots, dists, tmp_path / "build") as copies:
        listing = msgcap_started("protocols")  # beside the pytest run: a CLI start saved
        result = _pytest(tmp_path, *(str(c / "tests") for c in copies))
        out, err = listing.communicate()
        for name in names:
            assert f" {name} " in out, out + err
        assert result.returncode == 0, result.stdout + result.stderr
    listed = msgcap("protocols")
    assert not [n for n in names if f" {n} " in listed.stdout]


def test_generated_package_is_ruff_clean(tmp_path) -> None:
    for transport in ("tcp", "udp", "nats-payload"):
        scaffold(f"lint_{transport.replace('-', '_')}", transport, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_generated_unit_tests_pass_without_install(tmp_path) -> None:
    """Everything but the capture test works straight from the sources."""
    root = scaffold("zz_uninstalled", "tcp", tmp_path)
    result = _pytest(root, "-k", "not tiny_capture")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("bad", ["1abc", "with space", "", "x" * 60, "flows", "a.b"])
def test_bad_names_are_refused(bad, tmp_path) -> None:
    with pytest.raises(ScaffoldError):
        scaffold(bad, "tcp", tmp_path)


def test_existing_directory_is_not_overwritten(tmp_path) -> None:
    scaffold("twice", "tcp", tmp_path)
    proc = msgcap("new-dissector", "twice", "-o", str(tmp_path))
    assert proc.returncode == 2 and "already exists" in proc.stderr
