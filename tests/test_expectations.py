"""Each GX suite passes a good batch and catches a deliberately broken batch for every one of its expectations."""

from __future__ import annotations

import pytest

from reprocess.policy import parse_policies
from reprocess.validation.suites import dlq_frame, landing_frame, ledger_frame, load_suite, run_frame, validate

pytestmark = pytest.mark.spark

POLICIES = parse_policies("policies: [{match: 'orders.#', profile: stepped, settings: {max_deliveries: 3}}, "
                          "{match: '#', profile: rocketmq}]")

LEDGER_SCHEMA = ("message_id string, address string, state string, deliveries bigint, next_attempt_ms bigint, "
                 "last_failed_ms bigint")
LEDGER_GOOD = [
    ("a", "orders.x", "WAITING_RETRY", 1, 2000, 1000),
    ("b", "orders.x", "DELIVERED", 2, None, 1000),
    ("c", "orders.y", "DEAD_LETTERED", 3, None, 1000),
    ("d", "other", "WAITING_RETRY", 17, 5000, 5000),
]
LEDGER_BROKEN = {  # expectation index -> rows that break exactly that expectation
    0: [(None, "orders.x", "DELIVERED", 1, None, 1000)],
    1: [("a", "orders.x", "DELIVERED", 1, None, 1000)],  # "a" twice
    2: [("e", "orders.x", "LOST", 1, None, 1000)],
    3: [("e", "orders.x", "DELIVERED", -1, None, 1000)],
    4: [("e", "orders.x", "WAITING_RETRY", 1, None, 1000)],
    5: [("e", "orders.x", "WAITING_RETRY", 1, 500, 1000)],
    6: [("e", "orders.x", "DEAD_LETTERED", 4, None, 1000)],  # stepped allows 3 deliveries
}

DLQ_SCHEMA = "message_id string, original_address string, reason_code string, deliveries bigint"
DLQ_GOOD = [("a", "orders.x", "MAX_DELIVERIES_EXCEEDED", 3), ("b", "orders.x", "NON_RETRYABLE", 1),
            ("c", "other", "MAX_DELIVERIES_EXCEEDED", 17)]
DLQ_BROKEN = {
    0: [(None, "orders.x", "NON_RETRYABLE", 1)],
    1: [("e", None, "NON_RETRYABLE", 1)],
    2: [("e", "orders.x", "BORED", 3)],
    3: [("e", "orders.x", "MAX_DELIVERIES_EXCEEDED", 2)],  # not exhausted yet
}

LANDING_SCHEMA = "message_id string, address string, payload string, failed_ms bigint, delivery_count bigint"
LANDING_GOOD = [("a", "orders.x", "{}", 1000, 1), ("b", "other", "", 2000, 3)]
LANDING_BROKEN = {
    0: [(None, "orders.x", "{}", 1000, 1)],
    1: [("", "orders.x", "{}", 1000, 1)],
    2: [("e", None, "{}", 1000, 1)],
    3: [("e", "orders..x", "{}", 1000, 1)],
    4: [("e", "orders.x", None, 1000, 1)],
    5: [("e", "orders.x", "{}", None, 1)],
    6: [("e", "orders.x", "{}", 1000, 0)],
    7: [("e", "orders.x", "x" * ((1 << 20) + 1), 1000, 1)],
}

RUN_GOOD = {"conservation": {"messages": True, "ingested": True, "quarantine": True, "ledger_unique": True,
                             "redriven": True}}
RUN_KEYS = ["messages", "ingested", "quarantine", "ledger_unique", "redriven"]


def _every_expectation_is_covered(suite: str, broken: dict) -> None:
    assert sorted(broken) == list(range(len(load_suite(suite)["expectations"])))


@pytest.mark.parametrize(("suite", "schema", "good", "broken", "frame"), [
    ("ledger", LEDGER_SCHEMA, LEDGER_GOOD, LEDGER_BROKEN, lambda df: ledger_frame(df, POLICIES)),
    ("dlq", DLQ_SCHEMA, DLQ_GOOD, DLQ_BROKEN, lambda df: dlq_frame(df, POLICIES)),
    ("landing", LANDING_SCHEMA, LANDING_GOOD, LANDING_BROKEN, landing_frame),
])
def test_suite_passes_good_data_and_catches_each_broken_batch(spark, suite, schema, good, broken, frame):
    _every_expectation_is_covered(suite, broken)
    assert validate(frame(spark.createDataFrame(good, schema)), suite).success
    for index, rows in broken.items():
        result = validate(frame(spark.createDataFrame(good + rows, schema)), suite, only=[index])
        assert not result.success, (suite, index)
        assert result.failed[0]["expectation"] == load_suite(suite)["expectations"][index]["type"]


def test_run_suite_catches_every_broken_conservation_check(spark):
    assert validate(run_frame(spark, RUN_GOOD), "run").success
    suite = load_suite("run")
    for i, key in enumerate(RUN_KEYS, start=1):  # expectation 0 is the row count
        broken = {"conservation": {**RUN_GOOD["conservation"], key: False}}
        result = validate(run_frame(spark, broken), "run", only=[i])
        assert not result.success, key
        assert result.failed[0]["column"] == suite["expectations"][i]["kwargs"]["column"]
    doubled = run_frame(spark, RUN_GOOD).unionByName(run_frame(spark, RUN_GOOD))
    assert not validate(doubled, "run", only=[0]).success
