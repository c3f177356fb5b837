"""Redis RESP dissector for msgcap: an example plugin, installed like any other.

Tables ``redis`` (one row per RESP message: commands, replies, pushes) and
``redis_pubsub`` (publishes, deliveries and subscription changes, children of the
``redis`` rows).  Registered in ``pyproject.toml`` under the ``msgcap.dissectors`` entry
point group; everything it uses comes from ``dissectors.api``.

Options (the ``options`` dict given to ``RedisDissector.session``): ``payload_cap``,
bytes kept per bulk string, argument and pub/sub payload (default 4096; None keeps all).
"""

from __future__ import annotations

from typing import Any, ClassVar

from dissectors.api import (
    Direction,
    Dissector,
    Session,
    TableSpec,
    Transport,
    Verdict,
)

from msgcap_redis import resp
from msgcap_redis.session import RedisSession
from msgcap_redis.tables import REDIS, REDIS_PUBSUB

__all__ = ["REDIS", "REDIS_PUBSUB", "RedisDissector", "RedisSession"]
__version__ = "0.1.0"


class RedisDissector(Dissector):
    name: ClassVar[str] = "redis"
    description: ClassVar[str] = "Redis RESP2/RESP3: commands, replies, pub/sub (example plugin)"
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = (6379,)
    tables: ClassVar[tuple[TableSpec, ...]] = (REDIS, REDIS_PUBSUB)
    api_version: ClassVar[int] = 1  # the dissectors.api major version this was written for

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        return resp.probe(direction, prefix)

    @classmethod
    def session(cls, options: dict[str, Any]) -> Session:
        return RedisSession(options)
