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

import functools
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REQUIRED_STRINGS = ("message_id", "address", "payload", "failed_at")
OPTIONAL_STRINGS = ("error_class", "error_message", "consumer_group", "ordering_key")
KNOWN_FIELDS = (*REQUIRED_STRINGS, "headers", "delivery_count", *OPTIONAL_STRINGS)
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_MAX_FUTURE_MS = 24 * 3600 * 1000
_JSON_NULL = "VOID"  # schema_of_variant of a JSON null (an absent key is a SQL NULL)
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
# (?U): Unicode whitespace (NBSP, NEL...) as Python's \s and GX's pandas engine see it, not ASCII only.
_ADDRESS_OK = r"(?U)^[^.\s/\\]+(\.[^.\s/\\]+)*$"


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
    # One read per file: Spark reads the files of one read with one schema, which drops the columns other
    # files have and fails on a column whose type differs between files.
    parts = []
    for f in files:
        df = spark.read.parquet(f)
        parts.append(df.select(
            F.col("_metadata.file_path").alias("source_file"),
            (F.col("_metadata.row_index") + F.lit(1)).alias("record_no"),
            F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("raw"),
        ))
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def one_file_per_partition(spark: SparkSession, largest_file_bytes: int) -> None:
    """Make every landing file one whole input partition (record numbers need it)."""
    size = str(max(largest_file_bytes + 1, 128 << 20))
    spark.conf.set("spark.sql.files.maxPartitionBytes", size)
    spark.conf.set("spark.sql.files.openCostInBytes", size)


def _get(m: Column, name: str, sql_type: str) -> Column:
    return F.call_function("try_variant_get", m.getItem(name), F.lit("$"), F.lit(sql_type))


def _one_json_value(raw: Column) -> Column:
    """True when ``raw`` holds exactly one JSON value: JSON parsers stop after the first one and ignore the rest
    (``{...}{...}``, ``{...} text``). Wrapped in ``[...]`` and in ``{"r": ...}``, anything after the value is a
    syntax error; no text can close both wrappers."""
    in_array = F.json_array_length(F.concat(F.lit("["), raw, F.lit("]"))) == 1
    in_object = F.json_object_keys(F.concat(F.lit('{"r":'), raw, F.lit("}"))).isNotNull()
    return F.coalesce(in_array & in_object, F.lit(False))


