"""A Spark JVM that runs out of heap: the run stops with exit code 13 and a message that says what the driver had and
what to raise (:class:`reprocess.errors.SparkOutOfMemoryError`), not a Java stack trace; nothing is lost, and the
next run with more heap takes the same batch. The DAGs' spark-submit task says the same
(:class:`reprocess.submit.ReprocessSubmitOperator`).

The heap is made short for real: a 40 MB landing line, read whole (``--max-line-bytes`` above it), does not fit a
512m driver (Spark needs 450 MB of heap to start at all). Under the default maximum (32 MiB) the reader skips it
without holding it, and the same 512m driver quarantines it (:mod:`reprocess.landing.long_lines`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reprocess.errors import SparkOutOfMemoryError
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.spark_env import DRIVER_MEMORY_ENV, out_of_memory_advice
from reprocess.storage.arrow import open_snapshot, read_live
from reprocess.storage.commit import Warehouse
from warehouse_state import cli_run

AS_OF = "2026-11-21T03:00:00Z"
BIG_PAYLOAD = 40 * 2**20
SHORT = "512m"


# -- the advice ---------------------------------------------------------------------------------------------------
def test_the_advice_names_the_heap_and_twice_it_in_local_mode():
    text = out_of_memory_advice("java.lang.OutOfMemoryError: Java heap space", "1536m", "local[2]")
    assert text.startswith("Spark ran out of memory (java.lang.OutOfMemoryError: Java heap space). ")
    assert "The driver had 1536m of heap, and in local mode the tasks run in it." in text
    assert "Set REPROCESS_DRIVER_MEMORY=3072m (twice this run's) and run again" in text
    assert "spark.executor.memory" not in text
    assert "Nothing is lost" in text


def test_the_advice_on_a_cluster_names_the_executors_and_over_connect_the_server():
    cluster = out_of_memory_advice("x", "2g", "spark://10.0.0.5:7077")
    assert "The driver had 2g of heap." in cluster
    assert "REPROCESS_DRIVER_MEMORY=4g" in cluster
    assert "give the executors of spark://10.0.0.5:7077 more (spark.executor.memory)" in cluster
    executors = out_of_memory_advice("x", "2g", "local-cluster[2,1,1024]")  # a driver with executors of its own
    assert "in local mode" not in executors
    assert "give the executors of local-cluster[2,1,1024] more (the last number of local-cluster[N,cores,MB])" in \
        executors
    connect = out_of_memory_advice("x", None, None)
    assert "Spark Connect server" in connect
    assert "reprocess connect-server --driver-memory" in connect
    assert "REPROCESS_DRIVER_MEMORY" not in connect


# -- a cycle out of heap ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    """Ordinary failures, and one line whose payload is 40 MB (quarantined: more than the JSON reader takes)."""
    root = tmp_path_factory.mktemp("landing")
    write_landing(GenerateOptions(out=root, messages=100, hours=1, seed=11, malformed=0))
    big = {"message_id": "m-huge", "address": "orders.created", "payload": "x" * BIG_PAYLOAD,
           "failed_at": "2026-11-21T00:30:00Z", "delivery_count": 1, "error_class": "Boom",
           "error_message": "too big to process", "consumer_group": "orders-service"}
    (root / "dt=2026-11-21" / "hour=00" / "huge.jsonl").write_text(json.dumps(big) + "\n")
    return root


@pytest.mark.spark
def test_a_cycle_out_of_heap_says_so_and_the_next_run_quarantines_the_line_unread_in_the_same_heap(landing, tmp_path):
    wh = tmp_path / "wh"
    short = cli_run(landing, wh, AS_OF, "--max-line-bytes", str(64 << 20), memory=SHORT)  # the 40 MB line is read whole
    assert short.returncode == SparkOutOfMemoryError.exit_code, short.stderr[-3000:]
    said = [line for line in short.stderr.splitlines() if line.startswith("reprocess: out_of_memory: ")]
    assert len(said) == 1, short.stderr[-3000:]
    # the evidence is the error's own text, or (when the JVM went first) its exit code
    assert ("(java.lang.OutOfMemoryError: Java heap space)" in said[0]
            or "(the driver JVM exited with code 52, Spark's exit code for java.lang.OutOfMemoryError)" in said[0])
    assert f"The driver had {SHORT} of heap, and in local mode the tasks run in it." in said[0]
    assert "Set REPROCESS_DRIVER_MEMORY=1024m (twice this run's) and run again" in said[0]
    assert Warehouse(wh).latest().run("run-20261121T030000Z") is None  # nothing committed

    again = cli_run(landing, wh, AS_OF, memory=SHORT)  # the default maximum line length, 32 MiB
    assert again.returncode == 0, again.stderr[-3000:]
    for run in (short, again):  # py4j's connection chatter (and its tracebacks once the JVM is gone) left out
        assert " INFO py4j" not in run.stderr, run.stderr[-3000:]
        assert " INFO root Exception while sending command." not in run.stderr, run.stderr[-3000:]  # py4j's own
    summary = json.loads(again.stdout)
    assert summary["driver_memory"] == SHORT
    assert summary["quarantined"] == 1
    assert all(summary["conservation"].values())
    reader, snap = open_snapshot(str(wh))
    quarantined = read_live(reader, snap, "quarantine", ["source_file", "record_no", "reason_code", "raw",
                                                         "reason"]).to_pylist()
    size = (landing / "dt=2026-11-21" / "hour=00" / "huge.jsonl").stat().st_size
    assert [(Path(q["source_file"]).name, q["record_no"], q["reason_code"], q["raw"]) for q in quarantined] \
        == [("huge.jsonl", 1, "RECORD_TOO_LARGE", None)]
    assert quarantined[0]["reason"].startswith(f"the line is {size} bytes (from byte 0 of the file)")


# -- the evidence when only the exit code is left -----------------------------------------------------------------
AFTER_THE_JVM = textwrap.dedent("""
    import sys
    from reprocess.errors import SparkOutOfMemoryError
    from reprocess.sparkutil import build_session, explaining_exhausted_resources

    spark = build_session("oom", master="local[1]")
    # a task that builds a 1.4 GB string (700 x 2 MB) in a 512m heap: its thread runs out; the JVM exits with 52
    task = spark.range(1).selectExpr("length(concat_ws(',', array_repeat(repeat(concat('x', id), 1048576), 700)))")
    try:
        with explaining_exhausted_resources(spark):
            try:
                task.write.format("noop").mode("overwrite").save()
            except Exception as exc:  # as a cleanup's call after the failure: only the second error gets out
                print("FIRST", type(exc).__name__, flush=True)
            spark.range(3).count()  # finds the JVM stopped or gone: no OutOfMemoryError in sight
    except SparkOutOfMemoryError as exc:
        print("OOM", exc, flush=True)
        sys.exit(0)
    print("NO OOM ERROR", flush=True)
    sys.exit(1)
