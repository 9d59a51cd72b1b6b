"""The exception hierarchy (every decoding failure is a `DecodeError`, a `ValueError`) and the names of
Kafka's error codes."""

from __future__ import annotations


def join_path(outer: str, inner: str) -> str:
    """`members` + `[3]` -> `members[3]`; `members[3]` + `metadata` -> `members[3].metadata`."""
    if not inner:
        return outer
    if not outer:
        return inner
    return outer + inner if inner.startswith("[") else f"{outer}.{inner}"


class DecodeError(ValueError):
    """Bytes that cannot be decoded; `offset` is the byte position, `path` the field path."""

    def __init__(self, message: str, offset: int | None = None, path: str = "") -> None:
        super().__init__(message)
        self.reason = message
        self.offset = offset
        self.path = path

    def within(self, segment: str) -> DecodeError:
        """Prefix the field path with an enclosing field name or `[index]`; returns self."""
        self.path = join_path(segment, self.path)
        return self

    def __str__(self) -> str:
        where = []
        if self.path:
            where.append(f"at {self.path}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason


class TruncatedError(DecodeError):
    """The input ended before the value being read."""


class InvalidLengthError(DecodeError):
    """A length or count prefix is negative, too large, or larger than the remaining input."""


class InvalidValueError(DecodeError):
    """A value is malformed: a bad varint, invalid UTF-8, a null where none is allowed, a bad checksum..."""


class TrailingBytesError(DecodeError):
    """Bytes remain after a complete message."""


class UnsupportedVersionError(DecodeError):
    """The version is outside the message's valid versions."""


class EncodeError(ValueError):
    """A value cannot be encoded at the requested version; `path` names the field."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.reason = message
        self.path = path

    def within(self, segment: str) -> EncodeError:
        self.path = join_path(segment, self.path)
        return self

    def __str__(self) -> str:
        return f"{self.reason} (at {self.path})" if self.path else self.reason


# Kafka's error codes, from -1 on, in order (org.apache.kafka.common.protocol.Errors of the release in
# java/pom.xml; tests/test_cli_error_codes.py compares them with the release's class).
_ERROR_NAMES = """
    UNKNOWN_SERVER_ERROR NONE OFFSET_OUT_OF_RANGE CORRUPT_MESSAGE UNKNOWN_TOPIC_OR_PARTITION INVALID_FETCH_SIZE
    LEADER_NOT_AVAILABLE NOT_LEADER_OR_FOLLOWER REQUEST_TIMED_OUT BROKER_NOT_AVAILABLE REPLICA_NOT_AVAILABLE
    MESSAGE_TOO_LARGE STALE_CONTROLLER_EPOCH OFFSET_METADATA_TOO_LARGE NETWORK_EXCEPTION
    COORDINATOR_LOAD_IN_PROGRESS COORDINATOR_NOT_AVAILABLE NOT_COORDINATOR INVALID_TOPIC_EXCEPTION
    RECORD_LIST_TOO_LARGE NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS_AFTER_APPEND INVALID_REQUIRED_ACKS
    ILLEGAL_GENERATION INCONSISTENT_GROUP_PROTOCOL INVALID_GROUP_ID UNKNOWN_MEMBER_ID INVALID_SESSION_TIMEOUT
    REBALANCE_IN_PROGRESS INVALID_COMMIT_OFFSET_SIZE TOPIC_AUTHORIZATION_FAILED GROUP_AUTHORIZATION_FAILED
    CLUSTER_AUTHORIZATION_FAILED INVALID_TIMESTAMP UNSUPPORTED_SASL_MECHANISM ILLEGAL_SASL_STATE
    UNSUPPORTED_VERSION TOPIC_ALREADY_EXISTS INVALID_PARTITIONS INVALID_REPLICATION_FACTOR
    INVALID_REPLICA_ASSIGNMENT INVALID_CONFIG NOT_CONTROLLER INVALID_REQUEST UNSUPPORTED_FOR_MESSAGE_FORMAT
    POLICY_VIOLATION OUT_OF_ORDER_SEQUENCE_NUMBER DUPLICATE_SEQUENCE_NUMBER INVALID_PRODUCER_EPOCH
    INVALID_TXN_STATE INVALID_PRODUCER_ID_MAPPING INVALID_TRANSACTION_TIMEOUT CONCURRENT_TRANSACTIONS
    TRANSACTION_COORDINATOR_FENCED TRANSACTIONAL_ID_AUTHORIZATION_FAILED SECURITY_DISABLED
    OPERATION_NOT_ATTEMPTED KAFKA_STORAGE_ERROR LOG_DIR_NOT_FOUND SASL_AUTHENTICATION_FAILED UNKNOWN_PRODUCER_ID
    REASSIGNMENT_IN_PROGRESS DELEGATION_TOKEN_AUTH_DISABLED DELEGATION_TOKEN_NOT_FOUND
    DELEGATION_TOKEN_OWNER_MISMATCH DELEGATION_TOKEN_REQUEST_NOT_ALLOWED DELEGATION_TOKEN_AUTHORIZATION_FAILED
    DELEGATION_TOKEN_EXPIRED INVALID_PRINCIPAL_TYPE NON_EMPTY_GROUP GROUP_ID_NOT_FOUND
    FETCH_SESSION_ID_NOT_FOUND INVALID_FETCH_SESSION_EPOCH LISTENER_NOT_FOUND TOPIC_DELETION_DISABLED
    FENCED_LEADER_EPOCH UNKNOWN_LEADER_EPOCH UNSUPPORTED_COMPRESSION_TYPE STALE_BROKER_EPOCH
    OFFSET_NOT_AVAILABLE MEMBER_ID_REQUIRED PREFERRED_LEADER_NOT_AVAILABLE GROUP_MAX_SIZE_REACHED
    FENCED_INSTANCE_ID ELIGIBLE_LEADERS_NOT_AVAILABLE ELECTION_NOT_NEEDED NO_REASSIGNMENT_IN_PROGRESS
    GROUP_SUBSCRIBED_TO_TOPIC INVALID_RECORD UNSTABLE_OFFSET_COMMIT THROTTLING_QUOTA_EXCEEDED PRODUCER_FENCED
    RESOURCE_NOT_FOUND DUPLICATE_RESOURCE UNACCEPTABLE_CREDENTIAL INCONSISTENT_VOTER_SET INVALID_UPDATE_VERSION
    FEATURE_UPDATE_FAILED PRINCIPAL_DESERIALIZATION_FAILURE SNAPSHOT_NOT_FOUND POSITION_OUT_OF_RANGE
    UNKNOWN_TOPIC_ID DUPLICATE_BROKER_REGISTRATION BROKER_ID_NOT_REGISTERED INCONSISTENT_TOPIC_ID
    INCONSISTENT_CLUSTER_ID TRANSACTIONAL_ID_NOT_FOUND FETCH_SESSION_TOPIC_ID_ERROR INELIGIBLE_REPLICA
    NEW_LEADER_ELECTED OFFSET_MOVED_TO_TIERED_STORAGE FENCED_MEMBER_EPOCH UNRELEASED_INSTANCE_ID
    UNSUPPORTED_ASSIGNOR STALE_MEMBER_EPOCH MISMATCHED_ENDPOINT_TYPE UNSUPPORTED_ENDPOINT_TYPE
    UNKNOWN_CONTROLLER_ID UNKNOWN_SUBSCRIPTION_ID TELEMETRY_TOO_LARGE INVALID_REGISTRATION TRANSACTION_ABORTABLE
    INVALID_RECORD_STATE SHARE_SESSION_NOT_FOUND INVALID_SHARE_SESSION_EPOCH FENCED_STATE_EPOCH
    INVALID_VOTER_KEY DUPLICATE_VOTER VOTER_NOT_FOUND INVALID_REGULAR_EXPRESSION REBOOTSTRAP_REQUIRED
    STREAMS_INVALID_TOPOLOGY STREAMS_INVALID_TOPOLOGY_EPOCH STREAMS_TOPOLOGY_FENCED SHARE_SESSION_LIMIT_REACHED
    GROUP_DELETION_FAILED STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED CONTROLLER_ID_NOT_REGISTERED
""".split()
ERROR_NAMES: dict[int, str] = dict(enumerate(_ERROR_NAMES, start=-1))


def error_name(code: int) -> str:
    """Kafka's name of an error code (`16` -> `NOT_COORDINATOR`); a code this release does not know
    is `UNKNOWN_ERROR_CODE_<code>`."""
    return ERROR_NAMES.get(code) or f"UNKNOWN_ERROR_CODE_{code}"


def error_text(code: int, message: str | None = None) -> str:
    """What people read for an error code: `NOT_COORDINATOR (16)`, then the message if there is one."""
    text = f"{error_name(code)} ({code})"
    return f"{text}: {message}" if message else text
