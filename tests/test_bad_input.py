"""The bad-input corpus (tests/data/bad/, its README lists every kind): each bad record or file is quarantined
with its file, record number, reason code and a reason, every bad policy file is refused with a ConfigError
naming file and key before Spark starts, and the good records next to the bad ones reach the ledger.

One landing folder holds every record and file kind and ONE cycle runs over it (a module fixture); the tests
then read its outputs. Kinds that cannot share that batch (they would fail the whole run today, or change how
the batch's other Parquet files are read) live in ``isolated/`` and are checked below the cycle level.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest

from reprocess.errors import ConfigError
from reprocess.landing.manifest import list_landing, partition_problem
from reprocess.policy import load_policies

CORPUS = Path(__file__).resolve().parent / "data" / "bad"
AS_OF = "2026-11-21T10:05:00Z"
HOUR = "dt=2026-11-21/hour=10"
# Files that must sit in a partition folder that is not a real date or hour.
PLACED = {"bad_partition_date.jsonl": "dt=2026-02-30/hour=10", "bad_partition_hour.jsonl": "dt=2026-11-21/hour=24"}
BIG = "payload_10mb.jsonl"  # written by the fixture: 10 MiB is not for the repository
COMBINED = "records.jsonl"  # the record kinds, one after the other (see _build_landing)
# Record kinds whose point is the file itself: they stay a landing file of their own.
OWN_FILE = ("utf8_bom.jsonl",  # a byte order mark is only one at the start of a file
            "truncated_json.jsonl")  # the writer died mid-record: the file ends without a newline
BIG_PAYLOAD_BYTES = 10 << 20


def _ms(iso: str) -> int:
    from reprocess.cli import parse_instant

    return parse_instant(iso)


# -- expected outcomes ------------------------------------------------------------------------------------------
# (file, record number (None: the whole file), reason code, a fragment the reason must contain)
QUARANTINED = [
    ("malformed_json.jsonl", 2, "MALFORMED_JSON", "not valid JSON"),
    ("truncated_json.jsonl", 2, "MALFORMED_JSON", "not valid JSON"),
    ("duplicate_json_keys.jsonl", 2, "MALFORMED_JSON", "not valid JSON"),
    ("not_an_object.jsonl", 2, "NOT_AN_OBJECT", "one JSON object per line"),
    ("missing_message_id.jsonl", 2, "MISSING_FIELD", "'message_id'"),
    ("missing_address.jsonl", 2, "MISSING_FIELD", "'address'"),
    ("missing_payload.jsonl", 2, "MISSING_FIELD", "'payload'"),
    ("missing_failed_at.jsonl", 2, "MISSING_FIELD", "'failed_at'"),
    ("wrong_type_message_id.jsonl", 2, "WRONG_TYPE", "'message_id' must be a string"),
    ("wrong_type_address.jsonl", 2, "WRONG_TYPE", "'address' must be a string"),
    ("wrong_type_payload.jsonl", 2, "WRONG_TYPE", "'payload' must be a string"),
    ("wrong_type_failed_at.jsonl", 2, "WRONG_TYPE", "'failed_at' must be a string"),
    ("wrong_type_headers.jsonl", 2, "WRONG_TYPE", "'headers' must be an object of strings"),
    ("wrong_type_header_value.jsonl", 2, "WRONG_TYPE", "'headers' must be an object of strings"),
    ("wrong_type_delivery_count.jsonl", 2, "INVALID_DELIVERY_COUNT", "'delivery_count' must be an integer"),
    ("wrong_type_error_class.jsonl", 2, "WRONG_TYPE", "'error_class' must be a string"),
    ("wrong_type_error_message.jsonl", 2, "WRONG_TYPE", "'error_message' must be a string"),
    ("wrong_type_consumer_group.jsonl", 2, "WRONG_TYPE", "'consumer_group' must be a string"),
    ("wrong_type_ordering_key.jsonl", 2, "WRONG_TYPE", "'ordering_key' must be a string"),
    ("delivery_count_zero.jsonl", 2, "INVALID_DELIVERY_COUNT", "must be >= 1"),
    ("delivery_count_fraction.jsonl", 2, "INVALID_DELIVERY_COUNT", "must be an integer"),
    ("delivery_count_overflow.jsonl", 2, "INVALID_DELIVERY_COUNT", "must be at most 2147483647"),
    ("empty_message_id.jsonl", 2, "EMPTY_MESSAGE_ID", "'message_id' is empty"),
    ("timestamp_without_offset.jsonl", 2, "INVALID_TIMESTAMP", "with an offset"),
    ("timestamp_date_only.jsonl", 2, "INVALID_TIMESTAMP", "with an offset"),
    ("timestamp_impossible_date.jsonl", 2, "INVALID_TIMESTAMP", "2026-02-30T10:00:00Z"),
    ("timestamp_far_future.jsonl", 2, "FUTURE_TIMESTAMP", "after the as-of"),
    ("nul_byte_raw.jsonl", 2, "MALFORMED_JSON", "not valid JSON"),
    ("nul_escaped_message_id.jsonl", 2, "CONTROL_CHARACTER", "control characters"),
    ("control_char_address.jsonl", 2, "CONTROL_CHARACTER", "control characters"),
    ("address_double_dot.jsonl", 2, "INVALID_ADDRESS", '"orders..created"'),
    ("address_path_traversal.jsonl", 2, "INVALID_ADDRESS", '"../../etc/passwd"'),
    ("address_slash.jsonl", 2, "INVALID_ADDRESS", '"orders/created"'),
    ("address_backslash.jsonl", 2, "INVALID_ADDRESS", "is not dot-separated words"),
    ("address_space.jsonl", 2, "INVALID_ADDRESS", '"orders created"'),
    ("address_empty.jsonl", 2, "INVALID_ADDRESS", '[""]'),
    # Java's '$' matched before a final line terminator the control-character check does not catch
    ("address_line_separator.jsonl", 2, "INVALID_ADDRESS", "is not dot-separated words"),
    ("address_next_line.jsonl", 2, "INVALID_ADDRESS", "is not dot-separated words"),
    ("unknown_address.jsonl", 2, "UNKNOWN_ADDRESS", 'no policy matches address ["nobody.listens"]'),
    ("blank_lines.jsonl", 4, "MALFORMED_JSON", "not valid JSON"),  # blank lines count as lines, not records
    ("crlf_line_endings.jsonl", 2, "MISSING_FIELD", "'payload'"),
    (BIG, 2, "PAYLOAD_TOO_LARGE", f"payload is {BIG_PAYLOAD_BYTES} bytes, above the limit of 1048576"),
    ("gzip_bad_record.jsonl.gz", 2, "MALFORMED_JSON", "not valid JSON"),
    ("parquet_wrong_type.parquet", 2, "WRONG_TYPE", "'headers' must be an object of strings"),
    ("parquet_missing_field.parquet", 2, "MISSING_FIELD", "'payload'"),
    ("truncated.jsonl.gz", None, "CORRUPT_FILE", "cannot decompress"),
    ("not_gzip.jsonl.gz", None, "CORRUPT_FILE", "cannot decompress"),
    ("corrupt.parquet", None, "CORRUPT_FILE", "not a readable Parquet file"),
    ("truncated.parquet", None, "CORRUPT_FILE", "not a readable Parquet file"),
    ("brotli.parquet", None, "CORRUPT_FILE", "compressed with BROTLI, which Spark cannot decompress here"),
    ("damaged_page.parquet", None, "CORRUPT_FILE", "not a readable Parquet file"),
    ("gzip_zero_padded.jsonl.gz", None, "CORRUPT_FILE", "cannot decompress"),
    ("bad_partition_date.jsonl", None, "CORRUPT_FILE", "dt=2026-02-30/hour=10, which is not a real date and hour"),
    ("bad_partition_hour.jsonl", None, "CORRUPT_FILE", "dt=2026-11-21/hour=24, which is not a real date and hour"),
]
# Kinds the contract missed until the corpus found them (invalid bytes, two values on a line, JSON null).
FOUND_BY_THE_CORPUS = [
    pytest.param("invalid_utf8.jsonl", 2, "INVALID_UTF8", "not valid UTF-8"),
    pytest.param("concatenated_records.jsonl", 2, "MALFORMED_JSON", "not valid JSON"),
    pytest.param("trailing_garbage.jsonl", 2, "MALFORMED_JSON", "not valid JSON"),
    pytest.param("null_required_field.jsonl", 2, "MISSING_FIELD", "'payload' is missing or null"),
]
# Files that hold no record at all: read, marked done, nothing quarantined, nothing ingested.
EMPTY_FILES = ["empty.jsonl", "empty.jsonl.gz", "empty.parquet", "whitespace_only.jsonl", "gzip_empty_member.jsonl.gz"]
# Legal addresses that Spark must escape in the dlq/address=... partition folder, by message id.
ESCAPED_ADDRESSES = {
    "dlq-equals": "weird.k=v",
    "dlq-percent": "weird.100%",
    "dlq-pre-escaped": "weird.a%2Fb",
    "dlq-reserved": "weird.a:b?c*d#e[f]g^h'i\"j{k}",
    "dlq-unicode": "weird.bestellung.größe.注文",
}


# -- the one run -------------------------------------------------------------------------------------------------
def _ok(kind: str) -> dict:
    return {"message_id": f"ok-{kind}", "address": "orders.created", "payload": "{}",
            "failed_at": "2026-11-21T10:00:00Z"}


def _build_landing(root: Path) -> dict[tuple[str, int], tuple[str, int]]:
    """The landing folder of the run; returns where each corpus line landed: (corpus file, line) -> (landing file,
    line).

    The record kinds are one landing file, ``records.jsonl``, line after line (a landing file is one Spark task in
    every step of a cycle: 50 files of two lines would triple the cycle's time), except those whose point is the
    file itself (OWN_FILE). Whole-file kinds and the 10 MB payload are files of their own.
    """
    where: dict[tuple[str, int], tuple[str, int]] = {}
    combined = bytearray()
    n = 0
    for f in sorted((CORPUS / "records").iterdir()):
        lines = f.read_bytes().splitlines(keepends=True)  # \n, \r\n: the line ends Spark's text reader knows
        if f.name in OWN_FILE:
            where |= {(f.name, i): (f.name, i) for i in range(1, len(lines) + 1)}
            continue
        for i, line in enumerate(lines, 1):
            combined += line if line.endswith(b"\n") else line + b"\n"
            n += 1
            where[(f.name, i)] = (COMBINED, n)
    (root / HOUR).mkdir(parents=True)
    (root / HOUR / COMBINED).write_bytes(bytes(combined))
    for f in [*sorted((CORPUS / "files").iterdir()), *[CORPUS / "records" / name for name in OWN_FILE]]:
        dest = root / PLACED.get(f.name, HOUR) / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest)
    big = {**_ok("x"), "message_id": "bad-payload_10mb", "payload": "x" * BIG_PAYLOAD_BYTES}
    (root / HOUR / BIG).write_text(json.dumps(_ok("payload_10mb")) + "\n" + json.dumps(big) + "\n", encoding="utf-8")
    return where


@pytest.fixture(scope="module")
def landed(spark, tmp_path_factory):
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.storage.read import read_dataset

    tmp = tmp_path_factory.mktemp("bad_input")
    where = _build_landing(tmp / "landing")
    origin = {v: k for k, v in where.items()}
    summary = run_cycle(spark, CycleOptions(
        landing=str(tmp / "landing"), warehouse=str(tmp / "wh"), policies=load_policies(CORPUS / "policies.yaml"),
        as_of_ms=_ms(AS_OF), target="python:reprocess.targets.examples:always_fail"))
    rows = read_dataset(spark, str(tmp / "wh"), "quarantine").collect()
    # keyed by where the record is in the corpus: (corpus file, line)
    quarantine = {}
    for r in rows:
        landing_key = (Path(r.source_file).name, r.record_no)
        quarantine[origin.get(landing_key, landing_key)] = r
    assert len(quarantine) == len(rows), "one quarantine row per file and record"
    ledger = {r.message_id: r.asDict(recursive=True) for r in read_dataset(spark, str(tmp / "wh"), "ledger").collect()}
    dlq = read_dataset(spark, str(tmp / "wh"), "dlq").collect()
    return SimpleNamespace(summary=summary, quarantine=quarantine, ledger=ledger, dlq=dlq, root=tmp, where=where,
                           landing=tmp / "landing", wh=tmp / "wh")


def _landed_path(landed, name: str) -> Path:
    """The landing file a corpus file's records are in."""
    name = landed.where.get((name, 1), (name, 1))[0]
    return (landed.landing / PLACED.get(name, HOUR) / name).resolve()


def _corpus_file(name: str) -> Path:
    return next(p for d in ("records", "files") if (p := CORPUS / d / name).exists())


def _line(path: Path, n: int) -> str:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.splitlines()[n - 1].decode("utf-8", "replace")  # as Spark hands invalid bytes to Python


def _good_ids(folder: Path) -> set[str]:
    """The message ids of the corpus's good records (``ok-...``) in every file Python can read."""
    ids: set[str] = set()
    for f in folder.iterdir():
        if f.suffix == ".parquet":
            try:
                ids |= {r["message_id"] for r in pq.read_table(f).to_pylist()}
            except (OSError, ValueError):  # the corrupt Parquet files of the corpus: quarantined whole
                pass
            continue
        try:
            data = gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes()
        except (OSError, EOFError):
            continue  # a truncated or fake gzip: quarantined whole
        for raw in data.splitlines():
            try:
                ids.add(json.loads(raw)["message_id"])
            except (ValueError, KeyError, TypeError):
                continue
    return {i for i in ids if isinstance(i, str) and i.startswith("ok-")}


# -- record and file kinds ---------------------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.parametrize(("name", "record_no", "code", "fragment"), [*QUARANTINED, *FOUND_BY_THE_CORPUS])
def test_bad_record_or_file_is_quarantined_naming_file_record_and_reason(landed, name, record_no, code, fragment):
    row = landed.quarantine.get((name, record_no))
    assert row is not None, f"no quarantine row for {name} record {record_no}"
    landing_name, landing_no = landed.where.get((name, record_no), (name, record_no))
    assert row.source_file == str(_landed_path(landed, name))  # the landing file, by its full path
    assert (Path(row.source_file).name, row.record_no, row.reason_code) == (landing_name, landing_no, code)
    assert fragment in row.reason
    assert row.run_id == landed.summary["run_id"]
    if record_no is not None and name.endswith((".jsonl", ".jsonl.gz")) and name != BIG:
        assert row.raw == _line(_corpus_file(name), record_no)  # the line kept as it was
    if row.message_id is not None:
        assert row.message_id not in landed.ledger


@pytest.mark.spark
def test_nothing_but_the_listed_kinds_is_quarantined(landed):
    expected = {(n, r) for n, r, _, _ in QUARANTINED} | {tuple(p.values[:2]) for p in FOUND_BY_THE_CORPUS}
    assert set(landed.quarantine) == expected
    assert landed.summary["quarantined"] == len(landed.quarantine)
    assert sorted(c["file"] for c in landed.summary["corrupt_files"]) == sorted(
        str(_landed_path(landed, n)) for n, r, _, _ in QUARANTINED if r is None)


@pytest.mark.spark
def test_every_good_record_next_to_a_bad_one_reaches_the_ledger(landed):
    good = _good_ids(CORPUS / "records") | _good_ids(CORPUS / "files") | {"ok-payload_10mb"}
    assert len(good) >= 60
    assert good - set(landed.ledger) == set()
    assert {landed.ledger[i]["state"] for i in good} == {"WAITING_RETRY"}


@pytest.mark.spark
def test_the_run_balances_and_passes_its_gx_suites(landed):
    s = landed.summary
    assert all(s["conservation"].values()), s["conservation"]
    assert s["validation"]["passed"]
    assert s["landing_files"] == len([f for f in landed.landing.rglob("*") if f.is_file()])


@pytest.mark.spark
def test_generated_code_gives_the_interpreted_outcome_record_for_record(spark, landed, tmp_path, monkeypatch):
    """The corpus's cycle ran interpreted, as every cycle below ``INTERPRETED_BELOW_BYTES`` of input does; larger
    ones run generated code. The same landing run with generated code quarantines, ledgers and dead-letters the
    same, record for record."""
    from reprocess import sparkutil

    size = sum(f.stat().st_size for f in landed.landing.rglob("*") if f.is_file())
    assert size < sparkutil.INTERPRETED_BELOW_BYTES  # the fixture's run was the interpreted one
    monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_BYTES", 0)
    summary = _run_again(spark, landed, tmp_path / "wh")
    assert (landed.summary["codegen"], summary["codegen"]) == ("interpreted", "generated")
    _same_outcome(spark, landed, tmp_path / "wh", summary, "codegen")


@pytest.mark.spark
def test_the_expressions_alone_give_the_jvm_parsers_outcome_record_for_record(spark, landed, tmp_path, monkeypatch):
    """The corpus's cycle checked the structure of its well-formed lines in the JVM (docs/adr/0006); without the JVM
    parser (no jar) the expressions alone quarantine, ledger and dead-letter the same, record for record."""
    from reprocess.cycle import landing_batch

    monkeypatch.setattr(landing_batch, "use_jvm_parser", lambda spark: False)
    summary = _run_again(spark, landed, tmp_path / "wh")
    assert (landed.summary["landing_parser"], summary["landing_parser"]) == ("jvm", "expressions")
    _same_outcome(spark, landed, tmp_path / "wh", summary, "landing_parser")


def _run_again(spark, landed, wh: Path) -> dict:
    """The corpus's cycle once more, into ``wh``; its summary."""
    from reprocess.cycle.run import CycleOptions, run_cycle

    return run_cycle(spark, CycleOptions(
        landing=str(landed.landing), warehouse=str(wh), policies=load_policies(CORPUS / "policies.yaml"),
        as_of_ms=_ms(AS_OF), target="python:reprocess.targets.examples:always_fail"))


def _same_outcome(spark, landed, wh: Path, summary: dict, differs: str) -> None:
    """The run into ``wh`` (its ``summary``) quarantined, ledgered and dead-lettered what the corpus's run did, and
    its summary is the same but for timings and the ``differs`` key."""
    from reprocess.storage.read import read_dataset

    volatile = ("elapsed_s", "step_seconds", "validation", differs)
    assert {k: v for k, v in summary.items() if k not in volatile} == \
        {k: v for k, v in landed.summary.items() if k not in volatile}
    quarantine = {(r.source_file, r.record_no): (r.reason_code, r.reason, r.raw, r.message_id, r.expectations)
                  for r in read_dataset(spark, str(wh), "quarantine").collect()}
    assert quarantine == {(r.source_file, r.record_no): (r.reason_code, r.reason, r.raw, r.message_id, r.expectations)
                          for r in landed.quarantine.values()}
    ledger = {r.message_id: r.asDict(recursive=True) for r in read_dataset(spark, str(wh), "ledger").collect()}
    assert ledger == landed.ledger

    def rows(dlq: list) -> list[str]:
        return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in dlq)

    assert rows(read_dataset(spark, str(wh), "dlq").collect()) == rows(landed.dlq)


