"""LogManager: a data dir (Kafka's ``log.dirs`` entry) holding many logs.

It keeps Kafka's data-dir files: ``.kafka_cleanshutdown`` (deleted as soon as loading starts and
written again on a clean close) and the text checkpoints ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (and, through its log cleaner,
``cleaner-offset-checkpoint``), so a directory written here is one a broker can load, and a broker's
directory opens here. It owns the log cleaner (:mod:`seglogfs.log_cleaner`), as Kafka's does.

A writer locks the data dir (``.lock``, as a broker does); its logs keep no lock descriptor of their
own (each log dir's lock is probed at open, and every other writer of a log checks the data dir's
lock, see :meth:`~seglogfs.lock.LogLock.acquire`), so thousands of logs cost no descriptors.
Loading follows no symlink, and one log's damage stops nothing: a log that cannot be opened, or whose
topic-partition another directory also claims (``c`` and ``c-0``), is *offline* (see
:attr:`LogManager.offline`): left untouched on disk, its checkpoint lines carried over unchanged, while
every other log serves. A log whose files vanish while it is open (its directory removed or replaced:
:meth:`Log.check_files`, at each append and each maintenance round) goes offline too: its checkpoint
lines are dropped (the next start recovers whatever is then there from its start) and the close that
follows writes no clean-shutdown marker.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from .checkpoint import (
    read_clean_shutdown_marker,
    read_offset_checkpoint_or_empty,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
    write_partition_metadata,
)
from .cleaner import CleanResult
from .cleaner_config import CleanerConfig
from .config import LogConfig
from .errors import (
    CloseError,
    ConfigError,
    InvalidLogNameError,
    LogOfflineError,
    ReadOnlyLogError,
    SeglogError,
)
from .faults import PersistentFault
from .lock import LogLock, data_dir_lock
from .log import Log
from .log_cleaner import LogCleaner
from .log_creation import remove_created_log_dir
from .log_files import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    check_new_log_name,
    is_kafka_special_dir,
    parse_log_dir_name,
    shared_topic_partitions,
    validate_log_name,
    validate_topic,
)
from .topic_config_file import TOPIC_CONFIG_FILE, read_topic_config, write_topic_config

# A name's topic-partition, parsed once: a new log is compared with every other (thousands of them).
_log_key = functools.lru_cache(maxsize=None)(parse_log_dir_name)

log = logging.getLogger(__name__)

_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)


class LogManager:
    """Every log of one data dir. ``read_only`` opens them all without locks and never writes.

    A writer holds the data dir's lock from construction to :meth:`close` (``LogLockedError`` naming
    the dir and the holder's pid when another process has it).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        default_config: LogConfig | None = None,
        log_configs: Mapping[str, LogConfig] | None = None,
        *,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
        cleaner_config: CleanerConfig | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.cleaner_config = cleaner_config or CleanerConfig()
        self.default_config = default_config or LogConfig()
        self.log_configs: dict[str, LogConfig] = dict(log_configs or {})
        #: the topic configs a log was created with (topic_config_file.py), by log name
        self._topic_configs: dict[str, dict[str, str]] = {}
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.RLock()
        self._logs: dict[str, Log] = {}
        self._offline: dict[str, str] = {}
        # Logs that went offline while open: reported by their hook (under the log's lock, so without
        # taking ours), moved out of _logs by _retire_offline; kept open until close() abandons them.
        self._going_offline: list[Log] = []
        self._gone_offline: dict[str, Log] = {}
        # The checkpoint lines of offline logs, written back unchanged by every checkpoint().
        self._kept_checkpoints: dict[str, dict[tuple[str, int], int]] = {name: {} for name in _CHECKPOINTS}
        self._loaded_clean = False
        self._closed = False
        self._maintenance_faults: dict[str, PersistentFault] = {}  # by log name
        self._dir_lock: LogLock | None = None
        #: called with a log (under its lock: it must not block) after records were appended to it by
        #: any path (the mount, a Kafka client, the engine API); the Kafka listener's long polls use it
        self.on_append: Callable[[Log], None] | None = None
        if not read_only:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._dir_lock = data_dir_lock(self.data_dir).acquire()
        elif not self.data_dir.is_dir():
            raise FileNotFoundError(f"no data dir {self.data_dir}")
        try:
            self._load()
        except BaseException:
            self._release_dir_lock()
            raise
        self.cleaner = LogCleaner(self.data_dir, self.cleaner_config, lambda: dict(self._logs), clock=clock)

    def _load(self) -> None:
        clean = self._loaded_clean = read_clean_shutdown_marker(self.data_dir) is not None
        if not self.read_only:
            # Kafka deletes the marker as soon as loading starts (KAFKA-10471): a crash while
            # loading must not be mistaken for a clean shutdown next time.
            remove_clean_shutdown_marker(self.data_dir)
        checkpoints = {name: self._read_checkpoint(name) for name in _CHECKPOINTS}
        names = self._log_dir_names()
        for (topic, partition), claimants in shared_topic_partitions(names).items():
            # Either one would read and write the other's checkpoint lines (its log start offset
            # hides or deletes records): serve neither, change neither, until the operator renames.
            for name in claimants:
                others = ", ".join(other for other in claimants if other != name)
                self._set_offline(
                    name,
                    f"topic {topic} partition {partition} is claimed by {others} as well; rename all "
                    "but one of these directories",
                )
        try:
            for name in names:
                if name in self._offline:
                    continue
                key = parse_log_dir_name(name)
                try:
                    topic_config = read_topic_config(self.data_dir / name)
                    if topic_config is not None:
                        self._topic_configs[name] = topic_config
                    self._logs[name] = self._watched(Log.open(
                        self.data_dir / name,
                        self.config_for(name),
                        read_only=self.read_only,
                        clean_shutdown=clean,
                        recovery_point=checkpoints[RECOVERY_POINT_CHECKPOINT].get(key, 0),
                        log_start_offset=checkpoints[LOG_START_OFFSET_CHECKPOINT].get(key, 0),
                        clock=self._clock,
                        data_dir_locked=self._dir_lock is not None,
                    ))
                except Exception as exc:  # one log's damage must not stop the others
                    expected = isinstance(exc, (SeglogError, OSError))
                    log.debug("opening log %s failed", name, exc_info=not expected)
                    self._set_offline(name, f"cannot be opened: {exc if expected else repr(exc)}")
        except BaseException:
            for log_obj in self._logs.values():
                log_obj.close()
            raise
        for name in self._offline:
            key = parse_log_dir_name(name)
            for checkpoint_name, entries in checkpoints.items():
                if key in entries:
                    self._kept_checkpoints[checkpoint_name][key] = entries[key]
        state = "clean shutdown" if clean else "no clean-shutdown marker: unflushed data was validated"
        log.info(
            "opened %d logs in %s (%s)%s",
            len(self._logs),
            self.data_dir,
            state if self._logs else "empty",
            f"; {len(self._offline)} offline: {', '.join(sorted(self._offline))}" if self._offline else "",
        )

    def _log_dir_names(self) -> list[str]:
        """The names of the log directories in the data dir, sorted. A symlink is never followed:
        one to a directory is an offline log (listed, so that its name is not reused, and explained)."""
        names = []
        with os.scandir(self.data_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                if is_kafka_special_dir(entry.name):
                    continue
                try:
                    validate_log_name(entry.name)
                except InvalidLogNameError as exc:
                    if entry.is_dir(follow_symlinks=False):
                        log.warning("skipping %s: not a log directory name: %s", path, exc)
                    continue
                if entry.is_symlink() and not entry.is_dir():
                    # A symlink to a file (a checkpoint's planted ``.tmp``...) is no log: nothing to serve.
                    log.warning("skipping %s: a symbolic link (to %s), not a log directory", path,
                                os.readlink(path))
                elif entry.is_symlink():
                    target = os.readlink(path)
                    self._set_offline(
                        entry.name, f"{path} is a symbolic link (to {target}); seglogfs follows no symlinks"
                    )
                elif entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
        return names

    def _set_offline(self, name: str, reason: str) -> None:
        self._offline[name] = reason
        log.error("log %s is offline: %s", name, reason)

    def _watched(self, log_obj: Log) -> Log:
        """``log_obj``, reporting to this manager when it goes offline."""
        log_obj.on_offline = self._going_offline.append  # atomic: no lock taken under the log's
        log_obj.on_append = self._appended
        return log_obj

    def _appended(self, log_obj: Log) -> None:
        hook = self.on_append
        if hook is not None:
            hook(log_obj)

    def _retire_offline(self) -> None:
        """Move the logs that went offline while open from the served ones to the offline ones."""
        if not self._going_offline:
            return
        with self._lock:
            while self._going_offline:
                log_obj = self._going_offline.pop()
                if self._logs.get(log_obj.name) is log_obj:
                    del self._logs[log_obj.name]
                    self._gone_offline[log_obj.name] = log_obj
                    self._offline[log_obj.name] = f"went offline while open: {log_obj.offline_reason}"

    def _release_dir_lock(self) -> None:
        if self._dir_lock is not None:
            self._dir_lock.release()
            self._dir_lock = None

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        """A checkpoint by (topic, partition); a missing or corrupt file counts as empty, as in Kafka."""
        return read_offset_checkpoint_or_empty(self.data_dir / name)

    # ------------------------------------------------------------------ logs

    def config_for(self, name: str) -> LogConfig:
        """The configuration of log ``name``: its own (the config file's ``logs:`` entry), else the
        topic configs it was created with over the data dir's default (as a broker's topic configs
        override its defaults), else that default. ConfigError when the topic configs no longer apply."""
        own = self.log_configs.get(name)
        if own is not None:
            return own
        topic_config = self._topic_configs.get(name)
        if topic_config is None:
            return self.default_config
        return LogConfig.from_mapping(
            topic_config, self.default_config, broker_names=False, source=f"{name}/{TOPIC_CONFIG_FILE}"
        )

    @property
    def logs(self) -> dict[str, Log]:
        """The open logs by directory name (a snapshot)."""
        self._retire_offline()
        return dict(self._logs)

    @property
    def offline(self) -> dict[str, str]:
        """The logs that are not served, by directory name, each with the reason (a snapshot): found
        so at load, or gone offline while open. Their files are left as they are; a restart tries them
        again."""
        self._retire_offline()
        return dict(self._offline)

    def get(self, name: str) -> Log:
        """The log named ``name`` (KeyError when there is none, or when it is offline)."""
        if self._going_offline:
            self._retire_offline()
        return self._logs[name]

    def create_log(
        self, name: str, config: LogConfig | None = None, *, topic_config: Mapping[str, str] | None = None
    ) -> Log:
        """Create log ``name`` (idempotent: an existing log is returned as is). ``config`` applies until
        the configuration is next updated; ``topic_config`` (Kafka topic-config names and values) is
        stored in the log's directory and applies over the default for the log's life, restarts included.

        ``InvalidLogNameError`` for a name outside Kafka's rules or not canonical (``x-00``);
        ``FileExistsError`` (EEXIST) when another log already has its topic-partition (``c`` beside
        ``c-0``), when ``name`` is offline, or when a file or symlink of that name is in the data dir.
        """
        validate_log_name(name)
        with self._lock:
            self._retire_offline()
            existing = self._logs.get(name)
            if existing is not None:
                return existing
            if self.read_only:
                raise ReadOnlyLogError(f"cannot create log {name}: the data dir is read-only")
            if name in self._offline:
                reason = self._offline[name]
                raise FileExistsError(errno.EEXIST, f"log {name} exists but is offline: {reason}")
            topic, partition = check_new_log_name(name)
            taken = [
                other
                for other in (*self._logs, *self._offline)
                if _log_key(other) == (topic, partition)
            ]
            if taken:
                raise FileExistsError(
                    errno.EEXIST,
                    f"cannot create log {name}: topic {topic} partition {partition} is log {taken[0]}",
                )
            directory = self.data_dir / name
            try:
                mode = os.lstat(directory).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISDIR(mode):
                raise FileExistsError(
                    errno.EEXIST, f"cannot create log {name}: {directory} exists and is not a directory"
                )
            if config is not None:
                self.log_configs[name] = config
            if topic_config:
                self._topic_configs[name] = dict(topic_config)
            fresh = mode is None
            log_obj = None
            try:
                log_obj = Log.open(
                    directory, self.config_for(name), create=True, clean_shutdown=not fresh,
                    clock=self._clock, data_dir_locked=self._dir_lock is not None,
                )
                if topic_config:
                    write_topic_config(directory, topic_config)
                if fresh:
                    write_partition_metadata(directory)
                    # Our batches carry leader epoch 0 from offset 0, as a broker's first leader would write.
                    write_leader_epoch_checkpoint(
                        directory / LEADER_EPOCH_CHECKPOINT, [(0, log_obj.start_offset)]
                    )
            except BaseException:
                # EMFILE, ENOSPC... half-way: a log that is not whole must not be found at the next start
                if log_obj is not None:
                    log_obj.abandon()
                if fresh:
                    remove_created_log_dir(directory)
                self._topic_configs.pop(name, None)
                raise
            self._logs[name] = self._watched(log_obj)
            log.info("created log %s", name)
            return log_obj

    def update_configs(self, default_config: LogConfig, log_configs: Mapping[str, LogConfig]) -> None:
        """Apply a reloaded configuration to every open log, live."""
        with self._lock:
            self.default_config = default_config
            self.log_configs = dict(log_configs)
            for name, log_obj in self._logs.items():
                try:
                    log_obj.update_config(self.config_for(name))
                except ConfigError as exc:  # its topic configs do not fit the new default: keep its own
                    log.error("log %s keeps its configuration: %s", name, exc)

    # ------------------------------------------------------------------ compaction

    def start_cleaner(self) -> None:
        """Start the log cleaner's threads (``log.cleaner.threads``; none when ``log.cleaner.enable``
        is false or the data dir is read-only). :meth:`close` stops them."""
        if not self.read_only and not self._closed:
            self.cleaner.start()

    def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """One round of the cleaner in this thread: the dirtiest compacted log cleaned once (None when
        no log needs it). For tests and benchmarks; the threads do this in the background."""
        if self.read_only or self._closed:
            return None
        return self.cleaner.clean_once(now_ms)

    def cleaner_state(self, name: str) -> dict[str, object]:
        """Log ``name``'s compaction state, JSON-ready: dirty_ratio, cleanable, first_dirty_offset,
        last_clean_ms, passes, bytes_in, bytes_out, records_removed (KeyError for no such log)."""
        return self.cleaner.state(self._logs[name])

    # ------------------------------------------------------------------ periodic work

    def maintain(self, now_ms: int | None = None) -> None:
        """For every log: whether its files are still there (else it goes offline), retention and
        ``flush.ms``; then fresh checkpoints. Call it periodically."""
        if self.read_only or self._closed:
            return
        for log_obj in list(self._logs.values()):
            fault = self._maintenance_faults.setdefault(
                log_obj.name, PersistentFault(f"maintenance of log {log_obj.name}", log)
            )
            try:
                if log_obj.check_files() is not None:
                    continue  # offline: its directory is no longer the one it was opened in
                log_obj.delete_old_segments(now_ms)
                log_obj.maybe_flush(now_ms)
            except Exception as exc:  # one bad log must not stop the others' retention
                fault.failed(exc)  # a full or read-only disk: once, not every round
            else:
                fault.succeeded()
        self._retire_offline()
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and replication (high watermark) checkpoints."""
        if self.read_only:
            return
        with self._lock:  # maintenance and close both write the same <checkpoint>.tmp files
            self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        logs = list(self._logs.values())
        offsets = {
            RECOVERY_POINT_CHECKPOINT: {(lg.topic, lg.partition): lg.recovery_point for lg in logs},
            LOG_START_OFFSET_CHECKPOINT: {(lg.topic, lg.partition): lg.start_offset for lg in logs},
            REPLICATION_OFFSET_CHECKPOINT: {(lg.topic, lg.partition): lg.end_offset for lg in logs},
        }
        first_failure: OSError | None = None
        for name, entries in offsets.items():
            try:  # each file on its own: one that cannot be written keeps no other from being written
                write_offset_checkpoint(
                    self.data_dir / name, self._checkpointable({**self._kept_checkpoints[name], **entries})
                )
            except OSError as exc:
                first_failure = first_failure or exc
        if first_failure is not None:
            raise first_failure

    @staticmethod
    def _checkpointable(entries: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """``entries`` without those no checkpoint may hold (a topic outside Kafka's rules), each
        logged: one bad line must not keep every other log's offsets from being written."""
        valid = {}
        for (topic, partition), offset in entries.items():
            try:
                validate_topic(topic)
            except InvalidLogNameError as exc:
                log.error("left out of the checkpoints: partition %d of %s", partition, exc)
            else:
                valid[(topic, partition)] = offset
        return valid

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker.

        A log that cannot be closed (a full or failed disk) stops no other: every log that can be is
        closed, the checkpoints are still written (a recovery point only ever covers flushed data),
        and the marker is written only when every log closed; then ``CloseError`` names the failures.
        """
        self.cleaner.stop()  # first: a clean in progress is abandoned before its log closes
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failures: dict[str, BaseException] = {}
            try:
                self._retire_offline()
                for name, log_obj in self._gone_offline.items():
                    log_obj.abandon()  # nothing written into a directory that may be another's now
                    failures[name] = LogOfflineError(self._offline[name])
                for name, log_obj in self._logs.items():
                    try:
                        log_obj.close()
                    except Exception as exc:  # reported below, after closing the rest
                        failures[name] = exc
                if not self.read_only:
                    try:
                        self.checkpoint()
                    except Exception as exc:  # reported in CloseError; the logs are closed already
                        failures["checkpoints"] = exc
                    # An offline log is as the load found it: after an unclean load, the marker
                    # would vouch for data nobody recovered.
                    if not failures and (self._loaded_clean or not self._offline):
                        try:
                            write_clean_shutdown_marker(self.data_dir)
                        except OSError as exc:
                            failures["clean-shutdown marker"] = exc
            finally:
                self._release_dir_lock()
            if failures:
                raise CloseError(self.data_dir, failures)

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
