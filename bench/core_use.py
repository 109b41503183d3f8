"""Where a cycle's wall time goes on the cores (issue [6/7]): for each step, how long both cores ran tasks, one did,
or none did (the driver planning, compiling, collecting, or Python working alone).

One JVM (``local[*]``) with Spark's event log on runs a tiny warm-up cycle, then each ``--messages`` size
``--repeat`` times, each into a fresh warehouse, on ``bench/scale.py``'s generated input (made on first use).
Afterwards the event log's task start and end times are laid against the cycle's step boundaries (the
``step=...`` log lines). A step whose time is mostly "no task running" costs the same at any size: that is the
fixed cost that keeps a 1M cycle's per-message cost above a 10M one's. Prints a table per cycle and a JSON
document (appended to ``--results``); ``--plot FILE.png`` draws the tasks running over time, steps shaded.
Nothing is asserted.

Example::

    .venv/bin/python bench/core_use.py --messages 1000000 --repeat 2 --plot /tmp/core-use.png
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402  (bench/scale.py: input generation, the session, one cycle)


class _StepLog(logging.Handler):
    """Collects the wall-clock end of every ``step=`` log line of the cycle (epoch ms)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.marks: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("step="):
            self.marks.append((msg.split()[0][5:], record.created * 1000))


def _tasks(event_dir: Path) -> tuple[list[tuple[float, float]], list[dict[str, float]]]:
    """(launch, finish) epoch ms of every finished task in the application's event log, and each one's metrics:
    run time and CPU time (s), GC time (s), records read and written."""
    out, metrics = [], []
    for f in sorted(p for p in event_dir.rglob("events_*") if p.is_file()):  # Spark 4 rolls logs into a folder
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                event = json.loads(line)
                info, m = event["Task Info"], event.get("Task Metrics") or {}
                out.append((float(info["Launch Time"]), float(info["Finish Time"])))
                metrics.append({"finish": float(info["Finish Time"]),
                                "run_s": m.get("Executor Run Time", 0) / 1e3,
                                "cpu_s": m.get("Executor CPU Time", 0) / 1e9,
                                "gc_s": m.get("JVM GC Time", 0) / 1e3,
                                "read": (m.get("Input Metrics", {}).get("Records Read", 0)
                                         + m.get("Shuffle Read Metrics", {}).get("Total Records Read", 0)),
                                "written": (m.get("Output Metrics", {}).get("Records Written", 0)
                                            + m.get("Shuffle Write Metrics", {}).get("Shuffle Records Written", 0))})
    return out, metrics


def _task_sums(metrics: list[dict[str, float]], start: float, end: float) -> dict[str, float]:
    """Task run, CPU and GC seconds and records of the tasks that finished in [start, end)."""
    inside = [m for m in metrics if start <= m["finish"] < end]
    return {k: round(sum(m[k] for m in inside), 2) for k in ("run_s", "cpu_s", "gc_s", "read", "written")}


def _jvm_pid() -> int:
    """The driver JVM: this process's ``java`` child (local mode runs every task in it)."""
    import psutil

    return next(c.pid for c in psutil.Process().children(recursive=True) if c.name() == "java")


_THREAD_KINDS = (("jit", ("C1 CompilerThre", "C2 CompilerThre")), ("gc", ("GC Thread", "G1 ")),
                 ("tasks", ("Executor task",)))


