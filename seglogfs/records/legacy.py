"""Legacy message sets (magic v0 and v1), read only: one message per entry, or a compressed wrapper
message whose value holds the inner messages (unwrapped one level, as Kafka does)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ..compression import Compression, CompressionError, decompress
from ..errors import CorruptRecordError
from .batch_header import (
    ATTR_CODEC_MASK,
    ATTR_TIMESTAMP_TYPE,
    ENTRY_PREFIX,
    INT64,
    LEGACY_HEAD,
    LEGACY_MIN_SIZE,
    LEGACY_V1_TIMESTAMP_AT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    batch_bytes,
)
from .types import ByteSource, DecodedRecord, Record, RecordColumns, Where

_INT32 = struct.Struct(">i")


def legacy_messages(buf: ByteSource, header: BatchHeader, path: Where) -> list[DecodedRecord]:
    """The messages of a legacy entry; a compressed wrapper is unwrapped (one level, as Kafka does)."""
    entry = bytes(batch_bytes(buf, header))
    try:
        outer = _parse_legacy_message(entry, 0)
    except ValueError as exc:
        raise CorruptRecordError(f"malformed legacy message: {exc}", path, header.position) from None
    codec = header.attributes & ATTR_CODEC_MASK
    if codec == Compression.NONE:
        return [outer]
    if outer.value is None:
        raise CorruptRecordError("compressed legacy wrapper with a null value", path, header.position)
    try:
        inner_bytes = decompress(codec, outer.value)
    except CompressionError as exc:
        raise CorruptRecordError(str(exc), path, header.position) from None
    inner = _inner_messages(inner_bytes, header, path)
    wrapper_offset = header.last_offset
    log_append = header.magic == 1 and header.attributes & ATTR_TIMESTAMP_TYPE
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


def _inner_messages(inner_bytes: bytes, header: BatchHeader, path: Where) -> list[DecodedRecord]:
    """The complete messages inside a decompressed wrapper value (a torn last one is dropped)."""
    inner: list[DecodedRecord] = []
    pos = 0
    try:
        while pos + LOG_OVERHEAD <= len(inner_bytes):
            (_, length) = ENTRY_PREFIX.unpack_from(inner_bytes, pos)
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
    return inner


def _parse_legacy_message(data: bytes, pos: int) -> DecodedRecord:
    """One v0/v1 message at ``pos``; ValueError for any field that does not fit its declared size."""
    if pos + LOG_OVERHEAD + 6 > len(data):
        raise ValueError("message header runs past the data")
    offset, length, crc, magic, _attributes = LEGACY_HEAD.unpack_from(data, pos)
    end = pos + LOG_OVERHEAD + length
    minimum = LEGACY_MIN_SIZE + (8 if magic == 1 else 0)
    if end > len(data) or length < minimum:
        raise ValueError(f"message size {length} out of range")
    p = pos + LEGACY_V1_TIMESTAMP_AT
    timestamp = -1
    if magic == 1:
        (timestamp,) = INT64.unpack_from(data, p)
        p += 8
    elif magic != 0:
        raise ValueError(f"unexpected magic {magic} in a legacy message set")
    key, p = _legacy_bytes(data, p, end, "key")
    value, p = _legacy_bytes(data, p, end, "value")
    if p != end:
        raise ValueError("message fields do not fill its size")
    valid = (zlib.crc32(data[pos + MAGIC_OFFSET : end]) & 0xFFFFFFFF) == crc
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


def legacy_records(buf: ByteSource, header: BatchHeader, path: Where) -> list[Record]:
    """The messages of a legacy entry as user records."""
    tstype = header.timestamp_type
    return [
        Record(r.offset, r.timestamp, tstype, r.key, r.value, r.headers)
        for r in legacy_messages(buf, header, path)
    ]


def legacy_columns(buf: ByteSource, header: BatchHeader, path: Where) -> RecordColumns:
    """The messages of a legacy entry as record columns."""
    records = legacy_messages(buf, header, path)
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
