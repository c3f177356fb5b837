"""Issue 16 section 2: standard input, start-up cost (as imports, not times), --version,
-q, NDJSON, --time, the protocol column of `flows`, layouts at 80 columns, key logs that
parse to nothing, and `new-dissector` names that clash.

Each expectation is an exact value of the nats-basic sample (244 packets, 6 NATS flows,
205 nats rows; samples/README.md) or of a capture derived from it by a real tool
(editcap for pcapng).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from analyzer.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
NATS = SAMPLES / "nats-basic.pcap"
NATS_SHA = "56a6e5576f68569dcdb3c396953d3b9655fb1282fe3a9a6a95cc9c970c61e4c1"
FIRST_PACKET_NS = 1795323414702273000  # flow 0's first packet (samples/nats-basic.pcap)


def _msgcap(*args, stdin: bytes | None = None, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], cwd=ROOT,
                          input=stdin, capture_output=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def _msgcap_beside(*args):
    """``_msgcap(*args)`` (no stdin) started now and finished by ``.result()``, so that it
    runs beside the run a test compares it with instead of before it."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    future = pool.submit(_msgcap, *args)
    pool.shutdown(wait=False)
    return future


def _table(out: Path, name: str) -> list[dict]:
    t = pads.dataset(out / name, partitioning="hive").to_table()
    return t.sort_by("flow_id" if name == "flows" else "record_id").to_pylist()


# --------------------------------------------------------------------- standard input


@pytest.fixture(scope="module")
def dissected_by_path(tmp_path_factory):
    """``msgcap dissect samples/nats-basic.pcap -o DIR -q`` run once: (result, DIR)."""
    out = tmp_path_factory.mktemp("by-path") / "out"
    return _msgcap("dissect", NATS, "-o", out, "-q"), out


def test_dissect_from_stdin_gives_the_rows_of_the_file(dissected_by_path, tmp_path):
    """Issue 16 acceptance: `cat samples/nats-basic.pcap | msgcap dissect - -o out`."""
    by_path, from_file = dissected_by_path
    from_pipe = tmp_path / "pipe"
    assert by_path.returncode == 0
    res = _msgcap("dissect", "-", "-o", from_pipe, "-q", stdin=NATS.read_bytes())
    assert res.returncode == 0, res.stderr
    for table in ("nats", "flows", "anomalies"):
        assert _table(from_pipe, table) == _table(from_file, table), table
    assert len(_table(from_pipe, "nats")) == 205
    (entry,) = json.loads((from_pipe / "manifest.json").read_text())["inputs"]
    assert entry["input"]["path"] == "-"
    assert entry["input"]["sha256"] == NATS_SHA  # the hash of what was read
    assert entry["input"]["size"] == NATS.stat().st_size
    assert entry["input"]["packets"] == 244


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (wireshark) missing")
def test_pcapng_stream_on_stdin(tmp_path):
    ng = tmp_path / "basic.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(NATS), str(ng)], check=True)
    res = _msgcap("flows", "--json", "--transport-only", "-", stdin=ng.read_bytes())
    assert res.returncode == 0, res.stderr
    assert [f["flow_id"] for f in json.loads(res.stdout)] == [0, 1, 2, 3, 4, 5]
    out = tmp_path / "out"
    res = _msgcap("dissect", "-", "-o", out, "-q", stdin=ng.read_bytes())
    assert res.returncode == 0, res.stderr
    assert len(_table(out, "nats")) == 205
    (entry,) = json.loads((out / "manifest.json").read_text())["inputs"]
    assert entry["input"]["format"] == "pcapng" and entry["input"]["path"] == "-"


def test_follow_reads_stdin(tmp_path):
    by_path = _msgcap_beside("follow", NATS, "--flow", "3")
    by_pipe = _msgcap("follow", "-", "--flow", "3", stdin=NATS.read_bytes())
    by_path = by_path.result()
    assert by_pipe.returncode == 0 and by_pipe.stdout == by_path.stdout != b""


def test_views_read_stdin():
    """summary / ladder / follow --decoded / report dissect "-" like a file."""
    res = _msgcap("summary", "--json", "-", stdin=NATS.read_bytes())
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert (s["totals"]["packets"], s["captures"][0]["path"]) == (244, "-")
    assert s["captures"][0]["sha256"] == NATS_SHA


