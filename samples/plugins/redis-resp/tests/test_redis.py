"""Tests of the Redis dissector, written the way a plugin author tests against the SDK.

Every conversation is checked with ``assert_split_invariant`` (whole, byte by byte, random
cuts: same records, byte accounting intact) and ``assert_rows_valid`` (the rows fit the
declared tables); a fuzz test checks that nothing raises on mutated input.
"""

from __future__ import annotations

import hashlib

import pytest
from dissectors.api import Direction, Verdict
from dissectors.sdk.testing import (
    Data,
    Gap,
    assert_never_raises,
    assert_rows_valid,
    assert_split_invariant,
    run_session,
)

from msgcap_redis import RedisDissector
from msgcap_redis.resp import probe, split_inline

C, S = Direction.C2S, Direction.S2C


def cmd(*words: bytes) -> bytes:
    """A multibulk request, as every client library sends it."""
    out = b"*%d\r\n" % len(words)
    for w in words:
        out += b"$%d\r\n%s\r\n" % (len(w), w)
    return out


def check(script, **kw):
    records = assert_split_invariant(RedisDissector, script, **kw)
    assert_rows_valid(RedisDissector, records)
    return records


def walk(records):
    for r in records:
        yield r
        yield from walk(r.children)


def rows(records, table="redis"):
    return [r.values for r in walk(records) if r.table == table]


def kinds(records):
    return [r.values["kind"] for r in records if r.table == "anomalies"]


# ------------------------------------------------------------------------- probe


@pytest.mark.parametrize(
    ("direction", "prefix", "verdict"),
    [
        (C, cmd(b"GET", b"k"), Verdict.YES),
        (C, b"*2\r\n$3\r\nGE", Verdict.NEED_MORE),
        (C, b"*", Verdict.NEED_MORE),
        (C, b"PING\r\n", Verdict.YES),
        (C, b'PUBLISH Foo "Hi there :)"\r\n', Verdict.YES),
        (C, b"SET a", Verdict.NEED_MORE),
        (C, b"PUBL", Verdict.NEED_MORE),
        (C, b"GET / HTTP/1.1\r\nHost: x\r\n", Verdict.NO),  # wrong arity for GET, and HTTP
        (C, b"GET a b\r\n", Verdict.NO),
        (C, b"GET /msadc/..%2f../winnt/system32/cmd.exe?/c+dir\n", Verdict.NO),  # HTTP/0.9
        (C, b"USER anonymous\r\n", Verdict.NO),  # FTP / POP3
        (C, b"CONNECT {}\r\n", Verdict.NO),  # NATS
        (C, b"\x16\x03\x01\x02\x00", Verdict.NO),  # TLS
        (S, b"+OK\r\n", Verdict.NEED_MORE),  # also POP3: let the client side decide
        (S, b"*3\r\n$7\r\nmessage\r\n", Verdict.YES),
        (S, b"INFO {}\r\n", Verdict.NO),
        (S, b"HTTP/1.1 200 OK\r\n", Verdict.NO),
        (S, b":abc\r\n", Verdict.NO),
        (S, b"+OK\n", Verdict.NO),  # RESP lines end with CRLF
    ],
)
def test_probe(direction, prefix, verdict) -> None:
    assert probe(direction, prefix) == verdict


# ------------------------------------------------------------------ inline splitting


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"SET a b", [b"SET", b"a", b"b"]),
        (b"  SET   a\tb  ", [b"SET", b"a", b"b"]),
        (b'PUBLISH Foo "Hi there :)"', [b"PUBLISH", b"Foo", b"Hi there :)"]),
        (b'SET k "a\\x41\\n\\"q\\""', [b"SET", b"k", b'aA\n"q"']),
        (b"SET k 'it\\'s'", [b"SET", b"k", b"it's"]),
        (b'SET k ""', [b"SET", b"k", b""]),
        (b"", []),
        (b'SET k "open', None),
        (b'SET k "a"b', None),  # a closing quote must be followed by a blank
    ],
)
def test_split_inline(line, words) -> None:
    assert split_inline(line) == words


# ---------------------------------------------------------------------- commands


def test_multibulk_and_inline_commands() -> None:
    recs = check([
        Data(C, cmd(b"SET", b"key", b"value with spaces") + b"GET key\r\n\r\n"),
        Data(S, b"+OK\r\n$17\r\nvalue with spaces\r\n"),
    ])
    r = rows(recs)
    assert [(x["kind"], x["resp_type"], x.get("command")) for x in r] == [
        ("command", "array", "SET"), ("command", "inline", "GET"),
        ("reply", "simple_string", None), ("reply", "bulk_string", None),
    ]
    assert r[0]["args"] == [b"key", b"value with spaces"] and r[0]["arg_count"] == 2
    assert r[0]["summary"] == 'SET key "value with spaces"'
    assert [x["msg_index"] for x in r] == [0, 1, 0, 1]
    assert r[3]["bulk"] == b"value with spaces" and r[3]["bulk_len"] == 17
    assert r[3]["bulk_sha256"] == hashlib.sha256(b"value with spaces").hexdigest()
    assert not kinds(recs)


