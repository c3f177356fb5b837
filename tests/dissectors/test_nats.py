"""NATS dissector: exact rows from byte literals, fed whole, byte by byte and under
arbitrary splits; leniencies nats-server accepts; anomalies; gaps; fuzzing; accounting."""

from __future__ import annotations

import copy
import hashlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.api import Direction, Record, Span, Verdict
from dissectors.nats import NATS_TABLE, NatsDissector
from dissectors.nats import parser as nats_parser
from dissectors.redaction import marker
from dissectors.schema import rows_to_batch, validate_batch

C, S = Direction.C2S, Direction.S2C
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COLUMNS = set(NATS_TABLE.column_names)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Run:
    """Feed a conversation [(direction, bytes), ...] into one session."""

    def __init__(self, options: dict | None = None) -> None:
        self.session = NatsDissector.session(options or {})
        self.off = [0, 0]
        self.fed = [0, 0]
        self.gaps = [0, 0]
        self.records: list[Record] = []
        self.frame = 0

    def feed(self, direction: Direction, data: bytes, cuts=()) -> Run:
        bounds = sorted({0, len(data), *[c for c in cuts if 0 < c < len(data)]})
        for a, b in zip(bounds, bounds[1:], strict=False):
            self.frame += 1
            sp = Span(self.off[direction], self.frame * 1000, self.frame * 1000, self.frame,
                      self.frame)
            self.records += self.session.feed(direction, data[a:b], sp)
            self.off[direction] += b - a
            self.fed[direction] += b - a
        return self

    def gap(self, direction: Direction, nbytes: int) -> Run:
        self.records += self.session.gap(direction, self.off[direction], nbytes, 0)
        self.off[direction] += nbytes
        self.gaps[direction] += nbytes
        return self

    def close(self) -> Run:
        self.records += self.session.close(0)
        for d in (0, 1):
            s = self.session
            assert s.decoded_bytes[d] + s.undecoded_bytes[d] == self.fed[d], (d, s.decoded_bytes,
                                                                               s.undecoded_bytes)
        return self

    # views
    def rows(self, direction: Direction | None = None) -> list[dict]:
        return [nonnull(r.values) for r in self.records
                if r.table == "nats" and (direction is None or r.direction == direction)]

    def anomalies(self) -> list[tuple[str, int, int]]:
        return [(r.values["kind"], r.offset_start, r.offset_end) for r in self.records
                if r.table == "anomalies"]

    def shape(self) -> list[tuple]:
        return [(r.table, int(r.direction), r.offset_start, r.offset_end, nonnull(r.values))
                for r in self.records]


def nonnull(values: dict) -> dict:
    """A row's non-null columns (every other column of the table is null)."""
    return {k: v for k, v in values.items() if v is not None}


def one(direction: Direction, data: bytes, **options) -> Run:
    return Run(options).feed(direction, data).close()


# ---------------------------------------------------------------- every op, exactly

INFO_JSON = (
    b'{"server_id":"NDTR3ZYV","server_name":"us-south","version":"2.10.7","proto":1,'
    b'"go":"go1.21.5","host":"0.0.0.0","port":4222,"headers":true,"max_payload":1048576,'
    b'"client_id":42,"client_ip":"10.0.0.7","auth_required":true,"tls_required":false,'
    b'"tls_available":true,"jetstream":true,"nonce":"abc","cluster":"c1",'
    b'"connect_urls":["10.0.0.1:4222","10.0.0.2:4222"],"ldm":false,"xkey":"ignored"}'
)
CONNECT_JSON = (
    b'{"verbose":true,"pedantic":false,"tls_required":false,"name":"svc","lang":"go",'
    b'"version":"1.25.0","protocol":1,"echo":true,"headers":true,"no_responders":true,'
    b'"user":"alice","pass":"s3cret"}'
)
HDRS = b"NATS/1.0\r\nBar: Baz\r\n\r\n"  # 22 bytes

CONVERSATION = [
    (S, b"INFO " + INFO_JSON + b"\r\n"),
    (C, b"CONNECT " + CONNECT_JSON + b"\r\n"),
    (S, b"+OK\r\n"),
    (C, b"PING\r\n"),
    (S, b"PONG\r\n"),
    (C, b"SUB FOO 1\r\nSUB FOO.* workers 2\r\n"),
    (C, b"PUB FOO 11\r\nHello World\r\n"),
    (S, b"MSG FOO 1 11\r\nHello World\r\n"),
    (C, b"PUB FOO.x _INBOX.abc 6\r\na\r\nb\r\n\r\n"),  # the payload holds CRLFs
    (C, b"PUB FOO 0\r\n\r\n"),
    (C, b"HPUB FOO 22 33\r\n" + HDRS + b"Hello NATS!\r\n"),
    (S, b"HMSG FOO.x 2 JOKE.22 22 33\r\n" + HDRS + b"Hello NATS!\r\n"),
    (S, b"HMSG _INBOX.abc 9 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"),
    (S, b"MSG FOO.x 2 _INBOX.abc 6\r\na\r\nb\r\n\r\n"),
    (C, b"UNSUB 1\r\nUNSUB 2 5\r\n"),
    (S, b"-ERR 'Unknown Protocol Operation'\r\n"),
]

