"""One batch seen from its header: the v2 RecordBatch header and the legacy (v0/v1) message header,
field accessors, the shallow scan of a file's batches, and the CRC check.

Layout facts are in docs/kafka-format.md section 1. Code outside the codec reads header fields through
:class:`BatchHeader` and the helpers here, never by byte offset.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from ..errors import CorruptRecordError
from .types import ByteSource, TimestampType, Where

# Names without a leading underscore are shared with the codec's other modules; seglogfs.records
# re-exports the few that code outside the codec needs.
LOG_OVERHEAD = 12  # baseOffset int64 + length int32, before every batch or legacy entry
V2_HEADER_SIZE = 61  # RecordBatch v2 header, up to the first record
MAGIC_OFFSET = 16  # the magic byte, after baseOffset 8, length 4, partitionLeaderEpoch/crc 4
HEADER_SIZE_UP_TO_MAGIC = 17  # enough to see the magic byte (Kafka's FileLogInputStream name)
LEGACY_MIN_SIZE = 14  # smallest legacy message after the 12-byte offset/size prefix (v0)
LEGACY_V1_TIMESTAMP_AT = 18  # a v1 message's timestamp, after offset, size, crc, magic, attributes
_CRC_START = 21  # v2 CRC covers attributes through the end
_CRC_AT = 17  # the v2 crc field, after baseOffset 8, length 4, leaderEpoch 4, magic 1

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40

V2_HEADER = struct.Struct(">qiibIhiqqqhii")
ENTRY_PREFIX = struct.Struct(">qi")  # baseOffset, length: LOG_OVERHEAD bytes
LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
INT64 = struct.Struct(">q")
# after baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4,
# baseTimestamp 8
_MAX_TIMESTAMP_AT = 35
_CRC = struct.Struct(">I")


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
        """The offset after the batch's last one."""
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
        """The position just after the batch (where the next one starts)."""
        return self.position + self.size

    @property
    def compression(self) -> int:
        """The codec id (a :class:`~seglogfs.compression.Compression` value)."""
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        """NO_TIMESTAMP for v0, else CreateTime or LogAppendTime from the attributes."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """The v2 isTransactional attribute."""
        return self.magic >= 2 and bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """The v2 isControlBatch attribute (transaction markers, KRaft control records)."""
        return self.magic >= 2 and bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        """The v2 hasDeleteHorizonMs attribute (set by compaction)."""
        return self.magic >= 2 and bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def last_sequence(self) -> int:
        """Kafka's lastSequence: base + delta, wrapping at Int.MAX; -1 without a sequence."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + (self.last_offset - self.base_offset)) % (2**31)


# ---------------------------------------------------------------------------------------------
# Field accessors on encoded bytes


def batch_max_timestamp(batch: bytes | memoryview) -> int:
    """The maxTimestamp field of an encoded v2 batch (its bytes from the baseOffset on)."""
    timestamp: int = INT64.unpack_from(batch, _MAX_TIMESTAMP_AT)[0]
    return timestamp


def unchecked_v2_header(buf: ByteSource, position: int = 0, *, base_position: int = 0) -> BatchHeader:
    """The fields of the v2 header at ``position`` of ``buf`` (``V2_HEADER_SIZE`` bytes) exactly as
    stored, nothing checked: for reading what a damaged batch's header claims. (``read_batch_header``
    repeats these few lines inline: a call here cost the header scan a fifth of its speed.)"""
    fields = V2_HEADER.unpack_from(buf, position)
    base_offset, length, epoch, magic, crc, attributes, last_delta = fields[:7]
    # then baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount:
    # BatchHeader's last six fields, in that order
    return BatchHeader(
        base_position + position,
        base_offset,
        base_offset + last_delta,
        length + LOG_OVERHEAD,
        magic,
        crc,
        attributes & 0xFFFF,
        epoch,
        *fields[7:],
    )


def batch_bytes(buf: ByteSource, header: BatchHeader) -> memoryview:
    """The bytes of the batch ``header`` describes, within ``buf``; no copy."""
    return memoryview(buf)[header.position : header.position + header.size]


def stamp_v2_crc(header: bytearray, records: bytes) -> None:
    """Store in an encoded v2 ``header`` the CRC-32C of its fields from the attributes on and of the
    ``records`` that will follow it."""
    _CRC.pack_into(header, _CRC_AT, crc32c(records, crc32c(memoryview(header)[_CRC_START:])))


# ---------------------------------------------------------------------------------------------
# Shallow scanning


def read_batch_header(
    buf: ByteSource, position: int, end: int | None = None, *, path: Where = None, base_position: int = 0
) -> BatchHeader | None:
    """The batch starting at ``position`` of ``buf``, or None when only a torn tail remains there.

    ``buf`` is any buffer (bytes, memoryview, mmap); the header reports ``base_position + position``
    (the position in the file ``buf`` was read from). Raises CorruptRecordError for a size field no
    valid batch can have, as Kafka's FileLogInputStream does.
    """
    where = base_position + position
    if end is None:
        end = len(buf)
    if end - position < HEADER_SIZE_UP_TO_MAGIC:
        return None
    base_offset, length = ENTRY_PREFIX.unpack_from(buf, position)
    magic = buf[position + MAGIC_OFFSET]
    if length < LEGACY_MIN_SIZE:
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
            V2_HEADER.unpack_from(buf, position)
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
    return _legacy_header(buf, position, where, path)


def _legacy_header(buf: ByteSource, position: int, where: int, path: str | Path | None) -> BatchHeader:
    """The header of the legacy (v0/v1) message at ``position``, whose size field is plausible."""
    base_offset, length, crc, magic, attributes = LEGACY_HEAD.unpack_from(buf, position)
    timestamp = -1
    if magic == 1:
        if length < LEGACY_MIN_SIZE + 8:
            raise CorruptRecordError(f"v1 message size {length} is too small", path, where)
        (timestamp,) = INT64.unpack_from(buf, position + LEGACY_V1_TIMESTAMP_AT)
    return BatchHeader(
        where,
        base_offset,
        base_offset,
        length + LOG_OVERHEAD,
        magic,
        crc,
        attributes & 0xFF,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
    )


def iter_batch_headers(
    buf: ByteSource, start: int = 0, end: int | None = None, *, path: Where = None, base_position: int = 0
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


def validate_batch(buf: ByteSource, header: BatchHeader, *, path: str | Path | None = None) -> None:
    """Raise CorruptRecordError unless the batch's CRC matches (CRC-32C for v2, CRC-32 for legacy)."""
    start = header.position
    view = memoryview(buf)[start : start + header.size]
    if header.magic >= 2:
        actual = crc32c(view[_CRC_START:])
        if header.records_count < 0:
            raise CorruptRecordError(f"negative record count {header.records_count}", path, start)
    else:
        actual = zlib.crc32(view[MAGIC_OFFSET:]) & 0xFFFFFFFF
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has CRC {actual} but its header says {header.crc}",
            path,
            start,
        )
