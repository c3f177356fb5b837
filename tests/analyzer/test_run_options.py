"""Run options: one payload-cap default, one policy for a bad session option, one builder of
``Options`` from a command's arguments (issue 21, the Options bullet)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer.cli import build_parser, main
from analyzer.cliutil import UserError
from analyzer.pipeline import Options
from analyzer.runoptions import build_options, options_from_args
from dissectors.api import DEFAULT_PAYLOAD_CAP, session_option
from dissectors.registry import discover
from reassembly.limits import Limits

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = discover()
# the built-in sessions only (an installed plugin is its author's to test)
BUILTIN = sorted(
    [(name, d.session) for name, d in REGISTRY.dissectors.items()
     if d.__module__.startswith("dissectors.")]
    + [(name, d.new_state) for name, d in REGISTRY.payload.items()
       if d.__module__.startswith("dissectors.")],
    key=lambda item: item[0],
)
BAD_CAPS = [-1, "4096", 1.5, True]


def test_the_registry_has_every_builtin_session():
    """The parametrization below covers what it should (a registry that found nothing
    would make those tests pass vacuously)."""
    assert [name for name, _ in BUILTIN] == [
        "felix", "jetstream_api", "liftbridge", "nats", "nats_cluster", "pulsar", "stan"]


@pytest.mark.parametrize("bad", BAD_CAPS, ids=repr)
@pytest.mark.parametrize(("name", "factory"), BUILTIN, ids=[n for n, _ in BUILTIN])
def test_every_builtin_session_rejects_a_bad_payload_cap_the_same_way(name, factory, bad):
    """One policy: a ValueError naming the dissector and the option.  Before, nats_cluster
    replaced a bad value by 4096 without a word and the others raised their own
    messages."""
    with pytest.raises(ValueError) as info:
        factory({"payload_cap": bad})
    assert str(info.value) == (
        f"{name} option payload_cap must be an int >= 0 or None, got {bad!r}")


@pytest.mark.parametrize("good", [None, 0, 1, DEFAULT_PAYLOAD_CAP, 1 << 40])
@pytest.mark.parametrize(("name", "factory"), BUILTIN, ids=[n for n, _ in BUILTIN])
def test_every_builtin_session_accepts_a_good_payload_cap(name, factory, good):
    factory({"payload_cap": good})
    factory({})


def test_session_option_policy():
    assert session_option({}, "x", 7) == 7
    assert session_option({"x": 0}, "x", 7) == 0
    assert session_option({"x": None}, "x", 7, none_ok=True) is None
    with pytest.raises(ValueError, match=r"^option x must be an int >= 0, got None$"):
        session_option({"x": None}, "x", 7)
    with pytest.raises(ValueError, match=r"^pulsar option x must be an int >= 16, got 15$"):
        session_option({"x": 15}, "x", 7, minimum=16, owner="pulsar")
    with pytest.raises(ValueError, match=r"got False$"):
        session_option({"x": False}, "x", 7)


def test_default_payload_cap_is_defined_once_in_the_product():
    """The scaffold's templates (code for third-party plugins) may spell their own."""
    pattern = re.compile(r"^\s*DEFAULT_PAYLOAD_CAP\s*(:[^=]*)?=", re.M)
    found = sorted(
        str(p.relative_to(ROOT))
        for top in ("analyzer", "dissectors", "reassembly")
        for p in (ROOT / top).rglob("*.py")
        if p.name != "scaffold.py" and pattern.search(p.read_text())
    )
    assert found == ["dissectors/options.py"]
    assert DEFAULT_PAYLOAD_CAP == 4096 == Options().payload_cap


def test_no_session_reads_payload_cap_on_its_own():
    """Every reader goes through dissectors.options (so through its one policy)."""
    reader = re.compile(r"""\.get\(\s*["']payload_cap["']""")
    found = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "dissectors").rglob("*.py")
        if reader.search(p.read_text())
    )
    assert found == []


# ------------------------------------------------------------------ Options from arguments


@pytest.fixture
def keylog(tmp_path: Path) -> str:
    path = tmp_path / "k.log"
    path.write_text(f"CLIENT_RANDOM {'ab' * 32} {'cd' * 48}\n")
    return str(path)


def _options(argv: list[str]) -> Options:
    return options_from_args(build_parser().parse_args(argv), REGISTRY)


def test_dissect_and_spark_ingest_build_identical_options(keylog, tmp_path):
    common = ["--payload-cap", "100", "--decode-as", "4223=nats", "--decode-as",
              "6651=pulsar", "--keylog", keylog, "--overwrite"]
    dissect = _options(["dissect", "x.pcap", "-o", str(tmp_path / "o"), *common])
    spark = _options(["spark", "ingest", "x.pcap", "-o", str(tmp_path / "o"), *common])
    assert dissect == spark
    assert dissect == Options(payload_cap=100, decode_as={4223: "nats", 6651: "pulsar"},
                              keylog=keylog, overwrite=True, limits=Limits())


def test_defaults_are_the_same_for_every_command(tmp_path):
    """No flags: dissect, spark ingest, flows and summary's capture path agree."""
    built = [
        _options(["dissect", "x.pcap", "-o", str(tmp_path / "o")]),
        _options(["spark", "ingest", "x.pcap", "-o", str(tmp_path / "o")]),
        _options(["flows", "x.pcap"]),
        _options(["summary", "x.pcap"]),
        build_options(REGISTRY, decode_as={}, keylog=None),  # summary's _dissect_into
    ]
    assert all(o == Options() for o in built), built


def test_flows_summary_and_dissect_agree_on_the_flags_they_share(keylog):
    shared = ["--decode-as", "9999=nats", "--keylog", keylog]
    flows = _options(["flows", "x.pcap", *shared])
    summary = _options(["summary", "x.pcap", *shared])
    dissect = _options(["dissect", "x.pcap", "-o", "o", *shared])
    assert flows == summary == dissect == Options(decode_as={9999: "nats"}, keylog=keylog)


def test_dissect_only_flags(tmp_path):
    o = _options(["dissect", "x.pcap", "-o", "o", "--keep-secrets", "--memory-limit", "64M",
                  "--decode"])
    assert (o.keep_secrets, o.limits.memory_limit_bytes, o.payload_schemas) == (
        True, 64 << 20, ())


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"payload_cap": -1}, "--payload-cap -1 is not a number of bytes"),
    ({"payload_cap": "12"}, "--payload-cap '12' is not a number of bytes"),
    ({"decode_as": {4222: "nope"}}, "--decode-as 4222=nope: unknown dissector 'nope'"),
    ({"keylog": "/nonexistent/k.log"}, "key log /nonexistent/k.log not found"),
])
def test_build_options_refuses_bad_values_as_user_errors(kwargs, said):
    with pytest.raises(UserError) as info:
        build_options(REGISTRY, **kwargs)
    assert info.value.message.startswith(said)
    assert info.value.fix


@pytest.mark.parametrize("argv", [
    ["dissect", "x.pcap", "-o", "o", "--payload-cap", "-1"],
    ["spark", "ingest", "x.pcap", "-o", "o", "--payload-cap", "-1"],
    ["spark", "ingest", "x.pcap", "-o", "o", "--payload-cap", "lots"],
])
def test_cli_bad_payload_cap_is_error_fix_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "fix:" in err and "payload-cap" in err
