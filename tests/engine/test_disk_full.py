"""A disk at or near full: ENOSPC only, the daemon alive, a failed append leaves nothing behind.

The data dir is a small tmpfs (we run as root). tmpfs allocates a page on first store, so a sparse
index file written through mmap on a full tmpfs is a SIGBUS: exactly the failure these tests guard.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.mount_fixture import Seglogd, require_root_mounts, seglogd, small_tmpfs  # noqa: F401  (fixture)

from seglogfs.config import LogConfig
from seglogfs.index import OffsetIndex, TimeIndex
from seglogfs.log import Log
from seglogfs.records import encode_values
from seglogfs.segment import LogSegment

SEED = int(os.environ.get("SEGLOG_CAMPAIGN_SEED", "20261123"))
PAGE = 4096


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs. Request it BEFORE ``seglogd`` so the daemon is gone when it is unmounted."""
    with small_tmpfs(tmp_path / "tiny") as path:
        yield path


class Filler:
    """A file that takes every free byte of its filesystem, then gives it back a page at a time."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = 0

    def fill(self) -> None:
        """Write zeros page by page until ENOSPC (the filesystem is then full to the page)."""
        page = b"\0" * PAGE
        while True:
            try:
                written = os.pwrite(self.fd, page, self.size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return
            self.size += written
            if written < PAGE:
                return

    def free(self, nbytes: int = PAGE) -> None:
        self.size = max(self.size - nbytes, 0)
        os.ftruncate(self.fd, self.size)

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink(missing_ok=True)


def _records(mount: Path, log: str) -> list[bytes]:
    return (mount / log / "records").read_bytes().splitlines()


def _daemon_state(d: Seglogd, context: str) -> str:
    """``context``, whether seglogd still runs (a negative code is the signal that killed it), its stderr."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        d.proc.wait(2)
    return f"{context}; seglogd exit code {d.proc.poll()}:\n{d.stderr()[-3000:]}"


def _no_traceback(stderr: str, context: str) -> None:
    assert "Traceback" not in stderr, f"{context}: traceback in the daemon's stderr:\n{stderr[-4000:]}"


# ---------------------------------------------------------------------------------------------- #6