def _stat_cpu(stat: Path) -> float:
    """CPU seconds (user + system) of a Linux ``/proc/.../stat`` file: a process's, ended threads too, or a
    thread's."""
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the JVM's live threads so far, by kind (Linux /proc: a thread's name is its first 15
    characters): JIT compiler threads, GC threads, Spark's task threads, and the rest (the driver's own work:
    planning, Janino, py4j, the scheduler)."""
    out = {"jit": 0.0, "gc": 0.0, "tasks": 0.0, "other": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            cpu = _stat_cpu(task / "stat")
        except OSError:  # the thread ended meanwhile
            continue
        kind = next((k for k, prefixes in _THREAD_KINDS if name.startswith(prefixes)), "other")
        out[kind] += cpu
    return out


def _jvm_counters(spark: Any, pid: int) -> dict[str, float]:
    """The driver JVM's running totals: CPU by kind of thread (threads that ended are not counted), JIT compile time
    and GC pause time (JMX), classes Spark generated and compiled with Janino, and the JIT code cache's use in MB."""
    jvm = spark.sparkContext._jvm
    mf = jvm.java.lang.management.ManagementFactory
    code = [p for p in mf.getMemoryPoolMXBeans() if "Code" in p.getName()]  # "CodeHeap '...'" or "Code Cache"
    cpu = _thread_cpu(pid)
    total = _stat_cpu(Path(f"/proc/{pid}/stat"))  # the process's, ended threads too
    cpu["other"] += total - sum(cpu.values())  # threads that ended (pooled task threads idle for a minute...)
    return {"cpu_s": total, **{f"{k}_cpu_s": v for k, v in cpu.items()},
            "jit_s": mf.getCompilationMXBean().getTotalCompilationTime() / 1e3,
            "gc_s": sum(max(0, b.getCollectionTime()) for b in mf.getGarbageCollectorMXBeans()) / 1e3,
            "classes_compiled": jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount(),
            "code_cache_mb": sum(p.getUsage().getUsed() for p in code) / 2**20,
            "code_cache_max_mb": sum(max(0, p.getUsage().getMax()) for p in code) / 2**20}


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per-cycle JVM figures: what the totals grew by (code cache: its use at the end)."""
    out = {k: round(after[k] - before[k], 1) for k in after if not k.startswith("code_cache")}
    out["code_cache_mb"] = round(after["code_cache_mb"], 1)
    out["code_cache_max_mb"] = round(after["code_cache_max_mb"], 1)
    return out


def concurrency(tasks: list[tuple[float, float]], start: float, end: float, cores: int) -> dict[str, float]:
    """Seconds of [start, end) during which 0, 1, ... ``cores`` (or more) tasks ran."""
    edges = sorted([(max(a, start), 1) for a, b in tasks if b > start and a < end]
                   + [(min(b, end), -1) for a, b in tasks if b > start and a < end])
    spent = [0.0] * (cores + 1)
    running, t = 0, start
    for at, delta in edges:
        spent[min(running, cores)] += at - t
        running, t = running + delta, at
    spent[min(running, cores)] += end - t
    return {str(i) if i < cores else f"{cores}+": round(s / 1000, 2) for i, s in enumerate(spent)}


def _table(name: str, rows: list[dict[str, Any]], cores: int) -> str:
    head = ["step", "wall s"] + [f"{k} task{'s' if k != '1' else ''} s" for k in
                                 [str(i) for i in range(cores)] + [f"{cores}+"]] + ["cores busy", "task run s",
                                                                                   "task CPU s", "task GC s"]
    lines = [f"{name}", " | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        t = r["tasks"]
        lines.append(" | ".join([r["step"], f"{r['wall_s']:.1f}", *(f"{v:.1f}" for v in r["by_running"].values()),
                                 f"{r['busy']:.0%}", f"{t['run_s']:.1f}", f"{t['cpu_s']:.1f}", f"{t['gc_s']:.1f}"]))
    return "\n".join(lines)


def _plot(path: str, tasks: list[tuple[float, float]], cycles: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(cycles), 1, figsize=(12, 2.2 * len(cycles)), squeeze=False)
    for ax, c in zip(axes[:, 0], cycles, strict=True):
        t0 = c["start_ms"]
        pts = sorted({t0, c["end_ms"], *(t for ab in tasks for t in ab if t0 <= t <= c["end_ms"])})
        xs = [(p - t0) / 1000 for p in pts]
        ys = [sum(1 for a, b in tasks if a <= p < b) for p in pts]
        ax.step(xs, ys, where="post", color="black", linewidth=0.8)
        prev = 0.0
        for i, r in enumerate(c["steps"]):
            end = prev + r["wall_s"]
            ax.axvspan(prev, end, color=f"C{i % 10}", alpha=0.25, linewidth=0)
            ax.text((prev + end) / 2, 2.6, r["step"].replace("stage_quarantine_and_manifest", "quar+man"),
                    ha="center", va="bottom", fontsize=7, rotation=90)
            prev = end
        ax.set_ylim(0, 4.2)
        ax.set_ylabel("tasks running")
        ax.set_title(f"{c['name']}: {c['wall_s']:.1f} s", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds into the cycle")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, nargs="+", default=[1_000_000],
                        help="landing sizes to run, in order, each --repeat times (default 1000000)")
    parser.add_argument("--repeat", type=int, default=2, help="cycles per size, one after the other (default 2)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench", help="scratch directory (shared with scale.py)")
    parser.add_argument("--driver-memory", default=os.environ.get("REPROCESS_DRIVER_MEMORY", "8g"))
    parser.add_argument("--plot", help="write a PNG of the tasks running over each cycle, steps shaded")
    parser.add_argument("--results", help="append the JSON figures to this file (JSON lines)")
    parser.add_argument("--as-of-step-ms", type=int, default=0,
                        help="each cycle's as-of this many ms after the previous one's (default 0: all at the same "
                        "as-of). Spark inlines the as-of into the code it generates, so a new as-of compiles new "
                        "classes, as each scheduled run does; 1 ms changes nothing else")
    args = parser.parse_args(argv)

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for n in args.messages:
        scale._generate(work / f"landing-{n}", n)
    events = work / f"events-{int(time.time())}"
    events.mkdir()
    os.environ["REPROCESS_DRIVER_MEMORY"] = args.driver_memory
    os.environ["PYSPARK_SUBMIT_ARGS"] = (f"--conf spark.eventLog.enabled=true --conf spark.eventLog.compress=false "
                                         f"--conf spark.eventLog.dir={events} "
                                         "pyspark-shell")
    spark = scale._session("bench-core-use")
    cores = spark.sparkContext.defaultParallelism
    jvm_pid = _jvm_pid()
    steps_log = _StepLog()
    logging.getLogger("reprocess.cycle.run").addHandler(steps_log)
    scale._warm_up(spark, work)
    runs = []
    for n in args.messages:
        for _ in range(args.repeat):
            steps_log.marks.clear()
            before = _jvm_counters(spark, jvm_pid)
            start = time.time() * 1000
            seconds, summary = scale._cycle(spark, work / f"landing-{n}", work / "wh-core-use",
                                            scale.AS_OF_MS + args.as_of_step_ms * (len(runs) + 1))
            jvm = _delta(before, _jvm_counters(spark, jvm_pid))
            runs.append({"name": f"{n:,} messages, the JVM's large cycle {len(runs) + 1}", "messages": n,
                         "start_ms": start, "end_ms": time.time() * 1000, "wall_s": round(seconds, 1),
                         "marks": list(steps_log.marks), "due": summary["due"], "jvm": jvm})
            print(f"{runs[-1]['name']}: {seconds:.1f} s, {seconds / n * 1e6:.1f} us per message; JVM {jvm}",
                  flush=True)
    spark.stop()  # flushes the event log
    (events / "cycles.json").write_text(json.dumps(runs), encoding="utf-8")

    tasks, metrics = _tasks(events)
    out = []
    for r in runs:
        rows, prev = [], r["start_ms"]
        for step, at in r["marks"]:
            split = concurrency(tasks, prev, at, cores)
            wall = (at - prev) / 1000
            busy = sum(a * b for a, b in zip(range(cores + 1), split.values(), strict=True)) / (cores * wall or 1)
            rows.append({"step": step, "wall_s": round(wall, 2), "by_running": split, "busy": round(busy, 3),
                         "tasks": _task_sums(metrics, prev, at)})
            prev = at
        tail = concurrency(tasks, prev, r["end_ms"], cores)
        rows.append({"step": "commit", "wall_s": round((r["end_ms"] - prev) / 1000, 2), "by_running": tail,
                     "busy": round(sum(a * b for a, b in zip(range(cores + 1), tail.values(), strict=True))
                                   / (cores * max((r["end_ms"] - prev) / 1000, 1e-3)), 3),
                     "tasks": _task_sums(metrics, prev, r["end_ms"])})
        whole = concurrency(tasks, r["start_ms"], r["end_ms"], cores)
        cycle = {**{k: r[k] for k in ("name", "messages", "wall_s", "due", "start_ms", "end_ms", "jvm")}, "steps": rows,
                 "by_running": whole, "tasks": _task_sums(metrics, r["start_ms"], r["end_ms"])}
        out.append(cycle)
        print()
        print(_table(f"{r['name']}: {r['wall_s']} s; no task {whole['0']} s, one {whole['1']} s, "
                     f"{cores}+ {whole[f'{cores}+']} s; JVM CPU {r['jvm']['cpu_s']} s: tasks "
                     f"{r['jvm']['tasks_cpu_s']}, JIT threads {r['jvm']['jit_cpu_s']}, GC threads "
                     f"{r['jvm']['gc_cpu_s']}, other {r['jvm']['other_cpu_s']} (JIT compile {r['jvm']['jit_s']} s, "
                     f"GC pauses {r['jvm']['gc_s']} s); {r['jvm']['classes_compiled']:.0f} classes generated and "
                     f"compiled; code cache {r['jvm']['code_cache_mb']} of "
                     f"{r['jvm']['code_cache_max_mb']} MB; task CPU {out[-1]['tasks']['cpu_s']} s, so outside "
                     f"tasks (driver, JIT, GC threads) {r['jvm']['cpu_s'] - out[-1]['tasks']['cpu_s']:.1f} s", rows,
                     cores))
    doc = {"bench": "core_use", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": cores,
           "cycles": [{k: v for k, v in c.items() if k not in ("start_ms", "end_ms")} for c in out]}
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(doc) + "\n")
    if args.plot:
        _plot(args.plot, tasks, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
