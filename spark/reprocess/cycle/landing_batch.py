"""Reading one run's landing batch: files -> parsed records, with the manifest window applied."""

from __future__ import annotations

import logging
import os
import re
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import functions as F
from pyspark.sql import types as T

from reprocess.errors import ContractError, LandingChangedError
from reprocess.landing import contract
from reprocess.landing.contract import (
    SplitTooLong,
    one_file_per_partition,
    parse_records,
    read_parquet_records,
    read_text_records,
    split_files,
    split_large_files,
    use_jvm_parser,
)
from reprocess.landing.long_lines import (
    DEFAULT_MAX_LINE_BYTES,
    LongLine,
    local_chunks,
    may_hold_long_lines,
    read_chunks,
    record_no_after_skips,
    scan,
)
from reprocess.landing.manifest import name_problem, partition_problem
from reprocess.sparkutil import error_text, is_remote, task_slots, with_as_of
from reprocess.storage.hadoop_fs import does_not_decode, session_fs
from reprocess.uris import local_file_uri, local_path, remote_scheme

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import Column, DataFrame, SparkSession

    from reprocess.landing.manifest import LandingFile, ManifestEntry

log = logging.getLogger(__name__)


@dataclass
class Batch:
    records: DataFrame  # parsed records of the files read, with window columns
    corrupt: list[tuple[str, str]]  # (path, reason) of files that could not be read at all
    file_keys: dict[str, str]  # Spark's file URI -> the landing file's path (or URI) as listed
    as_of: Column  # the run's as-of over ``records`` (a column of them with generated code: drop AS_OF_COLUMN)
    jvm_parser: bool = False  # the structural checks of well-formed lines ran in the JVM (contract.use_jvm_parser)
    text_bytes: dict[str, int] = field(default_factory=dict)  # each text file read: its bytes (decoded for .gz; -1
    # when a .gz file's decoded size is unknown, as from a Connect server with an older jar: it is scanned)
    line_limits: dict[str, int] = field(default_factory=dict)  # each text file read: the line limit it was read with
    split_files: frozenset[str] = frozenset()  # text files read in several splits (contract.read_text_records)
    read_again: bool = False  # read in splits first, then again whole (contract.SplitTooLong in the first pass)
    # each file checked for whether it can be read at all (a .gz or Parquet file, or any file at a URI, which the
    # JVM checks): (why not, a .gz file's decoded bytes)
    decode_checks: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)
    # the files of a read in splits as they were before its first pass, which numbers their lines (file_stamps):
    # every text file of the read; with_long_lines checks them again once the read is over
    split_stamps: dict[str, tuple[Any, ...] | None] = field(default_factory=dict)
    listed_bytes: dict[str, int] = field(default_factory=dict)  # each text file read: its length as listed (stored)


def line_limit(path: str, manifest: dict[str, ManifestEntry], max_line_bytes: int) -> int:
    """The line limit a text file is read with: its first read's (ManifestEntry.max_line_bytes), else this run's."""
    prev = manifest.get(path)
    return prev.max_line_bytes if prev is not None and prev.max_line_bytes is not None else max_line_bytes


def spark_file_uris(spark: SparkSession, paths: Sequence[str]) -> list[str]:
    """The strings Spark puts in ``_metadata.file_path`` for local ``paths`` or listed URIs. A local path needs no
    JVM; a URI is Hadoop's ``Path.toUri`` of it, asked of this process's driver, or for a Spark Connect client of
    the server's, in one request for all of them."""
    remote = [p for p in paths if remote_scheme(p)]
    mapped = dict(zip(remote, session_fs(spark).uris(remote), strict=True)) if remote else {}
    return [mapped[p] if p in mapped else local_file_uri(p) for p in paths]


