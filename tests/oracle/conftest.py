"""The oracle tests' real Kafka broker: one per module (its start costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.kafka_broker import KafkaBroker, require_kafka, running_broker


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A started KRaft broker on free loopback ports; stopped (JVM ended) after the module."""
    require_kafka()
    with running_broker(tmp_path_factory.mktemp("broker")) as broker:
        yield broker
