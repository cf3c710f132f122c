"""LogLoader: opening a log directory's segments, as Kafka's ``LogLoader`` does (docs/kafka-format.md
sections 5 and 6.3; where seglogfs departs from Kafka: section 10).

Loading follows Kafka's LogLoader: ``.deleted`` and ``.cleaned`` leftovers are removed, complete
``.swap`` sets are finished, orphan index files dropped, missing or corrupt indexes rebuilt; after an
unclean shutdown every segment from the recovery point on is validated batch by batch, a torn or
corrupt tail is cut (unlike Kafka, intact batches after damage and later segments are kept). After a
clean shutdown only the active segment's tail is checked, and each segment's indexes are checked
against its .log when first used.

A read-only load changes no file: missing or corrupt indexes are then replaced by scans, a torn
tail is simply not read, and a complete ``.swap`` set is read in place of the segments it covers (the
writer renames those ``.deleted`` before it installs the swap: a broker or seglogd killed in between,
or a reader listing the directory just then, would otherwise find their offsets gone). The loader
knows nothing of :class:`~seglogfs.log.Log`: it returns a :class:`LoadedLog` for the log to start from.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .config import LogConfig
from .errors import CorruptRecordError
from .log_files import (
    CLEANED_SUFFIX,
    CORRUPT_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    base_offset_from_name,
    files_of_segment,
    offset_named_files,
    parse_offset_file_name,
    segment_base_offsets,
    segment_file_name,
)
from .log_segments import LogSegments
from .records import validate_batch
from .segment import LogSegment, next_offset_of_file, pread_header

__all__ = ["LoadedLog", "LogLoader"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What a load found: the segments (oldest first, linked, never empty) and the log's offsets."""

    segments: list[LogSegment]
    next_offset: int  # the log end offset: after the last intact batch of the active segment
    log_start_offset: int
    recovery_point: int  # the end offset after a clean load; after a recovery, at most the one given
    #: base offset of the first segment recovered batch by batch (its .txnindex and those after it
    #: are rebuilt from the log), None when none was
    recovered_from: int | None = None


