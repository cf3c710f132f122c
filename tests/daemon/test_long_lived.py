"""The daemon's garbage-collector freeze: a full pass only before the mount serves."""

from __future__ import annotations

import gc

from seglogd.long_lived import freeze_long_lived


def _generations_collected(serving: bool) -> list[int]:
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        freeze_long_lived(serving=serving)
    finally:
        gc.callbacks.remove(note)
        gc.unfreeze()
    return seen


def test_a_serving_daemon_never_walks_every_object() -> None:
    """A full collection holds the GIL for about a microsecond an object (every request of the mount
    waited for it: 30-40 ms right after the mount, more at a reload with thousands of logs); while
    serving, only the young generations are collected."""
    assert _generations_collected(serving=True) == [1]
    assert _generations_collected(serving=False) == [2]
