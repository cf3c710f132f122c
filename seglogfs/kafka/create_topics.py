"""CreateTopics: ``<topic>-0`` .. ``<topic>-<n-1>`` logs with the given topic configs."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.config import LogConfig
from seglogfs.errors import ConfigError, InvalidLogNameError, SeglogError
from seglogfs.log_files import validate_topic

from .error_codes import error_code
from .messages import make, nested, response_class

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["MAX_RECORDS_PER_REQUEST", "create_topics"]

#: Kafka's controller writes at most this many records (one a topic, one a partition) for one request
#: and refuses the topics past it with POLICY_VIOLATION; here it bounds the logs (directories) one
#: request makes and keeps ``<topic>-<partition>`` within a file name's 255 bytes
MAX_RECORDS_PER_REQUEST = 10_000


async def create_topics(broker: BrokerState, request: Any, version: int) -> Any:
    """Create each topic asked for, or say why not (``validate_only``: only check). The logs are made
    in a worker thread (a few fsyncs each), so the other connections go on meanwhile."""
    cls = response_class(19, version)
    result_cls = nested(cls, "CreatableTopicResult")
    results = []
    budget = [MAX_RECORDS_PER_REQUEST]
    validate_only = getattr(request, "validate_only", False)
    for topic in request.topics:
        async with broker.creating:  # the existence check and the creation as one step
            error, message, partitions = await _create(broker, topic, validate_only, budget)
        results.append(make(
            result_cls, name=topic.name, topic_id=None, error_code=error, error_message=message,
            topic_config_error_code=0, num_partitions=partitions if error == ErrorCode.none else -1,
            replication_factor=1 if error == ErrorCode.none else -1, configs=None,
        ))
    return make(cls, throttle_time=timedelta(0), topics=tuple(results))


async def _create(
    broker: BrokerState, topic: Any, validate_only: bool, budget: list[int]
) -> tuple[ErrorCode, str | None, int]:
    name = topic.name
    try:
        validate_topic(name)
    except InvalidLogNameError as exc:
        return ErrorCode.invalid_topic_exception, str(exc), -1
    if broker.read_only:
        return ErrorCode.topic_authorization_failed, "the data dir is mounted read-only", -1
    if broker.topics.partitions(name):
        return ErrorCode.topic_already_exists, f"Topic '{name}' already exists.", -1
    if topic.assignments:
        return ErrorCode.invalid_request, "replica assignments are not supported: one node", -1
    partitions = broker.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    if partitions < 1:
        return ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.", -1
    if topic.replication_factor not in (-1, 1):
        return (ErrorCode.invalid_replication_factor,
                f"Replication factor: {topic.replication_factor} larger than available brokers: 1.", -1)
    if partitions + 1 > budget[0]:
        return ErrorCode.policy_violation, "Excessively large number of partitions per request.", -1
    budget[0] -= partitions + 1
    try:
        overrides = {entry.name: entry.value for entry in topic.configs if entry.value is not None}
        LogConfig.from_mapping(overrides, broker.topics.manager.default_config, broker_names=False)
    except ConfigError as exc:
        return ErrorCode.invalid_config, str(exc), -1
    if validate_only:
        return ErrorCode.none, None, partitions
    try:
        await asyncio.to_thread(broker.topics.create, name, partitions, overrides)
    except FileExistsError as exc:
        return ErrorCode.topic_already_exists, str(exc), -1
    except (SeglogError, OSError) as exc:
        return error_code(exc), str(exc), -1
    return ErrorCode.none, None, partitions
