"""``.<base offset>.totals``: a segment's view totals (:mod:`seglogfs.segment_totals`), kept across restarts.

Written when a segment is sealed and counted (at roll, or when the background counter finishes it) and,
for the active segment and any not written yet, when a writable log closes cleanly (:func:`save`); read
when a log opens (:func:`load`). Never on a filesystem with less than 64 MiB free: there the bytes go to
what must be written, and the segments are counted again at the next start. Hidden files in the log dir,
as ``.seglogfs.lock``: a broker's loader looks only at the suffixes it knows (``.log``, ``.index``,
``.deleted``...), seglogfs's at files named by an offset, and the mount's ``segments/`` lists no dot-
file. A write is a new file renamed over the old one, not fsync'd: a file a crash left torn fails its
checksum and is counted again.

Layout: the magic line, a little-endian u32 length and that many bytes of JSON (base offset, the
``.log``'s inode, size and mtime_ns, the frontier, the checkpoint count, and, once counted, the bytes
read_committed hides in it with the checksum of the aborted ranges they were counted under:
:mod:`seglogfs.hidden_totals`), the four checkpoint arrays
(int64), then the zlib CRC-32 of everything before it. A file that fails its checksum or does not parse,
or whose ``.log`` is not the same file (inode, size, mtime), is ignored: that segment is counted again,
never trusted blindly.
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
from typing import TYPE_CHECKING, Any

from . import hidden_totals
from .segment_totals import Point

if TYPE_CHECKING:
    from .segment import LogSegment

__all__ = ["TOTALS_SUFFIX", "load", "save", "save_segment", "totals_path"]

log = logging.getLogger(__name__)

TOTALS_SUFFIX = ".totals"
MIN_FREE_BYTES = 64 << 20  # below this free on the log dir's filesystem, no totals file is written
_MAGIC = b"seglogfs segment totals 1\n"


def totals_path(directory: Path, base_offset: int) -> Path:
    """Where the totals of the segment at ``base_offset`` of the log in ``directory`` are kept."""
    return Path(directory) / f".{base_offset:020d}{TOTALS_SUFFIX}"


def _base_of(name: str) -> int | None:
    stem = name[1 : -len(TOTALS_SUFFIX)]
    if name.startswith(".") and name.endswith(TOTALS_SUFFIX) and stem.isascii() and stem.isdigit():
        return int(stem)
    return None


def _native(a: array[int]) -> bytes:
    if sys.byteorder != "little":
        a = array("q", a)
        a.byteswap()
    return a.tobytes()


def _identity(segment: LogSegment) -> tuple[int, int, int]:
    """(inode, size, mtime_ns) of the segment's .log as it is on disk."""
    st = os.stat(segment.log_path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _room(directory: Path) -> bool:
    """Whether the filesystem has room to spare: the totals are an optimisation, and on a nearly full
    disk the bytes go to what must be written (checkpoints, the clean-shutdown marker)."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize >= MIN_FREE_BYTES


def save_segment(segment: LogSegment) -> None:
    """Write the totals of ``segment`` beside it (replacing the file a rename at a time); nothing when
    the filesystem has less than :data:`MIN_FREE_BYTES` free."""
    if not _room(segment.dir):
        return
    frontier, since_batches, since_bytes, arrays = segment.totals.state()
    ino, size, mtime_ns = _identity(segment)
    if frontier.position > size:
        return
    entry = {
        "base": segment.base_offset, "ino": ino, "size": size, "mtime_ns": mtime_ns,
        "frontier": list(frontier), "since": [since_batches, since_bytes], "checkpoints": len(arrays[0]),
    }
    hidden = hidden_totals.kept_total(segment)
    if hidden is not None:
        entry["hidden"] = [hidden.values, hidden.jsonl, hidden.upto, hidden.ranges]
    header = json.dumps(entry, separators=(",", ":")).encode()
    body = b"".join([_MAGIC, struct.pack("<I", len(header)), header, *map(_native, arrays)])
    path = totals_path(segment.dir, segment.base_offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(body + struct.pack("<I", zlib.crc32(body)))
    os.replace(tmp, path)
    segment.totals.saved = True


def save(directory: Path, segments: Sequence[LogSegment]) -> None:
    """At a clean close: write the totals of ``segments`` not written yet (the active one always), and
    remove the files of segments the log no longer has."""
    live = {segment.base_offset for segment in segments}
    for segment in segments if _room(directory) else ():
        if not segment.totals.saved or segment is segments[-1]:
            with contextlib.suppress(FileNotFoundError):
                save_segment(segment)
    with os.scandir(directory) as entries:
        stale = [e.path for e in entries if (base := _base_of(e.name)) is not None and base not in live]
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _parse(data: bytes) -> tuple[dict[str, Any], list[array[int]]]:
    """The entry and arrays of a totals file; ValueError when it is damaged."""
    if len(data) < len(_MAGIC) + 8 or not data.startswith(_MAGIC):
        raise ValueError("not a totals file")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch")
    at = len(_MAGIC)
    (length,) = struct.unpack_from("<I", body, at)
    at += 4
    entry = json.loads(body[at : at + length])
    at += length
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
    if at != len(body):
        raise ValueError("trailing bytes")
    return entry, arrays


def _valid(
    entry: dict[str, Any], arrays: list[array[int]], segment: LogSegment, identity: tuple[int, int, int]
) -> bool:
    frontier = entry["frontier"]
    positions = arrays[0]
    return (
        (entry["ino"], entry["size"], entry["mtime_ns"]) == identity
        and entry["base"] == segment.base_offset
        and len(positions) >= 1
        and positions[0] == 0
        and arrays[1][0] == segment.base_offset
        and all(positions[i] < positions[i + 1] for i in range(len(positions) - 1))
        and positions[-1] <= frontier[0] <= identity[1]
    )


def load(segments: Sequence[LogSegment]) -> int:
    """Give ``segments`` the totals their files hold (those whose .log is unchanged); the number of
    segments restored. A missing file restores nothing; a damaged or stale one is logged, ignored."""
    restored = 0
    for segment in segments:
        path = totals_path(segment.dir, segment.base_offset)
        try:
            data = path.read_bytes()
            identity = _identity(segment)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("%s: unreadable (%s): the segment's view totals are counted again", path, exc)
            continue
        try:
            entry, arrays = _parse(data)
            valid = _valid(entry, arrays, segment, identity)
        except (ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
            log.warning("%s: damaged (%s): the segment's view totals are counted again", path, exc)
            continue
        if not valid:
            log.info("%s: not of the segment's current file: its view totals are counted again", path)
            continue
        since = entry["since"]
        segment.totals.restore(Point(*map(int, entry["frontier"])), (int(since[0]), int(since[1])), arrays)
        hidden = entry.get("hidden")
        if isinstance(hidden, list) and len(hidden) == 4 and all(type(n) is int for n in hidden):
            hidden_totals.restore(segment, hidden_totals.HiddenTotal(*hidden))
        segment.totals.saved = True
        restored += 1
    return restored
