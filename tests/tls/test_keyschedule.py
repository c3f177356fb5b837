"""The shared TLS 1.3 key schedule against RFC 8448 §3, the TLS 1.2 PRF against the
vector circulated on the TLS working group list, and record protection round trips."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives import hashes

from reassembly.tls.records import (
    TLS12_AEAD,
    Tls12Keys,
    Tls13Keys,
    alert_text,
    is_plausible_header,
    suite_name,
    tls12_key_block,
    tls12_prf,
)
from reassembly.tlscommon import (
    AeadKeys,
    hkdf_expand_label,
    hkdf_extract,
    parse_server_hello,
)

H = bytes.fromhex
EMPTY_HASH = hashlib.sha256(b"").digest()

# RFC 8448 §3 "Simple 1-RTT Handshake" (TLS_AES_128_GCM_SHA256, x25519)
ECDHE = H("8bd4054fb55b9d63fdfbacf9f04b9f0d35e6d63f537563efd46272900f89492d")
EARLY = H("33ad0a1c607ec03b09e6cd9893680ce210adf300aa1f2660e1b22e10f170f92a")
DERIVED = H("6f2615a108c702c5678f54fc9dbab69716c076189c48250cebeac3576c3611ba")
HANDSHAKE = H("1dc826e93606aa6fdc0aadc12f741b01046aa6b99f691ed221a9f0ca043fbeac")
TH_CH_SH = H("860c06edc07858ee8e78f0e7428c58edd6b43f2ca3e6e95f02ed063cf0e1cad8")
C_HS = H("b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21")
S_HS = H("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38")
MASTER = H("18df06843d13a08bf2a449844c5f8a478001bc4d4c627984d5a41da8d0402919")
TH_SF = H("9608102a0f1ccc6db6250b7b7e417b1a000eaada3daae4777a7686c9ff83df13")
C_AP = H("9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5")
S_AP = H("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643")
SERVER_HELLO_RECORD = H(
    "160303005a020000560303a6af06a4121860dc5e6e60249cd34c95930c8ac5cb1434dac155772ed3e2692800"
    "130100002e00330024001d0020c9828876112095fe66762bdbf7c672e156d6cc253b833df1dd69b1b04e751f"
    "0f002b00020304"
)


def test_rfc8448_early_and_handshake_secrets():
    early = hkdf_extract(bytes(32), bytes(32))
    assert early == EARLY
    derived = hkdf_expand_label(early, b"derived", EMPTY_HASH, 32)
    assert derived == DERIVED
    assert hkdf_extract(derived, ECDHE) == HANDSHAKE


def test_rfc8448_traffic_secrets():
    assert hkdf_expand_label(HANDSHAKE, b"c hs traffic", TH_CH_SH, 32) == C_HS
    assert hkdf_expand_label(HANDSHAKE, b"s hs traffic", TH_CH_SH, 32) == S_HS
    derived = hkdf_expand_label(HANDSHAKE, b"derived", EMPTY_HASH, 32)
    master = hkdf_extract(derived, bytes(32))
    assert master == MASTER
    assert hkdf_expand_label(master, b"c ap traffic", TH_SF, 32) == C_AP
    assert hkdf_expand_label(master, b"s ap traffic", TH_SF, 32) == S_AP


def test_rfc8448_record_keys_through_the_shared_aead_keys():
    s = AeadKeys(0x1301, S_HS)
    assert (s.key.hex(), s.iv.hex()) == ("3fce516009c21727d0f2e4e86ee403bc",
                                         "5d313eb2671276ee13000b30")
    c = Tls13Keys(0x1301, C_HS).keys
    assert (c.key.hex(), c.iv.hex()) == ("dbfaa693d1762c5b666af5d950258d01",
                                         "5bd3c71b836e0b76bb73265f")
    # the Finished key (RFC 8446 §4.4.4) from the same HKDF-Expand-Label
    assert hkdf_expand_label(S_HS, b"finished", b"", 32).hex() == (
        "008d3b66f816ea559f96b537e885c31fc068bf492c652f01f288a1d8cdc19fc8")


def test_rfc8448_server_hello_parses():
    assert is_plausible_header(SERVER_HELLO_RECORD)
    body = SERVER_HELLO_RECORD[9:]
    sh = parse_server_hello(body)
    assert sh.cipher_suite == 0x1301 and sh.selected_version == 0x0304
    assert not sh.hello_retry and sh.alpn is None


def test_tls12_prf_sha256_vector():
    out = tls12_prf(H("9bbe436ba940f017b17652849a71db35"), b"test label",
                    H("a0ba9f936cda311827a6f796ffd5198c"), 100)
    assert out.hex() == (
        "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9a46b"
        "4e14baf9af0fa022f7077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa48082d122ee"
        "42c5a72e5a5110fff70187347b66")


def test_tls12_key_block_layout():
    master, cr, sr = bytes(range(48)), b"c" * 32, b"s" * 32
    ck, sk, civ, siv = tls12_key_block(0xC02F, master, cr, sr)
    block = tls12_prf(master, b"key expansion", sr + cr, 40, hashes.SHA256)
    assert ck + sk + civ + siv == block
    assert (len(ck), len(civ)) == (16, 4)
    ck, _, civ, _ = tls12_key_block(0xCCA8, master, cr, sr)
    assert (len(ck), len(civ)) == (32, 12)
    ck, _, _, _ = tls12_key_block(0xC030, master, cr, sr)
    assert len(ck) == 32


@pytest.mark.parametrize("suite", sorted(TLS12_AEAD))
def test_tls12_record_round_trip(suite):
    ck, _sk, civ, _siv = tls12_key_block(suite, bytes(48), b"c" * 32, b"s" * 32)
    keys = Tls12Keys(suite, ck, civ)
    frag = keys.seal(7, 23, 0x0303, b"PUB a 1\r\nx\r\n")
    assert keys.open(7, 23, 0x0303, frag) == b"PUB a 1\r\nx\r\n"
    assert keys.open(8, 23, 0x0303, frag) is None  # the sequence number is authenticated
    assert keys.open(7, 22, 0x0303, frag) is None  # and the content type
    assert len(frag) == 12 + keys.overhead()
    if not keys.chacha:
        assert keys.explicit_seq(frag) == 7


@pytest.mark.parametrize("suite", [0x1301, 0x1302, 0x1303])
def test_tls13_record_round_trip_and_key_update(suite):
    keys = Tls13Keys(suite, bytes(48 if suite == 0x1302 else 32))
    rec = keys.seal(3, 23, b"hello")
    assert rec[:3] == b"\x17\x03\x03"
    assert keys.open(3, rec[:5], rec[5:]) == (23, b"hello")
    assert keys.open(4, rec[:5], rec[5:]) is None
    nxt = keys.updated()
    assert nxt.keys.key != keys.keys.key
    assert nxt.open(0, *_split(nxt.seal(0, 22, b"\x18\x00\x00\x01\x00"))) == (
        22, b"\x18\x00\x00\x01\x00")


def _split(rec: bytes) -> tuple[bytes, bytes]:
    return rec[:5], rec[5:]


def test_names_and_alerts():
    assert suite_name(0xC02F) == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
    assert suite_name(0x1301) == "TLS_AES_128_GCM_SHA256"
    assert suite_name(0xFFFF) == "0xffff"
    assert alert_text(b"\x02\x28") == "fatal handshake_failure"
    assert alert_text(b"\x01\x00") == "warning close_notify"
    assert alert_text(b"\x01") == "malformed (1 bytes)"
    assert not is_plausible_header(b"\x17\x03\x03\xff\xff")
    assert not is_plausible_header(b"GET / HTTP/1.1")
