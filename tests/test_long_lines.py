"""Landing lines too long to read (:mod:`reprocess.landing.long_lines`): Spark's reader skips them without holding
them; the run finds each one by its file's bytes, quarantines it as ``RECORD_TOO_LARGE`` with its record number and
offset, renumbers the file's other records, and loses nothing.

The reference is a byte-at-a-time splitter written from Hadoop's ``LineRecordReader`` rules (line ends ``\\n``,
``\\r\\n``, ``\\r``; a first line's UTF-8 byte order mark not counted); Spark's own reader is held to it too.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reprocess.cli import load_config, parse_instant
from reprocess.cycle import landing_batch
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.errors import ContractError, LandingChangedError
from reprocess.landing import contract
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.landing.long_lines import (
    DEFAULT_MAX_LINE_BYTES,
    LongLine,
    gunzipped,
    may_hold_long_lines,
    read_chunks,
    record_no_after_skips,
    scan,
)
from reprocess.sparkutil import restoring_conf
from reprocess.storage.arrow import open_snapshot, read_live
from reprocess.storage.commit import Warehouse

BOM = b"\xef\xbb\xbf"
AS_OF = "2026-11-21T03:00:00Z"
HOUR = Path("dt=2026-11-21") / "hour=00"


def _reference(data: bytes, cap: int) -> list[tuple[int, int, int, bytes]]:
    """Every line of ``data`` as (record_no, offset, size with line end, text), one byte at a time."""
    out, i, n = [], 0, len(data)
    while i < n:
        j = i
        while j < n and data[j] not in b"\r\n":
            j += 1
        end = j + 2 if data[j:j + 2] == b"\r\n" else min(j + 1, n)
        text = data[i:j]
        size = end - i
        if i == 0 and data.startswith(BOM):
            size, text = size - len(BOM), text[len(BOM):]
            if size == 0:  # a file of a byte order mark alone: no line (Hadoop reads 0 bytes, its end of file)
                break
        out.append((len(out) + 1, i, size, text))
        i = end
    return out


def _long(data: bytes, cap: int) -> list[LongLine]:
    return [LongLine(r, o, s) for r, o, s, _t in _reference(data, cap) if s >= cap]


def _chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


segments = st.lists(st.one_of(
    st.integers(0, 90).map(lambda n: b"x" * n),
    st.sampled_from([b"\n", b"\r", b"\r\n", b"\n\r", b"\r\r\n", b" \t", BOM])), max_size=30)


# -- the scan --------------------------------------------------------------------------------------------------------
@pytest.mark.unit
@settings(max_examples=400, deadline=None)
@given(bom=st.booleans(), parts=segments, cap=st.integers(3, 60), chunk=st.integers(1, 70))
def test_the_scan_finds_the_long_lines_the_reference_finds_however_the_bytes_are_chunked(bom, parts, cap, chunk):
    data = (BOM if bom else b"") + b"".join(parts)
    assert list(scan(_chunked(data, chunk), cap)) == _long(data, cap)


@pytest.mark.unit
def test_a_line_counts_its_line_end_and_a_first_lines_byte_order_mark_does_not():
    assert list(scan([b"abc\n", b"abcd\r\n", b"abcde"], 5)) == [LongLine(2, 4, 6), LongLine(3, 10, 5)]
    assert list(scan([BOM + b"abc\n"], 5)) == []  # 4 bytes once the mark is off
    assert list(scan([BOM + b"abcd\n"], 5)) == [LongLine(1, 0, 5)]
    assert list(scan([b"abc\r", b"\nabc"], 6)) == []  # one line end of two bytes across two chunks
    assert list(scan([b"abc\r", b"\nabc"], 5)) == [LongLine(1, 0, 5)]
    assert list(scan([b""], 5)) == []
    assert list(scan([], 5)) == []
    assert list(scan([b"\n" * 10], 3)) == []
    assert list(scan([b"x\r\n" * 10], 3)) == [LongLine(i, 3 * i - 3, 3) for i in range(1, 11)]


@pytest.mark.unit
def test_a_file_of_short_lines_never_looks_as_if_it_held_a_long_one_and_a_skipped_line_always_does():
    rng = random.Random(7)
    skipped_files = 0
    for _ in range(300):
        cap = rng.choice([1024, 4096])
        ends = [b"\n", b"\r\n", b"\r"]
        longest = cap - 3 if rng.random() < 0.5 else cap + 50  # half the files may hold a skipped line
        lines = [b"y" * rng.randint(0, longest) + rng.choice(ends) for _ in range(rng.randint(0, 40))]
        data = (BOM if rng.random() < 0.3 else b"") + b"".join(lines) + b"z" * rng.randint(0, 50)
        every = _reference(data, cap)
        read = [line for line in every if line[2] < cap]
        flagged = may_hold_long_lines(len(data), sum(len(t) for *_x, t in read), len(read), cap)
        assert flagged == (len(read) < len(every)), data[:60]
        skipped_files += len(read) < len(every)
    assert 50 < skipped_files < 250  # both kinds were tried
    # so many lines that their ends alone could hide a skipped line: the bytes cannot tell, the file is scanned
    assert may_hold_long_lines(3 * 600, 600, 600, 1024)
    assert not may_hold_long_lines(3 * 500, 500, 500, 1024)


@pytest.mark.unit
def test_the_cli_default_is_the_cycles_default_and_a_maximum_out_of_range_is_refused(capsys):
    from reprocess.cli import build_parser

    base = ["run", "--landing", "l", "--warehouse", "w", "--as-of", AS_OF]
    assert build_parser().parse_args(base).max_line_bytes == DEFAULT_MAX_LINE_BYTES == CycleOptions.max_line_bytes
    assert build_parser().parse_args([*base, "--max-line-bytes", "4096"]).max_line_bytes == 4096
    for bad, why in (("1023", "must be between 1024 and 2147483647, got 1023"),
                     (str(1 << 31), f"must be between 1024 and 2147483647, got {1 << 31}"),
                     ("lots", "expected a whole number, got 'lots'")):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*base, "--max-line-bytes", bad])
        assert f"argument --max-line-bytes: {why}" in capsys.readouterr().err


# -- Spark's reader keeps to the same rules -----------------------------------------------------------------------
@pytest.mark.spark
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bom=st.booleans(), parts=segments, cap=st.integers(3, 60), gz=st.booleans())
def test_spark_reads_exactly_the_lines_the_scan_does_not_report(spark, tmp_path, bom, parts, cap, gz):
    data = (BOM if bom else b"") + b"".join(parts)
    path = tmp_path / ("f.jsonl.gz" if gz else "f.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    rows = contract.read_text_records(spark, [str(path)], cap).select("record_no", "raw", "line_bytes").collect()
    skipped = {line.record_no for line in scan([data], cap)}
    expected = [t for r, _o, _s, t in _reference(data, cap) if r not in skipped]
    assert [r.raw.encode("utf-8", "surrogateescape") if r.raw else b"" for r in rows] == [
        t.decode("utf-8", "replace").encode("utf-8", "surrogateescape") for t in expected]
    assert [r.record_no for r in rows] == list(range(1, len(rows) + 1))  # numbered as read: renumbered by the run


def _read(spark, paths: list[Path], cap: int, split: int | None) -> tuple[list[tuple], dict[str, int]]:
    """Each line read (file name, record_no, raw, line_bytes), sorted, and the tasks that read each file: split in
    ``split`` bytes with small files packed together, or one file per partition."""
    with restoring_conf(spark, *contract.FILE_SPLIT_KEYS):
        if split is None:
            contract.one_file_per_partition(spark, max(p.stat().st_size for p in paths))
        else:
            contract.split_large_files(spark, split, open_cost=1)
        df = contract.read_text_records(spark, [str(p) for p in paths], cap, split is not None)
        rows = sorted((Path(r.source_file).name, r.record_no, r.raw, r.line_bytes) for r in df.collect())
        tasks = df.select("source_file", F.spark_partition_id().alias("task")).distinct().groupBy("source_file").count()
        return rows, {Path(r.source_file).name: r["count"] for r in tasks.collect()}


@pytest.mark.spark
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bom=st.booleans(), parts=segments, split=st.integers(1, 70))
def test_a_file_read_in_splits_numbers_its_lines_as_a_whole_file_read_does(spark, tmp_path, bom, parts, split):
    """Hadoop's reader finishes a line past its split's end and skips the next split's partial first line; the first
    pass's counts make each line's number its number in the whole file, whichever task read it and whatever else that
    task read (small files packed with a split's end). (Lines of the limit or more are read whole files again by the
    cycle: below.)"""
    data = (BOM if bom else b"") + b"".join(parts) + b"\n" + b"".join(reversed(parts))
    cap = len(data) + 64  # no line of any of the files is near the limit
    folder = tmp_path / f"{bom}-{split}-{abs(hash(data))}"
    folder.mkdir(exist_ok=True)
    paths = [folder / "f.jsonl", folder / "g.jsonl", folder / "h.jsonl.gz", folder / "i.jsonl"]
    paths[0].write_bytes(data)
    paths[1].write_bytes(b"a\nb\r\nc")
    paths[2].write_bytes(gzip.compress(data))  # a .gz file is one split, whatever the size
    paths[3].write_bytes(b"\n".join(b"%d" % i for i in range(40)))
    whole, whole_tasks = _read(spark, paths, cap, None)
    split_read, split_tasks = _read(spark, paths, cap, split)
    assert split_read == whole
    assert set(whole_tasks.values()) == {1}
    # a line starting at byte o > 0 is read by the split holding byte o - 1 (the one before skips it as partial)
    reading = {max(offset - 1, 0) // split for _no, offset, _size, _text in _reference(data, cap)}
    if len(reading) > 1:
        assert split_tasks["f.jsonl"] > 1  # read in splits: the test is not comparing one read with itself


@pytest.mark.unit
@settings(max_examples=400, deadline=None)
@given(sizes=st.lists(st.integers(0, 1 << 34), min_size=1, max_size=20), cores=st.integers(1, 512),
       split=st.integers(contract.MIN_SPLIT_BYTES, 1 << 30), floor=st.integers(1, 1 << 28))
def test_the_split_size_cuts_the_text_evenly_in_the_fewest_rounds_within_its_bounds(sizes, cores, split, floor):
    size = contract.split_size(sizes, cores, split, floor)
    assert min(floor, split) <= size <= split
    total = sum(sizes)
    rounds = max(1, -(-total // (cores * split)))  # rounds of splits of the largest size on every core
    if size > min(floor, split):  # not held up by the floor: as many rounds, and no smaller split fills them
        assert -(-total // size) <= cores * rounds
        assert -(-total // (size - 1)) > cores * rounds


@pytest.mark.unit
def test_the_split_size_of_landings_the_docs_name():
    mib = 1 << 20
    assert contract.split_size([394 * mib], 2) == 394 * mib // 4  # four of 98.5 MiB, not 128, 128, 128 and 10
    assert contract.split_size([200 * mib], 8) == 32 * mib  # the floor, not 25 MiB
    assert contract.split_size([10 << 30], 2) == contract.SPLIT_BYTES  # a large landing: the most a split may be
    assert contract.split_size([34 * mib] * 12, 2) == 102 * mib  # the bench's 1M landing: no file above it
    assert contract.split_size([100 * mib], 2, split_bytes=1500) == 1500  # a size set below the floor is kept
    assert contract.split_size([0], 4) == contract.SPLIT_FLOOR_BYTES


@pytest.mark.unit
def test_files_are_split_only_when_one_holds_a_split_and_a_quarter_and_then_every_file_above_the_size_is():
    """Spark splits every file above the size once the landing is read in splits: the list must name each one."""
    assert contract.split_files([("a.jsonl", 33), ("b.jsonl", 39)], 32) == []  # a split and a sliver: whole
    assert contract.split_files([("a.jsonl", 33), ("b.jsonl", 40), ("c.jsonl", 32), ("d.jsonl.gz", 90)], 32) == [
        "a.jsonl", "b.jsonl"]
    mib = 1 << 20
    twelve = [(f"f{i}.jsonl", 34 * mib) for i in range(12)]  # the bench's 1M landing: whole on any cores
    assert all(contract.split_files(twelve, contract.split_size([34 * mib] * 12, cores)) == []
               for cores in (1, 2, 8, 16, 200))


def _big_landing(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A landing of one file of 300 records, the 251st broken: the landing, the file, its lines."""
    landing = tmp_path / "landing"
    (landing / HOUR).mkdir(parents=True)
    lines = [_record(f"b-{i}") for i in range(300)]
    lines[250] = "{broken"
    big = landing / HOUR / "big.jsonl"
    big.write_text("\n".join(lines) + "\n")
    return landing, big, lines


