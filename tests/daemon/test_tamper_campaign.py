"""Standing campaign: what operators and their tools do to a live mount and its data dir.

Each round appends numbered lines to several logs through the mount, then does one of: a backup
and search of the whole mount (``tar``, ``grep -r``, ``du``, ``find``), a live reload with changed
settings (SIGHUP), a sealed segment cut short under the daemon, or a whole log dir removed under
it. After every round:
- the daemon is alive and has logged no traceback;
- a log nobody tampered with holds exactly the lines whose write() returned, in order;
- a log with a cut segment reads without an error: its lines are the acknowledged ones less a
  stretch lost with the cut, in order, none invented;
- a removed log's appends fail (nothing acknowledged that is not on disk) and its ``info`` says why.
A clean stop and a restart keep all of that. Seeded: ``SEGLOG_CAMPAIGN_SEED``; the seed and the
round are in every message.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.mount_fixture import Seglogd, fuse_required, seglogd  # noqa: F401  (fixture)

SEED = int(os.environ.get("SEGLOG_CAMPAIGN_SEED", "20261127"))
ROUNDS = 10
LOGS = [f"t{i}-0" for i in range(4)]
ACTIONS = ("backup", "reload", "cut", "remove")


def _append(d: Seglogd, log: str, first: int, count: int) -> int:
    """Append lines first..first+count-1 in writes of a few lines; how many were acknowledged."""
    done = 0
    try:
        fd = os.open(d / log / "append", os.O_WRONLY | os.O_APPEND)
    except OSError as exc:  # an offline log: every path but info is EIO
        assert exc.errno == errno.EIO, exc
        return 0
    try:
        while done < count:
            n = min(count - done, 7)
            os.write(fd, b"".join(b"%s-%06d\n" % (log.encode(), first + done + i) for i in range(n)))
            done += n
    except OSError as exc:
        assert exc.errno == errno.EIO, exc
    finally:
        try:
            os.close(fd)
        except OSError as exc:
            assert exc.errno == errno.EIO, exc
    return done


def _lines(d: Seglogd, log: str) -> list[int]:
    return [int(line.rsplit(b"-", 1)[1]) for line in (d / log / "records").read_bytes().splitlines()]


def _sealed_segments(d: Seglogd, log: str) -> list[Path]:
    return sorted((d.data_dir / log).glob("*.log"))[:-1]


def _check(d: Seglogd, acked: dict[str, int], state: dict[str, str], where: str) -> None:
    assert d.proc is not None and d.proc.poll() is None, f"{where}: the daemon died\n{d.stderr()}"
    assert "Traceback" not in d.stderr(), f"{where}:\n{d.stderr()}"
    for log in LOGS:
        if state[log] == "removed":
            info = json.loads((d / log / "info").read_text())
            assert "offline" in json.dumps(info), f"{where}: {log}: {info}"
            continue
        got = _lines(d, log)
        if state[log] == "intact":
            assert got == list(range(acked[log])), f"{where}: {log} lost or invented records"
        else:  # cut: a stretch is gone, nothing is invented, the order holds
            assert got == sorted(set(got)) and set(got) <= set(range(acked[log])), f"{where}: {log}"
            assert got[-1] == acked[log] - 1, f"{where}: {log}: the records after the cut are gone"


def _backup(d: Seglogd, tmp: Path, logs: list[str]) -> None:
    """tar, grep -r, du and find over the intact logs (a damaged log's lost records are EIO by
    contract, an offline log's every path but info)."""
    names = " ".join(logs)
    tar = subprocess.run(
        f"tar cf - --exclude='append*' -C {d.mount} {names} | cat > {tmp / 'backup.tar'}",
        shell=True, capture_output=True, text=True, check=False,
    )
    assert tar.returncode == 0, tar.stderr
    paths = [str(d / log) for log in logs]
    for command in (["grep", "-r", "-c", "--exclude=append*", "000007", *paths],
                    ["du", "-s", *paths], ["find", *paths, "-type", "f"]):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode in (0, 1), (command, result.stderr)  # grep: 1 when nothing matched
        assert "Input/output error" not in result.stderr, (command, result.stderr)


@fuse_required
@pytest.mark.slow
def test_operators_and_their_tools_on_a_live_mount(seglogd, tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(SEED)
    configs = {log: {"segment.bytes": 2048, "index.interval.bytes": 256, "retention.ms": -1} for log in LOGS}
    d = seglogd(logs=configs)
    acked = dict.fromkeys(LOGS, 0)
    state = dict.fromkeys(LOGS, "intact")
    for round_no in range(ROUNDS):
        where = f"seed {SEED} round {round_no}"
        for log in LOGS:
            count = rng.randint(20, 120)
            done = _append(d, log, acked[log], count)
            if state[log] == "removed":
                assert done == 0, f"{where}: {log} acknowledged {done} records after its dir was removed"
            else:
                assert done == count, f"{where}: {log}"
                acked[log] += done
        action = rng.choice(ACTIONS)
        intact = [log for log in LOGS if state[log] == "intact"]
        if action == "backup":
            _backup(d, tmp_path, intact)
        elif action == "reload":
            for log in LOGS:
                configs[log]["segment.bytes"] = rng.choice([1024, 2048, 4096])
            d.write_config(logs=configs)
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            time.sleep(0.3)
        elif action == "cut" and len(intact) > 1:
            log = rng.choice(intact)
            sealed = _sealed_segments(d, log)[1:]  # not the first: some records stay before the cut
            if sealed:
                victim = rng.choice(sealed)
                os.truncate(victim, rng.randint(1, victim.stat().st_size - 1))
                state[log] = "cut"
        elif action == "remove" and len(intact) > 1:
            log = rng.choice(intact)
            shutil.rmtree(d.data_dir / log)
            state[log] = "removed"
            assert _append(d, log, acked[log], 3) == 0, f"{where}: {log} took appends into a removed dir"
        _check(d, acked, state, f"{where} after {action}")
    before = {log: _lines(d, log) for log in LOGS if state[log] == "cut"}
    d.stop()
    d.start()
    for log in LOGS:
        if state[log] == "removed":  # listed in the config: created again, empty; nothing was acked
            assert _lines(d, log) == [], f"seed {SEED}: {log} after the restart"
        elif state[log] == "cut":
            assert _lines(d, log) == before[log], f"seed {SEED}: {log} read otherwise after the restart"
        else:
            assert _lines(d, log) == list(range(acked[log])), f"seed {SEED}: {log} after the restart"
    assert "Traceback" not in d.stderr()
    assert d.stop() == 0
