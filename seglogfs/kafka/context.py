"""The state the API handlers share (the :class:`~seglogfs.kafka.broker.Broker` is one)."""

from __future__ import annotations

import asyncio
import logging

from seglogfs.log_manager import LogManager

from .append_waiters import AppendWaiters
from .group_coordinator import GroupCoordinator
from .listener_config import ListenerConfig
from .offsets_topic import OffsetStore
from .producer_ids import ProducerIds
from .topics import Topics
from .zero_copy_descriptors import ZeroCopyDescriptors

__all__ = ["BrokerState"]

log = logging.getLogger("seglogfs.kafka")


class BrokerState:
    """What every handler works with: the engine, topics, long-poll waiters, producer ids, groups,
    committed offsets, this node."""

    def __init__(self, manager: LogManager, config: ListenerConfig, waiters: AppendWaiters) -> None:
        self.manager = manager
        self.config = config
        self.read_only = manager.read_only
        self.node_id = config.node_id
        self.num_partitions = config.num_partitions
        self.topics = Topics(
            manager, num_partitions=config.num_partitions, auto_create=config.auto_create_topics
        )
        self.waiters = waiters
        self.producer_ids = ProducerIds()
        self.groups = GroupCoordinator(
            has_offsets=lambda group_id: bool(self.offsets.committed(group_id)),
            initial_rebalance_delay_s=config.initial_rebalance_delay_ms / 1000,
        )
        self.offsets = OffsetStore(manager)
        self.advertised: tuple[str, int] = (config.listener.host, config.listener.port)
        #: the descriptors Fetch responses hold until sent (sendfile), listener-wide
        self.zero_copy = ZeroCopyDescriptors()
        #: held while topics are made (in a worker thread), so that two requests never make one twice
        self.creating = asyncio.Lock()

    def checkpoint(self) -> None:
        """Write the log-start checkpoints now (after DeleteRecords), not at the next maintenance."""
        try:
            self.manager.checkpoint()
        except OSError as exc:
            log.warning("checkpoint after DeleteRecords: %s", exc)
