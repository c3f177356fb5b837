"""The in-order CRYPTO bytes a QUIC handshake message is assembled from draw from the
run's memory budget (issue 17 part 2).

A CRYPTO stream (per connection, encryption level and sender) holds the start of a TLS
handshake message until all of it is in: up to ``quic_max_crypto_bytes`` (256 KiB).  Each
is under that limit, but thousands of connections with an unfinished ClientHello add up
past the run's budget.  Past it the least recently fed stream gives its partial message
up (a ``limit.memory`` anomaly) and is read no further; the connection's packets are
still decoded.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

from reassembly.events import Anomaly
from reassembly.limits import Limits
from reassembly.quic.connection import (
    CLIENT,
    CRYPTO_HOLD_OVERHEAD_BYTES,
    SPACE_INITIAL,
    QuicConnection,
)
from reassembly.quic.crypto import VERSION_1, initial_protections
from reassembly.quic.keylog import KeyLog
from samples.hostile.generate import udp_frame
from tests.hostile.conftest import dissect_one
from tests.quic.helpers import crypto_frame, make_flow, seal_long
from tests.reassembly.synth import PcapWriter

PEAK_MB = 400  # the target, interpreter and pyarrow included


def _hello_head(body_bytes: int) -> bytes:
    """A ClientHello handshake header announcing ``body_bytes``."""
    return b"\x01" + body_bytes.to_bytes(3, "big")


def _conn(limits: Limits, flow_id: int, events: list) -> QuicConnection:
    flow = make_flow(flow_id, client=("10.0.0.1", 50000 + flow_id))
    return QuicConnection(flow, limits, events.append, KeyLog(), lambda *a: None)


def test_a_partial_handshake_message_draws_from_the_budget_and_is_given_up_past_it():
    """Two connections each holding 100,000 bytes of a 200,004-byte ClientHello, a
    budget with room for one: the first (the least recently fed) gives its message up
    with a ``limit.memory`` anomaly and reads no more of that stream; the second goes on
    holding; everything held is given back when the connections close.  (No overlap-
    check windows here: the budget would give those up first, reassembly.tcp._Window.)"""
    limits = replace(Limits(), memory_limit_bytes=150_000, overlap_check_bytes=0).with_budget()
    budget = limits.budget
    assert budget is not None
    events: list = []
    a, b = _conn(limits, 0, events), _conn(limits, 1, events)
    part = _hello_head(200_000) + b"a" * 99_996
    a._crypto_data(SPACE_INITIAL, CLIENT, 0, part)
    assert budget.used == 100_000 + CRYPTO_HOLD_OVERHEAD_BYTES and events == []
    b._crypto_data(SPACE_INITIAL, CLIENT, 0, part)  # 201,024 > 150,000: a's goes
    assert budget.used == 100_000 + CRYPTO_HOLD_OVERHEAD_BYTES and budget.releases == 1
    (ev,) = events
    assert isinstance(ev, Anomaly) and ev.kind == "limit.memory" and ev.flow is a.flow
    assert ev.detail == (
        "memory budget of 150000 bytes reached: gave up the client CRYPTO stream (Initial) "
        "of QUIC connection 10.0.0.1:50000->10.0.0.2:443, the least recently fed: dropped "
        "the 100000 bytes held of a 200004-byte TLS handshake message (type 1); its TLS "
        "handshake messages are not read")
    a._crypto_data(SPACE_INITIAL, CLIENT, 100_000, b"a" * 50_000)  # read no further
    assert budget.used == 100_000 + CRYPTO_HOLD_OVERHEAD_BYTES and len(events) == 1
    b._crypto_data(SPACE_INITIAL, CLIENT, 100_000, b"b" * 20_000)
    assert budget.used == 120_000 + CRYPTO_HOLD_OVERHEAD_BYTES
    for conn in (a, b):
        conn.close(0, 0, "flow-end")
    assert budget.used == 0 and len(events) == 1


def test_a_message_read_whole_gives_its_bytes_back():
    """A message completed (here one the ClientHello parser rejects) ends the stream:
    the budget holds nothing for it, nor for CRYPTO bytes still waiting out of order."""
    limits = replace(Limits(), memory_limit_bytes=1 << 20).with_budget()
    budget = limits.budget
    assert budget is not None
    events: list = []
    conn = _conn(limits, 0, events)
    msg = _hello_head(5000) + b"z" * 5000
    conn._crypto_data(SPACE_INITIAL, CLIENT, 20_000, b"later" * 100)  # out of order
    conn._crypto_data(SPACE_INITIAL, CLIENT, 0, msg[:3000])
    assert budget.used > 3000
    conn._crypto_data(SPACE_INITIAL, CLIENT, 3000, msg[3000:])
    assert [e.kind for e in events if isinstance(e, Anomaly)] == ["quic.tls_error"]
    assert budget.used == 0


# ------------------------------------------------------------------ whole pipeline


def write_unfinished_client_hellos(path: Path, conns: int, held: int = 200_000,
                                   packet: int = 8000) -> dict:
    """``conns`` QUIC connections (one UDP flow each, to port 443) whose client sends, in
    Initial packets of ``packet`` CRYPTO bytes, the first ``held`` bytes of a ClientHello
    announcing 250,000 (under the 256 KiB per-stream limit) and nothing more."""
    w = PcapWriter(path)
    client, server = bytes([10, 2, 0, 1]), bytes([10, 2, 0, 2])
    data = _hello_head(250_000) + bytes(held - 4)
    t = 1_700_000_000_000_000
    for c in range(conns):
        dcid = struct.pack("!II", 0x51C0_0000, c)
        prot = initial_protections(VERSION_1, dcid)[0]
        for pn, off in enumerate(range(0, held, packet)):
            pkt = seal_long(prot, 0, dcid, b"", pn, crypto_frame(off, data[off : off + packet]),
                            token=b"")
            t += 10
            w.write(t, udp_frame(client, server, 20_000 + c % 40_000, 443, pkt))
    w.close()
    return {"packets": conns * len(range(0, held, packet))}


def test_many_unfinished_client_hellos_stay_within_the_budget(tmp_path):
    """2,000 QUIC connections each holding 200 KB of an unfinished ClientHello (400 MB
    of partial messages, each under the 256 KiB limit) at default settings: the oldest
    give theirs up, the peak stays under the target, every packet is still decoded."""
    conns = 2000
    path = tmp_path / "hellos.pcap"
    facts = write_unfinished_client_hellos(path, conns)
    r = dissect_one(path, tmp_path, rows_per_kind=1, max_flow_rows=0)
    print(r["peak_mb"], r["cpu_s"], r["anomalies"], r["rows"].get("quic_packets"))
    assert r["peak_mb"] <= PEAK_MB, r["peak_mb"]
    assert r["status"] in ("clean", "degraded") and not r["accounting_errors"]
    assert r["flow_count"] == conns
    # given up: the CRYPTO streams' overlap-check windows first (tier TIER_WINDOWS), then
    # partial ClientHellos
    hellos = sum(n for p, n in r["anomaly_patterns"].items()
                 if "gave up the client CRYPTO stream (Initial) of QUIC connection" in p
                 and "dropped the N bytes held of a N-byte TLS handshake message (type N)" in p)
    windows = sum(n for p, n in r["anomaly_patterns"].items()
                  if "dropped the overlap-check window of this direction" in p)
    assert hellos > conns // 2, r["anomaly_patterns"]  # 400 MB against an 80 MiB budget
    assert hellos + windows == r["anomalies"]["limit.memory"], r["anomaly_patterns"]
    assert r["rows"]["quic_packets"] == facts["packets"]
