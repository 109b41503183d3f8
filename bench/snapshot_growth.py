"""How the warehouse's commit metadata grows with the number of runs: the latest snapshot file's size, the whole
``_snapshots/`` folder, and the time to read the latest snapshot and commit the next, bounded (the run log's
summaries for the newest ``FULL_RUNS`` runs, the newest ``KEEP_SNAPSHOTS`` files) and unbounded (as before).

No Spark: the commits are the local warehouse's own (``Warehouse.latest``, ``commit``, ``vacuum``) with a run
summary of ``--summary-bytes`` (1,800 bytes is a real cycle's summary), each run marked as having Data Docs and
the marks of runs past the retention (``DATA_DOCS_DAYS``) taken off as a cycle takes them. A DAG every 15 minutes
makes 96 runs a day, 2,880 a month, 35,000 a year.

    .venv/bin/python bench/snapshot_growth.py --runs 3000 [--results bench/results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))

from reprocess.storage import commit  # noqa: E402
from reprocess.storage.commit import Snapshot, Warehouse  # noqa: E402


def _summary(size: int) -> dict:
    doc = {"states": {"WAITING_RETRY": 1200, "DELIVERED": 98000, "DEAD_LETTERED": 800},
           "conservation": {"balance": True, "dlq": True}, "due": 5000, "delivered": 4100}
    doc["padding"] = "x" * max(0, size - len(json.dumps(doc)))
    return doc


def measure(runs: int, summary_bytes: int, bounded: bool, marks: list[int]) -> list[dict]:
    if not bounded:  # what every commit did before the bound
        commit.FULL_RUNS = commit.KEEP_SNAPSHOTS = 10**9
    root = Path(tempfile.mkdtemp(prefix="reprocess-snapgrowth-"))
    wh, summary, out = Warehouse(root), _summary(summary_bytes), []
    try:
        for i in range(1, runs + 1):
            t = time.perf_counter()
            snap = wh.latest()
            new = Snapshot(files={k: list(v) for k, v in snap.files.items()}, runs=list(snap.runs),
                           as_of_ms=1_795_000_000_000 + i * 900_000)
            new.runs.append({"run_id": f"run-{i:06d}", "as_of_ms": new.as_of_ms, "summary": summary,
                             "data_docs": True})
            commit.expire_data_docs(wh, new, new.as_of_ms, commit.DATA_DOCS_DAYS)  # as a cycle does
            wh.commit(snap, new)
            wh.vacuum(new, keep_previous=snap)
            seconds = time.perf_counter() - t
            if i in marks:
                files = list(wh.snapshots_dir.iterdir())
                latest = os.path.getsize(wh.snapshots_dir / commit.snapshot_name(i))
                row = {"runs": i, "bounded": bounded, "latest_mb": round(latest / 1e6, 3),
                       "snapshots_files": len(files),
                       "snapshots_mb": round(sum(f.stat().st_size for f in files) / 1e6, 1),
                       "latest_and_commit_s": round(seconds, 4)}
                print(json.dumps(row), flush=True)
                out.append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        commit.FULL_RUNS, commit.KEEP_SNAPSHOTS = 100, 10
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3000, help="commits to make (default 3000, a month at 15 min)")
    p.add_argument("--summary-bytes", type=int, default=1800, help="size of each run's summary (default 1800)")
    p.add_argument("--modes", default="bounded,unbounded", help="bounded, unbounded or both (default)")
    p.add_argument("--results", help="append the figures as JSON lines to this file")
    args = p.parse_args(argv)
    marks = sorted({m for m in (100, 500, 1000, 2000, 3000, 10000, 35000, args.runs) if m <= args.runs})
    rows = []
    for mode in args.modes.split(","):
        rows += measure(args.runs, args.summary_bytes, mode == "bounded", marks)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"bench": "snapshot_growth", "date": time.strftime("%Y-%m-%d"),
                                 "summary_bytes": args.summary_bytes, "rows": rows}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
