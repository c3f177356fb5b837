"""`msgcap follow --decoded`, `msgcap ladder` and the user-mistake contract of the new
commands (one sentence plus the fix, exit 2, no traceback), NO_COLOR and --quiet."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from analyzer.cli import main
from tests.report.conftest import ROOT, SAMPLES

NATS = str(SAMPLES / "nats-basic.pcap")


def flow_of(ds_flows: list[dict], port: int) -> int:
    return next(f["flow_id"] for f in ds_flows if f["client_port"] == port)


@pytest.fixture(scope="module")
def flows(nats_dataset) -> list[dict]:
    from analyzer.summary import Dataset

    return Dataset(nats_dataset).read("flows", ["flow_id", "client_port"]).to_pylist()


# ------------------------------------------------------------------ follow --decoded


@pytest.mark.parametrize("name", ["publisher", "subscriber", "responder", "jetstream"])
def test_follow_decoded_one_line_per_op(capsys, nats_dataset, nats_truth, flows, name):
    """One transcript line per NATS operation: as many C→S lines as ops the client
    sent and S→C lines as ops it received (truth)."""
    conn = nats_truth["connections"][name]
    flow = flow_of(flows, conn["client_port"])
    code = main(["follow", str(nats_dataset), "--flow", str(flow), "--decoded"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert f"({name})" in lines[0]
    ops = [ln for ln in lines[2:] if "↳" not in ln]  # carried rows (jetstream_api) aside
    c2s = [ln for ln in ops if " C→S " in ln]
    s2c = [ln for ln in ops if " S→C " in ln]
    assert len(c2s) == sum(conn["sent"]["ops"].values())
    assert len(s2c) == sum(conn["received"]["ops"].values())
    # time order
    times = [ln.split()[0] for ln in c2s + s2c]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{6}", t) for t in times)
    body = [ln.split()[0] for ln in lines[2:]]
    assert body == sorted(body)


def test_follow_decoded_fields_and_preview(capsys):
    """From the capture itself; the publisher's first request and its reply."""
    code = main(["follow", NATS, "--flow", "0", "--decoded", "-q"])
    out = capsys.readouterr().out
    assert code == 0
    req = next(ln for ln in out.splitlines() if "PUB" in ln and "svc.echo" in ln)
    assert "subject=svc.echo" in req and "reply=_INBOX." in req and '"request 0.0"' in req
    assert any("status=503" in ln for ln in out.splitlines())  # the no-responders HMSG
    binary = next(ln for ln in out.splitlines() if "len=516" in ln)
    assert "\\x00\\x01\\x02" in binary  # binary payload escaped, not raw


def test_follow_decoded_direction_filter(capsys):
    main(["follow", NATS, "--flow", "0", "--decoded", "--direction", "s2c", "-q"])
    body = "\n".join(capsys.readouterr().out.splitlines()[2:])
    assert " S→C " in body and " C→S " not in body


def test_follow_decoded_children_and_anomalies(capsys, report_dataset, damaged_capture):
    """STAN rows hang under their NATS row; anomalies are interleaved in the transcript."""
    main(["follow", str(SAMPLES / "stan-basic.pcap"), "--flow", "2", "--decoded", "-q"])
    out = capsys.readouterr().out
    assert "↳ stan PubMsg" in out and "↳ stan PubAck" in out
    code = main(["follow", str(damaged_capture), "--flow", "0", "--decoded", "-q"])
    out = capsys.readouterr().out
    assert code == 1  # the flow has anomalies
    assert "!! nats.unknown_op" in out


# ------------------------------------------------------------------ ladder


