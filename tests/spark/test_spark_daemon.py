"""Spark writes and reads while a real seglogd owns the logs (through its FUSE mount)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.mount_fixture import fuse_required, make_seglogd
from support.spark_fixtures import engine_rows, row_tuple

pytestmark = [pytest.mark.spark, pytest.mark.fuse, fuse_required]
pytest_plugins = ["support.spark_fixtures"]


@pytest.fixture
def daemon(tmp_path: Path):
    """A running seglogd owning ``events-0``, stopped and unmounted afterwards."""
    running = make_seglogd(tmp_path, logs={"events-0": {}})
    try:
        yield running.start()
    finally:
        running.cleanup()


def test_write_through_mount_then_read(spark, daemon) -> None:
    data_dir = Path(daemon.data_dir)
    # two tasks: ids 0..199 and 200..399, each in order
    df = spark.range(0, 400, numPartitions=2).selectExpr(
        "cast(id as string) as value",
        "case when id % 2 = 0 then concat('k', id) end as key",
        "'events-0' as topic",
    )

    # the daemon holds the log's lock: a direct write is refused and names the way out
    with pytest.raises(Exception, match="option\\('mount'"):
        df.write.format("seglog").mode("append").save(str(data_dir))

    df.write.format("seglog").mode("append").option("mount", str(daemon.mount)).save(str(data_dir))
    # read the data dir directly while the daemon runs (no lock needed), and compare with the engine
    back = spark.read.format("seglog").load(str(data_dir / "events-0"))
    got = sorted(row_tuple(r) for r in back.collect())
    assert [r[0] for r in got] == list(range(400))
    assert {(r[2], r[1]) for r in got} == {(b"%d" % i, None if i % 2 else b"k%d" % i) for i in range(400)}
    assert got == [(*r[:4], None) for r in engine_rows(data_dir / "events-0")]
    # each task's rows are appended in the task's order
    values = [int(r[2]) for r in got]
    assert [v for v in values if v < 200] == list(range(200))
    assert [v for v in values if v >= 200] == list(range(200, 400))
    # a log that does not exist yet is created through mkdir on the mount
    spark.createDataFrame([(b"x",)], "value binary").write.format("seglog").mode("append").option(
        "mount", str(daemon.mount)
    ).option("topic", "fresh-0").save(str(data_dir))
    assert [r[2] for r in engine_rows(data_dir / "fresh-0")] == [b"x"]
