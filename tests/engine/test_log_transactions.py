"""Transactions through Log: producer state loaded and snapshotted, .txnindex rebuilt by recovery,
the last stable offset and read_committed reads, against the independent model of
tests/support/transactions.py (broker-shaped dirs: kafka-python data batches, hand-built markers)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from support.transactions import ABORT, Scenario, random_scenario

from seglogfs.config import LogConfig
from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.log import Log
from seglogfs.producer_state import ProducerStateEntry, read_snapshot, snapshot_bytes
from seglogfs.read_committed import READ_COMMITTED, isolation_level
from seglogfs.records import ProducerRecord
from seglogfs.transaction_index import AbortedTxn, TransactionIndex

SEEDS = range(12)


def _open(log_dir: Path, *, clean: bool = False, read_only: bool = False) -> Log:
    # recovery_point 0 and no clean shutdown: every segment is recovered, as after a kill -9
    return Log.open(log_dir, LogConfig(), clean_shutdown=clean, read_only=read_only)


def _txnindex_files(log_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log_dir.glob("*.txnindex")) if p.stat().st_size}


def _model_txnindex_files(model) -> dict[str, bytes]:
    return {
        f"{base:020d}.txnindex": b"".join(AbortedTxn(*entry).to_bytes() for entry in entries)
        for base, entries in model.aborted_by_segment.items()
    }


def _committed(lg: Log) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in lg.iter_records(isolation=READ_COMMITTED)]


@pytest.mark.parametrize("seed", SEEDS)
def test_recovery_rebuilds_the_txnindex_files_and_reads_committed_as_the_model(
    tmp_path: Path, seed: int
) -> None:
    log_dir = tmp_path / "t-0"
    model = random_scenario(seed).write(log_dir)
    with _open(log_dir) as lg:
        assert _txnindex_files(log_dir) == _model_txnindex_files(model)  # byte for byte, Kafka's entries
        assert lg.last_stable_offset == model.last_stable_offset
        assert _committed(lg) == list(zip(model.visible, model.values_at(model.visible), strict=True))
        every = [(r.offset, r.value) for r in lg.iter_records()]
        assert every == [(r.offset, r.value) for r in model.records]  # read_uncommitted: all of them
        assert [tuple(vars_of(t)) for t in lg.aborted_transactions(0, lg.end_offset)] == sorted(
            model.aborted, key=lambda t: t[1]
        )
    # the clean close left a snapshot at the end: the open transactions are back without a replay
    snapshot = log_dir / f"{model.end_offset:020d}.snapshot"
    entries = {e.producer_id: e for e in read_snapshot(snapshot)}
    assert {
        pid: e.current_txn_first_offset
        for pid, e in entries.items()
        if e.current_txn_first_offset is not None
    } == model.open_txn_first_offsets
    with _open(log_dir, clean=True) as lg:
        assert lg.last_stable_offset == model.last_stable_offset
        assert _committed(lg) == list(zip(model.visible, model.values_at(model.visible), strict=True))


def vars_of(txn: AbortedTxn) -> tuple[int, int, int, int]:
    return txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_deleted_or_corrupt_state_files_are_rebuilt_to_the_same_bytes(tmp_path: Path, seed: int) -> None:
    log_dir = tmp_path / "t-0"
    model = random_scenario(seed, steps=60).write(log_dir)
    with _open(log_dir):
        pass
    txnindexes = _txnindex_files(log_dir)
    snapshot = log_dir / f"{model.end_offset:020d}.snapshot"
    state = snapshot.read_bytes()
    # lose every .txnindex, corrupt the snapshot (CRC), then an unclean open (a kill -9 before it)
    for path in log_dir.glob("*.txnindex"):
        path.unlink()
    damaged = bytearray(state)
    damaged[-1] ^= 0xFF
    snapshot.write_bytes(bytes(damaged))
    with _open(log_dir) as lg:
        assert lg.last_stable_offset == model.last_stable_offset
    assert _txnindex_files(log_dir) == txnindexes == _model_txnindex_files(model)
    assert snapshot.read_bytes() == state


def test_an_open_transaction_holds_the_last_stable_offset_until_its_marker(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    scenario = Scenario().send_plain([b"a"]).send(7, [b"t1", b"t2"]).send_plain([b"b"]).roll()
    model = scenario.write(log_dir)
    with _open(log_dir) as lg:
        assert lg.last_stable_offset == 1 == model.last_stable_offset
        assert [r.value for r in lg.iter_records(isolation=READ_COMMITTED)] == [b"a"]
        assert [r.value for r in lg.iter_records()] == [b"a", b"t1", b"t2", b"b"]


def test_an_aborted_transaction_across_a_roll_is_hidden_in_both_segments(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    scenario = (
        Scenario().send(7, [b"x1"]).send_plain([b"p"]).roll().send(7, [b"x2"]).abort(7).send_plain([b"q"])
    )
    model = scenario.write(log_dir)
    with _open(log_dir) as lg:
        assert [r.value for r in lg.iter_records(isolation=READ_COMMITTED)] == [b"p", b"q"]
        assert [vars_of(t) for t in lg.aborted_transactions(0, lg.end_offset)] == model.aborted
        assert model.markers[0].control_type == ABORT
        # read from inside the second segment: the transaction begun in the first still counts
        second = model.segment_bases[1]
        assert [r.value for r in lg.iter_records(second, isolation=READ_COMMITTED)] == [b"q"]


def test_a_read_only_open_writes_nothing_and_still_reads_committed(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    model = random_scenario(3).write(log_dir)
    before = sorted(os.listdir(log_dir))
    with _open(log_dir, read_only=True) as lg:
        assert lg.last_stable_offset == model.last_stable_offset
        # no .txnindex file exists: the reader's own replay (from the log start: no snapshot) stands in
        assert _committed(lg) == list(zip(model.visible, model.values_at(model.visible), strict=True))
        assert [r.offset for r in lg.iter_records()] == [r.offset for r in model.records]
    assert sorted(os.listdir(log_dir)) == before


def test_a_read_only_open_rebuilds_a_damaged_txnindex_in_memory(tmp_path: Path) -> None:
    """Review: one corrupt .txnindex made every read_committed read of a read-only log fail (EIO)."""
    log_dir = tmp_path / "t-0"
    model = random_scenario(3).write(log_dir)
    with _open(log_dir):
        pass
    damaged = next(p for p in sorted(log_dir.glob("*.txnindex")) if p.stat().st_size)
    data = bytearray(damaged.read_bytes())
    data[0:2] = b"\0\1"  # version 1: Kafka's sanity check fails
    damaged.write_bytes(bytes(data))
    with _open(log_dir, clean=True, read_only=True) as lg:
        assert _committed(lg) == list(zip(model.visible, model.values_at(model.visible), strict=True))
        assert lg.read(model.visible[-1], isolation=READ_COMMITTED).offset == model.visible[-1]
    assert damaged.read_bytes() == bytes(data)  # a reader changes no file


@pytest.mark.parametrize("failure", ["killed", "disk full"])
def test_a_txnindex_rebuild_cut_short_leaves_the_old_files_and_right_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """Review: the rebuild emptied every index before its long replay, so a kill -9 (or ENOSPC) in
    between left empty files that passed the sanity check and were trusted from then on. Now the old
    files stay until the whole rebuild is done, and the next open (with room) rebuilds them."""
    log_dir = tmp_path / "t-0"
    model = random_scenario(3).write(log_dir)
    with _open(log_dir):
        pass
    good = _txnindex_files(log_dir)
    damaged = log_dir / next(iter(good))
    damaged.write_bytes(damaged.read_bytes() + b"\0" * 3)  # a partial entry: rebuilt at the next open
    calls = []

    def cut_short(self, entries):
        calls.append(self.path.name)
        if failure == "killed":
            raise KeyboardInterrupt("killed in the middle of the rebuild")
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    with monkeypatch.context() as patch:
        patch.setattr(TransactionIndex, "rewrite", cut_short)
        # killed: nothing more happens; a full disk keeps the log from opening (offline until there
        # is room) rather than serving entries that the next start would not find on disk
        with pytest.raises(KeyboardInterrupt if failure == "killed" else OSError):
            _open(log_dir, clean=True)
    assert calls
    assert {name: (log_dir / name).read_bytes() for name in good} == {
        **good,
        damaged.name: good[damaged.name] + b"\0" * 3,
    }
    with _open(log_dir, clean=True) as lg:  # the next open rebuilds them for good
        assert _committed(lg) == list(zip(model.visible, model.values_at(model.visible), strict=True))
    assert _txnindex_files(log_dir) == good


def test_the_last_stable_offset_never_falls_below_the_log_start(tmp_path: Path) -> None:
    """Review: retention deleting a hanging transaction's first segment left the LSO below the start
    (Kafka moves the first unstable offset up to the log start)."""
    log_dir = tmp_path / "t-0"
    Scenario().send(7, [b"hanging"]).send_plain([b"a"]).roll().send_plain([b"b"]).roll().send_plain(
        [b"c"]
    ).write(log_dir)
    cfg = LogConfig.from_mapping({"retention.bytes": 1, "file.delete.delay.ms": 0, "retention.ms": -1})
    with Log.open(log_dir, cfg) as lg:
        assert lg.last_stable_offset == 0
        lg.delete_old_segments()
        assert lg.start_offset > 0 and lg.last_stable_offset == lg.start_offset
        assert list(lg.iter_records(isolation=READ_COMMITTED)) == []  # still blocked by the open one


def test_a_recovered_first_segment_is_replayed_whole_when_the_log_start_is_inside_it(
    tmp_path: Path,
) -> None:
    """Review: with no snapshot and the log start inside the first recovered segment, the replay began
    at the log start and the segment's rebuilt entries were thrown away as "replayed in part": its
    torn .txnindex stayed, and a record of an aborted transaction after the log start was shown.
    Kafka's recovery replays the whole segment from its base."""
    log_dir = tmp_path / "t-0"
    Scenario().send(7, [b"a0", b"a1"]).send_plain([b"p2", b"p3"]).send(7, [b"a4"]).abort(7).send_plain(
        [b"p6"]
    ).write(log_dir)  # P7's transaction: 0-1 and 4, aborted at 5
    (log_dir / f"{0:020d}.txnindex").write_bytes(bytes(10))  # a partial entry: fails the sanity check
    with Log.open(log_dir, LogConfig(), log_start_offset=3) as lg:
        assert lg.start_offset == 3 and lg.last_stable_offset == 7
        assert _committed(lg) == [(3, b"p3"), (6, b"p6")]
        with pytest.raises(OffsetOutOfRangeError):
            lg.read(4, isolation=READ_COMMITTED)
    assert _txnindex_files(log_dir) == {f"{0:020d}.txnindex": AbortedTxn(7, 0, 5, 6).to_bytes()}