@pytest.mark.spark
def test_files_without_records_are_read_once_and_quarantine_nothing(landed):
    from reprocess.landing.manifest import read_manifest
    from reprocess.storage.commit import Warehouse

    manifest = read_manifest(Warehouse(str(landed.wh)).live_files("manifest"))
    for name in EMPTY_FILES:
        entry = manifest[str(_landed_path(landed, name))]
        assert entry.done, name
        assert not [k for k in landed.quarantine if k[0] == name]
    # corrupt files and files in impossible partitions are done too: quarantined whole, never read again
    for name, record_no, _, _ in QUARANTINED:
        if record_no is None:
            assert manifest[str(_landed_path(landed, name))].done, name


@pytest.mark.spark
def test_a_record_failed_later_than_the_as_of_waits_for_its_run_and_is_not_quarantined(landed):
    assert "later" not in landed.ledger
    assert not [k for k in landed.quarantine if k[0] == "timestamp_after_as_of.jsonl"]
    assert landed.summary["deferred_until_later_as_of"] == 1


@pytest.mark.spark
def test_a_landing_uri_is_listed_checked_and_read_through_hadoop_with_the_same_outcome(spark, landed):
    """A landing root given as a URI of a Hadoop filesystem (``s3a://``, ``gs://``... in production) is listed,
    checked for corrupt files and read in the JVM. Here ``viewfs://`` mounts the corpus's landing folder: Python
    cannot open a ``viewfs`` path, so a step that still assumed a local disk would fail or lose the file."""
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.landing.manifest import pending, read_manifest
    from reprocess.orchestration import find_new_landing
    from reprocess.storage.commit import Warehouse
    from reprocess.storage.read import read_dataset

    authority = f"lake-{landed.root.name.replace('_', '-')}"  # a mount table of its own: Hadoop caches filesystems
    spark.sparkContext._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{authority}.link./landing",
                                                      landed.landing.resolve().as_uri())
    uri = f"viewfs://{authority}/landing"
    wh = landed.root / "wh-uri"
    summary = run_cycle(spark, CycleOptions(
        landing=uri, warehouse=str(wh), policies=load_policies(CORPUS / "policies.yaml"), as_of_ms=_ms(AS_OF),
        target="python:reprocess.targets.examples:always_fail"))

    local_root = f"{landed.landing.resolve()}/"
    listed = {"uri": [(f.path.removeprefix(f"{uri}/"), f.size, f.hour_start_ms, f.fmt)
                      for f in list_landing(uri, _ms(AS_OF), spark)],
              "local": [(f.path.removeprefix(local_root), f.size, f.hour_start_ms, f.fmt)
                        for f in list_landing(landed.landing, _ms(AS_OF))]}
    assert listed["uri"] == listed["local"]  # the same files, sizes, hours and formats, in the same order
    rows = read_dataset(spark, str(wh), "quarantine").collect()
    assert rows
    assert all(r.source_file.startswith(f"{uri}/") for r in rows)  # files are named by their URI
    got = {(r.source_file.removeprefix(f"{uri}/"), r.record_no, r.reason_code): r.reason for r in rows}
    want = {(r.source_file.removeprefix(local_root), r.record_no, r.reason_code): r.reason
            for r in landed.quarantine.values()}
    assert set(got) == set(want)
    for key, reason in got.items():
        if key[1] is None:  # a whole file: the JVM words why it cannot be read, under the same heading
            assert reason.split(":")[0] == want[key].split(":")[0], (key, reason, want[key])
        else:
            assert reason == want[key], key
    ledger = {r.message_id: r.asDict(recursive=True) for r in read_dataset(spark, str(wh), "ledger").collect()}
    assert ledger == landed.ledger
    assert summary["balance"] == landed.summary["balance"]
    assert summary["landing_files"] == landed.summary["landing_files"]
    assert all(summary["conservation"].values())
    assert summary["validation"]["passed"]

    # the manifest keys the files by URI: listed again, the files left pending are the local run's, no more
    later = _ms("2026-11-21T12:00:00Z")
    manifest = read_manifest(Warehouse(str(wh)).live_files("manifest"))
    again, changed = pending(list_landing(uri, later, spark), manifest)
    local_manifest = read_manifest(Warehouse(str(landed.wh)).live_files("manifest"))
    local, _ = pending(list_landing(landed.landing, later), local_manifest)
    assert [f.path.removeprefix(f"{uri}/") for f in again] == [f.path.removeprefix(local_root) for f in local]
    assert len(again) == 1  # records.jsonl: its record that failed after the as-of waits for a later run
    assert changed == []
    # without Spark there is no Hadoop filesystem to list it: the CLI's and the DAG's checks say so
    with pytest.raises(ConfigError, match="viewfs:// URI"):
        list_landing(uri, _ms(AS_OF))
    assert find_new_landing(uri, str(wh), AS_OF)["listed_by"] == "the Spark job (landing on viewfs://)"


