"""The ``jetstream_api`` table: `$JS.API` requests and their responses, from subjects
(literals) and from a real JetStream workload (samples/nats-js.pcap) whose every API
request and response nats-py made was recorded client-side (``api`` in the truth)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dissectors.api import Bindings, CarriedMessage, Direction
from dissectors.nats.jetstream import JetStreamApiDissector, parse_api_subject
from tests.tls.helpers import Dissected

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TRUTH = json.loads((SAMPLES / "nats-js.truth.json").read_text())


@pytest.mark.parametrize("subject, want", [
    ("$JS.API.STREAM.CREATE.ORDERS", {"api": "STREAM.CREATE", "domain": None,
                                      "stream": "ORDERS"}),
    ("$JS.API.CONSUMER.CREATE.ORDERS.proc.orders.>", {
        "api": "CONSUMER.CREATE", "domain": None, "stream": "ORDERS", "consumer": "proc",
        "filter_subject": "orders.>"}),
    ("$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.proc", {
        "api": "CONSUMER.DURABLE.CREATE", "domain": None, "stream": "ORDERS",
        "consumer": "proc"}),
    ("$JS.API.CONSUMER.MSG.NEXT.ORDERS.proc", {
        "api": "CONSUMER.MSG.NEXT", "domain": None, "stream": "ORDERS", "consumer": "proc"}),
    ("$JS.API.CONSUMER.NAMES.ORDERS", {"api": "CONSUMER.NAMES", "domain": None,
                                       "stream": "ORDERS"}),
    ("$JS.hub.API.STREAM.INFO.ORDERS", {"api": "STREAM.INFO", "domain": "hub",
                                        "stream": "ORDERS"}),
    ("$JS.API.INFO", {"api": "INFO", "domain": None}),
    ("$JS.API.STREAM.FROBNICATE.X", {"api": "UNKNOWN", "domain": None}),
    ("$JS.ACK.ORDERS.proc.1.1.1.1.0", None),
    ("orders.1", None),
])
def test_api_subjects(subject, want):
    assert parse_api_subject(subject) == want


@pytest.fixture(scope="module", params=[True, False], ids=["fast", "reference"])
def js_run(request, tmp_path_factory) -> Dissected:
    return Dissected(SAMPLES / "nats-js.pcap", tmp_path_factory.mktemp("api") / "out",
                     fast=request.param)


def test_every_api_call_and_response_matches_the_client(js_run):
    rows = js_run.rows("jetstream_api")
    assert js_run.rows("anomalies") == []
    requests = [r for r in rows if r["kind"] == "request"
                and r["api"] != "CONSUMER.MSG.NEXT"]  # fetch: nats-py does not use request
    responses = [r for r in rows if r["kind"] == "response"]
    api = TRUTH["api"]
    assert [r["request_subject"] for r in requests] == [a["subject"] for a in api]
    assert [(r["request_subject"], r["response_type"], r["error_code"], r["err_code"])
            for r in responses] == [
        (a["subject"], a["type"], a["status"], a["error_code"]) for a in api]
    nats = {r["record_id"]: r for r in js_run.rows("nats")}
    # the rows' parents are the NATS messages with the bytes the client sent / read
    assert [nats[r["parent_record_id"]]["payload_sha256"] for r in requests] == [
        a["request_sha256"] for a in api]
    assert [nats[r["parent_record_id"]]["payload_sha256"] for r in responses] == [
        a["response_sha256"] for a in api]
    # stream / consumer lifecycle as queries: created, updated, deleted; the 404s
    assert [(r["api"], r["stream"], r["consumer"]) for r in responses
            if r["err_code"] is None and r["api"].endswith(("CREATE", "UPDATE", "DELETE"))] \
        == [("STREAM.CREATE", "ORDERS", None), ("STREAM.UPDATE", "ORDERS", None),
            ("CONSUMER.CREATE", "ORDERS", "proc"), ("CONSUMER.DELETE", "ORDERS", "proc"),
            ("STREAM.DELETE", "ORDERS", None)]
    assert [(r["api"], r["stream"], r["err_code"], r["error_description"]) for r in responses
            if r["err_code"] is not None] == [
        ("STREAM.INFO", "NOPE", 10059, "stream not found"),
        ("CONSUMER.INFO", "ORDERS", 10014, "consumer not found")]
    pulls = [r for r in rows if r["api"] == "CONSUMER.MSG.NEXT"]
    assert [(r["kind"], r["stream"], r["consumer"]) for r in pulls] == [
        ("request", "ORDERS", "proc")] * 2


class _Bindings(Bindings):
    def __init__(self) -> None:
        self.exact: dict[str, tuple[str, str]] = {}

    def bind_subject(self, subject: str, dissector: str, hint: str) -> None:
        self.exact[subject] = (dissector, hint)

    def bind_pattern(self, pattern: str, dissector: str, hint: str) -> None:
        raise AssertionError("not used")

    def unbind_subject(self, subject: str) -> None:
        self.exact.pop(subject, None)


def _msg(op: str, subject: str, reply: str | None, payload: bytes, flow: int):
    return CarriedMessage("nats", op, subject, reply, None, None, payload, Direction.C2S,
                          flow, 0, 10, 0, 0, 1, 1)


def test_a_response_counts_only_on_the_connection_that_asked():
    """flow_local: the rows depend on the request's flow alone (parallel light split)."""
    b = _Bindings()
    req = _msg("PUB", "$JS.API.STREAM.INFO.X", "_INBOX.a.1", b"", flow=7)
    [row] = JetStreamApiDissector.decode(None, b, req, "request")
    assert (row.values["api"], row.values["stream"], row.values["reply_to"]) == (
        "STREAM.INFO", "X", "_INBOX.a.1")
    name, hint = b.exact["_INBOX.a.1"]
    body = b'{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":404,' \
           b'"err_code":10059,"description":"stream not found"}}'
    other = _msg("MSG", "_INBOX.a.1", None, body, flow=8)
    assert JetStreamApiDissector.decode(None, b, other, hint) == []
    assert "_INBOX.a.1" in b.exact  # still waiting for the real response
    [resp] = JetStreamApiDissector.decode(None, b, _msg("MSG", "_INBOX.a.1", None, body, 7),
                                          hint)
    assert resp.values == {
        "kind": "response", "api": "STREAM.INFO", "request_subject": "$JS.API.STREAM.INFO.X",
        "stream": "X", "json": body.decode(), "bad_json": False,
        "response_type": "io.nats.jetstream.api.v1.stream_info_response", "error_code": 404,
        "err_code": 10059, "error_description": "stream not found"}
    assert b.exact == {} and JetStreamApiDissector.flow_local
    [bad] = JetStreamApiDissector.decode(None, b, _msg("PUB", "$JS.API.INFO", None, b"{x", 7),
                                         "request")
    assert (bad.values["api"], bad.values["bad_json"], bad.values["json"]) == ("INFO", True,
                                                                               "{x")
