"""Lines too long to read: found without holding them, quarantined by record number, never lost.

Spark's text reader holds each line whole in a task's heap (and a few copies of it while it is parsed). One line
of a few hundred megabytes, a file with no newline at all, stopped every run at that file, out of heap; and
Hadoop's line reader, given a maximum (:data:`READER_OPTION`), skips a longer line (keeping at most the
maximum of it in memory meanwhile) without a word, and numbers the next lines as if it were not there. So the
landing is read with that maximum, and then:

1. Each text file's bytes are accounted for: the lines Spark read, plus one or two bytes of line end each, must make
   up the file's bytes (decoded, for a ``.gz`` file: the decode check measures them). A file whose bytes exceed that
   by more than the line ends may hold a skipped line (:func:`may_hold_long_lines`); a file of whitespace-only
   lines (parsing drops them before the count) looks the same, and costs only the scan below.
2. Only such a file is scanned, in the driver, a chunk at a time (:func:`scan`, memory bounded by the chunk): the
   record number, byte offset and length of each line of at least the maximum, by the rules of Hadoop's
   ``LineRecordReader`` (line ends ``\\n``, ``\\r\\n`` or ``\\r``; a UTF-8 byte order mark does not count).
3. The run quarantines each such line as ``RECORD_TOO_LARGE`` (without its text: the landing file keeps it, at the
   offset the reason gives) and renumbers the file's other records to their real line numbers
   (:func:`record_no_after_skips`).

A run with no such line pays one aggregation over its cached batch (:mod:`reprocess.cycle.run`).
"""

from __future__ import annotations

import gzip
import logging
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from pyspark.sql import functions as F

from reprocess.errors import ContractError
from reprocess.storage.hadoop_fs import session_fs
from reprocess.uris import local_path, remote_scheme

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)

# Hadoop's LineRecordReader.MAX_LINE_LENGTH: a read option of Spark's text source (it becomes the read's Hadoop
# configuration). A line whose bytes with its line end are at least this many is skipped.
READER_OPTION = "mapreduce.input.linerecordreader.line.maxlength"
# 32 MiB: far above any line the contract accepts (payloads at most --max-payload-bytes, 1 MiB by default; Spark's
# strict parse refuses a string of more than 20,000,000 characters), and well inside the default 2 GB heap, where a
# 40 MB line was read and quarantined in 33 s and one of 120 MB ran out of heap (bench/RESULTS.md, thirty-first run).
DEFAULT_MAX_LINE_BYTES = 32 << 20
MIN_MAX_LINE_BYTES = 1024
MAX_MAX_LINE_BYTES = (1 << 31) - 1  # Hadoop reads it as an int
_BOM = b"\xef\xbb\xbf"
_CHUNK = 4 << 20


@dataclass(frozen=True)
class LongLine:
    record_no: int  # the line's number in its file, from 1, every line counted (blank ones too)
    offset: int  # the byte where it starts (in the decoded bytes of a .gz file)
    size: int  # its bytes with its line end, as Hadoop's reader counts them (a first line's byte order mark not)


def may_hold_long_lines(text_bytes: int, read_bytes: int, lines_read: int, max_line_bytes: int) -> bool:
    """Whether a text file of ``text_bytes`` (decoded) may hold a line the reader skipped (one of ``max_line_bytes``
    or more), when the lines it read (``lines_read``) hold ``read_bytes``. Each line read adds at most two bytes of
    line end, the file at most a three-byte byte order mark; a skipped line adds at least the maximum. When all those
    line ends could add up to the maximum (a file of millions of lines), the bytes cannot tell: it may."""
    ends = 2 * lines_read + len(_BOM)
    return ends >= max_line_bytes or text_bytes > read_bytes + ends


