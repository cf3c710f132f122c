"""Record batch codec: Kafka's RecordBatch v2 (read and write) and legacy v0/v1 message sets (read).

Layout facts are in shared/reference/kafka-format.md section 1. The hot paths work per batch:
``encode_values``/``encode_batch`` build a whole batch with numpy scatter writes instead of a Python
loop per record, and ``decode_batch_columns`` parses every field of every record of a batch into
numpy columns. CRC-32C runs in C (the ``crc32c`` package), codecs in C (cramjam).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np
from crc32c import crc32c

from .compression import Compression, CompressionError, compress, decompress
from .errors import CorruptRecordError

__all__ = [
    "LOG_OVERHEAD",
    "V2_HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "DecodedRecord",
    "ProducerRecord",
    "Record",
    "RecordBounds",
    "RecordColumns",
    "TimestampType",
    "batch_max_timestamp",
    "decode_batch",
    "decode_batch_all",
    "decode_batch_columns",
    "decode_record",
    "encode_batch",
    "encode_values",
    "first_record_stamp",
    "gather_slices",
    "iter_batch_headers",
    "read_batch_header",
    "record_bounds",
    "validate_batch",
]

LOG_OVERHEAD = 12  # baseOffset int64 + length int32, before every batch or legacy entry
V2_HEADER_SIZE = 61  # RecordBatch v2 header, up to the first record
_LEGACY_MIN_SIZE = 14  # smallest legacy message after the 12-byte offset/size prefix (v0)
_MIN_HEADER_READ = 17  # enough to see the magic byte (Kafka's FileLogInputStream.HEADER_SIZE_UP_TO_MAGIC)
_CRC_START = 21  # v2 CRC covers attributes through the end

_ATTR_CODEC_MASK = 0x07
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_MAX_TIMESTAMP = struct.Struct(">q")
# after baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4,
# baseTimestamp 8
_MAX_TIMESTAMP_AT = 35
_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class TimestampType(IntEnum):
    """Kafka's timestamp types (the numbers Spark's Kafka source uses for ``timestampType``)."""

    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @classmethod
    def from_name(cls, name: str) -> TimestampType:
        """``CreateTime`` / ``LogAppendTime`` (Kafka's ``message.timestamp.type`` values)."""
        names = {"createtime": cls.CREATE_TIME, "logappendtime": cls.LOG_APPEND_TIME}
        try:
            return names[name.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown timestamp type {name!r}") from None

    @property
    def kafka_name(self) -> str:
        """The name kafka-dump-log.sh prints: CreateTime, LogAppendTime or NoTimestampType."""
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[int(self)]


Header = tuple[str, bytes | None]


@dataclass(slots=True)
class ProducerRecord:
    """A record to append. ``timestamp`` is epoch milliseconds; None means "now"."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int | None = None


@dataclass(slots=True, frozen=True)
class Record:
    """A user record read back from the log."""

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(slots=True, frozen=True)
class DecodedRecord:
    """Every record of a batch as kafka-dump-log.sh shows it, control records included."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    sequence: int  # -1 when the batch has no producer sequence
    is_control: bool
    crc: int | None = None  # legacy messages carry their own CRC-32
    is_valid: bool = True


@dataclass(slots=True)
class BatchHeader:
    """A shallow view of one v2 batch or one legacy (v0/v1) entry in a file, read from its header only.

    For a legacy compressed wrapper ``base_offset`` equals ``last_offset`` (the wrapper carries the
    offset of its last inner message); decoding the wrapper yields the true first offset.
    """

    position: int
    base_offset: int
    last_offset: int
    size: int
    magic: int
    crc: int
    attributes: int
    leader_epoch: int = -1
    base_timestamp: int = -1
    max_timestamp: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    records_count: int = 1

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def at(self, position: int) -> BatchHeader:
        """The same header placed at another position (e.g. 0 within a buffer holding just this batch)."""
        return BatchHeader(
            position,
            self.base_offset,
            self.last_offset,
            self.size,
            self.magic,
            self.crc,
            self.attributes,
            self.leader_epoch,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    @property
    def end_position(self) -> int:
        return self.position + self.size

    @property
    def compression(self) -> int:
        return self.attributes & _ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        if self.attributes & _ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def last_sequence(self) -> int:
        """Kafka's lastSequence: base + delta, wrapping at Int.MAX; -1 without a sequence."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + (self.last_offset - self.base_offset)) % (2**31)


# ---------------------------------------------------------------------------------------------
# Shallow scanning


def batch_max_timestamp(batch: bytes | memoryview) -> int:
    """The maxTimestamp field of an encoded v2 batch (its bytes from the baseOffset on)."""
    return _MAX_TIMESTAMP.unpack_from(batch, _MAX_TIMESTAMP_AT)[0]


def read_batch_header(
    buf, position: int, end: int | None = None, *, path: str | Path | None = None, base_position: int = 0
) -> BatchHeader | None:
    """The batch starting at ``position`` of ``buf``, or None when only a torn tail remains there.

    ``buf`` is any buffer (bytes, memoryview, mmap); the header reports ``base_position + position``
    (the position in the file ``buf`` was read from). Raises CorruptRecordError for a size field no
    valid batch can have, as Kafka's FileLogInputStream does.
    """
    where = base_position + position
    if end is None:
        end = len(buf)
    if end - position < _MIN_HEADER_READ:
        return None
    base_offset, length = _PREFIX.unpack_from(buf, position)
    magic = buf[position + 16]
    if length < _LEGACY_MIN_SIZE:
        raise CorruptRecordError(
            f"record size {length} is smaller than the minimum record overhead", path, where
        )
    size = length + LOG_OVERHEAD
    if position + size > end:
        return None
    if magic >= 2:
        if magic > 2:
            raise CorruptRecordError(f"unknown magic {magic}", path, where)
        if length + LOG_OVERHEAD < V2_HEADER_SIZE:
            raise CorruptRecordError(f"batch size {size} is below the v2 header size", path, where)
        (_, _, epoch, _, crc, attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count) = (
            _V2_HEADER.unpack_from(buf, position)
        )
        return BatchHeader(
            where,
            base_offset,
            base_offset + last_delta,
            size,
            magic,
            crc,
            attributes & 0xFFFF,
            epoch,
            base_ts,
            max_ts,
            pid,
            pepoch,
            base_seq,
            count,
        )
    _, _, crc, magic, attributes = _LEGACY_HEAD.unpack_from(buf, position)
    timestamp = -1
    if magic == 1:
        if length < _LEGACY_MIN_SIZE + 8:
            raise CorruptRecordError(f"v1 message size {length} is too small", path, where)
        (timestamp,) = _INT64.unpack_from(buf, position + 18)
    return BatchHeader(
        where,
        base_offset,
        base_offset,
        size,
        magic,
        crc,
        attributes & 0xFF,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
    )


def iter_batch_headers(
    buf, start: int = 0, end: int | None = None, *, path: str | Path | None = None, base_position: int = 0
) -> Iterator[BatchHeader]:
    """Every complete batch in ``buf[start:end]``, headers only; stops silently at a torn tail.

    Positions are reported as ``base_position`` + the position in ``buf``.
    """
    position = start
    if end is None:
        end = len(buf)
    while True:
        header = read_batch_header(buf, position, end, path=path, base_position=base_position)
        if header is None:
            return
        yield header
        position += header.size


# ---------------------------------------------------------------------------------------------
# Validation


def validate_batch(buf, header: BatchHeader, *, path: str | Path | None = None) -> None:
    """Raise CorruptRecordError unless the batch's CRC matches (CRC-32C for v2, CRC-32 for legacy)."""
    start = header.position
    view = memoryview(buf)[start : start + header.size]
    if header.magic >= 2:
        actual = crc32c(view[_CRC_START:])
        if header.records_count < 0:
            raise CorruptRecordError(f"negative record count {header.records_count}", path, start)
    else:
        actual = zlib.crc32(view[16:]) & 0xFFFFFFFF
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has CRC {actual} but its header says {header.crc}",
            path,
            start,
        )


# ---------------------------------------------------------------------------------------------
# Varints (protobuf zig-zag, 7 bits a byte, least significant group first)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _write_varint(out: bytearray, value: int) -> None:
    v = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


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


def _varint_sizes(zz: np.ndarray) -> np.ndarray:
    """Bytes needed by each (already zig-zagged, uint64) varint."""
    sizes = np.ones(zz.shape, dtype=np.int64)
    largest = int(zz.max(initial=0))
    for bits in range(7, 64, 7):
        if largest < (1 << bits):
            break
        sizes += zz >= np.uint64(1 << bits)
    return sizes


def _zigzag_np(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _scatter_varints(out: np.ndarray, positions: np.ndarray, zz: np.ndarray, sizes: np.ndarray) -> None:
    """Write varint i (zig-zagged ``zz[i]``, ``sizes[i]`` bytes) at ``out[positions[i]]``."""
    longest = int(sizes.max(initial=0))
    for j in range(longest):
        if j == 0 and longest == 1:
            out[positions] = zz.astype(np.uint8)
            return
        mask = sizes > j
        if mask.all():
            pos, vals, sz = positions, zz, sizes
        else:
            pos, vals, sz = positions[mask], zz[mask], sizes[mask]
        byte = (vals >> np.uint64(7 * j)) & np.uint64(0x7F)
        byte |= (sz > j + 1).astype(np.uint64) << np.uint64(7)
        out[pos + j] = byte.astype(np.uint8)


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


# ---------------------------------------------------------------------------------------------
# Encoding (RecordBatch v2)


def _concat_nullable(items: Sequence[bytes | None]) -> tuple[bytes, np.ndarray]:
    """(all non-null items joined, per-item length with -1 for None)."""
    lengths = np.fromiter((-1 if x is None else len(x) for x in items), dtype=np.int64, count=len(items))
    if (lengths < 0).any():
        return b"".join(x for x in items if x is not None), lengths
    return b"".join(items), lengths  # type: ignore[arg-type]


def _records_area(
    key_blob: bytes,
    key_lengths: np.ndarray,
    value_blob: bytes,
    value_lengths: np.ndarray,
    ts_deltas: np.ndarray,
    header_blobs: Sequence[bytes] | None,
) -> bytes:
    """The concatenated v2 records (uncompressed), built with one numpy scatter per field."""
    n = value_lengths.shape[0]
    od_zz = _zigzag_np(np.arange(n, dtype=np.int64))
    ts_zz = _zigzag_np(ts_deltas)
    kl_zz = _zigzag_np(key_lengths)
    vl_zz = _zigzag_np(value_lengths)
    od_sz, ts_sz, kl_sz, vl_sz = (_varint_sizes(x) for x in (od_zz, ts_zz, kl_zz, vl_zz))
    key_n = np.maximum(key_lengths, 0)
    value_n = np.maximum(value_lengths, 0)
    if header_blobs is None:
        hdr_n = np.ones(n, dtype=np.int64)  # headerCount varint 0
    else:
        hdr_n = np.fromiter((len(h) for h in header_blobs), dtype=np.int64, count=n)
    body = 1 + ts_sz + od_sz + kl_sz + key_n + vl_sz + value_n + hdr_n
    body_zz = _zigzag_np(body)
    body_sz = _varint_sizes(body_zz)
    total = body_sz + body
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(total[:-1], out=starts[1:])
    out = np.zeros(int(total.sum()), dtype=np.uint8)

    _scatter_varints(out, starts, body_zz, body_sz)
    pos = starts + body_sz + 1  # attributes byte stays 0
    _scatter_varints(out, pos, ts_zz, ts_sz)
    pos += ts_sz
    _scatter_varints(out, pos, od_zz, od_sz)
    pos += od_sz
    _scatter_varints(out, pos, kl_zz, kl_sz)
    pos += kl_sz
    key_pos = pos.copy()
    pos += key_n
    _scatter_varints(out, pos, vl_zz, vl_sz)
    pos += vl_sz
    value_pos = pos.copy()
    pos += value_n
    _copy_slices(out, key_pos, key_n, key_blob)
    _copy_slices(out, value_pos, value_n, value_blob)
    if header_blobs is not None:
        _copy_slices(out, pos, hdr_n, b"".join(header_blobs))
    return out.tobytes()


def _copy_slices(out: np.ndarray, dest: np.ndarray, lengths: np.ndarray, blob: bytes) -> None:
    """Copy consecutive slices of ``blob`` (lengths given) to ``out[dest[i]:]``."""
    total = len(blob)
    if total == 0:
        return
    src = np.frombuffer(blob, dtype=np.uint8)
    # A step function over the output marks the bytes that belong to the slices; boolean-mask
    # assignment then copies the whole blob in one pass.
    # Plain fancy assignment is safe: slices of one kind never touch (a varint always separates them).
    marks = np.zeros(out.shape[0] + 1, dtype=np.int8)
    nonempty = lengths > 0
    marks[dest[nonempty]] = 1
    marks[dest[nonempty] + lengths[nonempty]] = -1
    mask = np.cumsum(marks[:-1], dtype=np.int8).astype(bool)
    out[mask] = src


def _header_blob(headers: Sequence[Header]) -> bytes:
    out = bytearray()
    _write_varint(out, len(headers))
    for key, value in headers:
        if not isinstance(key, str):
            raise TypeError(f"header key must be str, got {type(key).__name__}")
        kb = key.encode()
        _write_varint(out, len(kb))
        out += kb
        if value is None:
            _write_varint(out, -1)
        else:
            _write_varint(out, len(value))
            out += value
    return bytes(out)


def _assemble_batch(
    records: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    *,
    compression: Compression,
    timestamp_type: TimestampType,
    leader_epoch: int,
) -> bytes:
    attributes = int(compression) & _ATTR_CODEC_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= _ATTR_TIMESTAMP_TYPE
    if compression != Compression.NONE:
        records = compress(compression, records)
    length = V2_HEADER_SIZE - LOG_OVERHEAD + len(records)
    header = bytearray(
        _V2_HEADER.pack(
            base_offset,
            length,
            leader_epoch,
            2,
            0,
            attributes,
            count - 1,
            base_timestamp,
            max_timestamp,
            -1,
            -1,
            -1,
            count,
        )
    )
    crc = crc32c(records, crc32c(memoryview(header)[_CRC_START:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + records


def encode_values(
    values: Sequence[bytes],
    base_offset: int,
    timestamp_ms: int,
    *,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    leader_epoch: int = 0,
) -> bytes:
    """One v2 batch of key-less, header-less records that share one timestamp: the append fast path."""
    if not values:
        raise ValueError("a batch needs at least one record")
    value_blob = b"".join(values)
    value_lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    n = len(values)
    records = _records_area(
        b"", np.full(n, -1, dtype=np.int64), value_blob, value_lengths, np.zeros(n, dtype=np.int64), None
    )
    return _assemble_batch(
        records,
        n,
        base_offset,
        timestamp_ms,
        timestamp_ms,
        compression=compression,
        timestamp_type=timestamp_type,
        leader_epoch=leader_epoch,
    )


def _varint_size(value: int) -> int:
    out = bytearray()
    _write_varint(out, value)
    return len(out)


def single_value_batch_size(value_size: int) -> int:
    """The exact size of the uncompressed batch :func:`encode_values` makes of one value of
    ``value_size`` bytes: the batch header, then one record (attributes, timestamp and offset deltas 0,
    no key, the value, no headers) behind its length varint."""
    body = 1 + 1 + 1 + _varint_size(-1) + _varint_size(value_size) + value_size + _varint_size(0)
    return V2_HEADER_SIZE + _varint_size(body) + body


def encode_batch(
    records: Sequence[ProducerRecord],
    base_offset: int,
    *,
    now_ms: int,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    leader_epoch: int = 0,
) -> bytes:
    """One v2 batch holding ``records`` at offsets base_offset.. (keys, headers, timestamps kept).

    With LogAppendTime every record gets ``now_ms``, as a broker stamps them.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    n = len(records)
    for r in records:
        if r.value is not None and not isinstance(r.value, bytes | bytearray | memoryview):
            raise TypeError(f"record value must be bytes or None, got {type(r.value).__name__}")
        if r.key is not None and not isinstance(r.key, bytes | bytearray | memoryview):
            raise TypeError(f"record key must be bytes or None, got {type(r.key).__name__}")
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamps = np.full(n, now_ms, dtype=np.int64)
    else:
        timestamps = np.fromiter(
            (now_ms if r.timestamp is None else r.timestamp for r in records), dtype=np.int64, count=n
        )
    base_ts = int(timestamps[0])
    key_blob, key_lengths = _concat_nullable([r.key for r in records])
    value_blob, value_lengths = _concat_nullable([r.value for r in records])
    header_blobs = [_header_blob(r.headers) for r in records] if any(r.headers for r in records) else None
    area = _records_area(key_blob, key_lengths, value_blob, value_lengths, timestamps - base_ts, header_blobs)
    return _assemble_batch(
        area,
        n,
        base_offset,
        base_ts,
        int(timestamps.max()),
        compression=compression,
        timestamp_type=timestamp_type,
        leader_epoch=leader_epoch,
    )


# ---------------------------------------------------------------------------------------------
# Decoding


def _batch_bytes(buf, header: BatchHeader) -> memoryview:
    return memoryview(buf)[header.position : header.position + header.size]


_VARINT_PAD = 10  # zero bytes after a records area, so vectorised varint reads never run off it


def _v2_records_area(buf, header: BatchHeader, path) -> bytearray:
    """The batch's records (decompressed), followed by ``_VARINT_PAD`` zero bytes."""
    raw = _batch_bytes(buf, header)[V2_HEADER_SIZE:]
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


@dataclass(slots=True)
class RecordColumns:
    """All user records of one batch as numpy columns.

    Keys and values are slices of ``data``: ``key_starts[i]`` / ``key_lengths[i]`` (length -1 = null).
    ``headers`` is None when no record has headers, else one tuple per record.
    """

    data: np.ndarray
    offsets: np.ndarray
    timestamps: np.ndarray
    timestamp_type: TimestampType
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray
    headers: list[tuple[Header, ...]] | None = field(default=None)

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    def record(self, i: int) -> Record:
        """Record ``i`` of the columns."""
        data = self.data
        kl, vl = int(self.key_lengths[i]), int(self.value_lengths[i])
        ks, vs = int(self.key_starts[i]), int(self.value_starts[i])
        return Record(
            int(self.offsets[i]),
            int(self.timestamps[i]),
            self.timestamp_type,
            None if kl < 0 else data[ks : ks + kl].tobytes(),
            None if vl < 0 else data[vs : vs + vl].tobytes(),
            self.headers[i] if self.headers is not None else (),
        )

    def select(self, mask: np.ndarray) -> RecordColumns:
        """The records where ``mask`` is true."""
        headers = None if self.headers is None else [h for h, m in zip(self.headers, mask, strict=True) if m]
        return RecordColumns(
            self.data,
            self.offsets[mask],
            self.timestamps[mask],
            self.timestamp_type,
            self.key_starts[mask],
            self.key_lengths[mask],
            self.value_starts[mask],
            self.value_lengths[mask],
            headers,
        )


@dataclass(slots=True)
class RecordBounds:
    """Where each record of an uncompressed v2 batch starts (its length prefix), relative to the
    batch's records area: file position = batch position + V2_HEADER_SIZE + start. 4 bytes a record.
    ``offset_deltas`` is None when the records are at offsets base..base+n-1, as every batch written by
    a producer is."""

    starts: np.ndarray
    area_size: int
    offset_deltas: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + (0 if self.offset_deltas is None else self.offset_deltas.nbytes)

    def index_of(self, header: BatchHeader, offset: int) -> int:
        """The record index holding ``offset``, or -1 (compaction may have left gaps)."""
        delta = offset - header.base_offset
        if self.offset_deltas is None:
            return delta if 0 <= delta < self.starts.shape[0] else -1
        i = int(np.searchsorted(self.offset_deltas, delta))
        return i if i < self.offset_deltas.shape[0] and int(self.offset_deltas[i]) == delta else -1

    def span(self, i: int) -> tuple[int, int]:
        """(start, end) of record i, length prefix included, within the records area."""
        end = int(self.starts[i + 1]) if i + 1 < self.starts.shape[0] else self.area_size
        return int(self.starts[i]), end


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


def _varint_bytes(body: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(body, pos, end)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise ValueError("field runs past the record")
    return body[pos : pos + length], pos + length


def _empty_columns(timestamp_type: TimestampType) -> RecordColumns:
    empty = np.zeros(0, dtype=np.int64)
    return RecordColumns(
        np.zeros(0, dtype=np.uint8), empty, empty, timestamp_type, empty, empty, empty, empty
    )


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
        header_count, sz = _gather_varints(arr, pos)
        headers = None
        if header_count.any():
            headers = []
            for i in range(count):
                parsed, end = _parse_headers(area, int(pos[i]), int(ends[i]))
                if end != ends[i]:
                    raise ValueError("record length does not match its fields")
                headers.append(parsed)
        elif ((pos + sz) != ends).any():
            raise ValueError("record length does not match its fields")
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


def _legacy_messages(buf, header: BatchHeader, path) -> list[DecodedRecord]:
    """The messages of a legacy entry; a compressed wrapper is unwrapped (one level, as Kafka does)."""
    entry = bytes(_batch_bytes(buf, header))
    try:
        outer = _parse_legacy_message(entry, 0)
    except ValueError as exc:
        raise CorruptRecordError(f"malformed legacy message: {exc}", path, header.position) from None
    codec = header.attributes & _ATTR_CODEC_MASK
    if codec == Compression.NONE:
        return [outer]
    if outer.value is None:
        raise CorruptRecordError("compressed legacy wrapper with a null value", path, header.position)
    try:
        inner_bytes = decompress(codec, outer.value)
    except CompressionError as exc:
        raise CorruptRecordError(str(exc), path, header.position) from None
    inner: list[DecodedRecord] = []
    pos = 0
    try:
        while pos + LOG_OVERHEAD <= len(inner_bytes):
            (_, length) = _PREFIX.unpack_from(inner_bytes, pos)
            if pos + LOG_OVERHEAD + length > len(inner_bytes):
                break
            inner.append(_parse_legacy_message(inner_bytes, pos))
            pos += LOG_OVERHEAD + length
    except ValueError as exc:
        raise CorruptRecordError(
            f"malformed compressed legacy message: {exc}", path, header.position
        ) from None
    if not inner:
        raise CorruptRecordError("compressed legacy wrapper holds no messages", path, header.position)
    wrapper_offset = header.last_offset
    log_append = header.magic == 1 and header.attributes & _ATTR_TIMESTAMP_TYPE
    fixed = []
    last_inner = inner[-1].offset
    for message in inner:
        offset = message.offset
        # v1 inner offsets are relative (0..n-1); a wrapper offset of 0 is taken as-is (old librdkafka).
        if header.magic == 1 and wrapper_offset != 0:
            offset = wrapper_offset - last_inner + message.offset
        timestamp = outer.timestamp if log_append else message.timestamp
        fixed.append(
            DecodedRecord(
                offset, timestamp, message.key, message.value, (), -1, False, message.crc, message.is_valid
            )
        )
    return fixed


def _parse_legacy_message(data: bytes, pos: int) -> DecodedRecord:
    """One v0/v1 message at ``pos``; ValueError for any field that does not fit its declared size."""
    if pos + LOG_OVERHEAD + 6 > len(data):
        raise ValueError("message header runs past the data")
    offset, length, crc, magic, _attributes = _LEGACY_HEAD.unpack_from(data, pos)
    end = pos + LOG_OVERHEAD + length
    minimum = _LEGACY_MIN_SIZE + (8 if magic == 1 else 0)
    if end > len(data) or length < minimum:
        raise ValueError(f"message size {length} out of range")
    p = pos + 18
    timestamp = -1
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(data, p)
        p += 8
    elif magic != 0:
        raise ValueError(f"unexpected magic {magic} in a legacy message set")
    key, p = _legacy_bytes(data, p, end, "key")
    value, p = _legacy_bytes(data, p, end, "value")
    if p != end:
        raise ValueError("message fields do not fill its size")
    valid = (zlib.crc32(data[pos + 16 : end]) & 0xFFFFFFFF) == crc
    return DecodedRecord(offset, timestamp, key, value, (), -1, False, crc, valid)


def _legacy_bytes(data: bytes, p: int, end: int, what: str) -> tuple[bytes | None, int]:
    """An int32-length-prefixed field (-1 = null) that must end by ``end``."""
    if p + 4 > end:
        raise ValueError(f"{what} length runs past the message")
    (length,) = _INT32.unpack_from(data, p)
    p += 4
    if length < 0:
        return None, p
    if p + length > end:
        raise ValueError(f"{what} of {length} bytes runs past the message")
    return data[p : p + length], p + length


def decode_batch_all(buf, header: BatchHeader, *, path: str | Path | None = None) -> list[DecodedRecord]:
    """Every record of the batch, control records included (for dump and verification)."""
    if header.magic < 2:
        return _legacy_messages(buf, header, path)
    columns, deltas = _v2_columns(buf, header, path)
    data = columns.data
    seq = header.base_sequence
    out = []
    for i in range(len(columns)):
        kl, vl = int(columns.key_lengths[i]), int(columns.value_lengths[i])
        ks, vs = int(columns.key_starts[i]), int(columns.value_starts[i])
        out.append(
            DecodedRecord(
                int(columns.offsets[i]),
                int(columns.timestamps[i]),
                None if kl < 0 else data[ks : ks + kl].tobytes(),
                None if vl < 0 else data[vs : vs + vl].tobytes(),
                columns.headers[i] if columns.headers is not None else (),
                -1 if seq < 0 else (seq + int(deltas[i])) % (2**31),
                header.is_control,
            )
        )
    return out


def decode_batch(buf, header: BatchHeader, *, path: str | Path | None = None) -> list[Record]:
    """The user records of one batch ([] for a control batch). Does not check the CRC."""
    if header.is_control:
        return []
    tstype = header.timestamp_type
    if header.magic < 2:
        return [
            Record(r.offset, r.timestamp, tstype, r.key, r.value, r.headers)
            for r in _legacy_messages(buf, header, path)
        ]
    columns, _ = _v2_columns(buf, header, path)
    data = columns.data.tobytes()
    headers = columns.headers or [()] * len(columns)
    return [
        Record(
            offset,
            timestamp,
            tstype,
            None if kl < 0 else data[ks : ks + kl],
            None if vl < 0 else data[vs : vs + vl],
            h,
        )
        for offset, timestamp, ks, kl, vs, vl, h in zip(
            columns.offsets.tolist(),
            columns.timestamps.tolist(),
            columns.key_starts.tolist(),
            columns.key_lengths.tolist(),
            columns.value_starts.tolist(),
            columns.value_lengths.tolist(),
            headers,
            strict=True,
        )
    ]


def decode_batch_columns(buf, header: BatchHeader, *, path: str | Path | None = None) -> RecordColumns:
    """The user records of one batch as numpy columns (empty for a control batch)."""
    if header.is_control:
        return _empty_columns(header.timestamp_type)
    if header.magic >= 2:
        return _v2_columns(buf, header, path)[0]
    records = _legacy_messages(buf, header, path)
    data = bytearray()
    columns = {name: np.empty(len(records), dtype=np.int64) for name in ("ks", "kl", "vs", "vl")}
    for i, r in enumerate(records):
        for name, blob in (("k", r.key), ("v", r.value)):
            columns[name + "s"][i] = len(data)
            columns[name + "l"][i] = -1 if blob is None else len(blob)
            if blob is not None:
                data += blob
    return RecordColumns(
        np.frombuffer(bytes(data), dtype=np.uint8),
        np.fromiter((r.offset for r in records), dtype=np.int64, count=len(records)),
        np.fromiter((r.timestamp for r in records), dtype=np.int64, count=len(records)),
        header.timestamp_type,
        columns["ks"],
        columns["kl"],
        columns["vs"],
        columns["vl"],
    )


def gather_slices(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``data[starts[i]:starts[i]+lengths[i]]`` (null = -1 counts as empty).

    Returns (offsets with n+1 entries, int64; the joined bytes as uint8) - the layout of an Arrow
    binary column.
    """
    n = lengths.shape[0]
    sizes = np.maximum(lengths, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets, np.zeros(0, dtype=np.uint8)
    index = np.repeat(starts - offsets[:-1], sizes) + np.arange(total, dtype=np.int64)
    return offsets, data[index]
