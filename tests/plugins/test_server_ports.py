"""A flow picked up mid-stream gets its server from the ports the dissectors declare.

``reassembly`` knows no protocol: its flow table is given the server ports
(``analyzer.serverports.server_ports``: the reassembly default, every registered
dissector's ``default_ports``, plugins included, and the ``--decode-as`` ports).  Here a
plugin declares a port above the client's, so the lower-port rule alone would pick the
wrong side.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import ClassVar

import pyarrow.parquet as pq

from analyzer.pipeline import Options, dissect_capture
from analyzer.serverports import server_ports
from dissectors.api import Direction, Dissector, Session, Verdict
from dissectors.registry import Registry, discover
from dissectors.sdk.testing import Data, PcapFlow, write_pcap
from reassembly.flows import DEFAULT_SERVER_PORTS
from tests.plugins.pluginhelp import msgcap

PLUGIN_PORT = 40999
CLIENT_PORT = 30000  # below the plugin's port: the lower-port rule would call it the server


class PortOnlyDissector(Dissector):
    """A plugin that only declares a port (it claims no flow)."""

    name: ClassVar[str] = "portonly"
    default_ports: ClassVar[tuple[int, ...]] = (PLUGIN_PORT,)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return Verdict.NO

    @classmethod
    def session(cls, options) -> Session:
        raise AssertionError("never claims a flow")


def _mid_stream_pcap(path: Path) -> Path:
    """A TCP flow client 30000 -> server 40999 without its handshake (the first three
    packets ``write_pcap`` writes are dropped)."""
    script = [Data(Direction.C2S, b"hello\r\n"), Data(Direction.S2C, b"world\r\n")]
    write_pcap(path, [PcapFlow(script, PLUGIN_PORT, client_port=CLIENT_PORT)])
    raw = path.read_bytes()
    out, at, n = bytearray(raw[:24]), 24, 0
    while at < len(raw):
        caplen = struct.unpack_from("<I", raw, at + 8)[0]
        if n >= 3:
            out += raw[at:at + 16 + caplen]
        at += 16 + caplen
        n += 1
    path.write_bytes(bytes(out))
    return path


def _registry(*extra: type[Dissector]) -> Registry:
    reg = discover()
    for cls in extra:
        assert reg.add(cls), reg.errors
    return reg


def _flow(tmp_path: Path, registry: Registry, options: Options, name: str) -> dict:
    pcap = _mid_stream_pcap(tmp_path / f"{name}.pcap")
    dissect_capture(pcap, tmp_path / name, options, registry)
    (row,) = pq.read_table(tmp_path / name / "flows").to_pylist()
    return row


def test_plugin_port_marks_the_server_of_a_mid_stream_flow(tmp_path: Path) -> None:
    row = _flow(tmp_path, _registry(PortOnlyDissector), Options(), "plugin")
    assert (row["client_port"], row["server_port"]) == (CLIENT_PORT, PLUGIN_PORT)
    assert row["role_source"] == "port"


def test_without_the_plugin_the_lower_port_is_taken_as_the_server(tmp_path: Path) -> None:
    row = _flow(tmp_path, _registry(), Options(), "plain")
    assert (row["client_port"], row["server_port"]) == (PLUGIN_PORT, CLIENT_PORT)


def test_decode_as_port_marks_the_server(tmp_path: Path) -> None:
    row = _flow(tmp_path, _registry(), Options(decode_as={PLUGIN_PORT: "nats"}), "decode_as")
    assert (row["client_port"], row["server_port"]) == (CLIENT_PORT, PLUGIN_PORT)


def test_server_ports_joins_default_declared_and_decode_as() -> None:
    reg = _registry(PortOnlyDissector)
    ports = server_ports(reg, [12345])
    assert ports >= DEFAULT_SERVER_PORTS
    assert {PLUGIN_PORT, 12345, 4222, 6650} <= ports
    # what the built-in dissectors declare is what `msgcap protocols` lists
    for cls in reg.dissectors.values():
        assert set(cls.default_ports) <= ports


def test_follow_decides_roles_as_dissect_does(tmp_path: Path) -> None:
    """``msgcap follow`` (bytes, not --decoded) reassembles with the same ports: the
    client's bytes are c2s once ``--decode-as`` names the server's port."""
    pcap = _mid_stream_pcap(tmp_path / "follow.pcap")
    args = ("follow", str(pcap), "--flow", "0", "--direction", "c2s", "--raw")
    plain = msgcap(*args)
    named = msgcap(*args, "--decode-as", f"{PLUGIN_PORT}=nats")
    assert (plain.returncode, named.returncode) == (0, 0), plain.stderr + named.stderr
    assert plain.stdout == "world\n"  # the lower port taken as the server (text mode)
    assert named.stdout == "hello\n"
