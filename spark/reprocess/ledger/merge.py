"""Merging new failures into the ledger, and applying re-drive outcomes. Pure DataFrame functions.

Counting (docs/adr/0001-counting.md): a new message's first failure is delivery ``delivery_count``.
A known message's failure is the next delivery after the ledger's count (``deliveries + 1``) unless
the ledger shows it DELIVERED: then the failure reported is that very handed-over delivery
(``deliveries``). The record's own ``delivery_count`` wins when higher, unless the record failed at or
before the message's last reset (``reset_ms``): that count is one the reset forgave. Several failures of one
message in one batch count one delivery each, in ``failed_at`` order.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from reprocess.ledger.model import (
    DEAD_LETTERED,
    DELIVERED,
    HISTORY_LIMIT,
    LEDGER_COLUMNS,
    LEDGER_SCHEMA,
    MAX_DELIVERIES_EXCEEDED,
    NO_DEAD_LETTER_ADDRESS,
    NO_POLICY,
    NON_RETRYABLE,
    WAITING,
    bucket_column,
)
from reprocess.policy.columns import by_policy, decision_columns, policy_index_column
from reprocess.policy.config import dla_parts
from reprocess.policy.durations import LONG_MAX
from reprocess.sparkutil import AS_OF_COLUMN, columns_once, sort_aggregated, sql_lambda, with_as_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

    from reprocess.policy.config import NonRetryableRule, Policy, PolicySet


def sat_add(a: Column, b: Column) -> Column:
    """``a + b`` for non-negative longs, saturating at Long.MAX_VALUE (ANSI mode would throw)."""
    return F.when(b > F.lit(LONG_MAX) - a, F.lit(LONG_MAX).cast("long")).otherwise(a + b)


# Java's regex read as Python's re reads a str pattern (the reference's): UNIX_LINES, so '.', '^' and '$' know only
# '\n' as a line end (not '\r', U+0085, U+2028, U+2029), and UNICODE_CHARACTER_CLASS, so \s, \w, \d, \b and (?i)
# are Unicode's (it implies UNICODE_CASE), not ASCII's.
AS_PYTHON = "(?dU)"


def _rule_column(rule: NonRetryableRule, error_class: Column, error_message: Column) -> Column:
    cond = F.lit(True)
    if rule.error_class is not None:
        cond = cond & F.coalesce(error_class.rlike(AS_PYTHON + "^(?:" + rule.error_class + r")\z"), F.lit(False))
    if rule.message is not None:
        cond = cond & F.coalesce(error_message.rlike(AS_PYTHON + rule.message), F.lit(False))
    return cond


def non_retryable_column(policies: PolicySet, policy_idx: Column, error_class: Column,
                         error_message: Column) -> Column:
    """True when the error matches a global rule or a rule of the row's policy."""
    glob = F.lit(False)
    for rule in policies.non_retryable:
        glob = glob | _rule_column(rule, error_class, error_message)
    out = glob
    for i, policy in enumerate(policies.effective):
        if policy.non_retryable:
            own = F.lit(False)
            for rule in policy.non_retryable:
                own = own | _rule_column(rule, error_class, error_message)
            out = F.when(policy_idx == i, glob | own).otherwise(out)
    return out


def policy_name_column(policies: PolicySet, policy_idx: Column) -> Column:
    return by_policy(policies, policy_idx, lambda p: F.lit(p.name))


def profile_column(policies: PolicySet, policy_idx: Column) -> Column:
    return by_policy(policies, policy_idx, lambda p: F.lit(p.profile.value))


_CURRENT_PIDX = "_current_pidx"  # the policy index of a row by the policy file as it is now (under_current_policy)