def file_stamps(spark: SparkSession, paths: Sequence[str]) -> dict[str, tuple[Any, ...] | None]:
    """What tells each landing file of ``paths`` from a file rewritten or replaced at that path, None for one that
    is gone (or that this process cannot see): a local file's length, modification time (in nanoseconds) and
    inode; a file at a URI its length, modification time (in ms) and ETag, as a listing of its folder by the
    driver's Hadoop ``FileSystem`` gives them (a request per folder; a filesystem without ETags, HDFS's or
    viewfs's, gives none)."""
    remote = [path for path in paths if remote_scheme(path)]
    stamps: dict[str, tuple[Any, ...] | None] = dict(session_fs(spark).stamps(remote)) if remote else {}
    for path in paths:
        if remote_scheme(path):
            continue
        try:
            st = os.stat(local_path(path))
        except OSError:
            stamps[path] = None
        else:
            stamps[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return stamps


def _filesystem_error(exc: BaseException) -> bool:
    """Whether an error reading a local landing file is the filesystem's (an OSError with an errno: the file gone
    since the listing, no permission, an I/O error, too many open files), not its bytes'. Such a file is no
    corruption: the run fails, to be retried, as the JVM's check takes an error thrown outside its decoders
    (storage.hadoop_fs._DECODERS). Quarantined, the file was marked done, and its messages never read."""
    return isinstance(exc, OSError) and exc.errno is not None


def _gzip_problem(path: str) -> tuple[str | None, int | None]:
    decoded = 0
    try:
        for chunk in local_chunks(path, 1 << 20):
            decoded += len(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        if _filesystem_error(exc):
            raise
        return f"cannot decompress: {exc}", None
    return None, decoded


def _parquet_problem(path: str) -> str | None:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        # every page decoded: a damaged one is found here, not by Spark's read, which failed every run on it; a few
        # thousand rows at a time, so that large payloads do not take the driver's memory
        for _batch in parquet.iter_batches(batch_size=1 << 12):
            pass
        meta = parquet.metadata
        # only once the pages decoded: pyarrow aborts the process on a codec number it does not know
        codecs = {meta.row_group(i).column(j).compression
                  for i in range(meta.num_row_groups) for j in range(meta.num_columns)}
    except Exception as exc:  # noqa: BLE001 - any Parquet file that does not decode is corrupt
        # but the driver's memory running out on a large row group is not the file's fault: quarantined, a good file
        # was marked done whole
        if isinstance(exc, MemoryError):
            raise MemoryError(f"the driver ran out of memory checking the landing file {path}") from exc
        if _filesystem_error(exc):
            raise
        return f"not a readable Parquet file: {exc}"
    return contract.codec_problem(codecs)



def _spark_parquet(spark: SparkSession, path: str) -> tuple[DataFrame | None, str | None]:
    """A readable Parquet file as Spark reads it, its schema taken; or why Spark cannot take that schema (a column of
    a type it refuses, such as a nanosecond timestamp: PARQUET_TYPE_ILLEGAL), whose read failed every run until the
    file was moved."""
    from pyspark.errors import AnalysisException

    try:
        df = spark.read.parquet(path)
        df.schema  # noqa: B018 - a remote client's frame asks its server only now
    except AnalysisException as exc:
        condition = exc.getCondition() or ""
        if condition == "PATH_NOT_FOUND":  # gone since it was listed: not its content's fault
            raise
        return None, f"Spark cannot read its schema: {str(exc).splitlines()[0]}"
    return df, None


def _pages_problem(spark: SparkSession, frame: DataFrame) -> str | None:
    """Why Spark cannot decode the pages of a Parquet file at a URI, or None. The JVM's check of such a file reads
    its footer (a local file's pages are decoded by pyarrow, in ``_parquet_problem``): a damaged page failed the
    run's read, at every run, naming the file. Here Spark reads every page and value once, and an error thrown by
    a decoder anywhere in the cause chain (``hadoop_fs._DECODERS``: Parquet's "could not read page" wraps the
    codec's) is the file's; any other error (the store failing) fails the run, to be retried. A Spark Connect
    client's session gives no Java error to tell them apart: its read still fails the run, naming the file."""
    if is_remote(spark):
        return None
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        frame.write.format("noop").mode("overwrite").save()
    except (Py4JJavaError, CapturedException) as exc:
        error = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
        while error is not None:
            if does_not_decode(error):
                return f"not a readable Parquet file: {error.toString()}"
            error = error.getCause()
        raise
    return None


_CHECKSUM_HEADER = b"crc\x00"  # ChecksumFileSystem.CHECKSUM_VERSION


def _checksum_problem(path: str) -> str | None:
    """Why the local file ``path`` does not match the checksums Hadoop's local filesystem keeps beside it, in
    ``.<name>.crc`` (None when it does, or has none). Spark's read verifies them (``ChecksumFileSystem``'s
    ``ChecksumFSInputChecker``, a ``ChecksumException``): a sidecar left stale by a writer that changed the file
    without Hadoop failed every run's read, naming no landing file, until someone removed it. The check is the
    checker's: a header ``crc\0`` and the chunk size (a sidecar without them is ignored, as Hadoop ignores it),
    then a big-endian CRC-32 per chunk of the file; a file longer than its checksums cover fails, a shorter one is
    checked as far as it goes. A sidecar cut inside a checksum fails here wherever the cut is (Hadoop fails once its
    read reaches it)."""
    folder, name = os.path.split(str(local_path(path)))
    sidecar = os.path.join(folder, f".{name}.crc")
    try:
        sums = open(sidecar, "rb")  # noqa: SIM115 - closed below, the header read apart from the rest
    except OSError:  # none (the usual case), or one Hadoop cannot open: it reads the file unchecked
        return None
    with sums:
        try:
            header = sums.read(8)
            tail = (os.fstat(sums.fileno()).st_size - 8) % 4
        except OSError:
            return None
        if len(header) < 8 or header[:4] != _CHECKSUM_HEADER:
            return None
        per_sum = int.from_bytes(header[4:], "big", signed=True)
        where = f"the checksums Hadoop keeps beside it in {sidecar}"
        if per_sum <= 0:
            return f"{where} give a chunk size of {per_sum} bytes, which Hadoop cannot read the file by"
        if tail:
            return f"{where} end {tail} bytes into a checksum: the checksum file is cut or damaged"
        position = 0
        for chunk in _chunks(local_path(path), per_sum):
            stored = sums.read(4)
            if len(stored) < 4:
                return (f"the file is longer than {where} cover: bytes from {position} on were written without "
                        "them (appended by a writer that does not keep Hadoop's checksums?)")
            if zlib.crc32(chunk).to_bytes(4, "big") != stored:
                return (f"bytes {position} to {position + len(chunk)} do not match {where}: the file was changed by "
                        "a writer that does not keep them, or is damaged. If its content is right, remove the "
                        ".crc file and land the file again under a new name")
            position += len(chunk)
    return None


def _chunks(path: Path, size: int) -> Iterator[bytes]:
    """The file's bytes ``size`` at a time (the last chunk shorter), read 1 MiB at most per call."""
    with open(path, "rb") as fh:
        while True:
            parts = []
            left = size
            while left and (part := fh.read(min(left, 1 << 20))):
                parts.append(part)
                left -= len(part)
            if not parts:
                return
            yield b"".join(parts)


def _decode_problem(spark: SparkSession, f: LandingFile) -> tuple[str | None, int | None]:
    """Why a landing file cannot be read at all (None when it can): bytes that do not match their Hadoop checksums
    (a local file), or a ``.gz`` or Parquet file that does not decode; and a readable ``.gz`` file's decoded length
    (None for others)."""
    if remote_scheme(f.path):  # Python cannot open it: the JVM that has its connector checks it (for a Spark
        return session_fs(spark).decode_problem(f.path, f.fmt)  # Connect client, the server's)
    problem = _checksum_problem(f.path)
    if problem is not None:
        return problem, None
    if f.path.endswith(".gz"):
        return _gzip_problem(f.path)
    return (_parquet_problem(f.path) if f.fmt == "parquet" else None), None


def read_batch(spark: SparkSession, files: list[LandingFile], manifest: dict[str, ManifestEntry], as_of_ms: int,
               max_payload_bytes: int, max_future_ms: int, codegen: str = "interpreted",
               max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, split: Literal[False] | None = None,
               checked: Batch | None = None) -> Batch:
    """Parse the records of ``files``; columns ``is_new_file``, ``prev_through_ms`` and ``prev_future_ms`` (the
    first read's future bound, ManifestEntry.future_ms) come from the manifest.
    Lines of ``max_line_bytes`` or more are skipped (:mod:`reprocess.landing.long_lines`: the caller finds them
    from ``Batch.text_bytes``). Text files are read in splits when one is larger than the split size
    (:func:`contract.split_size`: at most :func:`contract.landing_split_bytes`, sized to the cores), unless
    ``split`` is False (one whole file per task).

    With generated code (``codegen``, :func:`reprocess.sparkutil.fit_codegen`) the as-of comes as data, so a
    long-lived driver's next run compiles nothing again: the records then carry column
    :data:`~reprocess.sparkutil.AS_OF_COLUMN`, which ``Batch.as_of`` names and the caller drops once used.

    ``checked``, a batch this run read from the same files before (in splits, read again whole): its checks of
    whether each file can be read at all are taken, not made again (each decompressed a ``.gz`` file whole; one at
    a URI took a call to the JVM, for a Spark Connect client its server's).
    """
    corrupt: list[tuple[str, str]] = []
    decode_checks: dict[str, tuple[str | None, int | None]] = {}
    readable = []
    text_bytes: dict[str, int] = {}
    listed_bytes: dict[str, int] = {}
    frames: dict[str, DataFrame] = {}  # the Parquet files', read once: their schema check is their read
    for f in files:
        problem = name_problem(f.path) or partition_problem(f.path)
        if problem is None and f.size == 0:
            readable.append(f)
            continue
        decoded = known = None
        if problem is None:
            known = None if checked is None else checked.decode_checks.get(f.path)
            problem, decoded = known if known is not None else _decode_problem(spark, f)
            decode_checks[f.path] = (problem, decoded)
        if problem is None and f.fmt == "parquet":
            frame, problem = _spark_parquet(spark, f.path)
            if frame is not None and known is None and remote_scheme(f.path):
                problem = _pages_problem(spark, frame)
                decode_checks[f.path] = (problem, decoded)
            if frame is not None and problem is None:
                frames[f.path] = frame
        if problem:
            log.error("landing file is corrupt, quarantined whole file=%s reason=%s", f.path, problem)
            corrupt.append((f.path, problem))
        else:
            readable.append(f)
            if f.fmt == "text":  # a .gz file whose decoded size did not come back is scanned (-1: unknown)
                text_bytes[f.path] = decoded if decoded is not None else -1 if f.path.endswith(".gz") else f.size
                listed_bytes[f.path] = f.size
    parquets = [f.path for f in readable if f.fmt == "parquet" and f.size > 0]
    file_keys = dict(zip(spark_file_uris(spark, [f.path for f in readable]), [f.path for f in readable], strict=True))
    parts, limits, split_paths, read_again, stamps = _read_texts(spark, readable, manifest, max_line_bytes, file_keys,
                                                                 split)
    if parquets:
        parts.append(read_parquet_records([frames[p] for p in parquets]))
    schema = T.StructType([T.StructField("source_file", T.StringType()), T.StructField("record_no", T.LongType()),
                           T.StructField("raw", T.StringType()), T.StructField("line_bytes", T.LongType())])
    raw = parts[0] if parts else spark.createDataFrame([], schema)
    for p in parts[1:]:
        raw = raw.unionByName(p)
    window = spark.createDataFrame(
        [(uri, path, manifest[path].through_ms if path in manifest else None, path not in manifest,
          manifest[path].future_ms if path in manifest else None)
         for uri, path in file_keys.items()],
        "uri string, path string, prev_through_ms bigint, is_new_file boolean, prev_future_ms bigint")
    raw, as_of = with_as_of(raw, as_of_ms, codegen)
    jvm = use_jvm_parser(spark)
    parsed = parse_records(raw, as_of, max_payload_bytes, max_future_ms, jvm=jvm)
    records = (parsed.join(F.broadcast(window), parsed["source_file"] == window["uri"], "left")
               .drop("uri", "source_file").withColumnRenamed("path", "source_file"))
    return Batch(records, corrupt, file_keys, as_of, jvm, text_bytes, limits, frozenset(split_paths), read_again,
                 decode_checks, stamps, listed_bytes)


def _read_texts(spark: SparkSession, readable: list[LandingFile], manifest: dict[str, ManifestEntry],
                max_line_bytes: int, file_keys: dict[str, str],
                split: Literal[False] | None,
                ) -> tuple[list[DataFrame], dict[str, int], list[str], bool, dict[str, tuple[Any, ...] | None]]:
    """The text files' records (one read per line limit: this run's, and any first read's other one), each file's
    limit, the files read in several splits (those larger than the split size; none when ``split`` is False),
    whether a read in splits found a line too long for it and read the landing again whole, and the stamps of
    the text files of a read in splits before its first pass (:func:`file_stamps`); sets how the session splits
    files (left for the caller to put back once the records are in the cache)."""
    split_bytes = contract.landing_split_bytes()
    sizes = [(f.path, f.size) for f in readable if f.fmt == "text" and f.size > 0]
    slots = None
    floor = contract.SPLIT_FLOOR_BYTES
    if split is not False and split_bytes > floor and split_files(sizes, floor):  # sized to the cores
        slots = task_slots(spark)
        split_bytes = contract.split_size([size for _, size in sizes], slots, split_bytes, floor)
    in_splits = [] if split is False else split_files(sizes, split_bytes)
    texts = [path for path, _ in sizes]
    limits = {p: line_limit(p, manifest, max_line_bytes) for p in texts}
    if in_splits:  # a file above the split size: read by several tasks, numbered by a first pass (read_text_records)
        log.info("landing text files read in splits split_bytes=%s task_slots=%s files=%s", split_bytes, slots,
                 in_splits[:10])
        split_large_files(spark, split_bytes)
        # before the first pass: a file that changes after it fails the run (with_long_lines), small ones too (the
        # first pass numbers the lines of those packed into a split's task)
        stamps = file_stamps(spark, texts)
        try:
            parts = _read_limits(spark, texts, limits, max_line_bytes, file_keys, True)
            return parts, limits, in_splits, False, stamps
        except SplitTooLong as exc:
            log.warning("%s: the landing is read again, one whole file per task", exc)
    one_file_per_partition(spark, max((f.size for f in readable), default=0))
    return _read_limits(spark, texts, limits, max_line_bytes, file_keys, False), limits, [], bool(in_splits), {}


def _read_limits(spark: SparkSession, texts: list[str], limits: dict[str, int], max_line_bytes: int,
                 file_keys: dict[str, str], split: bool) -> list[DataFrame]:
    """One read of ``texts`` per line limit (:func:`contract.read_text_records`)."""
    parts = []
    for limit in sorted(set(limits.values())):
        group = [p for p in texts if limits[p] == limit]
        if limit != max_line_bytes:
            log.info("landing files read with their first read's line limit max_line_bytes=%s files=%s", limit,
                     group[:10])
        try:  # split, the read's first pass runs here
            parts.append(read_text_records(spark, group, limit, split))
        except SplitTooLong as exc:  # named by Spark's URIs: said by the landing's paths
            raise SplitTooLong([file_keys.get(uri, uri) for uri in exc.paths]) from exc
        except Exception as exc:
            beyond = _beyond_the_reader(exc, file_keys)
            if beyond is None:
                raise
            raise beyond from exc
    return parts


def with_long_lines(spark: SparkSession, rec: DataFrame, batch: Batch, manifest: dict[str, ManifestEntry],
                    max_line_bytes: int, scanned: dict[str, list[LongLine]] | None = None,
                    ) -> tuple[DataFrame, int, int]:
    """``rec`` (the run's records, cached and counted) with the lines the reader skipped as ``RECORD_TOO_LARGE``
    records of their own, and the other records of their files renumbered; the number of records read; and the
    bytes of their payloads (as decoded: what a task holds of them, whatever the files' compression).

    One aggregation over ``rec`` accounts for each text file's bytes; only a file they do not add up for is
    scanned (:mod:`reprocess.landing.long_lines`). ``rec`` comes back unchanged when no line was skipped; if this
    fails, the run frees ``rec`` with its other kept frames (sparkutil.pinning). Raises :class:`SplitTooLong`
    where the scan finds a long line in a file read in several splits (the reader returned it, or pieces of it,
    shorter than the first pass of contract.read_text_records catches), for the caller to read the landing again;
    its ``scanned`` holds what every scan of this call found, which the caller's next call takes as ``scanned``
    instead of scanning those files again. Raises :class:`~reprocess.errors.LandingChangedError` where a file of
    a read in splits is not the file its first pass counted (``Batch.split_stamps``), before any scan.
    """
    if not batch.file_keys:  # no landing file to read (a run that only re-drives): no record, no job to count them
        return rec, 0, 0
    try:
        stats = rec.groupBy("source_file").agg(F.count(F.lit(1)).alias("records"),
                                               F.sum("line_bytes").alias("bytes"),
                                               F.max("record_no").alias("lines"),
                                               F.sum(F.octet_length("payload")).alias("payload_bytes")).collect()
    except Exception as exc:
        beyond = _beyond_the_reader(exc, batch.file_keys)
        if beyond is not None:
            raise beyond from exc
        if batch.split_stamps:  # a file gone or cut short since the first pass fails the read: said as such
            _check_split_stamps(spark, batch)
        raise
    if batch.split_stamps:
        _check_split_stamps(spark, batch)
    records = sum(int(r.records) for r in stats)
    payload_bytes = sum(int(r.payload_bytes or 0) for r in stats)
    read = {r.source_file: (int(r.bytes or 0), int(r.lines or 0)) for r in stats}
    skipped: dict[str, list[LongLine]] = {}
    found_by_scan: dict[str, list[LongLine]] = {}
    for path, size in batch.text_bytes.items():
        got_bytes, lines = read.get(path, (0, 0))
        limit = batch.line_limits.get(path, max_line_bytes)
        if size >= 0 and not may_hold_long_lines(size, got_bytes, lines, limit):
            continue
        if scanned is not None and path in scanned:  # scanned before this read, by the run's read in splits, whose
            found = scanned[path]  # call logged its long lines
            log.info("landing file scanned before its read again file=%s long_lines=%s", path, len(found))
        elif _adds_up_with_blank_lines(spark, path, size, batch.listed_bytes.get(path), limit):
            found = []
        else:
            log.info("landing file's lines do not add up to its bytes, scanning it for lines of %s bytes or more "
                     "file=%s bytes=%s read_bytes=%s lines_read=%s", limit, path, size, got_bytes, lines)
            t0 = time.monotonic()
            found = list(scan(read_chunks(spark, path), limit))
            log.info("landing file scanned file=%s long_lines=%s seconds=%.1f", path, len(found),
                     time.monotonic() - t0)
            for line in found:
                log.error("landing line too long, quarantined without its text file=%s record=%s offset=%s bytes=%s",
                          path, line.record_no, line.offset, line.size)
        found_by_scan[path] = found
        if found:
            skipped[path] = found
    if set(skipped) & batch.split_files:
        raise SplitTooLong(sorted(set(skipped) & batch.split_files), found_by_scan)
    if not skipped:
        return rec, records, payload_bytes
    renumbered = rec.withColumn("record_no", record_no_after_skips(F.col("record_no"), F.col("source_file"), skipped))
    rows: list[tuple[Any, ...]] = [
        (path, line.record_no, contract.RECORD_TOO_LARGE,
         _too_long(path, line, batch.line_limits.get(path, max_line_bytes)), path not in manifest,
         manifest[path].through_ms if path in manifest else None, path not in manifest, False, False,
         path in manifest, [])
        for path, lines in skipped.items() for line in lines]
    # a long line has no failure time: decided by its file's first read (cycle.run.landed)
    long_rows = spark.createDataFrame(rows, "source_file string, record_no bigint, problem string, "
                                            "problem_detail string, is_new_file boolean, prev_through_ms bigint, "
                                            "bad boolean, in_window boolean, deferred boolean, earlier boolean, "
                                            "expectations array<string>")
    return renumbered.unionByName(long_rows, allowMissingColumns=True), records + len(rows), payload_bytes


def _adds_up_with_blank_lines(spark: SparkSession, path: str, size: int, listed: int | None, limit: int) -> bool:
    """For a Spark Connect client and a text file at a URI, which it cannot stream to scan (``read_chunks``):
    whether the file's lines add up to its ``size`` bytes (decoded, for a ``.gz`` file) once its blank lines are
    counted too. The run's records hold no blank line, so a file of whitespace-only lines looked like one hiding a
    line too long to read, and stopped every run (exit 4) until someone moved it. One more read of that file alone,
    by the server, only where the records did not add up; a line the reader skipped still does not (the run stops,
    naming the file).

    The lines are counted, not numbered: the session may still cut files in splits (a read in splits before), and
    a split's rows are numbered from 1. The file must still be the one listed (its stored length, ``listed``), or a
    file rewritten longer could add up and a skipped line of the one read be taken for none."""
    if size < 0 or remote_scheme(path) is None or not is_remote(spark):
        return False
    row = (read_text_records(spark, [path], limit, False)
           .agg(F.sum("line_bytes").alias("bytes"), F.count(F.lit(1)).alias("lines")).first())
    read_bytes, lines = (int(row.bytes or 0), int(row.lines or 0)) if row is not None else (0, 0)
    stamp = file_stamps(spark, [path]).get(path)
    same = stamp is not None and stamp[0] == listed
    adds_up = same and not may_hold_long_lines(size, read_bytes, lines, limit)
    log.info("landing file's lines counted again with its blank lines file=%s bytes=%s read_bytes=%s lines=%s "
             "unchanged=%s adds_up=%s", path, size, read_bytes, lines, same, adds_up)
    return adds_up


def _check_split_stamps(spark: SparkSession, batch: Batch) -> None:
    """Raises :class:`~reprocess.errors.LandingChangedError` if a file of ``batch``'s read in splits changed or went
    since its first pass numbered its lines: the records could be numbered wrong, and lines past a file's listed
    length were not read (a later run would take the file for one changed after its read, and never read them).
    Called once the records are in the cache: in a local driver nothing reads the files after it; on a cluster an
    executor lost later has its cached blocks computed again from the files, unchecked."""
    now = file_stamps(spark, list(batch.split_stamps))
    changed = sorted(p for p, stamp in batch.split_stamps.items() if now[p] != stamp)
    if changed:
        log.error("landing files changed while the run read them in splits files=%s", changed[:10])
        raise LandingChangedError(
            f"landing files changed or went while the run read them in splits: {changed[:10]} (a landed file must "
            "not change: write it whole, then rename it into place); nothing was committed, and the next run "
            "reads the landing as it is then")


# Hadoop's LineReader counts a line's bytes in an int: at 2 GiB it gives up, line end or not; Spark names the file.
_BEYOND_THE_READER = "Too many bytes before newline"
_READING_FILE = re.compile(r"Encountered error while reading file (\S+?)\.?\s")


def _beyond_the_reader(exc: BaseException, file_keys: dict[str, str]) -> ContractError | None:
    """A :class:`ContractError` naming the landing file when ``exc`` is the reader giving up on a line of 2 GiB or
    more (which it can neither hold nor skip); None for any other error."""
    text = error_text(exc)
    if _BEYOND_THE_READER not in text:
        return None
    found = _READING_FILE.search(text)
    uri = found.group(1) if found else None
    if uri is None:
        path = "(a landing file Spark did not name)"
    else:  # Spark writes a local file as file:///x, its listing's Path.toUri as file:/x
        path = file_keys.get(uri) or file_keys.get(re.sub("^file:///", "file:/", uri), uri)
    return ContractError(
        f"landing file {path} holds a line of 2 GiB or more, which Spark's text reader can "
        "neither read nor skip: move the file out of the landing (split it at its line ends, or quarantine it by "
        "hand); nothing was committed")


def _too_long(path: str, line: LongLine, max_line_bytes: int) -> str:
    where = "of the file once decompressed" if path.endswith(".gz") else "of the file"
    return (f"the line is {line.size} bytes (from byte {line.offset} {where}), at least the {max_line_bytes} a "
            "line may have (--max-line-bytes): it was not read, so its text is not here; the landing file holds it")
