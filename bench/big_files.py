"""A landing of large files: each read whole by one task, or in splits by several (issue [6/7]).

A consumer that writes one large file an hour gave the old reader one task per file: one core parsed it, whatever
the cores. From ``REPROCESS_LANDING_SPLIT_BYTES`` (128 MiB by default) a file is read in splits, numbered by a
first pass that counts each split's lines. This generates ``--messages`` records in ``--files`` text files (one
hour), then runs fresh ``reprocess run`` processes, each into its own warehouse, alternating the two readers
(whole: the split size set above the largest file), and prints the wall time and the landing step's. With
``--warm`` the cycles run in this process's one driver instead, after a first cycle that warms it up (as a
long-lived Spark Connect server runs them). With ``--parse-only`` it times the landing's parse alone in one warm
driver (``read_batch`` into Spark's ``noop`` sink, the first pass included), three ways alternating: whole files,
splits of the split size, and splits sized to the cores (``contract.split_size``, what a run does). Prints
figures; asserts nothing.

    .venv/bin/python bench/big_files.py --messages 1000000 --rounds 2
    .venv/bin/python bench/big_files.py --messages 1000000 --rounds 3 --warm
    .venv/bin/python bench/big_files.py --messages 1000000 --rounds 4 --parse-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="records in the landing (default 1M)")
    parser.add_argument("--files", type=int, default=1, help="text files they are written to (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each reader (default 2)")
    parser.add_argument("--driver-memory", default="4g", help="REPROCESS_DRIVER_MEMORY of each run (default 4g)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench-big-files", help="scratch folder (wiped)")
    parser.add_argument("--results", default=None, help="append the JSON figures to this file (JSON lines)")
    parser.add_argument("--warm", action="store_true", help="cycles in this process's driver, after a warm-up one")
    parser.add_argument("--parse-only", action="store_true",
                        help="time the parse alone in one warm driver: whole, split size, sized to the cores")
    args = parser.parse_args()

    from reprocess.landing.generate import GenerateOptions, write_landing

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    write_landing(GenerateOptions(out=work / "landing", messages=args.messages, hours=1, seed=11,
                                  files_per_hour=args.files))
    files = sorted((work / "landing").rglob("*.jsonl"))
    sizes = [f.stat().st_size for f in files]
    print(f"{args.messages} records in {len(files)} file(s) of {max(sizes) / 2**20:.0f} MiB at most, "
          f"generated in {time.perf_counter() - t0:.0f} s; driver memory {args.driver_memory}")
    if args.parse_only:
        return _parse_only(args, files)
    python = sys.executable
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
           "REPROCESS_DRIVER_MEMORY": args.driver_memory, "PATH": f"{Path(python).parent}:{os.environ['PATH']}"}
    variants = {"whole": {"REPROCESS_LANDING_SPLIT_BYTES": str(max(sizes) + 1)}, "split": {}}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    cycle = _in_process(args.driver_memory, work) if args.warm else None
    print(f"{'round':>5} {'reader':<6} {'wall s':>7} {'landing s':>9} {'records':>9}")
    for k in range(1, args.rounds + 1):
        for name, settings in variants.items():
            wh = work / f"wh-{name}-{k}"
            t1 = time.perf_counter()
            if cycle is not None:
                summary = cycle(wh, settings)
            else:
                done = subprocess.run(
                    [python, "-m", "reprocess.cli", "run", "--landing", str(work / "landing"), "--warehouse",
                     str(wh), "--as-of", AS_OF, "--format", "json"],
                    env={**env, **settings}, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.stderr.write(done.stderr[-3000:])
                    raise SystemExit(f"reader {name} failed (exit {done.returncode})")
                summary = json.loads(done.stdout)
            wall = time.perf_counter() - t1
            landing = summary["step_seconds"]["landing"]
            runs[name].append((wall, landing))
            print(f"{k:>5} {name:<6} {wall:>7.1f} {landing:>9.1f} {summary['records_read']:>9}", flush=True)
            shutil.rmtree(wh, ignore_errors=True)
    figures = {name: {"median_wall_s": round(statistics.median(w for w, _ in r), 1),
                      "median_landing_s": round(statistics.median(s for _, s in r), 1)} for name, r in runs.items()}
    print(json.dumps(figures))
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(json.dumps({"bench": "big_files", "messages": args.messages, "files": len(files),
                                "warm": args.warm, "figures": figures,
                                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    return 0


AS_OF = "2026-11-21T02:00:00Z"


def _parse_only(args: argparse.Namespace, files: list[Path]) -> int:
    """The landing's parse (``read_batch`` into the ``noop`` sink) in one driver, after a warm-up round: whole
    files, splits of ``REPROCESS_LANDING_SPLIT_BYTES``, and splits sized to the cores, alternating."""
    from reprocess.cli import parse_instant
    from reprocess.cycle.landing_batch import read_batch
    from reprocess.landing import contract
    from reprocess.landing.manifest import list_landing
    from reprocess.sparkutil import build_session, restoring_conf, task_slots

    os.environ["REPROCESS_DRIVER_MEMORY"] = args.driver_memory
    spark = build_session("bench-big-files-parse")
    as_of = parse_instant(AS_OF)
    landing = list_landing(str(files[0].parents[2]), as_of, spark)
    sized = contract.split_size

    def fixed(sizes: list[int], cores: int, split_bytes: int, floor: int) -> int:
        return split_bytes

    def parse(name: str) -> float:
        contract.split_size = fixed if name == "split_size" else sized  # type: ignore[assignment]
        t0 = time.perf_counter()
        with restoring_conf(spark, *contract.FILE_SPLIT_KEYS):
            batch = read_batch(spark, landing, {}, as_of, 1 << 20, 86_400_000, "generated",
                               split=False if name == "whole" else None)
            batch.records.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    names = ["whole", "split_size", "sized_to_cores"]
    slots, split_bytes = task_slots(spark), contract.landing_split_bytes()
    even = sized([f.stat().st_size for f in files], slots, split_bytes, contract.SPLIT_FLOOR_BYTES)
    print(f"task slots {slots}; split size {split_bytes / 2**20:.1f} MiB, sized to the cores {even / 2**20:.1f} MiB")
    print("warm-up " + " ".join(f"{name} {parse(name):.1f} s" for name in names))
    times: dict[str, list[float]] = {name: [] for name in names}
    for k in range(1, args.rounds + 1):
        for name in names[k % 3:] + names[:k % 3]:
            times[name].append(parse(name))
        print(f"round {k}: " + " ".join(f"{name} {times[name][-1]:.2f} s" for name in names), flush=True)
    contract.split_size = sized  # type: ignore[assignment]
    figures = {name: round(statistics.median(t), 2) for name, t in times.items()}
    print(json.dumps({"median_parse_s": figures}))
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(json.dumps({"bench": "big_files_parse", "messages": args.messages, "files": len(files),
                                "figures": figures, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    return 0


def _in_process(driver_memory: str, work: Path) -> Any:
    """A function running one cycle in this process's driver (warmed up by a first, whole-file cycle) into a
    warehouse, with environment ``settings`` for its duration; it returns the run's summary."""
    from reprocess.cli import load_config, parse_instant
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.sparkutil import build_session

    os.environ["REPROCESS_DRIVER_MEMORY"] = driver_memory
    spark = build_session("bench-big-files")

    def cycle(wh: Path, settings: dict[str, str]) -> dict[str, Any]:
        saved = {key: os.environ.get(key) for key in settings}
        os.environ.update(settings)
        try:
            return run_cycle(spark, CycleOptions(landing=str(work / "landing"), warehouse=str(wh),
                                                 policies=load_config(None), as_of_ms=parse_instant(AS_OF)))
        finally:
            shutil.rmtree(wh, ignore_errors=True)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    t0 = time.perf_counter()
    cycle(work / "wh-warm-up", {"REPROCESS_LANDING_SPLIT_BYTES": str(1 << 40)})
    print(f"warm-up cycle {time.perf_counter() - t0:.1f} s")
    return cycle


if __name__ == "__main__":
    sys.exit(main())
