"""Kafka topics over a data dir's logs: topic ``t`` is the logs ``t-0`` .. ``t-<n-1>`` (a log named
``t`` without a partition suffix is partition 0 of ``t``), created on demand as a broker does."""

from __future__ import annotations

import errno
import threading
from collections import defaultdict
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from seglogfs.errors import InvalidLogNameError
from seglogfs.log import Log
from seglogfs.log_files import validate_topic
from seglogfs.log_manager import LogManager

__all__ = ["Topics"]


class Topics:
    """The topics of one :class:`LogManager`."""

    def __init__(self, manager: LogManager, *, num_partitions: int, auto_create: bool) -> None:
        self.manager = manager
        self.num_partitions = num_partitions
        self.auto_create = auto_create and not manager.read_only
        self._stopping = False
        self._making = threading.Lock()  # held while logs are made (in a worker thread)

    def log(self, topic: str, partition: int) -> Log | None:
        """The log of ``topic``'s ``partition``, or None."""
        try:
            return self.manager.get(f"{topic}-{partition}")
        except KeyError:
            pass
        if partition == 0:
            try:
                log_obj = self.manager.get(topic)
            except KeyError:
                return None
            # a log "t-1" is partition 1 of "t", never partition 0 of a topic "t-1"
            return log_obj if log_obj.topic == topic else None
        return None

    def missing(self, topic: str, partition: int) -> ErrorCode:
        """Why ``topic``'s ``partition`` has no log: KAFKA_STORAGE_ERROR when it is offline (its files
        could not be opened or vanished), else UNKNOWN_TOPIC_OR_PARTITION."""
        offline = self.manager.offline
        if f"{topic}-{partition}" in offline or (partition == 0 and topic in offline):
            return ErrorCode.kafka_storage_error
        return ErrorCode.unknown_topic_or_partition

    def all(self) -> dict[str, dict[int, Log]]:
        """Every topic and its partitions' logs."""
        topics: dict[str, dict[int, Log]] = defaultdict(dict)
        for log_obj in self.manager.logs.values():
            topics[log_obj.topic][log_obj.partition] = log_obj
        return dict(topics)

    def partitions(self, topic: str) -> dict[int, Log]:
        """The partitions of ``topic`` (empty when there is no such topic)."""
        found = {}
        for partition in range(1 << 31):
            log_obj = self.log(topic, partition)
            if log_obj is None:
                break
            found[partition] = log_obj
        if found:
            return found
        return {p: lg for p, lg in self.all().get(topic, {}).items()}  # partitions with gaps

    def create(
        self, topic: str, partitions: int, topic_config: Mapping[str, str] | None = None
    ) -> dict[int, Log]:
        """Create ``topic`` with ``partitions`` logs, each keeping ``topic_config`` (Kafka's topic-config
        names and values) for its life (InvalidLogNameError for a bad name; FileExistsError when one of
        its logs exists)."""
        validate_topic(topic)
        names = [f"{topic}-{p}" for p in range(partitions)]
        for name in names:
            if name in self.manager.logs:
                raise FileExistsError(f"topic {topic} exists")
        made = {}
        with self._making:
            for p, name in enumerate(names):
                if self._stopping:  # the daemon is closing the logs: make no more
                    raise OSError(errno.ESHUTDOWN, f"topic {topic}: the Kafka listener is stopping")
                made[p] = self.manager.create_log(name, topic_config=topic_config)
        return made

    def stop(self, timeout: float) -> None:
        """Make no more logs, and wait (up to ``timeout`` seconds) for the one being made."""
        self._stopping = True
        if self._making.acquire(timeout=timeout):
            self._making.release()

    def find_or_create(self, topic: str) -> dict[int, Log]:
        """``topic``'s partitions, creating it with ``num.partitions`` when allowed."""
        found = self.partitions(topic)
        if found or not self.auto_create:
            return found
        try:
            return self.create(topic, self.num_partitions)
        except (InvalidLogNameError, FileExistsError):
            return self.partitions(topic)