def test_appending_on_a_disk_hovering_at_full_is_enospc_not_sigbus(tiny_disk: Path, seglogd) -> None:  # noqa: F811
    """Issue 7 #6: rolls on a full tmpfs used to create sparse indexes whose first store was a SIGBUS."""
    data = tiny_disk / "data"
    d = seglogd(
        data_dir=data,
        defaults={"segment.bytes": "8KiB", "segment.index.bytes": 8192, "index.interval.bytes": 128},
    )
    filler = Filler(tiny_disk / "filler")
    filler.fill()
    acknowledged: list[bytes] = []
    fd = os.open(d / "events-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        for round_no in range(filler.size // PAGE):
            filler.free()
            for j in range(4):
                line = b"r%05d-%d-%s" % (round_no, j, b"x" * 300)
                try:
                    os.write(fd, line + b"\n")
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, _daemon_state(d, f"round {round_no}: {exc}")
                    break
                acknowledged.append(line)
            assert d.proc is not None and d.proc.poll() is None, _daemon_state(d, f"round {round_no}")
            if len(acknowledged) > 300:
                break
    finally:
        with contextlib.suppress(OSError):  # ENOTCONN when the daemon died: the assertion says more
            os.close(fd)
        filler.close()
    assert len(acknowledged) > 100, "the disk never gave room back"
    assert _records(d.mount, "events-0") == acknowledged
    assert d.stop() == 0, d.stderr()[-3000:]
    _no_traceback(d.stderr(), "first run")
    d.start()
    assert _records(d.mount, "events-0") == acknowledged


def test_a_write_of_several_batches_that_hits_enospc_appends_none_of_them(seglogd, tmp_path: Path) -> None:  # noqa: F811
    """A write becomes 8 batches (max.message.bytes 1000) that need a roll, on a disk with one page
    free: ENOSPC, and none of the 8 records (4 used to stay); with room again, the next write appends."""
    with small_tmpfs(tmp_path / "tiny4", "4M") as disk:
        d = seglogd(
            data_dir=disk / "data",
            defaults={"segment.bytes": 4096, "max.message.bytes": 1000, "segment.index.bytes": 1200000},
        )
        filler = Filler(disk / "filler")
        try:
            fd = os.open(d / "events-0" / "append", os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, b"first\n")
                filler.fill()
                filler.free()
                lines = b"".join(b"%d-%s\n" % (i, b"v" * 797) for i in range(8))
                with pytest.raises(OSError) as err:
                    os.write(fd, lines)
                assert err.value.errno == errno.ENOSPC, err.value
                filler.free(16 * PAGE)
                os.write(fd, b"last\n")  # with room again, the next write appends
            finally:
                os.close(fd)
            assert _records(d.mount, "events-0") == [b"first", b"last"]
            assert d.proc is not None and d.proc.poll() is None, _daemon_state(d, "after ENOSPC")
            filler.close()
            assert d.stop() == 0, d.stderr()[-3000:]
            _no_traceback(d.stderr(), "ENOSPC mid-split")
        finally:
            with contextlib.suppress(OSError):  # closed already unless the test failed early
                filler.close()
            d.stop()


# ---------------------------------------------------------------------------------------------- #9


def test_reload_with_an_index_too_small_for_one_entry_is_refused(seglogd) -> None:  # noqa: F811
    """#9: segment.index.bytes 4-11 by SIGHUP used to be taken, and every append after the next roll
    (and ``info``) was EIO, even once the config was fixed. Now the reload is refused, naming key,
    value and reason, and the log goes on as before."""
    d = seglogd(defaults={"segment.bytes": "4KiB"})
    append = d / "events-0" / "append"
    lines = [b"before-%03d-%s" % (i, b"x" * 100) for i in range(60)]
    with open(append, "ab") as f:
        for line in lines:
            f.write(line + b"\n")
            f.flush()
    d.write_config(defaults={"segment.bytes": "4KiB", "segment.index.bytes": 8})
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "segment.index.bytes=8" not in d.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "segment.index.bytes=8: must be at least 12" in d.stderr(), d.stderr()[-3000:]
    more = [b"after-%03d-%s" % (i, b"y" * 100) for i in range(60)]  # several rolls
    with open(append, "ab") as f:
        for line in more:
            f.write(line + b"\n")
            f.flush()
    info = json.loads((d / "events-0" / "info").read_text())
    assert info["end_offset"] == 120 and info["segments"] > 2
    assert info["config"]["segment.index.bytes"] == 10 * 1024 * 1024
    assert _records(d.mount, "events-0") == lines + more
    assert d.stop() == 0
    d.write_config(defaults={"segment.bytes": "4KiB", "segment.index.bytes": 12})  # the fix
    d.start()
    with open(append, "ab") as f:
        f.write(b"last\n")
    assert _records(d.mount, "events-0") == [*lines, *more, b"last"]
    _no_traceback(d.stderr(), "restart")


# ---------------------------------------------------------------------------------------------- engine

# A child process, so that a SIGBUS (today's failure) shows as its exit code instead of killing pytest.
# It appends on a full disk, giving a page back each round, prints every acknowledged batch, and with
# "crash" exits without closing (the indexes stay preallocated, nothing trimmed, no marker).
_ENGINE_CHILD = r"""
import errno, os, random, sys
from seglogfs.config import LogConfig
from seglogfs.log import Log

data, seed, ending = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
cfg = LogConfig.from_mapping({
    "segment.bytes": rng.choice([2048, 4096, 9000]),
    "segment.index.bytes": rng.choice([12, 24, 100, 4096, 8192, 20000]),
    "index.interval.bytes": rng.choice([0, 100, 1000]),
})
log = Log.open(os.path.join(data, "disk-0"), cfg, create=True)
filler = os.open(os.path.join(data, "filler"), os.O_RDWR | os.O_CREAT)
size = 0
while True:
    try:
        size += os.pwrite(filler, b"\0" * 4096, size)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        break
print("config", cfg.segment_bytes, cfg.segment_index_bytes, cfg.index_interval_bytes, flush=True)
n = 0
while size > 0:
    size -= 4096
    os.ftruncate(filler, size)
    for _ in range(rng.randint(1, 6)):
        values = [b"%d-%s" % (n + i, b"v" * rng.randint(0, 300)) for i in range(rng.randint(1, 4))]
        try:
            info = log.append_values(values)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            print("failed", n, len(values), flush=True)
            continue
        assert info.first_offset == n
        n += len(values)
        print("acked", n, flush=True)
if ending == "crash":
    os._exit(0)
log.close()
"""


def _run_engine_child(data: Path, seed: int, ending: str) -> tuple[str, int]:
    child = subprocess.run(
        [sys.executable, "-c", _ENGINE_CHILD, str(data), str(seed), ending],
        capture_output=True, text=True, timeout=120, check=False,
    )
    config = next((line for line in child.stdout.splitlines() if line.startswith("config")), "")
    context = (
        f"seed {seed}, {ending}, {config} (segment, index bytes, interval): child exit "
        f"{child.returncode} (-7 is SIGBUS)\n{child.stderr[-3000:]}"
    )
    assert child.returncode == 0, context
    acked = [int(line.split()[1]) for line in child.stdout.splitlines() if line.startswith("acked")]
    assert acked, context
    return context, acked[-1]


@pytest.mark.parametrize("ending", ["crash", "close"])
def test_engine_on_a_disk_hovering_at_full_keeps_exactly_what_it_acked(tmp_path: Path, ending: str) -> None:
    """#6 and #9 in the engine: ENOSPC (never a SIGBUS) on rolls, index creation and .log writes; a
    failed append leaves no byte in any .log, so a restart, recovering on the still-full disk, finds
    exactly the acknowledged records: none lost, none reappearing."""
    for seed in range(SEED, SEED + 3):
        with small_tmpfs(tmp_path / f"disk-{seed}", "1M") as data:
            context, acked = _run_engine_child(data, seed, ending)
            # The disk is still full (the filler gave back only what the log took): recovery must fit.
            log = Log.open(data / "disk-0", clean_shutdown=ending == "close")
            try:
                values = [r.value.split(b"-", 1)[0] for r in log.iter_records()]
                assert values == [b"%d" % i for i in range(acked)], context
                on_disk = sum(s.size for s in log.segments)
                assert on_disk == sum(p.stat().st_size for p in (data / "disk-0").glob("*.log")), context
            finally:
                log.close()


def test_an_append_whose_index_cannot_open_leaves_nothing_in_the_log(tmp_path: Path) -> None:
    """#9: the batch used to be written before the indexes were opened, so an index that could not
    be created (then: segment.index.bytes 4-11) left the batch in the .log, where it reappeared
    after a crash, while the append had failed."""
    segment = LogSegment(tmp_path, 0, max_index_size=5)
    with pytest.raises(ValueError, match="smaller than one"):
        segment.append(encode_values([b"lost"], 0, 1_000), 0, 1_000)
    assert segment.size == 0
    assert segment.log_path.stat().st_size == 0
    assert not segment.index_path.exists() and not segment.time_index_path.exists()
    segment.close(trim=False)


# ---------------------------------------------------------------------------------------------- campaign

CAMPAIGN_PHASES = 3  # each: a fresh 2 MiB tmpfs, a random config, ~2 MiB of appends, 2 restarts
WRITERS = 3
KEPT_FOR_THE_END = 64 * 1024  # the filler's last pages, freed for the final clean stop (checkpoints)


class _Writer(threading.Thread):
    """Appends random complete lines through its own descriptor; keeps what was acknowledged.

    A write that returns is acknowledged (page cache); one that fails must be ENOSPC and leaves
    nothing. With ``fsync_odds`` some writes are followed by fsync, which must succeed too.
    """

    def __init__(self, path: Path, tag: bytes, rng: random.Random, fsync_odds: float, counter: list[int]):
        super().__init__(daemon=True)
        self.path, self.tag, self.rng, self.fsync_odds, self.counter = path, tag, rng, fsync_odds, counter
        self.acked: list[bytes] = []
        self.failed: list[bytes] = []
        self.errors: list[str] = []
        self.seq = 0
        self.stop = threading.Event()

    def run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            while not self.stop.is_set():
                lines = []
                for _ in range(self.rng.randint(1, 4)):
                    pad = bytes(self.rng.choices(b"abcdefghij", k=self.rng.randint(0, 300)))
                    lines.append(b"%s-%06d-%s" % (self.tag, self.seq, pad))
                    self.seq += 1
                try:
                    os.write(fd, b"\n".join(lines) + b"\n")
                    if self.rng.random() < self.fsync_odds:
                        os.fsync(fd)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        self.errors.append(f"{self.tag.decode()} seq {self.seq}: {exc!r}")
                        return
                    self.failed.extend(lines)
                else:
                    self.acked.extend(lines)
                self.counter[0] += 1
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)


