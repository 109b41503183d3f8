"""Dead letters without Spark (pyarrow over the latest snapshot): filters, statistics, for the CLI, UI and report.

A :class:`DlqFilter` narrows dead letters by original address (broker wildcards), reason codes and a
dead-lettering time range; :func:`read_dead_letters` applies it; :func:`dlq_stats` counts what is left
by reason, by address and by day, and lists the latest runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reprocess.errors import ConfigError
from reprocess.ledger.states import REASON_CODES
from reprocess.policy.wildcard import matches, validate_pattern
from reprocess.storage.arrow import iso_ms, open_reader, read_live

if TYPE_CHECKING:
    import pyarrow as pa

    from reprocess.storage.arrow import ReadWarehouse
    from reprocess.storage.commit import Snapshot

_COLUMNS = ["message_id", "original_address", "address", "reason_code", "last_error_class", "dead_lettered_at"]


@dataclass(frozen=True)
class DlqFilter:
    """Which dead letters: original address wildcard, reason codes, ``since_ms <= dead-lettered < until_ms``."""

    address: str | None = None
    reasons: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None

    def validate(self) -> None:
        if self.address is not None:
            why = validate_pattern(self.address)
            if why:
                raise ConfigError(f"bad address pattern: {why}", key="--address")
        unknown = sorted(set(self.reasons) - set(REASON_CODES))
        if unknown:
            raise ConfigError(f"unknown reason codes {unknown}; allowed {list(REASON_CODES)}", key="--reason")
        if self.since_ms is not None and self.until_ms is not None and self.since_ms >= self.until_ms:
            raise ConfigError(f"empty time range: nothing is dead-lettered at or after {iso_ms(self.since_ms)} "
                              f"(--since) and before {iso_ms(self.until_ms)} (--until)", key="--since")

    def describe(self) -> dict[str, Any]:
        return {"address": self.address, "reasons": list(self.reasons), "since": iso_ms(self.since_ms),
                "until": iso_ms(self.until_ms)}

    def apply(self, table: pa.Table) -> pa.Table:
        """The rows of a DLQ table (with ``original_address``, ``reason_code``, ``dead_lettered_at``) kept."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return table
        mask = pa.array([True] * table.num_rows)
        if self.address is not None:
            seen = [a for a in pc.unique(table["original_address"]).to_pylist() if a is not None]
            keep = [a for a in seen if matches(self.address, a)]
            mask = pc.and_(mask, pc.is_in(table["original_address"], value_set=pa.array(keep, pa.string())))
        if self.reasons:
            mask = pc.and_(mask, pc.is_in(table["reason_code"], value_set=pa.array(self.reasons, pa.string())))
        at = pc.cast(table["dead_lettered_at"], pa.timestamp("ms", tz="UTC"), safe=False).cast(pa.int64())
        if self.since_ms is not None:
            mask = pc.and_(mask, pc.greater_equal(at, self.since_ms))
        if self.until_ms is not None:
            mask = pc.and_(mask, pc.less(at, self.until_ms))
        return table.filter(pc.fill_null(mask, False))


def read_dead_letters(wh: ReadWarehouse, snap: Snapshot, where: DlqFilter | None = None,
                      columns: Sequence[str] | None = None) -> pa.Table:
    """The committed dead letters kept by ``where``, newest first (ties by message id)."""
    cols = None if columns is None else list(dict.fromkeys([*columns, "original_address", "reason_code",
                                                             "dead_lettered_at", "message_id"]))
    table = read_live(wh, snap, "dlq", cols)
    if where is not None:
        table = where.apply(table)
    if table.num_rows == 0:
        return table
    return table.sort_by([("dead_lettered_at", "descending"), ("message_id", "ascending")])


def dlq_stats(warehouse: str, top: int = 10, runs: int = 10, where: DlqFilter | None = None,
              snapshot: Snapshot | None = None) -> dict[str, Any]:
    """Counts per reason, per day and reason, per address and reason, top error classes, the latest run summaries.

    Reads ``snapshot`` (default: the latest). An empty or new warehouse gives zero counts (the UI shows it
    before the first run).
    """
    wh = open_reader(warehouse)
    snap = snapshot or wh.latest()
    by_reason: Counter[str] = Counter()
    by_day: dict[str, Counter[str]] = defaultdict(Counter)
    by_address: dict[str, Counter[str]] = defaultdict(Counter)
    by_dla: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    table = read_dead_letters(wh, snap, where, _COLUMNS)
    for row in table.to_pylist():
        reason = row["reason_code"] or "UNKNOWN"
        day = row["dead_lettered_at"].strftime("%Y-%m-%d") if row["dead_lettered_at"] else "?"
        by_reason[reason] += 1
        by_day[day][reason] += 1
        by_address[row["original_address"] or row["address"] or "?"][reason] += 1
        by_dla[row["address"] or "?"] += 1
        errors[row["last_error_class"] or "(none)"] += 1
    latest = [
        {"run_id": r["run_id"], "kind": r.get("kind", "cycle"), **{k: r["summary"].get(k) for k in (
            "as_of", "ingested", "quarantined", "due", "delivered", "rescheduled", "dead_lettered", "waiting",
            "moved", "requested_by", "lateness_ms")}}
        for r in reversed(snap.runs[-runs:]) if "summary" in r  # the newest storage.commit.FULL_RUNS have one
    ] if runs > 0 else []
    return {
        "warehouse": warehouse,
        "snapshot": snap.version,
        "as_of": iso_ms(snap.as_of_ms),
        "filter": (where or DlqFilter()).describe(),
        "total": table.num_rows,
        "by_reason": dict(by_reason.most_common()),
        "by_day": {d: dict(c) for d, c in sorted(by_day.items())},
        "by_address": {a: dict(c) for a, c in sorted(by_address.items(), key=lambda kv: (-sum(kv[1].values()),
                                                                                        kv[0]))},
        "by_dead_letter_address": dict(sorted(by_dla.items(), key=lambda kv: (-kv[1], kv[0]))),
        "top_error_classes": errors.most_common(top),
        "latest_runs": latest,
    }