def scan(chunks: Iterable[bytes], max_line_bytes: int) -> Iterator[LongLine]:
    """The lines of at least ``max_line_bytes`` (line end included) in the bytes of ``chunks``, as Hadoop's
    ``LineRecordReader`` with that maximum skips them. Holds a chunk at a time, and counts the lines inside a piece
    with C-level ``bytes.count``, so a file of many short lines is scanned about as fast as it is read."""
    if max_line_bytes < 3:  # a piece (at least 3 bytes) must not hold a whole line of the maximum
        raise ValueError(f"a maximum line length of at least 3 bytes, not {max_line_bytes}")
    scanner = _Scanner(max_line_bytes)
    # a line inside one piece is shorter than the maximum; the first piece holds a byte order mark whole
    step = max(len(_BOM), min(_CHUNK, max_line_bytes // 4))
    total = 0
    for piece, base in _pieces(chunks, step):
        if base == 0:
            scanner.bom = piece.startswith(_BOM)
        yield from scanner.feed(piece, base)
        total = base + len(piece)
    if total > scanner.start:  # the last line, without a line end
        last = scanner.end(total)
        if last is not None:
            yield last


def _pieces(chunks: Iterable[bytes], step: int) -> Iterator[tuple[bytes, int]]:
    """``chunks`` again as (piece, offset) of at most ``step`` bytes, the first at least three (a byte order mark)
    when there are, none but the last ending in "\r" (a "\n" may follow it)."""
    buf = b""
    base = 0
    for chunk in chunks:
        buf = buf + chunk if buf else chunk
        i = 0
        while len(buf) - i > step:
            cut = step - 1 if buf[i + step - 1] == 0x0D else step  # "\r"
            yield buf[i:i + cut], base
            base += cut
            i += cut
        buf = buf[i:]
    if buf:
        yield buf, base


class _Scanner:
    """The line count and the open line's offset across pieces."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.record = 0  # lines ended so far
        self.start = 0  # offset of the open line
        self.bom = False

    def end(self, end: int) -> LongLine | None:
        """End the open line just before offset ``end`` (its line end included): a LongLine if it is one."""
        self.record += 1
        size = end - self.start
        if self.record == 1 and self.bom:
            size -= len(_BOM)  # LineRecordReader strips it before comparing
        line = LongLine(self.record, self.start, size) if size >= self.max_line_bytes else None
        self.start = end
        return line

    def feed(self, piece: bytes, base: int) -> Iterator[LongLine]:
        cr, lf = piece.find(b"\r"), piece.find(b"\n")
        if cr < 0 and lf < 0:
            return  # the open line goes on
        first = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
        after = first + (2 if piece[first:first + 2] == b"\r\n" else 1)
        line = self.end(base + after)
        if line is not None:
            yield line
        last = max(piece.rfind(b"\r"), piece.rfind(b"\n"))
        if last >= after:  # lines wholly inside the piece: counted, never long (a piece is shorter than that)
            middle = piece[after:last + 1]
            self.record += middle.count(b"\n") + middle.count(b"\r") - middle.count(b"\r\n")
            self.start = base + last + 1


def local_chunks(path: str, size: int = _CHUNK) -> Iterator[bytes]:
    """The decoded bytes of the local landing file ``path`` (gunzipped for ``.gz``: :func:`gunzipped`), ``size`` at
    most at a time."""
    local = local_path(path)
    with open(local, "rb") as fh:
        if str(local).endswith(".gz"):
            yield from gunzipped(fh, size)
            return
        while chunk := fh.read(size):
            yield chunk


_GZIP_MAGIC = b"\x1f\x8b"


def gunzipped(fh: BinaryIO, size: int) -> Iterator[bytes]:
    """The bytes of the gzip stream ``fh`` (one member or several, one after the other), ``size`` at most at a
    time, decoded as Hadoop's gzip codec decodes them: Python's ``gzip`` skips zero bytes after a member, which
    Hadoop reads as the header of another and refuses (``not a gzip file``), so such a file passed the decode
    check and then failed every run's read. Raises :class:`gzip.BadGzipFile` for bytes after a member that start
    no other, :class:`EOFError` for a stream cut short, :class:`zlib.error` for bytes that do not inflate or a
    member whose checksum or length is wrong."""
    d: Any = None
    buf, ended, members = b"", False, 0
    while True:
        if not ended and (not buf or (d is None and len(buf) < len(_GZIP_MAGIC))):
            more = fh.read(1 << 20)
            ended = not more
            buf += more
            continue
        if d is None:
            if not buf:
                return  # the end, between members (or an empty file)
            if not buf.startswith(_GZIP_MAGIC):
                if not members:
                    raise gzip.BadGzipFile(f"not a gzip file (it begins {buf[:8]!r})")
                raise gzip.BadGzipFile(f"{len(buf)}+ bytes after the end of the gzip data start no gzip member "
                                       f"({buf[:8]!r}...; Hadoop's gzip codec refuses them, zero padding too)")
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            members += 1
        out = d.decompress(buf, size)
        if d.eof:  # what follows the member (its unconsumed_tail holds it too)
            buf, d = d.unused_data, None
        else:
            buf = d.unconsumed_tail
        if d is not None and not out and not buf and ended:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        if out:
            yield out


def read_chunks(spark: SparkSession, path: str) -> Iterator[bytes]:
    """The decoded bytes of landing file ``path``, a chunk at a time: Python reads a local file; the driver's
    Hadoop ``FileSystem`` (and its codec for ``.gz``) streams a URI. A Spark Connect client has no stream of a URI
    (its store calls answer whole): :class:`ContractError`."""
    chunks = local_chunks(path) if remote_scheme(path) is None else session_fs(spark).decoded_chunks(path, _CHUNK)
    if chunks is None:
        raise ContractError(
            f"landing file {path} may hold a line of more than --max-line-bytes (its lines do not add up to its "
            "bytes), and a Spark Connect client cannot stream a file at a URI to find it: run this batch from a "
            "driver of its own (spark-submit, the DAGs' default), or move the file aside; nothing was committed")
    return chunks


def record_no_after_skips(record_no: Column, source_file: Column, skipped: dict[str, list[LongLine]]) -> Column:
    """``record_no`` as the line's real number in its file, where the reader numbered the lines it read and skipped
    the ``skipped`` lines of each file: a line read as number ``i`` comes after the ``j``-th skipped line (real
    number ``g``) when ``i > g - j``."""
    fixed = None
    for path, lines in skipped.items():
        before = F.array(*[F.lit(line.record_no - j) for j, line in enumerate(lines, start=1)])
        shift = F.size(F.filter(before, lambda b: b < record_no))
        cond = source_file == F.lit(path)
        fixed = F.when(cond, record_no + shift) if fixed is None else fixed.when(cond, record_no + shift)
    return record_no if fixed is None else fixed.otherwise(record_no)