""")


@pytest.mark.spark
def test_a_call_after_the_driver_jvm_died_of_it_is_explained_by_its_exit_code():
    env = {**os.environ, DRIVER_MEMORY_ENV: SHORT, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", AFTER_THE_JVM], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    oom = [line for line in proc.stdout.splitlines() if line.startswith("OOM ")]
    evidence = "the driver JVM exited with code 52, Spark's exit code for java.lang.OutOfMemoryError"
    assert oom == ["OOM " + out_of_memory_advice(evidence, SHORT, "local[1]")]


@pytest.mark.spark
def test_an_ordinary_spark_error_goes_through_unchanged(spark):
    from pyspark.errors import AnalysisException

    from reprocess.sparkutil import explaining_exhausted_resources

    with pytest.raises(AnalysisException), explaining_exhausted_resources(spark):
        spark.range(1).select("no_such_column").collect()
    assert spark.range(2).count() == 2  # and the session is still there


# -- the DAGs' spark-submit task ----------------------------------------------------------------------------------
SUBMIT = textwrap.dedent("""
    import sys
    from airflow.exceptions import AirflowException
    from reprocess.submit import ReprocessSubmitOperator

    op = ReprocessSubmitOperator(task_id="oom", conn_id="spark_default", application=sys.argv[1],
                                 spark_binary=sys.argv[2], conf={"spark.driver.memory": sys.argv[3]},
                                 env_vars={"PYSPARK_PYTHON": sys.executable})
    try:
        op.execute({})
    except AirflowException as exc:
        print("FAILED", str(exc).splitlines()[0], flush=True)
        print("CAUSE", str(exc.__cause__).splitlines()[0] if exc.__cause__ else None, flush=True)
""")
APP = textwrap.dedent("""
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.getOrCreate()
    spark.range(1).selectExpr("length(concat_ws(',', array_repeat(repeat(concat('x', id), 1048576), 700)))") \\
        .write.format("noop").mode("overwrite").save()
