"""The interpreter the source's Python workers run: a script started as ``.venv/bin/python job.py``
without the venv on PATH reads logs on a local master."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.spark_cluster import FAST_JVM
from support.spark_fixtures import make_log

from seglogfs.spark.worker_python import choose_worker_python

pytestmark = pytest.mark.spark

SCRIPT = """
import sys
from pyspark.sql import SparkSession
import seglogfs.spark

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
seglogfs.spark.register(spark)
df = spark.read.format("seglog").load(sys.argv[1])
print("rows", df.count(), df.selectExpr("min(offset)", "max(offset)").first())
spark.stop()
"""


def test_a_script_run_with_the_venv_python_not_activated_reads_on_a_local_master(tmp_path: Path) -> None:
    make_log(tmp_path / "data", "w-0", batches=4, per_batch=5)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    # No venv on PATH and no PYSPARK_* variable: a bare `python3` there lacks seglogfs.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "VIRTUAL_ENV"))}
    env |= {"PATH": "/usr/bin:/bin", "JDK_JAVA_OPTIONS": FAST_JVM}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "rows 20 Row(min(offset)=0, max(offset)=19)" in done.stdout


def test_the_worker_interpreter_follows_sparks_order_and_a_cluster_without_one_is_told() -> None:
    assert choose_worker_python("local[2]", None, None, "/venv/bin/python") == ("/venv/bin/python", None)
    assert choose_worker_python("local-cluster[2,1,1024]", None, None, "/v/py")[0] == "/v/py"
    assert choose_worker_python("local[*]", None, "/env/python", "/v/py") == ("/env/python", None)
    assert choose_worker_python("spark://h:7077", "/conf/python", "/env/python") == ("/conf/python", None)
    python, warning = choose_worker_python("spark://h:7077", None, None)
    assert python is None
    assert warning is not None and "set spark.pyspark.python to an interpreter that has seglogfs" in warning
