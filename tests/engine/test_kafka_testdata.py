"""The engine against a real Kafka 4 (KRaft) data dir: shared/testdata/kafka-4-kraft-logdir.

kafka-python's ``kafka.record`` is the independent parser; the broker's own ``.index`` / ``.timeindex``
files are the expected output of an index rebuild (docs/kafka-format.md sections 2, 3, 9).
The shared folder is never opened for writing: every test works on a copy in tmp_path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import ControlRecord
from support.testdata import KAFKA_LOG_DIR

from seglogfs.config import LogConfig
from seglogfs.errors import OffsetOutOfRangeError, TimestampNotFoundError
from seglogfs.log_manager import LogManager
from seglogfs.records import (
    ProducerRecord,
    TimestampType,
    decode_batch,
    decode_batch_all,
    decode_batch_columns,
    iter_batch_headers,
    validate_batch,
)
from seglogfs.segment import LogSegment

TESTDATA = KAFKA_LOG_DIR
SEGMENT = "00000000000000000000"
CONSUMER_OFFSETS = "__consumer_offsets-15"
METADATA = "__cluster_metadata-0"
NON_EMPTY = [CONSUMER_OFFSETS, METADATA]



# =============================================================================== helpers


def copy_datadir(tmp_path: Path) -> Path:
    """A private, writable copy of the real data dir."""
    dest = tmp_path / "kafka-logs"
    shutil.copytree(TESTDATA, dest)
    for root, dirs, files in os.walk(dest):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    os.chmod(dest, 0o755)
    return dest


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every file under root (hidden ones included)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                path.stat().st_mtime_ns,
            )
    return out


def kp_parse_log(data: bytes):
    """kafka-python's view of a .log: (batches with their records, user records as tuples)."""
    batches = []
    user = []
    mr = MemoryRecords(data)
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        recs = list(batch)
        batches.append((batch, recs))
        for r in recs:
            if not isinstance(r, ControlRecord):
                user.append(
                    (
                        r.offset,
                        r.timestamp,
                        r.timestamp_type,
                        r.key,
                        r.value,
                        tuple(tuple(h) for h in r.headers),
                    )
                )
    return batches, user


def record_tuple(r) -> tuple:
    return (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, tuple(r.headers))


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Independent parse of a Kafka offset checkpoint: version, count, then `topic partition offset`."""
    lines = path.read_text().splitlines()
    assert lines[0] == "0"
    count = int(lines[1])
    entries = [line.split(" ") for line in lines[2:] if line]
    assert len(entries) == count
    return {(t, int(p)): int(o) for t, p, o in entries}


def rebuild_indexes_by_rule(data: bytes, interval: int = 4096) -> tuple[bytes, bytes]:
    """Section 3's per-batch rule, written independently of the engine: (index bytes, timeindex bytes)."""
    index, timeindex = bytearray(), bytearray()
    mr = MemoryRecords(data)
    position = last_indexed = 0
    max_ts, max_ts_offset, last_time = -1, 0, -1
    while mr.has_next():
        batch = mr.next_batch()
        if batch.max_timestamp > max_ts:
            max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        if position - last_indexed > interval:
            index += struct.pack(">ii", batch.last_offset, position)
            if max_ts > last_time:
                timeindex += struct.pack(">qi", max_ts, max_ts_offset)
                last_time = max_ts
            last_indexed = position
        position += batch.size_in_bytes
    if max_ts > last_time:
        timeindex += struct.pack(">qi", max_ts, max_ts_offset)
    return bytes(index), bytes(timeindex)


@pytest.fixture(scope="module")
def parsed():
    """kafka-python's parse of both non-empty partitions (module-wide: pure Python is slowish)."""
    out = {}
    for name in NON_EMPTY:
        data = (TESTDATA / name / f"{SEGMENT}.log").read_bytes()
        out[name] = (data, *kp_parse_log(data))
    return out


# =============================================================================== every batch and record


