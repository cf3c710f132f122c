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
    """Register the ``seglog`` format with ``spark`` (a SparkSession); call once per session.

    The Python workers that run the source are those of :func:`.worker_python.use_worker_python`:
    on a local master the driver's own interpreter unless one is configured.
    """
    from .source import SeglogDataSource
    from .worker_python import use_worker_python

    use_worker_python(spark)
    spark.dataSource.register(SeglogDataSource)


def __getattr__(name: str) -> type:
    if name == "SeglogDataSource":
        from .source import SeglogDataSource

        return SeglogDataSource
    raise AttributeError(name)
