"""The fixed cost of a cycle: many small cycles in one warm JVM, timed one by one.

A scheduled cycle usually ingests little, so what it pays regardless of size (plan analysis, code generation,
cache bookkeeping, Python-to-JVM calls, GX) is most of its time. This runs ``--cycles`` consecutive cycles, an
hour apart, over a small generated landing, ``--passes`` times in one JVM, each pass into a fresh warehouse (the
first pass pays the JIT's warm-up). Per cycle it prints the wall time, the messages ingested and re-driven, and
the py4j calls the driver made, grouped by the module of this project that made them. Prints figures;
asserts nothing.

    .venv/bin/python bench/small_cycles.py --messages 400 --cycles 7 --passes 3
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))

HOUR_MS = 3_600_000


class Py4jCalls:
    """Counts the driver's py4j round trips by the first ``reprocess`` module on the Python stack."""

    QUICK_S = 0.002  # a call that returns this fast is a round trip, not JVM work (a job, a plan, a write)

    def __init__(self) -> None:
        self.by_module: collections.Counter[str] = collections.Counter()
        self.quick_seconds = 0.0  # time in calls that returned within QUICK_S

    def install(self) -> None:
        from py4j import clientserver, java_gateway

        for cls in (clientserver.ClientServerConnection, java_gateway.GatewayConnection):
            original = cls.send_command

            def counted(conn: Any, command: str, _original: Any = original, **kwargs: Any) -> Any:
                self.by_module[self._caller()] += 1
                t0 = time.perf_counter()
                try:
                    return _original(conn, command, **kwargs)
                finally:
                    took = time.perf_counter() - t0
                    if took < self.QUICK_S:
                        self.quick_seconds += took

            cls.send_command = counted  # type: ignore[method-assign]

    @staticmethod
    def _caller() -> str:
        if threading.current_thread() is not threading.main_thread():
            return "(py4j's thread: deletes of dead JVM references)"
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name.startswith("reprocess."):
                return name.removeprefix("reprocess.")
            frame = frame.f_back  # type: ignore[assignment]
        return "(pyspark itself)"

    def take(self) -> tuple[collections.Counter[str], float]:
        out, quick = self.by_module, self.quick_seconds
        self.by_module, self.quick_seconds = collections.Counter(), 0.0
        return out, quick


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Prints per-cycle seconds and py4j calls by module.",
        epilog="example: .venv/bin/python bench/small_cycles.py --messages 400 --cycles 7 --passes 3")
    parser.add_argument("--messages", type=int, default=400, help="landing messages in all (default 400)")
    parser.add_argument("--cycles", type=int, default=7, help="cycles per pass, an hour apart (default 7)")
    parser.add_argument("--passes", type=int, default=3, help="passes, each into a fresh warehouse (default 3)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench-small", help="scratch directory")
    parser.add_argument("--top", type=int, default=8, help="modules to list by py4j calls (default 8)")
    parser.add_argument("--alternate-cache", action="store_true",
                        help="even passes cache the frames a small run checkpoints (sparkutil.truncates_plans), to "
                             "compare the two in one JVM")
    parser.add_argument("--connect", action="store_true",
                        help="run the cycles as a client of a Spark Connect server (reprocess connect-server, "
                             "local[2], started for the bench) instead of in this process's driver: no py4j calls "
                             "to count")
    parser.add_argument("--results", default=None, help="append the JSON figures to this file (JSON lines)")
    args = parser.parse_args()
    if args.connect:
        from reprocess.connect_server import free_port, running_server

        port = free_port()
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        log = Path(args.workdir).with_name(Path(args.workdir).name + "-server.log")
        with running_server(port, log, ["--master", "local[2]", "--driver-memory", "2g"],
                            {**os.environ, "REPROCESS_SHUFFLE_PARTITIONS": "2"}):
            return bench(args, f"sc://localhost:{port}")
    return bench(args, None)