def under_current_policy(rows: DataFrame, policies: PolicySet) -> DataFrame:
    """Ledger ``rows`` with the ``policy`` (and ``profile``, where they have one) of the policy matching each row's
    address and consumer group now, as a broker looks a queue's settings up at each delivery: a due message is
    re-driven through that policy's target and ordering, and its outcome is decided by it (apply_outcomes). A row no
    policy matches keeps the name it has (NO_POLICY: the one it was last under).
    The index is a projection of its own: both columns read it."""
    rows = rows.withColumn(_CURRENT_PIDX, policy_index_column(policies, F.col("address"), F.col("consumer_group")))
    now = named_by_index(policies, F.col(_CURRENT_PIDX), with_profile="profile" in rows.columns)
    return rows.withColumns(now).drop(_CURRENT_PIDX)


def named_by_index(policies: PolicySet, pidx: Column, with_profile: bool = True) -> dict[str, Column]:
    """The ``policy`` (and ``profile``) columns of the policy at index ``pidx``; where ``pidx`` is null, the row's
    own: the re-key of the due rows (:func:`under_current_policy`) and of the outcomes (:func:`apply_outcomes`)."""
    out = {"policy": F.coalesce(policy_name_column(policies, pidx), F.col("policy"))}
    if with_profile:
        out["profile"] = F.coalesce(profile_column(policies, pidx), F.col("profile"))
    return out


def dead_letter_address_column(policies: PolicySet, policy_idx: Column, address: Column,
                               consumer_group: Column) -> Column:
    """:meth:`PolicySet.dead_letter_address_for` as a column."""
    fields = {"address": address, "consumer_group": consumer_group}

    def dla(p: Policy) -> Column:
        fixed = policies.fixed_dead_letter_address(p)
        if fixed is not None:
            return F.lit(fixed)
        if p.dead_letter_address is None:
            return address
        parts = dla_parts(p.dead_letter_address)
        named = [fields[text] for is_field, text in parts if is_field]
        missing = reduce(lambda a, b: a | b, [c.isNull() | (c == "") for c in named])
        built = F.concat(*[fields[text] if is_field else F.lit(text) for is_field, text in parts])
        return F.when(missing, F.lit(policies.default_dead_letter_address)).otherwise(built)

    return by_policy(policies, policy_idx, dla)


def exhausted_reason_column(policies: PolicySet, policy_idx: Column) -> Column:
    """MAX_DELIVERIES_EXCEEDED, or NO_DEAD_LETTER_ADDRESS where Artemis would have dropped the message."""
    return by_policy(policies, policy_idx,
                     lambda p: F.lit(NO_DEAD_LETTER_ADDRESS if p.drops_without_dla else MAX_DELIVERIES_EXCEEDED))


# A message's cross-batch duplicates (failures whose fp is in its ledger history) are at most HISTORY_LIMIT, since a
# batch's list holds each fp once: its last HISTORY_LIMIT failures after they are dropped lie among the last
# RECENT of the batch's.
RECENT = 2 * HISTORY_LIMIT


def errors_hash(error_class: str, error_message: str) -> str:
    """SQL: the hash of a failure's error class and message, which of them are null told apart (``xxhash64`` skips a
    null input); alike for a landing record's columns and a history entry's fields."""
    return (f"xxhash64({error_class}, {error_message}, nullif(CASE WHEN {error_class} IS NULL THEN 1 ELSE 0 END + "
            f"CASE WHEN {error_message} IS NULL THEN 2 ELSE 0 END, 0))")


