"""The landing's structural checks in the JVM against the built-in expressions alone (docs/adr/0006), whole cycles
side by side.

One JVM (``local[*]``) runs a tiny warm-up cycle, then ``--rounds`` pairs of cycles over ``bench/scale.py``'s
generated landing (made on first use), alternating: one with the JVM parser of well-formed lines (as every cycle
runs when the project's jar is built), one with the expressions alone (as without the jar). Each cycle goes into a
fresh warehouse at a new as-of, as a long-lived driver's scheduled runs do. Alternating within one JVM keeps the
day's speed and the JIT's state out of the comparison; the first cycle of the JVM pays its warm-up, so the pairs
after it are the ones to compare. Prints each cycle's steps and the medians of the warm pairs (a JSON document,
appended to ``--results``). Nothing is asserted.

    .venv/bin/python bench/landing_parser.py --messages 1000000 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402  (bench/scale.py: input generation, the session, one cycle)


class _Steps(logging.Handler):
    """The ``step=<name> ... seconds=<s>`` log lines of the cycle, in order."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.steps: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("step="):
            self.steps[msg.split()[0][5:]] = float(msg.split("seconds=")[1].split()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="landing messages (default 1000000)")
    parser.add_argument("--rounds", type=int, default=4, help="pairs of cycles, JVM parser then expressions (4)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench", help="scratch directory (shared with scale.py)")
    parser.add_argument("--driver-memory", default=os.environ.get("REPROCESS_DRIVER_MEMORY", "14g"),
                        help="heap of the local Spark JVM (default 14g)")
    parser.add_argument("--results", help="append the JSON figures to this file (JSON lines)")
    args = parser.parse_args(argv)

    from reprocess.cycle import landing_batch

    work = Path(args.workdir)
    landing = work / f"landing-{args.messages}"
    print(f"input: {scale._generate(landing, args.messages)}", flush=True)
    os.environ["REPROCESS_DRIVER_MEMORY"] = args.driver_memory
    spark = scale._session("bench-landing-parser")
    steps = _Steps()
    logging.getLogger("reprocess.cycle.run").addHandler(steps)
    scale._warm_up(spark, work)
    with_jvm = landing_batch.use_jvm_parser

    def expressions_alone(_spark: object) -> bool:
        return False

    cycles = []
    for i in range(2 * args.rounds):
        mode = "jvm" if i % 2 == 0 else "expressions"
        landing_batch.use_jvm_parser = with_jvm if mode == "jvm" else expressions_alone
        steps.steps = {}
        seconds, summary = scale._cycle(spark, landing, work / "wh-landing-parser", scale.AS_OF_MS + i + 1)
        if summary["landing_parser"] != mode:
            raise SystemExit(f"cycle {i + 1} ran with {summary['landing_parser']}, not {mode}: is the jar built?")
        cycles.append({"mode": mode, "wall_s": round(seconds, 2), "steps": dict(steps.steps)})
        print(f"cycle {i + 1} {mode:<11} {seconds:6.1f} s  "
              + " ".join(f"{k}={v:.1f}" for k, v in steps.steps.items()), flush=True)
    landing_batch.use_jvm_parser = with_jvm
    spark.stop()

    warm = cycles[2:]  # the first pair's JVM parser cycle was the JVM's first large one
    medians = {}
    for mode in ("jvm", "expressions"):
        mine = [c for c in warm if c["mode"] == mode]
        medians[mode] = {"wall_s": statistics.median(c["wall_s"] for c in mine),
                         "landing_s": statistics.median(c["steps"]["landing"] for c in mine)} if mine else {}
    print(json.dumps({"warm_medians": medians}), flush=True)
    doc = {"bench": "landing_parser", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "messages": args.messages, "cycles": cycles, "warm_medians": medians}
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
