"""The row schema of the ``seglog`` source: exactly the columns of Spark's Kafka source."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

HEADER_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def spark_schema(include_headers: bool = False) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType (+ headers)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADER_TYPE))
    return StructType(fields)


@cache
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects yielded batches to have (derived, never written twice)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")
