"""The warehouse's commit protocol: snapshots, a writer lock, prepared runs. See docs/adr/0003-commit-protocol.md.

Layout of a warehouse::

    _snapshots/00000042.json     the committed state: every live file of every dataset (atomic create)
    _lock                        the writer lock (one run at a time)
    _runs/<run_id>/prepared.json a run that persisted its deliveries and may be re-driving
    _runs/<request_id>/audit.json a DLQ re-drive's audit record until it is committed and copied to redrive_audit/
    _runs/<run_id>/stage/...     a run's outputs before they are published (a warehouse on object storage writes
                                 them in place instead: <dataset>/<run_id>.<attempt>/, storage.hadoop)
    ledger/ dlq/ outbox/ quarantine/ manifest/    published Parquet files (live only if a snapshot lists them)
    runs/<run_id>/summary.json   run summaries
    runs/<run_id>/data_docs/     the run's GX Data Docs, removed once older than the retention (DATA_DOCS_DAYS)

Readers read the files listed by the latest snapshot, never a directory listing, so a half-written
run is never seen. A run publishes by moving its staged files into place and then creating the next
snapshot file exclusively: the snapshot's creation is the commit point.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from reprocess.errors import CommitConflictError, ConfigError, WarehouseDamagedError
from reprocess.uris import local_path, remote_scheme

if TYPE_CHECKING:
    from reprocess.storage.hadoop import HadoopWarehouse

log = logging.getLogger(__name__)

DATASETS = ("ledger", "dlq", "outbox", "quarantine", "manifest")
# The run log in a snapshot keeps the summaries of its newest FULL_RUNS runs only; older entries keep their run id,
# as-of, kind (what a re-run of an old as-of checks) and Data Docs mark (expire_data_docs), and their summaries stay
# in runs/<run_id>/summary.json (a re-drive's in redrive_audit/<id>.json): see run_summary. Unbounded, every commit
# rewrote and every reader parsed every summary ever written, about 1.8 KB a run (bench/snapshot_growth.py).
FULL_RUNS = 100
# Snapshot files kept by the vacuum after a commit: the newest and the ones before it, for a reader that listed
# _snapshots/ just before a commit. Unbounded, the folder grew with the square of the runs (4.5 GB after 2000).
KEEP_SNAPSHOTS = 10
# Days of as-of time a cycle's Data Docs are kept (about 300 KB a run: 10 GB a year at a run every 15 minutes). A
# committing cycle removes those of cycles whose as-of is older than its own by more than this; their summaries stay.
DATA_DOCS_DAYS = 30.0
KEEP_DATA_DOCS_ENV = "REPROCESS_KEEP_DATA_DOCS"  # `reprocess run --keep-data-docs`'s default, for the DAGs' runs
_HELD: dict[tuple[str, int], int] = {}  # writer locks this process holds: (lock path, thread) -> depth
_SNAPSHOT_DIGITS = 8
# a cycle's run id (reprocess.cycle.run.run_id_for; a follow-up run's ``-2``): never a path
CYCLE_RUN_ID = re.compile(r"run-\d{8}T\d{6}(\d{3})?Z(-\d+)?")


def warehouse_path(uri: str | Path) -> Path:
    """The local path of a warehouse given as a path or a ``file:`` URI; a :class:`ConfigError` for any other scheme.

    A warehouse on another scheme is written through Spark (:func:`open_warehouse`,
    :class:`reprocess.storage.hadoop.HadoopWarehouse`) and read without Spark through pyarrow
    (:func:`reprocess.storage.arrow.open_reader`); what reaches here with a URI is a step that has neither path.
    """
    if remote_scheme(uri):
        raise ConfigError(
            f"warehouse {uri} is on {remote_scheme(uri)}://: `reprocess run` and `reprocess redrive` write such a "
            "warehouse with a Spark driver of their own (not over Spark Connect), and the readers read it through "
            "pyarrow; this step needs one on a local or shared POSIX filesystem "
            "(docs/adr/0005-warehouse-on-object-storage.md)", key="--warehouse")
    return local_path(uri)


def open_warehouse(uri: str | Path, private: bool | None = None) -> AnyWarehouse:
    """The warehouse at ``uri``: a :class:`Warehouse` for a path or a ``file:`` URI, a
    :class:`reprocess.storage.hadoop.HadoopWarehouse` for any other scheme (it needs a classic Spark session)."""
    if remote_scheme(uri):
        from reprocess.storage.hadoop import HadoopWarehouse

        return HadoopWarehouse(str(uri), private=private)
    return Warehouse(uri, private=private)


@dataclass
class Snapshot:
    """One committed state: files per dataset (paths relative to the warehouse) and the run log."""

    version: int = 0
    files: dict[str, list[str]] = field(default_factory=lambda: {d: [] for d in DATASETS})
    runs: list[dict[str, Any]] = field(default_factory=list)  # committed runs, oldest first
    as_of_ms: int | None = None  # the latest committed as-of

    def to_json(self) -> str:
        """The snapshot file's content; runs before the newest :data:`FULL_RUNS` without their summaries."""
        first_full = len(self.runs) - FULL_RUNS
        runs = [r if i >= first_full else {k: r[k] for k in ("run_id", "as_of_ms", "kind", "data_docs", "docs_as_of_ms")
                                          if k in r}
                for i, r in enumerate(self.runs)]
        return json.dumps({"version": self.version, "as_of_ms": self.as_of_ms, "files": self.files,
                           "runs": runs}, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: bytes | str, where: str = "snapshot") -> Snapshot:
        """The snapshot ``text`` holds; :class:`WarehouseDamagedError` naming ``where`` (its file) when it does not
        read as one (cut short or overwritten outside reprocess: a commit creates its file whole)."""
        try:
            doc = json.loads(text)
            files = {d: list(doc.get("files", {}).get(d, [])) for d in DATASETS}
            return cls(doc["version"], files, list(doc.get("runs", [])), doc.get("as_of_ms"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WarehouseDamagedError(f"{where} is not a readable snapshot ({type(exc).__name__}: "
                                        f"{str(exc)[:200]}): damaged outside reprocess? Nothing reads or writes "
                                        "this warehouse until it is restored") from None

    def run(self, run_id: str) -> dict[str, Any] | None:
        for r in reversed(self.runs):
            if r["run_id"] == run_id:
                return r
        return None

    def runs_at(self, as_of_ms: int) -> list[dict[str, Any]]:
        """The committed cycles as of ``as_of_ms``: one, plus follow-ups after a target outage.

        A DLQ re-drive is recorded at the as-of of the state it changed, but it is no cycle: the summary a re-run
        of that cycle returns, and the one the DAG checks, is the cycle's own."""
        return [r for r in self.runs if r["as_of_ms"] == as_of_ms and r.get("kind", "cycle") != "redrive"]


def referenced(*snapshots: Snapshot | None) -> set[str]:
    """The files (relative to the warehouse) the given snapshots list: what the vacuum keeps."""
    return {f for snap in snapshots if snap is not None for files in snap.files.values() for f in files}


def done_parts(prepared: Mapping[str, Any]) -> list[dict[str, str]]:
    """The targets a prepared run's re-drive is done through before the whole of it (``outcomes_done``, written by
    reprocess.cycle.run._redrive_once): ``{"path": "<outcomes dir>/target=<i>", "target": <redacted spec>}`` each."""
    done = prepared.get("outcomes_done")
    return list(done.get("parts", [])) if isinstance(done, Mapping) else []


def abandon_prepared(wh: AnyWarehouse, run_id: str) -> dict[str, Any] | None:
    """Forget ``run_id``, a run of ``wh`` that persisted its deliveries and was not committed (the caller holds the
    writer's lock or lease), and return its record. The record goes first, in one removal: a stop part-way leaves no
    prepared run naming removed files, only the run's folder, which asking again removes (None). Nothing of the run
    was committed, so the warehouse is as its latest snapshot says: the next cycle reads the run's landing files and
    selects its due messages again, with the same delivery numbers."""
    from reprocess.errors import NotFoundError

    if not CYCLE_RUN_ID.fullmatch(run_id):
        raise ConfigError(f"{run_id!r} is not a cycle's run id", key="run_id")
    folder = wh.run_dir(run_id)
    record = str(folder / "prepared.json")
    try:
        prepared = wh.prepared_runs()
    except WarehouseDamagedError as exc:
        if getattr(exc, "run_id", None) != run_id:
            raise
        # this run's record does not read: removed with its folder, the way out its error names
        log.warning("removing the damaged prepared-run record %s: %s", record, exc)
        wh.check_lease()
        wh.remove_record(record)
        wh.clear_run(run_id)
        return {"run_id": run_id, "damaged": str(exc)}
    doc = next((d for d in prepared if d["run_id"] == run_id), None)
    if doc is None and wh.exists(str(folder)) and not wh.exists(record):
        wh.check_lease()
        wh.clear_run(run_id)  # what an abandon stopped part-way left (a cycle's folder holding no record)
        return None
    if doc is None:
        pending = ", ".join(d["run_id"] for d in prepared) or "none"
        raise NotFoundError(f"{run_id} is not a prepared run of {wh.root} that was not committed "
                            f"(prepared runs: {pending})")
    wh.remove_record(record)
    wh.check_lease()  # before each delete: a writer that took an expired lease over may be preparing this run again
    wh.clear_run(run_id)
    return doc


def clear_committed_runs(wh: Any, snapshot: Snapshot) -> list[str]:
    """Remove the ``_runs/`` folders of cycles ``snapshot`` has committed (the caller holds the writer's lock or
    lease): a run stopped between its commit and clearing its folder left its prepared record, its inflight list and
    its re-drive's outcomes there for good, since a committed run is never resumed. Returns their run ids."""
    left = [r for r in wh.run_ids("run-") if snapshot.run(r) is not None]
    for run_id in left:
        wh.check_lease()
        wh.clear_run(run_id)
    if left:
        log.info("removed the folders of runs committed before they were cleared runs=%s", left[:10])
    return left


def prepared_record(data: bytes | str, where: str) -> dict[str, Any]:
    """The prepared-run record ``data`` read from ``where`` (``_runs/<run_id>/prepared.json``); a
    :class:`WarehouseDamagedError` naming it, and the way out, when it is not one (cut short or overwritten outside
    reprocess: every cycle, ``prepared list`` and ``prepared abandon`` failed on it with a traceback)."""
    run_id = str(where).replace("\\", "/").rstrip("/").split("/")[-2]
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and isinstance(doc.get("run_id"), str) and isinstance(doc.get("as_of_ms"), int):
            return doc
        problem = "it lacks the run id or as-of a record holds"
    except ValueError as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:200]}"
    err = WarehouseDamagedError(f"{where} is not a readable prepared-run record ({problem}): damaged outside "
                                f"reprocess? `reprocess prepared abandon --force --warehouse <warehouse> {run_id}` "
                                "removes it and its run's folder (whether its re-drive finished cannot be read: "
                                "messages it confirmed are sent again); the next cycle selects its due messages "
                                "again")
    err.run_id = run_id  # type: ignore[attr-defined]  # whose record: abandon_prepared removes it
    raise err


