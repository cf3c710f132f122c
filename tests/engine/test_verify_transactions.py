"""The verifier's transaction checks (seglogfs.verifier.transactions): logs built by
support.transactions (kafka-python data batches, hand-built markers, an independent model of the
aborted transactions each segment's ``.txnindex`` holds), then damaged one way at a time."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from kafka.record.util import calc_crc32c
from support.producer_batches import control_batch as malformed_control_batch
from support.testdata import KAFKA_LOG_DIR
from support.transactions import (
    ABORT,
    COMMIT,
    NOW,
    Scenario,
    TxnModel,
    control_batch,
    data_batch,
    random_scenario,
)
from support.verify_fixtures import batches_of, build_indexes, writable_copy

from seglogfs.producer_state import ProducerStateEntry, ProducerStateManager, read_snapshot, snapshot_bytes
from seglogfs.records import iter_batch_headers
from seglogfs.tools import verify
from seglogfs.transaction_index import AbortedTxn, TransactionIndex
from seglogfs.verifier import verify_paths

P1, P2, P3 = 1001, 1002, 1003
V = [b"transactional value " * 3]  # long enough for gzip to shrink


def _seg(log_dir: Path, base: int, suffix: str) -> Path:
    return log_dir / f"{base:020d}{suffix}"


def write_indexes(log_dir: Path, model: TxnModel) -> None:
    """.index and .timeindex of every segment by Kafka's per-batch rule (no notes about them)."""
    for base in model.segment_bases:
        data = _seg(log_dir, base, ".log").read_bytes()
        active = base == model.segment_bases[-1]
        index, timeindex = build_indexes(batches_of(data), base, interval=256, final_entry=not active)
        _seg(log_dir, base, ".index").write_bytes(index)
        _seg(log_dir, base, ".timeindex").write_bytes(timeindex)


def write_txn_indexes(log_dir: Path, model: TxnModel) -> None:
    """The model's ``.txnindex`` files, written through TransactionIndex."""
    for base, entries in model.aborted_by_segment.items():
        index = TransactionIndex(_seg(log_dir, base, ".txnindex"), base)
        for pid, first, last, lso in entries:
            index.append(AbortedTxn(pid, first, last, lso))
        index.close()


def take_snapshot_at(log_dir: Path, model: TxnModel, offset: int) -> Path:
    """``<offset>.snapshot`` of the state after the batches below ``offset`` (a batch boundary)."""
    manager = ProducerStateManager(log_dir)
    for base in model.segment_bases:
        data = _seg(log_dir, base, ".log").read_bytes()
        view = memoryview(data)
        below = [
            (h, view[h.position : h.end_position]) for h in iter_batch_headers(data) if h.last_offset < offset
        ]
        manager.replay(below)
    manager.update_map_end_offset(offset)
    return manager.take_snapshot()


def build(log_dir: Path, scenario: Scenario) -> TxnModel:
    """The scenario's log with every index a broker keeps (.txnindex files from the model)."""
    model = scenario.write(log_dir)
    write_indexes(log_dir, model)
    write_txn_indexes(log_dir, model)
    return model


def two_segment_scenario() -> Scenario:
    """Two segments with aborts in each; P1's first abort has P2's open transaction below it (its
    LSO is P2's first offset); P3's transaction stays open; a COMMIT with nothing open."""
    return (
        Scenario()
        .send(P1, V)  # 0: P1 opens
        .send(P2, V)  # 1: P2 opens
        .send_plain([b"plain"])  # 2
        .abort(P1)  # 3: (P1, 0, 3, lso 1)
        .commit(P3)  # 4: nothing open: completes nothing
        .roll()
        .send(P1, V)  # 5: P1 opens again
        .commit(P2)  # 6
        .abort(P1)  # 7: (P1, 5, 7, lso 8)
        .send(P3, V)  # 8: open at the end
    )


@pytest.fixture
def txn_log(tmp_path) -> tuple[Path, TxnModel]:
    log_dir = tmp_path / "events-0"
    model = build(log_dir, two_segment_scenario())
    assert model.aborted_by_segment == {0: [(P1, 0, 3, 1)], 5: [(P1, 5, 7, 8)]}  # the model, by hand
    return log_dir, model


def messages(findings) -> list[tuple[str, int | None, str]]:
    return [(p.path.name, p.position, p.message) for p in findings]