def test_by_time_under_read_committed_is_the_next_record_such_a_reader_sees(tmp_path: Path) -> None:
    """Review: the by-time link named an aborted record (ENOENT under read_committed)."""
    log_dir = tmp_path / "t-0"
    Scenario().send(7, [b"x"]).abort(7).send_plain([b"q"]).write(log_dir)  # offsets 0, marker 1, 2
    stamp = 1_700_000_000_000  # the builder's timestamp: every batch's first record has it
    with _open(log_dir) as lg:
        assert lg.offset_for_timestamp(stamp) == 0  # the aborted record
        assert lg.offset_for_timestamp(stamp, isolation=READ_COMMITTED) == 2
        assert lg.read(2, isolation=READ_COMMITTED).value == b"q"
        with pytest.raises(OffsetOutOfRangeError):
            lg.read(0, isolation=READ_COMMITTED)


def test_a_snapshot_with_an_impossible_open_transaction_is_not_used(tmp_path: Path) -> None:
    """A CRC-valid snapshot at a roll base whose extra open transaction begins past that base (inside
    the log): trusted, it would hold the last stable offset there; it is set aside, and the state is
    replayed from an older snapshot or the log start."""
    log_dir = tmp_path / "t-0"
    scenario = (
        Scenario().send_plain([b"a"]).roll().send_plain([b"b"]).roll().send_plain([b"c"]).send_plain([b"d"])
    )
    scenario.write(log_dir)
    with _open(log_dir):
        pass
    snapshot = log_dir / f"{1:020d}.snapshot"  # the roll base between "a" and "b"
    for later in log_dir.glob("*.snapshot"):
        if later != snapshot:
            later.unlink()
    impossible = ProducerStateEntry(4242, 0, 0, 0, 0, 0, 0, current_txn_first_offset=3)
    snapshot.write_bytes(snapshot_bytes([impossible]))
    with _open(log_dir, clean=True) as lg:
        assert lg.last_stable_offset == lg.end_offset == 4
        assert [r.value for r in lg.iter_records(isolation=READ_COMMITTED)] == [b"a", b"b", b"c", b"d"]


