"""`msgcap flows` and `msgcap follow` on a real nats-server + nats-py capture.

Ground truth was counted on the client side by the recorder (samples/README.md):
per connection the client port and a SHA-256 over every byte nats-py wrote to and read
from its socket.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from analyzer.cli import EXIT_CLEAN, EXIT_FAILED, main
from tests.conftest import SHARED

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
PCAP = SAMPLES / "nats-basic.pcap"
TRUTH = json.loads((SAMPLES / "nats-basic.truth.json").read_text())["connections"]


def _flows(capture) -> list[dict]:
    assert main(["flows", "--json", str(PCAP)]) == EXIT_CLEAN
    return json.loads(capture.readouterr().out)


def test_flows_match_client_side_truth(capsys):
    flows = _flows(capsys)
    by_port = {f["client_port"]: f for f in flows}
    assert len(flows) == len(TRUTH) == 6
    for name, conn in TRUTH.items():
        f = by_port[conn["client_port"]]
        assert (f["server_ip"], f["server_port"]) == (conn["server_ip"], conn["server_port"]), name
        assert f["role_source"] == "syn"
        assert f["stream_bytes_c2s"] == conn["sent"]["stream_bytes"], name
        assert f["stream_bytes_s2c"] == conn["received"]["stream_bytes"], name
        assert f["gap_bytes_c2s"] == f["gap_bytes_s2c"] == 0
        assert f["ts_first_ns"] <= f["ts_last_ns"]


def test_follow_yields_exactly_the_bytes_the_client_wrote_and_read(capfdbinary):
    flows = _flows(capfdbinary)
    for name, conn in TRUTH.items():
        fid = next(f["flow_id"] for f in flows if f["client_port"] == conn["client_port"])
        for direction, side in (("c2s", "sent"), ("s2c", "received")):
            assert main(["follow", str(PCAP), "--flow", str(fid), "--direction", direction]) == 0
            out = capfdbinary.readouterr().out
            assert hashlib.sha256(out).hexdigest() == conn[side]["stream_sha256"], (name, direction)


def test_follow_shows_gaps_inline_or_on_stderr(capfdbinary):
    cap = SHARED / "captures/suricata-verify"
    pcap = cap / "eve-payload-05-tcp-data-gap/tcp-simple-gap2.pcap"
    assert main(["follow", str(pcap), "--flow", "0", "--direction", "c2s"]) == 1
    assert capfdbinary.readouterr().out == b"VERY[4 bytes missing]DATA"
    assert main(["follow", str(pcap), "--flow", "0", "--direction", "c2s", "--raw"]) == 1
    res = capfdbinary.readouterr()
    assert res.out == b"VERYDATA"
    assert b"offset 4 4 bytes" in res.err


def test_follow_unknown_flow_fails(capfdbinary):
    assert main(["follow", str(PCAP), "--flow", "99"]) == EXIT_FAILED


def test_not_a_capture_is_a_clear_failure(tmp_path, capfdbinary):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello, this is not a capture file\n")
    assert main(["flows", str(bogus)]) == EXIT_FAILED
    assert b"error" in capfdbinary.readouterr().err


@pytest.mark.parametrize("name", ["nats-basic", "stan-basic", "liftbridge-basic",
                                  "pulsar-client", "nats-ws", "nats-s2-fast", "nats-js"])
def test_flows_rows_are_those_of_the_reference(name):
    """`msgcap flows` runs the compiled fast paths, counting only (its sink owns no flow):
    the flow rows, their decoded and undecoded bytes above all, are those of the Python
    reference (``Options(fast=False)``), which alone it ran before (10x slower)."""
    from analyzer.flowsummary import iter_decoded_flow_rows
    from analyzer.pipeline import Options
    from dissectors.registry import discover
    from reassembly.capture import open_capture

    registry = discover()
    got = {}
    for fast in (True, False):
        with open_capture(SAMPLES / f"{name}.pcap") as reader:
            got[fast] = list(iter_decoded_flow_rows(reader, registry, Options(fast=fast)))
    assert got[True] == got[False]
    assert any(r["decoded_bytes_c2s"] for r in got[True])