def append_batch(log_dir: Path, model: TxnModel, batch: bytes) -> Path:
    """Add ``batch`` at the end of the last segment (its indexes are rebuilt)."""
    log = _seg(log_dir, model.segment_bases[-1], ".log")
    with log.open("ab") as f:
        f.write(batch)
    write_indexes(log_dir, model)
    return log


def restamp(batch: bytes, *, attributes: int | None = None, producer_id: int | None = None) -> bytes:
    """``batch`` with its attributes or producer id changed and its CRC-32C recomputed (kafka-python's)."""
    out = bytearray(batch)
    if attributes is not None:
        struct.pack_into(">h", out, 21, attributes)
    if producer_id is not None:
        struct.pack_into(">q", out, 43, producer_id)
    struct.pack_into(">I", out, 17, calc_crc32c(bytes(out[21:])))
    return bytes(out)


# ------------------------------------------------------------------ sound logs


@pytest.mark.parametrize("seed", range(10))
def test_scenario_logs_with_their_txn_indexes_and_snapshots_verify_clean(tmp_path, seed):
    log_dir = tmp_path / "t-0"
    model = build(log_dir, random_scenario(seed, producers=4, steps=60))
    take_snapshot_at(log_dir, model, model.segment_bases[len(model.segment_bases) // 2])
    end_snapshot = take_snapshot_at(log_dir, model, model.end_offset)
    open_txns = {e.producer_id: e.current_txn_first_offset for e in read_snapshot(end_snapshot)}
    assert {
        pid: first for pid, first in open_txns.items() if first is not None
    } == model.open_txn_first_offsets
    report = verify_paths([log_dir])
    assert report.problems == [] and report.notes == []
    assert report.batches == sum(
        len(batches_of(_seg(log_dir, base, ".log").read_bytes())) for base in model.segment_bases
    )
    # and the checks bite: one LSO off by one, one open transaction moved
    base, entries = next(iter(model.aborted_by_segment.items()))
    pid, first, last, lso = entries[0]
    txn_index = _seg(log_dir, base, ".txnindex")
    data = txn_index.read_bytes()
    txn_index.write_bytes(AbortedTxn(pid, first, last, lso + 1).to_bytes() + data[34:])
    snapshot = read_snapshot(end_snapshot)
    moved = next(e for e in snapshot if e.current_txn_first_offset is not None)
    moved.current_txn_first_offset -= 1
    end_snapshot.write_bytes(snapshot_bytes(snapshot))
    assert sorted((p.path.name, p.position) for p in verify_paths([log_dir]).problems) == [
        (txn_index.name, 0),
        (end_snapshot.name, None),
    ]


def test_bare_scenario_dirs_have_notes_only(tmp_path):
    """What Scenario writes (.log files alone): every missing index is a note, the .txnindex of a
    segment with aborts too (without its .index a segment is recovered, rebuilding the .txnindex)."""
    log_dir = tmp_path / "t-0"
    model = two_segment_scenario().write(log_dir)
    report = verify_paths([log_dir])
    assert report.problems == []
    txn_notes = [p for p in report.notes if p.path.suffix == ".txnindex"]
    assert [(p.path.name, p.message) for p in txn_notes] == [
        (f"{base:020d}.txnindex", "missing, with 1 aborted transaction(s) (recovery rebuilds it)")
        for base in model.aborted_by_segment
    ]


def test_real_kafka_data_dir_has_no_new_finding(tmp_path):
    data = writable_copy(KAFKA_LOG_DIR, tmp_path / "kafka")
    report = verify_paths([data])
    assert report.problems == [] and report.notes == []
    assert report.logs > 50  # its KRaft control batch (not transactional, no producer) is legal


def test_marker_with_nothing_open_and_kraft_control_batch_are_legal(txn_log):
    log_dir, model = txn_log
    assert [m.completes for m in model.markers if m.producer_id == P3] == [None]
    leader_change = restamp(control_batch(model.end_offset, -1, -1, 2), attributes=0x20)
    append_batch(log_dir, model, leader_change)
    report = verify_paths([log_dir])
    assert report.problems == [] and report.notes == []


# ------------------------------------------------------------------ the .txnindex


def test_deleted_txn_index_of_a_segment_with_aborts(txn_log):
    log_dir, _ = txn_log
    victim = _seg(log_dir, 5, ".txnindex")
    victim.unlink()
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            victim.name,
            None,
            f"missing entry (producerId {P1}, firstOffset 5, lastOffset 7, lastStableOffset 8): "
            "its ABORT marker is in this segment (the file does not exist)",
        )
    ]
    assert "missing entry" in str(report.problems[0]) and str(victim) in str(report.problems[0])


