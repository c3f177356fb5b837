"""Issue 16 acceptance: every subcommand fails the same way on a bad path (``error:`` +
``fix:`` on stderr, exit 2, nothing on stdout, no output folder left behind) and ends
quietly when its stdout is closed (``| head``).

The bad-path runs call ``analyzer.cli.main`` in this process (each returns before any
heavy work, so the whole matrix stays fast); the closed-pipe runs are real processes
whose stdout pipe is closed before they write a byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli import main

ROOT = Path(__file__).resolve().parents[2]
NATS = ROOT / "samples" / "nats-basic.pcap"

# every subcommand that takes a path, with {p} the path under test and {out} a fresh
# output place; new-dissector takes its path as -o (a directory it writes into)
PATH_COMMANDS = {
    "flows": ["flows", "{p}"],
    "follow": ["follow", "{p}", "--flow", "0"],
    "follow --decoded": ["follow", "{p}", "--flow", "0", "--decoded"],
    "dissect": ["dissect", "{p}", "-o", "{out}"],
    "summary": ["summary", "{p}"],
    "ladder": ["ladder", "{p}", "--flow", "0"],
    "report": ["report", "{p}", "-o", "{out}.html"],
    "spark ingest": ["spark", "ingest", "{p}", "-o", "{out}"],
    "spark analyze": ["spark", "analyze", "{p}", "-o", "{out}"],
    "schema": ["schema", "{p}"],
}


def _bad_paths(tmp: Path) -> dict[str, Path]:
    empty = tmp / "empty.pcap"
    empty.write_bytes(b"")
    text = tmp / "notes.txt"
    text.write_text("GET / HTTP/1.1\nHost: example.org\n\nnot a capture at all\n")
    folder = tmp / "folder"
    folder.mkdir()
    (folder / "a.pcap").write_bytes(NATS.read_bytes())  # a folder of captures, still no
    return {"nonexistent": tmp / "no-such.pcap", "directory": folder, "empty": empty,
            "text": text}


@pytest.mark.parametrize("kind", ["nonexistent", "directory", "empty", "text"])
@pytest.mark.parametrize("command", sorted(PATH_COMMANDS))
def test_every_command_refuses_a_bad_path_with_error_and_fix(tmp_path, capsys, monkeypatch,
                                                             command, kind):
    monkeypatch.setenv("NO_COLOR", "1")
    path = _bad_paths(tmp_path)[kind]
    out = tmp_path / "out"
    argv = [a.format(p=path, out=out) for a in PATH_COMMANDS[command]]
    code = main(argv)
    res = capsys.readouterr()
    assert code == 2, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 2, res.err
    assert lines[0].startswith("error: ") and lines[1].startswith("fix: "), res.err
    assert "Errno" not in res.err and "Traceback" not in res.err
    assert res.out == ""
    assert not out.exists() and not Path(f"{out}.html").exists()  # nothing left behind


@pytest.mark.parametrize("kind", ["empty", "text"])
def test_new_dissector_refuses_a_file_as_its_output_directory(tmp_path, capsys, kind):
    path = _bad_paths(tmp_path)[kind]
    assert main(["new-dissector", "foo", "-o", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: -o {path} is a file; the output is the directory msgcap-NAME/ " \
                     "is created in"
    assert err[1].startswith("fix: give -o a directory")


@pytest.mark.parametrize("kind", ["nonexistent", "directory"])
def test_new_dissector_writes_into_a_missing_or_existing_directory(tmp_path, capsys, kind):
    """new-dissector's path is where to write, so a missing one is created (mkdir -p)."""
    path = _bad_paths(tmp_path)[kind]
    assert main(["new-dissector", "foo", "-o", str(path)]) == 0
    assert (path / "msgcap-foo" / "pyproject.toml").is_file()