EXPECTED_ROWS = [
    (S, {
        "op": "INFO", "json_raw": INFO_JSON.decode(), "server_id": "NDTR3ZYV",
        "server_name": "us-south", "server_version": "2.10.7", "server_go": "go1.21.5",
        "server_host": "0.0.0.0", "server_port": 4222, "max_payload": 1048576,
        "info_headers": True, "proto": 1, "auth_required": True, "tls_required": False,
        "tls_available": True, "jetstream": True, "client_id": 42, "client_ip": "10.0.0.7",
        "nonce": "abc", "cluster": "c1", "connect_urls": ["10.0.0.1:4222", "10.0.0.2:4222"],
        "lame_duck_mode": False, "incomplete": False,
    }),
    (C, {
        # the password is redacted by default (length and SHA-256 kept; --keep-secrets)
        "op": "CONNECT",
        "json_raw": CONNECT_JSON.decode().replace('"s3cret"', f'"{marker(b"s3cret")}"'),
        "client_name": "svc",
        "client_lang": "go", "client_version": "1.25.0", "verbose": True, "pedantic": False,
        "tls_required": False, "echo": True, "protocol": 1, "connect_headers": True,
        "no_responders": True, "client_user": "alice", "auth_fields": ["user", "pass"],
        "incomplete": False,
    }),
    (S, {"op": "+OK", "incomplete": False}),
    (C, {"op": "PING", "incomplete": False}),
    (S, {"op": "PONG", "incomplete": False}),
    (C, {"op": "SUB", "subject": "FOO", "sid": "1", "incomplete": False}),
    (C, {"op": "SUB", "subject": "FOO.*", "queue_group": "workers", "sid": "2",
         "incomplete": False}),
    (C, {"op": "PUB", "subject": "FOO", "payload_len": 11, "payload": b"Hello World",
         "payload_truncated": False, "payload_sha256": sha(b"Hello World"),
         "max_payload_exceeded": False, "incomplete": False}),
    (S, {"op": "MSG", "subject": "FOO", "sid": "1", "payload_len": 11, "payload": b"Hello World",
         "payload_truncated": False, "payload_sha256": sha(b"Hello World"),
         "incomplete": False}),
    (C, {"op": "PUB", "subject": "FOO.x", "reply_to": "_INBOX.abc", "payload_len": 6,
         "payload": b"a\r\nb\r\n", "payload_truncated": False, "payload_sha256": sha(b"a\r\nb\r\n"),
         "max_payload_exceeded": False, "incomplete": False}),
    (C, {"op": "PUB", "subject": "FOO", "payload_len": 0, "payload": b"",
         "payload_truncated": False, "payload_sha256": sha(b""), "max_payload_exceeded": False,
         "incomplete": False}),
    (C, {"op": "HPUB", "subject": "FOO", "header_len": 22, "headers_raw": HDRS,
         "headers": {"Bar": ["Baz"]}, "payload_len": 11, "payload": b"Hello NATS!",
         "payload_truncated": False, "payload_sha256": sha(b"Hello NATS!"),
         "max_payload_exceeded": False, "incomplete": False}),
    (S, {"op": "HMSG", "subject": "FOO.x", "sid": "2", "reply_to": "JOKE.22", "header_len": 22,
         "headers_raw": HDRS, "headers": {"Bar": ["Baz"]}, "payload_len": 11,
         "payload": b"Hello NATS!", "payload_truncated": False,
         "payload_sha256": sha(b"Hello NATS!"), "incomplete": False}),
    (S, {"op": "HMSG", "subject": "_INBOX.abc", "sid": "9", "header_len": 16,
         "headers_raw": b"NATS/1.0 503\r\n\r\n", "headers": {}, "status_code": 503,
         "payload_len": 0, "payload": b"", "payload_truncated": False,
         "payload_sha256": sha(b""), "incomplete": False}),
    (S, {"op": "MSG", "subject": "FOO.x", "sid": "2", "reply_to": "_INBOX.abc", "payload_len": 6,
         "payload": b"a\r\nb\r\n", "payload_truncated": False, "payload_sha256": sha(b"a\r\nb\r\n"),
         "incomplete": False}),
    (C, {"op": "UNSUB", "sid": "1", "incomplete": False}),
    (C, {"op": "UNSUB", "sid": "2", "max_msgs": 5, "incomplete": False}),
    (S, {"op": "-ERR", "error": "Unknown Protocol Operation", "incomplete": False}),
]


def run_conversation(conv, cuts_for=lambda i, data: (), options=None) -> Run:
    r = Run(options)
    for i, (d, data) in enumerate(conv):
        r.feed(d, data, cuts_for(i, data))
    return r.close()


