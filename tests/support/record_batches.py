"""Builders and oracles for the codec tests (tests/engine/test_records_*.py): kafka-python's view and
seglogfs' view of a buffer, batches and records written by hand from the spec, test data."""

from __future__ import annotations

import random
import struct
import zlib

from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record._crc32c import crc as crc32c_py  # pure Python: independent of seglogfs' crc32c
from kafka.record.default_records import ControlRecord, DefaultRecordBatch
from kafka.record.util import encode_varint

from seglogfs.compression import Compression
from seglogfs.records import (
    LOG_OVERHEAD,
    V2_HEADER_SIZE,
    BatchHeader,
    ProducerRecord,
    Record,
    RecordColumns,
    TimestampType,
    decode_batch,
    decode_batch_columns,
    iter_batch_headers,
    validate_batch,
)

CODECS = list(Compression)
LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
TS_TYPES = [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]
NOW = 1_700_000_000_000
PATH = "/data/events-0/00000000000000000000.log"
V2_HEADER = struct.Struct(">qiibIhiqqqhii")


def kp_parse(buf: bytes) -> tuple[list, list[tuple]]:
    """kafka-python's view: (batches, user records as tuples); asserts every batch CRC is valid."""
    batches, records = [], []
    mr = MemoryRecords(bytes(buf))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc(), f"kafka-python rejects the CRC of {batch}"
        batches.append(batch)
        for r in batch:
            if isinstance(r, ControlRecord):
                continue
            records.append(
                (
                    r.offset,
                    -1 if r.timestamp is None else r.timestamp,
                    -1 if r.timestamp_type is None else r.timestamp_type,
                    r.key,
                    r.value,
                    tuple(tuple(h) for h in r.headers),
                )
            )
    return batches, records


def as_tuple(r: Record) -> tuple:
    return (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, tuple(r.headers))


def columns_as_tuples(cols: RecordColumns) -> list[tuple]:
    """The columns' records as tuples, read one by one and all at once (which must agree)."""
    one_by_one = [as_tuple(cols.record(i)) for i in range(len(cols))]
    assert [as_tuple(r) for r in cols.records()] == one_by_one
    return one_by_one


def sl_parse(buf: bytes, path: str = PATH) -> tuple[list[BatchHeader], list[tuple]]:
    """seglogfs' view: headers and user records; also checks decode_batch_columns agrees."""
    headers = list(iter_batch_headers(buf, path=path))
    assert sum(h.size for h in headers) == len(buf), "every byte belongs to a complete batch"
    records = []
    for h in headers:
        validate_batch(buf, h, path=path)
        recs = [as_tuple(r) for r in decode_batch(buf, h, path=path)]
        assert columns_as_tuples(decode_batch_columns(buf, h, path=path)) == recs
        records.extend(recs)
    return headers, records


def assert_v2_header_matches(h: BatchHeader, kb: DefaultRecordBatch) -> None:
    assert h.magic == kb.magic == 2
    assert h.base_offset == kb.base_offset
    assert h.last_offset == kb.last_offset
    assert h.last_offset - h.base_offset == kb.last_offset_delta
    assert h.next_offset == kb.next_offset
    assert h.size == kb.size_in_bytes
    assert h.crc == kb.crc
    assert h.attributes == kb.attributes
    assert h.compression == kb.compression_type
    assert int(h.timestamp_type) == kb.timestamp_type
    assert h.leader_epoch == kb.leader_epoch
    assert h.base_timestamp == kb.first_timestamp
    assert h.max_timestamp == kb.max_timestamp
    assert h.producer_id == kb.producer_id
    assert h.producer_epoch == kb.producer_epoch
    assert h.base_sequence == kb.base_sequence
    assert h.last_sequence == kb.last_sequence
    assert h.records_count == kb.records_count
    assert h.is_control == kb.is_control_batch
    assert h.is_transactional == kb.is_transactional


