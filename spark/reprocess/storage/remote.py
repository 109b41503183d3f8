"""A warehouse on object storage, read without Spark: pyarrow's S3, GCS and Azure filesystems.

The writers of a warehouse at a URI (``reprocess run`` and ``reprocess redrive``) go through Spark's Hadoop
``FileSystem`` (:mod:`reprocess.storage.hadoop`). The readers that answer in a second with no JVM (``reprocess
dlq``, ``reprocess ledger stats``, ``reprocess report``, the UI plugin and the DAG tasks around the Spark job) read
the same objects through pyarrow's own filesystems. They read only what a snapshot lists, as on a local disk, and
never write: the writer's lease and commit are the Hadoop side's.

The Hadoop scheme maps to pyarrow's: ``s3a://`` (and ``s3n://``, ``s3://``) to S3, ``gs://`` to GCS, ``abfs://``
and ``abfss://`` to Azure. Credentials and endpoints come from each SDK's usual environment (``AWS_ACCESS_KEY_ID``,
``AWS_REGION``, ``AWS_ENDPOINT_URL`` for an S3-compatible store; ``GOOGLE_APPLICATION_CREDENTIALS``;
``AZURE_STORAGE_ACCOUNT_KEY``...), not from the ``spark.hadoop.fs.*`` settings the Spark job uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from reprocess.errors import ConfigError, StorageUnavailableError
from reprocess.storage.commit import DATASETS, Snapshot, latest_version, prepared_record, snapshot_name, uncommitted
from reprocess.uris import local_path, remote_scheme

if TYPE_CHECKING:
    import pyarrow.fs as pafs

# Hadoop's scheme -> pyarrow's
ARROW_SCHEMES = {"s3a": "s3", "s3n": "s3", "s3": "s3", "gs": "gs", "abfs": "abfs", "abfss": "abfss"}
# The tests' object store (reprocess.hadoop.ConditionalLocalFileSystem): the local disk under its own scheme, so
# that a DAG can be run end to end on a warehouse URI whose writer has a lease and conditional commits here.
TEST_SCHEME = "cfile"


def arrow_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for a warehouse URI and the warehouse's path in it (``s3a://b/wh`` -> S3, ``b/wh``).

    A :class:`ConfigError` for a scheme pyarrow has no filesystem for here (``hdfs://``, ``viewfs://``...).
    """
    import pyarrow.fs as pafs

    scheme = remote_scheme(uri)
    if scheme == TEST_SCHEME:
        return pafs.LocalFileSystem(), str(local_path("file" + uri[len(scheme):])).rstrip("/")
    if scheme is None or scheme not in ARROW_SCHEMES:
        raise ConfigError(
            f"warehouse {uri}: a warehouse on {scheme}:// can only be read through Spark; the readers without "
            f"Spark (dlq, ledger stats, report, the UI and the DAG tasks) take {', '.join(sorted(ARROW_SCHEMES))} "
            "(docs/adr/0005-warehouse-on-object-storage.md)", key="--warehouse")
    arrow = ARROW_SCHEMES[scheme]
    try:
        fs, path = pafs.FileSystem.from_uri(arrow + uri[len(scheme):])
    except ValueError as exc:  # pyarrow's ArrowInvalid: a URI it cannot take
        raise ConfigError(f"warehouse {uri}: pyarrow cannot open it: {exc}", key="--warehouse") from exc
    except OSError as exc:
        # S3 asks AWS for the bucket's region (without an endpoint or region= in the URI): a bucket AWS says does
        # not exist is the configuration's; a network error or a refusal may pass, as for every other read
        if "not found" in str(exc):
            raise ConfigError(f"warehouse {uri}: pyarrow cannot open it: {exc}", key="--warehouse") from exc
        raise StorageUnavailableError(f"warehouse {uri}: pyarrow could not reach it: {exc}") from exc
    if arrow in ("abfs", "abfss"):
        fs = _azure_with_key(fs)
    if not path.strip("/"):  # s3a:// or gs:// alone: pyarrow's paths then began with '/' (a traceback), or it hung
        raise ConfigError(f"warehouse {uri} names no bucket: give {scheme}://BUCKET/PATH", key="--warehouse")
    return fs, path.rstrip("/")


