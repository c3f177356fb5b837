"""``msgcap new-dissector``: write an installable plugin package to start a dissector from.

Strategy: the package is a working dissector for a small made-up protocol (magic
``XP``, a message type, flags, a length-prefixed body) so that ``pip install -e .`` and
``pytest`` pass before the author changes a line; the author then replaces the wire
format in ``protocol.py`` and the columns in ``table.py``.  It uses only
``dissectors.api``: the framing helpers (``LengthPrefixedFramer`` in a ``FramedSession``)
for TCP, one message per datagram for UDP, and ``PayloadDissector`` for a payload format
carried inside NATS messages.  The tests use the ``dissectors.sdk.testing`` helpers,
and ``analyzer.testing.dissect_with_cli`` to run a tiny generated capture through
``msgcap dissect``.  The payload cap is read with ``session_option`` and the one
``DEFAULT_PAYLOAD_CAP`` of ``dissectors.api``.

Templates are plain text with ``__NAME__`` (dissector and table name), ``__CLASS__``
(CamelCase) and ``__TITLE__`` placeholders, filled by ``str.replace``.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["TRANSPORTS", "ScaffoldError", "normalize_name", "scaffold", "taken_names"]

TRANSPORTS = ("tcp", "udp", "nats-payload")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,40}\Z")


class ScaffoldError(ValueError):
    """Bad name, or the target directory exists."""


def normalize_name(name: str) -> str:
    """``My-Proto`` → ``my_proto``; raises ``ScaffoldError`` unless the result is a valid
    dissector / table name (``[a-z][a-z0-9_]*``, at most 41 characters)."""
    norm = name.strip().lower().replace("-", "_")
    if not _NAME.match(norm):
        raise ScaffoldError(
            f"dissector name {name!r} must be a letter then letters, digits, '_' or '-' "
            "(it names the protocol, its table and its anomaly kinds)"
        )
    if norm in ("flows", "anomalies"):
        raise ScaffoldError(f"{norm!r} is the name of a core msgcap table")
    return norm


def taken_names() -> set[str]:
    """Names a new dissector must not take: the installed dissectors' (built-in and
    plugins) and every table they declare, plus the core tables.  A plugin named
    ``nats`` would be refused by the registry (two dissectors, one name) and its table
    would mix with the built-in ``nats`` table in every dataset."""
    from analyzer.pipeline import tables_for
    from dissectors.registry import discover

    reg = discover()
    return ({*reg.dissectors, *reg.payload} | {t.name for t in tables_for(reg)}
            | {"flows", "anomalies"})


def scaffold(name: str, transport: str = "tcp", out_dir: str | Path = ".") -> Path:
    """Write the plugin package ``msgcap-<name>`` under ``out_dir`` and return its path."""
    if transport not in TRANSPORTS:
        raise ScaffoldError(f"transport must be one of {', '.join(TRANSPORTS)}")
    norm = normalize_name(name)
    root = Path(out_dir) / f"msgcap-{norm.replace('_', '-')}"
    if root.exists():
        raise ScaffoldError(f"{root} already exists")
    cls = "".join(part.capitalize() for part in norm.split("_"))
    title = norm.replace("_", " ").title()
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        f"src/msgcap_{norm}/__init__.py": _INIT[transport],
        f"src/msgcap_{norm}/protocol.py": _PROTOCOL,
        f"src/msgcap_{norm}/table.py": _TABLE,
        f"tests/test_{norm}.py": _TEST_HEAD + _TESTS[transport],
    }
    if transport != "nats-payload":
        files[f"src/msgcap_{norm}/session.py"] = _SESSION[transport]
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (text.replace("__NAME__", norm).replace("__CLASS__", cls)
                .replace("__TITLE__", title).replace("__TRANSPORT__", transport))
        path.write_text(text.lstrip("\n"), encoding="utf-8")
    return root


# ---------------------------------------------------------------------------- files

_PYPROJECT = '''
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "msgcap-__NAME__"
version = "0.1.0"
description = "__TITLE__ dissector plugin for msgcap"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["msgcap>=0.1"]

# What the tests need beyond msgcap itself: `pip install -e '.[test]'` (a runtime-only
# environment has no pytest, and the next-step hint of `msgcap new-dissector` runs it).
[project.optional-dependencies]
test = ["pytest>=8"]

# This is how msgcap finds the dissector: NAME = "module:Class".
[project.entry-points."msgcap.dissectors"]
__NAME__ = "msgcap___NAME__:__CLASS__Dissector"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["src"]
addopts = "-q"

[tool.ruff]
line-length = 100
target-version = "py311"
src = ["src"]

[tool.ruff.lint]
select = ["E", "F", "W", "I", "B", "UP", "SIM"]
'''

_README = '''
# msgcap-__NAME__

A [msgcap](https://example.invalid/msgcap) dissector plugin for the __TITLE__ protocol
(__TRANSPORT__), generated by `msgcap new-dissector __NAME__ --transport __TRANSPORT__`.

It starts as a working dissector for a made-up example format (see `protocol.py`): replace
that with your protocol's wire format, and the columns in `table.py` with what your users
need.  Everything it imports comes from `dissectors.api`, msgcap's versioned plugin API.

## Use

```sh
pip install -e '.[test]'         # registers the msgcap.dissectors entry point (+ pytest)
msgcap protocols                 # lists "__NAME__"
msgcap dissect capture.pcap -o out/
msgcap schema __NAME__           # the table's columns
```

## Layout

- `src/msgcap___NAME__/protocol.py`: the wire format, pure functions (header, length,
  probe, resync rule);
- `src/msgcap___NAME__/session.py`: per-flow state, framing events to rows and anomalies
  (tcp and udp only);
- `src/msgcap___NAME__/table.py`: the `__NAME__` table, declared once;
- `src/msgcap___NAME__/__init__.py`: the dissector class the entry point names;
- `tests/test___NAME__.py`: unit tests on byte literals and a tiny generated capture.

## Test

```sh
pytest
```

The tests use `dissectors.sdk.testing`: `assert_split_invariant` feeds each conversation
whole, byte by byte and cut at random points and checks the rows are the same and every
byte is accounted for; `assert_never_raises` fuzzes mutated input; `assert_rows_valid`
checks rows against the table; `write_pcap` + `dissect_with_cli` (from `analyzer.testing`)
run `msgcap dissect` on a tiny capture (the plugin must be installed for that one).
'''

_PROTOCOL = '''
"""The __TITLE__ wire format: pure functions, no state.