def _check_log(records: list[bytes], writers: list[_Writer], context: str) -> None:
    """Every acknowledged line exactly once, in its writer's order; no failed line."""
    failed = {line for w in writers for line in w.failed}
    assert not failed.intersection(records), f"{context}: a failed append is in the log"
    for w in writers:
        mine = [r for r in records if r.startswith(w.tag + b"-")]
        first_difference = next(
            (i for i, (a, b) in enumerate(zip(mine, w.acked, strict=False)) if a != b),
            min(len(mine), len(w.acked)),
        )
        assert mine == w.acked, (
            f"{context}: writer {w.tag.decode()} acknowledged {len(w.acked)} lines, the log holds "
            f"{len(mine)} of its lines; first difference at {first_difference}"
        )
    assert len(records) == sum(len(w.acked) for w in writers), f"{context}: lines from nowhere"


def _start_writers(d: Seglogd, tag: bytes, rng: random.Random, counter: list[int]) -> list[_Writer]:
    writers = [
        _Writer(d / "events-0" / "append", b"%sw%d" % (tag, w), random.Random(rng.random()),
                rng.choice([0.0, 0.2]), counter)
        for w in range(WRITERS)
    ]
    for w in writers:
        w.start()
    return writers


def _stop_writers(d: Seglogd, running: list[_Writer], context: str) -> None:
    for w in running:
        w.stop.set()
    for w in running:
        w.join(30)
        assert not w.is_alive(), f"{context}: writer {w.tag.decode()} hangs"
        assert not w.errors, _daemon_state(d, f"{context}: {w.errors}")