def test_extra_entry(txn_log):
    log_dir, _ = txn_log
    index = TransactionIndex(_seg(log_dir, 5, ".txnindex"), 5)
    index.append(AbortedTxn(P3, 8, 9, 10))
    index.close()
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            "00000000000000000005.txnindex",
            34,
            f"extra entry (producerId {P3}, firstOffset 8, lastOffset 9, lastStableOffset 10): "
            f"no aborted transaction of producer {P3} ends at offset 9",
        )
    ]


def test_wrong_last_stable_offset(txn_log):
    log_dir, _ = txn_log
    path = _seg(log_dir, 0, ".txnindex")
    path.write_bytes(AbortedTxn(P1, 0, 3, 4).to_bytes())  # 4 = marker + 1: ignores P2's open txn at 1
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            path.name,
            0,
            f"entry (producerId {P1}, firstOffset 0, lastOffset 3, lastStableOffset 4) should be "
            f"(producerId {P1}, firstOffset 0, lastOffset 3, lastStableOffset 1)",
        )
    ]


def test_entry_in_the_wrong_segment(txn_log):
    """Kafka indexes an abort in the segment holding its marker: moving it is two findings."""
    log_dir, _ = txn_log
    first, second = _seg(log_dir, 0, ".txnindex"), _seg(log_dir, 5, ".txnindex")
    second.write_bytes(first.read_bytes() + second.read_bytes())  # lastOffset 3 < base 5: insane too
    first.unlink()
    found = {(name, position) for name, position, _ in messages(verify_paths([log_dir]).problems)}
    assert found == {(first.name, None), (second.name, None), (second.name, 0)}


def test_txn_index_sanity_problems_are_reported_not_raised(txn_log):
    log_dir, _ = txn_log
    path = _seg(log_dir, 5, ".txnindex")
    with path.open("ab") as f:
        f.write(b"\x00" * 5)  # a torn append
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            path.name,
            None,
            "fails the transaction index sanity check: 39 bytes is not a multiple of 34: "
            "a partial entry at position 34",
        )
    ]
    path.write_bytes(struct.pack(">hqqqq", 1, P1, 5, 7, 8))  # version 1
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            path.name,
            None,
            "fails the transaction index sanity check: entry at position 0: version 1 (only 0 is known)",
        )
    ]


def test_orphan_txn_index_is_damage(txn_log):
    log_dir, _ = txn_log
    orphan = _seg(log_dir, 99, ".txnindex")
    orphan.write_bytes(AbortedTxn(P1, 99, 100, 101).to_bytes())
    assert messages(verify_paths([log_dir]).problems) == [
        (orphan.name, None, "index without a .log: that segment's records are gone")
    ]


# ------------------------------------------------------------------ control batches and epochs


def test_non_transactional_marker_is_an_error(txn_log):
    log_dir, model = txn_log
    marker = restamp(control_batch(model.end_offset, P3, 0, ABORT), attributes=0x20)
    log = append_batch(log_dir, model, marker)
    position = log.stat().st_size - len(marker)
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            log.name,
            position,
            f"control batch at offset {model.end_offset} holds a ABORT marker but is not transactional",
        ),
        # it still aborts P3's transaction, as a broker replaying it would: the .txnindex lacks it
        (
            "00000000000000000005.txnindex",
            None,
            f"missing entry (producerId {P3}, firstOffset 8, lastOffset 9, lastStableOffset 10): "
            "its ABORT marker is in this segment",
        ),
    ]
    assert report.warnings == []


def test_marker_without_producer_id_is_an_error(txn_log):
    log_dir, model = txn_log
    marker = restamp(control_batch(model.end_offset, P3, 0, COMMIT), producer_id=-1)
    log = append_batch(log_dir, model, marker)
    report = verify_paths([log_dir])
    assert messages(report.problems) == [
        (
            log.name,
            log.stat().st_size - len(marker),
            f"control batch at offset {model.end_offset} holds a COMMIT marker but has no producer id",
        )
    ]


