"""Plugin isolation: a dissector that raises costs one flow, not the run; a plugin built for
another API version, or one whose import fails, is refused with a clear message and the
rest of msgcap works.

The broken plugins are real distributions: a ``*.dist-info`` with ``entry_points.txt`` in
a temporary directory put on the path (``sys.path`` in-process, ``PYTHONPATH`` for the
CLI), which is exactly how ``importlib.metadata`` finds installed packages.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.pipeline import Options, dissect_capture
from dissectors.api import (
    API_VERSION,
    Direction,
    Dissector,
    Field,
    PayloadDissector,
    Record,
    Session,
    Span,
    TableSpec,
    Transport,
    Verdict,
)
from dissectors.registry import Registry, check_plugin, discover
from dissectors.sdk.testing import Data, PcapFlow, write_pcap
from dissectors.tables import unregister_table
from tests.plugins.pluginhelp import msgcap

C, S = Direction.C2S, Direction.S2C

BOOM_TABLE = TableSpec("zz_boom", 1, "Test table of the raising plugin.",
                       (Field("text", pa.string(), "The line."),))


class _BoomSession(Session):
    """Emits one row per chunk; raises on a chunk containing RAISE (a plugin bug)."""

    def feed(self, direction: Direction, data: bytes, span: Span) -> list[Record]:
        if b"RAISE" in data:
            raise RuntimeError("plugin bug")
        self.decoded_bytes[direction] += len(data)
        return [Record("zz_boom", direction, span.offset, span.offset + len(data),
                       span.ts_first_ns, span.ts_last_ns, span.frame_first, span.frame_last,
                       {"text": data.decode(errors="replace")})]

    def gap(self, direction, offset, nbytes, ts_ns):
        return []

    def close(self, ts_ns):
        return []


class BoomDissector(Dissector):
    name: ClassVar[str] = "zz_boom"
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = (7777,)
    tables: ClassVar[tuple[TableSpec, ...]] = (BOOM_TABLE,)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        if prefix.startswith(b"PROBE-RAISES"):
            raise ValueError("probe bug")
        return Verdict.YES if prefix.startswith(b"BOOM") else Verdict.NO

    @classmethod
    def session(cls, options: dict[str, Any]) -> Session:
        return _BoomSession()


@pytest.fixture
def capture(tmp_path) -> Path:
    nats = [Data(S, b'INFO {"server_id":"x","max_payload":1048576}\r\n'),
            Data(C, b"CONNECT {}\r\nPUB a 2\r\nhi\r\n"), Data(S, b"PONG\r\n")]
    return write_pcap(tmp_path / "mixed.pcap", [
        PcapFlow([Data(C, b"BOOM hello"), Data(C, b"RAISE now"), Data(C, b"never seen")], 7777),
        PcapFlow(nats, 4222),
        PcapFlow([Data(C, b"BOOM again"), Data(S, b"fine")], 7777),
        PcapFlow([Data(C, b"PROBE-RAISES x")], 7777),
    ])


@pytest.fixture
def registry():
    reg = discover()
    assert reg.add(BoomDissector, "tests:BoomDissector")
    yield reg
    unregister_table(BOOM_TABLE.name)  # dissect_capture registered it


def _rows(out: Path, table: str) -> list[dict]:
    return pq.read_table(out / table).to_pylist()


def test_raising_dissector_costs_one_flow(capture, registry, tmp_path) -> None:
    out = tmp_path / "out"
    result = dissect_capture(capture, out, Options(validate=True), registry=registry)
    assert result.anomalies["pipeline.dissector_error"] == 2
    errors = [a for a in _rows(out, "anomalies") if a["kind"] == "pipeline.dissector_error"]
    assert [e["flow_id"] for e in errors] == [0, 3]
    assert "zz_boom raised RuntimeError('plugin bug')" in errors[0]["detail"]
    # a raising probe is no silent "no" (issue 17, part 4): one row, at its segment
    assert errors[1]["detail"] == (
        "zz_boom probe raised ValueError('probe bug'); zz_boom is not tried on this flow")
    assert errors[1]["frame"] is not None
    flows = {f["flow_id"]: f for f in _rows(out, "flows")}
    assert flows[0]["protocol"] == "zz_boom"
    # what follows the error in the broken flow is counted undecoded
    assert flows[0]["decoded_bytes_c2s"] == len(b"BOOM hello")
    assert flows[0]["undecoded_bytes_c2s"] >= len(b"never seen")
    # the other flows are decoded: NATS, and the same plugin on a healthy flow
    assert [r["op"] for r in _rows(out, "nats")] == ["INFO", "CONNECT", "PUB", "PONG"]
    boom = _rows(out, "zz_boom")
    assert [(r["flow_id"], r["text"]) for r in boom] == [
        (0, "BOOM hello"), (2, "BOOM again"), (2, "fine")]
    # a probe that raised drops its dissector for that flow: nobody else claims it
    assert flows[3]["protocol"] is None
    assert result.manifest["status"] == "degraded"


def test_raising_dissector_keeps_byte_accounting(capture, registry, tmp_path) -> None:
    out = tmp_path / "out"
    dissect_capture(capture, out, Options(), registry=registry)
    flow = {f["flow_id"]: f for f in _rows(out, "flows")}[0]
    assert flow["decoded_bytes_c2s"] + flow["undecoded_bytes_c2s"] == flow["stream_bytes_c2s"]


def test_strict_mode_reraises(capture, registry, tmp_path) -> None:
    with pytest.raises(RuntimeError, match="plugin bug"):
        dissect_capture(capture, tmp_path / "out", Options(strict=True), registry=registry)


# ------------------------------------------------------------------ refused plugins

_PLUGINS = {
    "zz_v2_plugin.py": '''
        from typing import ClassVar
        from dissectors.api import Dissector, Verdict

        class V2Dissector(Dissector):
            name: ClassVar[str] = "zz_v2"
            api_version: ClassVar[int] = 2

            @classmethod
            def probe(cls, direction, prefix):
                return Verdict.NO

            @classmethod
            def session(cls, options):
                raise NotImplementedError
        ''',
    "zz_broken_plugin.py": '''
        import this_module_does_not_exist  # noqa: F401
        ''',
    "zz_half_plugin.py": '''
        from typing import ClassVar
        from dissectors.api import Dissector

        class HalfDissector(Dissector):  # forgot probe and session
            name: ClassVar[str] = "zz_half"
        ''',
    "zz_clash_plugin.py": '''
        from typing import ClassVar
        import pyarrow as pa
        from dissectors.api import Dissector, Field, TableSpec, Verdict

        class ClashDissector(Dissector):  # declares a different table named "nats"
            name: ClassVar[str] = "zz_clash"
            tables: ClassVar[tuple] = (
                TableSpec("nats", 1, "Not ours.", (Field("x", pa.int32(), "x"),)),)

            @classmethod
            def probe(cls, direction, prefix):
                return Verdict.NO

            @classmethod
            def session(cls, options):
                raise NotImplementedError
        ''',
}
_ENTRY_POINTS = """\
[msgcap.dissectors]
zz_v2 = zz_v2_plugin:V2Dissector
zz_broken = zz_broken_plugin:Thing
zz_half = zz_half_plugin:HalfDissector
zz_clash = zz_clash_plugin:ClashDissector
zz_notaclass = zz_v2_plugin:Verdict
"""


@pytest.fixture
def broken_plugins(tmp_path, monkeypatch) -> Path:
    site = tmp_path / "site"
    dist = site / "zz_broken_plugins-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-broken-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(_ENTRY_POINTS)
    for name, body in _PLUGINS.items():
        (site / name).write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_refused_plugins_are_reported_not_fatal(broken_plugins) -> None:
    reg = discover()
    errors = dict(reg.errors)
    assert errors["zz_v2_plugin:V2Dissector"].startswith(
        f"built for msgcap dissector API version 2, but this msgcap provides version "
        f"{API_VERSION} (a newer API)")
    assert errors["zz_broken_plugin:Thing"].startswith("import failed: ModuleNotFoundError(")
    assert errors["zz_half_plugin:HalfDissector"] == (
        "dissector 'zz_half' does not implement probe, session")
    assert "table 'nats' is already declared differently by 'nats'" in errors[
        "zz_clash_plugin:ClashDissector"]
    assert errors["zz_v2_plugin:Verdict"] == (
        "not a dissectors.api.Dissector or PayloadDissector")
    assert "nats" in reg.dissectors
    assert not {"zz_v2", "zz_half", "zz_clash"} & set(reg.dissectors)


def test_cli_reports_refused_plugins_and_runs(broken_plugins, tmp_path) -> None:
    env = {"PYTHONPATH": str(broken_plugins)}
    proc = msgcap("protocols", env=env)
    assert proc.returncode == 1  # degraded: some plugins were not loaded
    err = " ".join(proc.stderr.split())
    assert ("plugin zz_v2_plugin:V2Dissector not loaded: built for msgcap dissector API "
            "version 2, but this msgcap provides version 1") in err
    assert "plugin zz_broken_plugin:Thing not loaded: import failed" in err
    assert " nats " in proc.stdout
    pcap = write_pcap(tmp_path / "n.pcap", [PcapFlow([Data(C, b"CONNECT {}\r\nPING\r\n"),
                                                      Data(S, b"PONG\r\n")], 4222)])
    proc = msgcap("dissect", str(pcap), "-o", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "zz_v2_plugin:V2Dissector not loaded" in " ".join(proc.stderr.split())
    assert len(pq.read_table(tmp_path / "out" / "nats").to_pylist()) == 3


@pytest.mark.parametrize(("version", "fine"), [(API_VERSION, True), (0, False), ("1", False)])
def test_check_plugin_api_version(version, fine) -> None:
    cls = type("X", (BoomDissector,), {"api_version": version, "name": "x"})
    assert (check_plugin(cls) == "") is fine


def test_default_api_version_is_current() -> None:
    assert BoomDissector.api_version == API_VERSION == 1
    assert check_plugin(BoomDissector) == ""


def test_registry_refuses_a_plugin_table_named_like_a_core_table() -> None:
    flows = type("F", (BoomDissector,), {"name": "zz_flows", "tables": (
        TableSpec("flows", 1, "Not the flows table.", (Field("x", pa.int32(), "x"),)),)})
    reg = Registry()
    assert not reg.add(flows, "f")
    assert reg.errors == [("f", "table 'flows' is already declared differently by "
                               "'msgcap (core table)'; rename the plugin's table")]


def test_registry_refuses_a_second_dissector_with_a_taken_name() -> None:
    reg = Registry()
    assert reg.add(BoomDissector, "a")
    other = type("Other", (BoomDissector,), {})
    assert not reg.add(other, "b")
    assert reg.errors == [("b", "dissector name 'zz_boom' already taken")]


# ------------------------------------------- plugins that raise SystemExit (issue 17, part 4)

SAMPLES = Path(__file__).resolve().parents[2] / "samples"

_EXITING = '''
    import sys
    from typing import ClassVar
    import pyarrow as pa
    from dissectors.api import Dissector, Field, Session, TableSpec, Transport, Verdict

    class RaisingProbe(Dissector):
        """Its probe raises what ZZ_RAISE names (a library calling sys.exit, a bug)."""
        name: ClassVar[str] = "aa_probe_raises"  # sorts first: asked before nats
        transport: ClassVar[Transport] = Transport.TCP

        @classmethod
        def probe(cls, direction, prefix):
            import os
            what = os.environ["ZZ_RAISE"]
            if what == "exit0":
                sys.exit(0)
            if what == "exit3":
                sys.exit(3)
            raise ValueError("probe bug")

        @classmethod
        def session(cls, options):
            raise AssertionError("never claims a flow")

    class _ExitingSession(Session):
        def feed(self, direction, data, span):
            sys.exit(0)

        def gap(self, direction, offset, nbytes, ts_ns):
            return []

        def close(self, ts_ns):
            return []

    class ExitingSession(Dissector):
        """Claims NATS flows (the server's INFO) and calls sys.exit(0) in feed."""
        name: ClassVar[str] = "aa_session_exits"
        transport: ClassVar[Transport] = Transport.TCP
        tables: ClassVar[tuple] = (
            TableSpec("aa_session_exits", 1, "Never written.", (Field("x", pa.int32(), "x"),)),)

        @classmethod
        def probe(cls, direction, prefix):
            return Verdict.YES if prefix.startswith(b"INFO ") else Verdict.NO

        @classmethod
        def session(cls, options):
            return _ExitingSession()
'''


def _plugin_site(tmp_path: Path, entry: str) -> Path:
    site = tmp_path / "site"
    dist = site / "zz_exiting-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-exiting\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[msgcap.dissectors]\n{entry}\n")
    (site / "zz_exiting.py").write_text(textwrap.dedent(_EXITING))
    return site


def _baseline(tmp_path: Path, *captures: Path) -> Path:
    out = tmp_path / "baseline"
    proc = msgcap("dissect", *map(str, captures), "-o", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    return out


def _sorted(out: Path, table: str) -> list[dict]:
    """Rows in id order, without the ids (an anomaly row of a flow takes one of its ids,
    so the rows after it are numbered one further than without the plugin)."""
    rows = sorted(_rows(out, table), key=lambda r: r["record_id"])
    return [{k: v for k, v in r.items() if k not in ("record_id", "parent_record_id")}
            for r in rows]


@pytest.mark.parametrize("what", ["exit0", "exit3", "value"])
def test_regression_probe_raising_systemexit_ended_the_run_clean_with_nothing_written(
        what, tmp_path) -> None:
    """A probe that raised SystemExit left exit 0, an empty OUT and no message; one that
    raised ValueError was dropped without a row.  Now: one ``pipeline.dissector_error``
    per flow it was asked about, everything else written as without the plugin, exit 1."""
    site = _plugin_site(tmp_path, "aa_probe_raises = zz_exiting:RaisingProbe")
    capture = SAMPLES / "nats-basic.pcap"
    base = _baseline(tmp_path, capture)
    out = tmp_path / "out"
    proc = msgcap("dissect", str(capture), "-o", str(out),
                  env={"PYTHONPATH": str(site), "ZZ_RAISE": what})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    exc = {"exit0": "SystemExit(0)", "exit3": "SystemExit(3)",
           "value": "ValueError('probe bug')"}[what]
    errors = [a for a in _rows(out, "anomalies") if a["kind"] == "pipeline.dissector_error"]
    flows = _rows(out, "flows")
    with_bytes = sorted(f["flow_id"] for f in flows
                        if f["stream_bytes_c2s"] + f["stream_bytes_s2c"] > 0)
    assert sorted(e["flow_id"] for e in errors) == with_bytes and with_bytes
    assert {e["detail"] for e in errors} == {
        f"aa_probe_raises probe raised {exc}; aa_probe_raises is not tried on this flow"}
    # the rest is exactly what a run without the plugin writes
    assert _sorted(out, "nats") == _sorted(base, "nats")
    assert sorted(flows, key=lambda f: f["flow_id"]) == sorted(
        _rows(base, "flows"), key=lambda f: f["flow_id"])
    import json
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "degraded"
    assert manifest["anomalies_by_kind"]["pipeline.dissector_error"] == len(with_bytes)


def test_regression_session_raising_systemexit_ended_the_run_clean_with_nothing_written(
        tmp_path) -> None:
    """A session whose feed calls sys.exit(0) loses its flows (one row each, named), and
    the other capture of the same run is written whole; exit 1."""
    site = _plugin_site(tmp_path, "aa_session_exits = zz_exiting:ExitingSession")
    nats, pulsar = SAMPLES / "nats-basic.pcap", SAMPLES / "pulsar-client.pcap"
    base = _baseline(tmp_path, nats, pulsar)
    out = tmp_path / "out"
    proc = msgcap("dissect", str(nats), str(pulsar), "-o", str(out),
                  env={"PYTHONPATH": str(site)})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    flows = _rows(out, "flows")
    taken = sorted(f["flow_id"] for f in flows if f["protocol"] == "aa_session_exits")
    assert taken  # the NATS flows (their server speaks first: INFO)
    errors = [a for a in _rows(out, "anomalies") if a["kind"] == "pipeline.dissector_error"]
    assert sorted(e["flow_id"] for e in errors) == taken
    assert {e["detail"] for e in errors} == {
        "aa_session_exits raised SystemExit(0); the rest of this flow is left undecoded"}
    for f in flows:  # nothing of a broken flow counts as decoded
        if f["protocol"] == "aa_session_exits":
            assert f["decoded_bytes_c2s"] == f["decoded_bytes_s2c"] == 0
            assert f["undecoded_bytes_s2c"] == f["stream_bytes_s2c"] > 0
    # the Pulsar capture is untouched by the plugin
    for table in ("pulsar_commands", "pulsar_messages"):
        assert _sorted(out, table) == _sorted(base, table)
    assert pq.read_table(out / "aa_session_exits").num_rows == 0


# ------------------------------------------------ payload dissectors (STAN-like plugins)

def _carried(subject: str, payload: bytes) -> Any:
    from dissectors.api import CarriedMessage

    return CarriedMessage("nats", "PUB", subject, None, None, None, payload, C,
                          7, 10, 20, 100, 200, 3, 4)


def test_payload_plugin_systemexit_is_a_row_and_its_probe_is_not_asked_again() -> None:
    """A payload dissector's ``probe_payload``/``decode``/``new_state`` calling
    ``sys.exit`` is a ``pipeline.payload_dissector_error`` row (the run goes on); a probe
    that raised is not asked again in that scope, and ``probed`` (the NATS fast path's
    question) answers "maybe" until the reference path has recorded it."""
    from dissectors.dispatch import PayloadDispatcher

    calls = []

    class ExitProbe(PayloadDissector):
        name = "zz_exit_probe"

        @classmethod
        def probe_payload(cls, payload):
            calls.append(payload)
            raise SystemExit(0)

        @classmethod
        def new_state(cls, options):
            return None

        @classmethod
        def decode(cls, state, bindings, msg, hint):
            raise AssertionError("never chosen")

    class ExitDecode(PayloadDissector):
        name = "zz_exit_decode"
        subjects = (("exit.>", ""),)

        @classmethod
        def new_state(cls, options):
            return None

        @classmethod
        def decode(cls, state, bindings, msg, hint):
            raise SystemExit("library gave up")

    class ExitState(PayloadDissector):
        name = "zz_exit_state"
        subjects = (("state.>", ""),)

        @classmethod
        def new_state(cls, options):
            raise SystemExit(2)

        @classmethod
        def decode(cls, state, bindings, msg, hint):
            raise AssertionError("left out of the scope")

    scope = PayloadDispatcher([ExitProbe, ExitDecode, ExitState]).scope(("10.0.0.2", 4222))
    assert [(n, repr(e)) for n, e in scope.setup_errors] == [("zz_exit_state", "SystemExit(2)")]
    assert scope.probed(b"abc") is True  # "maybe": the reference path will record it
    (row,) = scope.dispatch(_carried("x.y", b"abc"))
    assert row.table == "anomalies"
    assert row.values["kind"] == "pipeline.payload_dissector_error"
    assert row.values["detail"] == ("zz_exit_probe probe_payload raised SystemExit(0); it is not "
                                    "asked again for messages of this server")
    assert scope.dispatch(_carried("x.y", b"def")) == []
    assert scope.probed(b"ghi") is False
    assert len(calls) == 2  # probed once, dispatched once, then never again
    (row,) = scope.dispatch(_carried("exit.now", b"abc"))
    assert row.values["detail"] == "zz_exit_decode raised SystemExit('library gave up')"
    assert scope.dispatch(_carried("state.x", b"abc")) == []  # its dissector is left out
    with pytest.raises(SystemExit):
        PayloadDispatcher([ExitDecode], strict=True).scope(1).dispatch(_carried("exit.x", b""))


class _ExitingState(PayloadDissector):
    name: ClassVar[str] = "zz_state_exits"
    subjects: ClassVar[tuple] = ((">", ""),)

    @classmethod
    def new_state(cls, options):
        raise SystemExit(0)

    @classmethod
    def decode(cls, state, bindings, msg, hint):
        raise AssertionError("left out")


def test_payload_plugin_new_state_systemexit_is_one_row_per_server(tmp_path) -> None:
    """``new_state`` is called when a NATS server's scope is first needed: its
    ``SystemExit`` becomes one row (at the first flow of that server), the run goes on."""
    reg = discover()
    assert reg.add(_ExitingState, "tests:_ExitingState")
    out = tmp_path / "out"
    result = dissect_capture(Path(__file__).resolve().parents[2] / "samples" / "nats-basic.pcap",
                             out, Options(), registry=reg)
    rows = [a for a in _rows(out, "anomalies") if a["kind"] == "pipeline.payload_dissector_error"]
    assert [r["detail"] for r in rows] == [
        "zz_state_exits new_state raised SystemExit(0); it decodes nothing for this server"]
    assert result.rows["nats"] > 0 and result.manifest["status"] == "degraded"
