"""The plugin SDK itself: the ``dissectors.api`` surface, ``FramedSession``, the row helpers,
and the testing helpers (including that they catch the bugs they exist to catch)."""

from __future__ import annotations

import hashlib
import random
import struct
import subprocess
import sys
from typing import Any, ClassVar

import pyarrow as pa
import pytest

import dissectors.api as api
from dissectors.api import (
    Direction,
    Dissector,
    Dropped,
    Field,
    FramedSession,
    Invalid,
    LengthPrefixedFramer,
    Pdu,
    Record,
    Resynced,
    Session,
    Span,
    TableSpec,
    Verdict,
    anomaly_from,
    decode_text,
    payload_fields,
    payload_values,
    record_from,
)
from dissectors.nats import NatsDissector
from dissectors.sdk.testing import (
    Data,
    Gap,
    PcapFlow,
    assert_accounting,
    assert_never_raises,
    assert_rows_valid,
    assert_split_invariant,
    run_session,
    write_pcap,
)
from reassembly.capture import open_capture
from reassembly.engine import Reassembler
from reassembly.events import StreamData, StreamGap

C, S = Direction.C2S, Direction.S2C


# ------------------------------------------------------------------------ the surface


def test_every_exported_name_resolves() -> None:
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert api.API_VERSION == 1
    assert sorted(api.__all__) == sorted(set(api.__all__))
    assert set(api.__all__) <= set(dir(api))


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        api.nope  # noqa: B018


@pytest.mark.parametrize("first", ["dissectors.framing", "dissectors.api",
                                   "dissectors.sdk.testing", "dissectors.sessions"])
