"""Dead-letter statistics without Spark (pyarrow over the latest snapshot): for the UI plugin and reports."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from reprocess.storage.commit import Warehouse

_COLUMNS = ["message_id", "original_address", "reason_code", "last_error_class", "dead_lettered_at"]


def dlq_stats(warehouse: str, top: int = 10, runs: int = 10) -> dict[str, Any]:
    """Counts per day and reason, per address and reason, top error classes, the latest run summaries."""
    import pyarrow.parquet as pq

    wh = Warehouse(warehouse)
    snap = wh.latest()
    by_day: dict[str, Counter[str]] = defaultdict(Counter)
    by_address: dict[str, Counter[str]] = defaultdict(Counter)
    errors: Counter[str] = Counter()
    total = 0
    for path in wh.live_files("dlq", snap):
        table = pq.read_table(path, columns=_COLUMNS[1:])
        dla = _partition(path, "address")
        for row in table.to_pylist():
            total += 1
            reason = row["reason_code"] or "UNKNOWN"
            day = row["dead_lettered_at"].strftime("%Y-%m-%d") if row["dead_lettered_at"] else "?"
            by_day[day][reason] += 1
            by_address[row["original_address"] or dla or "?"][reason] += 1
            errors[row["last_error_class"] or "(none)"] += 1
    latest = [
        {"run_id": r["run_id"], "kind": r.get("kind", "cycle"), **{k: r["summary"].get(k) for k in (
            "as_of", "ingested", "quarantined", "due", "delivered", "rescheduled", "dead_lettered", "waiting",
            "moved", "requested_by")}}
        for r in reversed(snap.runs[-runs:])
    ]
    return {
        "warehouse": warehouse,
        "snapshot": snap.version,
        "total": total,
        "by_day": {d: dict(c) for d, c in sorted(by_day.items())},
        "by_address": {a: dict(c) for a, c in sorted(by_address.items(), key=lambda kv: -sum(kv[1].values()))},
        "top_error_classes": errors.most_common(top),
        "latest_runs": latest,
    }


def _partition(path: str, name: str) -> str | None:
    from urllib.parse import unquote

    for part in path.split("/"):
        if part.startswith(name + "="):
            return unquote(part[len(name) + 1:])
    return None
