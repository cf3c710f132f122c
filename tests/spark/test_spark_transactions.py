"""``kafka.isolation.level`` in a real local SparkSession: broker-shaped transactional logs (kafka-python
data batches, hand-built markers) read in batch and as a stream, against the scenario's model."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.spark_fixtures import stream_to_parquet
from support.transactions import random_scenario

from seglogfs.log import Log

pytestmark = pytest.mark.spark
pytest_plugins = ["support.spark_fixtures"]

SEEDS = (2, 7)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("spark-txn") / "data"
    models = {}
    for seed in SEEDS:
        name = f"txn-{seed}"
        models[name] = random_scenario(seed, steps=60).write(root / name)
        with Log.open(root / name):  # a daemon's start: recovery rebuilds the .txnindex files
            pass
    return root, models


def _offsets(df) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in df.select("topic", "partition", "offset").collect():
        out.setdefault(f"{row.topic}-{row.partition}", []).append(row.offset)
    return {name: sorted(offsets) for name, offsets in out.items()}


def test_batch_read_committed_and_uncommitted(spark, data_dir) -> None:
    root, models = data_dir
    committed = spark.read.format("seglog").option("kafka.isolation.level", "read_committed").load(str(root))
    assert _offsets(committed) == {name: model.visible for name, model in models.items()}
    assert all(len(m.visible) < len(m.records) for m in models.values())  # something is hidden
    every = spark.read.format("seglog").load(str(root))
    assert _offsets(every) == {name: [r.offset for r in m.records] for name, m in models.items()}
    # min partitions splits tasks inside aborted transactions: still exactly the visible records
    split = (
        spark.read.format("seglog")
        .option("kafka.isolation.level", "read_committed")
        .option("minPartitions", "12")
        .load(str(root))
    )
    assert _offsets(split) == {name: model.visible for name, model in models.items()}


def test_stream_read_committed_stops_at_the_last_stable_offset(spark, data_dir, tmp_path: Path) -> None:
    root, models = data_dir
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream = (
        spark.readStream.format("seglog")
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load(str(root))
    )
    stream_to_parquet(stream.selectExpr("topic", "partition", "offset"), out, checkpoint)
    assert _offsets(spark.read.parquet(str(out))) == {name: model.visible for name, model in models.items()}


def test_a_wrong_isolation_level_names_the_option(spark, data_dir) -> None:
    root, _ = data_dir
    with pytest.raises(Exception, match=r"kafka\.isolation\.level"):
        spark.read.format("seglog").option("kafka.isolation.level", "committed").load(str(root)).collect()


def test_export_with_isolation_read_committed(spark, data_dir, tmp_path: Path) -> None:
    from seglogfs.spark import jobs

    root, models = data_dir
    out = tmp_path / "parquet"
    args = ["export", str(root), "--output", str(out), "--isolation", "read_committed"]
    args += ["--master", "local[2]"]
    assert jobs.main(args) == 0
    assert _offsets(spark.read.parquet(str(out))) == {name: model.visible for name, model in models.items()}
