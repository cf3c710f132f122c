"""The log cleaner against a model (Hypothesis): random keyed appends with tombstones, random cleans,
rolls and restarts. After every step each key reads as its latest append; after a full clean past
the delete horizons the log holds exactly the model's latest value per key at its offset, and
kafka-python reading the segment files sees exactly those records.

With transactions (a broker's log: producers' transactional batches, commits, aborts, empty
transactions, epoch bumps, plain batches): after full cleans past the delete horizons, read_committed
and read_uncommitted, through the engine and through kafka-python, both show exactly the latest
committed value of each key (no aborted record, no tombstone); each producer's last batch is left,
and a marker only while its transaction's batches are."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cleaner_helpers import (
    assert_table_holds,
    assert_verifies,
    compact_config,
    engine_records,
    kafka_python_committed_records,
    kafka_python_records,
    open_manager,
)
from support.engine_helpers import ManualClock
from support.transactions import COMMIT, GZIP, NONE, Scenario, TxnModel

from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED
from seglogfs.records import ProducerRecord, iter_batch_headers

DELETE_RETENTION_MS = 10_000

batch = st.lists(
    st.tuples(st.integers(0, 11), st.one_of(st.none(), st.binary(max_size=30))), min_size=1, max_size=5
)
op = st.one_of(
    st.tuples(st.just("append"), batch),
    st.tuples(st.just("append"), batch),
    st.tuples(st.just("append"), batch),
    st.tuples(st.just("roll"), st.none()),
    st.tuples(st.just("clean"), st.none()),
    st.tuples(st.just("restart"), st.none()),
    st.tuples(st.just("tick"), st.integers(0, 2 * DELETE_RETENTION_MS)),
)


class Run:
    """A data dir with one compacted log, and the model of what was appended."""

    def __init__(self, root: Path, codec: str, map_keys: int, segment_bytes: int) -> None:
        self.root = root
        self.clock = ManualClock()
        self.cfg = compact_config(
            compression_type=codec, segment_bytes=segment_bytes, delete_retention_ms=DELETE_RETENTION_MS
        )
        self.map_bytes = 24 * map_keys
        self.manager = open_manager(root, self.cfg, self.clock, dedupe_buffer_size=self.map_bytes)
        self.log = self.manager.create_log("table-0")
        self.model: dict[bytes, tuple[int, bytes | None]] = {}

    def do(self, name: str, arg: object) -> None:
        if name == "append":
            records = [ProducerRecord(key=b"k%d" % k, value=v) for k, v in arg]  # type: ignore[union-attr]
            info = self.log.append(records)
            for i, r in enumerate(records):
                self.model[r.key] = (info.first_offset + i, r.value)  # type: ignore[index]
        elif name == "roll":
            self.log.roll()
        elif name == "clean":
            self.manager.clean_once()
        elif name == "restart":
            self.restart()
        else:
            self.clock.advance(arg)  # type: ignore[arg-type]
        self.clock.advance(1)

    def restart(self) -> None:
        self.manager.close()
        self.manager = open_manager(self.root, self.cfg, self.clock, dedupe_buffer_size=self.map_bytes)
        self.log = self.manager.get("table-0")

    def clean_fully(self) -> None:
        """Roll, clean until nothing is dirty; past every horizon, add a record (so that the log is
        dirty again) and clean until nothing is dirty."""
        self.log.roll()
        for _ in range(200):
            if self.manager.clean_once() is None:
                break
        self.clock.advance(DELETE_RETENTION_MS + 1)
        info = self.log.append([ProducerRecord(key=b"sentinel", value=b"s")])
        self.model[b"sentinel"] = (info.first_offset, b"s")
        self.log.roll()
        for _ in range(200):
            if self.manager.clean_once() is None:
                break


def check_final(run: Run) -> None:
    expected = sorted((o, k, v) for k, (o, v) in run.model.items() if v is not None)
    assert engine_records(run.log) == expected
    assert kafka_python_records(run.log.dir) == expected
    for offset, key, value in expected:
        record = run.log.read(offset)
        assert (record.key, record.value) == (key, value)
    kept = {o for o, _, _ in expected}
    for offset in range(run.log.start_offset, run.log.end_offset):
        if offset not in kept:
            with pytest.raises(OffsetOutOfRangeError):
                run.log.read(offset)


def run_model(ops, codec: str, map_keys: int, segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(Path(tmp), codec, map_keys, segment_bytes)
        try:
            end_offsets = []
            for name, arg in ops:
                run.do(name, arg)
                assert_table_holds(run.log, run.model)
                end_offsets.append(run.log.end_offset)
            assert end_offsets == sorted(end_offsets)  # the log end never moves back
            run.clean_fully()
            check_final(run)
            run.restart()
            check_final(run)
        finally:
            run.manager.close()
        assert_verifies(run.log.dir)  # closed: the verifier reads an open log's preallocated index as entries


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op, max_size=40),
    codec=st.sampled_from(["producer", "gzip", "lz4"]),
    map_keys=st.sampled_from([4, 8, 1000]),
    segment_bytes=st.sampled_from([300, 700, 5000]),
)
def test_cleaned_log_equals_the_model(ops, codec: str, map_keys: int, segment_bytes: int) -> None:
    run_model(ops, codec, map_keys, segment_bytes)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op, max_size=120),
    codec=st.sampled_from(["producer", "gzip", "snappy", "lz4", "zstd"]),
    map_keys=st.sampled_from([3, 8, 50, 1000]),
    segment_bytes=st.sampled_from([200, 700, 5000]),
)
def test_cleaned_log_equals_the_model_long(ops, codec: str, map_keys: int, segment_bytes: int) -> None:
    run_model(ops, codec, map_keys, segment_bytes)


# ------------------------------------------------------------------ transactions

PIDS = (1000, 1001, 1002)
keyed = st.lists(
    st.tuples(st.integers(0, 7), st.one_of(st.none(), st.binary(min_size=1, max_size=12))),
    min_size=1,
    max_size=4,
)
txn_op = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(PIDS), keyed),
    st.tuples(st.just("send"), st.sampled_from(PIDS), keyed),
    st.tuples(st.just("gzip"), st.sampled_from(PIDS), keyed),
    st.tuples(st.just("plain"), st.just(-1), keyed),
    st.tuples(st.just("commit"), st.sampled_from(PIDS), st.none()),
    st.tuples(st.just("abort"), st.sampled_from(PIDS), st.none()),
    st.tuples(st.just("bump"), st.sampled_from(PIDS), st.none()),
    st.tuples(st.just("roll"), st.just(-1), st.none()),
)


def txn_scenario(ops, end_commits: bool) -> Scenario:
    """The steps of ``ops``; open transactions end (committed or aborted), then a roll and one plain
    record (the active segment: everything before it is cleanable)."""
    scenario, open_pids = Scenario(), set()
    for name, pid, arg in ops:
        if name in ("send", "gzip", "plain"):
            keys, values = [b"k%d" % k for k, _ in arg], [v for _, v in arg]
            # long values: kafka-python stores a gzip batch uncompressed when gzip does not shrink it
            codec = GZIP if name == "gzip" else NONE
            if codec == GZIP:
                keys, values = [*keys, b"gz"], [*values, b"z" * 300]
            if name == "plain":
                scenario.send_plain(values, keys=keys)
            else:
                scenario.send(pid, values, keys=keys, compression=codec)
                open_pids.add(pid)
        elif name in ("commit", "abort"):
            scenario.commit(pid) if name == "commit" else scenario.abort(pid)
            open_pids.discard(pid)
        elif name == "bump":
            if pid not in open_pids:  # a coordinator ends a transaction before bumping the epoch
                scenario.bump_epoch(pid)
        else:
            scenario.roll()
    for pid in sorted(open_pids):
        scenario.commit(pid) if end_commits else scenario.abort(pid)
    return scenario.roll().send_plain([b"s"], keys=[b"sentinel"])


def committed_table(model: TxnModel) -> dict[bytes, tuple[int, bytes | None]]:
    table: dict[bytes, tuple[int, bytes | None]] = {}
    for r in model.records:
        if r.txn is None or model.outcomes[r.txn] == COMMIT:
            table[r.key] = (r.offset, r.value)  # type: ignore[index]
    return table


def _batches(log_dir: Path) -> list:
    out = []
    for path in sorted(log_dir.glob("*.log")):
        out += list(iter_batch_headers(path.read_bytes(), path=path))
    return out


def check_txn_final(lg, table: dict, model: TxnModel, original: list) -> None:
    expected = sorted((o, k, v) for k, (o, v) in table.items() if v is not None)
    assert lg.last_stable_offset == lg.end_offset  # no transaction left open by a lost marker
    assert engine_records(lg) == expected
    assert [(r.offset, r.key, r.value) for r in lg.iter_records(isolation=READ_COMMITTED)] == expected
    assert [(r.offset, r.key, r.value) for r in lg.iter_records(isolation=READ_UNCOMMITTED)] == expected
    assert kafka_python_records(lg.dir) == expected
    assert kafka_python_committed_records(lg.dir, lg.last_stable_offset) == expected
    batches = _batches(lg.dir)
    # Each producer's last data batch is left (Kafka keeps it for the producer's sequence).
    last_data: dict[int, int] = {}
    epoch_of: dict[int, int] = {}
    for header in original:
        if header.producer_id >= 0:
            if epoch_of.get(header.producer_id) != header.producer_epoch:
                last_data.pop(header.producer_id, None)
                epoch_of[header.producer_id] = header.producer_epoch
            if not header.is_control:
                last_data[header.producer_id] = header.last_offset
    ends = {h.last_offset for h in batches}
    assert all(offset in ends for offset in last_data.values())
    # A marker stays only while a batch of its transaction does, or as its producer's last batch.
    kept_data = {(h.producer_id, h.base_offset) for h in batches if h.is_transactional and not h.is_control}
    for header in batches:
        if not header.is_control:
            continue
        previous = max(
            (
                m.offset
                for m in model.markers
                if m.producer_id == header.producer_id and m.offset < header.base_offset
            ),
            default=-1,
        )
        has_batch = any(p == header.producer_id and previous < o < header.base_offset for p, o in kept_data)
        assert has_batch or header.producer_id not in last_data, header


def run_txn_model(ops, end_commits: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log_dir = root / "table-0"
        model = txn_scenario(ops, end_commits).write(log_dir)
        original = _batches(log_dir)
        table = committed_table(model)
        clock = ManualClock()
        cfg = compact_config(delete_retention_ms=DELETE_RETENTION_MS, segment_bytes=5000)
        manager = open_manager(root, cfg, clock)
        try:
            lg = manager.get("table-0")
            for n in range(4):  # the marker of an emptied transaction: a horizon, then gone
                for _ in range(200):
                    if manager.clean_once() is None:
                        break
                clock.advance(DELETE_RETENTION_MS + 1)
                info = lg.append([ProducerRecord(key=b"sentinel", value=b"s%d" % n)])
                table[b"sentinel"] = (info.first_offset, b"s%d" % n)
                lg.roll()
            for _ in range(200):
                if manager.clean_once() is None:
                    break
            check_txn_final(lg, table, model, original)
            manager.close()
            manager = open_manager(root, cfg, clock)
            lg = manager.get("table-0")
            check_txn_final(lg, table, model, original)
        finally:
            manager.close()
        assert_verifies(log_dir)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(txn_op, max_size=30), end_commits=st.booleans())
def test_cleaned_transactional_log_equals_the_model(ops, end_commits: bool) -> None:
    run_txn_model(ops, end_commits)