@pytest.mark.spark
def test_a_landing_uri_without_authority_a_missing_uri_root_and_io_errors_that_are_no_corruption(spark, tmp_path):
    """Hadoop names the files of a filesystem without an authority ``viewfs:/x/...`` (one slash): they are still
    remote. A URI root that does not exist fails the run (nothing else checks it). An I/O error that is not a
    decoding error (here the file is gone since the listing; on a bucket a timeout or throttling) fails the run
    too, to be retried, instead of quarantining the file for good."""
    from py4j.protocol import Py4JJavaError

    from reprocess.cycle.landing_batch import read_batch
    from reprocess.landing import contract
    from reprocess.storage.hadoop_fs import session_fs
    from reprocess.uris import remote_scheme

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.viewfs.impl.disable.cache", "true")  # the default mount table gains a link per test
    name = tmp_path.name.replace("_", "-")
    conf.set(f"fs.viewfs.mounttable.default.link./{name}", (tmp_path / "landing").as_uri())
    folder = tmp_path / "landing" / HOUR
    folder.mkdir(parents=True)
    good = gzip.compress((json.dumps(_ok("uri")) + "\n").encode())
    (folder / "good.jsonl.gz").write_bytes(good)
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF  # a byte of the deflate body: the CRC or the inflater refuses it
    (folder / "flipped.jsonl.gz").write_bytes(bytes(flipped))
    (folder / "nested").mkdir()  # files deeper or shallower than dt=/hour=/file are not landing files
    (folder / "nested" / "deep.jsonl").write_text("{}\n")
    (tmp_path / "landing" / "top.jsonl").write_text("{}\n")

    files = list_landing(f"viewfs:///{name}", _ms(AS_OF), spark)
    assert [f.path for f in files] == [f"viewfs:/{name}/{HOUR}/{n}.jsonl.gz" for n in ("flipped", "good")]
    assert {remote_scheme(f.path) for f in files} == {"viewfs"}
    batch = read_batch(spark, files, {}, _ms(AS_OF), contract.DEFAULT_MAX_PAYLOAD_BYTES, contract.DEFAULT_MAX_FUTURE_MS)
    assert [path for path, _ in batch.corrupt] == [files[0].path]
    assert batch.corrupt[0][1].startswith("cannot decompress: java.io.IOException")
    rows = batch.records.select("source_file", "record_no", "is_new_file", "message_id").collect()
    assert [tuple(r) for r in rows] == [(files[1].path, 1, True, "ok-uri")]  # the manifest window joined

    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        session_fs(spark).decode_problem(f"viewfs:/{name}/{HOUR}/gone.jsonl.gz", "text")
    with pytest.raises(FileNotFoundError):  # read's "absent", as status and stamps take it
        session_fs(spark).read(f"viewfs:/{name}/{HOUR}/gone.jsonl.gz")
    assert session_fs(spark).stamps([f"viewfs:/{name}/{HOUR}/gone.jsonl.gz"]) == {
        f"viewfs:/{name}/{HOUR}/gone.jsonl.gz": None}
    with pytest.raises(ConfigError, match=f"landing root viewfs:///{name}/nowhere does not exist"):
        list_landing(f"viewfs:///{name}/nowhere", _ms(AS_OF), spark)