def aggregate_failures(failures: DataFrame) -> DataFrame:
    """One row per message of the batch, its failures without exact duplicates (same ``fp``), sorted by
    (failed_ms, delivery_count, fp), a null count first:

    - ``new_failures``: every one of them, with only what :func:`merge_failures` needs of each (``failed_ms``,
      ``fp``, ``fp_v1``, ``errors``, ``delivery_count``, ``non_retryable``);
    - ``recent``: the whole records of the last :data:`RECENT` of them, from which the merge takes the message's
      fields and its history;
    - ``batch_duplicates``: the records that were exact duplicates of another;
    - ``group_min``, ``group_max``: the least and greatest consumer group its records name (a missing or empty one
      names none), from which :func:`merge_failures` tells a message failing in two groups.

    A message failing many times in one batch is one row, held in memory whole: four fields of each failure and the
    full records (payloads, headers, errors) of only its last few keep that row small (bench/RESULTS.md,
    thirty-eighth run).

    One shuffle by message id and one sort, in the order the list needs; the output stays partitioned by
    ``message_id`` alone, so the ledger join in :func:`merge_failures` shuffles only the ledger. An exact duplicate
    is marked by comparing its ``fp`` with the previous record's (``lag``: sorted by (failed_ms, delivery_count, fp),
    duplicates sit side by side; equal fp implies equal failed_ms and delivery_count, and fp, a hash of the record,
    is never null), left out of the
    lists (``collect_list`` skips nulls) and counted.

    The lists are collected by a ``groupBy`` over the window's sorted output. With :data:`SORT_AGGREGATE_KEY` on
    (:data:`reprocess.sparkutil.SESSION_CONF`) Spark turns it into one streaming ``SortAggregate``: no second sort,
    no partial aggregation, and the lists in the rows' order. A session without that setting gets a hash
    aggregation, whose lists are sorted afterwards. Not a window over the whole partition: that wrote each message's
    whole list into each of its rows, so n distinct failures of one message cost n squared (20,000 took 24-31 s
    instead of 3 s; bench/RESULTS.md, thirty-third and thirty-eighth runs).
    """
    # failures at one time (a source's timestamps in seconds, immediate redeliveries) in the order of the delivery
    # counts they carry, a record without one first: by fp alone, a count of 3 taken before a 2 counted the 2 as 4
    ordered = Window.partitionBy("message_id").orderBy("failed_ms", "delivery_count", "fp")
    marked = failures.withColumn("_dup", F.coalesce(F.col("fp") == F.lag("fp").over(ordered), F.lit(False)))
    streamed = sort_aggregated(failures.sparkSession)
    named_group = F.nullif(F.col("consumer_group"), F.lit(""))  # a missing or empty group names none

    def in_order(fields: str) -> str:
        """The message's distinct failures, in (failed_ms, delivery_count, fp) order, a null count first: as they
        stream in, or sorted afterwards."""
        collected = f"collect_list(CASE WHEN NOT _dup THEN struct({fields}) END)"
        return collected if streamed else (
            f"array_sort({collected}, (l, r) -> CASE WHEN l.failed_ms < r.failed_ms THEN -1 "
            "WHEN l.failed_ms > r.failed_ms THEN 1 "
            "WHEN l.delivery_count IS NULL AND r.delivery_count IS NOT NULL THEN -1 "
            "WHEN l.delivery_count IS NOT NULL AND r.delivery_count IS NULL THEN 1 "
            "WHEN l.delivery_count < r.delivery_count THEN -1 WHEN l.delivery_count > r.delivery_count THEN 1 "
            "WHEN l.fp < r.fp THEN -1 WHEN l.fp > r.fp THEN 1 ELSE 0 END)")

    # The whole list of full records is only in the aggregation's buffer; the row keeps its last RECENT (the
    # aggregation is computed once, for both references).
    full = in_order("failed_ms, fp, fp_v1, errors, delivery_count, error_class, error_message, address, payload, "
                    "headers, extra, consumer_group, ordering_key, policy_idx, non_retryable")
    return marked.groupBy("message_id").agg(
        sql_lambda(in_order("failed_ms, fp, fp_v1, errors, delivery_count, non_retryable")).alias("new_failures"),
        sql_lambda(f"slice({full}, greatest(size({full}) - {RECENT} + 1, 1), {RECENT})").alias("recent"),
        F.sum(F.col("_dup").cast("long")).alias("batch_duplicates"),
        F.min(named_group).alias("group_min"),
        F.max(named_group).alias("group_max"),
    )


