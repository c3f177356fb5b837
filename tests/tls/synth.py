"""Synthetic TLS 1.2 / 1.3 connections (records a real stack would send) and their key log.

The handshake messages carry only what the TLS layer reads (ClientHello, ServerHello,
EncryptedExtensions, Finished, KeyUpdate); certificates and key exchanges are filler.
Records are protected with the layer's own ``Tls12Keys``/``Tls13Keys`` (their ``seal``)
from secrets made up here and written to the key log.
"""

from __future__ import annotations

import random
import struct

from reassembly.tls.records import Tls12Keys, Tls13Keys, tls12_key_block


def hs(mtype: int, body: bytes) -> bytes:
    return bytes([mtype]) + len(body).to_bytes(3, "big") + body


def record(ctype: int, body: bytes, version: int = 0x0303) -> bytes:
    return struct.pack("!BHH", ctype, version, len(body)) + body


def _ext(etype: int, body: bytes) -> bytes:
    return struct.pack("!HH", etype, len(body)) + body


def client_hello(rnd: bytes, suites: tuple[int, ...], sni: str | None, alpn: tuple[str, ...],
                 versions: tuple[int, ...] = (), early: bool = False,
                 session_id: bytes = b"") -> bytes:
    exts = b""
    if sni:
        name = sni.encode()
        lst = b"\x00" + struct.pack("!H", len(name)) + name
        exts += _ext(0, struct.pack("!H", len(lst)) + lst)
    if alpn:
        lst = b"".join(bytes([len(a)]) + a.encode() for a in alpn)
        exts += _ext(16, struct.pack("!H", len(lst)) + lst)
    if versions:
        v = b"".join(struct.pack("!H", x) for x in versions)
        exts += _ext(43, bytes([len(v)]) + v)
    if early:
        exts += _ext(42, b"")
    body = (b"\x03\x03" + rnd + bytes([len(session_id)]) + session_id
            + struct.pack("!H", 2 * len(suites)) + b"".join(struct.pack("!H", s) for s in suites)
            + b"\x01\x00" + struct.pack("!H", len(exts)) + exts)
    return hs(1, body)


def server_hello(rnd: bytes, suite: int, tls13: bool, alpn: str | None = None,
                 session_id: bytes = b"") -> bytes:
    exts = b""
    if tls13:
        exts += _ext(43, b"\x03\x04")
    if alpn:
        a = bytes([len(alpn)]) + alpn.encode()
        exts += _ext(16, struct.pack("!H", len(a)) + a)
    body = (b"\x03\x03" + rnd + bytes([len(session_id)]) + session_id + struct.pack("!H", suite)
            + b"\x00" + struct.pack("!H", len(exts)) + exts)
    return hs(2, body)


