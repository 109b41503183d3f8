"""DAG integrity (DagBag), a structure snapshot, the form's schema, the dead-letters page, and both DAGs through
dag.test() with local Spark on a landing URI and a warehouse URI (the cycle DAG also runs through dag.test() on a
standalone cluster in test_cluster.py and on Spark Connect in test_connect.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from airflow_env import airflow_env, migrate, python, run
from reprocess.cli import load_config, parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.landing.generate import GenerateOptions, write_landing

pytestmark = pytest.mark.airflow

SNAPSHOT = Path(__file__).parent / "snapshots" / "dags.json"

DESCRIBE = r"""
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in sorted(bag.dags.items()):
    out["dags"][dag_id] = {
        "tags": sorted(dag.tags), "max_active_runs": dag.max_active_runs,
        "schedule": type(dag.timetable).__name__, "params": sorted(dag.params.keys()),
        "tasks": {t.task_id: {"operator": type(t).__name__, "retries": t.retries,
                              "downstream": sorted(t.downstream_task_ids)} for t in dag.tasks},
    }
print("JSON" + json.dumps(out, sort_keys=True))
"""


@pytest.fixture(scope="module")
def af(tmp_path_factory):
    base = tmp_path_factory.mktemp("airflow")
    landing, warehouse = base / "landing", base / "warehouse"
    write_landing(GenerateOptions(out=landing, messages=150, hours=1, seed=3, malformed=2))
    env = airflow_env(base / "home", landing, warehouse)
    migrate(env)
    return env, landing, warehouse


def _describe(env) -> dict:
    proc = python(DESCRIBE, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("JSON")][-1]
    return json.loads(line[4:])


@pytest.fixture(scope="module")
def described(af) -> dict:
    """The DagBag of the project's environment, parsed once for the tests that read it."""
    return _describe(af[0])


def test_dagbag_imports_cleanly_with_tags_and_retries(described):
    desc = described
    assert desc["import_errors"] == {}
    assert set(desc["dags"]) == {"reprocess_failed_messages", "redrive_dead_letters"}
    for dag in desc["dags"].values():
        assert "reprocess" in dag["tags"]
        assert dag["max_active_runs"] == 1
        assert all(t["retries"] >= 1 for t in dag["tasks"].values())


def test_a_mistyped_reprocess_spark_breaks_both_dags_with_a_message_naming_it(af):
    env, _, _ = af
    desc = _describe({**env, "REPROCESS_SPARK": "conect"})
    assert desc["dags"] == {}
    assert {Path(f).name for f in desc["import_errors"]} == {"reprocess_failed_messages.py", "redrive_dead_letters.py"}
    for error in desc["import_errors"].values():
        assert "REPROCESS_SPARK='conect' is not one of submit, connect" in error


CONNECT_FAILURES = r"""
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import AirflowFailException

import reprocess.orchestration as orchestration
from reprocess.errors import FINAL_ERRORS

bag = DagBag()
assert not bag.import_errors, bag.import_errors
for dag_id, task_id in (("reprocess_failed_messages", "run_cycle"), ("redrive_dead_letters", "move_dead_letters")):
    task = bag.get_dag(dag_id).get_task(task_id)
    for error in (*FINAL_ERRORS, RuntimeError):
        def stop(command, args, remote, error=error):
            raise error("stopped")

        orchestration.run_on_connect = stop  # what the job's exit code raises (tests/test_orchestration.py)
        try:
            task.python_callable([])
        except AirflowFailException:
            print("FAILED", task_id, error.__name__, "final")
        except RuntimeError:
            print("FAILED", task_id, error.__name__, "retried")
"""


def test_the_connect_tasks_of_both_dags_fail_without_retries_on_what_no_retry_can_change(af):
    """With REPROCESS_SPARK=connect the Spark task is a Python task around run_on_connect: the errors of FINAL_ERRORS
    fail it at once in both DAGs, as the spark-submit operator's final exits do (the re-drive's caught only a bad
    option and a damaged warehouse, so a failed GX suite or books that do not balance were retried twice); any other
    failure is left to the task's retries."""
    from reprocess.errors import FINAL_ERRORS

    env = {**af[0], "REPROCESS_SPARK": "connect", "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
        {"conn_type": "spark_connect", "host": "localhost", "port": 15002})}
    proc = python(CONNECT_FAILURES, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stdout.splitlines() if x.startswith("FAILED ")]
    expected = [f"FAILED {task} {error.__name__} final" for task in ("run_cycle", "move_dead_letters")
                for error in FINAL_ERRORS]
    assert [x for x in lines if x.endswith(" final")] == expected
    assert [x for x in lines if not x.endswith(" final")] == [
        "FAILED run_cycle RuntimeError retried", "FAILED move_dead_letters RuntimeError retried"]


