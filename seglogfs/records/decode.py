"""Decoding: RecordBatch v2 into numpy columns, record bounds, one record, or Record objects; and the
three batch decoders (``decode_batch``, ``decode_batch_columns``, ``decode_batch_all``) that hand a
legacy (v0/v1) entry to :mod:`.legacy`.

``decode_batch_columns`` parses every field of every record of a batch into numpy columns in one C pass
(:mod:`.scan`), reading an uncompressed batch in place.
"""

from __future__ import annotations

from itertools import repeat
from pathlib import Path

import numpy as np

from ..compression import Compression, CompressionError, decompress
from ..errors import CorruptRecordError
from .batch_header import V2_HEADER_SIZE, BatchHeader, batch_bytes
from .legacy import legacy_columns, legacy_messages, legacy_records
from .scan import (
    END,
    HEADER_COUNT,
    HEADERS_START,
    KEY_LENGTH,
    KEY_START,
    OFFSET_DELTA,
    TS_DELTA,
    VALUE_LENGTH,
    VALUE_START,
    MalformedRecords,
    join_values,
    plain_jsonl,
    record_in_batch,
    scan_area,
    scan_bounds,
    scan_record,
    values_size,
)
from .types import (
    ByteSource,
    DecodedRecord,
    Header,
    Record,
    RecordBounds,
    RecordColumns,
    TimestampType,
    Where,
)

# ---------------------------------------------------------------------------------------------
# Varint reader (protobuf zig-zag, 7 bits a byte, least significant group first), for the few fields
# read outside the C scanner: a batch's first record stamp and the headers of records that have any


