"""The Kafka listener tests' shared fixture: one seglogd with a listener per module."""

from support.kafka_fixture import kafka_daemon

__all__ = ["kafka_daemon"]