@pytest.mark.spark
def test_a_file_below_the_split_size_is_cut_across_the_cores_and_numbered_as_a_whole_read_numbers_it(
        spark, tmp_path, monkeypatch, caplog):
    """Sized to the cores: one file, below the split size but above the floor, is read in as many splits as the
    session has task slots (the test session's two), each of half its bytes, and its records and quarantine are
    the whole-file read's. Below the floor the same file is read whole."""
    cap = 2048
    landing, big, _lines = _big_landing(tmp_path)
    results = {}
    for floor in (contract.SPLIT_FLOOR_BYTES, 4096):
        monkeypatch.setattr(contract, "SPLIT_FLOOR_BYTES", floor)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            summary = _cycle(spark, landing, tmp_path / f"wh-{floor}", AS_OF, cap)
        reader, snap = open_snapshot(str(tmp_path / f"wh-{floor}"))
        ids = sorted(read_live(reader, snap, "ledger", ["message_id"]).column("message_id").to_pylist())
        results[floor] = (summary["landing_read"], ids, _quarantine(tmp_path / f"wh-{floor}"), caplog.text)
    whole, split = results.values()
    assert (whole[0], split[0]) == ("whole_files", "splits")
    assert split[1:3] == whole[1:3]
    assert len(whole[1]) == 299
    assert list(whole[2]) == [("big.jsonl", 251)]
    half = -(-big.stat().st_size // 2)
    assert f"split_bytes={half} task_slots=2" in split[3]
    assert "landing text read in splits files=1 splits=2" in split[3]
    assert "landing text files read in splits" not in whole[3]


@pytest.mark.spark
def test_records_read_after_skipped_lines_get_their_real_numbers_back(spark):
    skipped = {"a": [LongLine(2, 0, 0), LongLine(3, 0, 0), LongLine(6, 0, 0)], "b": [LongLine(1, 0, 0)]}
    # file a, lines 1..8 with 2, 3 and 6 skipped: read as 1, 4, 5, 7, 8; file b: 1 skipped, 2..3 read; c untouched
    df = spark.createDataFrame([("a", i) for i in range(1, 6)] + [("b", 1), ("b", 2), ("c", 1), ("c", 2)],
                               "f string, n bigint")
    got = df.select("f", record_no_after_skips(F.col("n"), F.col("f"), skipped).alias("n")).collect()
    assert [tuple(r) for r in got] == [("a", 1), ("a", 4), ("a", 5), ("a", 7), ("a", 8), ("b", 2), ("b", 3),
                                       ("c", 1), ("c", 2)]


@pytest.mark.spark
def test_a_landing_file_at_a_uri_is_measured_and_streamed_by_the_drivers_filesystem(spark, tmp_path):
    """For a file at a URI the driver's Hadoop ``FileSystem`` measures a ``.gz`` file's decoded bytes (in the decode
    check) and streams a flagged file to the scan, decoded; ``viewfs:`` stands for a bucket."""
    from reprocess.storage.hadoop_fs import session_fs

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.viewfs.impl.disable.cache", "true")  # the default mount table gains a link per test
    name = tmp_path.name.replace("_", "-")
    conf.set(f"fs.viewfs.mounttable.default.link./{name}", tmp_path.as_uri())
    data = b"a\r\n" + b"x" * 5000 + b"\n" + b"b" * (5 << 20)  # the last line spans two of the stream's chunks
    (tmp_path / "f.jsonl").write_bytes(data)
    (tmp_path / "f.jsonl.gz").write_bytes(gzip.compress(data))
    assert session_fs(spark).decode_problem(f"viewfs:/{name}/f.jsonl.gz", "text") == (None, len(data))
    assert session_fs(spark).decode_problem(f"viewfs:/{name}/f.jsonl", "text") == (None, None)
    for f in ("f.jsonl", "f.jsonl.gz"):
        chunks = list(read_chunks(spark, f"viewfs:/{name}/{f}"))
        assert len(chunks) == 2
        assert b"".join(chunks) == data
        assert list(scan(chunks, 4096)) == [LongLine(2, 3, 5001), LongLine(3, 5004, 5 << 20)]


# -- a cycle ------------------------------------------------------------------------------------------------------
def _record(mid: str, payload: str = "p", failed_at: str = "2026-11-21T00:30:00Z") -> str:
    return json.dumps({"message_id": mid, "address": "orders.created", "payload": payload, "failed_at": failed_at,
                       "error_class": "Boom"})


def _cycle(spark, landing: Path | str, wh: Path, as_of: str, max_line_bytes: int) -> dict:
    return run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=load_config(None),
                                         as_of_ms=parse_instant(as_of), max_line_bytes=max_line_bytes))


