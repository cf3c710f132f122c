"""DescribeConfigs for topics: the Kafka topic configs of the topic's first partition."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.config import LogConfig
from seglogfs.errors import InvalidLogNameError
from seglogfs.log_files import validate_topic

from .messages import make, nested, response_class

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["describe_configs"]

TOPIC = 2
# Kafka's ConfigSource values
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
_KAFKA_DEFAULTS = LogConfig().to_dict()


def describe_configs(broker: BrokerState, request: Any, version: int) -> Any:
    """Each topic resource's configs (only the keys asked for, when given); other resources: an error."""
    cls = response_class(32, version)
    result_cls, entry_cls = nested(cls, "DescribeConfigsResult"), nested(cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        configs: tuple = ()
        error, message = ErrorCode.none, None
        if resource.resource_type != TOPIC:
            error, message = ErrorCode.invalid_request, "only topic configs can be described"
        elif not _valid_topic(resource.resource_name):
            error = ErrorCode.invalid_topic_exception
            message = f"invalid topic name {resource.resource_name!r}"
        else:
            logs = broker.topics.partitions(resource.resource_name)
            if not logs:
                error, message = ErrorCode.unknown_topic_or_partition, None
            else:
                first = logs[min(logs)]
                wanted = set(resource.configuration_keys) if resource.configuration_keys else None
                own = first.name in broker.topics.manager.log_configs
                defaults = broker.topics.manager.default_config.to_dict()
                entries = []
                for key, value in first.config.to_dict().items():
                    if key.startswith("fs.") or (wanted is not None and key not in wanted):
                        continue
                    if own and value != defaults.get(key):
                        source = DYNAMIC_TOPIC_CONFIG
                    elif value != _KAFKA_DEFAULTS.get(key):
                        source = STATIC_BROKER_CONFIG
                    else:
                        source = DEFAULT_CONFIG
                    entries.append(make(
                        entry_cls, name=key, value=None if value is None else str(value), read_only=False,
                        is_default=source == DEFAULT_CONFIG, config_source=source, is_sensitive=False,
                        synonyms=(), config_type=0, documentation=None,
                    ))
                configs = tuple(entries)
        results.append(make(
            result_cls, error_code=error, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name, configs=configs,
        ))
    return make(cls, throttle_time=timedelta(0), results=tuple(results))


def _valid_topic(name: str) -> bool:
    try:
        validate_topic(name)
    except InvalidLogNameError:
        return False
    return True