def _read_varint(buf: ByteSource, pos: int, limit: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= limit or shift > 63:
            raise ValueError("varint runs past the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


def _parse_headers(area: ByteSource, pos: int, end: int) -> tuple[tuple[Header, ...], int]:
    count, pos = _read_varint(area, pos, end)
    if count < 0:
        raise ValueError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        klen, pos = _read_varint(area, pos, end)
        if klen < 0 or pos + klen > end:
            raise ValueError("header key runs past the record")
        key = bytes(area[pos : pos + klen]).decode("utf-8", "replace")
        pos += klen
        vlen, pos = _read_varint(area, pos, end)
        if vlen < 0:
            value = None
        else:
            if pos + vlen > end:
                raise ValueError("header value runs past the record")
            value = bytes(area[pos : pos + vlen])
            pos += vlen
        headers.append((key, value))
    return tuple(headers), pos


# ---------------------------------------------------------------------------------------------
# Locating the records of a batch


# A record's offset is base offset + its int32 offset delta, in int64: a base offset this close to either
# end of int64 would wrap around (as numpy and Java do) for some deltas, and the fast paths, which
# compare deltas, would then disagree with the columns, which compare offsets. No log reaches there.
_BASE_OFFSETS = range(-(1 << 63) + (1 << 31), (1 << 63) - (1 << 31) + 1)


def _check_base_offset(header: BatchHeader, path: Where) -> None:
    if header.base_offset not in _BASE_OFFSETS:
        raise CorruptRecordError(
            f"base offset {header.base_offset} leaves no room for its records' offset deltas",
            path,
            header.position,
        )


def max_records_area(compressed_size: int) -> int:
    """The most bytes a compressed batch's records may decompress to (the cap against decompression
    bombs): 64 times the compressed size, and at least 64 MiB, which is 64 times Kafka's default
    ``max.message.bytes`` (the broker's bound on a stored batch's compressed size). Kafka itself
    streams records and has no cap; a producer fills a batch up to ``batch.size`` (16 KiB) of
    estimated compressed bytes and no record exceeds ``max.request.size`` (1 MiB), so a real batch
    passes unless it holds over 64 MiB that compress more than 64:1."""
    return max(_MIN_RECORDS_AREA_CAP, _RECORDS_AREA_RATIO * compressed_size)


_MIN_RECORDS_AREA_CAP = 64 * 1024 * 1024
_RECORDS_AREA_RATIO = 64


def records_area(buf: ByteSource, header: BatchHeader, path: str | Path | None = None) -> memoryview | bytes:
    """The records of the v2 batch ``header`` in ``buf``: a view of ``buf`` (no copy) when
    uncompressed, else decompressed (CorruptRecordError past :func:`max_records_area`)."""
    _check_base_offset(header, path)
    raw = batch_bytes(buf, header)[V2_HEADER_SIZE:]
    if header.compression == Compression.NONE:
        return raw
    try:
        return decompress(header.compression, raw, max_records_area(len(raw)))
    except CompressionError as exc:
        raise CorruptRecordError(str(exc), path, header.position) from None


def _counted_area(buf: ByteSource, header: BatchHeader, path: Where) -> memoryview | bytes:
    """:func:`records_area`, once the batch's record count is known not to be negative."""
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}", path, header.position)
    return records_area(buf, header, path)


def _v2_scan(buf: ByteSource, header: BatchHeader, path: Where) -> tuple[memoryview | bytes, np.ndarray]:
    """The records area of a v2 batch and every field of its records (:func:`.scan.scan_area`)."""
    area = _counted_area(buf, header, path)
    return area, scan_area(area, header.records_count, path, header.position)


def record_bounds(buf: ByteSource, header: BatchHeader, *, path: Where = None) -> RecordBounds:
    """The record bounds of an uncompressed v2 batch (ValueError for other batches)."""
    if header.magic < 2 or header.compression != Compression.NONE:
        raise ValueError("record bounds exist only for uncompressed v2 batches")
    area = _counted_area(buf, header, path)
    starts, deltas = scan_bounds(area, header.records_count, path, header.position)
    return RecordBounds(starts, len(area), deltas)


# ---------------------------------------------------------------------------------------------
# One record


def decode_record(data: bytes | memoryview, header: BatchHeader, *, path: Where = None) -> Record:
    """One record of a v2 batch from its bytes, length prefix included."""
    _check_base_offset(header, path)
    ts_delta, offset_delta, ks, kl, vs, vl, hs, hc = scan_record(data, path, header.position)
    headers: tuple[Header, ...] = ()
    if hc:
        headers = _parse_headers(data, hs, len(data))[0]  # the scanner checked every length
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamp = header.max_timestamp
    else:
        timestamp = header.base_timestamp + ts_delta
    key = None if kl < 0 else bytes(data[ks : ks + kl])
    value = None if vl < 0 else bytes(data[vs : vs + vl])
    return Record(header.base_offset + offset_delta, timestamp, header.timestamp_type, key, value, headers)


def read_record_in_batch(
    fd: int, header: BatchHeader, bounds: RecordBounds, offset: int, file_size: int, *, path: Where = None
) -> Record | None:
    """The record at ``offset`` of the uncompressed v2 batch ``header`` of the file ``fd`` (``file_size``
    bytes long as far as the reader knows), found through the batch's ``bounds`` and read in one C call;
    None when the batch holds no record at that offset. CorruptRecordError when the file was cut short
    under the reader, when the bytes do not parse, or when they name another offset."""
    _check_base_offset(header, path)
    area_position = header.position + V2_HEADER_SIZE
    delta = offset - header.base_offset
    try:
        found = record_in_batch(
            fd, area_position, bounds.starts, bounds.offset_deltas, bounds.area_size, delta
        )
    except MalformedRecords as exc:
        raise CorruptRecordError(f"malformed record in batch: {exc}", path, header.position) from None
    if found is None:
        return None
    if isinstance(found, int):
        raise CorruptRecordError(
            f"the file ends inside the record at offset {offset}, before the {file_size} bytes it held "
            "(cut while open)",
            path, header.position,
        )
    ts_delta, offset_delta, key, value, raw = found
    if header.base_offset + offset_delta != offset:  # never another offset's bytes
        message = f"the record read for offset {offset} says offset {header.base_offset + offset_delta}"
        raise CorruptRecordError(message, path, header.position)
    if raw is not None:  # headers: the rare case, parsed as decode_record does
        return decode_record(raw, header, path=path)
    timestamp_type = header.timestamp_type
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        return Record(offset, header.max_timestamp, timestamp_type, key, value)
    return Record(offset, header.base_timestamp + ts_delta, timestamp_type, key, value)


def first_record_stamp(prefix: bytes, header: BatchHeader) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of a v2 batch, from the bytes that follow its header
    (32 are enough); None for a batch with no record, or when ``prefix`` does not parse."""
    if header.records_count <= 0:
        return None
    try:
        _length, pos = _read_varint(prefix, 0, len(prefix))
        ts_delta, pos = _read_varint(prefix, pos + 1, len(prefix))  # + 1: the attributes byte
        offset_delta, _ = _read_varint(prefix, pos, len(prefix))
    except (ValueError, IndexError):
        return None
    if not (-(1 << 63) <= ts_delta < 1 << 63 and -(1 << 31) <= offset_delta < 1 << 31):
        return None  # wider than its type (an int64, an int32): damage, which the C scanner reports
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return header.base_offset + offset_delta, header.max_timestamp
    return header.base_offset + offset_delta, header.base_timestamp + ts_delta


# ---------------------------------------------------------------------------------------------
# Whole batches as columns


def _empty_columns(timestamp_type: TimestampType) -> RecordColumns:
    empty = np.zeros(0, dtype=np.int64)
    return RecordColumns(
        np.zeros(0, dtype=np.uint8), empty, empty, timestamp_type, empty, empty, empty, empty
    )


def _v2_columns(buf: ByteSource, header: BatchHeader, path: Where) -> tuple[RecordColumns, np.ndarray]:
    """Columns of every record (control ones too) plus the record sequence deltas."""
    area, fields = _v2_scan(buf, header, path)
    if header.records_count == 0:
        return _empty_columns(header.timestamp_type), np.zeros(0, dtype=np.int64)
    headers = None
    if fields[HEADER_COUNT].any():  # the scanner checked every length: parsing cannot run off a record
        headers = [
            _parse_headers(area, start, end)[0] if n else ()
            for start, end, n in zip(
                fields[HEADERS_START].tolist(), fields[END].tolist(), fields[HEADER_COUNT].tolist(),
                strict=True,
            )
        ]
    off_delta = fields[OFFSET_DELTA]
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamps = np.full(off_delta.shape[0], header.max_timestamp, dtype=np.int64)
    else:
        timestamps = header.base_timestamp + fields[TS_DELTA]
    columns = RecordColumns(
        np.frombuffer(area, dtype=np.uint8),
        header.base_offset + off_delta,
        timestamps,
        header.timestamp_type,
        fields[KEY_START],
        fields[KEY_LENGTH],
        fields[VALUE_START],
        fields[VALUE_LENGTH],
        headers,
    )
    return columns, off_delta


def decode_batch_columns(buf: ByteSource, header: BatchHeader, *, path: Where = None) -> RecordColumns:
    """The user records of one batch as numpy columns (empty for a control batch)."""
    if header.is_control:
        return _empty_columns(header.timestamp_type)
    if header.magic >= 2:
        return _v2_columns(buf, header, path)[0]
    return legacy_columns(buf, header, path)


# ---------------------------------------------------------------------------------------------
# The values of a batch, each followed by a newline (the records view), straight from the C scanner

_ALL = -(1 << 63)
_NONE = (1 << 63) - 1  # above every offset delta (an int32)


def _values_scope(
    buf: ByteSource, header: BatchHeader, path: Where, first_offset: int | None
) -> tuple[memoryview | bytes, int]:
    """(records area, the first offset delta included) of a v2 user batch."""
    min_delta = _ALL if first_offset is None or header.base_offset >= first_offset else (
        min(first_offset - header.base_offset, _NONE)  # a damaged base offset can put it past int64
    )
    return records_area(buf, header, path), min_delta


def batch_values(
    buf: ByteSource, header: BatchHeader, *, path: str | Path | None = None, first_offset: int | None = None
) -> bytes | None:
    """The values of the batch's user records at ``first_offset`` and after, each followed by a
    newline (a null value is an empty line); None for a legacy batch (decode its columns)."""
    if header.magic < 2:
        return None
    if header.is_control:
        return b""
    area, min_delta = _values_scope(buf, header, path, first_offset)
    return join_values(area, header.records_count, min_delta, path, header.position)


def batch_values_size(
    buf: ByteSource, header: BatchHeader, *, path: str | Path | None = None, first_offset: int | None = None
) -> int | None:
    """``len(batch_values(...))``, without building the bytes; None for a legacy batch."""
    if header.magic < 2:
        return None
    if header.is_control:
        return 0
    area, min_delta = _values_scope(buf, header, path, first_offset)
    return values_size(area, header.records_count, min_delta, path, header.position)


def batch_plain_jsonl(
    buf: ByteSource, header: BatchHeader, *, path: str | Path | None = None, first_offset: int | None = None,
    build: bool = True,
) -> bytes | int | None:
    """The ``records.jsonl`` lines (:func:`seglogfs.jsonl.columns_to_jsonl`) of the batch's user records
    at ``first_offset`` and after, or their length when not ``build``, when every record is plain (no
    key, no headers, a value of printable ASCII but ``"`` and ``\\``, offset and timestamp >= 0);
    None when one is not, or for a legacy batch (decode its columns)."""
    if header.magic < 2:
        return None
    if header.is_control:
        return b"" if build else 0
    area, min_delta = _values_scope(buf, header, path, first_offset)
    fixed = header.max_timestamp if header.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    stamps = (header.base_offset, header.base_timestamp, fixed, header.timestamp_type.kafka_name)
    return plain_jsonl(area, header.records_count, min_delta, stamps, build, path, header.position)


# ---------------------------------------------------------------------------------------------
# Whole batches as objects


def decode_batch(buf: ByteSource, header: BatchHeader, *, path: Where = None) -> list[Record]:
    """The user records of one batch ([] for a control batch). Does not check the CRC."""
    if header.is_control:
        return []
    if header.magic < 2:
        return legacy_records(buf, header, path)
    return _v2_columns(buf, header, path)[0].records()


def decode_batch_all(buf: ByteSource, header: BatchHeader, *, path: Where = None) -> list[DecodedRecord]:
    """Every record of the batch, control records included (for dump and verification)."""
    if header.magic < 2:
        return legacy_messages(buf, header, path)
    columns, deltas = _v2_columns(buf, header, path)
    keys, values = columns.keys_and_values()
    seq = header.base_sequence
    sequences = repeat(-1) if seq < 0 else ((seq + d) % (2**31) for d in deltas.tolist())
    return list(
        map(
            DecodedRecord,
            columns.offsets.tolist(),
            columns.timestamps.tolist(),
            keys,
            values,
            columns.headers_or_empty(),
            sequences,
            repeat(header.is_control),
        )
    )