def merge_failures(existing: DataFrame | None, failures: DataFrame, policies: PolicySet, run_id: str,
                   as_of_ms: int, codegen: str) -> DataFrame:
    """The ledger rows after applying new failures: ``existing`` rows updated, new messages added.

    ``existing`` has ledger columns (rows of the files being rewritten; None when no file is); ``failures`` is
    :func:`aggregate_failures` of the batch (records with contract columns plus ``fp``, ``policy_idx``,
    ``non_retryable``). Adds ``changed``, ``dlq_event`` (dead-lettered by this merge), ``is_new``,
    ``new_failures``, ``cross_batch_duplicates``, ``batch_duplicates`` and ``conflict_groups`` (the consumer
    groups, sorted, of a message whose new failures name another group than its ledger row's, or two among
    themselves; null for the others: a missing or empty group names none). ``codegen`` is the cycle's code
    generation mode: with generated code the as-of reaches the rows as data (:func:`with_as_of`).
    """
    c = _merge_columns(policies)
    a = failures.alias("a")
    if existing is None:  # nothing to join with: every message is new
        joined = a.select(*c["fresh"])
    else:
        joined = existing.alias("e").join(a, c["on"], "full_outer").select(*c["joined"])
    joined, at = with_as_of(joined, as_of_ms, codegen)
    df = joined.withColumn(_MERGE_AS_OF, at)
    for name in _MERGE_STEPS:
        df = df.withColumn(name, c[name])
    updated_run = F.when(c["has_new"], F.lit(run_id)).otherwise(F.col("e_updated_run")).alias("updated_run")
    return df.select(*c["out"], updated_run, *c["out_end"])


_MERGE_AS_OF = "_merge_as_of"  # the as-of, a column of its own for the merge's columns (merge_failures)
# The columns merge_failures adds, in order, before its last projection (each reads those before it)
_MERGE_STEPS = ("_single", "nf", "rf", "n", "cross_batch_duplicates", "_t", "_cm", "_before", "_tail", "ks", "pidx")


