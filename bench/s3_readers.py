"""The readers without Spark on a warehouse in a bucket against the same warehouse on the local disk: wall time of
each operator command and the HTTP requests it makes to the store.

Two cycles (everything new, then an hour later) write a warehouse on the local disk; it is copied into a bucket of
the S3 test server (moto in server mode, ``make services`` installs it into ``.s3server/``); then each command runs
``--repeat`` times from each, alternating. moto is a Python server on loopback: its time per request says nothing
of S3's, but the number of requests is what S3 bills and what its round trips multiply.

    .venv/bin/python bench/s3_readers.py --messages 100000 [--repeat 3] [--results bench/results.jsonl]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "spark"), str(ROOT / "dev")]
BUCKET = "bench"
REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) ')


def _build(root: Path, messages: int) -> Path:
    from reprocess.cli import load_config, parse_instant
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.landing.generate import GenerateOptions, write_landing
    from reprocess.sparkutil import build_session

    landing, wh = root / "landing", root / "wh"
    write_landing(GenerateOptions(out=landing, messages=messages, hours=2, seed=7))
    spark = build_session("reprocess-bench-s3-readers", master="local[2]")
    try:
        for as_of in ("2026-11-21T02:00:00Z", "2026-11-21T03:00:00Z"):
            run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=load_config(None),
                                          as_of_ms=parse_instant(as_of),
                                          target="python:reprocess.targets.examples:flaky"))
    finally:
        spark.stop()
    return wh


def _run(args: list[str]) -> float:
    from reprocess.cli import main

    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    if code != 0:
        raise SystemExit(f"reprocess {' '.join(args)} exited {code}")
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=100_000, help="messages in the landing (default 100000)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each command on each warehouse (default 3)")
    p.add_argument("--results", help="append the figures as a JSON line to this file")
    args = p.parse_args(argv)
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from s3_server import MOTO, admin_filesystem, aws_env, running_s3_server

    if not MOTO.exists():  # before the minute the warehouse takes to build
        raise SystemExit(f"{MOTO} is missing: run `make services`")

    from reprocess.storage.commit import Warehouse

    root = Path(tempfile.mkdtemp(prefix="reprocess-s3bench-"))
    t = time.perf_counter()
    local = _build(root, args.messages)
    print(f"built the warehouse in {time.perf_counter() - t:.0f} s", flush=True)
    snap = Warehouse(local).latest()
    live = {d: len(f) for d, f in snap.files.items()}
    log_path = root / "moto.log"
    with running_s3_server(log_path) as endpoint:
        os.environ.update(aws_env(endpoint))
        fs = admin_filesystem(endpoint)
        fs.create_dir(BUCKET)
        t = time.perf_counter()
        pafs.copy_files(str(local), f"{BUCKET}/wh", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        print(f"copied into the bucket in {time.perf_counter() - t:.0f} s", flush=True)
        message_id = pq.read_table(local / snap.files["dlq"][0], columns=["message_id"])["message_id"][0].as_py()
        report = str(root / "report.html")
        commands = {"dlq stats": (["dlq", "stats"], []), "dlq list": (["dlq", "list"], ["--limit", "50"]),
                    "dlq show": (["dlq", "show"], [message_id]), "ledger stats": (["ledger", "stats"], []),
                    "report": (["report"], ["--out", report])}
        rows = []
        for name, (command, extra) in commands.items():
            times: dict[str, list[float]] = {"local": [], "s3": []}
            requests = []
            for _ in range(args.repeat):
                times["local"].append(_run([*command, "--warehouse", str(local), *extra]))
                before = len(REQUEST.findall(log_path.read_text()))
                times["s3"].append(_run([*command, "--warehouse", f"s3a://{BUCKET}/wh", *extra]))
                time.sleep(0.2)  # the server's log line follows its reply
                requests.append(len(REQUEST.findall(log_path.read_text())) - before)
            row = {"command": name, "local_s": round(statistics.median(times["local"]), 3),
                   "s3_s": round(statistics.median(times["s3"]), 3), "s3_requests": max(requests)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"live files: {live}")
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"bench": "s3_readers", "date": time.strftime("%Y-%m-%d"), "messages": args.messages,
                                 "live_files": live, "rows": rows}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
