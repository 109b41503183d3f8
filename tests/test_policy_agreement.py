"""The Spark column expressions agree with the pure-Python reference on every generated input."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reprocess.policy.columns import decision_columns, policy_index_column
from reprocess.policy.config import policies_from_mapping
from reprocess.policy.durations import LONG_MAX
from reprocess.policy.jitter import SPARK_HASH_SEED, seed_text, to_signed, xxh64
from reprocess.policy.reference import delay_ms as ref_delay
from reprocess.policy.reference import exhausted

if TYPE_CHECKING:
    from reprocess.policy import PolicySet

pytestmark = pytest.mark.spark

longs = st.one_of(st.integers(0, 5000), st.integers(0, 10**7), st.integers(0, LONG_MAX), st.sampled_from([0, 1]))
factors = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.15, 1.0]))
multipliers = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 5.0, 10.0]), st.floats(1.01, 20), st.floats(0, 1))
# the brokers take a negative delay or multiplier too (at once where the delay reached is not above 0)
signed_longs = st.one_of(longs, st.integers(-10**7, 0), st.integers(-(1 << 63), 0))
signed_multipliers = st.one_of(multipliers, st.sampled_from([-0.5, -1.0, -2.0, -1e300]), st.floats(-20, 0))

activemq = st.fixed_dictionaries(
    {},
    optional={
        "collisionAvoidanceFactor": st.one_of(factors, st.floats(-1, 0)),  # ActiveMQ takes a negative one too
        "maximumRedeliveries": st.one_of(st.integers(-3, 40), st.just(2**31 - 1)),
        "maximumRedeliveryDelay": st.one_of(st.just(-1), longs, st.integers(-(1 << 63), -2)),
        "initialRedeliveryDelay": signed_longs,
        "redeliveryDelay": signed_longs,
        "useCollisionAvoidance": st.booleans(),
        "useExponentialBackOff": st.booleans(),
        "backOffMultiplier": signed_multipliers,
    },
).map(lambda s: {"profile": "activemq", "settings": s})

artemis = st.fixed_dictionaries(
    {},
    optional={
        "redelivery-delay": signed_longs,
        "redelivery-delay-multiplier": signed_multipliers,
        "max-redelivery-delay": signed_longs,
        "redelivery-collision-avoidance-factor": factors,
        "max-delivery-attempts": st.integers(-2, 40),
    },
).map(lambda s: {"profile": "artemis", "settings": s})

levels = st.lists(st.sampled_from(["1s", "5s", "10s", "30s", "1m", "2m", "1h", "2h", "1d"]), min_size=1, max_size=20)
rocketmq = st.fixed_dictionaries(
    {},
    optional={
        "maxReconsumeTimes": st.integers(-1, 40),
        "messageDelayLevel": levels.map(" ".join),
        "consumeMessageOrderly": st.booleans(),
        "suspendCurrentQueueTimeMillis": st.one_of(st.integers(-100, 100_000), st.integers(-(1 << 63), 0)),
    },
).map(lambda s: {"profile": "rocketmq", "settings": s})

jitters = st.one_of(
    st.fixed_dictionaries({"jitter": st.sampled_from(["none", "full", "equal"])}),
    st.fixed_dictionaries({"jitter": st.just("proportional"), "jitter_factor": factors}),
)
max_deliveries = st.one_of(st.just("unlimited"), st.integers(1, 40))
stepped = st.builds(
    lambda delays, md, j: {"profile": "stepped", "settings": {"delays": delays, "max_deliveries": md, **j}},
    st.lists(st.integers(0, 10**12), min_size=1, max_size=12), max_deliveries, jitters,
)


def _exp(initial, extra, mult, md, j):
    return {"profile": "exponential", "settings": {"initial_delay": initial, "max_delay": initial + extra,
                                                   "multiplier": mult, "max_deliveries": md, **j}}


exponential = st.builds(_exp, st.integers(0, 10**9), longs.map(lambda x: x // 2), st.floats(1, 50),
                        max_deliveries, jitters)

any_policy = st.one_of(activemq, artemis, rocketmq, stepped, exponential)
deliveries = st.one_of(st.integers(1, 40), st.integers(1, 200), st.integers(1, LONG_MAX // 2), st.just(LONG_MAX - 1))
rows = st.lists(st.tuples(deliveries, st.text(max_size=40)), min_size=1, max_size=25)


def _policy_set(raw_policies: list[dict]) -> PolicySet:
    return policies_from_mapping({"policies": [{"match": f"p{i}.#", **p} for i, p in enumerate(raw_policies)]})


def _spark_decisions(spark, ps: PolicySet, data: list[tuple[int, int, str]]):
    schema = T.StructType([T.StructField("idx", T.IntegerType()), T.StructField("k", T.LongType()),
                           T.StructField("message_id", T.StringType())])
    df = spark.createDataFrame(data, schema)
    ex, delay = decision_columns(ps, F.col("idx"), F.col("k"), F.col("message_id"))
    out = df.select("idx", "k", "message_id", ex.alias("exhausted"), delay.alias("delay")).collect()
    return {(r.idx, r.k, r.message_id): (r.exhausted, r.delay) for r in out}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(policies=st.lists(any_policy, min_size=1, max_size=4), data=st.data())
def test_spark_expressions_agree_with_the_reference_on_generated_policies(spark, policies, data):
    ps = _policy_set(policies)
    picked = data.draw(st.lists(st.tuples(st.integers(0, len(ps.effective) - 1), deliveries, st.text(max_size=30)),
                                min_size=1, max_size=30))
    got = _spark_decisions(spark, ps, picked)
    for idx, k, mid in picked:
        policy = ps.effective[idx]
        want_ex = exhausted(policy, k)
        want_delay = max(0, ref_delay(policy, k, mid))
        spark_ex, spark_delay = got[(idx, k, mid)]
        assert spark_ex == want_ex, (policy, k, mid)
        assert spark_delay == want_delay, (policy, k, mid, spark_delay, want_delay)
        assert spark_delay >= 0


@settings(max_examples=25, deadline=None)
@given(texts=st.lists(st.text(max_size=200), min_size=1, max_size=40), k=st.integers(1, LONG_MAX))
def test_pure_python_xxhash64_equals_spark_xxhash64(spark, texts, k):
    seeds = [seed_text(t, k) for t in texts]
    df = spark.createDataFrame([(s,) for s in seeds], "s string")
    got = [r.h for r in df.select(F.xxhash64("s").alias("h")).collect()]
    assert got == [to_signed(xxh64(s.encode("utf-8"), SPARK_HASH_SEED)) for s in seeds]


def test_policy_resolution_in_spark_matches_python(spark):
    ps = policies_from_mapping({"policies": [
        {"match": "#", "profile": "rocketmq"}, {"match": "orders.#", "profile": "stepped"},
        {"match": "orders.*", "profile": "stepped"}, {"match": "orders.created", "profile": "stepped"},
        {"match": "*.created", "profile": "stepped"}, {"match": "a.#.z", "profile": "stepped"},
        {"match": "we(ird).[x]+", "profile": "stepped"},
        # a consumer group's policies: before any of no group, for that group's messages only
        {"match": "#", "profile": "rocketmq", "consumer_group": "g1", "settings": {"maxReconsumeTimes": 3}},
        {"match": "orders.*", "profile": "stepped", "consumer_group": "g1"},
        {"match": "orders.#", "profile": "exponential", "consumer_group": "g2"},
    ]})
    addresses = ["orders.created", "orders.updated", "orders", "orders.eu.x", "billing.created", "a.z", "a.b.c.z",
                 "a.b.c", "we(ird).[x]+", "weird.xx", "x", "ünï.cødé", "with space.x"]
    groups = [None, "", "g1", "g2", "g3", "G1"]
    df = spark.createDataFrame([(a, g) for a in addresses for g in groups], "address string, consumer_group string")
    got = {(r.address, r.consumer_group): r.idx for r in df.select(
        "address", "consumer_group", policy_index_column(ps, F.col("address"), F.col("consumer_group")).alias("idx"))
        .collect()}
    assert got == {(a, g): ps.resolve_index(a, g) for a in addresses for g in groups}
    names = {g: ps.effective[got[("orders.created", g)]].name for g in groups}
    assert names == {None: "orders.created", "": "orders.created", "g1": "orders.* @g1", "g2": "orders.# @g2",
                     "g3": "orders.created", "G1": "orders.created"}
    assert ps.effective[got[("x", "g1")]].name == "# @g1"


def test_an_imported_activemq_xml_resolves_in_spark_as_activemq_chooses(spark, tmp_path):
    """ActiveMQ takes ``*.eu`` for ``orders.eu`` where Artemis's rule takes ``orders.*``: the import adds an
    ``orders.eu`` policy with ``*.eu``'s settings (tests/test_classic_import.py checks the choice against the JVM),
    and the cycle's expressions resolve through it as the Python side does."""
    from tests.test_classic_import import _plugin, _write

    from reprocess.policy.classic_import import import_activemq_xml

    ps = import_activemq_xml(_write(tmp_path, _plugin([
        '<redeliveryPolicy queue="orders.*" maximumRedeliveries="1"/>',
        '<redeliveryPolicy queue="*.eu" maximumRedeliveries="2"/>',
        '<redeliveryPolicy queue="orders.>" maximumRedeliveries="3"/>']))).policies
    addresses = ["orders.eu", "orders.us", "shop.eu", "orders", "orders.eu.x", "billing"]
    df = spark.createDataFrame([(a,) for a in addresses], "address string")
    got = {r.address: r.idx for r in df.select(
        "address", policy_index_column(ps, F.col("address"), F.lit(None).cast("string")).alias("idx")).collect()}
    assert got == {a: ps.resolve_index(a) for a in addresses}
    assert {a: ps.effective[got[a]].settings.maximum_redeliveries for a in addresses} == {  # type: ignore[union-attr]
        "orders.eu": 2, "orders.us": 1, "shop.eu": 2, "orders": 3, "orders.eu.x": 3, "billing": 0}


