"""``reprocess generate``: realistic landing data for demos, tests and benchmarks.

Many addresses with skewed (Zipf-like) volumes, transient and poison errors, repeated failures of
the same message, exact duplicate records, ordering keys, unknown fields, and a few malformed
lines. Deterministic for a given seed.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reprocess.errors import ConfigError

log = logging.getLogger(__name__)

ADDRESSES = (
    "orders.created", "orders.updated", "orders.eu.cancelled", "billing.invoice", "billing.refund",
    "payments.card", "payments.wallet", "inventory.eu.stock", "inventory.us.stock", "shipping.label",
    "shipping.tracking", "notifications.email", "notifications.sms", "search.index", "audit.log",
)
TRANSIENT = (("TimeoutError", "downstream timed out after 30s"),
             ("ConnectionResetError", "connection reset by peer"),
             ("ServiceUnavailable", "HTTP 503 from inventory-api"))
POISON = (("com.acme.ValidationError", "field 'amount' is not a number"),
          ("SchemaError", "unknown schema version 7"))
MALFORMED = ('{"message_id": "broken-1", "address": "orders.created", "payload": "{\\"a\\": 1}"',
             "this is not json at all", '{"message_id": 42, "address": "orders.created"}',
             '{"message_id": "no-ts", "address": "orders.created", "payload": "", "failed_at": "2026-11-21 10:00"}')
# A Parquet file holds no lines, so a truncated one or one that is not JSON cannot be written there: its malformed
# records are rows of the right types that break the contract (a missing id or failure time, a timestamp without an
# offset, a delivery count below 1), one quarantine row each, as the malformed lines of a text landing are. A
# failed_at of "" becomes the start of the row's partition hour (not after the as-of that reads the partition).
_OK_ROW = {"address": "orders.created", "payload": "{}", "failed_at": "", "delivery_count": 1}
MALFORMED_ROWS: tuple[dict[str, Any], ...] = (
    {**_OK_ROW, "message_id": "broken-1", "failed_at": None},
    {**_OK_ROW, "message_id": None},
    {**_OK_ROW, "message_id": "zero-deliveries", "delivery_count": 0},
    {**_OK_ROW, "message_id": "no-ts", "failed_at": "2026-11-21 10:00"},
)


@dataclass(frozen=True)
class GenerateOptions:
    out: Path
    messages: int = 1000
    start: datetime = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
    hours: int = 3
    seed: int = 7
    fmt: str = "jsonl"  # jsonl | jsonl.gz | parquet
    poison_rate: float = 0.05
    repeat_rate: float = 0.10
    duplicate_rate: float = 0.02
    malformed: int = 4
    files_per_hour: int = 2


def _zipf_weights(n: int, s: float = 1.1) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


def _iso(dt: datetime) -> str:
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generate_records(opts: GenerateOptions) -> list[dict[str, Any]]:
    rnd = random.Random(opts.seed)
    weights = _zipf_weights(len(ADDRESSES))
    span_ms = opts.hours * 3600 * 1000
    records: list[dict[str, Any]] = []
    for i in range(opts.messages):
        address = rnd.choices(ADDRESSES, weights)[0]
        poison = rnd.random() < opts.poison_rate
        at = opts.start + timedelta(milliseconds=rnd.randrange(span_ms))
        error_class, error_message = rnd.choice(POISON if poison else TRANSIENT)
        rec: dict[str, Any] = {
            "message_id": f"m-{opts.seed}-{i:08d}",
            "address": address,
            "payload": json.dumps({"order": i, "amount": "poison" if poison else round(rnd.random() * 100, 2)}),
            "failed_at": _iso(at),
            "headers": {"traceparent": f"00-{rnd.getrandbits(64):016x}-01", "content-type": "application/json"},
            "delivery_count": 1,
            "error_class": error_class,
            "error_message": error_message,
            "consumer_group": address.split(".")[0] + "-service",
        }
        if address.startswith("inventory."):
            rec["ordering_key"] = f"sku-{rnd.randrange(max(opts.messages // 20, 1))}"
        if rnd.random() < 0.1:
            rec["source_partition"] = rnd.randrange(12)  # an unknown field, kept in `extra`
        records.append(rec)
        if rnd.random() < opts.repeat_rate:  # the source redelivered it and it failed again
            again = dict(rec, failed_at=_iso(at + timedelta(seconds=rnd.randrange(5, 600))), delivery_count=2)
            if again["failed_at"] < _iso(opts.start + timedelta(milliseconds=span_ms)):
                records.append(again)
        if rnd.random() < opts.duplicate_rate:  # the consumer wrote the same failure twice
            records.append(dict(rec))
    return records


def write_landing(opts: GenerateOptions) -> dict[str, Any]:
    """Write the records under ``opts.out/dt=/hour=/`` and return counts."""
    records = generate_records(opts)
    rnd = random.Random(opts.seed + 1)
    by_hour: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rec in records:
        at = datetime.fromisoformat(rec["failed_at"].replace("Z", "+00:00"))
        by_hour[(at.strftime("%Y-%m-%d"), at.strftime("%H"))].append(json.dumps(rec, separators=(",", ":")))
    hours = sorted(by_hour)
    for j in range(opts.malformed):
        day, hour = hours[j % len(hours)]
        row = MALFORMED_ROWS[j % len(MALFORMED_ROWS)]
        failed_at = f"{day}T{hour}:00:00Z" if row["failed_at"] == "" else row["failed_at"]
        bad = (json.dumps({**row, "failed_at": failed_at}) if opts.fmt == "parquet"
               else MALFORMED[j % len(MALFORMED)])
        by_hour[(day, hour)].append(bad)
    n = max(1, opts.files_per_hour)
    chunks: list[tuple[Path, list[str]]] = []
    for (day, hour), lines in sorted(by_hour.items()):
        rnd.shuffle(lines)
        folder = opts.out / f"dt={day}" / f"hour={hour}"
        chunks += [(folder / f"part-{opts.seed}-{k:03d}.{opts.fmt}", lines[k::n]) for k in range(n) if lines[k::n]]
    # a landed file never changes (the cycle fails a run on one that did): another generate of the same seed into the
    # same landing wrote over the files a run may have read; nothing is written then
    taken = [str(name) for name, _ in chunks if name.exists()]
    if taken:
        raise ConfigError(f"{len(taken)} of the files it would write exist ({taken[0]}...): a landed file never "
                          "changes; give another --seed or --out", key="--out")
    for name, chunk in chunks:
        name.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join(chunk) + "\n"
        if opts.fmt == "jsonl":
            name.write_text(text, encoding="utf-8")
        elif opts.fmt == "jsonl.gz":
            with gzip.open(name, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            _write_parquet(name, chunk)
    return {"records": len(records), "malformed": opts.malformed, "files": len(chunks),
            "first_hour": f"{hours[0][0]}T{hours[0][1]}", "last_hour": f"{hours[-1][0]}T{hours[-1][1]}"}


def _write_parquet(path: Path, lines: list[str]) -> None:
    """One row per line: the records and :data:`MALFORMED_ROWS` (unknown fields are not written)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{k: rec.get(k) for k in ("message_id", "address", "payload", "failed_at", "headers", "delivery_count",
                                     "error_class", "error_message", "consumer_group", "ordering_key")}
            for rec in map(json.loads, lines)]
    pq.write_table(pa.Table.from_pylist(rows), path)