class Tls13Conn:
    """One TLS 1.3 connection: ``c_*``/``s_*`` give the bytes each side sends."""

    def __init__(self, suite: int = 0x1301, sni: str | None = "nats.example",
                 alpn: tuple[str, ...] = ("nats",), seed: int = 1, early: bool = False,
                 hrr: bool = False) -> None:
        r = random.Random(seed)
        n = 48 if suite == 0x1302 else 32
        self.suite = suite
        self.client_random = r.randbytes(32)
        self.server_random = r.randbytes(32)
        self.sni, self.alpn, self.early, self.hrr = sni, alpn, early, hrr
        self.secrets = {k: r.randbytes(n) for k in ("CLIENT_HANDSHAKE_TRAFFIC_SECRET",
                                                    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                                                    "CLIENT_TRAFFIC_SECRET_0",
                                                    "SERVER_TRAFFIC_SECRET_0",
                                                    "CLIENT_EARLY_TRAFFIC_SECRET")}
        s = self.secrets
        self.keys = {
            ("c", "early"): Tls13Keys(suite, s["CLIENT_EARLY_TRAFFIC_SECRET"]),
            ("c", "hs"): Tls13Keys(suite, s["CLIENT_HANDSHAKE_TRAFFIC_SECRET"]),
            ("s", "hs"): Tls13Keys(suite, s["SERVER_HANDSHAKE_TRAFFIC_SECRET"]),
            ("c", "app"): Tls13Keys(suite, s["CLIENT_TRAFFIC_SECRET_0"]),
            ("s", "app"): Tls13Keys(suite, s["SERVER_TRAFFIC_SECRET_0"]),
        }
        self.seq = {k: 0 for k in self.keys}

    def keylog(self, labels: tuple[str, ...] | None = None) -> str:
        rnd = self.client_random.hex()
        return "".join(f"{label} {rnd} {v.hex()}\n" for label, v in self.secrets.items()
                       if labels is None or label in labels)

    def seal(self, side: str, epoch: str, ctype: int, content: bytes) -> bytes:
        key = (side, epoch)
        out = self.keys[key].seal(self.seq[key], ctype, content)
        self.seq[key] += 1
        return out

    def c_hello(self) -> bytes:
        ch = client_hello(self.client_random, (0x1301, 0x1302, 0x1303), self.sni, self.alpn,
                          (0x0304, 0x0303), self.early, session_id=bytes(32))
        out = record(22, ch, 0x0301)
        if self.early:
            out += record(20, b"\x01") + self.seal("c", "early", 23, b"EARLY DATA\r\n")
        return out

    def s_flight(self) -> bytes:
        out = b""
        if self.hrr:
            hrr_random = bytes.fromhex(
                "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
            out += record(22, server_hello(hrr_random, self.suite, True, session_id=bytes(32)))
        out += record(22, server_hello(self.server_random, self.suite, True,
                                       session_id=bytes(32)))
        out += record(20, b"\x01")
        alpn = self.alpn[0] if self.alpn else None
        ee_ext = b""
        if alpn:
            a = bytes([len(alpn)]) + alpn.encode()
            ee_ext = struct.pack("!HH", 16, len(a) + 2) + struct.pack("!H", len(a)) + a
        ee = hs(8, struct.pack("!H", len(ee_ext)) + ee_ext)
        cert = hs(11, b"\x00" + b"\x00\x00\x10" + b"\x00\x00\x0b" + b"certificate" + b"\x00\x00")
        out += self.seal("s", "hs", 22, ee + cert)
        out += self.seal("s", "hs", 22, hs(15, b"\x04\x03\x00\x04sign") + hs(20, bytes(32)))
        return out

    def c_retry_hello(self) -> bytes:
        """The second ClientHello after a HelloRetryRequest (same random)."""
        ch = client_hello(self.client_random, (0x1301, 0x1302, 0x1303), self.sni, self.alpn,
                          (0x0304,), session_id=bytes(32))
        return record(22, ch)

    def c_finish(self) -> bytes:
        out = b"" if self.early else record(20, b"\x01")
        if self.early:
            out += self.seal("c", "early", 22, hs(5, b""))  # EndOfEarlyData
        return out + self.seal("c", "hs", 22, hs(20, bytes(32)))

    def app(self, side: str, data: bytes) -> bytes:
        return self.seal(side, "app", 23, data)

    def key_update(self, side: str) -> bytes:
        out = self.seal(side, "app", 22, hs(24, b"\x00"))
        self.keys[(side, "app")] = self.keys[(side, "app")].updated()
        self.seq[(side, "app")] = 0
        return out

    def alert(self, side: str) -> bytes:
        return self.seal(side, "app", 21, b"\x01\x00")


class Tls12Conn:
    """One TLS 1.2 connection under an AEAD suite."""

    def __init__(self, suite: int = 0xC02F, sni: str | None = "nats.example",
                 alpn: str | None = None, seed: int = 2) -> None:
        r = random.Random(seed)
        self.suite = suite
        self.client_random = r.randbytes(32)
        self.server_random = r.randbytes(32)
        self.master = r.randbytes(48)
        self.sni, self.alpn = sni, alpn
        ck, sk, civ, siv = tls12_key_block(suite, self.master, self.client_random,
                                           self.server_random)
        self.keys = {"c": Tls12Keys(suite, ck, civ), "s": Tls12Keys(suite, sk, siv)}
        self.seq = {"c": 0, "s": 0}

    def keylog(self) -> str:
        return f"CLIENT_RANDOM {self.client_random.hex()} {self.master.hex()}\n"

    def seal(self, side: str, ctype: int, data: bytes) -> bytes:
        frag = self.keys[side].seal(self.seq[side], ctype, 0x0303, data)
        self.seq[side] += 1
        return record(ctype, frag)

    def c_hello(self) -> bytes:
        alpn = (self.alpn,) if self.alpn else ()
        return record(22, client_hello(self.client_random, (self.suite, 0x002F), self.sni,
                                       alpn), 0x0301)

    def s_flight(self) -> bytes:
        msgs = (server_hello(self.server_random, self.suite, False, self.alpn)
                + hs(11, b"\x00\x00\x03\x00\x00\x00") + hs(12, b"kx" * 40) + hs(14, b""))
        return record(22, msgs)

    def c_finish(self) -> bytes:
        return (record(22, hs(16, b"\x41" + bytes(65))) + record(20, b"\x01")
                + self.seal("c", 22, hs(20, bytes(12))))

    def s_finish(self) -> bytes:
        return record(20, b"\x01") + self.seal("s", 22, hs(20, bytes(12)))

    def app(self, side: str, data: bytes) -> bytes:
        return self.seal(side, 23, data)
