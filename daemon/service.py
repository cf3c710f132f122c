"""The seglogd process: open the logs, mount, tell systemd, reload, unmount, close cleanly."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from seglogd.config import DaemonConfig, load_config
from seglogd.long_lived import freeze_long_lived
from seglogd.notify import Notifier, watchdog_interval
from seglogfs.descriptor_budget import BUDGET
from seglogfs.errors import ConfigError, SeglogError
from seglogfs.faults import PersistentFault
from seglogfs.fs.mount import (
    clear_stale_mount,
    fuse_library,
    is_mounted,
    mount_fstype,
    run_mount,
    unmount,
)
from seglogfs.fs.mount_config import MountConfigs
from seglogfs.fs.operations import SeglogOperations
from seglogfs.kafka import KafkaListener
from seglogfs.log_manager import LogManager

if TYPE_CHECKING:  # mfusepy only after seglogfs.fs has chosen libfuse3; watchdog only when watched
    from mfusepy import fuse_config, fuse_conn_info
    from watchdog.events import FileSystemEvent
    from watchdog.observers.api import BaseObserver

log = logging.getLogger("seglogd")

MAINTENANCE_INTERVAL_S = 1.0  # retention and flush.ms granularity
RELOAD_SETTLE_S = 0.2  # editors write a file in several steps: reload once they are done


def _digest(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


def _warn_cleaner_changes(old: DaemonConfig, new: DaemonConfig) -> None:
    """The cleaner's threads run with the settings they started with: say which changed."""
    before, after = old.cleaner.to_dict(), new.cleaner.to_dict()
    changed = [f"{key}={value} (was {before[key]})" for key, value in after.items() if before[key] != value]
    if changed:
        log.warning("config reload: %s changed; the cleaner takes it at the next start", ", ".join(changed))


class Daemon:
    """One seglogd run: :meth:`run` returns the process exit code."""

    def __init__(
        self,
        config_path: str | Path,
        *,
        notifier: Notifier | None = None,
        stop_requested: threading.Event | None = None,
    ) -> None:
        """``stop_requested``: set by a SIGTERM/SIGINT handler during start-up (seglogd's ``__main__``
        installs one first thing); when set before the mount exists, :meth:`run` stops without mounting."""
        self.config_path = Path(config_path).absolute()
        self._stop_requested = stop_requested or threading.Event()
        self.notifier = notifier or Notifier()
        self.config: DaemonConfig | None = None
        self.manager: LogManager | None = None
        self.ops: SeglogOperations | None = None
        self.kafka: KafkaListener | None = None
        self.mount_point: Path | None = None
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._force_reload = False
        self._threads: list[threading.Thread] = []
        self._observer: BaseObserver | None = None
        self._seen_digest: bytes | None = None  # of the config text last applied or refused
        self._wakeup: tuple[int, int] | None = None
        self._was_mounted = False  # set by libfuse's init, in the FUSE thread

    # ------------------------------------------------------------------ run
    def run(self) -> int:
        """Start, serve until unmounted or signalled, shut down. 0 on a clean stop."""
        try:
            self.config = load_config(self.config_path)
        except (ConfigError, OSError) as exc:
            log.error("%s: %s", self.config_path, exc)
            return 2
        self._seen_digest = _digest(self.config_path)
        if self._stop_requested.is_set():
            log.info("stop requested before mounting: nothing was opened")
            return 0
        self.mount_point = Path(self.config.mount_point).absolute()
        BUDGET.configure()  # segments' descriptors, from the open-files limit the process runs with
        try:
            self.manager = self._open_logs(self.config)
        except (SeglogError, OSError) as exc:
            log.error("cannot start: %s", exc)
            self._close_manager()
            return 1
        if self.config.kafka is not None:
            try:
                self.kafka = KafkaListener(self.manager, self.config.kafka)
                self.kafka.start()
            except OSError as exc:
                log.error("cannot start the Kafka listener on %s: %s", self.config.kafka.listener, exc)
                self.kafka = None
                self._close_manager()
                return 1

        # libfuse installs its SIGTERM/SIGINT handlers only where the disposition is the default one.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if self._stop_requested.is_set():  # checked after the reset: none can slip in between
            log.info("stop requested before mounting: closing the logs")
            return 0 if self._close_manager() else 1
        code = self._serve(self.config, self.manager)
        self.notifier.stopping()
        self.notifier.status("stopping: flushing logs")
        self._stop.set()
        self._shutdown_threads()
        if not self._close_manager():
            code = code or 1
        log.info("stopped" if code == 0 else f"stopped (exit code {code})")
        return code

    def _open_logs(self, cfg: DaemonConfig) -> LogManager:
        """Clear the mount point, open (or create) the data dir and the configured logs."""
        data_dir = Path(cfg.data_dir).absolute()
        self._prepare_mount_point()
        self.notifier.status(f"opening logs in {data_dir}")
        if not cfg.read_only:
            data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        manager = self.manager = LogManager(
            data_dir, cfg.defaults, dict(cfg.logs), read_only=cfg.read_only, cleaner_config=cfg.cleaner
        )
        if not cfg.read_only:
            for name, log_config in cfg.logs.items():
                if name not in manager.offline:  # logged as offline already; serve the rest
                    manager.create_log(name, log_config)
        log.info("opened %d log(s) in %s in %.2f s", len(manager.logs), data_dir, time.monotonic() - started)
        if not cfg.read_only and cfg.cleaner.enable:
            manager.start_cleaner()  # compacts logs whose cleanup.policy has compact; each clean is logged
        return manager

    def _serve(self, cfg: DaemonConfig, manager: LogManager) -> int:
        """Mount and serve until unmounted or signalled (blocks); the exit code so far."""
        assert self.mount_point is not None
        self.ops = SeglogOperations(
            manager, read_only=cfg.read_only, access=cfg.access, on_init=self._on_init,
            configs=MountConfigs(cfg.mount_defaults, dict(cfg.mount_logs)),
        )
        try:
            self._install_sighup()
        except OSError as exc:  # EMFILE/ENFILE: every descriptor is taken already
            log.error("cannot start: no descriptor for the SIGHUP reload pipe (%s); raise the open-files "
                      "limit (ulimit -n, LimitNOFILE=)", exc.strerror)
            return 1
        self.notifier.status(f"mounting {self.mount_point}")
        freeze_long_lived(serving=False)  # nobody waits yet: the start's objects leave the full passes
        try:
            run_mount(self.ops, self.mount_point, read_only=cfg.read_only, allow_other=cfg.allow_other)
        except RuntimeError as exc:
            # fuse_main returns non-zero both when mounting failed and after some signal exits
            if not self._stop.is_set() and not self._was_mounted:
                log.error("mount on %s failed (libfuse returned %s)", self.mount_point, exc)
                return 1
        except Exception:
            log.exception("the FUSE loop failed")
            return 1
        return 0

    def _prepare_mount_point(self) -> None:
        assert self.mount_point is not None
        if clear_stale_mount(self.mount_point):
            log.info("cleared the stale mount on %s", self.mount_point)
        fstype = mount_fstype(self.mount_point)
        if fstype is not None:
            raise OSError(f"{self.mount_point} is already mounted ({fstype}; another seglogd?)")
        self.mount_point.mkdir(parents=True, exist_ok=True)

    def _close_manager(self) -> bool:
        """Stop the Kafka listener, then close every log (flush, trim indexes, checkpoints,
        clean-shutdown marker); False when some could not be closed cleanly (the next start recovers
        them)."""
        kafka, self.kafka = self.kafka, None
        if kafka is not None:
            kafka.stop()
        manager, self.manager = self.manager, None
        if manager is None:
            return True
        try:
            manager.close()
        except (SeglogError, OSError) as exc:
            log.error("cannot shut down cleanly: %s", exc)
            return False
        except Exception:
            log.exception("closing the logs failed")
            return False
        return True

    # ------------------------------------------------------------------ after the mount is up
    def _on_init(self, conn: fuse_conn_info | None, config: fuse_config | None) -> None:
        """Called by libfuse in the FUSE thread before it serves requests: start the helpers."""
        self._was_mounted = True
        self._start(self._announce_ready, "ready")
        self._start(self._maintenance_loop, "maintenance")
        self._start(self._reload_loop, "reload")
        interval = watchdog_interval()
        if interval:
            self._start(lambda: self._watchdog_loop(interval), "watchdog")
        self._watch_config_file()

    def _start(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=f"seglogd-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _announce_ready(self) -> None:
        assert self.mount_point is not None and self.manager is not None and self.config is not None
        try:
            os.stat(self.mount_point)  # answered by our own FUSE loop: the mount is live
        except OSError as exc:
            log.error("the mount on %s does not answer: %s", self.mount_point, exc)
            return
        names = sorted(self.manager.logs)
        mode = "read-only" if self.config.read_only else "read-write"
        status = f"serving {len(names)} log(s) on {self.mount_point} ({mode})"
        if self.kafka is not None:
            status += f", Kafka clients on {self.config.kafka.listener.host}:{self.kafka.port}"
        freeze_long_lived(serving=True)  # what the mount's start made
        self.notifier.ready(status)
        log.info("%s, %s", status, fuse_library())
        self._print_hints(names)

    def _print_hints(self, names: list[str]) -> None:
        assert self.config is not None
        mnt = self.mount_point
        example = names[0] if names else "demo-0"
        lines = [f"seglogd: {mnt} is mounted. Try:"]
        if not names:
            lines.append(f"  mkdir {mnt}/{example}                        # create a log")
        if not self.config.read_only:
            lines += [
                f"  echo hello >> {mnt}/{example}/append           # append a record",
                f"  cat big.txt > {mnt}/{example}/append           # one record per line",
            ]
        lines += [
            f"  cat {mnt}/{example}/records                    # every value, one per line",
            f"  tail -f {mnt}/{example}/records                # follow the log",
            f"  cat {mnt}/{example}/by-offset/0                # one record",
            f"  getfattr -d {mnt}/{example}/by-offset/0        # its key, timestamp, headers",
            f"  cat {mnt}/{example}/info                       # offsets, segments, config",
            f"Stop with Ctrl-C or: kill {os.getpid()}  (reload the config: kill -HUP {os.getpid()})",
        ]
        print("\n".join(lines), file=sys.stderr, flush=True)

    def _maintenance_loop(self) -> None:
        fault = PersistentFault("maintenance (retention, flush.ms, checkpoints)", log)
        while not self._stop.wait(MAINTENANCE_INTERVAL_S):
            manager = self.manager
            if manager is None:
                return
            try:
                manager.maintain()
            except Exception as exc:  # a full or read-only disk stops no serving
                fault.failed(exc)
            else:
                fault.succeeded()

    def _watchdog_loop(self, interval: float) -> None:
        assert self.mount_point is not None
        fault = PersistentFault(f"watchdog: the mount on {self.mount_point}", log)
        while not self._stop.is_set():
            try:
                os.statvfs(self.mount_point)  # ping only while the mount answers (statfs is never cached)
                self.notifier.watchdog()
            except OSError as exc:
                fault.failed(exc)
            else:
                fault.succeeded()
            if self._stop.wait(interval):
                return

    # ------------------------------------------------------------------ reload
    def _install_sighup(self) -> None:
        """SIGHUP -> reload, via a wakeup fd read by a thread.

        A Python handler only runs in the main thread, which sits in fuse_main for the daemon's life; the
        wakeup fd is written by the C-level handler at once. Installing a handler also keeps libfuse
        from taking SIGHUP as "exit". SIGTERM/SIGINT stay SIG_DFL so libfuse unmounts on them.
        """
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(read_fd, True)
        self._wakeup = (read_fd, write_fd)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signal.signal(signal.SIGHUP, lambda signum, frame: None)
        self._start(self._signal_loop, "signals")

    def _signal_loop(self) -> None:
        assert self._wakeup is not None
        while not self._stop.is_set():
            try:
                data = os.read(self._wakeup[0], 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGHUP in data:
                log.info("SIGHUP: reloading %s", self.config_path)
                self._force_reload = True
                self._reload.set()

    def _watch_config_file(self) -> None:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a dependency
            log.warning("watchdog is not installed: reload with SIGHUP only")
            return
        target = str(self.config_path)
        trigger = self._reload

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                paths = {getattr(event, "src_path", None), getattr(event, "dest_path", None)}
                if target in paths:
                    trigger.set()

        observer = Observer()
        try:
            observer.schedule(_Handler(), str(self.config_path.parent), recursive=False)
            observer.daemon = True
            observer.start()
        except OSError as exc:  # EMFILE, or inotify's own limits: reloading still works by SIGHUP
            log.warning("cannot watch %s (%s): reload with SIGHUP", self.config_path, exc.strerror or exc)
            return
        self._observer = observer

    def _reload_loop(self) -> None:
        while not self._stop.is_set():
            if not self._reload.wait(0.5):
                continue
            time.sleep(RELOAD_SETTLE_S)
            self._reload.clear()
            force, self._force_reload = self._force_reload, False
            if not self._stop.is_set():
                self.reload(force=force)

    def reload(self, *, force: bool = False) -> bool:
        """Re-read the config file and apply per-log settings live; False (old config kept) if invalid."""
        digest = _digest(self.config_path)
        if not force and digest is not None and digest == self._seen_digest:
            return True  # touched, or saved again unchanged: nothing new to apply or to complain about
        self._seen_digest = digest
        try:
            new = load_config(self.config_path)
        except (ConfigError, OSError) as exc:
            log.error("config reload refused, keeping the running config: %s", exc)
            self.notifier.status(f"config reload refused: {exc}")
            return False
        old, manager = self.config, self.manager
        if manager is None or old is None:
            return False
        for attr in ("data_dir", "mount_point", "read_only", "allow_other", "access", "kafka"):
            if getattr(new, attr, None) != getattr(old, attr, None):
                kafka = self.kafka
                if attr == "kafka" and kafka is not None and new.kafka and kafka.reload_users(new.kafka):
                    continue  # only the SCRAM users changed: applied now
                log.warning("config reload: %s changed; it takes effect at the next start", attr)
        _warn_cleaner_changes(old, new)
        try:
            manager.update_configs(new.defaults, dict(new.logs))
            if self.kafka is not None:
                self.kafka.config_reloaded()
            if not old.read_only:
                for name, log_config in new.logs.items():
                    if name not in manager.logs and name not in manager.offline:
                        manager.create_log(name, log_config)
        except (SeglogError, OSError) as exc:
            log.error("config reload failed, keeping the running config: %s", exc)
            return False
        if self.ops is not None:
            self.ops.context.configs.update(new.mount_defaults, new.mount_logs)
        self.config = new
        freeze_long_lived(serving=True)  # the logs the reload made, and the new configs
        log.info("config reloaded from %s", self.config_path)
        self.notifier.status(f"serving {len(manager.logs)} log(s) on {self.mount_point} (config reloaded)")
        return True

    # ------------------------------------------------------------------ shutdown
    def _shutdown_threads(self) -> None:
        if self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.stop()
                self._observer.join(timeout=2)
        if self._wakeup is not None:
            signal.set_wakeup_fd(-1)
            os.close(self._wakeup[1])  # ends the signal thread's read
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2)
        if self._wakeup is not None:
            os.close(self._wakeup[0])
            self._wakeup = None
        if self.mount_point is not None and is_mounted(self.mount_point):
            unmount(self.mount_point, lazy=True)
