"""Helpers shared by the STAN and Liftbridge tests.

``pb`` is a deliberately independent protobuf encoder (it does not use our .proto files),
so frames built with it check our field numbers against protocol-facts directly.
"""

from __future__ import annotations

from typing import Any

from dissectors.api import CarriedMessage, Direction


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def pb(*fields: tuple[int, Any]) -> bytes:
    """Encode ``(number, value)`` pairs: int/bool → varint, str/bytes → length-delimited,
    ``("fixed32", n)`` → wire type 5."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bool | int):
            out += tag(number, 0) + varint(int(value))
        elif isinstance(value, tuple) and value[0] == "fixed32":
            out += tag(number, 5) + int(value[1]).to_bytes(4, "little")
        else:
            raw = value.encode() if isinstance(value, str) else bytes(value)
            out += tag(number, 2) + varint(len(raw)) + raw
    return bytes(out)


def carried(
    subject: str,
    payload: bytes,
    reply: str | None = None,
    op: str = "PUB",
    direction: Direction = Direction.C2S,
    flow_id: int = 1,
) -> CarriedMessage:
    return CarriedMessage(
        "nats", op, subject, reply, None if op == "PUB" else "1", None, payload, direction,
        flow_id, 100, 200, 1_000, 2_000, 7, 8,
    )


def rows(records, table: str) -> list[dict[str, Any]]:
    return [r.values for r in records if r.table == table]


def anomalies(records) -> list[str]:
    return [r.values["kind"] for r in records if r.table == "anomalies"]


def nonnull(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
