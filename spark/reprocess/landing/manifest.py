"""Which landing files a run reads, and the manifest of what was ingested from each.

A file is read by the first run whose as-of is after its partition's hour began. Records are
ingested when ``failed_at <= as-of``; later records of the same file wait for the run whose as-of
passes them (the manifest keeps ``through_ms`` per file), so a backfill ingests each record in the
same run a live schedule would. A file is ``done`` when nothing in it is left to ingest, and is
never read again. Bad records are quarantined on the file's first read only.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

_PARTITION = re.compile(r"^dt=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"^hour=(\d{2})$")
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")

MANIFEST_SCHEMA = pa.schema([
    ("path", pa.string()),  # absolute path of the landing file
    ("size", pa.int64()),
    ("through_ms", pa.int64()),  # records with failed_at <= through_ms are ingested
    ("done", pa.bool_()),
    ("run_id", pa.string()),
])


@dataclass(frozen=True)
class LandingFile:
    path: str
    size: int
    hour_start_ms: int
    fmt: str  # "text" (jsonl, jsonl.gz) or "parquet"


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    through_ms: int
    done: bool
    run_id: str


def list_landing(landing: str | Path, as_of_ms: int) -> list[LandingFile]:
    """Landing files in ``dt=/hour=`` partitions that began before ``as_of_ms``, in path order."""
    root = Path(str(landing).removeprefix("file://"))
    out: list[LandingFile] = []
    if not root.is_dir():
        log.warning("landing root does not exist landing=%s", root)
        return out
    for day in sorted(root.iterdir()):
        m = _PARTITION.match(day.name)
        if not m or not day.is_dir():
            continue
        for hour in sorted(day.iterdir()):
            h = _HOUR.match(hour.name)
            if not h or not hour.is_dir():
                continue
            start_ms = _hour_start_ms(m.group(1), h.group(1))
            if start_ms is None:
                # Not a real date or hour (dt=2026-02-30, hour=24): its files cannot be placed in time, so the
                # next run takes them and quarantines them whole, naming the folder (see partition_problem).
                start_ms = 0
            elif start_ms > as_of_ms:
                continue
            for f in sorted(hour.iterdir()):
                if f.is_file() and f.name.endswith(SUFFIXES) and not f.name.startswith((".", "_")):
                    fmt = "parquet" if f.name.endswith(".parquet") else "text"
                    out.append(LandingFile(str(f.resolve()), f.stat().st_size, start_ms, fmt))
    return out


def _hour_start_ms(day: str, hour: str) -> int | None:
    """``dt``/``hour`` partition values as the hour's start in ms, or None when they are no real date/hour."""
    try:
        start = datetime.strptime(f"{day} {hour}", "%Y-%m-%d %H").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(start.timestamp() * 1000)


def partition_problem(path: str) -> str | None:
    """Why the ``dt=/hour=`` folders of a landing file are not a real date and hour, or None when they are."""
    hour_dir = Path(path).parent
    m, h = _PARTITION.match(hour_dir.parent.name), _HOUR.match(hour_dir.name)
    if m is None or h is None:
        return None  # list_landing only lists files under well-formed partition folders
    if _hour_start_ms(m.group(1), h.group(1)) is not None:
        return None
    return (f"the file is in partition {hour_dir.parent.name}/{hour_dir.name}, which is not a real date and hour "
            "(expected dt=YYYY-MM-DD/hour=00..23 by failure time): it cannot be placed in time")


def read_manifest(files: list[str]) -> dict[str, ManifestEntry]:
    """The latest entry per landing path from the manifest files of a snapshot."""
    latest: dict[str, ManifestEntry] = {}
    for f in files:
        table = pq.read_table(f, schema=MANIFEST_SCHEMA)
        for row in table.to_pylist():
            entry = ManifestEntry(row["path"], row["size"], row["through_ms"], row["done"], row["run_id"])
            prev = latest.get(entry.path)
            if prev is None or entry.through_ms >= prev.through_ms:
                latest[entry.path] = entry
    return latest


def pending(files: list[LandingFile], manifest: dict[str, ManifestEntry]) -> tuple[list[LandingFile], list[str]]:
    """``(to_read, changed)``: files not done yet, and done files whose size changed since (never re-read)."""
    to_read, changed = [], []
    for f in files:
        entry = manifest.get(f.path)
        if entry is None or not entry.done:
            to_read.append(f)
        elif entry.size != f.size:
            changed.append(f.path)
    if changed:
        log.error("landing files changed after they were ingested; they are not read again files=%s", changed[:10])
    return to_read, changed


def write_manifest(path: Path, entries: list[ManifestEntry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([e.__dict__ for e in entries], schema=MANIFEST_SCHEMA)
    pq.write_table(table, path)
