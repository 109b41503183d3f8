"""One reprocessing cycle as of a point in time: landing -> ledger -> re-drive -> DLQ, committed atomically.

The steps (docs/adr/0003-commit-protocol.md):

1. take the warehouse lock; finish any prepared-but-uncommitted run first;
2. pick the landing files (or the prepared run's files), parse them, quarantine bad records;
3. merge the new failures into the ledger files they touch plus the due buckets;
4. select the due messages, persist their delivery numbers (``prepared.json`` + ``inflight``);
5. re-drive them through the target, once, and stage the outcomes;
6. apply outcomes, write ledger/DLQ/outbox/quarantine/manifest to the run's stage;
7. check conservation, publish the staged files, create the next snapshot (the commit point).

Inside a cycle "now" is the as-of: failures of re-drives happen "at" the as-of.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import functions as F

from reprocess.cycle.landing_batch import Batch, read_batch, spark_file_uris, with_long_lines
from reprocess.errors import (
    ConfigError,
    ConservationError,
    OutOfOrderError,
    TargetUnavailableError,
    ValidationFailedError,
)
from reprocess.landing import contract
from reprocess.landing.long_lines import DEFAULT_MAX_LINE_BYTES
from reprocess.landing.manifest import LandingFile, ManifestEntry, list_landing, manifest_bytes, pending, read_manifest
from reprocess.ledger.merge import (
    aggregate_failures,
    apply_outcomes,
    errors_hash,
    merge_failures,
    non_retryable_column,
    under_current_policy,
    with_bucket,
)
from reprocess.ledger.model import (
    DEAD_LETTERED,
    LEDGER_COLUMNS,
    LEDGER_FILE_SCHEMA,
    LEDGER_UNIQUE_COLUMNS,
    REASON_CODES,
    STATES,
    WAITING,
    waiting_bucket,
    waiting_bucket_of,
)
from reprocess.policy.columns import policy_index_column
from reprocess.policy.wildcard import to_regex
from reprocess.redrive import settle_redrives
from reprocess.routing.dlq import DLQ_UNIQUE_COLUMNS, dlq_records
from reprocess.sparkutil import (
    ADAPTIVE_KEY,
    AS_OF_COLUMN,
    SHUFFLE_KEYS,
    Pinned,
    base_partitions,
    cache_level,
    cache_memory_bytes,
    fit_codegen,
    fit_shuffles,
    is_small,
    owner_only_writes,
    parquet_options,
    pinning,
    restoring_conf,
    sized_codegen,
    truncates_plans,
    with_as_of,
)
from reprocess.steps import StepLog, crash_point
from reprocess.storage.commit import (
    DATA_DOCS_DAYS,
    AnyWarehouse,
    Snapshot,
    check_data_docs_days,
    clear_committed_runs,
    done_parts,
    expire_data_docs,
    not_applied,
    not_applied_text,
    open_warehouse,
    run_summary,
    with_docs_state,
)
from reprocess.storage.read import naming_damaged_files, read_files
from reprocess.targets.base import (
    DESTINATION_DOWN,
    NOT_TRIED,
    OUTCOME_SCHEMA,
    TARGET_DOWN,
    RunContext,
    expand_target,
    parse_target,
)
from reprocess.targets.broker import redact
from reprocess.uris import remote_scheme
from reprocess.validation import rowchecks, suites

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from reprocess.policy.config import PolicySet
    from reprocess.targets.base import Target

log = logging.getLogger(__name__)


@dataclass
class CycleOptions:
    landing: str
    warehouse: str
    policies: PolicySet
    as_of_ms: int
    target: str = "outbox"
    dry_run: bool = False
    address_filter: str | None = None  # only re-drive due messages whose address matches (wildcards)
    max_payload_bytes: int = contract.DEFAULT_MAX_PAYLOAD_BYTES
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES  # a longer line is quarantined unread (landing.long_lines)
    max_future_ms: int = contract.DEFAULT_MAX_FUTURE_MS
    lock_wait_seconds: float = 0.0
    private_files: bool | None = None  # owner-only files (0600/0700); None: $REPROCESS_PRIVATE_FILES
    validate: bool = True  # GX suites gate the commit; Data Docs under runs/<run_id>/data_docs
    # the Data Docs of cycles with an as-of more than this many days earlier are removed at the commit; None: kept
    data_docs_days: float | None = DATA_DOCS_DAYS
    extra: dict[str, Any] = field(default_factory=dict)
    # a resumed run's: each policy's own target (by name) as its prepared.json recorded it; None: the policies'
    policy_targets: dict[str, str] | None = None

    def __post_init__(self) -> None:
        check_data_docs_days(self.data_docs_days)


RECORDED_TARGET = "_target"  # a resumed run's due rows: the target its prepare recorded for each (inflight's target)
CRASH_POINTS = ("after_prepare", "after_redrive", "after_stage", "after_publish")
# and "after_redrive_group", after each target's share of the re-drive (a run with several targets)
# The steps a cycle logs (``step=<name> ... seconds=``), in order; validate only when the GX gate is on.
STEPS = ("landing", "locate", "merge", "select_due", "redrive", "stage_ledger", "stage_dlq",
         "stage_quarantine_and_manifest", "summary", "validate")


def run_id_for(as_of_ms: int) -> str:
    """``run-20261121T101500Z`` (milliseconds appended when not zero): one run per as-of."""
    dt = datetime.fromtimestamp(as_of_ms / 1000, tz=UTC)
    ms = as_of_ms % 1000
    return "run-" + dt.strftime("%Y%m%dT%H%M%S") + (f"{ms:03d}" if ms else "") + "Z"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def run_cycle(spark: SparkSession, opts: CycleOptions) -> dict[str, Any]:
    """Run (or resume, or recognise as done) the cycle as of ``opts.as_of_ms``; return its summary."""
    wh = open_warehouse(opts.warehouse, private=opts.private_files)
    with owner_only_writes(wh.private), sized_codegen(spark):
        return _run_cycle(spark, wh, opts)


def _run_cycle(spark: SparkSession, wh: AnyWarehouse, opts: CycleOptions) -> dict[str, Any]:
    run_id = run_id_for(opts.as_of_ms)
    if opts.dry_run:
        return _execute(spark, wh, wh.latest(), opts, run_id, prepared=None)
    with wh.lock(owner=run_id, wait_seconds=opts.lock_wait_seconds):
        for prep in wh.prepared_runs():
            log.warning("resuming run_id=%s that persisted its deliveries but did not commit", prep["run_id"])
            if prep.get("outcomes"):  # its re-drive is done: no target is called (only the outbox, which needs none)
                target, policy_targets = prep["target"], prep.get("policy_targets")
            else:
                target = _prepared_target(prep, opts)
                policy_targets = _prepared_policy_targets(prep, opts.policies, opts.target,
                                                          functools.partial(_inflight_targets, spark, wh, prep),
                                                          opts.warehouse)
            resumed = CycleOptions(**{**opts.__dict__, "as_of_ms": prep["as_of_ms"], "target": target,
                                      "address_filter": prep.get("address_filter"), "policy_targets": policy_targets})
            try:
                _execute(spark, wh, wh.latest(), resumed, prep["run_id"], prepared=prep)
            except TargetUnavailableError as exc:
                # committed, what its target did not take left due: this run goes on, and re-drives them with its
                # own if they are due by its as-of (they failed the resumed run's whole call before)
                log.warning("resumed run_id=%s committed with its target down; going on with run_id=%s: %s",
                            prep["run_id"], run_id, exc)
        snap = wh.latest()
        settle_redrives(wh, snap)  # commits nothing: the snapshot stands
        clear_committed_runs(wh, snap)
        done = snap.runs_at(opts.as_of_ms)
        if done:
            last = done[-1]
            summary = run_summary(wh, last) or {"run_id": last["run_id"]}
            left = summary.get("target_down", {}).get("left_due", 0)
            if left and snap.as_of_ms == opts.as_of_ms:
                follow_up = f"{run_id}-{len(done) + 1}"
                log.warning("run_id=%s left %s due messages when its target failed; re-driving them as run_id=%s",
                            last["run_id"], left, follow_up)
                return _execute(spark, wh, snap, opts, follow_up, prepared=None)
            log.info("run already committed, nothing to do run_id=%s", last["run_id"])
            done_summary = {**with_docs_state(wh, last, summary), "already_committed": True}
            # a run resumed (by this call or another) says so in its summary, and is never judged (not_applied)
            diff = not_applied(summary, opts.address_filter, redact(opts.target))
            if diff:  # shown as this request's results, they were not: say so (the CLI, the DAG's note)
                log.warning("run_id=%s %s", last["run_id"], not_applied_text(diff))
                done_summary["not_applied"] = diff
            return done_summary
        if snap.as_of_ms is not None and opts.as_of_ms < snap.as_of_ms:
            raise OutOfOrderError(
                f"as-of {iso(opts.as_of_ms)} is before the last committed as-of {iso(snap.as_of_ms)} of "
                f"{opts.warehouse}; runs must move forward in time (backfill into a fresh warehouse)")
        return _execute(spark, wh, snap, opts, run_id, prepared=None)


def _policy_targets(policies: PolicySet) -> dict[str, str]:
    """Each policy's own target, by its name (:attr:`Policy.name`), as written (``${VAR}`` unexpanded)."""
    return {p.name: p.target for p in policies.policies if p.target}