def uncommitted(prepared: list[dict[str, Any]], snapshot: Snapshot) -> list[dict[str, Any]]:
    """The prepared records of runs ``snapshot`` has not committed, oldest as-of first."""
    committed = {r["run_id"] for r in snapshot.runs}
    return sorted((d for d in prepared if d["run_id"] not in committed), key=lambda d: d["as_of_ms"])


def snapshot_name(version: int) -> str:
    return f"{version:0{_SNAPSHOT_DIGITS}d}.json"


def snapshot_version(name: str) -> int | None:
    """The version a snapshot file's name holds (``00000042.json`` -> 42); None for any other name."""
    return int(name[:-5]) if name.endswith(".json") and name[:-5].isdigit() else None


def latest_version(names: Iterable[str]) -> int | None:
    """The highest snapshot version among the file names of ``_snapshots/``; None when there is none."""
    return max((v for v in map(snapshot_version, names) if v is not None), default=None)


def expired_snapshots(names: Iterable[str], version: int) -> list[str]:
    """The snapshot file names the vacuum deletes once ``version`` is committed: all but the newest
    :data:`KEEP_SNAPSHOTS`."""
    return [n for n in names if (v := snapshot_version(n)) is not None and v <= version - KEEP_SNAPSHOTS]


def check_data_docs_days(days: float | None) -> None:
    """A :class:`ConfigError` unless ``days`` is None (keep all) or a finite number of days above 0: 0 or less would
    remove the committing run's own Data Docs."""
    if days is not None and not 0 < days < float("inf"):
        raise ConfigError(f"Data Docs retention must be a number of days above 0, or None to keep all; got {days}",
                          key="data_docs_days")


