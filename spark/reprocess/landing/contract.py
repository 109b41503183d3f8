"""The landing contract: what upstream consumers write, and the row checks that enforce it.

One failed delivery per record, in ``<landing>/dt=YYYY-MM-DD/hour=HH/*.jsonl`` (or ``.jsonl.gz``,
``.parquet``)::

    {"message_id": "m-1", "address": "orders.created", "payload": "{...}",
     "failed_at": "2026-11-21T10:04:05.123+01:00", "headers": {"traceparent": "..."},
     "delivery_count": 1, "error_class": "TimeoutError", "error_message": "db timed out",
     "consumer_group": "order-service", "ordering_key": "customer-7", "anything_else": 1}

Required: ``message_id`` (non-empty string), ``address`` (dot-separated non-empty words),
``payload`` (string, may be empty), ``failed_at`` (ISO-8601 with an offset). Optional:
``headers`` (object of strings), ``delivery_count`` (integer >= 1, default 1), ``error_class``,
``error_message``, ``consumer_group``, ``ordering_key`` (strings). Unknown fields are kept in
``extra`` (a JSON object). Every check is a built-in column expression; a record that fails one
gets a ``problem`` code and a readable ``problem_detail`` and goes to quarantine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REQUIRED_STRINGS = ("message_id", "address", "payload", "failed_at")
OPTIONAL_STRINGS = ("error_class", "error_message", "consumer_group", "ordering_key")
KNOWN_FIELDS = (*REQUIRED_STRINGS, "headers", "delivery_count", *OPTIONAL_STRINGS)
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_MAX_FUTURE_MS = 24 * 3600 * 1000
_LINE_MASK = (1 << 33) - 1  # monotonically_increasing_id = partition << 33 | row in partition

# Problem codes, checked in this order (the first that applies is reported).
MALFORMED_JSON = "MALFORMED_JSON"
INVALID_UTF8 = "INVALID_UTF8"
NOT_AN_OBJECT = "NOT_AN_OBJECT"
MISSING_FIELD = "MISSING_FIELD"
WRONG_TYPE = "WRONG_TYPE"
EMPTY_MESSAGE_ID = "EMPTY_MESSAGE_ID"
INVALID_ADDRESS = "INVALID_ADDRESS"
INVALID_TIMESTAMP = "INVALID_TIMESTAMP"
FUTURE_TIMESTAMP = "FUTURE_TIMESTAMP"
INVALID_DELIVERY_COUNT = "INVALID_DELIVERY_COUNT"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
UNKNOWN_ADDRESS = "UNKNOWN_ADDRESS"
CONTROL_CHARACTER = "CONTROL_CHARACTER"
CORRUPT_FILE = "CORRUPT_FILE"
EXPECTATION_FAILED = "EXPECTATION_FAILED"  # passes the contract, breaks an expectation of the landing suite

_TS_FORMATS = (
    "yyyy-MM-dd'T'HH:mm:ss[.SSSSSSSSS]XXX",
    "yyyy-MM-dd'T'HH:mm:ss[.SSSSSSSSS]XX",
    "yyyy-MM-dd'T'HH:mm:ss[.SSSSSSSSS]X",
)
# An offset is mandatory: Z, +HH, +HHMM or +HH:MM at the end.
_HAS_OFFSET = r"(Z|[+-]\d{2}(:?\d{2})?)$"
_ADDRESS_OK = r"^[^.\s/\\]+(\.[^.\s/\\]+)*$"


def read_text_records(spark: SparkSession, files: list[str]) -> DataFrame:
    """``source_file, record_no, raw`` for JSONL / JSONL.gz files, one row per line (blank lines too).

    Each file must be read whole by one task, so the record number is the row index within the
    partition; the caller sets ``spark.sql.files.maxPartitionBytes`` and ``openCostInBytes`` above
    the largest file (see :func:`one_file_per_partition`).
    """
    df = spark.read.text(files)
    mid = F.monotonically_increasing_id()
    return df.select(
        F.col("_metadata.file_path").alias("source_file"),
        (mid.bitwiseAND(F.lit(_LINE_MASK)) + F.lit(1)).alias("record_no"),
        F.col("value").alias("raw"),
    )


def read_parquet_records(spark: SparkSession, files: list[str]) -> DataFrame:
    """Parquet landing files as the same ``source_file, record_no, raw`` rows (``raw`` = the row as JSON)."""
    df = spark.read.parquet(*files)
    cols = [c for c in df.columns]
    return df.select(
        F.col("_metadata.file_path").alias("source_file"),
        (F.col("_metadata.row_index") + F.lit(1)).alias("record_no"),
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in cols])).alias("raw"),
    )


def one_file_per_partition(spark: SparkSession, largest_file_bytes: int) -> None:
    """Make every landing file one whole input partition (record numbers need it)."""
    size = str(max(largest_file_bytes + 1, 128 << 20))
    spark.conf.set("spark.sql.files.maxPartitionBytes", size)
    spark.conf.set("spark.sql.files.openCostInBytes", size)


def _get(m: Column, name: str, sql_type: str) -> Column:
    return F.call_function("try_variant_get", m.getItem(name), F.lit("$"), F.lit(sql_type))


def parse_records(records: DataFrame, as_of_ms: int, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                  max_future_ms: int = DEFAULT_MAX_FUTURE_MS) -> DataFrame:
    """Parse and check ``raw``: typed contract columns plus ``problem``/``problem_detail`` (null when fine)."""
    m = F.from_json(F.col("raw"), "map<string,variant>")
    df = records.filter(F.trim(F.col("raw")) != "").withColumn("_m", m)
    mcol = F.col("_m")
    t = {name: F.call_function("schema_of_variant", mcol.getItem(name)) for name in KNOWN_FIELDS}
    failed_at_s = _get(mcol, "failed_at", "string")
    ts = F.coalesce(*[F.call_function("try_to_timestamp", failed_at_s, F.lit(fmt)) for fmt in _TS_FORMATS])
    headers = _get(mcol, "headers", "map<string,string>")
    dc_type = t["delivery_count"]
    delivery_count = F.coalesce(_get(mcol, "delivery_count", "bigint"), F.lit(1).cast("long"))
    address = _get(mcol, "address", "string")
    payload = _get(mcol, "payload", "string")
    failed_ms = F.unix_millis(ts)

    checks: list[tuple[Column, str, Column]] = [
        (F.col("raw").contains("\ufffd"), INVALID_UTF8,
         F.lit("the line is not valid UTF-8 (or contains U+FFFD)")),
        (F.call_function("try_parse_json", F.col("raw")).isNull(), MALFORMED_JSON, F.lit("not valid JSON")),
        (mcol.isNull(), NOT_AN_OBJECT, F.lit("a record must be one JSON object per line")),
    ]
    for name in REQUIRED_STRINGS:
        checks.append((mcol.getItem(name).isNull() | (t[name] == "NULL"), MISSING_FIELD,
                       F.lit(f"required field '{name}' is missing or null")))
    for name in (*REQUIRED_STRINGS, *OPTIONAL_STRINGS):
        checks.append((mcol.getItem(name).isNotNull() & (t[name] != "STRING") & (t[name] != "NULL"), WRONG_TYPE,
                       F.concat(F.lit(f"'{name}' must be a string, got "), t[name])))
    checks += [
        (mcol.getItem("headers").isNotNull() & (t["headers"] != "NULL")
         & (~t["headers"].startswith("OBJECT") | (F.size(F.map_filter(
             _get(mcol, "headers", "map<string,variant>"),
             lambda k, v: F.call_function("schema_of_variant", v) != "STRING")) > 0)),
         WRONG_TYPE, F.concat(F.lit("'headers' must be an object of strings, got "), t["headers"])),
        (F.length(_get(mcol, "message_id", "string")) == 0, EMPTY_MESSAGE_ID, F.lit("'message_id' is empty")),
        (_get(mcol, "message_id", "string").rlike(r"[\x00-\x1f\x7f]") | address.rlike(r"[\x00-\x1f\x7f]"),
         CONTROL_CHARACTER, F.lit("'message_id' and 'address' must not contain control characters (NUL, newline...)")),
        (~address.rlike(_ADDRESS_OK), INVALID_ADDRESS,
         F.concat(F.lit("address "), F.to_json(F.array(address)),
                  F.lit(" is not dot-separated words (no empty word, whitespace, '/' or '\\\\')"))),
        (~failed_at_s.rlike(_HAS_OFFSET) | ts.isNull(), INVALID_TIMESTAMP,
         F.concat(F.lit("failed_at "), F.to_json(F.array(failed_at_s)),
                  F.lit(" is not ISO-8601 with an offset (e.g. 2026-11-21T10:04:05Z)"))),
        (failed_ms > F.lit(as_of_ms + max_future_ms), FUTURE_TIMESTAMP,
         F.concat(F.lit("failed_at "), failed_at_s,
                  F.lit(f" is more than {max_future_ms // 3600000}h after the as-of"))),
        (mcol.getItem("delivery_count").isNotNull() & (dc_type != "NULL") & (dc_type != "BIGINT")
         & (dc_type != "INT") & (dc_type != "SMALLINT") & (dc_type != "TINYINT"), INVALID_DELIVERY_COUNT,
         F.concat(F.lit("'delivery_count' must be an integer >= 1, got "), dc_type)),
        (delivery_count < 1, INVALID_DELIVERY_COUNT,
         F.concat(F.lit("'delivery_count' must be >= 1, got "), delivery_count.cast("string"))),
        (F.octet_length(payload) > F.lit(max_payload_bytes), PAYLOAD_TOO_LARGE,
         F.concat(F.lit("payload is "), F.octet_length(payload).cast("string"),
                  F.lit(f" bytes, above the limit of {max_payload_bytes}"))),
    ]
    problem: Column | None = None
    detail: Column | None = None
    for cond, code, text in checks:
        c = F.coalesce(cond, F.lit(False))
        problem = F.when(c, F.lit(code)) if problem is None else problem.when(c, F.lit(code))
        detail = F.when(c, text) if detail is None else detail.when(c, text)
    assert problem is not None
    assert detail is not None
    known = F.array(*[F.lit(k) for k in KNOWN_FIELDS])
    extra = F.to_json(F.map_filter(mcol, lambda k, v: ~F.array_contains(known, k)))
    out = df.select(
        "source_file", "record_no", "raw",
        problem.alias("problem"), detail.alias("problem_detail"),
        _get(mcol, "message_id", "string").alias("message_id"),
        address.alias("address"),
        payload.alias("payload"),
        ts.alias("failed_at"),
        failed_ms.alias("failed_ms"),
        F.coalesce(headers, F.create_map().cast("map<string,string>")).alias("headers"),
        delivery_count.alias("delivery_count"),
        *[_get(mcol, name, "string").alias(name) for name in OPTIONAL_STRINGS],
        F.when(F.size(F.map_filter(mcol, lambda k, v: ~F.array_contains(known, k))) > 0, extra).alias("extra"),
    )
    return out