def test_dag_structure_matches_the_snapshot(described):
    desc = described["dags"]
    if os.environ.get("UPDATE_SNAPSHOTS") == "1" and desc != json.loads(SNAPSHOT.read_text()):
        # after a deliberate change: UPDATE_SNAPSHOTS=1 make test rewrites it, and still fails this once
        SNAPSHOT.write_text(json.dumps(desc, indent=2, sort_keys=True) + "\n")
        pytest.fail(f"{SNAPSHOT} rewritten: review its diff, then run the tests again without UPDATE_SNAPSHOTS")
    assert desc == json.loads(SNAPSHOT.read_text()), "DAG structure changed; review and UPDATE_SNAPSHOTS=1"


DAG_TEST = r"""
import json, sys
from datetime import datetime, timezone
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()
dag = bag.get_dag(sys.argv[1])
run = dag.test(logical_date=datetime.fromisoformat(sys.argv[2]), run_conf=json.loads(sys.argv[3]))
print("STATE", run.state)
"""


def _dag_test(env, dag_id: str, logical_date: str, conf: dict) -> str:
    proc = run([sys.executable, "-c", DAG_TEST, dag_id, logical_date, json.dumps(conf)], env)
    states = [x.split()[-1] for x in proc.stdout.splitlines() if x.startswith("STATE")]
    assert states, proc.stdout[-3000:] + proc.stderr[-5000:]
    return states[-1]


@pytest.fixture(scope="module")
def dead_letters(af, spark):
    """The module's warehouse after one cycle in-process, with dead letters in it, for the dead-letters page (the
    cycle DAG itself runs below, in test_cluster and in the e2e tests)."""
    env, landing, warehouse = af
    summary = run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(warehouse),
                                            policies=load_config(None),
                                            as_of_ms=parse_instant("2026-11-21T01:00:00Z"),
                                            target=env["REPROCESS_TARGET"]))
    assert summary["dead_lettered"]["total"] > 0
    return af