def test_known_shape_of_the_test_data(parsed):
    data, batches, user = parsed[CONSUMER_OFFSETS]
    assert len(data) == 21446 and len(batches) == 88 and len(user) == 256
    data, batches, user = parsed[METADATA]
    assert len(data) == 146026 and len(batches) == 1842
    assert any(b.is_control_batch for b, _ in batches)


@pytest.mark.parametrize("name", NON_EMPTY)
def test_every_batch_matches_kafka_python(parsed, name):
    data, kbatches, kuser = parsed[name]
    path = TESTDATA / name / f"{SEGMENT}.log"
    headers = list(iter_batch_headers(data, path=path))
    assert len(headers) == len(kbatches)
    assert headers[-1].end_position == len(data)
    user = []
    controls = 0
    for h, (kb, krecs) in zip(headers, kbatches, strict=True):
        assert h.magic == kb.magic == 2
        assert (h.base_offset, h.last_offset, h.size) == (kb.base_offset, kb.last_offset, kb.size_in_bytes)
        assert (h.crc, h.attributes, h.leader_epoch) == (kb.crc, kb.attributes, kb.leader_epoch)
        assert (h.base_timestamp, h.max_timestamp) == (kb.first_timestamp, kb.max_timestamp)
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
            kb.producer_id,
            kb.producer_epoch,
            kb.base_sequence,
        )
        assert h.records_count == kb.records_count == len(krecs)
        assert (h.is_control, h.is_transactional) == (kb.is_control_batch, kb.is_transactional)
        assert int(h.timestamp_type) == kb.timestamp_type
        assert h.compression == kb.compression_type
        validate_batch(data, h, path=path)
        every = decode_batch_all(data, h, path=path)
        assert [(d.offset, d.timestamp, d.key, d.value, d.headers, d.is_control) for d in every] == [
            (
                r.offset,
                r.timestamp,
                r.key,
                r.value,
                tuple(tuple(x) for x in r.headers),
                isinstance(r, ControlRecord),
            )
            for r in krecs
        ]
        records = decode_batch(data, h, path=path)
        cols = decode_batch_columns(data, h, path=path)
        if kb.is_control_batch:
            controls += 1
            assert records == [] and len(cols) == 0
        else:
            assert len(cols) == len(records) == len(krecs)
            assert cols.offsets.tolist() == [r.offset for r in records]
            assert cols.timestamps.tolist() == [r.timestamp for r in records]
        user.extend(record_tuple(r) for r in records)
    assert user == kuser
    if name == METADATA:
        assert controls >= 1
        assert len(user) == sum(len(r) for b, r in kbatches if not b.is_control_batch)


def test_metadata_control_records_are_kraft_control_types(parsed):
    data, kbatches, _ = parsed[METADATA]
    headers = list(iter_batch_headers(data))
    for h, (kb, _) in zip(headers, kbatches, strict=True):
        if not kb.is_control_batch:
            continue
        for d in decode_batch_all(data, h):
            assert d.is_control
            version, kind = struct.unpack(">hh", d.key)
            assert version == 0 and 0 <= kind <= 6  # ControlRecordType ids


# =============================================================================== index rebuild


@pytest.mark.parametrize("name", NON_EMPTY)
def test_independent_rule_reproduces_broker_indexes(parsed, name):
    """Guards the expectation below: the section-3 rule gives exactly the broker's files."""
    index, timeindex = rebuild_indexes_by_rule(parsed[name][0])
    assert index == (TESTDATA / name / f"{SEGMENT}.index").read_bytes()
    assert timeindex == (TESTDATA / name / f"{SEGMENT}.timeindex").read_bytes()


@pytest.mark.parametrize("name", NON_EMPTY)
def test_log_manager_rebuilds_missing_indexes_byte_for_byte(tmp_path, name):
    copy = copy_datadir(tmp_path)
    seg_dir = copy / name
    (seg_dir / f"{SEGMENT}.index").unlink()
    (seg_dir / f"{SEGMENT}.timeindex").unlink()
    manager = LogManager(copy)
    log = manager.get(name)
    assert (log.start_offset, log.end_offset) == (0, {CONSUMER_OFFSETS: 256, METADATA: 2067}[name])
    manager.close()
    for suffix in (".index", ".timeindex"):
        rebuilt = (seg_dir / f"{SEGMENT}{suffix}").read_bytes()
        assert rebuilt == (TESTDATA / name / f"{SEGMENT}{suffix}").read_bytes(), suffix
    assert (seg_dir / f"{SEGMENT}.log").read_bytes() == (TESTDATA / name / f"{SEGMENT}.log").read_bytes()