@columns_once
def _merge_columns(policies: PolicySet) -> dict[str, Any]:
    """The expressions of :func:`merge_failures`, the same at every run for the same policies
    (:func:`reprocess.sparkutil.columns_once`): the join's and its projection's (``on``, ``joined``; ``fresh``
    without a ledger side), each of :data:`_MERGE_STEPS`, and the last projection around ``updated_run``
    (``out``, ``out_end``)."""
    kept = [c for c in LEDGER_COLUMNS if c not in ("message_id", "bucket")]
    c: dict[str, Any] = {
        "fresh": ["message_id", *[F.lit(None).cast(LEDGER_SCHEMA[c].dataType).alias(f"e_{c}") for c in kept],
                  F.col("new_failures").alias("nf_all"), F.col("recent").alias("rf_all"), "batch_duplicates",
                  "group_min", "group_max"],
        "on": F.col("e.message_id") == F.col("a.message_id"),
        "joined": [
            F.coalesce(F.col("e.message_id"), F.col("a.message_id")).alias("message_id"),
            *[F.col(f"e.{c}").alias(f"e_{c}") for c in kept],
            F.col("a.new_failures").alias("nf_all"),
            F.col("a.recent").alias("rf_all"),
            F.coalesce(F.col("a.batch_duplicates"), F.lit(0).cast("long")).alias("batch_duplicates"),
            F.col("a.group_min").alias("group_min"),
            F.col("a.group_max").alias("group_max"),
        ],
    }
    # Most rows are a new message failing once: that case is computed without the lambdas (higher-order
    # functions run interpreted, row by row) the general case needs.
    single = F.coalesce((F.size("nf_all") == 1) & F.col("e_state").isNull(), F.lit(False))
    one = F.element_at(F.col("rf_all"), 1)

    def recorded_dropped(name: str) -> Column:
        """Without exact duplicates of failures already recorded for this message: its fingerprint in the history,
        or the one the code before it gave (``fp_v1``, :func:`reprocess.cycle.run.fingerprints`), which the entries
        that code wrote hold, with the entry's error class and message (``errors``: ``fp_v1`` took one for the
        other). An entry's fp is null (re-drive entries have none): the test is null, not false.
        (Lambdas in SQL: sparkutil.sql_lambda.)"""
        return F.when(single, F.col(name)).otherwise(sql_lambda(
            f"filter({name}, x -> NOT coalesce(exists(coalesce(e_error_history, array()), h -> h.fp = x.fp OR "
            f"(h.fp = x.fp_v1 AND {errors_hash('h.error_class', 'h.error_message')} = x.errors)), false))"))

    # nf: every new failure (a few fields each); rf: the whole records of its last ones (RECENT before dropping)
    c |= {"_single": single, "nf": recorded_dropped("nf_all"), "rf": recorded_dropped("rf_all"),
          "n": F.coalesce(F.size("nf"), F.lit(0))}
    single = F.col("_single")
    c["cross_batch_duplicates"] = F.coalesce(F.size("nf_all"), F.lit(0)) - F.col("n")
    has_new = c["has_new"] = F.col("n") > 0
    base = "coalesce(e_deliveries, 0L)"
    inc = f"CASE WHEN e_state = '{DELIVERED}' THEN 0L ELSE 1L END"
    # k_i = max(base + inc + (i-1), max_{j<=i}(c_j - j) + i), 1-based i, j; a single new failure: max(1, c_1).
    # Only the last HISTORY_LIMIT failures' k_i are computed (the history keeps no more, and the last one is the
    # count), each from _before, the maximum of c_j - j over the failures before them, and the few between: a
    # message's n failures in one batch cost n, not n squared (bench/RESULTS.md, thirty-third run).
    c["_t"] = F.greatest(F.col("n") - HISTORY_LIMIT, F.lit(0))
    # a failure from at or before the message's last reset (an operator's re-drive) carries the count the reset
    # forgave: it is counted from the ledger's count (the delivery after it; the handed-over one itself when the
    # ledger shows it DELIVERED), as a late failure is, but its own count is not taken
    c["_cm"] = F.when(~single, sql_lambda(
        "transform(nf, (y, j) -> CASE WHEN y.failed_ms <= e_reset_ms THEN NULL ELSE y.delivery_count END - (j + 1))"))
    c["_before"] = F.array_max(F.slice("_cm", F.lit(1), F.col("_t")))
    # nf's last HISTORY_LIMIT (from _t + 1) are rf's last ones (RECENT)
    c["_tail"] = F.when(~single, F.slice("rf", F.greatest(F.size("rf") - HISTORY_LIMIT, F.lit(0)) + 1,
                                         F.lit(HISTORY_LIMIT)))
    c["ks"] = F.when(single, F.array(F.greatest(F.lit(1).cast("long"), one["delivery_count"]))).otherwise(sql_lambda(
        f"transform(_tail, (x, i) -> greatest({base} + {inc} + _t + i, "
        "greatest(_before, array_max(slice(_cm, _t + 1, i + 1))) + _t + i + 1))"))
    last = F.element_at(F.col("rf"), -1)
    k_last = F.element_at(F.col("ks"), -1)
    c["pidx"] = F.when(has_new, last["policy_idx"])
    exhausted, delay = decision_columns(policies, F.col("pidx"), k_last, F.col("message_id"))
    any_nr = F.when(single, one["non_retryable"]).otherwise(sql_lambda("exists(nf, x -> x.non_retryable)"))
    new_state = F.when(any_nr | exhausted, F.lit(DEAD_LETTERED)).otherwise(F.lit(WAITING))
    reason = F.when(any_nr, F.lit(NON_RETRYABLE)).when(exhausted, exhausted_reason_column(policies, F.col("pidx")))
    history_entry = "struct<failed_ms:bigint,delivery:bigint,error_class:string,error_message:string,fp:bigint>"
    history_new = F.when(single, F.array(F.struct(
        one["failed_ms"].alias("failed_ms"), k_last.alias("delivery"), one["error_class"].alias("error_class"),
        one["error_message"].alias("error_message"), one["fp"].alias("fp")))).otherwise(sql_lambda(
        "transform(_tail, (x, i) -> struct(x.failed_ms AS failed_ms, element_at(ks, i + 1) AS delivery, "
        "x.error_class AS error_class, x.error_message AS error_message, x.fp AS fp))"))
    history = F.concat(F.coalesce(F.col("e_error_history"), F.array().cast(f"array<{history_entry}>")), history_new)
    history = F.slice(history, F.greatest(F.size(history) - HISTORY_LIMIT + 1, F.lit(1)), HISTORY_LIMIT)

    def pick(name: str, new_value: Column) -> Column:
        return F.when(has_new, new_value).otherwise(F.col(f"e_{name}")).alias(name)

    state_col = F.when(has_new, new_state).otherwise(F.col("e_state"))
    # the batch's last failure is the message's (none in the ledger: it is new), or decided its dead-lettering
    newest = F.coalesce(last["failed_ms"] >= F.col("e_last_failed_ms"), F.lit(True)) | (new_state == DEAD_LETTERED)
    # the delay runs from the message's last failure: a late landing record (a consumer's failure older than a
    # re-drive's failure already recorded) must not make it due before that failure (the ledger suite's
    # next_attempt_after_last_failure)
    next_ms = F.when(new_state == WAITING, sat_add(
        F.greatest(F.coalesce(F.col("e_last_failed_ms"), F.lit(0)), last["failed_ms"]), delay))
    c["out"] = [
        "message_id",
        pick("address", last["address"]),
        pick("payload", last["payload"]),
        pick("headers", last["headers"]),
        pick("extra", last["extra"]),
        pick("consumer_group", last["consumer_group"]),
        pick("ordering_key", last["ordering_key"]),
        pick("policy", F.when(has_new, policy_name_column(policies, F.col("pidx")))),
        pick("profile", F.when(has_new, profile_column(policies, F.col("pidx")))),
        state_col.alias("state"),
        pick("deliveries", k_last),
        pick("first_failed_ms", F.least(F.coalesce(F.col("e_first_failed_ms"), F.lit(LONG_MAX)),
                                         F.element_at(F.col("nf"), 1)["failed_ms"])),
        pick("last_failed_ms", F.greatest(F.coalesce(F.col("e_last_failed_ms"), F.lit(0)), last["failed_ms"])),
        pick("next_attempt_ms", next_ms),
        # the last failure's error: a late landing record's (older than the ledger's last failure, a re-drive's
        # say) is in the history, not the row's last error, unless the merge dead-letters the message
        pick("last_error_class", F.when(newest, last["error_class"]).otherwise(F.col("e_last_error_class"))),
        pick("last_error_message", F.when(newest, last["error_message"]).otherwise(F.col("e_last_error_message"))),
        pick("error_history", history),
        pick("reason_code", reason),
        pick("dead_letter_address", F.when(new_state == DEAD_LETTERED,
                                           dead_letter_address_column(policies, F.col("pidx"), last["address"],
                                                                      last["consumer_group"]))),
        pick("terminal_ms", F.when(new_state == DEAD_LETTERED, F.col(_MERGE_AS_OF))),
    ]
    ledger_group = F.nullif(F.col("e_consumer_group"), F.lit(""))
    c["out_end"] = [
        F.col("e_released_deliveries").alias("released_deliveries"),
        # the deliveries of a message that waited before this run: the ledger suite gives it one delivery more than
        # that, whatever bound the policy file gives now (validation.suites.ledger_frame; not written)
        F.when(F.col("e_state") == WAITING, F.col("e_deliveries")).alias("waited_deliveries"),
        F.col("e_resets").alias("resets"),
        F.col("e_reset_ms").alias("reset_ms"),
        has_new.alias("changed"),
        # a dead letter a new landing failure takes back (it waits again, or is dead-lettered again in this run):
        # its DLQ record goes (reprocess.cycle.run._drop_revived_dead_letters)
        F.coalesce((F.col("e_state") == DEAD_LETTERED) & has_new, F.lit(False)).alias("revived"),
        (has_new & (new_state == DEAD_LETTERED)).alias("dlq_event"),
        F.col("e_state").isNull().alias("is_new"),
        F.col("n").alias("new_failures"),
        F.col("cross_batch_duplicates"),
        F.col("batch_duplicates"),
        # the groups of a message whose new failures name another consumer group than its ledger row's, or two
        # among themselves: the ledger keeps one row per message_id, so two groups failing on one id (RocketMQ
        # gives every group the same msgId) count as one message's failures. Named, not refused: the records are
        # the landing's as written (README, "consumer_group"). A missing or empty group names none.
        F.when(has_new & ((F.col("group_min") != F.col("group_max")) | (ledger_group != F.col("group_min"))
                          | (ledger_group != F.col("group_max"))),
               F.array_sort(F.array_distinct(F.array_compact(F.array(ledger_group, "group_min", "group_max")))),
               ).alias("conflict_groups"),
    ]
    return c


