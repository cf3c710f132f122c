"""Crash campaign: a child process appends in a loop and is killed with SIGKILL at random moments.

After each kill the log is reopened (unclean: no clean-shutdown marker), must keep every record the
child reported as flushed, expose no torn record, and pass ``seglogfs verify``.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest

from seglogfs.log_manager import LogManager
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

KILLS = 20


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
        [sys.executable, "-m", "seglogfs.cli", "verify", str(data)], capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert durable > 0