def varint(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


def raw_record(offset_delta: int, ts_delta: int, key, value, headers=()) -> bytes:
    """One v2 record, written by hand from the spec (section 1.2) with kafka-python's varint."""
    body = bytearray(b"\x00")
    body += varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        kb = hk.encode()
        body += varint(len(kb)) + kb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def raw_v2_batch(
    area: bytes,
    count: int,
    *,
    base_offset: int = 0,
    attributes: int = 0,
    last_delta: int | None = None,
    base_ts: int = NOW,
    max_ts: int = NOW,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = 0,
) -> bytes:
    """A v2 batch around an (already compressed, if so flagged) records area, CRC-32C by kafka-python's
    pure-Python implementation."""
    header = bytearray(
        V2_HEADER.pack(
            base_offset,
            V2_HEADER_SIZE - LOG_OVERHEAD + len(area),
            leader_epoch,
            2,
            0,
            attributes,
            max(count - 1, 0) if last_delta is None else last_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    struct.pack_into(">I", header, 17, crc32c_py(bytes(header[21:]) + area))
    return bytes(header) + area


def fix_v2_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c_py(bytes(batch[21:])))


def fix_legacy_crc(buf: bytearray, pos: int = 0) -> None:
    """Recompute the CRC-32 (zlib) of the legacy message at ``pos`` (magic through the end)."""
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : pos + 12 + length])) & 0xFFFFFFFF)


def raw_legacy(
    magic: int, key, value, *, offset: int = 0, attributes: int = 0, timestamp: int = NOW
) -> bytes:
    """One legacy message written by hand from section 1.3, CRC-32 by zlib."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def rich_records() -> list[ProducerRecord]:
    """Keys, null keys, null values, empty values, headers (null values, unicode keys), big values."""
    rnd = random.Random(7)
    big_random = rnd.randbytes(150_000)
    big_text = (b"the quick brown fox jumps over the lazy dog " * 4000)[:170_000]
    return [
        ProducerRecord(b"v0", b"k0", (), NOW - 5),
        ProducerRecord(None, b"tombstone-key", (), NOW - 4),
        ProducerRecord(b"", None, (), NOW + 10),
        ProducerRecord(b"no key", None, (("h1", b"x"), ("h2", None), ("", b"")), NOW),
        ProducerRecord(
            b"\x00\xff" * 10, b"", (("\u00e9t\u00e9 \u2603 \U0001f600", b"\xe2\x98\x83"),), NOW + 3
        ),
        ProducerRecord(big_random, b"big-random", (("size", b"150000"),), NOW - 1000),
        ProducerRecord(big_text, b"big-text", (), NOW + 1000),
        ProducerRecord(b"last", b"k" * 300, tuple((f"h{i}", bytes([i]) * i) for i in range(20)), None),
    ]


def expected_tuples(records, base_offset, now_ms, ts_type) -> list[tuple]:
    out = []
    for i, r in enumerate(records):
        ts = now_ms if ts_type == TimestampType.LOG_APPEND_TIME or r.timestamp is None else r.timestamp
        out.append((base_offset + i, ts, int(ts_type), r.key, r.value, tuple(r.headers)))
    return out


def builder_rows(magic: int, n: int = 25) -> list[tuple[int | None, bytes | None, bytes | None, list]]:
    rnd = random.Random(magic * 100 + n)
    out = []
    for i in range(n):
        key = None if i % 4 == 1 else f"key-{i}".encode()
        value = None if i % 7 == 5 else rnd.randbytes(rnd.randrange(0, 300))
        headers = [("h", b"1"), ("\u00fc", None)] if magic == 2 and i % 3 == 0 else []
        out.append((NOW + rnd.randrange(-5000, 5000), key, value, headers))
    out.append((NOW, b"big", b"B" * 100_000 + rnd.randbytes(1000), []))
    return out


def kafka_python_build(magic: int, codec: Compression, rows, offset: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=magic, compression_type=int(codec), batch_size=16 * 1024 * 1024, offset=offset
    )
    for ts, key, value, headers in rows:
        assert builder.append(timestamp=ts, key=key, value=value, headers=headers) is not None
    builder.close()
    return bytes(builder.buffer())


BUILDER_CASES = [(m, c) for m in (0, 1) for c in LEGACY_CODECS] + [(2, c) for c in CODECS]


header_st = st.tuples(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12), st.none() | st.binary(max_size=24)
)


record_st = st.builds(
    ProducerRecord,
    value=st.none() | st.binary(max_size=300),
    key=st.none() | st.binary(max_size=40),
    headers=st.lists(header_st, max_size=3).map(tuple),
    timestamp=st.none() | st.integers(0, 2**42),
)