@pytest.mark.unit
def test_a_local_gz_or_parquet_file_the_filesystem_cannot_read_fails_the_run_and_is_not_quarantined(tmp_path,
                                                                                                   monkeypatch):
    """The check of a local ``.gz`` or Parquet file took any error for corruption: a file gone since the listing,
    one this user may not read, an I/O error quarantined the file whole, the manifest marked it done, and its
    messages were never read. Such an error is the filesystem's: it fails the run (nothing committed), to be retried,
    as the JVM's check of a file at a URI already did. Bytes that do not decode are still the file's."""
    import pyarrow as pa

    from reprocess.cycle import landing_batch

    folder = tmp_path / HOUR
    folder.mkdir(parents=True)
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(json.dumps(_ok("gz")).encode() + b"\n"))
    pq.write_table(pa.Table.from_pylist([_ok("pq")]), folder / "b.parquet")
    files = list_landing(tmp_path, _ms(AS_OF))
    assert [Path(f.path).name for f in files] == ["a.jsonl.gz", "b.parquet"]
    assert [landing_batch._decode_problem(None, f)[0] for f in files] == [None, None]
    for f in files:
        Path(f.path).unlink()  # gone since the listing
        with pytest.raises(FileNotFoundError):
            landing_batch._decode_problem(None, f)

    def refused(path, *args):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(landing_batch, "local_chunks", refused)  # as root, no mode refuses: the OS's answer
    with pytest.raises(PermissionError):
        landing_batch._decode_problem(None, files[0])
    monkeypatch.undo()
    pq.write_table(pa.Table.from_pylist([_ok("pq")]), files[1].path)

    def out_of_memory(self, *args, **kwargs):
        raise MemoryError  # a row group larger than the driver's memory: the run fails, the file is not quarantined

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", out_of_memory)
    with pytest.raises(MemoryError, match="checking the landing file .*b.parquet"):
        landing_batch._decode_problem(None, files[1])
    monkeypatch.undo()
    for f, data in zip(files, (b"\x1f\x8b\x08\x00" + b"y" * 50, b"PAR1" + b"x" * 100 + b"PAR1"), strict=True):
        Path(f.path).write_bytes(data)
    problems = [landing_batch._decode_problem(None, f)[0] for f in files]
    assert problems[0].startswith("cannot decompress: ")
    assert problems[1].startswith("not a readable Parquet file: ")


def test_a_local_landing_root_that_does_not_exist_fails_the_run_as_a_uri_does(tmp_path, monkeypatch):
    """A mistyped local --landing was a warning, and `reprocess run` made green runs that read nothing (the DAG's
    find_new_landing already failed on it)."""
    with pytest.raises(ConfigError, match=f"landing root {tmp_path / 'nowhere'} does not exist"):
        list_landing(tmp_path / "nowhere", _ms(AS_OF))
    (tmp_path / "there").mkdir()
    assert list_landing(tmp_path / "there", _ms(AS_OF)) == []
    # not "does not exist" when it does: a file, or a folder this user may not read (root reads any: as nobody)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="landing root .*/file is not a folder"):
        list_landing(tmp_path / "file", _ms(AS_OF))
    # a folder this user may not enter (the tests run as root, whom no mode stops: the refusal is the OS's answer)
    from reprocess.landing import manifest

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(manifest.os, "scandir", refused)
    with pytest.raises(ConfigError, match="landing root .*/there cannot be read by this user \\(Permission denied\\)"):
        list_landing(tmp_path / "there", _ms(AS_OF))


