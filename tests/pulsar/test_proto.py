"""Our pulsar.proto, its committed descriptor and protocol-facts §4 agree."""

from __future__ import annotations

import pytest

from dissectors.proto.wire import Kind
from dissectors.pulsar import pb
from dissectors.pulsar._descriptors import FILE
from dissectors.pulsar.build import OUTPUT, CompilerMissing, compile_proto, render
from dissectors.pulsar.codes import CommandType, ResourceType
from dissectors.pulsar.frame import COMMAND_NAMES


def test_committed_descriptor_matches_the_proto_file():
    from google.protobuf import descriptor_pb2

    try:
        fresh = compile_proto()
    except CompilerMissing as e:  # pragma: no cover - grpcio-tools is installed with the tests
        pytest.fail(str(e))
    assert descriptor_pb2.FileDescriptorProto.FromString(fresh) == \
        descriptor_pb2.FileDescriptorProto.FromString(FILE), \
        "pulsar.proto changed: run python -m dissectors.pulsar.build"
    assert OUTPUT.read_text() == render(fresh)


# protocol-facts §4.2: every type number and name
FACT_TYPES = {
    2: "CONNECT", 3: "CONNECTED", 4: "SUBSCRIBE", 5: "PRODUCER", 6: "SEND", 7: "SEND_RECEIPT",
    8: "SEND_ERROR", 9: "MESSAGE", 10: "ACK", 11: "FLOW", 12: "UNSUBSCRIBE", 13: "SUCCESS",
    14: "ERROR", 15: "CLOSE_PRODUCER", 16: "CLOSE_CONSUMER", 17: "PRODUCER_SUCCESS", 18: "PING",
    19: "PONG", 20: "REDELIVER_UNACKNOWLEDGED_MESSAGES", 21: "PARTITIONED_METADATA",
    22: "PARTITIONED_METADATA_RESPONSE", 23: "LOOKUP", 24: "LOOKUP_RESPONSE",
    25: "CONSUMER_STATS", 26: "CONSUMER_STATS_RESPONSE", 27: "REACHED_END_OF_TOPIC", 28: "SEEK",
    29: "GET_LAST_MESSAGE_ID", 30: "GET_LAST_MESSAGE_ID_RESPONSE", 31: "ACTIVE_CONSUMER_CHANGE",
    32: "GET_TOPICS_OF_NAMESPACE", 33: "GET_TOPICS_OF_NAMESPACE_RESPONSE", 34: "GET_SCHEMA",
    35: "GET_SCHEMA_RESPONSE", 36: "AUTH_CHALLENGE", 37: "AUTH_RESPONSE", 38: "ACK_RESPONSE",
    39: "GET_OR_CREATE_SCHEMA", 40: "GET_OR_CREATE_SCHEMA_RESPONSE", 50: "NEW_TXN",
    51: "NEW_TXN_RESPONSE", 52: "ADD_PARTITION_TO_TXN", 53: "ADD_PARTITION_TO_TXN_RESPONSE",
    54: "ADD_SUBSCRIPTION_TO_TXN", 55: "ADD_SUBSCRIPTION_TO_TXN_RESPONSE", 56: "END_TXN",
    57: "END_TXN_RESPONSE", 58: "END_TXN_ON_PARTITION", 59: "END_TXN_ON_PARTITION_RESPONSE",
    60: "END_TXN_ON_SUBSCRIPTION", 61: "END_TXN_ON_SUBSCRIPTION_RESPONSE",
    62: "TC_CLIENT_CONNECT_REQUEST", 63: "TC_CLIENT_CONNECT_RESPONSE", 64: "WATCH_TOPIC_LIST",
    65: "WATCH_TOPIC_LIST_SUCCESS", 66: "WATCH_TOPIC_UPDATE", 67: "WATCH_TOPIC_LIST_CLOSE",
    68: "TOPIC_MIGRATED", 70: "SCALABLE_TOPIC_LOOKUP", 71: "SCALABLE_TOPIC_UPDATE",
    72: "SCALABLE_TOPIC_CLOSE", 73: "SCALABLE_TOPIC_SUBSCRIBE",
    74: "SCALABLE_TOPIC_SUBSCRIBE_RESPONSE", 75: "SCALABLE_TOPIC_ASSIGNMENT_UPDATE",
    76: "WATCH_SCALABLE_TOPICS", 77: "WATCH_SCALABLE_TOPICS_UPDATE",
    78: "WATCH_SCALABLE_TOPICS_CLOSE", 79: "WATCH_TC_ASSIGNMENTS",
    80: "WATCH_TC_ASSIGNMENTS_UPDATE", 81: "WATCH_TC_ASSIGNMENTS_CLOSE",
}