def _written_targets(run_target: str, policies: PolicySet) -> dict[str, str]:
    """Each target written now, by its redacted spelling (as prepared.json records it): the run's target, then the
    policies' own in file order. Two that differ only in their password (one rotated in one place) make one entry,
    the first: a resumed run takes each recorded target's password from here, the same for the run's and a
    policy's."""
    written: dict[str, str] = {}
    for spec in [run_target, *_policy_targets(policies).values()]:
        written.setdefault(redact(spec), spec)
    return written


def _prepared_target(prep: dict[str, Any], opts: CycleOptions) -> str:
    """The run's target a prepared run resumes with: the one it prepared with (recorded redacted), its password taken
    from where that target is written now (_written_targets: the target passed, or a policy's own)."""
    target = _written_targets(opts.target, opts.policies).get(prep["target"], prep["target"])
    if "***" in target:
        raise ConfigError(f"run {prep['run_id']} must be resumed with its target {target} (the password is not "
                          f"stored): pass the same --target{_way_out(opts.warehouse, prep['run_id'])}", key="--target")
    return target


def _way_out(warehouse: str | None, run_id: str) -> str:
    """How a prepared run whose target is gone for good is given up (end of a sentence)."""
    if warehouse is None:
        return ""
    through = " with the run's --master or --remote" if remote_scheme(warehouse) else ""
    return (f"; or, if it is gone for good, abandon the run (reprocess prepared abandon --warehouse {warehouse} "
            f"{run_id}{through}) and run again")


def _inflight_targets(spark: SparkSession, wh: AnyWarehouse, prep: dict[str, Any]) -> set[str] | None:
    """The (redacted) targets a prepared run's inflight deliveries were recorded for; None when its prepare recorded
    none (older code)."""
    inflight = spark.read.parquet(str(wh.run_dir(prep["run_id"]) / prep.get("inflight", "inflight")))
    if "target" not in inflight.columns:
        return None
    return {r.target for r in inflight.select("target").distinct().collect()}


def _prepared_policy_targets(prep: dict[str, Any], policies: PolicySet, run_target: str = "outbox",
                             inflight_targets: Callable[[], set[str] | None] = lambda: None,
                             warehouse: str | None = None) -> dict[str, str] | None:
    """The policies' own targets a prepared run re-drives through when it resumes: the ones it prepared with, as
    its run target. A policy file changed in between (a policy's target changed, added or removed) would otherwise
    send the rest of the run elsewhere, and the messages its first attempt delivered again to a second target,
    where their idempotency keys mean nothing. A spec stored with a password (``***``) takes it from where that
    target is written now (_written_targets: ``run_target`` or any policy's own, so a policy renamed or removed whose
    target is still written somewhere resumes, its password rotated or not); otherwise the run cannot resume, unless
    none of its inflight deliveries was recorded for that target (``inflight_targets``, asked only then: the run
    needs no such target, and it is left out), or its share of the re-drive is done (``outcomes_done``: it is
    called no more). None for a run prepared before they were recorded: the policy file's."""
    stored: dict[str, str] | None = prep.get("policy_targets")
    if stored is None:
        return None
    done = {part["target"] for part in done_parts(prep)}
    current = _policy_targets(policies)
    written = _written_targets(run_target, policies)
    targets: dict[str, str] = {}
    used: list[set[str] | None] = []  # the inflight targets, once asked
    for match, spec in stored.items():
        if spec in done:  # called no more: not even its ${VAR}s need to be there (its recorded rows are done)
            if not used:
                used.append(inflight_targets())
            if used[0] is not None:
                log.info("resuming run_id=%s without the target %s of policy %r: its share of the re-drive is done",
                         prep["run_id"], spec, match)
                continue
        if spec in written or "***" not in spec:
            targets[match] = written.get(spec, spec)
            continue
        if not used:
            used.append(inflight_targets())
        if used[0] is not None and spec not in used[0]:
            log.info("resuming run_id=%s without the target %s of policy %r: none of its deliveries was recorded "
                     "for it", prep["run_id"], spec, match)
            continue
        raise ConfigError(f"run {prep['run_id']} must be resumed with its target {spec} for policy {match!r} (the "
                          "password is not stored): write that target back in the policy file, under any policy "
                          f"or as the run's target{_way_out(warehouse, prep['run_id'])}", key="target")
    if targets != current:
        log.warning("resuming run_id=%s with the policies' own targets it prepared with, not the policy file's: %s",
                    prep["run_id"], {m: redact(t) for m, t in targets.items()})
    return targets


def _landing_files(spark: SparkSession, opts: CycleOptions, manifest: dict[str, ManifestEntry],
                   prepared: dict[str, Any] | None) -> tuple[list[LandingFile], list[str]]:
    if prepared is not None:
        return [LandingFile(**f) for f in prepared["files"]], []
    return pending(list_landing(opts.landing, opts.as_of_ms, spark), manifest, opts.as_of_ms)


def _execute(spark: SparkSession, wh: AnyWarehouse, snap: Snapshot, opts: CycleOptions, run_id: str,
             prepared: dict[str, Any] | None) -> dict[str, Any]:
    """One run on ``snap``. A file ``snap`` lists that Spark cannot read (deleted or overwritten outside reprocess)
    stops it as a :class:`WarehouseDamagedError` naming the file, not a Java stack trace; nothing is committed."""
    with naming_damaged_files(wh.uri, snap), restoring_conf(spark, *SHUFFLE_KEYS) as entry, pinning() as pins:
        return _execute_run(spark, wh, snap, opts, run_id, prepared, entry, pins)


