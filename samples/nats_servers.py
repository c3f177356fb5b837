"""Shared start/stop code of the multi-server NATS recorders (record_nats_cluster.py,
record_nats_s2.py, record_nats_gateway.py, record_nats_js.py): free ports, tcpdump on
``lo`` over every port of a topology, nats-server processes from a config text, and the
orderly stop (tcpdump first, with SIGINT, so the tail of the capture is written; then
the servers).  The single-server helpers (finding nats-server and tcpdump, waiting for a
log line, stopping a process) are those of samples/record_nats.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record_nats import free_port, stop, wait_for_text  # noqa: E402

__all__ = ["Recording", "pick_ports", "server_version", "start_server"]


def pick_ports(names: tuple[str, ...]) -> dict[str, int]:
    """One distinct free TCP port per name."""
    ports: dict[str, int] = {}
    for k in names:
        while (p := free_port()) in ports.values():
            pass
        ports[k] = p
    return ports


def start_server(bin_: str, name: str, conf_text: str, tmp: Path) -> subprocess.Popen:
    """nats-server with config ``conf_text`` (written to TMP/NAME.conf, log TMP/NAME.log),
    returned once its log says it is ready."""
    conf = tmp / f"{name}.conf"
    conf.write_text(conf_text)
    log = tmp / f"{name}.log"
    proc = subprocess.Popen([bin_, "-c", str(conf), "-l", str(log)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    wait_for_text(log, r"Server is ready", proc, f"nats-server {name}")
    return proc


def server_version(bin_: str) -> str:
    return subprocess.run([bin_, "--version"], capture_output=True, text=True).stdout.strip()


class Recording:
    """tcpdump on ``lo`` over every port of ``ports`` plus the servers started through
    ``server``; ``finish`` stops tcpdump (SIGINT, after ``tail_wait`` seconds) and then the
    servers, and returns tcpdump's closing report; ``abort`` stops whatever still runs
    (use it in a ``finally``)."""

    def __init__(self, tcpdump: str, pcap: Path, ports: dict[str, int], tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.err = tmp / "tcpdump.stderr"
        flt = "tcp and (" + " or ".join(f"port {p}" for p in ports.values()) + ")"
        with open(self.err, "wb") as ef:
            self.dump: subprocess.Popen | None = subprocess.Popen(
                [tcpdump, "-i", "lo", "-n", "-s", "0", "-B", "65536", "--immediate-mode",
                 "-U", "-Z", "root", "-w", str(pcap), flt],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ef)
        wait_for_text(self.err, r"listening on", self.dump, "tcpdump")
        time.sleep(0.2)

    def server(self, bin_: str, name: str, conf_text: str) -> subprocess.Popen:
        proc = start_server(bin_, name, conf_text, self.tmp)
        self.procs.append(proc)
        return proc

    def finish(self, tail_wait: float) -> str:
        time.sleep(tail_wait)
        assert self.dump is not None
        stop(self.dump, signal.SIGINT)
        self.dump = None
        text = self.err.read_text(errors="replace")
        for p in reversed(self.procs):
            stop(p, signal.SIGTERM)
        return text

    def abort(self) -> None:
        if self.dump is not None:
            stop(self.dump, signal.SIGINT, timeout=10)
        for p in self.procs:
            stop(p, signal.SIGTERM, timeout=10)


def write_truth(truth_path: Path, truth: dict, pcap: Path, problems: list[str]) -> int:
    """Write the truth file, say so, and return the recorder's exit status: 1 when the
    recording had problems (listed on stderr), else 0."""
    truth_path.write_text(json.dumps(truth, indent=2) + "\n")
    print(f"wrote {pcap} and {truth_path}")
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


def output_paths(out: str) -> tuple[Path, Path]:
    """``--out PREFIX`` (or ``PREFIX.pcap``) -> (PREFIX.pcap, PREFIX.truth.json)."""
    prefix = out[:-5] if out.endswith(".pcap") else out
    return Path(prefix + ".pcap"), Path(prefix + ".truth.json")


def tcpdump_problems(dump_text: str) -> list[str]:
    """A recording's problems start with tcpdump's: packets the kernel dropped."""
    if "0 packets dropped by kernel" not in dump_text:
        return [f"tcpdump: {dump_text.strip()[-200:]}"]
    return []
