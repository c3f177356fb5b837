"""Per-connection QUIC state: keys, packet numbers, CRYPTO/TLS, streams, connection IDs.

Strategy: a :class:`QuicConnection` belongs to the UDP flow its first packet came on
(the *primary* flow).  It decides which side is the QUIC client (the sender of the
first Initial that decrypts with keys from its own DCID) and keeps, per sender:

* the largest packet number per number space (Initial, Handshake, application), to
  expand truncated packet numbers (RFC 9000 §A.3);
* packet protection per encryption level (RFC 9001 §5): Initial keys from the client's
  DCID (the Retry's SCID after a Retry), Handshake / 0-RTT / 1-RTT keys from the
  NSS key log, looked up by the ClientHello's random when first needed (so secrets
  that arrive mid-capture are used from then on).  The cipher suite comes from the
  ServerHello; until it is seen, the suites whose hash fits the secret's length are
  tried and the one that authenticates is kept.  1-RTT keys follow key updates: a
  flipped key-phase bit tries the next generation ("quic ku") and keeps it when the
  AEAD tag verifies, or the previous one for a packet reordered across the update;
* one CRYPTO byte stream per encryption level and sender, reassembled by
  ``TcpHalfStream`` (out of order, duplicates, bounded by ``quic_max_crypto_bytes``)
  and read by the TLS parser only as far as the ClientHello / ServerHello /
  EncryptedExtensions; once those are parsed the stream is dropped;
* one ``TcpHalfStream`` per (QUIC stream id, direction) for STREAM data, emitting
  ``StreamData``/``StreamGap`` with ``stream_id`` on the primary flow, and a
  ``QuicStreamEnd`` when the FIN offset is reached, on RESET_STREAM, or when the
  connection ends (holes become gaps then).

All events go to ``emit``; the layer puts each packet's ``QuicPacket`` before them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from typing import TYPE_CHECKING, Final

from reassembly.events import (
    Anomaly,
    Direction,
    Event,
    FlowInfo,
    QuicEvent,
    QuicHandshake,
    QuicStreamEnd,
    StreamData,
    StreamGap,
)
from reassembly.limits import Limits
from reassembly.quic.crypto import (
    AEAD_TAG_BYTES,
    SAMPLE_BYTES,
    CipherSuite,
    PacketProtection,
    decode_packet_number,
    initial_protections,
    retry_integrity_tag,
    suites_for_secret,
    version_params,
)
from reassembly.quic.frames import HANDSHAKE_ALLOWED, ZERO_RTT_FORBIDDEN, Frames, parse_frames
from reassembly.quic.keylog import KeyLog, Labels
from reassembly.quic.packet import LongHeader
from reassembly.quic.tls import (
    HandshakeReader,
    HandshakeType,
    parse_client_hello,
    parse_encrypted_extensions,
    parse_server_hello,
    safe_parse,
)
from reassembly.tcp import TcpHalfStream

if TYPE_CHECKING:
    from reassembly.quic.tls import ClientHello, ServerHello

CLIENT, SERVER = 0, 1
ROLE_NAMES = ("client", "server")
SPACE_INITIAL, SPACE_HANDSHAKE, SPACE_APP = 0, 1, 2
_SPACE_OF = {"initial": SPACE_INITIAL, "handshake": SPACE_HANDSHAKE, "0rtt": SPACE_APP,
             "1rtt": SPACE_APP}

# Initial keys cached per (version, DCID): a client retransmitting with a new DCID, a
# Retry, or version negotiation each add one.  Tiny, so a fixed bound suffices.
MAX_INITIAL_KEYS = 8
# Stream ids of ended streams remembered per connection, so a late retransmission is
# recognised as such instead of opening the stream again.  Past it the set is cleared
# (a late retransmission may then show up as a new stream starting with a gap).
MAX_ENDED_STREAMS = 65_536

# which handshake messages we read in which CRYPTO stream: (space, sender) -> types
_WANTED = {
    (SPACE_INITIAL, CLIENT): HandshakeType.CLIENT_HELLO,
    (SPACE_INITIAL, SERVER): HandshakeType.SERVER_HELLO,
    (SPACE_HANDSHAKE, SERVER): HandshakeType.ENCRYPTED_EXTENSIONS,
}


class _Done(Enum):
    """The state of a CRYPTO stream whose wanted message was read (or given up): an enum
    member rather than a bare ``object()`` so the type checker tells it from a stream."""

    DONE = 0


_DONE: Final = _Done.DONE
# What a CRYPTO stream being read costs besides the bytes of the handshake message it
# holds (its reader, its reassembler, the entry): charged to the run's memory budget.
CRYPTO_HOLD_OVERHEAD_BYTES = 512


class _CryptoHold:
    """The in-order CRYPTO bytes of one encryption level and sender, held until the
    handshake message they begin is whole (up to ``quic_max_crypto_bytes``): a holder of
    the run's memory budget (``reassembly.limits.MemoryHolder``).  Given back, that
    stream's handshake message is given up (``QuicConnection._give_up_crypto``)."""

    __slots__ = ("conn", "key", "reader")

    def __init__(self, conn: QuicConnection, key: tuple[int, int],
                 reader: HandshakeReader) -> None:
        self.conn = conn
        self.key = key
        self.reader = reader

    def release_memory(self, need: int) -> None:
        self.conn._give_up_crypto(self)