def test_payload_cap_keeps_length_and_hash() -> None:
    big = bytes(range(256)) * 40
    recs = check([Data(C, cmd(b"SET", b"k", big)), Data(S, b"$%d\r\n%s\r\n" % (len(big), big))],
                 options={"payload_cap": 100}, rounds=3)
    c, reply = rows(recs)
    assert c["args"][1] == big[:100] and c["args_truncated"]
    assert reply["bulk"] == big[:100] and reply["bulk_truncated"] and reply["bulk_len"] == 10240
    assert reply["bulk_sha256"] == hashlib.sha256(big).hexdigest()


def test_command_with_non_bulk_element_is_flagged() -> None:
    recs = check([Data(C, b"*2\r\n$3\r\nGET\r\n:5\r\n")])
    assert rows(recs)[0]["command"] == "GET"
    assert kinds(recs) == ["redis.bad_command"]


# ----------------------------------------------------------------------- replies


def test_every_resp2_reply_type() -> None:
    recs = check([Data(S, b"+OK\r\n-WRONGTYPE Operation against a key\r\n:-42\r\n$0\r\n\r\n"
                          b"$-1\r\n*-1\r\n*0\r\n*2\r\n:1\r\n*1\r\n$1\r\nx\r\n")])
    r = rows(recs)
    assert [x["resp_type"] for x in r] == ["simple_string", "simple_error", "integer",
                                           "bulk_string", "bulk_string", "array", "array",
                                           "array"]
    assert r[0]["text"] == "OK"
    assert r[1]["error"].startswith("WRONGTYPE") and r[1]["error_code"] == "WRONGTYPE"
    assert r[2]["integer"] == -42
    assert r[3]["bulk"] == b"" and not r[3]["is_null"]
    assert r[4]["is_null"] and r[5]["is_null"] and r[4]["summary"] == "(nil)"
    assert r[6]["elements"] == 0
    assert r[7]["elements"] == 2 and r[7]["summary"] == '[1, ["x"]]'
    assert all(x["kind"] == "reply" for x in r)