def test_every_op_exact_rows():
    r = run_conversation(CONVERSATION)
    assert r.anomalies() == []
    assert [(int(rec.direction), nonnull(rec.values)) for rec in r.records] == [
        (int(d), v) for d, v in EXPECTED_ROWS
    ]
    s = r.session
    assert s.undecoded_bytes == [0, 0]
    assert s.decoded_bytes == [sum(len(b) for d, b in CONVERSATION if d == x) for x in (C, S)]


def test_row_offsets_and_provenance():
    r = Run()
    r.feed(C, b"PUB a 3\r\nab", ())
    r.feed(C, b"c\r", ())
    r.feed(C, b"\nPING\r\n", ())
    r.close()
    pub, ping = r.records
    assert (pub.offset_start, pub.offset_end, pub.frame_first, pub.frame_last) == (0, 14, 1, 3)
    assert (pub.ts_first_ns, pub.ts_last_ns) == (1000, 3000)
    assert (ping.offset_start, ping.offset_end, ping.frame_first, ping.frame_last) == (14, 20, 3, 3)


def test_every_op_byte_by_byte():
    whole = run_conversation(CONVERSATION)
    split = run_conversation(CONVERSATION, lambda i, data: range(1, len(data)))
    assert split.shape() == whole.shape()


@SETTINGS
@given(data=st.data())
def test_every_op_arbitrary_splits(data):
    whole = run_conversation(CONVERSATION)
    split = run_conversation(
        CONVERSATION,
        lambda i, b: data.draw(st.lists(st.integers(1, max(1, len(b) - 1)), max_size=6)),
    )
    assert split.shape() == whole.shape()


@SETTINGS
@given(data=st.data())
def test_arbitrary_splits_across_op_boundaries(data):
    # the whole client stream as one byte string, cut anywhere (op boundaries included)
    stream = b"".join(b for d, b in CONVERSATION if d == C)
    whole = Run().feed(C, stream).close()
    cuts = data.draw(st.lists(st.integers(1, len(stream) - 1), max_size=20))
    split = Run().feed(C, stream, cuts).close()
    assert split.shape() == whole.shape()


def test_rows_convert_to_arrow_and_validate():
    r = run_conversation(CONVERSATION + [(C, b"FOO\r\nPUB a 1\r\nxy\r\n")])
    rows = []
    for i, rec in enumerate(x for x in r.records if x.table == "nats"):
        assert set(rec.values) <= COLUMNS, set(rec.values) - COLUMNS
        rows.append({
            **rec.values, "capture_id": "0" * 16, "flow_id": 1, "record_id": i,
            "direction": rec.direction.short, "ts_first": rec.ts_first_ns,
            "ts_last": rec.ts_last_ns, "offset_start": rec.offset_start,
            "offset_end": rec.offset_end, "frame_first": rec.frame_first,
            "frame_last": rec.frame_last,
        })
    batch = rows_to_batch(NATS_TABLE, rows)
    validate_batch(NATS_TABLE, batch)
    assert batch.column("headers")[11].as_py() == [("Bar", ["Baz"])]


# ------------------------------------------------------------------------ leniency


def test_case_insensitive_ops_tabs_runs_and_bare_lf():
    r = one(C, b"pub\tfoo  \t bar \t3\nabc\r\nPiNg\nsUb  x\t\tq  7\r\nunsub 7\t2\r\n")
    assert r.anomalies() == []
    assert r.rows() == [
        {"op": "PUB", "subject": "foo", "reply_to": "bar", "payload_len": 3, "payload": b"abc",
         "payload_truncated": False, "payload_sha256": sha(b"abc"), "incomplete": False},
        {"op": "PING", "incomplete": False},
        {"op": "SUB", "subject": "x", "queue_group": "q", "sid": "7", "incomplete": False},
        {"op": "UNSUB", "sid": "7", "max_msgs": 2, "incomplete": False},
    ]


def test_server_side_lowercase_and_err_forms():
    r = one(S, b"info {}\r\n+ok\r\n-err  'Authorization Violation'  \r\n-ERR\r\nmsg a b 1\nx\r\n")
    assert [row["op"] for row in r.rows()] == ["INFO", "+OK", "-ERR", "-ERR", "MSG"]
    assert r.rows()[2]["error"] == "Authorization Violation"
    assert r.rows()[3]["error"] == ""
    assert r.rows()[4]["payload"] == b"x"


def test_payload_with_crlf_and_verbs_inside_is_counted_not_scanned():
    payload = b"\r\nPUB evil 1\r\nx\r\n"
    r = one(C, b"PUB a %d\r\n" % len(payload) + payload + b"\r\nPING\r\n")
    assert [row["op"] for row in r.rows()] == ["PUB", "PING"]
    assert r.rows()[0]["payload"] == payload


def test_vertical_tab_stays_inside_a_subject():
    r = one(C, b"PUB a\x0bb 1\r\nx\r\n")
    assert r.rows()[0]["subject"] == "a\x0bb"


def test_invalid_utf8_subject_is_escaped_not_lost():
    r = one(C, b"SUB a\xffb 1\r\n")
    assert r.rows()[0]["subject"] == "a\\xffb"


