"""Kafka's error vocabulary as the tools print it: the Java exception a broker's error code
becomes (``org.apache.kafka.common.errors.X``) with Errors' default message, and
:class:`JavaError`, a Java exception as a tool meets it.

Three lookups, one table: :func:`java_exception_for` (the jopt-simple tools, on confluent-kafka
errors and :class:`BrokerError`), :func:`kafka_error` (the argparse4j tools on kesque's wire
client: ``Errors.forCode(code).exception(message)``) and :func:`group_error` (the consumer- and
share-group tools, where librdkafka's own wording gives way to Kafka's). Each knows the codes it
has always known (``*_CODES``): a code outside them keeps the generic name it printed before.
"""

from __future__ import annotations

ERRORS_PKG = "org.apache.kafka.common.errors."

# error code -> (Java exception class in ERRORS_PKG, Errors' default message)
ERRORS: dict[int, tuple[str, str]] = {
    -1: ("UnknownServerException", "The server experienced an unexpected error when processing the request."),
    1: (
        "OffsetOutOfRangeException",
        "The requested offset is not within the range of offsets maintained by the server.",
    ),
    3: ("UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    5: (
        "LeaderNotAvailableException",
        "There is no leader for this topic-partition as we are in the middle of a leadership election.",
    ),
    6: (
        "NotLeaderOrFollowerException",
        "For requests intended only for the leader, this error indicates that the "
        "broker is not the current leader. For requests intended for any replica, this error indicates that the "
        "broker is not a replica of the topic partition.",
    ),
    7: ("TimeoutException", "The request timed out."),
    17: ("InvalidTopicException", "The request attempted to perform an operation on an invalid topic."),
    29: ("TopicAuthorizationException", "Topic authorization failed."),
    31: ("ClusterAuthorizationException", "Cluster authorization failed."),
    35: ("UnsupportedVersionException", "The version of API is not supported."),
    36: ("TopicExistsException", "Topic with this name already exists."),
    37: ("InvalidPartitionsException", "Number of partitions is below 1."),
    38: (
        "InvalidReplicationFactorException",
        "Replication factor is below 1 or larger than the number of available brokers.",
    ),
    39: ("InvalidReplicaAssignmentException", "Replica assignment is invalid."),
    40: ("InvalidConfigurationException", "Configuration is invalid."),
    42: (
        "InvalidRequestException",
        "This most likely occurs because of a request being malformed by the client "
        "library or the message was sent to an incompatible broker. See the broker logs for more details.",
    ),
    44: ("PolicyViolationException", "Request parameters do not satisfy the configured policy."),
    73: ("TopicDeletionDisabledException", "Topic deletion is disabled."),
    85: ("NoReassignmentInProgressException", "No partition reassignment is in progress."),
    100: ("UnknownTopicIdException", "This server does not host this topic ID."),
    # the transaction and cluster APIs
    2: (
        "CorruptRecordException",
        "This message has failed its CRC checksum, exceeds the valid size, has a null key "
        "for a compacted topic, or is otherwise corrupt.",
    ),
    8: ("BrokerNotAvailableException", "The broker is not available."),
    9: (
        "ReplicaNotAvailableException",
        "The replica is not available for the requested topic-partition. "
        "Produce/Fetch requests and other requests intended only for the leader or follower return "
        "NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition.",
    ),
    13: ("NetworkException", "The server disconnected before a response was received."),
    14: ("CoordinatorLoadInProgressException", "The coordinator is loading and hence can't process requests."),
    15: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    102: ("BrokerIdNotRegisteredException", "The given broker ID was not registered."),
    16: ("NotCoordinatorException", "This is not the correct coordinator."),
    19: ("NotEnoughReplicasException", "Messages are rejected since there are fewer in-sync replicas than required."),
    45: ("OutOfOrderSequenceException", "The broker received an out of order sequence number."),
    47: ("InvalidProducerEpochException", "Producer attempted to produce with an old epoch."),
    48: ("InvalidTxnStateException", "The producer attempted a transactional operation in an invalid state."),
    49: (
        "InvalidPidMappingException",
        "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
    ),
    51: (
        "ConcurrentTransactionsException",
        "The producer attempted to update a transaction while another concurrent "
        "operation on the same transaction was ongoing.",
    ),
    52: (
        "TransactionCoordinatorFencedException",
        "Indicates that the transaction coordinator sending a "
        "WriteTxnMarker is no longer the current coordinator for a given producer.",
    ),
    53: ("TransactionalIdAuthorizationException", "Transactional Id authorization failed."),
    56: ("KafkaStorageException", "Disk error when trying to access log file on the disk."),
    59: (
        "UnknownProducerIdException",
        "This exception is raised by the broker if it could not locate the producer "
        "metadata associated with the producerId in question. This could happen if, for instance, the producer's "
        "records were deleted because their retention time had elapsed. Once the last records of the producerId "
        "are removed, the producer's metadata is removed from the broker, and future appends by the producer will "
        "return this exception.",
    ),
    74: ("FencedLeaderEpochException", "The leader epoch in the request is older than the epoch on the broker."),
    90: (
        "ProducerFencedException",
        "There is a newer producer with the same transactionalId which fences the current one.",
    ),
    105: ("TransactionalIdNotFoundException", "The transactionalId could not be found."),
    120: (
        "TransactionAbortableException",
        "The server encountered an error with the transaction. The client can "
        "abort the transaction to continue using this transactional ID.",
    ),
    # the group APIs
    12: ("OffsetMetadataTooLarge", "The metadata field of the offset request was too large."),
    22: ("IllegalGenerationException", "Specified group generation id is not valid."),
    24: ("InvalidGroupIdException", "The configured groupId is invalid."),
    25: ("UnknownMemberIdException", "The coordinator is not aware of this member."),
    27: ("RebalanceInProgressException", "The group is rebalancing, so a rejoin is needed."),
    28: ("InvalidCommitOffsetSizeException", "The committing offset data size is not valid."),
    30: ("GroupAuthorizationException", "Group authorization failed."),
    68: ("GroupNotEmptyException", "The group is not empty."),
    69: ("GroupIdNotFoundException", "The group id does not exist."),
    86: (
        "GroupSubscribedToTopicException",
        "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
    ),
    110: (
        "FencedMemberEpochException",
        ("The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."),
    ),
    113: (
        "StaleMemberEpochException",
        (
            "The member epoch is stale. The member must retry after receiving its "
            "updated member epoch via the ConsumerGroupHeartbeat API."
        ),
    ),
}

