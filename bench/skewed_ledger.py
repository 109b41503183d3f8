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
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_runs import SPARK, outcome, reprocess_process  # noqa: E402 - the bench folder first
from seed_ledger import HOUR, commit_seed, waiting_rows  # noqa: E402

AS_OF = "2026-11-21T04:00:00Z"
AS_OF_MS = int(datetime.fromisoformat(AS_OF).timestamp() * 1000)


def seed(root: Path, small: int, large: int, payload_bytes: int) -> None:
    """The seed warehouse at ``root``: ``small`` rows due in 30 days, ``large`` rows due now."""
    from pyspark.sql import functions as F

    from reprocess.sparkutil import build_session

    spark = build_session("skewed-ledger-seed")
    shutil.rmtree(root, ignore_errors=True)
    hashes = -(-payload_bytes // 64)  # sha2-256 gives 64 hex digits
    big = F.substring(F.concat_ws("", F.transform(F.sequence(F.lit(1), F.lit(hashes)),
                                                  lambda x: F.sha2(F.concat_ws("-", F.col("id"), x), 256))),
                      1, payload_bytes)
    is_large = F.col("id") < large
    df = waiting_rows(spark, small + large, AS_OF_MS,
                      F.when(is_large, big).otherwise(F.format_string('{"order": %d}', F.col("id"))),
                      F.when(is_large, F.lit(AS_OF_MS - 60_000)).otherwise(F.lit(AS_OF_MS + 30 * 24 * HOUR)))
    stage = root / "_seed"
    df.repartition(8, "bucket", "message_id").write.partitionBy("bucket") \
        .option("parquet.page.size.row.check.min", "1").parquet(str(stage))
    spark.stop()
    commit_seed(root, stage, small + large, AS_OF_MS)


def run(pristine: Path, work: Path, memory: str) -> str:
    wh = work / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.copytree(pristine, wh)
    landing = work / "empty-landing"
    landing.mkdir(exist_ok=True)
    elapsed, done = reprocess_process(landing, wh, memory, AS_OF)
    locate = [line.split("step=locate ", 1)[1] for line in done.stderr.splitlines() if "step=locate " in line]
    summary = outcome(done)
    if isinstance(summary, dict):
        steps = " ".join(f"{k} {v:.1f}" for k, v in summary["step_seconds"].items())
        summary = f"due {summary['due']}, rescheduled {summary['rescheduled']}; steps s: {steps}"
    return f"{elapsed:6.1f} s  {summary}\n         locate: {locate[-1] if locate else '(none)'}"


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