def _quarantine(wh: Path) -> dict[tuple[str, int], tuple[str, str | None, str]]:
    reader, snap = open_snapshot(str(wh))
    rows = read_live(reader, snap, "quarantine").to_pylist()
    return {(Path(r["source_file"]).name, r["record_no"]): (r["reason_code"], r["raw"], r["reason"]) for r in rows}


@pytest.mark.spark
@pytest.mark.parametrize("split", [None, 1500])
def test_a_cycle_quarantines_long_lines_unread_renumbers_the_rest_and_loses_nothing(spark, tmp_path, monkeypatch,
                                                                                     caplog, split):
    """Read whole, and read in splits smaller than the long lines (every text file but the .gz one split)."""
    if split is not None:
        monkeypatch.setenv(contract.SPLIT_BYTES_ENV, str(split))
    cap = 4096
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=40, hours=1, seed=3, malformed=0))
    plain = [_record("m-1"), _record("m-2", "x" * 5000), "", _record("m-3"), "not json", "y" * cap,
             _record("m-4")]
    (landing / HOUR / "plain.jsonl").write_bytes("\r\n".join(plain).encode() + b"\r\n")
    packed = [_record("g-1"), "z" * 3 * cap, _record("g-2"), "{broken"]
    (landing / HOUR / "packed.jsonl.gz").write_bytes(gzip.compress("\n".join(packed).encode()))
    (landing / HOUR / "one-line.jsonl").write_bytes(b"[" + b"1," * cap + b"1]")  # no line end at all
    wh = tmp_path / "wh"

    with caplog.at_level(logging.INFO, logger="reprocess.landing.contract"):
        summary = _cycle(spark, landing, wh, AS_OF, cap)
    assert ("the landing is read again, one whole file per task" in caplog.text) == (split is not None)
    assert summary["landing_read"] == ("whole_files" if split is None else "splits_then_whole_files")
    assert all(summary["conservation"].values()), summary["conservation"]
    got = _quarantine(wh)
    too_long = {k: v for k, v in got.items() if v[0] == contract.RECORD_TOO_LARGE}
    assert sorted(too_long) == [("one-line.jsonl", 1), ("packed.jsonl.gz", 2), ("plain.jsonl", 2),
                                ("plain.jsonl", 6)]
    assert all(raw is None for _code, raw, _reason in too_long.values())
    offset = len(plain[0]) + 2
    assert too_long[("plain.jsonl", 2)][2].startswith(
        f"the line is {len(plain[1]) + 2} bytes (from byte {offset} of the file), at least the {cap} a line may have")
    assert "of the file once decompressed" in too_long[("packed.jsonl.gz", 2)][2]
    # the other quarantined lines keep their text and their real numbers
    assert got[("plain.jsonl", 5)][:2] == (contract.MALFORMED_JSON, "not json")
    assert got[("packed.jsonl.gz", 4)][:2] == (contract.MALFORMED_JSON, "{broken")
    reader, snap = open_snapshot(str(wh))
    ids = set(read_live(reader, snap, "ledger", ["message_id"]).column("message_id").to_pylist())
    assert {"m-1", "m-3", "m-4", "g-1", "g-2"} <= ids
    assert "m-2" not in ids
    assert summary["quarantined"] == len(got)
    assert summary["records_read"] == summary["ingested"]

    again = _cycle(spark, landing, wh, "2026-11-21T04:00:00Z", cap)  # every file done: nothing read twice
    assert again["records_read"] == 0
    assert again["quarantined"] == 0
    assert _quarantine(wh) == got


