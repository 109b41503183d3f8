"""Generated code or interpreted expressions, by cycle size (issue [6/7]): where compiling stops paying.

Spark compiles every query's expressions to Java (whole-stage code generation) and compiles that with Janino before
running it: a fixed cost per query, which a cycle of a few hundred messages pays some forty times for little data.
Interpreted expressions skip the compiler and run each row slower. This runs cycles of each ``--messages`` size in
one warm JVM, alternating the two modes round by round, each cycle into a fresh warehouse at an as-of of its own (a
new as-of is new code, as every scheduled cycle's is: the codegen cache does not help across as-ofs). Prints
seconds per cycle and the ratio; asserts nothing. ``reprocess.sparkutil.INTERPRETED_BELOW_BYTES`` is set from it.

Example::

    .venv/bin/python bench/codegen_modes.py --messages 400 4000 40000 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402  (bench/scale.py: the session, one cycle)

MINUTE_MS = 60_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, nargs="+", default=[400, 4000, 40000, 200000],
                        help="landing sizes (default 400 4000 40000 200000)")
    parser.add_argument("--rounds", type=int, default=3, help="cycles per size and mode (default 3)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench-codegen", help="scratch directory")
    parser.add_argument("--driver-memory", default=os.environ.get("REPROCESS_DRIVER_MEMORY", "4g"))
    parser.add_argument("--results", help="append the JSON figures to this file (JSON lines)")
    args = parser.parse_args(argv)

    from reprocess import sparkutil
    from reprocess.landing.generate import GenerateOptions, write_landing

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    landings = {}
    for n in args.messages:
        landings[n] = work / f"landing-{n}"
        if not (landings[n] / ".complete").exists():
            shutil.rmtree(landings[n], ignore_errors=True)
            write_landing(GenerateOptions(out=landings[n], messages=n, start=scale.START, hours=3, seed=3))
            (landings[n] / ".complete").touch()
    os.environ["REPROCESS_DRIVER_MEMORY"] = args.driver_memory
    spark = scale._session("bench-codegen-modes")
    scale._warm_up(spark, work)
    bytes_of = {n: sum(f.stat().st_size for f in p.rglob("*.jsonl")) for n, p in landings.items()}
    modes = {"generated": 0, "interpreted": 1 << 62}  # the threshold below which a cycle runs interpreted
    seconds: dict[int, dict[str, list[float]]] = {n: {m: [] for m in modes} for n in args.messages}
    step = 0
    for n in args.messages:
        for r in range(args.rounds):
            for mode, threshold in (modes.items() if r % 2 == 0 else reversed(modes.items())):
                step += 1
                sparkutil.INTERPRETED_BELOW_BYTES = threshold
                s, summary = scale._cycle(spark, landings[n], work / "wh", scale.AS_OF_MS + step * MINUTE_MS)
                seconds[n][mode].append(s)
                print(f"{n:>9,} messages  round {r + 1}  {mode:<11}  {s:6.1f} s  (due {summary['due']:,})",
                      flush=True)
    spark.stop()
    print()
    print("messages | landing MB | generated s (median) | interpreted s (median) | interpreted / generated")
    rows = []
    for n in args.messages:
        g, i = statistics.median(seconds[n]["generated"]), statistics.median(seconds[n]["interpreted"])
        rows.append({"messages": n, "landing_bytes": bytes_of[n], "generated_s": round(g, 2),
                     "interpreted_s": round(i, 2), "all": seconds[n]})
        print(f"{n:,} | {bytes_of[n] / 2**20:.1f} | {g:.1f} | {i:.1f} | {i / g:.2f}")
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"bench": "codegen_modes", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "sizes": rows}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
