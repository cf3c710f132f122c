"""ListOffsets: the earliest (-2, and -4: every segment is local) and latest (-1) offsets, the record
with the largest timestamp (-3), nothing tiered (-5), and the first offset at or after a timestamp
(through the time index) with that record's timestamp."""

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

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
#: the first ListOffsets version that may ask each special timestamp (Kafka's rule)
_SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}


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
                values = _answer(log_obj, part.timestamp, committed, version)
            parts.append(make(part_cls, partition_index=part.partition_index, leader_epoch=0, **values))
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=timedelta(0), topics=tuple(topics))


def _answer(log_obj: Log, timestamp: int, committed: bool, version: int) -> dict:
    none = {"error_code": ErrorCode.none, "timestamp": -1, "offset": -1}
    if timestamp == LATEST:
        offset = log_obj.last_stable_offset if committed else log_obj.end_offset
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": offset}
    if timestamp in (EARLIEST, EARLIEST_LOCAL) and version >= _SINCE.get(timestamp, 0):
        # every segment is local: the local log start is the log start
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": log_obj.start_offset}
    if timestamp == LATEST_TIERED and version >= _SINCE[timestamp]:
        return none  # no tiered storage: nothing was uploaded (Kafka's answer without it)
    if timestamp < 0 and (timestamp != MAX_TIMESTAMP or version < _SINCE[timestamp]):
        return {"error_code": ErrorCode.unsupported_version}
    try:
        if timestamp == MAX_TIMESTAMP:
            found = log_obj.max_timestamp_offset()
            if found is None:
                return none
            stamp, offset = found
        else:
            offset = log_obj.offset_for_timestamp(
                timestamp, isolation=READ_COMMITTED if committed else READ_UNCOMMITTED
            )
            stamp = log_obj.read(offset).timestamp
    except TimestampNotFoundError:
        return none
    except (SeglogError, OSError) as exc:
        return {"error_code": error_code(exc)}
    if committed and offset >= log_obj.last_stable_offset:
        return none  # not yet fetchable under read_committed, as Kafka answers
    return {"error_code": ErrorCode.none, "timestamp": stamp, "offset": offset}
