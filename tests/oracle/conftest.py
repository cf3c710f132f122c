"""The oracle tests' real Kafka broker: one for the session (its start costs seconds). Tests use
topics of their own; a test that restarts it leaves it running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.kafka_broker import KafkaBroker, require_kafka, running_broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A started KRaft broker on free loopback ports; stopped (JVM ended) after the session."""
    require_kafka()
    with running_broker(tmp_path_factory.mktemp("broker")) as broker:
        yield broker
