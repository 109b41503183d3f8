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


@pytest.mark.spark
def test_a_call_cut_off_by_a_timeout_leaves_the_workers_session_usable(spark):
    """pytest-timeout ends a slow test by raising inside it. Inside a Py4J call that leaves the call's answer unread on
    the thread's socket, and each later call of the worker read the answer of the one before (tests/py4j_guard.py).
    The guard that conftest runs after each test phase drops that socket."""
    import signal

    from py4j_guard import drop_interrupted_call

    def cut_off(signum, frame):  # what pytest-timeout's signal method does
        pytest.fail("Timeout (>0.5s) from pytest-timeout.")

    jvm = spark.sparkContext._jvm
    sleep, absolute = jvm.java.lang.Thread.sleep, jvm.java.lang.Math.abs  # looked up now: each call is one command
    previous = signal.signal(signal.SIGALRM, cut_off)
    try:
        # a call cut off: its answer is still to come
        # (a BaseException: Py4J's `except Exception` lets it through; the report of a failed test keeps its
        # traceback, and with it the connection, alive)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(pytest.fail.Exception) as first:
            sleep(3000)
        assert drop_interrupted_call()
        assert not drop_interrupted_call()  # a new socket, nothing to drop
        assert absolute(-7) == 7

        # a call cut off, then a call on the way out (PySpark's call-site `with` block makes one): the second reads
        # the first one's answer, goes back to Py4J's pool, and leaves its own answer on the socket
        on_the_way_out = []

        def cut_off_then_called() -> None:
            try:
                sleep(3000)
            finally:
                on_the_way_out.append(absolute(-1))

        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(pytest.fail.Exception) as second:
            cut_off_then_called()
        assert on_the_way_out == [None]  # the sleep's answer (void), not 1
        assert not drop_interrupted_call()  # nothing looks cut off...
        assert drop_interrupted_call(timed_out=True)  # ...but after a timeout the socket goes all the same
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert absolute(-7) == 7
    assert "pytest-timeout" in str(first.value)
    assert "pytest-timeout" in str(second.value)
    assert spark.range(5).selectExpr("sum(id) AS s").collect()[0].s == 10
    assert spark.version == "4.3.0"
