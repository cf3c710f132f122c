"""read_committed filtering (seglogfs/read_committed.py) against the model of transactional scenarios
(tests/support/transactions.py): logs written by kafka-python's builder and hand-built markers, read
back through the engine's header scan and through Log.iter_batches."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.consumer_walk import committed_batches
from support.transactions import ABORT, COMMIT, GZIP, Scenario, TxnModel, random_scenario

from seglogfs.log import Log
from seglogfs.producer_state import ControlType
from seglogfs.read_committed import hidden_batches
from seglogfs.records import BatchHeader, decode_batch, decode_batch_all, iter_batch_headers

SEEDS = range(60)
P, Q = 7, 9


@dataclass(frozen=True)
class Aborted:
    """Stands for a .txnindex entry: the filter reads these four attributes only."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def marker_type(header: BatchHeader, batch: bytes) -> int | None:
    (record,) = decode_batch_all(batch, header.at(0))
    return struct.unpack(">hh", record.key)[1] if record.key and len(record.key) >= 4 else None


def file_batches(log_dir: Path) -> list[tuple[BatchHeader, bytes]]:
    """Every batch of every segment, by the engine's shallow header scan; the payload is the batch's
    bytes and the header is placed at 0 within them."""
    out = []
    for path in sorted(log_dir.glob("*.log")):
        data = path.read_bytes()
        out += [(h.at(0), data[h.position : h.end_position]) for h in iter_batch_headers(data, path=path)]
    return out


def log_batches(log: Log, start: int | None = None) -> list[tuple[BatchHeader, bytes]]:
    return [(h.at(0), data) for _, h, data in log.iter_batches(start)]


def aborted_of(model: TxnModel) -> list[Aborted]:
    return [Aborted(*entry) for entry in model.aborted]


def read_committed_offsets(
    batches, aborted, lso: int, start: int = 0, marker=marker_type
) -> list[tuple[int, bytes]]:
    """(offset, value) of the records the filter passes, trimmed to [start, lso) as a caller does."""
    out = []
    for header, batch in committed_batches(batches, aborted, lso, marker):
        out += [(r.offset, r.value) for r in decode_batch(batch, header) if start <= r.offset < lso]
    return out


def expected(model: TxnModel, start: int = 0) -> list[tuple[int, bytes]]:
    offsets = [o for o in model.visible if o >= start]
    return list(zip(offsets, model.values_at(offsets), strict=True))


def build(tmp_path: Path, scenario: Scenario) -> tuple[Path, TxnModel]:
    log_dir = tmp_path / "txn-0"
    return log_dir, scenario.write(log_dir)


# ------------------------------------------------------------------ the model over seeded scenarios


@pytest.mark.parametrize("seed", SEEDS)
def test_filter_equals_model(tmp_path: Path, seed: int) -> None:
    log_dir, model = build(tmp_path, random_scenario(seed))
    aborted = aborted_of(model)
    random.Random(seed).shuffle(aborted)  # the filter orders them itself
    batches = file_batches(log_dir)
    lso = model.last_stable_offset
    assert read_committed_offsets(batches, aborted, lso) == expected(model)
    with Log.open(log_dir) as log:
        assert log.end_offset == model.end_offset
        assert [s.base_offset for s in log.segments] == model.segment_bases
        assert read_committed_offsets(log_batches(log), aborted, lso) == expected(model)


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_filter_from_any_start(tmp_path: Path, seed: int) -> None:
    """A read from offset s gets the entries with last_offset >= s (as the txn index hands them out)
    and the batches from the one holding s; it sees exactly the model's view from s."""
    log_dir, model = build(tmp_path, random_scenario(seed))
    with Log.open(log_dir, read_only=True) as log:
        for start in range(0, model.end_offset + 1, 3):
            aborted = [a for a in aborted_of(model) if a.last_offset >= start]
            got = read_committed_offsets(log_batches(log, start), aborted, model.last_stable_offset, start)
            assert got == expected(model, start), f"from {start}"


def test_scenarios_cover_every_feature() -> None:
    """The seeded scenarios contain what the filter must handle (else the tests above prove little)."""
    seen = dict.fromkeys(["open", "gzip", "empty", "spans_roll", "lso_held", "hidden", "epoch"], 0)
    for seed in SEEDS:
        scenario = random_scenario(seed)
        _, model = scenario.build()
        seen["open"] += bool(model.open_txn_first_offsets)
        seen["gzip"] += model.compressed_txn_batches
        seen["empty"] += sum(m.completes is None for m in model.markers)
        seen["lso_held"] += sum(lso <= last for _, _, last, lso in model.aborted)
        seen["hidden"] += sum(o < model.last_stable_offset for o, r in _hidden(model))
        seen["epoch"] += sum(step[0] == "bump" for step in scenario.steps)
        first_of = {r.txn: r.offset for r in reversed(model.records) if r.txn is not None}
        for m in model.markers:
            if m.completes is not None:
                seen["spans_roll"] += _segment(model, first_of[m.completes]) != _segment(model, m.offset)
    assert all(count >= 5 for count in seen.values()), seen


