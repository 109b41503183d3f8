"""The pinned stack is what runs: Python pyspark files and the JVM are the same Spark."""

from __future__ import annotations

import importlib.metadata

import pytest


@pytest.mark.spark
def test_python_pyspark_version_equals_the_jvm_spark_version(spark):
    import pyspark

    assert pyspark.__version__ == spark.version == "4.3.0"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("dist", "version"),
    [("apache-airflow", "3.3.2"), ("apache-airflow-providers-apache-spark", "6.3.4"),
     ("great-expectations", "1.24.1"), ("pyspark", "4.3.0")],
)
def test_pinned_distributions_are_installed(dist, version):
    assert importlib.metadata.version(dist) == version


@pytest.mark.unit
def test_pandas_is_below_3():
    import pandas

    assert int(pandas.__version__.split(".")[0]) == 2


@pytest.mark.spark
def test_python_workers_run_the_venv_interpreter(spark):
    import sys

    got = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("sys").executable).collect()
    assert got == [sys.executable]


@pytest.mark.spark
def test_column_functions_make_no_call_site_round_trips(spark, monkeypatch):
    """PySpark 4 records the Python call site of every column function through four more py4j calls unless
    spark.python.sql.dataFrameDebugging.enabled is off (sparkutil.APP_CONF); a cycle builds thousands of them."""
    from pyspark.errors import utils
    from pyspark.sql import functions as F

    monkeypatch.setattr(utils, "_enable_debugging_cache", None)  # read the setting again, from this session
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert not utils.is_debugging_enabled()
    calls = []
    monkeypatch.setattr(utils, "_capture_call_site", lambda depth: calls.append(depth) or "")
    F.when(F.col("a") > F.lit(1), F.concat(F.col("b"), F.lit("x")))
    assert calls == []
