"""``fs.isolation.level`` through a real mount: a broker-shaped transactional log (kafka-python data
batches, hand-built markers: tests/support/transactions.py) read with cat, head, wc and by-offset
under read_committed and read_uncommitted, against the model computed from the scenario's steps."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.mount_fixture import Seglogd, fuse_required
from support.mount_fixture import seglogd as seglogd  # the fixture
from support.transactions import NOW, Scenario, TxnModel, data_batch, random_scenario

from seglogfs.views import value_stream

COMMITTED, ALL = "committed-0", "all-0"


def _mount(seglogd, tmp_path: Path, scenario: Scenario) -> tuple[Seglogd, TxnModel]:
    data = tmp_path / "data"
    model = scenario.write(data / COMMITTED)
    shutil.copytree(data / COMMITTED, data / ALL)
    # the scenario's timestamps are old: without retention.ms -1, retention would empty the logs
    keep = {"retention.ms": -1}
    logs = {COMMITTED: {**keep, "fs.isolation.level": "read_committed"}, ALL: keep}
    return seglogd(data_dir=data, logs=logs), model


def _lines(values: list[bytes]) -> bytes:
    return b"".join(v + b"\n" for v in values)


def _cat(path: Path) -> bytes:
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


def _switch_to_read_committed(mnt: Seglogd, name: str) -> None:
    """Set ``fs.isolation.level: read_committed`` on log ``name`` by a config reload (SIGHUP); return
    once ``info`` shows it and the notifier has had a few checks."""
    logs = mnt.settings["logs"]
    mnt.write_config(logs={**logs, name: {**logs[name], "fs.isolation.level": "read_committed"}})
    mnt.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while json.loads((mnt / name / "info").read_text())["config"]["fs.isolation.level"] != "read_committed":
        assert time.monotonic() < deadline, mnt.stderr()
        time.sleep(0.05)
    time.sleep(1)  # a few notifier checks


@pytest.mark.fuse
@fuse_required
@pytest.mark.parametrize("seed", [1, 4])
def test_records_and_jsonl_show_what_a_read_committed_consumer_sees(
    seglogd, tmp_path: Path, seed: int
) -> None:
    mnt, model = _mount(seglogd, tmp_path, random_scenario(seed))
    visible = model.visible
    assert len(visible) < len(model.records)  # the scenario hides something
    assert _cat(mnt / COMMITTED / "records") == _lines(model.values_at(visible))
    assert _cat(mnt / ALL / "records") == _lines([r.value for r in model.records])
    jsonl = [json.loads(line) for line in _cat(mnt / COMMITTED / "records.jsonl").splitlines()]
    assert [o["offset"] for o in jsonl] == visible
    wc = subprocess.run(
        ["wc", "-l", str(mnt / COMMITTED / "records")], capture_output=True, text=True, check=True
    )
    assert int(wc.stdout.split()[0]) == len(visible)
    info = json.loads((mnt / COMMITTED / "info").read_text())
    assert info["last_stable_offset"] == model.last_stable_offset
    assert info["config"]["fs.isolation.level"] == "read_committed"
    assert json.loads((mnt / ALL / "info").read_text())["config"]["fs.isolation.level"] == "read_uncommitted"
    middle = visible[len(visible) // 2]
    head = subprocess.run(
        ["head", "-n", "3", str(mnt / COMMITTED / "from" / str(middle))], capture_output=True, check=True
    ).stdout
    after = [o for o in visible if o >= middle][:3]
    assert head == _lines(model.values_at(after))


@pytest.mark.fuse
@fuse_required
def test_by_offset_of_an_aborted_or_unstable_record_is_enoent_under_read_committed(
    seglogd, tmp_path: Path
) -> None:
    scenario = (
        Scenario().send_plain([b"p0"]).send(7, [b"aborted"]).abort(7)  # offsets 0, 1, marker 2
        .send(8, [b"kept"]).commit(8)  # 3, marker 4
        .send(9, [b"open"]).send_plain([b"after"])  # 5 (never ends), 6
    )  # fmt: skip
    mnt, model = _mount(seglogd, tmp_path, scenario)
    assert model.last_stable_offset == 5
    committed, everything = mnt / COMMITTED / "by-offset", mnt / ALL / "by-offset"
    assert (committed / "0").read_bytes() == b"p0" and (committed / "3").read_bytes() == b"kept"
    for offset in (1, 5, 6):  # aborted, in the open transaction, past the LSO
        assert not (committed / str(offset)).exists()
        with pytest.raises(FileNotFoundError):
            (committed / str(offset)).read_bytes()
    assert [(everything / str(o)).read_bytes() for o in (1, 5, 6)] == [b"aborted", b"open", b"after"]
    listed = subprocess.run(["ls", str(committed)], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(map(int, listed)) == [0, 3]  # ls by-offset: what read_committed can open
    assert sorted(map(int, os.listdir(everything))) == list(range(7))  # gap-free: markers listed too
    # an append lands past the open transaction: a read_committed reader waits for it, as in Kafka
    with open(mnt / COMMITTED / "append", "ab") as append:
        append.write(b"new\n")
    assert json.loads((mnt / COMMITTED / "info").read_text())["end_offset"] == 8
    assert _cat(mnt / COMMITTED / "records") == b"p0\nkept\n"
    assert not (committed / "7").exists()


@pytest.mark.fuse
@fuse_required
def test_kill_9_with_a_transaction_open_keeps_the_state_and_the_txnindex_bytes(
    seglogd, tmp_path: Path
) -> None:
    """A broker copy with an open transaction and aborted ones, served, appended to, killed -9 and
    started again: the same .txnindex bytes, the same last stable offset, the appends kept."""
    mnt, model = _mount(seglogd, tmp_path, random_scenario(6, steps=80))
    info = json.loads((mnt / COMMITTED / "info").read_text())
    assert info["last_stable_offset"] == model.last_stable_offset < model.end_offset
    log_dir = mnt.data_dir / COMMITTED
    txnindexes = {p.name: p.read_bytes() for p in sorted(log_dir.glob("*.txnindex")) if p.stat().st_size}
    assert txnindexes  # the first start (no clean-shutdown marker) rebuilt them
    before = _cat(mnt / COMMITTED / "records")
    subprocess.run(
        ["bash", "-c", f"for i in 1 2 3; do echo appended-$i >> {mnt / COMMITTED / 'append'}; done"],
        check=True,
    )
    mnt.kill()
    mnt.start()  # recovers from the recovery point on: the .txnindex files it rebuilds are the same
    assert {
        p.name: p.read_bytes() for p in sorted(log_dir.glob("*.txnindex")) if p.stat().st_size
    } == txnindexes
    info = json.loads((mnt / COMMITTED / "info").read_text())
    assert info["last_stable_offset"] == model.last_stable_offset
    assert info["end_offset"] == model.end_offset + 3  # the acknowledged appends survived
    assert _cat(mnt / COMMITTED / "records") == before  # still behind the open transaction


@pytest.mark.fuse
@fuse_required
def test_a_live_switch_of_the_isolation_level_drops_what_the_kernel_cached(seglogd, tmp_path: Path) -> None:
    """``fs.isolation.level`` changed by a config reload: the by-offset files, sizes and streams the
    kernel cached under the old level (hour-long timeouts) are invalidated, not served for an hour."""
    scenario = Scenario().send_plain([b"p0"]).send(7, [b"aborted"]).abort(7).send_plain([b"p3"])
    mnt, _ = _mount(seglogd, tmp_path, scenario)
    log = mnt / ALL
    assert (log / "by-offset" / "1").read_bytes() == b"aborted"  # now in the kernel's caches
    assert _cat(log / "records") == b"p0\naborted\np3\n" and (log / "records").stat().st_size == 14
    _switch_to_read_committed(mnt, ALL)
    assert not (log / "by-offset" / "1").exists()
    with pytest.raises(FileNotFoundError):
        (log / "by-offset" / "1").read_bytes()
    assert (log / "records").stat().st_size == 6
    assert _cat(log / "records") == b"p0\np3\n"


def _keyed_batch(base_offset: int, key: bytes, value: bytes) -> bytes:
    """A non-transactional v2 batch of one keyed record, from kafka-python's builder."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 30)
    builder.append(0, timestamp=NOW, key=key, value=value, headers=[])
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    return bytes(batch)


