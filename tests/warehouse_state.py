"""What a committed warehouse holds, for tests that compare an interrupted run with an uninterrupted one, and the
cycles those tests run: in this process, or as a ``reprocess run`` process of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from reprocess.cli import load_config, parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.spark_env import DRIVER_MEMORY_ENV
from reprocess.storage.commit import DATASETS, Snapshot, Warehouse
from reprocess.storage.read import read_dataset

FLAKY = "python:reprocess.targets.examples:flaky"
CFILE = "reprocess.hadoop.ConditionalLocalFileSystem"  # the local disk as cfile:, with an object store's conditions

# where a run's file stays on a Hadoop warehouse: the folder its attempt wrote it into, under its final name
IN_PLACE = re.compile(r"^(ledger|dlq|outbox|quarantine|manifest)/[^/]+\.attempt-[0-9a-f]{12}/(.+/)?"
                      r"(part-[^/]+|manifest)\.parquet$")


def assert_only_live_files(root: Path, folders: bool = True) -> None:
    """Every Parquet file in the dataset folders is named by the latest snapshot or the one before it (the vacuum
    keeps both); with ``folders``, an attempt's folder is left only while such a file is in it (a writer killed
    between its commit and its vacuum leaves the empty ones to the next commit's vacuum)."""
    versions = sorted(int(p.stem) for p in (root / "_snapshots").glob("*.json"))
    snaps = [Snapshot.from_json((root / "_snapshots" / f"{v:08d}.json").read_text()) for v in versions[-2:]]
    live = {f for snap in snaps for files in snap.files.values() for f in files}
    on_disk = {str(p.relative_to(root)) for d in DATASETS if (root / d).is_dir() for p in (root / d).rglob("*.parquet")}
    assert on_disk == live, (sorted(on_disk - live)[:5], sorted(live - on_disk)[:5])
    if not folders:
        return
    left = {p for d in DATASETS if (root / d).is_dir() for p in (root / d).iterdir() if ".attempt-" in p.name}
    assert left == {root / Path(f).parts[0] / Path(f).parts[1] for f in live if IN_PLACE.match(f)}


def kept_rdds(spark: Any) -> set[int]:
    """The ids of the RDDs the session keeps blocks of (cached frames' and local checkpoints'). Compare ids, not a
    count: what an earlier test left may be collected meanwhile."""
    jsc = spark.sparkContext._jsc
    return {int(i) for i in jsc.getPersistentRDDs().keySet()} | {
        int(info.id()) for info in jsc.sc().getRDDStorageInfo()}


def cycle_at(spark: Any, landing: Path, wh: Path, as_of: str, target: str = FLAKY, **options: Any) -> dict[str, Any]:
    """One cycle in this process as of ``as_of`` (ISO 8601) with the embedded policies and any other
    :class:`CycleOptions` given; its summary."""
    return run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=load_config(None),
                                         as_of_ms=parse_instant(as_of), target=target, **options))


def cli_run(landing: Path, wh: Path, as_of: str, *args: str, memory: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One ``reprocess run`` process (a driver JVM of its own, ``local[2]``, the summary as JSON) as of ``as_of``, with
    ``args`` added to the command and ``env`` to the environment; its heap is ``memory``, else the CLI's default (a
    ``REPROCESS_DRIVER_MEMORY`` of the caller's environment is not passed on)."""
    full = {k: v for k, v in os.environ.items() if k != DRIVER_MEMORY_ENV}
    full.update({**(env or {}), "PYSPARK_PYTHON": sys.executable})
    if memory:
        full[DRIVER_MEMORY_ENV] = memory
    cmd = [sys.executable, "-m", "reprocess.cli", "run", "--landing", str(landing), "--warehouse", str(wh),
           "--as-of", as_of, "--master", "local[2]", "--format", "json", *args]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=600)


def warehouse_state(spark: Any, wh: Path) -> dict[str, Any]:
    """Ledger rows by message id, and the sorted message ids of the DLQ, outbox and quarantine.

    Asserts the invariants every committed state keeps: one ledger row per message, no dead letter or outbox
    record twice for one delivery, no quarantined record twice.
    """
    ledger = read_dataset(spark, str(wh), "ledger")
    rows = {r.message_id: (r.state, r.deliveries, r.next_attempt_ms, r.reason_code)
            for r in ledger.select("message_id", "state", "deliveries", "next_attempt_ms", "reason_code").collect()}
    assert len(rows) == ledger.count(), "duplicate message in the ledger"
    out: dict[str, Any] = {"ledger": rows}
    keys = {"dlq": ["message_id", "deliveries"], "outbox": ["message_id", "idempotency_key"],  # once per delivery
            "quarantine": ["source_file", "record_no"]}
    for name, key in keys.items():
        df = read_dataset(spark, str(wh), name)
        if df is None:
            out[name] = []
            continue
        twice = df.groupBy(*key).count().filter(F.col("count") > 1).count()
        assert twice == 0, f"{twice} records twice in {name}"
        out[name] = sorted(tuple(str(v) for v in r) for r in df.select(*key).collect())
    return out


def assert_committed_cleanly(wh: Path) -> None:
    """No run left half-done: no prepared run, contiguous snapshots, every committed run balanced."""
    w = Warehouse(wh)
    assert w.prepared_runs() == [], "a prepared run was left behind"
    assert w.run_ids("run-") == [], "a run's folder was left behind"
    versions = sorted(int(p.stem) for p in (wh / "_snapshots").glob("*.json") if p.stem.isdigit())
    assert versions == list(range(versions[0], versions[-1] + 1)), f"snapshot versions not contiguous: {versions}"
    for run in w.latest().runs:
        checks = run["summary"].get("conservation")
        if checks is not None:
            assert all(checks.values()), f"{run['run_id']} does not balance: {checks}"
