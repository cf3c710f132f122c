"""The C records scanner (``_scan.c``) behind the codec's hot paths, with its errors turned into
:class:`CorruptRecordError` naming the file and the batch's position.

Each function takes a v2 *records area*: the bytes after a batch's 61-byte header (a memoryview of
the batch, read in place) or their decompressed form, and the batch's record count. Every record is
parsed whole (lengths, varints, keys, values, headers, checked against the area's and the record's
end), and the records must fill the area exactly.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np

from ..errors import CorruptRecordError
from .types import ByteSource, Where

try:
    from . import _scan
except ImportError as exc:  # required: there is no pure-Python fallback
    raise ImportError(
        f"seglogfs.records._scan (the C records scanner) is not built or does not load ({exc}): "
        "run scripts/install.sh"
    ) from exc

#: one record of a batch read from its file (see _scan.c): decode.read_record_in_batch calls it
#: directly, as the by-offset read's hot path, and maps MalformedRecords itself
record_in_batch = _scan.record_in_batch
MalformedRecords = _scan.MalformedRecords

# The rows of scan_area's result (see _scan.c): one row a field, one column a record.
START, END, TS_DELTA, OFFSET_DELTA, KEY_START, KEY_LENGTH, VALUE_START, VALUE_LENGTH = range(8)
HEADERS_START, HEADER_COUNT = 8, 9
ROWS = _scan.ROWS

# The smallest record: length, attributes, timestamp delta, offset delta, key length, value length and
# header count, one byte each. A count above len(area) // this is a lie, told before any allocation.
MIN_RECORD_SIZE = 7


def _malformed(exc: ValueError, path: Where, position: int) -> CorruptRecordError:
    return CorruptRecordError(f"malformed record in batch: {exc}", path, position)


def _check_end(end: int, area: ByteSource, count: int, path: Where, position: int) -> None:
    left = len(area) - end
    if left:
        raise CorruptRecordError(f"{left} bytes left over after {count} records", path, position)


def _check_count(area: ByteSource, count: int, path: Where, position: int) -> None:
    """A record count the area can hold, so that arrays sized by it stay within the area's size (a
    60-byte batch claiming 2**31 - 1 records must not allocate 160 GiB)."""
    if count > len(area) // MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"malformed record in batch: {count} records cannot fit in {len(area)} bytes of records "
            f"(a record takes at least {MIN_RECORD_SIZE})",
            path,
            position,
        )


def scan_area(area: ByteSource, count: int, path: Where, position: int) -> np.ndarray:
    """Every field of every record: int64 array (ROWS, count), rows START..HEADER_COUNT (a length of
    -1 is null; positions are within ``area``)."""
    _check_count(area, count, path, position)
    out = np.empty((ROWS, count), dtype=np.int64)
    try:
        end = _scan.scan(area, count, out)
    except _scan.MalformedRecords as exc:
        raise _malformed(exc, path, position) from None
    _check_end(end, area, count, path, position)
    return out


def scan_bounds(
    area: ByteSource, count: int, path: Where, position: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """(each record's start within ``area``, int32; the offset deltas, int64, or None when every
    delta equals its record's index), every record checked as by :func:`scan_area`."""
    _check_count(area, count, path, position)
    starts = np.empty(count, dtype=np.int32)
    deltas = np.empty(count, dtype=np.int64)
    try:
        end, identity = _scan.bounds(area, count, starts, deltas)
    except _scan.MalformedRecords as exc:
        raise _malformed(exc, path, position) from None
    _check_end(end, area, count, path, position)
    return starts, None if identity else deltas


def scan_record(
    data: ByteSource, path: Where, position: int
) -> tuple[int, int, int, int, int, int, int, int]:
    """The one record ``data`` holds (length prefix included): (ts delta, offset delta, key start, key
    length, value start, value length, headers start, header count)."""
    try:
        return _scan.record(data)
    except _scan.MalformedRecords as exc:
        raise _malformed(exc, path, position) from None


def values_size(area: ByteSource, count: int, min_delta: int, path: Where, position: int) -> int:
    """``len(join_values(...))`` without building it."""
    return _values(area, count, min_delta, False, path, position)


def join_values(area: ByteSource, count: int, min_delta: int, path: Where, position: int) -> bytes:
    """The values of the records at offset delta ``min_delta`` and after, each followed by ``\\n`` (a
    null value is an empty line)."""
    return _values(area, count, min_delta, True, path, position)


@overload
def _values(
    area: ByteSource, count: int, min_delta: int, build: Literal[True], path: Where, position: int
) -> bytes: ...
@overload
def _values(
    area: ByteSource, count: int, min_delta: int, build: Literal[False], path: Where, position: int
) -> int: ...
def _values(
    area: ByteSource, count: int, min_delta: int, build: bool, path: Where, position: int
) -> bytes | int:
    try:
        result, end = _scan.values(area, count, min_delta, build)
    except _scan.MalformedRecords as exc:
        raise _malformed(exc, path, position) from None
    _check_end(end, area, count, path, position)
    return result


def plain_jsonl(
    area: ByteSource, count: int, min_delta: int, stamps: tuple[int, int, int | None, str], build: bool,
    path: Where, position: int,
) -> bytes | int | None:
    """The ``records.jsonl`` lines (or their length when not ``build``) of the records at offset delta
    ``min_delta`` and after, when every one is plain (no key, no headers, a printable ASCII value);
    None otherwise. ``stamps``: (base offset, base timestamp, the timestamp of every record or None,
    the timestamp type's name)."""
    try:
        lines, end = _scan.plain_jsonl(area, count, min_delta, *stamps, build)
    except _scan.MalformedRecords as exc:
        raise _malformed(exc, path, position) from None
    _check_end(end, area, count, path, position)
    return lines
