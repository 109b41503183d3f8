"""Which landing files a run reads, and the manifest of what was ingested from each.

A file is read by the first run whose as-of is after its partition's hour began. Records are
ingested when ``failed_at <= as-of``; later records of the same file wait for the run whose as-of
passes them (the manifest keeps ``through_ms`` per file), so a backfill ingests each record in the
same run a live schedule would. A file is ``done`` when nothing in it is left to ingest, and is
never read again. Each record is decided once (quarantined or ingested) by the run whose as-of passes its failure
time, or by its file's first read when it has no usable time or one beyond the future bound (``future_ms``).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from reprocess.errors import ConfigError
from reprocess.uris import local_path, remote_scheme

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_PARTITION = re.compile(r"^dt=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"^hour=(\d{2})$")
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")

MANIFEST_SCHEMA = pa.schema([
    ("path", pa.string()),  # absolute path of the landing file, or its URI when the landing root is one
    ("size", pa.int64()),
    ("through_ms", pa.int64()),  # records with failed_at <= through_ms are ingested
    ("done", pa.bool_()),
    ("run_id", pa.string()),
    ("future_ms", pa.int64()),  # the first read's FUTURE_TIMESTAMP bound (null in manifests from before it)
    ("max_line_bytes", pa.int64()),  # the first read's line limit (null in manifests from before it, and Parquet)
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
    future_ms: int | None = None  # the first read's FUTURE_TIMESTAMP bound; None: first read before it was kept
    # the first read's line limit (--max-line-bytes): a file's later reads keep it, so a line it skipped as too long
    # (quarantined then) is not ingested by a read with a higher one, nor one it parsed skipped by a lower one
    max_line_bytes: int | None = None


def list_landing(landing: str | Path, as_of_ms: int, spark: SparkSession | None = None) -> list[LandingFile]:
    """Landing files in ``dt=/hour=`` partitions that began before ``as_of_ms``, in path order.

    A local root gives absolute local paths; a URI root (see :func:`reprocess.uris.remote_scheme`) gives the URIs
    the Hadoop ``FileSystem`` of ``spark`` lists, which are then the files' names everywhere (manifest, quarantine).
    """
    scheme = remote_scheme(landing)
    if scheme is None:
        root = local_path(landing)
        problem = local_root_problem(root)
        if problem:  # a typo must fail the run, not make green runs that read nothing (as for a URI)
            raise ConfigError(f"landing root {landing} {problem}", key="--landing")
        return _walk(root, _local_entries, _local_file, as_of_ms)
    if spark is None:
        raise ConfigError(f"landing {landing} is a {scheme}:// URI: only the Spark job, through its Hadoop "
                          "FileSystem, can list it", key="--landing")
    from reprocess.storage.hadoop_fs import session_fs

    # the JVM with the filesystem's connector lists it: this process's driver, or a Spark Connect server's (one
    # request per folder, through reprocess.connect.StorePlugin); the same names, sizes and order either way
    fs = session_fs(spark)
    if not fs.exists(str(landing)):
        # Nothing else checks a URI root before the job (the DAG's find_new_landing cannot list it): a typo in a
        # bucket or prefix must fail the run, not make green runs that read nothing.
        raise ConfigError(f"landing root {landing} does not exist", key="--landing")

    def entries(folder: tuple[str, int]) -> list[tuple[str, Any, str]]:  # a handle is (path, size)
        kinds = {"dir": "d", "file": "f"}
        return [(name, (path, size), kinds.get(kind, "o")) for name, kind, path, size in fs.entries(folder[0])]

    return _walk((fs.qualify(str(landing)), 0), entries, lambda handle: (*handle, handle[0]), as_of_ms)


def _local_file(f: Path) -> tuple[str, int, Any]:
    """A local landing file's resolved path (printable), size, and identity: the resolved path, the same through a
    symlink, or for a file with more than one hard link its device and inode (only then: some mounts make inode
    numbers up on the client, ADR 0007, and two files must not be taken for one)."""
    st = f.stat()
    resolved = str(f.resolve())
    return printable(resolved), st.st_size, (st.st_dev, st.st_ino) if st.st_nlink > 1 else resolved


def printable(path: str) -> str:
    """A local path as the run names it: its bytes that are not UTF-8 (a name written on a Latin-1 system, which Python
    lists with lone surrogates) shown as ``\\xNN``. Spark (through py4j or Spark Connect), pyarrow and the manifest
    take only UTF-8 text, so such a name failed every run, and the pipeline stopped until it was renamed; now
    :func:`name_problem` quarantines the file whole, naming it so."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def local_root_problem(root: Path) -> str | None:
    """Why the local landing ``root`` cannot be listed ("does not exist", "is not a folder", "cannot be read ..."),
    or None. ``Path.is_dir`` says False for all three, and "does not exist" sent a user who may not enter the
    folder looking for a typo."""
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            return "is not a folder"
        os.scandir(root).close()
    except (FileNotFoundError, NotADirectoryError):
        return "does not exist"
    except PermissionError as exc:
        return f"cannot be read by this user ({exc.strerror})"
    resolved = str(root.resolve())
    shown = printable(resolved)
    if shown != resolved:  # every file would be named with \xNN and quarantined: a green run, no reads
        return f"resolves to {shown}, a path that is not UTF-8 text, which Spark and Parquet cannot name"
    return None


