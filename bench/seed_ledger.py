"""A committed warehouse of waiting ledger rows written straight with Spark, for the benches that need a large ledger
without running the cycles that would build it (``scale.py --parts due``, ``skewed_ledger.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

HOUR = 3_600_000


def waiting_rows(spark: Any, count: int, as_of_ms: int, payload: Any, next_attempt_ms: Any) -> Any:
    """``count`` ledger rows ``w-0000000000``... (``F.col("id")`` counts them from 0), each WAITING_RETRY after one
    failure an hour before ``as_of_ms``, with the columns ``payload`` and ``next_attempt_ms`` (expressions of ``id``),
    their ``bucket`` added."""
    from pyspark.sql import functions as F

    from reprocess.ledger.model import LEDGER_COLUMNS, WAITING, bucket_column

    df = spark.range(count).select(
        F.format_string("w-%010d", F.col("id")).alias("message_id"),
        F.lit("orders.created").alias("address"),
        payload.alias("payload"),
        F.create_map().cast("map<string,string>").alias("headers"),
        F.lit(None).cast("string").alias("extra"),
        F.lit("order-service").alias("consumer_group"),
        F.lit(None).cast("string").alias("ordering_key"),
        F.lit("orders.#").alias("policy"),
        F.lit("activemq").alias("profile"),
        F.lit(WAITING).alias("state"),
        F.lit(1).cast("long").alias("deliveries"),
        F.lit(as_of_ms - HOUR).cast("long").alias("first_failed_ms"),
        F.lit(as_of_ms - HOUR).cast("long").alias("last_failed_ms"),
        next_attempt_ms.cast("long").alias("next_attempt_ms"),
        F.lit("TimeoutError").alias("last_error_class"),
        F.lit("downstream timed out after 30s").alias("last_error_message"),
        F.array(F.struct(F.lit(as_of_ms - HOUR).cast("long").alias("failed_ms"),
                         F.lit(1).cast("long").alias("delivery"), F.lit("TimeoutError").alias("error_class"),
                         F.lit("downstream timed out after 30s").alias("error_message"),
                         F.col("id").alias("fp"))).alias("error_history"),
        F.lit(None).cast("string").alias("reason_code"),
        F.lit(None).cast("string").alias("dead_letter_address"),
        F.lit(None).cast("long").alias("terminal_ms"),
        F.lit("seed").alias("updated_run"),
        F.lit(None).cast("long").alias("released_deliveries"),
        F.lit(None).cast("long").alias("resets"),
        F.lit(None).cast("long").alias("reset_ms"),
    )
    return df.withColumn("bucket", bucket_column(F.col("state"), F.col("next_attempt_ms"), F.col("terminal_ms"))) \
        .select(*LEDGER_COLUMNS)


def commit_seed(root: Path, stage: Path, waiting: int, as_of_ms: int) -> None:
    """Make the ledger files staged at ``stage`` (written ``partitionBy("bucket")``, then removed) the ledger of the
    new warehouse ``root``, committed as one run an hour before ``as_of_ms`` that left ``waiting`` messages waiting."""
    import shutil

    from reprocess.ledger.model import STATES, WAITING
    from reprocess.storage.commit import Snapshot, Warehouse

    wh = Warehouse(root)
    files = wh.publish("seed", "ledger", stage)
    shutil.rmtree(stage)
    states = {s: 0 for s in STATES}
    states[WAITING] = waiting
    snap = Snapshot(as_of_ms=as_of_ms - HOUR)
    snap.files["ledger"] = files
    snap.runs.append({"run_id": "seed", "as_of_ms": as_of_ms - HOUR, "summary": {"states": states}})
    wh.commit(Snapshot(), snap)
