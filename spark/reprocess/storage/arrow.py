"""Reading a committed snapshot without Spark: pyarrow over the live files the snapshot lists.

For the operator tooling (``reprocess dlq``, ``reprocess ledger stats``, ``reprocess report``) and the UI
plugin: answers in about a second, no JVM. Like :mod:`reprocess.storage.read`, it reads only the files
the snapshot lists, never a directory listing, so a half-written run is never seen. Partition columns
(``address`` and ``dt`` of the DLQ, ``bucket`` of the ledger) come from the directory names, unescaped
the way Spark escaped them. A warehouse at a URI (``s3a://``, ``gs://``, ``abfss://``) is read through pyarrow's
filesystem for it (:mod:`reprocess.storage.remote`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, overload
from urllib.parse import unquote

from reprocess.errors import ConfigError, StorageUnavailableError, WarehouseDamagedError
from reprocess.storage.commit import DATASETS, Snapshot, Warehouse
from reprocess.uris import remote_scheme

if TYPE_CHECKING:
    import pyarrow as pa

    from reprocess.storage.remote import ArrowWarehouse

ReadWarehouse: TypeAlias = "Warehouse | ArrowWarehouse"

PARTITION_COLUMNS = {"dlq": ("address", "dt"), "ledger": ("bucket",), "outbox": ("address",),
                     "quarantine": ("dt",)}


def open_reader(warehouse: str) -> ReadWarehouse:
    """The warehouse at ``warehouse``, to read without Spark: a local :class:`Warehouse` for a path or a ``file:``
    URI, an :class:`reprocess.storage.remote.ArrowWarehouse` for ``s3a://``, ``gs://``, ``abfss://``..."""
    if remote_scheme(warehouse):
        from reprocess.storage.remote import ArrowWarehouse

        return ArrowWarehouse(warehouse)
    return Warehouse(warehouse)


def not_there(warehouse: str) -> str:
    """Why a warehouse that is no folder is not there (the end of a sentence naming it): a local file is one."""
    import os

    from reprocess.uris import remote_scheme

    return "is a file, not a warehouse folder" if not remote_scheme(warehouse) and os.path.isfile(
        warehouse) else "does not exist"


def open_snapshot(warehouse: str) -> tuple[ReadWarehouse, Snapshot]:
    """The warehouse and its latest committed snapshot; a :class:`ConfigError` when there is none."""
    wh = open_reader(warehouse)
    if not wh.is_dir():
        raise ConfigError(f"warehouse {warehouse} {not_there(warehouse)}", key="--warehouse")
    snap = wh.latest()
    if snap.version == 0:
        raise ConfigError(f"{warehouse} has no committed snapshot ({wh.path('_snapshots')}/ is missing or empty): "
                          "not a reprocess warehouse, or no run has committed yet", key="--warehouse")
    return wh, snap


@contextmanager
def opened(wh: ReadWarehouse, location: str) -> Iterator[Any]:
    """What pyarrow reads ``location`` from (a path, or a file of a remote filesystem, closed after)."""
    source = wh.read_source(location)
    try:
        yield source
    finally:
        if hasattr(source, "close"):
            source.close()


def partition_value(path: str, name: str) -> str | None:
    """The value of the deepest ``name=...`` directory in ``path`` (Spark's escaping undone), or None.

    The deepest, as Spark's partition discovery reads only the folders below the dataset: a warehouse kept under a
    folder such as ``/data/dt=2020-01-01/wh`` must not give its dead letters that date."""
    for part in reversed(path.replace("\\", "/").split("/")[:-1]):
        if part.startswith(name + "="):
            return unquote(part[len(name) + 1:])
    return None


def read_live(wh: ReadWarehouse, snap: Snapshot, dataset: str, columns: Sequence[str] | None = None) -> pa.Table:
    """The committed rows of ``dataset`` as one Arrow table, with its partition columns as strings.

    ``columns`` (file or partition columns) limits what is read; a column a file lacks is null. With no
    live file the table has the requested columns and no row.
    """
    import pyarrow as pa

    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; one of {DATASETS}")
    parts = PARTITION_COLUMNS.get(dataset, ())
    tables = []
    for path in wh.live_files(dataset, snap):
        table = read_live_file(wh, snap, path, columns)
        for part in parts:
            if columns is None or part in columns:
                value = partition_value(path, part)
                table = table.append_column(part, pa.array([value] * table.num_rows, pa.string()))
        tables.append(table)
    if not tables:
        return pa.table({c: pa.array([], pa.null()) for c in columns or ()})
    table = pa.concat_tables(tables, promote_options="permissive")
    if columns is not None:
        missing = [c for c in columns if c not in table.column_names]
        for c in missing:
            table = table.append_column(c, pa.nulls(table.num_rows))
        table = table.select(list(columns))
    return table


def read_live_file(wh: ReadWarehouse, snap: Snapshot, path: str, columns: Sequence[str] | None,
                   keep: Callable[[pa.RecordBatch], pa.Array] | None = None) -> pa.Table:
    """One live file's rows (``columns`` of them that it has). A file the snapshot lists but that is gone or not
    Parquet is a :class:`WarehouseDamagedError` naming it; an I/O failure on the way (a store that stops answering
    mid-read, a disk refusing access) a :class:`StorageUnavailableError` (on a store, pyarrow raises the same
    ``OSError`` for bytes that do not decode: the message carries its text). ``keep``: a mask of the rows to keep,
    applied batch by batch as the file is read (a few rows of a large file, without the whole of it in memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with opened(wh, path) as source:
            pf = pq.ParquetFile(source)
            names = pf.schema_arrow.names
            wanted = None if columns is None else [c for c in columns if c in names]
            if keep is None:
                return pf.read(columns=wanted).replace_schema_metadata(None)
            schema = pf.schema_arrow if wanted is None else pa.schema([pf.schema_arrow.field(c) for c in wanted])
            kept = [b.filter(keep(b)) for b in pf.iter_batches(batch_size=4096, columns=wanted)]
            return pa.Table.from_batches(kept, schema=schema).replace_schema_metadata(None)
    except FileNotFoundError as exc:
        raise WarehouseDamagedError.missing(wh.uri, snap.version, path) from exc
    except ValueError as exc:  # pyarrow's ArrowInvalid: not Parquet, truncated, a footer that does not decode
        raise WarehouseDamagedError.unreadable(wh.uri, snap.version, path, str(exc)) from exc
    except OSError as exc:
        if exc.errno is None and isinstance(wh, Warehouse):  # no system error: the bytes (pyarrow's thrift errors)
            raise WarehouseDamagedError.unreadable(wh.uri, snap.version, path, str(exc)) from exc
        raise StorageUnavailableError(
            f"warehouse {wh.uri}: snapshot {snap.version} lists {path}; reading it failed: {exc}") from exc


def to_ms(value: datetime | int | None) -> int | None:
    """Epoch milliseconds of a timestamp read from Parquet (UTC), or of a millisecond count."""
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


@overload
def iso_ms(ms: int) -> str: ...


@overload
def iso_ms(ms: None) -> None: ...


@overload
def iso_ms(ms: int | None) -> str | None: ...


def iso_ms(ms: int | None) -> str | None:
    """``1795255500000`` -> ``'2026-11-21T10:05:00Z'`` (milliseconds shown only when not zero)."""
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = f"{dt.year:04d}-{dt:%m-%dT%H:%M:%S}"  # %Y leaves a year before 1000 unpadded ("1-01-01"): no ISO-8601
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"
