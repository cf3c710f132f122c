"""Hand-made Kafka requests over a plain socket, for what real clients never send (bad CRCs, stale
sequences, unknown APIs, broken frames). Schemas from kio, as the listener uses."""

from __future__ import annotations

import socket
import struct
import time
from datetime import timedelta
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from seglogfs.kafka.messages import encode, make, nested
from seglogfs.records import ProducerRecord, encode_batch

__all__ = ["WireClient", "produce_request", "producer_batch"]


def producer_batch(
    values: list[bytes], *, producer_id: int = -1, epoch: int = -1, sequence: int = -1
) -> bytes:
    """A v2 batch as a client sends it (base offset 0), optionally with producer id and sequence."""
    batch = bytearray(encode_batch([ProducerRecord(v) for v in values], 0, now_ms=int(time.time() * 1000)))
    if producer_id >= 0:
        from seglogfs.records.batch_header import stamp_v2_crc

        struct.pack_into(">qhi", batch, 43, producer_id, epoch, sequence)
        head = bytearray(batch[:61])
        stamp_v2_crc(head, bytes(batch[61:]))
        batch[:61] = head
    return bytes(batch)


def produce_request(version: int, topic: str, records: bytes, *, acks: int = -1, partition: int = 0) -> Any:
    """A Produce request of one partition's ``records``."""
    cls = load_request_schema(0, version)
    part = make(nested(cls, "PartitionProduceData"), index=partition, records=records)
    data = make(nested(cls, "TopicProduceData"), name=topic, partition_data=(part,))
    return make(cls, transactional_id=None, acks=acks, timeout=timedelta(seconds=5), topic_data=(data,))


class WireClient:
    """One connection to the listener."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """One response frame's body, or None when the listener closed the connection."""
        head = self._recv_exactly(4)
        if head is None:
            return None
        return self._recv_exactly(struct.unpack(">i", head)[0])

    def _recv_exactly(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def frame(self, api_key: int, version: int, entity: Any) -> bytes:
        """The request frame of ``entity`` with the next correlation id."""
        self.correlation += 1
        client = b"wire-test"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client)) + client
        if type(entity).__flexible__:
            header += b"\0"
        body = header + encode(entity)
        return struct.pack(">i", len(body)) + body

    def request(self, api_key: int, version: int, entity: Any, *, expect_response: bool = True) -> Any:
        """Send ``entity`` and decode the response (None when the connection was closed instead)."""
        self.sock.sendall(self.frame(api_key, version, entity))
        if not expect_response:
            return None
        return self.read_response(api_key, version, self.correlation)

    def read_response(self, api_key: int, version: int, correlation: int) -> Any:
        """The next response frame, decoded; it must answer ``correlation`` (None when closed)."""
        frame = self.recv_frame()
        if frame is None:
            return None
        assert struct.unpack_from(">i", frame, 0)[0] == correlation
        flexible = load_response_schema(api_key, version).__flexible__
        at = 4 + (1 if flexible and api_key != 18 else 0)
        response, _ = entity_reader(load_response_schema(api_key, version))(frame, at)
        return response
