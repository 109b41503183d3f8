"""Reading a warehouse the safe way: only the files the latest snapshot lists (never a half-written run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprocess.ledger.model import LEDGER_FILE_SCHEMA
from reprocess.storage.commit import DATASETS, open_warehouse

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_dataset(spark: SparkSession, warehouse: str, dataset: str) -> DataFrame | None:
    """The committed rows of ``dataset`` (with its partition columns), or None when it has no file yet."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; one of {DATASETS}")
    wh = open_warehouse(warehouse)
    files = wh.live_files(dataset)
    if not files:
        return None
    reader = spark.read.option("basePath", str(wh.path(dataset)))
    if dataset == "ledger":
        from pyspark.sql import types as T

        schema = T.StructType([*LEDGER_FILE_SCHEMA.fields, T.StructField("bucket", T.StringType())])
        reader = reader.schema(schema)
    return reader.parquet(*files)


def read_ledger(spark: SparkSession, warehouse: str) -> DataFrame | None:
    return read_dataset(spark, warehouse, "ledger")
