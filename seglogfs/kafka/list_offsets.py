"""ListOffsets: the earliest (-2) and latest (-1) offsets, and the first offset at or after a
timestamp (through the time index) with that record's timestamp."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import SeglogError, TimestampNotFoundError
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED

from .error_codes import error_code
from .messages import make, nested, response_class

if TYPE_CHECKING:
    from seglogfs.log import Log

    from .context import BrokerState

__all__ = ["list_offsets"]

LATEST, EARLIEST = -1, -2


def list_offsets(broker: BrokerState, request: Any, version: int) -> Any:
    """Answer every partition asked for."""
    cls = response_class(2, version)
    topic_cls, part_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            log_obj = broker.topics.log(topic.name, part.partition_index)
            if log_obj is None:
                values = {"error_code": broker.topics.missing(topic.name, part.partition_index)}
            else:
                values = _answer(log_obj, part.timestamp, committed)
            parts.append(make(part_cls, partition_index=part.partition_index, leader_epoch=0, **values))
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=timedelta(0), topics=tuple(topics))


def _answer(log_obj: Log, timestamp: int, committed: bool) -> dict:
    if timestamp == LATEST:
        offset = log_obj.last_stable_offset if committed else log_obj.end_offset
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": offset}
    if timestamp == EARLIEST:
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": log_obj.start_offset}
    if timestamp < 0:
        return {"error_code": ErrorCode.unsupported_version}
    try:
        offset = log_obj.offset_for_timestamp(
            timestamp, isolation=READ_COMMITTED if committed else READ_UNCOMMITTED
        )
        found = log_obj.read(offset).timestamp
    except TimestampNotFoundError:
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": -1}
    except (SeglogError, OSError) as exc:
        return {"error_code": error_code(exc)}
    return {"error_code": ErrorCode.none, "timestamp": found, "offset": offset}
