"""A small run in a local-mode driver checkpoints the frames it keeps (sparkutil.truncates_plans) instead of caching
them: the same warehouse as caching them, and nothing kept after the run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.warehouse_state import cycle_at, warehouse_state

from reprocess.cycle import run as run_module
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.sparkutil import truncates_plans

pytestmark = pytest.mark.spark

AS_OFS = ("2026-11-21T02:00:00Z", "2026-11-21T04:00:00Z")


def _plan(df: Any) -> str:
    """The leaf a query over ``df`` starts from while ``df`` is kept."""
    return str(df._jdf.queryExecution().withCachedData().getClass().getSimpleName())


def test_checkpointed_and_cached_frames_give_the_same_warehouse_and_leave_nothing_kept(spark, tmp_path, monkeypatch):
    """Generated failures (poison messages, repeats, an ordered policy's hold-back, the flaky target's second
    failures) through two cycles, once as a small local run does and once with the frames cached as a large run
    does. Each run keeps the landing's records, the merged ledger rows, the due ones and the outcomes: checkpointed,
    their plans start at the kept rows (a ``LogicalRDD``), cached at a cached relation; either way the session holds
    no more kept blocks after a cycle than before it."""
    write_landing(GenerateOptions(out=tmp_path / "landing", messages=200, hours=4, seed=5,
                                  start=datetime(2026, 11, 21, tzinfo=UTC)))
    assert truncates_plans(spark, small=True)
    assert not truncates_plans(spark, small=False)
    pinned: list[str] = []
    pin = run_module.pin

    def recording(df: Any, level: Any, truncate: bool) -> Any:
        kept = pin(df, level, truncate)
        pinned.append(_plan(kept))
        return kept

    monkeypatch.setattr(run_module, "pin", recording)
    jsc = spark.sparkContext._jsc
    states, plans, dead_lettered = {}, {}, {}
    for mode in ("checkpoint", "cache"):
        if mode == "cache":
            monkeypatch.setattr(run_module, "truncates_plans", lambda spark, small: False)
        pinned.clear()
        wh = tmp_path / f"wh-{mode}"
        summaries = []
        for as_of in AS_OFS:
            before = jsc.getPersistentRDDs().size()
            summaries.append(cycle_at(spark, tmp_path / "landing", wh, as_of))
            assert jsc.getPersistentRDDs().size() == before, f"{mode}: a kept frame outlived its run as of {as_of}"
        assert len(pinned) == 4 * len(AS_OFS)
        plans[mode] = set(pinned)
        states[mode] = warehouse_state(spark, wh)
        dead_lettered[mode] = [s["dead_lettered"]["total"] for s in summaries]
        assert summaries[1]["due"] > 0, "the second cycle re-drives what the first rescheduled"
        assert summaries[1]["rescheduled"] > 0, "and the flaky target fails some of them again"
    assert plans == {"checkpoint": {"LogicalRDD"}, "cache": {"InMemoryRelation"}}
    assert states["checkpoint"] == states["cache"]
    assert dead_lettered["checkpoint"] == dead_lettered["cache"]
    assert any(dead_lettered["cache"]), "the landing has poison messages"
    assert states["cache"]["quarantine"], "and malformed records"