@pytest.mark.fuse
@fuse_required
def test_the_cleaner_never_cleans_past_the_last_stable_offset(seglogd, tmp_path: Path) -> None:
    """A compacted broker copy whose transaction stays open: our keyed appends land past its last
    stable offset, where a read_committed reader cannot see them, so the cleaner must not let them
    supersede the records before it (Kafka never cleans past the LSO): `records` keeps the last
    committed value of each key, and info's first_uncleanable_offset stays at or below the LSO."""
    log_dir = tmp_path / "data" / COMMITTED
    log_dir.mkdir(parents=True)
    (log_dir / f"{0:020d}.log").write_bytes(_keyed_batch(0, b"k", b"first") + _keyed_batch(1, b"k", b"old"))
    (log_dir / f"{2:020d}.log").write_bytes(
        data_batch(2, [b"open"], producer_id=9, epoch=0, base_sequence=0, transactional=True)
    )
    settings = {"retention.ms": -1, "fs.isolation.level": "read_committed", "cleanup.policy": "compact",
                "fs.append.key.separator": ":", "segment.bytes": 200, "min.cleanable.dirty.ratio": 0.01,
                "file.delete.delay.ms": 0}
    mnt = seglogd(data_dir=tmp_path / "data", defaults={"log.cleaner.backoff.ms": "50ms"},
                  logs={COMMITTED: settings})
    log = mnt / COMMITTED
    subprocess.run(["bash", "-c", f"for i in 1 2 3 4 5 6; do echo k:new$i >> {log / 'append'}; done"],
                   check=True)
    assert len(list(log_dir.glob("*.log"))) > 3  # the appends rolled: sealed segments past the LSO
    deadline, last = time.monotonic() + 30, None
    while True:  # settled: nothing cleanable, the same cleaner state two looks 0.5 s apart
        info = json.loads((log / "info").read_text())
        if last is not None and not info["cleaner"]["cleanable"] and info["cleaner"] == last["cleaner"]:
            break
        assert time.monotonic() < deadline, info
        last = info
        time.sleep(0.5)
    assert info["last_stable_offset"] == 2
    assert info["cleaner"]["first_uncleanable_offset"] <= info["last_stable_offset"], info["cleaner"]
    assert (log / "by-offset" / "1").read_bytes() == b"old"
    assert not (log / "by-offset" / "0").exists()  # superseded below the LSO: cleaned
    assert _cat(log / "records") == b"old\n"