def test_command_types_are_the_facts():
    assert COMMAND_NAMES == FACT_TYPES


def test_the_code_enums_are_the_schemas():
    """The IntEnums the session tests against are the numbers the decoder loads."""
    assert {int(c): c.name for c in CommandType} == COMMAND_NAMES
    names = pb.enum_names("CommandTopicMigrated.ResourceType")
    assert {int(c): c.name for c in ResourceType} == {n: s.upper() for n, s in names.items()}


def test_each_subcommand_sits_in_the_field_numbered_like_its_type():
    base = pb.schema("BaseCommand")
    assert base.fields[1].kind is Kind.ENUM
    assert set(base.fields) - {1} == set(FACT_TYPES)


S, B, I32, I64, U32, U64, BOOL, ENUM, MSG = (
    Kind.STRING, Kind.BYTES, Kind.INT32, Kind.INT64, Kind.UINT32, Kind.UINT64, Kind.BOOL,
    Kind.ENUM, Kind.MESSAGE,
)
# protocol-facts §4.3 / §4.4, transcribed: message → {number: kind}
FACTS = {
    "MessageMetadata": {1: S, 2: U64, 3: U64, 4: MSG, 5: S, 6: S, 7: S, 8: ENUM, 9: U32,
                        11: I32, 12: U64, 13: MSG, 14: S, 15: B, 16: B, 17: BOOL, 18: B,
                        19: I64, 20: I32, 22: U64, 23: U64, 24: U64, 25: BOOL, 26: S, 27: I32,
                        28: I32, 29: I32, 30: BOOL, 31: I32, 32: B, 33: U32, 34: U32},
    "SingleMessageMetadata": {1: MSG, 2: S, 3: I32, 4: BOOL, 5: U64, 6: BOOL, 7: B, 8: U64,
                              9: BOOL, 10: BOOL},
    "BrokerEntryMetadata": {1: U64, 2: U64},
    "MessageIdData": {1: U64, 2: U64, 3: I32, 4: I32, 5: I64, 6: I32, 7: MSG},
    "CommandConnect": {1: S, 2: ENUM, 3: B, 4: I32, 5: S, 6: S, 7: S, 8: S, 9: S, 10: MSG,
                       11: S},
    "CommandConnected": {1: S, 2: I32, 3: I32, 4: MSG},
    "FeatureFlags": {n: BOOL for n in range(1, 10)},
    "CommandSend": {1: U64, 2: U64, 3: I32, 4: U64, 5: U64, 6: U64, 7: BOOL, 8: BOOL, 9: MSG},
    "CommandSendReceipt": {1: U64, 2: U64, 3: MSG, 4: U64},
    "CommandSendError": {1: U64, 2: U64, 3: ENUM, 4: S},
    "CommandMessage": {1: U64, 2: MSG, 3: U32, 4: I64, 5: U64},
    "CommandAck": {1: U64, 2: ENUM, 3: MSG, 4: ENUM, 5: MSG, 6: U64, 7: U64, 8: U64},
    "CommandFlow": {1: U64, 2: U32},
    "CommandProducerSuccess": {1: U64, 2: S, 3: I64, 4: B, 5: U64, 6: BOOL},
    "CommandLookupTopicResponse": {1: S, 2: S, 3: ENUM, 4: U64, 5: BOOL, 6: ENUM, 7: S,
                                   8: BOOL},
    "CommandCloseProducer": {1: U64, 2: U64, 3: S, 4: S},
    "CommandTopicMigrated": {1: U64, 2: ENUM, 3: S, 4: S},
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_field_numbers_and_kinds_are_the_facts(name):
    sch = pb.schema(name)
    assert {n: f.kind for n, f in sch.fields.items()} == FACTS[name]


def test_enums_are_the_facts():
    assert pb.enum_names("CompressionType") == {0: "NONE", 1: "LZ4", 2: "ZLIB", 3: "ZSTD",
                                                4: "SNAPPY"}
    assert pb.enum_names("CommandSubscribe.SubType") == {0: "Exclusive", 1: "Shared",
                                                         2: "Failover", 3: "Key_Shared"}
    assert pb.enum_names("ServerError")[25] == "ProducerFenced"
    assert len(pb.enum_names("ServerError")) == 26
    assert pb.enum_names("Schema.Type")[22] == "External"


def test_doubles_are_skipped_not_unknown():
    assert pb.OMITTED["msgcap.pulsar.CommandConsumerStatsResponse"] == frozenset({4, 5, 6, 14,
                                                                                  16})
