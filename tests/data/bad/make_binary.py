"""Writes the binary files of the bad-input corpus (gzip, Parquet): ``python tests/data/bad/make_binary.py``.

The text files of the corpus are written by hand; these are generated so that anyone can see what is in
them. The output is deterministic (gzip mtime 0), so re-running it changes nothing a reviewer must read.
The 10 MB payload is not here: tests/test_bad_input.py writes it into the landing folder it builds.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
AT = "2026-11-21T10:00:00Z"


def record(mid: str, **extra: object) -> dict:
    return {"message_id": mid, "address": "orders.created", "payload": "{}", "failed_at": AT, **extra}


def jsonl(*lines: object) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


# Every Parquet file of the one landing batch has this schema (Spark reads a batch's Parquet files with
# one schema: files of another schema are in isolated/).
SCHEMA = pa.schema([("message_id", pa.string()), ("address", pa.string()), ("payload", pa.string()),
                    ("failed_at", pa.string()), ("headers", pa.map_(pa.string(), pa.int64()))])


def parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def damaged_page(path: Path) -> None:
    """A Parquet file whose footer and page headers read, and whose payload page does not decompress (64 bytes of
    its Snappy data flipped): the check of a file at a URI read its footer only, and Spark's read failed every run."""
    rows = [record(f"unreadable-damaged_page-{i}", payload=hashlib.sha256(str(i).encode()).hexdigest(), headers=None)
            for i in range(2000)]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, compression="snappy", use_dictionary=False)
    data = bytearray(path.read_bytes())
    column = pq.ParquetFile(path).metadata.row_group(0).column(SCHEMA.get_field_index("payload"))
    middle = column.data_page_offset + column.total_compressed_size // 2
    for k in range(middle, middle + 64):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))


def main() -> None:
    files = HERE / "files"
    whole_gz = gz(jsonl(*[record(f"unreadable-truncated_gz-{i}") for i in range(40)]))
    (files / "truncated.jsonl.gz").write_bytes(whole_gz[: len(whole_gz) // 2])
    (files / "gzip_bad_record.jsonl.gz").write_bytes(
        gz(jsonl(record("ok-gzip_bad_record"), '{"message_id": "bad-gzip_bad_record", "address": ')))
    (files / "gzip_multi_member.jsonl.gz").write_bytes(
        gz(jsonl(record("ok-gzip_multi_member-1"))) + gz(jsonl(record("ok-gzip_multi_member-2"))))
    (files / "gzip_empty_member.jsonl.gz").write_bytes(gz(b""))
    # Python's gzip reads past zero padding; Hadoop's codec takes it for another member's header and fails the read
    (files / "gzip_zero_padded.jsonl.gz").write_bytes(
        gz(jsonl(*[record(f"unreadable-gzip_zero_padded-{i}") for i in range(3)])) + b"\0" * 512)

    parquet(files / "parquet_wrong_type.parquet",
            [record("ok-parquet_wrong_type", headers=None), record("bad-parquet_wrong_type", headers={"retries": 3})],
            SCHEMA)
    parquet(files / "parquet_missing_field.parquet",
            [record("ok-parquet_missing_field", headers=None),
             {**record("bad-parquet_missing_field", headers=None), "payload": None}], SCHEMA)
    # a footer pyarrow reads and pages Spark cannot decompress (no Hadoop BrotliCodec in its jars)
    files.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([record("unreadable-brotli", headers=None)], schema=SCHEMA),
                   files / "brotli.parquet", compression="brotli")
    whole = (files / "parquet_wrong_type.parquet").read_bytes()
    (files / "truncated.parquet").write_bytes(whole[: len(whole) // 2])
    damaged_page(files / "damaged_page.parquet")

    isolated = HERE / "isolated"
    # Two Parquet files whose message_id columns differ in type (string, int64).
    parquet(isolated / "parquet_type_conflict" / "a.parquet", [record("ok-parquet_type_conflict")])
    parquet(isolated / "parquet_type_conflict" / "b.parquet",
            [{**record("x"), "message_id": 4711}],
            pa.schema([("message_id", pa.int64()), ("address", pa.string()), ("payload", pa.string()),
                       ("failed_at", pa.string())]))
    # Two Parquet files where only the second has delivery_count and an unknown column.
    parquet(isolated / "parquet_extra_columns" / "a.parquet", [record("ok-parquet_extra_columns")])
    parquet(isolated / "parquet_extra_columns" / "b.parquet",
            [record("counted-parquet_extra_columns", delivery_count=3, shard=7)])


if __name__ == "__main__":
    main()
