"""Scale benchmark (issue [6/7]): a cycle against its I/O floor, built-in schedules against Python UDFs,
per-message cost from 1M to 10M, and cost that follows the due work.

Every measurement runs in its own Python process (its own local JVM), watched by this one for the peak
memory of the whole process tree (Python driver + JVM + Python workers): ``peak_pss_mb`` (proportional set
size, shared pages split between the processes sharing them: what the tree really holds) and ``peak_rss_mb``
(summed resident sets, which count a shared page once per process and so overstate). Figures are printed as
one JSON document (and appended to ``--results``); nothing is asserted. Parts:

``floor``     read every landing byte as text and write it as Parquet (the least any cycle must do), and a
              plain Parquet read + write of that copy;
``cycle``     one full cycle (landing -> ledger -> outbox re-drive -> DLQ, GX gate on) on a fresh warehouse;
              its step timings give the GX share;
``udf``       the same cycle with retry schedules computed by a row-at-a-time Python UDF over the pure-Python
              reference instead of built-in column expressions;
``schedule``  the schedule computation alone over the ledger the cycle wrote: built-ins as a large cycle runs
              them, built-ins under Spark's default whole-stage code generation, the Python UDF, and the same
              scan and output with no schedule (what every variant pays regardless);
``due``       a warehouse holding ``--waiting`` waiting messages of which ``--due`` are due, against one
              holding ``--due`` waiting messages, all due; both cycles get the same small landing batch;
``connect``   the long-lived driver: a ``reprocess connect-server`` started for the part, and the same cycle as
              ``cycle`` run twice as its client (each into a fresh warehouse): the server's first cycle, and a later
              one, which finds the JIT warm as every cycle after the first does. Peak memory is the client's and
              the server's together.

Examples::

    .venv/bin/python bench/scale.py --messages 1000000                # floor, cycle, udf, schedule at 1M
    .venv/bin/python bench/scale.py --messages 10000000 --parts floor,cycle
    .venv/bin/python bench/scale.py --parts due --waiting 10000000 --due 100000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "spark"))

START = datetime(2026, 11, 21, tzinfo=UTC)
START_MS = int(START.timestamp() * 1000)
HOUR = 3_600_000
AS_OF_MS = START_MS + 4 * HOUR  # one hour after the last generated failure
PARTS = ("floor", "cycle", "udf", "schedule", "due", "connect")
SEED_CHUNK = 1_000_000  # the generator holds one chunk in memory; larger inputs are several seeds


# -- the parent: generate, spawn one process per part, watch its memory ------------------------------------------

def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) summed over the process tree, in bytes.

    Summed RSS counts a page shared by several processes (forked Python workers, mapped files) once per
    process, so it overstates; PSS charges each process its share of a shared page, so the sum is what the
    tree really holds. PSS needs Linux's smaps; elsewhere it equals RSS.
    """
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss = pss = 0
    for p in procs:
        try:
            full = p.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            full = p.memory_info()
        rss += full.rss
        pss += getattr(full, "pss", full.rss)
    return rss, pss