def _hidden(model: TxnModel) -> list[tuple[int, object]]:
    visible = set(model.visible)
    return [(r.offset, r) for r in model.records if r.offset not in visible]


def _segment(model: TxnModel, offset: int) -> int:
    return max(b for b in model.segment_bases if b <= offset)


# ------------------------------------------------------------------ hand cases, one rule each


def test_abort_then_same_producers_committed_txn(tmp_path: Path) -> None:
    scenario = Scenario().send(P, [b"a1", b"a2"]).abort(P).send(P, [b"c1"]).commit(P).send_plain([b"x"])
    log_dir, model = build(tmp_path, scenario)
    assert model.aborted == [(P, 0, 2, 3)]
    got = read_committed_offsets(file_batches(log_dir), aborted_of(model), model.last_stable_offset)
    assert got == [(3, b"c1"), (5, b"x")] == expected(model)


def test_two_producers_interleaved(tmp_path: Path) -> None:
    scenario = (
        Scenario()
        .send(P, [b"p1"])
        .send(Q, [b"q1"])
        .send_plain([b"x1"])
        .send(P, [b"p2"])
        .abort(P)  # Q is still open: the entry's LSO is Q's first offset
        .send(Q, [b"q2"])
        .commit(Q)
        .send(P, [b"p3"])
        .abort(P)  # nothing else open: marker + 1
    )
    log_dir, model = build(tmp_path, scenario)
    assert model.aborted == [(P, 0, 4, 1), (P, 7, 8, 9)]
    got = read_committed_offsets(file_batches(log_dir), aborted_of(model), model.last_stable_offset)
    assert got == [(1, b"q1"), (2, b"x1"), (5, b"q2")] == expected(model)


def test_only_an_abort_marker_clears_the_producer(tmp_path: Path) -> None:
    """Without the ABORT marker's clearing, P's later committed transaction would be hidden too."""
    scenario = Scenario().send(P, [b"a"]).abort(P).send(P, [b"c"]).commit(P)
    log_dir, model = build(tmp_path, scenario)
    batches, aborted, lso = file_batches(log_dir), aborted_of(model), model.last_stable_offset
    assert read_committed_offsets(batches, aborted, lso) == [(2, b"c")]
    for not_abort in (lambda h, b: ControlType.COMMIT, lambda h, b: None, lambda h, b: 5):
        assert read_committed_offsets(batches, aborted, lso, marker=not_abort) == []


def test_marker_type_asked_only_of_aborted_producers_markers(tmp_path: Path) -> None:
    scenario = Scenario().send(Q, [b"q"]).commit(Q).send(P, [b"a"]).abort(P).abort(Q).send_plain([b"x"])
    log_dir, model = build(tmp_path, scenario)
    asked = []

    def recording(header: BatchHeader, batch: bytes) -> int | None:
        asked.append(header.base_offset)
        return marker_type(header, batch)

    got = read_committed_offsets(
        file_batches(log_dir), aborted_of(model), model.last_stable_offset, marker=recording
    )
    assert got == [(0, b"q"), (5, b"x")]
    assert asked == [3]


def test_only_transactional_batches_of_an_aborted_producer_are_dropped(tmp_path: Path) -> None:
    """Plain batches, another producer's idempotent batch and even the aborted producer's own
    non-transactional batch inside the aborted range are kept (Kafka drops transactional ones only)."""
    scenario = (
        Scenario()
        .send(P, [b"a"])
        .send_plain([b"x"])
        .send(Q, [b"i"], txn=False)
        .send(P, [b"own"], txn=False)
        .send(P, [b"b"])
        .abort(P)
    )
    log_dir, model = build(tmp_path, scenario)
    got = read_committed_offsets(file_batches(log_dir), aborted_of(model), model.last_stable_offset)
    assert got == [(1, b"x"), (2, b"i"), (3, b"own")] == expected(model)


def test_an_aborted_txn_applies_from_the_batch_holding_its_first_offset(tmp_path: Path) -> None:
    """Producers are marked aborted before every batch whose LAST offset reaches an entry's first
    offset, so an entry starting inside a batch already drops that batch."""
    log_dir, _ = build(tmp_path, Scenario().send(P, [b"a", b"b", b"c"]).send(P, [b"d"]).abort(P))
    got = read_committed_offsets(file_batches(log_dir), [Aborted(P, 2, 4, 5)], 5)
    assert got == []


