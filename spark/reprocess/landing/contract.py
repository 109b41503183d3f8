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
import logging
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reprocess.errors import ConfigError
from reprocess.landing.long_lines import DEFAULT_MAX_LINE_BYTES, READER_OPTION
from reprocess.limits import ADDRESS_WORDS
from reprocess.sparkutil import as_of_column, columns_once, sql_lambda

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REQUIRED_STRINGS = ("message_id", "address", "payload", "failed_at")
OPTIONAL_STRINGS = ("error_class", "error_message", "consumer_group", "ordering_key")
KNOWN_FIELDS = (*REQUIRED_STRINGS, "headers", "delivery_count", *OPTIONAL_STRINGS)
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
DEFAULT_MAX_FUTURE_MS = 24 * 3600 * 1000
_JSON_NULL = "VOID"  # schema_of_variant of a JSON null (an absent key is a SQL NULL)
_LINE_MASK = (1 << 33) - 1  # monotonically_increasing_id = partition << 33 | row in partition
# The structural checks of well-formed lines in one pass (spark/java/reprocess/landing/WellFormedLine.java), in the
# jar `make venv` builds (reprocess.spark_env.local_fs_conf puts it on the class path); see use_jvm_parser.
JVM_PARSER_CLASS = "reprocess.landing.WellFormedLine"
JVM_PARSER_FUNCTION = "reprocess_well_formed_record"

log = logging.getLogger(__name__)

# Problem codes, checked in this order (the first that applies is reported).
RECORD_TOO_LARGE = "RECORD_TOO_LARGE"
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
# (?U): Unicode whitespace (NBSP, NEL...) as Python's \s and GX's pandas engine see it, not ASCII only. Anchored at the
# very end by a lookahead: Java's '$' matched before a final line terminator, so "orders\u2028" passed (and failed the
# GX gate's pandas engine, which refuses it: every cycle stopped on one record).
_ADDRESS_OK = r"(?U)^" + ADDRESS_WORDS + r"(?![\s\S])"
_AS_OF_FIELD = "_contract_as_of"  # the as-of, a column of its own while the checks read it (parse_records)
_NOT_BLANK = "[^ \t\r\f]"  # what a blank line (counted, never a record) has not
# The general path's strict parse refuses a JSON string of more than this many characters (Jackson's
# StreamReadConstraints default; the JVM parser leaves every line above 16M characters to that path): a 40 MB payload
# was quarantined as MALFORMED_JSON, a reason that sent its operator looking for a syntax error that was not there.
# Only a line of more bytes than that can hold such a string.
JSON_STRING_CHARS = 20_000_000
MAX_DELIVERY_COUNT = 2**31 - 1  # the largest delivery counter a broker keeps (an int in ActiveMQ, Artemis, RocketMQ)


class SplitTooLong(Exception):
    """A landing file read in several splits holds a line of the line limit or more: Hadoop's reader, skipping one
    that runs past its split's end, returns it instead (cut to the limit, or whole when its line end made it long),
    and a line longer than a split comes out in pieces, so the file's records cannot be numbered. The caller reads
    the landing again, one whole file per task (docs/adr/0007)."""

    def __init__(self, paths: list[str], scanned: dict[str, list[Any]] | None = None) -> None:
        super().__init__(f"landing files read in splits hold lines too long to read files={paths[:10]}")
        self.paths = paths
        # the files the run's scan read before this was raised (after the parse), and the long lines it found in
        # each (LongLine): the read that follows takes them instead of scanning the files again
        self.scanned = scanned or {}


