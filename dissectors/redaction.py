"""Redaction of credentials: member-wise in structured JSON columns, and the one gate
every other text leaving the process passes (``redact_bytes``; see "the gate" below).

Strategy: a value that proves an identity (a password, a token, a JWT, a signature) is
replaced where it stands by a marker that keeps its length and SHA-256, so the evidence
can still be matched ("did this client send the password we seized?": hash it and look
for the digest) without the dataset becoming a credential store.  The marker is a JSON
string, so redacted JSON text still parses::

    "<redacted len=8 sha256=5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8>"

``len`` and ``sha256`` are over the *decoded* value: the UTF-8 bytes of a JSON string
after its escapes are resolved (the same bytes the server compared), else the JSON text
of the value (a number, an object, ...).

Which members are secret is decided like the Go servers we dissect decide it:
``encoding/json`` matches member names to struct fields case-insensitively (with the
Unicode folds ``ſ`` → ``s`` and ``K`` (Kelvin) → ``k``), so ``"PASS"`` and ``"paſſ"`` set the
password as surely as ``"pass"`` does.  Escapes in names (``"p\\u0061ss"``) are resolved
before matching.  Secret members are redacted at any depth of the document.

Fail closed: the JSON is walked by a small tolerant scanner (the text may be cut short
or malformed; it never raises).  If after redaction a secret name can still be found in
the text (resolving ``\\u`` escapes), the whole text is replaced by one marker.

The gate (``redact_bytes``/``redact_text``, ``GatedWriter`` for ``follow``,
``gated_output`` for stdout/stderr) reads raw bytes with three conservative rules for
text that may be cut or malformed; ``keeping_secrets()`` (``--keep-secrets``) turns it
off.  Called from: ``nats.parser.show``, the NATS/route sessions, the dataset sink (the
``anomalies`` detail), the manifest, ``analyzer.cli`` and the report.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import lru_cache
from typing import BinaryIO, TextIO, TypeVar

__all__ = [
    "NATS_CONNECT_SECRETS",
    "GatedWriter",
    "LineGate",
    "fold_name",
    "gated_output",
    "go_unquote",
    "keeping_secrets",
    "marker",
    "may_be_secret_key",
    "redact",
    "redact_bytes",
    "redact_connect_json",
    "redact_json_text",
    "redact_text",
    "secrets_kept",
]

# NATS CONNECT members that carry or prove credentials (nats-server's clientOpts:
# Password `pass`, Token `auth_token`, JWT `jwt`, Sig `sig`, Nkey `nkey`).  `user` is an
# account name, not a secret, and stays in the `client_user` column.
NATS_CONNECT_SECRETS: frozenset[str] = frozenset({"pass", "auth_token", "jwt", "sig", "nkey"})

MARKER_PREFIX = "<redacted len="
_WS = " \t\r\n"
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def fold_name(name: str) -> str:
    """A member name as Go's ``encoding/json`` compares it to a field name."""
    return name.lower().replace("\u017f", "s").replace("\u212a", "k")


def marker(value: bytes) -> str:
    """The replacement text for ``value`` (length and SHA-256 kept)."""
    return f"<redacted len={len(value)} sha256={hashlib.sha256(value).hexdigest()}>"


def _decoded_string(body: str) -> bytes:
    """UTF-8 of a JSON string's content (``body`` without quotes); raw text if the
    escapes are invalid."""
    try:
        value: str = json.loads(f'"{body}"')
    except ValueError:
        value = body
    return value.encode("utf-8", "surrogatepass")


# -- a tolerant JSON tokenizer ----------------------------------------------------------

_STR, _PUNCT, _OTHER = 0, 1, 2


def _tokens(s: str) -> Iterable[tuple[int, int, int]]:
    """``(kind, start, end)`` tokens of ``s``; an unterminated string runs to the end."""
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in _WS:
            i += 1
        elif c == '"':
            j = i + 1
            while j < n:
                d = s[j]
                if d == "\\":
                    j += 2
                elif d == '"':
                    break
                else:
                    j += 1
            end = min(j + 1, n)
            yield _STR, i, end
            i = end
        elif c in "{}[]:,":
            yield _PUNCT, i, i + 1
            i += 1
        else:
            j = i + 1
            while j < n and s[j] not in _WS and s[j] not in '{}[]:,"':
                j += 1
            yield _OTHER, i, j
            i = j


def _string_body(s: str, start: int, end: int) -> str:
    body = s[start + 1 : end]
    if end > start + 1 and s[end - 1] == '"' and end - start >= 2:
        body = s[start + 1 : end - 1]
    return body


