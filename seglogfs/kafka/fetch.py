"""Fetch: segment byte ranges per partition; a long poll (``max.wait.ms`` / ``min.bytes``) woken by
appends from any path. No fetch sessions: every response is a full one (session id 0)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import SeglogError

from .error_codes import error_code
from .messages import make, nested, response_class
from .partition_read import PartitionRead, read_partition

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["fetch"]

log = logging.getLogger("seglogfs.kafka")
READ_COMMITTED = 1


async def fetch(broker: BrokerState, request: Any, version: int) -> Any:
    """Read every partition asked for; wait for appends while fewer than ``min_bytes`` were found."""
    deadline = time.monotonic() + max(request.max_wait.total_seconds(), 0)
    names = [
        log_obj.name
        for topic in request.topics
        for part in topic.partitions
        if (log_obj := broker.topics.log(topic.topic, part.partition)) is not None
    ]
    while True:
        with broker.waiters.watching(names) as appended:
            response, found = _read(broker, request, version)
            remaining = deadline - time.monotonic()
            if found >= request.min_bytes or remaining <= 0 or not names:
                return response
            try:
                await asyncio.wait_for(appended.wait(), remaining)
            except TimeoutError:
                return _read(broker, request, version)[0]


def _read(broker: BrokerState, request: Any, version: int) -> tuple[Any, int]:
    cls = response_class(1, version)
    topic_cls, data_cls = nested(cls, "FetchableTopicResponse"), nested(cls, "PartitionData")
    aborted_cls = nested(cls, "AbortedTransaction")
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    # the broker's fetch.max.bytes bounds what one response holds whatever the client asks (Kafka)
    budget = min(request.max_bytes, broker.config.fetch_max_bytes) if request.max_bytes > 0 else 0
    found = 0
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            limit = max(min(part.partition_max_bytes, budget), 0)
            values = _partition(broker, topic.topic, part, limit, committed, whole_first=found == 0)
            size = len(values.get("records") or b"")
            found += size
            budget -= size
            if values.get("aborted_transactions"):
                values["aborted_transactions"] = tuple(
                    aborted_cls(producer_id=pid, first_offset=first)
                    for pid, first in values["aborted_transactions"]
                )
            partitions.append(make(data_cls, partition_index=part.partition, **values))
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
    response = make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0,
                    responses=tuple(topics))
    return response, found


def _partition(
    broker: BrokerState, topic: str, part: Any, max_bytes: int, committed: bool, *, whole_first: bool
) -> dict:
    log_obj = broker.topics.log(topic, part.partition)
    if log_obj is None:
        return {"error_code": broker.topics.missing(topic, part.partition), "high_watermark": -1,
                "records": None, "aborted_transactions": None}
    try:
        read: PartitionRead = read_partition(
            log_obj, part.fetch_offset, max_bytes, read_committed=committed, whole_first=whole_first
        )
    except (SeglogError, OSError) as exc:
        code = error_code(exc)
        if code != ErrorCode.offset_out_of_range:
            log.error("fetch from %s at %d: %s", log_obj.name, part.fetch_offset, exc)
        return {"error_code": code, "high_watermark": log_obj.end_offset,
                "last_stable_offset": log_obj.end_offset, "log_start_offset": log_obj.start_offset,
                "records": None, "aborted_transactions": None}
    return {"error_code": ErrorCode.none, "high_watermark": read.high_watermark,
            "last_stable_offset": read.last_stable_offset, "log_start_offset": read.log_start_offset,
            "records": read.records, "aborted_transactions": read.aborted}