def test_a_snapshot_listing_a_producer_twice_is_not_used(tmp_path: Path) -> None:
    """Review: a CRC-valid snapshot naming producer 7 twice, each with an open transaction, was
    loaded: the entry loaded last replaced the first, whose transaction stayed open with no producer
    left to end it, so the last stable offset stuck there for good (and went into every later
    snapshot). Such a snapshot is set aside and the state replayed, as for other impossible ones."""
    log_dir = tmp_path / "t-0"
    Scenario().send_plain([b"x", b"y"]).send(7, [b"a"]).roll().send_plain([b"p"]).abort(7).send_plain(
        [b"q"]
    ).write(log_dir)  # P7's transaction at 2, aborted at 4 in the second segment (base 3)
    with _open(log_dir):
        pass
    for snapshot in log_dir.glob("*.snapshot"):
        snapshot.unlink()
    at_roll = ProducerStateEntry(7, 0, 0, 2, 0, 1_700_000_000_002, -1, current_txn_first_offset=2)
    phantom = ProducerStateEntry(7, 0, -1, -1, 0, 1_700_000_000_000, -1, current_txn_first_offset=1)
    (log_dir / f"{3:020d}.snapshot").write_bytes(snapshot_bytes([phantom, at_roll]))
    with _open(log_dir, clean=True) as lg:
        assert lg.last_stable_offset == lg.end_offset == 6
        assert [r.value for r in lg.iter_records(isolation=READ_COMMITTED)] == [b"x", b"y", b"p", b"q"]


