"""Felix per-stream state: framing, one row per frame, message rows, anomalies.

Strategy: a ``FramedSession`` with one ``LengthPrefixedFramer`` per direction (Felix only
supplies ``pdu_length``: magic + u32 length).  Over QUIC the pipeline makes one session
per QUIC stream, so a session sees one request/response stream (or one event stream);
over TCP one per connection.  Each whole frame becomes a ``felix`` row; the messages it
carries become ``felix_messages`` rows (children).  The state is tiny: whether the first
frame of each direction was seen, and which wrong-direction reports were made.

Decisions:

* A header without the ``FLX1`` magic is a ``felix.bad_magic`` anomaly and the direction
  resynchronises on the next ``FLX1`` (``felix.resync`` says how many bytes were
  skipped).  A declared length above ``max_frame_bytes`` is ``felix.oversize_frame`` and
  resynchronises the same way: Felix's reader closes the stream on it, so the bytes that
  follow are not a frame a peer accepted, and trusting a corrupt length could skip the
  rest of the stream.
* Frames whose flags carry unknown bits or an invalid combination, or whose version is
  not 1, are still rows (header columns, ``body`` kept raw) plus an anomaly; the next
  frame follows the declared length, as it does for a broker that answers
  "unsupported frame flags" and keeps the stream open.
* A gap inside a frame drops it (``felix.gap_in_frame``); parsing resumes right after
  it since its length is known, else on the next magic.
* The first client frame of a stream that starts at offset 0 must be JSON ``auth`` (the
  broker closes the stream otherwise): ``felix.no_auth`` when it is not.  Messages sent
  the wrong way (a ``publish`` from the server) are reported once per type and direction
  (``felix.wrong_direction``; client and server may be swapped on TCP without a SYN).

Credentials (``dissectors.redaction``): unless the option ``keep_secrets`` is true, the
``auth`` token in the ``json`` column is replaced by ``<redacted len=N sha256=HEX>`` (its
length and SHA-256 stay comparable), and an undecoded ``body`` that names a token is
replaced by such a marker as a whole.

Options (the dict given to ``FelixDissector.session``):

``payload_cap``      payload bytes kept per row (default 4096; None keeps all)
``json_cap``         JSON text bytes kept per row (default 65536; None keeps all)
``max_frame_bytes``  largest payload length accepted (default 16 MiB, the broker's)
``stream_id``        QUIC stream id of this session, for ``stream_kind`` (None: TCP)
``keep_secrets``     keep the auth token in ``json`` / ``body`` (default False: redacted)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from dissectors.api import Direction, Record, payload_values
from dissectors.felix import wire
from dissectors.felix.table import DEFAULT_JSON_CAP
from dissectors.felix.wire import FelixAnomaly
from dissectors.framing import Dropped, Invalid, LengthPrefixedFramer, Oversize, Pdu, Resynced
from dissectors.options import read_payload_cap, session_option
from dissectors.redaction import marker, redact_json_text
from dissectors.sessions import FramedSession
from reassembly.quic.frames import stream_kind

__all__ = ["FelixSession"]

FRAMES = "felix"
MESSAGES = "felix_messages"

# JSON types that only one side sends (protocol-facts §5.6); binary kinds likewise (§5.5)
_ONLY_FROM = {
    Direction.C2S: frozenset({
        "auth", "publish", "publish_batch", "publish_idempotent", "subscribe", "cache_put",
        "cache_get", "cache_delete", "topology", "producer_init",
        wire.Kind.PUBLISH_BATCH, wire.Kind.ACKED_PUBLISH_BATCH,
    }),
    Direction.S2C: frozenset({
        "auth_ok", "ok", "error", "not_leader", "topology_view", "publish_ok", "publish_error",
        "producer_init_ok", "publish_refused", "subscribed", "subscribe_cursor_error",
        "event_stream_hello", "shard_moved", "subscription_lagged", "event", "event_batch",
        "cache_value", "cache_ok",
        wire.Kind.PUBLISH_ACK, wire.Kind.EVENT_BATCH, wire.Kind.SHARED_EVENT_BATCH,
    }),
}
_MAX_US = (2**63 - 1) // 1000  # larger microsecond values do not fit ns timestamps
# JSON members that carry credentials: auth.token (serde matches names exactly; the
# redaction also folds case, which only errs on the safe side)
SECRETS = frozenset({"token"})


def _option(options: Mapping[str, Any], name: str, default: int | None, *,
            none_ok: bool = False, minimum: int = 1) -> int | None:
    return session_option(options, name, default, minimum=minimum, none_ok=none_ok,
                          owner="felix")


def _limit(options: Mapping[str, Any], name: str, default: int, minimum: int = 1) -> int:
    """An option that is always an int (None refused): ``_option`` typed so."""
    v = _option(options, name, default, minimum=minimum)
    assert v is not None  # none_ok False and an int default: session_option gives an int
    return v


class FelixSession(FramedSession):
    """One QUIC stream (or TCP connection) of Felix frames, both directions."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = options or {}
        self.payload_cap = read_payload_cap(options, "felix")
        self.json_cap = _option(options, "json_cap", DEFAULT_JSON_CAP, none_ok=True, minimum=0)
        self.max_frame_bytes = _limit(options, "max_frame_bytes", wire.DEFAULT_MAX_FRAME_BYTES,
                                      minimum=0)
        self.keep_secrets = options.get("keep_secrets", False) is True
        sid = options.get("stream_id")
        self.stream_id = sid if type(sid) is int and sid >= 0 else None
        self.stream_kind = None if self.stream_id is None else stream_kind(self.stream_id)
        pdu_length = wire.make_pdu_length(self.max_frame_bytes)
        limit = wire.HEADER_BYTES + self.max_frame_bytes
        super().__init__(
            LengthPrefixedFramer(pdu_length, max_pdu_bytes=limit, resync=wire.resync),
            LengthPrefixedFramer(pdu_length, max_pdu_bytes=limit, resync=wire.resync),
        )
        for fr in self.framers:  # a frame being buffered draws from the run's budget
            fr.budget = options.get("memory_budget")
        self._seen_first = [False, False]
        self._wrong_dir: set[tuple[int, str]] = set()
        self.frames = [0, 0]  # felix rows per direction
        self.messages = [0, 0]  # felix_messages rows per direction

    # ---- framing events ----------------------------------------------------------

    def on_event(self, direction: Direction, ev: Any, out: list[Record]) -> None:
        t = type(ev)
        if t is Pdu:
            self._frame(direction, ev, out)
        elif t is Invalid:
            self.anomaly(out, *self._invalid(ev), direction, ev)
        elif t is Resynced:
            how = ("until the next FLX1 header" if ev.found
                   else "(cut by a gap or the end of the stream)")
            self.anomaly(out, FelixAnomaly.RESYNC, f"skipped {ev.end - ev.start} bytes {how}",
                         direction, ev)
        elif t is Dropped:
            where = "the end of the stream" if self.closing else "a gap"
            declared = (f" of {ev.declared_end - ev.start} bytes"
                        if ev.declared_end is not None else "")
            after = ("; parsing resumes where it ends" if ev.resume_at is not None
                     else "" if self.closing else "; resynchronising on the next FLX1")
            kind = FelixAnomaly.EOF_IN_FRAME if self.closing else FelixAnomaly.GAP_IN_FRAME
            self.anomaly(out, kind, f"partial frame{declared} cut by {where} after "
                                    f"{ev.end - ev.start} bytes{after}", direction, ev)
        elif t is Oversize:  # not produced: pdu_length refuses long frames (resync instead)
            self.anomaly(out, FelixAnomaly.OVERSIZE_FRAME, f"frame of {ev.nbytes} bytes skipped",
                         direction, ev)

    def _invalid(self, ev: Invalid) -> tuple[str, str]:
        head = ev.head
        if head[:4] == wire.MAGIC and len(head) >= wire.HEADER_BYTES:
            _, version, flags, length = wire.HEADER.unpack_from(head)
            return (FelixAnomaly.OVERSIZE_FRAME,
                    f"frame header declares {length} payload bytes (version {version}, flags "
                    f"0x{flags:04x}), above max_frame_bytes {self.max_frame_bytes} (Felix's "
                    "reader closes the stream); resynchronising on the next FLX1")
        return (FelixAnomaly.BAD_MAGIC,
                f"no FLX1 frame header here (bytes {head[:12].hex()}); resynchronising on the "
                "next FLX1")

    # ---- one frame ---------------------------------------------------------------

    def _frame(self, direction: Direction, pdu: Pdu, out: list[Record]) -> None:
        data = pdu.data
        _, version, flags, length = wire.HEADER.unpack_from(data)
        payload = data[wire.HEADER_BYTES :]
        unknown = flags & ~wire.KNOWN_FLAGS & 0xFFFF
        values: dict[str, Any] = {
            "stream_kind": self.stream_kind,
            "magic_ok": True,
            "version": version,
            "flags": flags,
            "flag_names": wire.flag_names(flags),
            "unknown_flags": unknown or None,
            "length": length,
            "body_sha256": hashlib.sha256(payload).hexdigest(),
        }
        row = Record(FRAMES, direction, pdu.start, pdu.end, pdu.ts_first_ns, pdu.ts_last_ns,
                     pdu.frame_first, pdu.frame_last, values)
        out.append(row)
        self.frames[direction] += 1
        problems: list[tuple[str, str]] = []
        if version != wire.VERSION:
            kind = wire.Kind.UNKNOWN
            problems.append((FelixAnomaly.BAD_VERSION,
                             f"header version {version}, not 1 (Felix rejects it); payload "
                             "kept undecoded"))
        else:
            kind, problem = wire.classify(flags)
            if problem is not None:
                problems.append(problem)
        values["kind"] = kind
        if kind == wire.Kind.UNKNOWN:
            body = self._cap(payload)
            if not self.keep_secrets and (b"oken" in payload.lower() or b"\\u" in payload):
                body = marker(payload).encode()  # may be an auth we cannot parse
            values["body"] = body
            dec = wire.Decoded()
        elif kind == wire.Kind.JSON:
            dec = wire.decode_json(payload)
            cap = self.json_cap
            kept = payload if cap is None or len(payload) <= cap else payload[:cap]
            text = kept.decode("utf-8", "backslashreplace")
            if not self.keep_secrets and ("oken" in text.lower() or "\\u" in text):
                text = redact_json_text(text, SECRETS)[0]
            values["json"] = text
            values["json_truncated"] = len(kept) < len(payload)
        else:
            dec = wire.decode_binary(kind, flags, payload)
        values.update(dec.values)
        if dec.error is not None:
            values["decode_error"] = dec.error
        problems += dec.problems
        if dec.has_single:
            values.update(payload_values(dec.single, self.payload_cap))
        label = values.get("type") or kind
        if dec.messages:
            self._messages(direction, label, dec, row)
        self._checks(direction, pdu, kind, values.get("type"), problems)
        for k, detail in problems:
            self.anomaly(out, k, detail, direction, pdu)

    def _messages(self, direction: Direction, label: str, dec: wire.Decoded, row: Record
                  ) -> None:
        n = len(dec.messages)
        size = dec.values.get("payload_count", n)
        size = size if isinstance(size, int) and size < 2**31 else n
        for i, m in enumerate(dec.messages):
            v: dict[str, Any] = {
                "stream_kind": self.stream_kind,
                "type": label,
                "index": i,
                "batch_size": size,
                **dec.common,
                "offset": m.offset,
                **payload_values(m.payload, self.payload_cap),
            }
            if m.append_time_us is not None and m.append_time_us <= _MAX_US:
                v["append_time"] = m.append_time_us * 1000
            row.children.append(Record(
                MESSAGES, direction, row.offset_start, row.offset_end, row.ts_first_ns,
                row.ts_last_ns, row.frame_first, row.frame_last, v,
            ))
        self.messages[direction] += n

    def _checks(self, direction: Direction, pdu: Pdu, kind: str, typ: str | None,
                problems: list[tuple[str, str]]) -> None:
        first = not self._seen_first[direction]
        self._seen_first[direction] = True
        label = typ if kind == wire.Kind.JSON else kind
        if first and direction == Direction.C2S and pdu.start == 0 and label != "auth":
            problems.append((FelixAnomaly.NO_AUTH,
                             f"the client's first frame on this stream is {label or 'JSON'}, "
                             "not auth (a broker closes a stream that does not authenticate "
                             "first)"))
        if label and label in _ONLY_FROM[direction.flip()]:
            key = (int(direction), label)
            if key not in self._wrong_dir:
                self._wrong_dir.add(key)
                problems.append((FelixAnomaly.WRONG_DIRECTION,
                                 f"{label} sent {direction.short}; Felix sends it the other way "
                                 "(reported once per type and direction; client and server may "
                                 "be swapped)"))

    def _cap(self, data: bytes) -> bytes:
        cap = self.payload_cap
        return data if cap is None or len(data) <= cap else data[:cap]
