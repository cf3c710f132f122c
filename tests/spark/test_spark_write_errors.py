"""Writes the sink cannot take, and reads of a path with no logs: one clear line naming the column,
the type it needs and the log (or the path), before anything is appended."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spark_fixtures import engine_rows, make_log

from seglogfs.spark.options import OptionError
from seglogfs.spark.stream import SeglogStreamReader

pytestmark = pytest.mark.spark
pytest_plugins = ["support.spark_fixtures"]


def _write_error(df, data: Path, **options: str) -> str:
    writer = df.write.format("seglog").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception) as failed:
        writer.save(str(data))
    return str(failed.value)


def test_mistyped_columns_are_refused_on_the_driver_naming_column_type_and_log(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    ints = spark.range(3).selectExpr("cast(id as int) as value")
    message = _write_error(ints, data, topic="events")
    assert (
        f"seglog sink (log events under {data}): column 'value' is int, expected binary or string" in message
    )
    assert "ArrowNotImplementedError" not in message
    text_headers = spark.range(3).selectExpr("cast(id as string) as value", "'x' as headers")
    message = _write_error(text_headers, data / "events", topic="ignored")
    assert "column 'headers' is string, expected array<struct<key:string,value:binary>>" in message
    by_column = spark.range(3).selectExpr("cast(id as string) as value", "1.5 as partition", "'t' as topic")
    message = _write_error(by_column, data)
    assert f"(the logs of the topic column under {data}): column 'partition' is decimal(2,1)" in message
    assert not data.exists() or not any(data.iterdir())
    # What the sink takes still writes: string header values, an int partition, epoch-ms timestamps.
    spark.range(2).selectExpr(
        "cast(id as string) as value",
        "array(named_struct('key', 'h', 'value', 'text')) as headers",
        "'ok' as topic",
        "0 as partition",
        "1700000000000 + id as timestamp",
    ).write.format("seglog").mode("append").save(str(data))
    assert [(r[2], r[3], r[4]) for r in engine_rows(data / "ok-0")] == [
        (b"0", 1_700_000_000_000, [("h", b"text")]),
        (b"1", 1_700_000_000_001, [("h", b"text")]),
    ]


def test_a_null_header_key_fails_the_task_naming_the_log_and_appends_nothing(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    df = spark.createDataFrame(
        [("a", "v1", [("h", b"x")]), ("b", "v2", [("h", b"y"), (None, b"z")]), ("a", "v3", None)],
        "topic string, value string, headers array<struct<key:string,value:binary>>",
    ).coalesce(1)
    message = _write_error(df, data)
    assert f"seglog sink (log b under {data}): column 'headers' holds a header with a null key" in message
    assert "header key must be str" not in message
    # The job failed before its commit: not even the good log's rows were appended.
    assert not (data / "a").exists() or engine_rows(data / "a") == []


def test_a_path_with_no_logs_is_an_error_unless_failOnNoLogs_is_false(spark, tmp_path: Path) -> None:
    plain = tmp_path / "etc"
    (plain / "apt").mkdir(parents=True)
    (plain / "hosts").write_text("127.0.0.1 localhost\n")
    expected = f"path {plain} holds no logs (no directory with a segment file)"
    with pytest.raises(Exception, match=expected.replace("(", r"\(").replace(")", r"\)")):
        spark.read.format("seglog").load(str(plain)).collect()
    assert spark.read.format("seglog").option("failOnNoLogs", "false").load(str(plain)).count() == 0
    with pytest.raises(OptionError, match="holds no logs"):
        SeglogStreamReader({"path": str(plain)}).initialOffset()
    SeglogStreamReader({"path": str(plain), "failonnologs": "false"}).initialOffset()
    # A log with no records is a log.
    make_log(tmp_path / "data", "quiet-0", batches=0)
    assert spark.read.format("seglog").load(str(tmp_path / "data")).count() == 0