def _both_readers(spark, tmp_path, monkeypatch, caplog, landing: Path, cap: int, split: int) -> dict:
    """A cycle over ``landing`` read whole and read in splits of ``split`` bytes: for each, the ledger's ids, the
    quarantine, the records read and ingested, and the summary's ``landing_read``."""
    results = {}
    for size in (None, split):
        if size is not None:
            monkeypatch.setenv(contract.SPLIT_BYTES_ENV, str(size))
        caplog.clear()
        with caplog.at_level(logging.INFO):
            summary = _cycle(spark, landing, tmp_path / f"wh-{size}", AS_OF, cap)
        assert all(summary["conservation"].values()), summary["conservation"]
        assert ("the landing is read again" in caplog.text) == (summary["landing_read"] == "splits_then_whole_files")
        reader, snap = open_snapshot(str(tmp_path / f"wh-{size}"))
        ids = sorted(read_live(reader, snap, "ledger", ["message_id"]).column("message_id").to_pylist())
        results[size] = (ids, _quarantine(tmp_path / f"wh-{size}"), summary["records_read"], summary["ingested"],
                         summary["landing_read"], "landing text read in splits" in caplog.text)
    return results


@pytest.mark.spark
@pytest.mark.parametrize(("pad", "end"), [("", "\r\n"), (" " * 1100, "\n")])
def test_a_line_the_split_reader_returns_near_the_limit_has_the_landing_read_again_whole(spark, tmp_path, monkeypatch,
                                                                                         caplog, pad, end):
    """A line of cap - 2 characters and a CRLF is cap bytes: too long. Skipped, it takes Hadoop's split reader past
    its split's end, so the reader returns it whole (its text is shorter than the limit) and the bytes add up: a valid
    record the whole-file read quarantines would be ingested. The first pass sees a line within two bytes of the
    limit and the landing is read again whole. So is a line of cap - 2 characters and an LF (not too long), even
    when it starts with more blanks than any cut of it would keep (a review found such a line dropped as blank)."""
    cap = 2048
    head = _record("first", "h" * 1100)  # the near-limit line starts inside the first split and ends past it
    near = pad + _record("near", "q" * (cap - 2 - len(pad) - len(_record("near", ""))))
    assert len(near) == cap - 2
    landing = tmp_path / "landing"
    (landing / HOUR).mkdir(parents=True)
    (landing / HOUR / "f.jsonl").write_bytes(end.join([head, near, _record("after"), "{broken"]).encode() + b"\n")
    whole, split_read = _both_readers(spark, tmp_path, monkeypatch, caplog, landing, cap, len(head) + 10).values()
    assert (whole[4], split_read[4]) == ("whole_files", "splits_then_whole_files")
    assert not split_read[5]  # caught by the first pass, before the split read went on
    assert split_read[:4] == whole[:4]
    quarantined = sorted((name, no, code) for (name, no), (code, _raw, _why) in whole[1].items())
    if end == "\r\n":
        assert whole[0] == ["after", "first"]
        assert quarantined == [("f.jsonl", 2, contract.RECORD_TOO_LARGE), ("f.jsonl", 4, contract.MALFORMED_JSON)]
    else:
        assert whole[0] == ["after", "first", "near"]
        assert quarantined == [("f.jsonl", 4, contract.MALFORMED_JSON)]


