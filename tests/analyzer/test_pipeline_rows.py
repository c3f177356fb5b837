"""The conveyor's per-row envelope (``CaptureDissection._column_rows``).

A flow's column rows take their endpoints from ``FlowDispatch.ends``, read once per flow
(``analyzer.pipeline._move_ends``) instead of ``FlowInfo.endpoint`` per batch.  Roles
may be swapped while a flow lives (``FlowTable.swap_roles``: a layer above learned them
better), and the rows after the swap must carry the new endpoints, as ``endpoint`` gives
them, while those before keep the old ones.
"""

from __future__ import annotations

from analyzer.pipeline import CaptureDissection, Options
from analyzer.sink import Sink
from dissectors.api import Direction
from dissectors.registry import Registry
from reassembly.events import Endpoint, FlowInfo, RoleSource, StreamData, Transport
from tests.analyzer.test_conveyor import TOY_TABLE, ToyDissector

C2S, S2C = Direction.C2S, Direction.S2C


class _Batches(Sink):
    columnar = True

    def __init__(self) -> None:
        self.batches: list = []

    def write_rows(self, spec, rows) -> None:
        pass

    def write_batch(self, spec, batch) -> None:
        if spec.name == TOY_TABLE.name:
            self.batches.append(batch)

    def owns(self, flow_id: int) -> bool:
        return True


def test_column_rows_follow_a_role_swap():
    reg = Registry()
    reg.add(ToyDissector)
    sink = _Batches()
    job = CaptureDissection("0" * 16, sink, reg, Options(strict=True))
    a, b = Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 7777)
    flow = FlowInfo(5, Transport.TCP, a, b, RoleSource.SYN, 0, 0, 1, 1)
    offsets = [0, 0]

    def send(direction: Direction, data: bytes) -> None:
        job.handle(StreamData(flow, direction, offsets[direction], data, 1, 1, 1, 1))
        offsets[direction] += len(data)

    send(C2S, b"toy x\n")
    send(S2C, b"y\n")
    # as FlowTable.swap_roles does: client and server exchanged in place
    flow.client, flow.server = flow.server, flow.client
    send(C2S, b"z\n")
    send(S2C, b"w\n")
    job.finish()
    rows = [r for batch in sink.batches for r in batch.to_pylist()]
    got = [(r["word"], r["direction"], r["src_port"], r["dst_port"], r["src_ip"])
           for r in rows]
    assert got == [("toy", "c2s", 40000, 7777, "10.0.0.1"),
                   ("x", "c2s", 40000, 7777, "10.0.0.1"),
                   ("y", "s2c", 7777, 40000, "10.0.0.2"),
                   ("z", "c2s", 7777, 40000, "10.0.0.2"),
                   ("w", "s2c", 40000, 7777, "10.0.0.1")]
    assert [r["record_id"] & 0xFFFFFFFF for r in rows] == list(range(5))
