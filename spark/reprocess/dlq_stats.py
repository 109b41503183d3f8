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
from reprocess.storage.arrow import iso_ms, not_there, open_reader, read_live

if TYPE_CHECKING:
    import pyarrow as pa

    from reprocess.storage.arrow import ReadWarehouse
    from reprocess.storage.commit import Snapshot

COLUMNS = ["message_id", "original_address", "address", "reason_code", "last_error_class", "dead_lettered_at"]


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
                      columns: Sequence[str] | None = None, newest_first: bool = True) -> pa.Table:
    """The committed dead letters kept by ``where``, newest first (ties by message id) unless not ``newest_first``
    (for counts: a sort of the whole DLQ they do not need)."""
    cols = None if columns is None else list(dict.fromkeys([*columns, "original_address", "reason_code",
                                                             "dead_lettered_at", "message_id"]))
    table = read_live(wh, snap, "dlq", cols)
    if where is not None:
        table = where.apply(table)
    if table.num_rows == 0 or not newest_first:
        return table
    return table.sort_by([("dead_lettered_at", "descending"), ("message_id", "ascending")])


def _counts(table: pa.Table, keys: list[str]) -> list[tuple[Any, ...]]:
    """``(key values..., count)`` per distinct ``keys`` of ``table``, by pyarrow (no Python loop over the rows)."""
    counted = table.group_by(keys).aggregate([([], "count_all")])
    return list(zip(*[counted[k].to_pylist() for k in keys], counted["count_all"].to_pylist(), strict=True))


def _by_count(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def dead_letter_keys(table: pa.Table) -> pa.Table:
    """Per dead letter of ``table`` (a DLQ read), the values it is counted and plotted by, one rule for the tables
    and the report's plots: ``at`` (its time, UTC), ``reason`` (a missing one is UNKNOWN), ``day``, ``address`` (the
    original address, else the dead-letter address, else ``?``), ``dla`` (the dead-letter address) and ``error``
    (the last error class). An empty string says nothing, as a null does."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def given(name: str) -> Any:
        column = pc.cast(table[name], pa.string()) if table.num_rows else pa.array([], pa.string())
        return pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)

    at = (pc.cast(table["dead_lettered_at"], pa.timestamp("ms", tz="UTC"), safe=False) if table.num_rows
          else pa.array([], pa.timestamp("ms", tz="UTC")))  # no DLQ file yet: its columns may have no type
    return pa.table({
        "at": at,
        "reason": pc.fill_null(given("reason_code"), "UNKNOWN"),
        "day": pc.fill_null(pc.strftime(at, format="%Y-%m-%d"), "?"),
        "address": pc.fill_null(pc.coalesce(given("original_address"), given("address")), "?"),
        "dla": pc.fill_null(given("address"), "?"),
        "error": pc.fill_null(given("last_error_class"), "(none)"),
    })


def _run_time(summary: dict[str, Any]) -> str | None:
    """A cycle's as-of, or a re-drive's "now" (its request's, in its audit): a re-drive's summary has no as_of."""
    if "as_of" in summary:
        return summary["as_of"]
    now_ms = (summary.get("request") or {}).get("now_ms")
    return iso_ms(now_ms) if now_ms is not None else summary.get("requested_at")


def dlq_stats(warehouse: str, top: int = 10, runs: int = 10, where: DlqFilter | None = None,
              snapshot: Snapshot | None = None, keys: pa.Table | None = None) -> dict[str, Any]:
    """Counts per reason, per day and reason, per address and reason, top error classes, the latest run summaries.

    Reads ``snapshot`` (default: the latest), or counts ``keys``, the :func:`dead_letter_keys` of a read of that
    snapshot's DLQ (the report reads it once for its plots and its tables), as they are: ``where`` is for a read.
    A warehouse folder with no snapshot yet gives zero counts (the UI shows it before the first run); one that does
    not exist is a :class:`ConfigError` (a mistyped path, a volume not mounted where the UI runs: zero dead letters
    would be a lie). Counted by pyarrow: the cost is the read of the DLQ's columns, not a Python loop over its rows
    (a million dead letters took 9 s of it).
    """
    if keys is not None and (snapshot is None or where is not None):  # a caller's bug
        raise ValueError("a DLQ's keys are counted with the snapshot they were read from, and filtered by that read")
    wh = open_reader(warehouse)
    if snapshot is None and not wh.is_dir():
        why = not_there(warehouse)
        if why != "does not exist":
            raise ConfigError(f"warehouse {warehouse} {why}", key="REPROCESS_WAREHOUSE")
        raise ConfigError(f"warehouse {warehouse} does not exist: no run has committed to it yet, or the path is "
                          "mistyped or not mounted here", key="REPROCESS_WAREHOUSE")
    snap = snapshot or wh.latest()
    if keys is None:
        keys = dead_letter_keys(read_dead_letters(wh, snap, where, COLUMNS, newest_first=False))
    by_reason: Counter[str] = Counter()
    by_day: dict[str, Counter[str]] = defaultdict(Counter)
    by_address: dict[str, Counter[str]] = defaultdict(Counter)
    for day, address, reason, n in _counts(keys, ["day", "address", "reason"]):
        by_reason[reason] += n
        by_day[day][reason] += n
        by_address[address][reason] += n
    by_dla = dict(_by_count({k: n for k, n in _counts(keys, ["dla"])}))
    errors = _by_count({k: n for k, n in _counts(keys, ["error"])})
    latest = [
        {"run_id": r["run_id"], "kind": r.get("kind", "cycle"), **{k: r["summary"].get(k) for k in (
            "as_of", "ingested", "quarantined", "due", "delivered", "rescheduled", "dead_lettered", "waiting",
            "moved", "requested_by", "lateness_ms")},
         "as_of": _run_time(r["summary"])}
        for r in reversed(snap.runs[-runs:]) if "summary" in r  # the newest storage.commit.FULL_RUNS have one
    ] if runs > 0 else []
    return {
        "warehouse": warehouse,
        "snapshot": snap.version,
        "as_of": iso_ms(snap.as_of_ms),
        "filter": (where or DlqFilter()).describe(),
        "total": keys.num_rows,
        "by_reason": dict(_by_count(by_reason)),
        "by_day": {d: dict(c) for d, c in sorted(by_day.items())},
        "by_address": {a: dict(c) for a, c in sorted(by_address.items(), key=lambda kv: (-sum(kv[1].values()),
                                                                                        kv[0]))},
        "by_dead_letter_address": by_dla,
        "top_error_classes": errors[:top],
        "latest_runs": latest,
    }