Example format (replace it with your protocol's; cite its spec section by section):
every message is ``MAGIC`` (2 bytes, ``XP``), a message type (u8), flags (u8), the body
length (u32, big-endian) and the body.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any

from dissectors.api import Verdict, payload_values

MAGIC = b"XP"
HEADER = struct.Struct("!2sBBI")  # magic, type, flags, body length
DEFAULT_PORT = 7000  # a hint for detection, never proof
# Longest message accepted; longer ones are reported and skipped, never buffered.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class MsgType(IntEnum):
    HELLO = 1
    DATA = 2
    BYE = 3


def encode(msg_type: int, body: bytes, flags: int = 0) -> bytes:
    """One message on the wire (for tests and examples)."""
    return HEADER.pack(MAGIC, msg_type, flags, len(body)) + body


def message_length(view: memoryview) -> int | None:
    """Whole length of the message at the start of ``view``; None: need more bytes;
    0: no message starts here (the framer reports it and resynchronises)."""
    if not MAGIC.startswith(bytes(view[:2])):
        return 0
    if len(view) < HEADER.size:
        return None
    return HEADER.size + HEADER.unpack_from(view)[3]


def resync(buf: bytes, prev_byte: int | None) -> tuple[int, bool]:
    """Where the next message plausibly starts: the next ``MAGIC``."""
    i = buf.find(MAGIC)
    if i >= 0:
        return i, True
    # the last byte may be the first half of MAGIC: keep it for the next call
    keep = 1 if buf.endswith(MAGIC[:1]) else 0
    return len(buf) - keep, False


def probe(prefix: bytes) -> Verdict:
    """Cheap look at the first bytes of a direction (never raises)."""
    if not MAGIC.startswith(prefix[:2]):
        return Verdict.NO
    if len(prefix) < HEADER.size:
        return Verdict.NEED_MORE
    _, msg_type, _, n = HEADER.unpack_from(prefix)
    if msg_type in MsgType._value2member_map_ and n <= MAX_MESSAGE_BYTES:
        return Verdict.YES
    return Verdict.NO


def row_values(message: bytes, payload_cap: int | None) -> dict[str, Any]:
    """Column values of one whole message (header checked by the caller)."""
    _, msg_type, flags, _ = HEADER.unpack_from(message)
    known = MsgType._value2member_map_.get(msg_type)
    return {
        "msg_type": msg_type,
        "msg_type_name": known.name if known is not None else None,
        "flags": flags,
        **payload_values(message[HEADER.size :], payload_cap, "body"),
    }
'''

_TABLE = '''
"""The ``__NAME__`` table: one row per __TITLE__ message, declared once.

msgcap derives the Arrow and Spark schemas, the docs and the validator from it.  Every
column has one type and a description; the envelope (capture, flow, direction, times,
offsets, frames) is added in front of these columns.
"""

from __future__ import annotations

import pyarrow as pa
from dissectors.api import Field, TableSpec, payload_fields

TABLE = TableSpec(
    "__NAME__",
    1,
    "One row per __TITLE__ message, in stream order per direction.",
    (
        Field("msg_type", pa.int32(), "Message type code from the header.", False),
        Field("msg_type_name", pa.string(), "Name of the message type; null if unknown."),
        Field("flags", pa.int32(), "Header flags byte."),
        *payload_fields("body", "message body"),
    ),
)
'''

_INIT_STREAM = '''
"""__TITLE__ dissector for msgcap (generated by ``msgcap new-dissector``)."""

from __future__ import annotations

from typing import Any, ClassVar

from dissectors.api import Direction, Dissector, Session, TableSpec, Transport, Verdict

from msgcap___NAME__ import protocol
from msgcap___NAME__.session import __CLASS__Session
from msgcap___NAME__.table import TABLE

__all__ = ["TABLE", "__CLASS__Dissector", "__CLASS__Session"]


class __CLASS__Dissector(Dissector):
    name: ClassVar[str] = "__NAME__"
    description: ClassVar[str] = "__TITLE__ protocol"
    transport: ClassVar[Transport] = Transport.__UPPER__
    default_ports: ClassVar[tuple[int, ...]] = (protocol.DEFAULT_PORT,)
    tables: ClassVar[tuple[TableSpec, ...]] = (TABLE,)
    api_version: ClassVar[int] = 1  # the dissectors.api major version this was written for

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return protocol.probe(prefix)

    @classmethod
    def session(cls, options: dict[str, Any]) -> Session:
        return __CLASS__Session(options)
'''

_INIT_PAYLOAD = '''
"""__TITLE__ payload dissector for msgcap: messages carried inside NATS messages
(generated by ``msgcap new-dissector --transport nats-payload``).

The NATS dissector offers each PUB/HPUB/MSG/HMSG payload to payload dissectors: first by
subjects bound during the capture, then by subject patterns (``subjects``, NATS
wildcards ``*`` and ``>``), then by ``probe_payload``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from dissectors.api import (
    DEFAULT_PAYLOAD_CAP,
    Bindings,
    CarriedMessage,
    PayloadDissector,
    Record,
    SessionOptions,
    TableSpec,
    Verdict,
    session_option,
)

from msgcap___NAME__ import protocol
from msgcap___NAME__.table import TABLE

__all__ = ["TABLE", "__CLASS__Dissector"]


class __CLASS__Dissector(PayloadDissector):
    name: ClassVar[str] = "__NAME__"
    description: ClassVar[str] = "__TITLE__ messages carried in NATS"
    carriers: ClassVar[tuple[str, ...]] = ("nats",)
    # (pattern, hint): messages on these subjects are ours whatever their bytes
    subjects: ClassVar[tuple[tuple[str, str], ...]] = (("__NAME__.>", ""),)
    tables: ClassVar[tuple[TableSpec, ...]] = (TABLE,)
    api_version: ClassVar[int] = 1  # the dissectors.api major version this was written for

    @classmethod
    def probe_payload(cls, payload: bytes) -> Verdict:
        """Claim a payload on another subject only when its bytes prove it."""
        n = protocol.message_length(memoryview(payload)) if payload else 0
        return Verdict.YES if n == len(payload) and n else Verdict.NO

    @classmethod
    def new_state(cls, options: SessionOptions) -> Any:
        # a bad value raises ValueError naming the option (the run reports it)
        return {"payload_cap": session_option(options, "payload_cap", DEFAULT_PAYLOAD_CAP,
                                              none_ok=True, owner="__NAME__")}

    @classmethod
    def decode(cls, state: Any, bindings: Bindings, msg: CarriedMessage, hint: str
               ) -> list[Record]:
        payload = msg.payload
        n = protocol.message_length(memoryview(payload)) if payload else None
        if n != len(payload):
            return [msg.anomaly(
                "__NAME__.invalid",
                f"payload of {len(payload)} bytes on {msg.subject!r} is not one __NAME__ "
                f"message (header says {n})",
            )]
        return [msg.record(TABLE.name, protocol.row_values(payload, state["payload_cap"]))]
'''

_INIT = {
    "tcp": _INIT_STREAM.replace("__UPPER__", "TCP"),
    "udp": _INIT_STREAM.replace("__UPPER__", "UDP"),
    "nats-payload": _INIT_PAYLOAD,
}

_SESSION_TCP = '''
"""Per-connection state: one ``LengthPrefixedFramer`` per direction.

``FramedSession`` feeds the framers, drains their events into ``on_event`` and keeps the
byte accounting; this class only says what each framing event becomes.
"""

from __future__ import annotations

from typing import Any

from dissectors.api import (
    DEFAULT_PAYLOAD_CAP,
    Direction,
    Dropped,
    FramedSession,
    Invalid,
    LengthPrefixedFramer,
    Oversize,
    Pdu,
    Record,
    Resynced,
    anomaly_from,
    record_from,
    session_option,
)

from msgcap___NAME__ import protocol
from msgcap___NAME__.table import TABLE


class __CLASS__Session(FramedSession):
    """One __TITLE__ connection (both directions)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        options = options or {}
        super().__init__(*(
            LengthPrefixedFramer(protocol.message_length,
                                 max_pdu_bytes=protocol.MAX_MESSAGE_BYTES,
                                 resync=protocol.resync)
            for _ in Direction
        ))
        self.payload_cap = session_option(options, "payload_cap", DEFAULT_PAYLOAD_CAP,
                                          none_ok=True, owner="__NAME__")

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        t = type(ev)
        if t is Pdu:
            values = protocol.row_values(ev.data, self.payload_cap)
            out.append(record_from(TABLE.name, direction, values, ev))
            if values["msg_type_name"] is None:
                out.append(anomaly_from("__NAME__.unknown_type",
                                        f"unknown message type {values['msg_type']}",
                                        direction, ev))
        elif t is Invalid:
            out.append(anomaly_from("__NAME__.invalid",
                                    "no message starts here; resynchronising", direction, ev))
        elif t is Resynced:
            out.append(anomaly_from("__NAME__.resync",
                                    f"skipped {ev.end - ev.start} bytes", direction, ev))
        elif t is Oversize:
            out.append(anomaly_from("__NAME__.oversize",
                                    f"message of {ev.nbytes} bytes exceeds "
                                    f"{protocol.MAX_MESSAGE_BYTES}; skipped", direction, ev))
        elif t is Dropped:
            where = "the end of the stream" if self.closing else "a gap"
            kind = "__NAME__.eof_in_message" if self.closing else "__NAME__.gap_in_message"
            out.append(anomaly_from(kind, f"{where} cut a message after "
                                    f"{ev.end - ev.start} bytes", direction, ev))
'''

_SESSION_UDP = '''
"""Per-flow state for a datagram protocol: every ``feed`` is one datagram, holding one
message (no framing needed: the datagram is the frame)."""

from __future__ import annotations

from typing import Any

from dissectors.api import DEFAULT_PAYLOAD_CAP, Direction, Record, Session, Span, session_option

from msgcap___NAME__ import protocol
from msgcap___NAME__.table import TABLE


class __CLASS__Session(Session):
    """One __TITLE__ UDP flow (both directions)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.payload_cap = session_option(options or {}, "payload_cap", DEFAULT_PAYLOAD_CAP,
                                          none_ok=True, owner="__NAME__")

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        n = len(data)
        where = (direction, span.offset, span.offset + n, span.ts_first_ns, span.ts_last_ns,
                 span.frame_first, span.frame_last)
        length = protocol.message_length(memoryview(data)) if n else None
        if length != n:
            self.undecoded_bytes[direction] += n
            return [Record.anomaly("__NAME__.invalid",
                                   f"datagram of {n} bytes is not one __NAME__ message", *where)]
        self.decoded_bytes[direction] += n
        return [Record(TABLE.name, *where, protocol.row_values(data, self.payload_cap))]

    def gap(self, direction: Direction, offset: int, nbytes: int, ts_ns: int) -> list[Record]:
        return []  # datagrams have no gaps

    def close(self, ts_ns: int) -> list[Record]:
        return []
'''

_SESSION = {"tcp": _SESSION_TCP, "udp": _SESSION_UDP}

_TEST_HEAD = '''
"""Tests for the __NAME__ dissector: byte literals first, then a tiny capture.

Run ``pip install -e '.[test]'`` once: the capture test runs ``msgcap dissect``, which finds the
dissector through its entry point like any installed plugin.
"""

from __future__ import annotations

from importlib.metadata import entry_points
'''

_TESTS_TCP = '''
from analyzer.testing import dissect_with_cli
from dissectors.api import Direction, Verdict
from dissectors.sdk.testing import (
    Data,
    Gap,
    PcapFlow,
    assert_never_raises,
    assert_rows_valid,
    assert_split_invariant,
    write_pcap,
)

from msgcap___NAME__ import __CLASS__Dissector
from msgcap___NAME__.protocol import DEFAULT_PORT, MsgType, encode

C, S = Direction.C2S, Direction.S2C

CONVERSATION = [
    Data(C, encode(MsgType.HELLO, b"hi")),
    Data(S, encode(MsgType.HELLO, b"welcome")),
    Data(C, encode(MsgType.DATA, b"x" * 3000, flags=1) + encode(MsgType.BYE, b"")),
]


def rows(records):
    return [r.values for r in records if r.table == "__NAME__"]


def anomalies(records):
    return [r.values["kind"] for r in records if r.table == "anomalies"]


def test_probe() -> None:
    assert __CLASS__Dissector.probe(C, encode(MsgType.HELLO, b"")) == Verdict.YES
    assert __CLASS__Dissector.probe(C, b"XP") == Verdict.NEED_MORE
    assert __CLASS__Dissector.probe(C, b"GET / HTTP/1.1\\r\\n") == Verdict.NO


def test_conversation_whole_bytewise_and_split() -> None:
    records = assert_split_invariant(__CLASS__Dissector, CONVERSATION)
    assert_rows_valid(__CLASS__Dissector, records)
    got = [(r["msg_type_name"], r["flags"], r["body_len"]) for r in rows(records)]
    assert got == [("HELLO", 0, 2), ("HELLO", 0, 7), ("DATA", 1, 3000), ("BYE", 0, 0)]
    assert rows(records)[2]["body_truncated"] is False
    assert not anomalies(records)


def test_garbage_is_reported_and_skipped() -> None:
    records = assert_split_invariant(__CLASS__Dissector,
                                     [Data(C, b"junk!" + encode(MsgType.DATA, b"ok"))])
    assert anomalies(records) == ["__NAME__.invalid", "__NAME__.resync"]
    assert [r["body"] for r in rows(records)] == [b"ok"]


def test_gap_inside_a_message() -> None:
    msg = encode(MsgType.DATA, b"abcdef")
    records = assert_split_invariant(__CLASS__Dissector, [
        Data(C, msg[:8]), Gap(C, len(msg) - 8), Data(C, encode(MsgType.BYE, b"")),
    ])
    assert anomalies(records) == ["__NAME__.gap_in_message"]
    assert [r["msg_type_name"] for r in rows(records)] == ["BYE"]


def test_never_raises() -> None:
    assert_never_raises(__CLASS__Dissector, [CONVERSATION], rounds=200)


def test_tiny_capture(tmp_path) -> None:
    names = {ep.name for ep in entry_points(group="msgcap.dissectors")}
    assert "__NAME__" in names, "install the plugin first: pip install -e '.[test]'"
    pcap = write_pcap(tmp_path / "tiny.pcap", [PcapFlow(CONVERSATION, DEFAULT_PORT)])
    run = dissect_with_cli(pcap, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert [r["msg_type_name"] for r in run.tables["__NAME__"]] == [
        "HELLO", "HELLO", "DATA", "BYE"]
    (flow,) = run.tables["flows"]
    assert flow["protocol"] == "__NAME__"
    assert flow["decoded_bytes_c2s"] == flow["stream_bytes_c2s"]
'''

_TESTS_UDP = '''
from analyzer.testing import dissect_with_cli
from dissectors.api import Direction, Verdict
from dissectors.sdk.testing import (
    Data,
    PcapFlow,
    assert_accounting,
    assert_never_raises,
    assert_rows_valid,
    run_session,
    write_pcap,
)

from msgcap___NAME__ import __CLASS__Dissector
from msgcap___NAME__.protocol import DEFAULT_PORT, MsgType, encode

C, S = Direction.C2S, Direction.S2C

# one item = one datagram
CONVERSATION = [
    Data(C, encode(MsgType.HELLO, b"hi")),
    Data(S, encode(MsgType.HELLO, b"welcome")),
    Data(C, encode(MsgType.DATA, b"x" * 1000, flags=1)),
    Data(C, b"not ours"),
]


def rows(records):
    return [r.values for r in records if r.table == "__NAME__"]


def test_probe() -> None:
    assert __CLASS__Dissector.probe(C, encode(MsgType.HELLO, b"")) == Verdict.YES
    assert __CLASS__Dissector.probe(C, b"\\x00\\x01") == Verdict.NO


def test_datagrams() -> None:
    run = run_session(__CLASS__Dissector, CONVERSATION)
    assert_accounting(run)
    assert_rows_valid(__CLASS__Dissector, run.records)
    got = [(r["msg_type_name"], r["body_len"]) for r in rows(run.records)]
    assert got == [("HELLO", 2), ("HELLO", 7), ("DATA", 1000)]
    kinds = [r.values["kind"] for r in run.records if r.table == "anomalies"]
    assert kinds == ["__NAME__.invalid"]


def test_never_raises() -> None:
    assert_never_raises(__CLASS__Dissector, [CONVERSATION], rounds=200)


def test_tiny_capture(tmp_path) -> None:
    names = {ep.name for ep in entry_points(group="msgcap.dissectors")}
    assert "__NAME__" in names, "install the plugin first: pip install -e '.[test]'"
    pcap = write_pcap(tmp_path / "tiny.pcap",
                      [PcapFlow(CONVERSATION, DEFAULT_PORT, transport="udp")])
    run = dissect_with_cli(pcap, tmp_path / "out")
    assert run.returncode in (0, 1), run.stderr
    (flow,) = run.tables["flows"]
    assert flow["transport"] == "udp" and flow["protocol"] == "__NAME__"
    assert [r["msg_type_name"] for r in run.tables["__NAME__"]] == ["HELLO", "HELLO", "DATA"]


def test_decode_as_another_port(tmp_path) -> None:
    """``--decode-as PORT=__NAME__`` hands the datagrams of another UDP port to it."""
    pcap = write_pcap(tmp_path / "other.pcap", [PcapFlow(CONVERSATION, 40999, transport="udp")])
    run = dissect_with_cli(pcap, tmp_path / "out", "--decode-as", "40999=__NAME__")
    assert run.returncode in (0, 1), run.stderr
    (flow,) = run.tables["flows"]
    assert 40999 in (flow["server_port"], flow["client_port"])
    assert flow["protocol"] == "__NAME__"
    assert [r["msg_type_name"] for r in run.tables["__NAME__"]] == ["HELLO", "HELLO", "DATA"]
'''

_TESTS_PAYLOAD = '''
from analyzer.testing import dissect_with_cli
from dissectors.api import Direction
from dissectors.sdk.testing import (
    Data,
    PcapFlow,
    assert_never_raises,
    assert_rows_valid,
    carried_message,
    run_payload,
    write_pcap,
)

from msgcap___NAME__ import __CLASS__Dissector
from msgcap___NAME__.protocol import MsgType, encode

C, S = Direction.C2S, Direction.S2C


def test_messages_on_our_subjects_and_by_probe() -> None:
    records = run_payload(__CLASS__Dissector, [
        carried_message(encode(MsgType.HELLO, b"hi"), "__NAME__.greetings"),
        carried_message(encode(MsgType.DATA, b"x" * 100), "elsewhere"),  # claimed by probe
        carried_message(b"plain text", "elsewhere"),  # not ours: nothing
        carried_message(b"junk", "__NAME__.bad"),  # our subject, bad bytes: an anomaly
    ])
    assert_rows_valid(__CLASS__Dissector, records)
    assert [r.values.get("msg_type_name") or r.values.get("kind") for r in records] == [
        "HELLO", "DATA", "__NAME__.invalid"]


def test_never_raises() -> None:
    assert_never_raises(__CLASS__Dissector, [encode(MsgType.DATA, b"payload")], rounds=200)


def nats_pub(subject: str, payload: bytes) -> bytes:
    return b"PUB %s %d\\r\\n%s\\r\\n" % (subject.encode(), len(payload), payload)


def test_tiny_capture(tmp_path) -> None:
    names = {ep.name for ep in entry_points(group="msgcap.dissectors")}
    assert "__NAME__" in names, "install the plugin first: pip install -e '.[test]'"
    script = [
        Data(S, b'INFO {"server_id":"x","version":"2.10.0","max_payload":1048576}\\r\\n'),
        Data(C, b'CONNECT {"verbose":false}\\r\\n'
                + nats_pub("__NAME__.demo", encode(MsgType.HELLO, b"hi")) + b"PING\\r\\n"),
        Data(S, b"PONG\\r\\n"),
    ]
    pcap = write_pcap(tmp_path / "tiny.pcap", [PcapFlow(script, 4222)])
    run = dissect_with_cli(pcap, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    (row,) = run.tables["__NAME__"]
    assert row["msg_type_name"] == "HELLO" and row["body"] == b"hi"
    parent = [r for r in run.tables["nats"] if r["record_id"] == row["parent_record_id"]]
    assert parent and parent[0]["op"] == "PUB"
'''

_TESTS = {"tcp": _TESTS_TCP, "udp": _TESTS_UDP, "nats-payload": _TESTS_PAYLOAD}