JOPT_TOOL_CODES = frozenset({-1, 1, 3, 5, 6, 7, 17, 29, 31, 35, 36, 37, 38, 39, 40, 42, 44, 73, 85, 100})
ADMIN_TOOL_CODES = frozenset(
    {*JOPT_TOOL_CODES, 2, 8, 9, 13, 14, 15, 16, 19, 45, 47, 48, 49, 51, 52, 53, 56, 59, 74, 90, 102, 105, 120}
)
GROUP_TOOL_CODES = frozenset({-1, 3, 7, 12, 14, 15, 16, 22, 24, 25, 27, 28, 29, 30, 35, 68, 69, 86, 100, 110, 113})


class JavaError(Exception):
    """A Java exception as Kafka's tool meets it: ``java_class`` (fully qualified), ``message``
    (``getMessage()``, may be None) and the Kafka error ``code`` it came from, if any; ``str()``
    is Java's ``toString()``."""

    def __init__(self, java_class: str, message: str | None, code: int | None = None):
        self.java_class = java_class
        self.message = message
        self.code = code
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return self.java_class if self.message is None else f"{self.java_class}: {self.message}"


class TerseException(Exception):
    """Kafka's TerseException: the tool prints its message as it is (no stack trace), exit 1."""


def kafka_error(code: int, message: str | None = None) -> JavaError:
    """``Errors.forCode(code).exception(message)`` (the default message when ``message`` is None)."""
    name, default = (
        ERRORS[code]
        if code in ADMIN_TOOL_CODES
        else ("UnknownServerException" if code > 0 else "KafkaException", f"Unexpected error code: {code}.")
    )
    return JavaError(ERRORS_PKG + name, default if message is None else message, code)


def group_error(code: int, message: str | None = None) -> JavaError:
    """The group tools' exception for ``code``: ``message``, unless it is missing or librdkafka's
    own wording (``Broker: ...``, ``Local: ...``), when Kafka's default message is used."""
    name, default = ERRORS[code] if code in GROUP_TOOL_CODES else (None, None)
    if not message or message.startswith(("Broker: ", "Local: ")):
        message = default or message
    if name is None:
        name = "KafkaException" if code < 0 else "UnknownServerException"
    return JavaError(ERRORS_PKG + name, message, code)


def java_exception_for(code: int, message: str | None, error_name: str = "") -> tuple[str, str]:
    """(Java exception simple name, message) for a Kafka error code and the broker's message."""
    name, default = ERRORS[code] if code in JOPT_TOOL_CODES else (None, None)
    msg = message or ""
    if msg.startswith("Broker: ") or msg.startswith("Local: ") or not msg:
        msg = default or msg
    if name is None:
        if code < 0 or not error_name:
            name = "KafkaException"
        else:
            name = "".join(p.capitalize() for p in error_name.lower().split("_") if p) + "Exception"
    return name, msg


def java_exception(err) -> tuple[str, str]:
    """(Java exception simple name, message) for a confluent_kafka KafkaError."""
    return java_exception_for(err.code(), err.str(), err.name())


class BrokerError(Exception):
    """An error code (and message) a broker answered with, for the wire-client paths."""

    def __init__(self, code: int, message: str | None, error_name: str = ""):
        self.code = int(code)
        self.java_name, self.message = java_exception_for(self.code, message, error_name)
        super().__init__(self.message)


def kafka_error_of(exc: BaseException):
    """The KafkaError inside a KafkaException (or None)."""
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "code") and hasattr(args[0], "str"):
        return args[0]
    return None


def error_message(exc: BaseException) -> str:
    err = kafka_error_of(exc)
    if err is not None:
        return java_exception(err)[1]
    if isinstance(exc, BrokerError):
        return exc.message
    return str(exc)


def error_line(exc: BaseException) -> str:
    """``org.apache.kafka.common.errors.X: message`` as a Java stack trace starts."""
    err = kafka_error_of(exc)
    if err is not None:
        name, msg = java_exception(err)
        return f"org.apache.kafka.common.errors.{name}: {msg}"
    if isinstance(exc, BrokerError):
        return f"org.apache.kafka.common.errors.{exc.java_name}: {exc.message}"
    if getattr(exc, "java_name", None):
        return f"org.apache.kafka.common.errors.{exc.java_name}: {exc}"
    return f"{type(exc).__name__}: {exc}"
