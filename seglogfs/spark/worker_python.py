"""Which Python interpreter runs the ``seglog`` source's workers.

PySpark records the worker interpreter in every Python function it hands the JVM (the data source
included) when the function is registered: ``PYSPARK_PYTHON`` as the driver process saw it when the
SparkContext started, else ``python3`` from the workers' PATH. A script run as ``.venv/bin/python
job.py`` without the venv activated would then start a system ``python3`` that lacks seglogfs, and
``spark.pyspark.python`` set on the session builder is not read at all outside ``spark-submit``.

:func:`use_worker_python` (called by :func:`seglogfs.spark.register`) therefore picks, in Spark's
order: ``spark.pyspark.python``, then ``PYSPARK_PYTHON``, then, on a local master, the driver's own
interpreter (``sys.executable``: the same machine, so the same installed seglogfs). On any other
master with neither set it logs one line saying that ``spark.pyspark.python`` must name an
interpreter that has seglogfs on every worker.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("seglogfs.spark")

CONF_KEY = "spark.pyspark.python"
ENV_KEY = "PYSPARK_PYTHON"


def choose_worker_python(
    master: str, configured: str | None, environment: str | None, driver: str = sys.executable
) -> tuple[str | None, str | None]:
    """(the interpreter the workers must run, or None to leave PySpark's choice; a warning or None)
    for a session on ``master`` with ``spark.pyspark.python`` = ``configured`` and
    ``PYSPARK_PYTHON`` = ``environment``."""
    if configured:
        return configured, None
    if environment:
        return environment, None
    if master.startswith("local"):
        return driver, None
    return None, (
        f"seglogfs: master {master} is not local and neither {CONF_KEY} nor {ENV_KEY} is set, so "
        f"executors start `python3` from their PATH; set {CONF_KEY} to an interpreter that has seglogfs "
        "installed on every worker (else tasks fail with No module named 'seglogfs')"
    )


def use_worker_python(spark: SparkSession) -> None:
    """Make the Python functions registered from now on (the ``seglog`` source first) run in the
    interpreter :func:`choose_worker_python` picks; a no-op for a Spark Connect session, whose
    server decides."""
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext in the client
        return
    python, warning = choose_worker_python(
        sc.master, sc.getConf().get(CONF_KEY), os.environ.get(ENV_KEY) or None
    )
    if warning is not None:
        log.warning(warning)
    if python is not None:
        sc.pythonExec = python