def _secret_spans(s: str, secrets: frozenset[str]) -> list[tuple[int, int, bytes]]:
    """Spans of the values of secret members: ``(start, end, decoded value)``."""
    spans: list[tuple[int, int, bytes]] = []
    # per open container: is it an object, and (object) are we before a member's ':'
    stack: list[list[int]] = []  # per container: [is_object, state, key_is_secret] (bools are 0/1)
    open_secret: tuple[int, int] | None = None  # (start, stack depth) of a secret container
    expect_value_for_secret = False
    for kind, a, b in _tokens(s):
        if open_secret is not None:
            # inside a secret container value: only track nesting until it closes
            if kind == _PUNCT and s[a] in "{[":
                stack.append([s[a] == "{", 0, False])
            elif kind == _PUNCT and s[a] in "}]":
                if stack:
                    stack.pop()
                if len(stack) == open_secret[1]:
                    start = open_secret[0]
                    spans.append((start, b, s[start:b].encode("utf-8", "surrogatepass")))
                    open_secret = None
            continue
        top = stack[-1] if stack else None
        if kind == _PUNCT:
            c = s[a]
            if c in "{[":
                if expect_value_for_secret:
                    expect_value_for_secret = False
                    open_secret = (a, len(stack))
                stack.append([c == "{", 0, False])
            elif c in "}]":
                if stack:
                    stack.pop()
                expect_value_for_secret = False
            elif c == ":":
                if top is not None and top[0] and top[1] == 1:
                    top[1] = 2
                    expect_value_for_secret = bool(top[2])
            elif c == ",":
                if top is not None and top[0]:
                    top[1] = 0
                    top[2] = False
                expect_value_for_secret = False
            continue
        # a string or a bare word
        if top is not None and top[0] and top[1] == 0 and kind == _STR:
            name = _decoded_string(_string_body(s, a, b)).decode("utf-8", "surrogatepass")
            top[1] = 1
            top[2] = fold_name(name) in secrets
            continue
        if expect_value_for_secret:
            expect_value_for_secret = False
            if kind == _STR:
                value = _decoded_string(_string_body(s, a, b))
            else:
                value = s[a:b].encode("utf-8", "surrogatepass")
            spans.append((a, b, value))
        if top is not None and top[0]:
            top[1] = 3  # value seen; wait for ','
    if open_secret is not None:  # cut short inside a secret container: redact to the end
        start = open_secret[0]
        spans.append((start, len(s), s[start:].encode("utf-8", "surrogatepass")))
    return spans


def _mentions_secret(text: str, secrets: frozenset[str]) -> bool:
    """Does ``text`` still name a secret member whose value is not a marker?  Names are
    compared after resolving ``\\u`` escapes and folding case; a name not followed by
    ``:`` counts too (the text may be cut short or malformed)."""
    plain = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    folded = fold_name(plain)
    for name in secrets:
        quoted = f'"{name}"'
        at = folded.find(quoted)
        while at >= 0:
            rest = folded[at + len(quoted) :].lstrip(_WS)
            if not rest.startswith(":") or not rest[1:].lstrip(_WS).startswith(
                '"' + MARKER_PREFIX
            ):
                return True
            at = folded.find(quoted, at + 1)
    return False


@lru_cache(maxsize=16)
def _name_needles(secrets: frozenset[str]) -> tuple[str, ...] | None:
    """``'"' + name`` of each secret name, for ``redact_json_text``'s shortcut; None when
    a name is not ASCII (its folding may depend on the text around it: final sigma)."""
    if not all(name.isascii() for name in secrets):
        return None
    return tuple(f'"{name}' for name in sorted(secrets))


def redact_json_text(text: str, secrets: frozenset[str] = NATS_CONNECT_SECRETS) -> tuple[str, int]:
    """``text`` with the values of secret members replaced by markers.

    Returns ``(redacted text, number of values redacted)``; when a secret name survives
    the scan the whole text becomes one marker (count -1).  Text without secrets comes
    back unchanged (count 0)."""
    needles = _name_needles(secrets)
    if needles is not None and "\\" not in text:
        # no escape: every member name is its text as written, so a secret member needs
        # '"' + its folded name in the folded text (ASCII names: folding is per character
        # there); without one no span is found and no name survives (same result, ~25x
        # less CPU on a CONNECT of a client without credentials)
        folded = fold_name(text)
        if not any(n in folded for n in needles):
            return text, 0
    spans = _secret_spans(text, secrets)
    out = text
    if spans:
        parts: list[str] = []
        pos = 0
        for start, end, value in spans:
            if start < pos:  # nested in a span already redacted
                continue
            parts.append(text[pos:start])
            parts.append(f'"{marker(value)}"')
            pos = end
        parts.append(text[pos:])
        out = "".join(parts)
    if _mentions_secret(out, secrets):
        return marker(text.encode("utf-8", "surrogatepass")), -1
    return out, len(spans)


