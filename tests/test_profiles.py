"""Each profile against hand-worked examples from the brokers' own code (seeds 000, 001, 003, 004)."""

from __future__ import annotations

import pytest

from reprocess.policy import Action, parse_policies, schedule
from reprocess.policy.durations import INT_MAX, LONG_MAX
from reprocess.policy.reference import decide, max_deliveries

pytestmark = pytest.mark.unit


def _policy(profile: str, settings: dict, **extra):
    import yaml

    doc = {"policies": [{"match": "#", "profile": profile, "settings": settings, **extra}]}
    return parse_policies(yaml.safe_dump(doc)).policies[0]


def _delays(policy, n=30, message_id=""):
    return [s.delay_ms for s in schedule(policy, n, message_id) if s.action is Action.RETRY]


def _dead_letter_at(policy, n=200):
    steps = schedule(policy, n)
    return steps[-1].failed_delivery if steps[-1].action is Action.DEAD_LETTER else None


# --- ActiveMQ Classic RedeliveryPolicy -------------------------------------------------------------

def test_activemq_defaults_redeliver_six_times_one_second_apart_then_dead_letter_on_the_seventh():
    p = _policy("activemq", {})
    assert _delays(p) == [1000] * 6
    assert _dead_letter_at(p) == 7  # 1 delivery + maximumRedeliveries (6) redeliveries


def test_activemq_exponential_backoff_multiplies_the_previous_delay_by_five():
    p = _policy("activemq", {"useExponentialBackOff": True})
    assert _delays(p) == [1000, 5000, 25000, 125000, 625000, 3125000]


def test_activemq_cap_uses_max_of_maximum_redelivery_delay_and_redelivery_delay():
    p = _policy("activemq", {"useExponentialBackOff": True, "maximumRedeliveryDelay": 30000,
                             "maximumRedeliveries": 8})
    assert _delays(p) == [1000, 5000, 25000, 30000, 30000, 30000, 30000, 30000]
    # "in case the user made max redelivery delay less than redelivery delay": redeliveryDelay wins
    q = _policy("activemq", {"useExponentialBackOff": True, "maximumRedeliveryDelay": 2000,
                             "redeliveryDelay": 4000, "backOffMultiplier": 3})
    assert _delays(q) == [1000, 4000, 4000, 4000, 4000, 4000]
    # below -1 ActiveMQ caps too (every next delay is above it): at the redelivery delay. It was a ConfigError, and a
    # broker's file with it could not be migrated as it ran
    r = _policy("activemq", {"useExponentialBackOff": True, "maximumRedeliveryDelay": -2, "maximumRedeliveries": 4})
    assert _delays(r) == [1000, 1000, 1000, 1000]


def test_activemq_next_delay_truncates_each_step_like_a_java_long_cast():
    p = _policy("activemq", {"useExponentialBackOff": True, "backOffMultiplier": 1.5, "initialRedeliveryDelay": 1001,
                             "maximumRedeliveries": 5})
    # 1001 -> (long)1501.5=1501 -> (long)2251.5=2251 -> (long)3376.5=3376 -> (long)5064.0=5064
    assert _delays(p) == [1001, 1501, 2251, 3376, 5064]


def test_activemq_initial_delay_does_not_change_redelivery_delay():
    # setInitialRedeliveryDelay does not touch redeliveryDelay: later redeliveries use 1000.
    p = _policy("activemq", {"initialRedeliveryDelay": 5000})
    assert _delays(p)[:3] == [5000, 1000, 1000]


def test_activemq_zero_initial_delay_redelivers_at_once_then_uses_redelivery_delay():
    p = _policy("activemq", {"initialRedeliveryDelay": 0, "redeliveryDelay": 2000, "useExponentialBackOff": True,
                             "backOffMultiplier": 2})
    assert _delays(p) == [0, 2000, 4000, 8000, 16000, 32000]


def test_activemq_multiplier_of_one_half_is_legal_and_disables_growth():
    p = _policy("activemq", {"useExponentialBackOff": True, "backOffMultiplier": 0.5})
    assert _delays(p) == [1000] * 6


def test_activemq_minus_one_redelivers_forever_and_zero_never_redelivers():
    forever = _policy("activemq", {"maximumRedeliveries": -1})
    assert max_deliveries(forever) is None
    assert decide(forever, 10**12).action is Action.RETRY
    never = _policy("activemq", {"maximumRedeliveries": 0})
    assert max_deliveries(never) == 1
    assert decide(never, 1).action is Action.DEAD_LETTER


