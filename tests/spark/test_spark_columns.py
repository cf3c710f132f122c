"""Column pruning through the caller's schema: ``.schema("offset bigint, value binary")`` builds only
those columns, in the caller's order, for batch and streaming reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StructField, StructType
from support.cleaner_helpers import kafka_python_records
from support.spark_fixtures import engine_rows, make_log, row_tuple, stream_to_parquet
from support.testdata import KAFKA_LOG_DIR

from seglogfs.spark.arrow import binary_column
from seglogfs.spark.options import OptionError
from seglogfs.spark.schema import HEADER_TYPE, read_columns
from seglogfs.spark.source import SeglogDataSource

pytestmark = pytest.mark.spark
pytest_plugins = ["support.spark_fixtures"]

PRUNED = [
    "offset bigint, value binary",
    "value binary, offset bigint",
    "timestampType int, key binary, offset bigint, topic string",
    "offset bigint, headers array<struct<key:string,value:binary>>, timestamp timestamp, partition int",
]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return make_log(tmp_path_factory.mktemp("spark-columns") / "data", "cols-0", codec="lz4", batches=12)


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])


def _batches(log_dir: Path, schema: StructType, **options: str) -> list[pa.RecordBatch]:
    source = SeglogDataSource({"path": str(log_dir), **{k.lower(): v for k, v in options.items()}})
    reader = source.reader(schema)
    return [batch for part in reader.partitions() for batch in reader.read(part)]


def test_pruned_schemas_equal_the_full_reads_columns(spark, log_dir: Path) -> None:
    full = spark.read.format("seglog").option("includeHeaders", "true").load(str(log_dir))
    for ddl in PRUNED:
        df = spark.read.format("seglog").schema(ddl).load(str(log_dir))
        names = [part.split()[0] for part in ddl.split(", ")]
        assert df.columns == names, ddl
        assert df.orderBy("offset").collect() == full.select(*names).orderBy("offset").collect(), ddl
    values = spark.read.format("seglog").schema("value binary").load(str(log_dir)).collect()
    assert sorted(r.value for r in values) == sorted(row[2] for row in engine_rows(log_dir))


def test_only_the_asked_columns_are_built(log_dir: Path) -> None:
    """The reader's batches hold exactly the schema's columns: ``headers`` only when asked (then
    whatever ``includeHeaders`` says), and none of the others."""
    for batch in _batches(log_dir, _struct(("value", BinaryType()), ("offset", LongType()))):
        assert batch.schema.names == ["value", "offset"]
    with_headers = _struct(("offset", LongType()), ("headers", HEADER_TYPE))
    batches = _batches(log_dir, with_headers, includeHeaders="false")
    rows = [
        (r["offset"], [(h["key"], h["value"]) for h in r["headers"]] if r["headers"] else None)
        for b in batches
        for r in b.to_pylist()
    ]
    assert rows == [(row[0], row[4]) for row in engine_rows(log_dir)]
    full = _batches(log_dir, SeglogDataSource({"path": str(log_dir)}).schema())
    assert "headers" not in full[0].schema.names
    assert [row_tuple(r) for b in full for r in b.to_pylist()] == [
        (*row[:4], None) for row in engine_rows(log_dir)
    ]


def test_unknown_or_mistyped_columns_are_named(spark, log_dir: Path) -> None:
    unknown = r"column 'offst' is not a column of the Kafka source.*offset bigint"
    with pytest.raises(OptionError, match=unknown):
        read_columns(_struct(("offset", LongType()), ("offst", LongType())))
    with pytest.raises(OptionError, match=r"column 'partition' has type bigint.*partition column is int"):
        read_columns(_struct(("partition", LongType())))
    with pytest.raises(OptionError, match=r"column 'VALUE' appears twice"):
        read_columns(_struct(("value", BinaryType()), ("VALUE", BinaryType())))
    # NOT NULL where records hold nulls (no key, tombstones): Spark would trust it and fold IS NULL away
    with pytest.raises(OptionError, match=r"column 'key' must be nullable"):
        read_columns(StructType([StructField("key", BinaryType(), nullable=False)]))
    headers = HEADER_TYPE
    with pytest.raises(OptionError, match=r"column 'headers' must be nullable"):
        read_columns(StructType([StructField("headers", ArrayType(headers.elementType, containsNull=False))]))
    assert read_columns(StructType([StructField("offset", LongType(), nullable=False)])).names == ("offset",)
    df = spark.read.format("seglog").schema("offset int").load(str(log_dir))
    with pytest.raises(Exception, match=r"column 'offset' has type int, but the Kafka source's offset"):
        df.collect()
    stream = spark.readStream.format("seglog").schema("nope binary").load(str(log_dir))
    with pytest.raises(Exception, match=r"column 'nope' is not a column of the Kafka source"):
        stream.writeStream.format("memory").queryName("bad_columns").start().awaitTermination(60)


def test_stream_with_a_pruned_schema(spark, log_dir: Path, tmp_path: Path) -> None:
    stream = (
        spark.readStream.format("seglog")
        .schema("value binary, offset bigint")
        .option("startingOffsets", "earliest")
        .load(str(log_dir))
    )
    stream_to_parquet(stream, tmp_path / "out", tmp_path / "checkpoint")
    got = spark.read.parquet(str(tmp_path / "out"))
    assert got.columns == ["value", "offset"]
    assert sorted((r.offset, bytes(r.value)) for r in got.collect()) == [
        (row[0], row[2]) for row in engine_rows(log_dir)
    ]


def test_real_kafka_data_dir_pruned_matches_kafka_python(spark, tmp_path: Path) -> None:
    dest = tmp_path / "kafka"
    shutil.copytree(KAFKA_LOG_DIR, dest)
    ddl = "topic string, partition int, key binary, value binary, offset bigint"
    df = spark.read.format("seglog").schema(ddl)
    got: dict[str, list[tuple]] = {}
    for r in df.load(str(dest)).collect():
        got.setdefault(f"{r.topic}-{r.partition}", []).append((r.offset, r.key, r.value))
    expected = {d.name: kafka_python_records(d) for d in dest.iterdir() if any(d.glob("*.log"))}
    assert sum(map(len, expected.values())) > 256
    assert {name: sorted(rows) for name, rows in got.items()} == {n: r for n, r in expected.items() if r}


def test_binary_column_slices_nulls_and_buffer_edges() -> None:
    data = np.frombuffer(b"aaKEY1bbVALUEcc" + b"ZZ", dtype=np.uint8)
    starts = np.array([2, 8, 0, 13, 15], dtype=np.int64)
    lengths = np.array([4, 5, -1, 0, 2], dtype=np.int64)
    got = binary_column(pa.py_buffer(data), starts, lengths)
    assert got.type == pa.binary()
    assert got.to_pylist() == [b"KEY1", b"VALUE", None, b"", b"ZZ"]
    assert binary_column(pa.py_buffer(data), starts[:2], np.array([-1, -1])).null_count == 2


def test_columns_of_every_kind_keep_their_arrow_types(log_dir: Path) -> None:
    schema = _struct(("partition", IntegerType()), ("timestampType", IntegerType()), ("offset", LongType()))
    batch = _batches(log_dir, schema)[0]
    assert batch.schema.types == [pa.int32(), pa.int32(), pa.int64()]
    assert set(batch.column("partition").to_pylist()) == {0}
    assert set(batch.column("timestampType").to_pylist()) == {0}


def test_batches_are_cut_before_their_bytes_pass_arrows_binary_limit(log_dir: Path, monkeypatch) -> None:
    """A binary column slices one buffer with int32 offsets: the builder flushes before a Kafka batch
    would carry the joined bytes past 2 GiB (shrunk here), and a single batch over it is an error
    naming the log (it was ArrowInvalid "Negative offsets", naming nothing)."""
    from seglogfs.spark import arrow

    schema = _struct(("offset", LongType()), ("value", BinaryType()))
    whole = _batches(log_dir, schema)
    monkeypatch.setattr(arrow, "MAX_BINARY_BYTES", 3000)
    cut = _batches(log_dir, schema)
    assert len(cut) > len(whole)
    assert pa.Table.from_batches(cut).column("offset") == pa.Table.from_batches(whole).column("offset")
    monkeypatch.setattr(arrow, "MAX_BINARY_BYTES", 10)
    with pytest.raises(ValueError, match=r"a batch of log cols-0 at offset 0 .* over the 2 GiB"):
        _batches(log_dir, schema)
