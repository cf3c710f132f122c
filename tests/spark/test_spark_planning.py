"""The seglog source without a JVM: options, planning, reads, data loss, streaming offsets, verify.

The DataSource is instantiated directly and its reader's ``partitions()`` / ``read()`` are called,
as Spark's planner and executors would; rows are compared with the engine's own ``Log.iter_records``.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import threading
from pathlib import Path

import pytest
from support.spark_fixtures import CODECS, append_records, engine_rows, make_log, source_rows
from support.testdata import KAFKA_LOG_DIR

from seglogfs.config import LogConfig
from seglogfs.log import Log
from seglogfs.spark.options import OptionError, ReadOptions, parse_offsets
from seglogfs.spark.scan import DataLossError
from seglogfs.spark.schema import arrow_schema

KAFKA_DIR = KAFKA_LOG_DIR


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """One log per codec, each with several segments."""
    root = tmp_path_factory.mktemp("spark-plan") / "data"
    for i, codec in enumerate(CODECS):
        make_log(root, f"ev-{i}", codec=codec, segment_bytes=3000 if codec != "uncompressed" else 8000)
    return root


@pytest.fixture
def kafka_copy(tmp_path) -> Path:
    dest = tmp_path / "kafka"
    shutil.copytree(KAFKA_DIR, dest)
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    dest.chmod(0o755)
    return dest


# ------------------------------------------------------------------ options


def test_offsets_json_forms() -> None:
    names = {("events", 0): "events-0", ("events", 1): "events-1", ("audit", 0): "audit"}
    spec = parse_offsets(
        {"startingoffsets": '{"events": {"0": 5, "1": -2}, "audit": -1}'}, "startingoffsets", -2, names
    )
    assert spec.for_log("events-0") == 5
    assert spec.for_log("events-1") == -2
    assert spec.for_log("audit") == -1
    assert parse_offsets({}, "startingoffsets", -2, names).for_log("events-0") == -2
    assert parse_offsets({"x": "latest"}, "x", -2, names).default == -1
    with pytest.raises(OptionError, match="no log for topic 'nope'"):
        parse_offsets({"x": '{"nope": {"0": 1}}'}, "x", -2, names)
    with pytest.raises(OptionError, match="integer >= -2"):
        parse_offsets({"x": '{"events-0": -7}'}, "x", -2, names)
    with pytest.raises(OptionError, match="earliest, latest or offsets JSON"):
        parse_offsets({"x": "soon"}, "x", -2, names)


def test_read_options_parse() -> None:
    opts = ReadOptions.parse(
        {
            "includeHeaders": "true",
            "failOnDataLoss": "false",
            "minPartitions": "4",
            "startingTimestamp": "2023-11-14T22:13:20Z",
            "logs": "a, b",
        }
    )
    assert opts.include_headers and not opts.fail_on_data_loss and opts.min_partitions == 4
    assert opts.starting_timestamp == 1_700_000_000_000
    assert opts.logs == ["a", "b"]
    with pytest.raises(OptionError, match="option minPartitions='zero': expected an integer"):
        ReadOptions.parse({"minpartitions": "zero"})


# ------------------------------------------------------------------ whole logs


@pytest.mark.parametrize("index", range(len(CODECS)))
def test_whole_log_matches_engine(data_dir: Path, index: int) -> None:
    log_dir = data_dir / f"ev-{index}"
    parts, rows = source_rows({"path": log_dir})
    assert len(parts) > 1  # one task per segment, several segments
    assert rows == engine_rows(log_dir)
    assert any(r[1] is None for r in rows) and any(r[4] for r in rows)


def test_data_dir_all_logs_and_selection(data_dir: Path) -> None:
    _, rows = source_rows({"path": data_dir}, headers=False)
    assert len(rows) == 5 * 1000
    parts, rows = source_rows({"path": data_dir, "logs": "ev-1,ev-3"})
    assert {p.log for p in parts} == {"ev-1", "ev-3"}
    parts, _ = source_rows({"path": data_dir, "topics": "ev"})
    assert {p.log for p in parts} == {f"ev-{i}" for i in range(5)}
    with pytest.raises(OptionError, match="no log named nope"):
        source_rows({"path": data_dir, "logs": "nope"})


def test_batches_have_the_exact_arrow_schema(data_dir: Path) -> None:
    from seglogfs.spark.source import SeglogDataSource

    for headers in (False, True):
        source = SeglogDataSource({"path": str(data_dir / "ev-0"), "includeheaders": str(headers).lower()})
        reader = source.reader(source.schema())
        batch = next(iter(reader.read(reader.partitions()[0])))
        assert batch.schema == arrow_schema(headers)


# ------------------------------------------------------------------ ranges


def _segment_bases(log_dir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.log"))


@pytest.mark.parametrize("index", [0, 4])
def test_offset_ranges_at_and_inside_segments(data_dir: Path, index: int) -> None:
    log_dir = data_dir / f"ev-{index}"
    bases = _segment_bases(log_dir)
    assert len(bases) >= 3
    b1, b2 = bases[1], bases[2]
    cases = [(b1, b2), (b1 - 1, b2 + 1), (b1 + 3, b1 + 7), (0, 1), (b2, 1000), (999, 1000), (b1, b1)]
    for lo, hi in cases:
        parts, rows = source_rows(
            {
                "path": log_dir,
                "startingOffsets": f'{{"ev": {{"{index}": {lo}}}}}',
                "endingOffsets": f'{{"ev-{index}": {hi}}}',
            }
        )
        assert rows == engine_rows(log_dir, lo, hi), (lo, hi)
        assert [r[0] for r in rows] == list(range(lo, hi))
    # a range inside one segment is one task that starts past the segment's first byte
    parts, _ = source_rows(
        {
            "path": log_dir,
            "startingOffsets": f'{{"ev-{index}": {b1 + 60}}}',
            "endingOffsets": f'{{"ev-{index}": {b2 - 1}}}',
        }
    )
    assert len(parts) == 1 and parts[0].position > 0


def test_latest_start_and_earliest_end_are_refused_for_batch(data_dir: Path) -> None:
    with pytest.raises(OptionError, match="latest is not allowed"):
        source_rows({"path": data_dir / "ev-0", "startingOffsets": "latest"})
    with pytest.raises(OptionError, match="earliest is not allowed"):
        source_rows({"path": data_dir / "ev-0", "endingOffsets": "earliest"})


def test_latest_start_and_earliest_end_of_one_log_are_refused_for_batch(data_dir: Path) -> None:
    """As Kafka's validateBatchOptions: -1 (latest) as a log's start or -2 (earliest) as its end in
    the JSON forms is refused too (both read nothing without a word)."""
    with pytest.raises(OptionError, match=r"startingOffsets: latest \(-1\) for log ev-1 is not allowed"):
        source_rows({"path": data_dir, "startingOffsets": '{"ev": {"0": 5, "1": -1}}'})
    with pytest.raises(OptionError, match=r"endingOffsets: earliest \(-2\) for log ev-0 is not allowed"):
        source_rows({"path": data_dir, "endingOffsets": '{"ev-0": -2}'})
    # a timestamp start wins over startingOffsets (Kafka's precedence): nothing to refuse then
    _, rows = source_rows(
        {"path": data_dir / "ev-0", "startingOffsets": '{"ev-0": -1}', "startingTimestamp": "0"}
    )
    assert rows == engine_rows(data_dir / "ev-0")


def test_timestamp_ranges(data_dir: Path) -> None:
    log_dir = data_dir / "ev-2"
    t0 = 1_700_000_000_000
    everything = engine_rows(log_dir)
    for lo, hi in [
        (t0 + 5000, t0 + 9000),
        (t0 + 5010, t0 + 5020),
        (t0 + 12_345, t0 + 33_001),
        (t0 - 1, t0 + 1),
    ]:
        _, rows = source_rows({"path": log_dir, "startingTimestamp": lo, "endingTimestamp": hi})
        first = next(r[0] for r in everything if r[3] >= lo)
        end = next(r[0] for r in everything if r[3] >= hi)
        assert [r[0] for r in rows] == list(range(first, end)), (lo, hi)
    # ISO-8601 works too
    _, rows = source_rows(
        {
            "path": log_dir,
            "startingTimestamp": "2023-11-14T22:13:25Z",
            "endingTimestamp": "2023-11-14T22:13:26Z",
        }
    )
    assert [r[0] for r in rows] == list(range(125, 150))
    with pytest.raises(OptionError, match="no record at or after"):
        source_rows({"path": log_dir, "startingTimestamp": t0 + 10**9})
    _, rows = source_rows(
        {"path": log_dir, "startingTimestamp": t0 + 10**9, "startingOffsetsByTimestampStrategy": "latest"}
    )
    assert rows == []


def test_min_partitions_splits_at_index_entries(data_dir: Path) -> None:
    log_dir = data_dir / "ev-0"
    plain, _ = source_rows({"path": log_dir})
    parts, rows = source_rows({"path": log_dir, "minPartitions": 12})
    assert len(parts) >= 12 > len(plain)
    assert rows == engine_rows(log_dir)
    # pieces are contiguous and each starts at a batch boundary found through the index
    for a, b in itertools.pairwise(parts):
        if a.log_path == b.log_path:
            assert a.end_offset == b.start_offset
    assert sum(p.position > 0 for p in parts) == len(parts) - len(plain)


def test_empty_plan_reads_nothing(tmp_path: Path) -> None:
    make_log(tmp_path, "empty", batches=0)
    parts, rows = source_rows({"path": tmp_path / "empty"})
    assert parts == [] and rows == []
    from seglogfs.spark.source import SeglogDataSource

    source = SeglogDataSource({"path": str(tmp_path / "empty")})
    from pyspark.sql.datasource import InputPartition

    assert list(source.reader(source.schema()).read(InputPartition(None))) == []


# ------------------------------------------------------------------ real Kafka data


def test_real_kafka_data_dir(kafka_copy: Path) -> None:
    parts, rows = source_rows({"path": kafka_copy, "logs": "__consumer_offsets-15"})
    assert len(rows) == 256
    assert rows == engine_rows(kafka_copy / "__consumer_offsets-15")
    # control batches never appear as rows
    meta = kafka_copy / "__cluster_metadata-0"
    _, rows = source_rows({"path": meta})
    assert rows == engine_rows(meta)
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets))
    # the whole data dir: 50 + 3 empty partitions are fine
    parts, rows = source_rows({"path": kafka_copy}, headers=False)
    assert len(rows) == 256 + len(engine_rows(meta))
    names = {p.log for p in parts}
    assert names == {"__consumer_offsets-15", "__cluster_metadata-0"}
    # Kafka-style offsets JSON keyed by topic and partition
    _, rows = source_rows(
        {
            "path": kafka_copy,
            "startingOffsets": '{"__consumer_offsets": {"15": 100}}',
            "endingOffsets": '{"__consumer_offsets": {"15": 200}}',
            "topics": "__consumer_offsets",
        }
    )
    assert [r[0] for r in rows] == list(range(100, 200))


# ------------------------------------------------------------------ concurrency and data loss


def test_read_while_appending(tmp_path: Path) -> None:
    log_dir = make_log(tmp_path, "live", batches=20, segment_bytes=6000)
    from seglogfs.spark.source import SeglogDataSource

    source = SeglogDataSource({"path": str(log_dir)})
    reader = source.reader(source.schema())
    parts = reader.partitions()
    planned_end = max(p.end_offset for p in parts)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with Log.open(log_dir, LogConfig.from_mapping({"segment.bytes": 6000})) as log:
                while not stop.is_set():
                    append_records(log, 1, 25)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(5):
            got = [r["offset"] for p in parts for b in reader.read(p) for r in b.to_pylist()]
            assert got == list(range(planned_end))
            # a fresh plan sees a longer log, every batch complete
            fresh = source.reader(source.schema())
            fresh_parts = fresh.partitions()
            offsets = [o for p in fresh_parts for b in fresh.read(p) for o in b.column("offset").to_pylist()]
            assert offsets == list(range(len(offsets))) and len(offsets) >= planned_end
    finally:
        stop.set()
        thread.join()
    assert not errors
    _, rows = source_rows({"path": log_dir})
    assert rows == engine_rows(log_dir)


def _retention_drop_first_segments(log_dir: Path, keep_bytes: int) -> int:
    cfg = LogConfig.from_mapping(
        {"segment.bytes": 8000, "retention.bytes": keep_bytes, "file.delete.delay.ms": 0}
    )
    with Log.open(log_dir, cfg) as log:
        log.delete_old_segments()
        return log.start_offset


def test_retention_between_plan_and_read(tmp_path: Path, caplog) -> None:
    from seglogfs.spark.source import SeglogDataSource

    for fail in (True, False):
        log_dir = make_log(tmp_path, f"ret-{int(fail)}")
        source = SeglogDataSource({"path": str(log_dir), "failondataloss": str(fail).lower()})
        reader = source.reader(source.schema())
        parts = reader.partitions()
        start = _retention_drop_first_segments(log_dir, 20_000)
        assert start > 0
        if fail:
            with pytest.raises(DataLossError, match="no longer exists"):
                [b for p in parts for b in reader.read(p)]
        else:
            with caplog.at_level(logging.WARNING, logger="seglogfs.spark"):
                offsets = [o for p in parts for b in reader.read(p) for o in b.column("offset").to_pylist()]
            assert offsets == list(range(start, 1000))
            assert "failOnDataLoss=false" in caplog.text


def test_retention_before_requested_start(tmp_path: Path, caplog) -> None:
    log_dir = make_log(tmp_path, "ret2")
    start = _retention_drop_first_segments(log_dir, 20_000)
    assert start > 10
    with pytest.raises(DataLossError, match="before the log start offset"):
        source_rows({"path": log_dir, "startingOffsets": '{"ret2": 5}'})
    with caplog.at_level(logging.WARNING, logger="seglogfs.spark"):
        _, rows = source_rows({"path": log_dir, "startingOffsets": '{"ret2": 5}', "failOnDataLoss": "false"})
    assert [r[0] for r in rows] == list(range(start, 1000))
    # earliest is the log start: no data loss
    _, rows = source_rows({"path": log_dir})
    assert rows == engine_rows(log_dir)


def test_corrupt_batch_is_named_or_skipped(tmp_path: Path, caplog) -> None:
    log_dir = make_log(tmp_path, "bad", batches=6, segment_bytes=10**6)
    seg = next(log_dir.glob("*.log"))
    from seglogfs.records import iter_batch_headers

    data = bytearray(seg.read_bytes())
    headers = list(iter_batch_headers(bytes(data)))
    victim = headers[2]
    data[victim.position + 70] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert_loss_of_only(victim, seg, log_dir, caplog)


def assert_loss_of_only(victim, seg: Path, log_dir: Path, caplog) -> None:
    """failOnDataLoss=true raises naming file and position; false skips only ``victim``, with a warning."""
    with pytest.raises(DataLossError, match=rf"{seg.name} at position {victim.position}"):
        source_rows({"path": log_dir})
    with caplog.at_level(logging.WARNING, logger="seglogfs.spark"):
        _, rows = source_rows({"path": log_dir, "failOnDataLoss": "false"})
    skipped = set(range(victim.base_offset, victim.last_offset + 1))
    assert [r[0] for r in rows] == [o for o in range(150) if o not in skipped]
    assert f"position {victim.position}" in caplog.text


@pytest.mark.parametrize("length", ["huge", "small"])
def test_a_damaged_length_field_is_data_loss_not_the_end(tmp_path: Path, caplog, length: str) -> None:
    """A size field that hides where the next batch begins: failOnDataLoss=true raises, naming file and
    position; false skips only that batch (resyncing on the next intact one), with a warning."""
    log_dir = make_log(tmp_path, "len", batches=6, segment_bytes=10**6)
    seg = next(log_dir.glob("*.log"))
    from seglogfs.records import iter_batch_headers

    data = bytearray(seg.read_bytes())
    victim = list(iter_batch_headers(bytes(data)))[2]
    size_field = 2**30 if length == "huge" else victim.size - 12 - 40
    data[victim.position + 8 : victim.position + 12] = size_field.to_bytes(4, "big")
    seg.write_bytes(bytes(data))
    assert_loss_of_only(victim, seg, log_dir, caplog)


def test_a_moved_base_offset_is_data_loss(tmp_path: Path, caplog) -> None:
    """A baseOffset (outside the CRC) moved by one: failOnDataLoss=true read the batch's rows under
    the wrong offsets; now it raises, naming file and position, and false skips only that batch."""
    log_dir = make_log(tmp_path, "moved", batches=6, segment_bytes=10**6)
    seg = next(log_dir.glob("*.log"))
    from seglogfs.records import iter_batch_headers

    data = bytearray(seg.read_bytes())
    victim = list(iter_batch_headers(bytes(data)))[2]
    data[victim.position : victim.position + 8] = (victim.base_offset + 1).to_bytes(8, "big")
    seg.write_bytes(bytes(data))
    assert_loss_of_only(victim, seg, log_dir, caplog)


# ------------------------------------------------------------------ streaming planning (no JVM)


def test_stream_offsets_rate_limit_and_available_now(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from seglogfs.spark.stream import SeglogStreamReader, rate_limit

    assert rate_limit({"a": 0, "b": 0}, {"a": 1000, "b": 10}, 100) == {"a": 99, "b": 1}
    assert rate_limit({"a": 0}, {"a": 50}, 100) == {"a": 50}

    make_log(tmp_path, "s-0", batches=4)
    make_log(tmp_path, "s-1", batches=2)
    reader = SeglogStreamReader(
        {"path": str(tmp_path), "startingoffsets": "earliest", "maxoffsetspertrigger": "60"}
    )
    start = reader.initialOffset()
    assert start == {"s-0": 0, "s-1": 0}
    assert reader.getDefaultReadLimit() == ReadMaxRows(60)
    end = reader.latestOffset(start, ReadMaxRows(60))
    assert sum(end.values()) <= 60 and end["s-1"] > 0
    parts = reader.partitions(start, end)
    rows = [(p.log, o) for p in parts for b in reader.read(p) for o in b.column("offset").to_pylist()]
    assert len(rows) == sum(end.values())
    assert reader.partitions(end, end) == []
    assert reader.latestOffset(start, ReadAllAvailable()) == {"s-0": 100, "s-1": 50}
    # AvailableNow: appends after the snapshot are not read, a new log neither
    reader.prepareForTriggerAvailableNow()
    with Log.open(tmp_path / "s-0") as log:
        append_records(log, 1, 25)
    make_log(tmp_path, "s-2", batches=1)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"s-0": 100, "s-1": 50}
    fresh = SeglogStreamReader({"path": str(tmp_path)})
    assert fresh.initialOffset() == {"s-0": 125, "s-1": 50, "s-2": 25}  # latest by default
    # a log missing from the start offsets starts at its earliest offset
    assert fresh.latestOffset({"s-0": 125, "s-1": 50}, ReadAllAvailable())["s-2"] == 25
    parts = fresh.partitions({"s-0": 125, "s-1": 50}, {"s-0": 125, "s-1": 50, "s-2": 25})
    assert [(p.log, p.start_offset, p.end_offset) for p in parts] == [("s-2", 0, 25)]


# ------------------------------------------------------------------ verify job checks (no JVM)


def verify_segment(log_path: str):
    """A LogReport of the engine verifier over one ``.log`` file (with its indexes), records decoded."""
    from seglogfs.spark.jobs import LogReport
    from seglogfs.verifier import Problem, VerifyReport, find_segments
    from seglogfs.verifier import verify_segment as check

    path = Path(log_path)
    report = VerifyReport()
    groups, _ = find_segments([path.parent])
    active = groups[0][-1] if groups and groups[0] else path
    try:
        check(path, active=path == active, report=report, decode_records=True)
    except OSError as exc:
        report.problems.append(Problem(path, None, f"cannot read: {exc}"))
    return LogReport.of(path.parent.name, path, report)


def test_verify_segment_finds_problems(tmp_path: Path, kafka_copy: Path) -> None:
    from seglogfs.spark.jobs import summarise
    from seglogfs.verifier import find_segments

    groups, _ = find_segments([str(kafka_copy)])
    files = [str(p) for group in groups for p in group]
    reports = [verify_segment(f) for f in files]
    text, problems = summarise(reports)
    assert problems == 0, text
    assert "__consumer_offsets-15" in text
    log_dir = make_log(tmp_path, "v", batches=10, segment_bytes=10**6)
    seg = next(log_dir.glob("*.log"))
    data = bytearray(seg.read_bytes())
    data[200] ^= 0x55
    seg.write_bytes(bytes(data) + b"\x00\x01")
    report = verify_segment(str(seg))
    assert any("CRC" in p and "position 0" in p for p in report.problems)
    assert any("trailing bytes" in p for p in report.problems)
    index = seg.with_suffix(".index")
    raw = bytearray(index.read_bytes())
    raw[7] ^= 0x01  # first entry's position no longer a batch start
    index.write_bytes(bytes(raw))
    assert any("no batch starts there" in p for p in verify_segment(str(seg)).problems)


def test_stream_data_loss_after_retention(tmp_path: Path, caplog) -> None:
    from seglogfs.spark.stream import SeglogStreamReader

    log_dir = make_log(tmp_path, "sr")
    start = _retention_drop_first_segments(log_dir, 20_000)
    strict = SeglogStreamReader({"path": str(tmp_path), "startingoffsets": "earliest"})
    with pytest.raises(DataLossError, match="were removed"):
        strict.partitions({"sr": 0}, {"sr": 1000})
    lenient = SeglogStreamReader({"path": str(tmp_path), "failondataloss": "false"})
    with caplog.at_level(logging.WARNING, logger="seglogfs.spark"):
        parts = lenient.partitions({"sr": 0}, {"sr": 1000})
    offsets = [o for p in parts for b in lenient.read(p) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(start, 1000))
    assert "were removed" in caplog.text


def test_stream_log_found_later_without_its_first_records_is_data_loss(tmp_path: Path, caplog) -> None:
    """Spark's Kafka rule for a partition found after the query started ("Added partition starts
    from N instead of 0"): it is read from offset 0, so a log whose first records retention removed
    before the stream saw it is data loss (an incremental export skipped them without a word)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from seglogfs.spark.stream import SeglogStreamReader

    make_log(tmp_path, "a-0", batches=2)
    options = {"path": str(tmp_path), "startingoffsets": "earliest"}
    assert SeglogStreamReader(options).initialOffset() == {"a-0": 0}
    read = {"a-0": 50}  # a-0 read to its end; then late-0 appears and loses its first segments
    log_start = _retention_drop_first_segments(make_log(tmp_path, "late-0"), 20_000)
    assert log_start > 0
    strict = SeglogStreamReader(options)
    end = strict.latestOffset(read, ReadAllAvailable())
    assert end == {"a-0": 50, "late-0": 1000}
    with pytest.raises(DataLossError, match=f"log late-0 .* starts at offset {log_start}, not 0"):
        strict.partitions(read, end)
    lenient = SeglogStreamReader({**options, "failondataloss": "false"})
    with caplog.at_level(logging.WARNING, logger="seglogfs.spark"):
        parts = lenient.partitions(read, end)
    offsets = [o for p in parts for b in lenient.read(p) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(log_start, 1000))
    assert f"starts at offset {log_start}, not 0" in caplog.text
    # a log found later that still starts at 0 is no loss
    make_log(tmp_path, "fresh-0", batches=1)
    end = strict.latestOffset(read, ReadAllAvailable())
    parts = strict.partitions({**read, "late-0": 1000}, end)
    assert [(p.log, p.start_offset, p.end_offset) for p in parts] == [("fresh-0", 0, 25)]


