"""The oracle's own support: what it hands to Kafka's command-line tools must parse."""

from __future__ import annotations

import base64

from support.kafka_broker import random_uuid


def test_cluster_ids_are_kafka_uuids_that_no_command_line_reads_as_an_option() -> None:
    ids = [random_uuid() for _ in range(10_000)]  # the old draw started with "-" once in 64
    assert not any(text.startswith("-") for text in ids)
    assert all(len(base64.urlsafe_b64decode(text + "==")) == 16 for text in ids)
    assert len(set(ids)) == len(ids)