def test_malformed_marker_is_named_and_later_entries_not_guessed(txn_log):
    """A control batch whose CRC holds but whose ABORT value is 2 bytes: damage at its position. What
    it ended is unknown, so entries from its offset on are not compared; those before it still are."""
    log_dir, model = txn_log
    batch = malformed_control_batch(model.end_offset, P3, 0, ABORT, value=b"\x00\x00")
    log = append_batch(log_dir, model, batch)
    index = TransactionIndex(_seg(log_dir, 5, ".txnindex"), 5)
    index.append(AbortedTxn(P3, 8, 9, 10))  # what a broker reading a sound marker would index
    index.close()
    (problem,) = verify_paths([log_dir]).problems
    assert (problem.path, problem.position) == (log, log.stat().st_size - len(batch))
    assert problem.message == (
        f"corrupt control record: control batch at offset {model.end_offset}: ABORT marker value is "
        "2 bytes, needs 6"
    )
    index.path.write_bytes(AbortedTxn(P1, 5, 7, 9).to_bytes() + AbortedTxn(P3, 8, 9, 10).to_bytes())
    assert [(p.path.name, p.position) for p in verify_paths([log_dir]).problems] == [
        (log.name, problem.position),
        (index.path.name, 0),  # the LSO of P1's abort at 7 is 8: before the damage, still checked
    ]


def test_fenced_epoch_is_a_warning(tmp_path):
    log_dir = tmp_path / "f-0"
    model = build(log_dir, Scenario().send(P1, V).abort(P1).bump_epoch(P1).send(P1, V))
    end = model.end_offset
    stale_data = data_batch(end, V, producer_id=P1, epoch=0, base_sequence=9, transactional=True)
    # a broker replaying the log applies the stale epoch (and warns): the next batch sets it back
    current = data_batch(end + 1, V, producer_id=P1, epoch=1, base_sequence=1, transactional=True)
    stale_marker = control_batch(end + 2, P1, 0, COMMIT)
    log = append_batch(log_dir, model, stale_data + current + stale_marker)
    size = log.stat().st_size
    report = verify_paths([log_dir])
    assert report.problems == [] and report.ok
    assert messages(report.warnings) == [
        (
            log.name,
            size - len(stale_data) - len(current) - len(stale_marker),
            f"data batch at offset {end} of producer {P1} has epoch 0, below the producer's epoch 1 "
            "(a fenced producer's write)",
        ),
        (
            log.name,
            size - len(stale_marker),
            f"transaction marker at offset {end + 2} of producer {P1} has epoch 0, below the producer's "
            "epoch 1 (a fenced producer's write)",
        ),
    ]
    # the command line: printed as warnings, exit 0, or 1 with --strict
    out, err = io.StringIO(), io.StringIO()
    assert verify.main([str(log_dir)], out, err) == 0
    assert out.getvalue().count(": warning: ") == 2 and f"{log}: position" in out.getvalue()
    assert verify.main([str(log_dir)], io.StringIO(), io.StringIO(), strict=True) == 1


# ------------------------------------------------------------------ snapshots


def test_corrupt_snapshot(txn_log):
    log_dir, model = txn_log
    snap = take_snapshot_at(log_dir, model, 5)
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    (problem,) = verify_paths([log_dir]).problems
    assert problem.path == snap and problem.message.startswith("corrupt producer snapshot: has CRC ")


def test_snapshot_whose_state_differs(txn_log):
    log_dir, model = txn_log
    snap = take_snapshot_at(log_dir, model, 5)
    entries = read_snapshot(snap)
    assert {e.producer_id for e in entries} == {P1, P2, P3}
    by_pid = {e.producer_id: e for e in entries}
    by_pid[P2].epoch = 4
    snap.write_bytes(snapshot_bytes(entries))
    assert messages(verify_paths([log_dir]).problems) == [
        (
            snap.name,
            None,
            f"producer {P2} differs from the log at offset 5: epoch 4 in the snapshot, 0 in the log",
        )
    ]


def test_kafkas_snapshot_after_a_fencing_abort_verifies_clean(tmp_path):
    """Review: the coordinator's ABORT at a bumped epoch empties the producer's batch metadata in
    Kafka (its snapshot: lastSequence -1, lastOffset -1, offsetDelta 0); the replay kept the old
    epoch's last batch and called the broker's own snapshot a problem."""
    log_dir = tmp_path / "t-0"
    model = build(log_dir, Scenario().send(P1, V * 2).bump_epoch(P1).abort(P1).send_plain([b"x"]))
    assert model.aborted == [(P1, 0, 2, 3)]
    kafkas = ProducerStateEntry(P1, 1, -1, -1, 0, NOW + 2, 0, None)  # marker at offset 2, epoch 0 + 1
    (log_dir / f"{model.end_offset:020d}.snapshot").write_bytes(snapshot_bytes([kafkas]))
    report = verify_paths([log_dir])
    assert report.problems == [] and report.notes == []


