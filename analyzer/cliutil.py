"""How every `msgcap` command reports a mistake, ends on a closed pipe, and prints time.

Why one module: each command used to word its failures its own way (bare ``[Errno 2]``
from some, ``error:`` + ``fix:`` from others) and a closed stdout (``| head``) came out as
``error: [Errno 32] Broken pipe``.  Every command now raises :class:`UserError` for a
user's mistake and lets ``analyzer.cli.main`` print it through :func:`print_error`; the
checks every command needs on its paths (missing, a directory, empty, not a capture,
``-o`` on a file) live here once.

Kept free of heavy imports (no rich, pyarrow or reassembly at import time): `msgcap
--help` imports only this module and argparse.
"""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

EXIT_CLEAN, EXIT_DEGRADED, EXIT_FAILED = 0, 1, 2
STDIN = "-"  # a CAPTURE argument that means standard input

CAPTURE_FIX = (
    "give a capture file (pcap or pcapng as tcpdump -w, dumpcap or Wireshark write it; "
    "gzip/zstd compressed too), or - to read one from standard input"
)


class UserError(Exception):
    """A mistake of the user's (bad path, unknown flow, missing key log, ...): shown as
    one sentence plus the fix, exit code 2, never a traceback."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}"


def print_error(message: str, fix: str) -> int:
    """``error: ...`` and ``fix: ...`` on stderr; the exit code of a failed run (2).

    Plain text (no markup to escape, nothing to import); red only on a terminal."""
    red, bold, off = ("\x1b[1;31m", "\x1b[1m", "\x1b[0m") if _colour(sys.stderr) else ("",) * 3
    try:
        sys.stderr.write(f"{red}error:{off} {message}\n{bold}fix:{off} {fix}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed too: the exit code still tells
        pass
    return EXIT_FAILED


def print_user_error(exc: UserError) -> int:
    return print_error(exc.message, exc.fix)


def _colour(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# ------------------------------------------------------------------------ closed stdout


def silence_stdout() -> None:
    """After a ``BrokenPipeError`` on stdout: point fd 1 at /dev/null so that the
    interpreter's final flush does not print "Exception ignored ... BrokenPipeError".

    Python ignores SIGPIPE (a write to a closed pipe raises ``BrokenPipeError``
    instead of killing the process), which lets temporary datasets be removed on the
    way out; this is the other half of the recipe in the `signal` module's docs."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # a captured stdout (tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


# ------------------------------------------------------------------------ path checks


def check_capture(path: str, *, dataset_ok: bool = False, shown: str | None = None) -> None:
    """``UserError`` unless ``path`` names a readable capture (or ``-``, stdin).

    ``dataset_ok``: the command also reads a dataset directory; then a directory is the
    caller's to handle and is not refused here.  ``shown``: the name the user knows the
    file by (standard input copied to a temporary file)."""
    if path == STDIN:
        return
    p = Path(path)
    name = shown or path
    also = ("; or a dataset directory written by `msgcap dissect CAPTURE -o DIR`"
            if dataset_ok else "")
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError(f"{name} does not exist", CAPTURE_FIX + also) from None
    except OSError as exc:
        raise UserError(f"{name} cannot be read ({exc.strerror or exc})",
                        "check the path and its permissions") from None
    if p.is_dir():
        if dataset_ok:
            return
        raise UserError(
            f"{name} is a directory, not a capture file",
            "give one capture file inside it (a shell glob like DIR/*.pcap gives several); "
            "a dataset directory is read by `msgcap summary`, `ladder`, `report` and "
            "`follow --decoded`",
        )
    if not p.is_file():  # a FIFO (<(tcpdump -w -)) or a device: read it as it comes
        return
    if st.st_size == 0:
        raise UserError(f"{name} is empty (0 bytes)",
                        "give a capture that holds packets; if tcpdump is still writing "
                        "it, stop the capture first (or pipe it: tcpdump -w - | msgcap ... -)")
    from reassembly.capture import CaptureFormatError, open_capture

    try:
        with open_capture(path, digest=False):
            pass
    except CaptureFormatError as exc:
        detail = str(exc).removeprefix(f"{path}: ")
        if _looks_like_text(p):
            detail += ", and it looks like text"
        raise UserError(f"{name} is not a capture msgcap can read ({detail})",
                        CAPTURE_FIX + also) from None
    except OSError as exc:
        raise UserError(f"{name} cannot be read ({exc.strerror or exc})",
                        "check the path and its permissions") from None


