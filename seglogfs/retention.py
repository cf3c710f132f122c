"""Retention policies: which of a log's oldest segments may go (Kafka's ``UnifiedLog``
``deleteRetentionMsBreachedSegments``, ``deleteRetentionSizeBreachedSegments`` and
``deleteLogStartOffsetBreachedSegments``; docs/kafka-format.md section 6).

Each policy answers with a count: the number of segments, oldest first, it would delete. The log
deletes the most any policy allows (:meth:`seglogfs.log.Log.delete_old_segments`), never the active
segment when it is empty.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .config import LogConfig
from .segment import LogSegment

__all__ = [
    "deletable_segment_count",
    "log_start_offset_breached",
    "retention_ms_breached",
    "retention_size_breached",
]

log = logging.getLogger(__name__)


def deletable_segment_count(
    segments: Sequence[LogSegment], config: LogConfig, log_start_offset: int, now_ms: int, log_name: str
) -> int:
    """How many of the oldest ``segments`` retention deletes: by time and size when the cleanup
    policy deletes, and always those wholly below the log start offset."""
    deletable = 0
    if config.deletes:
        by_time = retention_ms_breached(segments, now_ms, config.retention_ms, log_name)
        by_size = retention_size_breached(segments, config.retention_bytes)
        deletable = max(by_time, by_size)
    return max(deletable, log_start_offset_breached(segments, log_start_offset))


def retention_ms_breached(
    segments: Sequence[LogSegment], now_ms: int, retention_ms: int, log_name: str
) -> int:
    """The leading segments older than ``retention.ms`` (none when it is negative: unlimited)."""
    if retention_ms < 0:
        return 0
    count = 0
    for segment in segments:
        if not _expired(segment, now_ms, retention_ms, log_name):
            break
        count += 1
    return count


def retention_size_breached(segments: Sequence[LogSegment], retention_bytes: int) -> int:
    """The leading segments whose deletion keeps the log at or above ``retention.bytes``
    (none when it is negative: unlimited)."""
    if retention_bytes < 0:
        return 0
    count = 0
    excess = sum(s.size for s in segments) - retention_bytes
    for segment in segments:
        if excess - segment.size < 0:
            break
        excess -= segment.size
        count += 1
    return count


def log_start_offset_breached(segments: Sequence[LogSegment], log_start_offset: int) -> int:
    """The leading segments wholly below the log start offset: those the next one starts at or before."""
    count = 0
    for i, following in enumerate(segments[1:]):
        if following.base_offset <= log_start_offset:
            count = i + 1
    return count


def _expired(segment: LogSegment, now_ms: int, retention_ms: int, log_name: str) -> bool:
    """Whether ``segment`` is older than ``retention_ms``: by its time index (Kafka's largest
    timestamp), confirmed by its last batch's own header, so a wrong index never deletes data."""
    if now_ms - segment.largest_timestamp() <= retention_ms:
        return False
    last = segment.last_intact_batch()
    if last is not None and last.max_timestamp >= 0 and now_ms - last.max_timestamp <= retention_ms:
        log.warning(
            "%s: not deleting %s: its time index says %d, its last batch %d",
            log_name, segment.log_path, segment.largest_timestamp(), last.max_timestamp,
        )
        return False
    return True
