"""Engine exceptions -> Kafka's error codes, in one table."""

from __future__ import annotations

import errno

from kio.schema.errors import ErrorCode

from seglogfs.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogOfflineError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ReadOnlyLogError,
    RecordTooLargeError,
)

__all__ = ["INTERNAL_TOPICS", "ErrorCode", "error_code"]

#: Kafka's internal topics: written by the broker only, never by a client's Produce or DeleteRecords
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

_BY_TYPE: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (CorruptRecordError, ErrorCode.corrupt_message),
    (RecordTooLargeError, ErrorCode.message_too_large),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (ProducerFencedError, ErrorCode.invalid_producer_epoch),
    (InvalidRecordError, ErrorCode.invalid_record),
    (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    # A read-only mount: no Kafka code says "read-only"; writes are refused as a broker refuses a
    # principal without write access, which clients report at once instead of retrying.
    (ReadOnlyLogError, ErrorCode.topic_authorization_failed),
    (LogOfflineError, ErrorCode.kafka_storage_error),
)


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an engine exception raised while serving a partition."""
    for kind, code in _BY_TYPE:
        if isinstance(exc, kind):
            return code
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS):
        return ErrorCode.kafka_storage_error
    return ErrorCode.unknown_server_error