def test_dissect_output_on_a_file_says_so(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("x")
    assert main(["dissect", str(NATS), "-o", str(target)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: -o {target} is a file; the output is a dataset directory"
    assert err[1] == f"fix: give -o a directory (created when missing), e.g. -o {target}-out"


def test_capture_already_in_output_names_the_flag(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["dissect", str(NATS), "-o", str(out), "-q"]) == 0
    assert main(["dissect", str(NATS), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "error: capture 56a6e5576f68569d is already in" in err
    assert "fix: add --overwrite to replace it" in err and "overwrite=True" not in err


def test_no_such_flow_lists_the_ids_of_that_capture(capsys):
    assert main(["follow", str(NATS), "--flow", "42"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: no TCP flow 42 in {NATS} (TCP flow ids: 0..5)"
    assert err[1] == f"fix: list the flows with `msgcap flows {NATS}`"


@pytest.mark.parametrize("argv", [
    ["follow", str(NATS), "--decoded", "--flow", str(1 << 63)],
    ["ladder", str(NATS), "--flow", str(1 << 64)],
    ["ladder", str(NATS), "--message", str(1 << 63)],
    ["report", str(NATS), "-o", "r.html", "--flow", str(10 ** 30)],
])
def test_ids_beyond_int64_are_a_user_error(capsys, argv):
    """Issue 17 part 5: no pyarrow overflow traceback for an id no table can hold."""
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: --") and "beyond the largest id" in err[0]
    assert err[1].startswith("fix: ")


def test_argparse_mistakes_use_the_same_style(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["flows"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: the following arguments are required: CAPTURE" in err
    assert "fix: see `msgcap flows --help`" in err


def test_one_command_parser_says_what_the_whole_parser_says(monkeypatch):
    """``main`` builds only the parser of the command it was given: its usage, help,
    errors and parsed arguments are the whole parser's, for every subcommand."""
    from analyzer.cli import _COMMANDS, build_parser

    monkeypatch.setenv("COLUMNS", "80")
    whole = build_parser()
    choices = whole._subparsers._group_actions[0].choices  # the subcommands argparse knows
    assert list(choices) == list(_COMMANDS)
    for name in _COMMANDS:
        one = build_parser(name)
        assert one.format_usage() == whole.format_usage()
        mine = one._subparsers._group_actions[0].choices
        assert list(mine) == [name]
        assert mine[name].format_help() == choices[name].format_help()
    argv = ["dissect", "x.pcap", "-o", "o", "--workers", "2", "--decode-as", "4222=nats"]
    assert vars(build_parser("dissect").parse_args(argv)) == vars(whole.parse_args(argv))


# --------------------------------------------------------------------- closed stdout

CLOSED_PIPE = {
    "flows": ["flows", str(NATS)],
    "flows --json": ["flows", "--json", str(NATS)],
    "follow": ["follow", str(NATS), "--flow", "0"],
    "follow --decoded": ["follow", str(NATS), "--flow", "0", "--decoded"],
    "dissect": ["dissect", str(NATS), "-o", "{tmp}/ds"],
    "summary": ["summary", str(NATS)],
    "ladder": ["ladder", str(NATS), "--flow", "0"],
    "report": ["report", str(NATS), "-o", "{tmp}/r.html"],
    "spark ingest": ["spark", "ingest", "--help"],  # a Spark session would take seconds
    "spark analyze": ["spark", "analyze", "--help"],
    "protocols": ["protocols"],
    "schema": ["schema"],
    "new-dissector": ["new-dissector", "foo", "-o", "{tmp}"],
    "--help": ["--help"],
}


@pytest.mark.parametrize("command", sorted(CLOSED_PIPE))
def test_closed_stdout_ends_quietly(tmp_path, command):
    """Like `msgcap ... | head -0`: the reader is gone before the first byte."""
    argv = [a.format(tmp=tmp_path) for a in CLOSED_PIPE[command]]
    proc = subprocess.Popen([sys.executable, "-m", "analyzer.cli", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "NO_COLOR": "1"})
    proc.stdout.close()  # before the interpreter has even started
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=300)
    assert code == 0, err
    for noise in ("error", "Error", "Traceback", "Exception ignored", "Broken pipe"):
        assert noise not in err, err
