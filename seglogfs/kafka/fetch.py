"""Fetch: segment byte ranges per partition, the large ones sent from the files (``sendfile``); a long
poll (``max.wait.ms`` / ``min.bytes``) woken by appends from any path. No fetch sessions: every
response is a full one (session id 0)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import SeglogError
from seglogfs.fetch_data_info import FetchDataInfo, read_fetch_data

from .error_codes import error_code
from .messages import make, nested, response_class
from .spliced_frame import SplicedBody

if TYPE_CHECKING:
    from seglogfs.log import Log

    from .context import BrokerState

__all__ = ["fetch"]

log = logging.getLogger("seglogfs.kafka")
READ_COMMITTED = 1
#: a partition's records of at least this size go from the file to the socket (sendfile); smaller
#: ones cost less copied than a descriptor and a system call more
ZERO_COPY_MIN_BYTES = 32 << 10
#: descriptors one response may hold open until it is sent (the rest of its partitions are copied)
ZERO_COPY_MAX_REGIONS = 32
#: A long poll woken while records stream in (at least STREAM_RECORDS of them, at
#: STREAM_RECORDS_PER_S or more since it parked) waits COALESCE_S more before it answers: the next
#: appends land in the same response. Answered at each append instead, a consumer following
#: `cat > append` costs a round trip per write (128 KiB), whose interpreter time the mount's writes
#: wait for (bench/kafka.py). Sparse appends (the latency row: a record a wake) answer at once.
STREAM_RECORDS = 256
STREAM_RECORDS_PER_S = 500_000
COALESCE_S = 0.002


async def fetch(broker: BrokerState, request: Any, version: int) -> SplicedBody:
    """Read every partition asked for; wait for appends while fewer than ``min_bytes`` were found."""
    deadline = time.monotonic() + max(request.max_wait.total_seconds(), 0)
    logs = [
        (log_obj, part.fetch_offset)
        for topic in request.topics
        for part in topic.partitions
        if (log_obj := broker.topics.log(topic.topic, part.partition)) is not None
    ]
    names = [log_obj.name for log_obj, _ in logs]
    every_log_known = len(logs) == sum(len(topic.partitions) for topic in request.topics)
    while True:
        with broker.waiters.watching(names) as appended:
            parked = time.monotonic()
            remaining = deadline - parked
            # A consumer at the end of every log it asks for (the usual long poll) parks at once: no
            # response is built only to be dropped.
            at_ends = (
                remaining > 0 and request.min_bytes > 0 and every_log_known
                and all(offset == log_obj.end_offset for log_obj, offset in logs)
            )
            if not at_ends:
                found = _read(broker, request, version, body := SplicedBody(None, broker.zero_copy))
                if found >= request.min_bytes or remaining <= 0 or not names:
                    return body
                body.close()
            try:
                async with asyncio.timeout(remaining):  # in this task: no task per wait, as wait_for makes
                    await appended.wait()
                    if _streaming(logs, parked):
                        await asyncio.sleep(COALESCE_S)
            except TimeoutError:
                _read(broker, request, version, body := SplicedBody(None, broker.zero_copy))
                return body


def _streaming(logs: list[tuple[Log, int]], parked: float) -> bool:
    """Whether records arrived in the logs of a parked poll as a stream does (see COALESCE_S)."""
    arrived = sum(max(log_obj.end_offset - offset, 0) for log_obj, offset in logs)
    return arrived >= STREAM_RECORDS and arrived >= STREAM_RECORDS_PER_S * (time.monotonic() - parked)


def _read(broker: BrokerState, request: Any, version: int, body: SplicedBody) -> int:
    """Fill ``body`` with the response; the bytes found. Closes what it opened when it fails."""
    try:
        return _read_into(broker, request, version, body)
    except BaseException:
        body.close()
        raise


def _read_into(broker: BrokerState, request: Any, version: int, body: SplicedBody) -> int:
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
            values = _partition(broker, topic.topic, part, limit, committed, body, whole_first=found == 0)
            size = values.pop("size")
            found += size
            budget -= size
            if values.get("aborted_transactions"):
                values["aborted_transactions"] = tuple(
                    aborted_cls(producer_id=pid, first_offset=first)
                    for pid, first in values["aborted_transactions"]
                )
            partitions.append(make(data_cls, partition_index=part.partition, **values))
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
    body.entity = make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0,
                       responses=tuple(topics))
    return found


def _partition(
    broker: BrokerState, topic: str, part: Any, max_bytes: int, committed: bool, body: SplicedBody,
    *, whole_first: bool,
) -> dict:
    log_obj = broker.topics.log(topic, part.partition)
    if log_obj is None:
        return {"error_code": broker.topics.missing(topic, part.partition), "high_watermark": -1,
                "records": None, "aborted_transactions": None, "size": 0}
    try:
        read: FetchDataInfo = read_fetch_data(
            log_obj, part.fetch_offset, max_bytes, read_committed=committed, min_one_batch=whole_first
        )
        size = read.records.size
        records = None
        if size >= ZERO_COPY_MIN_BYTES and len(body.regions) < ZERO_COPY_MAX_REGIONS:
            records = body.add(read.records)  # None: the listener's share of descriptors is taken
        if records is None:
            records = read.records.read()
    except (SeglogError, OSError) as exc:
        code = error_code(exc)
        if code != ErrorCode.offset_out_of_range:
            log.error("fetch from %s at %d: %s", log_obj.name, part.fetch_offset, exc)
        return {"error_code": code, "high_watermark": log_obj.end_offset,
                "last_stable_offset": log_obj.end_offset, "log_start_offset": log_obj.start_offset,
                "records": None, "aborted_transactions": None, "size": 0}
    return {"error_code": ErrorCode.none, "high_watermark": read.high_watermark,
            "last_stable_offset": read.last_stable_offset, "log_start_offset": read.log_start_offset,
            "records": records, "aborted_transactions": read.aborted, "size": size}
