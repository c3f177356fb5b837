"""Our .proto files, the committed descriptors and protocol-facts agree."""

from __future__ import annotations

import pytest

from dissectors.proto import FILES, Kind, message_class, schema
from dissectors.proto.build import OUTPUT, CompilerMissing, compile_protos, render


def test_committed_descriptors_match_the_proto_files():
    from google.protobuf import descriptor_pb2

    try:
        fresh = compile_protos()
    except CompilerMissing as e:  # pragma: no cover - the test extra brings grpcio-tools
        pytest.fail(str(e))
    assert set(fresh) == set(FILES)
    for name, blob in FILES.items():
        committed = descriptor_pb2.FileDescriptorProto.FromString(blob)
        assert descriptor_pb2.FileDescriptorProto.FromString(fresh[name]) == committed, (
            f"{name} changed: run python -m dissectors.proto.build"
        )
    # the module is exactly what the generator writes (no hand edits)
    assert OUTPUT.read_text() == render(FILES)


# protocol-facts §2.2, transcribed: message → {number: (kind, repeated)}
S, B, I32, I64, U32, U64, BOOL, ENUM = (
    Kind.STRING, Kind.BYTES, Kind.INT32, Kind.INT64, Kind.UINT32, Kind.UINT64, Kind.BOOL,
    Kind.ENUM,
)
STAN_FACTS = {
    "PubMsg": {1: S, 2: S, 3: S, 4: S, 5: B, 6: B, 10: B},
    "PubAck": {1: S, 2: S},
    "MsgProto": {1: U64, 2: S, 3: S, 4: B, 5: I64, 6: BOOL, 7: U32, 10: U32},
    "Ack": {1: S, 2: U64},
    "ConnectRequest": {1: S, 2: S, 3: I32, 4: B, 5: I32, 6: I32},
    "ConnectResponse": {1: S, 2: S, 3: S, 4: S, 5: S, 6: S, 7: S, 8: I32, 9: I32, 10: I32,
                        100: S},
    "Ping": {1: B},
    "PingResponse": {1: S},
    "SubscriptionRequest": {1: S, 2: S, 3: S, 4: S, 5: I32, 6: I32, 7: S, 10: ENUM, 11: U64,
                            12: I64},
    "SubscriptionResponse": {2: S, 3: S},
    "UnsubscribeRequest": {1: S, 2: S, 3: S, 4: S},
    "CloseRequest": {1: S},
    "CloseResponse": {1: S},
}


@pytest.mark.parametrize("name", sorted(STAN_FACTS))
def test_stan_proto_matches_protocol_facts(name):
    sch = schema(f"msgcap.stan.{name}")
    assert {n: f.kind for n, f in sch.fields.items()} == STAN_FACTS[name]
    assert not any(f.repeated for f in sch.fields.values())


def test_start_position_enum():
    from dissectors.proto import enum_names

    assert enum_names("msgcap.stan.StartPosition") == {
        0: "NewOnly", 1: "LastReceived", 2: "TimeDeltaStart", 3: "SequenceStart", 4: "First",
    }


def test_message_classes_encode_what_our_schema_decodes():
    from dissectors.proto import decode

    cls = message_class("msgcap.stan.MsgProto")
    raw = cls(sequence=2**63 + 5, subject="c", timestamp=-1, crc32=0xFFFFFFFF).SerializeToString()
    d = decode(raw, schema("msgcap.stan.MsgProto"))
    assert d.values == {"sequence": 2**63 + 5, "subject": "c", "timestamp": -1,
                        "crc32": 0xFFFFFFFF}
    assert d.clean
