"""Encoding: RecordBatch v2 built a whole batch at a time.

``encode_values``/``encode_batch`` build a batch with numpy scatter writes instead of a Python loop per
record. The varint writers live here, next to their only users (the decoder has its own readers: one
shared varint module doubled the back-and-forth between files on the read path).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..compression import Compression, compress
from .batch_header import (
    ATTR_CODEC_MASK,
    ATTR_TIMESTAMP_TYPE,
    LOG_OVERHEAD,
    V2_HEADER,
    V2_HEADER_SIZE,
    stamp_v2_crc,
)
from .types import Header, ProducerRecord, TimestampType

# ---------------------------------------------------------------------------------------------
# Varint writers (protobuf zig-zag, 7 bits a byte, least significant group first)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _write_varint(out: bytearray, value: int) -> None:
    v = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _varint_size(value: int) -> int:
    out = bytearray()
    _write_varint(out, value)
    return len(out)


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


# ---------------------------------------------------------------------------------------------
# The records area


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
    pairs: KeyedValues | None = None,
) -> bytes:
    """The concatenated v2 records (uncompressed), built with one numpy scatter per field. With
    ``pairs`` the keys and values are its slices (``key_blob`` and ``value_blob`` unused)."""
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
    if pairs is None:
        _copy_slices(out, key_pos, key_n, key_blob)
        _copy_slices(out, value_pos, value_n, value_blob)
    else:  # keys and values in one gather: they alternate in the output as in the buffer
        dest = np.column_stack((key_pos, value_pos)).ravel()
        lengths = np.column_stack((key_n, value_n)).ravel()
        src = np.column_stack((pairs.key_starts, pairs.value_starts)).ravel()
        blob = np.frombuffer(pairs.blob, dtype=np.uint8)
        if int(lengths.sum()) != len(blob):  # separators between them: leave those out
            blob = blob[_slices_mask(len(blob), src, lengths)]
        out[_slices_mask(len(out), dest, lengths)] = blob
    if header_blobs is not None:
        _copy_slices(out, pos, hdr_n, b"".join(header_blobs))
    return out.tobytes()


def _copy_slices(out: np.ndarray, dest: np.ndarray, lengths: np.ndarray, blob: bytes) -> None:
    """Copy consecutive slices of ``blob`` (lengths given) to ``out[dest[i]:]`` (``dest`` increasing,
    the slices apart: a varint always separates two of one kind)."""
    if len(blob) == 0:
        return
    out[_slices_mask(len(out), dest, lengths)] = np.frombuffer(blob, dtype=np.uint8)


def _slices_mask(size: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The mask of ``size`` bytes that is True on the slices ``[starts[i], starts[i] + lengths[i])``
    (increasing, not overlapping): one ``np.repeat`` of alternating gap/slice runs (a cumulative sum of +1/-1
    marks costs ten times more: numpy does not vectorise small-integer sums)."""
    ends = starts + lengths
    runs = np.empty(2 * len(starts) + 1, dtype=np.int64)
    runs[0] = starts[0] if len(starts) else size
    runs[2:-1:2] = starts[1:] - ends[:-1]
    runs[1::2] = lengths
    runs[-1] = size - ends[-1] if len(starts) else 0
    flags = np.zeros(len(runs), dtype=bool)
    flags[1::2] = True
    return np.repeat(flags, runs)


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


