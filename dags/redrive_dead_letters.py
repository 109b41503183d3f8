"""
### Re-drive dead letters

Manual only. Moves the dead letters that match the form back into the retry ledger, due from now
on (spaced at the given rate), and writes an audit record (who, when, what, how many) to
`<warehouse>/redrive_audit/`. The scheduled cycles then re-drive them through their target.
A retry of the same run moves nothing again (the request is asked at the run's `run_after`); submitting the
form again is a new request (for draining the DLQ in batches of max messages).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, Param, dag, task

from reprocess.limits import MATCH_PATTERN, MAX_COUNT, MIN_RATE_PER_SECOND
from reprocess.spark_env import on_spark_connect, spark_submit_conf, spark_submit_env
from reprocess.submit import ReprocessSubmitOperator, fail_fast
from reprocess.uris import asset_uri

ROOT = Path(__file__).resolve().parents[1]
WAREHOUSE = os.environ.get("REPROCESS_WAREHOUSE", str(ROOT / "demo-out" / "warehouse"))
DLQ_ASSET = Asset(name="reprocess_dlq", uri=asset_uri(WAREHOUSE, "dlq"))
LEDGER_ASSET = Asset(name="reprocess_ledger", uri=asset_uri(WAREHOUSE, "ledger"))
BIN = Path(sys.executable).parent
SPARK_ENV = spark_submit_env(sys.executable, os.environ.get("PATH", "/usr/bin:/bin"))
ON_CONNECT = on_spark_connect()
DATE = r"^\d{4}-\d{2}-\d{2}$"


@dag(
    dag_id="redrive_dead_letters",
    schedule=None,
    start_date=datetime(2026, 11, 21),
    catchup=False,
    # not paused: it has no schedule, and the dead-letters page's form triggers it (paused, the page said
    # "triggered" and nothing moved until someone unpaused it, then every click's request ran)
    is_paused_upon_creation=False,
    max_active_runs=1,
    tags=["reprocess", "dlq", "operations"],
    doc_md=__doc__,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    params={
        "address_pattern": Param("#", type="string", minLength=1, pattern=MATCH_PATTERN,
                                 title="Address pattern",
                                 description="Original addresses to re-drive: '*' one word, '#' any words."),
        "date_from": Param(None, type=["null", "string"], pattern=DATE, title="Dead-lettered from (YYYY-MM-DD)"),
        "date_to": Param(None, type=["null", "string"], pattern=DATE, title="Dead-lettered to (YYYY-MM-DD)"),
        "reason_codes": Param([], type="array", title="Reason codes (empty: all)",
                              items={"type": "string",
                                     "enum": ["MAX_DELIVERIES_EXCEEDED", "NON_RETRYABLE", "NO_DEAD_LETTER_ADDRESS",
                                              "NO_POLICY"]},
                              examples=["MAX_DELIVERIES_EXCEEDED", "NON_RETRYABLE", "NO_DEAD_LETTER_ADDRESS",
                                        "NO_POLICY"]),
        "max_messages": Param(None, type=["null", "integer"], minimum=1, maximum=MAX_COUNT, title="Max messages"),
        "rate_per_second": Param(None, type=["null", "number"], minimum=MIN_RATE_PER_SECOND,
                                 title="Rate (messages per second)",
                                 description=f"Empty: as fast as the target takes them. At least "
                                             f"{MIN_RATE_PER_SECOND:.3g} (one a day)."),
        "reset_deliveries": Param(False, type="boolean", title="Reset deliveries to 0"),
    },
)
def redrive_dead_letters():
    @task(inlets=[DLQ_ASSET], multiple_outputs=True)
    def plan(params=None, dag_run=None) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from reprocess.errors import ConfigError
        from reprocess.orchestration import redrive_args, redrive_request, requester, to_iso

        try:
            # asked at the run's run_after (stored): a retry of this run is the same request, another run a new one
            args = redrive_args(WAREHOUSE, dict(params), to_iso(dag_run.run_after),
                                requester(getattr(dag_run, "triggering_user_name", None), dag_run.conf))
            req = redrive_request(args)
            req.validate()
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from exc
        return {"args": args, "request_id": req.request_id}

    @task(task_id="move_dead_letters", outlets=[LEDGER_ASSET, DLQ_ASSET])
    def move_on_connect(args: list[str]) -> None:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from reprocess.orchestration import run_on_connect

        fail_fast(run_on_connect, "redrive", args, SparkConnectHook().get_connection_url())

    planned = plan()
    move = move_on_connect(planned["args"]) if ON_CONNECT else ReprocessSubmitOperator(
        task_id="move_dead_letters",
        conn_id="spark_default",
        application=str(ROOT / "spark" / "entrypoints" / "redrive.py"),
        application_args=planned["args"],
        name="reprocess-redrive-{{ run_id }}",
        spark_binary=str(BIN / "spark-submit"),
        conf=spark_submit_conf(sys.executable),
        env_vars=SPARK_ENV,
        outlets=[LEDGER_ASSET, DLQ_ASSET],
    )

    @task
    def report(request_id: str) -> dict | None:
        from reprocess.orchestration import redrive_audit

        audit = redrive_audit(WAREHOUSE, request_id)
        if audit is None:  # the job succeeded, so it committed this request (or found it committed)
            raise RuntimeError(f"re-drive request {request_id} has no committed audit in {WAREHOUSE}")
        print(f"re-drive audit of {request_id}: {({k: v for k, v in audit.items() if k != 'messages'})}")
        return audit

    move >> report(planned["request_id"])


redrive_dead_letters()