def test_ping_with_trailing_text_is_a_ping_plus_anomaly():
    r = one(C, b"PING extra\r\nPINGX\r\n")
    assert [row["op"] for row in r.rows()] == ["PING", "PING"]
    assert [a[0] for a in r.anomalies()] == ["nats.bad_args", "nats.bad_args"]


def test_hpub_header_order_repeats_and_status_description():
    hdrs = b"NATS/1.0 503 No Responders\r\nB: 1\r\nA: 2\r\nB: 3\r\nX-Empty:\r\n\r\n"
    data = b"HMSG _INBOX.q 1 %d %d\r\n" % (len(hdrs), len(hdrs) + 2) + hdrs + b"ok\r\n"
    r = one(S, data)
    row = r.rows()[0]
    assert row["headers"] == {"B": ["1", "3"], "A": ["2"], "X-Empty": [""]}
    assert list(row["headers"]) == ["B", "A", "X-Empty"]
    assert (row["status_code"], row["status_description"]) == (503, "No Responders")
    assert row["headers_raw"] == hdrs and row["payload"] == b"ok" and row["payload_len"] == 2
    assert r.anomalies() == []


def test_payload_cap_truncates_but_hashes_everything():
    payload = bytes(range(200))
    r = one(C, b"PUB big 200\r\n" + payload + b"\r\n", payload_cap=16)
    row = r.rows()[0]
    assert row["payload"] == payload[:16] and row["payload_truncated"] is True
    assert row["payload_len"] == 200 and row["payload_sha256"] == sha(payload)


# ------------------------------------------------------------------------ anomalies


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b"FOO bar\r\n", "nats.unknown_op"),
        (b"\r\n", "nats.unknown_op"),
        (b" PUB a 1\r\n", "nats.unknown_op"),
        (b"RMSG $G a 1\r\n", "nats.unknown_op"),
        (b"PUB a -1\r\n", "nats.bad_size"),
        (b"PUB a abc\r\n", "nats.bad_size"),
        (b"PUB a 1234567890\r\n", "nats.bad_size"),  # nats-server: at most 9 digits
        (b"HPUB a 10 5\r\n", "nats.bad_size"),  # header size > total size
        (b"HMSG a 1 x 5\r\n", "nats.bad_size"),
        (b"UNSUB 1 x\r\n", "nats.bad_size"),
        (b"PUB a\r\n", "nats.bad_args"),
        (b"PUB a b c 1\r\n", "nats.bad_args"),
        (b"SUB a\r\n", "nats.bad_args"),
        (b"UNSUB\r\n", "nats.bad_args"),
        (b"MSG a 1\r\n", "nats.bad_args"),
        (b"CONNECT\r\n", "nats.bad_args"),
    ],
)
def test_rejected_lines_become_anomalies_and_parsing_resumes(line, kind):
    r = one(C, line + b"PING\r\n")
    assert r.anomalies() == [(kind, 0, len(line))]
    assert r.rows() == [{"op": "PING", "incomplete": False}]
    assert r.session.undecoded_bytes[C] == len(line)


def test_resync_skips_junk_lines_as_one_anomaly():
    data = b"JUNK\r\nmore junk\r\nstill\r\nPING\r\n"
    r = one(C, data)
    assert r.anomalies() == [("nats.unknown_op", 0, 6), ("nats.resync", 6, 24)]
    assert r.rows() == [{"op": "PING", "incomplete": False}]


def test_line_too_long_then_resync():
    long_line = b"PUB " + b"a" * 5000 + b" 1\r\n"
    r = one(C, long_line + b"x\r\nPING\r\n")
    n = len(long_line)
    assert r.anomalies() == [("nats.line_too_long", 0, n), ("nats.resync", n, n + 3)]
    assert r.rows() == [{"op": "PING", "incomplete": False}]


def test_server_lines_have_their_own_limit():
    info = b'INFO {"server_id":"' + b"x" * 6000 + b'"}\r\n'
    r = one(S, info)
    assert r.rows()[0]["server_id"] == "x" * 6000
    r = one(S, info, max_server_line=1000)
    assert r.anomalies() == [("nats.line_too_long", 0, len(info))]


def test_bad_trailer_row_anomaly_and_resync():
    data = b"PUB a 2\r\nabc\r\nPING\r\n"  # declared size one too small
    r = one(C, data)
    assert r.rows()[0]["payload"] == b"ab"
    assert r.anomalies() == [("nats.bad_trailer", 9, 11), ("nats.resync", 11, 14)]
    assert r.rows()[1] == {"op": "PING", "incomplete": False}


def test_bare_lf_trailer_is_accepted_with_anomaly():
    r = one(C, b"PUB a 2\r\nab\nPING\r\n")
    assert [row["op"] for row in r.rows()] == ["PUB", "PING"]
    assert r.anomalies() == [("nats.bad_trailer", 9, 12)]