""")


@pytest.mark.spark
@pytest.mark.airflow
def test_the_dags_spark_submit_task_says_the_driver_ran_out_of_heap(tmp_path):
    app = tmp_path / "oom_app.py"
    app.write_text(APP)
    env = {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
           "AIRFLOW_HOME": str(tmp_path / "airflow"), "PYSPARK_PYTHON": sys.executable}
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    proc = subprocess.run([sys.executable, "-c", SUBMIT, str(app), spark_submit, SHORT], env=env,
                          capture_output=True, text=True, timeout=300)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED ")]
    evidence = "spark-submit exited with code 52, Spark's exit code for java.lang.OutOfMemoryError"
    assert failed == ["FAILED " + out_of_memory_advice(evidence, SHORT, "local[1]")], \
        proc.stdout[-2000:] + proc.stderr[-3000:]
    assert any(line.startswith("CAUSE Cannot execute: ") and "Error code is: 52." in line
               for line in proc.stdout.splitlines())


@pytest.mark.airflow
def test_the_operator_names_the_heap_spark_submit_gave_by_its_precedence(monkeypatch, tmp_path):
    from reprocess.submit import ReprocessSubmitOperator

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.delenv("SPARK_DRIVER_MEMORY", raising=False)

    def heap(**kwargs) -> str:
        return ReprocessSubmitOperator(task_id="t", application="app.py", **kwargs).driver_heap()

    assert heap() == "1g"  # Spark's own default
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "3g")
    assert heap() == "3g"
    (conf_dir / "spark-defaults.conf").write_text("spark.driver.memory  6g\n")
    assert heap() == "6g"
    assert heap(conf={"spark.driver.memory": "1536m"}) == "1536m"
    assert heap(conf={"spark.driver.memory": "1536m"}, driver_memory="8g") == "8g"


def test_the_cli_leaves_out_py4j_info_records_and_keeps_its_warnings_and_everyone_elses():
    """py4j logs its connections closing at INFO, and once the JVM is gone a traceback for each call, some of them
    on the root logger: the CLI's filter tells them by the module that logged them."""
    import logging

    from reprocess.cli import _without_py4j_info

    def record(path: str, level: int) -> logging.LogRecord:
        return logging.LogRecord("root", level, path, 1, "Exception while sending command.", None, None)

    py4j = "/venv/lib/python3.11/site-packages/py4j/java_gateway.py"
    assert not _without_py4j_info(record(py4j, logging.INFO))
    assert _without_py4j_info(record(py4j, logging.WARNING))
    assert _without_py4j_info(record("/work/spark/reprocess/cycle/run.py", logging.INFO))
    assert _without_py4j_info(record("/venv/lib/python3.11/site-packages/py4jish/x.py", logging.INFO))


@pytest.mark.airflow
def test_the_dags_spark_submit_task_fails_without_retries_on_an_exit_code_no_retry_can_change(tmp_path):
    """Exit 9 (a GX suite failed on what a run would commit) and the others of FINAL_EXITS: the provider failed the
    task as on any failure, and Airflow retried it twice; each retry resumed the run and failed the same way."""
    app = tmp_path / "exits.py"
    app.write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
    env = {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
           "AIRFLOW_HOME": str(tmp_path / "airflow"), "PYSPARK_PYTHON": sys.executable}
    code = textwrap.dedent("""
        import sys
        from airflow.exceptions import AirflowException
        from reprocess.submit import ReprocessSubmitOperator

        for exit_code in sys.argv[3:]:
            op = ReprocessSubmitOperator(task_id="exits", conn_id="spark_default", application=sys.argv[1],
                                         application_args=[exit_code], spark_binary=sys.argv[2],
                                         env_vars={"PYSPARK_PYTHON": sys.executable})
            try:
                op.execute({})
            except AirflowException as exc:
                print("EXIT", exit_code, type(exc).__name__, str(exc).splitlines()[0], flush=True)
    """)
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    proc = subprocess.run([sys.executable, "-c", code, str(app), spark_submit, "9", "6"], env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("EXIT ")]
    assert lines[0] == ("EXIT 9 AirflowFailException the Spark job failed a GX suite on what it would commit (nothing "
                        "committed) (exit 9): a retry cannot change that; see its log above"), proc.stderr[-3000:]
    assert lines[1].startswith("EXIT 6 AirflowException "), lines  # a target down: retried
    assert len(lines) == 2


@pytest.mark.airflow
def test_the_spark_submit_task_adds_the_deployments_target_as_it_runs_and_keeps_the_forms_own(tmp_path):
    """The deployment's target (``REPROCESS_TARGET``, which may hold a literal password) is not in the arguments the
    DAG's ``validate_landing`` returns (an XCom, kept in Airflow's database): ``run_cycle`` adds it when it starts
    the job, unless the form's override is there, which then wins."""
    app = tmp_path / "argv.py"
    out = tmp_path / "argv.jsonl"
    app.write_text(f"import json, sys\nopen({str(out)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    env = {**os.environ, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
           "AIRFLOW_HOME": str(tmp_path / "airflow"), "PYSPARK_PYTHON": sys.executable}
    code = textwrap.dedent("""
        import sys
        from reprocess.orchestration import cycle_args
        from reprocess.submit import ReprocessSubmitOperator

        deployment = "amqp://svc:Tr0ub4dor-3@broker:5672/%2F"
        for form_target in (None, "outbox"):
            args = cycle_args("l", "w", "2026-11-21T01:00:00Z", None, form_target, None, False)
            assert "Tr0ub4dor" not in repr(args), args
            op = ReprocessSubmitOperator(task_id="argv", conn_id="spark_default", application=sys.argv[1],
                                         application_args=args, target=deployment, spark_binary=sys.argv[2],
                                         env_vars={"PYSPARK_PYTHON": sys.executable})
            op.execute({})
    """)
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    proc = subprocess.run([sys.executable, "-c", code, str(app), spark_submit], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    deployment, form = (json.loads(line) for line in out.read_text().splitlines())
    assert deployment[-2:] == ["--target", "amqp://svc:Tr0ub4dor-3@broker:5672/%2F"], deployment
    assert form.count("--target") == 1, form
    assert form[form.index("--target") + 1] == "outbox", form
    assert deployment[:deployment.index("--target")] == form[:form.index("--target")]