def test_snapshot_missing_or_adding_producers(txn_log):
    log_dir, model = txn_log
    snap = take_snapshot_at(log_dir, model, 5)
    entries = read_snapshot(snap)
    idle = [e for e in entries if e.current_txn_first_offset is None]
    assert {e.producer_id for e in idle} == {P1, P3}
    snap.write_bytes(snapshot_bytes(idle))  # P2 is in a transaction since offset 1: it never expires
    assert messages(verify_paths([log_dir]).problems) == [
        (snap.name, None, f"producer {P2} is missing, but its transaction from offset 1 is open at offset 5")
    ]
    stranger = read_snapshot(snap)[0]
    stranger.producer_id = 7
    snap.write_bytes(snapshot_bytes([*entries, stranger]))
    assert messages(verify_paths([log_dir]).problems) == [
        (snap.name, None, "producer 7 is in the snapshot, but no batch of it is below offset 5")
    ]
    snap.write_bytes(snapshot_bytes([e for e in entries if e.producer_id != P3]))  # idle: may expire
    assert verify_paths([log_dir]).problems == []


def test_snapshot_inside_a_batch_or_past_the_end(txn_log):
    log_dir, model = txn_log
    inside = log_dir / "00000000000000000010.snapshot"
    past = log_dir / f"{model.end_offset + 5:020d}.snapshot"
    empty = snapshot_bytes([])
    assert empty == bytes.fromhex("000148674bc700000000")  # Kafka's empty snapshot
    past.write_bytes(empty)
    report = verify_paths([log_dir])
    assert report.problems == []
    assert messages(report.notes) == [
        (past.name, None, f"past the log end offset {model.end_offset} (recovery deletes it)")
    ]
    past.unlink()
    append_batch(log_dir, model, data_batch(model.end_offset, [b"x", b"y"]))
    assert model.end_offset == 9
    inside.write_bytes(empty)  # offset 10 is inside the batch 9..10 just appended
    assert messages(verify_paths([log_dir]).problems) == [
        (
            inside.name,
            None,
            "offset 10 is inside the batch ending at offset 10: no log end offset was ever there",
        )
    ]


# ------------------------------------------------------------------ where the replay cannot be exact


def test_trimmed_head_is_not_compared(txn_log):
    """Retention removed the first segment: P2's transaction from offset 1 is unknown, so segment 5's
    entry and a snapshot there cannot be checked against the log; their soundness still is."""
    log_dir, model = txn_log
    take_snapshot_at(log_dir, model, 9)
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        _seg(log_dir, 0, suffix).unlink()
    report = verify_paths([log_dir])
    assert report.problems == [] and report.notes == []
    with _seg(log_dir, 5, ".txnindex").open("ab") as f:
        f.write(b"\x00")
    assert [p.path.name for p in verify_paths([log_dir]).problems] == ["00000000000000000005.txnindex"]


def test_one_segment_checked_alone(txn_log):
    log_dir, _ = txn_log
    report = verify_paths([_seg(log_dir, 5, ".log")])
    assert report.problems == [] and report.segments == 1
    report = verify_paths([_seg(log_dir, 0, ".log")])  # the first segment alone is exact
    assert report.problems == []
    _seg(log_dir, 0, ".txnindex").unlink()
    assert [p.message[:13] for p in verify_paths([_seg(log_dir, 0, ".log")]).problems] == ["missing entry"]


def test_corrupt_batch_stops_the_comparison_after_it(txn_log):
    """An unreadable batch is damage; what follows it is not compared against a guess."""
    log_dir, _ = txn_log
    log = _seg(log_dir, 0, ".log")
    data = bytearray(log.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records
    log.write_bytes(bytes(data))
    problems = verify_paths([log_dir]).problems
    assert [(p.path.name, p.position) for p in problems] == [(log.name, 0)]
    assert problems[0].message.startswith("corrupt batch")


def test_snapshot_listing_a_producer_twice(txn_log):
    """Loading refuses such a snapshot (its first entry's transaction would stay open for good), so
    verify names it, even when both entries agree with the log."""
    log_dir, model = txn_log
    snap = take_snapshot_at(log_dir, model, 5)
    entries = read_snapshot(snap)
    p1 = next(e for e in entries if e.producer_id == P1)
    snap.write_bytes(snapshot_bytes([*entries, p1]))
    assert messages(verify_paths([log_dir]).problems) == [(snap.name, None, f"producer {P1} is listed twice")]