def test_bad_json_kept_as_text():
    r = one(C, b"CONNECT {verbose:true\r\n")
    assert r.rows() == [{"op": "CONNECT", "json_raw": "{verbose:true", "incomplete": False}]
    assert [a[0] for a in r.anomalies()] == ["nats.bad_json"]
    r = one(S, b'INFO {"port":"4222","max_payload":true,"server_id":"s"}\r\n')
    assert r.rows()[0]["server_id"] == "s" and "server_port" not in r.rows()[0]
    assert [a[0] for a in r.anomalies()] == ["nats.bad_json", "nats.bad_json"]
    r = one(S, b"INFO [1,2]\r\n")
    assert [a[0] for a in r.anomalies()] == ["nats.bad_json"]



# INFO/CONNECT arguments for the one-pass field check and its loop (the definition):
# every kind in range, out of range, of a near type (bool for int, int for bool), null,
# lists with other items, duplicates, and texts json.loads reads other than as UTF-8
_JSON_ARGS = [
    b'{"server_id":"s","port":4222,"max_payload":1048576,"headers":true,"proto":1,'
    b'"client_id":7,"connect_urls":["a:1","b:2"],"ldm":false,"x":{"y":[1]}}',
    b'{"port":2147483648,"client_id":9223372036854775808,"proto":-2147483649}',
    b'{"port":true,"headers":1,"connect_urls":["a",1],"version":null,"go":2.5}',
    b'{"connect_urls":[],"max_payload":-9223372036854775808,"port":-1}',
    b'{"port":1,"port":"2","name":"n","name":null,"verbose":false,"protocol":1,"user":"u"}',
    b'{"connect_urls":"a","server_name":["x"],"pass":"p","auth_token":"t"}',
    b"{}", b"[1]", b"{", b'{"a":1} x', b"\xef\xbb\xbf{}", b'\xef\xbb\xbf{"port":1}',
    '{"name":"\u00e9"}'.encode("utf-16-le"), b'{"n\x00":1}', b'{"\xed\xa0\x80":"\xff"}',
    b"1", b" {}", b'"s"',
]


@pytest.mark.parametrize("raw", _JSON_ARGS)
def test_json_fields_one_pass_equals_the_loop(raw, monkeypatch):
    import json
    for _ in range(2):  # the second time from the remembered object
        try:
            want: object = json.loads(raw)
        except (ValueError, RecursionError) as e:
            want = repr(e)
        try:
            got: object = nats_parser.json_object(raw)
        except (ValueError, RecursionError) as e:
            got = repr(e)
        assert got == want
    fast = nats_parser.parse_info(raw), nats_parser.parse_connect(raw)
    # remembered (``_JSON_ROWS``): equal, and a copy the session may add to
    again = nats_parser.parse_info(raw), nats_parser.parse_connect(raw)
    assert again == fast
    kept = copy.deepcopy(fast)
    again[0][0]["incomplete"] = False
    for values in (fast[0][0], again[0][0]):  # nor a list shared with a remembered row
        if isinstance(values.get("connect_urls"), list):
            values["connect_urls"].append("changed")
    fast = kept
    assert nats_parser.parse_info(raw) == fast[0]
    if b'"pass"' in raw or b'"user"' in raw:  # nothing with a credential member is kept
        assert raw not in {t for _, t in nats_parser._JSON_ROWS}
        assert nats_parser._LAST_JSON[0] != raw
    monkeypatch.setattr(nats_parser, "_JSON_ROWS", {})
    monkeypatch.setattr(nats_parser, "_all_typed", lambda plan, got: False)
    assert (nats_parser.parse_info(raw), nats_parser.parse_connect(raw)) == fast
    # values in the same order too
    assert [list(v) for v, _ in fast] == [
        list(v) for v, _ in (nats_parser.parse_info(raw), nats_parser.parse_connect(raw))]

def test_bad_headers():
    blk = b"XATS/1.0\r\n\r\n"
    r = one(C, b"HPUB a %d %d\r\n" % (len(blk), len(blk)) + blk + b"\r\n")
    row = r.rows()[0]
    assert row["headers_raw"] == blk and "headers" not in row
    assert [a[0] for a in r.anomalies()] == ["nats.bad_headers"]
    blk = b"NATS/1.0\r\nnocolon\r\n\r\n"
    r = one(C, b"HPUB a %d %d\r\n" % (len(blk), len(blk)) + blk + b"\r\n")
    assert r.rows()[0]["headers"] == {}
    assert [a[0] for a in r.anomalies()] == ["nats.bad_headers"]


def test_max_payload_exceeded_row_and_anomaly():
    r = Run()
    r.feed(C, b"PUB early 9\r\n123456789\r\n")  # before INFO: unknown, null
    r.feed(S, b'INFO {"max_payload":8}\r\n')
    r.feed(C, b"PUB a 9\r\n123456789\r\nPUB b 8\r\n12345678\r\n"
              b"HPUB c 12 16\r\nNATS/1.0\r\n\r\nabcd\r\n")
    r.close()
    pubs = r.rows(C)
    assert "max_payload_exceeded" not in pubs[0]
    assert [p["max_payload_exceeded"] for p in pubs[1:]] == [True, False, True]
    assert [a[0] for a in r.anomalies()] == ["nats.max_payload_exceeded"] * 2


