"""The Kafka wire-protocol listener: an adapter beside ``fs/`` and ``spark/`` over the same engine
objects. Frames -> engine calls; record batches stay opaque bytes (appended as sent, served as
segment byte ranges). See docs/kafka-listener.md."""

from .listener_config import Endpoint, ListenerConfig, parse_listener
from .server import KafkaListener

__all__ = ["Endpoint", "KafkaListener", "ListenerConfig", "parse_listener"]