def test_log_start_checkpoint_and_a_log_dir_without_segments(tmp_path: Path) -> None:
    from seglogfs.checkpoint import write_offset_checkpoint

    make_log(tmp_path, "cp-0", batches=8)
    (tmp_path / "bare-0").mkdir()  # a log dir whose first segment does not exist yet
    write_offset_checkpoint(tmp_path / "log-start-offset-checkpoint", {("cp", 0): 60})
    parts, rows = source_rows({"path": tmp_path})
    assert [r[0] for r in rows] == list(range(60, 200))
    assert {p.log for p in parts} == {"cp-0"} and parts[0].position > 0
    with pytest.raises(DataLossError, match="before the log start offset 60"):
        source_rows({"path": tmp_path, "startingOffsets": '{"cp-0": 10}'})
    from seglogfs.spark.stream import SeglogStreamReader

    reader = SeglogStreamReader({"path": str(tmp_path), "startingoffsets": "earliest"})
    assert reader.initialOffset() == {"bare-0": 0, "cp-0": 60}


def test_verify_job_task_runs_the_engine_verifier_per_log(tmp_path: Path) -> None:
    from seglogfs.spark.jobs import LogReport, summarise, verify_log

    log_dir = make_log(tmp_path, "vl", batches=40, segment_bytes=3000)
    segments = sorted(str(p) for p in log_dir.glob("*.log"))
    report = LogReport(**verify_log(segments))
    assert (report.log, report.segments, report.records, report.problems) == ("vl", len(segments), 1000, [])
    text, problems = summarise([report])
    row = text.splitlines()[2].split()
    assert problems == 0 and row[:4] == ["vl", str(len(segments)), "40", "1000"] and row[-1] == "OK"