# texts ``redact_connect_json`` found clean (at most this many, each at most this long)
_CLEAN_JSON: set[str] = set()
_CLEAN_JSON_MAX = 256
_CLEAN_JSON_LEN = 4096
# texts the gate (``redact_bytes``) gave back unchanged, as above
_CLEAN_BYTES: set[bytes] = set()
_CLEAN_BYTES_MAX = 1024
_CLEAN_BYTES_LEN = 4096


def _remember(clean: set[T], text: T, most: int, longest: int) -> None:
    """Keep ``text``, which a redaction step gave back unchanged with the gate on, in
    ``clean`` (at most ``most`` texts of at most ``longest`` characters or bytes: the
    set is emptied when full)."""
    if len(text) <= longest and not _KEEP.get():
        if len(clean) >= most:
            clean.clear()
        clean.add(text)


def redact_connect_json(text: str) -> str:
    """A CONNECT's JSON as its ``json_raw`` column may hold it: the values of
    ``NATS_CONNECT_SECRETS`` members marked (``redact_json_text``), then the gate
    (``redact_text``).

    Texts that come back unchanged with the gate on are remembered (a bounded set, cleared
    when full): a client that reconnects sends the same CONNECT, and the gate's regular
    expressions cost ~40 us a text.  Both steps depend only on the text and the gate's
    switch, so a remembered text comes back as it would be computed; and what is remembered
    holds nothing either step withholds, so no credential stays in it."""
    if text in _CLEAN_JSON:
        return text
    out = redact_text(redact_json_text(text)[0])
    if out == text:
        _remember(_CLEAN_JSON, text, _CLEAN_JSON_MAX, _CLEAN_JSON_LEN)
    return out


# -- the gate: every free text that leaves the process ----------------------------------
#
# Structured columns (``json_raw``) are redacted above, member by member, on text that
# parsed.  Everything else that can quote wire bytes -- anomaly details, the reassembled
# bytes ``follow`` prints, the views, logs, the manifest -- passes ``redact_bytes`` /
# ``redact_text``, which works on the raw bytes (before any ``repr`` or escaping) and
# assumes the worst about them: they may be cut at either end (a capture that starts
# mid-CONNECT, a detail that quotes the first 120 bytes of a line), may not be valid
# UTF-8, and may be JSON only in the eyes of Go's ``encoding/json`` (nats-server's
# decoder), which Python's ``json`` rejects.  Hence two rules, both conservative:
#
# 1. A value after anything that may be a credential key is withheld.  "May be" is wide:
#    the key is read every way a decoder could read it (``\uXXXX`` resolved, invalid UTF-8
#    and unknown escapes dropped, Unicode case folding with ``ſ``/``K``, a doubly escaped
#    ``\\u0070`` from text that was escaped once already) and matches when any reading
#    contains a credential stem (``pass``, ``token``, ``jwt``, ``sig``, ``key``, ...) or is
#    a tail of a credential name (``ss`` of a ``pass`` cut by the capture's start).  Text
#    that may start inside a string is also read with the opposite quote parity, and the
#    union of both readings is withheld.
# 3. On a line, everything up to a ``}`` or ``]`` that follows a value and closes nothing
#    opened before it is withheld: it is the tail of a JSON text cut at its start, maybe
#    inside a password; so is a line's head up to a first ``"`` that ``,``/``:``/a bracket
#    follows (the rest of a cut string value).
# 2. The argument of a CONNECT-like op (``CONNECT``, a piece of it such as ``CONNEC`` or
#    ``NECT``, a near miss such as ``CONECT``, or any other op but INFO followed by ``{``)
#    that is not one complete, well-formed JSON object on its line is withheld whole, up
#    to the end of its line.
#
# A withheld value becomes ``marker(value)``: for a string, ``value`` is what Go decodes
# (``go_unquote``: escapes resolved, each invalid UTF-8 byte as U+FFFD), i.e. the bytes
# the server compared; otherwise the raw bytes withheld.

