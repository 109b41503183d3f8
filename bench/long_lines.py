"""What finding lines too long to read costs (docs/adr/0007-lines-too-long-to-read.md). Prints figures; asserts
nothing.

1. The accounting every run pays: the run's cache of its landing records filled by ``count()`` (before) and by the
   per-file aggregation of lines and bytes (now), alternately, in one warm driver, on ``bench/scale.py``'s landing.
2. The scan a flagged file pays: ``long_lines.scan`` over every file of that landing, in MB/s.
3. Whole runs (``reprocess run`` processes of their own, in a small heap): a small landing, then the same with a
   file of one huge line and a file with one long line among ordinary ones.

    .venv/bin/python bench/long_lines.py --messages 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

AS_OF = "2026-11-21T03:00:00Z"


def _accounting(spark: Any, landing: Path, repeat: int) -> dict[str, list[float]]:
    import scale
    from pyspark.sql import functions as F

    from reprocess.cycle.landing_batch import read_batch
    from reprocess.landing import contract
    from reprocess.landing.manifest import list_landing
    from reprocess.sparkutil import fit_codegen

    files = list_landing(str(landing), scale.AS_OF_MS)
    fit_codegen(spark, sum(f.size for f in files))
    limits = (contract.DEFAULT_MAX_PAYLOAD_BYTES, contract.DEFAULT_MAX_FUTURE_MS)
    times: dict[str, list[float]] = {"count()": [], "per-file lines and bytes": []}
    for _ in range(repeat):
        for name in times:
            records = read_batch(spark, files, {}, scale.AS_OF_MS, *limits).records.persist()
            t = time.monotonic()
            if name == "count()":
                records.count()
            else:
                records.groupBy("source_file").agg(F.count(F.lit(1)), F.sum("line_bytes"),
                                                   F.max("record_no")).collect()
            times[name].append(time.monotonic() - t)
            records.unpersist(blocking=True)
    return times


def _scan_speed(landing: Path) -> tuple[int, float, int]:
    from reprocess.landing.long_lines import DEFAULT_MAX_LINE_BYTES, scan

    files = sorted(p for p in landing.rglob("*.jsonl*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    t = time.monotonic()
    found = 0
    for p in files:
        with p.open("rb") as fh:
            found += len(list(scan(iter(lambda fh=fh: fh.read(4 << 20), b""), DEFAULT_MAX_LINE_BYTES)))
    return total, time.monotonic() - t, found


def _runs(work: Path, memory: str, huge_mb: int) -> None:
    from cli_runs import reprocess_run

    from reprocess.landing.generate import GenerateOptions, write_landing

    for name in ("plain", "long"):
        landing = work / f"landing-{name}"
        if not landing.exists():
            write_landing(GenerateOptions(out=landing, messages=10_000, hours=1, seed=5, malformed=2))
            if name == "long":
                hour = next(landing.glob("dt=*/hour=*"))
                with (hour / "one-line.jsonl").open("wb") as fh:  # no line end at all
                    for _ in range(huge_mb):
                        fh.write(b"[" + b"1," * (1 << 19) + b"1]")
                def ordinary(ids: range) -> bytes:
                    return b"".join(json.dumps({"message_id": f"among-{i}", "address": "orders.created",
                                                "payload": "p", "failed_at": "2026-11-21T00:30:00Z"}).encode()
                                    + b"\n" for i in ids)

                with (hour / "among.jsonl").open("wb") as fh:
                    fh.write(ordinary(range(50_000)) + b"y" * (64 << 20) + b"\n" + ordinary(range(50_000, 100_000)))
        size = sum(p.stat().st_size for p in landing.rglob("*") if p.is_file())
        wh = work / f"wh-{name}-{time.time_ns()}"
        elapsed, summary = reprocess_run(landing, wh, memory, AS_OF)
        if isinstance(summary, str):
            print(f"  {name:<5} landing {size / 1e6:8.1f} MB, {memory} heap: {elapsed:6.1f} s, {summary}", flush=True)
            continue
        steps = ", ".join(f"{k} {v:.1f}" for k, v in summary["step_seconds"].items() if v >= 0.5)
        print(f"  {name:<5} landing {size / 1e6:8.1f} MB, {memory} heap: {elapsed:6.1f} s, records "
              f"{summary['records_read']}, quarantined {summary['quarantined']}; steps of 0.5 s or more: {steps}",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="landing messages (default 1000000)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench",
                        help="scratch directory, shared with bench/scale.py (default /tmp/reprocess-bench)")
    parser.add_argument("--repeat", type=int, default=3, help="passes of each accounting (default 3)")
    parser.add_argument("--driver-memory", default="8g", help="heap of the accounting's driver (default 8g)")
    parser.add_argument("--run-memory", default="1g", help="heap of the whole runs (default 1g)")
    parser.add_argument("--huge-mb", type=int, default=512, help="size of the one-line file, MB (default 512)")
    parser.add_argument("--runs-only", action="store_true", help="only the whole runs (part 3)")
    args = parser.parse_args(argv)

    import scale

    work = Path(args.workdir)
    if args.runs_only:
        print(f"whole runs, {args.run_memory} heap:", flush=True)
        _runs(work / "long-lines", args.run_memory, args.huge_mb)
        return 0
    landing = work / f"landing-{args.messages}"
    print(f"input: {scale._generate(landing, args.messages)}", flush=True)
    total, seconds, found = _scan_speed(landing)
    print(f"scan of every landing file: {total / 1e6:.1f} MB in {seconds:.2f} s = {total / 1e6 / seconds:.0f} MB/s "
          f"({found} long lines)", flush=True)

    os.environ["REPROCESS_DRIVER_MEMORY"] = args.driver_memory
    from reprocess.sparkutil import build_session, sized_codegen

    spark = build_session("long-lines-bench")
    spark.sparkContext.setLogLevel("ERROR")
    with sized_codegen(spark):
        times = _accounting(spark, landing, args.repeat)
    spark.stop()
    print(f"filling the cache of {args.messages} records ({args.repeat} passes each, alternating):", flush=True)
    for name, ts in times.items():
        print(f"  {name:<25} median {statistics.median(ts):6.2f} s  ({', '.join(f'{t:.2f}' for t in ts)})",
              flush=True)
    print(f"whole runs, {args.run_memory} heap:", flush=True)
    _runs(work / "long-lines", args.run_memory, args.huge_mb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
