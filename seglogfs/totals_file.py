"""``.seglogfs.totals``: a log's :class:`~seglogfs.segment_totals.SegmentTotals`, kept across clean restarts.

Written atomically when a writable log closes (:func:`save`), read when a log opens (:func:`load`).
A hidden file in the log dir, as ``.seglogfs.lock``: a broker's loader looks only at the suffixes it
knows (``.log``, ``.index``...), and the mount's ``segments/`` lists no dot-file.

Layout: the magic line, a little-endian u32 length and that many bytes of JSON (one entry per segment:
base offset, the ``.log``'s size and mtime_ns, the frontier, the checkpoint count), then per segment
its four checkpoint arrays (int64), then the zlib CRC-32 of everything before it. A file that fails
its checksum or does not parse is ignored whole; an entry whose segment's ``.log`` is not the same
(base offset, size, mtime) is ignored: those segments are counted again, never trusted blindly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .checkpoint import atomic_write
from .segment_totals import Point

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = ["TOTALS_FILE", "load", "save"]

log = logging.getLogger(__name__)

TOTALS_FILE = ".seglogfs.totals"
_MAGIC = b"seglogfs totals 1\n"


def _native(a: array) -> bytes:
    if sys.byteorder != "little":
        a = array("q", a)
        a.byteswap()
    return a.tobytes()


def _identity(segment: LogSegment) -> tuple[int, int]:
    """(size, mtime_ns) of the segment's .log as it is on disk."""
    st = os.stat(segment.log_path)
    return st.st_size, st.st_mtime_ns


def save(directory: Path, segments: Sequence[LogSegment]) -> None:
    """Write the totals of ``segments`` to ``directory``'s totals file (atomically)."""
    entries, blobs = [], []
    for segment in segments:
        frontier, since_batches, since_bytes, arrays = segment.totals.state()
        try:
            size, mtime_ns = _identity(segment)
        except FileNotFoundError:
            continue
        if frontier.position > size:
            continue
        entries.append({
            "base": segment.base_offset, "size": size, "mtime_ns": mtime_ns, "frontier": list(frontier),
            "since": [since_batches, since_bytes], "checkpoints": len(arrays[0]),
        })
        blobs.extend(_native(a) for a in arrays)
    header = json.dumps({"segments": entries}, separators=(",", ":")).encode()
    body = b"".join([_MAGIC, struct.pack("<I", len(header)), header, *blobs])
    path = Path(directory) / TOTALS_FILE
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path.with_name(path.name + ".tmp"))  # a crash's leftover (atomic_write creates it anew)
    atomic_write(path, body + struct.pack("<I", zlib.crc32(body)))


def _parse(data: bytes) -> list[tuple[dict, list[array]]]:
    """The entries and arrays of a totals file; ValueError when it is damaged."""
    if len(data) < len(_MAGIC) + 8 or not data.startswith(_MAGIC):
        raise ValueError("not a totals file")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch")
    at = len(_MAGIC)
    (length,) = struct.unpack_from("<I", body, at)
    at += 4
    entries = json.loads(body[at : at + length])["segments"]
    at += length
    out = []
    for entry in entries:
        n = int(entry["checkpoints"])
        arrays = []
        for _ in range(4):
            a = array("q")
            a.frombytes(body[at : at + 8 * n])
            if sys.byteorder != "little":
                a.byteswap()
            if len(a) != n:
                raise ValueError("truncated arrays")
            arrays.append(a)
            at += 8 * n
        out.append((entry, arrays))
    if at != len(body):
        raise ValueError("trailing bytes")
    return out


def _valid(entry: dict, arrays: list[array], segment: LogSegment, identity: tuple[int, int]) -> bool:
    frontier = entry["frontier"]
    positions = arrays[0]
    return (
        (entry["size"], entry["mtime_ns"]) == identity
        and len(positions) >= 1
        and positions[0] == 0
        and arrays[1][0] == segment.base_offset
        and all(positions[i] < positions[i + 1] for i in range(len(positions) - 1))
        and positions[-1] <= frontier[0] <= identity[0]
    )


def load(directory: Path, segments: Sequence[LogSegment]) -> int:
    """Give ``segments`` the totals the file holds for them (those whose .log is unchanged); the
    number of segments restored. A missing file restores none; a damaged one is logged, none."""
    path = Path(directory) / TOTALS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        log.warning("%s: unreadable (%s): the view totals are counted again", path, exc)
        return 0
    try:
        parsed = _parse(data)
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        log.warning("%s: damaged (%s): the view totals are counted again", path, exc)
        return 0
    by_base = {int(entry["base"]): (entry, arrays) for entry, arrays in parsed}
    restored = 0
    for segment in segments:
        found = by_base.get(segment.base_offset)
        if found is None:
            continue
        entry, arrays = found
        try:
            identity = _identity(segment)
        except FileNotFoundError:
            continue
        if not _valid(entry, arrays, segment, identity):
            continue
        since = entry["since"]
        segment.totals.restore(Point(*map(int, entry["frontier"])), (int(since[0]), int(since[1])), arrays)
        restored += 1
    return restored