def _looks_like_text(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return bool(head) and all(b in b"\t\n\r\f" or 0x20 <= b < 0x7F or b >= 0x80 for b in head)


def check_output_dir(path: str, flag: str = "-o", what: str = "a dataset directory") -> None:
    """``UserError`` when ``path`` exists and is not a directory (``what`` goes there)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(
            f"{flag} {path} is a file; the output is {what}",
            f"give {flag} a directory (created when missing), e.g. {flag} {p.with_suffix('')}"
            f"-out",
        )
    parent = p.parent
    if not p.exists() and parent.exists() and not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is a file, not a directory",
                        f"give {flag} a path inside a directory")


def check_output_file(path: str, flag: str = "-o") -> None:
    """``UserError`` when a file cannot be written at ``path`` (a directory, no parent)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path} is a directory; a file is written there",
                        f"give {flag} a file name, e.g. {flag} {p / 'report.html'}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: the directory {parent} does not exist",
                        f"create it first (mkdir -p {parent}) or write elsewhere")


STDIN_NAME = "-"  # the manifest's input path of a capture read from standard input
_SPOOL_CHUNK = 1 << 20


@contextlib.contextmanager
def stdin_spooled(captures: list[str]):
    """``-`` among the captures: standard input copied, 1 MiB at a time, to a
    temporary file that stands in for it (removed afterwards).

    Why a file: a dataset's partition is named by the capture's SHA-256, which must be
    known before the first row is written, and a pipe can be read only once; the copy
    keeps memory bounded (the disk holds the stream) and gives the same capture id,
    the same rows and the same manifest hash as the file the stream came from."""
    if STDIN not in captures:
        yield captures, None
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="msgcap-stdin-") as tmp:
        spool = Path(tmp) / "stdin.capture"
        src = sys.stdin.buffer
        with open(spool, "wb") as f:
            while block := src.read(_SPOOL_CHUNK):
                f.write(block)
        if spool.stat().st_size == 0:
            raise UserError("standard input is empty (0 bytes)",
                            "pipe a capture into it, e.g. tcpdump -w - | msgcap dissect - -o OUT")
        check_capture(str(spool), shown="standard input")
        yield [str(spool) if c == STDIN else c for c in captures], str(spool)


def name_stdin_input(out: Path, spool: str) -> None:
    """The manifest names standard input ``-``, not the temporary copy."""
    from analyzer.manifest import MANIFEST_NAME, dumps, read_manifest

    manifest = read_manifest(out)
    if manifest is None:
        return
    for entry in manifest.get("inputs", []):
        if entry.get("input", {}).get("path") == spool:
            entry["input"]["path"] = STDIN_NAME
    tmp = out / f".{MANIFEST_NAME}.stdin.tmp"
    tmp.write_text(dumps(manifest), encoding="utf-8")
    os.replace(tmp, out / MANIFEST_NAME)


def parse_decode_as(items: list[str] | None) -> dict[int, str]:
    """``--decode-as PORT=NAME`` (repeatable) as {port: dissector name}."""
    out: dict[int, str] = {}
    for item in items or ():
        port, sep, name = item.partition("=")
        if not sep or not port.isdigit() or not name or not 0 < int(port) < 65536:
            raise UserError(f"--decode-as wants PORT=NAME, got {item!r}",
                            "write it like --decode-as 4222=nats (a TCP or UDP port from 1 "
                            "to 65535; names: `msgcap protocols`)")
        out[int(port)] = name
    return out