def expired_data_docs(runs: list[dict[str, Any]], as_of_ms: int, days: float | None) -> list[int]:
    """The positions in the run log ``runs`` of the cycles whose Data Docs expire at a commit as of ``as_of_ms``:
    those with an as-of more than ``days`` earlier (logical time: a backfill removes what the scheduled runs would)
    whose entry says they are there (``"data_docs": true``). The mark goes once they are removed, so the log carries
    it for the runs of the retention window only, however long the history. ``days`` None: every run's are kept."""
    if days is None:
        return []
    span = days * 86_400_000
    if span >= as_of_ms:  # a retention longer than the epoch's age (a float too large to round, even)
        return []
    cutoff = as_of_ms - round(span)
    # a re-drive's docs age from its request's now (docs_as_of_ms), a cycle's from its as-of
    return [i for i, r in enumerate(runs) if r.get("data_docs") and r.get("docs_as_of_ms", r["as_of_ms"]) < cutoff]


def expire_data_docs(wh: Any, new: Snapshot, as_of_ms: int, days: float | None) -> int:
    """Remove the Data Docs that expire as of ``as_of_ms`` (:func:`expired_data_docs`) from warehouse ``wh`` and take
    the mark off the entries of the run log ``new`` is about to commit whose docs are gone; how many those are.

    Called before the commit: if it never comes, the next run finds them still marked, and removing what is gone
    already is a no-op; after it, a crash in between would leave them for good. Docs are not worth a run: a removal
    that fails (a store refusing deletes under ``runs/``, a throttled request) is logged, the entries keep their
    mark and a later run tries again. Only a lost lease stops the run (:class:`CommitConflictError`), as before any
    write."""
    expired = expired_data_docs(new.runs, as_of_ms, days)
    if not expired:
        return 0
    try:
        gone = set(wh.remove_data_docs([new.runs[i]["run_id"] for i in expired]))
    except CommitConflictError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the store raised, the run goes on and commits
        log.warning("data docs not removed runs=%s error=%s: they stay marked, a later run tries again",
                    len(expired), exc)
        return 0
    removed = [i for i in expired if new.runs[i]["run_id"] in gone]
    for i in removed:  # copies: the entries are shared with the base snapshot's log
        new.runs[i] = {k: v for k, v in new.runs[i].items() if k != "data_docs"}
    if len(removed) < len(expired):
        log.warning("data docs not removed runs=%s: they stay marked, a later run tries again",
                    len(expired) - len(removed))
    if removed:
        log.info("data docs removed runs=%s older_than_days=%s oldest=%s newest=%s", len(removed), days,
                 new.runs[removed[0]]["run_id"], new.runs[removed[-1]]["run_id"])
    return len(removed)