def test_wrong_direction_reported_once_per_op():
    r = one(C, b"MSG a 1 1\r\nx\r\nMSG a 1 1\r\nx\r\nINFO {}\r\n")
    assert [row["op"] for row in r.rows()] == ["MSG", "MSG", "INFO"]
    assert [a[0] for a in r.anomalies()] == ["nats.wrong_direction"] * 2


def test_tls_upgrade_abandons_direction():
    r = Run()
    r.feed(S, b'INFO {"tls_required":true}\r\n')
    hello = b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(40)) + b"\n" + b"z" * 50
    r.feed(C, hello)
    r.feed(C, b"PUB a 1\r\nx\r\n")  # encrypted in reality: never parsed
    r.close()
    assert r.rows(C) == []
    assert r.anomalies()[0][0] == "nats.tls"
    assert r.session.undecoded_bytes[C] == len(hello) + 12


# ----------------------------------------------------------------------------- gaps


def test_gap_in_payload_emits_incomplete_row_and_resumes_exactly():
    r = Run()
    r.feed(C, b"PUB a 10\r\n01")
    r.gap(C, 3)  # "234" lost
    r.feed(C, b"56789\r\nPUB b 1\r\nx\r\n")
    r.close()
    assert r.rows() == [
        {"op": "PUB", "subject": "a", "payload_len": 10, "incomplete": True},
        {"op": "PUB", "subject": "b", "payload_len": 1, "payload": b"x",
         "payload_truncated": False, "payload_sha256": sha(b"x"), "incomplete": False},
    ]
    assert r.records[0].offset_end == 12
    assert r.anomalies() == [("nats.gap_in_payload", 0, 22)]
    assert r.session.decoded_bytes[C] == 10 + 12
    assert r.session.undecoded_bytes[C] == 2 + 7


def test_gap_in_payload_ignores_verbs_in_the_rest_of_the_payload():
    payload = b"xxxxPUB evil 1\r\nx\r\n"
    r = Run()
    r.feed(C, b"PUB a %d\r\n" % len(payload) + payload[:2])
    r.gap(C, 2)
    r.feed(C, payload[4:] + b"\r\nPING\r\n")
    r.close()
    assert [row["op"] for row in r.rows()] == ["PUB", "PING"]


def test_gap_in_headers_keeps_declared_sizes():
    r = Run()
    r.feed(C, b"HPUB a 22 25\r\nNATS/1.0")
    r.gap(C, 5)
    r.feed(C, b"z\r\n\r\nabc\r\nPING\r\n")
    r.close()
    assert r.rows()[0] == {"op": "HPUB", "subject": "a", "header_len": 22, "payload_len": 3,
                           "incomplete": True}
    assert r.rows()[1]["op"] == "PING"


def test_gap_past_op_end_resyncs_on_a_known_verb():
    r = Run()
    r.feed(C, b"PUB a 3\r\na")
    r.gap(C, 20)
    r.feed(C, b"tail of something\r\nSUB x 1\r\n")
    r.close()
    assert [row["op"] for row in r.rows()] == ["PUB", "SUB"]
    assert [a[0] for a in r.anomalies()] == ["nats.gap_in_payload", "nats.resync"]


def test_gap_in_control_line():
    r = Run()
    r.feed(C, b"PING\r\nPUB a")
    r.gap(C, 10)
    r.feed(C, b"PONG\r\n")  # a segment that starts at an op: accepted at once
    r.close()
    assert [row["op"] for row in r.rows()] == ["PING", "PONG"]
    assert r.anomalies() == [("nats.gap_in_line", 6, 11)]


def test_close_mid_payload_and_mid_line():
    r = one(C, b"PUB a 10\r\n0123")
    assert r.rows() == [{"op": "PUB", "subject": "a", "payload_len": 10, "incomplete": True}]
    assert r.anomalies() == [("nats.eof_in_payload", 0, 22)]
    r = one(C, b"PING\r\nPU")
    assert r.anomalies() == [("nats.eof_in_line", 6, 8)]
    r = one(C, b"PUB a 1\r\nx\r")
    assert r.rows()[0]["payload"] == b"x"
    assert r.anomalies() == [("nats.missing_trailer", 9, 10)]


# ---------------------------------------------------------------------------- probe