def test_open_transaction_holds_back_everything_after_it(tmp_path: Path) -> None:
    scenario = Scenario().send_plain([b"x"]).send(P, [b"open"]).send(Q, [b"q"]).commit(Q).send_plain([b"y"])
    log_dir, model = build(tmp_path, scenario)
    assert model.last_stable_offset == 1
    got = read_committed_offsets(file_batches(log_dir), [], model.last_stable_offset)
    assert got == [(0, b"x")] == expected(model)


def test_straddling_batch_is_yielded_and_later_ones_are_not(tmp_path: Path) -> None:
    log_dir, _ = build(tmp_path, Scenario().send_plain([b"a", b"b", b"c"]).send_plain([b"d"]))
    batches = file_batches(log_dir)
    yielded = [h.base_offset for h, _ in committed_batches(batches, [], 2, marker_type)]
    assert yielded == [0]  # offsets 0-2 straddle LSO 2: the caller trims offset 2
    assert read_committed_offsets(batches, [], 2) == [(0, b"a"), (1, b"b")]
    assert [h.base_offset for h, _ in committed_batches(batches, [], 3, marker_type)] == [0]
    assert [h.base_offset for h, _ in committed_batches(batches, [], 4, marker_type)] == [0, 3]


def test_empty_transactions_complete_nothing(tmp_path: Path) -> None:
    scenario = Scenario().abort(P).send_plain([b"x"]).commit(Q).send(P, [b"c"]).commit(P)
    log_dir, model = build(tmp_path, scenario)
    assert model.aborted == [] and [m.completes for m in model.markers] == [None, None, 0]
    got = read_committed_offsets(file_batches(log_dir), [], model.last_stable_offset)
    assert got == [(1, b"x"), (3, b"c")] == expected(model)


def test_compressed_transactional_batches(tmp_path: Path) -> None:
    values = [b"v" * 64, b"w" * 64]
    scenario = (
        Scenario().send(P, values, compression=GZIP).send(Q, values, compression=GZIP).abort(P).commit(Q)
    )
    log_dir, model = build(tmp_path, scenario)
    batches = file_batches(log_dir)
    assert [h.compression for h, _ in batches if not h.is_control] == [GZIP, GZIP]
    assert all(h.is_transactional for h, _ in batches)
    got = read_committed_offsets(batches, aborted_of(model), model.last_stable_offset)
    assert got == [(2, values[0]), (3, values[1])] == expected(model)


def test_transaction_spanning_a_roll(tmp_path: Path) -> None:
    scenario = Scenario().send(P, [b"a"]).roll().send(P, [b"b"]).roll().abort(P).send(P, [b"c"]).commit(P)
    log_dir, model = build(tmp_path, scenario)
    assert model.segment_bases == [0, 1, 2]
    assert model.aborted_by_segment == {2: [(P, 0, 2, 3)]}  # the segment holding the marker
    with Log.open(log_dir, read_only=True) as log:
        got = read_committed_offsets(log_batches(log), aborted_of(model), model.last_stable_offset)
    assert got == [(3, b"c")] == expected(model)


def test_markers_are_what_kafka_writes(tmp_path: Path) -> None:
    """The hand-built markers: control and transactional bits, no sequence, the producer's epoch, and
    the control record the engine's decoder reads back."""
    scenario = Scenario().send(P, [b"a"]).bump_epoch(P).abort(P, coordinator_epoch=4).commit(Q)
    log_dir, _ = build(tmp_path, scenario)
    markers = [(h, b) for h, b in file_batches(log_dir) if h.is_control]
    assert [(h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) for h, _ in markers] == [
        (P, 1, -1, True),
        (Q, 0, -1, True),
    ]
    assert [marker_type(h, b) for h, b in markers] == [ABORT, COMMIT]
    assert [ABORT, COMMIT] == [ControlType.ABORT, ControlType.COMMIT]
    (record,) = decode_batch_all(markers[0][1], markers[0][0])
    assert record.is_control and record.value == struct.pack(">hi", 0, 4)


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_batches_agrees_with_the_consumer_walk(tmp_path: Path, seed: int) -> None:
    """The stateless rule the mount and Spark use (a batch is hidden when its base offset lies in one
    of its producer's aborted transactions) keeps exactly the data batches the walk yields."""
    log_dir, model = build(tmp_path, random_scenario(seed))
    batches = file_batches(log_dir)
    lso = model.last_stable_offset
    walked = [h.base_offset for h, _ in committed_batches(batches, aborted_of(model), lso, marker_type)]
    hidden = hidden_batches(aborted_of(model))
    kept = [h.base_offset for h, _ in batches if h.base_offset < lso and not h.is_control and not hidden(h)]
    assert kept == walked
