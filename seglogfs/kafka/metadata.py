"""Metadata: one node, seglogd, the leader and only replica of every partition."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import InvalidLogNameError
from seglogfs.log_files import validate_topic

from .messages import make, nested, response_class
from .offsets_topic import OFFSETS_TOPIC

if TYPE_CHECKING:
    from seglogfs.log import Log

    from .context import BrokerState

__all__ = ["metadata"]

CLUSTER_ID = "seglogfs-seglogd-000"  # 20 characters, as Kafka's base64 cluster ids
_NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's ZERO_UUID: the topic has no id the client can use


async def metadata(broker: BrokerState, request: Any, version: int) -> Any:
    """The brokers (this one) and the topics asked for (all when ``topics`` is null). Topics are
    auto-created in a worker thread: a log costs a few fsyncs, and the other connections go on."""
    cls = response_class(3, version)
    node = broker.node_id
    host, port = broker.advertised
    brokers = (make(nested(cls, "MetadataResponseBroker"), node_id=node, host=host, port=port, rack=None),)
    topic_cls, partition_cls = nested(cls, "MetadataResponseTopic"), nested(cls, "MetadataResponsePartition")

    def partitions(logs: dict[int, Log]) -> tuple:
        return tuple(
            make(
                partition_cls, error_code=ErrorCode.none, partition_index=p, leader_id=node, leader_epoch=0,
                replica_nodes=(node,), isr_nodes=(node,), offline_replicas=(),
            )
            for p in sorted(logs)
        )

    def topic_entry(name: str, error: ErrorCode, logs: dict[int, Log]) -> Any:
        return make(
            topic_cls, error_code=error, name=name, topic_id=_NO_TOPIC_ID, is_internal=name == OFFSETS_TOPIC,
            partitions=partitions(logs), topic_authorized_operations=-2147483648,
        )

    topics = []
    if request.topics is None or (version == 0 and not request.topics):  # v0: empty meant all
        for name, logs in sorted(broker.topics.all().items()):
            topics.append(topic_entry(name, ErrorCode.none, logs))
    else:
        create = getattr(request, "allow_auto_topic_creation", True)
        for wanted in request.topics:
            name = wanted.name
            if name is None:  # asked by topic id: the listener has no topic ids
                topics.append(make(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None,
                                   topic_id=wanted.topic_id, is_internal=False, partitions=()))
                continue
            try:
                validate_topic(name)
            except InvalidLogNameError:
                topics.append(topic_entry(name, ErrorCode.invalid_topic_exception, {}))
                continue
            logs = broker.topics.partitions(name)
            if not logs and create and broker.topics.auto_create:
                async with broker.creating:
                    logs = await asyncio.to_thread(broker.topics.find_or_create, name)
            error = ErrorCode.none if logs else ErrorCode.unknown_topic_or_partition
            topics.append(topic_entry(name, error, logs))
    return make(
        cls, throttle_time=timedelta(0), brokers=brokers, cluster_id=CLUSTER_ID, controller_id=node,
        topics=tuple(topics), cluster_authorized_operations=-2147483648,
    )