def test_our_own_log_gets_kafkas_snapshots_at_rolls_and_close_and_retention_drops_old_ones(
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "t-0"
    cfg = LogConfig.from_mapping({"retention.bytes": 1, "file.delete.delay.ms": 0, "retention.ms": -1})
    with Log.open(log_dir, cfg, create=True) as lg:
        for _ in range(3):
            lg.append([ProducerRecord(value=b"v")])
            lg.roll()
        assert lg.last_stable_offset == lg.end_offset == 3
        assert sorted(p.name for p in log_dir.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (1, 2, 3)]
        assert all(
            p.read_bytes() == bytes.fromhex("000148674bc700000000") for p in log_dir.glob("*.snapshot")
        )
        assert lg.delete_old_segments() >= 1
        kept = [o for o in (1, 2, 3) if o >= lg.start_offset]
        assert sorted(p.name for p in log_dir.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in kept]
        assert len(kept) < 3
        assert not list(log_dir.glob("*.txnindex*"))


def test_a_clean_shutdown_without_snapshots_writes_empty_ones_instead_of_scanning(tmp_path: Path) -> None:
    """Kafka's shortcut for a log written before producer state existed (or by us before issue 11)."""
    log_dir = tmp_path / "t-0"
    with Log.open(log_dir, LogConfig(), create=True) as lg:
        for _ in range(3):
            lg.append([ProducerRecord(value=b"v")])
            lg.roll()
    for path in log_dir.glob("*.snapshot"):
        path.unlink()
    with Log.open(log_dir, LogConfig(), clean_shutdown=True) as lg:
        assert lg.last_stable_offset == 3
        assert sorted(p.name for p in log_dir.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (2, 3)]


def test_a_planted_symlink_snapshot_keeps_the_log_offline_and_is_not_followed(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    model = random_scenario(5).write(log_dir)
    with _open(log_dir):
        pass
    snapshot = log_dir / f"{model.end_offset:020d}.snapshot"
    target = tmp_path / "elsewhere"
    shutil.copy(snapshot, target)
    before = target.read_bytes()
    snapshot.unlink()
    snapshot.symlink_to(target)
    with pytest.raises(OSError) as raised:  # as for any segment file: the log does not open
        _open(log_dir)
    assert raised.value.errno == errno.ELOOP and target.read_bytes() == before


def test_retention_renames_a_segments_txnindex_with_it(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    Scenario().send(7, [b"x"]).abort(7).roll().send_plain([b"p"]).roll().send_plain([b"q"]).write(log_dir)
    cfg = LogConfig.from_mapping({"retention.bytes": 1, "file.delete.delay.ms": 0, "retention.ms": -1})
    with Log.open(log_dir, cfg) as lg:
        assert (log_dir / f"{0:020d}.txnindex").stat().st_size == 34
        lg.delete_old_segments()
        assert lg.start_offset >= 2
    assert not list(log_dir.glob(f"{0:020d}.*"))  # .log, indexes and .txnindex all gone


def test_an_orphan_txnindex_is_deleted_at_load(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    Scenario().send_plain([b"p"]).write(log_dir)
    orphan = TransactionIndex(log_dir / f"{50:020d}.txnindex", 50)
    orphan.append(AbortedTxn(1, 50, 51, 52))
    orphan.close()
    with _open(log_dir):
        pass
    assert not (log_dir / f"{50:020d}.txnindex").exists()


def test_isolation_level_names() -> None:
    assert isolation_level("read_committed") == READ_COMMITTED
    with pytest.raises(ValueError, match="read_uncommitted"):
        isolation_level("READ_COMMITTED")


@pytest.mark.parametrize("damage", ["partial entry", "bad version", "decreasing"])
def test_a_txnindex_failing_kafkas_sanity_check_is_rebuilt_even_after_a_clean_shutdown(
    tmp_path: Path, damage: str
) -> None:
    log_dir = tmp_path / "t-0"
    scenario = Scenario().send(7, [b"a"]).abort(7).send(8, [b"b"]).abort(8).roll().send_plain([b"p"]).roll()
    scenario.send(9, [b"c"]).abort(9).send_plain([b"q"])
    model = scenario.write(log_dir)
    with _open(log_dir):
        pass
    good = _txnindex_files(log_dir)
    assert good == _model_txnindex_files(model) and len(good) == 2
    first = log_dir / f"{0:020d}.txnindex"
    data = bytearray(first.read_bytes())
    if damage == "partial entry":
        data += b"\0" * 10
    elif damage == "bad version":
        data[0:2] = b"\0\7"
    else:
        data = data[34:] + data[:34]  # the two entries swapped: last offsets decrease
    first.write_bytes(bytes(data))
    with _open(log_dir, clean=True) as lg:
        assert [r.value for r in lg.iter_records(isolation=READ_COMMITTED)] == [b"p", b"q"]
    assert _txnindex_files(log_dir) == good


def test_a_close_whose_snapshot_fails_is_not_clean_when_producers_are_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: ENOSPC on the close snapshot was only logged, the clean-shutdown marker followed, and the
    next open took Kafka's no-snapshot shortcut: empty producer state, an open transaction forgotten."""
    from seglogfs.errors import CloseError
    from seglogfs.log_files import CLEAN_SHUTDOWN_FILE
    from seglogfs.log_manager import LogManager
    from seglogfs.producer_state import ProducerStateManager

    data = tmp_path / "data"
    model = Scenario().send(7, [b"x"]).abort(7).send_plain([b"p"]).send(8, [b"open"]).write(data / "t-0")
    manager = LogManager(data)
    assert manager.get("t-0").last_stable_offset == model.last_stable_offset
    for snapshot in (data / "t-0").glob("*.snapshot"):
        snapshot.unlink()

    def no_room(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(ProducerStateManager, "take_snapshot", no_room)
        with pytest.raises(CloseError):
            manager.close()
    assert not (data / CLEAN_SHUTDOWN_FILE).exists()
    with LogManager(data) as again:
        lg = again.get("t-0")
        assert lg.last_stable_offset == model.last_stable_offset
        assert [r.value for r in lg.iter_records(isolation=READ_COMMITTED)] == [b"p"]


def test_a_readers_producer_state_is_built_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: every read-only open (Spark opens its logs several times a micro-batch) replayed the
    batches after the newest snapshot, read_uncommitted queries included."""
    from seglogfs.log_transactions import LogTransactions

    log_dir = tmp_path / "t-0"
    model = random_scenario(3).write(log_dir)
    loads = []
    real = LogTransactions._load
    monkeypatch.setattr(LogTransactions, "_load", lambda self, *a: loads.append(1) or real(self, *a))
    with _open(log_dir, read_only=True) as lg:
        assert [r.offset for r in lg.iter_records()] == [r.offset for r in model.records]
        assert loads == []
        assert lg.last_stable_offset == model.last_stable_offset
        assert _committed(lg) == list(zip(model.visible, model.values_at(model.visible), strict=True))
        assert loads == [1]