class Opened:
    """A packet whose protection was removed."""

    __slots__ = ("role", "packet_number", "key_phase", "frames")

    def __init__(self, role: int, packet_number: int, key_phase: int | None, frames: Frames):
        self.role = role
        self.packet_number = packet_number
        self.key_phase = key_phase
        self.frames = frames


class Failed:
    """Why a packet stayed encrypted; ``packet_number`` is never known then."""

    __slots__ = ("role", "reason")

    def __init__(self, role: int | None, reason: str) -> None:
        self.role = role
        self.reason = reason


RESTART = object()  # a new connection started on the same flow (see _open_initial)


def unprotect_header(
    prot: PacketProtection, data: bytes, start: int, pn_offset: int, end: int, long: bool
) -> tuple[bytes, int, int, int] | None:
    """Remove header protection (RFC 9001 §5.4.1): (header, first byte, pn length,
    truncated pn), or None when the packet is too short to hold the sample."""
    sample_off = pn_offset + 4
    if sample_off + SAMPLE_BYTES > end:
        return None
    mask = prot.mask(data[sample_off : sample_off + SAMPLE_BYTES])
    first = data[start] ^ (mask[0] & (0x0F if long else 0x1F))
    pn_len = (first & 0x03) + 1
    pn_bytes = bytes(data[pn_offset + i] ^ mask[1 + i] for i in range(pn_len))
    header = bytes([first]) + bytes(data[start + 1 : pn_offset]) + pn_bytes
    return header, first, pn_len, int.from_bytes(pn_bytes, "big")


class _AppKeys:
    """1-RTT keys of one sender over key updates (RFC 9001 §6)."""

    __slots__ = ("gens", "current")

    def __init__(self, prot: PacketProtection) -> None:
        self.gens: dict[int, PacketProtection] = {0: prot}
        self.current = 0

    @property
    def hp_prot(self) -> PacketProtection:
        return self.gens[self.current]

    def gen(self, n: int) -> PacketProtection | None:
        if n < 0:
            return None
        prot = self.gens.get(n)
        if prot is None and n == self.current + 1:
            prot = self.gens[n] = self.gens[self.current].next_generation()
        return prot

    def candidates(self, phase: int) -> list[int]:
        cur = self.current
        if phase == cur & 1:
            return [cur]
        return [cur + 1, cur - 1]

    def advance(self, n: int) -> None:
        if n > self.current:
            self.current = n
            for old in [g for g in self.gens if g < n - 1]:
                del self.gens[old]