def test_activemq_unbounded_backoff_saturates_at_long_max_and_never_goes_negative():
    p = _policy("activemq", {"useExponentialBackOff": True, "maximumRedeliveries": -1})
    assert decide(p, 10**15).delay_ms == LONG_MAX
    assert all(d >= 0 for d in _delays(p, 80))


def test_activemq_collision_avoidance_stays_within_factor_and_spares_the_initial_delay():
    p = _policy("activemq", {"useCollisionAvoidance": True, "maximumRedeliveries": -1})
    for mid in ("a", "b", "msg-42"):
        d = _delays(p, 50, mid)
        assert d[0] == 1000
        assert all(850 < x < 1150 for x in d[1:]), d
        assert len(set(d[1:])) > 10  # really jittered
        assert d == _delays(p, 50, mid)  # and deterministic


def test_activemq_takes_a_negative_collision_avoidance_factor_and_mirrors_each_draw():
    """``(coin ? f : -f) * unit``: ActiveMQ takes any factor, and a negative one moves each delay as far the other
    way (Java's truncation toward zero aside). It was refused (``must be >= 0.0``)."""
    plus = _policy("activemq", {"useCollisionAvoidance": True, "collisionAvoidanceFactor": 0.5,
                                "maximumRedeliveries": -1})
    minus = _policy("activemq", {"useCollisionAvoidance": True, "collisionAvoidanceFactor": -0.5,
                                 "maximumRedeliveries": -1})
    for mid in ("a", "b", "msg-42"):
        up, down = _delays(plus, 40, mid), _delays(minus, 40, mid)
        assert up[0] == down[0] == 1000
        assert all(abs((u - 1000) + (d - 1000)) <= 1 for u, d in zip(up[1:], down[1:], strict=True)), (up, down)
        assert any(u != d for u, d in zip(up[1:], down[1:], strict=True))


# --- Artemis ---------------------------------------------------------------------------------------

def test_artemis_max_delivery_attempts_three_dead_letters_on_the_third_delivery():
    p = _policy("artemis", {"redelivery-delay": 5000, "redelivery-delay-multiplier": 2.0, "max-delivery-attempts": 3,
                            "dead-letter-address": "billing.dlq"})
    assert _delays(p) == [5000, 10000]
    assert _dead_letter_at(p) == 3


def test_artemis_defaults_ten_attempts_no_delay():
    p = _policy("artemis", {})
    assert _delays(p) == [0] * 9
    assert _dead_letter_at(p) == 10


def test_artemis_minus_one_and_zero_both_mean_unlimited():
    for v in (-1, 0):
        p = _policy("artemis", {"max-delivery-attempts": v})
        assert max_deliveries(p) is None
        assert decide(p, 10**9).action is Action.RETRY


def test_artemis_max_redelivery_delay_defaults_to_ten_times_the_delay():
    p = _policy("artemis", {"redelivery-delay": 1000, "redelivery-delay-multiplier": 3, "max-delivery-attempts": 6})
    assert _delays(p) == [1000, 3000, 9000, 10000, 10000]


def test_artemis_caps_after_collision_avoidance():
    p = _policy("artemis", {"redelivery-delay": 1000, "redelivery-delay-multiplier": 10,
                            "redelivery-collision-avoidance-factor": 0.5, "max-delivery-attempts": -1,
                            "max-redelivery-delay": 50000})
    for mid in map(str, range(30)):
        d = _delays(p, 8, mid)
        assert 500 < d[0] < 1500
        assert 5000 < d[1] < 15000
        assert all(x == 50000 for x in d[3:])  # 100000 * (1 +/- 0.5) is always above the cap


def test_artemis_without_dead_letter_address_goes_to_the_default_dlq_instead_of_being_dropped():
    p = _policy("artemis", {"max-delivery-attempts": 2})
    assert p.drops_without_dla
    ps = parse_policies("default_dead_letter_address: ops.dlq\npolicies: [{match: '#', profile: artemis}]")
    assert ps.dead_letter_address_for(ps.policies[0], "a.b") == "ops.dlq"


# --- RocketMQ --------------------------------------------------------------------------------------

