"""What a warehouse on a Hadoop URI costs against a local one (issue [6/7], docs/adr/0005): the same cycles, side
by side in one JVM, into a local warehouse and into a ``cfile:`` one (``reprocess.hadoop.ConditionalLocalFileSystem``:
the same disk, reached through Hadoop's ``FileSystem`` and py4j like ``s3a://``).

The difference is the store layer's own cost: snapshot reads, listing, the publish and the vacuum through py4j,
the lease thread. It is not what S3 costs: there a rename is a copy and every call a round trip. For each run: the
cycle's wall time, the part after its summary (publish, summary file, commit, vacuum), the files the snapshot
lists, and the files (and megabytes) the commit added: what a publish by rename would copy once more on S3. A
``cfile:`` warehouse writes them in place; a local one moves them by rename. Each run is a first cycle (everything
new) then a second one an hour later (its due messages re-driven, their ledger files rewritten). Prints a table
and a JSON document (appended to ``--results``). Nothing is asserted.

With ``--remote`` the cycles run as a Spark Connect client of a server this script starts (``reprocess
connect-server``, its heap ``$REPROCESS_DRIVER_MEMORY``): then every store call of the ``cfile:`` warehouse is one
request to the server's driver (``reprocess.connect.StorePlugin``) instead of a py4j call.

Example::

    .venv/bin/python bench/object_store.py --messages 1000000 --repeat 2
    REPROCESS_DRIVER_MEMORY=10g .venv/bin/python bench/object_store.py --messages 1000000 --repeat 1 --remote
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402  (bench/scale.py: input generation, the session)

FS_CLASS = "reprocess.hadoop.ConditionalLocalFileSystem"
HOUR_MS = 3_600_000


def _run(spark: Any, landing: Path, warehouse: str, as_of_ms: int) -> dict[str, Any]:
    from reprocess.cli import load_config
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.storage.commit import open_warehouse

    opts = CycleOptions(landing=str(landing), warehouse=warehouse, policies=load_config(None), as_of_ms=as_of_ms,
                        target="outbox")
    before = {f for v in open_warehouse(warehouse).latest().files.values() for f in v}
    t = time.monotonic()
    summary = run_cycle(spark, opts)
    wall = time.monotonic() - t
    after = {f for v in open_warehouse(warehouse).latest().files.values() for f in v}
    root = Path(warehouse.removeprefix("cfile://"))
    added = after - before
    # what the commit added: the files (and bytes) a publish by rename would copy once more on S3 (copy + delete)
    return {"wall_s": round(wall, 2), "after_summary_s": round(wall - summary["elapsed_s"], 2),
            "due": summary["due"], "files": len(after), "added_files": len(added),
            "added_mb": round(sum((root / f).stat().st_size for f in added) / 1e6, 1),
            "in_place": all(".attempt-" in f.split("/")[1] for f in added if f.count("/") > 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages in the landing input (default 1M)")
    p.add_argument("--repeat", type=int, default=2, help="runs per warehouse kind, alternating (default 2)")
    p.add_argument("--work", type=Path, default=Path("/tmp/reprocess-bench"), help="input and warehouses")
    p.add_argument("--results", type=Path, help="append the JSON document to this file (JSON lines)")
    p.add_argument("--remote", action="store_true", help="run the cycles as a client of a Spark Connect server")
    args = p.parse_args(argv)

    landing = args.work / f"landing-{args.messages}"
    if not landing.exists():
        scale._generate(landing, args.messages)
    if args.remote:
        with _connect_server(args.work) as url:
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(url).create()
            return _measure(spark, args, landing)
    spark = scale._session("reprocess-bench-object-store")
    spark.sparkContext._jsc.hadoopConfiguration().set("fs.cfile.impl", FS_CLASS)
    return _measure(spark, args, landing)


@contextmanager
def _connect_server(work: Path) -> Iterator[str]:
    import os

    from reprocess.connect_server import free_port, running_server

    port = free_port()
    memory = os.environ.get("REPROCESS_DRIVER_MEMORY", "2g")
    with running_server(port, work / "connect-server.log", ["--driver-memory", memory, "--conf",
                                                            f"spark.hadoop.fs.cfile.impl={FS_CLASS}"]):
        yield f"sc://localhost:{port}"


def _measure(spark: Any, args: argparse.Namespace, landing: Path) -> int:
    scale._warm_up(spark, args.work)
    for kind in ("local", "cfile"):  # the first use of each code path, charged to no measurement
        _run(spark, args.work / "tiny", _warehouse(args.work, kind, "warm"), scale.AS_OF_MS)
    rows = []
    for i in range(args.repeat):
        for kind in ("local", "cfile"):
            wh = _warehouse(args.work, kind, str(i))
            first = _run(spark, landing, wh, scale.AS_OF_MS)
            second = _run(spark, landing, wh, scale.AS_OF_MS + HOUR_MS)
            rows.append({"kind": kind, "run": i, "first": first, "second": second})
            for name, r in (("first", first), ("second", second)):
                where = "over Connect " if args.remote else ""
                print(f"{kind:6} {where}run {i} {name:6}: {r['wall_s']:7.2f} s, after summary "
                      f"{r['after_summary_s']:5.2f} s, "
                      f"due {r['due']}, {r['files']} files live, {r['added_files']} added ({r['added_mb']} MB, "
                      f"{'written in place' if r['in_place'] else 'moved by rename'})", flush=True)
            shutil.rmtree(wh.removeprefix("cfile://"), ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=BENCH).stdout.strip()
    doc = {"bench": "object_store", "messages": args.messages, "commit": commit, "remote": args.remote,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": rows}
    print(json.dumps(doc))
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(doc) + "\n")
    spark.stop()
    return 0


def _warehouse(work: Path, kind: str, name: str) -> str:
    path = (work / f"wh-{kind}-{name}").resolve()
    shutil.rmtree(path, ignore_errors=True)
    return str(path) if kind == "local" else f"cfile://{path}"


if __name__ == "__main__":
    sys.exit(main())
