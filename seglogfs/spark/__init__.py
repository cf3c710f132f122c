"""PySpark data source ``seglog`` and the Spark jobs (``seglogfs spark export|verify``).

>>> import seglogfs.spark
>>> seglogfs.spark.register(spark)
>>> spark.read.format("seglog").load("/var/lib/seglogfs/data/events-0")
"""

from __future__ import annotations

__all__ = ["SeglogDataSource", "register"]


def register(spark) -> None:
    """Register the ``seglog`` format with ``spark`` (a SparkSession); call once per session."""
    from .source import SeglogDataSource

    spark.dataSource.register(SeglogDataSource)


def __getattr__(name: str):
    if name == "SeglogDataSource":
        from .source import SeglogDataSource

        return SeglogDataSource
    raise AttributeError(name)
