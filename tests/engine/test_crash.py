"""Crash campaign: a child process appends in a loop and is killed with SIGKILL at random moments.

After each kill the log is reopened (unclean: no clean-shutdown marker), must keep every record the
child reported as flushed, expose no torn record, and pass ``seglogfs verify``. Retention's
``.deleted`` renames are killed one by one as well.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.cleaner_helpers import assert_verifies
from support.transactions import Scenario

from seglogfs.log_manager import LogManager
from seglogfs.read_committed import READ_COMMITTED
from seglogfs.records import iter_batch_headers, validate_batch

CHILD = r"""
import sys
from seglogfs.config import LogConfig
from seglogfs.log_manager import LogManager

manager = LogManager(sys.argv[1], LogConfig.from_mapping(
    {"segment.bytes": 20000, "index.interval.bytes": 512, "flush.messages": 50}))
log = manager.create_log("crash-0")
print("ready", flush=True)
i = log.end_offset
while True:
    info = log.append_values([b"rec-%08d" % (i + j) for j in range(7)])
    i = info.last_offset + 1
    if log.recovery_point == log.end_offset:       # flush.messages just fsynced everything
        print(log.recovery_point, flush=True)      # acknowledged as durable
    if i % 700 == 0:
        manager.checkpoint()
"""

KILLS = 12


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing_flushed(tmp_path):
    data = tmp_path / "data"
    rng = random.Random(20261122)
    durable = 0
    for round_no in range(KILLS):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], stdout=subprocess.PIPE, text=True)
        # Kill while appending: on a loaded machine the interpreter alone may take a second to start.
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.15, 0.6))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        acknowledged = [int(line) for line in out.split()]
        durable = max([durable, *acknowledged])

        manager = LogManager(data)
        log = manager.get("crash-0")
        assert log.end_offset >= durable, f"round {round_no}: lost flushed records"
        values = [r.value for r in log.iter_records()]
        assert values == [b"rec-%08d" % i for i in range(log.end_offset)], (
            f"round {round_no}: torn or out of order"
        )
        for segment in log.segments:
            raw = segment.log_path.read_bytes()
            headers = list(iter_batch_headers(raw))
            assert sum(h.size for h in headers) == len(raw)  # no torn tail left behind
            for header in headers:
                validate_batch(raw, header, path=segment.log_path)
        manager.close()
    verify = subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "verify", str(data)], capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert durable > 0


RETENTION_CHILD = textwrap.dedent(
    """
    import os, sys
    from seglogfs.config import LogConfig
    from seglogfs.log_manager import LogManager
    manager = LogManager(sys.argv[1], LogConfig.from_mapping(
        {"retention.bytes": 1, "retention.ms": -1, "file.delete.delay.ms": 0}))
    manager.checkpoint()  # the recovery point at the log end: the next load recovers nothing
    real_replace, crash_at, renames = os.replace, int(sys.argv[2]), 0
    def replace(src, dst):
        global renames
        real_replace(src, dst)
        if str(dst).endswith(".deleted"):
            renames += 1
            if renames == crash_at:
                os._exit(137)
    os.replace = replace
    manager.get("t-0").delete_old_segments()
    """
)


@pytest.mark.parametrize("crash_at", range(1, 8))
def test_a_kill_between_retentions_renames_keeps_aborted_records_hidden(
    tmp_path: Path, crash_at: int
) -> None:
    """Killed after each ``.deleted`` rename of retention, the log loads (read-only right away, then
    writable) with read_committed answers equal to the model's for the offsets still in it: a segment
    whose .txnindex went before its .log would come back with its aborted records visible."""
    data = tmp_path / "data"
    scenario = Scenario().send(7, [b"a0"]).send_plain([b"p0"]).abort(7).send(8, [b"c0"]).commit(8)
    scenario.roll().send(9, [b"a1", b"a2"]).send_plain([b"p1"]).abort(9).roll().send_plain([b"q"])
    model = scenario.write(data / "t-0")
    args = [sys.executable, "-c", RETENTION_CHILD, str(data), str(crash_at)]
    assert subprocess.run(args, timeout=60).returncode == 137
    for read_only in (True, False):
        with LogManager(data, read_only=read_only) as manager:
            lg = manager.get("t-0")
            committed = [(r.offset, r.value) for r in lg.iter_records(isolation=READ_COMMITTED)]
            kept = [o for o in model.visible if o >= lg.start_offset]
            assert committed == list(zip(kept, model.values_at(kept), strict=True)), (crash_at, read_only)
    assert_verifies(data / "t-0")
