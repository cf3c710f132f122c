"""A partition whose log is offline (its files could not be opened) answers KAFKA_STORAGE_ERROR, not
UNKNOWN_TOPIC_OR_PARTITION, while the other partitions serve (listener in this process: no mount
needed)."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode
from support.kafka_wire import WireClient, produce_request, producer_batch

from seglogfs.kafka import KafkaListener, ListenerConfig, parse_listener
from seglogfs.log_manager import LogManager


def test_offline_partition_is_a_storage_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(data) as manager:
        for name in ("t-0", "t-1"):
            manager.create_log(name).append_values([b"x"])
    segment = data / "t-1" / "00000000000000000000.log"
    swap = segment.with_name(segment.name + ".swap")
    segment.rename(swap)  # a .swap whose segment is gone, and torn: it cannot be trusted or used
    with open(swap, "ab") as f:
        f.write(b"torn")
    with LogManager(data) as manager:
        assert list(manager.offline) == ["t-1"]
        listener = KafkaListener(manager, ListenerConfig(parse_listener("listeners", "PLAINTEXT://127.0.0.1:0")))
        listener.start()
        try:
            client = WireClient(listener.port)
            codes = {}
            for partition in (0, 1, 2):
                request = produce_request(9, "t", producer_batch([b"y"]), partition=partition)
                response = client.request(0, 9, request)
                codes[partition] = response.responses[0].partition_responses[0].error_code
            client.close()
        finally:
            listener.stop()
    assert codes == {
        0: ErrorCode.none, 1: ErrorCode.kafka_storage_error, 2: ErrorCode.unknown_topic_or_partition
    }
