"""samples/stan-basic.pcap (real nats-server, emulated STAN server and clients on nats-py)
through reassembly → NATS dissector → payload dispatch, compared with the sender-side
truth the recorder wrote (samples/record_stan.py, samples/README.md)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from dissectors.schema import rows_to_batch, validate_batch
from dissectors.stan import STAN_TABLE
from tests.stan.capture_harness import SAMPLES, dispatch_capture

PCAP = SAMPLES / "stan-basic.pcap"
TRUTH = json.loads((SAMPLES / "stan-basic.truth.json").read_text())


@pytest.fixture(scope="module")
def carried():
    out, nats_anomalies = dispatch_capture(PCAP)
    assert nats_anomalies == []
    return out


def stan_rows(carried, port=None):
    for c in carried:
        if port is None or c.client_port == port:
            for r in c.records:
                if r.table == "stan":
                    yield r


def framed_sha256(datas) -> tuple[int, int, str]:
    h = hashlib.sha256()
    n = total = 0
    for d in datas:
        h.update(len(d).to_bytes(8, "big"))
        h.update(d)
        n += 1
        total += len(d)
    return n, total, h.hexdigest()


def test_truth_file_describes_this_capture():
    assert TRUTH["problems"] == []
    assert hashlib.sha256(PCAP.read_bytes()).hexdigest() == TRUTH["pcap"]["sha256"]
    assert TRUTH["tcpdump"]["dropped_by_kernel"] == 0


def test_every_carried_message_is_one_clean_stan_row(carried):
    assert carried
    for c in carried:
        kinds = [r.table for r in c.records]
        assert kinds == ["stan"], (c.nats.values["subject"], c.records)
        v = c.records[0].values
        assert not v["malformed"] and v["unknown_fields"] == []


@pytest.mark.parametrize("name", sorted(TRUTH["connections"]))
def test_message_types_per_connection_match_truth(carried, name):
    conn = TRUTH["connections"][name]
    got = {"c2s": Counter(), "s2c": Counter(), "c2s_inf": Counter(), "s2c_inf": Counter()}
    for r in stan_rows(carried, conn["client_port"]):
        d = r.direction.short
        got[d][r.values["msg_type"]] += 1
        if r.values["inferred"]:
            got[d + "_inf"][r.values["msg_type"]] += 1
    assert dict(got["c2s"]) == conn["sent"]
    assert dict(got["s2c"]) == conn["received"]
    assert dict(got["c2s_inf"]) == conn["sent_inferred"]
    assert dict(got["s2c_inf"]) == conn["received_inferred"]


@pytest.mark.parametrize("name", sorted(TRUTH["connections"]))
def test_data_digests_match_truth(carried, name):
    conn = TRUTH["connections"][name]
    assert conn["data"] or name == "client-3"
    for key, want in conn["data"].items():
        side, kind = key.split(".")
        direction = "c2s" if side == "sent" else "s2c"
        rows = [r.values for r in stan_rows(carried, conn["client_port"])
                if r.direction.short == direction and r.values["msg_type"] == kind]
        for v in rows:
            assert v["data_len"] == len(v["data"]) and not v["data_truncated"]
            assert v["data_sha256"] == hashlib.sha256(v["data"]).hexdigest()
        n, total, digest = framed_sha256(v["data"] for v in rows)
        assert (n, total, digest) == (want["messages"], want["bytes"], want["sha256"]), key


def test_crc_status_follows_the_server_configuration(carried):
    crc_channels = {ch for s in TRUTH["servers"].values() for ch in s["crc_channels"]}
    seen = Counter()
    for r in stan_rows(carried):
        v = r.values
        if v["msg_type"] == "MsgProto":
            # CRC-32 of empty data is 0, which proto3 does not put on the wire
            want = "ok" if v["channel"] in crc_channels and v["data"] else "absent"
            assert v["crc_status"] == want
            seen[want] += 1
        else:
            assert v.get("crc_status") is None
    assert seen["ok"] and seen["absent"]


def test_typing_sources(carried):
    by = Counter((r.values["typed_by"], r.values["inferred"]) for r in stan_rows(carried))
    assert set(by) == {("default_subject", False), ("learned", False), ("learned", True),
                       ("inference", True)}
    # only ConnectRequests on the default discover subject rely on a STAN default subject:
    # every client's ConnectResponse was captured, so everything else is learned
    assert {r.values["msg_type"] for r in stan_rows(carried)
            if r.values["typed_by"] == "default_subject"} == {"ConnectRequest"}


def test_error_replies_decoded(carried):
    errors = {(r.values["msg_type"], r.values["error"]) for r in stan_rows(carried)
              if r.values.get("error")}
    assert errors == {
        ("ConnectResponse", "stan: clientID already registered"),
        ("PubAck", "stan: invalid publish request"),
        ("SubscriptionResponse", "stan: invalid subject"),
        ("SubscriptionResponse", "stan: invalid unsubscribe request"),
        ("CloseResponse", "stan: unknown clientID"),
    }


def test_redelivery_and_custom_prefix_visible(carried):
    rows = [r.values for r in stan_rows(carried)]
    redelivered = [v for v in rows if v["msg_type"] == "MsgProto" and v["redelivered"]]
    assert redelivered and all(v["redelivery_count"] == 1 for v in redelivered)
    b = TRUTH["servers"]["stan-server-b"]
    cr = [v for v in rows if v["msg_type"] == "ConnectResponse" and v["pub_prefix"] == b[
        "pub_prefix"]]
    assert cr and all(v["inferred"] for v in cr)
    assert any(v["msg_type"] == "Ack" and v["typed_by"] == "learned" for v in rows)


def test_rows_validate(carried):
    env = {"capture_id": "c", "flow_id": 1, "direction": "c2s"}
    rows = [{**env, "record_id": i, **r.values} for i, r in enumerate(stan_rows(carried))]
    validate_batch(STAN_TABLE, rows_to_batch(STAN_TABLE, rows))


def _summary(carried):
    return [(c.client_port, c.nats.offset_start, r.table, r.offset_start, r.offset_end,
             r.frame_first, r.frame_last, r.values) for c in carried for r in c.records]


@pytest.mark.parametrize("seed", [1, 2])
def test_chunking_invariance(carried, seed):
    rechunked, anomalies = dispatch_capture(PCAP, rechunk_seed=seed)
    assert anomalies == []
    assert _summary(rechunked) == _summary(carried)
