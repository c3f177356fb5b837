"""The TLS layer on synthetic connections: detection (TLS first, STARTTLS), TLS 1.2 and 1.3
decryption, epochs (early data, HelloRetryRequest, key update), gaps and resync, missing
or wrong secrets, and what reaches the dissector (NATS rows from decrypted bytes)."""

from __future__ import annotations

from reassembly.events import Anomaly, StreamData, StreamGap, TlsConnection
from tests.tls.helpers import C, Dissected, S, assert_accounting, events, flow_pcap
from tests.tls.synth import Tls12Conn, Tls13Conn

INFO = b'INFO {"server_id":"x","version":"2.10.0","tls_required":true,"max_payload":1048576}\r\n'
NATS_C = [b'CONNECT {"verbose":false}\r\n', b"PUB a.b 5\r\nhello\r\n", b"PING\r\n"]
NATS_S = [b"PONG\r\n", b"MSG a.b 1 5\r\nhello\r\n"]


def _script13(conn: Tls13Conn, starttls: bool = True) -> list:
    script = [(S, INFO)] if starttls else []
    script += [(C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish())]
    for c, s in zip(NATS_C, NATS_S + [b""], strict=True):
        script.append((C, conn.app("c", c)))
        if s:
            script.append((S, conn.app("s", s)))
    script.append((C, conn.alert("c")))
    return script


def _plain(evs, direction) -> bytes:
    out = b""
    for e in evs:
        if isinstance(e, StreamData) and e.direction == direction:
            assert e.offset == len(out), "plaintext offsets are contiguous"
            out += e.data
    return out


def _summary(evs) -> TlsConnection:
    (s,) = [e for e in evs if isinstance(e, TlsConnection)]
    return s


def test_tls13_starttls_decrypts_to_the_nats_stream(tmp_path):
    conn = Tls13Conn()
    pcap = flow_pcap(tmp_path, _script13(conn))
    evs = events(pcap, conn.keylog())
    assert _plain(evs, C) == b"".join(NATS_C)
    assert _plain(evs, S) == INFO + b"".join(NATS_S)
    s = _summary(evs)
    assert s.decrypted and s.undecrypted_reason is None
    assert s.start_offsets == (0, len(INFO))
    assert s.tls_version == 0x0304 and s.cipher_suite == 0x1301
    assert s.sni == "nats.example" and s.alpn == ("nats",) and s.alpn_selected == "nats"
    assert s.app_bytes == (len(b"".join(NATS_C)), len(b"".join(NATS_S)))
    assert s.client_random == conn.client_random.hex()
    assert not [e for e in evs if isinstance(e, Anomaly)]


def test_tls13_pipeline_rows_tables_and_accounting(tmp_path):
    conn = Tls13Conn()
    pcap = flow_pcap(tmp_path, _script13(conn))
    keys = tmp_path / "k.log"
    keys.write_text(conn.keylog())
    d = Dissected(pcap, tmp_path / "out", keys)
    assert d.kinds() == []
    ops = [(r["direction"], r["op"]) for r in d.rows("nats")]
    assert ops.count(("s2c", "INFO")) == 1 and ("c2s", "PUB") in ops and ("s2c", "MSG") in ops
    (f,) = d.rows("flows")
    assert f["protocol"] == "nats" and f["layers"] == ["tls"]
    assert f["tls_sni"] == "nats.example" and f["tls_version"] == "TLS 1.3"
    assert f["stream_bytes_c2s"] == len(b"".join(NATS_C))
    assert_accounting(d)
    (t,) = d.rows("tls")
    assert t["decrypted"] and t["starttls"] and t["tls_start_s2c"] == len(INFO)
    assert t["cipher_suite"] == "TLS_AES_128_GCM_SHA256" and t["alpn"] == "nats"
    assert t["alerts"] == ["c2s warning close_notify"]
    # a row's provenance: frames of the packets that carried the records
    pub = next(r for r in d.rows("nats") if r["op"] == "PUB")
    assert pub["frame_first"] > 3 and pub["offset_start"] == len(NATS_C[0])


def test_tls13_without_keys_passes_bytes_through_and_reports_once(tmp_path):
    conn = Tls13Conn()
    script = _script13(conn)
    pcap = flow_pcap(tmp_path, script)
    d = Dissected(pcap, tmp_path / "out")
    kinds = d.kinds()
    assert kinds.count("tls.undecryptable") == 1
    a = next(a for a in d.rows("anomalies") if a["kind"] == "tls.undecryptable")
    assert conn.client_random.hex() in a["detail"] and "nats.example" in a["detail"]
    assert "ALPN nats" in a["detail"]
    (t,) = d.rows("tls")
    assert not t["decrypted"] and t["undecrypted_reason"] == "no-keys"
    (f,) = d.rows("flows")
    # transparent: the TCP byte counts stay, NATS sees INFO then TLS (nats.tls)
    tcp_c2s = sum(len(b) for dr, b in script if dr == C)
    assert f["stream_bytes_c2s"] == tcp_c2s and f["layers"] == ["tls-encrypted"]
    assert "nats.tls" in kinds
    assert_accounting(d)


