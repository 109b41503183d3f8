"""Beyond one machine: the cycle DAG's SparkSubmitOperator against a Spark standalone cluster (a master and two
workers started from the pyspark wheel on loopback, web UIs off 8080) gives what a local-mode run gives."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.test_dags import _dag_test

from airflow_env import airflow_env, migrate
from reprocess.cli import load_config, parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.spark_env import local_fs_jar
from reprocess.storage.commit import Warehouse
from reprocess.storage.read import read_dataset

# About 95 s alone (a cluster start, a dag.test() on it and the local-mode run); part of `make test` and CI.
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.integration]

MASTER_PORT = 7077
UI_PORT = 18280  # the master's web UI (8080 is Airflow's, 18080 the e2e test's); workers 18281, 18282
TARGET = "python:reprocess.targets.examples:flaky"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _master_state() -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{UI_PORT}/json/", timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """The master's URL, and the folder under which the workers run their executors (``work/app-*/<id>/``)."""
    import pyspark

    if _listening(MASTER_PORT):
        pytest.fail(f"port {MASTER_PORT} is taken: stop the Spark master (or whatever listens there) first")
    home = Path(pyspark.__file__).parent
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "work")}
    spark_class = str(home / "bin" / "spark-class")
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(MASTER_PORT),
         "--webui-port", str(UI_PORT)],
        *[[spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
           "--memory", "1536m", "--webui-port", str(UI_PORT + i), f"spark://127.0.0.1:{MASTER_PORT}"]
          for i in (1, 2)],
    ]
    procs = []
    try:
        for i, cmd in enumerate(commands):
            log = open(work / f"{'master' if i == 0 else f'worker-{i}'}.log", "wb")  # noqa: SIM115
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            if i == 0:
                _wait(lambda: _listening(MASTER_PORT) and _listening(UI_PORT), 90, "the Spark master", work)
        _wait(lambda: _master_state().get("aliveworkers") == 2, 90, "two workers", work)
        yield f"spark://127.0.0.1:{MASTER_PORT}", work / "work"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _wait(ok, seconds: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except (OSError, ValueError):  # not listening yet, or the UI answers before it has a state to give
            pass
        time.sleep(1)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(logs.glob("*.log")))
    pytest.fail(f"{what} did not come up in {seconds}s\n{tails}")


def _ledger(spark, warehouse: Path) -> dict:
    df = read_dataset(spark, str(warehouse), "ledger")
    return {r.message_id: (r.state, r.deliveries, r.next_attempt_ms, r.reason_code)
            for r in df.select("message_id", "state", "deliveries", "next_attempt_ms", "reason_code").collect()}


def test_the_dag_on_a_standalone_cluster_equals_a_local_run(cluster, spark, tmp_path):
    master, executors = cluster
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=200, hours=1, seed=5, malformed=2))
    on_cluster = tmp_path / "wh-cluster"
    env = airflow_env(tmp_path / "home", landing, on_cluster,
                      AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": master}))
    migrate(env)
    assert _dag_test(env, "reprocess_failed_messages", "2026-11-21T01:00:00+00:00", {}) == "success"
    # the cycle ran as an application of the cluster, with one core from each worker
    apps = _master_state()["completedapps"]
    assert [(a["name"], a["cores"]) for a in apps] == [("reprocess-cycle", 2)], apps
    # its executors had the local filesystem's jar on their class path (spark.executor.defaultExtraClassPath)
    jar = local_fs_jar()
    assert jar is not None, "make venv builds the local filesystem's jar (needs javac)"
    launched = [line for f in sorted(executors.glob("app-*/*/stderr"))
                for line in f.read_text(errors="replace").splitlines() if "Spark Executor Command" in line]
    assert len(launched) == 2, launched
    assert all(f'"-cp" "{jar}:' in line for line in launched), launched
    # dag.test() makes a manual run: its data interval ends at the given time, the cycle's as-of
    cluster_run = Warehouse(on_cluster).latest().run("run-20261121T010000Z")
    assert cluster_run is not None
    assert all(cluster_run["summary"]["conservation"].values())
    assert cluster_run["summary"]["landing_parser"] == "jvm"  # the workers' executors ran it, from the same jar

    local = tmp_path / "wh-local"
    summary = run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(local), policies=load_config(None),
                                            as_of_ms=parse_instant("2026-11-21T01:00:00Z"), target=TARGET))
    assert cluster_run["summary"]["balance"] == summary["balance"]
    assert cluster_run["summary"]["dead_lettered"] == summary["dead_lettered"]
    ledger = _ledger(spark, on_cluster)
    assert ledger == _ledger(spark, local)
    assert len(ledger) == summary["messages_after"] > 150
