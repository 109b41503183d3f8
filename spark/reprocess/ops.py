"""Operator queries on the latest committed snapshot, without Spark: ``reprocess dlq list|show``, ``ledger stats``.

Every function reads the live files of one snapshot with pyarrow (:mod:`reprocess.storage.arrow`) and
returns a JSON-ready dict; :mod:`reprocess.ops_text` renders those dicts for a terminal. Times are
UTC ISO-8601 strings; ages are measured from the snapshot's as-of, never the wall clock, like a cycle.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import date, datetime
from typing import Any

from reprocess.dlq_stats import DlqFilter, read_dead_letters
from reprocess.errors import NotFoundError
from reprocess.ledger.states import DEAD_LETTERED, STATES, WAITING
from reprocess.limits import LATEST_INSTANT_MS, instant_problem
from reprocess.storage.arrow import ReadWarehouse, iso_ms, open_reader, open_snapshot, read_live, read_live_file, to_ms
from reprocess.storage.commit import Snapshot

HOUR_MS = 3_600_000
LIST_COLUMNS = ("dead_lettered_at", "message_id", "original_address", "address", "reason_code", "deliveries",
                "last_error_class", "last_error_message", "run_id")
_LEDGER_COLUMNS = ("message_id", "address", "policy", "profile", "state", "deliveries", "first_failed_ms",
                   "last_failed_ms", "next_attempt_ms", "reason_code")


def parse_time(text: str, *, end_of_day: bool = False) -> int:
    """``2026-11-21`` (a UTC day) or ISO-8601 with an offset -> epoch ms.

    With ``end_of_day`` a bare date means the start of the next day, so ``--until 2026-11-21``
    includes the whole of that day. Raises ValueError with the accepted forms.
    """
    try:
        day = date.fromisoformat(text)
    except ValueError:
        day = None
    if day is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):  # 20261121, 2026-W47-6: fromisoformat's too
        raise ValueError(f"expected a date as YYYY-MM-DD (2026-11-21) or an instant with an offset "
                         f"(2026-11-21T10:15:00Z), got {text!r}")
    if day is not None:
        ms = (day - date(1970, 1, 1)).days * 86_400_000
        if end_of_day:  # the next day's start (10000-01-01 is no datetime: its last instant bounds 9999-12-31)
            ms = min(ms + 86_400_000, LATEST_INSTANT_MS)
    else:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"expected a date (2026-11-21) or an instant with an offset (2026-11-21T10:15:00Z), "
                             f"got {text!r}") from None
        if dt.tzinfo is None:
            raise ValueError(f"the instant needs an offset or Z (dead-letter times are UTC): {text!r}")
        ms = int(dt.timestamp() * 1000)
    problem = instant_problem(ms)
    if problem:
        raise ValueError(f"{text!r}: {problem}")
    return ms


def _head(wh_uri: str, version: int, as_of_ms: int | None) -> dict[str, Any]:
    return {"warehouse": wh_uri, "snapshot": version, "as_of": iso_ms(as_of_ms)}


def list_dead_letters(warehouse: str, where: DlqFilter | None = None, limit: int = 50) -> dict[str, Any]:
    """The newest ``limit`` dead letters kept by ``where`` (and how many matched in all)."""
    where = where or DlqFilter()
    where.validate()
    wh, snap = open_snapshot(warehouse)
    table = read_dead_letters(wh, snap, where, LIST_COLUMNS)
    rows = table.slice(0, limit).to_pylist()
    return {**_head(warehouse, snap.version, snap.as_of_ms), "filter": where.describe(), "matched": table.num_rows,
            "shown": len(rows), "dead_letters": [_dead_letter_doc(r) for r in rows]}


def show_dead_letter(warehouse: str, message_id: str) -> dict[str, Any]:
    """One dead letter in full; :class:`NotFoundError` (saying where the message is, if anywhere) otherwise.

    Reads the id column of every live DLQ file and the whole of only the files holding the id.
    """
    import pyarrow.compute as pc

    wh, snap = open_snapshot(warehouse)
    holding = [rel for rel in snap.files["dlq"]
               if pc.any(pc.equal(read_live_file(wh, snap, wh.abs(rel), ["message_id"])["message_id"],
                                  message_id)).as_py()]
    if not holding:
        raise NotFoundError(_not_a_dead_letter(wh, snap, warehouse, message_id))
    only = Snapshot(snap.version, {**snap.files, "dlq": holding}, snap.runs, snap.as_of_ms)
    table = read_dead_letters(wh, only)
    records = [_dead_letter_doc(r) for r in table.filter(pc.equal(table["message_id"], message_id)).to_pylist()]
    return {**_head(warehouse, snap.version, snap.as_of_ms), **records[0], "records_with_this_id": len(records)}


def _not_a_dead_letter(wh: ReadWarehouse, snap: Snapshot, warehouse: str, message_id: str) -> str:
    import pyarrow.compute as pc

    ledger = read_live(wh, snap, "ledger", ["message_id", "state", "deliveries", "next_attempt_ms"])
    hit = ledger.filter(pc.equal(ledger["message_id"], message_id)).to_pylist() if ledger.num_rows else []
    where = f"snapshot {snap.version} of {warehouse}"
    if not hit:
        return f"no message {message_id!r} in {where} (neither in the DLQ nor in the ledger)"
    row = hit[0]
    detail = f"ledger state {row['state']}, deliveries {row['deliveries']}"
    if row["state"] == WAITING:
        detail += f", next attempt {iso_ms(row['next_attempt_ms'])}"
    elif row["state"] == DEAD_LETTERED:
        # a re-drive sets the row waiting in the commit that moves the record: a dead-lettered row without one is a
        # warehouse whose ledger and DLQ disagree, not a re-drive's doing
        detail += ("; but it has no DLQ record: the ledger and the DLQ disagree, and no re-drive can select it (a "
                   "re-drive selects DLQ records). Please report it with the warehouse")
    return f"message {message_id!r} is not a dead letter in {where}: {detail}"


def _dead_letter_doc(row: dict[str, Any]) -> dict[str, Any]:
    """A DLQ row as JSON-ready values: ISO times, headers as an object, error history with times."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key.endswith("_at"):
            out[key] = iso_ms(to_ms(value))
        elif key == "headers":
            out[key] = dict(value or [])
        elif key == "error_history":
            out[key] = [{"delivery": e.get("delivery"), "failed_at": iso_ms(e.get("failed_ms")),
                         "error_class": e.get("error_class"), "error_message": e.get("error_message")}
                        for e in value or []]
        else:
            out[key] = value
    if "address" in out:
        out["dead_letter_address"] = out.pop("address")
    out.pop("dt", None)
    return out