@pytest.mark.spark
def test_a_long_line_in_a_file_of_one_split_is_renumbered_around_without_reading_the_landing_again(
        spark, tmp_path, monkeypatch, caplog):
    """A file no larger than a split is read from its start to its end, as a whole-file read reads it: its long line
    is skipped and found as usual, and the big file beside it keeps its split read."""
    cap = 2048
    landing = tmp_path / "landing"
    (landing / HOUR).mkdir(parents=True)
    (landing / HOUR / "big.jsonl").write_text("\n".join(_record(f"b-{i}") for i in range(200)) + "\n")
    small = [_record("s-1"), "x" * (2 * cap), _record("s-2"), "{broken"]
    (landing / HOUR / "small.jsonl").write_text("\n".join(small) + "\n")
    split = 6 * cap  # big.jsonl (about 21 KB) in splits; small.jsonl (about 4 KB) one split
    whole, split_read = _both_readers(spark, tmp_path, monkeypatch, caplog, landing, cap, split).values()
    assert (whole[4], split_read[4]) == ("whole_files", "splits")
    assert split_read[5]
    assert split_read[:4] == whole[:4]
    assert len(whole[0]) == 202
    assert sorted((name, no, code) for (name, no), (code, _raw, _why) in whole[1].items()) == [
        ("small.jsonl", 2, contract.RECORD_TOO_LARGE), ("small.jsonl", 4, contract.MALFORMED_JSON)]


@pytest.mark.spark
def test_a_long_line_skipped_inside_a_split_is_found_by_the_bytes_and_the_landing_read_again_whole(
        spark, tmp_path, monkeypatch, caplog):
    """A long line that ends inside its split is skipped as a whole-file read skips it: the first pass sees nothing
    near the limit, the split read goes on, and the file's bytes then flag it and the scan finds it. In a file read
    in several splits the run reads the landing again whole (a line that crossed a split's end could not be told
    apart), and ends as the whole-file read does."""
    cap = 4096
    landing = tmp_path / "landing"
    (landing / HOUR).mkdir(parents=True)
    lines = [_record(f"b-{i}") for i in range(250)]
    lines[3] = "z" * (cap + 1)  # from about byte 300 to 4,400: inside the first split of 12,288 bytes
    (landing / HOUR / "big.jsonl").write_text("\n".join(lines) + "\n")
    (landing / HOUR / "packed.jsonl.gz").write_bytes(gzip.compress((_record("g-1") + "\n").encode()))
    decoded: list[str] = []
    real = landing_batch._gzip_problem

    def counted(path: str) -> tuple[str | None, int | None]:
        decoded.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(landing_batch, "_gzip_problem", counted)
    whole, split_read = _both_readers(spark, tmp_path, monkeypatch, caplog, landing, cap, 3 * cap).values()
    assert (whole[4], split_read[4]) == ("whole_files", "splits_then_whole_files")
    assert split_read[5]  # the first pass let the split read go on: the fallback came after the parse
    assert split_read[:4] == whole[:4]
    assert len(whole[0]) == 250
    assert [(k, v[0]) for k, v in whole[1].items()] == [(("big.jsonl", 4), contract.RECORD_TOO_LARGE)]
    # the read again whole takes the split read's checks: the .gz file decompressed once a run, the file scanned once
    assert decoded == ["packed.jsonl.gz", "packed.jsonl.gz"]
    assert caplog.text.count("landing file scanned file=") == 1  # the split run's log (_both_readers' last)
    assert "landing file scanned before its read again file=" in caplog.text
    assert caplog.text.count("landing line too long, quarantined without its text file=") == 1  # logged once


@pytest.mark.spark
def test_a_split_the_first_pass_did_not_see_stops_the_read(spark, tmp_path):
    """The two passes must plan the same splits: planned otherwise (a setting changed in between), a line of a split
    the first pass did not count stops the read instead of going on without a number."""
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(_record(f"m-{i}") for i in range(400)) + "\n")
    with restoring_conf(spark, *contract.FILE_SPLIT_KEYS):
        contract.split_large_files(spark, 8192)
        df = contract.read_text_records(spark, [str(path)], DEFAULT_MAX_LINE_BYTES, True)
        assert df.count() == 400
        spark.conf.set("spark.sql.files.maxPartitionBytes", "5000")
        with pytest.raises(Exception, match="changed while it was read: a split its first read did not see"):
            df.collect()


