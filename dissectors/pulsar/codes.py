"""Pulsar's wire codes and anomaly kinds, as names.

Why a module of its own: the frame layout (``frame``), the payload codecs (``codec``) and
the session all test command types and raise anomalies; one place for the names keeps a
number like ``36`` from meaning "AUTH_CHALLENGE" in one file and nothing in another.
The values are facts of ``pulsar.proto`` (kept next to this file); ``tests/pulsar``
checks ``CommandType`` against the schema the decoder loads from it.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = ["CommandType", "PulsarAnomaly", "ResourceType"]


class CommandType(IntEnum):
    """``BaseCommand.Type`` (pulsar.proto): the ``command_type`` column's numbers."""

    CONNECT = 2
    CONNECTED = 3
    SUBSCRIBE = 4
    PRODUCER = 5
    SEND = 6
    SEND_RECEIPT = 7
    SEND_ERROR = 8
    MESSAGE = 9
    ACK = 10
    FLOW = 11
    UNSUBSCRIBE = 12
    SUCCESS = 13
    ERROR = 14
    CLOSE_PRODUCER = 15
    CLOSE_CONSUMER = 16
    PRODUCER_SUCCESS = 17
    PING = 18
    PONG = 19
    REDELIVER_UNACKNOWLEDGED_MESSAGES = 20
    PARTITIONED_METADATA = 21
    PARTITIONED_METADATA_RESPONSE = 22
    LOOKUP = 23
    LOOKUP_RESPONSE = 24
    CONSUMER_STATS = 25
    CONSUMER_STATS_RESPONSE = 26
    REACHED_END_OF_TOPIC = 27
    SEEK = 28
    GET_LAST_MESSAGE_ID = 29
    GET_LAST_MESSAGE_ID_RESPONSE = 30
    ACTIVE_CONSUMER_CHANGE = 31
    GET_TOPICS_OF_NAMESPACE = 32
    GET_TOPICS_OF_NAMESPACE_RESPONSE = 33
    GET_SCHEMA = 34
    GET_SCHEMA_RESPONSE = 35
    AUTH_CHALLENGE = 36
    AUTH_RESPONSE = 37
    ACK_RESPONSE = 38
    GET_OR_CREATE_SCHEMA = 39
    GET_OR_CREATE_SCHEMA_RESPONSE = 40
    NEW_TXN = 50
    NEW_TXN_RESPONSE = 51
    ADD_PARTITION_TO_TXN = 52
    ADD_PARTITION_TO_TXN_RESPONSE = 53
    ADD_SUBSCRIPTION_TO_TXN = 54
    ADD_SUBSCRIPTION_TO_TXN_RESPONSE = 55
    END_TXN = 56
    END_TXN_RESPONSE = 57
    END_TXN_ON_PARTITION = 58
    END_TXN_ON_PARTITION_RESPONSE = 59
    END_TXN_ON_SUBSCRIPTION = 60
    END_TXN_ON_SUBSCRIPTION_RESPONSE = 61
    TC_CLIENT_CONNECT_REQUEST = 62
    TC_CLIENT_CONNECT_RESPONSE = 63
    WATCH_TOPIC_LIST = 64
    WATCH_TOPIC_LIST_SUCCESS = 65
    WATCH_TOPIC_UPDATE = 66
    WATCH_TOPIC_LIST_CLOSE = 67
    TOPIC_MIGRATED = 68
    SCALABLE_TOPIC_LOOKUP = 70
    SCALABLE_TOPIC_UPDATE = 71
    SCALABLE_TOPIC_CLOSE = 72
    SCALABLE_TOPIC_SUBSCRIBE = 73
    SCALABLE_TOPIC_SUBSCRIBE_RESPONSE = 74
    SCALABLE_TOPIC_ASSIGNMENT_UPDATE = 75
    WATCH_SCALABLE_TOPICS = 76
    WATCH_SCALABLE_TOPICS_UPDATE = 77
    WATCH_SCALABLE_TOPICS_CLOSE = 78
    WATCH_TC_ASSIGNMENTS = 79
    WATCH_TC_ASSIGNMENTS_UPDATE = 80
    WATCH_TC_ASSIGNMENTS_CLOSE = 81


class ResourceType(IntEnum):
    """``CommandTopicMigrated.ResourceType`` (pulsar.proto): whose id ``resource_id`` is."""

    PRODUCER = 0
    CONSUMER = 1


class PulsarAnomaly(StrEnum):
    """Anomaly kinds the Pulsar dissector raises (``anomalies.kind``; the values are the
    documented strings, unchanged)."""

    BAD_BATCH = "pulsar.bad_batch"
    BAD_COMMAND = "pulsar.bad_command"
    BAD_FRAME = "pulsar.bad_frame"
    BAD_HEADER = "pulsar.bad_header"
    BAD_METADATA = "pulsar.bad_metadata"
    BAD_TIMESTAMP = "pulsar.bad_timestamp"
    BAD_UTF8 = "pulsar.bad_utf8"
    CHECKSUM_MISMATCH = "pulsar.checksum_mismatch"
    CHUNK_DUPLICATE = "pulsar.chunk_duplicate"
    CHUNK_INCOMPLETE = "pulsar.chunk_incomplete"
    CHUNK_LIMIT = "pulsar.chunk_limit"
    CHUNK_SIZE_MISMATCH = "pulsar.chunk_size_mismatch"
    DECOMPRESSION_BOMB = "pulsar.decompression_bomb"
    DECOMPRESSION_FAILED = "pulsar.decompression_failed"
    EOF_IN_FRAME = "pulsar.eof_in_frame"
    GAP_IN_FRAME = "pulsar.gap_in_frame"
    MISSING_PAYLOAD = "pulsar.missing_payload"
    MISSING_SUBCOMMAND = "pulsar.missing_subcommand"
    OVERSIZE_FRAME = "pulsar.oversize_frame"
    RESYNC = "pulsar.resync"
    TRAILING_BYTES = "pulsar.trailing_bytes"
    UNCOMPRESSED_SIZE_MISMATCH = "pulsar.uncompressed_size_mismatch"
    UNEXPECTED_BROKER_ENTRY_METADATA = "pulsar.unexpected_broker_entry_metadata"
    UNKNOWN_COMMAND = "pulsar.unknown_command"
    UNKNOWN_COMPRESSION = "pulsar.unknown_compression"
    WRONG_DIRECTION = "pulsar.wrong_direction"