def _run_child(part: str, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    if part == "connect":
        with _connect_server(args) as (server, url):
            return _watched_child(part, args, extra, {"REPROCESS_SPARK_REMOTE": url}, server.pid)
    return _watched_child(part, args, extra, {}, None)


@contextmanager
def _connect_server(args: argparse.Namespace) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A ``reprocess connect-server`` on a free loopback port with the part's driver heap, until the part ends."""
    from reprocess.connect_server import free_port, running_server

    port = free_port()
    with running_server(port, Path(args.workdir) / "connect-server.log",
                        ["--driver-memory", args.driver_memory]) as server:
        yield server, f"sc://localhost:{port}"


def _watched_child(part: str, args: argparse.Namespace, extra: dict[str, Any], env_extra: dict[str, str],
                   also_watch: int | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", part, "--workdir", args.workdir, "--messages", str(args.messages),
           "--child-args", json.dumps(extra)]
    env = {**os.environ, "REPROCESS_DRIVER_MEMORY": args.driver_memory, **env_extra}
    print(f"[{datetime.now(UTC):%H:%M:%S}] {part}: {' '.join(cmd[2:4])} ...", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    peak_rss = peak_pss = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak_rss, peak_pss
        while not stop.is_set():
            rss, pss = _tree_memory(proc.pid)
            if also_watch is not None:  # the Connect server's tree: the cycle's work happens there
                more = _tree_memory(also_watch)
                rss, pss = rss + more[0], pss + more[1]
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            stop.wait(0.25)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    stop.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"part {part} failed with exit code {proc.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_pss_mb"] = round(peak_pss / 2**20)  # the tree's real footprint
    result["peak_rss_mb"] = round(peak_rss / 2**20)  # summed RSS: counts shared pages once per process
    print(f"[{datetime.now(UTC):%H:%M:%S}] {part}: {json.dumps(result)}", flush=True)
    return result


def _generate(landing: Path, messages: int) -> dict[str, Any]:
    """``messages`` failed messages over three hours in chunks of one seed each (files of about 100 MB)."""
    from reprocess.landing.generate import GenerateOptions, write_landing

    marker = landing / f".complete-{messages}"
    if marker.exists():
        return json.loads(marker.read_text())
    shutil.rmtree(landing, ignore_errors=True)
    t = time.monotonic()
    done = 0
    seed = 7
    while done < messages:
        n = min(SEED_CHUNK, messages - done)
        write_landing(GenerateOptions(out=landing, messages=n, start=START, hours=3, seed=seed, fmt="jsonl",
                                      files_per_hour=4, malformed=4 if seed == 7 else 0))
        done += n
        seed += 1
        print(f"  generated {done:,} / {messages:,} messages", flush=True)
    facts = {"messages": messages, "bytes": sum(f.stat().st_size for f in landing.rglob("*.jsonl")),
             "files": len(list(landing.rglob("*.jsonl"))), "seconds": round(time.monotonic() - t, 1)}
    marker.write_text(json.dumps(facts))
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="landing messages (default 1000000)")
    parser.add_argument("--parts", default="floor,cycle,udf,schedule",
                        help=f"comma-separated parts to run, of {', '.join(PARTS)} (default floor,cycle,udf,schedule)")
    parser.add_argument("--waiting", type=int, default=10_000_000, help="due part: waiting messages (default 10M)")
    parser.add_argument("--due", type=int, default=100_000, help="due part: due messages (default 100k)")
    parser.add_argument("--due-landing", type=int, default=10_000,
                        help="due part: landing messages both cycles ingest (default 10000)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench", help="scratch directory (landing data is "
                        "kept between runs and regenerated only when --messages changes)")
    parser.add_argument("--driver-memory", default=os.environ.get("REPROCESS_DRIVER_MEMORY", "8g"),
                        help="heap of the local Spark JVM (default 8g)")
    parser.add_argument("--results", default=None, help="append the JSON figures to this file (JSON lines)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, Path(args.workdir), args.messages, json.loads(args.child_args))
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; choose from {', '.join(PARTS)}")
    import pyspark

    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, {_mem_gb()} GB RAM, Spark {pyspark.__version__} local[*], "
                   f"driver heap {args.driver_memory}",
        "command": "bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if set(parts) & {"floor", "cycle", "udf", "schedule", "connect"}:
        report["landing"] = _generate(work / f"landing-{args.messages}", args.messages)
    for part in parts:
        extra = {"waiting": args.waiting, "due": args.due, "due_landing": args.due_landing}
        report[part] = _run_child(part, args, extra)
    _ratios(report, args.messages)
    text = json.dumps(report, indent=2)
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(report) + "\n")
    return 0


def _mem_gb() -> int:
    import psutil

    return round(psutil.virtual_memory().total / 2**30)


def _ratios(r: dict[str, Any], messages: int) -> None:
    cores = os.cpu_count() or 1
    out: dict[str, Any] = {}
    if "cycle" in r:
        s = r["cycle"]["seconds"]
        out["messages_per_second_per_core"] = round(messages / s / cores)
        out["gx_share_of_cycle"] = round(r["cycle"]["steps"].get("validate", 0) / s, 3)
        if "floor" in r:
            out["cycle_over_floor"] = round(s / r["floor"]["text_to_parquet_s"], 2)
        if "udf" in r:
            out["udf_cycle_over_builtin_cycle"] = round(r["udf"]["seconds"] / s, 2)
    if "connect" in r:
        again = r["connect"]["again"]["seconds"]
        out["connect_messages_per_second_per_core"] = round(messages / again / cores)
        out["connect_us_per_message"] = round(again / messages * 1e6, 1)
        if "cycle" in r:
            out["connect_again_over_cycle"] = round(again / r["cycle"]["seconds"], 2)
    if "schedule" in r:
        sch = r["schedule"]
        out["udf_schedule_over_builtin_schedule"] = round(sch["udf_s"] / sch["builtin_s"], 2)
        if "scan_s" in sch and sch["builtin_s"] > sch["scan_s"]:  # the schedule's own cost, the scan taken off
            out["udf_over_builtin_net_of_scan"] = round((sch["udf_s"] - sch["scan_s"])
                                                        / (sch["builtin_s"] - sch["scan_s"]), 2)
    if "due" in r:
        out["due_big_over_small"] = round(r["due"]["big"]["seconds"] / r["due"]["small"]["seconds"], 2)
    r["ratios"] = out


# -- the children: one measurement each, a JSON line on stdout -----------------------------------------------------