# Stems that make a member name a possible credential (nats-server client, route, leaf
# node and gateway CONNECTs: pass, auth_token, jwt, sig, nkey; others for plugins' JSON).
SECRET_STEMS: tuple[str, ...] = (
    "pass", "pwd", "token", "jwt", "sig", "nkey", "apikey", "privatekey", "secret", "auth",
    "cred", "bearer",
)
# Tails of the credential names: what is left of a key when a capture starts inside it.
_TAILS: frozenset[str] = frozenset(
    name.replace("_", "")[i:] for name in NATS_CONNECT_SECRETS for i in range(len(name))
)
_CONNECT = "connect"
_MARKER_BYTES = MARKER_PREFIX.encode()
_KEEP: ContextVar[bool] = ContextVar("msgcap_keep_secrets", default=False)
_ESCAPES = {
    ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b", ord("f"): b"\f",
    ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t",
}
_HEX4 = re.compile(rb"[0-9a-fA-F]{4}")
_NOT_ALNUM = re.compile(r"[\W_]+")
_BACKSLASH_HEX = re.compile(r"\\+(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\})")
_OP_WORD = re.compile(rb"[A-Za-z\x80-\xff]{3,}")
_SPACE = b" \t\r\x0b\x0c"

T = TypeVar("T", str, bytes)


@contextmanager
def keeping_secrets(keep: bool = True) -> Iterator[None]:
    """Within this block ``redact_bytes``/``redact_text`` return their input unchanged
    (``--keep-secrets``).  A context variable, so pure parsers (``nats.parser.show``)
    need no extra argument and concurrent runs in threads do not see each other's
    choice."""
    token = _KEEP.set(keep)
    try:
        yield
    finally:
        _KEEP.reset(token)


def secrets_kept() -> bool:
    """Is the gate switched off here (``keeping_secrets``)?"""
    return _KEEP.get()


def _go_utf8(b: bytes) -> str:
    """Decode like Go's ``utf8.DecodeRune`` loop: each invalid byte becomes U+FFFD."""
    out: list[str] = []
    i = 0
    while i < len(b):
        try:
            out.append(b[i:].decode("utf-8"))
            break
        except UnicodeDecodeError as e:
            out.append(b[i : i + e.start].decode("utf-8"))
            out.append("\ufffd")
            i += e.start + 1
    return "".join(out)