def test_tls13_with_only_traffic_secrets_still_decrypts_application_data(tmp_path):
    conn = Tls13Conn()
    pcap = flow_pcap(tmp_path, _script13(conn, starttls=False))
    log = conn.keylog(("CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"))
    evs = events(pcap, log)
    assert _plain(evs, C) == b"".join(NATS_C)
    s = _summary(evs)
    assert s.decrypted and s.alpn_selected is None  # EncryptedExtensions unreadable


def test_tls13_key_update_and_early_data(tmp_path):
    conn = Tls13Conn(early=True, suite=0x1303)
    script = [(C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish()),
              (C, conn.app("c", b"PING\r\n")), (C, conn.key_update("c")),
              (C, conn.app("c", b"PUB x 1\r\ny\r\n")), (S, conn.key_update("s")),
              (S, conn.app("s", b"PONG\r\n"))]
    evs = events(flow_pcap(tmp_path, script), conn.keylog())
    assert _plain(evs, C) == b"EARLY DATA\r\nPING\r\nPUB x 1\r\ny\r\n"
    assert _plain(evs, S) == b"PONG\r\n"
    s = _summary(evs)
    assert s.key_updates == (1, 1) and s.early_data and s.cipher_suite == 0x1303


def test_tls13_hello_retry_request(tmp_path):
    conn = Tls13Conn(hrr=True, suite=0x1302)
    script = [(C, conn.c_hello()), (S, conn.s_flight()[:0])]
    script = [(C, conn.c_hello())]
    flight = conn.s_flight()
    hrr_len = 5 + int.from_bytes(flight[3:5], "big")
    script += [(S, flight[:hrr_len]), (C, conn.c_retry_hello()), (S, flight[hrr_len:]),
               (C, conn.c_finish()), (C, conn.app("c", b"PING\r\n"))]
    evs = events(flow_pcap(tmp_path, script), conn.keylog())
    assert _plain(evs, C) == b"PING\r\n"
    assert _summary(evs).hello_retry


def test_tls12_gcm_and_chacha(tmp_path):
    for suite in (0xC02F, 0xC030, 0xCCA8):
        conn = Tls12Conn(suite=suite, alpn="nats")
        script = [(S, INFO), (C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish()),
                  (S, conn.s_finish()), (C, conn.app("c", NATS_C[0])),
                  (C, conn.app("c", NATS_C[1])), (S, conn.app("s", NATS_S[0]))]
        evs = events(flow_pcap(tmp_path, script, name=f"{suite}.pcap"), conn.keylog())
        assert _plain(evs, C) == NATS_C[0] + NATS_C[1], hex(suite)
        assert _plain(evs, S) == INFO + NATS_S[0]
        s = _summary(evs)
        assert s.tls_version == 0x0303 and s.cipher_suite == suite and s.decrypted
        assert s.alpn_selected == "nats"


def test_tls12_cbc_suite_is_reported_unsupported(tmp_path):
    conn = Tls12Conn(suite=0xC02F)
    flight = conn.s_flight()
    flight = flight.replace(b"\xc0\x2f\x00", b"\xc0\x13\x00", 1)  # ServerHello picks CBC
    script = [(C, conn.c_hello()), (S, flight), (C, conn.c_finish())]
    evs = events(flow_pcap(tmp_path, script), conn.keylog())
    s = _summary(evs)
    assert not s.decrypted and s.undecrypted_reason == "unsupported-cipher"
    assert [e.kind for e in evs if isinstance(e, Anomaly)] == ["tls.undecryptable"]


def test_wrong_secret_is_auth_failed_gap(tmp_path):
    conn = Tls12Conn()
    script = [(C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish()),
              (S, conn.s_finish()), (C, conn.app("c", b"PING\r\n"))]
    bad = f"CLIENT_RANDOM {conn.client_random.hex()} {'00' * 48}\n"
    evs = events(flow_pcap(tmp_path, script), bad)
    kinds = [e.kind for e in evs if isinstance(e, Anomaly)]
    assert "tls.auth_failed" in kinds
    gaps = [e for e in evs if isinstance(e, StreamGap) and e.direction == C]
    assert gaps and gaps[0].reason == "tls-auth-failed" and gaps[0].nbytes == 6
    s = _summary(evs)
    assert s.undecrypted_reason == "partial" and s.undecrypted_records[0] == 2  # Finished too