def ledger_stats(warehouse: str, oldest: int = 5, snapshot: Snapshot | None = None) -> dict[str, Any]:
    """Messages per state and per policy, deliveries per message, waiting messages by next-attempt hour, oldest.

    Reads ``snapshot`` (default: the latest committed one). Counts in pyarrow: a Python dict per ledger row took
    gigabytes and tens of seconds on a ledger of 10M messages; only the ``oldest`` waiting rows become dicts.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    wh, snap = (open_reader(warehouse), snapshot) if snapshot is not None else open_snapshot(warehouse)
    table = read_live(wh, snap, "ledger", _LEDGER_COLUMNS)
    # typed as the ledger's files type them (a warehouse without ledger files gives columns of nulls)
    table = table.cast(pa.schema([(c, pa.int64() if c.endswith("_ms") or c == "deliveries" else pa.string())
                                  for c in table.column_names]))
    as_of = snap.as_of_ms
    keys = pa.table({"state": table["state"], "policy": pc.fill_null(table["policy"], "(none)"),
                     "profile": table["profile"], "deliveries": pc.fill_null(table["deliveries"], 0)})
    states: Counter[str] = Counter()  # the sum of the policies' counts: no pass of its own
    policies: dict[str, Counter[str]] = defaultdict(Counter)
    for r in keys.group_by(["policy", "state"]).aggregate([([], "count_all")]).to_pylist():
        policies[r["policy"]][r["state"]] = r["count_all"]
        states[r["state"]] += r["count_all"]
    profiles = {r["policy"]: r["profile_first"] or "" for r in  # the first row's, in the ledger's order
                keys.group_by("policy", use_threads=False).aggregate(
                    [("profile", "first", pc.ScalarAggregateOptions(skip_nulls=False))]).to_pylist()}
    deliveries: dict[int, Counter[str]] = defaultdict(Counter)
    for r in keys.group_by(["deliveries", "state"]).aggregate([([], "count_all")]).to_pylist():
        deliveries[r["deliveries"]][r["state"]] = r["count_all"]
    waiting = table.filter(pc.equal(table["state"], WAITING))
    nxt = waiting["next_attempt_ms"]
    hours = pc.if_else(pc.less(nxt, 0), pc.subtract(pc.divide(pc.add(nxt, 1), HOUR_MS), 1), pc.divide(nxt, HOUR_MS))
    by_hour: Counter[str] = Counter()
    for r in pc.value_counts(hours).to_pylist():  # the hour each next attempt falls in, floored as Python's //
        by_hour[iso_ms(r["values"] * HOUR_MS) if r["values"] is not None else "?"] += r["counts"]
    overdue = 0 if as_of is None else pc.sum(pc.less_equal(nxt, as_of)).as_py() or 0
    order = pa.table({"first": pc.fill_null(waiting["first_failed_ms"], 0), "id": waiting["message_id"]})
    first = waiting.take(pc.sort_indices(order, [("first", "ascending"), ("id", "ascending")])[:oldest]).to_pylist()
    last_states = next((dict(r["summary"]["states"]) for r in reversed(snap.runs)
                        if "states" in r.get("summary", {})), None)
    counted = {s: states.get(s, 0) for s in STATES}
    return {
        **_head(warehouse, snap.version, as_of),
        "messages": table.num_rows,
        "states": counted,
        "matches_last_run_summary": None if last_states is None else all(
            last_states.get(s, 0) == n for s, n in counted.items()),
        "policies": {p: {"profile": profiles[p], "total": sum(c.values()), **{s: c.get(s, 0) for s in STATES}}
                     for p, c in sorted(policies.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))},
        "deliveries": [{"deliveries": d, "messages": sum(c.values()), **{s: c.get(s, 0) for s in STATES}}
                       for d, c in sorted(deliveries.items())],
        "waiting": {
            "total": waiting.num_rows,
            "overdue": overdue,
            "by_next_attempt_hour": dict(sorted(by_hour.items())),
            "oldest": [{"message_id": r["message_id"], "address": r["address"], "policy": r["policy"],
                        "deliveries": r["deliveries"], "first_failed_at": iso_ms(r["first_failed_ms"]),
                        "last_failed_at": iso_ms(r["last_failed_ms"]),
                        "next_attempt_at": iso_ms(r["next_attempt_ms"]),
                        "age_ms": None if as_of is None or r["first_failed_ms"] is None
                        else as_of - r["first_failed_ms"]}
                       for r in first],
        },
    }