def _local_entries(folder: Path) -> list[tuple[str, Path, str]]:
    with os.scandir(folder) as listing:  # the kinds come with the listing on most filesystems: no stat per entry
        found = [(e.name, Path(e.path), _kind(e)) for e in listing]
    return sorted(found, key=lambda e: e[0])


def _kind(entry: os.DirEntry[str]) -> str:
    """"d", "f" or "o" (other) for a folder entry, following symlinks; a symlink loop or a dangling link is
    "o", skipped like a socket, as ``Path.is_dir()`` and ``is_file()`` would."""
    try:
        return "d" if entry.is_dir() else "f" if entry.is_file() else "o"
    except OSError:
        return "o"


def _walk(root: Any, entries: Callable[[Any], list[tuple[str, Any, str]]],
          describe: Callable[[Any], tuple[str, int, Any]], as_of_ms: int) -> list[LandingFile]:
    """The landing files under ``root``; ``entries`` lists a folder as (name, handle, "d"/"f"/other), sorted by
    name, and ``describe`` gives a file handle's path, size and identity (:func:`_local_file`). A file reached again
    through a link, in a later hour, is listed once, in its first place that is a real hour (the run read each of its
    records twice).
    Entries outside the layout (``hour=5``, ``a.json``) are not read and are logged as a warning, but for the names
    writers leave on purpose (``.*``, ``_*``, ``*.tmp``, ``*.crc``)."""
    out: list[LandingFile] = []
    stray: list[str] = []
    seen: dict[Any, tuple[str, int]] = {}  # a file's identity -> where it was first found, its index in ``out``
    again: list[str] = []
    for day_name, day, day_kind in entries(root):
        m = _PARTITION.match(day_name)
        if not m or day_kind != "d":
            _note_stray(stray, day_name)
            continue
        for hour_name, hour, hour_kind in entries(day):
            h = _HOUR.match(hour_name)
            if not h or hour_kind != "d":
                _note_stray(stray, f"{day_name}/{hour_name}")
                continue
            start_ms = _hour_start_ms(m.group(1), h.group(1))
            if start_ms is None:
                # Not a real date or hour (dt=2026-02-30, hour=24): its files cannot be placed in time, so the
                # next run takes them and quarantines them whole, naming the folder (see partition_problem).
                start_ms = 0
            elif start_ms > as_of_ms:
                continue
            for name, f, kind in entries(hour):
                if kind == "f" and name.endswith(SUFFIXES) and not name.startswith((".", "_")):
                    path, size, identity = describe(f)
                    where = f"{day_name}/{hour_name}/{name}"
                    found = LandingFile(path, size, start_ms, "parquet" if name.endswith(".parquet") else "text")
                    if identity in seen:  # linked into a second place (an hour folder or file linked to another's):
                        first, i = seen[identity]  # read once, in the first place's hour, unless that is no real
                        if out[i].hour_start_ms == 0 and start_ms:  # hour (quarantined whole) and this one is
                            again.append(f"{first} (is {where})")
                            out[i], seen[identity] = found, (where, i)
                        else:
                            again.append(f"{where} (is {first})")
                        continue
                    seen[identity] = (where, len(out))
                    out.append(found)
                else:
                    _note_stray(stray, f"{day_name}/{hour_name}/{name}")
    if again:
        log.warning("landing files found in two places (linked) are read once, in the first place listed that is a "
                    "real hour count=%s entries=%s", len(again), again[:10])
    if stray:
        log.warning("landing entries outside the layout dt=YYYY-MM-DD/hour=HH/<name>%s are not read count=%s "
                    "entries=%s", "|".join(SUFFIXES), len(stray), stray[:10])
    return out


def _note_stray(stray: list[str], relative: str) -> None:
    """Add ``relative`` (a path below the landing root) unless its name is one writers leave on purpose."""
    name = relative.rsplit("/", 1)[-1]
    if not name.startswith((".", "_")) and not name.endswith((".tmp", ".crc")):
        stray.append(relative)


def _hour_start_ms(day: str, hour: str) -> int | None:
    """``dt``/``hour`` partition values as the hour's start in ms, or None when they are no real date/hour."""
    try:
        start = datetime.strptime(f"{day} {hour}", "%Y-%m-%d %H").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(start.timestamp() * 1000)


