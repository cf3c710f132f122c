"""A client's record batch checked and placed as a leader does (Kafka's LogValidator): one whole v2
batch, its CRC, every record's framing (decompressed when compressed), sequential offset deltas; then
the log's offsets and, for ``LogAppendTime``, the log's time with a new CRC. The records themselves
are kept as sent, compressed or not.
"""

from __future__ import annotations

import struct

from .errors import CorruptRecordError, InvalidRecordError
from .records import BatchHeader, read_batch_header, records_area, validate_batch
from .records.batch_header import ATTR_TIMESTAMP_TYPE, stamp_v2_crc
from .records.scan import scan_bounds

__all__ = ["check_client_batch", "place_batch"]

_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_LEADER_EPOCH_AT = 12
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35
_HEADER_END = 61


def check_client_batch(batch: bytes, where: str) -> BatchHeader:
    """The header of ``batch`` when it is exactly one sound v2 data batch a client may send.

    CorruptRecordError for a torn batch, a bad CRC or malformed records; InvalidRecordError for
    anything else Kafka refuses from a producer (legacy magic, control batches, transactional
    batches here, no records, offset deltas other than 0..n-1, trailing bytes). ``where`` names the
    log in messages.
    """
    header = read_batch_header(batch, 0, path=where)
    if header is None:
        raise CorruptRecordError(f"{len(batch)} bytes hold no whole record batch", where, 0)
    if header.magic != 2:
        raise InvalidRecordError(f"{where}: record batch magic {header.magic}: only v2 batches are accepted")
    if header.size != len(batch):
        raise InvalidRecordError(f"{where}: a produce request must hold exactly one batch per partition")
    validate_batch(batch, header, path=where)
    if header.is_control:
        raise InvalidRecordError(f"{where}: clients may not write control batches")
    if header.is_transactional:
        raise InvalidRecordError(f"{where}: transactional batches are not supported")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"{where}: invalid sequence number {header.base_sequence} in a batch of producer "
            f"{header.producer_id}"
        )
    count = header.records_count
    if count <= 0:
        raise InvalidRecordError(f"{where}: a record batch without records")
    if header.last_offset - header.base_offset != count - 1:
        raise InvalidRecordError(f"{where}: lastOffsetDelta does not match the record count {count}")
    area = records_area(batch, header, where)
    _, deltas = scan_bounds(area, count, where, 0)
    if deltas is not None:
        raise InvalidRecordError(f"{where}: record offset deltas are not 0..{count - 1}")
    return header


def place_batch(batch: bytes, base_offset: int, *, log_append_time_ms: int | None = None) -> bytes:
    """``batch`` at ``base_offset`` with partition leader epoch 0 (neither is under the CRC); with
    ``log_append_time_ms`` its timestamp type is LogAppendTime, its maxTimestamp the log's time (what
    readers then give every record, as Kafka's setMaxTimestamp does) and its CRC computed again."""
    out = bytearray(batch)
    _BASE_OFFSET.pack_into(out, 0, base_offset)
    _LEADER_EPOCH.pack_into(out, _LEADER_EPOCH_AT, 0)
    if log_append_time_ms is not None:
        (attributes,) = _ATTRIBUTES.unpack_from(out, _ATTRIBUTES_AT)
        _ATTRIBUTES.pack_into(out, _ATTRIBUTES_AT, attributes | ATTR_TIMESTAMP_TYPE)
        _MAX_TIMESTAMP.pack_into(out, _MAX_TIMESTAMP_AT, log_append_time_ms)
        head = bytearray(out[:_HEADER_END])
        stamp_v2_crc(head, bytes(out[_HEADER_END:]))
        out[:_HEADER_END] = head
    return bytes(out)
