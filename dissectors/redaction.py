"""Redaction of credentials before they reach the output tables.

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
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable

__all__ = [
    "NATS_CONNECT_SECRETS",
    "fold_name",
    "marker",
    "redact_json_text",
    "redact_text_after_brace",
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
        value = json.loads(f'"{body}"')
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
    stack: list[list] = []  # [is_object, state, key_is_secret, value_start, depth_of_value]
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
                    expect_value_for_secret = top[2]
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


def redact_json_text(text: str, secrets: frozenset[str] = NATS_CONNECT_SECRETS) -> tuple[str, int]:
    """``text`` with the values of secret members replaced by markers.

    Returns ``(redacted text, number of values redacted)``; when a secret name survives
    the scan the whole text becomes one marker (count -1).  Text without secrets comes
    back unchanged (count 0)."""
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


def redact_text_after_brace(text: str, secrets: frozenset[str] = NATS_CONNECT_SECRETS) -> str:
    """For free text (anomaly details quoting wire bytes, possibly cut short): when a
    quoted secret member name appears, everything from the first ``{`` (or from that
    name, if earlier) to the end becomes one marker."""
    if not _mentions_secret(text, secrets):
        return text
    at = text.find("{")
    if at < 0:
        at = 0
    return text[:at] + marker(text[at:].encode("utf-8", "surrogatepass"))
