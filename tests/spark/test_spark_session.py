"""The seglog source through a real local[2] SparkSession (one JVM for the whole module set)."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
from pathlib import Path

import pytest
from support.spark_fixtures import (
    CODECS,
    append_records,
    engine_rows,
    make_log,
    row_tuple,
    stream_to_parquet,
)
from support.testdata import KAFKA_LOG_DIR

from seglogfs.config import LogConfig
from seglogfs.log import Log

pytestmark = pytest.mark.spark
pytest_plugins = ["support.spark_fixtures"]

KAFKA_DIR = KAFKA_LOG_DIR
KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
    "timestampType:int,headers:array<struct<key:string,value:binary>>>"
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spark-session") / "data"
    for i, codec in enumerate(CODECS):
        make_log(root, f"ev-{i}", codec=codec, segment_bytes=3000 if codec != "uncompressed" else 8000)
    return root


def _by_log(rows) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in rows:
        out.setdefault(f"{r['topic']}-{r['partition']}", []).append(row_tuple(r))
    return {k: sorted(v) for k, v in out.items()}


def test_batch_read_matches_engine_row_by_row(spark, data_dir: Path) -> None:
    df = spark.read.format("seglog").option("includeHeaders", "true").load(str(data_dir))
    assert df.schema.simpleString() == KAFKA_SCHEMA
    got = _by_log(df.collect())
    assert set(got) == {f"ev-{i}" for i in range(len(CODECS))}
    for name, rows in got.items():
        assert rows == engine_rows(data_dir / name), name
    plain = spark.read.format("seglog").load(str(data_dir / "ev-1"))
    assert "headers" not in plain.columns
    assert plain.where("timestampType = 0").count() == 1000


def test_ranges_and_min_partitions(spark, data_dir: Path) -> None:
    log_dir = data_dir / "ev-4"
    bases = sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.log"))
    lo, hi = bases[1] + 2, bases[3]
    df = (
        spark.read.format("seglog")
        .option("startingOffsets", f'{{"ev": {{"4": {lo}}}}}')
        .option("endingOffsets", f'{{"ev": {{"4": {hi}}}}}')
        .option("minPartitions", "6")
        .load(str(log_dir))
    )
    assert df.rdd.getNumPartitions() >= 6
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(lo, hi))
    t0 = 1_700_000_000_000
    df = (
        spark.read.format("seglog")
        .option("startingTimestamp", str(t0 + 7000))
        .option("endingTimestamp", "2023-11-14T22:13:29Z")
        .load(str(log_dir))
    )
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(175, 225))
    first = df.orderBy("offset").first()
    assert first.timestamp == dt.datetime(2023, 11, 14, 22, 13, 27)  # session time zone is UTC


def test_real_kafka_data_dir(spark, tmp_path: Path) -> None:
    dest = tmp_path / "kafka"
    shutil.copytree(KAFKA_DIR, dest)
    df = spark.read.format("seglog").option("includeHeaders", "true").load(str(dest))
    got = _by_log(df.collect())
    assert len(got["__consumer_offsets-15"]) == 256
    for name in ("__consumer_offsets-15", "__cluster_metadata-0"):
        assert got[name] == engine_rows(dest / name)
    assert set(got) == {"__consumer_offsets-15", "__cluster_metadata-0"}


def test_read_while_appending(spark, tmp_path: Path) -> None:
    log_dir = make_log(tmp_path, "live", batches=20, segment_bytes=6000)
    stop = threading.Event()

    def writer() -> None:
        with Log.open(log_dir, LogConfig.from_mapping({"segment.bytes": 6000})) as log:
            while not stop.is_set():
                append_records(log, 1, 25)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        counts = []
        for _ in range(3):
            offsets = [
                r.offset for r in spark.read.format("seglog").load(str(log_dir)).select("offset").collect()
            ]
            assert sorted(offsets) == list(range(len(offsets)))
            counts.append(len(offsets))
    finally:
        stop.set()
        thread.join()
    assert counts[0] >= 500 and counts == sorted(counts)


def test_retention_and_fail_on_data_loss(spark, tmp_path: Path) -> None:
    log_dir = make_log(tmp_path, "ret")
    cfg = LogConfig.from_mapping(
        {"segment.bytes": 8000, "retention.bytes": 20_000, "file.delete.delay.ms": 0}
    )
    with Log.open(log_dir, cfg) as log:
        log.delete_old_segments()
        start = log.start_offset
    assert start > 5
    reader = spark.read.format("seglog").option("startingOffsets", '{"ret": 5}')
    with pytest.raises(Exception, match="before the log start offset"):
        reader.load(str(log_dir)).count()
    df = reader.option("failOnDataLoss", "false").load(str(log_dir))
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(start, 1000))


def test_stream_available_now_and_restart_exactly_once(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_log(data, "s-0", batches=8, segment_bytes=4000)
    make_log(data, "s-1", batches=2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        stream = (
            spark.readStream.format("seglog")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "90")
            .load(str(data))
        )
        stream_to_parquet(stream.selectExpr("topic", "partition", "offset", "value"), out, checkpoint)

    run()
    first = spark.read.parquet(str(out))
    assert first.count() == 250
    with Log.open(data / "s-0") as log:
        append_records(log, 3, 25)
    make_log(data, "s-2", batches=1)  # a log created after the first run starts at earliest
    run()
    rows = spark.read.parquet(str(out)).collect()
    seen = sorted((f"{r.topic}-{r.partition}", r.offset) for r in rows)
    expected = sorted(
        [("s-0", o) for o in range(275)] + [("s-1", o) for o in range(50)] + [("s-2", o) for o in range(25)]
    )
    assert seen == expected  # every record exactly once
    values = {(f"{r.topic}-{r.partition}", r.offset): bytes(r.value) for r in rows}
    assert [values[("s-0", r[0])] for r in engine_rows(data / "s-0")] == [
        r[2] for r in engine_rows(data / "s-0")
    ]


def test_write_then_read_round_trip(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    rows = [
        (
            b"v%d" % i,
            None if i % 2 else f"k{i}",
            [("h", b"x%d" % i)] if i % 3 == 0 else [],
            dt.datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=dt.UTC),
            f"w-{i % 2}",
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(
        rows,
        "value binary, key string, headers array<struct<key:string,value:binary>>, timestamp timestamp,"
        " topic string",
    ).repartition(2)
    df.write.format("seglog").mode("append").save(str(data))
    back = spark.read.format("seglog").option("includeHeaders", "true").load(str(data))
    got = _by_log(back.collect())
    assert {k: len(v) for k, v in got.items()} == {"w-0": 150, "w-1": 150}
    for name, log_rows in got.items():
        assert log_rows == engine_rows(data / name)
        assert [r[0] for r in log_rows] == list(range(150))
    expected = {
        (bytes(v), None if k is None else k.encode(), tuple(h), int(ts.timestamp() * 1000))
        for v, k, h, ts, _ in rows
    }
    actual = {(r[2], r[1], tuple(r[4] or ()), r[3]) for v in got.values() for r in v}
    assert actual == expected
    # values only, into one existing log dir: the fast path, appended after what is there
    spark.range(50).selectExpr("cast(id as string) as value").coalesce(1).write.format("seglog").mode(
        "append"
    ).save(str(data / "w-0"))
    tail = engine_rows(data / "w-0", 150)
    assert [r[2] for r in tail] == [str(i).encode() for i in range(50)]
    # two tasks of ordered ids: each task's rows are appended together and in order
    spark.range(0, 400, numPartitions=2).selectExpr("cast(id as string) as value").write.format(
        "seglog"
    ).mode("append").option("topic", "ordered").save(str(data))
    values = [int(r[2]) for r in engine_rows(data / "ordered")]
    assert sorted(values) == list(range(400))
    assert values in (list(range(400)), list(range(200, 400)) + list(range(200)))



def test_write_ignores_kafka_producer_options(spark, tmp_path: Path) -> None:
    """``kafka.*`` producer settings are not applicable to the sink and ignored (as the README's table
    says); a moved Kafka job's ``kafka.acks`` failed the commit as an unknown log config. A topic
    config given as an option is still taken."""
    data = tmp_path / "data"
    (
        spark.range(30).selectExpr("cast(id as string) as value").coalesce(1).write.format("seglog")
        .mode("append").option("topic", "moved").option("kafka.bootstrap.servers", "broker:9092")
        .option("kafka.acks", "all").option("segment.bytes", "1000").save(str(data))
    )
    assert [r[2] for r in engine_rows(data / "moved")] == [str(i).encode() for i in range(30)]


def test_filter_pushdown_prunes_tasks(spark, data_dir: Path) -> None:
    log_dir = str(data_dir / "ev-0")
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        full = spark.read.format("seglog").option("pushFilters", "true").load(log_dir)
        n_all = full.rdd.getNumPartitions()
        df = spark.read.format("seglog").option("pushFilters", "true").load(log_dir).where("offset >= 950")
        assert sorted(r.offset for r in df.select("offset").collect()) == list(range(950, 1000))
        assert df.rdd.getNumPartitions() < n_all
        df = (
            spark.read.format("seglog")
            .option("pushFilters", "true")
            .load(log_dir)
            .where("offset > 10 and offset <= 20")
        )
        assert sorted(r.offset for r in df.select("offset").collect()) == list(range(11, 21))
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_jobs_export_and_verify(spark, tmp_path: Path, capsys) -> None:
    from seglogfs.spark import jobs

    dest = tmp_path / "kafka"
    shutil.copytree(KAFKA_DIR, dest)
    out = tmp_path / "parquet"
    code = jobs.main(
        ["export", str(dest), "--output", str(out), "--logs", "__consumer_offsets-15", "--master", "local[2]"]
    )
    assert code == 0
    exported = spark.read.parquet(str(out))
    assert exported.count() == 256
    assert sorted(r.offset for r in exported.select("offset").collect()) == list(range(256))
    assert jobs.main(["verify", str(dest), "--master", "local[2]"]) == 0
    text = capsys.readouterr().out
    assert "__consumer_offsets-15" in text and "0 problem(s)" in text
    seg = dest / "__consumer_offsets-15" / "00000000000000000000.log"
    seg.chmod(0o644)
    data = bytearray(seg.read_bytes())
    data[500] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert jobs.main(["verify", str(dest), "--master", "local[2]"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and str(seg) in text


def test_a_compacted_log_reads_exactly_its_surviving_records(spark, tmp_path: Path) -> None:
    """Issue 10: after the log cleaner ran (offset gaps inside and between batches, emptied batches),
    Spark returns the survivors, offsets kept, as kafka-python reads them from the files."""
    from support.cleaner_helpers import compact_config, kafka_python_records, open_manager
    from support.engine_helpers import ManualClock

    from seglogfs.records import ProducerRecord

    data = tmp_path / "data"
    with open_manager(data, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("kv-0")
        for n in range(400):
            lg.append([ProducerRecord(key=b"k%d" % (n % 9), value=b"v%d" % n)])
            if n % 50 == 49:
                lg.roll()
        while manager.clean_once() is not None:
            pass
        end = lg.end_offset
    survivors = kafka_python_records(data / "kv-0")
    assert 0 < len(survivors) < end - 300, "the cleaner removed too little for a test of gaps"
    rows = spark.read.format("seglog").load(str(data / "kv-0")).select("offset", "key", "value").collect()
    got = sorted((r["offset"], bytes(r["key"]), bytes(r["value"])) for r in rows)
    assert got == survivors
    ranged = (
        spark.read.format("seglog")
        .option("startingOffsets", '{"kv": {"0": 100}}')
        .option("minPartitions", "4")
        .load(str(data / "kv-0"))
    )
    assert sorted(r["offset"] for r in ranged.select("offset").collect()) == [
        offset for offset, _, _ in survivors if offset >= 100
    ]
