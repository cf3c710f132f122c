"""Spark's Kafka-source options: startingOffsetsByTimestamp / endingOffsetsByTimestamp (and their
precedence and strategy), minOffsetsPerTrigger with maxTriggerDelay, maxRecordsPerPartition.

Expectations come from the engine's own iterator (``engine_rows``), never from the planner under test.
Most checks drive the DataSource the way Spark does, without a JVM; the last ones run the same options
through the shared local SparkSession (batch, a live stream with a processing-time trigger, and
Trigger.AvailableNow).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import pytest
from support.spark_fixtures import (
    append_records,
    engine_rows,
    make_log,
    row_tuple,
    source_rows,
    stream_to_parquet,
)

from seglogfs.log import Log
from seglogfs.spark.options import OptionError, ReadOptions

pytest_plugins = ["support.spark_fixtures"]

T_A = 1_700_000_000_000  # log "s-0": record i of batch b at T_A + 1000*b + i
T_B = 1_800_000_000_000  # log "s-1", likewise


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """Topic ``s``: partition 0 (several segments, zstd) and partition 1, far apart in time."""
    root = tmp_path_factory.mktemp("kafka-options") / "data"
    make_log(root, "s-0", codec="zstd", batches=16, segment_bytes=3000, first_timestamp=T_A)
    make_log(root, "s-1", batches=8, first_timestamp=T_B)
    return root


def first_at_or_after(log_dir: Path, stamp: int) -> int:
    """The engine's answer to Kafka's offsetsForTimes, from a plain walk of the records."""
    rows = engine_rows(log_dir)
    return next((r[0] for r in rows if r[3] >= stamp), rows[-1][0] + 1)


def rows_by_log(options: dict) -> dict[str, list[tuple]]:
    """A batch read without Spark (as :func:`source_rows`), its rows grouped by log."""
    from seglogfs.spark.source import SeglogDataSource

    source = SeglogDataSource({k.lower(): str(v) for k, v in {**options, "includeHeaders": "true"}.items()})
    reader = source.reader(source.schema())
    out: dict[str, list[tuple]] = {}
    for part in reader.partitions():
        for batch in reader.read(part):
            out.setdefault(part.log, []).extend(row_tuple(r) for r in batch.to_pylist())
    return out


# ------------------------------------------------------------------ option errors


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger='0': must be >= 1"),
        ({"maxRecordsPerPartition": "many"}, "maxRecordsPerPartition='many': expected an integer"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay='soon'"),
        ({"maxTriggerDelay": "5 fortnights"}, "maxTriggerDelay='5 fortnights': unknown duration unit"),
        ({"maxTriggerDelay": "-5s"}, "maxTriggerDelay='-5s': must not be negative"),
        (
            {"minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "15"},
            "minOffsetsPerTrigger=20 is higher than maxOffsetsPerTrigger=15",
        ),
        ({"startingOffsetsByTimestampStrategy": "middle"}, "Strategy='middle': expected error or latest"),
        # -2 / -1 are earliest / latest (Kafka's ListOffsets); another negative is no time
        ({"startingTimestamp": "-5"}, "startingTimestamp='-5': must be epoch milliseconds >= 0"),
        ({"endingTimestamp": "-3"}, "endingTimestamp='-3': must be epoch milliseconds >= 0"),
        ({"endingTimestamp": "noon"}, "endingTimestamp='noon': expected epoch milliseconds or ISO-8601"),
        # named as Spark's docs spell them (they were named lower-cased)
        ({"minPartitions": "0"}, "option minPartitions='0': must be >= 1"),
        ({"maxOffsetsPerTrigger": "x"}, "option maxOffsetsPerTrigger='x': expected an integer"),
        ({"failOnDataLoss": "maybe"}, "option failOnDataLoss='maybe': expected true or false"),
        ({"includeHeaders": "2"}, "option includeHeaders='2': expected true or false"),
    ],
)
def test_read_option_errors_name_the_option_and_value(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        ReadOptions.parse({k.lower(): v for k, v in options.items()})


def test_option_values_and_defaults() -> None:
    opts = ReadOptions.parse({})
    assert (opts.max_trigger_delay_ms, opts.timestamp_strategy) == (15 * 60_000, "error")
    assert opts.min_offsets_per_trigger is opts.max_records_per_partition is None
    for text, ms in [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("2h", 7_200_000), ("250", 250)]:
        assert ReadOptions.parse({"maxtriggerdelay": text}).max_trigger_delay_ms == ms
    opts = ReadOptions.parse({"minoffsetspertrigger": "7", "maxrecordsperpartition": "9"})
    assert (opts.min_offsets_per_trigger, opts.max_records_per_partition) == (7, 9)
    assert ReadOptions.parse({"startingoffsetsbytimestampstrategy": "LATEST"}).timestamp_strategy == "latest"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", "startingOffsetsByTimestamp='yesterday': expected timestamps JSON"),
        ("[1, 2]", "startingOffsetsByTimestamp: timestamps JSON .* must be a JSON object"),
        ('{"s": {"0": 5}}', "must name every log read .*; missing: s-1"),
        ('{"s": {"0": 5, "1": 5, "7": 5}}', "no log for topic 's' partition 7"),
        ('{"s-0": 5, "nope": 5}', "no log named 'nope'"),
        ('{"s": {"0": -5, "1": 5}}', "timestamp of s-0 must be epoch milliseconds >= 0 or ISO-8601, got -5"),
        ('{"s-0": "noon", "s-1": 5}', "timestamp of s-0 .* got 'noon'"),
    ],
)
def test_by_timestamp_json_errors(data_dir: Path, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        source_rows({"path": data_dir, "startingOffsetsByTimestamp": value})
    ending = message.replace("startingOffsetsByTimestamp", "endingOffsetsByTimestamp")
    with pytest.raises(OptionError, match=ending):
        source_rows({"path": data_dir, "endingOffsetsByTimestamp": value})


def test_a_stream_refuses_ending_options(data_dir: Path) -> None:
    from seglogfs.spark.stream import SeglogStreamReader

    for key, value in (("endingOffsets", "latest"), ("endingOffsetsByTimestamp", "latest"),
                       ("endingTimestamp", str(T_A))):
        with pytest.raises(OptionError, match=f"option {key}: not valid in streaming queries"):
            SeglogStreamReader({"path": str(data_dir), key.lower(): value})


def test_a_stream_whose_log_was_recreated_or_deleted_reports_data_loss(tmp_path: Path, caplog) -> None:
    """Spark's Kafka rule: a log gone, or ending below what the stream already read, is data loss
    (it was skipped without a word: the recreated log's first records were never read)."""
    import shutil

    from seglogfs.spark.scan import DataLossError
    from seglogfs.spark.stream import SeglogStreamReader

    make_log(tmp_path, "t-0", batches=10, per_batch=10)
    make_log(tmp_path, "d-0", batches=1, per_batch=5)
    options = {"path": str(tmp_path), "startingoffsets": "earliest"}
    read = SeglogStreamReader(options).latestOffset(None)
    assert read == {"t-0": 100, "d-0": 5}
    shutil.rmtree(tmp_path / "t-0")
    make_log(tmp_path, "t-0", batches=5, per_batch=10)
    with pytest.raises(DataLossError, match=r"log t-0 ends at offset 50, below offset 100"):
        SeglogStreamReader(options).latestOffset(dict(read))
    shutil.rmtree(tmp_path / "d-0")
    shutil.rmtree(tmp_path / "t-0")
    make_log(tmp_path, "t-0", batches=6, per_batch=10)  # past what was read: only d-0 is missing now
    with pytest.raises(DataLossError, match=r"log d-0 is gone"):
        SeglogStreamReader({**options}).latestOffset({"t-0": 10, "d-0": 5})
    lenient = SeglogStreamReader({**options, "failondataloss": "false"})
    # reported, then dropped from the offsets: the next batch does not report it again
    assert lenient.latestOffset({"t-0": 10, "d-0": 5}) == {"t-0": 60}
    assert "log d-0 is gone" in caplog.text


def test_a_lenient_stream_reads_a_recreated_log_from_its_new_end(tmp_path: Path, caplog) -> None:
    """failOnDataLoss=false over a log recreated below what was read: as Spark's Kafka source, the
    stream reports it and goes on from the log's new end (it stayed at the old offset, so the new
    log's records up to there were never read)."""
    import shutil

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from seglogfs.spark.scan import DataLossError
    from seglogfs.spark.stream import SeglogStreamReader

    make_log(tmp_path, "t-0", batches=10, per_batch=10)
    shutil.rmtree(tmp_path / "t-0")
    log_dir = make_log(tmp_path, "t-0", batches=5, per_batch=10)
    lenient = SeglogStreamReader({"path": str(tmp_path), "failondataloss": "false"})
    end = lenient.latestOffset({"t-0": 100}, ReadAllAvailable())
    assert end == {"t-0": 50}
    assert "log t-0 ends at offset 50, below offset 100" in caplog.text
    assert lenient.partitions({"t-0": 100}, end) == []
    # A batch planned from above its end (a replayed first batch whose start, re-resolved as
    # latest, passed the end it was planned with) is data loss too, as Kafka's "offset was changed"
    strict = SeglogStreamReader({"path": str(tmp_path)})
    with pytest.raises(DataLossError, match=r"log t-0: the batch starts at offset 100, after its end 50"):
        strict.partitions({"t-0": 100}, end)
    with Log.open(log_dir) as lg:
        append_records(lg, 2, 10)
    end = lenient.latestOffset({"t-0": 50}, ReadAllAvailable())
    assert end == {"t-0": 70}
    parts = lenient.partitions({"t-0": 50}, end)
    assert [o for p in parts for b in lenient.read(p) for o in b.column("offset").to_pylist()] == list(
        range(50, 70)
    )


def test_assign_subscribe_and_subscribe_pattern(tmp_path: Path) -> None:
    for name in ("clicks-0", "clicks-1", "views-0", "audit"):
        make_log(tmp_path, name, batches=1, per_batch=3)

    def logs_read(**options: str) -> set[str]:
        return set(rows_by_log({"path": tmp_path, **options}))

    assert logs_read(subscribe="clicks,audit") == {"clicks-0", "clicks-1", "audit"}
    assert logs_read(topics='["views"]') == {"views-0"}
    assert logs_read(subscribePattern="c.*") == {"clicks-0", "clicks-1"}
    assert logs_read(subscribePattern="lick") == set()  # the whole topic name must match, as Java's
    assert logs_read(assign='{"clicks": [1], "audit": [0]}') == {"clicks-1", "audit"}
    for options, message in [
        ({"assign": '{"clicks": [2]}'}, "option assign: no log for clicks-2"),
        ({"assign": '{"clicks": "0"}'}, "option assign: partitions of 'clicks' must be a list"),
        ({"assign": '{"clicks": []}'}, "no topic partitions to assign"),
        ({"subscribe": " , "}, "option subscribe=' , ': no topics to subscribe to"),
        ({"subscribePattern": "("}, "option subscribePattern='\\(': invalid regular expression"),
        ({"subscribe": "a", "subscribePattern": "b"}, "options subscribe, subscribePattern: only one of"),
        ({"topics": "a", "assign": '{"a": [0]}'}, "options assign, topics: only one of"),
    ]:
        with pytest.raises(OptionError, match=message):
            logs_read(**options)


# ------------------------------------------------------------------ by-timestamp bounds (batch)


def test_offsets_by_timestamp_per_partition(data_dir: Path) -> None:
    start_a, end_a = T_A + 3005, T_A + 11_002
    start_b, end_b = T_B + 2000, T_B + 6024
    exp_a = (first_at_or_after(data_dir / "s-0", start_a), first_at_or_after(data_dir / "s-0", end_a))
    exp_b = (first_at_or_after(data_dir / "s-1", start_b), first_at_or_after(data_dir / "s-1", end_b))
    kafka_form = {
        "startingOffsetsByTimestamp": json.dumps({"s": {"0": start_a, "1": start_b}}),
        "endingOffsetsByTimestamp": json.dumps({"s": {"0": end_a, "1": end_b}}),
    }
    # the flat log-name form, with one ISO-8601 value (2023-11-14T22:13:23.005Z = T_A + 3005)
    flat_form = {
        "startingOffsetsByTimestamp": json.dumps({"s-0": "2023-11-14T22:13:23.005Z", "s-1": start_b}),
        "endingOffsetsByTimestamp": json.dumps({"s-0": end_a, "s-1": end_b}),
    }
    for options in (kafka_form, flat_form):
        got = rows_by_log({"path": data_dir, **options})
        assert got["s-0"] == engine_rows(data_dir / "s-0", *exp_a)
        assert got["s-1"] == engine_rows(data_dir / "s-1", *exp_b)
    assert 0 < exp_a[0] < exp_a[1] < 400 and 0 < exp_b[0] < exp_b[1] < 200


def test_offsets_by_timestamp_minus_two_and_minus_one_are_earliest_and_latest(data_dir: Path) -> None:
    """Spark's Kafka source hands the times to Kafka's ListOffsets, which reads -2 as earliest and -1
    as latest: a job naming every partition (as it must) starts some at the beginning that way. They
    were refused (the JSON forms) or taken as times (startingTimestamp=-1 read from the earliest)."""
    from seglogfs.spark.stream import SeglogStreamReader

    start_a = T_A + 3005
    got = rows_by_log(
        {
            "path": data_dir,
            "startingOffsetsByTimestamp": json.dumps({"s": {"0": start_a, "1": -2}}),
            "endingOffsetsByTimestamp": json.dumps({"s-0": -1, "s-1": -1}),
        }
    )
    assert got["s-0"] == engine_rows(data_dir / "s-0", first_at_or_after(data_dir / "s-0", start_a))
    assert got["s-1"] == engine_rows(data_dir / "s-1")
    got = rows_by_log({"path": data_dir, "startingOffsetsByTimestamp": '{"s": {"0": -1, "1": -2}}',
                       "endingOffsetsByTimestamp": '{"s": {"0": -1, "1": -2}}'})
    assert set(got) == set()  # s-0 starts at its end, s-1 ends at its start
    assert rows_by_log({"path": data_dir, "startingTimestamp": "-2"}) == rows_by_log({"path": data_dir})
    assert rows_by_log({"path": data_dir, "startingTimestamp": "-1"}) == {}
    by_ts = json.dumps({"s": {"0": -1, "1": -2}})
    reader = SeglogStreamReader({"path": str(data_dir), "startingoffsetsbytimestamp": by_ts})
    assert reader.initialOffset() == {"s-0": 400, "s-1": 0}


def test_timestamp_precedence(data_dir: Path) -> None:
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets (and the same for the end)."""
    by_ts = json.dumps({"s": {"0": T_A + 5000, "1": T_B + 5000}})
    _, both = source_rows(
        {"path": data_dir, "startingTimestamp": T_A + 9000, "startingOffsetsByTimestamp": by_ts}
    )
    _, only_global = source_rows({"path": data_dir, "startingTimestamp": T_A + 9000})
    assert both == only_global
    assert {r[0] for r in both} >= {first_at_or_after(data_dir / "s-0", T_A + 9000)}
    offsets = json.dumps({"s": {"0": 1, "1": 1}})
    got = rows_by_log({"path": data_dir, "startingOffsetsByTimestamp": by_ts, "startingOffsets": offsets})
    assert got["s-0"][0][0] == first_at_or_after(data_dir / "s-0", T_A + 5000) == 125
    assert got["s-1"][0][0] == first_at_or_after(data_dir / "s-1", T_B + 5000) == 125
    # a latest start is refused for a batch read only when the offsets option is the one that applies
    source_rows({"path": data_dir, "startingOffsetsByTimestamp": by_ts, "startingOffsets": "latest"})
    ends = json.dumps({"s": {"0": T_A + 1000, "1": T_B + 1000}})
    got = rows_by_log({"path": data_dir, "endingOffsetsByTimestamp": ends, "endingOffsets": "latest"})
    assert [r[0] for r in got["s-0"]] == list(range(25))


def test_no_record_that_late_strategy_and_end_past_the_log(data_dir: Path) -> None:
    late = json.dumps({"s": {"0": T_A + 2000, "1": T_B + 10**9}})
    with pytest.raises(
        OptionError, match="option startingOffsetsByTimestamp: log s-1 has no record at or after"
    ):
        source_rows({"path": data_dir, "startingOffsetsByTimestamp": late})
    got = rows_by_log(
        {"path": data_dir, "startingOffsetsByTimestamp": late, "startingOffsetsByTimestampStrategy": "latest"}
    )
    assert got == {"s-0": engine_rows(data_dir / "s-0", 50, None)}  # s-1 starts at its end: nothing
    # an end time no record reaches is the log end, as Kafka
    ends = json.dumps({"s": {"0": T_A + 10**9, "1": T_B + 3000}})
    got = rows_by_log({"path": data_dir, "endingOffsetsByTimestamp": ends})
    assert got == {"s-0": engine_rows(data_dir / "s-0"), "s-1": engine_rows(data_dir / "s-1", 0, 75)}


# ------------------------------------------------------------------ maxRecordsPerPartition


def test_max_records_per_partition_bounds_every_task(data_dir: Path) -> None:
    log_dir = data_dir / "s-0"  # zstd: batches of 25 records, so cuts fall inside batches
    plain, _ = source_rows({"path": log_dir})
    parts, rows = source_rows({"path": log_dir, "maxRecordsPerPartition": 40})
    assert all(p.end_offset - p.start_offset <= 40 for p in parts)
    assert len(parts) == sum(math.ceil((p.end_offset - p.start_offset) / 40) for p in plain) > len(plain)
    assert rows == engine_rows(log_dir)  # a batch scanned by two tasks gives each row once
    spans = [(p.start_offset, p.end_offset) for p in parts]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    # each piece starts scanning at a batch boundary at or before its first offset, not at byte 0
    assert any(p.position > 0 for p in parts if p.start_offset > p.base_offset)
    # then minPartitions (a hint, as Kafka's) splits the pieces further, none over the limit
    many, rows = source_rows({"path": log_dir, "maxRecordsPerPartition": 40, "minPartitions": 30})
    assert len(many) > len(parts) and all(p.end_offset - p.start_offset <= 40 for p in many)
    assert rows == engine_rows(log_dir)
    few, _ = source_rows({"path": log_dir, "maxRecordsPerPartition": 40, "minPartitions": 3})
    assert len(few) == len(parts)


# ------------------------------------------------------------------ streaming (no JVM)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_min_offsets_per_trigger_and_max_trigger_delay(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from seglogfs.spark.stream import SeglogStreamReader

    log_dir = make_log(tmp_path, "m-0", batches=2, per_batch=10)
    clock = FakeClock()
    options = {"path": str(tmp_path), "startingoffsets": "earliest", "minoffsetspertrigger": "30"}
    reader = SeglogStreamReader({**options, "maxtriggerdelay": "10s"}, clock=clock)
    assert reader.getDefaultReadLimit() == ReadMinRows(30)
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == {"m-0": 20}  # the first trigger always goes (as Kafka)
    with Log.open(log_dir) as lg:
        append_records(lg, 1, 10)
        clock.now += 4
        assert reader.latestOffset({"m-0": 20}, limit) == {"m-0": 20}  # 10 new < 30: held back
        append_records(lg, 2, 10)
        clock.now += 4
        assert reader.latestOffset({"m-0": 20}, limit) == {"m-0": 50}  # 30 new: goes
        append_records(lg, 1, 5)
        clock.now += 9.9
        assert reader.latestOffset({"m-0": 50}, limit) == {"m-0": 50}  # 9.9 s since the last: held
        clock.now += 0.1
        assert reader.latestOffset({"m-0": 50}, limit) == {"m-0": 55}  # maxTriggerDelay passed
        append_records(lg, 1, 5)
        assert reader.latestOffset({"m-0": 55}, limit) == {"m-0": 55}  # the delay restarts
        assert reader.latestOffset({"m-0": 55}, ReadAllAvailable()) == {"m-0": 60}  # Trigger.Once
    # with maxOffsetsPerTrigger both bound a batch; the cap travels as ReadMaxRows
    capped = SeglogStreamReader({**options, "maxoffsetspertrigger": "40"}, clock=clock)
    assert capped.getDefaultReadLimit() == ReadMaxRows(40)
    assert capped.latestOffset({"m-0": 0}, ReadMaxRows(40)) == {"m-0": 40}
    assert capped.latestOffset({"m-0": 40}, ReadMaxRows(40)) == {"m-0": 40}  # 20 new < 30
    # Trigger.AvailableNow is never held back: it reads what is there, then stops
    capped.prepareForTriggerAvailableNow()
    assert capped.latestOffset({"m-0": 40}, ReadMaxRows(40)) == {"m-0": 60}


def test_stream_start_by_timestamp_and_split_tasks(data_dir: Path) -> None:
    from seglogfs.spark.stream import SeglogStreamReader

    by_ts = json.dumps({"s": {"0": T_A + 4010, "1": T_B + 10**9}})
    options = {"path": str(data_dir), "startingoffsetsbytimestamp": by_ts}
    with pytest.raises(OptionError, match="log s-1 has no record at or after"):
        SeglogStreamReader(options).initialOffset()
    options["startingoffsetsbytimestampstrategy"] = "latest"
    options["maxrecordsperpartition"] = "30"
    reader = SeglogStreamReader(options)
    start = reader.initialOffset()
    assert start == {"s-0": first_at_or_after(data_dir / "s-0", T_A + 4010), "s-1": 200}
    end = {"s-0": 400, "s-1": 200}
    parts = reader.partitions(start, end)
    assert all(p.end_offset - p.start_offset <= 30 for p in parts)
    rows = [o for p in parts for b in reader.read(p) for o in b.column("offset").to_pylist()]
    assert rows == [r[0] for r in engine_rows(data_dir / "s-0", start["s-0"], 400)]


# ------------------------------------------------------------------ through a real SparkSession


@pytest.mark.spark
def test_spark_batch_with_the_new_options(spark, data_dir: Path) -> None:
    starts = json.dumps({"s": {"0": T_A + 3005, "1": T_B + 2000}})
    ends = json.dumps({"s-0": T_A + 11_002, "s-1": T_B + 6024})
    df = (
        spark.read.format("seglog")
        .option("startingOffsetsByTimestamp", starts)
        .option("endingOffsetsByTimestamp", ends)
        .option("maxRecordsPerPartition", "35")
        .load(str(data_dir))
    )
    expected = {
        name: [
            r[0]
            for r in engine_rows(
                data_dir / name,
                first_at_or_after(data_dir / name, lo),
                first_at_or_after(data_dir / name, hi),
            )
        ]
        for name, lo, hi in [("s-0", T_A + 3005, T_A + 11_002), ("s-1", T_B + 2000, T_B + 6024)]
    }
    got: dict[str, list[int]] = {}
    for r in df.select("partition", "offset").collect():
        got.setdefault(f"s-{r.partition}", []).append(r.offset)
    assert {k: sorted(v) for k, v in got.items()} == expected
    plan_parts, _ = source_rows(
        {"path": data_dir, "startingOffsetsByTimestamp": starts, "endingOffsetsByTimestamp": ends}
    )
    assert df.rdd.getNumPartitions() == sum(
        math.ceil((p.end_offset - p.start_offset) / 35) for p in plan_parts
    )
    with pytest.raises(Exception, match="startingOffsetsByTimestamp: must name every log read"):
        spark.read.format("seglog").option("startingOffsetsByTimestamp", '{"s-0": 1}').load(
            str(data_dir)
        ).count()


def _wait_for_rows(spark, table: str, want: int, timeout: float = 90) -> float:
    """Seconds until the memory table ``table`` holds ``want`` rows (fails after ``timeout``)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if spark.sql(f"SELECT count(*) AS n FROM {table}").first().n >= want:
            return time.monotonic() - began
        time.sleep(0.2)
    raise AssertionError(f"{table}: fewer than {want} rows after {timeout} s")


@pytest.mark.spark
def test_spark_stream_min_offsets_per_trigger_waits_then_fires(spark, tmp_path: Path) -> None:
    held = make_log(tmp_path / "a", "held-0", batches=2)
    delayed = make_log(tmp_path / "b", "delayed-0", batches=2)

    def start(path: Path, name: str, minimum: str, delay: str):
        stream = (
            spark.readStream.format("seglog")
            .option("startingOffsets", "earliest")
            .option("minOffsetsPerTrigger", minimum)
            .option("maxTriggerDelay", delay)
            .load(str(path))
        )
        return (
            stream.select("offset")
            .writeStream.format("memory")
            .queryName(name)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    queries = [start(tmp_path / "a", "held_q", "40", "1h"), start(tmp_path / "b", "delayed_q", "1000", "2s")]
    try:
        _wait_for_rows(spark, "held_q", 50)  # the first trigger fires
        _wait_for_rows(spark, "delayed_q", 50)
        with Log.open(held) as lg:
            append_records(lg, 1, 25)
        with Log.open(delayed) as lg:
            append_records(lg, 1, 25)
        time.sleep(1.5)  # several triggers: 25 new offsets < 40, so none fires
        assert spark.sql("SELECT count(*) AS n FROM held_q").first().n == 50
        with Log.open(held) as lg:
            append_records(lg, 1, 25)
        _wait_for_rows(spark, "held_q", 100)  # 50 new >= 40: one fires
        rows = sorted(r.offset for r in spark.sql("SELECT offset FROM held_q").collect())
        assert rows == list(range(100))
        # 25 < 1000 never reaches the minimum: maxTriggerDelay lets it through
        _wait_for_rows(spark, "delayed_q", 75)
        for q in queries:
            assert q.exception() is None
    finally:
        for q in queries:
            q.stop()


@pytest.mark.spark
def test_spark_available_now_reads_everything_despite_the_minimum(spark, tmp_path: Path) -> None:
    make_log(tmp_path / "data", "n-0", batches=4)
    stream = (
        spark.readStream.format("seglog")
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "30")
        .option("maxOffsetsPerTrigger", "30")
        .option("maxTriggerDelay", "1h")
        .load(str(tmp_path / "data"))
    )
    stream_to_parquet(stream.select("offset"), tmp_path / "out", tmp_path / "checkpoint")
    # 30 + 30 + 30, then the last 10 (< 30) must not be held back
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert offsets == list(range(100))