# -- legal but unusual -------------------------------------------------------------------------------------------
@pytest.mark.spark
def test_addresses_with_equals_percent_reserved_characters_or_unicode_stay_one_escaped_dlq_partition(landed):
    got = {r.message_id: (r.address, r.original_address, r.reason_code) for r in landed.dlq}
    for mid, address in ESCAPED_ADDRESSES.items():
        assert got[mid] == (address, address, "NON_RETRYABLE")  # read back exactly
    dlq_root = (landed.wh / "dlq").resolve()
    partitions = sorted(p for p in dlq_root.iterdir() if p.is_dir())
    for part in partitions:
        key, _, value = part.name.partition("=")
        assert key == "address"
        assert "=" not in value  # '=' and '/' are escaped inside the one folder name
        assert "/" not in value
        assert [d.name.startswith("dt=") for d in part.iterdir()] == [True]
    names = {unquote(p.name.partition("=")[2]) for p in partitions}
    assert names == {*ESCAPED_ADDRESSES.values(), "orders.created"}
    assert dlq_root / "address=weird.k%3Dv" in partitions
    assert dlq_root / "address=weird.100%25" in partitions
    assert dlq_root / "address=weird.a%252Fb" in partitions
    assert dlq_root / "address=weird.bestellung.größe.注文" in partitions  # Spark leaves non-ASCII letters alone
    for f in landed.wh.rglob("*"):  # no address made a folder anywhere else, nor left the warehouse
        assert f.resolve().is_relative_to(landed.wh.resolve())
        assert f.name not in ("passwd", "etc", "..", "v", "b")


@pytest.mark.spark
def test_null_optional_fields_mean_absent(landed):
    assert not [k for k in landed.quarantine if k[0] == "null_optional_fields.jsonl"]
    m = landed.ledger["null-optionals"]
    assert (m["deliveries"], m["headers"], m["last_error_class"], m["ordering_key"]) == (1, {}, None, None)


@pytest.mark.spark
def test_a_line_of_tabs_is_blank_and_skipped(landed):
    assert not [k for k in landed.quarantine if k[0] == "tab_only_line.jsonl"]


@pytest.mark.spark
def test_a_utf8_byte_order_mark_at_the_start_of_a_file_is_skipped(landed):
    assert landed.ledger["bom-first-record"]["payload"] == '{"order": 2}'
    assert not [k for k in landed.quarantine if k[0] == "utf8_bom.jsonl"]


@pytest.mark.spark
def test_a_nul_character_in_a_payload_is_kept_exactly(landed):
    assert landed.ledger["nul-payload"]["payload"] == "a\x00b"


@pytest.mark.spark
def test_conflicting_duplicates_of_one_id_count_one_delivery_each_in_failed_at_order(landed):
    """ADR 0001: one counter, deliveries; each failure reported is a failed delivery (merge.py: several failures
    of one message in one batch count one delivery each, in failed_at order, whatever the file order)."""
    m = landed.ledger["dup-conflict"]
    assert [(h["delivery"], h["failed_ms"], h["error_class"]) for h in m["error_history"]] == [
        (1, _ms("2026-11-21T10:01:00Z"), "IOError"), (2, _ms("2026-11-21T10:02:00Z"), "TimeoutError")]
    assert (m["deliveries"], m["state"], m["payload"], m["last_error_class"]) == (
        2, "WAITING_RETRY", "second", "TimeoutError")  # the latest failure's payload and error
    assert (m["first_failed_ms"], m["last_failed_ms"]) == (_ms("2026-11-21T10:01:00Z"), _ms("2026-11-21T10:02:00Z"))
    assert m["next_attempt_ms"] == _ms("2026-11-21T10:12:00Z")  # delay(2) = 10m after the last failure
    same = landed.ledger["dup-same-time"]  # same time, different payload: two failures, ordered by fingerprint
    assert [h["delivery"] for h in same["error_history"]] == [1, 2]
    assert same["deliveries"] == 2
    assert landed.ledger["dup-exact"]["deliveries"] == 1  # an exact duplicate counts once
    assert landed.summary["duplicates"] == 1


@pytest.mark.spark
def test_a_message_arriving_past_its_policy_bound_is_dead_lettered_at_the_sources_count(landed):
    """More failures of one id than max_deliveries (3), or delivery_count 50: counting keeps the source's number
    (ADR 0001: the first failure here is k = delivery_count) and the message is dead-lettered at once; the run's
    GX ledger suite must not take that for a bug and fail the whole run."""
    four = landed.ledger["dup-beyond"]
    assert (four["state"], four["deliveries"], four["reason_code"]) == ("DEAD_LETTERED", 4, "MAX_DELIVERIES_EXCEEDED")
    assert [h["delivery"] for h in four["error_history"]] == [1, 2, 3, 4]
    fifty = landed.ledger["dc-beyond"]
    assert (fifty["state"], fifty["deliveries"], fifty["reason_code"]) == (
        "DEAD_LETTERED", 50, "MAX_DELIVERIES_EXCEEDED")
    dlq = {r.message_id: (r.address, r.deliveries) for r in landed.dlq}
    assert (dlq["dup-beyond"], dlq["dc-beyond"]) == (("orders.created", 4), ("orders.created", 50))


# -- kinds that cannot share the batch (isolated/) -----------------------------------------------------------------
def _read_alone(spark, tmp_path, files: dict[str, Path]):
    """Parse ``{landing name: corpus file}`` as the cycle's landing step does, keyed by (name, record number)."""
    from reprocess.cycle.landing_batch import read_batch

    for name, f in files.items():
        dest = tmp_path / "landing" / HOUR / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest)
    listed = list_landing(tmp_path / "landing", _ms(AS_OF))
    batch = read_batch(spark, listed, {}, _ms(AS_OF), 1 << 20, 24 * 3600 * 1000)
    return {(Path(r.source_file).name, r.record_no): r for r in batch.records.collect()}


@pytest.mark.spark
def test_an_address_with_unicode_whitespace_is_an_invalid_address(spark, tmp_path):
    names = ["address_nbsp.jsonl", "address_nel.jsonl"]  # U+00A0 no-break space, U+0085 next line
    rows = _read_alone(spark, tmp_path, {n: CORPUS / "isolated" / n for n in names})
    assert [(rows[(n, 1)].problem, rows[(n, 2)].problem) for n in names] == [(None, "INVALID_ADDRESS")] * 2