def _pcap_stream(out, datagrams: int, size: int = 60000) -> None:
    """A pcap of ``datagrams`` UDP datagrams of ``size`` bytes, written to ``out``."""
    import struct

    out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    udp = struct.pack("!HHHH", 40000, 9999, 8 + size, 0) + b"x" * size
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + udp
    frame = b"\x00" * 12 + b"\x08\x00" + ip
    record = struct.pack("<IIII", 1700000000, 0, len(frame), len(frame)) + frame
    for _ in range(datagrams):
        out.write(record)


STREAM_DATAGRAMS = 5000  # 300 MB through the pipe


@pytest.mark.parametrize(("argv", "bound_mb"), [
    (["flows", "--transport-only", "--json", "-"], 100),
    (["dissect", "-", "-o", "{tmp}/ds", "-q"], 250),
])
def test_stdin_stream_in_bounded_memory(tmp_path, argv, bound_mb):
    """A 300 MB pcap stream: the peak RSS of the msgcap process (wait4, the child
    alone) stays far below the stream's size (measured: ~40 MB for flows, ~120 MB for
    dissect, which copies the stream to a temporary file 1 MiB at a time)."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    # measured by a small parent of msgcap's own: Linux keeps the high-water RSS of the
    # process image exec replaced, so a child forked straight from pytest would report
    # pytest's size
    usage = tmp_path / "usage"
    meter = ("import os, subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[2:])\n"
             "_, status, ru = os.wait4(p.pid, 0)\n"
             "open(sys.argv[1], 'w').write(f'{ru.ru_maxrss} "
             "{os.waitstatus_to_exitcode(status)}')\n")
    proc = subprocess.Popen([sys.executable, "-c", meter, str(usage), sys.executable, "-m",
                             "analyzer.cli", *argv], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _pcap_stream(proc.stdin, STREAM_DATAGRAMS)
    finally:
        proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 0, err
    peak_kb, code = map(int, usage.read_text().split())
    assert code == 0, err
    peak_mb = peak_kb / 1024  # Linux: kilobytes
    assert peak_mb < bound_mb, f"peak RSS {peak_mb:.0f} MB for a 300 MB stream"
    if argv[0] == "dissect":
        (entry,) = json.loads((tmp_path / "ds" / "manifest.json").read_text())["inputs"]
        assert entry["input"]["packets"] == STREAM_DATAGRAMS
        assert entry["input"]["size"] == 24 + STREAM_DATAGRAMS * (16 + 14 + 20 + 8 + 60000)


@pytest.mark.parametrize(("data", "sentence"), [
    (b"", "error: standard input is empty (0 bytes)"),
    (b"hello, this is text\n", "error: standard input is not a capture msgcap can read"),
])
def test_bad_stdin_is_a_user_error_and_leaves_no_folder(tmp_path, data, sentence):
    out = tmp_path / "out"
    res = _msgcap("dissect", "-", "-o", out, stdin=data)
    assert res.returncode == 2
    err = res.stderr.decode().splitlines()
    assert err[0].startswith(sentence) and err[1].startswith("fix: ")
    assert not out.exists()


# --------------------------------------------------------------------- start-up


# third-party packages (any of their modules) and modules of ours (exactly)
HEAVY_PACKAGES = ("rich", "pyarrow", "numpy", "pandas", "zstandard", "plotly", "pyspark")
HEAVY_MODULES = ("reassembly.engine", "reassembly.capture", "dissectors.registry",
                 "analyzer.pipeline", "analyzer.summary")


def test_help_imports_no_heavy_module():
    """`msgcap --help` costs little more than the interpreter: what it imports, counted
    instead of timed (docs: the CPU figures are in the closing note of issue 16)."""
    code = ("import sys\nfrom analyzer.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write(','.join(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY_PACKAGES!r} or m in {HEAVY_MODULES!r}))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert "usage: msgcap" in res.stdout
    assert res.stderr == "", f"--help imported: {res.stderr}"


# what `msgcap dissect -q` of a NATS-only capture does not need: another protocol's frame
# reader or session (Pulsar's loads its protobuf descriptors), the protobuf runtime (STAN's
# and Liftbridge's schemas are read by dissectors.proto.wire), zstandard (the capture is
# not zstd), rich (nothing is drawn), the worker machinery (one process), pyarrow.dataset (a
# partition is read file by file); the QUIC and TLS machinery and ``cryptography`` (no QUIC,
# no TLS: the layers import them with a first connection), Felix's frame codec (its probe
# needs only the magic), the STAN and Liftbridge decoders and ``dissectors.proto`` (no
# STAN or Liftbridge message: the dissectors' classes and states need neither), the
# nats_cluster session and its S2 decoder (no server link), ctypes.util (libcrypto is found
# already loaded), dateutil (no Arrow type inference: cliutil.skip_pandas_probe)
NOT_FOR_NATS = ("dissectors.nats.cluster_session", "dissectors.nats.s2", "ctypes.util",
                "dateutil", "pandas", "dissectors.pulsar.frame", "dissectors.pulsar.session",
                "dissectors.felix.session", "google.protobuf", "zstandard", "rich",
                "analyzer.parallel", "multiprocessing", "pyarrow.dataset",
                "cryptography", "reassembly.quic.connection", "reassembly.quic.crypto",
                "reassembly.quic.frames", "reassembly.tlscommon", "reassembly.tlskeys",
                "reassembly.tls.protection", "dissectors.felix.wire", "dissectors.stan.decode",
                "dissectors.liftbridge.decoder", "dissectors.liftbridge.envelope",
                "dissectors.proto", "pyarrow.compute")


def test_dissect_imports_what_the_capture_needs(tmp_path):
    """Start-up of `msgcap dissect`, counted instead of timed: pyarrow's pandas probe
    (~0.4 s of CPU) is skipped (and pandas still works for code that asks for it
    afterwards), the modules of ``NOT_FOR_NATS`` are not imported, and the dissectors
    are discovered once (entry points read and loaded once per run)."""
    code = ("import sys\nimport dissectors.registry as r\ncalls = []\n"
            "def counted(discover=r.discover):\n"
            "    calls.append(1)\n    return discover()\n"
            "r.discover = counted\n"
            "from analyzer.cli import main\n"
            f"assert main(['dissect', {str(NATS)!r}, '-o', {str(tmp_path / 'o')!r}, '-q']) == 0\n"
            f"print(','.join(m for m in {NOT_FOR_NATS!r} if m in sys.modules) or '-')\n"
            "print(len(calls))\n"
            "import pyarrow as pa\n"
            "print(type(pa.table({'a': [1]}).to_pandas()).__name__)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.stdout.split() == ["-", "1", "DataFrame"], res.stderr


def test_pulsar_dissect_imports_no_compute_module(tmp_path):
    """The manifest's tally and the Pulsar fast path reach Arrow's kernels through
    ``dissectors.arrowops``: a run that needs nothing else does not import
    ``pyarrow.compute`` (~50 ms of CPU) or ``numpy.ma`` (~15 ms)."""
    code = ("import sys\nfrom analyzer.cli import main\n"
            f"assert main(['dissect', {str(SAMPLES / 'pulsar-schemas.pcap')!r}, '-o', "
            f"{str(tmp_path / 'o')!r}, '-q']) == 0\n"
            "print(','.join(m for m in ('pyarrow.compute', 'numpy.ma') if m in sys.modules)"
            " or '-')\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.stdout.split() == ["-"], res.stderr


def test_command_line_run_ends_after_its_atexit_callbacks_and_output():
    """A command-line ``main()`` ends the process itself (no interpreter teardown): its
    exit code, its output and the ``atexit`` callbacks are still all there; in-process
    callers (``main(argv)``) get the code back."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
            "sys.argv = ['msgcap', 'schema', 'nope']\n"
            "from analyzer.cli import main\n"
            "assert main(['schema', 'flows']) == 0\n"
            "main()\n"
            "print('not reached')\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stdout.startswith("flows (v") and "not reached" not in res.stdout
    assert res.stderr.startswith("error: no table 'nope'")
    assert res.stderr.endswith("atexit ran\n")


def test_command_line_dissect_settles_the_gc_and_main_argv_does_not(tmp_path):
    """``cliutil.settle_gc``: a command-line dissect freezes what is loaded and sweeps
    the young generation every 50k allocations, and the collector, off while it loaded
    (``cliutil.defer_gc``), is on again; ``main(argv)`` (tests, other callers) leaves the
    process's collector as it found it."""
    code = ("import atexit, gc, sys\n"
            "before = gc.get_threshold()\n"
            "from analyzer.cli import main\n"
            f"assert main(['dissect', {str(NATS)!r}, '-o', {str(tmp_path / 'a')!r}, '-q']) == 0\n"
            "assert gc.get_threshold() == before and gc.get_freeze_count() == 0\n"
            "assert gc.isenabled()\n"
            "atexit.register(lambda: print(gc.get_threshold()[0], gc.get_freeze_count() > 0,\n"
            "                              gc.isenabled()))\n"
            f"sys.argv = ['msgcap', 'dissect', {str(NATS)!r}, '-o', "
            f"{str(tmp_path / 'b')!r}, '-q']\n"
            "main()\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["50000", "True", "True"], res.stderr


def _process_setting(tmp_path, var: str, chosen: str | None, shown: str) -> list[str]:
    """What a command-line ``dissect`` leaves of the environment variable ``var`` (unset,
    or set to ``chosen`` before the run): the words printed at exit by ``shown`` (an
    expression), in a process that had not imported pyarrow before ``main()``.  Also
    checks that ``main(argv)``, a caller's run, leaves ``var`` as it was."""
    code = ("import os\n"
            "from analyzer.cli import main\n"
            f"before = os.environ.get({var!r})\n"
            f"assert main(['dissect', {str(NATS)!r}, '-o', {str(tmp_path / 'a')!r}, '-q']) == 0\n"
            f"assert os.environ.get({var!r}) == before\n")
    probe = ("import atexit, os, sys\n"
             "from analyzer.cli import main\n"
             "assert 'pyarrow' not in sys.modules and 'numpy' not in sys.modules\n"
             f"atexit.register(lambda: print({shown}))\n"
             f"sys.argv = ['msgcap', 'dissect', {str(NATS)!r}, '-o', "
             f"{str(tmp_path / 'b')!r}, '-q']\n"
             "main()\n")
    env = {k: v for k, v in os.environ.items() if k != var}
    if chosen:
        env[var] = chosen
    for script in (code, probe):
        res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                             text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr
    return res.stdout.split()


@pytest.mark.parametrize("chosen", [None, "system"])
def test_command_line_makes_jemalloc_the_arrow_pool(tmp_path, chosen):
    """``cliutil.prefer_jemalloc``: a command-line run allocates Arrow memory from
    jemalloc (with mimalloc, pyarrow 26's default, a long dissect's RSS crept up),
    unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool; ``main(argv)`` leaves the
    environment alone."""
    pa = pytest.importorskip("pyarrow")
    if "jemalloc" not in pa.supported_memory_backends() or sys.platform != "linux":
        pytest.skip("this pyarrow has no jemalloc")
    shown = "__import__('pyarrow').default_memory_pool().backend_name"
    words = _process_setting(tmp_path, "ARROW_DEFAULT_MEMORY_POOL", chosen, shown)
    assert words[-1] == (chosen or "jemalloc")


@pytest.mark.parametrize("chosen", [None, "3"])
def test_command_line_keeps_openblas_to_one_thread(tmp_path, chosen):
    """``cliutil.one_blas_thread``: a command-line run loads numpy (through pyarrow)
    with ``OPENBLAS_NUM_THREADS=1`` (OpenBLAS's idle thread spun on the second core),
    unless the user set a count; ``main(argv)`` leaves the environment alone."""
    shown = "'numpy' in sys.modules, os.environ.get('OPENBLAS_NUM_THREADS')"
    words = _process_setting(tmp_path, "OPENBLAS_NUM_THREADS", chosen, shown)
    assert words[-2:] == ["True", chosen or "1"]


def test_version():
    from importlib.metadata import version

    res = _msgcap("--version")
    assert res.returncode == 0
    assert res.stdout.decode().startswith(f"msgcap {version('msgcap')} (Python ")


def test_dissect_quiet_prints_nothing(dissected_by_path):
    res, _ = dissected_by_path
    assert res.returncode == 0 and res.stdout == b"" and res.stderr == b""


# --------------------------------------------------------------------- NDJSON and --time


def test_follow_decoded_json_is_one_object_per_message(capsys):
    assert main(["follow", str(NATS), "--flow", "0", "--decoded", "--json", "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    objs = [json.loads(line) for line in lines]
    assert len(objs) == 56  # the transcript's "56 decoded messages"
    assert [o["kind"] for o in objs[:3]] == ["INFO", "CONNECT", "PING"]
    assert objs[0]["from"] == "server" and objs[1]["to"] == "server"
    assert objs[1]["fields"]["name"] == "publisher"
    assert len({o["record_id"] for o in objs}) == 56


def test_ladder_message_json_is_one_object_per_arrow(capsys):
    assert main(["ladder", str(NATS), "--message", "7", "--json", "-q"]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o["label"], o["latency_ns"]) for o in objs] == [
        ("PUB demo.plain len=17", 0), ("MSG demo.plain sid=1", 179000)]
    assert objs[0]["from"] == "publisher 127.0.0.1:51740 f0"


@pytest.mark.parametrize(("mode", "shown"), [
    ("utc", "2026-11-22 04:56:54.702273"),
    ("epoch", "1795323414.702273"),
    ("relative", "+0.000000"),
])
def test_flows_time_formats(capsys, monkeypatch, mode, shown):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["flows", str(NATS), "--time", mode]) == 0
    out = capsys.readouterr().out
    row0 = next(line for line in out.splitlines() if line.startswith("│  0 "))
    assert shown in row0


def test_transcript_time_epoch(capsys):
    assert main(["follow", str(NATS), "--flow", "0", "--decoded", "--time", "epoch",
                 "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("1795323414.702941   +0.000668 S→C INFO")


def test_flows_protocol_column_matches_dissect(capsys):
    assert main(["flows", "--json", str(SAMPLES / "nats-ws.pcap")]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["protocol"], r["layers"]) for r in rows] == [
        ("nats", ["websocket"]), ("nats", ["websocket"]), ("tls", ["tls-encrypted"])]


# --------------------------------------------------------------------- layout


def test_tables_at_80_columns_keep_headers_whole():
    res = _msgcap("summary", NATS, env={"COLUMNS": "80"})
    out = res.stdout.decode()
    assert res.returncode == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "           capture: 56a6e5576f68569d" in out  # the narrow form, header whole
    assert "captur\n" not in out and "┃ subject " in out


def test_piped_tables_are_not_wide():
    """No COLUMNS and no terminal: 100 columns, not 160-190.  The three commands run in
    one child (one interpreter start instead of three), each output ended by a NUL."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    argvs = [["flows", str(NATS)], ["summary", str(NATS)], ["protocols"]]
    code = ("import sys\nfrom analyzer.cli import main\n"
            f"for argv in {argvs!r}:\n"
            "    assert main(argv) == 0, argv\n"
            "    sys.stdout.write('\\0')\n    sys.stdout.flush()\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    outputs = res.stdout.split("\0")
    assert len(outputs) == len(argvs) + 1 and outputs[-1] == "", res.stdout
    for argv, out in zip(argvs, outputs, strict=False):
        assert out.strip(), argv
        assert max(len(line) for line in out.splitlines()) <= 100, argv


def test_ladder_names_that_do_not_fit_become_a_legend(capsys):
    assert main(["ladder", str(NATS), "--message", "7", "--width", "80", "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == ["[1] publisher 127.0.0.1:51740 f0", "[2] nats-server 127.0.0.1:41005",
                        "[3] subscriber 127.0.0.1:51744 f1"]
    assert out[4].split() == ["latency", "[1]", "[2]", "[3]"]


# --------------------------------------------------------------------- key log, scaffold


def test_text_file_as_key_log_is_refused_at_once(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("these are my notes\nnot secrets\n\n# a comment\n")
    out = tmp_path / "out"
    assert main(["dissect", str(SAMPLES / "nats-tls.pcap"), "--keylog", str(notes),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"error: key log {notes}: 0 secret lines parsed (2 other line(s) not "
                      "in the NSS key log format)")
    assert err[1].startswith("fix: give the file SSLKEYLOGFILE pointed at")
    assert not out.exists()


def test_keylog_help_names_tls_websocket_and_quic(capsys):
    with pytest.raises(SystemExit):
        main(["dissect", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "TLS over TCP, WebSocket over TLS (wss) and QUIC" in text
    assert "force dissector NAME on a TCP or UDP port" in text
    assert "- reads one from standard input" in text


def test_new_dissector_refuses_a_builtin_name(tmp_path, capsys):
    assert main(["new-dissector", "nats", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: 'nats' is already a dissector or table of this msgcap")
    assert err[1] == "fix: choose another name, e.g. `msgcap new-dissector nats_custom`"
    assert list(tmp_path.iterdir()) == []


def test_scaffold_declares_its_test_dependencies(tmp_path, capsys):
    import tomllib

    assert main(["new-dissector", "zz_io_check", "-o", str(tmp_path)]) == 0
    assert "pip install -e '.[test]' && pytest" in capsys.readouterr().out
    meta = tomllib.loads((tmp_path / "msgcap-zz-io-check" / "pyproject.toml").read_text())
    assert meta["project"]["optional-dependencies"]["test"] == ["pytest>=8"]
