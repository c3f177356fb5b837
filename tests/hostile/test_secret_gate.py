"""One redaction gate (issue 17 §1): credentials that reached free text -- anomaly details,
``summary``, ``follow``, ``ladder``, the HTML report -- through CONNECT lines that
Python's ``json`` rejects but nats-server's Go decoder accepts, through cut and mistyped
CONNECTs and route CONNECTs.  Each leak variant of the issue is dissected from a
synthetic capture, then EVERY output byte is searched: every file of the dataset (raw,
and every decoded Parquet value), ``manifest.json``, ``summary`` text and ``--json``,
``follow`` (raw bytes) and ``follow --decoded`` of every flow, ``ladder`` of every flow
and the report HTML.  ``--keep-secrets`` is the control: the same search then finds every
secret, so a search that finds nothing is not blind.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.cli import main
from analyzer.pipeline import Options, dissect_capture
from dissectors.redaction import marker
from samples.hostile.generate import Conversation
from tests.hostile.test_secrets import _forms, dataset_blobs
from tests.reassembly.synth import PcapWriter

INFO = b'INFO {"server_id":"x","auth_required":true,"max_payload":1048576}\r\n'

# (name, client port, server port, whole handshake?, client bytes); every secret distinct
LEAKS: list[tuple[str, int, int, bool, bytes]] = [
    # the CONNECT: invalid UTF-8 (Python json rejects it), an escaped key
    ("issue", 41001, 4222, True,
     b'CONNECT {"verbose":true,"name":"b\xffb","user":"bob","\\u0070ass":"hunter2SECRETxyz"}'
     b"\r\nPING\r\n"),
    # longer than max_control_line (4096): nats.line_too_long quotes its head
    ("long", 41002, 4222, True,
     b'CONNECT {"user":"bob","pass":"LONGsecret0002","name":"' + b"n" * 5000 + b'"}\r\n'),
    # the capture starts inside the CONNECT, inside the key
    ("midstream", 41003, 4222, False, b'ss":"MIDsecret0003"}\r\nPING\r\n'),
    # mistyped op with an escaped key
    ("mistyped", 41004, 4222, True, b'CONNEC {"p\\u0061ss":"TYPOsecret0004"}\r\nPING\r\n'),
    # Unicode folding (long s, Kelvin sign) with invalid UTF-8 so Python's json rejects it
    ("folded", 41005, 4222, True,
     '{"name":"\udcff","pa\u017f\u017f":"FOLDsecret0005","auth_to\u212aen":"FOLDtok0006"}'
     .encode("utf-8", "surrogateescape").join([b"CONNECT ", b"\r\n"])),
    # duplicate keys (the last wins) and trailing garbage
    ("duplicate", 41006, 4222, True,
     b'connect {"pass":"decoy","PASS":"DUPsecret0007"} }garbage"\r\nPING\r\n'),
    # a value cut by the end of the capture
    ("cut", 41007, 4222, True, b'CONNECT {"user":"bob","jwt":"CUTsecret0008'),
    # the capture starts inside the password, members follow (found by the property test)
    ("midvalue", 41009, 4222, False, b'-pw-MIDVALUEsecret10", "verbose"\t: true\t}\r\nPING\r\n'),
    # ... and also ends before the object does
    ("midvalue-cut", 41010, 4222, False, b'HEADsecret0011", "verbose": true'),
]
ROUTE = ("route", 41008, 6222, True,
         b'CONNECT {"echo":false,"verbose":false,"user":"ruser","\\u0070ass":"ROUTEsecret0009",'
         b'"name":"A\xff","cluster":"c1","dynamic":true,"lnoc":true}\r\nPING\r\n')
SECRETS = ["hunter2SECRETxyz", "LONGsecret0002", "MIDsecret0003", "TYPOsecret0004",
           "FOLDsecret0005", "FOLDtok0006", "DUPsecret0007", "CUTsecret0008", "ROUTEsecret0009",
           "MIDVALUEsecret10", "HEADsecret0011"]


def write_leak_capture(path: Path, cases=(*LEAKS, ROUTE)) -> None:
    w = PcapWriter(path)
    for _name, sport, dport, whole, data in cases:
        conv = Conversation(w, sport, dport)
        if whole:
            conv.handshake()
            conv.send(1, INFO if dport == 4222 else
                      b'INFO {"server_id":"B","cluster":"c1","route_pool_size":3,"lnoc":true}\r\n')
        conv.send(0, data)
        conv.send(1, b"PONG\r\n")
        if whole:
            conv.fin()
    w.close()


def every_output(capture: Path, tmp: Path, capsysbinary, keep: bool,
                 min_flows: int = len(LEAKS) + 1) -> list[tuple[str, bytes]]:
    """Dissect ``capture`` and run every view; ``[(where, bytes)]`` of all that came out."""
    out = tmp / ("kept" if keep else "gated")
    dissect_capture(capture, out, Options(keep_secrets=keep))
    blobs = dataset_blobs(out)
    flows = pq.read_table(next((out / "flows").rglob("*.parquet"))).to_pylist()
    tcp = [f["flow_id"] for f in flows if f.get("transport", "tcp") == "tcp"]
    assert len(tcp) >= min_flows, flows
    extra = ["--keep-secrets"] if keep else []
    runs: list[list[str]] = [["summary", str(out)], ["summary", str(out), "--json"],
                             ["summary", str(capture), "-q"]]
    for fid in tcp:
        runs += [["follow", str(capture), "--flow", str(fid), "-q", *extra],
                 ["follow", str(capture), "--flow", str(fid), "--raw", "-q", *extra],
                 ["follow", str(out), "--flow", str(fid), "--decoded", "-q"],
                 ["ladder", str(out), "--flow", str(fid), "--limit", "0", "--width", "200"]]
    html = tmp / f"report-{keep}.html"
    runs.append(["report", str(out), "-o", str(html), "-q"])
    for args in runs:
        main(args)
        got = capsysbinary.readouterr()
        blobs.append((" ".join(args[:1] + args[2:]), got.out + b"\0" + got.err))
    blobs.append(("report.html", html.read_bytes()))
    return blobs


def found(blobs: list[tuple[str, bytes]], secrets: list[str]) -> set[tuple[str, str]]:
    return {(s, where) for s in secrets for form in _forms(s) for where, blob in blobs
            if form in blob}


@pytest.fixture(scope="module")
def leak_capture(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "leaks.pcap"
    write_leak_capture(path)
    return path


def test_no_leak_variant_reaches_any_output(leak_capture, tmp_path, capsysbinary):
    blobs = every_output(leak_capture, tmp_path, capsysbinary, keep=False)
    assert found(blobs, SECRETS) == set()
    # the variants did take the paths that leaked: these anomalies quote the lines
    rows = pq.read_table(next((tmp_path / "gated" / "anomalies").rglob("*.parquet"))).to_pylist()
    kinds = {r["kind"] for r in rows}
    assert {"nats.bad_json", "nats.line_too_long", "nats.unknown_op"} <= kinds, kinds
    # withheld values keep their length and SHA-256 (of what Go decodes) for matching
    details = "\n".join(r["detail"] for r in rows)
    assert marker(b"hunter2SECRETxyz") in details
    assert marker(b"TYPOsecret0004") in details


def test_keep_secrets_shows_them_everywhere_the_search_looks(leak_capture, tmp_path,
                                                             capsysbinary):
    blobs = every_output(leak_capture, tmp_path, capsysbinary, keep=True)
    hits = found(blobs, SECRETS)
    assert {s for s, _ in hits} == set(SECRETS)
    # follow prints the bytes as they are only with --keep-secrets
    assert any(w.startswith("follow --flow") and s == "hunter2SECRETxyz" for s, w in hits)
