"""RFC 9001 Appendix A and RFC 9369 Appendix A: keys, header protection, packets."""

from __future__ import annotations

import pytest

from reassembly.quic.connection import unprotect_header
from reassembly.quic.crypto import (
    VERSION_1,
    VERSION_2,
    CipherSuite,
    PacketProtection,
    decode_packet_number,
    hkdf_extract,
    initial_protections,
    initial_secrets,
    retry_integrity_tag,
    version_params,
)
from reassembly.quic.frames import parse_frames
from reassembly.quic.packet import parse_long_header
from tests.quic import vectors as v

V1_SALT = bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")


def test_v1_initial_secrets_a1():
    assert hkdf_extract(V1_SALT, v.DCID).hex() == v.V1_INITIAL_SECRET
    client, server = initial_secrets(VERSION_1, v.DCID)
    assert client.hex() == v.V1_CLIENT_SECRET
    assert server.hex() == v.V1_SERVER_SECRET


def test_v1_initial_keys_a1():
    c, s = initial_protections(VERSION_1, v.DCID)
    assert (c.key.hex(), c.iv.hex(), c.hp.hex()) == (v.V1_CLIENT_KEY, v.V1_CLIENT_IV,
                                                      v.V1_CLIENT_HP)
    assert (s.key.hex(), s.iv.hex(), s.hp.hex()) == (v.V1_SERVER_KEY, v.V1_SERVER_IV,
                                                      v.V1_SERVER_HP)


def test_v2_initial_keys_rfc9369_a1():
    params = version_params(VERSION_2)
    assert hkdf_extract(params.initial_salt, v.DCID).hex() == v.V2_INITIAL_SECRET
    client, server = initial_secrets(VERSION_2, v.DCID)
    assert (client.hex(), server.hex()) == (v.V2_CLIENT_SECRET, v.V2_SERVER_SECRET)
    c, s = initial_protections(VERSION_2, v.DCID)
    assert (c.key.hex(), c.iv.hex(), c.hp.hex()) == (v.V2_CLIENT_KEY, v.V2_CLIENT_IV,
                                                      v.V2_CLIENT_HP)
    assert (s.key.hex(), s.iv.hex(), s.hp.hex()) == (v.V2_SERVER_KEY, v.V2_SERVER_IV,
                                                      v.V2_SERVER_HP)


def test_header_protection_masks_a2_a3_a5():
    c, s = initial_protections(VERSION_1, v.DCID)
    assert c.mask(bytes.fromhex(v.V1_CLIENT_SAMPLE)).hex() == v.V1_CLIENT_MASK
    assert s.mask(bytes.fromhex(v.V1_SERVER_SAMPLE)).hex() == v.V1_SERVER_MASK
    cc = PacketProtection(CipherSuite.CHACHA20_POLY1305_SHA256, v.CHACHA_SECRET,
                          version_params(VERSION_1))
    assert cc.mask(bytes.fromhex(v.V1_CHACHA_SAMPLE)).hex() == v.V1_CHACHA_MASK


def _open_long(prot, packet, largest=None):
    hdr = parse_long_header(packet)
    header, first, pn_len, truncated = unprotect_header(
        prot, packet, 0, hdr.pn_offset, hdr.end, True
    )
    pn = decode_packet_number(largest, truncated, pn_len * 8)
    return header, pn, prot.open(pn, header, packet[hdr.pn_offset + pn_len : hdr.end])


@pytest.mark.parametrize(
    "version,packet,header",
    [
        (VERSION_1, v.V1_CLIENT_PACKET, v.V1_CLIENT_HEADER),
        (VERSION_2, v.V2_CLIENT_PACKET, v.V2_CLIENT_HEADER),
    ],
)
def test_client_initial_decrypts_a2(version, packet, header):
    c, _ = initial_protections(version, v.DCID)
    got_header, pn, plain = _open_long(c, packet)
    assert got_header == header
    assert pn == 2
    assert plain == v.CLIENT_PAYLOAD
    frames = parse_frames(plain)
    assert frames.types == ["CRYPTO", "PADDING"]
    assert frames.crypto[0][0] == 0
    assert frames.crypto[0][1] == v.CLIENT_CRYPTO_FRAME[4:]


