"""Types of the C extension ``reassembly._engine`` (reassembly/_engine.c)."""

from collections.abc import Sequence

from reassembly.events import FlowInfo
from reassembly.flows import _Tcp

Row = tuple[int, bytes, bytes, int, int, int, tuple[int, ...], int, int, int, int, int, int, int]
FrameFields = tuple[int, int, int, bytes, int, int]
# (info, conn, direction, offset, data, packed int64 (end offset, ts_ns, frame) per segment);
# a gap the C core proved: data None, packed (nbytes, ts_ns, frame) of the ACK
Run = tuple[FlowInfo, _Tcp, int, int, bytes | None, bytes]
# (packets, bytes delivered in order, mid, next_off, ref_off, last_end, acked_off, win_edge,
#  win_size, recent_len, bytes buffered, bytes delivered from the buffer)
HalfDelta = tuple[int, int, int, int, int, int | None, int | None, int | None, int, int, int,
                  int]
# (base, ref_off, next_off, acked_off, win_edge, win_size, last_end, syn_seen, keep,
#  recent_len, recent_held, ack_shift, pieces, buffered, first piece start, last piece end)
HalfState = tuple[int, int, int, int | None, int | None, int, int | None, bool, int, int, int, int,
                  int, int, int, int]
# (kind, conn, direction, offset, data, ts_ns, frame, held): what sync() reports taken
# into buffers and windows, in order (reassembly/_engine.c FX_*)
Effect = tuple[int, _Tcp, int, int, bytes | None, int, int, int]
# (src, dst, TCP header and data, ts_ns, frame number, vlans) of a record (handshakes)
Handshake = tuple[bytes, bytes, bytes, int, int, tuple[int, ...]]
# (last_end, syn_seen, had_data) of a TcpHalfTracker (register_light)
LightHalf = tuple[int | None, bool, bool]

class Batch:
    end: int
    stop: int
    number: int
    def __len__(self) -> int: ...
    def frame(self, i: int, /) -> FrameFields: ...
    def row(self, i: int, /) -> Row | None: ...
    def kinds(self) -> bytes: ...

class Engine:
    def __len__(self) -> int: ...
    def register(self, v6: bool, client: bytes, cport: int, server: bytes, sport: int,
                 flow_id: int, conn: _Tcp, info: FlowInfo, ts_last: int, frame_last: int,
                 idle_timeout: int, c2s: HalfState, s2c: HalfState, /) -> None: ...
    def register_light(self, v6: bool, client: bytes, cport: int, server: bytes, sport: int,
                       flow_id: int, conn: _Tcp, info: FlowInfo, ts_last: int,
                       frame_last: int, idle_timeout: int, c2s: LightHalf, s2c: LightHalf,
                       /) -> None: ...
    def unregister(self, client: bytes, cport: int, server: bytes, sport: int, flow_id: int,
                   /) -> None: ...
    def registered(self) -> list[tuple[int, _Tcp]]: ...
    def clock(self, now_ns: int, last_sweep_ns: int | None, sweep_ns: int,
              linktype: int | None, headroom: int, /) -> None: ...
    def run(self, batch: Batch, start: int, per_flow: bool = False,
            movable: set[int] | None = None, /) -> tuple[int, list[Run]]: ...
    def handshakes(self, batch: Batch, start: int, /) -> list[Handshake]: ...
    def regroup(self) -> list[Run]: ...
    def headroom(self, n: int, /) -> None: ...
    def reorder(self, max_bytes: int, max_segments: int, piece_overhead: int, oow_slack: int,
                /) -> None: ...
    @property
    def mixed(self) -> bool: ...
    def sync(self) -> tuple[int, int, int, int,
                            list[tuple[_Tcp, FlowInfo, int, int, int, HalfDelta, HalfDelta]],
                            list[Effect]]: ...

def decode(linktype: int, data: bytes, /) -> Row | None: ...
def batch_of(frames: Sequence[FrameFields], /) -> Batch: ...
def flow_bytes(batch: Batch, /) -> list[tuple[bytes, int]]: ...
def walk_pcap(buf: bytes, pos: int, big_endian: bool, rec_len: int, swap: int, mult: int,
              limit: int, linktype: int, number: int, max_records: int, /) -> Batch: ...
# reassembly/_pcapng_walk.c (built into this module): (link type, mul, div, offset ns,
# global index, snaplen) per interface of the section, as reassembly.pcapng.Interface
def walk_pcapng(buf: bytes, pos: int, stop: int, big_endian: bool,
                interfaces: list[tuple[int, int, int, int, int, int]], number: int,
                last_ts: int, max_records: int, /) -> tuple[Batch, int]: ...
