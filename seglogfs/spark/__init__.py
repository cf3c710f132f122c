"""PySpark data source ``seglog`` and the Spark jobs (``seglogfs spark export|verify``).

>>> import seglogfs.spark
>>> seglogfs.spark.register(spark)
>>> spark.read.format("seglog").load("/var/lib/seglogfs/data/events-0")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SeglogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``seglog`` format with ``spark`` (a SparkSession); call once per session."""
    from .source import SeglogDataSource

    spark.dataSource.register(SeglogDataSource)


def __getattr__(name: str) -> type:
    if name == "SeglogDataSource":
        from .source import SeglogDataSource

        return SeglogDataSource
    raise AttributeError(name)