def _session(name: str) -> Any:
    from reprocess.sparkutil import build_session

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return build_session(name)


def _cycle(spark: Any, landing: Path, warehouse: Path, as_of_ms: int = AS_OF_MS) -> tuple[float, dict[str, Any]]:
    from reprocess.cli import load_config
    from reprocess.cycle.run import CycleOptions, run_cycle

    shutil.rmtree(warehouse, ignore_errors=True)
    opts = CycleOptions(landing=str(landing), warehouse=str(warehouse), policies=load_config(None),
                        as_of_ms=as_of_ms, target="outbox")
    t = time.monotonic()
    summary = run_cycle(spark, opts)
    return time.monotonic() - t, summary


def _warm_up(spark: Any, work: Path) -> None:
    """A tiny cycle first, so JVM start-up and first-use costs are charged to no measurement."""
    from reprocess.landing.generate import GenerateOptions, write_landing

    tiny = work / "tiny"
    if not tiny.exists():
        write_landing(GenerateOptions(out=tiny, messages=200, start=START, hours=1))
    _cycle(spark, tiny, work / "wh-warm")


def udf_decision_columns(policies: Any, index: Any, k: Any, message_id: Any) -> tuple[Any, Any]:
    """``decision_columns`` as a row-at-a-time Python UDF over the pure-Python reference (the naive variant)."""
    from pyspark.sql import functions as F

    from reprocess.policy import reference

    items = policies.effective

    @F.udf("struct<exhausted:boolean,delay:bigint>")
    def decide(idx: int | None, k: int | None, message_id: str | None) -> tuple[bool, int] | None:
        if idx is None or k is None:
            return None
        p = items[idx]
        return reference.exhausted(p, k), max(0, reference.delay_ms(p, k, message_id or ""))

    d = decide(index, k, message_id)
    return d["exhausted"], d["delay"]


def _child(part: str, work: Path, messages: int, extra: dict[str, Any]) -> int:
    spark = _session(f"bench-{part}")
    landing = work / f"landing-{messages}"
    result: dict[str, Any]
    if part == "floor":
        result = _floor(spark, landing, work)
    elif part in ("cycle", "udf"):
        _warm_up(spark, work)
        if part == "udf":
            import reprocess.ledger.merge as merge

            merge.decision_columns = udf_decision_columns
        seconds, s = _cycle(spark, landing, work / f"wh-{part}")
        result = {"seconds": round(seconds, 1), "steps": s["step_seconds"], "ingested": s["ingested"],
                  "due": s["due"], "messages_after": s["messages_after"],
                  "dead_lettered": s["dead_lettered"]["total"]}
    elif part == "connect":
        _warm_up(spark, work)
        result = {}
        for name in ("first", "again"):  # the server's first large cycle, then one with its JIT warm
            seconds, s = _cycle(spark, landing, work / f"wh-connect-{name}")
            result[name] = {"seconds": round(seconds, 1), "steps": s["step_seconds"], "due": s["due"],
                            "messages_after": s["messages_after"]}
    elif part == "schedule":
        result = _schedule(spark, work)
    else:
        result = _due(spark, work, extra)
    spark.stop()
    print(json.dumps(result), flush=True)
    return 0


def _floor(spark: Any, landing: Path, work: Path) -> dict[str, Any]:
    files = [str(p) for p in sorted(landing.rglob("*.jsonl"))]
    from reprocess.landing.contract import one_file_per_partition

    one_file_per_partition(spark, max(Path(f).stat().st_size for f in files))  # the cycle reads them the same way
    spark.read.text(files[:1]).write.mode("overwrite").parquet(str(work / "floor-warm"))
    t = time.monotonic()
    spark.read.text(files).write.mode("overwrite").parquet(str(work / "floor-text"))
    text_s = time.monotonic() - t
    t = time.monotonic()
    spark.read.parquet(str(work / "floor-text")).write.mode("overwrite").parquet(str(work / "floor-parquet"))
    parquet_s = time.monotonic() - t
    return {"text_to_parquet_s": round(text_s, 1), "parquet_copy_s": round(parquet_s, 1),
            "parquet_mb": round(sum(p.stat().st_size for p in (work / "floor-text").rglob("*.parquet")) / 2**20)}