def redrive_audit_path(wh: Any, request_id: str) -> str:
    """Where a DLQ re-drive request's audit record is, in any warehouse (``wh.path``)."""
    return str(wh.path("redrive_audit", f"{request_id}.json"))


def run_summary(wh: Any, entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The summary of a committed run of the log: in the snapshot for the newest :data:`FULL_RUNS`, else the one
    the run wrote beside it (``runs/<run_id>/summary.json``; a re-drive's audit without its message list). ``wh``:
    any warehouse that reads (``path``, ``exists``, ``read_bytes``)."""
    if "summary" in entry:
        return dict(entry["summary"])
    path = (redrive_audit_path(wh, entry["run_id"]) if entry.get("kind") == "redrive"
            else str(wh.path("runs", entry["run_id"], "summary.json")))
    if not wh.exists(path):
        return None
    doc: dict[str, Any] = json.loads(wh.read_bytes(path))
    doc.pop("messages", None)
    return doc


def not_applied(summary: Mapping[str, Any], address_filter: str | None, target: str) -> dict[str, dict[str, Any]]:
    """What a request at an as-of a run has already committed asked otherwise than that run did, and so did not get:
    its address filter, its run target (``target`` redacted, as summaries record it). A retry of the committing run
    asks the same and gets nothing here; a summary from before the address filter was recorded is not judged on
    it."""
    if summary.get("resumed"):  # any call may have resumed it, with its prepare's options: which is not known here
        return {}
    asked = {"address_filter": address_filter or None, "target": target}
    return {k: {"asked": v, "committed": summary.get(k)} for k, v in asked.items()
            if k in summary and summary.get(k) != v}


def not_applied_text(diff: Mapping[str, Mapping[str, Any]]) -> str:
    """:func:`not_applied` as a sentence (no final stop)."""
    name = {"address_filter": "address filter", "target": "target"}
    return ("not applied: this request's " + ", ".join(
        f"{name[k]} {d['asked'] or 'none'!s} (the committed run's: {d['committed'] or 'none'!s})"
        for k, d in diff.items()) + "; the as-of was already committed, so nothing ran: ask at a later as-of")


def with_docs_state(wh: Any, entry: Mapping[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` of the committed run ``entry`` as it stands now in warehouse ``wh`` (any warehouse that reads):
    the ``validation.data_docs`` path it names, written when the run committed, is None once the docs are gone
    (removed past the retention by :func:`expire_data_docs`, or by hand). The entry's mark says they are there without
    a request; without it (removed, or a run committed before the mark existed) the store is asked where ``wh``
    keeps them, in its own form of path (a reader at a URI may not take the writer's). A store that cannot answer
    leaves the path as it was: docs are information, never worth a failed command."""
    validation: dict[str, Any] = summary.get("validation") or {}
    if not validation.get("data_docs") or entry.get("data_docs"):
        return summary
    try:
        there = wh.exists(str(wh.path("runs", entry["run_id"], "data_docs", "index.html")))
    except Exception as exc:  # noqa: BLE001 - whatever the store raised: the path stays, the command answers
        log.warning("could not tell whether run %s's Data Docs are there: %s", entry["run_id"], exc)
        return summary
    return summary if there else {**summary, "validation": {**validation, "data_docs": None}}


def docs_text(validation: Mapping[str, Any]) -> str:
    """Where a run's Data Docs are, for people: the path, or that they are no longer there."""
    path = validation.get("data_docs")
    return str(path) if path else "no longer there (removed past the Data Docs retention, or by hand)"


def commit_conflict(name: str, base: Snapshot) -> CommitConflictError:
    """What the loser of a commit race gets: snapshot ``name`` was created by another writer after ``base``."""
    return CommitConflictError(f"snapshot {name} already exists: another run committed after version "
                               f"{base.version}; re-run to build on the new state")


def private_files_default() -> bool:
    """``$REPROCESS_PRIVATE_FILES`` (1/true/yes/on; empty, 0/false/no/off: off): write warehouses owner-only unless
    told otherwise. Any other value is a :class:`ConfigError`: a privacy setting mistyped ("ture", "maybe") was
    taken as off, and payloads were written readable by everyone."""
    value = os.environ.get("REPROCESS_PRIVATE_FILES", "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"REPROCESS_PRIVATE_FILES={value!r}: expected 1, true, yes or on (owner-only files), or 0, "
                      "false, no, off or empty", key="REPROCESS_PRIVATE_FILES")


AnyWarehouse: TypeAlias = "Warehouse | HadoopWarehouse"


class Warehouse:
    """Reads and commits snapshots of one warehouse directory.

    ``private`` (default ``$REPROCESS_PRIVATE_FILES``): payloads may hold personal data, so the warehouse root is
    made 0700 when a writer takes the lock and every published file 0600 in 0700 directories.
    """

    def __init__(self, root: str | Path, private: bool | None = None) -> None:
        self.uri = str(root)
        # absolute: the files Spark lists and GX's Data Docs folder are matched and named by absolute paths
        self.root = Path(os.path.abspath(warehouse_path(root)))
        self.private = private_files_default() if private is None else private

    # -- paths ---------------------------------------------------------------------------------
    @property
    def snapshots_dir(self) -> Path:
        return self.root / "_snapshots"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "_runs" / run_id

    def stage_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "stage"

    def new_stage(self, run_id: str) -> Path:
        """A staging folder for one attempt of run (or re-drive request) ``run_id``, named for this attempt alone.

        Earlier attempts' stages are removed first. A Spark job a killed attempt left running (on a Spark Connect
        server, which outlives its clients) can only write into its own attempt's folder, never into this one's
        (docs/adr/0003-commit-protocol.md).
        """
        base = self.stage_dir(run_id)
        shutil.rmtree(base, ignore_errors=True)
        return base / f"attempt-{uuid.uuid4().hex[:12]}"

    def staged(self, run_id: str, stage: str | os.PathLike[str], dataset: str) -> Path:
        """Where the attempt of ``stage`` writes ``dataset``: in its stage, moved into ``<dataset>/`` by
        :meth:`publish` (a rename; a warehouse on object storage writes in place instead)."""
        return Path(stage) / dataset

    def abs(self, rel: str) -> str:
        return str(self.root / rel)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def relative(self, location: str) -> str:
        """``location`` (a path in the warehouse) relative to its root, as snapshots list files."""
        return str(Path(location).relative_to(self.root))

    # -- whole files (the same calls as storage.hadoop.HadoopWarehouse) -------------------------
    def sizes(self, locations: list[str]) -> list[int]:
        return [os.path.getsize(f) for f in locations]

    def exists(self, location: str) -> bool:
        return os.path.exists(location)

    def read_bytes(self, location: str) -> bytes:
        return Path(location).read_bytes()

    def read_source(self, location: str) -> str:
        """What pyarrow reads a file from: here, its path."""
        return str(location)

    def is_dir(self) -> bool:
        """Whether the warehouse's root is there."""
        return self.root.is_dir()

    def listing(self, rel: str, suffix: str) -> list[tuple[str, int]]:
        """The files directly in folder ``rel`` whose name ends with ``suffix``: (location, mtime in ns), by name."""
        folder = self.root / rel
        if not folder.is_dir():
            return []
        return sorted((str(p), p.stat().st_mtime_ns) for p in folder.iterdir()
                      if p.is_file() and p.name.endswith(suffix))

    def write_bytes(self, location: str, data: bytes) -> None:
        """``data`` as the file ``location``, whole or not at all: written beside it under a temporary name, synced and
        renamed over it. A stop in the middle of writing in place left a partial record (a run's summary, a re-drive's
        audit) that every later read failed on. Its folders are synced up to the root (the first run makes ``runs/``
        and ``runs/<id>/``): all on disk before the snapshot that names the run."""
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._fsync_up(path.parent)

    @contextmanager
    def local_folder(self, rel: str) -> Iterator[str]:
        """A local folder for files a library writes by path (GX's Data Docs) that end up at ``rel``: here,
        ``rel`` itself."""
        yield str(self.path(rel))

    def check_lease(self) -> None:
        """Nothing to check: ``flock`` cannot be lost while the process lives (a lease can: storage.hadoop)."""

    # -- snapshots -----------------------------------------------------------------------------
    def latest(self) -> Snapshot:
        """The latest committed snapshot (version 0, empty, for a new warehouse)."""
        if not self.snapshots_dir.is_dir():
            return Snapshot()
        version = latest_version(os.listdir(self.snapshots_dir))
        if version is None:
            return Snapshot()
        where = self.snapshots_dir / snapshot_name(version)
        try:
            data = where.read_bytes()
        except IsADirectoryError:  # made by hand: no commit writes a folder there
            raise WarehouseDamagedError(f"{where} is a folder, not a snapshot: damaged outside reprocess? Nothing "
                                        "reads or writes this warehouse until it is restored") from None
        return Snapshot.from_json(data, str(where))

    def live_files(self, dataset: str, snapshot: Snapshot | None = None) -> list[str]:
        snap = snapshot or self.latest()
        return [self.abs(f) for f in snap.files[dataset]]

    def commit(self, base: Snapshot, new: Snapshot) -> None:
        """Make ``new`` the committed state; fails if someone committed after ``base``.

        The snapshot is written to a temporary file, fsynced, then hard-linked to its final name:
        ``link`` fails when the name exists, so two writers can never both commit version N+1.
        """
        new.version = base.version + 1
        if not self.snapshots_dir.is_dir():
            self.snapshots_dir.mkdir(parents=True, exist_ok=True)
            # a new warehouse's _snapshots/ is an entry in its root, and the root (made by the lock) in its parent
            fsync_dir(self.root)
            fsync_dir(self.root.parent)
        final = self.snapshots_dir / snapshot_name(new.version)
        tmp = self.snapshots_dir / f".{new.version}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(new.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError as exc:
            raise commit_conflict(final.name, base) from exc
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.snapshots_dir)
        log.info("committed snapshot version=%s runs=%s", new.version, len(new.runs))

    # -- publishing staged files ---------------------------------------------------------------
    def publish(self, run_id: str, dataset: str, staged_root: str | Path) -> list[str]:
        """Move the Parquet files of a staged dataset into ``<warehouse>/<dataset>/``, keeping partition dirs.

        Returns their paths relative to the warehouse. Names are prefixed with the run id; a retry of
        the same run overwrites its own orphans from a crashed attempt. Each file and each folder it went into is
        fsynced: the snapshot that names them is written next, and a machine that lost power after it (fsynced)
        came back with files it names empty or missing (Spark's writers do not sync; a rename is not durable until
        its folder is).
        """
        published: list[str] = []
        folders: set[Path] = set()
        staged_root = Path(staged_root)
        if not staged_root.is_dir():
            return published
        # files only: a partition folder may end with .parquet too (a dead letter's address=exports.parquet)
        for src in sorted(p for p in staged_root.rglob("*.parquet") if p.is_file()):
            rel_parent = src.parent.relative_to(staged_root)
            dest_dir = self.root / dataset / rel_parent
            dest_dir.mkdir(parents=True, exist_ok=True)
            dest = dest_dir / f"{run_id}-{src.name}"
            os.replace(src, dest)
            if self.private:
                os.chmod(dest, 0o600)
                rel = dest_dir.relative_to(self.root)
                for d in (rel, *rel.parents):
                    if d != Path("."):
                        os.chmod(self.root / d, 0o700)
            _fsync_file(dest)
            folders.add(dest_dir)
            published.append(str(dest.relative_to(self.root)))
        self._fsync_up(*folders)
        return published

    def vacuum(self, snapshot: Snapshot, keep_previous: Snapshot | None = None) -> int:
        """Delete published files no longer referenced (by ``snapshot`` or ``keep_previous``)."""
        live = referenced(snapshot, keep_previous)
        removed = 0
        for dataset in DATASETS:
            base = self.root / dataset
            if not base.is_dir():
                continue
            for f in base.rglob("*.parquet"):
                if f.is_file() and str(f.relative_to(self.root)) not in live:
                    f.unlink(missing_ok=True)
                    removed += 1
            _prune_empty_dirs(base)
        if self.snapshots_dir.is_dir():
            for name in expired_snapshots(os.listdir(self.snapshots_dir), snapshot.version):
                (self.snapshots_dir / name).unlink(missing_ok=True)
        if removed:
            log.info("vacuum removed=%s unreferenced files", removed)
        return removed

    def clear_run(self, run_id: str) -> None:
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)

    def run_ids(self, prefix: str) -> list[str]:
        """The runs (or re-drive requests) whose folder in ``_runs/`` is there and starts with ``prefix``, by name."""
        runs_dir = self.root / "_runs"
        return sorted(p.name for p in runs_dir.glob(f"{prefix}*") if p.is_dir()) if runs_dir.is_dir() else []

    def remove_data_docs(self, run_ids: list[str]) -> list[str]:
        """Delete the Data Docs of these runs (``runs/<run_id>/data_docs``), where there are any; the runs whose docs
        are gone now (a folder a file of which could not be deleted is not). Summaries stay."""
        for run_id in run_ids:
            shutil.rmtree(self.path("runs", run_id, "data_docs"), ignore_errors=True)
        return [run_id for run_id in run_ids if not self.path("runs", run_id, "data_docs").exists()]

    # -- prepared runs -------------------------------------------------------------------------
    def prepared_runs(self) -> list[dict[str, Any]]:
        """Runs that persisted their deliveries but have not committed, oldest first."""
        runs_dir = self.root / "_runs"
        if not runs_dir.is_dir():
            return []
        docs = [prepared_record(p.read_bytes(), str(p)) for p in sorted(runs_dir.glob("*/prepared.json"))]
        return uncommitted(docs, self.latest())

    def write_prepared(self, run_id: str, doc: Mapping[str, Any]) -> None:
        """Durably record a run's intent (as-of, landing files, due deliveries) before any re-drive.

        The folders it names in the run's folder (the inflight list, the re-drive's outcomes), which Spark wrote and
        did not sync, are synced first: a machine that lost power after it came back with a ``prepared.json`` whose
        files were empty, and every later call, which must finish the prepared run first, failed reading them."""
        d = self.run_dir(run_id)
        d.mkdir(parents=True, exist_ok=True)
        outcomes = doc.get("outcomes")
        # the re-drive's targets done so far: ``<outcomes dir>/target=<i>``, synced with the folder that holds them
        for name in (doc.get("inflight"), outcomes.get("dir") if isinstance(outcomes, Mapping) else None,
                     *{part["path"].split("/")[0] for part in done_parts(doc)}):
            if isinstance(name, str) and name and (d / name).is_dir():
                _fsync_tree(d / name)
        self.write_bytes(str(d / "prepared.json"), json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))

    def read_prepared(self, run_id: str) -> dict[str, Any] | None:
        p = self.run_dir(run_id) / "prepared.json"
        return prepared_record(p.read_bytes(), str(p)) if p.is_file() else None

    def remove_record(self, location: str | Path) -> None:
        """Delete the file ``location`` for good: the unlink synced into its folder (:func:`abandon_prepared`)."""
        Path(location).unlink()
        fsync_dir(Path(location).parent)

    def _fsync_up(self, *folders: Path) -> None:
        """Sync each of ``folders`` and each folder above them up to the root, once each: a folder made since is an
        entry in its parent."""
        todo: set[Path] = set()
        for folder in folders:
            try:
                rel = folder.relative_to(self.root)
            except ValueError:  # not in the warehouse: its own folder alone
                todo.add(folder)
                continue
            todo.update(self.root / d for d in (rel, *rel.parents))
        for folder in sorted(todo):
            fsync_dir(folder)

    # -- the writer lock -----------------------------------------------------------------------
    @contextmanager
    def lock(self, owner: str, wait_seconds: float = 0.0, poll: float = 0.2) -> Iterator[None]:
        """Hold the warehouse's writer lock: an exclusive ``flock`` on ``_lock``, for the whole run.

        The kernel (or the NFS lock manager) grants it to one open file at a time and drops it when the holder's
        process dies, even by ``kill -9``: there is no stale-lock guess and no window between "is it free?" and
        "take it". The file itself is never deleted (deleting it would let two writers lock two different
        files); it holds the current holder's description, for the error the loser gets.

        Waits up to ``wait_seconds`` for the holder to finish, then raises :class:`CommitConflictError` naming it.
        Re-entrant within one thread: the CLI takes the lock before it starts Spark (a busy warehouse fails in a
        second, not after the JVM's start-up) and the run inside takes it again.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        if self.private:
            os.chmod(self.root, 0o700)
            # Spark's staging writes create their folders with the JVM's own umask: give them a private parent.
            (self.root / "_runs").mkdir(exist_ok=True)
            os.chmod(self.root / "_runs", 0o700)
        path = self.root / "_lock"
        key = (str(path.resolve()), threading.get_ident())
        if key in _HELD:
            with reentered(key):
                yield
            return
        me = {"owner": owner, "pid": os.getpid(), "host": socket.gethostname(),
              "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600 if self.private else 0o644)
        try:
            deadline = time.monotonic() + wait_seconds
            waited = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = _read_lock(path)
                    if time.monotonic() >= deadline:
                        raise CommitConflictError(
                            f"warehouse {self.uri} is locked by {_describe(holder)}: another run, backfill or "
                            "re-drive is writing it; wait for it to finish (or pass --lock-wait SECONDS)") from None
                    if not waited:
                        log.info("waiting up to %.0fs for the warehouse lock held by %s", wait_seconds,
                                 _describe(holder))
                        waited = True
                    time.sleep(poll)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
            _HELD[key] = 1
            try:
                yield
            finally:
                del _HELD[key]
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


@contextmanager
def reentered(key: tuple[str, int]) -> Iterator[None]:
    """A writer lock this thread already holds (``key`` in ``_HELD``), taken once more: released with the outer."""
    _HELD[key] += 1
    try:
        yield
    finally:
        _HELD[key] -= 1


def _read_lock(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _describe(holder: Mapping[str, Any] | None) -> str:
    if not holder:
        return "another writer"
    return (f"{holder.get('owner', '?')} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
            f"since {holder.get('since', '?')})")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A folder's fsync that a filesystem does not offer: PostgreSQL ignores these for folders too (fsync_fname_ext)
_NO_DIR_FSYNC = {errno.EBADF, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (a file renamed or linked into it) durable, where its filesystem can."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_DIR_FSYNC:
            raise
        log.debug("folder %s cannot be fsynced on its filesystem (%s)", path, exc)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """Sync every file and folder under ``folder`` (files first, then their folders, deepest first)."""
    for dirpath, _dirs, files in sorted(os.walk(folder), key=lambda w: -w[0].count(os.sep)):
        for name in files:
            _fsync_file(Path(dirpath) / name)
        fsync_dir(Path(dirpath))


def _prune_empty_dirs(base: Path) -> None:
    for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass
