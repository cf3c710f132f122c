"""Where the shared test data lives: ``shared/`` beside the checkout (as CI lays it out), else the
workplace copy. Tests only ever read it; anything they open for writing is a copy in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path


def _shared() -> Path:
    override = os.environ.get("SEGLOGFS_SHARED")
    candidates = [Path(override)] if override else []
    candidates += [Path(__file__).resolve().parents[3] / "shared", Path("/work/shared")]
    for candidate in candidates:
        if (candidate / "testdata").is_dir():
            return candidate
    raise FileNotFoundError(f"no shared/testdata in {', '.join(map(str, candidates))}")


SHARED = _shared()
KAFKA_LOG_DIR = SHARED / "testdata" / "kafka-4-kraft-logdir"
