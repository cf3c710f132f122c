"""Small helpers shared by the engine tests (no fakes: they build real logs on disk)."""

from __future__ import annotations

from pathlib import Path

from seglogfs.config import LogConfig
from seglogfs.log import Log


class ManualClock:
    """A clock the test moves by hand (seconds, like time.time)."""

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self.ms = start_ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


def config(**settings: object) -> LogConfig:
    """A LogConfig from Kafka names written with underscores: config(segment_bytes=100)."""
    return LogConfig.from_mapping({key.replace("_", "."): value for key, value in settings.items()})


def open_log(directory: Path, cfg: LogConfig | None = None, **kwargs) -> Log:
    return Log.open(directory, cfg or LogConfig(), create=True, **kwargs)


def segment_files(directory: Path, suffix: str = ".log") -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))
