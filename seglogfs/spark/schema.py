"""The row schema of the ``seglog`` source: the columns of Spark's Kafka source, or a subset of them.

A caller's ``.schema(...)`` reaches ``reader(schema)``; :func:`read_columns` checks it against the
Kafka source's columns, and the reader then builds only the columns asked for (column pruning, which
the Python Data Source API has no other hook for).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import OptionError

if TYPE_CHECKING:
    import pyarrow as pa

HEADER_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

#: every column of Spark's Kafka source, in its order (``headers`` only with includeHeaders)
KAFKA_COLUMNS: dict[str, DataType] = {
    "key": BinaryType(),
    "value": BinaryType(),
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "timestamp": TimestampType(),
    "timestampType": IntegerType(),
    "headers": HEADER_TYPE,
}
_BY_LOWER = {name.lower(): name for name in KAFKA_COLUMNS}


def spark_schema(include_headers: bool = False) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType (+ headers)."""
    names = [name for name in KAFKA_COLUMNS if include_headers or name != "headers"]
    return StructType([StructField(name, KAFKA_COLUMNS[name]) for name in names])


@cache
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects yielded batches to have (derived, never written twice)."""
    return arrow_schema_of(spark_schema(include_headers))


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark demands of batches yielded for ``schema`` (its own conversion)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


@dataclass(frozen=True)
class ReadColumns:
    """The columns a read builds: Kafka column names in the caller's order, and the caller's schema
    (its field names and nullability are what the yielded batches must carry)."""

    names: tuple[str, ...]
    schema: StructType

    @classmethod
    def full(cls, include_headers: bool = False) -> ReadColumns:
        """Every Kafka-source column (the source's own schema)."""
        schema = spark_schema(include_headers)
        return cls(tuple(schema.names), schema)

    @property
    def arrow(self) -> pa.Schema:
        """The Arrow schema of the batches to yield (once per task: cheap next to a task's read)."""
        return arrow_schema_of(self.schema)


#: columns that hold nulls: a record without a key, a tombstone, a record without headers
_NULLABLE = frozenset({"key", "value", "headers"})


def read_columns(schema: StructType) -> ReadColumns:
    """Check a caller's schema against the Kafka source's columns; raises OptionError naming the
    first unknown, repeated or mistyped column (names match case-insensitively, as Spark's do)."""
    names: list[str] = []
    for field in schema.fields:
        name = _BY_LOWER.get(field.name.lower())
        if name is None:
            raise OptionError(
                f"schema: column {field.name!r} is not a column of the Kafka source; the columns are "
                + ", ".join(f"{n} {t.simpleString()}" for n, t in KAFKA_COLUMNS.items())
            )
        if name in names:
            raise OptionError(f"schema: column {field.name!r} appears twice")
        expected = KAFKA_COLUMNS[name]
        if field.dataType.simpleString() != expected.simpleString():
            raise OptionError(
                f"schema: column {field.name!r} has type {field.dataType.simpleString()}, but the Kafka "
                f"source's {name} column is {expected.simpleString()}"
            )
        if name in _NULLABLE and (not field.nullable or (name == "headers" and field.dataType != expected)):
            # Spark trusts a NOT NULL column and would fold `key IS NULL` to false: refuse it
            raise OptionError(
                f"schema: column {field.name!r} must be nullable (a record may have no {name}, or "
                "a header no value)"
            )
        names.append(name)
    if not names:
        raise OptionError("schema: no columns; give at least one of " + ", ".join(KAFKA_COLUMNS))
    return ReadColumns(tuple(names), schema)
