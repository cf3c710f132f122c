"""Producer snapshots (seglogfs.producer_state): bytes checked against `seglogfs dump`, struct
unpacking and a broker's own snapshots; round trips; corrupt, out-of-range, expired and half-written
snapshots at load."""

from __future__ import annotations

import io
import logging
import os
import shutil
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from support.producer_batches import ABORT, COMMIT, NOW, control_batch, data_batch, headers_of, replay
from support.testdata import KAFKA_LOG_DIR

from seglogfs.checkpoint import EMPTY_PRODUCER_SNAPSHOT
from seglogfs.log_files import is_segment_file_name, offset_named_files
from seglogfs.producer_state import (
    CompletedTxn,
    OngoingTxn,
    ProducerStateEntry,
    ProducerStateManager,
    read_snapshot,
    snapshot_bytes,
)
from seglogfs.tools.dump_state_files import dump_producer_snapshot

DAY = 86_400_000


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


# --- snapshot bytes ----------------------------------------------------------------------------------


def dumped(path: Path) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    dump_producer_snapshot(path, out, err)
    return out.getvalue(), err.getvalue()


def test_empty_snapshot_is_kafkas_ten_bytes(psm, tmp_path):
    psm.update_map_end_offset(256)
    path = psm.take_snapshot()
    assert path == tmp_path / "00000000000000000256.snapshot"
    assert path.read_bytes() == EMPTY_PRODUCER_SNAPSHOT == bytes.fromhex("000148674bc700000000")
    assert os.listdir(tmp_path) == [path.name]  # no temp file left behind


@pytest.mark.parametrize(("name", "end"), [("__cluster_metadata-0", 2067), ("__consumer_offsets-15", 256)])
def test_brokers_snapshots_load_and_are_rewritten_identically(tmp_path, name, end):
    log_dir = tmp_path / name
    shutil.copytree(KAFKA_LOG_DIR / name, log_dir)
    psm = ProducerStateManager(log_dir)
    broker_bytes = (log_dir / f"{end:020d}.snapshot").read_bytes()
    assert psm.load_latest(0, end, NOW) == end
    assert dict(psm.producers) == {} and psm.map_end_offset == end
    # replaying the broker's whole log yields the same (empty) state: no batch carries a producer id
    assert psm.replay(headers_of((log_dir / "00000000000000000000.log").read_bytes())) == []
    assert dict(psm.producers) == {} and psm.map_end_offset == end
    (log_dir / f"{end:020d}.snapshot").unlink()
    assert psm.take_snapshot().read_bytes() == broker_bytes


def test_snapshot_entry_as_dump_prints_it(psm, tmp_path):
    replay(
        psm,
        data_batch(1230, 4000, 2, 14, count=4, txn=True, ts=NOW - 3),
        data_batch(1234, 17, 0, 0, count=1),
    )
    path = psm.take_snapshot()
    assert path.name == "00000000000000001235.snapshot"
    out, err = dumped(path)
    assert err == ""
    assert out.splitlines() == [
        f"producerId: 17 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {NOW} firstSequence: 0 lastSequence: 0 lastOffset: 1234 offsetDelta: 0 "
        f"timestamp: {NOW}",
        f"producerId: 4000 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[1230] "
        f"lastTimestamp: {NOW} firstSequence: 14 lastSequence: 17 lastOffset: 1233 offsetDelta: 3 "
        f"timestamp: {NOW}",
    ]
    # the bytes, field by field, independently of the module's struct
    data = path.read_bytes()
    assert struct.unpack_from(">hIi", data) == (1, crc32c(data[6:]), 2) and len(data) == 10 + 2 * 46
    assert struct.unpack_from(">qhiqiqiq", data, 10 + 46) == (4000, 2, 17, 1233, 3, NOW, -1, 1230)


def test_snapshot_round_trip(tmp_path):
    first = ProducerStateManager(tmp_path)
    replay(
        first,
        data_batch(0, 1, 0, 0, txn=True),
        data_batch(1, 2, 3, 5, count=2, txn=True),
        control_batch(3, 2, 3, COMMIT, 6),
        data_batch(4, 3, 0, 0, count=3),
        data_batch(7, 2, 3, 7, txn=True),
        data_batch(8, 1, 0, 1, count=2, txn=True),
    )
    path = first.take_snapshot()
    assert read_snapshot(path) == [first.producers[pid] for pid in (1, 2, 3)]
    second = ProducerStateManager(tmp_path)
    assert second.load_latest(0, 10, NOW) == 10
    assert dict(second.producers) == dict(first.producers)
    assert second.ongoing_transactions() == first.ongoing_transactions()
    assert first.ongoing_transactions() == [OngoingTxn(1, 0), OngoingTxn(2, 7)]
    assert second.first_unstable_offset() == 0 and second.map_end_offset == 10
    # both go on identically: P2's abort is held back by P1's txn opened before the snapshot
    tail = (control_batch(10, 2, 3, ABORT, 6), control_batch(11, 1, 0, COMMIT, 6))
    expected = [(CompletedTxn(2, 7, 10, True), 0), (CompletedTxn(1, 0, 11, False), 12)]
    assert replay(first, *tail) == replay(second, *tail) == expected


def test_take_snapshot_replaces_one_at_the_same_offset(psm, tmp_path):
    replay(psm, data_batch(0, 1, 0, 0))
    psm.take_snapshot()
    psm.producers[1].epoch = 9
    psm.take_snapshot()
    assert [e.epoch for e in read_snapshot(tmp_path / "00000000000000000001.snapshot")] == [9]
    assert psm.snapshot_offsets() == [1]


# --- loading ---------------------------------------------------------------------------------------