# ---------------------------------------------------------------------------------------------
# Whole batches


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
    attributes = int(compression) & ATTR_CODEC_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if compression != Compression.NONE:
        records = compress(compression, records)
    length = V2_HEADER_SIZE - LOG_OVERHEAD + len(records)
    header = bytearray(
        V2_HEADER.pack(
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
    stamp_v2_crc(header, records)
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
    return _assemble_batch(records, n, base_offset, timestamp_ms, timestamp_ms, compression=compression,
                           timestamp_type=timestamp_type, leader_epoch=leader_epoch)  # fmt: skip


def encode_keyed_values(
    pairs: KeyedValues,
    base_offset: int,
    timestamp_ms: int,
    *,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    leader_epoch: int = 0,
) -> bytes:
    """One v2 batch of the ``(key, value)`` records ``pairs`` (neither null, no headers) sharing one
    timestamp: the keyed append fast path (what :func:`encode_batch` makes of the same records)."""
    n = len(pairs)
    if not n:
        raise ValueError("a batch needs at least one record")
    records = _records_area(
        b"", pairs.key_lengths, b"", pairs.value_lengths, np.zeros(n, dtype=np.int64), None, pairs
    )
    return _assemble_batch(records, n, base_offset, timestamp_ms, timestamp_ms, compression=compression,
                           timestamp_type=timestamp_type, leader_epoch=leader_epoch)  # fmt: skip


@dataclass(frozen=True, slots=True)
class KeyedValues:
    """Keyed records (neither key nor value null) stamped at append, as slices of one buffer: record
    ``i`` has the key ``blob[key_starts[i]:][:key_lengths[i]]`` and the value likewise, each key
    before its value and both before the next record's. What ``Log.append_split`` encodes with
    :func:`encode_keyed_values`, with no Python object per record."""

    blob: bytes
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray

    @classmethod
    def from_pairs(cls, keys: Sequence[bytes], values: Sequence[bytes]) -> KeyedValues:
        """``keys[i]`` with ``values[i]``."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        key_lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        value_lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        key_starts = np.cumsum(key_lengths + value_lengths) - key_lengths - value_lengths
        blob = b"".join(itertools.chain.from_iterable(zip(keys, values, strict=True)))
        return cls(blob, key_starts, key_lengths, key_starts + key_lengths, value_lengths)

    @classmethod
    def split_lines(cls, text: bytes, separator: bytes) -> KeyedValues:
        """Each ``\\n``-separated line of ``text`` split at its FIRST ``separator``: the key before
        it, the value after it, found with numpy over the whole text at once (no object per line).
        :class:`NoSeparatorError` names the first line without one."""
        if not separator:
            raise ValueError("the key separator is empty")
        data = np.frombuffer(text, dtype=np.uint8)
        newlines = np.flatnonzero(data == _NEWLINE)
        starts = np.concatenate(([0], newlines + 1))
        ends = np.concatenate((newlines, [len(text)]))
        found = _first_matches(data, separator, starts, ends)
        missing = np.flatnonzero(found < 0)
        if len(missing):
            raise NoSeparatorError(int(missing[0]))
        value_starts = found + len(separator)
        return cls(text, starts, found - starts, value_starts, ends - value_starts)

    def __len__(self) -> int:
        return len(self.key_lengths)

    def slice(self, start: int, end: int) -> KeyedValues:
        """Records ``start`` to ``end`` (exclusive), over the part of the buffer they cover."""
        if start >= end:
            return KeyedValues(b"", *(np.zeros(0, dtype=np.int64) for _ in range(4)))
        low = int(self.key_starts[start])
        high = int(self.value_starts[end - 1] + self.value_lengths[end - 1])
        return KeyedValues(
            self.blob[low:high],
            self.key_starts[start:end] - low,
            self.key_lengths[start:end],
            self.value_starts[start:end] - low,
            self.value_lengths[start:end],
        )


_NEWLINE = 0x0A


class NoSeparatorError(ValueError):
    """A line holds no key separator (``line``: its index)."""

    def __init__(self, line: int) -> None:
        super().__init__(f"line {line} has no key separator")
        self.line = line


def _first_matches(data: np.ndarray, pattern: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each range ``data[starts[i]:ends[i]]`` (increasing, not overlapping), the position of the
    first ``pattern`` wholly inside it, -1 where there is none."""
    k = len(pattern)
    span = len(data) - k + 1
    if span <= 0 or not len(starts):
        return np.full(len(starts), -1, dtype=np.int64)
    hit = data[:span] == pattern[0]
    for j in range(1, k):
        hit &= data[j : span + j] == pattern[j]
    candidates = np.flatnonzero(hit)
    if not len(candidates):
        return np.full(len(starts), -1, dtype=np.int64)
    # The first candidate at or after each start: if it runs past the range's end, the range has none.
    first = candidates[np.minimum(np.searchsorted(candidates, starts), len(candidates) - 1)]
    return np.where((first >= starts) & (first + k <= ends), first, -1)


def single_value_batch_size(value_size: int) -> int:
    """The exact size of the uncompressed batch :func:`encode_values` makes of one value of
    ``value_size`` bytes: the batch header, then one record (attributes, timestamp and offset deltas 0,
    no key, the value, no headers) behind its length varint."""
    body = 1 + 1 + 1 + _varint_size(-1) + _varint_size(value_size) + value_size + _varint_size(0)
    return V2_HEADER_SIZE + _varint_size(body) + body


def _check_record_types(records: Sequence[ProducerRecord]) -> None:
    for r in records:
        if r.value is not None and not isinstance(r.value, bytes | bytearray | memoryview):
            raise TypeError(f"record value must be bytes or None, got {type(r.value).__name__}")
        if r.key is not None and not isinstance(r.key, bytes | bytearray | memoryview):
            raise TypeError(f"record key must be bytes or None, got {type(r.key).__name__}")


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
    _check_record_types(records)
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