def _execute_run(spark: SparkSession, wh: AnyWarehouse, snap: Snapshot, opts: CycleOptions, run_id: str,
                 prepared: dict[str, Any] | None, shuffles: dict[str, str | None], pins: Pinned) -> dict[str, Any]:
    """The run; ``shuffles``: the session's shuffle settings (sparkutil.fit_shuffles), sized to the input for this
    run; ``pins``: where it keeps its frames (sparkutil.pinning frees them if it fails)."""
    t0 = time.monotonic()
    steps = StepLog(log, STEPS, "run_id", run_id)
    policies = opts.policies
    as_of = opts.as_of_ms
    # A crashed attempt may have left staged files, or (over Spark Connect) a job still writing them: this attempt
    # stages under a name of its own (the inflight list of a prepared run stays where prepared.json says).
    stage = wh.stage_dir(run_id) if opts.dry_run else wh.new_stage(run_id)
    manifest = read_manifest(wh.live_files("manifest", snap), wh.read_source)
    files, changed = _landing_files(spark, opts, manifest, prepared)
    log.info("cycle start run_id=%s as_of=%s landing_files=%s snapshot=%s dry_run=%s", run_id, iso(as_of),
             len(files), snap.version, opts.dry_run)

    landing_bytes = sum(f.size for f in files)
    # A small input runs interpreted, without adaptive execution, its shuffles in one partition (sparkutil); the
    # landing step's shuffles otherwise keep the session's count, raised only once the ledger's share is known.
    codegen = fit_codegen(spark, landing_bytes)
    fit_shuffles(spark, 0, shuffles, small=codegen == "interpreted")
    cache_budget = cache_memory_bytes(spark)
    # -- 1. landing -------------------------------------------------------------------------------
    # The landing is read one whole file per task, or in splits numbered by a first pass (its record numbers need
    # one or the other: contract.read_text_records), until it is in the cache; the ledger and the staged files are
    # read afterwards with the session's own splitting of small files.
    # A small landing in a local driver is checkpointed, not cached (sparkutil.truncates_plans).
    landing_checkpoint = truncates_plans(spark, codegen == "interpreted")
    with restoring_conf(spark, *contract.FILE_SPLIT_KEYS):
        batch, rec = landed(spark, files, manifest, opts, codegen)
        # what the cache holds is about the landing's bytes as read (a .gz file's decoded, where known)
        read_bytes = sum(max(batch.text_bytes.get(f.path, f.size), f.size) for f in files)
        level, cache = cache_level(cache_budget, read_bytes)
        kept = pins.pin(rec, level, landing_checkpoint)
        landing_read = "splits" if batch.split_files else "splits_then_whole_files" if batch.read_again \
            else "whole_files"
        try:  # parses the batch into the cache once, for every use below, and adds up each file's lines
            rec, records_read, payload_bytes = with_long_lines(spark, kept, batch, manifest, opts.max_line_bytes)
        except contract.SplitTooLong as exc:  # rare: a split read cannot number around such lines; a whole one can
            log.warning("%s: the landing is read again, one whole file per task", exc)
            landing_read = "splits_then_whole_files"
            pins.unpin(kept)
            batch, rec = landed(spark, files, manifest, opts, codegen, split=False, checked=batch)
            kept = pins.pin(rec, level, landing_checkpoint)
            rec, records_read, payload_bytes = with_long_lines(spark, kept, batch, manifest, opts.max_line_bytes,
                                                               exc.scanned)
    bad = rec.filter(F.col("bad"))
    fresh = rec.filter(F.col("in_window"))
    fresh = fresh.withColumns({
        "non_retryable": non_retryable_column(policies, F.col("policy_idx"), F.col("error_class"),
                                              F.col("error_message")),
        "fp_v1": fingerprints()[1],  # not in the cache: the new failures' alone (merge.recorded_dropped)
        "errors": F.expr(errors_hash("error_class", "error_message"))})
    failures = aggregate_failures(fresh)

    steps.done("landing", files=len(files), records=records_read, codegen=codegen, cache=cache,
               checkpoint=landing_checkpoint, read=landing_read)
    # -- 2. the ledger files this run touches ----------------------------------------------------
    ledger_files = wh.live_files("ledger", snap)
    due_limit = waiting_bucket(as_of)
    due_files = [f for f in ledger_files if (b := waiting_bucket_of(f)) is not None and b <= due_limit]
    hit_files: list[str] = []
    scan_codegen = None
    prev_states = _prev_states(snap)
    if ledger_files:
        # The scan reads an id per ledger row (their number is in the last run's summary): its code generation is
        # sized to those rows, not to the landing alone.
        scan_codegen = fit_codegen(spark, landing_bytes, scan_rows=sum(prev_states.values()))
        fit_shuffles(spark, 0, shuffles, small=scan_codegen == "interpreted")
        ids = fresh.select("message_id").distinct()
        located = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*ledger_files).select(
            "message_id", F.col("_metadata.file_path").alias("uri")).join(ids, "message_id", "left_semi")
        uris = {r.uri for r in located.select("uri").distinct().collect()}
        to_local = dict(zip(spark_file_uris(spark, ledger_files), ledger_files, strict=True))
        if unnamed := sorted(uris - to_local.keys()):
            # a ledger file Spark names otherwise than the warehouse lists it: its rows would not be rewritten and
            # the merge would add each of its messages again, as new
            raise RuntimeError(f"{len(unnamed)} ledger files read by Spark as {unnamed[:3]} are not among the "
                               f"warehouse's as Spark names them ({sorted(to_local)[:3]}...): nothing committed")
        hit_files = sorted(to_local[u] for u in uris)
    touched = sorted(set(due_files) | set(hit_files))
    existing = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*touched) if touched else None
    touched_bytes = sum(wh.sizes(touched))
    input_bytes = landing_bytes + touched_bytes
    codegen = fit_codegen(spark, input_bytes)
    # The ordered hold-back reads every waiting ledger row, not only the files this run rewrites: many of them keep
    # the session's shuffles, whose joins adapt to what the scan finds.
    held_back_rows = prev_states.get(WAITING, 0) if any(p.ordered for p in policies.policies) else 0
    small = is_small(input_bytes, held_back_rows)
    record_bytes = _record_bytes(payload_bytes, records_read, touched_bytes, len(touched), len(ledger_files),
                                 sum(prev_states.values()))
    partitions = fit_shuffles(spark, input_bytes, shuffles, small=small, record_bytes=record_bytes)
    # the merged ledger rows, the due ones and the outcomes carry the landing's payloads and those of the files read
    level, cache = cache_level(cache_budget, read_bytes + touched_bytes)
    truncate = truncates_plans(spark, small)  # a small local run checkpoints the frames below (sparkutil.pin)
    steps.done("locate", ledger_files=len(ledger_files), touched=len(touched), scan_codegen=scan_codegen,
               codegen=codegen, shuffle_partitions=partitions, record_bytes=record_bytes, cache=cache,
               checkpoint=truncate)
    merged = pins.pin(merge_failures(existing, failures, policies, run_id, as_of, codegen), level, truncate)
    counted = merged.agg(F.count(F.lit(1)).alias("rows"),
                         F.sum(F.col("revived").cast("long")).alias("revived"),
                         F.count("conflict_groups").alias("group_conflicts")).collect()
    revived = int(counted[0]["revived"] or 0)
    group_conflicts = int(counted[0]["group_conflicts"] or 0)
    if group_conflicts:
        _log_group_conflicts(merged, group_conflicts)
    steps.done("merge", ledger_rows=counted[0]["rows"], revived=revived, group_conflicts=group_conflicts)

    # -- 3. due selection ------------------------------------------------------------------------
    due = due_at(merged, as_of, codegen)
    if opts.address_filter:
        due = due.filter(F.concat(F.col("address"), F.lit(".")).rlike(to_regex(opts.address_filter)))
    # re-driven through the target and ordering of the policy that matches each message now, not the one it was kept
    # under: a policy added, renamed or reordered since takes its waiting messages from their next re-drive on
    due = under_current_policy(due, policies)
    due = _hold_back_ordered(spark, due, merged, policies, wh, snap, touched)
    if prepared is not None:
        inflight = spark.read.parquet(str(wh.run_dir(run_id) / prepared.get("inflight", "inflight")))
        # each message's target as the run prepared it (a run prepared before they were recorded: by its policy)
        recorded = [F.col("target").alias(RECORDED_TARGET)] if "target" in inflight.columns else []
        due = due.join(inflight.select("message_id", F.col("delivery").alias("_prep"), *recorded), "message_id",
                       "inner").filter(F.col("delivery") == F.col("_prep")).drop("_prep")
    due = pins.pin(due, level, truncate)
    due_count, lateness = _due_stats(due)
    steps.done("select_due", due=due_count)

    if opts.dry_run:
        summary = _dry_summary(_landing_counts(rec, files)[0], merged, due_count, run_id, as_of, files)
        pins.free()
        return summary

    # -- 4. persist deliveries before re-driving them --------------------------------------------
    groups = None  # a resumed run's are taken by the targets recorded, once it has due messages (_redrive)
    if prepared is None:
        groups = _target_groups(opts)
        inflight_name = f"inflight-{stage.name}"  # this attempt's own: no left-over job can write into it
        parquet_options(due.select("message_id", "delivery", _target_column(groups))
                        .write.mode("overwrite"), ["message_id"]).parquet(str(wh.run_dir(run_id) / inflight_name))
        prepared_doc = {"run_id": run_id, "as_of_ms": as_of, "target": redact(opts.target),
                        "policy_targets": {m: redact(t) for m, t in _policy_targets(opts.policies).items()},
                        "address_filter": opts.address_filter, "due": due_count, "inflight": inflight_name,
                        "files": [f.__dict__ for f in files], "snapshot": snap.version}
        wh.write_prepared(run_id, prepared_doc)
        crash_point("after_prepare")
    elif due_count != prepared["due"]:
        raise ConservationError(
            f"resuming {run_id}: {due_count} due messages, but {prepared['due']} were persisted: what decides the due "
            "set changed since the run was prepared (the policy file: a delay, a bound, a non_retryable rule, a "
            "policy removed, or an ordered one added, renamed or made so; or --max-payload-bytes, --max-future-ms, "
            "--max-line-bytes). Put it "
            f"back as it was until this run has committed, or forget the run (`reprocess prepared abandon {run_id}`, "
            "with --force once a target's share of its re-drive is done: the next cycle selects its due messages "
            "again, and sends again what it had sent, with the same idempotency keys)")
    else:
        prepared_doc = dict(prepared)

    # -- 5. re-drive -----------------------------------------------------------------------------
    ctx = RunContext(run_id, as_of, str(stage), codegen, outbox_dir=str(wh.staged(run_id, stage, "outbox")))
    outcomes, target_down = _redrive_once(spark, wh, opts, due, due_count, ctx, prepared_doc, groups, stage.name)
    steps.done("redrive", due=due_count)
    crash_point("after_redrive")
    final = pins.pin(with_bucket(apply_outcomes(merged, outcomes, policies, run_id, as_of, codegen)), level, truncate)

    # -- 6. stage outputs ------------------------------------------------------------------------
    # Written by as many tasks as the session's own count, however many partitions a large input got: each task
    # writes a file per bucket it holds rows of, and every later run's locate step opens every ledger file.
    ledger_rows = final.select(*LEDGER_COLUMNS)
    if partitions > base_partitions(shuffles):
        ledger_rows = ledger_rows.coalesce(base_partitions(shuffles))
    parquet_options(ledger_rows.write.mode("overwrite").partitionBy("bucket"), LEDGER_UNIQUE_COLUMNS) \
        .parquet(str(wh.staged(run_id, stage, "ledger")))
    steps.done("stage_ledger")
    # One file per DLQ partition per run, not one per task and partition: the dead letters are a small share of
    # the ledger, and each task wrote a file into every address/day it had rows for (112 files of 50k rows at 1M
    # messages, mostly the cost of opening and closing Parquet writers). Rebalancing by the partition columns
    # shuffles only the dead letters; adaptive execution merges small shuffle partitions and splits a skewed one.
    # Spark ignores the hint without adaptive execution (a small run's, sparkutil.fit_shuffles), with a warning: there a
    # plain repartition by the same columns puts each address and day in one task.
    dlq = dlq_records(final.filter(F.col("dlq_event")), run_id, as_of, codegen)
    adaptive = spark.conf.get(ADAPTIVE_KEY, "true") == "true"
    dlq = dlq.hint("rebalance", "address", "dt") if adaptive else dlq.repartition("address", "dt")
    writer = dlq.write.mode("overwrite").partitionBy("address", "dt")
    parquet_options(writer, DLQ_UNIQUE_COLUMNS).parquet(str(wh.staged(run_id, stage, "dlq")))
    dropped_dlq = _drop_revived_dead_letters(spark, wh, snap, merged, str(wh.staged(run_id, stage, "dlq"))) \
        if revived else []
    steps.done("stage_dlq", dlq_files_rewritten=len(dropped_dlq))
    quarantine = _quarantine_rows(spark, bad, batch.corrupt, run_id, as_of, codegen)
    parquet_options(quarantine.write.mode("overwrite").partitionBy("dt"), ("raw",)) \
        .parquet(str(wh.staged(run_id, stage, "quarantine")))
    landing_counts, deferred_files = _landing_counts(rec, files)
    entries = _manifest_entries(files, manifest, batch.corrupt, deferred_files, as_of, run_id, opts.max_future_ms,
                                changed, opts.max_line_bytes)
    wh.write_bytes(str(wh.staged(run_id, stage, "manifest") / "manifest.parquet"),
                   manifest_bytes(list(entries.values())))
    steps.done("stage_quarantine_and_manifest")
    crash_point("after_stage")
    # -- 7. count, check, publish, commit ---------------------------------------------------------
    summary = _summary(spark, landing_counts, final, lateness, quarantine, run_id, as_of, files, changed, batch.corrupt,
                       redact(opts.target), snap, touched, due_count, target_down)
    if target_down is not None:
        summary["target_down"] = {**target_down, "left_due": summary["balance"]["left_due"]}
    summary["address_filter"] = opts.address_filter or None  # a later request at this as-of is told if it differs
    # committed by whichever call resumed it, with the options of its prepare: no later request is judged against it
    summary["resumed"] = prepared is not None
    steps.done("summary")
    _gate(wh, run_id, as_of, fresh, final, dlq, summary, opts, steps)
    summary["elapsed_s"] = round(time.monotonic() - t0, 3)
    summary["step_seconds"] = steps.timings
    summary["codegen"] = codegen  # how its expressions ran: interpreted, generated (sparkutil.fit_codegen)
    summary["landing_parser"] = "jvm" if batch.jvm_parser else "expressions"  # docs/adr/0006
    summary["landing_read"] = landing_read  # text files whole, one per task, or in splits (docs/adr/0007)
    # The driver's heap as Spark was given it (spark-submit's own default is 1g); in local mode the tasks run in it.
    summary["driver_memory"] = spark.conf.get("spark.driver.memory", "1g")
    new = Snapshot(files={k: list(v) for k, v in snap.files.items()}, runs=list(snap.runs),
                   as_of_ms=max(as_of, snap.as_of_ms or as_of))
    touched_rel = {wh.relative(f) for f in touched}
    new.files["ledger"] = [f for f in new.files["ledger"] if f not in touched_rel]
    dropped_rel = {wh.relative(f) for f in dropped_dlq}
    new.files["dlq"] = [f for f in new.files["dlq"] if f not in dropped_rel]
    for name in ("ledger", "dlq", "outbox", "quarantine"):
        new.files[name] += wh.publish(run_id, name, wh.staged(run_id, stage, name))
    new.files["manifest"] = wh.publish(run_id, "manifest", wh.staged(run_id, stage, "manifest"))
    crash_point("after_publish")
    # the summary is written outside the commit's condition: a writer that lost its lease (paused past it while
    # another resumed and committed this run) would replace the committed attempt's summary with its own
    wh.check_lease()
    wh.write_bytes(str(wh.path("runs", run_id, "summary.json")),
                   (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    docs = {"data_docs": True} if opts.validate else {}  # until expire_data_docs removes them, past the retention
    new.runs.append({"run_id": run_id, "as_of_ms": as_of, "summary": summary, **docs})
    expire_data_docs(wh, new, as_of, opts.data_docs_days)
    wh.commit(snap, new)
    crash_point("after_commit")  # (not in CRASH_POINTS, whose runs commit nothing: the next call clears its folder)
    pins.free()
    wh.vacuum(new, keep_previous=snap)
    wh.clear_run(run_id)
    log.info("cycle committed run_id=%s due=%s delivered=%s rescheduled=%s dead_lettered=%s elapsed_s=%s", run_id,
             summary["due"], summary["delivered"], summary["rescheduled"], summary["dead_lettered"]["total"],
             summary["elapsed_s"])
    if target_down is not None:
        raise TargetUnavailableError(
            f"target {redact(opts.target)} failed during run {run_id}: {target_down['error']}. Committed what it "
            f"confirmed ({summary['delivered']} delivered, {summary['rescheduled']} rescheduled); "
            f"{summary['balance']['left_due']} due messages consumed no delivery and stay due: re-run the same "
            "as-of (the Airflow task retry does) or wait for the next run.")
    return summary


def landed(spark: SparkSession, files: list[LandingFile], manifest: dict[str, ManifestEntry], opts: CycleOptions,
           codegen: str, split: Literal[False] | None = None, checked: Batch | None = None,
           ) -> tuple[Batch, DataFrame]:
    """The run's landing batch and its records, parsed and checked: ``problem`` names why a record is quarantined
    (the contract, no policy for its address, the landing suite's row-level expectations), ``bad`` whether this run
    quarantines it, ``in_window`` whether it is a new failure of this run, ``deferred`` whether it waits for a later
    as-of, ``fp`` its fingerprint. ``codegen`` is the cycle's code generation mode (:func:`with_as_of`).

    Each record is decided once, by the run whose as-of passes its failure time (one without a usable time, or more
    than ``max_future_ms`` after the as-of, by its file's first read): quarantined if it has a problem then, else
    ingested. Until then it waits, problem or not, and its file is read again. A record a re-read finds decided
    already (at or before the last read's as-of, or beyond the first read's future bound, ``prev_future_ms``) is
    skipped. (Problems were taken from the first read only: a record that waited and then broke a check (its policy
    removed, a lower payload limit) was dropped, and one quarantined as from the future was ingested when its time
    came.)

    ``checked``: the batch of this run's read in splits, when the landing is read again whole (read_batch)."""
    policies = opts.policies
    batch = read_batch(spark, files, manifest, opts.as_of_ms, opts.max_payload_bytes, opts.max_future_ms, codegen,
                       opts.max_line_bytes, split, checked)
    rec = batch.records.withColumns({
        "policy_idx": policy_index_column(policies, F.col("address"), F.col("consumer_group")),
        suites.FAILED_AFTER_AS_OF: suites.failed_after_as_of(batch.as_of)})
    rec = rec.withColumn("problem", F.when(F.col("problem").isNull() & F.col("policy_idx").isNull(),
                                           F.lit(contract.UNKNOWN_ADDRESS)).otherwise(F.col("problem")))
    rec = rec.withColumn("problem_detail", F.when(
        F.col("problem") == contract.UNKNOWN_ADDRESS,
        F.concat(F.lit("no policy matches address "), F.to_json(F.array("address")),
                 F.lit(" (add a '#' default policy or a matching one; a consumer group's policies take only its "
                       "messages)"))).otherwise(F.col("problem_detail")))
    # The landing suite's row-level expectations, in the same pass: a record that parsed but breaks one is
    # quarantined with the names of the expectations it broke (records that did not parse name none).
    params = suites.landing_params(opts.max_payload_bytes, opts.max_future_ms)
    broken = rowchecks.broken_expectations(suites.load_suite("landing"), suites.landing_columns(), params)
    unparsed = F.col("problem").isin(contract.INVALID_UTF8, contract.MALFORMED_JSON, contract.NOT_AN_OBJECT)
    rec = rec.withColumn("expectations", F.when(F.coalesce(unparsed, F.lit(False)), F.array().cast("array<string>"))
                         .otherwise(broken))
    breaks_suite = F.col("problem").isNull() & (F.size("expectations") > 0)
    rec = rec.withColumns({
        "problem_detail": F.when(breaks_suite, F.concat(F.lit("breaks the landing suite: "),
                                                        F.array_join("expectations", ", ")))
        .otherwise(F.col("problem_detail")),
        "problem": F.when(breaks_suite, F.lit(contract.EXPECTATION_FAILED)).otherwise(F.col("problem"))})
    fp = fingerprints()[0]
    t, new_file, ok = F.col("failed_ms"), F.col("is_new_file"), F.col("problem").isNull()
    after_last = F.coalesce(t > F.col("prev_through_ms"), F.lit(False))
    # a file first read by the code before future_ms was kept quarantined every problem at that read: its re-reads
    # take the records after the last read's as-of that have none, as that code did, and quarantine nothing
    old_rules = ~new_file & F.col("prev_future_ms").isNull()
    undecided = new_file | (after_last & F.coalesce(t <= F.col("prev_future_ms"), F.lit(False)))
    # FUTURE_TIMESTAMP's bound decides at the first read only: a re-read leaves a record beyond it waiting (the bound
    # may have been lowered since), to be decided when the as-of passes it
    beyond = new_file & F.coalesce(t > batch.as_of + F.lit(opts.max_future_ms), F.lit(False))
    now = t.isNull() | F.coalesce(t <= batch.as_of, F.lit(False)) | beyond
    bad = ~old_rules & undecided & ~ok & now
    in_window = F.when(old_rules, ok & after_last).otherwise(undecided & ok) \
        & F.coalesce(t <= batch.as_of, F.lit(False))
    deferred = F.when(old_rules, ok & F.coalesce(t > batch.as_of, F.lit(False))).otherwise(undecided & ~now)
    # decided by an earlier read of its file (ingested, quarantined, or in a file first read by the older code): each
    # record is exactly one of bad, in_window, deferred and earlier, which the run checks (conservation "records")
    earlier = F.when(old_rules, ~(in_window | deferred)).otherwise(~undecided)
    # Only quarantined records keep their raw line: the cached batch would otherwise hold every payload twice.
    return batch, rec.withColumns({"fp": fp, "bad": bad, "in_window": in_window, "deferred": deferred,
                                   "earlier": earlier,
                                   "raw": F.when(F.col("problem").isNotNull(), F.col("raw"))}).drop(AS_OF_COLUMN)


# The fields of a record its fingerprint hashes, in order (a record's copy is an exact duplicate: the same in each)
FINGERPRINTED = ("message_id", "address", "payload", "failed_ms", "delivery_count", "error_class", "error_message",
                 "headers", "consumer_group", "ordering_key", "extra")


def fingerprints() -> tuple[Column, Column]:
    """A landing record's fingerprint (``fp``: equal for exact duplicates), and the one the code before it gave
    (``fp_v1``), which the error histories written by that code hold.

    Spark's ``xxhash64`` of several columns skips a null one, and each hash seeds the next: ``fp_v1`` took a record
    with ``error_class: "E"`` and none of ``error_message`` for one with ``error_message: "E"`` and no class (a
    group for an ordering key, headers for an unknown field), and the second was dropped as an exact duplicate of
    the first, a failure lost. ``fp`` hashes, after the fields, which of them are null (a bit each, left out when
    none is: such a record's ``fp`` is its ``fp_v1``)."""
    cols = [F.to_json(F.col(c)) if c == "headers" else F.col(c) for c in FINGERPRINTED]
    nulls = sum((F.when(c.isNull(), F.lit(1 << i)).otherwise(F.lit(0)) for i, c in enumerate(cols)), F.lit(0))
    return F.xxhash64(*cols, F.nullif(nulls, F.lit(0))), F.xxhash64(*cols)


def due_at(merged: DataFrame, as_of: int, codegen: str) -> DataFrame:
    """The waiting rows of ``merged`` whose next attempt is due at ``as_of``, with the ``delivery`` they are re-driven
    as and their ``lateness_ms``; ``codegen`` is the cycle's code generation mode (:func:`with_as_of`)."""
    due, at = with_as_of(merged, as_of, codegen)
    return due.filter((F.col("state") == WAITING) & (F.col("next_attempt_ms") <= at)).withColumns({
        "delivery": F.col("deliveries") + F.lit(1), "lateness_ms": at - F.col("next_attempt_ms")}).drop(AS_OF_COLUMN)


def _due_stats(due: DataFrame) -> tuple[int, list[int] | None]:
    """The due messages' count and the median and 99th percentile of their lateness (None without due messages), in
    the one job that fills the due set's cache: a job is about a quarter of a second of a small cycle's driver time,
    whatever it computes (bench/RESULTS.md, forty-eighth run)."""
    (row,) = due.agg(F.count(F.lit(1)).alias("n"),
                     F.percentile_approx("lateness_ms", [0.5, 0.99], 10000).alias("p")).collect()
    return int(row.n), row.p


def _drop_revived_dead_letters(spark: SparkSession, wh: AnyWarehouse, snap: Snapshot, merged: DataFrame,
                               staged_dlq: str) -> list[str]:
    """The DLQ files holding records of messages a new landing failure took out of the dead-lettered state (they
    wait again, or this run dead-letters them again and writes their new record), rewritten without those records
    into the run's staged DLQ; the files they replace, for the snapshot to drop. Before, such a message was both
    waiting in the ledger and listed in the DLQ: `dlq list` and `stats` counted it, and no re-drive could move it.
    Only a run with such messages reads the DLQ's ids."""
    files = wh.live_files("dlq", snap)
    if not files:
        return []
    uris = spark_file_uris(spark, files)
    ids = merged.filter(F.col("revived")).select("message_id")
    dlq = read_files(spark, "dlq", files, file_column="_file", uris=uris)
    local = dict(zip(uris, files, strict=True))
    # read_files gives only rows of the files it was given (by these uris), so each hit is one of them
    hit = [r._file for r in dlq.join(ids, "message_id", "left_semi").select("_file").distinct().collect()]
    touched = sorted(local[u] for u in hit)
    if touched:
        uri_of = dict(zip(files, uris, strict=True))
        rest = read_files(spark, "dlq", touched, uris=[uri_of[f] for f in touched]).join(ids, "message_id",
                                                                                           "left_anti")
        parquet_options(rest.write.mode("append").partitionBy("address", "dt"), DLQ_UNIQUE_COLUMNS).parquet(staged_dlq)
    return touched


def _redrive_once(spark: SparkSession, wh: AnyWarehouse, opts: CycleOptions, due: DataFrame, due_count: int,
                  ctx: RunContext, prepared_doc: dict[str, Any], groups: list[tuple[str, Target, Column | None]] | None,
                  attempt: str) -> tuple[DataFrame, dict[str, Any] | None]:
    """The run's re-drive, done once: its outcomes, and what failed if a target, or a destination of one, did
    (_outcomes). ``attempt``: this attempt's stage's name."""
    from reprocess.targets.outbox import OutboxTarget

    sent = prepared_doc.get("outcomes")
    run_dir = wh.run_dir(ctx.run_id)
    if sent is None and due_count:
        # Written where the inflight list is, out of the attempts' stages (a resumed attempt removes them); recorded in
        # prepared.json once every target's are: from then on the re-drive is done, and a resumed attempt (after a
        # crash, a failed check, a task's retry) reads them instead of sending its messages again. A target's group
        # done before the others is recorded as it ends (``outcomes_done``): a stop during a later group's re-drive
        # does not send the earlier groups' messages again.
        recorded = RECORDED_TARGET in due.columns
        resumed = groups is None  # a resumed run's groups are taken by the targets recorded
        if groups is None:
            groups = _target_groups(opts, recorded=recorded)
        # a run prepared before the targets were recorded cannot tell the done groups' rows: they are sent again
        earlier = done_parts(prepared_doc) if recorded else []
        if earlier:
            done = sorted({part["target"] for part in earlier})
            log.warning("resuming run_id=%s: its re-drive through %s finished before the stop; those outcomes are "
                        "read, their messages are not sent again", ctx.run_id, ", ".join(done))
            rest = ~F.col(RECORDED_TARGET).isin(done)  # never null: coalesced at the prepare
            groups = [(spec, target, rest if rows is None else rows & rest) for spec, target, rows in groups]
        outcomes_dir = f"outcomes-{attempt}"
        parts = list(earlier)

        def group_done(i: int) -> None:
            shown = _recordable(groups, i)
            # Recorded only where a resume can tell the group's rows by their recorded target (this run's prepare
            # recorded them; a resumed run's, if its older prepare did), and not for a resumed run's group for the
            # run's target, which also took rows recorded for a target no longer named (_recorded_groups). The last
            # group's are recorded with the whole re-drive's; a group done before the stop re-drove none now.
            tellable = not resumed or (recorded and shown != redact(opts.target))
            if shown is not None and tellable and i < len(groups) - 1 and all(p["target"] != shown for p in parts):
                parts.append({"path": f"{outcomes_dir}/target={i}", "target": shown})
                wh.write_prepared(ctx.run_id, {**prepared_doc, "outcomes_done": {"parts": parts}})
            crash_point("after_redrive_group")

        _redrive(due, ctx, str(run_dir / outcomes_dir), groups, group_done)
        # the outbox groups by what they are, not by their spelling (a ${VAR} may name the outbox)
        sent = {"dir": outcomes_dir, "targets": [redact(spec) for spec, _t, _r in groups],
                "outbox": [i for i, (_s, target, _r) in enumerate(groups) if isinstance(target, OutboxTarget)],
                "earlier": [part["path"] for part in earlier],  # an earlier attempt's groups (none the outbox)
                "counts_not_tried": True}  # its partitions count what they leave (NOT_TRIED rows)
        wh.write_prepared(ctx.run_id, {**prepared_doc, "outcomes": sent})
        paths = [str(run_dir / path) for path in sent["earlier"]] + \
            [str(run_dir / outcomes_dir / f"target={i}") for i in range(len(groups))]
    elif sent is not None:
        # Only the outbox's messages are written again: its files were in the first attempt's stage. They are the rows
        # recorded for the outbox groups; no other target is built (its credentials are not needed).
        log.warning("resuming run_id=%s: its re-drive finished before the stop; its outcomes are read, nothing is "
                    "sent again", ctx.run_id)
        outbox = set(sent["outbox"])
        paths = [str(run_dir / path) for path in sent.get("earlier", [])] + \
            [str(run_dir / sent["dir"] / f"target={i}") for i in range(len(sent["targets"])) if i not in outbox]
        if outbox:
            specs = [sent["targets"][i] for i in sorted(outbox)]
            rows = F.coalesce(F.col(RECORDED_TARGET).isin(specs), F.lit(False))
            again = f"outcomes-{attempt}"
            _redrive(due, ctx, str(run_dir / again), [("outbox", OutboxTarget(), rows)])
            paths.append(str(run_dir / again / "target=0"))
    else:
        paths = []
    # outcomes recorded by the code before NOT_TRIED rows leave the run's left due uncounted (conservation falls back)
    return _outcomes(spark, paths, ctx.run_id, counted=sent is None or sent.get("counts_not_tried", False))


def _redrive(due: DataFrame, ctx: RunContext, outcomes_dir: str, groups: list[tuple[str, Target, Column | None]],
             group_done: Callable[[int], None] | None = None) -> None:
    """Re-drive the due messages once, each through its group's target (``groups``, as _target_groups gives them);
    each group's outcomes are written to ``<outcomes_dir>/target=<i>``, then ``group_done(i)`` is called."""
    for i, (spec, target, rows) in enumerate(groups):
        log.info("re-driving %s target=%s", "due" if len(groups) == 1 else "a policy's share of due", redact(spec))
        sent = target.redrive(due if rows is None else due.filter(rows), ctx)
        sent.write.mode("overwrite").parquet(f"{outcomes_dir}/target={i}")
        if group_done is not None:
            group_done(i)


def _recordable(groups: list[tuple[str, Target, Column | None]], i: int) -> str | None:
    """The spelling the rows of group ``i`` were recorded with at the prepare (_target_column), if a resumed run may
    take them as done once the group's outcomes are written: not for the outbox, whose files are in the stopped
    attempt's stage and are written again, nor for a target recorded alike with another (two targets differing only
    in a password): the rows recorded so are not this group's alone."""
    from reprocess.targets.outbox import OutboxTarget

    spec, target, _rows = groups[i]
    shown = redact(spec)
    if isinstance(target, OutboxTarget) or any(redact(s) == shown for j, (s, _t, _r) in enumerate(groups) if j != i):
        return None
    return shown


def _outcomes(spark: SparkSession, paths: list[str], run_id: str,
              counted: bool = True) -> tuple[DataFrame, dict[str, Any] | None]:
    """The re-drive's outcomes (written by _redrive to ``paths``), and what failed if a target, or a destination of
    one, did."""
    if not paths:
        return spark.createDataFrame([], OUTCOME_SCHEMA), None
    outcomes = spark.read.schema(OUTCOME_SCHEMA).parquet(*paths)
    # at most a row per partition of each target (a stopped partition emits one and calls no more), one per
    # destination that refused writes in a partition (its other messages there were not tried), and one per partition
    # counting the messages it did not try (NOT_TRIED, in ``delivery``)
    downs = F.col("error_class").isin(TARGET_DOWN, DESTINATION_DOWN, NOT_TRIED)
    counts = outcomes.filter(downs).groupBy("error_class", "error_message") \
        .agg(F.count(F.lit(1)).alias("count"), F.sum("delivery").alias("not_tried")).collect()
    down = [r for r in counts if r.error_class != NOT_TRIED]
    # the due messages left without an outcome, counted where they were left (each down row's own message, and the
    # ones not tried): the run's conservation checks them against the due messages that got none
    not_redriven = sum(r["count"] for r in down) + sum(int(r.not_tried) for r in counts if r.error_class == NOT_TRIED)
    target_down = None
    if down:
        # A target, or a destination of one, failed: what it did not confirm consumes no delivery and stays due.
        stopped = sorted(r.error_message for r in down if r.error_class == TARGET_DOWN)
        refusing: dict[str, str] = {}  # destination -> its error (a partition's, which may name its connection)
        for r in sorted(down, key=lambda r: r.error_message):
            if r.error_class == DESTINATION_DOWN:
                where, _, error = r.error_message.partition("\n")  # deliver_each's
                refusing.setdefault(where, f"{where}: {error}")
        errors = list(refusing.values())
        error = stopped[0] if stopped else f"{len(errors)} destination(s) down: {errors[0]}"
        if stopped and errors:
            error += f" (and {len(errors)} destination(s) down)"
        target_down = {"error": error,
                       "partitions_stopped": sum(r["count"] for r in down if r.error_class == TARGET_DOWN),
                       "destinations_down": len(errors), "destination_errors": errors[:10]}
        if counted:
            target_down["not_redriven"] = not_redriven
        log.error("target failed, stopping the re-drive run_id=%s error=%s", run_id, target_down["error"])
    return outcomes.filter(~F.coalesce(downs, F.lit(False))), target_down


def _target_column(groups: list[tuple[str, Target, Column | None]]) -> Column:
    """``target``: the (redacted) spec of the group each due row goes to, recorded with the run's inflight deliveries
    so that a resumed run sends each message where its first attempt did (see _target_groups)."""
    chosen = [F.when(rows, F.lit(redact(spec))) if rows is not None else F.lit(redact(spec))
              for spec, _target, rows in groups]
    return (chosen[0] if len(chosen) == 1 else F.coalesce(*chosen)).alias("target")


def _target_groups(opts: CycleOptions, recorded: bool = False) -> list[tuple[str, Target, Column | None]]:
    """The run's targets, each once, with the due rows it takes (None: all of them): a policy's own target takes
    the rows of that policy (by the ``match`` the due row is under: the policy matching it now, else the one it was
    kept under), the run's target the rest. Policies naming the same target (its spec with the environment's variables
    in), or the run's own, make one group: one write of the outbox (its partitions are overwritten address by
    address, so a second group's write of an address replaced the first's messages, which the ledger then called
    delivered), one connection to a broker. Each comes with its spec as written, which its target also shows in its
    errors (a variable's value may be a secret).

    With ``recorded``, a resumed run's rows are taken by the target its prepare recorded for each (``_target``), not
    by their policy: the run merges its landing files again with the policy file as it is now, so a message that
    failed for the first time in this run may now be kept under another policy (one renamed, added or reordered)."""
    specs = _policy_targets(opts.policies) if opts.policy_targets is None else opts.policy_targets
    own = {match: (spec, expand_target(spec)) for match, spec in specs.items()}

    def rows_of(matches: list[str]) -> Column:  # never null: a row none takes would get no outcome
        return F.coalesce(F.col("policy").isin(matches), F.lit(False))

    run_target = expand_target(opts.target)

    def parsed(spec: str, expanded: str) -> Target:
        try:
            target = parse_target(expanded)
        except ConfigError:
            if expanded == spec:
                raise
            # its text would quote the variables' values
            raise ConfigError(f"target {redact(spec)} does not parse once its ${{...}} variables are filled in (a "
                              "value may need URL-encoding)", key="target") from None
        target.spec = spec  # what the target shows in its errors (TARGET_DOWN rows, the summary): as written
        return target

    if recorded:
        return _recorded_groups([*own.values(), (opts.target, run_target)], redact(opts.target), parsed)
    written: dict[str, str] = {}  # each target's first spelling: the policies' in their order, then the run's
    for spec, expanded in [*own.values(), (opts.target, run_target)]:
        written.setdefault(expanded, spec)
    groups: list[tuple[str, Target, Column | None]] = []
    for expanded in written:
        rows = [match for match, (_, target) in own.items() if target == expanded]
        taken = rows_of(rows) if rows else None
        if expanded == run_target and own:  # the rows of every policy without a target of its own
            rest = ~rows_of(list(own))
            taken = rest if taken is None else taken | rest
        spec = written[expanded]
        groups.append((spec, parsed(spec, expanded), taken))
    return groups


def _recorded_groups(specs: list[tuple[str, str]], run_shown: str, parsed: Callable[[str, str], Target]
                     ) -> list[tuple[str, Target, Column | None]]:
    """A resumed run's groups (see _target_groups): one per recorded spelling (``specs``: each target as written and
    expanded, the policies' then the run's), which takes the rows recorded so; the run's target also takes any row
    recorded otherwise. Rows recorded alike cannot be told apart, so no two groups may take them: two targets that
    differ only in a password (written as ``${VAR}`` or literally) record alike, and each took them, publishing each
    message twice. They go through the first such target."""
    by_shown: dict[str, tuple[str, str]] = {}
    for spec, expanded in specs:
        first = by_shown.setdefault(redact(spec), (spec, expanded))
        if first[1] != expanded:
            log.warning("targets %s differ only in a password, recorded alike: resuming through the first",
                        redact(spec))
    recorded = F.col(RECORDED_TARGET)  # never null: coalesced at the prepare
    others = sorted(shown for shown in by_shown if shown != run_shown)
    groups: list[tuple[str, Target, Column | None]] = []
    for shown, (spec, expanded) in by_shown.items():
        mine = recorded == F.lit(shown)
        if shown == run_shown:
            groups.append((spec, parsed(spec, expanded), (mine | ~recorded.isin(others)) if others else None))
        else:
            groups.append((spec, parsed(spec, expanded), mine))
    return groups


def _hold_back_ordered(spark: SparkSession, due: DataFrame, merged: DataFrame, policies: PolicySet, wh: AnyWarehouse,
                       snap: Snapshot, touched: list[str]) -> DataFrame:
    """With ``ordered: true``, a keyed message waits while an earlier-failed message of its key still waits on its
    address in its consumer group: a key is ordered where the brokers order it, within one queue (a destination, a
    topic's queue) as one group consumes it, not across addresses or groups.

    The head of a key on an address in a group is its waiting message that failed first (then the least id): one
    aggregation over the waiting rows of the keys due, and a semi-join keeps the due messages that are heads. Every
    DataFrame made here is analysed in the JVM at once, though the step runs no job (bench/RESULTS.md, forty-seventh
    run): as few as the logic needs."""
    ordered = [p.name for p in policies.policies if p.ordered]
    if not ordered:
        return due
    is_ordered = F.coalesce(F.col("policy").isin(ordered) & F.col("ordering_key").isNotNull(), F.lit(False))
    keyed = due.filter(is_ordered)  # the due rows are under the policy matching them now (under_current_policy)
    cols = ["message_id", "ordering_key", "first_failed_ms", "state", "policy", "address", "consumer_group"]
    waiting = merged.select(*cols)
    skip = set(touched)  # the delivered and dead-lettered history is not read: it holds no WAITING row
    others = [f for f in wh.live_files("ledger", snap) if f not in skip and waiting_bucket_of(f) is not None]
    if others:
        waiting = waiting.unionByName(spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*others).select(*cols))
    # The waiting rows of the keys due are under the policy matching them now too: under the one they were kept under,
    # a key the file has since made ordered had no head among them, and its due messages were held back for good. Only
    # those rows meet the policies' patterns: the test is in the aggregate, where no filter pushes it below the join
    # to every waiting row of the ledger.
    waiting = waiting.filter((F.col("state") == WAITING) & F.col("ordering_key").isNotNull()) \
        .join(keyed, "ordering_key", "left_semi")
    first = F.min(F.when(is_ordered, F.struct("first_failed_ms", "message_id")))["message_id"].alias("message_id")
    # The messages without a consumer group, or with an empty one, are one group (as a policy matches them); a
    # message id is the ledger's key, so a due message is its key's head when its id is a head's.
    group = F.nullif(F.col("consumer_group"), F.lit("")).alias("_group")
    heads = under_current_policy(waiting, policies).groupBy("address", group, "ordering_key").agg(first)
    # Only the keyed messages of ordered policies meet the heads: the rest of the due set is not shuffled.
    return due.filter(~is_ordered).unionByName(keyed.join(heads.select("message_id"), "message_id", "left_semi"))


def _quarantine_rows(spark: SparkSession, bad: DataFrame, corrupt: list[tuple[str, str]], run_id: str,
                     as_of: int, codegen: str) -> DataFrame:
    rows = bad.select(
        "source_file", "record_no", F.col("problem").alias("reason_code"), F.col("problem_detail").alias("reason"),
        "raw", "message_id", "address", "expectations")
    if corrupt:
        files = spark.createDataFrame(
            [(p, None, contract.CORRUPT_FILE, r, None, None, None, []) for p, r in corrupt],
            "source_file string, record_no bigint, reason_code string, reason string, raw string, "
            "message_id string, address string, expectations array<string>")
        rows = rows.unionByName(files)
    rows, at = with_as_of(rows, as_of, codegen)
    return rows.withColumns({
        "run_id": F.lit(run_id),
        "quarantined_at": F.timestamp_millis(at),
        "dt": F.date_format(F.timestamp_millis(at), "yyyy-MM-dd"),
    }).drop(AS_OF_COLUMN)


def _landing_counts(rec: DataFrame, files: list[LandingFile]) -> tuple[dict[str, int], set[str]]:
    """The landing batch's counts for the summary, and the files holding records for a later as-of (the manifest
    keeps them pending), in one job over the cached records. A run without landing files has no records: no frame
    is built and no job run for them."""
    if not files:
        return dict.fromkeys(("fresh", "records", "bad", "deferred", "earlier", "not_in_one_place", "payload_bytes"),
                             0), set()
    (row,) = rec.agg(  # a global aggregate: one row
        F.sum(F.col("in_window").cast("int")).alias("fresh"),
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("bad").cast("int")).alias("bad"),
        F.sum(F.col("deferred").cast("int")).alias("deferred"),
        F.sum(F.col("earlier").cast("int")).alias("earlier"),
        F.sum((F.coalesce(sum((F.col(c).cast("int") for c in ("in_window", "bad", "deferred", "earlier")),
                              start=F.lit(0)), F.lit(0)) != 1).cast("int")).alias("not_in_one_place"),
        F.sum(F.when(F.col("in_window"), F.octet_length("payload"))).cast("long").alias("payload_bytes"),
        F.collect_set(F.when(F.col("deferred"), F.col("source_file"))).alias("deferred_files"),
        # records whose file Spark names otherwise than the listing did (read_batch's window): none of bad, in_window
        # or deferred holds for them, so they would be dropped while their file was marked done
        F.sum(F.col("is_new_file").isNull().cast("int")).alias("unmatched"),
    ).collect()
    counts = row.asDict()
    deferred_files = set(counts.pop("deferred_files") or ())
    unmatched = int(counts.pop("unmatched") or 0)
    if unmatched:
        raise RuntimeError(f"{unmatched} landing records came from files Spark names otherwise than the landing "
                           "listing (reprocess.cycle.landing_batch.spark_file_uris): nothing was committed, so that "
                           "none is dropped; this is a bug, please report it with the landing root")
    return {k: int(v or 0) for k, v in counts.items()}, deferred_files