def test_import_order_does_not_matter(first) -> None:
    code = (f"import {first}\nfrom dissectors.api import *\n"
            "from dissectors.api import LineFramer, FramedSession\n"
            "from dissectors.sdk.testing import assert_split_invariant\n"
            "print(len(__import__('dissectors.api').api.__all__))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == len(api.__all__)


def test_plain_import_does_not_load_the_testing_helpers() -> None:
    code = ("import sys, dissectors.api\n"
            "print('dissectors.sdk.testing' in sys.modules, 'dissectors.framing' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.stdout.split() == ["False", "False"], proc.stderr


def test_the_api_does_not_offer_the_test_helpers_but_says_where_they_are() -> None:
    """They are ``dissectors.sdk.testing`` (``dissect_with_cli``: ``analyzer.testing``);
    a plugin test still importing them from the API is told where they went."""
    assert not {"Data", "run_session", "write_pcap", "dissect_with_cli"} & set(api.__all__)
    with pytest.raises(ImportError, match="dissectors.sdk.testing"):
        from dissectors.api import Data  # noqa: F401
    with pytest.raises(ImportError, match="analyzer.testing"):
        from dissectors.api import dissect_with_cli  # noqa: F401


# ------------------------------------------------------------------------ row helpers


def test_payload_values() -> None:
    data = b"x" * 10
    assert payload_values(data, 4) == {
        "payload": b"xxxx", "payload_len": 10,
        "payload_sha256": hashlib.sha256(data).hexdigest(), "payload_truncated": True}
    assert payload_values(data, None, "body")["body_truncated"] is False
    assert payload_values(None, 4, nbytes=7) == {
        "payload": None, "payload_len": 7, "payload_sha256": None, "payload_truncated": None}
    assert payload_values(b"ab", 4, nbytes=10, sha256="f" * 64)["payload_truncated"] is True
    with pytest.raises(ValueError, match="needs its sha256"):
        payload_values(b"ab", 4, nbytes=10)


def test_payload_fields_build_a_valid_table() -> None:
    spec = TableSpec("zz_payload_fields", 1, "t", payload_fields("body", "message body"))
    assert spec.column_names[-4:] == ["body", "body_len", "body_sha256", "body_truncated"]


def test_decode_text_never_raises() -> None:
    assert decode_text(b"caf\xc3\xa9 \xff") == "café \\xff"


def test_record_and_anomaly_from_events() -> None:
    a = Pdu(b"xx", 10, 12, 100, 101, 5, 5)
    b = Pdu(b"yy", 12, 20, 102, 103, 6, 7)
    r = record_from("t", S, {"k": 1}, a, b)
    assert (r.offset_start, r.offset_end, r.ts_first_ns, r.ts_last_ns, r.frame_first,
            r.frame_last) == (10, 20, 100, 103, 5, 7)
    an = anomaly_from("x.bad", "why", C, a)
    assert an.table == "anomalies" and an.values == {"kind": "x.bad", "detail": "why"}
    assert (an.offset_start, an.offset_end) == (10, 12)


# ------------------------------------------------- FramedSession on a toy protocol

# toy protocol: u16 big-endian length of the body, then the body; a zero length is invalid
TOY = TableSpec("zz_toy", 1, "Toy rows.", (Field("body", pa.binary(), "The body."),))


def _toy_length(view: memoryview) -> int | None:
    if len(view) < 2:
        return None
    n = struct.unpack_from("!H", view)[0]
    return 2 + n if n else 0


def _toy_resync(buf: bytes, prev: int | None) -> tuple[int, bool]:
    i = buf.find(b"\x00")
    return (i, True) if i >= 0 else (len(buf), False)


class ToySession(FramedSession):
    def __init__(self) -> None:
        super().__init__(*(LengthPrefixedFramer(_toy_length, max_pdu_bytes=100,
                                                resync=_toy_resync) for _ in Direction))

    def on_event(self, direction, ev, out) -> None:
        if type(ev) is Pdu:
            out.append(record_from("zz_toy", direction, {"body": ev.data[2:]}, ev))
        elif type(ev) is Invalid:
            out.append(anomaly_from("zz_toy.invalid", "bad length", direction, ev))
        elif type(ev) is Resynced:
            out.append(anomaly_from("zz_toy.resync", f"{ev.end - ev.start}", direction, ev))
        elif type(ev) is Dropped:
            out.append(anomaly_from("zz_toy.cut", ev.kind, direction, ev))
        else:
            out.append(anomaly_from("zz_toy.other", type(ev).__name__, direction, ev))


class ToyDissector(Dissector):
    name: ClassVar[str] = "zz_toy"
    tables: ClassVar[tuple[TableSpec, ...]] = (TOY,)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return Verdict.YES

    @classmethod
    def session(cls, options: dict[str, Any]) -> Session:
        return ToySession()


def toy(body: bytes) -> bytes:
    return struct.pack("!H", len(body)) + body


def test_framed_session_split_invariant_with_gaps_and_garbage() -> None:
    script = [Data(C, toy(b"hello") + b"\x00\x00junk" + toy(b"x" * 99)),
              Data(S, toy(b"abc")[:3]), Gap(S, 2), Data(S, toy(b"after")),
              Data(C, toy(b"tail")[:3])]
    records = assert_split_invariant(ToyDissector, script)
    assert_rows_valid(ToyDissector, records)
    got = [(r.direction, r.values.get("body", r.values.get("kind"))) for r in records]
    assert (C, b"hello") in got and (S, b"after") in got
    kinds = [r.values["kind"] for r in records if r.table == "anomalies"]
    assert "zz_toy.invalid" in kinds and "zz_toy.cut" in kinds and "zz_toy.other" in kinds


def test_framed_session_never_raises() -> None:
    assert_never_raises(ToyDissector, [[Data(C, toy(b"a") + toy(b"bc")), Data(S, toy(b""))]],
                        rounds=200)


# ------------------------------------------------ the helpers catch what they should


class _CutDependent(Session):
    """Bug on purpose: one row per feed() call, so rows depend on how bytes were cut."""

    def feed(self, direction, data, span):
        self.decoded_bytes[direction] += len(data)
        return [Record("zz_toy", direction, span.offset, span.offset + len(data),
                       span.ts_first_ns, span.ts_last_ns, span.frame_first, span.frame_last,
                       {"body": data})]

    def gap(self, direction, offset, nbytes, ts_ns):
        return []

    def close(self, ts_ns):
        return []


class _Leaky(_CutDependent):
    """Bug on purpose: forgets to count the bytes after the first 4."""

    def feed(self, direction, data, span):
        self.decoded_bytes[direction] = min(4, self.decoded_bytes[direction] + len(data))
        return []


class _Fragile(_CutDependent):
    """Bug on purpose: indexes into the input without checking."""

    def feed(self, direction, data, span):
        self.decoded_bytes[direction] += len(data)
        _ = data[5]
        return []


def test_split_invariance_catches_a_cut_dependent_session() -> None:
    with pytest.raises(AssertionError, match="byte by byte: records differ"):
        assert_split_invariant(_CutDependent, [Data(C, b"abcdef")])


def test_accounting_catches_a_leaky_session() -> None:
    run = run_session(_Leaky, [Data(C, b"abcdefgh"), Gap(C, 3)])
    assert run.stream_bytes[C] == 11 and run.gap_bytes[C] == 3
    with pytest.raises(AssertionError, match="byte accounting broken for c2s"):
        assert_accounting(run)


def test_never_raises_reports_a_reproducer() -> None:
    with pytest.raises(AssertionError, match=r"round \d+ \(seed 0\) raised IndexError") as err:
        assert_never_raises(_Fragile, [[Data(C, b"abcdefghij")]], rounds=50)
    assert "script [" in str(err.value)


def test_rows_valid_catches_undeclared_columns_and_tables() -> None:
    good = Record("zz_toy", C, 0, 1, 1, 1, 1, 1, {"body": b"x"})
    assert_rows_valid(ToyDissector, [good])
    with pytest.raises(Exception, match="bdoy"):
        assert_rows_valid(ToyDissector, [Record("zz_toy", C, 0, 1, 1, 1, 1, 1, {"bdoy": b"x"})])
    with pytest.raises(AssertionError, match="not in ToyDissector.tables"):
        assert_rows_valid(ToyDissector, [Record("other", C, 0, 1, 1, 1, 1, 1, {})])
    with pytest.raises(AssertionError, match="should start with 'zz_toy'"):
        assert_rows_valid(ToyDissector, [Record.anomaly("nats.x", "d", C, 0, 1, 1, 1, 1, 1)])
    with pytest.raises(Exception, match="body"):
        assert_rows_valid(ToyDissector, [Record("zz_toy", C, 0, 1, 1, 1, 1, 1, {"body": 5})])


def test_run_session_splits() -> None:
    seen: list[int] = []

    class Recorder(_CutDependent):
        def feed(self, direction, data, span):
            seen.append(len(data))
            assert span.frame_first == span.frame_last == 1  # pieces keep their item's frame
            return super().feed(direction, data, span)

    run_session(Recorder, [Data(C, b"abcdef")], split="bytes")
    assert seen == [1] * 6
    seen.clear()
    run_session(Recorder, [Data(C, b"abcdef")], split=lambda n: [2, 4])
    assert seen == [2, 4]
    seen.clear()
    run_session(Recorder, [Data(C, b"abcdef")], split=random.Random(3))
    assert sum(seen) == 6


def test_nats_passes_the_sdk_checks() -> None:
    """Our own built-in dissector, through the same helpers plugins use."""
    script = [Data(S, b'INFO {"max_payload":1048576}\r\n'),
              Data(C, b"CONNECT {}\r\nPUB a.b 5\r\nhello\r\nPING\r\n"),
              Data(S, b"PONG\r\nMSG a.b 1 5\r\nhel"), Data(S, b"lo\r\n")]
    records = assert_split_invariant(NatsDissector, script)
    assert_rows_valid(NatsDissector, records)
    assert_never_raises(NatsDissector, [script], rounds=100)


# ---------------------------------------------------------------------- write_pcap


def test_write_pcap_round_trips_through_reassembly(tmp_path) -> None:
    script = [Data(C, b"a" * 3000), Data(S, b"pong"), Gap(C, 5), Data(C, b"end")]
    path = write_pcap(tmp_path / "t.pcap", [PcapFlow(script, 4222),
                                            PcapFlow([Data(C, b"dgram")], 53, "udp")])
    data: dict[Direction, bytearray] = {C: bytearray(), S: bytearray()}
    gaps = []
    with open_capture(path) as reader:
        for ev in Reassembler().process(reader):
            if isinstance(ev, StreamData):
                data[ev.direction] += ev.data
            elif isinstance(ev, StreamGap):
                gaps.append((ev.direction, ev.offset, ev.nbytes))
    assert bytes(data[C]) == b"a" * 3000 + b"end" and bytes(data[S]) == b"pong"
    assert gaps == [(C, 3000, 5)]


def test_span_is_the_feed_provenance_type() -> None:
    assert Span._fields == ("offset", "ts_first_ns", "ts_last_ns", "frame_first", "frame_last")