def _hover_at_full(d: Seglogd, disk: Path, rng: random.Random, context: str) -> tuple[list[_Writer], int]:
    """Fill ``disk``, then give it back a page at a time while writers append; restart the daemon
    (kill -9 or SIGTERM) at two random rounds, on the full disk. Returns the writers and restarts;
    the last ``KEPT_FOR_THE_END`` bytes of the filler are then free again."""
    filler = Filler(disk / "filler")
    filler.fill()
    counter = [0]
    restart_rounds = set(rng.sample(range(20, 400), 2))
    writers: list[_Writer] = []
    running = _start_writers(d, b"r0", rng, counter)
    try:
        round_no = restarts = 0
        while filler.size > KEPT_FOR_THE_END:
            target = counter[0] + WRITERS * 2  # let each writer try about twice per page given back
            stuck_at = time.monotonic() + 30
            while counter[0] < target and all(w.is_alive() for w in running):
                assert time.monotonic() < stuck_at, _daemon_state(d, f"{context}: writes hang")
                time.sleep(0.001)
            assert d.proc.poll() is None, _daemon_state(d, f"{context}: round {round_no}")
            filler.free()
            round_no += 1
            if round_no in restart_rounds:
                _stop_writers(d, running, context)
                writers += running
                how = rng.choice(["kill -9", "SIGTERM"])
                if how == "kill -9":
                    d.kill()
                else:
                    d.stop()  # on a full disk the clean shutdown may fail: recovery then runs
                d.start()  # on the full disk
                restarts += 1
                after = f"{context}: after {how} at round {round_no}"
                _check_log(_records(d.mount, "events-0"), writers, after)
                running = _start_writers(d, b"r%d" % restarts, rng, counter)
    finally:
        for w in running:
            w.stop.set()
        _stop_writers(d, running, context)
        writers += running
        filler.close()
    return writers, restarts


@pytest.mark.slow
def test_campaign_a_disk_hovering_at_full(tmp_path: Path, seglogd) -> None:  # noqa: F811
    """Issue 7, standing campaign: writers append through the mount while a 2 MiB tmpfs data dir is
    filled and given back a page at a time, with rolls (small segments and indexes), kill -9 and
    clean restarts on the full disk. Every write succeeds or is ENOSPC; seglogd never dies; after a
    clean restart every acknowledged line is there, exact, and nothing unacknowledged."""
    rng = random.Random(SEED)
    totals = {"acked": 0, "enospc": 0, "restarts": 0}
    for phase in range(CAMPAIGN_PHASES):
        cfg = {
            "segment.bytes": rng.choice(["4KiB", "8KiB", "16KiB", "64KiB"]),
            "segment.index.bytes": rng.choice([12, 64, 1000, 4096, 8192]),
            "index.interval.bytes": rng.choice([0, 256, 4096]),
            "flush.messages": rng.choice([1, 10, 1000]),
        }
        context = f"seed {SEED}, phase {phase}, config {cfg}"
        with small_tmpfs(tmp_path / f"disk{phase}") as disk:
            d = seglogd(data_dir=disk / "data", defaults=cfg)
            try:
                writers, restarts = _hover_at_full(d, disk, rng, context)
                assert d.proc.poll() is None, _daemon_state(d, context)
                assert d.stop() == 0, _daemon_state(d, f"{context}: clean stop")
                d.start()
                _check_log(_records(d.mount, "events-0"), writers, f"{context}: after the final restart")
                assert d.stop() == 0, _daemon_state(d, f"{context}: last stop")
                for run in range(1, d.runs + 1):
                    stderr = d.config_path.with_name(f"seglogd-{run}.stderr").read_text(errors="replace")
                    _no_traceback(stderr, f"{context}: run {run}")
            finally:
                d.cleanup()  # before the tmpfs goes
        acked = sum(len(w.acked) for w in writers)
        enospc = sum(len(w.failed) for w in writers)
        assert acked > 200 and enospc > 0, f"{context}: {acked} lines acknowledged, {enospc} ENOSPC"
        totals["acked"] += acked
        totals["enospc"] += enospc
        totals["restarts"] += restarts
    print(f"disk-full campaign, seed {SEED}: {totals}")