def bench(args: argparse.Namespace, remote: str | None) -> int:
    """The passes of cycles, in this process's driver or (``remote``) as a client of that Connect server."""

    import shutil
    from datetime import UTC, datetime

    from reprocess.cli import load_config
    from reprocess.cycle import run as run_module
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.landing.generate import GenerateOptions, write_landing
    from reprocess.sparkutil import build_session, truncates_plans
    from reprocess.storage.hadoop_fs import plugin_request

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    start = datetime(2026, 11, 21, tzinfo=UTC)
    write_landing(GenerateOptions(out=work / "landing", messages=args.messages, hours=args.cycles, seed=11,
                                  start=start))
    calls = Py4jCalls()
    if remote:
        spark = build_session("bench-small-cycles", remote=remote)
    else:
        spark = build_session("bench-small-cycles", shuffle_partitions=2)
        spark.sparkContext.setLogLevel("ERROR")
        calls.install()
    policies = load_config(None)
    t0_ms = int(start.timestamp() * 1000)
    rows: list[dict[str, Any]] = []
    print(f"{args.messages} messages over {args.cycles} hours; {args.passes} passes of {args.cycles} cycles, "
          f"{'Connect server ' + remote if remote else 'master ' + str(spark.sparkContext.master)}")
    print(f"{'pass':>4} {'cycle':>5} {'seconds':>8} {'ingested':>8} {'due':>5} {'py4j calls':>10} "
          f"{'round trips s':>12} {'frames':>10} {'kept':>4}")
    for p in range(1, args.passes + 1):
        wh = work / f"wh-{p}"
        if args.alternate_cache:
            # even passes cache the run's frames as a large run does, odd ones do what the platform chooses
            run_module.truncates_plans = truncates_plans if p % 2 else (lambda spark, small: False)
        for c in range(1, args.cycles + 1):
            calls.take()
            t0 = time.perf_counter()
            s = run_cycle(spark, CycleOptions(landing=str(work / "landing"), warehouse=str(wh), policies=policies,
                                              as_of_ms=t0_ms + c * HOUR_MS, target="outbox"))
            seconds = time.perf_counter() - t0
            by_module, quick = calls.take()
            # RDDs cached or checkpointed, not freed
            kept = (len(plugin_request(spark, "kept")) if remote  # type: ignore[arg-type]
                    else len(spark.sparkContext._jsc.sc().getRDDStorageInfo()))
            checkpoint = run_module.truncates_plans(spark, True)  # what a small run of this driver did
            rows.append({"pass": p, "cycle": c, "checkpoint": checkpoint, "seconds": round(seconds, 2),
                         "ingested": s["ingested"], "due": s["due"], "kept_rdds": kept,
                         "py4j_calls": sum(by_module.values()), "py4j_quick_s": round(quick, 2),
                         "by_module": dict(by_module)})
            print(f"{p:>4} {c:>5} {seconds:>8.2f} {s['ingested']:>8} {s['due']:>5} {sum(by_module.values()):>10} "
                  f"{quick:>12.2f} {'checkpoint' if checkpoint else 'cache':>10} {kept:>4}")
    spark.stop()

    warm = [r for r in rows if r["pass"] > 1] or rows
    seconds = [r["seconds"] for r in warm]
    quick = statistics.median(r["py4j_quick_s"] for r in warm)
    print(f"\nwarm passes: median {statistics.median(seconds):.2f} s per cycle, min {min(seconds):.2f}, "
          f"max {max(seconds):.2f}; median {statistics.median(r['py4j_calls'] for r in warm):.0f} py4j calls per "
          f"cycle, of which the quick ones (< {Py4jCalls.QUICK_S * 1000:.0f} ms) took {quick:.2f} s")
    if args.alternate_cache:
        for label, kept in (("checkpointed", True), ("cached", False)):
            mode = [r["seconds"] for r in warm if r["checkpoint"] is kept]
            if mode:
                print(f"  frames {label}: median {statistics.median(mode):.2f} s per cycle, min {min(mode):.2f}, "
                      f"max {max(mode):.2f} ({len(mode)} cycles)")
    total: collections.Counter[str] = collections.Counter()
    for r in warm:
        total.update(r["by_module"])
    print("py4j calls per warm cycle, by module:")
    for module, n in total.most_common(args.top):
        print(f"  {n / len(warm):>8.0f}  {module}")
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"bench": "small_cycles", "date": datetime.now(UTC).isoformat(timespec="seconds"),
                                 "messages": args.messages, "connect": remote is not None, "cycles": rows}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