def apply_outcomes(ledger: DataFrame, outcomes: DataFrame, policies: PolicySet, run_id: str,
                   as_of_ms: int, codegen: str) -> DataFrame:
    """Apply re-drive outcomes (``message_id, delivery, ok, error_class, error_message``) at the as-of.

    A delivered message becomes DELIVERED; a failed one is rescheduled from the as-of by its policy,
    or dead-lettered when exhausted or non-retryable. Rows without an outcome are unchanged. ``codegen`` is the
    cycle's code generation mode: with generated code the as-of reaches the rows as data (:func:`with_as_of`).
    """
    c = _outcome_columns(policies, ledger.schema["error_history"].dataType)
    o = outcomes.select(*c["outcome"])
    # only rows with an outcome use the as-of, and those have the outcome's side of the join
    o, at = with_as_of(o, as_of_ms, codegen)
    o = o.withColumn(_OUTCOME_AS_OF, at)
    df = ledger.join(o, ledger["message_id"] == o["o_id"], "left")
    # the policy index once, in a projection of its own, for the rows with an outcome: the columns below test it for
    # each policy, and inlined it made their plan grow with the square of the policies (bench/RESULTS.md, 69th run)
    df = df.withColumn(_OUTCOME_PIDX, F.when(c["redriven"], c["pidx"]))
    updated_run = F.when(c["redriven"], F.lit(run_id)).otherwise(F.col("updated_run"))
    out = df.withColumns({**c["columns"], "updated_run": updated_run})
    return out.drop("o_id", "o_delivery", "o_ok", "o_class", "o_message", AS_OF_COLUMN, _OUTCOME_AS_OF, _OUTCOME_PIDX)