def test_gap_inside_a_record_loses_that_record_only(tmp_path):
    conn = Tls13Conn()
    head = [(C, conn.c_hello()), (S, conn.s_flight()), (C, conn.c_finish())]
    r1 = conn.app("c", b"PUB a 3\r\none\r\n")
    r2 = conn.app("c", b"PUB a 3\r\ntwo\r\n")
    r3 = conn.app("c", b"PUB a 5\r\nthree\r\n")
    script = head + [(C, r1), (C, r2[:10]), (C, r2[10:20]), (C, r2[20:]), (C, r3)]
    # drop the middle piece of r2 from the capture: a TCP gap inside one record
    script[len(head) + 2] = (C, len(r2[10:20]))
    from dissectors.sdk.testing import Data, Gap

    items = [Gap(d, x) if isinstance(x, int) else Data(d, x) for d, x in script]
    evs = events(flow_pcap(tmp_path, items), conn.keylog())
    data = [e for e in evs if isinstance(e, StreamData | StreamGap) and e.direction == C]
    got = [(type(e).__name__, e.data if isinstance(e, StreamData) else e.nbytes) for e in data]
    assert got == [("StreamData", b"PUB a 3\r\none\r\n"), ("StreamGap", 14),
                   ("StreamData", b"PUB a 5\r\nthree\r\n")]
    assert _summary(evs).undecrypted_records == (1, 0)


def test_gap_across_records_resyncs_on_the_next_authenticating_record(tmp_path):
    from dissectors.sdk.testing import Data, Gap

    conn = Tls13Conn()
    head = [Data(C, conn.c_hello()), Data(S, conn.s_flight()), Data(C, conn.c_finish())]
    recs = [conn.app("c", f"PUB a 1\r\n{i}\r\n".encode()) for i in range(6)]
    lost = recs[1][7:] + recs[2] + recs[3][:4]
    script = head + [Data(C, recs[0] + recs[1][:7]), Gap(C, len(lost)),
                     Data(C, recs[3][4:] + recs[4]), Data(C, recs[5])]
    evs = events(flow_pcap(tmp_path, script), conn.keylog())
    plain = [e.data for e in evs if isinstance(e, StreamData) and e.direction == C]
    assert plain == [b"PUB a 1\r\n0\r\n", b"PUB a 1\r\n4\r\n", b"PUB a 1\r\n5\r\n"]
    kinds = [e.kind for e in evs if isinstance(e, Anomaly)]
    assert kinds == ["tls.lost_sync"]


def test_tls_on_any_port_and_other_plain_flows_untouched(tmp_path):
    from dissectors.sdk.testing import PcapFlow, write_pcap

    conn = Tls13Conn(alpn=("h2",))
    flows = [PcapFlow(_script13(conn, starttls=False), 9999),
             PcapFlow([(C, b"\x16\x03\x01 not a hello\r\n"), (S, b"ok\r\n")], 4222)]
    pcap = write_pcap(tmp_path / "p.pcap", flows)
    evs = events(pcap, conn.keylog())
    assert len([e for e in evs if isinstance(e, TlsConnection)]) == 1
    plain = [e.data for e in evs if isinstance(e, StreamData) and e.flow.server.port == 4222]
    assert plain == [b"\x16\x03\x01 not a hello\r\n", b"ok\r\n"]


def test_held_bytes_limit_passes_the_flow_on_undecrypted(tmp_path):
    from dataclasses import replace

    from reassembly.capture import open_capture
    from reassembly.engine import Reassembler
    from reassembly.limits import Limits
    from reassembly.tls import TlsLayer

    conn = Tls13Conn()
    early = conn.app("c", b"x" * 1500) + conn.app("c", b"y" * 1500)  # protected: held
    script = [(C, conn.c_hello()), (C, early), (S, conn.s_flight())]
    pcap = flow_pcap(tmp_path, script)
    limits = replace(Limits(), tls_max_held_bytes=1000)
    with open_capture(pcap) as reader:
        evs = list(TlsLayer(limits).process(Reassembler(limits).process(reader)))
    kinds = [e.kind for e in evs if isinstance(e, Anomaly)]
    assert kinds[:2] == ["limit.tls_held", "tls.undecryptable"]
    assert _summary(evs).undecrypted_reason == "no-server-hello"
    assert _plain(evs, C) == conn_bytes(script, C)  # passed on unchanged


def test_mid_stream_application_data_is_reported_as_tls(tmp_path):
    from dissectors.sdk.testing import PcapFlow, write_pcap

    conn = Tls13Conn()
    rec = conn.app("c", b"PING\r\n")
    pcap = write_pcap(tmp_path / "m.pcap", [PcapFlow([(C, rec), (S, rec)], 4443)])
    # drop the handshake packets: the capture starts in the middle of the connection
    data = pcap.read_bytes()
    import struct as _s

    out, pos, n = bytearray(data[:24]), 24, 0
    while pos < len(data):
        incl = _s.unpack_from("<I", data, pos + 8)[0]
        if n >= 3:
            out += data[pos : pos + 16 + incl]
        pos += 16 + incl
        n += 1
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(bytes(out))
    evs = events(cut)
    s = _summary(evs)
    assert not s.decrypted and s.undecrypted_reason == "no-handshake"


def conn_bytes(script, direction) -> bytes:
    return b"".join(b for d, b in script if d == direction)
