"""Dead-letter records: what an operator finds in ``<warehouse>/dlq/address=<dla>/dt=<date>/``.

``address`` (the partition) is the dead-letter address: Artemis's ``dead-letter-address``, the
configured default where Artemis would have dropped the message (reason ``NO_DEAD_LETTER_ADDRESS``),
or the original address. ``original_address`` is Artemis's ``_AMQ_ORIG_ADDRESS``. Spark escapes
partition values (``/``, ``=``, ``%``, ``:`` ...), so no address can leave the ``dlq`` folder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from reprocess.sparkutil import with_as_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

DLQ_COLUMNS = (
    "message_id", "original_address", "payload", "headers", "extra", "deliveries", "first_failed_at",
    "last_failed_at", "dead_lettered_at", "reason_code", "last_error_class", "last_error_message", "error_history",
    "policy", "profile", "consumer_group", "ordering_key", "run_id",
)

# Columns whose values are (nearly) unique per message: written without a Parquet dictionary
# (sparkutil.parquet_options).
DLQ_UNIQUE_COLUMNS = ("message_id", "payload", "headers.key_value.value", "first_failed_at", "last_failed_at",
                      "error_history.list.element.failed_ms", "error_history.list.element.fp")


def dlq_records(dead: DataFrame, run_id: str, as_of_ms: int, codegen: str) -> DataFrame:
    """DLQ rows for ledger rows dead-lettered in this run, with ``address`` and ``dt`` partition columns.

    ``codegen`` is the cycle's code generation mode: with generated code the as-of reaches the rows as data
    (:func:`reprocess.sparkutil.with_as_of`)."""
    dead, as_of = with_as_of(dead, as_of_ms, codegen)
    at = F.timestamp_millis(as_of)
    return dead.select(
        "message_id",
        F.col("address").alias("original_address"),
        "payload", "headers", "extra", "deliveries",
        F.timestamp_millis("first_failed_ms").alias("first_failed_at"),
        F.timestamp_millis("last_failed_ms").alias("last_failed_at"),
        at.alias("dead_lettered_at"),
        "reason_code", "last_error_class", "last_error_message", "error_history", "policy", "profile",
        "consumer_group", "ordering_key",
        F.lit(run_id).alias("run_id"),
        F.col("dead_letter_address").alias("address"),
        F.date_format(at, "yyyy-MM-dd").alias("dt"),
    )
