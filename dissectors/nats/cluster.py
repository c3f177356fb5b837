"""NATS server-to-server protocols: routes, gateways, leaf nodes (table ``nats_cluster``).

Facts (nats-io/nats-server ``server/parser.go``, ``route.go``, ``leafnode.go``,
``gateway.go``; restated, and checked against nats-server 2.15 on the wire):

* Same text framing as the client protocol: a control line ending in CRLF, ops
  case-insensitive, arguments separated by runs of spaces/tabs, a message's payload is
  exactly the declared size followed by CRLF.  Both sides send ``INFO <json>``; the side
  that opened the connection also sends ``CONNECT <json>``.  ``PING``/``PONG``/``+OK``/
  ``-ERR`` as for clients.
* Routes (default port 6222) and gateways (7222): ``RS+ <account> <subject> [<queue>
  <weight>]``, ``RS- <account> <subject> [<queue>]``, ``RMSG <account> <subject>
  [<reply>] <size>``, ``HMSG <account> <subject> [<reply>] <hdr size> <size>``; with
  queue subscribers the reply position holds ``+ <reply>`` or ``|`` followed by the
  queue names.  A route dedicated to one account (2.10+ pinned accounts, the system
  account's route) leaves the account out.  Leaf-node interest crossing a route carries
  its origin cluster: ``LS+ <origin> <account> <subject> [<queue> <weight>]``, ``LS-
  <origin> <account> <subject> [<queue>]``, ``LMSG <origin> <account> <subject> [...]
  <hdr size> <size>`` (always with a header size).  Gateways also send ``A+ <account>`` /
  ``A- <account>`` (account interest, optimistic mode only).
* Gateway commands are INFO lines with ``gateway_cmd`` (``GatewayCmd``) and
  ``gateway_cmd_payload`` (bytes, base64 in the JSON): 1 gossips the URLs of a gateway,
  2 / 3 bracket the RS+ of every subscription of the account named by the payload when
  the receiving side switches that account to interest-only mode (only subscriptions
  with interest cross from then on; ``gateway_iom`` in the first INFO: the server starts
  every account in that mode).  Replies routed back over a gateway carry the prefix
  ``_GR_.<cluster hash>.<server hash>.`` before the requester's reply subject.  Seen on
  nats-server 2.15 with the system account and an application account
  (samples/nats-gateway.pcap): every account switched at connect, so no ``A+``/``A-``.
* Leaf-node connections (7422) are bound to one account, which is not on the wire:
  ``LS+ <subject> [<queue> <weight>]``, ``LS- <subject> [<queue>]``, ``LMSG <subject>
  [...] <size>``, ``HMSG <subject> [...] <hdr size> <size>``.  Leaf connections of
  2.10+ servers negotiate S2 compression by default (``"compression":"s2_auto"``), and
  routes and gateways can be configured to compress.
* Compression: each side sends its INFO in clear; from the byte after it, a direction
  whose link negotiated compression is an S2 stream (it opens with the stream identifier
  chunk ``ff 06 00 00 "S2sTwO"``; the soliciting side of a leaf sends a short INFO
  first, then its CONNECT inside the stream).  Seen on nats-server 2.15 with
  ``compression: s2_fast|s2_better|s2_best`` (samples/nats-s2-*.pcap).

Strategy for compressed directions: after an INFO line, when the next bytes are the S2
stream identifier, the direction switches to an ``s2.S2Stream`` fed with the wire bytes;
its decoded chunks feed a second line framer that sees the plain protocol (offsets of a
virtual decompressed stream).  Rows made from it get back the *wire* offsets of the
chunks their bytes came from (a row spans whole chunks), ``compression`` = ``s2`` and
``crc_status`` (``mismatch`` when any of those chunks failed its CRC).  A chunk that
cannot be decoded is a ``nats_cluster.s2_corrupt`` anomaly and a one-byte hole in the
decompressed stream (the message it cut is reported incomplete and the parser
resynchronises), and decoding goes on with the next chunk.  Wire byte accounting of a
compressed direction is the S2 decoder's (chunks read vs skipped).  The S2 buffer draws
from the run's memory budget when the options carry it (``memory_budget``), else is
bounded by ``s2_max_block_bytes`` (default 4 MiB, S2's largest block).  A stream
identifier where no INFO came before it (a capture that starts mid-connection) is one
``nats_cluster.compressed`` anomaly and the direction is left undecoded.

The kind of link is learned from the INFO/CONNECT JSON (``gateway`` → gateway;
``remote_account``/``info_on_connect`` → leaf; ``route_pool_size``/``lnoc``/a CONNECT with
``cluster`` → route) and, failing that, from the ops themselves.

Links authenticate like clients (CONNECT ``user``/``pass``, ``auth_token``, ``jwt``/``sig``
for leaf nodes): unless the option ``keep_secrets`` is true those values are replaced in
``json_raw`` and in anomaly details by ``<redacted len=N sha256=HEX>``, and both pass the
redaction gate (``dissectors.redaction``, as for the ``nats`` table).

Light on import, as ``dissectors.pulsar``: every run loads this module (the registry
needs the dissector's name, ports and table; the NATS probe asks ``is_cluster_json``),
but only a run that meets a server link needs the session (``cluster_session``: S2,
the framing rule, redaction); ``NatsClusterDissector.session`` imports it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa

from dissectors.api import (
    Direction,
    Dissector,
    Field,
    Session,
    SessionOptions,
    TableSpec,
    Transport,
    Verdict,
    payload_fields,
    register_table,
)
from dissectors.nats import parser as nats_parser

if TYPE_CHECKING:
    from dissectors.nats.cluster_session import (
        GatewayCmd,
        NatsClusterAnomaly,
        NatsClusterSession,
    )

__all__ = [
    "NATS_CLUSTER_TABLE",
    "GatewayCmd",
    "NatsClusterAnomaly",
    "NatsClusterDissector",
    "NatsClusterSession",
    "is_cluster_json",
]

_TABLE = "nats_cluster"
_STR = pa.string()
_CLUSTER_OPS = ("RS+", "RS-", "LS+", "LS-", "RMSG", "LMSG", "A+", "A-")
_ALL_OPS = (*_CLUSTER_OPS, "HMSG", "INFO", "CONNECT", "PING", "PONG", "+OK", "-ERR")
_OP_BYTES = {op.encode(): op for op in _ALL_OPS}
# JSON members only server links send (see the module docstring)
_ROUTE_KEYS = ("route_pool_size", "lnoc", "lnocu", "ln", "route_account")
_LEAF_KEYS = ("remote_account", "info_on_connect", "leafnode", "compress_mode")
_GATEWAY_KEYS = ("gateway", "gateway_url", "gateway_urls", "gateway_cmd")
# any of them: the JSON comes from a server link (``is_cluster_json``)
_LINK_KEYS = frozenset((*_ROUTE_KEYS, *_LEAF_KEYS, *_GATEWAY_KEYS))

NATS_CLUSTER_TABLE = register_table(
    TableSpec(
        _TABLE,
        4,  # 2: timestamps in microseconds + exact `_ns` columns; 3: compression, crc_status;
        # 4: gateway_cmd
        "One row per operation on a NATS server-to-server connection: routes within a "
        "cluster, gateways between clusters, leaf-node connections (INFO, CONNECT, RS+, "
        "RS-, LS+, LS-, RMSG, LMSG, HMSG, A+, A-, PING, PONG, +OK, -ERR). A message "
        "published by a client is found here on its way to subscribers on other servers "
        "(same subject, payload_sha256 as its `nats` PUB row); interest propagation "
        "(RS+/LS+) shows which server asked for which subjects. Malformed lines are "
        "`anomalies` (kinds `nats_cluster.*`).",
        (
            Field("op", _STR, "Operation, canonical upper case.", False),
            Field("link", _STR, "Kind of server link: `route`, `gateway`, `leaf`, or "
                  "`unknown` when nothing told yet (learned from INFO/CONNECT and the ops)."),
            Field("origin", _STR, "LS+/LS-/LMSG on a route: the cluster the leaf-node "
                  "interest or message came from."),
            Field("account", _STR, "Account of the subscription or message (`$G` is the "
                  "global account). Leaf connections: the account the link is bound to "
                  "when the CONNECT said (`remote_account`), else null; pinned-account "
                  "routes do not send it."),
            Field("subject", _STR, "RS±/LS±: subject of interest (wildcards as sent); "
                  "RMSG/LMSG/HMSG: subject the message was published to."),
            Field("reply_to", _STR, "RMSG/LMSG/HMSG: reply subject; null if none."),
            Field("queue", _STR, "RS±/LS±: queue group of the interest; null for a plain "
                  "subscription."),
            Field("queue_weight", pa.int32(), "RS+/LS+: number of queue members behind "
                  "this interest."),
            Field("queues", pa.list_(_STR), "RMSG/LMSG/HMSG: queue groups the message is "
                  "for (after the `+ reply` / `|` marker); empty when none."),
            Field("header_len", pa.int64(), "HMSG/LMSG: declared header size (bytes)."),
            *payload_fields(),
            Field("headers", pa.map_(_STR, pa.list_(_STR)), "HMSG/LMSG with headers: the "
                  "header fields, name to values in order."),
            Field("server_id", _STR, "INFO/CONNECT: `server_id` (CONNECT of a route: "
                  "`name`) of the sending server."),
            Field("server_name", _STR, "INFO: `server_name`; CONNECT of a leaf: `name`."),
            Field("cluster", _STR, "INFO/CONNECT: `cluster` name of the sending server."),
            Field("gateway", _STR, "INFO/CONNECT of a gateway: its `gateway` name."),
            Field("gateway_cmd", _STR, "INFO of a gateway carrying a command: `gossip` "
                  "(URLs of a gateway), `all_subs_start` / `all_subs_complete` (they bracket "
                  "the RS+ of every subscription of `account` when the receiver switches it "
                  "to interest-only mode), or `unknown` + the number; `account` is the "
                  "command's payload."),
            Field("error", _STR, "-ERR: the error text without quotes."),
            Field("json_raw", _STR, "INFO/CONNECT: the JSON argument as sent, except that "
                  "CONNECT credentials (pass, auth_token, jwt, sig, nkey) are replaced by "
                  "`<redacted len=N sha256=HEX>` unless `msgcap dissect --keep-secrets`."),
            Field("incomplete", pa.bool_(), "True when a gap or the stream end cut the "
                  "message after its control line (payload columns null).", False),
            Field("compression", _STR, "`s2` when the row was decoded from an S2-compressed "
                  "direction (offsets and frames are those of the S2 chunks it came from); "
                  "null on a link that is not compressed."),
            Field("crc_status", _STR, "Compressed rows: `ok` when every S2 chunk the row's "
                  "bytes came from passed its CRC-32C, `mismatch` otherwise (the chunk is "
                  "also a `nats_cluster.s2_crc` anomaly); null when not compressed."),
        ),
    )
)


def is_cluster_json(line: bytes) -> bool:
    """Does an ``INFO {...}`` / ``CONNECT {...}`` line come from a server link?"""
    try:
        op, _, rest = line.strip().partition(b" ")
        obj = nats_parser.json_object(rest)
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(obj, dict):
        return False
    if not obj.keys().isdisjoint(_LINK_KEYS):
        return True
    return op.upper() == b"CONNECT" and "cluster" in obj


def _verb(line: bytes) -> tuple[str | None, list[bytes]]:
    args = nats_parser.split_args(line)
    if not args:
        return None, args
    return _OP_BYTES.get(args[0].upper()), args


class NatsClusterDissector(Dissector):
    name: ClassVar[str] = "nats_cluster"
    description: ClassVar[str] = (
        "NATS route / gateway / leaf-node protocol (RS+/RS-/LS+/LS-/RMSG/LMSG/HMSG/A+/A-)"
    )
    transport: ClassVar[Transport] = Transport.TCP
    default_ports: ClassVar[tuple[int, ...]] = (6222, 7222, 7422)
    tables: ClassVar[tuple[TableSpec, ...]] = (NATS_CLUSTER_TABLE,)

    @classmethod
    def probe(cls, direction: Direction, prefix: bytes) -> Verdict:
        """YES on a cluster op, on an INFO/CONNECT whose JSON only server links send, or
        on an INFO sent by the connecting side (clients never send INFO)."""
        try:
            p = 0
            for _ in range(8):
                if p >= len(prefix):
                    return Verdict.NEED_MORE
                lf = prefix.find(b"\n", p)
                line = prefix[p:] if lf < 0 else prefix[p:lf]
                op, args = _verb(line if lf >= 0 else line + b" ")
                if op is None:
                    head = bytes(line[:8]).upper()
                    if lf < 0 and any(o.startswith(head) for o in _OP_BYTES) and head:
                        return Verdict.NEED_MORE
                    return Verdict.NO
                if op in _CLUSTER_OPS:
                    return Verdict.YES
                if op in ("INFO", "CONNECT"):
                    if lf < 0:
                        return Verdict.NEED_MORE if len(prefix) < 8192 else Verdict.NO
                    if is_cluster_json(line):
                        return Verdict.YES
                    if op == "INFO" and direction == Direction.C2S:
                        return Verdict.YES
                    return Verdict.NO
                if lf < 0:
                    return Verdict.NEED_MORE
                p = lf + 1
            return Verdict.NEED_MORE
        except Exception:  # a probe never raises
            return Verdict.NO

    @classmethod
    def session(cls, options: SessionOptions) -> Session:
        from dissectors.nats.cluster_session import NatsClusterSession

        return NatsClusterSession(options)


_LAZY = frozenset(("GatewayCmd", "NatsClusterAnomaly", "NatsClusterSession"))


def __getattr__(name: str) -> object:
    """The session's names stay importable from here, loaded when first asked for."""
    if name in _LAZY:
        from dissectors.nats import cluster_session

        return getattr(cluster_session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