def _schedule(spark: Any, work: Path) -> dict[str, Any]:
    """Decisions for the next failed delivery of every ledger row the cycle wrote: built-ins vs the UDF."""
    from pyspark.sql import functions as F

    from reprocess.cli import load_config
    from reprocess.ledger.model import LEDGER_FILE_SCHEMA
    from reprocess.policy.columns import decision_columns, policy_index_column
    from reprocess.sparkutil import JIT_SIZED_CODEGEN_FROM_BYTES, fit_codegen, sized_codegen
    from reprocess.storage.commit import Warehouse

    policies = load_config(None)
    wh = Warehouse(work / "wh-cycle")
    files = wh.live_files("ledger")
    if not files:
        raise SystemExit("the schedule part reads the ledger of the cycle part: run --parts cycle first")
    rows = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*files).select("message_id", "address", "deliveries")
    rows = rows.withColumn("idx", policy_index_column(policies, F.col("address"),
                                                                F.lit(None).cast("string"))).cache()
    n = rows.count()

    def scan_only(policies: Any, index: Any, k: Any, message_id: Any) -> tuple[Any, Any]:
        return F.lit(False), k  # the same scan and output, no schedule: what every variant pays regardless

    timings = {}

    def timed(name: str, fn: Any) -> None:
        ex, delay = fn(policies, F.col("idx"), F.col("deliveries") + 1, F.col("message_id"))
        t = time.monotonic()
        rows.select("message_id", ex.alias("exhausted"), delay.alias("delay")).write.format("noop") \
            .mode("overwrite").save()
        timings[name] = time.monotonic() - t

    # "wholestage": Spark's default code generation, whose fused method over five policies is too big for the JIT
    for name, fn in (("scan", scan_only), ("wholestage", decision_columns), ("udf", udf_decision_columns),
                     ("wholestage_again", decision_columns)):
        timed(name, fn)
    with sized_codegen(spark):
        fit_codegen(spark, JIT_SIZED_CODEGEN_FROM_BYTES)  # "builtin": as a cycle over a large input
        for name, fn in (("builtin", decision_columns), ("scan_again", scan_only),
                         ("builtin_again", decision_columns)):
            timed(name, fn)
    rows.unpersist()
    return {"rows": n, "builtin_s": round(min(timings["builtin"], timings["builtin_again"]), 2),
            "udf_s": round(timings["udf"], 2), "scan_s": round(min(timings["scan"], timings["scan_again"]), 2),
            "builtin_wholestage_s": round(min(timings["wholestage"], timings["wholestage_again"]), 2)}


def _seed_warehouse(spark: Any, wh_root: Path, waiting: int, due: int, as_of_ms: int) -> None:
    """A committed warehouse holding ``waiting`` WAITING_RETRY messages, ``due`` of them due at the as-of and the
    rest spread over the next 30 days (one ledger file per hour bucket), written straight with Spark."""
    from pyspark.sql import functions as F
    from seed_ledger import commit_seed, waiting_rows

    shutil.rmtree(wh_root, ignore_errors=True)
    later = waiting - due
    next_attempt = F.when(F.col("id") < due, F.lit(as_of_ms) - F.lit(60_000) - F.col("id") % 1000) \
        .otherwise(F.lit(as_of_ms + HOUR) + (F.col("id") - due) * F.lit(30 * 24 * HOUR) / F.lit(max(later, 1)))
    df = waiting_rows(spark, waiting, as_of_ms, F.format_string('{"order": %d}', F.col("id")), next_attempt)
    stage = wh_root / "_seed"
    df.repartition("bucket").write.partitionBy("bucket").parquet(str(stage))
    commit_seed(wh_root, stage, waiting, as_of_ms)


def _due(spark: Any, work: Path, extra: dict[str, Any]) -> dict[str, Any]:
    from reprocess.landing.generate import GenerateOptions, write_landing

    landing = work / f"due-landing-{extra['due_landing']}"
    if not landing.exists():
        write_landing(GenerateOptions(out=landing, messages=extra["due_landing"], start=START, hours=3, seed=99))
    _warm_up(spark, work)
    out: dict[str, Any] = {}
    for name, waiting in (("small", extra["due"]), ("big", extra["waiting"])):
        root = work / f"wh-due-{name}"
        pristine = work / f"seed-{waiting}-{extra['due']}"
        t = time.monotonic()
        if not (pristine / "_snapshots").is_dir():
            _seed_warehouse(spark, pristine, waiting, extra["due"], AS_OF_MS)
        seed_s = time.monotonic() - t
        shutil.rmtree(root, ignore_errors=True)  # a cycle changes its warehouse: start from a copy of the seed
        shutil.copytree(pristine, root)
        from reprocess.cli import load_config
        from reprocess.cycle.run import CycleOptions, run_cycle

        opts = CycleOptions(landing=str(landing), warehouse=str(root), policies=load_config(None),
                            as_of_ms=AS_OF_MS, target="outbox")
        t = time.monotonic()
        s = run_cycle(spark, opts)
        out[name] = {"waiting": waiting, "seconds": round(time.monotonic() - t, 1), "seed_s": round(seed_s, 1),
                     "due": s["due"], "ledger_files_rewritten": s["ledger_files_rewritten"],
                     "steps": s["step_seconds"]}
    return out


if __name__ == "__main__":
    sys.exit(main())
