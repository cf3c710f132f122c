"""The log cleaner against a model (Hypothesis): random keyed appends with tombstones, random cleans,
rolls and restarts. After every step each key reads as its latest append; after a full clean past
the delete horizons the log holds exactly the model's latest value per key at its offset, and
kafka-python reading the segment files sees exactly those records."""

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
    kafka_python_records,
    open_manager,
)
from support.engine_helpers import ManualClock

from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.records import ProducerRecord

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