@pytest.mark.parametrize(
    ("direction", "prefix", "verdict"),
    [
        (C, b"", Verdict.NEED_MORE),
        (C, b"CONNECT {\"verbose\":false}\r\n", Verdict.YES),
        (C, b"connect\t{", Verdict.YES),
        (C, b"CONN", Verdict.NEED_MORE),
        (C, b"CONNECT ", Verdict.NEED_MORE),
        (C, b"CONNECT example.com:443 HTTP/1.1\r\n", Verdict.NO),
        (C, b"PUB foo 1\r\n", Verdict.YES),
        (C, b"pub ", Verdict.YES),
        (C, b"PU", Verdict.NEED_MORE),
        (C, b"PUBLISH", Verdict.NO),
        (C, b"SUB x 1\r\n", Verdict.YES),
        (C, b"PING\r\n", Verdict.NEED_MORE),
        (C, b"PING\r\nPUB x 1\r\n", Verdict.YES),
        (C, b"PING\r\nGET / HTTP/1.1\r\n", Verdict.NO),
        (C, b"INFO {}", Verdict.NO),
        (C, b"GET / HTTP/1.1\r\n", Verdict.NO),
        (C, b"\x16\x03\x01\x00", Verdict.NO),
        (S, b'INFO {"server_id":"x"}\r\n', Verdict.YES),
        (S, b"info\t{", Verdict.YES),
        (S, b"INFO", Verdict.NEED_MORE),
        (S, b"INFO x", Verdict.NO),
        (S, b"MSG a 1 2\r\n", Verdict.YES),
        (S, b"+PONG\r\n", Verdict.NO),  # Redis
        (S, b"-ERR 'x'\r\n", Verdict.NEED_MORE),
        (S, b"-ERR 'x'\r\nINFO {}", Verdict.YES),
        (S, b"PUB a 1\r\n", Verdict.NO),
    ],
)
def test_probe(direction, prefix, verdict):
    assert NatsDissector.probe(direction, prefix) is verdict


@SETTINGS
@given(prefix=st.binary(max_size=64), direction=st.sampled_from([C, S]))
def test_probe_never_raises(prefix, direction):
    assert NatsDissector.probe(direction, prefix) in set(Verdict)


def test_dissector_metadata():
    assert NatsDissector.name == "nats"
    assert NatsDissector.default_ports == (4222,)
    assert NatsDissector.tables == (NATS_TABLE,)
    with pytest.raises(ValueError):
        NatsDissector.session({"payload_cap": -1})


# --------------------------------------------------------------- resync rule itself


@pytest.mark.parametrize(
    ("buf", "prev", "expected"),
    [
        (b"PUB a 1\r\n", None, (0, True)),
        (b"PUB a 1\r\n", 0x0A, (0, True)),
        (b"PUB a 1\r\n", ord("x"), (9, False)),
        (b"junk\r\nPI", 0x0A, (6, False)),
        (b"junk\r\nping\r\n", None, (6, True)),
        (b"junk", None, (4, False)),
        (b"junk\r\nPUBLISH\r\n+OK\r\n", None, (15, True)),
    ],
)
def test_resync_rule(buf, prev, expected):
    assert nats_parser.resync(buf, prev) == expected


# ---------------------------------------------------------------- fuzz and mutation


def _check_records(r: Run) -> None:
    for rec in r.records:
        assert rec.table in ("nats", "anomalies")
        assert rec.offset_start <= rec.offset_end or rec.table == "anomalies"
        if rec.table == "nats":
            assert set(rec.values) <= COLUMNS


@SETTINGS
@given(
    c2s=st.binary(max_size=400), s2c=st.binary(max_size=400),
    cuts=st.lists(st.integers(1, 399), max_size=10),
)
def test_random_bytes_never_raise(c2s, s2c, cuts):
    r = Run({"max_control_line": 64}).feed(C, c2s, cuts).feed(S, s2c, cuts).close()
    _check_records(r)


ALL_BYTES = b"".join(b for d, b in CONVERSATION if d == C)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), data=st.data())
def test_mutated_streams_never_raise_and_produce_anomalies(seed, n, data):
    rnd = random.Random(seed)
    b = bytearray(ALL_BYTES)
    for _ in range(n):
        i = rnd.randrange(len(b))
        action = rnd.randrange(3)
        if action == 0:
            b[i] = rnd.randrange(256)
        elif action == 1:
            del b[i]
        else:
            b.insert(i, rnd.choice(b"\r\n 0123456789PUBHMSG\t\x16-+"))
    cuts = data.draw(st.lists(st.integers(1, max(1, len(b) - 1)), max_size=10))
    r = Run().feed(C, bytes(b), cuts).close()
    _check_records(r)
    whole = Run().feed(C, bytes(b)).close()
    assert r.shape() == whole.shape()


@SETTINGS
@given(data=st.data())
def test_accounting_with_random_gaps(data):
    stream = ALL_BYTES
    r = Run()
    pos = 0
    while pos < len(stream):
        n = data.draw(st.integers(1, 60))
        if data.draw(st.booleans()) and data.draw(st.booleans()):
            r.gap(C, min(n, len(stream) - pos))
        else:
            r.feed(C, stream[pos : pos + n])
        pos = r.off[C]
    r.close()
    _check_records(r)
    s = r.session
    assert s.decoded_bytes[C] + s.undecoded_bytes[C] + r.gaps[C] == len(stream)


def test_random_stream_produces_anomaly_rows():
    rnd = random.Random(7)
    junk = bytes(rnd.randrange(256) for _ in range(5000))
    r = Run().feed(C, junk).close()
    assert r.anomalies() and not r.rows()


# ------------------------------------------------------------ real captures (if present)