@pytest.mark.unit
def test_a_local_gzip_is_decoded_as_hadoops_codec_decodes_it_members_yes_zero_padding_no():
    """``long_lines.gunzipped`` (the local decode check and scan) gives what ``gzip`` gives for any run of whole
    members, however small the chunks asked for, and refuses what Hadoop's codec refuses and Python's ``gzip``
    takes: zero bytes after the last member (Hadoop reads them as another member's header). A stream cut short
    or a bad checksum is refused by both."""
    import io
    import zlib

    def decoded(blob: bytes, size: int) -> bytes | str:
        try:
            return b"".join(gunzipped(io.BytesIO(blob), size))
        except (OSError, EOFError, zlib.error) as exc:
            return type(exc).__name__

    rnd = random.Random(7)
    for _ in range(200):
        parts = [rnd.randbytes(rnd.randrange(0, 3000)) for _ in range(rnd.randrange(1, 4))]
        blob = b"".join(gzip.compress(p) for p in parts)
        assert decoded(blob, rnd.randrange(1, 5000)) == b"".join(parts)
        cut = blob[:rnd.randrange(1, len(blob))]
        assert isinstance(decoded(cut, 64), str)
        with pytest.raises((OSError, EOFError, zlib.error)):
            gzip.decompress(cut)
    one = gzip.compress(b'{"a": 1}\n')
    assert gzip.decompress(one + b"\0" * 512) == b'{"a": 1}\n'  # Python's gzip takes the padding
    assert decoded(one + b"\0" * 512, 1024) == decoded(one + b"\0", 1024) == "BadGzipFile"
    assert decoded(one + b"junk", 1024) == "BadGzipFile"
    assert decoded(b"", 1024) == b""
    flipped = bytearray(one)
    flipped[-6] ^= 1  # the CRC
    assert decoded(bytes(flipped), 1024) == "error"
    assert max(len(c) for c in gunzipped(io.BytesIO(gzip.compress(bytes(8 << 20))), 1 << 20)) == 1 << 20


@pytest.mark.unit
def test_a_files_stamp_tells_it_from_a_file_rewritten_or_replaced_at_its_path(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text("a\nb\n")
    first = landing_batch.file_stamps(None, [str(path), str(tmp_path / "gone.jsonl")])  # type: ignore[arg-type]
    assert first[str(tmp_path / "gone.jsonl")] is None
    assert landing_batch.file_stamps(None, [f"file:{path}"]) == {f"file:{path}": first[str(path)]}  # type: ignore
    st = path.stat()
    path.write_text("b\na\n")  # the same length, written again
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert landing_batch.file_stamps(None, [str(path)])[str(path)] != first[str(path)]  # type: ignore[arg-type]
    replacement = tmp_path / "f.tmp"
    replacement.write_text("a\nb\n")
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    replacement.rename(path)  # the same length and time, another file
    assert landing_batch.file_stamps(None, [str(path)])[str(path)] != first[str(path)]  # type: ignore[arg-type]


def _mounted(spark, tmp_path: Path, landing: Path) -> str:
    """``landing`` as a ``viewfs:`` URI (standing for a bucket, on a filesystem without ETags)."""
    authority = f"lake-{tmp_path.name.replace('_', '-')}"  # a mount table of its own: Hadoop caches filesystems
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{authority}.link./landing",
                                                      landing.resolve().as_uri())
    return f"viewfs://{authority}/landing"