def test_a_tie_among_artemis_policies_resolves_in_spark_as_the_broker_does(spark):
    """``*.eu.#`` and ``shop.#`` tie in MatchComparator; a broker merges ``shop.#`` first for ``shop.eu.cart``
    (tests/test_artemis_order.py checks that order against the JVM), and so do the cycle's expressions."""
    from reprocess.ledger.merge import dead_letter_address_column, policy_name_column

    ps = policies_from_mapping({"policies": [
        {"match": "*.eu.#", "profile": "artemis", "settings": {"dead-letter-address": "eu.dlq"}},
        {"match": "shop.#", "profile": "artemis", "settings": {"dead-letter-address": "shop.dlq"}}]})
    df = spark.createDataFrame([(a,) for a in ("shop.eu.cart", "news.eu.x", "shop.x")], "address string")
    idx = policy_index_column(ps, F.col("address"), F.lit(None).cast("string"))
    got = {r.address: (r.policy, r.dla) for r in df.select(
        "address", policy_name_column(ps, idx).alias("policy"),
        dead_letter_address_column(ps, idx, F.col("address"), F.lit("g")).alias("dla")).collect()}
    assert got == {"shop.eu.cart": ("shop.#", "shop.dlq"), "news.eu.x": ("*.eu.#", "eu.dlq"),
                   "shop.x": ("shop.#", "shop.dlq")}