@pytest.mark.fuse
@fuse_required
def test_a_live_switch_of_the_isolation_level_waits_for_the_readers_of_a_view(
    seglogd, tmp_path: Path
) -> None:
    """``tail -f records`` open across a reload that switches ``fs.isolation.level``: the size it polls
    and the bytes it reads must come from one stream, so it never sees a truncation, a cut or doubled
    line (it would re-read from 0, through its reader of the old level, as many bytes as the new
    level's size). The open file keeps the old level; once nobody has it open, the view shows the
    new level, its size included."""
    scenario = Scenario().send_plain([b"p0"]).send(7, [b"aborted"]).abort(7).send_plain([b"p3"])
    mnt, _ = _mount(seglogd, tmp_path, scenario)
    log = mnt / ALL
    fd = os.open(log / "records", os.O_RDONLY)
    try:
        assert os.pread(fd, 1 << 20, 0) == b"p0\naborted\np3\n"
        _switch_to_read_committed(mnt, ALL)
        assert os.fstat(fd).st_size == 14  # what tail -f polls: never shrinks while the file is open
        with open(log / "append", "ab") as append:
            append.write(b"new\n")
        time.sleep(0.5)
        assert os.fstat(fd).st_size == 18
        assert os.pread(fd, 1 << 20, 14) == b"new\n"
    finally:
        os.close(fd)
    time.sleep(value_stream.QUIET_BEFORE_REBASE_S + 1)  # nobody reads it: the new level shows
    assert (log / "records").stat().st_size == 10  # the size the kernel cached was invalidated
    assert _cat(log / "records") == b"p0\np3\nnew\n"
