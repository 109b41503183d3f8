"""The ``outbox`` target: due messages are written to ``<warehouse>/outbox/address=.../`` for pickup.

Writing is part of the run's commit (the files are staged and published with the ledger), so a
message is in the outbox exactly when the ledger says it was delivered there. Each row carries the delivery's
``idempotency_key`` as the brokers' messages do (``<message_id>:<delivery>``, ``<message_id>:r<resets>.<delivery>``
after an operator's re-drive reset the count): ``(message_id, delivery)`` repeats after such a reset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from reprocess.sparkutil import parquet_options, with_as_of
from reprocess.targets.base import idempotency_key_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from reprocess.targets.base import RunContext


# Columns whose values are (nearly) unique per message: written without a Parquet dictionary.
OUTBOX_UNIQUE_COLUMNS = ("message_id", "idempotency_key", "payload", "headers.key_value.value")


class OutboxTarget:
    spec = "outbox"

    def redrive(self, due: DataFrame, run: RunContext) -> DataFrame:
        with_at, at = with_as_of(due, run.as_of_ms, run.codegen)
        rows = with_at.select("message_id", "address", "payload", "headers", "delivery", idempotency_key_column(),
                              F.lit(run.run_id).alias("run_id"), F.timestamp_millis(at).alias("redriven_at"))
        parquet_options(rows.write.mode("overwrite").partitionBy("address"), OUTBOX_UNIQUE_COLUMNS) \
            .parquet(run.outbox_dir or run.stage("outbox"))
        return due.select("message_id", "delivery", F.lit(True).alias("ok"),
                          F.lit(None).cast("string").alias("error_class"),
                          F.lit(None).cast("string").alias("error_message"))
