"""The retry ledger: one row per message, its state, deliveries and next attempt.

States: ``WAITING_RETRY`` (has ``next_attempt_ms``), ``DELIVERED``, ``DEAD_LETTERED``. Rows are
grouped in files by ``bucket``: waiting rows by the hour of their next attempt (``w`` + 13-digit
hour number, so buckets sort by time), terminal rows by month (``t<yyyyMM>``). A cycle reads the
waiting buckets that are due and the files holding messages that failed again, nothing else: its
cost follows new and due work, not the waiting history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql import types as T

# States and reason codes live in a pyspark-free module (the operator CLI reads them); re-exported here.
from reprocess.ledger.states import DEAD_LETTERED as DEAD_LETTERED
from reprocess.ledger.states import DELIVERED as DELIVERED
from reprocess.ledger.states import MAX_DELIVERIES_EXCEEDED as MAX_DELIVERIES_EXCEEDED
from reprocess.ledger.states import NO_DEAD_LETTER_ADDRESS as NO_DEAD_LETTER_ADDRESS
from reprocess.ledger.states import NO_POLICY as NO_POLICY
from reprocess.ledger.states import NON_RETRYABLE as NON_RETRYABLE
from reprocess.ledger.states import REASON_CODES as REASON_CODES
from reprocess.ledger.states import STATES as STATES
from reprocess.ledger.states import WAITING as WAITING

if TYPE_CHECKING:
    from pyspark.sql import Column

HISTORY_LIMIT = 10
HOUR_MS = 3_600_000

ERROR_ENTRY = T.StructType([
    T.StructField("failed_ms", T.LongType()),
    T.StructField("delivery", T.LongType()),
    T.StructField("error_class", T.StringType()),
    T.StructField("error_message", T.StringType()),
    T.StructField("fp", T.LongType()),
])

LEDGER_SCHEMA = T.StructType([
    T.StructField("message_id", T.StringType(), False),
    T.StructField("address", T.StringType()),
    T.StructField("payload", T.StringType()),
    T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
    T.StructField("extra", T.StringType()),
    T.StructField("consumer_group", T.StringType()),
    T.StructField("ordering_key", T.StringType()),
    T.StructField("policy", T.StringType()),
    T.StructField("profile", T.StringType()),
    T.StructField("state", T.StringType()),
    T.StructField("deliveries", T.LongType()),
    T.StructField("first_failed_ms", T.LongType()),
    T.StructField("last_failed_ms", T.LongType()),
    T.StructField("next_attempt_ms", T.LongType()),
    T.StructField("last_error_class", T.StringType()),
    T.StructField("last_error_message", T.StringType()),
    T.StructField("error_history", T.ArrayType(ERROR_ENTRY)),
    T.StructField("reason_code", T.StringType()),
    T.StructField("dead_letter_address", T.StringType()),
    T.StructField("terminal_ms", T.LongType()),
    T.StructField("updated_run", T.StringType()),
    # The deliveries a message had when an operator moved it back from the DLQ without resetting its count (null
    # otherwise): it then gets one delivery more than that, whatever its policy's bound (docs/adr/0001-counting.md).
    T.StructField("released_deliveries", T.LongType()),
    # How many times an operator's re-drive reset the count to 0 (null: never; ledger files written before the column
    # read it as null too). It is part of the idempotency key of each later delivery, whose numbers start again.
    T.StructField("resets", T.LongType()),
    # When the last of those resets happened (the re-drive's as-of, or the message's last failure or dead-lettering if
    # later; null: never, or written before the column). A consumer's failure from then or before that lands later
    # carries the count the reset forgave: the merge does not take it (docs/adr/0001-counting.md).
    T.StructField("reset_ms", T.LongType()),
    T.StructField("bucket", T.StringType()),
])
LEDGER_COLUMNS = [f.name for f in LEDGER_SCHEMA.fields]
# Columns whose values are (nearly) unique per message: written without a Parquet dictionary
# (sparkutil.parquet_options).
LEDGER_UNIQUE_COLUMNS = ("message_id", "payload", "headers.key_value.value", "first_failed_ms", "last_failed_ms",
                         "next_attempt_ms", "error_history.list.element.failed_ms", "error_history.list.element.fp")
# Files are written partitioned by bucket: the column lives in the directory name, not the file.
LEDGER_FILE_SCHEMA = T.StructType([f for f in LEDGER_SCHEMA.fields if f.name != "bucket"])


def waiting_bucket(next_attempt_ms: int) -> str:
    """The bucket of a waiting row whose next attempt is at ``next_attempt_ms``."""
    return f"w{max(next_attempt_ms, 0) // HOUR_MS:013d}"


def bucket_column(state: Column, next_attempt_ms: Column, terminal_ms: Column) -> Column:
    hour = F.lpad((F.greatest(next_attempt_ms, F.lit(0)) / F.lit(HOUR_MS)).cast("long").cast("string"), 13, "0")
    month = F.date_format(F.timestamp_millis(F.least(terminal_ms, F.lit(253402300799000))), "yyyyMM")
    return F.when(state == WAITING, F.concat(F.lit("w"), hour)).otherwise(F.concat(F.lit("t"), month))


def bucket_of(path: str) -> str | None:
    """The bucket of a published ledger file, from its ``bucket=...`` directory."""
    for part in path.split("/"):
        if part.startswith("bucket="):
            return part[len("bucket="):]
    return None


def waiting_bucket_of(path: str) -> str | None:
    """The bucket of a published ledger file when it is a waiting one (:func:`waiting_bucket`), else None: only those
    files hold WAITING rows; the delivered and dead-lettered history is in the others."""
    bucket = bucket_of(path)
    return bucket if bucket is not None and bucket.startswith("w") else None
