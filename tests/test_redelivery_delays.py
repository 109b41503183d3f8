"""The reference's ActiveMQ Classic and Artemis delays against the JVM's (tests/java/RedeliveryDelays.java), delays and
multipliers of any sign included: ActiveMQ's own RedeliveryPolicy and its consumer's loop, Artemis's formula run by
Java's Math.pow and casts. The Spark expressions agree with the reference (tests/test_policy_agreement.py).

Both brokers take a negative delay or multiplier and redeliver at once where the delay they reach is not above 0;
the policies refused them (``must be >= 0``) until the eighty-eighth run of [6/7]."""

from __future__ import annotations

import random

import pytest
from tests.java_program import activemq_classpath, run_java

from reprocess.policy import parse_policies
from reprocess.policy.durations import LONG_MAX, LONG_MIN
from reprocess.policy.reference import decide

pytestmark = pytest.mark.jvm

N = 40  # failed deliveries per policy


def _policy(profile: str, settings: dict):
    import yaml

    doc = {"policies": [{"match": "#", "profile": profile, "settings": settings}]}
    return parse_policies(yaml.safe_dump(doc)).policies[0]


def _delay(rng: random.Random) -> int:
    return rng.choice([
        rng.randint(-5000, 5000), rng.randint(-10**7, 10**7), rng.randint(LONG_MIN, LONG_MAX), 0, 1, -1,
        rng.choice([LONG_MIN, LONG_MAX, LONG_MIN + 1, LONG_MAX // 3, -(LONG_MAX // 3)]),
    ])


def _multiplier(rng: random.Random) -> float:
    return rng.choice([
        rng.uniform(-20, 20), rng.uniform(-1.5, 1.5), rng.uniform(1.0, 1.1), -rng.uniform(1.0, 1.1),
        rng.choice([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 5.0, -5.0, 0.5, -0.5, 1e300, -1e300]),
    ])


ACTIVEMQ_HANDWRITTEN = [
    # initial, redelivery, max, exponential, multiplier
    (-5, -3, -1, False, 5.0),  # both negative: at once, every time
    (-5, 1000, -1, True, 2.0),  # a negative initial delay: at once, then redeliveryDelay backed off from it
    (1000, -1000, -1, True, 2.0),
    (1000, 500, -1, True, -2.0),  # a negative multiplier does not back off (backOffMultiplier > 1)
    (1000, 500, 3000, True, 0.5),
    (1000, -7, -2, True, 3.0),  # a cap below -1 caps every backed-off delay at max(cap, redeliveryDelay)
    (LONG_MAX, 5, -1, True, 2.0),
    (-1, LONG_MIN, LONG_MIN, True, 1e300),
]
ARTEMIS_HANDWRITTEN = [
    # redelivery-delay, multiplier, max-redelivery-delay
    (1000, -2.0, LONG_MAX),  # odd powers negative: at once; even ones 4000, 16000, ...
    (1000, -2.0, 10_000),
    (1000, 2.0, -5),  # a negative cap: at once, every time
    (-1000, 2.0, 10_000),  # a negative delay: checkRedelivery schedules nothing
    (3, -1e300, LONG_MAX),  # -inf and +inf by turns: Long.MIN_VALUE and Long.MAX_VALUE
    (7, -1.0000001, 100),
    (LONG_MAX, -0.5, LONG_MAX),
    (1, -0.0, 10),
]


def test_activemq_delays_of_any_sign_are_the_consumers():
    rng = random.Random(88)
    cases = list(ACTIVEMQ_HANDWRITTEN) + [
        (_delay(rng), _delay(rng), rng.choice([-1, _delay(rng)]), rng.random() < 0.7, _multiplier(rng))
        for _ in range(300)]
    text = "".join(f"{i}\t{r}\t{m}\t{str(e).lower()}\t{mult!r}\t{N}\n" for i, r, m, e, mult in cases)
    java = [line.split("\t") for line in run_java("RedeliveryDelays.java", text, "activemq",
                                                  classpath=activemq_classpath()).splitlines()]
    assert len(java) == len(cases)
    for (i, r, m, e, mult), row in zip(cases, java, strict=True):
        policy = _policy("activemq", {"initialRedeliveryDelay": i, "redeliveryDelay": r, "maximumRedeliveryDelay": m,
                                      "useExponentialBackOff": e, "backOffMultiplier": mult,
                                      "maximumRedeliveries": -1})
        ours = [decide(policy, k).delay_ms for k in range(1, N + 1)]
        assert ours == [int(x) for x in row], (i, r, m, e, mult)
    # the negative ones were taken and meant "at once", not refused
    assert [decide(_policy("activemq", {"initialRedeliveryDelay": -5, "redeliveryDelay": 1000,
                                         "useExponentialBackOff": True, "backOffMultiplier": -2.0}), k).delay_ms
            for k in (1, 2, 3)] == [0, 1000, 1000]


def test_artemis_delays_of_any_sign_are_the_brokers():
    rng = random.Random(88)
    cases = list(ARTEMIS_HANDWRITTEN) + [
        (_delay(rng), _multiplier(rng), _delay(rng)) for _ in range(300)]
    text = "".join(f"{d}\t{mult!r}\t{m}\t{N}\n" for d, mult, m in cases)
    java = [line.split("\t") for line in run_java("RedeliveryDelays.java", text, "artemis").splitlines()]
    assert len(java) == len(cases)
    for (d, mult, m), row in zip(cases, java, strict=True):
        policy = _policy("artemis", {"redelivery-delay": d, "redelivery-delay-multiplier": mult,
                                     "max-redelivery-delay": m, "max-delivery-attempts": -1})
        ours = [decide(policy, k).delay_ms for k in range(1, N + 1)]
        assert ours == [int(x) for x in row], (d, mult, m)
    alternating = _policy("artemis", {"redelivery-delay": 1000, "redelivery-delay-multiplier": -2.0,
                                      "max-redelivery-delay": LONG_MAX, "max-delivery-attempts": -1})
    assert [decide(alternating, k).delay_ms for k in (1, 2, 3, 4)] == [1000, 0, 4000, 0]