def _manifest_entries(files: list[LandingFile], manifest: dict[str, ManifestEntry], corrupt: list[tuple[str, str]],
                      pending_files: set[str], as_of: int, run_id: str,
                      max_future_ms: int, changed: Sequence[str] = (),
                      max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> dict[str, ManifestEntry]:
    """The full manifest after this run: old entries, plus this run's files (done when no record of theirs is left
    for a later as-of: ``pending_files``); a waiting file that is gone (among ``changed``, not among ``files``) is
    done too, named once, by this run."""
    entries = dict(manifest)
    read = {f.path for f in files}
    for path in changed:
        prev = manifest.get(path)
        if prev is not None and not prev.done and path not in read:
            entries[path] = ManifestEntry(path, prev.size, as_of, True, run_id, prev.future_ms, prev.max_line_bytes)
    corrupt_paths = {p for p, _ in corrupt}
    for f in files:
        done = f.path in corrupt_paths or f.path not in pending_files
        prev = manifest.get(f.path)
        # the first read's bound of FUTURE_TIMESTAMP: the records beyond it were quarantined then (landed); a file
        # first read before it was kept keeps none, and that code's rules
        future = as_of + max_future_ms if prev is None else prev.future_ms
        # the line limit of its first read (one first read before limits were recorded: of this read, from now on)
        limit = prev.max_line_bytes if prev is not None and prev.max_line_bytes is not None else (
            max_line_bytes if f.fmt == "text" else None)
        entries[f.path] = ManifestEntry(f.path, f.size, as_of, done, run_id, future, limit)
    return entries


def _ints(row: Any) -> dict[str, int]:
    """An aggregate row as ints (an empty aggregate's nulls are 0)."""
    return {k: int(v or 0) for k, v in (row.asDict() if row is not None else {}).items()}


def _summary(spark: SparkSession, c: dict[str, int], final: DataFrame, lateness: list[int] | None,
             quarantine: DataFrame, run_id: str, as_of: int, files: list[LandingFile], changed: list[str],
             corrupt: list[tuple[str, str]], target: str, snap: Snapshot, touched: list[str], due_count: int,
             target_down: dict[str, Any] | None) -> dict[str, Any]:
    a = _ints(final.agg(
        *[F.sum((F.col("state") == st).cast("int")).alias(f"state_{st}") for st in STATES],
        *[F.sum((F.col("dlq_event") & (F.col("reason_code") == r)).cast("int")).alias(f"reason_{r}")
          for r in REASON_CODES],
        F.sum((F.col("redriven") & (F.col("state") == DEAD_LETTERED)).cast("int")).alias("redrive_dead"),
        F.count(F.lit(1)).alias("rows"),
        F.countDistinct("message_id").alias("distinct_ids"),
        F.sum(F.col("is_new").cast("int")).alias("new_messages"),
        F.sum(F.when(~F.col("is_new"), F.col("new_failures")).otherwise(0)).alias("repeat_failures"),
        F.sum(F.when(F.col("is_new"), F.col("new_failures")).otherwise(0)).alias("new_message_failures"),
        F.sum("cross_batch_duplicates").alias("cross_batch_duplicates"),
        F.sum("batch_duplicates").alias("batch_duplicates"),
        F.sum(F.col("redriven").cast("int")).alias("redriven"),
        F.sum(F.col("delivered_now").cast("int")).alias("delivered"),
        F.sum((F.col("redriven") & (F.col("state") == WAITING)).cast("int")).alias("rescheduled"),
        F.sum(F.col("dlq_event").cast("int")).alias("dlq_events"),
        F.count("conflict_groups").alias("group_conflicts"),
    ).first())
    # Outcomes come only from re-driving the due messages, one each: the due ones without are left due.
    left_due = due_count - a["redriven"]
    states_written = {st: a[f"state_{st}"] for st in STATES}
    reasons = {r: a[f"reason_{r}"] for r in REASON_CODES}
    # ``c``: the landing batch's counts (_landing_counts); ``lateness``: the due messages' (_due_stats). A run
    # without landing files has nothing to quarantine: that job is not run.
    fresh_n = c["fresh"]
    quarantined = quarantine.count() if files else 0
    p50, p99 = (lateness[0], lateness[1]) if lateness else (None, None)
    prev_states = _prev_states(snap)
    removed_states = _states_in(spark, touched)
    states_after = {s: prev_states.get(s, 0) - removed_states.get(s, 0) + states_written.get(s, 0) for s in STATES}
    total_before = sum(prev_states.values())
    total_after = sum(states_after.values())
    duplicates = a["batch_duplicates"] + a["cross_batch_duplicates"]
    balance = {
        "messages_before": total_before, "new_messages": a["new_messages"], "messages_after": total_after,
        "ingested": fresh_n + c["bad"], "new_message_failures": a["new_message_failures"],
        "records_read": c["records"], "deferred": c["deferred"], "decided_earlier": c["earlier"],
        "records_not_in_one_place": c["not_in_one_place"],
        "repeat_failures": a["repeat_failures"], "duplicates": duplicates, "bad_records": c["bad"],
        "corrupt_files": len(corrupt), "quarantined": quarantined, "ledger_rows": a["rows"],
        "ledger_distinct_ids": a["distinct_ids"], "due": due_count, "delivered": a["delivered"],
        "rescheduled": a["rescheduled"], "redriven_dead_lettered": a["redrive_dead"], "left_due": left_due,
        # counted where they were left (_outcomes), not inferred from the outcomes: "redriven" below checks them
        "not_redriven": 0 if target_down is None else target_down.get("not_redriven", left_due),
        "target_down_partitions": 0 if target_down is None else target_down["partitions_stopped"],
        "target_down_destinations": 0 if target_down is None else target_down["destinations_down"]}
    return {
        "run_id": run_id,
        "as_of": iso(as_of),
        "target": target,
        "landing_files": len(files),
        "changed_files_ignored": changed,
        "corrupt_files": [{"file": p, "reason": r} for p, r in corrupt],
        "ingested": fresh_n + c["bad"],
        "records_read": c["records"],
        "accepted_payload_bytes": c["payload_bytes"],  # of the records accepted (the landing suite's frame)
        "deferred_until_later_as_of": c["deferred"],
        "quarantined": quarantined,
        "duplicates": duplicates,
        "consumer_group_conflicts": a["group_conflicts"],
        "new_messages": a["new_messages"],
        "new_message_failures": a["new_message_failures"],
        "repeat_failures": a["repeat_failures"],
        "due": due_count,
        "delivered": a["delivered"],
        "rescheduled": a["rescheduled"],
        "dead_lettered": {"total": a["dlq_events"], **{r: reasons.get(r, 0) for r in REASON_CODES}},
        "waiting": states_after[WAITING],
        "states": states_after,
        "messages_before": total_before,
        "messages_after": total_after,
        "ledger_files_rewritten": len(touched),
        "lateness_ms": {"p50": p50, "p99": p99},
        "balance": balance,
        "conservation": conservation(balance),
    }


def conservation(b: dict[str, int]) -> dict[str, bool]:
    """The run's conservation checks from its ``balance`` counts (the run suite checks the same equalities)."""
    return {
        # every message is in exactly one state: rows written = rows replaced + new messages
        "messages": b["messages_after"] == b["messages_before"] + b["new_messages"],
        # every ingested record is a new message's failure, a repeat failure, a duplicate or quarantined
        "ingested": b["ingested"] == b["new_message_failures"] + b["repeat_failures"] + b["duplicates"]
        + b["bad_records"],
        "quarantine": b["quarantined"] == b["bad_records"] + b["corrupt_files"],
        # every record read is ingested, quarantined, left for a later as-of, or decided by an earlier read: exactly
        # one (runs before these counts: true)
        "records": b.get("records_not_in_one_place", 0) == 0 and b.get("records_read", 0) == b.get("ingested", 0)
        + b.get("deferred", 0) + b.get("decided_earlier", 0) if "records_read" in b else True,
        "ledger_unique": b["ledger_rows"] == b["ledger_distinct_ids"],
        # every due message got exactly one outcome, or none and was counted as left where it was left (runs before
        # those counts: their left_due)
        "redriven": b["due"] == b["delivered"] + b["rescheduled"] + b["redriven_dead_lettered"]
        + suites.left_without_outcome(b),
        # a due message goes without an outcome only when the target failed
        "left_due_only_when_target_failed": suites.left_due_only_when_target_failed(b),
    }


def _validate(wh: AnyWarehouse, run_id: str, as_of: int, fresh: DataFrame, final: DataFrame, dlq: DataFrame,
              summary: dict[str, Any], policies: PolicySet, landing_params: dict[str, Any]) -> dict[str, Any]:
    """The GX gate before the commit: the accepted landing batch, the ledger rows and dead letters this run
    writes, and its balance. Data Docs go to ``runs/<run_id>/data_docs``; a failed suite fails the run."""
    b = summary["balance"]
    return suites.gate(wh, run_id, as_of, [
        # a projection of the landing's cached records: no second copy of the payloads in the cache
        (suites.landing_frame(fresh), "landing", {"params": landing_params, "cached": True,
                                                  "rows": b["ingested"] - b["bad_records"],
                                                  "data_bytes": summary["accepted_payload_bytes"]}),
        (suites.ledger_frame(final, policies, run_id), "ledger", {"rows": b["ledger_rows"]}),
        (suites.dlq_frame(dlq, policies), "dlq", {"rows": summary["dead_lettered"]["total"]}),
        (suites.run_table(b), "run", {"rows": 1}),
    ])


def _record_bytes(payload_bytes: int, records: int, touched_bytes: int, touched: int, ledger_files: int,
                  ledger_rows: int) -> int:
    """The bytes of a record this run's tasks hold, on average, for sizing its shuffles to large records
    (sparkutil.fit_shuffles): the larger of the landing's (its payloads' bytes per record read, as decoded) and the
    ledger files' it rewrites (their bytes over their share of the ledger's rows, the files taken as equal: no file
    is opened for it; Parquet's bytes, so compressible payloads count for less)."""
    landing = payload_bytes // records if records else 0
    rows = ledger_rows * touched // ledger_files if ledger_files else 0
    return max(landing, touched_bytes // rows if rows else 0)


def _prev_states(snap: Snapshot) -> dict[str, int]:
    for r in reversed(snap.runs):
        return dict(r["summary"]["states"])
    return {s: 0 for s in STATES}


def _states_in(spark: SparkSession, files: list[str]) -> dict[str, int]:
    if not files:
        return {}
    df = spark.read.schema(LEDGER_FILE_SCHEMA).parquet(*files)
    return {r[0]: r[1] for r in df.groupBy("state").count().collect()}


def _gate(wh: AnyWarehouse, run_id: str, as_of: int, fresh: DataFrame, final: DataFrame, dlq: DataFrame,
          summary: dict[str, Any], opts: CycleOptions, steps: StepLog) -> None:
    """The checks before the commit: the GX suites (with ``opts.validate``), then the conservation checks. The suites
    go first so that a run that does not balance has its Data Docs too (the run suite's table shows the counts); its
    ConservationError, the more precise, is raised before theirs."""
    invalid: ValidationFailedError | None = None
    if opts.validate:
        try:
            summary["validation"] = _validate(wh, run_id, as_of, fresh, final, dlq, summary, opts.policies,
                                              suites.landing_params(opts.max_payload_bytes, opts.max_future_ms))
            steps.done("validate", data_docs=summary["validation"]["data_docs"])
        except ValidationFailedError as exc:
            invalid = exc
    docs = summary["validation"]["data_docs"] if "validation" in summary else None
    _check_conservation(summary, docs or (invalid.data_docs if invalid is not None else None))
    if invalid is not None:
        raise invalid


def _check_conservation(summary: dict[str, Any], docs: str | None = None) -> None:
    """ConservationError when the run does not balance; ``docs``: its Data Docs, named in the error."""
    broken = [k for k, ok in summary["conservation"].items() if not ok]
    if broken:
        raise ConservationError(
            f"run {summary['run_id']} does not balance ({', '.join(broken)}): nothing was committed; summary: "
            + json.dumps({k: summary[k] for k in ('ingested', 'quarantined', 'duplicates', 'new_messages',
                                                  'repeat_failures', 'messages_before', 'messages_after')})
            + (f"; balance: {json.dumps(summary['balance'], sort_keys=True)}")
            + (f". Data Docs: {docs}" if docs else ""))


def _log_group_conflicts(merged: DataFrame, n: int) -> None:
    """Names (as an error) the messages of ``merged`` that failed in another consumer group than the one they
    had: their failures count as one message's (the ledger is keyed by ``message_id`` alone)."""
    some = merged.filter(F.col("conflict_groups").isNotNull()).select("message_id", "conflict_groups").limit(10) \
        .collect()
    log.error("messages failed in more than one consumer group under one message_id; their failures count as one "
              "message's: give each group's landing records ids of their own (<group>/<id>) messages=%s "
              "examples=%s", n, [(r.message_id, r.conflict_groups) for r in some])


def _dry_summary(landing: dict[str, int], merged: DataFrame, due_count: int, run_id: str, as_of: int,
                 files: list[LandingFile]) -> dict[str, Any]:
    """A dry run's report; ``landing``: the batch's counts (:func:`_landing_counts`, the committing run's own)."""
    m = _ints(merged.agg(F.sum("batch_duplicates").alias("duplicates"),
                         F.sum(F.col("dlq_event").cast("int")).alias("dead"),
                         F.count("conflict_groups").alias("group_conflicts")).first())
    return {
        "run_id": run_id, "as_of": iso(as_of), "dry_run": True, "landing_files": len(files),
        "records_read": landing["records"], "would_quarantine": landing["bad"], "would_ingest": landing["fresh"],
        "duplicates": m["duplicates"], "consumer_group_conflicts": m["group_conflicts"],
        "would_dead_letter_on_ingest": m["dead"], "due": due_count,
    }


__all__ = ["CRASH_POINTS", "CycleOptions", "OutOfOrderError", "run_cycle", "run_id_for"]