def test_merged_artemis_settings_in_spark_match_python(spark):
    """Artemis merges address settings: on random files whose artemis policies overlap, the cycle's expressions give
    every address the policy variant, schedule, exhaustion, reason, dead-letter address, non-retryable rules and
    ledger-suite bound the Python side gives. Policies of other profiles with rules of their own sit among them, so
    the variants' numbering differs from the file's."""
    import random
    from itertools import product

    from reprocess.ledger.merge import (
        dead_letter_address_column,
        exhausted_reason_column,
        non_retryable_column,
        policy_name_column,
    )
    from reprocess.policy.reference import max_deliveries
    from reprocess.validation.suites import _limit

    rnd = random.Random(3)
    words = ["a", "b", "*", "#"]
    values = {"redelivery-delay": [0, 1000, 7000], "redelivery-delay-multiplier": [1.0, 2.5],
              "max-redelivery-delay": [3000, 90_000], "redelivery-collision-avoidance-factor": [0.0, 0.5],
              "max-delivery-attempts": [-1, 2, 5], "dead-letter-address": ["", "x.dlq", "y.dlq"]}
    addresses = [".".join(w) for n in range(1, 4) for w in product("abc", repeat=n)]
    classes = [None, "E0", "E1", "E2", "E3", "E4", "E5"]
    rows, files, shifted = [], [], 0
    for f in range(12):
        patterns = list(dict.fromkeys(".".join(rnd.choice(words) for _ in range(rnd.randint(1, 3)))
                                      for _ in range(rnd.randint(3, 6))))
        raw = []
        for n, pattern in enumerate(patterns):
            policy: dict = {"match": pattern, "profile": "artemis", "settings": {
                k: rnd.choice(values[k]) for k in rnd.sample(sorted(values), rnd.randint(0, 3))}}
            if rnd.random() < 0.25:
                policy = {"match": pattern, "profile": "stepped",
                          "settings": {"delays": ["1s", "2s"], "max_deliveries": rnd.randint(1, 4)}}
                dla = rnd.choice([None, "s.dlq", "%DLQ%{consumer_group}", "DLQ.{address}.{consumer_group}",
                                  "{address}"])
                if dla is not None:
                    policy["dead_letter_address"] = dla
                if rnd.random() < 0.4:
                    policy["consumer_group"] = "g1"
            if rnd.random() < 0.5:
                policy["non_retryable"] = [{"error_class": f"E{n}"}]
            raw.append(policy)
        ps = policies_from_mapping({"default_dead_letter_address": "ops.dlq", "non_retryable": [{"error_class": "E5"}],
                                    "policies": raw})
        shifted += [v.base for v in ps.variants] != list(range(len(patterns)))
        files.append(ps)
        rows += [(f, a, k, f"m{k}", rnd.choice(classes), rnd.choice([None, "", "g1"]))
                 for a in addresses for k in (1, 2, 3, 6)]
    df = spark.createDataFrame(rows, "f int, address string, k long, message_id string, error_class string, "
                               "consumer_group string")
    got = {}
    for f, ps in enumerate(files):
        idx = policy_index_column(ps, F.col("address"), F.col("consumer_group"))
        ex, delay = decision_columns(ps, idx, F.col("k"), F.col("message_id"))
        out = df.where(F.col("f") == f).select(
            "address", "k", "error_class", "consumer_group", idx.alias("idx"),
            policy_name_column(ps, idx).alias("policy"), ex.alias("ex"), delay.alias("delay"),
            exhausted_reason_column(ps, idx).alias("reason"),
            dead_letter_address_column(ps, idx, F.col("address"), F.col("consumer_group")).alias("dla"),
            non_retryable_column(ps, idx, F.col("error_class"), F.lit(None).cast("string")).alias("nr"),
            _limit(ps, F.col("address"), F.col("consumer_group")).alias("limit"))
        got[f] = {(r.address, r.k): (r.idx, r.policy, r.ex, r.delay, r.reason, r.dla, r.nr, r.limit, r.error_class,
                                     r.consumer_group) for r in out.collect()}
    for f, ps in enumerate(files):
        for address in addresses:
            for k in (1, 2, 3, 6):
                *row, error_class, group = got[f][(address, k)]
                i = ps.resolve_index(address, group)
                if i is None:
                    assert row == [None] * 6 + [error_class == "E5", LONG_MAX]
                    continue
                p = ps.effective[i]
                reason = "NO_DEAD_LETTER_ADDRESS" if p.drops_without_dla else "MAX_DELIVERIES_EXCEEDED"
                limit = max_deliveries(p)
                want = [i, p.name, exhausted(p, k), max(0, ref_delay(p, k, f"m{k}")), reason,
                        ps.dead_letter_address_for(p, address, group), ps.is_non_retryable(p, error_class, None),
                        LONG_MAX if limit is None else limit]
                assert row == want, (f, address, k, p)
    assert shifted > 1  # some files number their variants apart from their policies
    grouped = {r[1] for f in got.values() for r in f.values() if r[1] and "@g1" in r[1]}
    assert len(grouped) > 3, grouped  # messages of a group took their group's policies
    templated = {dla for f in got.values() for (*_, dla, _nr, _limit, _e, _g) in f.values() if dla and "g1" in dla}
    assert len(templated) > 3, templated  # dead-letter addresses naming the message's group were met