NOT_UTF8 = re.compile(r"\\x[89a-f][0-9a-f]")  # a byte printable() escaped: never ASCII, so 0x80 and above

# what Spark's readers take a path's glob for (SparkHadoopUtil.isGlobPath): a name holding one is read as a pattern
GLOB_CHARACTERS = "{}[]*?\\"


def name_problem(path: str) -> str | None:
    """Why Spark cannot read a landing file by its path: a path that is not UTF-8 (as :func:`printable` shows it), or
    a glob character in its name, which its readers expand (so ``batch[1].jsonl`` read ``batch1.jsonl``, twice, and
    not itself), or None."""
    # the file's name, or a folder a linked hour folder resolves to: the dt=/hour= folders cannot hold one, and one
    # in the landing root fails the run loudly (a configuration to fix), where quarantining every file would not be
    name = path.rsplit("/", 1)[-1]
    if NOT_UTF8.search(path) and not remote_scheme(path) and not os.path.lexists(path):  # as printable() shows it
        what = "name" if NOT_UTF8.search(name) else "folder it is in, through a link,"
        return (f"the {what} is not UTF-8 text (its other bytes are shown as \\xNN), which Spark and Parquet "
                "cannot name: rename it in UTF-8")
    found = sorted({c for c in name if c in GLOB_CHARACTERS})
    if not found:
        return None
    return (f"the name holds {' '.join(repr(c) for c in found)}, which Spark's reader takes for a glob pattern (it "
            "would read other files, or none, in its place): rename the file without them")


def partition_problem(path: str) -> str | None:
    """Why the ``dt=/hour=`` folders of a landing file are not a real date and hour, or None when they are."""
    parts = path.split("/")  # a local path or a URI alike
    day_name, hour_name = (parts[-3], parts[-2]) if len(parts) >= 3 else ("", "")
    m, h = _PARTITION.match(day_name), _HOUR.match(hour_name)
    if m is None or h is None:
        return None  # list_landing only lists files under well-formed partition folders
    if _hour_start_ms(m.group(1), h.group(1)) is not None:
        return None
    return (f"the file is in partition {day_name}/{hour_name}, which is not a real date and hour "
            "(expected dt=YYYY-MM-DD/hour=00..23 by failure time): it cannot be placed in time")


def read_manifest(files: list[str], source: Callable[[str], Any] = str) -> dict[str, ManifestEntry]:
    """The latest entry per landing path from the manifest files of a snapshot; ``source`` gives what pyarrow reads
    a file from (a path, or the bytes a Hadoop filesystem read: ``Warehouse.read_source``)."""
    latest: dict[str, ManifestEntry] = {}
    for f in files:
        table = pq.read_table(source(f), schema=MANIFEST_SCHEMA)
        for row in table.to_pylist():
            entry = ManifestEntry(row["path"], row["size"], row["through_ms"], row["done"], row["run_id"],
                                  row.get("future_ms"), row.get("max_line_bytes"))
            prev = latest.get(entry.path)
            if prev is None or entry.through_ms >= prev.through_ms:
                latest[entry.path] = entry
    return latest


def pending(files: list[LandingFile], manifest: dict[str, ManifestEntry],
            as_of_ms: int | None = None) -> tuple[list[LandingFile], list[str]]:
    """``(to_read, changed)``: files not done yet, and the files that broke the contract's "written whole, never
    appended to" since a run read them: done files whose size changed (never read again), files still waiting whose
    size changed (read again for their later records; what was added at or before the last read's as-of is not
    read) and, given the ``as_of_ms`` that listed ``files``, files still waiting since an earlier as-of that are gone
    (their later records with them). Each is logged as an error."""
    to_read, changed, grown, gone = [], [], [], []
    listed = set()
    for f in files:
        listed.add(f.path)
        entry = manifest.get(f.path)
        if entry is None or not entry.done:
            to_read.append(f)
            if entry is not None and entry.size != f.size:
                grown.append(f.path)
        elif entry.size != f.size:
            changed.append(f.path)
    if as_of_ms is not None:  # a file read at an earlier as-of is in a partition this listing covers
        gone = sorted(p for p, e in manifest.items() if not e.done and e.through_ms < as_of_ms and p not in listed)
    if changed:
        log.error("landing files changed after they were ingested; they are not read again files=%s", changed[:10])
    if grown:
        log.error("landing files changed while records of theirs waited for a later as-of; they are read again, but "
                  "what was added at or before the last read's as-of is not files=%s", grown[:10])
    if gone:
        log.error("landing files with records waiting for a later as-of are gone; those records were never read "
                  "files=%s", gone[:10])
    return to_read, changed + grown + gone


def manifest_bytes(entries: list[ManifestEntry]) -> bytes:
    """A manifest file's content (Parquet), for ``Warehouse.write_bytes``."""
    table = pa.Table.from_pylist([e.__dict__ for e in entries], schema=MANIFEST_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
