"""The oracle tests' real Kafka broker: one for the session (its start costs seconds). Tests use
topics of their own; a test that restarts it leaves it running.

``adopted_logs``: the logs of tests/support/oracle_logs.py, written by seglogfs, loaded by that
broker. A KRaft broker keeps a partition's log only when its metadata log names the topic with the
topic id of the log's ``partition.metadata`` and the broker among the replicas (any other log dir is
a stray, deleted at start-up), and a data dir only with the cluster's ``meta.properties``. So the
broker creates the topics (with the configs seglogfs wrote the logs under) and stops; seglogfs'
segment files (.log, .index, .timeindex, .txnindex, .snapshot) replace the empty logs' files, the
broker's ``partition.metadata``, ``leader-epoch-checkpoint`` and checkpoints staying; and the broker
starts again, loading them after a clean shutdown: it trusts their indexes and producer snapshots
as it trusts its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.kafka_broker import KafkaBroker, require_kafka, running_broker
from support.oracle_logs import AdoptedLogs, adopt_oracle_logs

# before a test module imports it: its asserts get pytest's explanations
pytest.register_assert_rewrite("support.dump_compare")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A started KRaft broker on free loopback ports; stopped (JVM ended) after the session."""
    require_kafka()
    with running_broker(tmp_path_factory.mktemp("broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def adopted_logs(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> AdoptedLogs:
    """The logs of tests/support/oracle_logs.py, written by seglogfs, loaded by the broker."""
    return adopt_oracle_logs(kafka_broker, tmp_path_factory.mktemp("seglogfs"))


#: what the client-side oracle tests point their Kafka clients at: the real broker; seglogd's Kafka
#: listener is meant to join as a second endpoint, so each such test runs against both
KAFKA_ENDPOINTS = ("broker",)


@pytest.fixture(params=KAFKA_ENDPOINTS)
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """The bootstrap address of one Kafka endpoint."""
    if request.param == "broker":
        return request.getfixturevalue("kafka_broker").bootstrap
    raise ValueError(f"unknown Kafka endpoint {request.param}")
