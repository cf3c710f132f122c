"""Decoding: RecordBatch v2 into numpy columns, record bounds, one record, or Record objects; and the
three batch decoders (``decode_batch``, ``decode_batch_columns``, ``decode_batch_all``) that hand a
legacy (v0/v1) entry to :mod:`.legacy`.

``decode_batch_columns`` parses every field of every record of a batch into numpy columns, whole
columns at a time. The varint readers live here, next to the hot loop that uses them.
"""

from __future__ import annotations

from itertools import repeat
from pathlib import Path

import numpy as np

from ..compression import Compression, CompressionError, decompress
from ..errors import CorruptRecordError
from .batch_header import V2_HEADER_SIZE, BatchHeader, batch_bytes
from .legacy import legacy_columns, legacy_messages, legacy_records
from .types import DecodedRecord, Header, Record, RecordBounds, RecordColumns, TimestampType

_VARINT_PAD = 10  # zero bytes after a records area, so vectorised varint reads never run off it

# ---------------------------------------------------------------------------------------------
# Varint readers (protobuf zig-zag, 7 bits a byte, least significant group first)


def _read_varint(buf, pos: int, limit: int) -> tuple[int, int]:
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


def _gather_varints(arr: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode the varint at each position of ``arr``: (values int64, byte sizes int64).

    Whole-column steps only; the common all-one-byte case is a single gather. ``arr`` must be
    padded with at least 10 bytes beyond the last position read.
    """
    first = arr[positions]
    more = first >= 0x80
    if not more.any():
        v = first.astype(np.int64)
        return (v >> 1) ^ -(v & 1), np.ones(positions.shape[0], dtype=np.int64)
    result = (first & 0x7F).astype(np.uint64)
    sizes = np.ones(positions.shape[0], dtype=np.int64)
    j = 1
    while more.any():
        if j >= 10:
            raise ValueError("varint longer than 10 bytes")
        byte = arr[positions + j]
        result |= np.where(more, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * j), np.uint64(0))
        sizes += more
        more &= byte >= 0x80
        j += 1
    signed = (result >> np.uint64(1)).view(np.int64) ^ -(result & np.uint64(1)).view(np.int64)
    return signed, sizes


def _varint_bytes(body: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(body, pos, end)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise ValueError("field runs past the record")
    return body[pos : pos + length], pos + length


def _parse_headers(area, pos: int, end: int) -> tuple[tuple[Header, ...], int]:
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


def _v2_records_area(buf, header: BatchHeader, path) -> bytearray:
    """The batch's records (decompressed), followed by ``_VARINT_PAD`` zero bytes."""
    raw = batch_bytes(buf, header)[V2_HEADER_SIZE:]
    if header.compression == Compression.NONE:
        area = bytearray(len(raw) + _VARINT_PAD)
        area[: len(raw)] = raw
        return area
    try:
        plain = decompress(header.compression, raw)
    except CompressionError as exc:
        raise CorruptRecordError(str(exc), path, header.position) from None
    return bytearray(plain) + bytes(_VARINT_PAD)


def _record_starts(area, count: int, limit: int, path, position: int) -> np.ndarray:
    """Body start and end of each record in ``area[:limit]`` (``[starts, ends]``).

    Records are located run by run: the records of a run share one encoded size, so numpy checks a
    whole run at once (every predicted start must carry the same length prefix as the run's first
    record; varints are a prefix code, so this proves each start by induction). Sizes change rarely
    in a batch (the offset-delta varint grows at 64 and 8192); when runs stay short (mixed sizes),
    the sequential scan finishes the batch.
    """
    if count < 16:
        return _record_starts_sequential(area, count, 0, limit, path, position)
    arr = np.frombuffer(area, dtype=np.uint8)
    starts = np.empty(count, dtype=np.int64)
    lengths = np.empty(count, dtype=np.int64)
    pos = done = short_runs = 0
    while done < count:
        if short_runs >= 4:
            rest = _record_starts_sequential(area, count - done, pos, limit, path, position)
            starts[done:], lengths[done:] = rest[0], rest[1] - rest[0]
            return np.stack((starts, starts + lengths))
        try:
            length, head = _read_varint(area, pos, limit)
        except (ValueError, IndexError):
            break  # the sequential scan raises the precise error
        stride = head - pos + length
        run = min(count - done, (limit - pos) // stride) if length >= 0 and stride > 0 else 0
        if run <= 0:
            break
        width = head - pos
        block = arr[pos : pos + run * stride].reshape(run, stride)[:, :width]
        same = (block == arr[pos:head]).all(axis=1)
        run = run if same.all() else max(int(np.argmin(same)), 1)
        starts[done : done + run] = head + np.arange(run, dtype=np.int64) * stride
        lengths[done : done + run] = length
        short_runs = short_runs + 1 if run < 8 else 0
        pos += run * stride
        done += run
    if done == count and pos == limit:
        return np.stack((starts, starts + lengths))
    return _record_starts_sequential(area, count, 0, limit, path, position)


def _record_starts_sequential(area, count: int, pos: int, limit: int, path, position: int) -> np.ndarray:
    """The one-record-at-a-time scan from ``pos``; it must consume exactly ``area[pos:limit]``."""
    starts = np.empty(count, dtype=np.int64)
    ends = np.empty(count, dtype=np.int64)
    try:
        for i in range(count):
            b = area[pos]
            if b < 0x80:  # one- and two-byte lengths inline: records up to 8 KiB
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif area[pos + 1] < 0x80:
                v = (b & 0x7F) | (area[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = _read_varint(area, pos, limit)
            if length < 0 or pos + length > limit:
                raise ValueError(f"record {i} length {length} runs past the batch")
            starts[i] = pos
            pos += length
            ends[i] = pos
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(f"malformed record in batch: {exc}", path, position) from None
    if pos != limit:
        raise CorruptRecordError(f"{limit - pos} bytes left over after {count} records", path, position)
    return np.stack((starts, ends))


def record_bounds(buf, header: BatchHeader, *, path: str | Path | None = None) -> RecordBounds:
    """The record bounds of an uncompressed v2 batch (ValueError for other batches)."""
    if header.magic < 2 or header.compression != Compression.NONE:
        raise ValueError("record bounds exist only for uncompressed v2 batches")
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}", path, header.position)
    area = _v2_records_area(buf, header, path)
    count = header.records_count
    limit = len(area) - _VARINT_PAD
    bodies, ends = _record_starts(area, count, limit, path, header.position)
    arr = np.frombuffer(area, dtype=np.uint8)
    try:
        _, sz = _gather_varints(arr, bodies + 1)  # timestamp delta, after the attributes byte
        deltas, _ = _gather_varints(arr, bodies + 1 + sz)
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed record in batch: {exc}", path, header.position) from None
    # Records are back to back: each length prefix begins where the previous body ends.
    starts = np.empty(count, dtype=np.int32)
    starts[0] = 0
    starts[1:] = ends[:-1]
    identity = bool((deltas == np.arange(count)).all())
    return RecordBounds(starts, limit, None if identity else deltas)


# ---------------------------------------------------------------------------------------------
# One record


def decode_record(data: bytes, header: BatchHeader, *, path: str | Path | None = None) -> Record:
    """One record of a v2 batch from its bytes, length prefix included."""
    end = len(data)
    try:
        length, pos = _read_varint(data, 0, end)
        if pos + length != end:
            raise ValueError(f"record length {length} does not match its {end - pos} bytes")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(data, pos, end)
        offset_delta, pos = _read_varint(data, pos, end)
        key, pos = _varint_bytes(data, pos, end)
        value, pos = _varint_bytes(data, pos, end)
        headers, pos = _parse_headers(data, pos, end)
        if pos != end:
            raise ValueError("record length does not match its fields")
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed record in batch: {exc}", path, header.position) from None
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamp = header.max_timestamp
    else:
        timestamp = header.base_timestamp + ts_delta
    return Record(header.base_offset + offset_delta, timestamp, header.timestamp_type, key, value, headers)


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


def _v2_columns(buf, header: BatchHeader, path) -> tuple[RecordColumns, np.ndarray]:
    """Columns of every record (control ones too) plus the record sequence deltas."""
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}", path, header.position)
    area = _v2_records_area(buf, header, path)
    if count == 0:
        return _empty_columns(header.timestamp_type), np.zeros(0, dtype=np.int64)
    limit = len(area) - _VARINT_PAD
    bounds = _record_starts(area, count, limit, path, header.position)
    starts, ends = bounds[0], bounds[1]
    arr = np.frombuffer(area, dtype=np.uint8)
    try:
        pos = starts + 1  # attributes byte (unused)
        ts_delta, sz = _gather_varints(arr, pos)
        pos = pos + sz
        off_delta, sz = _gather_varints(arr, pos)
        pos += sz
        key_len, sz = _gather_varints(arr, pos)
        pos += sz
        key_start = pos.copy()
        pos += np.maximum(key_len, 0)
        if (pos > ends).any():
            raise ValueError("key runs past the record")
        value_len, sz = _gather_varints(arr, pos)
        pos += sz
        value_start = pos.copy()
        pos += np.maximum(value_len, 0)
        if (pos > ends).any():
            raise ValueError("value runs past the record")
        headers = _headers_column(area, arr, pos, ends)
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed record in batch: {exc}", path, header.position) from None
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamps = np.full(count, header.max_timestamp, dtype=np.int64)
    else:
        timestamps = header.base_timestamp + ts_delta
    columns = RecordColumns(
        arr[:limit],
        header.base_offset + off_delta,
        timestamps,
        header.timestamp_type,
        key_start,
        key_len,
        value_start,
        value_len,
        headers,
    )
    return columns, off_delta


def _headers_column(
    area, arr: np.ndarray, pos: np.ndarray, ends: np.ndarray
) -> list[tuple[Header, ...]] | None:
    """The headers of each record, whose header counts start at ``pos``; None when no record has
    any. ValueError unless every record's fields end exactly at its end."""
    header_count, sz = _gather_varints(arr, pos)
    if not header_count.any():
        if ((pos + sz) != ends).any():
            raise ValueError("record length does not match its fields")
        return None
    headers = []
    for i in range(pos.shape[0]):
        parsed, end = _parse_headers(area, int(pos[i]), int(ends[i]))
        if end != ends[i]:
            raise ValueError("record length does not match its fields")
        headers.append(parsed)
    return headers


def decode_batch_columns(buf, header: BatchHeader, *, path: str | Path | None = None) -> RecordColumns:
    """The user records of one batch as numpy columns (empty for a control batch)."""
    if header.is_control:
        return _empty_columns(header.timestamp_type)
    if header.magic >= 2:
        return _v2_columns(buf, header, path)[0]
    return legacy_columns(buf, header, path)


# ---------------------------------------------------------------------------------------------
# Whole batches as objects


def decode_batch(buf, header: BatchHeader, *, path: str | Path | None = None) -> list[Record]:
    """The user records of one batch ([] for a control batch). Does not check the CRC."""
    if header.is_control:
        return []
    if header.magic < 2:
        return legacy_records(buf, header, path)
    return _v2_columns(buf, header, path)[0].records()


def decode_batch_all(buf, header: BatchHeader, *, path: str | Path | None = None) -> list[DecodedRecord]:
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