def check_decode_as(decode_as: dict[int, str], registry) -> None:
    """Every ``--decode-as`` name is a dissector of ``registry``."""
    for port, name in decode_as.items():
        try:
            registry.get(name)
        except KeyError:
            known = ", ".join(sorted(registry.dissectors))
            raise UserError(f"--decode-as {port}={name}: unknown dissector {name!r} (no "
                            f"dissector named {name!r} is installed)",
                            f"use one of: {known} (see `msgcap protocols`)") from None


def check_keylog(path: str) -> None:
    """A key log that gives no secret at all is said at once, naming the file and how
    many of its lines parsed (before, a text file was accepted silently and only a
    ``quic.keylog`` anomaly hinted at it, even on a TLS capture)."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "not found"
        raise UserError(f"key log {path} {what}",
                        "give --keylog the SSLKEYLOGFILE the client wrote (NSS key log format)")
    from reassembly.quic.keylog import KeyLog

    try:
        log = KeyLog.from_file(p)
    except OSError as exc:
        raise UserError(f"key log {path} cannot be read ({exc.strerror or exc})",
                        "check the path and its permissions") from None
    if log.lines == 0:
        raise UserError(
            f"key log {path}: 0 secret lines parsed ({log.bad_lines} other line(s) not in "
            "the NSS key log format)",
            "give the file SSLKEYLOGFILE pointed at when the client ran: lines like "
            "CLIENT_RANDOM <64 hex> <96 hex> or CLIENT_TRAFFIC_SECRET_0 <64 hex> <hex>",
        )


def flow_ids_text(ids) -> str:
    """``0..5`` for consecutive ids, else the first few; "none" for no flows."""
    ids = sorted(set(ids))
    if not ids:
        return "none"
    if ids[-1] - ids[0] + 1 == len(ids):
        return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])
    shown = ", ".join(str(i) for i in ids[:8])
    return shown + (f", … ({len(ids)} flows, up to {ids[-1]})" if len(ids) > 8 else "")


# ------------------------------------------------------------------------ time


TIME_FORMATS = ("utc", "local", "epoch", "relative")
TIME_HELP = ("how times are printed: utc (default), local (this machine's zone), epoch "
             "(seconds since 1970), relative (seconds since the first packet shown)")


def format_ts(ns: int | None, mode: str = "utc", t0_ns: int | None = None) -> str:
    """One timestamp in the chosen ``--time`` format (microsecond precision)."""
    if ns is None:
        return "-"
    if mode == "epoch":
        return f"{ns // 1_000_000_000}.{ns % 1_000_000_000 // 1000:06d}"
    if mode == "relative":
        return f"{(ns - (t0_ns if t0_ns is not None else ns)) / 1e9:+.6f}"
    dt = datetime.fromtimestamp(ns // 1000 / 1e6, UTC)
    if mode == "local":
        return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S.%f%z")
    return dt.strftime("%Y-%m-%d %H:%M:%S.%f")


def time_label(mode: str) -> str:
    """The column header of a time in ``mode``."""
    return {"utc": "UTC", "local": "local", "epoch": "epoch s",
            "relative": "+s"}.get(mode, mode)


# ------------------------------------------------------------------------ output width


PIPE_WIDTH = 100  # columns of a table written to a pipe or file (not 200: diffs, mail)


def stdout_width() -> int | None:
    """Terminal width on a terminal (rich measures it); in a pipe ``COLUMNS``, else the
    width of the terminal the command was typed in (``msgcap flows X | less``), else
    :data:`PIPE_WIDTH`, so that piped output is not 160-190 columns wide."""
    if sys.stdout.isatty():
        return None
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    for fd in (2, 0):
        try:
            return os.get_terminal_size(fd).columns
        except OSError:
            continue
    return PIPE_WIDTH


_OUT_CLASS = None


def out_console(**kwargs):
    """A rich Console on stdout whose closed pipe raises ``BrokenPipeError`` (handled
    once, quietly, in ``analyzer.cli.main``) instead of rich's own ``SystemExit(1)``,
    which would say "degraded" for ``| head``.  Width: :func:`stdout_width`."""
    global _OUT_CLASS
    if _OUT_CLASS is None:
        from rich.console import Console

        class _Out(Console):
            def on_broken_pipe(self) -> None:
                self.quiet = True
                raise BrokenPipeError

        _OUT_CLASS = _Out
    kwargs.setdefault("width", stdout_width())
    kwargs.setdefault("highlight", False)
    return _OUT_CLASS(**kwargs)


FOLD_AFTER = 16  # a longer word in a table cell (a subject, a path) is folded, not kept whole


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


class FlexTable:
    """A table that degrades at narrow widths: values wrap, headers never break; when
    the headers (or the longest word of a column) cannot fit side by side, each row is
    printed as a block of ``header: value`` lines instead (the "narrow form", like
    ``psql``'s expanded display).  Printed with ``console.print(table)`` like a rich
    ``Table``; the choice is made at the width of the console it is printed on."""

    def __init__(self, title: str | None, headers: list[str], right: tuple[str, ...] = ()):
        self.title = title
        self.headers = list(headers)
        self.right = right
        self.rows: list[list[str]] = []

    def add_row(self, *values: str) -> None:
        self.rows.append([str(v) for v in values])

    def fits(self, width: int) -> bool:
        """Headers whole side by side, and room for a value's word up to
        :data:`FOLD_AFTER` characters (longer ones are folded across lines)."""
        need = [max(len(h), *(min(FOLD_AFTER, _longest_word(r[i])) for r in self.rows))
                if self.rows else len(h) for i, h in enumerate(self.headers)]
        return sum(need) + 3 * len(self.headers) + 1 <= width

    def __rich_console__(self, console, options):
        from rich.table import Table
        from rich.text import Text

        if not self.fits(options.max_width):
            if self.title:
                yield Text(self.title, style="bold")
            pad = max(len(h) for h in self.headers)
            for n, r in enumerate(self.rows):
                if n:
                    yield Text("")
                for h, v in zip(self.headers, r, strict=True):
                    line = Text(f"{h:>{pad}}: ", style="dim")
                    line.append(v)
                    yield line
            return
        t = Table(title=self.title, title_justify="left", header_style="bold",
                  title_style="bold")
        for h in self.headers:
            t.add_column(h, justify="right" if h in self.right else "left", min_width=len(h),
                         overflow="fold")
        for r in self.rows:
            t.add_row(*r)
        yield t


def print_table(console, title: str | None, headers: list[str], rows: list[list[str]],
                right: tuple[str, ...] = ()) -> None:
    """Print ``rows`` as a :class:`FlexTable`."""
    t = FlexTable(title, headers, right)
    for r in rows:
        t.add_row(*r)
    console.print(t)


class _NoPandas:
    """Meta-path finder that makes ``import pandas`` (and ``dateutil``) fail while
    installed."""

    _BLOCKED = ("pandas", "dateutil")

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self._BLOCKED:
            raise ImportError(f"msgcap: {name} is not needed here")
        return None


def skip_pandas_probe() -> None:
    """Keep pyarrow from importing pandas (~0.4 s of CPU, most of a small dissect).

    pyarrow imports pandas the first time it converts Python objects (``pa.array``,
    ``from_pylist``), only to check whether they are pandas objects; msgcap never
    hands it any.  Its probe runs once per process and remembers the answer, so we
    let that one probe fail, then remove the block: ``to_pandas()`` and any code that
    imports pandas itself still work (pyarrow imports it again when asked for it).
    Every type inference (``pa.array`` without a type) also imports
    ``dateutil.relativedelta`` (and ``six``: ~6 ms) to recognise such objects: blocked
    for this probe only, so a run whose arrays all name their type never loads it, and
    a later inference imports it as before.  Not used by ``msgcap spark``, where pandas
    objects do reach pyarrow."""
    if "pandas" in sys.modules:
        return
    block = _NoPandas()
    sys.meta_path.insert(0, block)
    try:
        import pyarrow as pa

        pa.array([0])
    finally:
        sys.meta_path.remove(block)


def prefer_jemalloc() -> None:
    """Make jemalloc Arrow's memory pool for this process and its children (call before
    pyarrow is imported), unless the user chose one (``ARROW_DEFAULT_MEMORY_POOL``).

    Why: pyarrow 26 defaults to mimalloc, with which a long ``msgcap dissect`` keeps
    memory it freed: on the 1 GB bulk NATS recording its anonymous RSS crept from ~156
    to ~210 MB through the run and peaked at 295 MB (244 MB on the 103 MB recording),
    where jemalloc (pyarrow's default before) levels off at ~150 MB and peaks at 243
    (217) MB, at the same speed (docs/performance.md, "Memory").  Chosen through the
    variable, not ``pa.set_memory_pool`` after the import: the buffers pyarrow's import
    and first conversions made from mimalloc kept ~20 MB more in every run.  Linux
    only, where pyarrow's wheels ship jemalloc (a pyarrow without it would warn on
    stderr and keep its default)."""
    if sys.platform.startswith("linux") and "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")


def one_blas_thread() -> None:
    """Keep numpy's OpenBLAS to the calling thread for this process and its children
    (call before numpy is imported), unless the user chose a count
    (``OPENBLAS_NUM_THREADS``).

    Why: pyarrow imports numpy, and numpy's OpenBLAS starts a thread per core the moment
    it loads; on this 2-core machine its thread spun through ~0.1 s of CPU in every run,
    on the core the Parquet and SHA-256 threads work on (``msgcap dissect`` of the 103 MB
    bulk NATS recording, 4 runs each, alternated: 0.80-0.99 s wall and 1.24-1.48 CPU s
    before, 0.78-0.83 s and 1.16-1.23 CPU s after; a 24 kB sample 0.35 -> 0.26 s).
    msgcap does no linear algebra: the threads never had work."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# allocations of container objects between two young-generation collections while a
