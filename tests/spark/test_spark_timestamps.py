"""Record timestamps at the edges of what a Spark timestamp (int64 microseconds) holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglogfs.config import LogConfig
from seglogfs.log import Log
from seglogfs.records import ProducerRecord

pytestmark = pytest.mark.spark
pytest_plugins = ["support.spark_fixtures"]

LONG_MAX = (1 << 63) - 1
#: the last epoch millisecond whose microseconds fit an int64
MAX_SPARK_TIMESTAMP_MS = LONG_MAX // 1000


def _log(data: Path, name: str, stamps: list[int]) -> Path:
    log_dir = data / name
    with Log.open(log_dir, LogConfig.from_mapping({}), create=True) as log:
        for i, ts in enumerate(stamps):  # one batch each: a batch's own max timestamp stays in range
            log.append([ProducerRecord(value=b"v%d" % i, timestamp=ts)])
    return log_dir


def test_a_timestamp_past_sparks_range_fails_naming_the_log_and_offset(spark, tmp_path: Path) -> None:
    log_dir = _log(tmp_path / "data", "far-0", [1_700_000_000_000, MAX_SPARK_TIMESTAMP_MS, LONG_MAX])
    df = spark.read.format("seglog").load(str(log_dir))
    with pytest.raises(Exception) as failed:
        df.selectExpr("offset", "unix_millis(timestamp)").collect()
    assert f"log far-0 offset 2: timestamp {LONG_MAX} ms is outside what a Spark timestamp holds" in str(
        failed.value
    )
    # Up to the last representable millisecond every time is exact, never wrapped.
    head = (
        spark.read.format("seglog")
        .option("endingOffsets", '{"far-0": 2}')
        .load(str(log_dir))
        .selectExpr("offset", "unix_millis(timestamp) AS ms")
        .orderBy("offset")
        .collect()
    )
    assert [(r.offset, r.ms) for r in head] == [(0, 1_700_000_000_000), (1, MAX_SPARK_TIMESTAMP_MS)]
    # Without the timestamp column every record reads.
    pruned = spark.read.format("seglog").schema("offset bigint, value binary").load(str(log_dir))
    assert sorted(r.offset for r in pruned.collect()) == [0, 1, 2]
