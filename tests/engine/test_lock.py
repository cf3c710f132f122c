"""The owner lock of a log directory, across processes and within one process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglogfs.errors import LogLockedError
from seglogfs.lock import LogLock, read_lock_holder
from seglogfs.log_files import DATA_DIR_LOCK_FILE, LOG_LOCK_FILE

HOLDER = """
import sys
from seglogfs.lock import LogLock
lock = LogLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.read()          # hold until stdin closes or we are killed
lock.release()
print("released", flush=True)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A separate process holding the lock on tmp_path."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "locked\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_second_process_is_refused_naming_dir_and_pid(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(LogLockedError) as info:
        LogLock(tmp_path).acquire()
    err = info.value
    assert err.pid == holder.pid  # type: ignore[attr-defined]
    assert err.path == str(tmp_path)  # type: ignore[attr-defined]
    assert f"pid {holder.pid}" in str(err)
    assert str(tmp_path) in str(err)
    assert read_lock_holder(tmp_path) == holder.pid


def test_lock_is_released_when_the_holder_is_killed(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(LogLockedError):
        LogLock(tmp_path).acquire()
    holder.send_signal(signal.SIGKILL)
    assert holder.wait(timeout=10) == -signal.SIGKILL
    with LogLock(tmp_path) as lock:
        assert lock.locked
        assert read_lock_holder(tmp_path) == os.getpid()


def test_lock_is_released_when_the_holder_releases(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.close()
    assert holder.stdout.readline() == "released\n"
    lock = LogLock(tmp_path).acquire()
    lock.release()
    assert holder.wait(timeout=10) == 0


def test_child_process_is_refused_while_we_hold(tmp_path: Path) -> None:
    with LogLock(tmp_path):
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\nfrom seglogfs.errors import LogLockedError\nfrom seglogfs.lock import LogLock\n"
                "try:\n    LogLock(sys.argv[1]).acquire()\nexcept LogLockedError as e:\n"
                "    print(e.pid)\n    sys.exit(3)\n",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() == str(os.getpid())


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    first = LogLock(tmp_path).acquire()
    try:
        with pytest.raises(LogLockedError) as info:
            LogLock(tmp_path).acquire()
        assert info.value.pid == os.getpid()  # type: ignore[attr-defined]
        assert first.acquire() is first  # re-acquiring the same object is a no-op
    finally:
        first.release()
    assert not first.locked
    with LogLock(tmp_path) as again:
        assert again.locked
    first.release()  # releasing twice is harmless


def test_lock_file_holds_the_pid_and_stays(tmp_path: Path) -> None:
    (tmp_path / LOG_LOCK_FILE).write_text("99999999\nstale junk from an older holder\n")
    with LogLock(tmp_path):
        assert (tmp_path / LOG_LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert (tmp_path / LOG_LOCK_FILE).exists()  # never unlinked (that would allow two holders)


def test_missing_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LogLock(tmp_path / "missing").acquire()


def test_read_lock_holder_without_file(tmp_path: Path) -> None:
    assert read_lock_holder(tmp_path) is None


def test_a_writing_log_manager_locks_its_data_dir(tmp_path: Path) -> None:
    from seglogfs.log_manager import LogManager

    data = tmp_path / "data"
    with LogManager(data):  # no log yet: only the data dir itself holds the lock
        assert read_lock_holder(data, DATA_DIR_LOCK_FILE) == os.getpid()
        with pytest.raises(LogLockedError) as info:
            LogManager(data)
        assert f"data dir {data} is locked for writing by pid {os.getpid()}" in str(info.value)
        with LogManager(data, read_only=True) as reader:  # readers take no lock
            assert reader.logs == {}
    with LogManager(data) as again:  # released by close()
        again.create_log("e-0")


def test_lock_file_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / LOG_LOCK_FILE).symlink_to(target)
    with pytest.raises(OSError):
        LogLock(tmp_path / "d").acquire()
    assert target.read_text() == "precious\n"


def test_a_log_manager_holds_no_lock_descriptor_per_log_yet_keeps_other_writers_out(tmp_path: Path) -> None:
    """The data dir's lock covers its logs: a writing LogManager keeps one lock descriptor whatever the
    number of logs, a writer of one of its logs (another process, or this one) is refused naming the
    data dir, and a log whose own lock another process took first goes offline."""
    from seglogfs.log import Log
    from seglogfs.log_manager import LogManager

    data = tmp_path / "data"
    with LogManager(data) as manager:
        for i in range(20):
            manager.create_log(f"e{i}-0")
    taken = data / "e3-0"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(taken)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        fds = len(os.listdir("/proc/self/fd"))
        with LogManager(data) as manager:
            assert len(os.listdir("/proc/self/fd")) <= fds + 1  # the data dir's .lock
            assert "e3-0" in manager.offline and len(manager.logs) == 19
            refused = f"is in a data dir locked for writing by pid {os.getpid()}"
            with pytest.raises(LogLockedError, match=refused):
                Log.open(data / "e5-0")
            child = subprocess.run(
                [sys.executable, "-c", "import sys\nfrom seglogfs.lock import LogLock\n"
                 "LogLock(sys.argv[1]).acquire()", str(data / "e5-0")],
                capture_output=True, text=True, check=False,
            )
            assert child.returncode != 0 and "is in a data dir locked for writing" in child.stderr
    finally:
        proc.kill()
        proc.wait(timeout=10)
    Log.open(data / "e5-0").close()  # free again once the manager is closed


def test_writers_of_many_logs_of_one_data_dir_open_them_at_once(tmp_path: Path) -> None:
    """Each writer checks the data dir's lock (shared, for an instant): 8 threads opening 8 logs of one
    data dir at the same time never refuse each other."""
    import threading

    from seglogfs.log import Log

    data = tmp_path / "data"
    data.mkdir()
    (data / DATA_DIR_LOCK_FILE).write_text("")
    errors: list[BaseException] = []

    def open_and_close(name: str) -> None:
        try:
            for _ in range(30):
                Log.open(data / name, create=True).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_close, args=(f"w{i}-0",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