def _azure_with_key(fs: pafs.FileSystem) -> pafs.FileSystem:
    """Azure's filesystem with ``AZURE_STORAGE_ACCOUNT_KEY`` where it is set: pyarrow's URI reading takes no key from
    the environment, and its default credentials cannot use one, so every reader was refused."""
    import os

    import pyarrow.fs as pafs

    key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if not key:
        return fs
    options: dict[str, str] = fs.__reduce__()[1][0]  # the options pyarrow read from the URI
    if any(options.get(k) for k in ("account_key", "sas_token", "client_id", "client_secret")):  # the URI's: kept
        return fs
    kept = {k: v for k, v in options.items()
            if k in ("blob_storage_authority", "blob_storage_scheme", "dfs_storage_authority", "dfs_storage_scheme")
            and v}
    return pafs.AzureFileSystem(options["account_name"], account_key=key, **kept)


class ArrowWarehouse:
    """The read calls of :class:`reprocess.storage.commit.Warehouse` on a warehouse at a URI, through pyarrow.

    Locations are paths in pyarrow's filesystem (``bucket/warehouse/ledger/...``), not URIs.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.base = arrow_filesystem(uri)

    def path(self, *parts: str) -> str:
        return "/".join((self.base, *parts))

    def abs(self, rel: str) -> str:
        return self.path(rel)

    @contextmanager
    def _reading(self, location: str) -> Iterator[None]:
        """pyarrow's I/O errors (endpoint down, credentials refused...) as a :class:`StorageUnavailableError` naming
        the warehouse and the object, not a traceback."""
        try:
            yield
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StorageUnavailableError(f"warehouse {self.uri}: cannot read {location}: {exc}") from exc

    def is_dir(self) -> bool:
        """Whether the warehouse's root is there (a prefix with objects under it, on an object store)."""
        import pyarrow.fs as pafs

        with self._reading(self.base):
            return bool(self.fs.get_file_info(self.base).type == pafs.FileType.Directory)

    def exists(self, location: str) -> bool:
        import pyarrow.fs as pafs

        with self._reading(location):
            return bool(self.fs.get_file_info(location).type != pafs.FileType.NotFound)

    def read_bytes(self, location: str) -> bytes:
        with self._reading(location), self.fs.open_input_stream(location) as fh:
            return bytes(fh.read())

    def read_source(self, location: str) -> Any:
        """What pyarrow reads a file from: the file opened for random access (Parquet reads its footer first)."""
        with self._reading(location):
            return self.fs.open_input_file(location)

    def listing(self, rel: str, suffix: str) -> list[tuple[str, int]]:
        """The files directly in folder ``rel`` whose name ends with ``suffix``: (location, mtime in ns), by name."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path(rel), allow_not_found=True)
        with self._reading(self.path(rel)):
            infos = self.fs.get_file_info(selector)
        return sorted((info.path, info.mtime_ns or 0) for info in infos
                      if info.type == pafs.FileType.File and info.base_name.endswith(suffix))

    def latest(self) -> Snapshot:
        """The latest committed snapshot (version 0, empty, when there is none)."""
        version = latest_version(p.rsplit("/", 1)[-1] for p, _ in self.listing("_snapshots", ".json"))
        if version is None:
            return Snapshot()
        where = self.path("_snapshots", snapshot_name(version))
        return Snapshot.from_json(self.read_bytes(where), str(where))

    def prepared_runs(self) -> list[dict[str, Any]]:
        """The records of prepared runs (``_runs/<run_id>/prepared.json``) the latest snapshot has not committed,
        oldest as-of first; a record removed while this lists them (an abandon, a commit) is left out."""

        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path("_runs"), allow_not_found=True)
        with self._reading(self.path("_runs")):
            folders = [info.path for info in self.fs.get_file_info(selector) if info.type == pafs.FileType.Directory]
        docs = []
        for folder in sorted(folders):
            try:
                docs.append(prepared_record(self.read_bytes(f"{folder}/prepared.json"), f"{folder}/prepared.json"))
            except FileNotFoundError:
                continue  # a re-drive request's folder, a run that prepared nothing yet, or one removed since
        return uncommitted(docs, self.latest())

    def live_files(self, dataset: str, snapshot: Snapshot | None = None) -> list[str]:
        if dataset not in DATASETS:
            raise ValueError(f"unknown dataset {dataset!r}; one of {DATASETS}")
        snap = snapshot or self.latest()
        return [self.abs(f) for f in snap.files[dataset]]
