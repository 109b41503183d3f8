"""A warehouse on a Hadoop filesystem URI (``s3a://``, ``gs://``, ``abfss://``...): ADR 0005's commit protocol.

The driver JVM's Hadoop ``FileSystem`` does every read and write (py4j), so the deployment's Spark image must carry
the connector jars, and the command needs a classic Spark session (not Spark Connect). What it needs from the store,
checked when the warehouse is opened (``hasPathCapability``), is what S3A 3.5 gives through
``FileSystem.createFile(path).must(key, value)``:

- ``fs.option.create.conditional.overwrite``: create only if absent (``If-None-Match: *``). The commit creates
  ``_snapshots/N.json`` this way: two writers never both commit version N.
- ``fs.option.create.conditional.overwrite.etag``: replace only if the ETag is the one read (``If-Match``). The
  writer lock is a lease taken and renewed this way.

What changes from the POSIX protocol (docs/adr/0005-warehouse-on-object-storage.md):

- **The lock is a lease.** ``_lock`` holds the holder and an expiry ``$REPROCESS_LEASE_SECONDS`` (default 600 s)
  ahead; a thread renews it every third of that. A writer killed with ``kill -9`` blocks the next one until its
  lease expires (flock released it at once). A holder that could not renew stops before its next side effect:
  the prepared record, the publish, the commit.
- **Whole-file writes** (``prepared.json``, ``summary.json``) are single creates, which an object store replaces
  atomically: no temporary file and rename.
- **The publish moves nothing.** Each attempt writes a dataset's Parquet files where they stay: under
  ``<dataset>/<run_id>.<attempt>/`` (:meth:`HadoopWarehouse.staged`). They are unseen until the commit names them,
  as staged files were; the vacuum after a commit deletes what no snapshot names, a crashed attempt's folder
  whole. On S3 a rename is a copy and a delete per object, so the POSIX publish's renames would copy every byte
  a run writes a second time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from reprocess.errors import CommitConflictError, ConfigError
from reprocess.storage.commit import (
    _HELD,
    DATASETS,
    Snapshot,
    _describe,
    commit_conflict,
    expired_snapshots,
    latest_version,
    private_files_default,
    reentered,
    referenced,
    snapshot_name,
    uncommitted,
)
from reprocess.uris import remote_scheme

log = logging.getLogger(__name__)

IF_ABSENT = "fs.option.create.conditional.overwrite"
IF_MATCH = "fs.option.create.conditional.overwrite.etag"
ETAGS = "fs.capability.etags.available"
LEASE_ENV = "REPROCESS_LEASE_SECONDS"
# The folder an attempt writes a dataset into (staged): ``<run_id>.attempt-<12 hex>``.
ATTEMPT_FOLDER = re.compile(r"^[^/=]+\.attempt-[0-9a-f]{12}$")
# What a failed condition raises: Hadoop's own class (the test filesystem, HDFS), S3A's for a 412 from S3.
_CONFLICTS = ("org.apache.hadoop.fs.FileAlreadyExistsException", "org.apache.hadoop.fs.s3a.RemoteFileChangedException")


class Uri(str):
    """A location under a Hadoop URI with the two bits of :class:`pathlib.Path` the cycle uses: ``/`` and ``name``
    (``Path`` would fold ``s3a://bucket`` into ``s3a:/bucket``)."""

    def __truediv__(self, part: str) -> Uri:
        return Uri(self.rstrip("/") + "/" + str(part).strip("/"))

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


def lease_seconds() -> float:
    """``$REPROCESS_LEASE_SECONDS`` (default 600): how long a writer's lease lasts without renewal."""
    return float(os.environ.get(LEASE_ENV, "600"))


class HadoopWarehouse:
    """The warehouse at a Hadoop URI, read and written through the active Spark driver's JVM.

    It offers what :class:`reprocess.storage.commit.Warehouse` offers the cycle, with :class:`Uri` locations
    instead of paths. ``private`` is refused: an object store's access is its bucket policy, not file modes.
    """

    def __init__(self, uri: str, private: bool | None = None) -> None:
        if private:
            raise ConfigError(f"--private-files is for a warehouse on a POSIX filesystem; {uri} is on "
                              f"{remote_scheme(uri)}://, whose access is set by the store (a bucket policy)",
                              key="--private-files")
        if private is None and private_files_default():
            log.warning("REPROCESS_PRIVATE_FILES does not apply to warehouse %s: the store's policy sets its access",
                        uri)
        self.uri = uri
        self.private = False
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is None:
            raise ConfigError(
                f"warehouse {uri} is on {remote_scheme(uri)}://: it is read and written through a Spark driver's "
                "Hadoop FileSystem, and this command has none (commands without Spark, and Spark Connect clients, "
                "need a warehouse on a local or shared POSIX filesystem)", key="--warehouse")
        jvm: Any = sc._jvm
        self._jvm = jvm
        jsc: Any = sc._jsc
        self._conf = jsc.hadoopConfiguration()
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        from py4j.protocol import Py4JJavaError

        try:
            self._fs = path.getFileSystem(self._conf)
        except Py4JJavaError as exc:
            raise ConfigError(
                f"warehouse {uri}: this Spark has no Hadoop FileSystem for {remote_scheme(uri)}:// "
                f"({exc.java_exception.toString()}); the deployment's Spark image must carry the connector jars",
                key="--warehouse") from None
        self.root = Uri(str(self._fs.makeQualified(path).toString()).rstrip("/"))
        missing = [c for c in (IF_ABSENT, IF_MATCH, ETAGS) if not self._fs.hasPathCapability(path, c)]
        if missing:
            raise ConfigError(
                f"warehouse {uri}: its filesystem ({self._fs.getClass().getName()}) does not declare "
                f"{', '.join(missing)}; the commit and the writer's lease need conditional creates "
                "(S3A of Hadoop 3.5 on a store with conditional writes)", key="--warehouse")
        self._lease: dict[str, Any] | None = None  # the lease this object holds: holder doc, ETag, lost flag

    # -- paths -----------------------------------------------------------------------------------
    def _path(self, location: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(str(location))

    @property
    def snapshots_dir(self) -> Uri:
        return self.root / "_snapshots"

    def path(self, *parts: str) -> Uri:
        out = self.root
        for p in parts:
            out = out / p
        return out

    def relative(self, location: str) -> str:
        text = str(location)
        if not text.startswith(self.root + "/"):  # not in the qualified form this class writes and lists
            text = str(self._fs.makeQualified(self._path(location)).toString())
        if not text.startswith(self.root + "/"):
            raise ValueError(f"{location} is not in warehouse {self.root}")
        return text[len(self.root) + 1:]

    def run_dir(self, run_id: str) -> Uri:
        return self.root / "_runs" / run_id

    def stage_dir(self, run_id: str) -> Uri:
        return self.run_dir(run_id) / "stage"

    def new_stage(self, run_id: str) -> Uri:
        """This attempt's own scratch folder (earlier attempts' removed), as :meth:`Warehouse.new_stage`: its
        re-drive outcomes. Its datasets are written in place (:meth:`staged`)."""
        base = self.stage_dir(run_id)
        self._fs.delete(self._path(base), True)
        return base / f"attempt-{uuid.uuid4().hex[:12]}"

    def staged(self, run_id: str, stage: str | os.PathLike[str], dataset: str) -> Uri:
        """Where the attempt of ``stage`` writes ``dataset``: ``<dataset>/<run_id>.<attempt>/``, its files' final
        place (the commit names them there; :meth:`publish` moves none)."""
        return self.root / dataset / f"{run_id}.{Uri(str(stage)).name}"

    def abs(self, rel: str) -> str:
        return str(self.root / rel)

    # -- files -----------------------------------------------------------------------------------
    def exists(self, location: str) -> bool:
        return bool(self._fs.exists(self._path(location)))

    def size(self, location: str) -> int:
        return int(self._fs.getFileStatus(self._path(location)).getLen())

    def read_bytes(self, location: str) -> bytes:
        stream = self._fs.open(self._path(location))
        try:
            return bytes(self._jvm.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream))
        finally:
            stream.close()

    def read_source(self, location: str) -> Any:
        """What pyarrow reads a file from: its bytes in a buffer."""
        import pyarrow as pa

        return pa.BufferReader(self.read_bytes(location))

    def write_bytes(self, location: str, data: bytes) -> None:
        """Create or replace ``location`` in one write (an object store shows it whole, or not at all)."""
        out = self._fs.create(self._path(location), True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def _conditional_write(self, location: str, data: bytes, etag: str | None) -> bool:
        """Create ``location`` if absent (``etag`` None) or replace it if its ETag is ``etag``; False if not."""
        from py4j.protocol import Py4JJavaError

        builder = self._fs.createFile(self._path(location)).overwrite(etag is not None)
        builder = builder.must(IF_ABSENT, True) if etag is None else builder.must(IF_MATCH, etag)
        try:
            out = builder.build()
            try:
                out.write(bytearray(data))
            finally:
                out.close()  # an object store checks the condition here, when the object is put
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() in _CONFLICTS:
                return False
            raise
        return True

    def etag(self, location: str) -> str | None:
        from py4j.protocol import Py4JJavaError

        try:
            return str(self._fs.getFileStatus(self._path(location)).getEtag())
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() == "java.io.FileNotFoundException":
                return None
            raise

    def _list(self, location: str, recursive: bool) -> list[str]:
        path = self._path(location)
        if not self._fs.exists(path):
            return []
        it = self._fs.listFiles(path, recursive)
        out = []
        while it.hasNext():
            out.append(str(it.next().getPath().toString()))
        return sorted(out)

    def _children(self, location: str) -> list[str]:
        """The names of the files and folders directly in ``location``."""
        path = self._path(location)
        if not self._fs.exists(path):
            return []
        return sorted(str(st.getPath().getName()) for st in self._fs.listStatus(path))

    # -- snapshots -------------------------------------------------------------------------------
    def latest(self) -> Snapshot:
        version = latest_version(f.rsplit("/", 1)[-1] for f in self._list(self.snapshots_dir, False))
        if version is None:
            return Snapshot()
        text = self.read_bytes(self.snapshots_dir / snapshot_name(version)).decode("utf-8")
        return Snapshot.from_json(text)

    def live_files(self, dataset: str, snapshot: Snapshot | None = None) -> list[str]:
        snap = snapshot or self.latest()
        return [self.abs(f) for f in snap.files[dataset]]

    def commit(self, base: Snapshot, new: Snapshot) -> None:
        """Make ``new`` the committed state by creating ``_snapshots/N+1.json`` only if it is absent."""
        self.check_lease()
        new.version = base.version + 1
        name = snapshot_name(new.version)
        if not self._conditional_write(self.snapshots_dir / name, new.to_json().encode("utf-8"), None):
            raise commit_conflict(name, base)
        log.info("committed snapshot version=%s runs=%s (conditional create)", new.version, len(new.runs))

    # -- publishing staged files -----------------------------------------------------------------
    def publish(self, run_id: str, dataset: str, staged_root: str | os.PathLike[str]) -> list[str]:
        """The Parquet files :meth:`staged` had written for ``dataset``, relative to the warehouse, for the commit to
        name where they are: nothing is moved (an object store renames by a copy and a delete)."""
        self.check_lease()
        staged = str(self._fs.makeQualified(self._path(str(staged_root))).toString()).rstrip("/")
        if not staged.startswith(self.root / dataset + "/"):
            raise ValueError(f"{staged_root} is not an attempt's folder in {self.root / dataset}/ (staged())")
        published = [self.relative(src) for src in self._list(staged, True)
                     if src.endswith(".parquet") and "/_temporary/" not in src and "/." not in src[len(staged):]]
        log.info("published dataset=%s files=%s in place (no rename)", dataset, len(published))
        return published

    def vacuum(self, snapshot: Snapshot, keep_previous: Snapshot | None = None) -> int:
        """Delete published files no longer referenced (by ``snapshot`` or ``keep_previous``)."""
        live = referenced(snapshot, keep_previous)
        removed = 0
        for dataset in DATASETS:
            base = self.root / dataset
            for f in self._list(base, True):
                if f.endswith(".parquet") and self.relative(f) not in live:
                    self._fs.delete(self._path(f), False)
                    removed += 1
            # an attempt's folder (staged) that no snapshot names a file in: one that never committed, or whose files
            # were all replaced; with what else is in it (markers, empty partition folders, a crashed job's
            # _temporary)
            used = {f.split("/")[1] for f in live if f.startswith(dataset + "/") and f.count("/") > 1}
            for folder in self._children(base):
                if ATTEMPT_FOLDER.match(folder) and folder not in used:
                    self._fs.delete(self._path(base / folder), True)
        for name in expired_snapshots((f.rsplit("/", 1)[-1] for f in self._list(self.snapshots_dir, False)),
                                      snapshot.version):
            self._fs.delete(self._path(self.snapshots_dir / name), False)
        if removed:
            log.info("vacuum removed=%s unreferenced files", removed)
        return removed

    def clear_run(self, run_id: str) -> None:
        self._fs.delete(self._path(self.run_dir(run_id)), True)

    # -- prepared runs ---------------------------------------------------------------------------
    def prepared_runs(self) -> list[dict[str, Any]]:
        statuses = self._fs.globStatus(self._path(self.root / "_runs" / "*" / "prepared.json")) or []
        return uncommitted([json.loads(self.read_bytes(str(s.getPath().toString()))) for s in statuses],
                           self.latest())

    def write_prepared(self, run_id: str, doc: Mapping[str, Any]) -> None:
        self.check_lease()
        self.write_bytes(self.run_dir(run_id) / "prepared.json",
                         json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))

    def read_prepared(self, run_id: str) -> dict[str, Any] | None:
        p = self.run_dir(run_id) / "prepared.json"
        return json.loads(self.read_bytes(p)) if self.exists(p) else None

    @contextmanager
    def local_folder(self, rel: str) -> Iterator[str]:
        """A temporary local folder for files a library writes by path (GX's Data Docs), copied to ``rel`` in the
        warehouse on exit (also after an error: a failed validation's Data Docs are the ones worth reading)."""
        local = tempfile.mkdtemp(prefix="reprocess-")
        try:
            yield local
        finally:
            try:
                self._fs.copyFromLocalFile(False, True, self._path("file://" + local), self._path(self.path(rel)))
            finally:
                shutil.rmtree(local, ignore_errors=True)

    # -- the writer lease ------------------------------------------------------------------------
    @contextmanager
    def lock(self, owner: str, wait_seconds: float = 0.0, poll: float = 0.2) -> Iterator[None]:
        """Hold the warehouse's writer lease for the whole run (re-entrant within one thread).

        Taken by creating ``_lock`` if absent, or by replacing an expired lease if its ETag is still the one read;
        renewed the same way from a thread. Waits up to ``wait_seconds`` for the holder, then raises
        :class:`CommitConflictError` naming it.
        """
        key = (self.root + "/_lock", threading.get_ident())
        if key in _HELD:
            with reentered(key):
                yield
            return
        path = self.root / "_lock"
        seconds = lease_seconds()
        deadline = time.monotonic() + wait_seconds
        waited = False
        while True:
            me = {"owner": owner, "pid": os.getpid(), "host": socket.gethostname(), "token": uuid.uuid4().hex,
                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "expires_ms": int((time.time() + seconds) * 1000)}
            data = json.dumps(me).encode("utf-8")
            holder, tag = self._read_lease(path)
            if tag is None:
                if self._conditional_write(path, data, None):
                    break
                continue  # another writer created it first: read its lease
            # A lease read as nothing (released between the two reads, then maybe taken again) is never judged
            # expired: only a lease document whose expiry has passed is replaced
            if holder is not None and holder.get("expires_ms", 0) < time.time() * 1000:
                if self._conditional_write(path, data, tag):
                    log.warning("took over the warehouse lease of %s, expired", _describe(holder))
                    break
                continue
            if time.monotonic() >= deadline:
                who = _describe(holder) if holder else f"a lease it cannot read ({path}: delete it if no writer runs)"
                raise CommitConflictError(
                    f"warehouse {self.uri} is locked by {who}: another run, backfill or re-drive is writing it; wait "
                    "for it to finish (or pass --lock-wait SECONDS)")
            if not waited:
                log.info("waiting up to %.0fs for the warehouse lease held by %s", wait_seconds, _describe(holder))
                waited = True
            time.sleep(poll)
        self._lease = {"doc": me, "etag": self.etag(path), "lost": None}
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(path, seconds, stop), daemon=True,
                                   name="reprocess-lease")
        renewer.start()
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]
            stop.set()
            renewer.join()
            lease, self._lease = self._lease, None
            if lease is not None and lease["lost"] is None and self.etag(path) == lease["etag"]:
                self._fs.delete(self._path(path), False)

    def _read_lease(self, path: str) -> tuple[dict[str, Any] | None, str | None]:
        """The lease's holder document and its ETag: ``(None, None)`` if there is no lease, ``(None, tag)`` if it
        could not be read (released meanwhile, or not a lease: it then blocks until someone deletes it). An empty
        file is a lease that expired long ago."""
        tag = self.etag(path)
        if tag is None:
            return None, None
        try:
            data = self.read_bytes(path)
            # empty: the flock file a POSIX writer leaves (a warehouse copied to the store), held by nobody
            doc = json.loads(data) if data.strip() else {"owner": "nobody", "expires_ms": 0}
        except Exception:  # deleted between the two reads (a release), or not JSON
            return None, self.etag(path)
        return (doc if isinstance(doc, dict) and "expires_ms" in doc else None), tag

    def _renew(self, path: str, seconds: float, stop: threading.Event) -> None:
        while not stop.wait(seconds / 3):
            lease = self._lease
            if lease is None:
                return
            doc = {**lease["doc"], "expires_ms": int((time.time() + seconds) * 1000)}
            try:
                ok = self._conditional_write(path, json.dumps(doc).encode("utf-8"), lease["etag"])
            except Exception as exc:  # the store is unreachable: the lease runs out unless a later renewal works
                log.warning("could not renew the warehouse lease: %s", exc)
                continue
            if not ok:
                lease["lost"] = "another writer took the lease over"
                log.error("lost the warehouse lease of %s: %s", self.uri, lease["lost"])
                return
            lease["doc"], lease["etag"] = doc, self.etag(path)

    def check_lease(self) -> None:
        """Fail before a side effect if this writer's lease is lost or has run out."""
        lease = self._lease
        if lease is None:
            return  # a dry run, or a caller holding no lock (tests)
        if lease["lost"] is None and lease["doc"]["expires_ms"] <= time.time() * 1000:
            lease["lost"] = "it expired before it could be renewed"
        if lease["lost"] is not None:
            raise CommitConflictError(f"warehouse {self.uri}: this writer's lease is lost ({lease['lost']}); it "
                                      "stopped before its next write. Re-run: the cycle resumes or builds on what "
                                      "the other writer committed")
