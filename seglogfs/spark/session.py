"""The SparkSession a job runs in: the active one (a notebook, the test suite) or a new one on a
master, with the ``seglog`` format registered either way."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["make_session"]


def make_session(master: str, app: str) -> tuple[SparkSession, bool]:
    """(SparkSession on ``master`` with ``seglog`` registered, whether we created it and must stop it).

    An already active session (a notebook, the test suite) is reused and left running.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from . import register

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active, False
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark, True
