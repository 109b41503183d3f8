"""Large payloads due beside many small rows that are not: whether a cycle sizes its shuffles to the rows it rewrites.
Prints figures; asserts nothing.

Seeds a warehouse (with Spark, in this process) whose ledger holds ``--small`` small waiting rows due in a month, in one
bucket, and ``--large`` waiting rows of ``--payload-bytes`` of incompressible text (hex digits) due at the as-of, each
bucket in 8 files, as a cycle with 8 shuffle partitions writes them. Then runs ``reprocess run`` processes (this
checkout's code on ``PYTHONPATH``, so the bench of another worktree run with this venv's Python measures that
worktree's code) with an empty landing, each on a fresh copy of the seed, in a driver of ``--memory`` heap: each
rewrites only the large rows' files. Prints each run's wall time, how it ended (or the CLI's last word:
``out_of_memory`` when the heap was short) and its step log's ``locate`` line (``record_bytes=``,
``shuffle_partitions=``).

    .venv/bin/python bench/skewed_ledger.py --small 1000000 --large 2000 --memory 2g --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_runs import SPARK  # noqa: E402 - the bench folder first

HOUR = 3_600_000
AS_OF = "2026-11-21T04:00:00Z"
AS_OF_MS = int(datetime.fromisoformat(AS_OF).timestamp() * 1000)


def seed(root: Path, small: int, large: int, payload_bytes: int) -> None:
    """The seed warehouse at ``root``: ``small`` rows due in 30 days, ``large`` rows due now."""
    from pyspark.sql import functions as F

    from reprocess.ledger.model import LEDGER_COLUMNS, STATES, WAITING, bucket_column
    from reprocess.sparkutil import build_session
    from reprocess.storage.commit import Snapshot, Warehouse

    spark = build_session("skewed-ledger-seed")
    shutil.rmtree(root, ignore_errors=True)
    hashes = -(-payload_bytes // 64)  # sha2-256 gives 64 hex digits
    big = F.substring(F.concat_ws("", F.transform(F.sequence(F.lit(1), F.lit(hashes)),
                                                  lambda x: F.sha2(F.concat_ws("-", F.col("id"), x), 256))),
                      1, payload_bytes)
    is_large = F.col("id") < large
    df = spark.range(small + large).select(
        F.format_string("m-%010d", F.col("id")).alias("message_id"),
        F.lit("orders.created").alias("address"),
        F.when(is_large, big).otherwise(F.format_string('{"order": %d}', F.col("id"))).alias("payload"),
        F.create_map().cast("map<string,string>").alias("headers"),
        F.lit(None).cast("string").alias("extra"),
        F.lit("order-service").alias("consumer_group"),
        F.lit(None).cast("string").alias("ordering_key"),
        F.lit("orders.#").alias("policy"),
        F.lit("activemq").alias("profile"),
        F.lit(WAITING).alias("state"),
        F.lit(1).cast("long").alias("deliveries"),
        F.lit(AS_OF_MS - HOUR).cast("long").alias("first_failed_ms"),
        F.lit(AS_OF_MS - HOUR).cast("long").alias("last_failed_ms"),
        F.when(is_large, F.lit(AS_OF_MS - 60_000)).otherwise(F.lit(AS_OF_MS + 30 * 24 * HOUR))
        .cast("long").alias("next_attempt_ms"),
        F.lit("TimeoutError").alias("last_error_class"),
        F.lit("downstream timed out after 30s").alias("last_error_message"),
        F.array(F.struct(F.lit(AS_OF_MS - HOUR).cast("long").alias("failed_ms"),
                         F.lit(1).cast("long").alias("delivery"), F.lit("TimeoutError").alias("error_class"),
                         F.lit("downstream timed out after 30s").alias("error_message"),
                         F.col("id").alias("fp"))).alias("error_history"),
        F.lit(None).cast("string").alias("reason_code"),
        F.lit(None).cast("string").alias("dead_letter_address"),
        F.lit(None).cast("long").alias("terminal_ms"),
        F.lit("seed").alias("updated_run"),
        F.lit(None).cast("long").alias("released_deliveries"),
    )
    df = df.withColumn("bucket", bucket_column(F.col("state"), F.col("next_attempt_ms"), F.col("terminal_ms")))
    stage = root / "_seed"
    df.select(*LEDGER_COLUMNS).repartition(8, "bucket", "message_id").write.partitionBy("bucket") \
        .option("parquet.page.size.row.check.min", "1").parquet(str(stage))
    spark.stop()
    wh = Warehouse(root)
    files = wh.publish("seed", "ledger", stage)
    shutil.rmtree(stage)
    states = {s: 0 for s in STATES}
    states[WAITING] = small + large
    snap = Snapshot(as_of_ms=AS_OF_MS - HOUR)
    snap.files["ledger"] = files
    snap.runs.append({"run_id": "seed", "as_of_ms": AS_OF_MS - HOUR, "summary": {"states": states}})
    wh.commit(Snapshot(), snap)


def run(pristine: Path, work: Path, memory: str) -> str:
    wh = work / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.copytree(pristine, wh)
    landing = work / "empty-landing"
    landing.mkdir(exist_ok=True)
    path = os.pathsep.join(p for p in (str(SPARK), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "REPROCESS_DRIVER_MEMORY": memory, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "reprocess.cli", "run", "--landing", str(landing), "--warehouse", str(wh),
           "--as-of", AS_OF, "--format", "json"]
    t = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - t
    shutil.rmtree(wh, ignore_errors=True)
    locate = [line.split("step=locate ", 1)[1] for line in done.stderr.splitlines() if "step=locate " in line]
    if done.returncode:
        said = [line for line in done.stderr.splitlines() if line.startswith("reprocess: ")] \
            or done.stderr.strip().splitlines()[-1:]
        outcome = f"exit {done.returncode}: {said[-1][:200] if said else ''}"
    else:
        summary = json.loads(done.stdout)
        steps = " ".join(f"{k} {v:.1f}" for k, v in summary["step_seconds"].items())
        outcome = f"due {summary['due']}, rescheduled {summary['rescheduled']}; steps s: {steps}"
    return f"{elapsed:6.1f} s  {outcome}\n         locate: {locate[-1] if locate else '(none)'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=1_000_000, help="small rows due in a month (default 1000000)")
    parser.add_argument("--large", type=int, default=2000, help="large rows due now (default 2000)")
    parser.add_argument("--payload-bytes", type=int, default=1_000_000, help="each large payload (default 1000000)")
    parser.add_argument("--memory", default="2g", help="the runs' driver heap (default 2g, the platform's default)")
    parser.add_argument("--runs", type=int, default=1, help="runs, each on a fresh copy of the seed (default 1)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench/skewed-ledger",
                        help="scratch directory; the seed is kept for the next run (default "
                             "/tmp/reprocess-bench/skewed-ledger)")
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    pristine = work / f"seed-{args.small}-{args.large}x{args.payload_bytes}"
    if not (pristine / "_snapshots").is_dir():
        t = time.monotonic()
        seed(pristine, args.small, args.large, args.payload_bytes)
        print(f"seeded {pristine} in {time.monotonic() - t:.1f} s", flush=True)
    size = sum(f.stat().st_size for f in (pristine / "ledger").rglob("*.parquet"))
    print(f"code: {SPARK}; ledger {size / 2**20:.0f} MiB: {args.small} small rows due in a month, {args.large} of "
          f"{args.payload_bytes} bytes due now; {args.memory} heap", flush=True)
    for i in range(args.runs):
        print(f"  run {i + 1}: {run(pristine, work, args.memory)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
