"""The ``seglog`` DataSource: batch reads, streaming reads and writes of seglogfs / Kafka logs.

Read options (all optional but ``path``):

=================================  =========================================================
``path``                           a log dir, or a data dir (every log in it)
``logs`` / ``topics``              comma-separated log names / topic names to read from a data dir
``startingOffsets``                ``earliest`` (batch default), ``latest`` (stream default) or JSON
``endingOffsets``                  ``latest`` (default) or JSON; batch only
``startingTimestamp``              epoch ms or ISO-8601; wins over ``startingOffsets``
``endingTimestamp``                epoch ms or ISO-8601; wins over ``endingOffsets``; batch only
``startingOffsetsByTimestampStrategy``  ``error`` (default) or ``latest`` when no record is that late
``minPartitions``                  split large segments so that there are at least this many tasks
``failOnDataLoss``                 ``true`` (default): error when wanted records are gone or corrupt;
                                   ``false``: log a warning and skip them
``includeHeaders``                 ``true`` adds the ``headers`` column
``maxOffsetsPerTrigger``           streaming: at most this many offsets per micro-batch
``pushFilters``                    ``true``: use ``offset`` / ``timestamp`` filters to prune tasks
                                   (needs ``spark.sql.python.filterPushdown.enabled``; see README)
``maxBatchRows``                   rows per Arrow batch handed to Spark (default 65536)
``kafka.isolation.level``          ``read_uncommitted`` (default) or ``read_committed``: no row of an
                                   aborted transaction; ``latest`` is the last stable offset
=================================  =========================================================

Offsets JSON: ``{"<topic>": {"<partition>": n}}`` or ``{"<log name>": n}``; -2 = earliest,
-1 = latest. Write options are documented in :mod:`.writer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from .options import OptionError, ReadOptions, lowered
from .scan import SegmentSlice, read_slice
from .schema import spark_schema

if TYPE_CHECKING:
    import pyarrow as pa


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise OptionError("the seglog source needs a path: .load('<data dir or log dir>')")
    return path


class SeglogDataSource(DataSource):
    """Kafka-shaped rows from seglogfs logs (format ``seglog``)."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> StructType:
        return spark_schema(ReadOptions.parse(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = lowered(self.options)
        if ReadOptions.parse(options).push_filters:
            return SeglogPushdownReader(options)
        return SeglogReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import SeglogStreamReader

        return SeglogStreamReader(lowered(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import SeglogWriter

        if overwrite:
            raise OptionError("the seglog sink only appends: use mode('append')")
        return SeglogWriter(lowered(self.options), schema)


class SeglogReader(DataSourceReader):
    """Batch reader: tasks are planned in ``partitions()`` on the driver, read in executors."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.opts = ReadOptions.parse(options)
        self.offset_bounds: tuple[int | None, int | None] = (None, None)
        self.time_bounds: tuple[int | None, int | None] = (None, None)

    def partitions(self) -> list[InputPartition]:
        from .planning import plan_batch

        # Pushed-down offset bounds narrow each log's range before it is cut into tasks.
        return list(plan_batch(_path(self.options), self.options, self.opts, self.offset_bounds).tasks)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentSlice):
            return iter(())  # Spark turns an empty plan into one InputPartition(None)
        return read_slice(
            partition, self.opts.include_headers, self.opts.fail_on_data_loss, self.opts.max_batch_rows
        )


class SeglogPushdownReader(SeglogReader):
    """The batch reader plus ``pushFilters`` on ``offset`` (tasks outside the range are not read).

    Every filter is handed back to Spark, which re-checks them, so pruning only skips work. Only used
    with ``pushFilters=true``: PySpark 4.3.0 caches the pushed state on the DataFrame, so reuse of a
    filtered DataFrame's ``load()`` for another query may see stale pruning (call ``load()`` afresh).
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        lo, hi = self.offset_bounds
        for f in filters:
            v = getattr(f, "value", None)
            if f.attribute == ("offset",) and isinstance(v, int) and not isinstance(v, bool):
                if isinstance(f, EqualTo):
                    lo, hi = _max(lo, v), _min(hi, v + 1)
                elif isinstance(f, GreaterThan):
                    lo = _max(lo, v + 1)
                elif isinstance(f, GreaterThanOrEqual):
                    lo = _max(lo, v)
                elif isinstance(f, LessThan):
                    hi = _min(hi, v)
                elif isinstance(f, LessThanOrEqual):
                    hi = _min(hi, v + 1)
            yield f
        self.offset_bounds = (lo, hi)


def _max(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def _min(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)