NATS_CAPTURES = [
    "deepflow/nats/nats-err.pcap", "deepflow/nats/nats-headers.pcap",
    "deepflow/nats/nats-nrpc1.pcap", "deepflow/nats/nats-nrpc2.pcap",
    "deepflow/nats/nats-nrpc3.pcap", "deepflow/nats/nats-opentelemetry.pcap",
    "deepflow/nats/nats-skywalking.pcap", "ntop-nDPI/nats.pcap",
    "spicy-nats/nats-storage-err.pcap", "spicy-nats/nats-storage.pcap",
    "spicy-nats/simple-nats.pcap",
]


def _dissect_capture(path) -> tuple[list[Record], dict]:
    """Throwaway wiring (the pipeline does this for real): every TCP flow on 4222 gets
    a NATS session; returns the records and per-direction op counts."""
    engine = pytest.importorskip("reassembly.engine")
    from reassembly.events import StreamClose, StreamData, StreamGap

    sessions: dict = {}
    records: list[Record] = []
    for ev in engine.read_events(path):
        if isinstance(ev, StreamData | StreamGap):
            if 4222 not in (ev.flow.client.port, ev.flow.server.port):
                continue
            s = sessions.setdefault(ev.flow.flow_id, NatsDissector.session({}))
            if isinstance(ev, StreamData):
                records += s.feed(ev.direction, ev.data, Span(ev.offset, ev.ts_first_ns,
                                                              ev.ts_last_ns, ev.frame_first,
                                                              ev.frame_last))
            else:
                records += s.gap(ev.direction, ev.offset, ev.nbytes, ev.ts_ns)
        elif isinstance(ev, StreamClose) and ev.flow.flow_id in sessions:
            s = sessions[ev.flow.flow_id]
            records += s.close(ev.ts_ns)
            for d in (0, 1):  # byte accounting against reassembly's own counts
                assert s.decoded_bytes[d] + s.undecoded_bytes[d] == ev.flow.stream_bytes[d]
    ops: dict = {"c2s": {}, "s2c": {}}
    for r in records:
        name = r.values["op"] if r.table == "nats" else (
            "UNKNOWN" if r.values["kind"] == "nats.unknown_op" else None)
        if name:
            bucket = ops[r.direction.short]
            bucket[name] = bucket.get(name, 0) + 1
    return records, ops


@pytest.mark.parametrize("name", NATS_CAPTURES)
def test_real_captures_op_counts(shared, name):
    import json

    path = shared / "captures" / name
    if not path.exists():
        pytest.skip(f"{name} not available")
    expected = json.loads((shared / "captures" / "expected.json").read_text())[name]["nats_ops"]
    records, ops = _dissect_capture(path)
    assert ops == expected
    kinds = {r.values["kind"] for r in records if r.table == "anomalies"}
    assert kinds <= {"nats.unknown_op"}


def test_real_capture_header_values(shared):
    path = shared / "captures" / "deepflow/nats/nats-opentelemetry.pcap"
    if not path.exists():
        pytest.skip("capture not available")
    records, _ = _dissect_capture(path)
    parents = [r.values["headers"]["traceparent"][0] for r in records
               if r.table == "nats" and r.values["op"] == "HPUB"]
    assert [p.split("-")[1] for p in parents] == [
        "11b4862a313e8a9c059cda4a49e626fa", "9aa18516c1eb1b6866ad107b1ba1ed79",
    ]


def test_on_message_gets_whole_payload_and_returns_children():
    seen = []

    def hook(row: Record, payload: bytes) -> list[Record]:
        seen.append((row.values["op"], payload))
        return [Record.anomaly("test.child", "x", row.direction, row.offset_start,
                               row.offset_end, 0, 0, 0, 0)]

    r = Run({"payload_cap": 4, "carry_max": 10})
    r.session.on_message = hook
    r.feed(C, b"PUB a 8\r\n01234567\r\nPUB b 11\r\n0123456789A\r\n"
              b"HPUB c 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    r.feed(C, b"PUB d 5\r\n01")
    r.close()
    assert seen == [("PUB", b"01234567"), ("HPUB", b"hi")]
    pubs = [rec for rec in r.records if rec.table == "nats"]
    assert pubs[0].values["payload"] == b"0123" and pubs[0].values["payload_truncated"]
    assert len(pubs[0].children) == 1 and pubs[1].children == []
    assert pubs[1].values["payload"] == b"0123"
    assert pubs[3].values["incomplete"] is True and pubs[3].children == []


def test_options_are_read_again_when_they_change() -> None:
    """Each session reads its options: a dict changed between sessions is read again, and
    a bad value raises every time."""
    from dissectors.nats.session import NatsSession

    opts: dict = {"payload_cap": 8, "max_control_line": 10}
    s = NatsSession(opts)
    assert s.payload_cap == 8 and s.framers[0].max_line_bytes == 10
    opts["payload_cap"] = None
    opts["max_control_line"] = 20
    s = NatsSession(opts)
    assert s.payload_cap is None and s.framers[0].max_line_bytes == 20
    opts["max_control_line"] = 0
    with pytest.raises(ValueError):
        NatsSession(opts)
    with pytest.raises(ValueError):
        NatsSession(opts)  # (a bad value is never kept)