def parse_records(records: DataFrame, as_of_ms: int, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                  max_future_ms: int = DEFAULT_MAX_FUTURE_MS) -> DataFrame:
    """Parse and check ``raw``: typed contract columns plus ``problem``/``problem_detail`` (null when fine).

    Three projections, so that each costly expression runs once per record (Spark does not merge a projection
    into the next when that would repeat a costly expression): the fields and their variant types; the index of
    the first check that fails; the code and text of that check (texts are built for failing records only).
    """
    m = F.from_json(F.col("raw"), "map<string,variant>")
    df = records.filter(F.btrim(F.col("raw"), F.lit(" \t\r\f")) != "").withColumn("_m", m)
    mcol = F.col("_m")
    failed_at_raw = _get(mcol, "failed_at", "string")
    ts_raw = F.coalesce(*[F.call_function("try_to_timestamp", F.col("_failed_at_s"), F.lit(fmt))
                          for fmt in _TS_FORMATS])
    known = F.array(*[F.lit(k) for k in KNOWN_FIELDS])
    unknown = F.map_filter(mcol, lambda k, v: ~F.array_contains(known, k))
    fields = df.select(
        "source_file", "record_no", "raw", "_m",
        *[F.call_function("schema_of_variant", mcol.getItem(name)).alias(f"_t_{name}") for name in KNOWN_FIELDS],
        _get(mcol, "message_id", "string").alias("message_id"),
        _get(mcol, "address", "string").alias("address"),
        _get(mcol, "payload", "string").alias("payload"),
        failed_at_raw.alias("_failed_at_s"),
        _get(mcol, "headers", "map<string,string>").alias("_headers"),
        F.coalesce(_get(mcol, "delivery_count", "bigint"), F.lit(1).cast("long")).alias("delivery_count"),
        *[_get(mcol, name, "string").alias(name) for name in OPTIONAL_STRINGS],
        F.when(F.size(unknown) > 0, F.to_json(unknown)).alias("extra"),
    ).withColumn("failed_at", ts_raw).withColumn("failed_ms", F.unix_millis(F.col("failed_at")))

    t = {name: F.col(f"_t_{name}") for name in KNOWN_FIELDS}
    failed_at_s = F.col("_failed_at_s")
    ts = F.col("failed_at")
    dc_type = t["delivery_count"]
    delivery_count = F.col("delivery_count")
    message_id = F.col("message_id")
    address = F.col("address")
    payload = F.col("payload")
    failed_ms = F.col("failed_ms")

    checks: list[tuple[Column, str, Column]] = [
        (~F.is_valid_utf8(F.col("raw")) | F.col("raw").contains("\ufffd"), INVALID_UTF8,
         F.lit("the line is not valid UTF-8 (or contains U+FFFD)")),
        (F.call_function("try_parse_json", F.col("raw")).isNull() | ~_one_json_value(F.col("raw")), MALFORMED_JSON,
         F.lit("not valid JSON (one JSON object per line, nothing after it)")),
        (mcol.isNull(), NOT_AN_OBJECT, F.lit("a record must be one JSON object per line")),
    ]
    for name in REQUIRED_STRINGS:
        checks.append((mcol.getItem(name).isNull() | (t[name] == _JSON_NULL), MISSING_FIELD,
                       F.lit(f"required field '{name}' is missing or null")))
    for name in (*REQUIRED_STRINGS, *OPTIONAL_STRINGS):
        checks.append((mcol.getItem(name).isNotNull() & (t[name] != "STRING") & (t[name] != _JSON_NULL), WRONG_TYPE,
                       F.concat(F.lit(f"'{name}' must be a string, got "), t[name])))
    checks += [
        (mcol.getItem("headers").isNotNull() & (t["headers"] != _JSON_NULL)
         & (~t["headers"].startswith("OBJECT") | (F.size(F.map_filter(
             _get(mcol, "headers", "map<string,variant>"),
             lambda k, v: F.call_function("schema_of_variant", v) != "STRING")) > 0)),
         WRONG_TYPE, F.concat(F.lit("'headers' must be an object of strings, got "), t["headers"])),
        (F.length(message_id) == 0, EMPTY_MESSAGE_ID, F.lit("'message_id' is empty")),
        (message_id.rlike(r"[\x00-\x1f\x7f]") | address.rlike(r"[\x00-\x1f\x7f]"),
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
        (mcol.getItem("delivery_count").isNotNull() & (dc_type != _JSON_NULL) & (dc_type != "BIGINT")
         & (dc_type != "INT") & (dc_type != "SMALLINT") & (dc_type != "TINYINT"), INVALID_DELIVERY_COUNT,
         F.concat(F.lit("'delivery_count' must be an integer >= 1, got "), dc_type)),
        (delivery_count < 1, INVALID_DELIVERY_COUNT,
         F.concat(F.lit("'delivery_count' must be >= 1, got "), delivery_count.cast("string"))),
        (F.octet_length(payload) > F.lit(max_payload_bytes), PAYLOAD_TOO_LARGE,
         F.concat(F.lit("payload is "), F.octet_length(payload).cast("string"),
                  F.lit(f" bytes, above the limit of {max_payload_bytes}"))),
    ]
    first: Column | None = None  # the index of the first failing check, null when all pass
    for i, (cond, _code, _text) in enumerate(checks):
        c = F.coalesce(cond, F.lit(False))
        first = F.when(c, F.lit(i)) if first is None else first.when(c, F.lit(i))
    assert first is not None
    checked = fields.withColumn("_first", first)
    idx = F.col("_first")
    detail: Column | None = None
    for i, (_cond, _code, text) in enumerate(checks):
        detail = F.when(idx == i, text) if detail is None else detail.when(idx == i, text)
    assert detail is not None
    codes = F.array(*[F.lit(code) for _c, code, _t in checks])
    return checked.select(
        "source_file", "record_no", "raw",
        F.when(idx.isNotNull(), F.element_at(codes, idx + 1)).alias("problem"), detail.alias("problem_detail"),
        "message_id", "address", "payload", "failed_at", "failed_ms",
        F.coalesce(F.col("_headers"), F.create_map().cast("map<string,string>")).alias("headers"),
        "delivery_count", *OPTIONAL_STRINGS, "extra",
    )