ROCKETMQ_TABLE_S = [10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]


def test_rocketmq_sixteen_step_table_then_dead_letter_on_the_seventeenth_delivery():
    p = _policy("rocketmq", {"maxReconsumeTimes": 16})
    assert _delays(p) == [s * 1000 for s in ROCKETMQ_TABLE_S]
    assert _dead_letter_at(p) == 17


def test_rocketmq_minus_one_means_sixteen_concurrently_and_int_max_orderly():
    assert max_deliveries(_policy("rocketmq", {})) == 17
    assert max_deliveries(_policy("rocketmq", {"maxReconsumeTimes": -1})) == 17
    orderly = _policy("rocketmq", {"consumeMessageOrderly": True})
    assert max_deliveries(orderly) == INT_MAX + 1
    assert _delays(orderly, 5) == [1000] * 5


def test_rocketmq_retries_past_the_table_wait_two_hours():
    p = _policy("rocketmq", {"maxReconsumeTimes": 40})
    assert _delays(p, 40)[16:] == [7_200_000] * 24


def test_rocketmq_max_reconsume_three_is_four_deliveries():
    p = _policy("rocketmq", {"maxReconsumeTimes": 3})
    assert _delays(p) == [10_000, 30_000, 60_000]
    assert _dead_letter_at(p) == 4


def test_rocketmq_zero_dead_letters_the_first_failure():
    assert decide(_policy("rocketmq", {"maxReconsumeTimes": 0}), 1).action is Action.DEAD_LETTER


def test_rocketmq_custom_levels_and_orderly_interval_clamped_like_the_client():
    p = _policy("rocketmq", {"messageDelayLevel": "1s 2s 3s 4s", "maxReconsumeTimes": 4})
    assert _delays(p) == [3000, 4000, 4000, 4000]
    fast = _policy("rocketmq", {"consumeMessageOrderly": True, "suspendCurrentQueueTimeMillis": 1})
    slow = _policy("rocketmq", {"consumeMessageOrderly": True, "suspendCurrentQueueTimeMillis": 10**6})
    assert _delays(fast, 2) == [10, 10]
    assert _delays(slow, 2) == [30000, 30000]
    for taken in (0, -1, -(1 << 63)):  # the client's setter takes any long (it was refused below 0 here)
        assert _delays(_policy("rocketmq", {"consumeMessageOrderly": True, "suspendCurrentQueueTimeMillis": taken}),
                       2) == [10, 10]


# --- our own profiles ------------------------------------------------------------------------------

def test_stepped_repeats_its_last_step_and_counts_total_deliveries():
    p = _policy("stepped", {"delays": ["10s", "1m", "1h"], "max_deliveries": 6})
    assert _delays(p) == [10_000, 60_000, 3_600_000, 3_600_000, 3_600_000]
    assert _dead_letter_at(p) == 6


def test_stepped_unlimited_never_dead_letters():
    p = _policy("stepped", {"delays": ["1s"], "max_deliveries": "unlimited"})
    assert decide(p, 10**12).action is Action.RETRY


def test_exponential_caps_and_never_overflows():
    p = _policy("exponential", {"initial_delay": "1s", "multiplier": 2, "max_delay": "1m",
                                "max_deliveries": "unlimited"})
    assert _delays(p, 9) == [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]
    assert decide(p, 10**18).delay_ms == 60000


@pytest.mark.parametrize(("jitter", "low", "high"), [("full", 0, 8000), ("equal", 4000, 8000)])
def test_exponential_jitter_bounds(jitter, low, high):
    p = _policy("exponential", {"initial_delay": "1s", "multiplier": 2, "max_delay": "8s", "jitter": jitter,
                                "max_deliveries": 20})
    values = [decide(p, 10, f"m{i}").delay_ms for i in range(200)]
    assert all(low <= v <= high for v in values)
    assert max(values) - min(values) > (high - low) / 2


def test_proportional_jitter_never_exceeds_the_cap():
    p = _policy("exponential", {"initial_delay": "10s", "multiplier": 1, "max_delay": "10s",
                                "jitter": "proportional", "jitter_factor": 0.2, "max_deliveries": 3})
    values = [decide(p, 1, f"m{i}").delay_ms for i in range(200)]
    assert all(8000 <= v <= 10000 for v in values)
    assert min(values) < 8500