def test_every_resp3_type() -> None:
    recs = check([Data(S, b"_\r\n#t\r\n,1.5e3\r\n,-inf\r\n"
                          b"(3492890328409238509324850943850943825\r\n"
                          b"!21\r\nSYNTAX invalid syntax\r\n=15\r\ntxt:Some string\r\n"
                          b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n~2\r\n+a\r\n+b\r\n"
                          b"|1\r\n+ttl\r\n:3600\r\n$2\r\nhi\r\n"
                          b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nhey\r\n")])
    r = rows(recs)
    assert [x["resp_type"] for x in r] == [
        "null", "boolean", "double", "double", "big_number", "bulk_error", "verbatim_string",
        "map", "set", "bulk_string", "push"]
    assert r[0]["is_null"] and r[1]["boolean"] is True
    assert r[2]["double"] == 1500.0 and r[3]["double"] == float("-inf")
    assert r[4]["text"] == "3492890328409238509324850943850943825"
    assert r[5]["error"] == "SYNTAX invalid syntax" and r[5]["error_code"] == "SYNTAX"
    assert r[6]["verbatim_format"] == "txt" and r[6]["text"] == "Some string"
    assert r[7]["elements"] == 2 and r[7]["summary"] == '{"first": 1, "second": 2}'
    assert r[8]["elements"] == 2
    assert r[9]["attributes"] == 1 and r[9]["bulk"] == b"hi"
    assert r[10]["kind"] == "push"
    assert rows(recs, "redis_pubsub") == [{
        "event": "message", "channel": "ch", "pattern": None, "payload": b"hey",
        "payload_len": 3, "payload_sha256": hashlib.sha256(b"hey").hexdigest(),
        "payload_truncated": False}]


def test_nested_attribute_fills_no_slot() -> None:
    recs = check([Data(S, b"*2\r\n|1\r\n+a\r\n*2\r\n:1\r\n:2\r\n:10\r\n:20\r\n")])
    (r,) = rows(recs)
    assert r["elements"] == 2 and r["summary"] == "[10, 20]"


# ----------------------------------------------------------------------- pub/sub


def test_pubsub_resp2_subscribe_mode() -> None:
    recs = check([
        Data(C, cmd(b"SUBSCRIBE", b"news") + cmd(b"PSUBSCRIBE", b"n*")),
        Data(S, b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
                b"*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:2\r\n"
                b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n"
                b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$5\r\nhello\r\n"),
        Data(C, cmd(b"UNSUBSCRIBE") + cmd(b"PUNSUBSCRIBE")),
        Data(S, b"*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:1\r\n"
                b"*3\r\n$12\r\npunsubscribe\r\n$2\r\nn*\r\n:0\r\n"
                b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nlater\r\n"),  # an LRANGE reply now
    ])
    ps = rows(recs, "redis_pubsub")
    assert [(p["event"], p["channel"], p["pattern"], p.get("subscriptions")) for p in ps] == [
        ("subscribe", "news", None, 1), ("psubscribe", None, "n*", 2),
        ("message", "news", None, None), ("pmessage", "news", "n*", None),
        ("unsubscribe", "news", None, 1), ("punsubscribe", None, "n*", 0)]
    server = [x["kind"] for x in rows(recs) if x["kind"] != "command"]
    assert server == ["reply", "reply", "push", "push", "reply", "reply", "reply"]
    # children point at the row they were read from
    for rec in recs:
        for child in rec.children:
            assert (child.offset_start, child.offset_end) == (rec.offset_start, rec.offset_end)


def test_publish_command_is_a_pubsub_row() -> None:
    recs = check([Data(C, cmd(b"PUBLISH", b"ch", b"\x00\xffbin") + b"SPUBLISH s x\r\n")])
    assert [(p["event"], p["channel"], p["payload"]) for p in rows(recs, "redis_pubsub")] == [
        ("publish", "ch", b"\x00\xffbin"), ("spublish", "s", b"x")]


def test_reset_ends_subscribe_mode() -> None:
    recs = check([Data(S, b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n+RESET\r\n"
                          b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n")])
    assert [x["kind"] for x in rows(recs)] == ["reply", "reply", "reply"]
    assert len(rows(recs, "redis_pubsub")) == 1


# ------------------------------------------------------------------ bad input


def test_bad_type_byte_resyncs_to_next_message() -> None:
    recs = check([Data(S, b"+OK\r\n?what\r\n:1\r\n")])
    assert [x["resp_type"] for x in rows(recs)] == ["simple_string", "integer"]
    assert kinds(recs) == ["redis.protocol_error"]


def test_bulk_length_lie_is_reported() -> None:
    recs = check([Data(S, b"$3\r\nhello\r\n:7\r\n")])
    assert kinds(recs)[0] == "redis.protocol_error"
    assert rows(recs)[-1]["integer"] == 7


def test_unbalanced_quotes() -> None:
    recs = check([Data(C, b'SET k "oops\r\nPING\r\n')])
    assert kinds(recs) == ["redis.bad_inline"]
    assert [x["command"] for x in rows(recs)] == ["PING"]


def test_gap_inside_a_message_drops_it_and_resyncs() -> None:
    recs = check([Data(C, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc"), Gap(C, 9),
                  Data(C, b"\r\n" + cmd(b"GET", b"k"))])
    assert kinds(recs)[0] == "redis.gap_in_message"
    assert [x["command"] for x in rows(recs)] == ["GET"]


def test_gap_between_lines_of_a_message() -> None:
    recs = check([Data(S, b"*2\r\n:1\r\n"), Gap(S, 4), Data(S, b"+OK\r\n:5\r\n")])
    assert kinds(recs)[0] == "redis.gap_in_message"
    assert rows(recs)[-1]["integer"] == 5


def test_end_of_stream_inside_a_message() -> None:
    recs = check([Data(S, b"*2\r\n:1\r\n")])
    assert kinds(recs) == ["redis.eof_in_message"] and not rows(recs)
    run = run_session(RedisDissector, [Data(S, b"*2\r\n:1\r\n")])
    assert run.session.undecoded_bytes[S] == 8 and run.session.decoded_bytes[S] == 0


def test_streamed_values_are_reported() -> None:
    recs = check([Data(S, b"$?\r\n;4\r\nHell\r\n;0\r\n:1\r\n")])
    assert kinds(recs)[0] == "redis.unsupported"
    assert rows(recs)[-1]["integer"] == 1


def test_long_line_is_skipped() -> None:
    recs = check([Data(S, b"+" + b"x" * 70000 + b"\r\n:1\r\n")], bytewise=False, rounds=3)
    assert kinds(recs)[0] == "redis.line_too_long"
    assert rows(recs)[-1]["integer"] == 1


CORPUS = [
    [Data(C, cmd(b"SET", b"k", b"v") + b"GET k\r\n"), Data(S, b"+OK\r\n$1\r\nv\r\n")],
    [Data(C, cmd(b"SUBSCRIBE", b"a")),
     Data(S, b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$1\r\na\r\n"
             b"$2\r\nhi\r\n")],
    [Data(S, b"%1\r\n+k\r\n|1\r\n+a\r\n:1\r\n~1\r\n,1.5\r\n>2\r\n#f\r\n_\r\n=7\r\ntxt:abc\r\n")],
]


def test_never_raises() -> None:
    assert_never_raises(RedisDissector, CORPUS, rounds=400)