def test_huge_delivery_counts_never_overflow_in_spark(spark):
    ps = _policy_set([
        {"profile": "activemq", "settings": {"useExponentialBackOff": True, "maximumRedeliveries": -1,
                                             "useCollisionAvoidance": True}},
        {"profile": "artemis", "settings": {"redelivery-delay": 10**15, "redelivery-delay-multiplier": 10,
                                            "max-redelivery-delay": LONG_MAX, "max-delivery-attempts": -1,
                                            "redelivery-collision-avoidance-factor": 0.9}},
        {"profile": "exponential", "settings": {"initial_delay": "1d", "multiplier": 50, "max_delay": LONG_MAX,
                                                "max_deliveries": "unlimited", "jitter": "full"}},
        {"profile": "rocketmq", "settings": {"maxReconsumeTimes": 16}},
        {"profile": "stepped", "settings": {"delays": ["1s", "2s"], "max_deliveries": "unlimited",
                                            "jitter": "proportional", "jitter_factor": 1.0}},
    ])
    data = [(i, k, "m") for i in range(5) for k in (1, 64, 10**6, 2**40, LONG_MAX - 1)]
    got = _spark_decisions(spark, ps, data)
    for (idx, k, mid), (ex, delay) in got.items():
        assert ex == exhausted(ps.effective[idx], k)
        assert 0 <= delay <= LONG_MAX
        assert delay == max(0, ref_delay(ps.effective[idx], k, mid))