def test_invalid_form_values_are_rejected_by_the_params_schema(af):
    env, _, _ = af
    code = r"""
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamsDict
dag = DagBag().get_dag("reprocess_failed_messages")
bad = [{"as_of": "yesterday"}, {"address_filter": "orders..x"}, {"target": "ftp://x"}, {"dry_run": "maybe"},
       {"target": "amqp://x:${REPROCESS_AIRFLOW_PASSWORD}@elsewhere/"}, {"address_filter": "orders.cre*"}]
for conf in bad:
    (key, value), = conf.items()
    try:
        dag.params.get_param(key).resolve(value)
        print("ACCEPTED", conf)
    except Exception as exc:
        print("REJECTED", type(exc).__name__)
good = {"as_of": "2026-11-21T10:15:00Z", "address_filter": "orders.#", "target": "python:m.sub:fn", "dry_run": True}
for key, value in good.items():
    dag.params.get_param(key).resolve(value)
for value in ("2026-11-21T11:15:00+0100", "2026-11-21T11:15+01"):  # offsets the job parses: the form takes them
    dag.params.get_param("as_of").resolve(value)
print("GOOD OK")
redrive = DagBag().get_dag("redrive_dead_letters").params
for value in ("orders#1", "orders..x"):  # a wildcard inside a word: the job refuses it, so the form does
    try:
        redrive.get_param("address_pattern").resolve(value)
        print("ACCEPTED", value)
    except Exception as exc:
        print("REJECTED", type(exc).__name__)
redrive.get_param("address_pattern").resolve("orders.*.#")
rate = redrive.get_param("rate_per_second")
for value in (1e-6, 0, -1):  # below one a day: the form says so, not the plan task after the submit
    try:
        rate.resolve(value)
        print("ACCEPTED", value)
    except Exception as exc:
        print("REJECTED", type(exc).__name__)
rate.resolve(1 / 86_400)
rate.resolve(None)
most = redrive.get_param("max_messages")
try:  # past the job's bound: the plan task's argparse exited (SystemExit, retried), the form passed it
    most.resolve(2**62 + 1)
    print("ACCEPTED", 2**62 + 1)
except Exception as exc:
    print("REJECTED", type(exc).__name__)
most.resolve(2**62)
"""
    proc = python(code, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("REJECTED") == 12, proc.stdout
    assert "GOOD OK" in proc.stdout


PLUGIN = r"""
import json
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
client = TestClient(create_app())
anon = client.get("/reprocess/api/stats")
token = client.post("/auth/token", json={"username": "admin", "password": "admin"}).json()["access_token"]
auth = {"Authorization": f"Bearer {token}"}
stats = client.get("/reprocess/api/stats", headers=auth)
page = client.get("/reprocess/", headers=auth)
cookie = client.get("/reprocess/", cookies={"_token": token})
plugins = client.get("/api/v2/plugins", headers=auth).json()
print("OUT" + json.dumps({"anon": anon.status_code, "anon_page": client.get("/reprocess/").status_code,
      "stats": stats.status_code, "body": stats.json(), "page": page.status_code, "html": page.text,
      "cookie": cookie.status_code, "plugins": [p["name"] for p in plugins["plugins"]]}))
# the same app on a warehouse with a damaged file
import os, sys
plugin = next(m for name, m in sys.modules.items() if name.endswith("reprocess_plugin"))
wild = plugin._page({**stats.json(), "by_address": {"orders.*.eu": {"NO_POLICY": 1}, "orders.eu": {"NO_POLICY": 2}}})
print("WILD" + json.dumps(wild))
many = {**stats.json(), "by_address": {f"a{i:03d}.x": {"NO_POLICY": 1} for i in range(130)},
        "by_day": {f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}": {"NO_POLICY": 1000 if i == 0 else 2}
                   for i in range(70)}}
print("MANY" + json.dumps(plugin._page(many)))
print("OPEN" + json.dumps([client.get(f"/reprocess/{p}").status_code for p in ("docs", "redoc", "openapi.json")]))
plugin.WAREHOUSE = os.environ["DAMAGED_WAREHOUSE"]
bad_stats, bad_page = client.get("/reprocess/api/stats", headers=auth), client.get("/reprocess/", headers=auth)
print("BAD" + json.dumps({"stats": bad_stats.status_code, "body": bad_stats.json(), "page": bad_page.status_code,
      "html": bad_page.text}))
"""


def test_dead_letters_page_requires_login_and_shows_counts(dead_letters, tmp_path):
    """The page and its JSON behind Airflow's login; on a warehouse with a damaged file, both name the file."""
    import shutil

    from reprocess.storage.commit import Warehouse

    env, _, warehouse = dead_letters
    pw = tmp_path / "passwords.json"
    pw.write_text(json.dumps({"admin": "admin"}))
    damaged = tmp_path / "damaged"
    shutil.copytree(warehouse, damaged)
    garbled = Warehouse(damaged).live_files("dlq")[0]
    Path(garbled).write_bytes(b"not parquet")
    env = {**env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(pw), "DAMAGED_WAREHOUSE": str(damaged)}
    proc = python(PLUGIN, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads([x for x in proc.stdout.splitlines() if x.startswith("OUT")][-1][3:])
    assert out["anon"] == 401
    assert out["anon_page"] == 401
    assert out["stats"] == 200
    assert out["page"] == 200
    assert out["cookie"] == 200
    assert "reprocess" in out["plugins"]
    body = out["body"]
    assert body["total"] > 0
    assert set(body["by_day"])
    assert body["top_error_classes"]
    assert body["latest_runs"]
    assert sum(sum(c.values()) for c in body["by_address"].values()) == body["total"]
    assert "<svg" in out["html"]
    assert "Re-drive" in out["html"]
    assert "redrive_dead_letters" in out["html"]
    # an address holding a wildcard character is pre-filled with a warning that the pattern matches more
    wild = json.loads([x for x in proc.stdout.splitlines() if x.startswith("WILD")][-1][4:])
    assert 'data-address="orders.*.eu" data-wild="1">' in wild
    assert 'data-address="orders.eu">' in wild
    assert 'id="redrive-wild" hidden' in wild
    assert "which a pattern reads as a wildcard" in wild
    assert 'name="rate_per_second" type="number" min="1.1574074074074073e-05"' in wild
    # a large DLQ: the newest 60 days drawn and the 100 addresses with most dead letters listed, the rest counted
    many = json.loads([x for x in proc.stdout.splitlines() if x.startswith("MANY")][-1][4:])
    assert many.count('class="redrive"') == 100
    assert "30 dead letters of 30 more addresses are not listed" in many
    assert many.count("<rect ") == 60
    assert "1018 dead letters of 10 earlier days are not drawn" in many
    assert many.count('height="200"') == 60  # scaled to the days drawn: the older spike does not flatten them
    # FastAPI's own pages were served without the login the plugin's pages require
    assert json.loads([x for x in proc.stdout.splitlines() if x.startswith("OPEN")][-1][4:]) == [404, 404, 404]
    bad = json.loads([x for x in proc.stdout.splitlines() if x.startswith("BAD")][-1][3:])
    assert bad["stats"] == bad["page"] == 500
    assert bad["body"]["error"] == "damaged"
    assert f"lists {garbled}, which is not a readable Parquet file" in bad["body"]["detail"]
    assert "The warehouse cannot be read" in bad["html"]
    assert garbled in bad["html"]


@pytest.mark.spark
@pytest.mark.integration
def test_both_dags_on_a_landing_uri_and_a_warehouse_uri_with_the_deployments_spark_conf(af, spark, tmp_path):
    """Landing and warehouse on object storage, the way a deployment sets them up: ``REPROCESS_LANDING`` and
    ``REPROCESS_WAREHOUSE`` are URIs and the filesystems' settings sit in the ``spark-defaults.conf`` of
    ``SPARK_CONF_DIR``, which the DAGs' spark-submit reads; no code changes. The landing is a ``viewfs://`` mount
    table (on a bucket: the endpoint and credentials). The warehouse is ``cfile:``, the tests' object store (the
    local disk with conditional creates and ETags, tests/test_object_store.py): the spark-submit jobs commit under a
    lease, and the tasks around them (``find_new_landing``, ``check_outputs``, the re-drive's ``report``) read the
    warehouse through pyarrow, as they read a bucket (tests/test_s3_readers.py). Then the re-drive DAG moves the
    dead letters of one reason and one address pattern back. (The driver's default heap without a deployment's
    setting: the e2e backfill.)"""
    from reprocess.storage.commit import Warehouse
    from reprocess.storage.read import read_dataset
    from warehouse_state import CFILE

    _, landing, _ = af
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.hadoop.fs.viewfs.mounttable.dagtest.link./landing {landing.resolve().as_uri()}\n"
        f"spark.hadoop.fs.cfile.impl {CFILE}\n"
        "spark.driver.memory 1536m\n")
    root = tmp_path / "warehouse"
    env = airflow_env(tmp_path / "home", landing, root, REPROCESS_LANDING="viewfs://dagtest/landing",
                      REPROCESS_WAREHOUSE=f"cfile://{root}", SPARK_CONF_DIR=str(conf_dir))
    for name in ("REPROCESS_DRIVER_MEMORY", "SPARK_DRIVER_MEMORY"):
        env.pop(name, None)
    migrate(env)
    assert _dag_test(env, "reprocess_failed_messages", "2026-11-21T01:00:00+00:00", {}) == "success"
    snap = Warehouse(root).latest()
    summary = snap.run("run-20261121T010000Z")["summary"]
    assert summary["driver_memory"] == "1536m"  # the deployment sizes the driver: the DAG does not override it
    assert all(summary["conservation"].values())
    assert summary["landing_files"] == len(list(landing.rglob("*.jsonl")))
    assert summary["ingested"] > 100
    assert summary["quarantined"] == 2  # the generator's two malformed lines
    files = {r.source_file for r in read_dataset(spark, str(root), "quarantine").collect()}
    assert files
    assert all(f.startswith("viewfs://dagtest/landing/dt=2026-11-21/hour=00/") for f in files), files
    assert not (root / "_lock").exists()  # a lease, released (the local flock's file is never deleted)
    # what the re-drive below must move: the dead letters of one reason under orders.#
    chosen = [r for r in read_dataset(spark, str(root), "dlq").select("original_address", "reason_code").collect()
              if r.reason_code == "NON_RETRYABLE" and (r.original_address + ".").startswith("orders.")]
    assert chosen
    conf = {"address_pattern": "orders.#", "reason_codes": ["NON_RETRYABLE"], "reset_deliveries": True}
    assert _dag_test(env, "redrive_dead_letters", "2026-11-21T01:05:00+00:00", conf) == "success"
    audits = list((root / "redrive_audit").glob("*.json"))
    assert len(audits) == 1
    audit = json.loads(audits[0].read_text())
    assert audit["request"]["reason_codes"] == ["NON_RETRYABLE"]
    assert audit["moved"] == len(chosen)
    assert Warehouse(root).latest().runs[-1]["kind"] == "redrive"
    assert not (root / "_lock").exists()