def _split_landing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[str], Path]:
    """:func:`_big_landing` and a small file of ten records beside it, read in splits of a third of the big one."""
    landing, big, lines = _big_landing(tmp_path)
    small = landing / HOUR / "small.jsonl"
    small.write_text("\n".join(_record(f"s-{i}") for i in range(10)) + "\n")
    monkeypatch.setenv(contract.SPLIT_BYTES_ENV, str(big.stat().st_size // 3))
    return landing, big, lines, small


@pytest.mark.spark
@pytest.mark.parametrize("at_uri", [False, True])
def test_files_rewritten_between_the_passes_of_a_split_read_fail_the_run_and_the_next_reads_them_anew(
        spark, tmp_path, monkeypatch, at_uri):
    """The contract forbids it, but a file replaced after the first pass counted its lines would be read in the
    first listing's splits with the first pass's counts: the lines past its old length unread (and never read
    later: the next run takes the file for one changed after its read), and the lines of any split whose count
    changed numbered wrong; the same for a small file packed into a split's task, whose lines the first pass
    counts too. The run sees the files are not the ones the first pass counted and fails, committing nothing; the
    next run lists the landing again and reads the new files, numbered as they number themselves, their long line
    quarantined. At a URI (no ETags here) the files' lengths and times, from a listing of their folder, tell."""
    cap = 4096
    landing, big, lines, small = _split_landing(tmp_path, monkeypatch)
    real = landing_batch.read_text_records
    passes: list[bool] = []

    def rewritten_after_the_first_pass(spark, files, max_line_bytes, split=False):  # noqa: ANN001, ANN202
        records = real(spark, files, max_line_bytes, split)  # split: the first pass ran
        passes.append(split)
        if split:  # each written whole, then renamed over the landed file
            new = {big: [_record("new-1"), _record("new-2"), *lines, "z" * cap, *(_record(f"t-{i}") for i in range(3))],
                   small: [_record(f"s-{i}") for i in range(12)]}
            for path, text in new.items():
                path.with_suffix(".tmp").write_text("\n".join(text) + "\n")
                path.with_suffix(".tmp").rename(path)
        return records

    monkeypatch.setattr(landing_batch, "read_text_records", rewritten_after_the_first_pass)
    root = _mounted(spark, tmp_path, landing) if at_uri else str(landing)
    changed = [f"{root}/{HOUR.as_posix()}/{name}" for name in ("big.jsonl", "small.jsonl")] if at_uri \
        else [str(big), str(small)]
    with pytest.raises(LandingChangedError, match=re.escape(f"while the run read them in splits: {changed} (a landed")):
        _cycle(spark, root, tmp_path / "wh", AS_OF, cap)
    assert passes == [True]
    assert Warehouse(tmp_path / "wh").latest().version == 0

    monkeypatch.setattr(landing_batch, "read_text_records", real)
    summary = _cycle(spark, root, tmp_path / "wh", AS_OF, cap)
    assert summary["landing_read"] == "splits_then_whole_files"  # the new long line in a split file
    assert all(summary["conservation"].values()), summary["conservation"]
    reader, snap = open_snapshot(str(tmp_path / "wh"))
    ids = sorted(read_live(reader, snap, "ledger", ["message_id"]).column("message_id").to_pylist())
    assert ids == sorted(["new-1", "new-2", *(f"b-{i}" for i in range(300) if i != 250),
                          *(f"t-{i}" for i in range(3)), *(f"s-{i}" for i in range(12))])
    assert {k: v[0] for k, v in _quarantine(tmp_path / "wh").items()} == {
        ("big.jsonl", 253): contract.MALFORMED_JSON, ("big.jsonl", 303): contract.RECORD_TOO_LARGE}
    assert summary["records_read"] == 2 + 300 + 1 + 3 + 12


@pytest.mark.spark
@pytest.mark.parametrize("scheme", ["viewfs", "cfile"])
def test_a_small_file_at_a_uri_rewritten_to_the_same_length_during_a_split_read_fails_the_run(
        spark, cfile, tmp_path, monkeypatch, scheme):
    """A small file packed into a split's task, at a URI, rewritten after the first pass to the same length: its
    records would be taken with the old ones' numbers. The listing of its folder tells it by its modification time
    (``viewfs:``, a filesystem without ETags: written again in place, a second later) or by its ETag (``cfile:``,
    the tests' object store: replaced by a file of the same length and time, renamed into place): the run fails,
    commits nothing, and the next reads the new records."""
    landing, _big, _lines, small = _split_landing(tmp_path, monkeypatch)
    reader, stamps = landing_batch.read_text_records, landing_batch.file_stamps
    listed: list[list[str]] = []

    def rewritten_after_the_first_pass(spark, files, max_line_bytes, split=False):  # noqa: ANN001, ANN202
        records = reader(spark, files, max_line_bytes, split)
        st = small.stat()
        new = small if scheme == "viewfs" else small.with_suffix(".tmp")
        new.write_text("\n".join(_record(f"r-{i}") for i in range(10)) + "\n")  # the same length
        os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns + (1_000_000_000 if scheme == "viewfs" else 0)))
        new.replace(small)
        assert (small.stat().st_size, small.stat().st_mtime_ns == st.st_mtime_ns) == (st.st_size, scheme == "cfile")
        return records

    def counted(spark, paths):  # noqa: ANN001, ANN202
        listed.append(sorted(paths))
        return stamps(spark, paths)

    monkeypatch.setattr(landing_batch, "read_text_records", rewritten_after_the_first_pass)
    monkeypatch.setattr(landing_batch, "file_stamps", counted)
    root = _mounted(spark, tmp_path, landing) if scheme == "viewfs" else f"cfile://{landing}"
    listing = root if scheme == "viewfs" else f"cfile:{landing}"  # the paths as the filesystem lists them
    files = [f"{listing}/{HOUR.as_posix()}/{name}" for name in ("big.jsonl", "small.jsonl")]
    with pytest.raises(LandingChangedError, match=re.escape(f"in splits: {files[1:]} (a landed")):
        _cycle(spark, root, tmp_path / "wh", AS_OF, DEFAULT_MAX_LINE_BYTES)
    assert listed == [files, files]
    assert Warehouse(tmp_path / "wh").latest().version == 0
    monkeypatch.setattr(landing_batch, "read_text_records", reader)
    summary = _cycle(spark, root, tmp_path / "wh", AS_OF, DEFAULT_MAX_LINE_BYTES)
    assert (summary["records_read"], summary["landing_read"]) == (310, "splits")
    reader_, snap = open_snapshot(str(tmp_path / "wh"))
    ids = set(read_live(reader_, snap, "ledger", ["message_id"]).column("message_id").to_pylist())
    assert ids == {*(f"b-{i}" for i in range(300) if i != 250), *(f"r-{i}" for i in range(10))}


@pytest.mark.unit
def test_files_at_uris_are_found_by_their_folder_and_name():
    from reprocess.storage.hadoop_fs import by_folder

    assert by_folder(["s3a://b/l/dt=1/hour=00/a.jsonl", "s3a://b/l/dt=1/hour=01/a.jsonl",
                      "s3a://b/l/dt=1/hour=00/b.jsonl.gz", "s3a://b/top.jsonl"]) == {
        "s3a://b/l/dt=1/hour=00": [("a.jsonl", "s3a://b/l/dt=1/hour=00/a.jsonl"),
                                   ("b.jsonl.gz", "s3a://b/l/dt=1/hour=00/b.jsonl.gz")],
        "s3a://b/l/dt=1/hour=01": [("a.jsonl", "s3a://b/l/dt=1/hour=01/a.jsonl")],
        "s3a://b/": [("top.jsonl", "s3a://b/top.jsonl")]}
    assert by_folder(["cfile:/top.jsonl", "cfile:/l/a.jsonl"]) == {"cfile:/": [("top.jsonl", "cfile:/top.jsonl")],
                                                                   "cfile:/l": [("a.jsonl", "cfile:/l/a.jsonl")]}