_OUTCOME_AS_OF = "_outcome_as_of"  # the as-of, a column of its own for the outcomes' columns (apply_outcomes)
_OUTCOME_PIDX = "_outcome_pidx"  # the policy index of a row with an outcome (apply_outcomes)


@columns_once
def _outcome_columns(policies: PolicySet, history_type: DataType) -> dict[str, Any]:
    """The expressions of :func:`apply_outcomes`, the same at every run for the same policies and ledger history
    type (:func:`reprocess.sparkutil.columns_once`): the outcomes' projection (``outcome``), ``redriven``, the
    policy index its columns read from ``_outcome_pidx`` (``pidx``), and the ledger columns it sets (``columns``;
    ``updated_run`` aside)."""
    at = F.col(_OUTCOME_AS_OF)
    redriven = F.col("o_id").isNotNull()
    ok = redriven & F.col("o_ok")
    failed = redriven & ~F.col("o_ok")
    pidx = F.col(_OUTCOME_PIDX)
    exhausted, delay = decision_columns(policies, pidx, F.col("o_delivery"), F.col("message_id"))
    nr = non_retryable_column(policies, pidx, F.col("o_class"), F.col("o_message"))
    # No policy matches the address any more (the file changed since the message was kept, or an operator re-drove
    # it from the DLQ): there is no schedule to wait by, and waiting with none was never due again.
    no_policy = pidx.isNull()
    fail_state = F.when(nr | exhausted | no_policy, F.lit(DEAD_LETTERED)).otherwise(F.lit(WAITING))
    state = F.when(ok, F.lit(DELIVERED)).when(failed, fail_state).otherwise(F.col("state"))
    entry = F.struct(at.alias("failed_ms"), F.col("o_delivery").alias("delivery"),
                     F.col("o_class").alias("error_class"), F.col("o_message").alias("error_message"),
                     F.lit(None).cast("long").alias("fp"))
    hist = F.concat(F.coalesce(F.col("error_history"), F.array().cast(history_type)), F.array(entry))
    hist = F.slice(hist, F.greatest(F.size(hist) - HISTORY_LIMIT + 1, F.lit(1)), HISTORY_LIMIT)
    becomes_dead = failed & (fail_state == DEAD_LETTERED)
    return {
        "outcome": [F.col("message_id").alias("o_id"), F.col("delivery").alias("o_delivery"),
                    F.col("ok").alias("o_ok"), F.col("error_class").alias("o_class"),
                    F.col("error_message").alias("o_message")],
        "redriven": redriven,
        "pidx": policy_index_column(policies, F.col("address"), F.col("consumer_group")),
        "columns": {
            # A re-driven message went through the target and ordering of the policy matching it now (the due rows
            # are re-keyed: under_current_policy), and a failure is decided by that policy, as a consumer's new
            # failure is in the merge: the message is kept under it from here on (the report's and the DLQ record's
            # policy). Before, the row kept the name it was kept under while another policy's schedule decided it.
            # Where none matches (NO_POLICY, a null pidx) the row keeps the name it had, for the report and the DLQ
            # record; once a policy matches it again, its next re-drive is under that one. A row without an outcome
            # has a null pidx too and keeps its own.
            **named_by_index(policies, pidx),
            "state": state,
            "deliveries": F.when(redriven, F.col("o_delivery")).otherwise(F.col("deliveries")),
            "next_attempt_ms": F.when(failed & (fail_state == WAITING), sat_add(at, delay))
            .when(redriven, F.lit(None).cast("long")).otherwise(F.col("next_attempt_ms")),
            "last_failed_ms": F.when(failed, at).otherwise(F.col("last_failed_ms")),
            "last_error_class": F.when(failed, F.col("o_class")).otherwise(F.col("last_error_class")),
            "last_error_message": F.when(failed, F.col("o_message")).otherwise(F.col("last_error_message")),
            "error_history": F.when(failed, hist).otherwise(F.col("error_history")),
            "reason_code": F.when(becomes_dead, F.when(nr, F.lit(NON_RETRYABLE)).when(no_policy, F.lit(NO_POLICY))
                                  .otherwise(exhausted_reason_column(policies, pidx)))
            .when(redriven, F.lit(None).cast("string")).otherwise(F.col("reason_code")),
            "dead_letter_address": F.when(becomes_dead, F.coalesce(
                dead_letter_address_column(policies, pidx, F.col("address"), F.col("consumer_group")),
                F.lit(policies.default_dead_letter_address)))
            .when(redriven, F.lit(None).cast("string")).otherwise(F.col("dead_letter_address")),
            "terminal_ms": F.when(ok | becomes_dead, at)
            .when(redriven, F.lit(None).cast("long")).otherwise(F.col("terminal_ms")),
            "changed": F.col("changed") | redriven,
            "dlq_event": F.col("dlq_event") | becomes_dead,
            "redriven": redriven,
            "delivered_now": ok,
        },
    }


def with_bucket(df: DataFrame) -> DataFrame:
    return df.withColumn("bucket", bucket_column(F.col("state"), F.col("next_attempt_ms"), F.col("terminal_ms")))