@pytest.mark.parametrize(
    "version,packet,header",
    [
        (VERSION_1, v.V1_SERVER_PACKET, v.V1_SERVER_HEADER),
        (VERSION_2, v.V2_SERVER_PACKET, v.V2_SERVER_HEADER),
    ],
)
def test_server_initial_decrypts_a3(version, packet, header):
    _, s = initial_protections(version, v.DCID)
    got_header, pn, plain = _open_long(s, packet)
    assert got_header == header
    assert pn == 1
    assert plain == v.SERVER_PAYLOAD
    assert parse_frames(plain).types == ["ACK", "CRYPTO"]


def test_client_initial_tampered_fails_auth():
    c, _ = initial_protections(VERSION_1, v.DCID)
    bad = bytearray(v.V1_CLIENT_PACKET)
    bad[-40] ^= 1
    assert _open_long(c, bytes(bad))[2] is None
    bad = bytearray(v.V1_CLIENT_PACKET)
    bad[7] ^= 1  # inside the DCID: only the associated data catches it
    hdr = parse_long_header(bytes(bad))
    header, _, pn_len, trunc = unprotect_header(c, bytes(bad), 0, hdr.pn_offset, hdr.end, True)
    assert c.open(2, header, bytes(bad[hdr.pn_offset + pn_len :])) is None


@pytest.mark.parametrize(
    "version,key,iv,hp,ku,packet",
    [
        (VERSION_1, v.V1_CHACHA_KEY, v.V1_CHACHA_IV, v.V1_CHACHA_HP, v.V1_CHACHA_KU,
         v.V1_CHACHA_PACKET),
        (VERSION_2, v.V2_CHACHA_KEY, v.V2_CHACHA_IV, v.V2_CHACHA_HP, v.V2_CHACHA_KU,
         v.V2_CHACHA_PACKET),
    ],
)
def test_chacha20_short_header_a5(version, key, iv, hp, ku, packet):
    prot = PacketProtection(CipherSuite.CHACHA20_POLY1305_SHA256, v.CHACHA_SECRET,
                            version_params(version))
    assert (prot.key.hex(), prot.iv.hex(), prot.hp.hex()) == (key, iv, hp)
    nxt = prot.next_generation()
    assert nxt.secret.hex() == ku
    assert nxt.hp == prot.hp  # header protection keys are not updated
    header, first, pn_len, truncated = unprotect_header(prot, packet, 0, 1, len(packet), False)
    assert header == v.CHACHA_HEADER and pn_len == 3
    pn = decode_packet_number(v.CHACHA_PN - 1, truncated, 24)
    assert pn == v.CHACHA_PN
    assert prot.open(pn, header, packet[1 + pn_len :]) == v.CHACHA_PAYLOAD
    assert parse_frames(v.CHACHA_PAYLOAD).types == ["PING"]


def test_seal_reproduces_a5_packet():
    from tests.quic.helpers import seal_short

    prot = PacketProtection(CipherSuite.CHACHA20_POLY1305_SHA256, v.CHACHA_SECRET,
                            version_params(VERSION_1))
    assert seal_short(prot, b"", v.CHACHA_PN, v.CHACHA_PAYLOAD, pn_len=3) == v.V1_CHACHA_PACKET


@pytest.mark.parametrize("version,packet", [(VERSION_1, v.V1_RETRY), (VERSION_2, v.V2_RETRY)])
def test_retry_integrity_tag_a4(version, packet):
    hdr = parse_long_header(packet)
    assert hdr.packet_type == "retry"
    assert hdr.token == b"token"
    assert hdr.scid == v.SERVER_SCID
    assert retry_integrity_tag(version, v.DCID, packet[:-16]) == packet[-16:]
    assert retry_integrity_tag(version, b"\x00" + v.DCID[1:], packet[:-16]) != packet[-16:]


def test_packet_number_decoding_rfc9000_a3():
    assert decode_packet_number(0xA82F30EA, 0x9B32, 16) == 0xA82F9B32
    assert decode_packet_number(None, 0, 8) == 0
    assert decode_packet_number(255, 0x00, 8) == 256  # wraps forward
    assert decode_packet_number(300, 0xFF, 8) == 255  # a late packet, not 511


def test_v2_long_header_type_bits():
    assert parse_long_header(v.V2_CLIENT_PACKET).packet_type == "initial"
    assert parse_long_header(v.V2_SERVER_PACKET).packet_type == "initial"
    assert parse_long_header(v.V1_SERVER_PACKET).packet_type == "initial"
