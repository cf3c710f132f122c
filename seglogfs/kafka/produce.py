"""Produce: each partition's record batch appended as sent (:meth:`Log.append_as_leader`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import SeglogError

from .error_codes import INTERNAL_TOPICS, error_code
from .messages import make, nested, response_class

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["produce"]

log = logging.getLogger("seglogfs.kafka")


def produce(broker: BrokerState, request: Any, version: int) -> Any | None:
    """Append every partition's batch; None for ``acks=0`` (Kafka sends no response then)."""
    cls = response_class(0, version)
    topic_cls, partition_cls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    acks_valid = request.acks in (-1, 0, 1)
    # a partition named twice is appended once, its last batch, as Kafka keys a request by partition
    batches: dict[str, dict[int, bytes | None]] = {}
    for topic in request.topic_data:
        for data in topic.partition_data:
            batches.setdefault(topic.name, {})[data.index] = data.records
    responses = []
    for name, partitions in batches.items():
        results = []
        for index, records in partitions.items():
            values = _append(broker, name, index, records, acks_valid)
            results.append(make(partition_cls, index=index, record_errors=(), **values))
        responses.append(make(topic_cls, name=name, partition_responses=tuple(results)))
    if request.acks == 0:
        return None
    return make(cls, responses=tuple(responses), throttle_time=timedelta(0))


def _append(broker: BrokerState, topic: str, partition: int, records: bytes | None, acks_valid: bool) -> dict:
    failed = {"base_offset": -1, "log_append_time": None, "log_start_offset": -1}
    if not acks_valid:
        return {**failed, "error_code": ErrorCode.invalid_required_acks}
    if topic in INTERNAL_TOPICS:
        return {**failed, "error_code": ErrorCode.invalid_topic_exception,
                "error_message": f"Cannot append to internal topic {topic}"}
    log_obj = broker.topics.log(topic, partition)
    if log_obj is None:
        return {**failed, "error_code": broker.topics.missing(topic, partition)}
    if broker.read_only:
        return {**failed, "error_code": ErrorCode.topic_authorization_failed,
                "error_message": "the data dir is mounted read-only"}
    if not records:
        return {**failed, "error_code": ErrorCode.invalid_record, "error_message": "no records"}
    try:
        info = log_obj.append_as_leader(bytes(records))
    except (SeglogError, OSError) as exc:
        code = error_code(exc)
        if code == ErrorCode.unknown_server_error or code == ErrorCode.kafka_storage_error:
            log.error("produce to %s: %s", log_obj.name, exc)
        return {**failed, "error_code": code, "error_message": str(exc)[:500],
                "log_start_offset": log_obj.start_offset}
    append_time = None
    if log_obj.config.log_append_time:
        append_time = datetime.fromtimestamp(info.max_timestamp / 1000, UTC)
    return {"error_code": ErrorCode.none, "base_offset": info.first_offset, "log_append_time": append_time,
            "log_start_offset": log_obj.start_offset}