class LogLoader:
    """Loads (and, when writable, repairs) the segments of one log directory."""

    def __init__(
        self, directory: Path, config: LogConfig, segments: LogSegments, *, read_only: bool
    ) -> None:
        self.dir = directory
        self.name = directory.name
        self.config = config
        self.read_only = read_only
        self._segments = segments  # the log's: makes its segments
        self._recovered_from: int | None = None

    def load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> LoadedLog:
        """Load the segments; after an unclean shutdown, recover those from ``recovery_point`` on."""
        self._refuse_symlinks()
        if not self.read_only:
            self._remove_leftovers()
        if self.read_only:
            # Retention may have removed a segment since the listing: a reader leaves it out.
            segments = [s for s in self._read_only_segments() if s.size or s.log_path.exists()]
        else:
            segments = []
        try:
            if not self.read_only:
                for base in segment_base_offsets(self.dir):
                    segments.append(self._new_segment(base))
                first_to_recover = len(segments)
                if not clean_shutdown:
                    first_to_recover = _first_unflushed(segments, recovery_point)
                for segment in segments[:first_to_recover]:
                    self._check_indexes(segment)
                    if segment is not segments[-1]:
                        segment.release_indexes()  # reopened on first use: 1000 segments, few descriptors
                if first_to_recover < len(segments):
                    self._recover_segments(segments, first_to_recover, recovery_point)
            if not segments:
                segments = [self._new_segment(max(log_start_offset, 0))]
            LogSegments.link(segments)
            active = segments[-1]
            next_offset = self._active_segment_end(segments)
            if not self.read_only:
                self._grow_active_indexes(active)
        except BaseException:
            for segment in segments:  # a failed load (EMFILE, ENOSPC...) keeps no descriptor
                segment.close(trim=False)
            raise
        next_offset = max(next_offset, active.base_offset)
        start_offset = min(max(log_start_offset, segments[0].base_offset), next_offset)
        # After an unclean shutdown the recovered data is valid but not known to be on disk (a kill -9
        # leaves it in the page cache): the recovery point moves only when a flush makes it durable,
        # as in Kafka, or a checkpoint would vouch for data a power loss can still take.
        recovered_to = next_offset if clean_shutdown or self.read_only else min(recovery_point, next_offset)
        return LoadedLog(segments, next_offset, start_offset, recovered_to, self._recovered_from)

    def _new_segment(self, base_offset: int) -> LogSegment:
        return self._segments.new_segment(base_offset)

    def _read_only_segments(self) -> list[LogSegment]:
        """The segments a reader sees, changing no file: one per ``.log`` file, except that a ``.swap``
        set a writable load would complete (no ``.cleaned`` file at or below it, every batch valid)
        stands in for the segments it covers. One listing of the directory: a swap its owner installs
        meanwhile is found under one name or the other, and a swap segment holds its descriptor from
        the start, so that the rename does not take the file from under it."""
        parsed = [p for p in map(parse_offset_file_name, os.listdir(self.dir)) if p is not None]
        segments = {offset: self._new_segment(offset) for offset, suffix in parsed if suffix == LOG_SUFFIX}
        lowest_cleaned = min((o for o, suffix in parsed if suffix.endswith(CLEANED_SUFFIX)), default=None)
        for base in sorted(o for o, suffix in parsed if suffix == LOG_SUFFIX + SWAP_SUFFIX):
            if lowest_cleaned is not None and base >= lowest_cleaned:
                continue  # an incomplete clean: the writable load discards it
            # Installed since the listing, it is found under its final name.
            for suffix in (SWAP_SUFFIX, ""):
                swap = self._segments.new_segment(base, writable=False, file_suffix=suffix)
                try:
                    swap.hold_open()
                    damage = _swap_damage(swap.log_path, base) if suffix else None
                    end = next_offset_of_file(swap.log_path, base)
                    break
                except FileNotFoundError:
                    swap.close(trim=False)
            else:
                continue
            if damage is not None:  # the writable load sets it aside: the segments it covers stay
                swap.close(trim=False)
                continue
            for covered in [offset for offset in segments if base <= offset < end]:
                del segments[covered]
            segments[base] = swap
        return [segments[offset] for offset in sorted(segments)]

    def _active_segment_end(self, segments: list[LogSegment]) -> int:
        """The next offset after the active segment's last intact batch, its torn tail cut (read-only:
        left unread)."""
        active = segments[-1]
        next_offset, valid_end = active.intact_end()
        if valid_end < active.size:
            # Whatever the clean-shutdown marker says: a preallocated (zero-filled) or garbage tail, or
            # a damaged last batch (the end offset comes from the last intact batch, never its header).
            if self.read_only:
                log.warning(
                    "%s: not reading %d bytes of torn or garbage data at position %d of %s",
                    self.name,
                    active.size - valid_end,
                    valid_end,
                    active.log_path,
                )
                active.size = valid_end
            else:
                self._recover_segments(segments, len(segments) - 1)
                next_offset, _ = active.intact_end()
        return next_offset

    def _refuse_symlinks(self) -> None:
        """Raise ELOOP when a segment, index or leftover file is a symlink: loading and cleanup open,
        truncate, rename and delete these files, and must never act outside the data dir."""
        with os.scandir(self.dir) as entries:
            for entry in entries:
                if parse_offset_file_name(entry.name) is not None and entry.is_symlink():
                    reason = "a segment file is a symbolic link (seglogfs follows no symlinks)"
                    raise OSError(errno.ELOOP, reason, entry.path)

    def _remove_leftovers(self) -> None:
        """Kafka's first load steps: drop .deleted/.cleaned files, finish complete .swap sets."""
        # Only files named by an offset: anything else is not a segment file of Kafka's (nor of
        # ours), never ours to delete.
        listing = offset_named_files(self.dir)
        if any(path.name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)) for path in listing):
            self._finish_interrupted_changes(listing)
            listing = offset_named_files(self.dir)
        # Index files without a .log are deleted, as Kafka does.
        named = {path: parse_offset_file_name(path.name) or (-1, "") for path in listing}
        logs = {offset for offset, suffix in named.values() if suffix == LOG_SUFFIX}
        for path, (offset, suffix) in named.items():
            if suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and offset not in logs:
                path.unlink(missing_ok=True)

    def _finish_interrupted_changes(self, listing: list[Path]) -> None:
        """Drop .deleted/.cleaned files and finish complete .swap sets (``listing``: the offset-named
        files)."""
        cleaned_bases = []
        for path in listing:
            if path.name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
            elif path.name.endswith(CLEANED_SUFFIX):
                cleaned_bases.append(base_offset_from_name(path.name))
                path.unlink(missing_ok=True)
        lowest_cleaned = min(cleaned_bases, default=None)
        for swap in offset_named_files(self.dir, SWAP_SUFFIX):
            base = base_offset_from_name(swap.name)
            if lowest_cleaned is not None and base >= lowest_cleaned:
                swap.unlink(missing_ok=True)  # an incomplete split or clean: discard
        for swap in offset_named_files(self.dir, LOG_SUFFIX + SWAP_SUFFIX):
            self._complete_swap(swap)
        for swap in offset_named_files(self.dir, SWAP_SUFFIX):  # index swaps with no .log swap left
            swap.rename(swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))

    def _complete_swap(self, swap_log: Path) -> None:
        """A valid .swap replaces the segments it covers: [swap base, swap next offset).

        A corrupt one replaces nothing: when the segment it would replace is still there, its files
        are set aside as ``*.swap.corrupt`` (kept, never deleted); when it is not, the swap may hold
        the only copy of its records, so the log cannot be opened (it goes offline, files untouched).
        """
        swap_base = base_offset_from_name(swap_log.name)
        damage = _swap_damage(swap_log, swap_base)
        if damage is not None:
            self._set_corrupt_swap_aside(swap_base, damage)
            return
        swap_end = next_offset_of_file(swap_log, swap_base)
        for path in list(self.dir.iterdir()):
            parsed = parse_offset_file_name(path.name)
            if parsed is not None and parsed[1] in SEGMENT_SUFFIXES and swap_base <= parsed[0] < swap_end:
                path.unlink()
        for path in files_of_segment(self.dir, swap_base, SWAP_SUFFIX):
            path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))
        # The rebuilt segment's indexes are recreated below if they are missing.

    def _set_corrupt_swap_aside(self, swap_base: int, damage: str) -> None:
        """Rename a damaged swap set ``*.swap.corrupt``, or refuse to load when no segment holds its
        offsets (the swap may then be their only copy)."""
        swap_files = files_of_segment(self.dir, swap_base, SWAP_SUFFIX)
        if not (self.dir / segment_file_name(swap_base, LOG_SUFFIX)).is_file():
            raise CorruptRecordError(
                f"{damage}; no segment holds its offsets, so the .swap may be their only copy"
            )
        for path in swap_files:
            os.rename(path, path.with_name(path.name + CORRUPT_SUFFIX))
        log.warning(
            "%s: %s; kept the segment it would replace and set %s aside as *%s",
            self.name,
            damage,
            ", ".join(p.name for p in swap_files),
            CORRUPT_SUFFIX,
        )

    def _check_indexes(self, segment: LogSegment) -> None:
        """Rebuild the missing indexes of a segment that is otherwise trusted, without cutting its .log
        (a damaged batch in a sealed segment costs only itself). Indexes that exist are checked against
        the .log when first used, and rebuilt then if they are wrong (LogSegment.index_problem)."""
        if segment.needs_index_rebuild:
            log.warning("%s: index missing, rebuilding it from %s", self.name, segment.log_path)
            segment.rebuild_indexes()

    def _recover_segments(
        self, segments: list[LogSegment], first: int, recovery_point: int | None = None
    ) -> None:
        """Validate every batch of segments[first:], rebuilding their indexes; cut the last one's torn
        tail. Kafka cuts at the first bad batch and deletes every later segment; seglogfs keeps the
        intact batches after damage and every later segment (they may hold the only copy of their
        records): the damage stays in place, its offsets unreadable, and appends go after the last
        intact batch of the active segment. Except a page a power loss lost past ``recovery_point``
        (see ``LogSegment.recover``): nothing from there on was promised durable (a flush covering it
        would have written it), so it is cut with what follows, and, in a sealed segment, every later
        segment is deleted, as Kafka does."""
        LogSegments.link(segments)  # each segment's offset limit: a witness for its last batch
        if first < len(segments):
            base = segments[first].base_offset
            self._recovered_from = base if self._recovered_from is None else min(self._recovered_from, base)
        for i in range(first, len(segments)):
            segment = segments[i]
            last = i == len(segments) - 1
            truncated = segment.recover(cut_torn_tail=last, recovery_point=recovery_point)
            if truncated:
                log.warning(
                    "%s: recovery cut %d bytes of torn or corrupt data at position %d of %s",
                    self.name,
                    truncated,
                    segment.size,
                    segment.log_path,
                )
            if truncated and not last:
                self._drop_segments_after_a_lost_page(segments[i + 1 :])
                del segments[i + 1 :]
                break

    def _drop_segments_after_a_lost_page(self, later: list[LogSegment]) -> None:
        """Delete the segments after a sealed one whose lost page recovery cut: they hold records past
        it, which no flush covered (renamed ``.deleted`` first: a kill in between leaves leftovers the
        next load removes). Their producer snapshots go when the producer state loads (it drops those
        above the first recovered segment)."""
        for segment in later:
            log.warning("%s: deleting %s: it follows a page lost past the recovery point",
                        self.name, segment.log_path.name)
            renamed = segment.rename_suffix(DELETED_SUFFIX)
            segment.close(trim=False)
            for path in renamed:
                path.unlink(missing_ok=True)

    def _grow_active_indexes(self, active: LogSegment) -> None:
        """After loading, grow the active segment's indexes back to ``segment.index.bytes``. On a full
        disk they stay trimmed (full), so the next append rolls and that roll reports ENOSPC."""
        try:
            active.resize_indexes(self.config.segment_index_bytes)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("%s: no room to preallocate the indexes of %s (%s); appends roll first",
                        self.name, active.log_path.name, exc.strerror)


def _first_unflushed(segments: list[LogSegment], recovery_point: int) -> int:
    """Index of the first segment that may hold data past the recovery point (Kafka recovers from
    the segment containing the recovery point on)."""
    for i in range(len(segments)):
        if i + 1 == len(segments) or segments[i + 1].base_offset > recovery_point:
            return i
    return len(segments)


def _swap_damage(path: Path, base_offset: int) -> str | None:
    """Why a ``.log.swap`` cannot replace segments (no batch at all, a batch that fails its CRC, an
    offset below the swap's base, a torn tail), or None when every batch of it is whole and valid."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        end = os.fstat(fd).st_size
        if end == 0:  # renamed into place it would replace the segment of its name with nothing
            return f"{path} is empty"
        position = 0
        while (header := pread_header(fd, position, end, path)) is not None:
            if header.base_offset < base_offset:
                return f"{path} has offset {header.base_offset} below its base at position {position}"
            validate_batch(os.pread(fd, header.size, position), header.at(0), path=path)
            position += header.size
    except CorruptRecordError as exc:
        return str(exc)
    finally:
        os.close(fd)
    return None if position == end else f"{path} has a torn tail at position {position}"
