"""The daemon's long-lived objects kept out of the garbage collector's full passes.

A full collection walks every container object the process holds, with the GIL held: with the logs,
segments, configs and modules of a daemon that is about 1 microsecond an object (100,000 objects:
60-130 ms on the 2-core machine), and the cleaner's and the requests' allocations start one every
half second or so. Before the mount serves, :func:`freeze_long_lived` collects what is garbage and
moves the rest to the permanent generation (:func:`gc.freeze`): later full passes walk only what was
made since. Once serving (the mount's start, a config reload) it collects the young generations
only, which walk what was made since the last collection, not the whole process: a full pass then
would hold every request for its length (a request right after the mount waited 30-40 ms). A frozen
object is still freed when its last reference goes; only a reference cycle among frozen objects would
never be collected, so the engine's long-lived objects keep none (a segment's parts see it through a
weak proxy).
"""

from __future__ import annotations

import gc
import logging
import time

__all__ = ["freeze_long_lived"]

log = logging.getLogger(__name__)


def freeze_long_lived(*, serving: bool) -> None:
    """Collect the garbage (while ``serving``, of the young generations only), then freeze every
    object left (see the module docstring)."""
    started = time.monotonic()
    gc.collect(1 if serving else 2)
    gc.freeze()
    log.debug("%d objects frozen out of the collector's passes in %.3fs (%s)", gc.get_freeze_count(),
              time.monotonic() - started, "young generations collected" if serving else "full collection")
