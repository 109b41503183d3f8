"""Great Expectations suites of ``expectations/`` run on Spark DataFrames (GX Core, ephemeral context).

Checks GX cannot state directly (per-policy bounds, "waiting rows have a next attempt") are built
as boolean columns with the cycle's own expressions, and the suites expect them to be true.
Results use the BASIC format (counts, no row lists) and the batch is unpersisted afterwards.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from reprocess.ledger.model import DEAD_LETTERED, NON_RETRYABLE, WAITING
from reprocess.policy.columns import by_policy, policy_index_column
from reprocess.policy.durations import LONG_MAX
from reprocess.policy.reference import max_deliveries

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from reprocess.policy.config import Policy, PolicySet

log = logging.getLogger(__name__)

SUITES_DIR = Path(__file__).resolve().parents[3] / "expectations"
SUITES = ("landing", "ledger", "dlq", "run")


@dataclass
class SuiteResult:
    suite: str
    success: bool
    evaluated: int
    failed: list[dict[str, Any]] = field(default_factory=list)

    def describe(self) -> str:
        if self.success:
            return f"suite {self.suite}: {self.evaluated} expectations passed"
        parts = [f"{f['expectation']}({f.get('column') or ''}) unexpected={f.get('unexpected_count')}"
                 for f in self.failed]
        return f"suite {self.suite}: {len(self.failed)} of {self.evaluated} failed: " + "; ".join(parts)


def load_suite(name: str) -> dict[str, Any]:
    path = SUITES_DIR / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _context() -> Any:
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    return gx.get_context(mode="ephemeral")


def validate(df: DataFrame, suite: str | dict[str, Any], only: list[int] | None = None) -> SuiteResult:
    """Run a suite (a name under expectations/, or its JSON) on ``df``; ``only`` keeps some expectations."""
    import great_expectations as gx

    doc = load_suite(suite) if isinstance(suite, str) else suite
    if only is not None:
        doc = {**doc, "expectations": [doc["expectations"][i] for i in only]}
    ctx = _context()
    name = doc["name"]
    key = f"{name}-{id(df)}-{len(doc['expectations'])}"
    source = ctx.data_sources.add_or_update_spark(name="reprocess")
    asset = source.add_dataframe_asset(name=key)
    batch = asset.add_batch_definition_whole_dataframe(key)
    gx_suite = ctx.suites.add_or_update(gx.ExpectationSuite(**{**doc, "name": key}))
    definition = ctx.validation_definitions.add_or_update(gx.ValidationDefinition(name=key, data=batch,
                                                                                  suite=gx_suite))
    cached = df.persist()
    try:
        result = definition.run(batch_parameters={"dataframe": cached}, result_format={"result_format": "BASIC"})
    finally:
        cached.unpersist()
        ctx.validation_definitions.delete(key)
        ctx.suites.delete(key)
        source.delete_asset(key)
    failed = [
        {"expectation": r.expectation_config.type, "column": r.expectation_config.kwargs.get("column"),
         "unexpected_count": (r.result or {}).get("unexpected_count")}
        for r in result.results if not r.success]
    out = SuiteResult(name, bool(result.success), len(result.results), failed)
    log.info("validation %s", out.describe())
    return out


def _limit(policies: PolicySet, address: Column) -> Column:
    def bound(p: Policy) -> Column:
        limit = max_deliveries(p)
        return F.lit(LONG_MAX if limit is None else limit).cast("long")

    out = by_policy(policies, policy_index_column(policies, address), bound)
    return F.coalesce(out, F.lit(LONG_MAX).cast("long"))  # an address no policy matches any more: no bound


def ledger_frame(ledger: DataFrame, policies: PolicySet) -> DataFrame:
    """The ledger with the boolean columns the ledger suite expects to be true."""
    waiting = F.col("state") == WAITING
    return ledger.select(
        "message_id", "state", "deliveries",
        (~waiting | F.col("next_attempt_ms").isNotNull()).alias("waiting_has_next_attempt"),
        (~waiting | F.col("last_failed_ms").isNull() | (F.col("next_attempt_ms") >= F.col("last_failed_ms")))
        .alias("next_attempt_after_last_failure"),
        (F.col("deliveries") <= _limit(policies, F.col("address"))).alias("deliveries_within_policy_bound"),
    )


def dlq_frame(dlq: DataFrame, policies: PolicySet) -> DataFrame:
    """DLQ rows with ``really_exhausted_or_non_retryable``."""
    ok = (F.col("reason_code") == NON_RETRYABLE) | (
        F.col("deliveries") >= _limit(policies, F.col("original_address")))
    return dlq.select("message_id", "original_address", "reason_code", ok.alias("really_exhausted_or_non_retryable"))


def landing_frame(records: DataFrame) -> DataFrame:
    """Accepted landing records with ``payload_bytes``."""
    return records.select("message_id", "address", "payload", "failed_ms", "delivery_count",
                          F.octet_length("payload").alias("payload_bytes"))


def run_frame(spark: SparkSession, summary: dict[str, Any]) -> DataFrame:
    """One row of the run's conservation checks."""
    c = summary["conservation"]
    row = {"messages_conserved": c["messages"], "records_accounted_for": c["ingested"],
           "quarantine_complete": c["quarantine"], "ledger_unique": c["ledger_unique"],
           "every_due_message_has_one_outcome": c["redriven"]}
    return spark.createDataFrame([row])


__all__ = ["DEAD_LETTERED", "SUITES", "SuiteResult", "dlq_frame", "landing_frame", "ledger_frame", "load_suite",
           "run_frame", "validate"]