def go_unquote(body: bytes) -> bytes:
    """The UTF-8 bytes Go's ``encoding/json`` makes of a string's content (``body``,
    without its quotes): escapes resolved (a lone surrogate as U+FFFD), invalid UTF-8
    as U+FFFD.  Never raises: a bad or cut escape is kept as its raw text."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        j = body.find(b"\\", i)
        if j < 0:
            out += body[i:]
            break
        out += body[i:j]
        c = body[j + 1] if j + 1 < n else -1
        if c in _ESCAPES:
            out += _ESCAPES[c]
            i = j + 2
        elif c == ord("u") and _HEX4.fullmatch(body, j + 2, j + 6):
            cp = int(body[j + 2 : j + 6], 16)
            i = j + 6
            if 0xD800 <= cp < 0xDC00 and body[i : i + 2] == b"\\u" and _HEX4.fullmatch(
                body, i + 2, i + 6
            ):
                lo = int(body[i + 2 : i + 6], 16)
                if 0xDC00 <= lo < 0xE000:
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    i += 6
            if 0xD800 <= cp < 0xE000:
                cp = 0xFFFD
            out += chr(cp).encode()
        else:
            out += body[j : j + 2]
            i = j + 2
    return _go_utf8(bytes(out)).encode()


def _key_readings(raw: bytes) -> set[str]:
    """Every way a decoder (or a reader of once-escaped text) may read a member name,
    folded and reduced to letters and digits."""
    readings = {go_unquote(raw).decode(), raw.decode("latin-1")}
    undoubled = raw.replace(b"\\\\", b"\\")
    if undoubled != raw:
        readings.add(go_unquote(undoubled).decode())
    for r in list(readings):
        readings.add(_BACKSLASH_HEX.sub("", r))
    return {_NOT_ALNUM.sub("", fold_name(r).casefold()) for r in readings}


@lru_cache(maxsize=4096)
def may_be_secret_key(raw: bytes) -> bool:
    """Could ``raw`` (a member name as it stands on the wire, without quotes, maybe cut
    at its start) name a credential under any reading?  Empty names count: they are what
    is left of a name made only of bytes a decoder drops."""
    for r in _key_readings(raw):
        if not r or r in _TAILS or any(stem in r for stem in SECRET_STEMS):
            return True
    return False


# token kinds of the byte scanner
_T_STR, _T_PUNCT, _T_WORD = 0, 1, 2
_WS_B = frozenset(b" \t\r\n\x0b\x0c")
_PUNCT_B = frozenset(b"{}[]:,")
# nothing to hide in these (Go will not put a number into a string credential field)
_NUMBER = re.compile(rb"true|false|null|-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


# one token per match (white space between them is skipped by finditer): a string (to
# its closing quote, else to the line end), a punctuation byte, or a bare word
_TOKEN = re.compile(rb'"([^"\\\n]*(?:\\.[^"\\\n]*)*)("?)|([{}\[\]:,])|[^ \t\r\n\x0b\x0c{}\[\]:,"]+')
_STRING_REST = re.compile(rb'[^"\\\n]*(?:\\.[^"\\\n]*)*("?)')


# cheap look-ahead of rules 1 and 3 (no token list unless one may apply): every text that
# may be a member name -- the bytes after a quote (or the line start) up to a quote
# followed by ':', or a bare word followed by ':' -- and a string closing a bracket
_KEY_CANDIDATE = re.compile(
    rb'(?m:(?<=")|^)([^"\n]*)"[ \t\r\x0b\x0c]*:'
    rb'|(?<![^ \t\r\n\x0b\x0c{}\[\]:,"])([^ \t\r\n\x0b\x0c{}\[\]:,"]+)[ \t\r\x0b\x0c]*:'
)
_STRING = re.compile(rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?')
_BRACKET = re.compile(rb"[{}\[\]]")


def _unmatched_after_value(compact: bytes) -> bool:
    """In a line whose strings are collapsed to ``"`` and white space removed: does a
    closing bracket right after a JSON value close nothing (rule 3)?"""
    depth = 0
    for m in _BRACKET.finditer(compact):
        i = m.start()
        if compact[i] in b"{[":
            depth += 1
        elif depth:
            depth -= 1
        elif _VALUE_END.search(compact, 0, i):
            return True
    return False


# what a JSON value ends with (a string collapsed to '"', a number, a literal, a bracket)
_VALUE_END = re.compile(rb'(?:"|[0-9]|true|false|null|[}\]])$')
_VALUE_CLOSE = re.compile(rb'(?:"|[0-9]|true|false|null|[}\]])[}\]]')
# rule 3b: a line that starts inside a string which JSON structure then follows
_HEAD_STRING = re.compile(rb'(?m)^[^"\\\n]*(?:\\.[^"\\\n]*)*"[ \t\r\x0b\x0c]*[,:}\]]')


# rule 2's candidates: an op-like word, then (maybe) blanks, then "{"
_OP_BRACE = re.compile(rb"(?<![A-Za-z\x80-\xff])[A-Za-z\x80-\xff]{3,}[ \t\r\x0b\x0c]*\{")
_BACKSLASH = re.compile(rb"\\")
_LINE_START = re.compile(rb"^", re.MULTILINE)


def _byte_tokens(data: bytes, in_string: bool) -> list[tuple[int, int, int, bool]]:
    """``(kind, start, end, closed)`` tokens; a string ends at its closing quote or at a
    line end (JSON strings hold no raw newline); with ``in_string`` the text is read as
    if it started inside a string (a fragment cut mid-string: its first token starts at
    -1, the implied opening quote)."""
    toks: list[tuple[int, int, int, bool]] = []
    pos = 0
    if in_string:
        m = _STRING_REST.match(data)
        assert m is not None  # every part of the pattern may match nothing: it always matches
        toks.append((_T_STR, -1, m.end(), bool(m.group(1))))
        pos = m.end()
    for m in _TOKEN.finditer(data, pos):
        if m.group(3) is not None:
            toks.append((_T_PUNCT, m.start(), m.end(), True))
        elif m.group(2) is not None:
            toks.append((_T_STR, m.start(), m.end(), bool(m.group(2))))
        else:
            toks.append((_T_WORD, m.start(), m.end(), True))
    return toks


def _str_body(data: bytes, a: int, b: int, closed: bool) -> bytes:
    return data[a + 1 : b - 1] if closed else data[a + 1 : b]


def _value_spans(data: bytes, toks: list[tuple[int, int, int, bool]]) -> list[
    tuple[int, int, bytes]
]:
    """Spans ``(start, end, hashed value)`` of values that follow a possible credential
    key (rule 1) in one quote-parity reading (``toks``) of ``data``."""
    spans: list[tuple[int, int, bytes]] = []
    k = 0
    while k + 2 < len(toks):
        kind, a, b, closed = toks[k]
        colon = toks[k + 1]
        if kind == _T_PUNCT or colon[0] != _T_PUNCT or data[colon[1]] != 0x3A:
            k += 1
            continue
        key = _str_body(data, a, b, closed) if kind == _T_STR else data[a:b]
        if not may_be_secret_key(key):
            k += 2
            continue
        vk, va, vb, vclosed = toks[k + 2]
        if vk == _T_STR:
            body = _str_body(data, va, vb, vclosed)
            if not body.startswith(_MARKER_BYTES):
                spans.append((va, vb, go_unquote(body)))
            k += 3
            continue
        if vk == _T_PUNCT and data[va] in b"{[":
            depth, m = 0, k + 2
            while m < len(toks):
                t = toks[m]
                if t[0] == _T_PUNCT and data[t[1]] in b"{[":
                    depth += 1
                elif t[0] == _T_PUNCT and data[t[1]] in b"}]":
                    depth -= 1
                    if depth == 0:
                        break
                m += 1
            end = toks[m][2] if m < len(toks) else len(data)
            spans.append((va, end, data[va:end]))
            k = m + 1
            continue
        word = data[va:vb]
        if vk == _T_WORD and not _NUMBER.fullmatch(word) and not word.startswith(_MARKER_BYTES):
            spans.append((va, vb, data[va:vb]))
        k += 3
    return spans


def _tail_spans(data: bytes, toks: list[tuple[int, int, int, bool]]) -> list[
    tuple[int, int, bytes]
]:
    """Rule 3: a ``}``/``]`` right after a value that closes nothing opened on this line
    ends the tail of a JSON text whose start was cut off (a capture starting inside a
    CONNECT's value): all before it is withheld, since the key that would tell is gone.
    Rule 3b: a line that starts inside a string followed by ``,``/``:``/a bracket (the
    rest of a cut value) has that string withheld."""
    depth, end = 0, -1
    prev_value = False
    for kind, a, b, _closed in toks:
        if kind == _T_PUNCT:
            c = data[a]
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                if depth == 0 and prev_value:
                    end = a + 1
                elif depth:
                    depth -= 1
            prev_value = c in b"}]"
        else:
            prev_value = kind == _T_STR or _NUMBER.fullmatch(data[max(a, 0) : b]) is not None
    spans = [(0, end, data[:end])] if end > 0 else []
    head = _HEAD_STRING.match(data)
    if head is not None:
        q = data.rindex(b'"', 0, head.end())
        spans.append((0, q + 1, go_unquote(data[:q])))
    return spans


def _complete_object_end(data: bytes, start: int, stop: int) -> int:
    """End of the JSON object that opens at ``start`` if it closes before ``stop`` with
    every string closed and a plausible member structure; else -1."""
    depth = 0
    for kind, a, b, closed in _byte_tokens(data[start:stop], False):
        if kind == _T_STR and not closed:
            return -1
        if kind == _T_PUNCT:
            c = data[start + a]
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return start + b
                if depth < 0:
                    return -1
    return -1


def _connect_like(word: bytes) -> bool:
    """Is ``word`` (an op-like run of letters) CONNECT, a piece of it, or a near miss?"""
    w = word.decode("latin-1").casefold()
    if w in _CONNECT or _CONNECT in w:
        return True
    if abs(len(w) - len(_CONNECT)) > 2:
        return False
    # edit distance <= 2 (insertions, deletions, substitutions, transpositions as 2)
    prev = list(range(len(_CONNECT) + 1))
    for i, ch in enumerate(w, 1):
        cur = [i]
        for j, cj in enumerate(_CONNECT, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ch != cj)))
        prev = cur
    return prev[-1] <= 2


def _connect_spans(data: bytes) -> list[tuple[int, int, bytes]]:
    """Rule 2: arguments of CONNECT-like ops that are not one complete object."""
    spans: list[tuple[int, int, bytes]] = []
    for m in _OP_WORD.finditer(data):
        i = m.end()
        while i < len(data) and data[i] in _SPACE:
            i += 1
        if i >= len(data) or data[i] != 0x7B:  # "{"
            continue
        word = m.group()
        if word.lower() == b"info" or not (_connect_like(word) or i > m.end()):
            continue
        eol = data.find(b"\n", i)
        eol = len(data) if eol < 0 else eol
        if _complete_object_end(data, i, eol) < 0:
            spans.append((i, eol, data[i:eol]))
    return spans


def redact_bytes(data: bytes) -> bytes:
    """The redaction gate on raw bytes (see the rules above): ``data`` with every possible
    credential replaced by its marker; unchanged inside ``keeping_secrets()``.

    A short text the gate gave back unchanged is remembered (``_CLEAN_BYTES``, bounded):
    JetStream API requests and responses, CONNECTs and INFOs recur as they are, and the
    rules cost 9-330 us a text (a replayed ``nats-basic`` capture spent a fifth of its
    CPU here on 15 distinct JSON texts).  The rules depend only on the text and the
    gate's switch, so a remembered text comes back as it would be computed, and none
    holds anything the gate withholds."""
    if _KEEP.get() or (b'"' not in data and b"{" not in data):
        return data
    short = len(data) <= _CLEAN_BYTES_LEN
    if short and data in _CLEAN_BYTES:
        return data
    # line by line (each line may be a fragment); the lines any rule may touch are found
    # by whole-text regular expressions first, and only those are scanned
    lines = data.split(b"\n")
    flagged = _flagged_lines(data, lines)
    changed = False
    for i in flagged:
        out = _redact_line(lines[i])
        if out is not lines[i]:
            lines[i], changed = out, True
    if changed:
        return b"\n".join(lines)
    if short:
        _remember(_CLEAN_BYTES, bytes(data), _CLEAN_BYTES_MAX, _CLEAN_BYTES_LEN)
    return data


def _flagged_lines(data: bytes, lines: list[bytes]) -> list[int]:
    """Indexes of the lines of ``data`` (split at LF) that a rule may change."""
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    hits: set[int] = set()
    for m in _KEY_CANDIDATE.finditer(data) if b":" in data else ():
        if may_be_secret_key(m.group(1) if m.group(1) is not None else m.group(2)):
            hits.add(bisect_right(starts, m.start()) - 1)
    for m in _OP_BRACE.finditer(data):
        hits.add(bisect_right(starts, m.start()) - 1)
    for m in _BACKSLASH.finditer(data):  # escapes: key bodies are not plain segments
        hits.add(bisect_right(starts, m.start()) - 1)
    for text in (data, _LINE_START.sub(b'"', data)):  # parity 0, parity 1 (rule 3)
        compact = _STRING.sub(b'"', text).translate(None, b" \t\r\x0b\x0c")
        if _VALUE_CLOSE.search(compact):
            for i, line in enumerate(compact.split(b"\n")):
                if _VALUE_CLOSE.search(line) and _unmatched_after_value(line):
                    hits.add(i)
    for m in _HEAD_STRING.finditer(data):
        hits.add(bisect_right(starts, m.start()) - 1)
    return sorted(hits)


def _redact_line(data: bytes) -> bytes:
    """All rules on one line (no LF inside)."""
    whole = _connect_spans(data)
    spans = list(whole)
    keys = b"\\" in data or any(  # an escaped quote: key bodies are not plain segments
        may_be_secret_key(m.group(1) if m.group(1) is not None else m.group(2))
        for m in _KEY_CANDIDATE.finditer(data))
    tail = b'"' in data
    if keys or tail:
        for in_string in (False, True):
            toks = _byte_tokens(data, in_string)
            if keys:
                spans += _value_spans(data, toks)
            if tail:
                spans += _tail_spans(data, toks)
    if not spans:
        return data
    spans.sort(key=lambda s: (s[0], -s[1]))
    parts: list[bytes] = []
    pos = 0
    for start, end, value in spans:
        if end <= pos:
            continue
        if start < pos:  # overlaps what is already withheld: withhold the rest too
            start, value = pos, data[pos:end]
        parts.append(data[pos:start])
        mark = marker(value).encode()
        # a value becomes a JSON string (JSON stays JSON); a withheld CONNECT argument not
        if data[start : start + 1] in (b"{", b"[") and (start, end, value) in whole:
            parts.append(mark)
        else:
            parts.append(b'"' + mark + b'"')
        pos = end
    parts.append(data[pos:])
    return b"".join(parts)


def redact_text(text: str) -> str:
    """The gate for text that is already ``str`` (details built elsewhere, log messages,
    rendered views): its UTF-8 bytes (lone surrogates kept) pass ``redact_bytes``."""
    if _KEEP.get() or ('"' not in text and "{" not in text):
        return text
    raw = text.encode("utf-8", "surrogatepass")
    out = redact_bytes(raw)
    return text if out is raw else out.decode("utf-8", "surrogatepass")


def redact(value: T) -> T:
    """``redact_bytes`` or ``redact_text``, by the type of ``value``."""
    return redact_bytes(value) if isinstance(value, bytes) else redact_text(value)


def redact_values(value: object) -> object:
    """A JSON-able value whose every string (keys too) and bytes passed the gate.

    Why not gate the JSON text afterwards: the gate reads raw bytes, and JSON escaping
    (``\\"``, ``\\u``) changes what a fragment looks like — a cut preview such as
    ``"{\\"server_id\\":\\"NC6…`` inside an NDJSON line reads as a JSON tail cut at its
    start and would withhold the whole line.  Values gated before ``json.dumps`` are then
    written with ``write_gated``."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes):
        return redact_bytes(value)
    if isinstance(value, dict):
        return {redact_values(k): redact_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(v) for v in value]
    return value


def write_gated(text: str, file: TextIO | None = None) -> None:
    """Write ``text`` that already passed the gate (JSON built from ``redact_values``):
    past the line gate of ``gated_output``, in order with what was held before it."""
    out = sys.stdout if file is None else file
    passed = getattr(out, "write_passed", None)
    if passed is not None:
        passed(text)
    else:
        out.write(text)


class LineGate:
    """The gate for a byte stream printed as it arrives (``msgcap follow``): whole lines
    pass ``redact_bytes``; a partial line is held until its end, until ``flush`` (the
    caller flushes before it prints the other direction or a gap marker, so the order of
    the bytes is kept) or until ``max_held_bytes`` (then it is gated as a fragment)."""

    __slots__ = ("_held", "max_held_bytes")

    def __init__(self, max_held_bytes: int = 65536) -> None:
        self._held = b""
        self.max_held_bytes = max_held_bytes

    def feed(self, data: bytes) -> bytes:
        buf = self._held + data
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) < self.max_held_bytes:
                self._held = buf
                return b""
            cut = len(buf)
        self._held = buf[cut:]
        return redact_bytes(buf[:cut])

    def flush(self) -> bytes:
        out, self._held = redact_bytes(self._held), b""
        return out


class GatedWriter:
    """A binary file whose ``write`` passes a ``LineGate``; ``flush`` lets out the held
    partial line.  What ``msgcap follow`` prints the reassembled bytes through."""

    __slots__ = ("_file", "_gate")

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._gate = LineGate()

    def write(self, data: bytes) -> int:
        self._file.write(self._gate.feed(data))
        return len(data)

    def flush(self) -> None:
        self._file.write(self._gate.flush())
        self._file.flush()


class _GatedText:
    """A text stream behind the gate (other attributes are the real stream's, so rich
    still sees the terminal).  ``hold``: lines are gated whole (a partial line waits for
    its end: stdout); else each write is gated as it comes (stderr, whose progress lines
    are redrawn without a newline and must not wait)."""

    def __init__(self, file: TextIO, hold: bool) -> None:
        self._file = file
        self._gate = LineGate() if hold else None

    def write(self, text: str) -> int:
        raw = text.encode("utf-8", "surrogateescape")
        out = self._gate.feed(raw) if self._gate is not None else redact_bytes(raw)
        if out:
            self._file.write(out.decode("utf-8", "surrogateescape"))
        return len(text)

    def flush(self) -> None:
        self._release()
        self._file.flush()

    def _release(self) -> None:
        if self._gate is not None:
            out = self._gate.flush()
            if out:
                self._file.write(out.decode("utf-8", "surrogateescape"))

    def write_passed(self, text: str) -> None:
        """Text whose values passed the gate before escaping (``write_gated``)."""
        self._release()
        self._file.write(text)

    @property
    def buffer(self) -> BinaryIO:  # raw bytes (msgcap follow gates them itself)
        self.flush()
        return self._file.buffer

    def __getattr__(self, name: str) -> object:
        return getattr(self._file, name)


@contextmanager
def gated_output(keep: bool = False) -> Iterator[None]:
    """Every text a command prints passes the gate (``analyzer.cli.main``): stdout (the
    views, ``--json``) and stderr (messages, errors, log records: logging's last-resort
    handler writes to whatever ``sys.stderr`` is); ``keep`` (``--keep-secrets``) leaves
    both alone."""
    if keep or _KEEP.get():
        yield
        return
    real_out, real_err = sys.stdout, sys.stderr
    gated = _GatedText(real_out, hold=True)
    sys.stdout, sys.stderr = gated, _GatedText(real_err, hold=False)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = real_out, real_err
        with suppress(BrokenPipeError, ValueError):  # a closed pipe or stream: nothing to say
            gated.flush()

