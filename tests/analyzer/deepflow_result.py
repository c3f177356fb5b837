"""Reads DeepFlow's expected NATS decodes (``flow_generator/nats/*.result``).

Each line of such a file is one message as DeepFlow's Rust agent decoded it, printed
with Rust's ``{:?}`` (Debug) formatting, e.g.::

    NatsInfo(NatsInfo { msg_type: Session, ..., message: Sub(Sub { subject: "FOO",
    queue_group: None, sid: "alice" }), ..., endpoint: Some("FOO") })

or ``None`` where DeepFlow could not decode the bytes (nats-err's ``DEADBEEF`` line).

Strategy: a small recursive-descent parser for the Debug grammar (structs, tuple
structs, unit variants, ``Some``/``None``, strings, numbers, booleans, lists and maps)
gives a generic tree (``Node``); ``read_result`` then flattens each line into a plain
dict with DeepFlow's own field names, so the test decides what to compare.  Nothing
here knows our table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DebugSyntaxError", "Node", "parse_debug", "read_result", "flatten"]


class DebugSyntaxError(ValueError):
    pass


@dataclass
class Node:
    """``Name { a: 1 }`` (``fields``), ``Name(1, 2)`` (``args``) or ``Name`` (neither)."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)
    args: list[Any] = field(default_factory=list)


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<punct>[{}()\[\],:])
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


def _unescape(body: str) -> str:
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u":  # \u{1f600}
            end = body.index("}", i)
            out.append(chr(int(body[i + 3 : end], 16)))
            i = end + 1
        elif nxt == "x":  # \x7f
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        else:
            out.append(_ESCAPES[nxt])
            i += 2
    return "".join(out)


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise DebugSyntaxError(f"cannot tokenize at {pos}: {text[pos:pos + 30]!r}")
            kind = m.lastgroup
            assert kind is not None
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, punct: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise DebugSyntaxError("unexpected end of line")
        if punct is not None and tok != ("punct", punct):
            raise DebugSyntaxError(f"expected {punct!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, punct: str) -> bool:
        return self.peek() == ("punct", punct)

    def items(self, close: str, item) -> list[Any]:
        """Comma-separated items up to ``close`` (a trailing comma is allowed)."""
        out = []
        while not self.at(close):
            out.append(item())
            if not self.at(close):
                self.take(",")
        self.take(close)
        return out

    def value(self) -> Any:
        kind, tok = self.take()
        if kind == "str":
            return _unescape(tok[1:-1])
        if kind == "num":
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if kind == "punct":
            if tok == "[":
                return self.items("]", self.value)
            if tok == "{":  # a map: {"k": v, ...}
                return dict(self.items("}", self.pair))
            raise DebugSyntaxError(f"unexpected {tok!r}")
        # an identifier: literal, Option, struct, tuple struct or unit variant
        if tok == "true" or tok == "false":
            return tok == "true"
        if tok == "None":
            return None
        if self.at("("):
            self.take("(")
            args = self.items(")", self.value)
            if tok == "Some":
                if len(args) != 1:
                    raise DebugSyntaxError("Some(...) with more than one value")
                return args[0]
            return Node(tok, args=args)
        if self.at("{"):
            self.take("{")
            return Node(tok, fields=dict(self.items("}", self.field)))
        return Node(tok)

    def pair(self) -> tuple[Any, Any]:
        k = self.value()
        self.take(":")
        return k, self.value()

    def field(self) -> tuple[str, Any]:
        kind, name = self.take()
        if kind != "ident":
            raise DebugSyntaxError(f"expected a field name, got {name!r}")
        self.take(":")
        return name, self.value()


def parse_debug(line: str) -> Any:
    """One Rust ``{:?}`` value (a whole line) as ``Node`` / dict / list / str / int / ..."""
    p = _Parser(line)
    v = p.value()
    if p.peek() is not None:
        raise DebugSyntaxError(f"trailing input after the value: {p.peek()!r}")
    return v


# DeepFlow message variant -> NATS op name
OPS = {
    "Info": "INFO",
    "Connect": "CONNECT",
    "Pub": "PUB",
    "Hpub": "HPUB",
    "Sub": "SUB",
    "Unsub": "UNSUB",
    "Msg": "MSG",
    "Hmsg": "HMSG",
    "Ping": "PING",
    "Pong": "PONG",
    "Ok": "+OK",
    "Err": "-ERR",
}


def flatten(node: Any) -> dict[str, Any] | None:
    """A parsed ``NatsInfo(NatsInfo {...})`` line as a dict: the outer fields
    (``msg_type`` as text, ``req_len``, ``resp_len``, ``version`` and ``server_name`` of
    the connection's server, ``trace_ids`` as a list of strings, ``span_id``,
    ``endpoint``...), ``op`` (NATS op name) and ``message``: the fields of the message
    variant (``subject``, ``sid``, ``payload`` as bytes, ...; kept apart because
    ``Connect.version`` is the client's version while the outer ``version`` is the
    server's).  ``None`` (an undecodable line) stays None."""
    if node is None:
        return None
    if not (isinstance(node, Node) and node.name == "NatsInfo" and len(node.args) == 1):
        raise DebugSyntaxError(f"not a NatsInfo line: {node!r}")
    info = node.args[0]
    out: dict[str, Any] = {k: v for k, v in info.fields.items() if k != "message"}
    out["msg_type"] = info.fields["msg_type"].name
    prio = info.fields.get("trace_ids")
    out["trace_ids"] = [p.fields["field"] for p in prio.args[0]] if prio is not None else []
    msg = info.fields["message"]
    if msg.name not in OPS:
        raise DebugSyntaxError(f"unknown NATS message variant {msg.name!r}")
    out["op"] = OPS[msg.name]
    inner = msg.args[0] if msg.args else None
    fields = inner.fields if isinstance(inner, Node) else {}
    out["message"] = {k: bytes(v) if k == "payload" else v for k, v in fields.items()}
    return out


def read_result(path: str | Path) -> list[dict[str, Any] | None]:
    """Every line of a DeepFlow NATS ``.result`` file, flattened (see ``flatten``)."""
    lines = Path(path).read_text().splitlines()
    return [flatten(parse_debug(line)) for line in lines if line.strip()]
