"""The redaction gate (``dissectors.redaction``) on its own, with exact outputs: what Go's
decoder makes of a value (the marker's length and SHA-256), each rule, idempotence,
``keeping_secrets`` and the stream helpers."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissectors import redaction
from dissectors.redaction import (
    NATS_CONNECT_SECRETS,
    GatedWriter,
    LineGate,
    go_unquote,
    keeping_secrets,
    marker,
    may_be_secret_key,
    redact_bytes,
    redact_json_text,
    redact_text,
)


def q(value: bytes) -> bytes:
    return b'"' + marker(value).encode() + b'"'


@pytest.mark.parametrize(("body", "decoded"), [
    (b"plain", b"plain"),
    (b"\\u0068unter", b"hunter"),
    (b"a\\\"b\\\\c\\/d\\n", b'a"b\\c/d\n'),
    (b"\\ud83d\\ude00", "\U0001f600".encode()),
    (b"\\ud83dx", "\ufffdx".encode()),  # a lone surrogate: U+FFFD, like Go
    (b"b\xffb", "b\ufffdb".encode()),  # each invalid byte: U+FFFD
    (b"\xe2\x82(", "\ufffd\ufffd(".encode()),  # Go: one per byte (Python would merge)
    (b"cut\\u00", b"cut\\u00"),  # a cut escape stays as it is
])
def test_go_unquote(body, decoded):
    assert go_unquote(body) == decoded


@pytest.mark.parametrize(("key", "secret"), [
    (b"pass", True), (b"PASS", True), (b"pa\xc5\xbf\xc5\xbf", True), (b"\\u0070ass", True),
    (b"p\\\\u0061ss", True),  # escaped once more (text that was repr'd)
    (b"auth_to\xe2\x84\xaaen", True), (b"ss", True), (b"", True), (b"Password", True),
    (b"user", False), (b"name", False), (b"verbose", False), (b"us", False),
])
def test_may_be_secret_key(key, secret):
    assert may_be_secret_key(key) is secret


def test_rule_1_the_issue_connect():
    line = (b'CONNECT {"verbose":true,"name":"b\xffb","user":"bob",'
            b'"\\u0070ass":"hunter2SECRETxyz"}\r\n')
    assert redact_bytes(line) == (b'CONNECT {"verbose":true,"name":"b\xffb","user":"bob",'
                                  b'"\\u0070ass":' + q(b"hunter2SECRETxyz") + b"}\r\n")


def test_rule_1_hashes_what_go_decodes_and_keeps_numbers():
    assert redact_bytes(b'{"PASS":"\\u0068i","n":1,"token":7}') == (
        b'{"PASS":' + q(b"hi") + b',"n":1,"token":7}')


def test_rule_1_other_parity_a_capture_starting_inside_the_key():
    assert redact_bytes(b'ss":"SECRET"}') == q(b'ss":"SECRET"}')  # rule 3 takes it all
    assert redact_bytes(b'ss":"SECRET","x":1') == (
        q(b"ss") + b':' + q(b"SECRET") + b',"x":1')


def test_rule_2_partial_or_mistyped_connect_is_withheld_whole():
    cut = b'CONNECT {"user":"bob","pass":"SECRET'
    assert redact_bytes(cut) == b"CONNECT " + marker(cut[8:]).encode()
    assert redact_bytes(b'CONECT {"user":"bob"') == (
        b"CONECT " + marker(b'{"user":"bob"').encode())
    assert redact_bytes(b'INFO {"server_id":"x"') == b'INFO {"server_id":"x"'


def test_rule_3_a_json_tail_cut_at_its_start():
    assert redact_bytes(b'RET", "verbose": true}\r\n') == (
        q(b'RET", "verbose": true}') + b"\r\n")
    assert redact_bytes(b'RET", "verbose": true') == q(b"RET") + b', "verbose": true'


def test_untouched_text_is_returned_as_it_is():
    for text in (b"PUB a 5\r\nhello\r\n", b'{"a":1,"user":"bob"}\r\n', b"\x00\xff}~{",
                 b'INFO {"server_id":"x","auth_required":true}\r\n'):
        assert redact_bytes(text) is text


def test_idempotent_and_per_line():
    text = b'PING\r\nCONNECT {"pass":"A1"}\r\nss":"B2"}\r\n{"jwt":"C3"'
    once = redact_bytes(text)
    assert redact_bytes(once) == once
    assert once.count(b"<redacted") == 3 and b"A1" not in once and b"B2" not in once
    assert b"C3" not in once


def test_keeping_secrets_switches_the_gate_off():
    line = b'CONNECT {"pass":"A1"}'
    with keeping_secrets():
        assert redact_bytes(line) is line
        assert redact_text(line.decode()) == line.decode()
    assert b"A1" not in redact_bytes(line)


def test_redact_text_works_on_the_utf8_bytes_of_text():
    # a lone surrogate (text decoded with surrogateescape) survives the round trip
    assert redact_text('{"name":"\udcff","pass":"A1"}') == (
        '{"name":"\udcff","pass":' + q(b"A1").decode() + "}")
    assert redact_text("no quotes here") == "no quotes here"


def test_line_gate_holds_a_partial_line_and_gated_writer_flushes_it():
    gate = LineGate()
    assert gate.feed(b'CONNECT {"pa') == b""
    assert gate.feed(b'ss":"A1"}\r\nPI') == b'CONNECT {"pass":' + q(b"A1") + b"}\r\n"
    assert gate.flush() == b"PI"
    sink = io.BytesIO()
    w = GatedWriter(sink)
    w.write(b'{"jwt":"C3')
    assert sink.getvalue() == b""
    w.flush()
    assert sink.getvalue() == b'{"jwt":' + q(b"C3")


_JSONISH = st.text(alphabet=st.sampled_from(
    list('{}[]:, "\\') + list("passPASSſKkjwtJWTsignkeyauth_token\u212aΣİé0")), max_size=40)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(_JSONISH, st.sampled_from(
    ['"pass":', '"PASS": "x"', '"\\u0070ass":"y"', '"paſſ":1', '"nkey":{"a":[1]}',
     '"user":"u"', '"sig', '"jwt"', '"Auth_Token":"t"', '"NKEY":["k"]'])), max_size=6),
       secrets=st.sampled_from([NATS_CONNECT_SECRETS, frozenset({"pass", "ςx"})]))
def test_redact_json_text_shortcut_agrees_with_the_full_scan(parts, secrets):
    """``redact_json_text`` answers text without a backslash and without '"' + a folded
    secret name at once; the full scan (``_name_needles`` off) must give the same."""
    text = "".join(parts)
    fast = redact_json_text(text, secrets)
    saved = redaction._name_needles
    redaction._name_needles = lambda s: None
    try:
        assert fast == redact_json_text(text, secrets)
    finally:
        redaction._name_needles = saved


def test_redact_connect_json_remembers_only_clean_texts():
    """``redact_connect_json`` = the member pass then the gate; it remembers a text only
    when both give it back unchanged with the gate on (nothing withheld is held)."""
    clean = '{"verbose":false,"name":"app","lang":"go"}'
    member = '{"user":"u","pass":"hunter2"}'  # withheld by the member pass
    gated = '{"user":"u","password2":"hunter2"}'  # only the gate withholds it
    redaction._CLEAN_JSON.clear()
    with keeping_secrets():  # gate off: unchanged, and not remembered
        assert redaction.redact_connect_json(gated) == gated
    for text in (clean, member, gated, clean, member, gated):
        assert redaction.redact_connect_json(text) == redact_text(redact_json_text(text)[0])
    assert set(redaction._CLEAN_JSON) == {clean}
    assert "hunter2" not in redaction.redact_connect_json(gated)
    with keeping_secrets():  # a remembered text is what the gate gives it anyway
        assert redaction.redact_connect_json(clean) == clean


def test_the_gate_remembers_only_texts_it_gave_back_unchanged():
    """``redact_bytes`` keeps short texts it returned as they were (``_CLEAN_BYTES``):
    never one it changed, none made with the gate off, none over the length bound; a
    remembered text comes back as the rules give it; the set stays bounded."""
    clean = b'{"type":"io.nats.jetstream.api.v1.stream_names_response","streams":["S"]}'
    secret = b'{"stream":"S","password2":"hunter2"}'
    long_clean = b'{"a":"' + b"x" * redaction._CLEAN_BYTES_LEN + b'"}'
    redaction._CLEAN_BYTES.clear()
    with keeping_secrets():
        assert redact_bytes(secret) is secret
    assert not redaction._CLEAN_BYTES
    for text in (clean, secret, long_clean, clean, secret):
        out = redact_bytes(text)
        assert (out is text) == (text is not secret)
    assert set(redaction._CLEAN_BYTES) == {clean}
    assert b"hunter2" not in redact_bytes(secret)
    saved = redaction._CLEAN_BYTES_MAX
    redaction._CLEAN_BYTES_MAX = 3
    try:
        for k in range(10):
            redact_bytes(b'{"n":%d}' % k)
            assert len(redaction._CLEAN_BYTES) <= 3
    finally:
        redaction._CLEAN_BYTES_MAX = saved


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(_JSONISH, st.sampled_from(
    ['"pass":', 'CONNECT {"x":', '"\\u0070ass":"y"', '}]', '\n', '"user":"u"', '"sig'])),
    max_size=6))
def test_a_remembered_text_is_what_the_rules_give(parts):
    """The gate with its memory (a second call) agrees with the rules run afresh."""
    data = "".join(parts).encode("utf-8", "surrogatepass")
    first = redact_bytes(data)
    again = redact_bytes(data)
    redaction._CLEAN_BYTES.clear()
    assert again == first == redact_bytes(data)
