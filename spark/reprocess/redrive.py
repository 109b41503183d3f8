"""Re-driving dead letters: move matching DLQ records back into the ledger as due, with an audit record.

A request names an address pattern (Artemis wildcards, matched on the original address), a date
range of dead-lettering, reason codes, a maximum number of messages, a rate (messages per second:
the moved messages become due one after another at that rate, so the cycles re-drive them no
faster), and whether deliveries restart from zero. A request is made at a "now" (the DAG run's ``run_after``, the
CLI's ``--now``), and its id is a hash of both: the same request at the same now (a task's retry, a crash's
re-run) moves nothing the second time and writes no second audit record; asked again at another now (draining the
DLQ in batches of ``--max``, the same button pressed next week) it is a request of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from reprocess.cycle.landing_batch import spark_file_uris
from reprocess.errors import CommitConflictError, ConfigError
from reprocess.ledger.merge import with_bucket
from reprocess.ledger.model import LEDGER_COLUMNS, LEDGER_FILE_SCHEMA, LEDGER_UNIQUE_COLUMNS, REASON_CODES, WAITING
from reprocess.limits import MIN_RATE_PER_SECOND
from reprocess.policy.wildcard import to_regex, validate_pattern
from reprocess.routing.dlq import DLQ_UNIQUE_COLUMNS
from reprocess.sparkutil import (
    SHUFFLE_KEYS,
    Pinned,
    fit_codegen,
    fit_shuffles,
    owner_only_writes,
    parquet_options,
    pinning,
    restoring_conf,
    sized_codegen,
)
from reprocess.steps import StepLog, crash_point
from reprocess.storage.commit import AnyWarehouse, Snapshot, open_warehouse, redrive_audit_path, with_docs_state
from reprocess.storage.read import naming_damaged_files, read_files
from reprocess.uris import remote_scheme

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# The steps a re-drive logs (``re-drive step=<name> ... seconds=``), in order.
STEPS = ("select", "stage_ledger", "stage_dlq", "validate")  # validate: when the GX gate is on
# Where tests kill a re-drive (steps.crash_point): staged; its files published and its audit staged; committed; its
# audit record written (before the vacuum and the removal of its stage)
CRASH_POINTS = ("redrive_after_stage", "redrive_after_publish", "redrive_after_commit", "redrive_after_record")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class RedriveRequest:
    address_pattern: str = "#"
    date_from: str | None = None  # YYYY-MM-DD, inclusive (dead-lettered date)
    date_to: str | None = None
    reason_codes: tuple[str, ...] = ()
    max_messages: int | None = None
    rate_per_second: float | None = None
    reset_deliveries: bool = False
    now_ms: int | None = None  # when it was asked (redrive_dead_letters sets it): part of the request's id

    def __post_init__(self) -> None:
        # a set: the same reasons in another order, or one given twice, are the same request with the same id (it
        # hashed them as given, and asked again so, the request moved another batch)
        object.__setattr__(self, "reason_codes", tuple(sorted(set(self.reason_codes))))

    def at(self, now_ms: int) -> RedriveRequest:
        """This request as asked at ``now_ms``."""
        return replace(self, now_ms=now_ms)

    def validate(self) -> None:
        why = validate_pattern(self.address_pattern)
        if why:
            raise ConfigError(f"bad address pattern: {why}", key="address_pattern")
        for name in ("date_from", "date_to"):
            value = getattr(self, name)
            if value is not None:
                # compared as text with the DLQ's dt=YYYY-MM-DD: date.fromisoformat also takes 20261121 and
                # 2026-W47-6, which compare otherwise (--to 20261121 kept every day of 2026)
                try:
                    if not _DAY.fullmatch(value):
                        raise ValueError(value)
                    date.fromisoformat(value)
                except ValueError:
                    raise ConfigError(f"expected a UTC day YYYY-MM-DD, got {value!r}", key=name) from None
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise ConfigError(f"the range {self.date_from}..{self.date_to} is empty: from is after to", key="date_from")
        unknown = set(self.reason_codes) - set(REASON_CODES)
        if unknown:
            raise ConfigError(f"unknown reason codes {sorted(unknown)}; allowed {list(REASON_CODES)}",
                              key="reason_codes")
        if self.max_messages is not None and self.max_messages < 1:
            raise ConfigError("must be >= 1", key="max_messages")
        if self.rate_per_second is not None and not (math.isfinite(self.rate_per_second)
                                                     and self.rate_per_second >= MIN_RATE_PER_SECOND):
            # nan passed `<= 0`; a rate far below one a day spaced the messages beyond a long's milliseconds
            raise ConfigError(f"must be a number of messages per second of at least {MIN_RATE_PER_SECOND:.3g} (one a "
                              f"day), got {self.rate_per_second}", key="rate_per_second")

    @property
    def request_id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, default=list)
        return "redrive-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _matching(dlq: DataFrame, req: RedriveRequest) -> DataFrame:
    cond = F.concat(F.col("original_address"), F.lit(".")).rlike(to_regex(req.address_pattern))
    if req.date_from:
        cond = cond & (F.col("dt") >= req.date_from)
    if req.date_to:
        cond = cond & (F.col("dt") <= req.date_to)
    if req.reason_codes:
        cond = cond & F.col("reason_code").isin(list(req.reason_codes))
    return dlq.filter(cond)


def redrive_dead_letters(spark: SparkSession, warehouse: str, req: RedriveRequest, now_ms: int,
                         requested_by: str = "unknown", lock_wait_seconds: float = 0.0,
                         private_files: bool | None = None, validate: bool = True) -> dict[str, Any]:
    """Apply ``req`` at ``now_ms``; returns the audit record (the earlier one if already applied).

    ``private_files`` (default ``$REPROCESS_PRIVATE_FILES``): write owner-only files, as a cycle does. ``validate``:
    the GX gate (the ``redrive_ledger`` and ``redrive_run`` suites on what is staged) before the commit, as a
    cycle's; Data Docs under ``runs/<request_id>/data_docs``.
    """
    req = req.at(now_ms)
    req.validate()
    if validate:  # before any work: a suites folder without them failed after the staging
        from reprocess.validation.suites import REDRIVE_SUITES, load_suite

        for name in REDRIVE_SUITES:
            load_suite(name)
    wh = open_warehouse(warehouse, private=private_files)
    require_committed(warehouse, wh)
    with owner_only_writes(wh.private):
        return _redrive(spark, wh, req, now_ms, requested_by, lock_wait_seconds, validate)


def require_committed(warehouse: str, wh: AnyWarehouse | None = None) -> None:
    """Refuse a re-drive on a warehouse nothing was ever committed to: taking its lock created the folder of a
    mistyped path, and the request committed there, moving nothing, exit 0. ``wh`` None: a local warehouse is
    opened to look (one at a URI is looked at by the Spark job, which opens it)."""
    if wh is None:
        if remote_scheme(warehouse):
            return
        wh = open_warehouse(warehouse)
    if wh.latest().version == 0:
        raise ConfigError(f"warehouse {warehouse} has no committed run: nothing to re-drive (a mistyped path?)",
                          key="--warehouse")


def _redrive(spark: SparkSession, wh: AnyWarehouse, req: RedriveRequest, now_ms: int, requested_by: str,
             lock_wait_seconds: float, validate: bool = True) -> dict[str, Any]:
    with wh.lock(owner=req.request_id, wait_seconds=lock_wait_seconds):
        latest = wh.latest()
        previous = _find_audit(wh, latest, req.request_id)
        if previous is not None:  # a retry of an applied request answers, whatever a cycle has left since
            entry = next(e for e in latest.runs if e.get("run_id") == req.request_id)
            previous = with_docs_state(wh, entry, previous)  # its Data Docs may have expired since
            log.info("re-drive request already applied request_id=%s moved=%s", req.request_id, previous["moved"])
            return {**previous, "already_applied": True}
        pending = [p["run_id"] for p in wh.prepared_runs()]
        if pending:
            # A prepared cycle resumes with the due set it persisted; moved dead letters could change it (an ordered
            # key's earlier message waiting again holds a later one back), and the resume would fail on the count.
            raise CommitConflictError(f"cycle {pending[0]} persisted its deliveries but did not commit; the next "
                                      "cycle (reprocess run, or the DAG's next run) resumes it first (if that fails, "
                                      "its error says why): re-drive once it has committed")
        snap = wh.latest()
        settle_redrives(wh, snap)  # commits nothing: the snapshot stands
        with naming_damaged_files(wh.uri, snap), _sized(spark, snap, req), pinning() as pins:
            return _redrive_on(spark, wh, snap, req, now_ms, requested_by, pins, validate)


@contextmanager
def _sized(spark: SparkSession, snap: Snapshot, req: RedriveRequest) -> Iterator[None]:
    """Size the re-drive's queries as a cycle's (sparkutil.fit_codegen, fit_shuffles); on exit the session's settings
    are as they were.

    The re-drive reads an id and a state per ledger row, and the DLQ's records, whose messages are among those rows. It
    sizes itself to the ledger's rows as the last commit counted them (no file is opened for it): a small ledger's
    re-drive runs interpreted, its shuffles in one partition without adaptive execution, as a small cycle does. With
    the session's generated code and adaptive execution, a fresh driver's re-drive of four dead letters took 13.4-15.2 s
    against 11.3-12.9 s (bench/RESULTS.md, thirty-ninth run)."""
    rows = sum(_carry_states(snap, 0).values())
    with sized_codegen(spark), restoring_conf(spark, *SHUFFLE_KEYS) as shuffles:
        codegen = fit_codegen(spark, 0, scan_rows=rows)
        fit_shuffles(spark, 0, shuffles, small=codegen == "interpreted")
        log.info("re-drive request_id=%s ledger_rows=%s codegen=%s", req.request_id, rows, codegen)
        yield


_LIMIT_MAX = 2**31 - 1  # the largest row count DataFrame.limit takes (a Java int)


def _due_times(ordered: DataFrame, now_ms: int, rate_per_second: float | None) -> DataFrame:
    """The chosen messages (``message_id``), their place in the order they become due (``_seq``, from 0: the oldest
    dead letter first, as they are chosen) and their due time (``_due``). ``now_ms``: the request's time, or the
    warehouse's last committed as-of when later (:func:`_redrive_on`).

    At a rate, the k-th is due ``k`` spacings after ``now``, and never before its last failure: a retried DAG run asks
    at its stored run_after, which a cycle that dead-lettered the message since can have passed (the ledger suite's
    next_attempt_after_last_failure). A message due later for that pushes the ones after it back too, so that no two
    are closer than the spacing: ``due_k = k * spacing + max(now, max over j <= k of (last_failed_j - j * spacing))``.
    Before, every message a failed re-drive dead-lettered at one as-of after ``now`` was due at that same instant."""
    order = Window.orderBy("dead_lettered_at", "message_id")
    frame = ordered.select("message_id", "dead_lettered_at", "_last_failed_ms") \
        .withColumn("_seq", F.row_number().over(order) - 1)
    now = F.lit(now_ms).cast("long")
    if not rate_per_second:  # all due at once: each at now, or at its own last failure
        due = F.greatest(now, F.col("_last_failed_ms"))
    else:
        offset = (F.col("_seq") * F.lit(1000.0 / rate_per_second)).cast("long")
        due = offset + F.greatest(now, F.max(F.col("_last_failed_ms") - offset).over(
            order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    return frame.withColumn("_due", due).drop("dead_lettered_at", "_last_failed_ms")


def _redrive_on(spark: SparkSession, wh: AnyWarehouse, snap: Snapshot, req: RedriveRequest, now_ms: int,
                requested_by: str, pins: Pinned, validate: bool = True) -> dict[str, Any]:
    """The request applied to ``snap``, under the warehouse's lock; the chosen messages kept in ``pins`` (freed
    by sparkutil.pinning if it fails). Each step is logged with its duration (progress
    on a large DLQ): ``re-drive step=select|stage_ledger|stage_dlq|validate request_id=... seconds=...``."""
    steps = StepLog(log, STEPS, "request_id", req.request_id, prefix="re-drive ")
    dlq_files = wh.live_files("dlq", snap)
    audit = {"request_id": req.request_id, "requested_by": requested_by,
             "requested_at": datetime.fromtimestamp(now_ms / 1000, tz=UTC).isoformat(),
             "request": asdict(req), "moved": 0, "messages": []}
    if not dlq_files:
        return _commit_audit(wh, snap, snap, audit)
    dlq_uris = spark_file_uris(spark, dlq_files)
    dlq = read_files(spark, "dlq", dlq_files, file_column="_file", uris=dlq_uris)
    picked = _matching(dlq, req)
    # the newest dead-lettering of each message, oldest messages first, at most max_messages
    w = Window.partitionBy("message_id").orderBy(F.col("dead_lettered_at").desc())
    latest = picked.withColumn("_r", F.row_number().over(w)).filter(F.col("_r") == 1).drop("_r")
    ledger_files = wh.live_files("ledger", snap)
    ledger = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*ledger_files).withColumn(
        "_file", F.col("_metadata.file_path"))
    dead = ledger.filter(F.col("state") == "DEAD_LETTERED").select(
        "message_id", F.col("last_failed_ms").alias("_last_failed_ms"))
    latest = latest.join(dead, "message_id")  # a message that failed again is not in the DLQ state
    ordered = latest.orderBy("dead_lettered_at", "message_id")
    if req.max_messages:  # Spark's limit takes a Java int: a larger max ("drain everything") is every one there
        ordered = ordered.limit(min(req.max_messages, _LIMIT_MAX))
    # spaced from the request's time, or from the last cycle's as-of when that is later: a request applied late (a
    # DAG run cleared once the cycles committed again, or a --now in the past) made every message spaced before that
    # as-of due at once, and the next cycle sent them in one burst, at no rate
    start_ms = max(now_ms, snap.as_of_ms if snap.as_of_ms is not None else now_ms)
    chosen = pins.pin(_due_times(ordered, start_ms, req.rate_per_second), StorageLevel.MEMORY_AND_DISK_DESER, False)
    moved = chosen.count()
    steps.done("select", dlq_files=len(dlq_files), moved=moved)
    if moved == 0:
        pins.free()
        return _commit_audit(wh, snap, snap, audit)
    # the audit's list: the first 1000 moved, in the order they are due
    ids = [r.message_id for r in chosen.orderBy("_seq").select("message_id").limit(1000).collect()]
    # rewrite the ledger files holding the chosen messages: they become due again
    hit = {r._file for r in ledger.join(chosen, "message_id", "left_semi").select("_file").distinct().collect()}
    to_local = dict(zip(spark_file_uris(spark, ledger_files), ledger_files, strict=True))
    touched = sorted(to_local[u] for u in _named(hit, to_local, "ledger"))
    rows = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*touched).join(chosen, "message_id", "left")
    sel = F.col("_seq").isNotNull()
    updated = rows.withColumns({
        "state": F.when(sel, F.lit(WAITING)).otherwise(F.col("state")),
        "next_attempt_ms": F.when(sel, F.col("_due")).otherwise(F.col("next_attempt_ms")),
        "deliveries": F.when(sel & F.lit(req.reset_deliveries), F.lit(0).cast("long"))
        .otherwise(F.col("deliveries")),
        "reason_code": F.when(sel, F.lit(None).cast("string")).otherwise(F.col("reason_code")),
        "dead_letter_address": F.when(sel, F.lit(None).cast("string")).otherwise(F.col("dead_letter_address")),
        "terminal_ms": F.when(sel, F.lit(None).cast("long")).otherwise(F.col("terminal_ms")),
        "updated_run": F.when(sel, F.lit(req.request_id)).otherwise(F.col("updated_run")),
        # without a reset the message gets one delivery beyond the count it had: the ledger suite's bound
        "released_deliveries": F.when(sel, F.lit(None).cast("long") if req.reset_deliveries
                                      else F.col("deliveries")).otherwise(F.col("released_deliveries")),
        # the delivery numbers start again: the idempotency keys they make must not (targets.base.idempotency_key)
        "resets": F.when(sel & F.lit(req.reset_deliveries), F.coalesce(F.col("resets"), F.lit(0)) + 1)
        .otherwise(F.col("resets")).cast("long"),
        # failures from before the reset that land later carry the count it forgave: the merge does not take it. Not
        # earlier than the failures it forgave and the dead-lettering: a retried DAG run asks at its stored run_after,
        # which a cycle that dead-lettered the message since can have passed; nor than the last cycle's as-of, where
        # its spacing starts (_due_times) when the request is applied after it
        "reset_ms": F.when(sel & F.lit(req.reset_deliveries), F.greatest(
            F.lit(start_ms).cast("long"), F.col("last_failed_ms"), F.col("terminal_ms"))).otherwise(F.col("reset_ms")),
    })
    stage = wh.new_stage(req.request_id)
    parquet_options(with_bucket(updated).select(*LEDGER_COLUMNS).write.mode("overwrite").partitionBy("bucket"),
                  LEDGER_UNIQUE_COLUMNS).parquet(str(wh.staged(req.request_id, stage, "ledger")))
    steps.done("stage_ledger", ledger_files_rewritten=len(touched))
    # take every DLQ record of the moved messages out of the DLQ (they are back in the ledger)
    dlq_hit = {r._file for r in dlq.join(chosen, "message_id", "left_semi").select("_file").distinct().collect()}
    dlq_local = dict(zip(dlq_uris, dlq_files, strict=True))
    dlq_touched = sorted(dlq_local[u] for u in _named(dlq_hit, dlq_local, "dlq"))
    uri_of = dict(zip(dlq_files, dlq_uris, strict=True))
    dlq_before = read_files(spark, "dlq", dlq_touched, uris=[uri_of[f] for f in dlq_touched])
    rest = dlq_before.join(chosen, "message_id", "left_anti")
    parquet_options(rest.write.mode("overwrite").partitionBy("address", "dt"), DLQ_UNIQUE_COLUMNS) \
        .parquet(str(wh.staged(req.request_id, stage, "dlq")))
    steps.done("stage_dlq", dlq_files_rewritten=len(dlq_touched))
    if validate:
        staged = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(str(wh.staged(req.request_id, stage, "ledger")))
        counts = _balance(spark, req, chosen, touched, staged, dlq_before,
                          spark.read.schema("message_id string").parquet(str(wh.staged(req.request_id, stage, "dlq"))),
                          moved)
        gate = _validate(wh, req, now_ms, staged, counts)
        audit["validation"] = gate
        steps.done("validate", data_docs=gate["data_docs"])
    crash_point("redrive_after_stage")
    pins.free()
    audit.update(moved=moved, messages=ids, messages_truncated=moved > len(ids))
    new = Snapshot(files={k: list(v) for k, v in snap.files.items()}, runs=list(snap.runs), as_of_ms=snap.as_of_ms)
    drop = {wh.relative(f) for f in touched + dlq_touched}
    for name in ("ledger", "dlq"):
        new.files[name] = [f for f in new.files[name] if f not in drop]
        new.files[name] += wh.publish(req.request_id, name, wh.staged(req.request_id, stage, name))
    return _commit_audit(wh, snap, new, audit)


def _balance(spark: SparkSession, req: RedriveRequest, chosen: DataFrame, touched: list[str], staged: DataFrame,
             dlq_before: DataFrame, dlq_after: DataFrame, moved: int) -> dict[str, int]:
    """The counts of the ``redrive_run`` suite: the rewritten ledger files as committed (``touched``) and as staged,
    and the DLQ records of the rewritten DLQ files (``dlq_before``) against those staged. Read back from what was
    written, so a bug in the rewrite or its write is caught before the commit; the cost is that of the files the
    re-drive rewrites, not of the whole ledger."""
    before = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*touched).count()
    after = staged.agg(
        F.count(F.lit(1)).alias("rows"), F.count_distinct("message_id").alias("ids"),
        F.count_if(F.col("updated_run") == F.lit(req.request_id)).alias("redriven")).collect()[0]
    dlq = dlq_before.join(chosen, "message_id", "left").agg(
        F.count(F.lit(1)).alias("rows"), F.count("_seq").alias("moved_records"),
        F.count_distinct("_seq").alias("moved_ids")).collect()[0]
    left = dlq_after.join(chosen, "message_id", "left").agg(
        F.count(F.lit(1)).alias("rows"), F.count("_seq").alias("left")).collect()[0]
    return {"ledger_rows_before": before, "ledger_rows_after": after["rows"], "ledger_distinct_ids": after["ids"],
            "redriven_rows": after["redriven"], "moved": moved, "moved_with_dlq_record": dlq["moved_ids"],
            "dlq_rows_before": dlq["rows"], "dlq_records_moved": dlq["moved_records"], "dlq_rows_after": left["rows"],
            "moved_left_in_dlq": left["left"]}


def _validate(wh: AnyWarehouse, req: RedriveRequest, now_ms: int, staged: DataFrame,
              counts: dict[str, int]) -> dict[str, Any]:
    """The re-drive's GX gate before its commit (as a cycle's, reprocess.cycle.run._validate): the staged ledger rows
    and the balance. Data Docs go to ``runs/<request_id>/data_docs``; a failed suite raises ValidationFailedError
    (exit 9), nothing committed."""
    from reprocess.validation import suites

    return {**suites.gate(wh, req.request_id, now_ms, [
        (suites.redrive_ledger_frame(staged, req.request_id, now_ms, req.reset_deliveries), "redrive_ledger",
         {"rows": counts["ledger_rows_after"]}),
        (suites.redrive_table(counts), "redrive_run", {"rows": 1}),
    ], what="re-drive", detail=f"; counts {json.dumps(counts, sort_keys=True)}"), "counts": counts}


def _named(uris: set[str], listed: dict[str, str], dataset: str) -> set[str]:
    """``uris`` (files Spark read), each among the snapshot's ``listed`` ones (by Spark's name for them); one that is
    not stops the re-drive, nothing committed (as in a cycle): left out, its messages would stay dead-lettered in the
    ledger while leaving the DLQ, or stay in the DLQ while waiting again."""
    if unnamed := sorted(uris - listed.keys()):
        raise RuntimeError(f"{len(unnamed)} {dataset} files read by Spark as {unnamed[:3]} are not among the "
                           f"snapshot's as Spark names them ({sorted(listed)[:3]}...): nothing committed")
    return uris


def _find_audit(wh: AnyWarehouse, snap: Snapshot, request_id: str) -> dict[str, Any] | None:
    for entry in snap.runs:
        if entry.get("run_id") == request_id:
            path = redrive_audit_path(wh, request_id)
            staged = _staged_audit(wh, request_id)
            # committed, then stopped before its record was written whole and its stage removed: written now, from the
            # staged record (first: a record that a stop cut short, on a store that writes in place, is still there).
            # Only one that is the committed request's: a writer that lost its lease may have staged another since.
            data = wh.read_bytes(staged) if wh.exists(staged) else None
            if data is not None and _is_committed(entry, data):
                wh.write_bytes(path, data)
                wh.clear_run(request_id)
                log.warning("re-drive audit record written after its commit request_id=%s", request_id)
                return dict(json.loads(data))
            if wh.exists(path):
                return dict(json.loads(wh.read_bytes(path)))
            # committed, but its audit file is gone: never apply it twice (an entry older than the snapshot's
            # storage.commit.FULL_RUNS has no summary either)
            return dict(entry.get("summary") or {"request_id": request_id, "moved": None})
    return None


def _is_committed(entry: dict[str, Any], data: bytes) -> bool:
    """Whether the staged audit ``data`` is the one ``entry`` committed (its summary is the audit but for the ids, with
    the ledger's states); an entry past storage.commit.FULL_RUNS has no summary to tell, and is taken to be."""
    summary = entry.get("summary")
    if summary is None:
        return True
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    return isinstance(doc, dict) and ({k: v for k, v in doc.items() if k != "messages"}
                                      == {k: v for k, v in summary.items() if k != "states"})


def settle_redrives(wh: AnyWarehouse, snap: Snapshot) -> None:
    """The re-drives that stopped on their way and were not asked again, settled by the next writer (a cycle or a
    re-drive, under the warehouse's lock). One that committed gets its audit record, as when asked again; before, it
    had none unless asked again, and once its entry was past storage.commit.FULL_RUNS neither the record nor the ids of
    what it moved were anywhere. One that did not commit left a stage (rewritten ledger and DLQ files, payloads with
    them) that nothing removed: removed, since a re-drive keeps nothing between attempts (asked again, it starts
    over). On object storage only while this writer's lease holds (checked before each): a writer paused past its
    lease would remove the stage of the re-drive that took the lease over, which then committed without its files."""
    committed = {entry.get("run_id") for entry in snap.runs}
    for request_id in wh.run_ids("redrive-"):
        wh.check_lease()
        if request_id in committed:
            try:
                _find_audit(wh, snap, request_id)
            except (OSError, ValueError) as exc:  # its record unreadable: that request's to answer, not every writer's
                log.warning("re-drive request_id=%s committed, but its audit record could not be completed (%s: %s); "
                            "asked again, it says why", request_id, type(exc).__name__, exc)
                continue
        else:
            log.warning("removing the stage of re-drive request_id=%s, which stopped before its commit: nothing of it "
                        "was committed; asked again, it starts over", request_id)
        wh.clear_run(request_id)  # (a committed one's: what is left, such as a staged record not the committed one)


def _staged_audit(wh: AnyWarehouse, request_id: str) -> str:
    return str(wh.run_dir(request_id) / "audit.json")


def _commit_audit(wh: AnyWarehouse, base: Snapshot, new: Snapshot, audit: dict[str, Any]) -> dict[str, Any]:
    """Commit ``new`` with the request's entry (its audit as summary), then write the audit record. Written into
    ``redrive_audit/`` first, a commit that failed (a full disk, a store down, a kill) left a record of a move that
    never happened; so it is staged beside the run until the commit, and a stop between the two is completed by
    the next call of the request (_find_audit)."""
    data = (json.dumps(audit, indent=2, sort_keys=True) + "\n").encode("utf-8")
    wh.write_bytes(_staged_audit(wh, audit["request_id"]), data)
    if new is base:
        new = Snapshot(files={k: list(v) for k, v in base.files.items()}, runs=list(base.runs),
                       as_of_ms=base.as_of_ms)
    # its Data Docs (when its gate ran) expire with the cycles', aged from the request's now (not the snapshot's as-of,
    # which may be weeks older when cycles were paused: storage.commit.expire_data_docs)
    docs = {"data_docs": True, "docs_as_of_ms": audit["request"]["now_ms"]} if "validation" in audit else {}
    new.runs.append({"run_id": audit["request_id"], "kind": "redrive", "as_of_ms": base.as_of_ms,
                     "summary": {k: v for k, v in audit.items() if k != "messages"}
                     | {"states": _carry_states(base, audit["moved"])}, **docs})
    crash_point("redrive_after_publish")
    wh.commit(base, new)
    crash_point("redrive_after_commit")
    wh.write_bytes(redrive_audit_path(wh, audit["request_id"]), data)
    crash_point("redrive_after_record")
    wh.vacuum(new, keep_previous=base)
    wh.clear_run(audit["request_id"])
    log.info("re-drive committed request_id=%s moved=%s by=%s", audit["request_id"], audit["moved"],
             audit["requested_by"])
    return audit


def _carry_states(snap: Snapshot, moved: int) -> dict[str, int]:
    """The ledger's state counts after moving ``moved`` dead letters back to waiting."""
    states: dict[str, int] = {}
    for r in reversed(snap.runs):
        if "states" in r.get("summary", {}):
            states = dict(r["summary"]["states"])
            break
    if moved:
        states["DEAD_LETTERED"] = states.get("DEAD_LETTERED", 0) - moved
        states[WAITING] = states.get(WAITING, 0) + moved
    return states