def test_index_files_are_sparse_and_a_full_disk_is_enospc(tmp_path: Path) -> None:
    """Indexes cost what they hold: a new, grown or reset index file is sparse at its preallocated
    length (Kafka's setLength), an entry allocates only its page (the time index also the next
    slot's, for the final entry of a roll or close); on a full disk an entry is ENOSPC with the
    index unchanged (never a SIGBUS: nothing is stored through a mapping)."""

    def allocated(path: Path) -> int:
        return path.stat().st_blocks * 512

    created = OffsetIndex(tmp_path / "a.index", 0, 64 * 1024)
    assert created.path.stat().st_size == 64 * 1024 and allocated(created.path) == 0
    for i in range(500):  # 4000 bytes of entries
        created.append(i, i * 100)
    assert allocated(created.path) <= 2 * PAGE
    created.trim_to_valid_size()
    assert created.path.stat().st_size == 4000
    created.resize(128 * 1024)
    assert created.path.stat().st_size == 128 * 1024 and allocated(created.path) <= 2 * PAGE
    created.close()
    assert created.path.stat().st_size == 4000

    times = TimeIndex(tmp_path / "a.timeindex", 0, 120_000)
    assert times.path.stat().st_size == 120_000 and allocated(times.path) <= PAGE
    times.reset()
    assert allocated(times.path) <= PAGE
    times.close()

    found = tmp_path / "c.index"
    with open(found, "wb") as f:
        f.truncate(80_000)  # what Kafka's RandomAccessFile.setLength leaves
    index = OffsetIndex(found, 0, 80_000)
    index.truncate_to(0)
    index.append(5, 100)
    assert allocated(found) <= PAGE
    index.close()

    with small_tmpfs(tmp_path / "full", "1M") as disk:
        full_offsets = OffsetIndex(disk / "b.index", 0, 10 * 1024 * 1024)
        full_times = TimeIndex(disk / "b.timeindex", 0, 10 * 1024 * 1024)
        filler = Filler(disk / "filler")
        filler.fill()
        try:
            appended = 0
            with pytest.raises(OSError) as err:
                for i in range(PAGE):  # runs out of its page within PAGE // 8 entries
                    full_offsets.append(i, i)
                    appended += 1
            assert err.value.errno == errno.ENOSPC and str(full_offsets.path) in str(err.value)
            assert full_offsets.entries == appended
            with pytest.raises(OSError) as err:
                for i in range(PAGE):
                    full_times.maybe_append(1000 + i, i)
            assert err.value.errno == errno.ENOSPC
            entries = full_times.entries
            full_times.maybe_append(10**6, 10**5, skip_full_check=True)  # the final entry has its room
            assert full_times.entries == entries + 1
            full_offsets.close()
            full_times.close()
        finally:
            filler.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_log_opens_on_a_full_disk_without_its_producer_snapshots(tmp_path: Path, clean: bool) -> None:
    """The full suite found it: the snapshots written at open (and at roll) hit ENOSPC, and the log went
    offline. A snapshot only spares a later replay: on a full disk it is skipped with a warning."""
    with small_tmpfs(tmp_path / "disk") as disk:
        directory = disk / "data" / "t-0"
        cfg = LogConfig.from_mapping({"segment.index.bytes": 4096})
        with Log.open(directory, cfg, create=True) as lg:
            lg.append_values([b"v" * 100] * 10)
            lg.roll()
            lg.append_values([b"w" * 100] * 10)
        for snapshot in directory.glob("*.snapshot"):
            snapshot.unlink()
        filler = Filler(disk / "filler")
        filler.fill()
        try:
            with Log.open(directory, cfg, clean_shutdown=clean) as lg:  # no snapshot to load: writes some
                assert lg.end_offset == 20 and lg.last_stable_offset == 20
                assert not list(directory.glob("*.snapshot"))
        finally:
            os.close(filler.fd)
