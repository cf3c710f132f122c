"""The ``seglog`` DataSource: batch reads, streaming reads and writes of seglogfs / Kafka logs.

Read options (all optional but ``path``):

=================================  =========================================================
``path``                           a log dir, or a data dir (every log in it)
``logs``                           comma-separated log names to read from a data dir
``subscribe`` / ``topics``         comma-separated topic names (one of assign / subscribe /
                                   subscribePattern, as Kafka)
``subscribePattern``               a regular expression matching whole topic names
``assign``                         JSON ``{"topic": [0, 1]}``: exactly those partitions
``startingOffsets``                ``earliest`` (batch default), ``latest`` (stream default) or JSON
``endingOffsets``                  ``latest`` (default) or JSON; batch only
``startingTimestamp``              epoch ms or ISO-8601; wins over the two options below
``startingOffsetsByTimestamp``     JSON of epoch ms per partition (every log read must be named);
                                   wins over ``startingOffsets``
``endingTimestamp``                epoch ms or ISO-8601; wins over the two options below; batch only
``endingOffsetsByTimestamp``       JSON of epoch ms per partition; wins over ``endingOffsets``; batch only
``startingOffsetsByTimestampStrategy``  ``error`` (default) or ``latest`` when no record is that late
``minPartitions``                  split large segments so that there are about this many tasks
``maxRecordsPerPartition``         no task spans more offsets than this (then ``minPartitions``)
``failOnDataLoss``                 ``true`` (default): error when wanted records are gone or corrupt;
                                   ``false``: log a warning and skip them
``failOnNoLogs``                   ``true`` (default): error when the path holds no log at all;
                                   ``false``: read it as empty
``includeHeaders``                 ``true`` adds the ``headers`` column
(schema)                           ``.schema("offset bigint, value binary")``: any subset of the
                                   Kafka columns, any order, types as Kafka's; only those are built
``maxOffsetsPerTrigger``           streaming: at most this many offsets per micro-batch
``minOffsetsPerTrigger``           streaming: hold a trigger back until this many new offsets...
``maxTriggerDelay``                ...or this long since the last one (default ``15m``)
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
from .schema import ReadColumns, read_columns, spark_schema
from .stream import SeglogStreamReader

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
        """The batch reader, building only the columns of ``schema`` (the caller's, when given)."""
        options = lowered(self.options)
        columns = read_columns(schema)
        if ReadOptions.parse(options).push_filters:
            return SeglogPushdownReader(options, columns)
        return SeglogReader(options, columns)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader, building only the columns of ``schema``."""
        return SeglogStreamReader(lowered(self.options), read_columns(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import SeglogWriter

        if overwrite:
            raise OptionError("the seglog sink only appends: use mode('append')")
        return SeglogWriter(lowered(self.options), schema)


class SeglogReader(DataSourceReader):
    """Batch reader: tasks are planned in ``partitions()`` on the driver, read in executors."""

    def __init__(self, options: dict[str, str], columns: ReadColumns | None = None) -> None:
        self.options = options
        self.opts = ReadOptions.parse(options)
        self.columns = columns or ReadColumns.full(self.opts.include_headers)
        self.offset_bounds: tuple[int | None, int | None] = (None, None)
        self.time_bounds: tuple[int | None, int | None] = (None, None)

    def partitions(self) -> list[InputPartition]:
        from .planning import plan_batch

        # Pushed-down offset bounds narrow each log's range before it is cut into tasks.
        return list(plan_batch(_path(self.options), self.options, self.opts, self.offset_bounds).tasks)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentSlice):
            return iter(())  # Spark turns an empty plan into one InputPartition(None)
        return read_slice(partition, self.columns, self.opts.fail_on_data_loss, self.opts.max_batch_rows)


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
