"""``make demo``: the main job end to end through Airflow, on embedded defaults (SQLite, local Spark).

1. previews the retry schedules of the embedded policy file;
2. generates 2,000 failed messages of landing data into demo-out/landing;
3. runs the scheduled DAG ``reprocess_failed_messages`` over several intervals with
   ``airflow dags test`` (each run spark-submits the cycle as of its interval end);
4. when RabbitMQ is reachable, a closed loop: a consumer fails some messages of two queues, lands its
   failures, and cycles re-drive them to the queues over AMQP until each is consumed or dead-lettered;
5. prints the run summaries and where to look; ``make airflow`` then shows the same runs in the UI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import airflow_local  # noqa: E402

from reprocess.cli import main as cli  # noqa: E402

AS_OFS = ("2026-11-21T01:00:00+00:00", "2026-11-21T02:00:00+00:00", "2026-11-21T03:00:00+00:00")
TARGET = "python:reprocess.targets.examples:flaky"


def banner(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def main() -> int:
    out = ROOT / "demo-out"
    landing, warehouse, home = out / "landing", out / "warehouse", ROOT / ".airflow"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)

    banner("1. retry schedules of the embedded policy file (reprocess schedule)")
    cli(["schedule", "--address", "orders.created", "--address", "billing.invoice", "--address", "payments.card",
         "--message-id", "demo-1", "--deliveries", "8"])

    banner("2. landing data: 2000 failed messages over 3 hours (reprocess generate)")
    cli(["generate", "--out", str(landing), "--messages", "2000", "--hours", "3"])

    banner("3. Airflow: the scheduled DAG over several intervals (airflow dags test, SQLite, local Spark)")
    env = airflow_local.environment(home, landing, warehouse, target=TARGET)
    airflow_local.migrate(env)
    for as_of in AS_OFS:
        print(f"-- reprocess_failed_messages, interval ending {as_of} ...", flush=True)
        proc = subprocess.run([str(airflow_local.BIN / "airflow"), "dags", "test", "reprocess_failed_messages",
                               as_of], env=env, capture_output=True, text=True)
        run_id = "run-" + as_of[:19].replace("-", "").replace(":", "") + "Z"
        path = warehouse / "runs" / run_id / "summary.json"
        if proc.returncode != 0 or not path.is_file():
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
            return proc.returncode or 1
        summary = json.loads(path.read_text())
        sys.stdout.write(_render(summary))

    loop = _closed_loop()
    if loop:
        return loop

    banner("where to look")
    print(f"  run summaries  {warehouse}/runs/<run_id>/summary.json (also the XCom of publish_summary)")
    print(f"  GX Data Docs   {warehouse}/runs/<run_id>/data_docs/index.html")
    print(f"  dead letters   {warehouse}/dlq/address=<dead-letter address>/dt=<date>/")
    print(f"  quarantine     {warehouse}/quarantine/dt=<date>/ (bad landing records with file, line, reason)")
    print(f"  retry ledger   {warehouse}/ledger/ (read through the latest {warehouse}/_snapshots/*.json)")
    print("  the UI         make airflow   (http://localhost:8080, login admin and the password it prints:")
    print("                                 the runs above, the trigger form, Browse > Dead letters)")
    return 0


def _closed_loop() -> int:
    """When RabbitMQ is reachable: a consumer fails some messages, cycles re-drive them to its queues."""
    import socket

    with socket.socket() as sock:
        sock.settimeout(1)
        if sock.connect_ex(("127.0.0.1", 5672)) != 0:
            print("\n(RabbitMQ is not reachable on 127.0.0.1:5672: skipping the closed loop through a broker)")
            return 0
    banner("closed loop through RabbitMQ (python -m reprocess.loop): consume, fail, land, re-drive")
    return subprocess.run([sys.executable, "-m", "reprocess.loop", "--out", str(ROOT / "demo-out" / "loop")],
                          check=False).returncode


def _render(s: dict) -> str:
    from reprocess.cli import render_summary

    return render_summary(s)


if __name__ == "__main__":
    sys.exit(main())
