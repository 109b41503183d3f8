"""
### Reprocess failed messages

Every interval (default 15 minutes) this DAG runs one **reprocess cycle as of the data interval
end**: it ingests the landing files consumers wrote, merges the failures into the retry ledger,
re-drives every message whose retry time has come, reschedules or dead-letters the ones that fail
again, and commits everything atomically. Re-runs and backfills of an interval compute the same
result.

Trigger it by hand with the form to re-drive now, for some addresses only, as of another time,
through another target, or as a dry run. Settings come from the environment:
`REPROCESS_LANDING`, `REPROCESS_WAREHOUSE`, `REPROCESS_CONFIG` (policy file; embedded default),
`REPROCESS_TARGET` (default `outbox`), `REPROCESS_INTERVAL_MINUTES` (default 15),
`REPROCESS_START_DATE` / `REPROCESS_END_DATE` (ISO-8601; the schedule's bounds), `REPROCESS_SPARK`
(`submit`, the default: a fresh driver per run through `spark_default`; `connect`: a client of the long-lived
Spark Connect server of `spark_connect_default`, see `reprocess connect-server`).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

from airflow.sdk import Asset, DeltaDataIntervalTimetable, Param, dag, task

from reprocess.limits import MATCH_PATTERN
from reprocess.spark_env import (
    cycle_schedule,
    mask_target_password,
    on_spark_connect,
    spark_submit_conf,
    spark_submit_env,
)
from reprocess.submit import ReprocessSubmitOperator, fail_fast
from reprocess.uris import asset_uri

ROOT = Path(__file__).resolve().parents[1]
LANDING = os.environ.get("REPROCESS_LANDING", str(ROOT / "demo-out" / "landing"))
WAREHOUSE = os.environ.get("REPROCESS_WAREHOUSE", str(ROOT / "demo-out" / "warehouse"))
CONFIG = os.environ.get("REPROCESS_CONFIG") or None
TARGET = os.environ.get("REPROCESS_TARGET") or "outbox"  # set but empty too: Spark Connect's path passed --target ""
INTERVAL, START, END = cycle_schedule()  # on the interval's grid from the epoch, as Airflow's skips are
LANDING_ASSET = Asset(name="reprocess_landing", uri=asset_uri(LANDING))
LEDGER_ASSET = Asset(name="reprocess_ledger", uri=asset_uri(WAREHOUSE, "ledger"))
DLQ_ASSET = Asset(name="reprocess_dlq", uri=asset_uri(WAREHOUSE, "dlq"))
ISO_INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$"  # +01, +0100, +01:00
BIN = Path(sys.executable).parent
SPARK_ENV = spark_submit_env(sys.executable, os.environ.get("PATH", "/usr/bin:/bin"))
ON_CONNECT = on_spark_connect()
mask_target_password(TARGET)  # parsed in every task's process before it runs


@dag(
    dag_id="reprocess_failed_messages",
    schedule=DeltaDataIntervalTimetable(INTERVAL),
    start_date=START,
    end_date=END,
    catchup=False,
    max_active_runs=1,
    tags=["reprocess", "retry", "dlq"],
    doc_md=__doc__,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "address_filter": Param(None, type=["null", "string"], pattern=MATCH_PATTERN,
                                title="Address filter", description="Only re-drive due messages whose address "
                                "matches this wildcard: words separated by '.', '*' one word, '#' any words."),
        "as_of": Param(None, type=["null", "string"], pattern=ISO_INSTANT, title="As-of override",
                       description="Run as of this instant instead of the data interval end, ISO-8601 with an "
                       "offset, e.g. 2026-11-21T10:15:00Z."),
        "dry_run": Param(False, type="boolean", title="Dry run", description="Report only; re-drive nothing."),
        "target": Param(None, type=["null", "string"],
                        pattern=r"^(outbox|python:[\w.]+:\w+|amqp://[^\s$]+|stomp://[^\s$]+)$",
                        title="Target override", description="outbox, python:module:function (one the deployment "
                        "allows: REPROCESS_PYTHON_OVERRIDES), amqp://... or stomp://..., without a password or ${VAR} "
                        "(a target with credentials is the deployment's: REPROCESS_TARGET or a policy's)"),
    },
)
def reprocess_failed_messages():
    @task
    def resolve_as_of(params=None, data_interval_start=None, data_interval_end=None, dag_run=None) -> str:
        from reprocess.orchestration import resolve_as_of as resolve

        # a backfill counts from its --from-date: on the grid of its own interval (a scheduled run cleared into a
        # backfill keeps the interval it had, which REPROCESS_INTERVAL_MINUTES may have changed since)
        backfill = None
        if dag_run.run_type == "backfill" and data_interval_start is not None and data_interval_end is not None:
            backfill = data_interval_end - data_interval_start
        return fail_fast(resolve, params["as_of"], data_interval_end, dag_run.run_after, backfill,
                         dag_run.run_type == "manual")

    @task(inlets=[LANDING_ASSET])
    def find_new_landing(as_of: str) -> dict:
        from reprocess.orchestration import find_new_landing as find

        return fail_fast(find, LANDING, WAREHOUSE, as_of)

    @task
    def validate_landing(found: dict, params=None) -> list[str]:
        from reprocess.orchestration import (
            check_address_filter,
            check_config,
            check_landing_suite,
            check_target_override,
            cycle_args,
        )

        fail_fast(check_config, CONFIG)
        print("expectation suites:", fail_fast(check_landing_suite))
        fail_fast(check_address_filter, params["address_filter"])
        fail_fast(check_target_override, params["target"])
        # the form's target only: the deployment's (which may hold a password) is added by run_cycle, outside XCom
        return cycle_args(LANDING, WAREHOUSE, found["as_of"], CONFIG, params["target"], params["address_filter"],
                          params["dry_run"])

    @task(task_id="run_cycle", outlets=[LEDGER_ASSET, DLQ_ASSET])
    def run_cycle_on_connect(args: list[str]) -> None:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from reprocess.orchestration import run_on_connect, with_target

        fail_fast(run_on_connect, "run", with_target(args, TARGET), SparkConnectHook().get_connection_url())

    args = validate_landing(find_new_landing(resolve_as_of()))
    run_cycle = run_cycle_on_connect(args) if ON_CONNECT else ReprocessSubmitOperator(
        task_id="run_cycle",
        conn_id="spark_default",
        application=str(ROOT / "spark" / "entrypoints" / "cycle.py"),
        application_args=args,
        target=TARGET,
        name="reprocess-cycle-{{ run_id }}",
        spark_binary=str(BIN / "spark-submit"),
        conf=spark_submit_conf(sys.executable),
        env_vars=SPARK_ENV,
        outlets=[LEDGER_ASSET, DLQ_ASSET],
    )

    @task
    def validate_outputs(as_of: str, params=None) -> dict:
        from reprocess.orchestration import check_outputs, read_summary

        return fail_fast(check_outputs, read_summary(WAREHOUSE, as_of), params["dry_run"],
                         f"as of {as_of} in {WAREHOUSE}")

    @task
    def publish_summary(as_of: str, params=None, dag_run=None) -> dict | None:
        from reprocess.orchestration import read_summary, set_run_note, summary_markdown

        summary = read_summary(WAREHOUSE, as_of)
        # told if a run asked otherwise committed first; no target anywhere: the job's default, outbox
        asked = (params["address_filter"], params["target"] or TARGET or "outbox")
        note = summary_markdown(summary, as_of, params["dry_run"], asked)
        print(note)  # the task log; the summary itself is this task's XCom
        set_run_note(dag_run.dag_id, dag_run.run_id, note)  # Markdown note on the run (needs the REST API)
        return summary

    as_of = "{{ ti.xcom_pull(task_ids='resolve_as_of') }}"
    checked = validate_outputs(as_of)
    run_cycle >> checked >> publish_summary(as_of)


reprocess_failed_messages()
