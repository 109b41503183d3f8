"""GX overhead in a cycle (issue [4/7]): the share of a cycle's wall time spent in the validation gate.

Generates N failed messages (``reprocess generate``), runs one cycle as of the end of the data with the
GX gate on, and reports the cycle's wall time, its step timings and the ``validate`` step's share; then,
on a fresh warehouse over the same landing data, the same cycle with the gate off, for the difference.
Prints figures; asserts nothing. Example::

    .venv/bin/python bench/gx_overhead.py --messages 1000000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _cycle(spark, landing: Path, warehouse: Path, as_of_ms: int, validate: bool) -> tuple[float, dict]:
    from reprocess.cli import load_config
    from reprocess.cycle.run import CycleOptions, run_cycle

    shutil.rmtree(warehouse, ignore_errors=True)
    opts = CycleOptions(landing=str(landing), warehouse=str(warehouse), policies=load_config(None),
                        as_of_ms=as_of_ms, target="python:reprocess.targets.examples:flaky", validate=validate)
    t = time.monotonic()
    summary = run_cycle(spark, opts)
    return time.monotonic() - t, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages to generate (default 1000000)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench-gx", help="scratch directory (wiped)")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--keep", action="store_true", help="reuse landing data already in --workdir")
    parser.add_argument("--compare", action="store_true", help="also run the cycle with the gate off (twice the time)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from reprocess.landing.generate import GenerateOptions, write_landing
    from reprocess.sparkutil import build_session

    work = Path(args.workdir)
    landing = work / "landing"
    start = datetime(2026, 11, 21, tzinfo=UTC)
    if not (args.keep and landing.exists()):
        shutil.rmtree(work, ignore_errors=True)
        t = time.monotonic()
        facts = write_landing(GenerateOptions(out=landing, messages=args.messages, start=start, hours=3,
                                              fmt="jsonl", files_per_hour=4))
        print(f"generated {facts} in {time.monotonic() - t:.1f}s", flush=True)
    landing_bytes = sum(f.stat().st_size for f in landing.rglob("*") if f.is_file())
    as_of_ms = int(start.timestamp() * 1000) + 4 * 3600 * 1000
    spark = build_session("bench-gx", master=args.master)
    # warm-up on a tiny input so JVM start and first-use costs are not charged to either variant
    tiny = work / "tiny"
    if not tiny.exists():
        write_landing(GenerateOptions(out=tiny, messages=200, start=start, hours=1))
    _cycle(spark, tiny, work / "wh-warm", as_of_ms, validate=True)

    wall_on, s_on = _cycle(spark, landing, work / "wh-on", as_of_ms, validate=True)
    wall_off, s_off = _cycle(spark, landing, work / "wh-off", as_of_ms, validate=False) if args.compare else (
        None, None)
    gate = s_on["step_seconds"]["validate"]
    out = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, Spark {spark.version}, master {spark.sparkContext.master}",
        "messages": args.messages,
        "landing_mb": round(landing_bytes / 1e6, 1),
        "records_ingested": s_on["ingested"],
        "cycle_with_gate_s": round(wall_on, 1),
        "cycle_without_gate_s": None if wall_off is None else round(wall_off, 1),
        "validate_step_s": gate,
        "validate_share_of_cycle": f"{100 * gate / wall_on:.1f}%",
        "difference_share": None if wall_off is None else f"{100 * (wall_on - wall_off) / wall_on:.1f}%",
        "steps_with_gate": s_on["step_seconds"],
        "data_docs": s_on["validation"]["data_docs"],
        "python_driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }
    print(json.dumps(out, indent=2))
    if s_off is not None and s_on["balance"] != s_off["balance"]:
        print("ERROR: the runs with and without the gate differ", file=sys.stderr)
        return 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