# command runs (Python's default is 700)
_GC_YOUNG_THRESHOLD = 50_000


_gc_deferred = False


def defer_gc() -> None:
    """Keep the cyclic garbage collector off while a command-line ``dissect`` loads its
    modules, until ``settle_gc`` freezes what they loaded.

    Why: the imports (pyarrow, numpy, the dissectors) allocate ~60k container objects
    that live for the whole run; with the default young-generation threshold (700) the
    collector swept them ~76 times before ``settle_gc``, ~15-20 ms of CPU (~5% of a small
    capture's whole run), and found ~650 objects of cyclic garbage in all, which the
    freeze now keeps instead (a few hundred kB).  Only for a run that then calls
    ``settle_gc`` (``analyzer.cli`` calls both, for ``dissect`` in its own process);
    switched off with ``MSGCAP_GC_SETTLE=0``, like ``settle_gc``."""
    global _gc_deferred
    import gc

    if os.environ.get("MSGCAP_GC_SETTLE") == "0" or not gc.isenabled():
        return
    gc.disable()
    _gc_deferred = True


def settle_gc() -> None:
    """Leave what is loaded out of the cyclic garbage collector's sweeps, and sweep the
    young generation less often, for the rest of a command-line run.

    Why: after pyarrow, numpy and the dissectors are imported, the collector's older
    generations hold ~200k long-lived objects (modules, classes, functions) that each
    full collection walks again, and the dissection allocates container objects (rows,
    tuples, dicts) by the million, so the default threshold of 700 starts a young
    collection every few hundred allocations.  ``gc.freeze()`` moves what exists now to
    a generation that is never swept; objects freed by reference counting (nearly all)
    are unaffected, and cycles are still collected, only every 50k allocations instead
    of every 700 (a few MB of cyclic garbage at most before a sweep).  Only for a
    process that is the command line's own (``analyzer.cli.main()`` without ``argv``),
    not for callers of ``main(argv)`` such as tests.  Switched off with
    ``MSGCAP_GC_SETTLE=0``."""
    if os.environ.get("MSGCAP_GC_SETTLE") == "0":
        return
    import gc

    global _gc_deferred
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, older, oldest)
    if _gc_deferred:  # (defer_gc)
        _gc_deferred = False
        gc.enable()