def write_snapshot(directory: Path, offset: int, *entries: ProducerStateEntry) -> Path:
    path = directory / f"{offset:020d}.snapshot"
    path.write_bytes(snapshot_bytes(entries))
    return path


def corrupt_crc(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


def bad_version(data: bytes) -> bytes:
    body = data[6:]
    return struct.pack(">hI", 2, crc32c(body)) + body


def short_by_one(data: bytes) -> bytes:
    body = data[6:-1]  # CRC recomputed: only the length is wrong
    return struct.pack(">hI", 1, crc32c(body)) + body


def header_only(data: bytes) -> bytes:
    return data[:7]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (corrupt_crc, "CRC"),
        (bad_version, "unknown version 2"),
        (short_by_one, "bytes for 1 entries"),
        (header_only, "shorter than its 10-byte header"),
    ],
)
def test_corrupt_newest_snapshot_is_deleted_and_an_older_one_used(tmp_path, caplog, damage, says):
    write_snapshot(tmp_path, 5, ProducerStateEntry(1, 0, 4, 4, 0, NOW, -1, None))
    newest = write_snapshot(tmp_path, 9, ProducerStateEntry(1, 0, 8, 8, 0, NOW, -1, None))
    newest.write_bytes(damage(newest.read_bytes()))
    psm = ProducerStateManager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="seglogfs.producer_state"):
        assert psm.load_latest(0, 20, NOW) == 5
    assert not newest.exists()
    assert psm.snapshot_offsets() == [5]
    assert psm.producers[1].last_offset == 4 and psm.map_end_offset == 5
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(newest) in warning and says in warning


def test_only_corrupt_snapshots_replay_from_log_start(tmp_path):
    path = write_snapshot(tmp_path, 9, ProducerStateEntry(1, 0, 8, 8, 0, NOW, -1, None))
    path.write_bytes(corrupt_crc(path.read_bytes()))
    psm = ProducerStateManager(tmp_path)
    replay(psm, data_batch(0, 2, 0, 0, txn=True))  # whatever the state held goes
    assert psm.load_latest(3, 20, NOW) == 3
    assert dict(psm.producers) == {} and psm.ongoing_transactions() == [] and psm.map_end_offset == 3
    assert psm.snapshot_offsets() == []


def test_snapshots_outside_the_log_are_deleted(tmp_path):
    for offset in (0, 2, 3, 7, 20, 21, 50):
        write_snapshot(tmp_path, offset, ProducerStateEntry(offset + 100, 0, 0, 0, 0, NOW, -1, None))
    psm = ProducerStateManager(tmp_path)
    assert psm.load_latest(3, 20, NOW) == 20  # the snapshot at the log end offset itself is kept
    assert psm.snapshot_offsets() == [3, 7, 20]
    assert set(psm.producers) == {120}
    psm.delete_snapshots_below(7)
    assert psm.snapshot_offsets() == [7, 20]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000007.snapshot", "00000000000000000020.snapshot"
    ]


def test_expired_producers_are_dropped_at_load_unless_in_a_txn(tmp_path):
    write_snapshot(
        tmp_path,
        30,
        ProducerStateEntry(1, 0, 0, 0, 0, NOW - DAY, -1, None),  # exactly expired (Kafka: >=)
        ProducerStateEntry(2, 0, 0, 1, 0, NOW - DAY + 1, -1, None),  # one ms short of it
        ProducerStateEntry(3, 0, 0, 2, 0, NOW - 10 * DAY, 5, 2),  # ancient, but its txn is open
        ProducerStateEntry(4, 0, 0, 3, 0, -1, -1, None),  # never had a timestamp
    )
    psm = ProducerStateManager(tmp_path)
    assert psm.load_latest(0, 30, NOW) == 30
    assert set(psm.producers) == {2, 3}
    assert psm.ongoing_transactions() == [OngoingTxn(3, 2)]
    short = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    short.load_latest(0, 30, NOW)
    assert set(short.producers) == {3}


def test_loaded_txns_are_ordered_by_first_offset(tmp_path):
    write_snapshot(
        tmp_path,
        30,
        ProducerStateEntry(1, 0, 0, 25, 0, NOW, 0, 20),
        ProducerStateEntry(2, 0, 0, 26, 0, NOW, 0, 4),
        ProducerStateEntry(3, 0, 0, 27, 0, NOW, 0, 11),
    )
    psm = ProducerStateManager(tmp_path)
    psm.load_latest(0, 30, NOW)
    assert psm.ongoing_transactions() == [OngoingTxn(2, 4), OngoingTxn(3, 11), OngoingTxn(1, 20)]
    assert psm.first_unstable_offset() == 4
    completed = replay(psm, control_batch(30, 2, 0, COMMIT))
    assert completed == [(CompletedTxn(2, 4, 30, False), 11)]


# --- crash safety ------------------------------------------------------------------------------------


def test_leftover_temp_file_is_ignored_and_removed(tmp_path, monkeypatch):
    good = write_snapshot(tmp_path, 5, ProducerStateEntry(1, 0, 4, 4, 0, NOW, -1, None))
    psm = ProducerStateManager(tmp_path)
    psm.update_map_end_offset(9)

    def crash(*_args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:  # a crash between writing the temp file and the rename
        patch.setattr(os, "replace", crash)
        with pytest.raises(OSError, match="No space"):
            psm.take_snapshot()
    (temp,) = [p for p in tmp_path.iterdir() if p != good]
    assert temp.name == "00000000000000000009.snapshot.tmp"
    # no snapshot listing takes it for a snapshot: ours, and any by the exact suffix
    assert not is_segment_file_name(temp.name) and offset_named_files(tmp_path, ".snapshot") == [good]
    assert psm.snapshot_offsets() == [5]
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load_latest(0, 9, NOW) == 5
    assert not temp.exists() and fresh.producers[1].last_offset == 4