def test_ladder_flow(capsys, nats_dataset):
    code = main(["ladder", str(nats_dataset), "--flow", "4", "--limit", "0", "--width", "120"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert "client 127.0.0.1:51770 (responder)" in lines[1]
    arrows = [ln for ln in lines if "▶│" in ln or "│◀" in ln]
    assert len(arrows) == 24  # responder: 12 ops sent + 12 received (truth)
    assert any("MSG subject=svc.echo" in ln and "│◀" in ln for ln in arrows)
    assert any("PUB subject=_INBOX." in ln and "▶│" in ln for ln in arrows)


def test_ladder_request_path(capsys, nats_dataset):
    """The first svc.echo request: publisher → server → responder, the responder's reply
    back through the server to the publisher, with latencies in time order."""
    from analyzer.summary import Dataset, nats_request_reply

    req = next(p for p in nats_request_reply(Dataset(nats_dataset)) if p.subject == "svc.echo")
    code = main(["ladder", str(nats_dataset), "--message", str(req.record_id), "--width", "140"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert "publisher" in lines[1] and "nats-server" in lines[1] and "responder" in lines[1]
    steps = [ln for ln in lines[3:] if "│" in ln and "ms" in ln.split("│")[0]]
    assert len(steps) == 4
    lat = [float(ln.split()[0].lstrip("+")) for ln in steps]
    assert lat[0] == 0 and lat == sorted(lat)
    assert "(reply)" in steps[2] and "(reply)" in steps[3]
    assert f"request → reply latency {req.latency_ns / 1e6:.3f} ms" in out


def test_ladder_fanout_and_pulsar(capsys, report_dataset):
    from analyzer.summary import Dataset

    ds = Dataset(report_dataset)
    nats = ds.read("nats", ["capture_id", "record_id", "subject", "op"]).to_pylist()
    cap = next(c["capture_id"] for c in ds.inputs() if c["input"]["path"].endswith(
        "samples/nats-basic.pcap"))
    wc = next(r for r in nats if r["subject"] == "wc.a" and r["op"] == "PUB"
              and r["capture_id"] == cap)
    main(["ladder", str(report_dataset), "--message", str(wc["record_id"]), "--capture", cap])
    out = capsys.readouterr().out
    assert "2 deliveries" in out  # wc.* and wc.> of the subscriber
    assert out.count("MSG wc.a sid=") == 2
    pm = ds.read("pulsar_messages", ["capture_id", "record_id", "command", "topic"]).to_pylist()
    send = next(r for r in pm if r["command"] == "SEND" and r["topic"].endswith("/plain"))
    code = main(["ladder", str(report_dataset), "--message", str(send["record_id"]),
                 "--capture", send["capture_id"], "--width", "150"])
    out = capsys.readouterr().out
    assert code == 0
    assert "SEND persistent://public/default/plain" in out
    assert "SEND_RECEIPT" in out and "MESSAGE ledger=" in out and "ACK" in out


# ------------------------------------------------------------------ user mistakes

MISTAKES = [
    (["summary", "no/such.pcap"], "does not exist"),
    (["summary", "README.md"], "is not a capture msgcap can read"),
    (["summary", "docs"], "not a msgcap dataset"),
    (["summary", NATS, "--keylog", "no-such.keys"], "key log no-such.keys not found"),
    (["summary", NATS, "--decode-as", "4222"], "--decode-as wants PORT=NAME"),
    (["summary", NATS, "--decode-as", "4222=nosuch"], "unknown dissector 'nosuch'"),
    (["summary", NATS, "--top", "0"], "--top 0 shows nothing"),
    (["follow", NATS, "--flow", "99", "--decoded"], "no flow 99"),
    (["follow", NATS, "--flow", "0", "--decoded", "--raw"], "cannot be combined"),
    (["follow", "docs", "--flow", "0"], "is a directory"),
    (["ladder", NATS, "--message", "123456"], "no record 123456"),
    (["ladder", NATS, "--flow", "0", "--limit", "-1"], "--limit -1 is negative"),
    (["report", NATS, "-o", "no/such/dir/r.html"], "does not exist"),
    (["report", NATS, "-o", "docs"], "is a directory"),
]


@pytest.mark.parametrize(("argv", "sentence"), MISTAKES, ids=[" ".join(m[0][:1] + m[0][2:])
                                                              for m in MISTAKES])
def test_user_mistake_is_one_sentence_and_a_fix(capsys, monkeypatch, argv, sentence):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("NO_COLOR", "1")
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("error: ") and sentence in lines[0]
    assert lines[1].startswith("fix: ")
    assert out == ""


def test_user_mistake_in_a_real_process_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "analyzer.cli", "ladder", "no/such/dir", "--flow",
                        "1"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == "error: no/such/dir does not exist"
    assert r.stderr.splitlines()[1].startswith("fix: give a capture file")
    assert "Traceback" not in r.stderr


def test_ambiguous_flow_asks_for_capture(capsys, report_dataset):
    code = main(["ladder", str(report_dataset), "--flow", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert "exists in 3 captures" in err and "--capture ID" in err


# ------------------------------------------------------------------ NO_COLOR, --quiet

_COLOR = re.compile(r"\x1b\[(?:\d+;)*(?:3\d|9\d|38)[;m]")


def _start(argv, **env) -> subprocess.Popen:
    """``msgcap ARGV`` started (``_done`` waits for it): two runs a test compares go side
    by side instead of one after the other."""
    e = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    e.update(env)
    return subprocess.Popen([sys.executable, "-m", "analyzer.cli", *map(str, argv)], cwd=ROOT,
                            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _done(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()  # no-op once it ended; a run past the timeout leaves no process behind
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_no_color_is_honoured():
    argv = ["summary", NATS]
    colored, plain = _start(argv, FORCE_COLOR="1"), _start(argv, FORCE_COLOR="1", NO_COLOR="1")
    colored, plain = _done(colored), _done(plain)
    assert _COLOR.search(colored.stdout), "FORCE_COLOR should colour (else this test is void)"
    assert plain.returncode == 0
    assert not _COLOR.search(plain.stdout)
    assert "13 requests" in plain.stdout


def test_quiet_report_prints_nothing(tmp_path, nats_dataset):
    out = tmp_path / "r.html"
    quiet = _start(["report", str(nats_dataset), "-o", str(out), "--quiet"])
    loud = _start(["report", str(nats_dataset), "-o", str(tmp_path / "loud.html")])
    r, loud = _done(quiet), _done(loud)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and r.stdout == ""
    assert out.stat().st_size > 1_000_000  # plotly.js is inside
    assert "report written to" in loud.stderr


@pytest.mark.parametrize(("n", "anomalies"), [(3, False), (40, False), (5, True)])
def test_flow_head_is_the_start_of_flow_messages(all_samples, report_dataset, n,
                                                 anomalies) -> None:
    """``transcript.flow_head`` (what the report's sequence diagram and ``msgcap ladder
    --limit`` read) gives, for every flow of every sample and of a damaged capture, the
    first ``n`` top-level messages of ``flow_messages`` (anomalies among them or not) with
    their children, and the count of all of them."""
    from analyzer.summary import Dataset
    from analyzer.transcript import flow_head, flow_info, flow_messages

    def shape(m):
        return (m.table, m.record_id, m.ts_ns, m.kind, m.fields, m.preview, m.offset,
                [(c.table, c.record_id, c.kind, c.fields) for c in m.children])

    seen = flagged = 0
    for ds in (Dataset(all_samples), Dataset(report_dataset)):
        flows = ds.read("flows", ["capture_id", "flow_id"])
        for cap, fid in zip(flows["capture_id"].to_pylist(), flows["flow_id"].to_pylist(),
                            strict=True):
            info = flow_info(ds, fid, cap)
            ref = [m for m in flow_messages(ds, info) if anomalies or not m.anomaly]
            head, total, n_anomalies = flow_head(ds, info, n, anomalies)
            assert total == len(ref), (cap, fid)
            assert n_anomalies == (sum(m.anomaly for m in ref) if anomalies else 0), (cap, fid)
            assert [shape(m) for m in head] == [shape(m) for m in ref[:n]], (cap, fid)
            seen += bool(ref[n:]) and any(m.children for m in head)
            flagged += any(m.anomaly for m in head)
    assert seen  # flows cut short whose head has carried messages
    assert flagged or not anomalies  # and heads with anomalies


@pytest.mark.parametrize("time_mode", ["utc", "relative"])
def test_transcript_to_a_file_is_what_rich_writes(report_dataset, time_mode) -> None:
    """``render_transcript`` writes a file's or a pipe's lines itself (rich line by line
    was ~250 us a line): the same characters as rich renders them, unstyled, for every
    flow of a dataset with anomalies, carried messages and payload previews."""
    import io

    from rich.console import Console

    from analyzer.summary import Dataset
    from analyzer.transcript import flow_info, flow_messages, render_transcript

    ds = Dataset(report_dataset)
    flows = ds.read("flows", ["capture_id", "flow_id"])
    lines = 0
    for cap, fid in zip(flows["capture_id"].to_pylist(), flows["flow_id"].to_pylist(),
                        strict=True):
        info = flow_info(ds, fid, cap)
        msgs = flow_messages(ds, info)
        plain, styled = io.StringIO(), io.StringIO()
        render_transcript(info, msgs, Console(file=plain, width=100), time_mode)
        render_transcript(info, msgs, Console(file=styled, width=100, force_terminal=True,
                                              color_system=None), time_mode)
        assert plain.getvalue() == styled.getvalue(), (cap, fid)
        lines += plain.getvalue().count("\n")
    assert lines > 100
