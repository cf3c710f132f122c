"""The mount's ``ls by-offset``: the newest offsets of a log that hold a user record, within the
listing limit (``fs.listing.limit``). Which offsets hold a record is the engine's
(:mod:`seglogfs.record_offsets`); this is how a listing asks for the newest of them cheaply."""

from __future__ import annotations

from seglogfs.log import Log
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from seglogfs.record_offsets import existing_offsets, merged

__all__ = ["newest_offsets"]


def newest_offsets(lg: Log, limit: int, *, isolation: Isolation = READ_UNCOMMITTED) -> list[range]:
    """The newest ``limit`` offsets holding a user record, as :func:`existing_offsets` gives them.

    A log whose ``cleanup.policy`` has no ``compact`` is taken as gap-free (its control records'
    offsets are listed: opening one is ENOENT), so this costs nothing there; a compacted log, and any
    log under ``read_committed`` (up to its last stable offset), is walked back from its end in
    windows that double until ``limit`` offsets are found."""
    committed = isolation == READ_COMMITTED
    start, end = lg.start_offset, lg.last_stable_offset if committed else lg.end_offset
    if limit <= 0 or start >= end:
        return []
    if "compact" not in lg.config.cleanup_policy and not (committed and lg.has_aborted_transactions()):
        return [range(max(start, end - limit), end)]
    runs: list[range] = []
    count, high, window = 0, end, limit
    while high > start and count < limit:
        low = max(start, high - window)
        found = existing_offsets(lg, low, high, isolation=isolation)
        runs[:0] = found
        count += sum(len(run) for run in found)
        high, window = low, window * 2
    excess = count - limit
    while excess > 0:
        first = runs[0]
        if len(first) <= excess:
            runs.pop(0)
            excess -= len(first)
        else:
            runs[0] = first[excess:]
            excess = 0
    return merged(runs)
