"""A warehouse on a Hadoop filesystem URI (``s3a://``, ``gs://``, ``abfss://``...): ADR 0005's commit protocol.

A Spark driver's Hadoop ``FileSystem`` does every read and write (:mod:`reprocess.storage.hadoop_fs`): this process's
own driver through py4j, or, for a Spark Connect client, the server's driver through its store plugin. So the
deployment's Spark image must carry the connector jars. What it needs from the store,
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
    prepared_record,
    private_files_default,
    reentered,
    referenced,
    snapshot_name,
    uncommitted,
)
from reprocess.storage.hadoop_fs import IF_ABSENT, IF_MATCH, HadoopFs, hadoop_fs, upload
from reprocess.uris import remote_scheme

log = logging.getLogger(__name__)

ETAGS = "fs.capability.etags.available"
LEASE_ENV = "REPROCESS_LEASE_SECONDS"
# The folder an attempt writes a dataset into (staged): ``<run_id>.attempt-<12 hex>``.
ATTEMPT_FOLDER = re.compile(r"^[^/=]+\.attempt-[0-9a-f]{12}$")


# (the warehouse's _lock, the holding thread) -> the lease held: whichever warehouse object of that thread took it
# (the CLI takes it around the cycle, which opens the warehouse again), its holder document, ETag and lost flag
_LEASES: dict[tuple[str, int], dict[str, Any]] = {}


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
        self._fs: HadoopFs = hadoop_fs(uri)
        root, fs_class, missing = self._fs.open(uri, [IF_ABSENT, IF_MATCH, ETAGS])
        self.root = Uri(root.rstrip("/"))
        if missing:
            raise ConfigError(
                f"warehouse {uri}: its filesystem ({fs_class}) does not declare {', '.join(missing)}; the commit and "
                "the writer's lease need conditional creates (S3A of Hadoop 3.5 on a store with conditional writes)",
                key="--warehouse")

    @property
    def _lease(self) -> dict[str, Any] | None:
        """The lease this thread holds on the warehouse (whichever object took it): holder doc, ETag, lost flag."""
        return _LEASES.get((self.root + "/_lock", threading.get_ident()))

    # -- paths -----------------------------------------------------------------------------------
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
            text = self._fs.qualify(text)
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
        self._fs.delete([base], True)
        return base / f"attempt-{uuid.uuid4().hex[:12]}"

    def staged(self, run_id: str, stage: str | os.PathLike[str], dataset: str) -> Uri:
        """Where the attempt of ``stage`` writes ``dataset``: ``<dataset>/<run_id>.<attempt>/``, its files' final
        place (the commit names them there; :meth:`publish` moves none)."""
        return self.root / dataset / f"{run_id}.{Uri(str(stage)).name}"

    def abs(self, rel: str) -> str:
        return str(self.root / rel)

    # -- files -----------------------------------------------------------------------------------
    def exists(self, location: str) -> bool:
        return self._fs.exists(location)

    def sizes(self, locations: list[str]) -> list[int]:
        """The files' lengths, in one request over Spark Connect."""
        return self._fs.sizes(locations)

    def read_bytes(self, location: str) -> bytes:
        return self._fs.read(location)

    def read_source(self, location: str) -> Any:
        """What pyarrow reads a file from: its bytes in a buffer."""
        import pyarrow as pa

        return pa.BufferReader(self.read_bytes(location))

    def write_bytes(self, location: str, data: bytes) -> None:
        """Create or replace ``location`` in one write (an object store shows it whole, or not at all)."""
        self._fs.write(location, data)

    def _conditional_write(self, location: str, data: bytes, etag: str | None) -> bool:
        """Create ``location`` if absent (``etag`` None) or replace it if its ETag is ``etag``; False if not."""
        return self._fs.write(location, data, True if etag is None else etag)

    def etag(self, location: str) -> str | None:
        status = self._fs.status(location)
        return None if status is None else status[0]

    def list_files(self, location: str, recursive: bool = False) -> list[str]:
        """The files in folder ``location`` (or below it), by name; none if it does not exist."""
        return self._fs.list_files(location, recursive)

    def remove(self, location: str) -> None:
        """Delete the file ``location`` if it exists."""
        self._fs.delete([location], False)

    def _children(self, location: str) -> list[str]:
        """The names of the files and folders directly in ``location``."""
        return self._fs.children(location)

    def file_uris(self, locations: list[str]) -> list[str]:
        """Each file as Spark names it in ``_metadata.file_path``."""
        return self._fs.uris(locations)

    # -- snapshots -------------------------------------------------------------------------------
    def latest(self) -> Snapshot:
        version = latest_version(f.rsplit("/", 1)[-1] for f in self.list_files(self.snapshots_dir, False))
        if version is None:
            return Snapshot()
        where = self.snapshots_dir / snapshot_name(version)
        return Snapshot.from_json(self.read_bytes(where), str(where))

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
        staged = self._fs.qualify(str(staged_root)).rstrip("/")
        if not staged.startswith(self.root / dataset + "/"):
            raise ValueError(f"{staged_root} is not an attempt's folder in {self.root / dataset}/ (staged())")
        published = [self.relative(src) for src in self.list_files(staged, True)
                     if src.endswith(".parquet") and "/_temporary/" not in src and "/." not in src[len(staged):]]
        log.info("published dataset=%s files=%s in place (no rename)", dataset, len(published))
        return published

    def vacuum(self, snapshot: Snapshot, keep_previous: Snapshot | None = None) -> int:
        """Delete published files no longer referenced (by ``snapshot`` or ``keep_previous``).

        Only while this writer's lease holds (checked first and before each dataset's deletes): a writer paused past
        its lease (a GC pause, a stopped VM) woke and deleted the attempt folder the writer that took the lease over
        was writing, which then published nothing of it. Without the lease it deletes nothing and says so (its commit
        stands; the next writer's vacuum removes what this one left), returning the files it removed before."""
        try:
            return self._vacuum(snapshot, keep_previous)
        except CommitConflictError as exc:
            log.warning("vacuum stopped, this writer's lease is lost: what it committed stands, the next writer's "
                        "vacuum removes the files it leaves (%s)", exc)
            return 0

    def _vacuum(self, snapshot: Snapshot, keep_previous: Snapshot | None) -> int:
        self.check_lease()
        live = referenced(snapshot, keep_previous)
        removed = 0
        for dataset in DATASETS:
            base = self.root / dataset
            unused = [f for f in self.list_files(base, True) if f.endswith(".parquet") and self.relative(f) not in live]
            removed += len(unused)
            # an attempt's folder (staged) that no snapshot names a file in: one that never committed, or whose files
            # were all replaced; with what else is in it (markers, empty partition folders, a crashed job's
            # _temporary)
            used = {f.split("/")[1] for f in live if f.startswith(dataset + "/") and f.count("/") > 1}
            folders = [base / f for f in self._children(base) if ATTEMPT_FOLDER.match(f) and f not in used]
            # a file in a folder deleted whole is not deleted on its own first (one call per file on S3)
            self.check_lease()
            self._fs.delete([f for f in unused if not any(f.startswith(d + "/") for d in folders)], False)
            self._fs.delete(folders, True)
        self._fs.delete([self.snapshots_dir / name for name in expired_snapshots(
            (f.rsplit("/", 1)[-1] for f in self.list_files(self.snapshots_dir, False)), snapshot.version)], False)
        if removed:
            log.info("vacuum removed=%s unreferenced files", removed)
        return removed

    def clear_run(self, run_id: str) -> None:
        self._fs.delete([self.run_dir(run_id)], True)

    def remove_record(self, location: str) -> None:
        """Delete the file ``location`` (one object: a store's delete is whole), if this writer's lease still holds
        (:func:`reprocess.storage.commit.abandon_prepared`)."""
        self.check_lease()
        self.remove(location)

    def run_ids(self, prefix: str) -> list[str]:
        """The runs (or re-drive requests) whose folder in ``_runs/`` is there and starts with ``prefix``, by name."""
        return [name for name, kind, _p, _n in self._fs.entries(self.root / "_runs")
                if kind == "dir" and name.startswith(prefix)]

    def remove_data_docs(self, run_ids: list[str]) -> list[str]:
        """Delete the Data Docs of these runs (``runs/<run_id>/data_docs``), where there are any, in one call to the
        driver's store; the runs whose docs are gone now (all of them, or an error). Summaries stay."""
        if run_ids:
            self.check_lease()
            self._fs.delete([self.path("runs", run_id, "data_docs") for run_id in run_ids], True)
        return list(run_ids)

    # -- prepared runs ---------------------------------------------------------------------------
    def prepared_runs(self) -> list[dict[str, Any]]:
        found = self._fs.glob(self.root / "_runs" / "*" / "prepared.json")
        return uncommitted([prepared_record(self.read_bytes(f), str(f)) for f in found], self.latest())

    def write_prepared(self, run_id: str, doc: Mapping[str, Any]) -> None:
        self.check_lease()
        self.write_bytes(self.run_dir(run_id) / "prepared.json",
                         json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))

    def read_prepared(self, run_id: str) -> dict[str, Any] | None:
        p = self.run_dir(run_id) / "prepared.json"
        return prepared_record(self.read_bytes(p), str(p)) if self.exists(p) else None

    @contextmanager
    def local_folder(self, rel: str) -> Iterator[str]:
        """A temporary local folder for files a library writes by path (GX's Data Docs), copied to ``rel`` in the
        warehouse on exit (also after an error: a failed validation's Data Docs are the ones worth reading)."""
        local = tempfile.mkdtemp(prefix="reprocess-")
        try:
            yield local
        finally:
            try:
                self.check_lease()  # a writer that lost its lease would replace the committed attempt's files
                upload(self._fs, local, self.path(rel))
            except CommitConflictError as exc:
                log.warning("files not copied to %s: %s", rel, exc)
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
        _LEASES[key] = {"doc": me, "etag": self.etag(path), "lost": None}
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(path, seconds, stop, key), daemon=True,
                                   name="reprocess-lease")
        renewer.start()
        _HELD[key] = 1
        try:
            yield
        finally:
            del _HELD[key]
            stop.set()
            renewer.join()
            lease = _LEASES.pop(key, None)
            if lease is not None and lease["lost"] is None and self.etag(path) == lease["etag"]:
                self._fs.delete([path], False)

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

    def _renew(self, path: str, seconds: float, stop: threading.Event, key: tuple[str, int]) -> None:
        while not stop.wait(seconds / 3):
            lease = _LEASES.get(key)
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
