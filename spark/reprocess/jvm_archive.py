"""``reprocess jvm-archive``: record the classes a cycle's driver JVM loads into a class-data-sharing archive.

Each DAG run is a fresh ``spark-submit``, and its JVM reads, verifies and links tens of thousands of Spark,
Hadoop and Parquet classes before it does any work. A dynamic CDS archive (JDK 13+, ``-XX:ArchiveClassesAtExit``)
holds them pre-parsed; a driver started with ``-XX:SharedArchiveFile`` maps it instead
(:func:`reprocess.spark_env.driver_java_options` adds the option when the archive exists).

The archive is recorded by running real cycles: a small generated landing, three hourly cycles with the GX gate,
in a temporary folder, then the JVM is stopped so it writes the archive as it exits. The archive is only valid for
the JDK and the jars it was made with; ``make venv`` re-creates it when the venv changes, and the JVM refuses a
stale one with one warning on stderr and runs without it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
JVM_EXIT_TIMEOUT_S = 300  # writing a 200 MB archive takes a few seconds


def build(out: Path, messages: int = 400) -> dict[str, Any]:
    """Record the archive of a cycle's driver JVM into ``out`` (replaced atomically); returns what was done."""
    from pyspark import SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None:
        raise RuntimeError("jvm-archive must start its own JVM: run it as a command, not inside a Spark job")
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    t0 = time.monotonic()
    try:
        return _record(out, partial, messages, t0)
    finally:
        partial.unlink(missing_ok=True)


def _record(out: Path, partial: Path, messages: int, t0: float) -> dict[str, Any]:
    from reprocess.cli import load_config
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.landing.generate import GenerateOptions, write_landing
    from reprocess.spark_env import archive_record
    from reprocess.sparkutil import build_session

    start = datetime(2026, 11, 21, tzinfo=UTC)
    with tempfile.TemporaryDirectory(prefix="reprocess-jvm-archive-") as tmp:
        landing, warehouse = Path(tmp) / "landing", Path(tmp) / "warehouse"
        write_landing(GenerateOptions(out=landing, messages=messages, hours=3, seed=7, start=start))
        spark = build_session("reprocess-jvm-archive", master="local[*]", dump_jvm_archive=str(partial))
        try:
            policies = load_config(None)
            for hour in (1, 2, 3):
                run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(warehouse), policies=policies,
                                              as_of_ms=int(start.timestamp() * 1000) + hour * HOUR_MS))
                log.info("jvm-archive: cycle %d of 3 done", hour)
        finally:  # also on failure: the JVM writes its archive as it exits, before `build` removes the partial
            _stop_jvm(spark)
    if not partial.is_file() or partial.stat().st_size == 0:
        raise RuntimeError(f"the JVM exited without writing its class-data archive to {partial}")
    size = partial.stat().st_size
    record = archive_record(out)
    record.unlink(missing_ok=True)  # the old record must not vouch for the new archive, even for a moment
    os.replace(partial, out)
    record_partial = record.with_name(f".{record.name}.{os.getpid()}.partial")
    record_partial.write_text(json.dumps({"bytes": size}) + "\n", encoding="utf-8")
    os.replace(record_partial, record)
    return {"archive": str(out), "bytes": size, "seconds": round(time.monotonic() - t0, 1)}


def _stop_jvm(spark: Any) -> None:
    """Stop Spark and wait for the JVM to exit: it writes the archive on its way out.

    The gateway JVM exits when its stdin closes (Spark's ``PythonGatewayServer``); pyspark leaves that to the
    interpreter's exit and does not wait, so the archive would still be being written when this command ends.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        raise RuntimeError("the Spark JVM was not started by this process; no archive can be recorded")
    gateway.shutdown()
    proc.stdin.close()
    proc.wait(timeout=JVM_EXIT_TIMEOUT_S)
    SparkContext._gateway = None
    SparkContext._jvm = None


__all__ = ["build"]
