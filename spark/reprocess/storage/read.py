"""Reading a warehouse the safe way: only the files the latest snapshot lists (never a half-written run)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import unquote

from reprocess.errors import ReprocessError, WarehouseDamagedError
from reprocess.ledger.model import LEDGER_FILE_SCHEMA
from reprocess.sparkutil import error_text
from reprocess.storage.arrow import PARTITION_COLUMNS, partition_value
from reprocess.storage.commit import DATASETS, open_warehouse

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from reprocess.storage.commit import Snapshot

# Spark's error for a file its scan could not read (a py4j error's text, or a Connect client's SparkException)
_FAILED_READ = re.compile(r"\[FAILED_READ_FILE[.\w]*\] Encountered error while reading file (\S+)\.\s")
_NOT_FOUND = re.compile(r"\[PATH_NOT_FOUND\] Path does not exist: (\S+)\.\s")
_CAUSE = re.compile(r"Caused by: [\w.$]+: (.+)")


def damaged_live_file(exc: BaseException, warehouse: str, snap: Snapshot) -> WarehouseDamagedError | None:
    """Spark's failure to read a file (``FAILED_READ_FILE``) or to find it (``PATH_NOT_FOUND``) as a
    :class:`WarehouseDamagedError` naming it, when the file is one ``snap`` lists (deleted, overwritten or cut short
    outside reprocess); None for any other error, a landing file's included (those have their own checks:
    ``reprocess.cycle.landing_batch``)."""
    text = error_text(exc)  # not str(exc): a Py4JJavaError asks its JVM, which may have gone (out of heap)
    found = _FAILED_READ.search(text) or _NOT_FOUND.search(text)
    if found is None:
        return None
    uri = unquote(found.group(1))
    rel = next((f for files in snap.files.values() for f in files if uri.endswith("/" + f)), None)
    if rel is None:
        return None
    if found.re is _NOT_FOUND:
        return WarehouseDamagedError.missing(warehouse, snap.version, rel)
    cause = _CAUSE.search(text)
    return WarehouseDamagedError.unreadable(warehouse, snap.version, rel, cause.group(1).strip() if cause else "")


@contextmanager
def naming_damaged_files(warehouse: str, snap: Snapshot) -> Iterator[None]:
    """Spark work on ``snap``: a file it lists that Spark cannot read stops the work as a
    :class:`WarehouseDamagedError` naming it (:func:`damaged_live_file`), not a Java stack trace."""
    try:
        yield
    except ReprocessError:
        raise
    except Exception as exc:
        damaged = damaged_live_file(exc, warehouse, snap)
        if damaged is None:
            raise
        raise damaged from exc


def read_files(spark: SparkSession, dataset: str, files: Sequence[str], schema: StructType | None = None,
               file_column: str | None = None, uris: Sequence[str] | None = None) -> DataFrame:
    """Live ``files`` of ``dataset`` (as the warehouse lists them) as one frame, with the dataset's partition columns
    (``address`` and ``dt`` of the DLQ...) as strings, from each file's ``name=value`` folders.

    Not Spark's partition discovery, which needs every file below one base folder through ``name=value`` folders
    only: a warehouse on object storage keeps each attempt's files in a folder of its own
    (``dlq/<run_id>.<attempt>/address=.../dt=.../``), and a warehouse may hold both layouts. The values are read
    as :func:`reprocess.storage.arrow.read_live` reads them. ``file_column`` names a column with each row's file
    (``_metadata.file_path``); ``uris``, when given, are the files'
    :func:`~reprocess.cycle.landing_batch.spark_file_uris`, already asked for.
    """
    from pyspark.sql import functions as F

    from reprocess.cycle.landing_batch import spark_file_uris

    uri = file_column or "_uri"
    frame = (spark.read if schema is None else spark.read.schema(schema)).parquet(*files) \
        .withColumn(uri, F.col("_metadata.file_path"))
    parts = PARTITION_COLUMNS.get(dataset, ())
    if parts:
        names = spark_file_uris(spark, files) if uris is None else uris
        rows = [(u, *(partition_value(f, p) for p in parts)) for u, f in zip(names, files, strict=True)]
        values = spark.createDataFrame(rows, ", ".join([f"`{uri}` string", *(f"{p} string" for p in parts)]))
        frame = frame.join(F.broadcast(values), uri)
        frame = frame.select(*frame.columns[1:], uri)  # the file last, as withColumn put it
    return frame if file_column else frame.drop(uri)


def read_dataset(spark: SparkSession, warehouse: str, dataset: str) -> DataFrame | None:
    """The committed rows of ``dataset`` (with its partition columns), or None when it has no file yet."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; one of {DATASETS}")
    files = open_warehouse(warehouse).live_files(dataset)
    if not files:
        return None
    return read_files(spark, dataset, files, LEDGER_FILE_SCHEMA if dataset == "ledger" else None)


def read_ledger(spark: SparkSession, warehouse: str) -> DataFrame | None:
    return read_dataset(spark, warehouse, "ledger")