@pytest.mark.spark
@pytest.mark.parametrize("when", ["after the first pass", "before the check"])
def test_a_file_gone_during_its_split_read_fails_the_run_and_the_next_reads_the_landing_without_it(
        spark, tmp_path, monkeypatch, when):
    """Gone right after the first pass, the file fails the read itself (Spark cannot open it); gone just before the
    check, it could have been replaced before it went: either way the run cannot tell what it read, and fails as
    for a changed file, not with Spark's own error."""
    landing, _big, _lines, small = _split_landing(tmp_path, monkeypatch)
    reader, stamps = landing_batch.read_text_records, landing_batch.file_stamps
    calls: list[int] = []

    def deleted_after_the_first_pass(spark, files, max_line_bytes, split=False):  # noqa: ANN001, ANN202
        records = reader(spark, files, max_line_bytes, split)
        small.unlink()
        return records

    def deleted_before_the_check(spark, paths):  # noqa: ANN001, ANN202
        calls.append(len(paths))
        if len(calls) == 2:
            small.unlink()
        return stamps(spark, paths)

    if when == "after the first pass":
        monkeypatch.setattr(landing_batch, "read_text_records", deleted_after_the_first_pass)
    else:
        monkeypatch.setattr(landing_batch, "file_stamps", deleted_before_the_check)
    with pytest.raises(LandingChangedError, match=re.escape(f"in splits: ['{small}']")):
        _cycle(spark, landing, tmp_path / "wh", AS_OF, DEFAULT_MAX_LINE_BYTES)
    assert calls == ([] if when == "after the first pass" else [2, 2])
    monkeypatch.setattr(landing_batch, "read_text_records", reader)
    monkeypatch.setattr(landing_batch, "file_stamps", stamps)
    summary = _cycle(spark, landing, tmp_path / "wh", AS_OF, DEFAULT_MAX_LINE_BYTES)
    assert (summary["landing_files"], summary["records_read"], summary["landing_read"]) == (1, 300, "splits")


@pytest.mark.spark
def test_a_file_read_again_for_its_later_records_does_not_quarantine_its_long_line_twice(spark, tmp_path):
    cap = 2048
    landing = tmp_path / "landing"
    (landing / HOUR).mkdir(parents=True)
    lines = [_record("now"), "w" * cap, _record("later", failed_at="2026-11-21T03:30:00Z"), "{late"]
    (landing / HOUR / "f.jsonl").write_text("\n".join(lines) + "\n")
    wh = tmp_path / "wh"
    first = _cycle(spark, landing, wh, AS_OF, cap)
    assert first["deferred_until_later_as_of"] == 1
    assert first["quarantined"] == 2
    second = _cycle(spark, landing, wh, "2026-11-21T04:00:00Z", cap)
    assert second["quarantined"] == 0
    assert all(second["conservation"].values())
    assert sorted(_quarantine(wh)) == [("f.jsonl", 2), ("f.jsonl", 4)]


@pytest.mark.spark
def test_a_cycle_with_no_long_line_is_unchanged_by_the_maximum(spark, tmp_path):
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=200, hours=2, seed=5, malformed=3))
    small = _cycle(spark, landing, tmp_path / "a", AS_OF, 2048)
    default = _cycle(spark, landing, tmp_path / "b", AS_OF, DEFAULT_MAX_LINE_BYTES)
    keep = ("records_read", "ingested", "quarantined", "new_messages", "due", "delivered", "rescheduled", "states")
    assert {k: small[k] for k in keep} == {k: default[k] for k in keep}
    assert _quarantine(tmp_path / "a") == _quarantine(tmp_path / "b")


@pytest.mark.spark
def test_a_deployments_cap_on_input_partitions_does_not_pack_whole_files_together(spark, tmp_path):
    """``spark.sql.files.maxPartitionNum`` makes Spark pack files into at most that many partitions, whatever the
    open cost: read whole, a file's records are numbered by their place in its partition, so three files in one
    partition numbered their bad lines 2, 5 and 8. The landing read unsets it, and puts it back after."""
    landing = tmp_path / "landing"
    (landing / HOUR).mkdir(parents=True)
    for name in ("a", "b", "c"):
        (landing / HOUR / f"{name}.jsonl").write_text(f"{_record(name + '-1')}\nnot json\n{_record(name + '-3')}\n")
    with restoring_conf(spark, contract.MAX_PARTITION_NUM):
        spark.conf.set(contract.MAX_PARTITION_NUM, "1")
        summary = _cycle(spark, landing, tmp_path / "wh", AS_OF, DEFAULT_MAX_LINE_BYTES)
        assert spark.conf.get(contract.MAX_PARTITION_NUM) == "1"
    assert summary["landing_read"] == "whole_files"
    assert {k: v[0] for k, v in _quarantine(tmp_path / "wh").items()} == {
        (f"{name}.jsonl", 2): contract.MALFORMED_JSON for name in "abc"}


@pytest.mark.spark
def test_a_line_of_two_gib_stops_the_run_with_the_file_named_and_nothing_committed(spark, tmp_path):
    """Hadoop's reader counts a line in an int: it can neither read nor skip 2 GiB without a line end. The run
    names the file instead of a Java stack trace. (A sparse file: 2 GiB of NUL bytes that take no disk.)"""
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=20, hours=1, seed=3))
    huge = landing / HOUR / "huge.jsonl"
    with huge.open("wb") as fh:
        fh.truncate((2 << 30) + 4096)
    wh = tmp_path / "wh"
    with pytest.raises(ContractError, match=f"landing file {huge} holds a line of 2 GiB or more"):
        _cycle(spark, landing, wh, AS_OF, DEFAULT_MAX_LINE_BYTES)
    assert Warehouse(wh).latest().version == 0
