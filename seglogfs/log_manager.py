"""LogManager: a data dir (Kafka's ``log.dirs`` entry) holding many logs.

It keeps Kafka's data-dir files: ``.kafka_cleanshutdown`` (deleted as soon as loading starts and
written again on a clean close) and the text checkpoints ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint``, so a directory written here is
one a broker can load, and a broker's directory opens here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from .checkpoint import (
    CorruptCheckpointError,
    is_kafka_special_dir,
    parse_log_dir_name,
    read_clean_shutdown_marker,
    read_offset_checkpoint,
    remove_clean_shutdown_marker,
    validate_log_name,
    write_clean_shutdown_marker,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from .config import LogConfig
from .errors import InvalidLogNameError, ReadOnlyLogError
from .log import Log

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"


class LogManager:
    """Every log of one data dir. ``read_only`` opens them all without locks and never writes."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        default_config: LogConfig | None = None,
        log_configs: Mapping[str, LogConfig] | None = None,
        *,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
    ):
        self.data_dir = Path(data_dir)
        self.default_config = default_config or LogConfig()
        self.log_configs: dict[str, LogConfig] = dict(log_configs or {})
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.RLock()
        self._logs: dict[str, Log] = {}
        self._closed = False
        if not read_only:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        elif not self.data_dir.is_dir():
            raise FileNotFoundError(f"no data dir {self.data_dir}")
        self._load()

    def _load(self) -> None:
        clean = read_clean_shutdown_marker(self.data_dir) is not None
        if not self.read_only:
            # Kafka deletes the marker as soon as loading starts (KAFKA-10471): a crash while
            # loading must not be mistaken for a clean shutdown next time.
            remove_clean_shutdown_marker(self.data_dir)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(LOG_START_CHECKPOINT)
        opened = []
        try:
            for path in sorted(self.data_dir.iterdir()):
                if not path.is_dir() or is_kafka_special_dir(path.name):
                    continue
                try:
                    validate_log_name(path.name)
                except InvalidLogNameError:
                    log.warning("skipping %s: not a log directory name", path)
                    continue
                key = parse_log_dir_name(path.name)
                log_obj = Log.open(
                    path,
                    self.config_for(path.name),
                    read_only=self.read_only,
                    clean_shutdown=clean,
                    recovery_point=recovery_points.get(key, 0),
                    log_start_offset=start_offsets.get(key, 0),
                    clock=self._clock,
                )
                self._logs[path.name] = log_obj
                opened.append(log_obj)
        except BaseException:
            for log_obj in opened:
                log_obj.close()
            raise
        state = "clean shutdown" if clean else "no clean-shutdown marker: unflushed data was validated"
        log.info(
            "opened %d logs in %s (%s)", len(self._logs), self.data_dir, state if self._logs else "empty"
        )

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        """A checkpoint by (topic, partition); a missing or corrupt file counts as empty, as in Kafka."""
        path = self.data_dir / name
        if not path.exists():
            return {}
        try:
            entries = read_offset_checkpoint(path)
        except CorruptCheckpointError as exc:
            log.warning("ignoring %s: %s", path, exc)
            return {}
        return entries

    # ------------------------------------------------------------------ logs

    def config_for(self, name: str) -> LogConfig:
        return self.log_configs.get(name, self.default_config)

    @property
    def logs(self) -> dict[str, Log]:
        """The open logs by directory name (a snapshot)."""
        return dict(self._logs)

    def get(self, name: str) -> Log:
        """The log named ``name`` (KeyError when there is none)."""
        return self._logs[name]

    def create_log(self, name: str, config: LogConfig | None = None) -> Log:
        """Create log ``name`` (idempotent: an existing log is returned as is)."""
        validate_log_name(name)
        with self._lock:
            existing = self._logs.get(name)
            if existing is not None:
                return existing
            if self.read_only:
                raise ReadOnlyLogError(f"cannot create log {name}: the data dir is read-only")
            if config is not None:
                self.log_configs[name] = config
            directory = self.data_dir / name
            fresh = not directory.exists()
            log_obj = Log.open(
                directory, self.config_for(name), create=True, clean_shutdown=not fresh, clock=self._clock
            )
            if fresh:
                write_partition_metadata(directory)
                # Our batches carry leader epoch 0 from offset 0, as a broker's first leader would write.
                write_leader_epoch_checkpoint(
                    directory / "leader-epoch-checkpoint", [(0, log_obj.start_offset)]
                )
            self._logs[name] = log_obj
            log.info("created log %s", name)
            return log_obj

    def update_configs(self, default_config: LogConfig, log_configs: Mapping[str, LogConfig]) -> None:
        """Apply a reloaded configuration to every open log, live."""
        with self._lock:
            self.default_config = default_config
            self.log_configs = dict(log_configs)
            for name, log_obj in self._logs.items():
                log_obj.update_config(self.config_for(name))

    # ------------------------------------------------------------------ periodic work

    def maintain(self, now_ms: int | None = None) -> None:
        """Retention and ``flush.ms`` for every log, then fresh checkpoints. Call it periodically."""
        if self.read_only or self._closed:
            return
        for log_obj in list(self._logs.values()):
            try:
                log_obj.delete_old_segments(now_ms)
                log_obj.maybe_flush(now_ms)
            except Exception:  # one bad log must not stop the others' retention
                log.exception("maintenance of log %s failed", log_obj.name)
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and replication (high watermark) checkpoints."""
        if self.read_only:
            return
        logs = list(self._logs.values())
        write_offset_checkpoint(
            self.data_dir / RECOVERY_POINT_CHECKPOINT,
            {(lg.topic, lg.partition): lg.recovery_point for lg in logs},
        )
        write_offset_checkpoint(
            self.data_dir / LOG_START_CHECKPOINT, {(lg.topic, lg.partition): lg.start_offset for lg in logs}
        )
        write_offset_checkpoint(
            self.data_dir / REPLICATION_CHECKPOINT, {(lg.topic, lg.partition): lg.end_offset for lg in logs}
        )

    def flush_all(self) -> None:
        for log_obj in list(self._logs.values()):
            log_obj.flush()

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for log_obj in self._logs.values():
                log_obj.close()
            if not self.read_only:
                self.checkpoint()
                write_clean_shutdown_marker(self.data_dir)

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
