"""Differential test against tshark (issue 18): for every capture in the corpus, every TCP
stream and each direction, the bytes ``msgcap follow --raw`` writes equal those of
``tshark -q -z follow,tcp,raw,N`` with its "[N bytes missing in capture file]" markers
taken out, and the TCP/UDP conversation counts are equal.

Where msgcap is right and tshark is not, the case is listed in ``EXCEPTIONS`` with the
reason, and the test asserts that exact difference (a stale line fails too).  The table
is reproduced in docs/transport.md.

tshark runs once per capture (all its ``follow`` taps and the per-packet stream indices
in one run), several captures at a time in background threads while this process
reassembles the next; the corpus takes well under a minute.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reassembly.capture import open_capture
from reassembly.engine import Reassembler
from reassembly.events import (
    Anomaly,
    Endpoint,
    FlowEnd,
    FlowInfo,
    StreamClose,
    StreamData,
    StreamGap,
)
from tests.conftest import SHARED

ROOT = SHARED.parents[1]
CORPUS_DIRS = (SHARED / "captures", SHARED / "crafted", ROOT / "samples")
CAPTURES = sorted(
    p
    for d in CORPUS_DIRS
    for p in d.rglob("*")
    if p.suffix in (".pcap", ".pcapng", ".cap")
)
MISSING = re.compile(rb"\[\d+ bytes missing in capture file\]\x00?")

# Where msgcap and tshark differ on purpose.  Key: (capture relative to tests/data or the
# repository root, tshark stream index or "counts", direction); value: (check, reason).
# The checks are defined below; each asserts the exact shape of the difference.
EXCEPTIONS: dict[tuple[str, int | str, str], tuple[str, str]] = {
    ("captures/zeek/tcp/reassembly.pcap", 0, "c2s"): (
        "overlap-first",
        "retransmissions carry different bytes for the same offsets; msgcap keeps the first "
        "copy (documented overlap policy) and reports each as tcp.overlap_conflict, tshark's "
        "follow takes some of the later copies",
    ),
    ("captures/zeek/ipv4/fragmented-4.pcap", 1, "c2s"): (
        "frag-overlap-first",
        "overlapping IPv4 fragments carry different bytes; msgcap keeps the first copy and "
        "reports ip.frag_overlap, tshark's defragmenter keeps the later one",
    ),
    ("captures/suricata-verify/tcp-rst-unacked-stream-03-gap/input.pcap", 0, "s2c"): (
        "tshark-stops-at-hole",
        "6 bytes sent after a 4-byte hole that is never filled (the connection is reset): "
        "tshark's follow never writes out-of-order data still waiting at the end, msgcap "
        "delivers it after an explicit gap",
    ),
    ("captures/arkime/tcpseq_synthetic.pcap", 0, "c2s"): (
        "tshark-stops-at-hole",
        "a port-0 SYN with 8 bytes, then 8 bytes 240 MiB further on; the other side never "
        "sent a packet, so there is no window to judge the jump by: msgcap delivers both "
        "around an explicit gap, tshark's follow never writes data waiting after a hole",
    ),
    ("captures/ntop-nDPI/badpackets.pcap", "counts", ""): (
        "unreassembled-first-fragments",
        "93 first fragments whose datagrams never complete: tshark counts a UDP conversation "
        "from the UDP header inside each, msgcap delivers no datagram and reports each as "
        "ip.frag_incomplete",
    ),
}


@dataclass
class Ours:
    """What ``msgcap follow --raw`` writes, per (flow id, direction), and the context the
    exception checks need."""

    streams: dict = field(default_factory=lambda: defaultdict(bytearray))
    # (flow id, direction) -> [(stream offset, offset in the captured-only bytes)] at gaps
    gaps: dict = field(default_factory=lambda: defaultdict(list))
    tcp: list[FlowInfo] = field(default_factory=list)
    udp: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)


def follow_ours(path: Path) -> Ours:
    """The events ``msgcap follow --raw`` reads (``analyzer.cli.cmd_follow``), every flow."""
    ours = Ours()
    with open_capture(path) as reader:
        for ev in Reassembler().process(reader):
            if isinstance(ev, StreamData):
                ours.streams[(ev.flow.flow_id, int(ev.direction))] += ev.data
            elif isinstance(ev, StreamGap):
                key = (ev.flow.flow_id, int(ev.direction))
                ours.gaps[key].append((ev.offset, ev.nbytes, len(ours.streams[key])))
            elif isinstance(ev, StreamClose):
                ours.tcp.append(ev.flow)
            elif isinstance(ev, FlowEnd):
                ours.udp += 1
            elif isinstance(ev, Anomaly):
                ours.anomalies.append(ev)
    return ours


@dataclass
class Theirs:
    tcp: int
    udp: int
    # stream index -> (node 0, node 1, [bytes node 0 sent, bytes node 1 sent])
    follows: dict[int, tuple[str, str, list[bytes]]]


def follow_tshark(path: Path, streams: int) -> Theirs:
    """One tshark run: stream indices of every packet, then ``follow,tcp,raw`` of
    streams 0..streams-1 (an index past the last prints an empty block)."""
    cmd = ["tshark", "-r", str(path), "-n", "-T", "fields", "-e", "tcp.stream", "-e",
           "udp.stream"]
    for i in range(streams):
        cmd += ["-z", f"follow,tcp,raw,{i}"]
    run = subprocess.run(cmd, capture_output=True, check=False, timeout=300)
    # 2: the file was cut short; tshark still reports what it read, as msgcap does
    assert run.returncode in (0, 2), run.stderr.decode()
    out = run.stdout.decode()
    packets, _, taps = out.partition("\n===")
    tcp: set[str] = set()
    udp: set[str] = set()
    for line in packets.splitlines():
        t, _, u = line.partition("\t")
        tcp.update(x for x in t.split(",") if x)
        udp.update(x for x in u.split(",") if x)
    follows = {}
    for block in taps.split("Follow: tcp,raw\n")[1:]:
        lines = block.splitlines()
        index = int(lines[0].rsplit(" ", 1)[1])
        nodes = [lines[1].split(": ", 1)[1], lines[2].split(": ", 1)[1]]
        data = [bytearray(), bytearray()]
        for line in lines[3:]:
            if line.startswith("==="):
                break
            # node 1's chunks are indented; each marker is a chunk of its own
            data[line.startswith("\t")] += MISSING.sub(b"", bytes.fromhex(line.strip()))
        follows[index] = (nodes[0], nodes[1], [bytes(d) for d in data])
    return Theirs(len(tcp), len(udp), follows)


def _endpoint(e: Endpoint) -> str:
    return f"[{e.ip}]:{e.port}" if ":" in e.ip else f"{e.ip}:{e.port}"


def compare(path: Path, ours: Ours, theirs: Theirs) -> dict[tuple, tuple]:
    """Every difference: key (stream index or "counts", direction) -> (ours, theirs, ctx)."""
    diffs: dict[tuple, tuple] = {}
    tcp = sorted(ours.tcp, key=lambda f: f.flow_id)
    if (len(tcp), ours.udp) != (theirs.tcp, theirs.udp):
        diffs[("counts", "")] = ((len(tcp), ours.udp), (theirs.tcp, theirs.udp), None)
    by_pair: dict[frozenset, list[FlowInfo]] = defaultdict(list)
    for f in tcp:
        by_pair[frozenset((_endpoint(f.client), _endpoint(f.server)))].append(f)
    taken: dict[frozenset, int] = defaultdict(int)
    for index in range(theirs.tcp):
        node0, node1, data = theirs.follows[index]
        pair = frozenset((node0, node1))
        k = taken[pair]
        taken[pair] += 1
        if k >= len(by_pair[pair]):
            diffs[(index, "")] = (None, (node0, node1), None)
            continue
        flow = by_pair[pair][k]
        for side, node in enumerate((node0, node1)):
            d = side if node0 == node1 else int(node != _endpoint(flow.client))
            got = bytes(ours.streams.get((flow.flow_id, d), b""))
            if got != data[side]:
                diffs[(index, ("c2s", "s2c")[d])] = (got, data[side], (flow, d))
    return diffs


def _stream_offset(ours: Ours, key: tuple[int, int], i: int) -> int:
    """Stream offset of byte ``i`` of the captured-only bytes (gaps add their size)."""
    off = i
    for _, nbytes, at in ours.gaps.get(key, ()):
        if at <= i:
            off += nbytes
    return off


def _check_exception(check: str, ours: Ours, got, want, ctx) -> None:
    if check == "unreassembled-first-fragments":
        (tcp, udp), (ttcp, tudp) = got, want
        assert tcp == ttcp and udp == 0
        assert tudp == sum(a.kind == "ip.frag_incomplete" for a in ours.anomalies) > 0
        return
    flow, d = ctx
    if check in ("overlap-first", "frag-overlap-first"):
        assert len(got) == len(want)
        differ = [i for i in range(len(got)) if got[i] != want[i]]
        assert differ
        if check == "frag-overlap-first":
            assert any(a.kind == "ip.frag_overlap" for a in ours.anomalies)
            return
        conflicts = [
            (a.offset, a.offset + a.nbytes)
            for a in ours.anomalies
            if a.kind == "tcp.overlap_conflict" and a.flow is flow and int(a.direction) == d
        ]
        for i in differ:
            off = _stream_offset(ours, (flow.flow_id, d), i)
            assert any(lo <= off < hi for lo, hi in conflicts), f"byte at offset {off}"
        return
    if check == "tshark-stops-at-hole":
        # tshark has exactly our bytes up to our first gap, and nothing after it
        gaps = ours.gaps[(flow.flow_id, d)]
        assert gaps and len(got) > len(want) == gaps[0][2]
        assert got[: len(want)] == want
        return
    raise AssertionError(f"unknown exception check {check}")


def _relative(path: Path) -> str:
    for base in (SHARED, ROOT):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    raise AssertionError(path)


_POOL = ThreadPoolExecutor(max_workers=3)
_PENDING: dict[Path, Future] = {}


def _tshark_for(path: Path, streams: int) -> Theirs:
    """Start tshark for this capture and the next few (threads wait on the child
    processes; the reassembly in this process overlaps with them)."""
    i = CAPTURES.index(path)
    for nxt in CAPTURES[i : i + 3]:
        if nxt not in _PENDING:
            # stream count unknown yet for the next ones: ask for a generous number;
            # this capture's own count is exact below if it was not started already
            n = streams if nxt == path else 64
            _PENDING[nxt] = _POOL.submit(follow_tshark, nxt, n)
    theirs = _PENDING.pop(path).result()
    if theirs.tcp > streams and len(theirs.follows) < theirs.tcp:
        theirs = follow_tshark(path, theirs.tcp)
    return theirs


@pytest.mark.parametrize("path", CAPTURES, ids=_relative)
def test_follow_raw_equals_tshark(path: Path):
    ours = follow_ours(path)
    theirs = _tshark_for(path, len(ours.tcp) + 1)
    name = _relative(path)
    diffs = compare(path, ours, theirs)
    expected = {k[1:]: v for k, v in EXCEPTIONS.items() if k[0] == name}
    assert set(diffs) == set(expected), {k: v[:2] for k, v in diffs.items()}
    for key, (got, want, ctx) in diffs.items():
        _check_exception(expected[key][0], ours, got, want, ctx)


def test_exception_table_names_real_captures_and_is_in_the_docs():
    names = {_relative(p) for p in CAPTURES}
    assert {k[0] for k in EXCEPTIONS} <= names
    rows = [line for line in (ROOT / "docs/transport.md").read_text().splitlines()
            if line.startswith("| `captures/") or line.startswith("| `crafted/")]
    assert len(rows) == len(EXCEPTIONS)
    for (name, _, _), (_, reason) in EXCEPTIONS.items():
        assert any(f"`{name}`" in row and reason in row for row in rows), name


def test_msgcap_follow_cli_writes_the_bytes_compared_here():
    """The comparison reads the reassembler in-process; the CLI writes the same bytes."""
    path = SHARED / "captures/zeek/tcp/reassembly.pcap"
    out = subprocess.run(
        # --keep-secrets: the captured bytes as they are (follow redacts credential-like
        # text on stdout by default; tshark does not)
        [sys.executable, "-m", "analyzer.cli", "follow", str(path), "--flow", "0", "--raw",
         "--direction", "c2s", "--keep-secrets"],
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr  # gaps: degraded
    assert out.stdout == bytes(follow_ours(path).streams[(0, 0)])
    assert len(out.stdout) == 28_832
