"""A warehouse writer's Spark Connect session, recorded so that the next writer can stop what a killed one left.

A driver of our own dies with its process, and its Spark jobs with it. A Spark Connect client does not take the
server's jobs with it: a writer killed mid-run (``kill -9``, a lost Airflow worker) leaves its job running on the
server until the job ends or the server gives up on the client. Two things keep that from touching the next
writer's work:

- every attempt of a run writes its staged files and its delivery list under names of its own
  (:meth:`reprocess.storage.commit.Warehouse.new_stage`), so a left-over job can only write where nobody reads;
- every writer records its session here while it holds the warehouse lock, and removes the record when it is done.
  A record found by the next holder of the lock belongs to a writer that died: its session is interrupted and
  closed on the server before anything else happens, which stops the left-over jobs (a re-drive target still
  publishing, for one) and frees the frames it had cached.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from reprocess.storage.hadoop import HadoopWarehouse

log = logging.getLogger(__name__)


def sessions_dir(warehouse_root: Path) -> Path:
    return warehouse_root / "_runs" / "_connect_sessions"


def session_url(remote: str, session_id: str) -> str:
    """``remote`` (``sc://host:port[/;param=value...]``) joining the existing session ``session_id``."""
    params = [p for p in remote.split("/;", 1)[1].split(";") if p and not p.startswith("session_id=")] \
        if "/;" in remote else []
    base = remote.split("/;", 1)[0].rstrip("/")
    return f"{base}/;" + ";".join([*params, f"session_id={session_id}"])


class _Records:
    """The session records of a warehouse on a POSIX filesystem (files replaced through a temporary file)."""

    def __init__(self, root: Path) -> None:
        self.folder = sessions_dir(root)

    def names(self) -> list[str]:
        return sorted(str(p) for p in self.folder.glob("*.json")) if self.folder.is_dir() else []

    def read(self, location: str) -> bytes:
        return Path(location).read_bytes()

    def write(self, name: str, data: bytes) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        record = self.folder / name
        tmp = record.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, record)
        return str(record)

    def remove(self, location: str) -> None:
        Path(location).unlink(missing_ok=True)


class _StoreRecords:
    """The session records of a warehouse at a URI (:class:`reprocess.storage.hadoop.HadoopWarehouse`): whole
    writes, which an object store shows whole."""

    def __init__(self, wh: HadoopWarehouse) -> None:
        self.wh = wh
        self.folder = wh.path("_runs", "_connect_sessions")

    def names(self) -> list[str]:
        return [f for f in self.wh.list_files(self.folder) if f.endswith(".json")]

    def read(self, location: str) -> bytes:
        return self.wh.read_bytes(location)

    def write(self, name: str, data: bytes) -> str:
        record = str(self.folder / name)
        self.wh.write_bytes(record, data)
        return record

    def remove(self, location: str) -> None:
        self.wh.remove(location)


def _records(warehouse: Path | HadoopWarehouse) -> _Records | _StoreRecords:
    return _Records(warehouse) if isinstance(warehouse, Path) else _StoreRecords(warehouse)


@contextmanager
def recorded_session(warehouse: Path | HadoopWarehouse, spark: SparkSession, remote: str,
                     owner: str) -> Iterator[None]:
    """While active, ``spark``'s Connect session is on record for ``owner``, the warehouse lock's holder; sessions
    left on record by writers that died are stopped first. ``warehouse``: the root of a warehouse on a POSIX
    filesystem, or one at a URI. Call it only while holding the lock (for a URI, the lease)."""
    stop_left_over_sessions(warehouse, remote)
    session_id = str(getattr(spark, "session_id"))  # noqa: B009 - only Connect sessions have one
    records = _records(warehouse)
    record = records.write(f"{session_id}.json", json.dumps({
        "session_id": session_id, "owner": owner, "pid": os.getpid(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode("utf-8"))
    try:
        yield
    finally:
        records.remove(record)


def stop_left_over_sessions(warehouse: Path | HadoopWarehouse, remote: str) -> list[str]:
    """Interrupt and close, on the server at ``remote``, the sessions of writers that died holding the lock;
    returns their ids. A session the server no longer has (it restarted, or gave up on the client) is skipped."""
    records = _records(warehouse)
    stopped: list[str] = []
    for record in records.names():
        try:
            doc: dict[str, Any] = json.loads(records.read(record))
            session_id = str(doc["session_id"])
        except (OSError, ValueError, KeyError):
            records.remove(record)
            continue
        interrupted = _stop_session(remote, session_id)
        log.warning("stopped the Spark Connect session of a writer that died session_id=%s owner=%s pid=%s "
                    "interrupted_operations=%s", session_id, doc.get("owner"), doc.get("pid"), interrupted)
        records.remove(record)
        stopped.append(session_id)
    return stopped


def _stop_session(remote: str, session_id: str) -> int | None:
    from pyspark.sql import SparkSession

    try:
        orphan = SparkSession.builder.remote(session_url(remote, session_id)).create()
    except Exception as exc:  # noqa: BLE001 - the server may have closed it already: nothing left to stop
        log.info("session not joinable session_id=%s error=%s", session_id, exc)
        return None
    try:
        return len(orphan.interruptAll())
    except Exception as exc:  # noqa: BLE001 - e.g. closed since: closing it below is all that is left to do
        log.info("session not interruptible session_id=%s error=%s", session_id, exc)
        return None
    finally:
        orphan.stop()  # releases the session: its cached frames, and any operation still in it
