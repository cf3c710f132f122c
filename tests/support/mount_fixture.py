"""A real seglogd in a subprocess with a real FUSE mount, for the FUSE and daemon tests.

Use it with ``from support.mount_fixture import seglogd`` (the fixture) in a test module. The fixture always
unmounts (``fusermount3 -u``, lazily when busy) and kills the process, even when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"

def require_fuse() -> None:
    """Fail (never skip) without /dev/fuse and fusermount3: scripts/install.sh provides both, so
    their absence is a broken machine, and a silently skipped mount test would prove nothing."""
    missing = [p for p in ("/dev/fuse", FUSERMOUNT) if not os.path.exists(p)]
    if missing:
        pytest.fail(f"FUSE tests need {', '.join(missing)} (run scripts/install.sh)", pytrace=False)


def require_root_mounts(what: str, *, tools: tuple[str, ...] = (), paths: tuple[str, ...] = ()) -> None:
    """Fail (never skip) when a test that mounts a real filesystem (a tmpfs, a loop volume) cannot:
    CI runs as root and scripts/install.sh installs the tools, so a skip would hide a broken machine."""
    missing = [t for t in tools if shutil.which(t) is None] + [p for p in paths if not os.path.exists(p)]
    if os.geteuid() != 0:
        missing.insert(0, "root")
    if missing:
        needs = ", ".join(missing)
        pytest.fail(f"{what} needs {needs} (run as root after scripts/install.sh)", pytrace=False)


#: marks tests that mount: the conftest fixture fails them (never skips) on a machine without FUSE
fuse_required = pytest.mark.usefixtures("fuse_available")


def mounted(path: Path) -> bool:
    """True when ``path`` appears in /proc/self/mounts."""
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(len(parts) > 1 and parts[1] == target for parts in (line.split() for line in f))


def unmount(path: Path) -> None:
    """Unmount ``path`` if mounted: ``fusermount3 -u``, then ``-uz`` if it is busy."""
    if not mounted(path):
        return
    if subprocess.run([FUSERMOUNT, "-u", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run([FUSERMOUNT, "-uz", str(path)], capture_output=True, check=False)


@dataclass
class Seglogd:
    """One daemon run: its config, data dir, mount point and process."""

    config_path: Path
    data_dir: Path
    mount: Path
    settings: dict[str, Any]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    stderr_path: Path | None = None
    runs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __truediv__(self, name: str) -> Path:
        return self.mount / name

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> Seglogd:
        """Start seglogd and wait until the mount answers."""
        self.runs += 1
        self.stderr_path = self.config_path.with_name(f"seglogd-{self.runs}.stderr")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "seglogd", "--config", str(self.config_path)],
                cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=self.env,
                preexec_fn=self.extra.get("preexec_fn"),  # e.g. a lower RLIMIT_NOFILE
            )
        if wait:
            self.wait_mounted(timeout)
        return self

    def wait_mounted(self, timeout: float = 30.0) -> None:
        """Wait for the mount (fails with the daemon's stderr if it exits first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"seglogd exited with {self.proc.returncode}:\n{self.stderr()}")
            if mounted(self.mount):
                try:
                    # a stale predecessor's mount is listed too, but fails here; statfs always reaches
                    # the daemon, while stat() may be answered from the kernel's attribute cache
                    os.statvfs(self.mount)
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"seglogd did not mount {self.mount} within {timeout} s:\n{self.stderr()}")

    def stderr(self) -> str:
        """Everything the daemon wrote to stderr so far."""
        return self.stderr_path.read_text(errors="replace") if self.stderr_path else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` and wait for the exit code."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        return code

    def kill(self) -> None:
        """SIGKILL: leaves a dead mount behind, as the OOM killer would."""
        assert self.proc is not None
        self.proc.kill()
        # A killed process exits once its threads leave the kernel: one in an fsync or a page fault
        # on a disk the rest of the suite keeps busy took more than 10 s once.
        self.proc.wait(60)

    def write_config(self, **changes: Any) -> None:
        """Rewrite the config file with ``changes`` applied to the top-level settings."""
        self.settings.update(changes)
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self.settings, sort_keys=False))
        tmp.replace(self.config_path)

    def cleanup(self) -> None:
        """Stop the process and make sure nothing stays mounted."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        unmount(self.mount)
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        unmount(self.mount)


def make_seglogd(tmp_path: Path, *, name: str = "run", data_dir: Path | None = None, read_only: bool = False,
                 logs: dict[str, dict] | None = None, defaults: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> Seglogd:
    """A configured (not yet started) daemon under ``tmp_path/name``."""
    base = tmp_path / name
    base.mkdir(parents=True, exist_ok=True)
    data = data_dir or base / "data"
    mount = base / "mnt"
    settings: dict[str, Any] = {
        "data_dir": str(data),
        "mount_point": str(mount),
        "read_only": read_only,
        "defaults": defaults if defaults is not None else {"segment.bytes": "1MiB"},
        "logs": logs if logs is not None else {"events-0": {}},
    }
    full_env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    full_env.update(env or {})
    daemon = Seglogd(base / "seglogfs.yaml", data, mount, settings, full_env)
    daemon.write_config()
    return daemon


@pytest.fixture
def seglogd(tmp_path: Path) -> Iterator[Callable[..., Seglogd]]:
    """Factory: ``seglogd(**make_seglogd kwargs, start=True)`` -> a running, mounted :class:`Seglogd`."""
    started: list[Seglogd] = []

    def factory(start: bool = True, **kwargs: Any) -> Seglogd:
        daemon = make_seglogd(tmp_path, name=f"run{len(started)}", **kwargs)
        started.append(daemon)
        if start:
            daemon.start()
        return daemon

    try:
        yield factory
    finally:
        for daemon in started:
            daemon.cleanup()


def read_stdout_until(proc: subprocess.Popen, done: Callable[[bytes], bool], timeout: float = 30.0) -> bytes:
    """What ``proc`` (a follower such as ``tail -f``) writes to its stdout until ``done(got)`` or it
    stalls for ``timeout``."""
    got = b""
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 1 << 16)  # type: ignore[union-attr]
        if not chunk:
            break
        got += chunk
    return got


RELEASE_TIMEOUT = 10.0  # a partial line is committed at RELEASE, just after the last close() returns


def sh(cmd: str, *, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    """``cmd`` run by bash: its exit status, text stdout and error messages ("write error: Invalid
    argument"); with ``check``, a non-zero exit fails the test with the command's stderr."""
    result = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd!r} failed ({result.returncode}): {result.stderr}")
    return result


def log_info(mnt: Path, log: str) -> dict:
    """The parsed ``<log>/info`` of a mount."""
    return json.loads((mnt / log / "info").read_text())


def end_offset(mnt: Path, log: str) -> int:
    return log_info(mnt, log)["end_offset"]


def wait_end(mnt: Path, log: str, end: int, timeout: float = RELEASE_TIMEOUT) -> None:
    """Wait (bounded) for ``log`` to end at ``end``: a record committed at release comes just after
    close() returns."""
    deadline = time.monotonic() + timeout
    while end_offset(mnt, log) < end and time.monotonic() < deadline:
        time.sleep(0.01)
    assert end_offset(mnt, log) == end


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "2M") -> Iterator[Path]:
    """``path`` as a tmpfs of ``size`` for the duration; always unmounted (lazily if still busy)."""
    require_root_mounts("a small tmpfs data dir")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)