def read_text_records(spark: SparkSession, files: list[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                      split: bool = False) -> DataFrame:
    """``source_file, record_no, raw, line_bytes`` for JSONL / JSONL.gz files, one row per line (blank lines too).

    Without ``split`` each file must be read whole by one task, so the record number is the row index within the
    partition; the caller sets ``spark.sql.files.maxPartitionBytes`` and ``openCostInBytes`` above the largest file
    (see :func:`one_file_per_partition`). With ``split`` (the caller has called :func:`split_large_files`) a file
    may be read in several splits, by several tasks, and share a task with others: a first pass counts the lines of
    each split (its ``file_block_start``) and the row index of its first line in the task, and the record number is
    then the lines of the file's earlier splits plus the row's index within its split. Both passes plan the same
    splits: the same file listing and the settings :func:`split_large_files` pins; a split the first pass did not
    see (the planning settings changed in between) stops the read.

    A line of ``max_line_bytes`` or more (its line end included) is skipped, never held whole, and the record
    numbers after it are one short: :mod:`reprocess.landing.long_lines` finds it from ``line_bytes`` (each line's
    bytes), quarantines it and renumbers. Hadoop's reader finishes a line that runs past its split's end and skips
    the next split's first partial line, so a split read of lines shorter than the limit reads what a whole one
    does. A long line is another matter: skipped past its split's end, the reader returns it (cut to the limit, or
    whole when only its line end made it long), and one longer than a split comes out in pieces. So a line within
    two bytes of the limit in a file read in several splits (its splits shorter than the file, as Spark's metadata
    says) raises :class:`SplitTooLong` in the first pass, before anything is parsed; a long line the reader skipped,
    or returned shorter than that, leaves the limit's bytes unread, which the run's accounting finds
    (``reprocess.cycle.landing_batch.with_long_lines``). A file of one split is read as a whole-file read reads it.
    """
    df = spark.read.option(READER_OPTION, str(max_line_bytes)).text(files)
    # the row's index in its task's input (monotonically_increasing_id = partition << 33 | row in partition)
    row = F.monotonically_increasing_id().bitwiseAND(F.lit(_LINE_MASK))
    if not split:
        return df.select(
            F.col("_metadata.file_path").alias("source_file"),
            (row + F.lit(1)).alias("record_no"),
            F.col("value").alias("raw"),
            F.octet_length("value").cast("long").alias("line_bytes"),
        )
    lines = df.select(F.col("_metadata.file_path").alias("source_file"),
                      F.col("_metadata.file_block_start").alias("_block"), row.alias("_row"), F.col("value"))
    counted = lines.groupBy("source_file", "_block").agg(
        F.count(F.lit(1)).alias("lines"), F.min("_row").alias("first"),
        F.max(F.octet_length("value")).alias("longest"),
        F.max(F.col("_metadata.file_block_length") < F.col("_metadata.file_size")).alias("part")).collect()
    too_long = sorted({r.source_file for r in counted if r.part and r.longest >= max_line_bytes - 2})
    if too_long:
        raise SplitTooLong(too_long)
    bases = []
    before: dict[str, int] = {}
    for split_row in sorted(counted, key=lambda r: (r.source_file, r._block)):
        seen = before.get(split_row.source_file, 0)
        bases.append((split_row.source_file, int(split_row._block), seen - int(split_row.first)))
        before[split_row.source_file] = seen + int(split_row.lines)
    log.info("landing text read in splits files=%s splits=%s", len(before), len(bases))
    base = spark.createDataFrame(bases, "source_file string, _block bigint, _base bigint")
    changed = F.raise_error(F.concat(F.lit("landing file "), F.col("source_file"),
                                     F.lit(" changed while it was read: a split its first read did not see")))
    return lines.join(F.broadcast(base), ["source_file", "_block"], "left").select(
        "source_file",
        (F.col("_row") + F.coalesce(F.col("_base"), changed.cast("long")) + F.lit(1)).alias("record_no"),
        F.col("value").alias("raw"),
        F.octet_length("value").cast("long").alias("line_bytes"),
    )


def read_parquet_records(frames: Sequence[DataFrame]) -> DataFrame:
    """Parquet landing files, each read on its own (``spark.read.parquet(file)``: the caller has taken its schema
    already), as the same ``source_file, record_no, raw, line_bytes`` rows (``raw`` = the row as JSON,
    ``line_bytes`` null)."""
    # One read per file: Spark reads the files of one read with one schema, which drops the columns other
    # files have and fails on a column whose type differs between files.
    parts = []
    for df in frames:

        def value(field: T.StructField) -> Column:
            text = _binary_as_text(_ident(field.name), field.dataType, 0)
            return F.col(_ident(field.name)) if text is None else sql_lambda(text).alias(field.name)

        # Spark's own metadata column, not a data column a file names _metadata, which would hide it
        meta = df.metadataColumn("_metadata")
        parts.append(df.select(
            meta.getField("file_path").alias("source_file"),
            (meta.getField("row_index") + F.lit(1)).alias("record_no"),
            F.to_json(F.struct(*[value(field) for field in df.schema.fields])).alias("raw"),
            F.lit(None).cast("long").alias("line_bytes"),
        ))
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def _ident(name: str) -> str:
    """``name`` as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _binary_as_text(ref: str, data_type: T.DataType, depth: int) -> str | None:
    """SQL text of the value ``ref`` (of ``data_type``) with every BINARY in it, at any depth (struct fields, array
    elements, map values), as its text when the bytes are UTF-8 and U+FFFD when not, which quarantines the record as
    INVALID_UTF8; None when ``data_type`` holds no BINARY (the value goes to ``to_json`` as it is).

    BINARY without the UTF-8 annotation is how older writers store strings. ``to_json`` wrote it in base64, which
    passed the checks as text and was re-driven in place of the payload (or a header's value). A null stays null.
    """
    if isinstance(data_type, T.BinaryType):
        return f"CASE WHEN NOT is_valid_utf8({ref}) THEN '\\uFFFD' ELSE CAST({ref} AS STRING) END"
    var = f"bin{depth}"
    if isinstance(data_type, T.ArrayType):
        inner = _binary_as_text(var, data_type.elementType, depth + 1)
        return None if inner is None else f"transform({ref}, {var} -> {inner})"
    if isinstance(data_type, T.MapType):
        text, key = ref, f"key{depth}"
        inner = _binary_as_text(var, data_type.valueType, depth + 1)
        if inner is not None:
            text = f"transform_values({text}, ({key}, {var}) -> {inner})"
        if isinstance(data_type.keyType, T.BinaryType):
            # to_json wrote a BINARY key as a JVM array's name ([B@6d3af739); a key not UTF-8 keeps its hex after
            # the U+FFFD, so that two of them stay two keys
            text = (f"transform_keys({text}, ({key}, {var}) -> CASE WHEN is_valid_utf8({key}) "
                    f"THEN CAST({key} AS STRING) ELSE concat('\\uFFFD', hex({key})) END)")
        return None if text == ref else text
    if isinstance(data_type, T.StructType):
        fields = [(f.name, f"{ref}.{_ident(f.name)}", f.dataType) for f in data_type.fields]
        texts = [(name, _binary_as_text(field, dtype, depth), field) for name, field, dtype in fields]
        if all(inner is None for _, inner, _ in texts):
            return None
        pairs = ", ".join(f"{_literal(name)}, {inner or field}" for name, inner, field in texts)
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE named_struct({pairs}) END"
    return None


def use_jvm_parser(spark: SparkSession) -> bool:
    """Register the JVM parser of well-formed lines in ``spark`` as :data:`JVM_PARSER_FUNCTION`; False when its
    class is not on the driver's class path (no jar: ``javac`` missing at ``make venv``, or
    ``REPROCESS_LOCAL_FS_JAR`` empty), and the landing is then checked by built-in expressions alone.

    Both ways quarantine and ingest the same lines with the same values; the JVM parser takes the structural checks
    of most lines in one pass instead of two parses and some forty expressions (bench/RESULTS.md, twenty-third run).

    A session that has it already keeps it: registering it again made Spark warn at every cycle that the function
    "replaced a previously registered function".
    """
    if spark.catalog.functionExists(JVM_PARSER_FUNCTION):
        return True
    try:
        spark.udf.registerJavaFunction(JVM_PARSER_FUNCTION, JVM_PARSER_CLASS, _FAST_SCHEMA)
    except AnalysisException as exc:  # Spark Connect's is a subclass
        log.info("landing parser=expressions (%s is not on the class path: %s)", JVM_PARSER_CLASS,
                 str(exc).splitlines()[0])
        return False
    log.debug("landing parser=jvm class=%s", JVM_PARSER_CLASS)
    return True


# The Parquet compression codecs Spark cannot decompress with the jars it ships (Hadoop codecs it does not carry): a
# landing file compressed with one is quarantined whole (codec_problem), and so in the JVM's checks
# (storage.hadoop_fs.JvmFs.decode_problem, StorePlugin.decodeProblem's UNREADABLE_PARQUET_CODECS). Refused by name,
# not allowed by name: pyarrow calls LZ4_RAW "LZ4" and Hadoop's LZ4 "UNKNOWN", which Spark reads.
UNREADABLE_PARQUET_CODECS = ("BROTLI", "LZO")


def codec_problem(codecs: Iterable[str]) -> str | None:
    """Why Spark cannot read a Parquet file whose column chunks are compressed with ``codecs`` (Parquet's names:
    ``SNAPPY``, ``BROTLI``...), or None: its footer reads, but the first read of its pages would fail the run, and
    every run after it. Also ``hadoop_fs.JvmFs.decode_problem`` and the store plugin's ``decodeProblem``."""
    refused = sorted(set(codecs) & set(UNREADABLE_PARQUET_CODECS))
    if not refused:
        return None
    return (f"not a readable Parquet file: compressed with {', '.join(refused)}, which Spark cannot decompress here "
            "(its jars carry no Hadoop codec for it)")


# The session settings that decide how files are split into input partitions.
MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
OPEN_COST = "spark.sql.files.openCostInBytes"
MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"
# set, Spark packs the files again into at most this many partitions, however large the open cost: several whole
# files in one partition, numbered on from each other
MAX_PARTITION_NUM = "spark.sql.files.maxPartitionNum"
FILE_SPLIT_KEYS = (MAX_PARTITION_BYTES, OPEN_COST, MIN_PARTITION_NUM, MAX_PARTITION_NUM)
# The most a landing text file's split may be: a file (not .gz, which cannot be split) larger than its landing's split
# size (split_size: at most this, sized to the cores) is read in splits, by as many tasks (read_text_records with
# split); one task per file held a 4 GB file's parse on one core and its cached records in one block.
SPLIT_BYTES = 128 << 20
SPLIT_BYTES_ENV = "REPROCESS_LANDING_SPLIT_BYTES"
MIN_SPLIT_BYTES = 1024  # a split per few lines at most: a 4 GB file in 4 billion splits would plan for ever


def landing_split_bytes() -> int:
    """``$REPROCESS_LANDING_SPLIT_BYTES`` when set (a whole number of bytes, at least :data:`MIN_SPLIT_BYTES`), else
    :data:`SPLIT_BYTES`."""
    value = os.environ.get(SPLIT_BYTES_ENV, "").strip()
    if not value:
        return SPLIT_BYTES
    if not value.isdigit() or int(value) < MIN_SPLIT_BYTES:
        raise ConfigError(f"{SPLIT_BYTES_ENV} must be a whole number of bytes, at least {MIN_SPLIT_BYTES}, "
                          f"got {value!r}")
    return int(value)


def one_file_per_partition(spark: SparkSession, largest_file_bytes: int) -> None:
    """Make every landing file one whole input partition (record numbers need it).

    Spark splits the files when a query runs, not when it is built: the settings must hold until the landing's
    records are materialised, and should then be put back (:data:`FILE_SPLIT_KEYS`), or every later file read of
    the session gets a task per file (the ledger's small bucket files: 721 tasks instead of 24 at 10M messages).
    """
    size = str(max(largest_file_bytes + 1, 128 << 20))
    for key in (MAX_PARTITION_BYTES, OPEN_COST):
        spark.conf.set(key, size)
    spark.conf.unset(MAX_PARTITION_NUM)  # a deployment's cap on the partitions would pack files together again


def split_large_files(spark: SparkSession, split_bytes: int = SPLIT_BYTES, open_cost: int = 4 << 20) -> None:
    """Read files in splits of ``split_bytes``, smaller files packed together (Spark's own planning), with the
    planning settings that could differ between :func:`read_text_records`' two passes pinned: a driver whose cores
    change in between (executors added) must not split the files otherwise. As for :func:`one_file_per_partition`,
    the settings must hold until the records are materialised, then be put back."""
    spark.conf.set(MAX_PARTITION_BYTES, str(split_bytes))
    spark.conf.set(OPEN_COST, str(open_cost))  # Spark's default: a small file's weight
    spark.conf.set(MIN_PARTITION_NUM, "1")  # the split size is split_bytes, whatever the cores


# Below this a text file is read whole, whatever the cores: a split of it would cost a first pass over it and a
# task's start for less parse than that saves. REPROCESS_LANDING_SPLIT_BYTES below it is taken as it is.
SPLIT_FLOOR_BYTES = 32 << 20


def split_size(sizes: Sequence[int], cores: int, split_bytes: int = SPLIT_BYTES,
               floor: int = SPLIT_FLOOR_BYTES) -> int:
    """The size a landing's text files of ``sizes`` bytes (as stored: a ``.gz`` file's compressed bytes) are read
    in splits of, on ``cores`` task slots: their bytes cut evenly into the fewest rounds of ``split_bytes`` on every
    core, so that no core is left a round's tail alone, but never below ``floor`` (nor above ``split_bytes``). The
    cut is the landing's, not each file's. One 394 MiB file on two cores is read in four splits of 98.5 MiB, two
    rounds, instead of 128, 128, 128 and 10 MiB, three; one 200 MiB file on eight cores in six of 32 MiB and one of
    8 instead of 128 and 72."""
    total = sum(sizes)
    slots = max(1, cores)
    rounds = max(1, -(-total // (slots * split_bytes)))
    return min(split_bytes, max(min(floor, split_bytes), -(-total // (slots * rounds))))


def split_files(sizes: Sequence[tuple[str, int]], split_bytes: int = SPLIT_BYTES) -> list[str]:
    """The text landing files of ``sizes`` ((path, bytes)) read in several splits: larger than ``split_bytes`` and
    not ``.gz``. When there is one, the landing is read in splits (:func:`split_large_files`); every other file is
    one split of its own, read as a whole-file read reads it. None when no file holds a split and a quarter: cut
    into a split and a sliver (a 33 MiB file into 32 and 1 MiB), a file's longest task would shrink by less than
    the first pass over the landing costs. (Spark splits every file above the size once the landing is read in
    splits, so the list holds them all, slivers too: the run's checks of split files must see each one.)"""
    over = [(path, size) for path, size in sizes if size > split_bytes and not path.endswith(".gz")]
    if not any(size >= split_bytes + split_bytes // 4 for _, size in over):
        return []
    return [path for path, _ in over]


def _json_array_of_the_line(raw: Column) -> Column:
    """The line wrapped in ``[...]`` and parsed strictly (duplicate keys refused): a variant array, or null.

    Spark's JSON readers stop after the first value and ignore what follows (``{...}{...}``, ``{...} text``).
    Inside ``[...]`` what follows the first value must be ``,`` (then the array has a second element) or the
    closing ``]``; only text that itself starts with ``]`` escapes the wrapper, which :func:`_one_json_value`
    checks separately. One parse gives both the value and the proof that it is alone.
    """
    return F.call_function("try_parse_json", F.concat(F.lit("["), raw, F.lit("]")))


def _one_json_value(raw: Column, wrapped: Column) -> Column:
    """True when the line holds exactly one JSON value (``wrapped`` = :func:`_json_array_of_the_line`).

    The array wrapper lets through text after the value only when that text starts with ``]``; a line holding
    ``]`` is checked once more wrapped in ``{"r": ...}``, where that ``]`` is a syntax error (the object wrapper
    alone would let ``}`` through instead). No text can close both wrappers.
    """
    alone = wrapped.isNotNull() & F.call_function("variant_get", wrapped, F.lit("$[0]")).isNotNull() \
        & F.call_function("variant_get", wrapped, F.lit("$[1]")).isNull()
    in_object = F.json_object_keys(F.concat(F.lit('{"r":'), raw, F.lit("}"))).isNotNull()
    return F.coalesce(alone & F.when(raw.contains("]"), in_object).otherwise(F.lit(True)), F.lit(False))


_VALUES_SCHEMA = (
    "struct<message_id: string, address: string, payload: string, failed_at: string, "
    "headers: map<string,string>, delivery_count: bigint, error_class: string, error_message: string, "
    "consumer_group: string, ordering_key: string>"
)
# What the JVM parser returns: the values, and extra (the unknown fields' JSON, null without any)
_FAST_SCHEMA = _VALUES_SCHEMA[:-1] + ", extra: string>"


def _carried(records: DataFrame) -> list[str]:
    """The columns of ``records`` parsing carries through unchanged."""
    return [c for c in records.columns if c not in ("source_file", "record_no", "raw")]


def _general(col: Column, jvm: bool) -> Column:
    """``col`` where the general path decides the line: every line, or with the JVM parser those it declined."""
    return F.when(F.col("_fast").isNull(), col) if jvm else col


def _fields(records: DataFrame, jvm: bool = False) -> DataFrame:
    """The contract fields of each non-blank line, the variant type of each known field (``_t_<name>``), the
    strict parse (``_w``, ``_m``) and ``extra`` (unknown fields as JSON).

    Two parses of the line, both cheaper than reading values out of variants: a strict one into a variant, which
    proves the line is one JSON value without duplicate keys and gives each field's JSON type; and Spark's
    JSON reader into typed columns for the values (it turns any value into a string, hence the types from the
    variant).

    With ``jvm`` (:func:`use_jvm_parser`), ``_fast`` holds the values of the lines the JVM parser found
    well-formed, and both parses run only on the other lines (``_m`` and the types are null on the first).
    """
    c = _field_columns(jvm)
    df = records.filter(c["not_blank"])
    if jvm:
        df = df.withColumn("_fast", c["fast"])
    df = df.withColumn("_w", c["w"]).withColumn("_m", c["m"]).withColumn("_v", c["values"])
    return df.select(
        "source_file", "record_no", "raw", *_carried(records), "_m", "_w", *(["_fast"] if jvm else []),
        *c["fields"],
    ).withColumn("failed_at", c["failed_at"]).withColumn("failed_ms", c["failed_ms"])


@columns_once
def _field_columns(jvm: bool) -> dict[str, Any]:
    """The expressions of :func:`_fields`, the same at every run (:func:`reprocess.sparkutil.columns_once`)."""
    mcol = F.col("_m")
    v = F.from_json(F.col("raw"), _VALUES_SCHEMA)
    known = F.array(*[F.lit(k) for k in KNOWN_FIELDS])
    known_sql = ", ".join(f"'{k}'" for k in KNOWN_FIELDS)
    unknown = sql_lambda(f"map_filter(_m, (k, v) -> NOT array_contains(array({known_sql}), k))")
    values = F.when(mcol.isNotNull(), v)
    extra = F.when(F.size(F.array_except(F.map_keys(mcol), known)) > 0, F.to_json(unknown))
    if jvm:
        values = F.when(F.col("_fast").isNotNull(), F.col("_fast").dropFields("extra")).otherwise(values)
        extra = F.when(F.col("_fast").isNotNull(), F.col("_fast.extra")).otherwise(extra)
    return {
        # Not blank: some character besides space, tab, CR and form feed. The regex stops at the first such
        # character, the line's first for every record; btrim(raw) != '' walked each whole line (2.6% of a JFR
        # profile's samples).
        "not_blank": F.col("raw").rlike(_NOT_BLANK),
        "fast": F.call_function(JVM_PARSER_FUNCTION, F.col("raw")),
        "w": _general(_json_array_of_the_line(F.col("raw")), jvm),
        "m": F.call_function("try_variant_get", F.col("_w"), F.lit("$[0]"), F.lit("map<string,variant>")),
        "values": values,
        "fields": [
            *[F.call_function("schema_of_variant", mcol.getItem(name)).alias(f"_t_{name}") for name in KNOWN_FIELDS],
            F.col("_v.message_id").alias("message_id"),
            F.col("_v.address").alias("address"),
            F.col("_v.payload").alias("payload"),
            F.col("_v.failed_at").alias("_failed_at_s"),
            F.col("_v.headers").alias("_headers"),
            F.coalesce(F.col("_v.delivery_count"), F.lit(1).cast("long")).alias("delivery_count"),
            *[F.col(f"_v.{name}").alias(name) for name in OPTIONAL_STRINGS],
            # Unknown keys are rare: the lambda that keeps them runs only where there are some.
            extra.alias("extra"),
        ],
        "failed_at": F.coalesce(*[F.call_function("try_to_timestamp", F.col("_failed_at_s"), F.lit(fmt))
                                  for fmt in _TS_FORMATS]),
        "failed_ms": F.unix_millis(F.col("failed_at")),
    }


def _span(ms: int) -> str:
    """``ms`` as the reasons say it: whole hours as ``24h``, anything else in milliseconds (not ``0h``)."""
    return f"{ms // 3_600_000}h" if ms % 3_600_000 == 0 else f"{ms} ms"


def _checks(as_of: Column, max_payload_bytes: int, max_future_ms: int,
            jvm: bool = False) -> list[tuple[Column, str, Column]]:
    """``(fails, code, text)`` of every contract check over the columns of :func:`_fields`, in order.

    The structural checks (the line's encoding and grammar, the fields present and their JSON types) read the
    variant parse; with ``jvm`` they run only on the lines the JVM parser declined, the others having passed them.
    """

    def structural(fails: Column) -> Column:
        return _general(fails, jvm)

    mcol = F.col("_m")
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
        (structural(~F.is_valid_utf8(F.col("raw")) | F.col("raw").contains("\ufffd")), INVALID_UTF8,
         F.lit("the line is not valid UTF-8 (or contains U+FFFD)")),
        # the size first, so that the parse is asked again only of the rare line above JSON_STRING_CHARS bytes
        (structural((F.octet_length(F.col("raw")) > F.lit(JSON_STRING_CHARS))
                    & ~_one_json_value(F.col("raw"), F.col("_w"))), RECORD_TOO_LARGE,
         F.concat(F.lit("the line is "), F.octet_length(F.col("raw")).cast("string"),
                  F.lit(f" bytes and does not parse: a JSON string of more than {JSON_STRING_CHARS} characters is "
                        f"refused (or the line is not valid JSON); payloads may be at most {max_payload_bytes} "
                        "bytes"))),
        (structural(~_one_json_value(F.col("raw"), F.col("_w"))), MALFORMED_JSON,
         F.lit("not valid JSON (one JSON object per line, nothing after it)")),
        (structural(mcol.isNull()), NOT_AN_OBJECT, F.lit("a record must be one JSON object per line")),
    ]
    for name in REQUIRED_STRINGS:
        checks.append((structural(mcol.getItem(name).isNull() | (t[name] == _JSON_NULL)), MISSING_FIELD,
                       F.lit(f"required field '{name}' is missing or null")))
    for name in (*REQUIRED_STRINGS, *OPTIONAL_STRINGS):
        checks.append((structural(mcol.getItem(name).isNotNull() & (t[name] != "STRING") & (t[name] != _JSON_NULL)),
                       WRONG_TYPE, F.concat(F.lit(f"'{name}' must be a string, got "), t[name])))
    checks += [
        (structural(mcol.getItem("headers").isNotNull() & (t["headers"] != _JSON_NULL)
                    & (~t["headers"].startswith("OBJECT") | (F.size(sql_lambda(
                        "map_filter(try_variant_get(_m['headers'], '$', 'map<string,variant>'), "
                        "(k, v) -> schema_of_variant(v) != 'STRING')")) > 0))),
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
        # the ledger's times are milliseconds since the epoch, never negative: one such record stopped every run
        # (an overflow in the merge), nothing committed
        (failed_ms < 0, INVALID_TIMESTAMP,
         F.concat(F.lit("failed_at "), F.to_json(F.array(failed_at_s)), F.lit(" is before 1970-01-01T00:00:00Z"))),
        (failed_ms > as_of + F.lit(max_future_ms), FUTURE_TIMESTAMP,
         F.concat(F.lit("failed_at "), failed_at_s,
                  F.lit(f" is more than {_span(max_future_ms)} after the as-of"))),
        (structural(mcol.getItem("delivery_count").isNotNull() & (dc_type != _JSON_NULL) & (dc_type != "BIGINT")
                    & (dc_type != "INT") & (dc_type != "SMALLINT") & (dc_type != "TINYINT")), INVALID_DELIVERY_COUNT,
         F.concat(F.lit("'delivery_count' must be an integer >= 1, got "), dc_type)),
        (delivery_count < 1, INVALID_DELIVERY_COUNT,
         F.concat(F.lit("'delivery_count' must be >= 1, got "), delivery_count.cast("string"))),
        # a broker's delivery counter is an int; near a long's end the ledger's sums (deliveries + failures in the
        # batch) overflowed, and every later run failed on the row (nothing committed, the file pending again)
        (delivery_count > MAX_DELIVERY_COUNT, INVALID_DELIVERY_COUNT,
         F.concat(F.lit(f"'delivery_count' must be at most {MAX_DELIVERY_COUNT}, got "),
                  delivery_count.cast("string"))),
        (F.octet_length(payload) > F.lit(max_payload_bytes), PAYLOAD_TOO_LARGE,
         F.concat(F.lit("payload is "), F.octet_length(payload).cast("string"),
                  F.lit(f" bytes, above the limit of {max_payload_bytes}"))),
    ]
    return checks


def parse_records(records: DataFrame, as_of: int | Column, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                  max_future_ms: int = DEFAULT_MAX_FUTURE_MS, jvm: bool = False) -> DataFrame:
    """Parse and check ``raw``: typed contract columns plus ``problem``/``problem_detail`` (null when fine).

    ``as_of`` is the run's as-of in epoch ms, or a column of ``records`` holding it
    (:func:`reprocess.sparkutil.with_as_of`); columns of ``records`` besides ``source_file``, ``record_no`` and
    ``raw`` are carried through to the result.

    Three projections, so that each costly expression runs once per record (Spark does not merge a projection
    into the next when that would repeat a costly expression): the fields and their variant types; the index of
    the first check that fails; the code and text of that check (texts are built for failing records only).

    ``jvm``: the structural checks of well-formed lines in one pass of the JVM parser (:func:`use_jvm_parser`,
    registered in the session); the result is the same, only cheaper.
    """
    fields = _fields(records, jvm).withColumn(_AS_OF_FIELD, as_of_column(as_of))
    c = _check_columns(max_payload_bytes, max_future_ms, jvm)
    return fields.withColumn("_first", c["first"]).select(
        "source_file", "record_no", "raw", c["problem"], c["problem_detail"],
        "message_id", "address", "payload", "failed_at", "failed_ms", c["headers"],
        "delivery_count", *OPTIONAL_STRINGS, "extra", *_carried(records),
    )


@columns_once
def _check_columns(max_payload_bytes: int, max_future_ms: int, jvm: bool) -> dict[str, Column]:
    """The expressions of :func:`parse_records` over :func:`_fields`: the index of the first failing check
    (``first``, null when all pass), then ``problem`` and ``problem_detail`` from it, and the headers; the same at
    every run, the as-of being read from the column ``_AS_OF_FIELD`` (:func:`reprocess.sparkutil.columns_once`)."""
    checks = _checks(F.col(_AS_OF_FIELD), max_payload_bytes, max_future_ms, jvm)
    first: Column | None = None  # the index of the first failing check, null when all pass
    for i, (cond, _code, _text) in enumerate(checks):
        c = F.coalesce(cond, F.lit(False))
        first = F.when(c, F.lit(i)) if first is None else first.when(c, F.lit(i))
    assert first is not None
    idx = F.col("_first")
    detail: Column | None = None
    for i, (_cond, _code, text) in enumerate(checks):
        detail = F.when(idx == i, text) if detail is None else detail.when(idx == i, text)
    assert detail is not None
    codes = F.array(*[F.lit(code) for _c, code, _t in checks])
    return {
        "first": first,
        "problem": F.when(idx.isNotNull(), F.element_at(codes, idx + 1)).alias("problem"),
        "problem_detail": detail.alias("problem_detail"),
        "headers": F.coalesce(F.col("_headers"), F.create_map().cast("map<string,string>")).alias("headers"),
    }
