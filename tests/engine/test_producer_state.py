"""Producer state (seglogfs.producer_state): transactions opened and completed by real v2 batches built
with kafka-python (control batches patched by hand, read back by kafka-python), the LSO rules, and
random logs of tests/support/transactions.py checked against its model. Snapshots:
test_producer_snapshot.py."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from kafka.record.default_records import ControlRecord, DefaultRecordBatch
from support.producer_batches import (
    ABORT,
    COMMIT,
    LEADER_CHANGE,
    NOW,
    control_batch,
    data_batch,
    header,
    headers_of,
    replay,
)
from support.transactions import random_scenario

from seglogfs.errors import CorruptRecordError
from seglogfs.producer_state import (
    CompletedTxn,
    ControlType,
    EndTxnMarker,
    OngoingTxn,
    ProducerStateEntry,
    ProducerStateManager,
    end_txn_marker,
)
from seglogfs.records import BatchHeader


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


# --- the builders against kafka-python -------------------------------------------------------------


def test_control_batches_read_back_by_kafka_python():
    batch = DefaultRecordBatch(bytearray(control_batch(40, 9, 3, ABORT, 12, ts=NOW + 5)))
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch) == (40, 9, 3)
    (record,) = list(batch)
    assert isinstance(record, ControlRecord) and record.abort and record.offset == 40
    assert struct.unpack(">hi", record.value) == (0, 12)
    h = header(control_batch(40, 9, 3, ABORT, 12))
    assert h.is_control and h.is_transactional and h.base_offset == h.last_offset == 40


def test_end_txn_marker_parses_commit_and_abort():
    for control_type in (ABORT, COMMIT):
        batch = control_batch(3, 1, 0, control_type, 42)
        assert end_txn_marker(header(batch), batch) == EndTxnMarker(ControlType(control_type), 42)
    # Kafka parses a newer key or value version as version 0
    batch = control_batch(3, 1, key=struct.pack(">hh", 1, ABORT), value=struct.pack(">hih", 5, 8, 0))
    assert end_txn_marker(header(batch), batch) == EndTxnMarker(ControlType.ABORT, 8)


@pytest.mark.parametrize("control_type", [2, 3, 4, 5, 6, 99, -1])
def test_end_txn_marker_none_for_kraft_and_unknown_types(control_type):
    batch = control_batch(0, 1, control_type=control_type, value=b"\x00\x00kraft payload")
    assert end_txn_marker(header(batch), batch) is None


def test_end_txn_marker_none_for_an_emptied_control_batch():
    batch = control_batch(10, 1, records=0)
    assert header(batch).records_count == 0
    assert end_txn_marker(header(batch), batch) is None


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (None, b"", "key is null"),
        (b"\x00\x00\x00", b"", "key is 3 bytes"),
        (struct.pack(">hh", 0, ABORT), None, "ABORT marker value is null"),
        (struct.pack(">hh", 0, COMMIT), b"\x00\x00\x00\x00\x07", "COMMIT marker value is 5 bytes"),
    ],
)
def test_end_txn_marker_malformed_names_file_and_position(tmp_path, key, value, says):
    bad_header, bad = _placed_after_data(control_batch(3, 1, key=key, value=value))
    path = tmp_path / "00000000000000000000.log"
    with pytest.raises(CorruptRecordError, match=says) as info:
        end_txn_marker(bad_header, bad, path=path)
    assert info.value.position == bad_header.position > 0
    assert f"in {path} at position {bad_header.position}" in str(info.value)
    assert "offset 3" in str(info.value)
    with pytest.raises(CorruptRecordError, match=says):
        ProducerStateManager(tmp_path).replay([(bad_header, bad)], path=path)


def test_end_txn_marker_reads_the_first_of_several_records():
    batch = control_batch(3, 1, 0, ABORT, 5, records=3)
    assert header(batch).records_count == 3
    assert end_txn_marker(header(batch), batch) == EndTxnMarker(ControlType.ABORT, 5)


def _placed_after_data(control: bytes) -> tuple[BatchHeader, memoryview]:
    """``control`` as the second batch of a log: its header (file position > 0) and bytes."""
    found_header, found = headers_of(data_batch(0, count=3) + control)[1]
    assert found_header.position > 0
    return found_header, found


@pytest.mark.parametrize("records", [1, 2])
def test_damaged_control_record_is_named_at_its_batch(tmp_path, records):
    batch = bytearray(control_batch(3, 1, 0, ABORT, records=records))
    if records == 1:  # bytes left over after the one record
        batch += b"\x00\x00\x00"
        struct.pack_into(">i", batch, 8, len(batch) - 12)
    else:  # the last record claims a header it does not hold
        batch[-1] = 2
    bad_header, bad = _placed_after_data(bytes(batch))
    path = tmp_path / "00000000000000000000.log"
    with pytest.raises(CorruptRecordError) as info:
        end_txn_marker(bad_header, bad, path=path)
    assert info.value.position == bad_header.position
    assert f"in {path} at position {bad_header.position}" in str(info.value)


# --- transactions ----------------------------------------------------------------------------------


def test_interleaved_producers_commit_and_abort(psm):
    completed = replay(
        psm,
        data_batch(0, 1, 0, 0, count=2, txn=True),  # P1 opens at 0
        data_batch(2, 2, 5, 10, count=3, txn=True),  # P2 opens at 2
        data_batch(5, 1, 0, 2, count=1, txn=True),
        control_batch(6, 1, 0, ABORT, 3),  # P1 aborted; P2 still open at 2
        data_batch(7, -1),  # a non-transactional batch without producer
        control_batch(8, 2, 5, COMMIT, 3),  # P2 committed; nothing open
        data_batch(9, 1, 0, 3, txn=True),  # P1 opens again
        control_batch(10, 1, 0, ABORT, 4),
    )
    assert completed == [
        (CompletedTxn(1, 0, 6, True), 2),
        (CompletedTxn(2, 2, 8, False), 9),
        (CompletedTxn(1, 9, 10, True), 11),
    ]
    assert psm.ongoing_transactions() == [] and psm.first_unstable_offset() is None
    assert psm.map_end_offset == 11
    assert psm.producers[1] == ProducerStateEntry(1, 0, 3, 9, 0, NOW, 4, None)
    assert psm.producers[2] == ProducerStateEntry(2, 5, 12, 4, 2, NOW, 3, None)
    assert set(psm.producers) == {1, 2}


def test_open_transaction_at_the_end_and_lso(psm):
    completed = replay(
        psm,
        data_batch(0, 1, 0, 0, txn=True),
        data_batch(1, 2, 0, 0, txn=True),
        data_batch(2, 3, 0, 0, count=2, txn=False),  # idempotent, not transactional: opens nothing
        data_batch(4, 2, 0, 1, txn=True),
        control_batch(5, 2, 0, COMMIT),
    )
    assert completed == [(CompletedTxn(2, 1, 5, False), 0)]  # P1's open txn holds the LSO at 0
    assert psm.ongoing_transactions() == [OngoingTxn(1, 0)]
    assert psm.first_unstable_offset() == 0
    assert psm.producers[1].current_txn_first_offset == 0
    assert psm.producers[3] == ProducerStateEntry(3, 0, 1, 3, 1, NOW + 1, -1, None)


def test_lso_ignores_the_completing_producers_own_txn(psm):
    replay(psm, data_batch(0, 1, 0, 0, txn=True), data_batch(1, 2, 0, 0, txn=True))
    marker = control_batch(2, 2, 0, ABORT)
    completed = psm.update(header(marker), end_txn_marker(header(marker), marker))
    assert completed == CompletedTxn(2, 1, 2, True)
    assert psm.last_stable_offset(completed) == 0  # P1 still open at 0
    # not closed until complete_txn: the caller asks the LSO first
    assert psm.ongoing_transactions() == [OngoingTxn(1, 0), OngoingTxn(2, 1)]
    psm.complete_txn(completed)
    assert psm.ongoing_transactions() == [OngoingTxn(1, 0)]
    assert psm.producers[2].current_txn_first_offset is None
    marker = control_batch(3, 1, 0, COMMIT)
    completed = psm.update(header(marker), end_txn_marker(header(marker), marker))
    assert psm.last_stable_offset(completed) == 4  # nobody else open: marker + 1


def test_marker_without_open_txn_completes_nothing(psm):
    completed = replay(
        psm,
        control_batch(0, 4, 1, ABORT, 9, ts=NOW + 50),  # empty transaction
        data_batch(1, 4, 1, 0, txn=True),
        control_batch(2, 4, 1, COMMIT, 9),
        control_batch(3, 4, 1, COMMIT, 9),  # a second marker: nothing is open
    )
    assert completed == [(CompletedTxn(4, 1, 2, False), 3)]
    assert psm.ongoing_transactions() == []
    # the producer is known from its first marker on: epoch and coordinator epoch
    fresh = ProducerStateManager(psm.directory)
    replay(fresh, control_batch(0, 4, 1, ABORT, 9, ts=NOW + 50))
    assert fresh.producers[4] == ProducerStateEntry(4, 1, -1, -1, 0, NOW + 50, 9, None)


def test_an_epoch_bump_forgets_the_last_batch_as_kafka_does(psm):
    """Review: a coordinator fencing a producer writes its ABORT marker with the bumped epoch; Kafka's
    entry then drops its batch metadata (a snapshot says lastSequence -1, lastOffset -1, offsetDelta
    0), but ours kept the old epoch's last batch: a broker loading our snapshot would take sequence 0
    of the producer's next batch at that epoch for out of order, and verify flagged Kafka's snapshot."""
    completed = replay(
        psm,
        data_batch(0, 3, 0, 0, count=2, txn=True),
        control_batch(2, 3, 1, ABORT, 7, ts=NOW + 9),  # the fencing abort, at epoch 0 + 1
        data_batch(3, 5, 0, 0, count=2),
        control_batch(5, 5, 0, COMMIT, 7),  # same epoch: the last batch stays
    )
    assert completed == [(CompletedTxn(3, 0, 2, True), 3)]
    assert psm.producers[3] == ProducerStateEntry(3, 1, -1, -1, 0, NOW + 9, 7, None)
    assert psm.producers[5] == ProducerStateEntry(5, 0, 1, 4, 1, NOW, 7, None)
    replay(psm, data_batch(6, 3, 2, 0, count=3, txn=True))  # a data batch at a new epoch: just its own
    assert psm.producers[3] == ProducerStateEntry(3, 2, 2, 8, 2, NOW + 2, 7, 6)


def test_kraft_control_batches_are_ignored(psm):
    completed = replay(
        psm,
        data_batch(0, 1, 0, 0, txn=True),
        control_batch(1, 1, 0, LEADER_CHANGE, value=b"\x00\x00\x01"),  # not a marker: txn stays open
        control_batch(2, -1, -1, LEADER_CHANGE, key=None, value=None),  # no producer: never decoded
        control_batch(3, 5, 0, 4),  # a producer seen only in a KRaft control batch is not tracked
    )
    assert completed == []
    assert psm.ongoing_transactions() == [OngoingTxn(1, 0)]
    assert set(psm.producers) == {1} and psm.producers[1].coordinator_epoch == -1
    assert psm.map_end_offset == 4


def test_compressed_transactional_batches(psm):
    completed = replay(
        psm,
        data_batch(10, 7, 2, 100, count=50, txn=True, codec=1),  # gzip
        data_batch(60, 7, 2, 150, count=50, txn=True, codec=4),  # zstd
        control_batch(110, 7, 2, ABORT),
    )
    assert completed == [(CompletedTxn(7, 10, 110, True), 111)]
    assert psm.producers[7].last_sequence == 199 and psm.producers[7].offset_delta == 49


def test_sequence_wraps_at_int_max(psm):
    replay(psm, data_batch(0, 1, 0, 2**31 - 2, count=4))
    assert psm.producers[1].last_sequence == 1  # Kafka's lastSequence wraps to 0 after Int.MAX
    assert psm.map_end_offset == 4


def model_replay(batches: list[tuple[str, int, int, int]]) -> list[tuple[CompletedTxn, int]]:
    """An independent model: open txns as a plain dict, the LSO as a min over the others."""
    open_txns: dict[int, int] = {}
    completed = []
    for kind, offset, pid, _count in batches:
        if kind == "txn" and pid not in open_txns:
            open_txns[pid] = offset
        elif kind in ("abort", "commit") and pid in open_txns:
            first = open_txns.pop(pid)
            lso = min(open_txns.values(), default=offset + 1)
            completed.append((CompletedTxn(pid, first, offset, kind == "abort"), lso))
    return completed


def test_random_interleavings_match_the_model(tmp_path):
    rng = random.Random(11)
    for _ in range(200):
        plan, raw, offset = [], [], 0
        for _ in range(rng.randrange(1, 40)):
            pid = rng.randrange(1, 5)
            kind = rng.choice(["txn", "txn", "txn", "plain", "abort", "commit", "kraft"])
            count = rng.randrange(1, 4) if kind in ("txn", "plain") else 1
            if kind in ("txn", "plain"):
                raw.append(data_batch(offset, pid, 0, offset, count=count, txn=kind == "txn"))
            else:
                control = {"abort": ABORT, "commit": COMMIT, "kraft": LEADER_CHANGE}[kind]
                raw.append(control_batch(offset, pid, 0, control))
            plan.append((kind, offset, pid, count))
            offset += count
        psm = ProducerStateManager(tmp_path)
        assert replay(psm, *raw) == model_replay(plan)
        still_open: dict[int, int] = {}
        for kind, at, pid, _ in plan:
            if kind == "txn":
                still_open.setdefault(pid, at)
            elif kind in ("abort", "commit"):
                still_open.pop(pid, None)
        assert psm.ongoing_transactions() == sorted(
            (OngoingTxn(pid, first) for pid, first in still_open.items()), key=lambda t: t.first_offset
        )
        assert psm.first_unstable_offset() == min(still_open.values(), default=None)


@pytest.mark.parametrize("seed", range(25))
def test_scenario_logs_match_their_model(tmp_path, seed):
    """Segments written by another hand (support.transactions), rolls inside transactions included:
    the aborted transactions with their LSOs, and what stays open, are the model's."""
    model = random_scenario(seed, producers=4, steps=60).write(tmp_path)
    psm = ProducerStateManager(tmp_path)
    completed = []
    for base in model.segment_bases:
        path = tmp_path / f"{base:020d}.log"
        completed += psm.replay(headers_of(path.read_bytes()), path=path)
    aborted = [(c.producer_id, c.first_offset, c.last_offset, lso) for c, lso in completed if c.is_aborted]
    assert aborted == model.aborted
    assert {t.producer_id: t.first_offset for t in psm.ongoing_transactions()} == model.open_txn_first_offsets
    assert psm.first_unstable_offset() == min(model.open_txn_first_offsets.values(), default=None)
    assert psm.map_end_offset == model.end_offset