@pytest.mark.parametrize("name", NON_EMPTY)
def test_unclean_recovery_rebuilds_indexes_byte_for_byte(tmp_path, name):
    """Without the clean-shutdown marker every segment from the recovery point is re-validated and
    re-indexed; the result is still the broker's bytes."""
    copy = copy_datadir(tmp_path)
    (copy / ".kafka_cleanshutdown").unlink()
    # stale, wrong indexes: recovery must not trust them
    (copy / name / f"{SEGMENT}.index").write_bytes(struct.pack(">ii", 1, 999999) * 3)
    (copy / name / f"{SEGMENT}.timeindex").write_bytes(struct.pack(">qi", 5, 1))
    (copy / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    manager = LogManager(copy)
    manager.close()
    for suffix in (".index", ".timeindex", ".log"):
        assert (copy / name / f"{SEGMENT}{suffix}").read_bytes() == (
            TESTDATA / name / f"{SEGMENT}{suffix}"
        ).read_bytes(), suffix
    assert (copy / ".kafka_cleanshutdown").is_file()


@pytest.mark.parametrize("name", NON_EMPTY)
def test_segment_recover_rebuilds_indexes_byte_for_byte(tmp_path, name):
    copy = copy_datadir(tmp_path)
    seg_dir = copy / name
    (seg_dir / f"{SEGMENT}.index").unlink()
    (seg_dir / f"{SEGMENT}.timeindex").unlink()
    segment = LogSegment(seg_dir, 0)
    truncated = segment.recover()
    assert truncated == 0
    assert segment.size == (TESTDATA / name / f"{SEGMENT}.log").stat().st_size
    segment.close()
    for suffix in (".index", ".timeindex"):
        assert (seg_dir / f"{SEGMENT}{suffix}").read_bytes() == (
            TESTDATA / name / f"{SEGMENT}{suffix}"
        ).read_bytes()


# =============================================================================== read-only


def test_read_only_manager_opens_everything_and_writes_nothing(tmp_path, parsed):
    copy = copy_datadir(tmp_path)
    before = snapshot(copy)
    manager = LogManager(copy, read_only=True)
    try:
        logs = manager.logs
        assert len(logs) == 54
        expected_names = {p.name for p in TESTDATA.iterdir() if p.is_dir()}
        assert set(logs) == expected_names
        for name, log in logs.items():
            records = [record_tuple(r) for r in log.iter_records()]
            # no aborted transaction in the broker's data: both isolation levels read the same
            assert [record_tuple(r) for r in log.iter_records(isolation="read_committed")] == records
            assert log.last_stable_offset == log.end_offset
            if name in parsed:
                assert records == parsed[name][2]
                assert log.end_offset == parsed[name][1][-1][0].next_offset
            else:
                assert records == []
                assert (log.start_offset, log.end_offset) == (0, 0)
        assert logs[CONSUMER_OFFSETS].size_bytes == 21446
        assert logs[METADATA].size_bytes == 146026
    finally:
        manager.close()
    assert snapshot(copy) == before


def test_read_only_with_missing_indexes_scans_and_creates_nothing(tmp_path, parsed):
    copy = copy_datadir(tmp_path)
    for name in NON_EMPTY:
        (copy / name / f"{SEGMENT}.index").unlink()
    (copy / METADATA / f"{SEGMENT}.timeindex").unlink()
    before = snapshot(copy)
    with LogManager(copy, read_only=True) as manager:
        for name in NON_EMPTY:
            log = manager.get(name)
            expected = parsed[name][2]
            for r in expected[::37] + expected[-1:]:
                assert record_tuple(log.read(r[0])) == r
            ts = expected[len(expected) // 2][1]
            assert log.offset_for_timestamp(ts) == next(r[0] for r in expected if r[1] >= ts)
    assert snapshot(copy) == before
    assert not (copy / CONSUMER_OFFSETS / f"{SEGMENT}.index").exists()


def test_read_only_lookups_on_consumer_offsets(tmp_path, parsed):
    copy = copy_datadir(tmp_path)
    expected = parsed[CONSUMER_OFFSETS][2]
    by_offset = {r[0]: r for r in expected}
    manager = LogManager(copy, read_only=True)
    try:
        log = manager.get(CONSUMER_OFFSETS)
        assert (log.start_offset, log.end_offset) == (0, 256)
        for offset in range(256):
            assert record_tuple(log.read(offset)) == by_offset[offset]
        for offset in (-1, 256, 10**6):
            with pytest.raises(OffsetOutOfRangeError):
                log.read(offset)
        # ranges
        assert [r.offset for r in log.iter_records(100, 110)] == list(range(100, 110))
        assert [record_tuple(r) for r in log.iter_records(250)] == expected[250:]
        # timestamps: the first record (in offset order) with timestamp >= ts
        timestamps = sorted({r[1] for r in expected})
        probes = {
            timestamps[0] - 10_000,
            *timestamps,
            *(t + 1 for t in timestamps),
            *(t - 1 for t in timestamps),
        }
        for ts in sorted(probes):
            hits = [r[0] for r in expected if r[1] >= ts]
            if hits:
                assert log.offset_for_timestamp(ts) == hits[0], ts
            else:
                with pytest.raises(TimestampNotFoundError):
                    log.offset_for_timestamp(ts)
        assert log.first_timestamp == expected[0][1]
        assert log.last_timestamp == max(r[1] for r in expected)
        assert {r.timestamp_type for r in log.iter_records()} == {TimestampType.CREATE_TIME}
    finally:
        manager.close()


def test_read_only_metadata_log_skips_control_offsets(tmp_path, parsed):
    copy = copy_datadir(tmp_path)
    _, kbatches, expected = parsed[METADATA]
    control_offsets = [r.offset for b, recs in kbatches if b.is_control_batch for r in recs]
    manager = LogManager(copy, read_only=True)
    try:
        log = manager.get(METADATA)
        for offset in control_offsets:
            with pytest.raises(OffsetOutOfRangeError):
                log.read(offset)
        for r in expected[::97] + expected[-3:]:
            assert record_tuple(log.read(r[0])) == r
        assert [r.offset for r in log.iter_records()] == [r[0] for r in expected]
    finally:
        manager.close()


# =============================================================================== writable


def test_clean_open_append_close_keeps_a_kafka_loadable_dir(tmp_path, parsed):
    copy = copy_datadir(tmp_path)
    untouched = {
        name: {s: (copy / name / f"{SEGMENT}{s}").read_bytes() for s in (".log", ".index", ".timeindex")}
        for name in NON_EMPTY
    }
    manager = LogManager(copy, log_configs={"demo-topic-0": LogConfig(compression_type="zstd")})
    assert not (copy / ".kafka_cleanshutdown").exists()  # removed while the dir is open (KAFKA-10471)
    assert len(manager.logs) == 54
    demo = manager.get("demo-topic-0")
    assert (demo.start_offset, demo.end_offset) == (0, 0)
    # while open, the active segments' indexes are preallocated again (Kafka's resizeIndexes)
    assert (copy / CONSUMER_OFFSETS / f"{SEGMENT}.index").stat().st_size == 10485760
    assert (copy / CONSUMER_OFFSETS / f"{SEGMENT}.timeindex").stat().st_size == 10485756
    first = demo.append([ProducerRecord(b"hello", b"k1", (("h", b"v"),), 1_779_000_000_000)])
    second = demo.append_values([b"line %d" % i for i in range(100)], timestamp_ms=1_779_000_000_500)
    third = demo.append([ProducerRecord(None, b"tombstone", (), 1_779_000_000_100)])
    assert (first.first_offset, second.first_offset, second.last_offset, third.last_offset) == (
        0,
        1,
        100,
        101,
    )
    assert manager.get(CONSUMER_OFFSETS).end_offset == 256
    manager.close()

    # the clean-shutdown marker is back, as Kafka's JSON
    marker = json.loads((copy / ".kafka_cleanshutdown").read_text())
    assert marker["version"] == 0 and isinstance(marker["brokerEpoch"], int)
    # the checkpoints carry the new end offset and keep the others
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        cp = read_checkpoint(copy / name)
        assert cp[("demo-topic", 0)] == 102, name
        assert cp[("__consumer_offsets", 15)] == 256, name
        assert cp[("demo-topic", 1)] == 0, name
    assert read_checkpoint(copy / "log-start-offset-checkpoint").get(("demo-topic", 0), 0) == 0

    # the broker's partitions are byte-identical after a clean load and close
    for name in NON_EMPTY:
        for suffix, data in untouched[name].items():
            assert (copy / name / f"{SEGMENT}{suffix}").read_bytes() == data, (name, suffix)

    # every .log of the data dir still parses with kafka-python, CRCs valid
    for log_file in sorted(copy.glob("*/*.log")):
        data = log_file.read_bytes()
        batches, user = kp_parse_log(data)
        assert sum(b.size_in_bytes for b, _ in batches) == len(data), log_file
        if log_file.parent.name in parsed:
            assert user == parsed[log_file.parent.name][2]
        elif log_file.parent.name == "demo-topic-0":
            assert [b.compression_type for b, _ in batches] == [4, 4, 4]
            assert user[0] == (0, 1_779_000_000_000, 0, b"k1", b"hello", (("h", b"v"),))
            assert [u[4] for u in user[1:101]] == [b"line %d" % i for i in range(100)]
            assert {u[1] for u in user[1:101]} == {1_779_000_000_500}
            assert user[101] == (101, 1_779_000_000_100, 0, b"tombstone", None, ())
        else:
            assert user == []

    # the demo segment's indexes are trimmed; the time index ends with the segment's max timestamp
    demo_dir = copy / "demo-topic-0"
    assert (demo_dir / f"{SEGMENT}.index").stat().st_size == 0  # < index.interval.bytes written
    assert (demo_dir / f"{SEGMENT}.timeindex").read_bytes() == struct.pack(">qi", 1_779_000_000_500, 100)

    # and it opens again, read-only, with the appended records
    with LogManager(copy, read_only=True) as again:
        demo = again.get("demo-topic-0")
        assert demo.end_offset == 102
        assert demo.read(101).key == b"tombstone"
        assert demo.offset_for_timestamp(1_779_000_000_001) == 1


def test_clean_shutdown_load_does_not_scan_segments(tmp_path, caplog):
    """With .kafka_cleanshutdown the segments are trusted (no CRC pass, no truncation), as in Kafka;
    without it recovery finds the damaged batch but, unlike Kafka, cuts nothing: intact batches follow
    it, so only its own offsets are unreadable."""
    data = (TESTDATA / METADATA / f"{SEGMENT}.log").read_bytes()
    headers = list(iter_batch_headers(data))
    victim = headers[-5]
    for clean in (True, False):
        copy = copy_datadir(tmp_path / str(clean))
        log_path = copy / METADATA / f"{SEGMENT}.log"
        damaged = bytearray(data)
        damaged[victim.position + 70] ^= 0xFF  # inside the records: CRC mismatch
        log_path.write_bytes(bytes(damaged))
        if not clean:
            (copy / ".kafka_cleanshutdown").unlink()
        manager = LogManager(copy)
        log = manager.get(METADATA)
        manager.close()
        if clean:
            assert log_path.stat().st_size == len(data)
            assert log.end_offset == 2067
        else:
            assert log_path.stat().st_size == len(data)
            assert log.end_offset == 2067
            assert f"kept {victim.size} damaged bytes" in caplog.text