class QuicConnection:
    """State of one QUIC connection (see the module docstring)."""

    def __init__(
        self,
        flow: FlowInfo,
        limits: Limits,
        emit: Callable[[Event | QuicEvent], None],
        keylog: KeyLog,
        register_cid: Callable[[QuicConnection, bytes, int], None],
    ) -> None:
        self.flow = flow
        self.limits = limits
        self.emit = emit
        self.keylog = keylog
        self._register_cid = register_cid
        self.version = 0
        self.client_dir: Direction | None = None
        self.initial_dcid: bytes | None = None
        self.retry_scid: bytes | None = None
        self._initial_keys: dict[tuple[int, bytes], tuple[PacketProtection, PacketProtection]] = {}
        # connection ids: cid -> role that issued it (the peer puts it in DCIDs)
        self.cids: dict[bytes, int] = {}
        self.cid_lens: tuple[set[int], set[int]] = (set(), set())
        self.paths: set[int] = {flow.flow_id}
        self.largest_pn: list[list[int | None]] = [[None] * 3, [None] * 3]
        self.cipher_suite: int | None = None
        self._hs: list[list[PacketProtection] | None] = [None, None]
        self._early: list[PacketProtection] | None = None
        self._app: list[list[_AppKeys] | None] = [None, None]
        self.client_hello: ClientHello | None = None
        self.server_hello: ServerHello | None = None
        self.alpn_selected: str | None = None
        self.hello_retry = False
        self._crypto: dict[tuple[int, int], TcpHalfStream | _Done] = {}
        # in-order CRYPTO bytes held per stream, drawn from the run's budget
        self._crypto_held: dict[tuple[int, int], _CryptoHold] = {}
        self._crypto_limits = replace(
            limits,
            max_buffered_bytes=limits.quic_max_crypto_bytes,
            overlap_check_bytes=min(limits.overlap_check_bytes, limits.quic_max_crypto_bytes),
        )
        self.streams: dict[tuple[int, Direction], TcpHalfStream] = {}
        self._ended: set[tuple[int, Direction]] = set()
        self._refused: set[tuple[int, Direction]] = set()
        self.close_seen: tuple[int, int, int | None, str] | None = None
        self._reported: set[str] = set()
        # first packet (ts, frame, flow, direction), counts per packet type
        self._undecryptable: tuple[int, int, FlowInfo, Direction, dict[str, int]] | None = None
        self.last_ts_ns = flow.ts_last_ns
        # facts found while processing the current packet (read by the layer)
        self.pkt_sni: str | None = None
        self.pkt_alpn: tuple[str, ...] | None = None
        self._pkt_ts = 0
        self._pkt_frame = 0
        self._pkt_flow = flow
        self._pkt_dir = Direction.C2S

    # -- roles ------------------------------------------------------------------------

    def role_of(self, direction: Direction) -> int:
        """QUIC role of the sender of a packet travelling ``direction`` on the primary flow."""
        client_dir = Direction.C2S if self.client_dir is None else self.client_dir
        return CLIENT if direction == client_dir else SERVER

    def flow_direction(self, role: int) -> Direction:
        """Direction on the primary flow of data sent by ``role``."""
        client_dir = Direction.C2S if self.client_dir is None else self.client_dir
        return client_dir if role == CLIENT else client_dir.flip()

    def add_cid(self, cid: bytes, issuer: int) -> None:
        """Remember a connection id the ``issuer`` will receive packets on."""
        lens = self.cid_lens[issuer]
        if not cid:
            lens.add(0)
            return
        if cid in self.cids:
            return
        if len(self.cids) >= self.limits.quic_max_cids:
            self._once(
                "limit.quic_cids",
                f"more than {self.limits.quic_max_cids} connection ids for one QUIC "
                f"connection; further ones are not tracked (short-header packets using "
                "them may not be recognised)",
            )
            return
        self.cids[cid] = issuer
        lens.add(len(cid))
        self._register_cid(self, cid, issuer)

    def short_dcid_len(self, data: bytes, start: int, receiver: int) -> int | None:
        """Length of the DCID of a short header sent to ``receiver`` (None: unknown)."""
        lens = self.cid_lens[receiver]
        for n in sorted(lens, reverse=True):
            if n == 0 or bytes(data[start + 1 : start + 1 + n]) in self.cids:
                return n
        return max(lens) if lens else None

    # -- anomalies --------------------------------------------------------------------

    def anomaly(self, kind: str, detail: str) -> None:
        self.emit(
            Anomaly(kind, detail, self._pkt_ts, self._pkt_frame, self._pkt_flow, self._pkt_dir)
        )

    def _once(self, kind: str, detail: str, key: str | None = None) -> None:
        key = key or kind
        if key not in self._reported:
            self._reported.add(key)
            self.anomaly(kind, detail)

    def _report_undecryptable(self) -> None:
        if self._undecryptable is None:
            return
        ts, frame, flow, direction, counts = self._undecryptable
        self._undecryptable = None
        what = ", ".join(f"{n} {ptype}" for ptype, n in counts.items())
        ch = self.client_hello
        if ch is None:
            detail = (
                f"{self._describe()}: {what} packet(s) stayed encrypted; the client random "
                "is unknown (no ClientHello was seen or decrypted), so no key log can help"
            )
        else:
            detail = (
                f"{self._describe()}: {what} packet(s) stayed encrypted: no TLS secrets "
                f"for client random {ch.random.hex()} in the key log "
                f"({len(self.keylog)} connection(s) known)"
            )
        self.emit(Anomaly("quic.undecryptable", detail, ts, frame, flow, direction))

    def _describe(self) -> str:
        f = self.flow
        sni = self.client_hello.sni if self.client_hello else None
        return f"QUIC connection {f.client}->{f.server}" + (f" (SNI {sni})" if sni else "")

    def report_failure(self, ptype: str, reason: str) -> None:
        """Report a packet that stayed encrypted — once per connection and cause.

        Missing TLS secrets are counted here and reported once when the connection
        ends (``_report_undecryptable``): by then the ClientHello, and so the client
        random a user needs to find the secrets, is known even if 0-RTT or Handshake
        packets came before it."""
        if reason in ("no-keys", "no-client-hello"):
            if self._undecryptable is None:
                self._undecryptable = (self._pkt_ts, self._pkt_frame, self._pkt_flow,
                                       self._pkt_dir, {})
            counts = self._undecryptable[4]
            counts[ptype] = counts.get(ptype, 0) + 1
        elif reason == "no-initial-dcid":
            self._once(
                "quic.no_initial_keys",
                f"{self._describe()}: {ptype} packets before any client Initial was seen: "
                "the Initial keys come from the client's first DCID, so they stay encrypted",
            )
        elif reason == "auth-failed":
            self._once(
                "quic.auth_failed",
                f"{self._describe()}: a {ptype} packet did not authenticate with the keys "
                "at hand (wrong or missing secrets, or a forged/corrupt packet); every such "
                "packet is marked in quic_packets",
                key=f"auth:{ptype}",
            )
        elif reason == "unsupported-version":
            self._once(
                "quic.unsupported_version",
                f"{self._describe()}: packets of QUIC version 0x{self.version:08x} cannot be "
                "decrypted (unknown version)",
                key=f"ver:{self.version}",
            )
        elif reason == "unknown-dcid":
            self._once(
                "quic.unknown_dcid",
                f"{self._describe()}: short-header packets whose DCID length cannot be told "
                "(no connection ID of their receiver is known), so they cannot be decrypted",
            )
        elif reason == "not-client":
            self._once(
                "quic.bad_packet",
                f"{self._describe()}: 0-RTT packets sent by the server side (only a client "
                "sends 0-RTT)",
                key="not-client",
            )
        elif reason == "unsupported-cipher":
            self._once(
                "quic.unsupported_cipher",
                f"{self._describe()}: cipher suite 0x{self.cipher_suite or 0:04x} is not "
                "supported for QUIC decryption",
            )

    # -- packet context ---------------------------------------------------------------

    def begin_packet(self, flow: FlowInfo, direction: Direction, ts_ns: int, frame: int) -> None:
        self._pkt_flow = flow
        self._pkt_dir = direction
        self._pkt_ts = ts_ns
        self._pkt_frame = frame
        self.pkt_sni = None
        self.pkt_alpn = None
        if ts_ns > self.last_ts_ns:
            self.last_ts_ns = ts_ns

    # -- keys -------------------------------------------------------------------------

    def _initial(self, version: int, dcid: bytes) -> tuple[PacketProtection, PacketProtection]:
        key = (version, dcid)
        pair = self._initial_keys.get(key)
        if pair is None:
            if len(self._initial_keys) >= MAX_INITIAL_KEYS:
                self._initial_keys.pop(next(iter(self._initial_keys)))
            pair = self._initial_keys[key] = initial_protections(version, dcid)
        return pair

    def _secret_prots(
        self, label: str, version: int, trial: bool = False
    ) -> list[PacketProtection] | str:
        """Candidate protections from a key-log secret, or the reason there are none.

        ``trial``: try every suite the secret's length allows even when the ServerHello's
        is known (0-RTT keys use the suite of the resumed session, RFC 8446 §4.2.10)."""
        ch = self.client_hello
        if ch is None:
            return "no-client-hello"
        secret = self.keylog.get(ch.random, label)
        if secret is None:
            return "no-keys"
        params = version_params(version)
        if params is None:
            return "unsupported-version"
        if self.cipher_suite is not None and not trial:
            suites: tuple[int, ...] = (self.cipher_suite,)
        else:
            suites = suites_for_secret(len(secret))
        prots = []
        for suite in suites:
            try:
                prots.append(PacketProtection(suite, secret, params))
            except (KeyError, ValueError):
                continue
        return prots or "unsupported-cipher"

    def _suite_found(self, prot: PacketProtection) -> None:
        if self.cipher_suite is None:
            self.cipher_suite = int(prot.suite)

    # -- opening packets ----------------------------------------------------------------

    def _try(
        self,
        prots: list[PacketProtection],
        data: bytes,
        start: int,
        pn_offset: int,
        end: int,
        long: bool,
        largest: int | None,
    ) -> tuple[int, int, int, bytes] | str:
        """(index of the protection that worked, first byte, pn, plaintext) or a reason."""
        reason = "auth-failed"
        for i, prot in enumerate(prots):
            hdr = unprotect_header(prot, data, start, pn_offset, end, long)
            if hdr is None:
                return "truncated"
            header, first, pn_len, truncated = hdr
            pn = decode_packet_number(largest, truncated, pn_len * 8)
            plain = prot.open(pn, header, bytes(data[pn_offset + pn_len : end]))
            if plain is not None:
                return i, first, pn, plain
        return reason

    def open_long(
        self, data: bytes, hdr: LongHeader, direction: Direction, role_hint: int | None
    ) -> Opened | Failed | object:
        """Decrypt an Initial / 0-RTT / Handshake packet.  ``role_hint`` is the sender's
        role when known from its connection id (another path), else None."""
        ptype = hdr.packet_type
        self.version = hdr.version
        if ptype == "initial":
            return self._open_initial(data, hdr, direction, role_hint)
        role = role_hint if role_hint is not None else self.role_of(direction)
        space = _SPACE_OF[ptype]
        if ptype == "0rtt":
            if role != CLIENT:
                return Failed(role, "not-client")
            if self._early is None:
                got = self._secret_prots(Labels.CLIENT_EARLY, hdr.version, trial=True)
                if isinstance(got, str):
                    return Failed(role, got)
                self._early = got
            prots = self._early
        else:
            hs = self._hs[role]
            if hs is None:
                label = Labels.CLIENT_HANDSHAKE if role == CLIENT else Labels.SERVER_HANDSHAKE
                got = self._secret_prots(label, hdr.version)
                if isinstance(got, str):
                    return Failed(role, got)
                hs = self._hs[role] = got
            prots = hs
        res = self._try(
            prots, data, hdr.start, hdr.pn_offset, hdr.end, True, self.largest_pn[role][space]
        )
        if isinstance(res, str):
            return Failed(role, res)
        i, _first, pn, plain = res
        if len(prots) > 1:  # the suite is now known: keep the one that worked
            prots[:] = [prots[i]]
            if ptype == "handshake":
                self._suite_found(prots[0])
        return self._opened(role, space, pn, None, plain)

    def _open_initial(
        self, data: bytes, hdr: LongHeader, direction: Direction, role_hint: int | None
    ) -> Opened | Failed | object:
        version = hdr.version
        largest = self.largest_pn
        if self.client_dir is None and role_hint is None:
            # who is the client? the sender of an Initial that opens with keys from its
            # own DCID (a client's first Initial)
            c_prot, _ = self._initial(version, hdr.dcid)
            res = self._try(
                [c_prot], data, hdr.start, hdr.pn_offset, hdr.end, True, largest[0][0]
            )
            if not isinstance(res, str):
                self.client_dir = direction
                self.initial_dcid = hdr.dcid
                self.add_cid(hdr.dcid, SERVER)
                return self._opened(CLIENT, SPACE_INITIAL, res[2], None, res[3])
            if res == "truncated":
                return Failed(None, res)
            if self.initial_dcid is None:
                return Failed(None, "no-initial-dcid")
        role = role_hint if role_hint is not None else self.role_of(direction)
        if role == SERVER:
            if self.initial_dcid is None:
                return Failed(role, "no-initial-dcid")
            _, s_prot = self._initial(version, self.initial_dcid)
            res = self._try(
                [s_prot], data, hdr.start, hdr.pn_offset, hdr.end, True, largest[SERVER][0]
            )
            if isinstance(res, str):
                return Failed(role, res)
            return self._opened(SERVER, SPACE_INITIAL, res[2], None, res[3])
        # keys from the DCID the Initial keys come from; failing that, from this
        # packet's own DCID (derived only then: most client Initials carry the
        # server's connection id once the server has answered)
        res = "no-initial-dcid"
        own = False
        if self.initial_dcid is not None:
            prot = self._initial(version, self.initial_dcid)[0]
            res = self._try([prot], data, hdr.start, hdr.pn_offset, hdr.end, True,
                            largest[CLIENT][0])
        if isinstance(res, str) and res != "truncated" and hdr.dcid != self.initial_dcid:
            prot = self._initial(version, hdr.dcid)[0]
            res = self._try([prot], data, hdr.start, hdr.pn_offset, hdr.end, True,
                            largest[CLIENT][0])
            own = True
        if isinstance(res, str):
            return Failed(role, res)
        _i, _first, pn, plain = res
        if own:
            # keys from this packet's own DCID: a Retry was followed, or the client
            # started over (version negotiation, or a new connection on the same flow)
            old = self.initial_dcid
            if old is not None and hdr.dcid != self.retry_scid:
                if self.server_hello is not None:
                    return RESTART
                self._reset_initial_crypto()
            elif old is not None:
                # after a Retry the client may send a new ClientHello (aioquic does,
                # with a new random): read the client's Initial CRYPTO stream afresh
                self._end_crypto((SPACE_INITIAL, CLIENT), None)
            self.initial_dcid = hdr.dcid
            self.add_cid(hdr.dcid, SERVER)
        return self._opened(CLIENT, SPACE_INITIAL, pn, None, plain)

    def _reset_initial_crypto(self) -> None:
        for role in (CLIENT, SERVER):
            self._end_crypto((SPACE_INITIAL, role), None)
        self.client_hello = None
        self.largest_pn[CLIENT][SPACE_INITIAL] = None
        self.largest_pn[SERVER][SPACE_INITIAL] = None

    def open_short(
        self, data: bytes, start: int, pn_offset: int, role: int
    ) -> Opened | Failed:
        """Decrypt a 1-RTT packet sent by ``role``."""
        keys = self._app[role]
        if keys is None:
            label = Labels.CLIENT_TRAFFIC_0 if role == CLIENT else Labels.SERVER_TRAFFIC_0
            got = self._secret_prots(label, self.version or 1)
            if isinstance(got, str):
                return Failed(role, got)
            keys = self._app[role] = [_AppKeys(p) for p in got]
        end = len(data)
        largest = self.largest_pn[role][SPACE_APP]
        for ki, app in enumerate(keys):
            hdr = unprotect_header(app.hp_prot, data, start, pn_offset, end, False)
            if hdr is None:
                return Failed(role, "truncated")
            header, first, pn_len, truncated = hdr
            pn = decode_packet_number(largest, truncated, pn_len * 8)
            phase = (first >> 2) & 1
            ciphertext = bytes(data[pn_offset + pn_len : end])
            for gen in app.candidates(phase):
                prot = app.gen(gen)
                if prot is None:
                    continue
                plain = prot.open(pn, header, ciphertext)
                if plain is None:
                    continue
                app.advance(gen)
                if len(keys) > 1:
                    keys[:] = [keys[ki]]
                    self._suite_found(app.gens[app.current])
                return self._opened(role, SPACE_APP, pn, phase, plain)
        return Failed(role, "auth-failed")

    def _opened(self, role: int, space: int, pn: int, phase: int | None, plain: bytes) -> Opened:
        largest = self.largest_pn[role]
        known = largest[space]
        if known is None or pn > known:
            largest[space] = pn
        return Opened(role, pn, phase, parse_frames(plain))

    # -- retry ------------------------------------------------------------------------

    def on_retry(self, hdr: LongHeader, data: bytes) -> str:
        """A Retry: its SCID becomes the client's next DCID.  Returns the integrity
        verdict ("ok" / "mismatch" / "unverified" when the client's DCID is unknown)."""
        self.version = hdr.version
        self.retry_scid = hdr.scid
        self.add_cid(hdr.scid, SERVER)
        odcid = self.initial_dcid
        if odcid is None:
            return "unverified"
        tag = retry_integrity_tag(
            hdr.version, odcid, bytes(data[hdr.start : hdr.end - AEAD_TAG_BYTES])
        )
        if tag is None:
            return "unverified"
        if tag != hdr.retry_tag:
            self.anomaly(
                "quic.retry_integrity",
                f"Retry integrity tag does not match the client's DCID {odcid.hex()}",
            )
            return "mismatch"
        return "ok"

    # -- frames -----------------------------------------------------------------------

    def handle_frames(self, opened: Opened, ptype: str) -> None:
        frames = opened.frames
        role = opened.role
        if frames.error:
            self.anomaly(
                "quic.frame_error", f"{ptype} packet {opened.packet_number}: {frames.error}"
            )
        if ptype in ("initial", "handshake"):
            bad = sorted({c for c in frames.codes if c not in HANDSHAKE_ALLOWED})
            if bad:
                self.anomaly(
                    "quic.frame_not_allowed",
                    f"{ptype} packet {opened.packet_number} carries frame type(s) "
                    f"{', '.join(hex(c) for c in bad)} that RFC 9000 §12.4 forbids there",
                )
                return
        elif ptype == "0rtt":
            bad = sorted({c for c in frames.codes if c in ZERO_RTT_FORBIDDEN})
            if bad:
                self.anomaly(
                    "quic.frame_not_allowed",
                    f"0-RTT packet {opened.packet_number} carries frame type(s) "
                    f"{', '.join(hex(c) for c in bad)} that RFC 9000 §12.4 forbids there",
                )
        space = _SPACE_OF[ptype]
        for off, data in frames.crypto:
            self._crypto_data(space, role, off, data)
        for seq, cid in frames.new_cids:
            del seq
            self.add_cid(cid, role)
        direction = self.flow_direction(role)
        for sid, off, data, fin in frames.streams:
            self._stream_data(sid, direction, off, data, fin)
        for sid, err, final in frames.resets:
            self._stream_reset(sid, direction, err, final)
        if frames.close is not None:
            code, ftype, reason = frames.close
            self.close_seen = (role, code, ftype, reason)

    # -- CRYPTO / TLS -------------------------------------------------------------------

    def _crypto_data(self, space: int, role: int, off: int, data: bytes) -> None:
        key = (space, role)
        wanted = _WANTED.get(key)
        if wanted is None:
            return
        state = self._crypto.get(key)
        if state is _DONE:
            return
        if state is None:
            reader = HandshakeReader(self.limits.quic_max_crypto_bytes)
            direction = self.flow_direction(role)

            def crypto_emit(
                ev: Event, key: tuple[int, int] = key, reader: HandshakeReader = reader
            ) -> None:
                if isinstance(ev, StreamData):
                    self.flow.stream_bytes[ev.direction] -= len(ev.data)
                    self._tls_bytes(key, reader, ev.data)
                elif isinstance(ev, StreamGap):
                    self.flow.gap_bytes[ev.direction] -= ev.nbytes
                    if self._crypto.get(key) is not _DONE:
                        self._end_crypto(key)
                        self.anomaly(
                            "quic.crypto_gap",
                            f"{ROLE_NAMES[key[1]]} CRYPTO stream ({_level_name(key[0])}) lost "
                            f"{ev.nbytes} bytes at offset {ev.offset} ({ev.reason}); its TLS "
                            "handshake messages cannot be read",
                        )
                else:
                    self.emit(ev)

            half = TcpHalfStream(
                self.flow, direction, self._crypto_limits, crypto_emit, None, "quic.crypto"
            )
            state = self._crypto[key] = half
        state.place(off, data, self._pkt_ts, self._pkt_frame)
        if self._crypto.get(key) is not state and self.limits.budget is not None:
            # read (or given up) while placing: what it still buffers is dropped
            self.limits.budget.hold(state, 0)
            state.forget_recent()

    def _tls_bytes(self, key: tuple[int, int], reader: HandshakeReader, data: bytes) -> None:
        if self._crypto.get(key) is _DONE:
            return
        wanted = _WANTED[key]
        for mtype, body in reader.feed(data):
            if mtype != wanted:
                continue
            done = self._tls_message(key, mtype, body)
            if done:
                self._end_crypto(key)
                return
        if reader.error:
            self._end_crypto(key)
            self.anomaly("limit.quic_crypto", f"{self._describe()}: {reader.error}")
            return
        budget = self.limits.budget
        if budget is not None:  # the part of a message held until it is whole
            hold = self._crypto_held.get(key)
            if reader.buf:
                if hold is None:
                    hold = self._crypto_held[key] = _CryptoHold(self, key, reader)
                budget.hold(hold, len(reader.buf) + CRYPTO_HOLD_OVERHEAD_BYTES)
            elif hold is not None:
                del self._crypto_held[key]
                budget.hold(hold, 0)

    def _end_crypto(self, key: tuple[int, int], state: _Done | None = _DONE) -> None:
        """Stop reading a CRYPTO stream (its message read, lost, given up: ``_DONE``; or
        to be read afresh: None).  What it held goes back to the run's budget."""
        old = self._crypto.pop(key, None)
        if state is not None:
            self._crypto[key] = state
        hold = self._crypto_held.pop(key, None)
        budget = self.limits.budget
        if budget is not None:
            if hold is not None:
                budget.hold(hold, 0)
            if isinstance(old, TcpHalfStream):
                budget.hold(old, 0)
                old.forget_recent()

    def _give_up_crypto(self, hold: _CryptoHold) -> None:
        """The run's memory budget is reached and this CRYPTO stream's partial handshake
        message is the least recently fed holder: the message is given up (its bytes
        were never stream data, so no byte accounting changes), a ``limit.memory``
        anomaly says so, and the stream is read no further."""
        key = hold.key
        buf = hold.reader.buf
        budget = self.limits.budget
        if self._crypto_held.get(key) is not hold:  # (already ended)
            if budget is not None:
                budget.hold(hold, 0)
            return
        held = len(buf)
        what = (f"of a {int.from_bytes(buf[1:4], 'big') + 4}-byte TLS handshake message "
                f"(type {buf[0]})" if held >= 4 else "of a TLS handshake message header")
        hold.reader.buf = bytearray()
        self._end_crypto(key)
        self.anomaly(
            "limit.memory",
            f"memory budget of {budget.limit_bytes if budget else 0} bytes reached: gave up "
            f"the {ROLE_NAMES[key[1]]} CRYPTO stream ({_level_name(key[0])}) of "
            f"{self._describe()}, the least recently fed: dropped the {held} bytes held "
            f"{what}; its TLS handshake messages are not read",
        )

    def _tls_message(self, key: tuple[int, int], mtype: int, body: bytes) -> bool:
        """Handle a wanted handshake message; True when the stream needs no more reading."""
        role = key[1]
        if mtype == HandshakeType.CLIENT_HELLO:
            ch, err = safe_parse(parse_client_hello, body)
            if ch is None:
                self.anomaly("quic.tls_error", f"malformed ClientHello: {err}")
                return True
            old, self.client_hello = self.client_hello, ch
            if old is not None and old.random == ch.random:
                return True  # the same ClientHello again (after a Retry)
            self.pkt_sni = ch.sni
            self.pkt_alpn = ch.alpn
            self._handshake_event("client_hello", role)
            return True
        if mtype == HandshakeType.SERVER_HELLO:
            sh, err = safe_parse(parse_server_hello, body)
            if sh is None:
                self.anomaly("quic.tls_error", f"malformed ServerHello: {err}")
                return True
            self.server_hello = sh
            if sh.hello_retry:
                self.hello_retry = True
                self._handshake_event("server_hello", role)
                return False  # the real ServerHello follows on the same stream
            try:
                suite = CipherSuite(sh.cipher_suite)
            except ValueError:
                suite = None
            if suite is None or suite == CipherSuite.AES_128_CCM_SHA256:
                self.anomaly(
                    "quic.unsupported_cipher",
                    f"{self._describe()}: ServerHello selects cipher suite "
                    f"0x{sh.cipher_suite:04x}, which QUIC decryption does not support",
                )
            elif self.cipher_suite is None:
                self.cipher_suite = int(suite)
            self._handshake_event("server_hello", role)
            return True
        if mtype == HandshakeType.ENCRYPTED_EXTENSIONS:
            ee, err = safe_parse(parse_encrypted_extensions, body)
            if ee is None:
                self.anomaly("quic.tls_error", f"malformed EncryptedExtensions: {err}")
                return True
            self.alpn_selected = ee.alpn
            self._handshake_event("encrypted_extensions", role)
            return True
        return True

    def _handshake_event(self, stage: str, role: int) -> None:
        ch, sh = self.client_hello, self.server_hello
        real_sh = sh if sh is not None and not sh.hello_retry else None
        self.emit(
            QuicHandshake(
                self.flow,
                self.flow_direction(role),
                self._pkt_ts,
                self._pkt_frame,
                stage,
                self.version,
                (self.initial_dcid or b"").hex(),
                ch.random.hex() if ch else None,
                ch.sni if ch else None,
                ch.alpn if ch else (),
                self.alpn_selected,
                ch.supported_versions if ch else (),
                real_sh.selected_version if real_sh else None,
                ch.cipher_suites if ch else (),
                real_sh.cipher_suite if real_sh else None,
                ch.early_data if ch else False,
                self.hello_retry,
            )
        )

    # -- streams ----------------------------------------------------------------------

    def _half(self, sid: int, direction: Direction) -> TcpHalfStream | None:
        key = (sid, direction)
        half = self.streams.get(key)
        if half is not None:
            return half
        if key in self._ended:
            return None
        if len(self.streams) >= self.limits.quic_max_streams:
            if key not in self._refused and len(self._refused) < MAX_ENDED_STREAMS:
                self._refused.add(key)
                self.anomaly(
                    "limit.quic_streams",
                    f"{self._describe()}: {len(self.streams)} streams open (limit "
                    f"{self.limits.quic_max_streams}); data of stream {sid} "
                    f"({direction.short}) is not reassembled",
                )
            return None
        half = self.streams[key] = TcpHalfStream(
            self.flow, direction, self.limits, self.emit, sid, "quic"
        )
        return half

    def _stream_data(
        self, sid: int, direction: Direction, off: int, data: bytes, fin: bool
    ) -> None:
        half = self._half(sid, direction)
        if half is None:
            return
        end = off + len(data)
        if fin:
            if half.fin_off is not None and half.fin_off != end:
                self.anomaly(
                    "quic.final_size_changed",
                    f"stream {sid} ({direction.short}): FIN at {end} after FIN at {half.fin_off}",
                )
            else:
                half.fin_off = end
        if half.fin_off is not None and end > half.fin_off:
            self.anomaly(
                "quic.data_beyond_fin",
                f"stream {sid} ({direction.short}): {end - max(off, half.fin_off)} bytes past "
                f"its final size {half.fin_off} are ignored",
            )
            data = data[: max(0, half.fin_off - off)]
        half.place(off, data, self._pkt_ts, self._pkt_frame)
        if half.fin_off is not None and half.next_off >= half.fin_off and not half.pieces:
            self._end_stream(sid, direction, half, "fin", None)

    def _stream_reset(self, sid: int, direction: Direction, err: int, final: int) -> None:
        half = self._half(sid, direction)
        if half is None:
            return
        if half.fin_off is None or half.fin_off == final:
            half.fin_off = final
        else:
            self.anomaly(
                "quic.final_size_changed",
                f"stream {sid} ({direction.short}): RESET_STREAM final size {final} after "
                f"FIN at {half.fin_off}",
            )
        half.finish(self._pkt_ts, self._pkt_frame)
        self._end_stream(sid, direction, half, "reset", err)

    def _end_stream(
        self, sid: int, direction: Direction, half: TcpHalfStream, reason: str, err: int | None
    ) -> None:
        key = (sid, direction)
        self.streams.pop(key, None)
        if len(self._ended) >= MAX_ENDED_STREAMS:
            self._ended.clear()
        self._ended.add(key)
        self.emit(
            QuicStreamEnd(
                self.flow,
                direction,
                sid,
                self._pkt_ts,
                self._pkt_frame,
                reason,
                half.fin_off if reason in ("fin", "reset") else None,
                err,
            )
        )

    def close(self, ts_ns: int, frame: int, reason: str) -> None:
        """The connection ends: every open stream direction is finished (holes and a
        known-but-missing tail become gaps) and ended."""
        self._pkt_ts = ts_ns
        self._pkt_frame = frame
        self._pkt_flow = self.flow
        if self.close_seen is not None and reason == "flow-end":
            reason = "connection-close"
        self._report_undecryptable()
        for (sid, direction), half in sorted(self.streams.items(), key=lambda kv: kv[0]):
            half.finish(ts_ns, frame)
            self._end_stream(sid, direction, half, reason, None)
        self.streams.clear()
        for key in list(self._crypto):
            self._end_crypto(key, None)


def _level_name(space: int) -> str:
    return ("Initial", "Handshake", "1-RTT")[space]