# (rule field, pattern, text): where Java's regex and Python's differed. Java's `.`, `^` and `$` knew \r, \u0085,
# \u2028 and \u2029 as line ends, and its \s, \w, \d, \b and (?i) were ASCII-only; Python's are Unicode and know
# only \n. The cycle's rlike now runs the rules with (?dU), Java's UNIX_LINES and UNICODE_CHARACTER_CLASS.
REGEX_CASES = [
    ("message", r"quota\sexceeded", "quota\u00a0exceeded"),
    ("message", r"refused.at", "refused\rat"),
    ("message", r"a.b", "a\u0085b"),
    ("message", r"a.b", "a\u2029b"),
    ("message", r"^timeout$", "timeout\u2028"),
    ("message", r"^timeout$", "timeout\n"),
    ("message", r"(?i)échec", "ÉCHEC"),
    ("message", r"\d+ rows", "\u0663 rows"),
    ("message", r"^\w+Error", "ÄrgerError"),
    ("message", r"x\b", "xé"),
    ("error_class", r"(?i)café\.Timeout", "CAFÉ.timeout"),
    ("error_class", r"com\.\w+\.Poison", "com.açme.Poison"),
]


def test_a_rules_regex_matches_in_the_cycle_as_in_the_reference(spark):
    """The rules' patterns run as rlike (Java) in the cycle and with re (Python) in the reference and the simulation:
    on these texts they disagreed, so the cycle retried a message the reference dead-letters, or the other way."""
    from reprocess.ledger.merge import _rule_column
    from reprocess.policy.config import NonRetryableRule

    rows = [(i, text) for i, (_field, _pattern, text) in enumerate(REGEX_CASES)]
    df = spark.createDataFrame(rows, "i int, text string")
    rules = [NonRetryableRule(**{field: pattern}) for field, pattern, _text in REGEX_CASES]
    got = df.select("i", *[_rule_column(r, F.col("text"), F.col("text")).alias(f"r{n}")
                           for n, r in enumerate(rules)]).collect()
    for row in got:
        text = REGEX_CASES[row.i][2]
        for n, rule in enumerate(rules):
            assert row[f"r{n}"] == rule.matches(text, text), (rule, text)
    assert sum(rule.matches(t, t) for rule, (_f, _p, t) in zip(rules, REGEX_CASES, strict=True)) >= 9


def test_a_long_activemq_table_is_one_literal_and_agrees_with_the_reference(spark):
    """A slowly backed-off ActiveMQ delay settles only at Long.MAX_VALUE: 3,701 table entries for x1.01 from 1 s.
    Each entry was a literal of its own, a py4j call each when the expression was built (140 s in a driver for the
    longest table, 65,536 entries): the table is one string literal now, split and cast, folded by the optimizer."""
    from reprocess.policy.columns import activemq_table, delay_column

    ps = _policy_set([{"profile": "activemq", "settings": {"useExponentialBackOff": True, "backOffMultiplier": 1.01,
                                                          "maximumRedeliveries": -1}}])
    policy = ps.effective[0]
    table = activemq_table(policy.settings)
    assert len(table) > 3000
    assert table[-1] == LONG_MAX
    casts = str(delay_column(policy, F.lit(1), F.lit("m"))).count(" AS BIGINT)")
    assert casts < 20, casts  # not a literal, cast, per entry
    picked = [(0, k, "m") for k in (1, 2, 100, len(table) - 1, len(table), len(table) + 1, 10**9)]
    got = _spark_decisions(spark, ps, picked)
    assert [got[row][1] for row in picked] == [max(0, ref_delay(policy, k, "m")) for _, k, _ in picked]
    assert [got[row][1] for row in picked][:2] == [1000, 1010]
