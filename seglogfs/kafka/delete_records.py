"""DeleteRecords: move each partition's log start offset (segments wholly below it are deleted)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import SeglogError

from .error_codes import INTERNAL_TOPICS, error_code
from .messages import make, nested, response_class

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["delete_records"]


def delete_records(broker: BrokerState, request: Any, version: int) -> Any:
    """Delete the records below each offset given (-1: the high watermark)."""
    cls = response_class(21, version)
    topic_cls, part_cls = nested(cls, "DeleteRecordsTopicResult"), nested(cls, "DeleteRecordsPartitionResult")
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            log_obj = broker.topics.log(topic.name, part.partition_index)
            low, error = -1, ErrorCode.none
            if topic.name in INTERNAL_TOPICS:
                error = ErrorCode.invalid_topic_exception
            elif log_obj is None:
                error = broker.topics.missing(topic.name, part.partition_index)
            elif broker.read_only:
                error = ErrorCode.topic_authorization_failed
            elif not log_obj.config.deletes:  # Kafka: a compacted topic keeps its records
                error = ErrorCode.policy_violation
            else:
                try:
                    low = log_obj.delete_records_before(part.offset)
                except (SeglogError, OSError) as exc:
                    error = error_code(exc)
            parts.append(
                make(part_cls, partition_index=part.partition_index, low_watermark=low, error_code=error)
            )
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
    broker.checkpoint()
    return make(cls, throttle_time=timedelta(0), topics=tuple(topics))