@pytest.mark.spark
def test_parquet_files_of_different_schemas_are_each_parsed_with_their_own(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    conflict, extra = CORPUS / "isolated" / "parquet_type_conflict", CORPUS / "isolated" / "parquet_extra_columns"
    metadata = tmp_path / "metadata_column.parquet"
    pq.write_table(pa.table({"message_id": ["m1", "m2"], "address": ["orders.created"] * 2, "payload": ["p", "q"],
                             "failed_at": ["2026-11-21T10:00:00Z"] * 2, "_metadata": ["mine", "mine"]}), metadata)
    rows = _read_alone(spark, tmp_path, {
        "conflict_string_id.parquet": conflict / "a.parquet", "conflict_int_id.parquet": conflict / "b.parquet",
        "extra_plain.parquet": extra / "a.parquet", "extra_more_columns.parquet": extra / "b.parquet",
        "metadata_column.parquet": metadata})
    assert rows[("conflict_string_id.parquet", 1)].problem is None
    assert rows[("conflict_int_id.parquet", 1)].problem == "WRONG_TYPE"
    assert rows[("extra_plain.parquet", 1)].problem is None
    more = rows[("extra_more_columns.parquet", 1)]
    assert (more.problem, more.delivery_count, json.loads(more.extra or "{}")) == (None, 3, {"shard": 7})
    # a column named _metadata hid Spark's file metadata column, and every run stopped on the file: an unknown
    # field, kept as any other
    meta = rows[("metadata_column.parquet", 2)]
    assert (meta.problem, meta.message_id, json.loads(meta.extra or "{}")) == (None, "m2", {"_metadata": "mine"})


@pytest.mark.unit
def test_partition_folders_that_are_no_real_date_or_hour_are_listed_and_named(tmp_path):
    for folder in ("dt=2026-02-30/hour=10", "dt=2026-11-21/hour=24", "dt=2026-11-21/hour=10"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.jsonl").write_text("{}\n")
    listed = {str(Path(f.path).relative_to(tmp_path.resolve())): f for f in list_landing(tmp_path, _ms(AS_OF))}
    assert sorted(listed) == ["dt=2026-02-30/hour=10/a.jsonl", "dt=2026-11-21/hour=10/a.jsonl",
                              "dt=2026-11-21/hour=24/a.jsonl"]
    assert "dt=2026-02-30/hour=10" in (partition_problem(listed["dt=2026-02-30/hour=10/a.jsonl"].path) or "")
    assert "dt=2026-11-21/hour=24" in (partition_problem(listed["dt=2026-11-21/hour=24/a.jsonl"].path) or "")
    assert partition_problem(listed["dt=2026-11-21/hour=10/a.jsonl"].path) is None


@pytest.mark.unit
def test_a_local_landing_lists_the_same_through_any_file_uri_and_skips_symlink_loops(tmp_path):
    hour = tmp_path / "landing" / HOUR
    hour.mkdir(parents=True)
    (hour / "a.jsonl").write_text("{}\n")
    (hour / "loop.jsonl").symlink_to(hour / "loop.jsonl")  # ELOOP when followed
    (tmp_path / "landing" / "dt=2026-11-20").symlink_to(tmp_path / "landing" / "dt=2026-11-20")
    (hour / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    root = tmp_path / "landing"
    want = [(str((hour / "a.jsonl").resolve()), 3)]
    for spelled in (str(root), root.as_uri(), f"file:{root}", f"file://localhost{root}", f"FILE://{root}"):
        assert [(f.path, f.size) for f in list_landing(spelled, _ms(AS_OF))] == want, spelled


@pytest.mark.unit
def test_a_landing_file_linked_into_a_second_hour_is_listed_once_in_its_first(tmp_path, caplog):
    """An hour folder or a file linked to another's (a symlink or a hard link): the listing names files by their
    resolved path, and listed it twice, so a run read each of its records twice (records_read 6 and duplicates 3
    for a file of 3)."""
    landing = tmp_path / "landing"
    day = landing / "dt=2026-11-21"
    (day / "hour=08").mkdir(parents=True)
    (day / "hour=08" / "a.jsonl").write_text("{}\n")
    (day / "hour=09").symlink_to(day / "hour=08")  # the whole hour folder again
    (day / "hour=10").mkdir()
    (day / "hour=10" / "b.jsonl").symlink_to(day / "hour=08" / "a.jsonl")  # one file again
    (day / "hour=10" / "c.jsonl").write_text("{}\n")
    (day / "hour=11").mkdir()
    (day / "hour=11" / "d.jsonl").hardlink_to(day / "hour=10" / "c.jsonl")  # two paths, one file
    with caplog.at_level("WARNING", logger="reprocess.landing.manifest"):
        listed = list_landing(landing, _ms("2026-11-21T12:00:00Z"))
    assert [(Path(f.path).name, f.hour_start_ms) for f in listed] == [
        ("a.jsonl", _ms("2026-11-21T08:00:00Z")), ("c.jsonl", _ms("2026-11-21T10:00:00Z"))]
    assert "dt=2026-11-21/hour=09/a.jsonl (is dt=2026-11-21/hour=08/a.jsonl)" in caplog.text
    assert "dt=2026-11-21/hour=10/b.jsonl (is dt=2026-11-21/hour=08/a.jsonl)" in caplog.text
    assert "dt=2026-11-21/hour=11/d.jsonl (is dt=2026-11-21/hour=10/c.jsonl)" in caplog.text


@pytest.mark.unit
def test_a_file_linked_from_no_real_hour_into_a_real_one_is_read_in_the_real_one(tmp_path):
    """A file kept in a folder that is no real date (quarantined whole) and hard-linked into the right one: the
    folder sorts first, and keeping the first place hid the right one, whose records were then never read."""
    landing = tmp_path / "landing"
    (landing / "dt=2026-02-30" / "hour=10").mkdir(parents=True)
    (landing / "dt=2026-03-01" / "hour=10").mkdir(parents=True)
    (landing / "dt=2026-02-30" / "hour=10" / "x.jsonl").write_text("{}\n")
    (landing / "dt=2026-03-01" / "hour=10" / "x.jsonl").hardlink_to(landing / "dt=2026-02-30" / "hour=10" / "x.jsonl")
    listed = list_landing(landing, _ms("2026-03-01T12:00:00Z"))
    assert [(f.path, f.hour_start_ms) for f in listed] == [
        (str((landing / "dt=2026-03-01" / "hour=10" / "x.jsonl").resolve()), _ms("2026-03-01T10:00:00Z"))]


@pytest.mark.unit
def test_a_landing_root_that_resolves_to_a_path_that_is_not_utf8_fails_the_run(tmp_path):
    """Every file below it would be named with \\xNN and quarantined: green runs that read nothing."""
    import os

    latin = Path(os.fsdecode(bytes(tmp_path) + b"/donn\xe9es"))
    (latin / HOUR).mkdir(parents=True)
    (latin / HOUR / "a.jsonl").write_text("{}\n")
    (tmp_path / "landing").symlink_to(latin)
    with pytest.raises(ConfigError, match="not UTF-8"):
        list_landing(tmp_path / "landing", _ms(AS_OF))


def _the_only_quarantined(spark, tmp_path):
    """A cycle of ``tmp_path / "landing"``, whose one good file holds the message ``ok-good`` and one other file is
    quarantined whole: the cycle's options and that file's quarantine row, once the run balanced and the good
    file's message reached the ledger."""
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.storage.read import read_dataset

    opts = CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"),
                        policies=load_policies(CORPUS / "policies.yaml"), as_of_ms=_ms(AS_OF),
                        target="python:reprocess.targets.examples:always_fail")
    summary = run_cycle(spark, opts)
    assert all(summary["conservation"].values())
    [row] = read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert {r.message_id for r in read_dataset(spark, str(tmp_path / "wh"), "ledger").collect()} == {"ok-good"}
    return opts, row


@pytest.mark.spark
def test_a_linked_hour_folder_that_resolves_to_a_folder_whose_name_is_not_utf8_is_quarantined(spark, tmp_path):
    """Only the file's name and the root were checked: an hour folder linked into a folder written on a Latin-1
    system gave Spark a path with lone surrogates (or its \\xNN form, which names no file), and every run failed."""
    import os

    latin = Path(os.fsdecode(bytes(tmp_path) + b"/donn\xe9es"))
    latin.mkdir()
    (latin / "a.jsonl").write_text(json.dumps(_ok("latin")) + "\n", encoding="utf-8")
    hour = tmp_path / "landing" / HOUR
    hour.parent.mkdir(parents=True)
    hour.symlink_to(latin)
    (tmp_path / "landing" / "dt=2026-11-21" / "hour=09").mkdir()
    (tmp_path / "landing" / "dt=2026-11-21" / "hour=09" / "good.jsonl").write_text(json.dumps(_ok("good")) + "\n")
    _opts, row = _the_only_quarantined(spark, tmp_path)
    assert row.source_file == f"{tmp_path}/donn\\xe9es/a.jsonl"
    assert "the folder it is in, through a link, is not UTF-8" in row.reason


@pytest.mark.spark
def test_a_landing_file_whose_name_is_not_utf8_is_quarantined_whole_and_the_run_goes_on(spark, tmp_path):
    """A name written on a Latin-1 system (bytes 0xe9): Python lists it with lone surrogates, which py4j, Spark
    Connect and pyarrow refuse to encode, so every run failed until someone renamed the file."""
    import os

    from reprocess.cycle.run import CycleOptions, run_cycle

    hour = tmp_path / "landing" / HOUR
    hour.mkdir(parents=True)
    latin = os.fsdecode(bytes(hour) + b"/fail-\xe9t\xe9.jsonl")
    Path(latin).write_text(json.dumps(_ok("latin")) + "\n", encoding="utf-8")
    (hour / "good.jsonl").write_text(json.dumps(_ok("good")) + "\n", encoding="utf-8")
    listed = [f.path for f in list_landing(tmp_path / "landing", _ms(AS_OF))]
    shown = f"{hour.resolve()}/fail-\\xe9t\\xe9.jsonl"
    assert listed == [shown, str((hour / "good.jsonl").resolve())]
    opts, row = _the_only_quarantined(spark, tmp_path)
    assert row.source_file == shown
    assert "not UTF-8" in row.reason
    again = run_cycle(spark, CycleOptions(**{**opts.__dict__, "as_of_ms": _ms(AS_OF) + 3_600_000}))
    assert again["landing_files"] == 0  # done: not quarantined twice


def _hadoop_write(spark, path: Path, data: bytes, bytes_per_checksum: int = 512) -> None:
    """``data`` written to ``path`` through Hadoop's own checksummed local filesystem, which leaves ``.<name>.crc``
    beside it (as Spark, Flink or `hadoop fs -put` writing to ``file:`` do)."""
    jvm = spark._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    conf.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem")
    conf.set("file.bytes-per-checksum", str(bytes_per_checksum))
    fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.java.net.URI("file:///"), conf)
    try:
        out = fs.create(jvm.org.apache.hadoop.fs.Path(f"file://{path}"), True)
        out.write(bytearray(data))
        out.close()
    finally:
        fs.close()


def _hadoop_reads(spark, path: Path) -> bool:
    """Whether Hadoop's checksummed local filesystem reads the whole file without an error (a Java one, which
    py4j raises as Py4JJavaError or PySpark as its own: a chunk size of 0 divides by zero)."""
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    try:
        stream = fs.open(jvm.org.apache.hadoop.fs.Path(f"file://{path}"))
        try:
            stream.transferTo(jvm.java.io.OutputStream.nullOutputStream())
        finally:
            stream.close()
    except Exception:  # noqa: BLE001 - any error of the read is a failed read
        return False
    return True


@pytest.mark.spark
def test_a_landing_file_is_checked_against_its_hadoop_checksums_as_hadoops_read_checks_it(spark, tmp_path):
    """A file and its ``.crc`` sidecar, changed in every way a writer or a disk can change them: the landing's check
    finds a problem exactly where Hadoop's checksummed read throws (and Spark's read of the file with it)."""
    import random

    from reprocess.cycle.landing_batch import _checksum_problem

    rng = random.Random(88)
    data = b"".join(json.dumps(_ok(f"crc-{i}")).encode() + b"\n" for i in range(3))
    data += b"\n" * (-len(data) % 16)  # whole chunks of 16 bytes: an append is all beyond the checksums
    sidecar = lambda f: f.parent / f".{f.name}.crc"  # noqa: E731

    def flip(f, at):
        b = bytearray(f.read_bytes())
        b[at] ^= 0x20
        f.write_bytes(bytes(b))

    changes = {
        "unchanged": lambda f: None,
        "a byte changed": lambda f: flip(f, 40),
        "the last byte changed": lambda f: flip(f, len(data) - 1),
        "appended": lambda f: f.write_bytes(data + b"{}\n"),
        "cut at a chunk's end": lambda f: f.write_bytes(data[:64]),
        "cut inside a chunk": lambda f: f.write_bytes(data[:70]),
        "rewritten, same length": lambda f: f.write_bytes(data.replace(b"crc-", b"CRC-")),
        "emptied": lambda f: f.write_bytes(b""),
        "no sidecar": lambda f: sidecar(f).unlink(),
        "a sidecar that is no checksum file": lambda f: sidecar(f).write_bytes(b"not a checksum file"),
        "a sidecar of 6 bytes": lambda f: sidecar(f).write_bytes(sidecar(f).read_bytes()[:6]),
        "a sidecar cut inside a checksum": lambda f: sidecar(f).write_bytes(sidecar(f).read_bytes()[:-2]),
        "a sidecar one checksum short": lambda f: sidecar(f).write_bytes(sidecar(f).read_bytes()[:-4]),
        "a sidecar with a checksum more": lambda f: sidecar(f).write_bytes(sidecar(f).read_bytes() + b"\0" * 4),
        "a sidecar's checksum changed": lambda f: flip(sidecar(f), 9),
        "a sidecar's chunk size 0": lambda f: sidecar(f).write_bytes(b"crc\0\0\0\0\0" + b"\0" * 40),
    }
    cases = [(name, change, 16) for name, change in changes.items()]
    for n in range(60):  # random cuts, appends and changed bytes, by random chunk sizes
        at = rng.randrange(len(data))
        change = rng.choice([lambda f, at=at: flip(f, at), lambda f, at=at: f.write_bytes(data[:at]),
                             lambda f, at=at: f.write_bytes(data + bytes(at % 7))])
        cases.append((f"random {n}", change, rng.choice([1, 3, 16, 100, 512])))
    verdicts = {}
    for i, (name, change, per_sum) in enumerate(cases):
        f = tmp_path / f"f{i}.jsonl"
        _hadoop_write(spark, f, data, per_sum)
        change(f)
        problem = _checksum_problem(str(f))
        assert (problem is None) == _hadoop_reads(spark, f), (name, per_sum, problem)
        verdicts[name] = problem
    assert [n for n in changes if verdicts[n] is None] == [
        "unchanged", "cut at a chunk's end", "emptied", "no sidecar", "a sidecar that is no checksum file",
        "a sidecar of 6 bytes", "a sidecar with a checksum more"]
    assert "bytes 32 to 48 do not match the checksums Hadoop keeps beside it" in verdicts["a byte changed"]
    assert "the file is longer than the checksums" in verdicts["appended"]


@pytest.mark.spark
def test_a_landing_file_whose_hadoop_checksums_went_stale_is_quarantined_and_the_run_goes_on(spark, tmp_path):
    """A file Hadoop wrote, changed since by a writer that does not keep its ``.crc`` sidecar: Spark's read threw a
    ``ChecksumException``, and every run failed (rc 1) until someone removed the sidecar. It is quarantined whole,
    naming the sidecar; the file beside it, whose checksums match, is read."""

    hour = tmp_path / "landing" / HOUR
    hour.mkdir(parents=True)
    _hadoop_write(spark, hour / "good.jsonl", json.dumps(_ok("good")).encode() + b"\n")
    stale = hour / "stale.jsonl"
    _hadoop_write(spark, stale, json.dumps(_ok("stale")).encode() + b"\n")
    stale.write_bytes(stale.read_bytes() + json.dumps(_ok("appended")).encode() + b"\n")  # by a plain writer
    _opts, row = _the_only_quarantined(spark, tmp_path)
    assert (row.source_file, row.reason_code) == (str(stale.resolve()), "CORRUPT_FILE")
    assert f"do not match the checksums Hadoop keeps beside it in {hour.resolve()}/.stale.jsonl.crc" in row.reason
    assert stale.exists()  # quarantined where it is, never moved or dropped
    assert (hour / ".stale.jsonl.crc").exists()


# -- policy files ------------------------------------------------------------------------------------------------
# file -> (policy, key, a fragment of the message)
CONFIGS = {
    "yaml_syntax_error.yaml": (None, None, "not valid YAML"),
    "not_a_mapping.yaml": (None, None, "the top level must be a mapping"),
    "empty_file.yaml": (None, None, "the top level must be a mapping"),
    "not_utf8.yaml": (None, None, "not UTF-8 text: byte 0xe9"),
    "unknown_top_level_key.yaml": (None, "polices", "unknown top-level key"),
    "empty_policies.yaml": (None, "policies", "must be a non-empty list"),
    "duplicate_key.yaml": (None, "policies", "duplicate key at line 5"),
    "duplicate_settings_key.yaml": ("orders.#", "settings.max_deliveries", "duplicate key at line 7"),
    "duplicate_rule_key.yaml": ("billing.#", "non_retryable[0].error_class", "duplicate key at line 9"),
    "policy_not_a_mapping.yaml": ("#0", None, "each policy must be a mapping"),
    "missing_match.yaml": ("#0", "match", "'match' is required"),
    "unknown_policy_key.yaml": ("orders.#", "retries", "unknown key"),
    "bad_wildcard_mixed.yaml": ("orders.cre*", "match", "wildcard mixed with text"),
    "bad_wildcard_empty_word.yaml": ("orders..#", "match", "empty word"),
    "duplicate_match.yaml": ("orders.#", "match", "duplicate match"),
    "unknown_profile.yaml": ("orders.#", "profile", "got 'kafka'"),
    "settings_not_a_mapping.yaml": ("orders.#", "settings", "must be a mapping"),
    "unknown_settings_key.yaml": ("orders.#", "settings.maximumRedeliverys", "unknown key"),
    "negative_delay.yaml": ("orders.#", "settings.initial_delay", "a duration cannot be negative, got -1000"),
    "negative_duration.yaml": ("orders.#", "settings.delays[1]", "got '-5m'"),
    "wrong_type_setting.yaml": ("orders.#", "settings.maximumRedeliveries", "must be an integer"),
    "zero_max_deliveries.yaml": ("orders.#", "settings.max_deliveries", "got 0"),
    "multiplier_below_one.yaml": ("orders.#", "settings.multiplier", "must be >= 1.0"),
    "max_delay_below_initial.yaml": ("orders.#", "settings.max_delay", "must be >= initial_delay"),
    "jitter_factor_missing.yaml": ("orders.#", "settings.jitter_factor", "is required with jitter: proportional"),
    "bad_delay_level.yaml": ("orders.#", "settings.messageDelayLevel", "bad level '5x'"),
    "empty_default_dla.yaml": (None, "default_dead_letter_address", "must be a non-empty address"),
    "blank_policy_dla.yaml": ("orders.#", "dead_letter_address", "must be a non-empty address"),
    "artemis_blank_dla.yaml": ("billing.*", "settings.dead-letter-address", "must be an address, or \"\" for none"),
    "classic_wildcard.yaml": ("orders.>", "match", "'>' is ActiveMQ Classic's wildcard"),
    "artemis_dla_outside_settings.yaml": ("billing.*", "dead_letter_address", "in settings as 'dead-letter-address'"),
    "ordered_not_boolean.yaml": ("inventory.#", "ordered", "must be true or false"),
    "bad_target.yaml": ("orders.#", "target", "unknown target 'ftp://files.example.com/outbox'"),
    "bad_regex.yaml": (None, "non_retryable[0].error_class", "bad regular expression"),
    "python_only_regex.yaml": ("orders.#", "non_retryable[0].message", "Python-only"),
    "bad_rule.yaml": ("orders.#", "non_retryable[0]", "a rule is a mapping"),
}


@pytest.mark.unit
def test_every_policy_file_of_the_corpus_has_an_expected_error():
    assert sorted(p.name for p in (CORPUS / "configs").iterdir()) == sorted(CONFIGS)


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_policy_file_is_a_config_error_naming_file_policy_and_key(name):
    policy, key, fragment = CONFIGS[name]
    path = CORPUS / "configs" / name
    with pytest.raises(ConfigError) as info:
        load_policies(path)
    err = info.value
    assert (err.file, err.policy, err.key) == (str(path), policy, key)
    assert fragment in str(err)
    assert str(err).startswith(f"[file={path}")
    assert "] [" not in str(err)  # one [file= policy= key=] prefix, not one per layer


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_policy_file_fails_the_run_command_before_spark_starts(name, tmp_path, monkeypatch, capsys):
    from reprocess import cli, sparkutil

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark must not start with a bad policy file")

    monkeypatch.setattr(sparkutil, "build_session", no_spark)
    path = CORPUS / "configs" / name
    rc = cli.main(["run", "--config", str(path), "--landing", str(tmp_path / "landing"),
                   "--warehouse", str(tmp_path / "wh"), "--as-of", AS_OF])
    assert rc == ConfigError.exit_code
    err = capsys.readouterr().err
    assert "configuration error" in err
    assert str(path) in err
    assert not (tmp_path / "wh").exists()


@pytest.mark.unit
def test_the_runs_policy_file_is_valid_and_has_no_default_policy():
    policies = load_policies(CORPUS / "policies.yaml")
    assert policies.resolve("nobody.listens") is None
    assert policies.resolve("weird.k=v") is not None


@pytest.mark.unit
def test_the_corpus_readme_lists_every_kind():
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    names = [p.name for d in ("records", "files", "configs") for p in (CORPUS / d).iterdir()]
    names += [str(p.relative_to(CORPUS / "isolated")) for p in (CORPUS / "isolated").rglob("*") if p.is_file()]
    missing = [n for n in names + [BIG] if f"`{n}`" not in readme]
    assert missing == []


@pytest.mark.unit
def test_landing_entries_outside_the_layout_are_named_in_a_warning_but_for_writers_own(tmp_path, caplog):
    """A consumer that writes hour=5 (not 05) or a.json lost every file, with nothing said. They are still not read
    (they cannot be placed in time, or are not a landing format), but a warning names them; what writers leave on
    purpose (_SUCCESS, .crc, .tmp, hidden files) is not named."""
    import logging

    for rel in ("dt=2026-11-21/hour=10/a.jsonl", "dt=2026-11-21/hour=10/b.json", "dt=2026-11-21/hour=10/_SUCCESS",
                "dt=2026-11-21/hour=10/.a.jsonl.crc", "dt=2026-11-21/hour=10/c.jsonl.tmp",
                "dt=2026-11-21/hour=5/d.jsonl", "2026-11-21/hour=10/e.jsonl", "dt=2026-11-21/_temporary/f.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    with caplog.at_level(logging.WARNING, logger="reprocess.landing.manifest"):
        files = list_landing(tmp_path, _ms(AS_OF))
    assert [Path(f.path).name for f in files] == ["a.jsonl"]
    (line,) = [r.getMessage() for r in caplog.records if "outside the layout" in r.getMessage()]
    assert "count=3 entries=['2026-11-21', 'dt=2026-11-21/hour=10/b.json', 'dt=2026-11-21/hour=5']" in line


_BAD_CODEC = r"""
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from reprocess.cycle.landing_batch import _parquet_problem

path = sys.argv[1]
pq.write_table(pa.table({"message_id": ["a", "b"]}), path, compression="lz4")
data = open(path, "rb").read()
size = int.from_bytes(data[-8:-4], "little")
start = len(data) - 8 - size
footer = data[start:-8]
assert footer.count(b"\x15\x0e") == 1  # field 4 of the column chunk's metadata, the codec: 7 (LZ4_RAW)
at = start + footer.index(b"\x15\x0e")
open(path, "wb").write(data[:at] + b"\x15\x12" + data[at + 2:])  # 9: no codec pyarrow knows
print(_parquet_problem(path))
"""


@pytest.mark.unit
def test_a_parquet_footer_naming_a_codec_number_pyarrow_does_not_know_is_a_corrupt_file_not_an_abort(tmp_path):
    """pyarrow aborts the whole process (a C++ exception it cannot raise in Python) when asked the codec of a column
    chunk whose number it does not know; its footer reads. The check decodes the pages first, which raises, and asks
    the codecs only then. In a subprocess: the failure this guards against kills the process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _BAD_CODEC, str(tmp_path / "bad.parquet")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "not a readable Parquet file: Unsupported compression codec value: 9"
