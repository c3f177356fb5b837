"""Shared by the Felix tests: the sending side's frame builders (samples/record_felix.py,
written from protocol-facts §5 independently of the decoder and checked against the
upstream vectors), a session driver, and the one comparator used for hand-built frames,
random frames and the real capture alike: a frame's ``felix`` row and its
``felix_messages`` rows against what the sender recorded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dissectors.api import Direction, Record
from dissectors.felix import FelixDissector
from dissectors.sdk.testing import run_session

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
if str(SAMPLES) not in sys.path:
    sys.path.insert(0, str(SAMPLES))

import record_felix as rf  # noqa: E402

C, S = Direction.C2S, Direction.S2C

# builders whose frames the client sends; everything else comes from the broker
CLIENT_KINDS = frozenset({"binary_publish_batch", "binary_acked_publish_batch"})
CLIENT_TYPES = frozenset({"auth", "publish", "publish_batch", "subscribe", "cache_put",
                          "cache_get", "cache_delete"})


def sender(frame: rf.Frame) -> Direction:
    t = frame.truth
    return C if t["type"] in CLIENT_TYPES or t["kind"] in CLIENT_KINDS else S


def rows_of(records: list[Record]) -> tuple[list[dict], list[list[dict]], list[dict]]:
    """(felix rows, their felix_messages children, anomalies) of session records."""
    frames, children, anomalies = [], [], []
    for r in records:
        if r.table == "felix":
            frames.append({"direction": r.direction.short, "offset_start": r.offset_start,
                           "offset_end": r.offset_end, **r.values})
            children.append([dict(c.values) for c in r.children])
        elif r.table == "anomalies":
            anomalies.append(dict(r.values))
    return frames, children, anomalies


def run(script: list[tuple[Direction, bytes]], split: Any = "whole", **options: Any):
    """Feed ``script`` to a Felix session; (frames, children, anomalies, run)."""
    r = run_session(FelixDissector, script, options=options, split=split)
    return (*rows_of(r.records), r)


def as_column(v: Any) -> Any:
    """A sender's u64 as the int64 column stores it (two's complement, wrapping)."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1 << 63:
        v %= 1 << 64
        return v - (1 << 64) if v >= 1 << 63 else v
    return v


def assert_frame(row: dict[str, Any], children: list[dict[str, Any]],
                 truth: dict[str, Any], where: str = "") -> None:
    """One ``felix`` row and its message rows against the sender's record."""
    got = {k: row.get(k) for k in ("flags", "length", "kind", "type", "body_sha256")}
    want = {k: truth[k] for k in got}
    assert got == want, f"{where}: header/kind {got} != {want}"
    for k, v in truth["fields"].items():
        assert row.get(k) == as_column(v), (
            f"{where} ({truth['type'] or truth['kind']}): {k} = {row.get(k)!r}, "
            f"sender says {v!r}")
    msgs = sorted(children, key=lambda m: m["index"])
    assert len(msgs) == len(truth["messages"]), (
        f"{where}: {len(msgs)} felix_messages rows, sender sent {len(truth['messages'])}")
    label = truth["type"] or truth["kind"]
    for m, tm in zip(msgs, truth["messages"], strict=True):
        assert m["type"] == label, where
        for k, v in tm.items():
            assert m.get(k) == as_column(v), (
                f"{where} message {tm['index']}: {k} = {m.get(k)!r}, sender says {v!r}")
