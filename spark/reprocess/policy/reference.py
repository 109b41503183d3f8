"""The pure-Python reference of every schedule: the brokers' algorithms, written as they are.

``decide(policy, k, message_id)`` answers "the k-th delivery of this message failed: retry after
how long, or dead-letter?". The Spark column expressions in :mod:`reprocess.policy.columns`
must agree with it on every input (tests/test_policy_agreement.py). Counting: docs/adr/0001.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from reprocess.policy.durations import LONG_MAX, java_d2l, java_pow, sat_add
from reprocess.policy.jitter import draw
from reprocess.policy.settings import (
    ActiveMQSettings,
    ArtemisSettings,
    ExponentialSettings,
    Jitter,
    RocketMQSettings,
    SteppedSettings,
)

if TYPE_CHECKING:
    from reprocess.policy.config import Policy

# ActiveMQ's delay is an iterated, truncating sequence; it settles (stops changing) after at most
# this many redeliveries for any sane multiplier (x1.001 reaches Long.MAX in ~37k steps). A
# sequence still growing past it is frozen there; docs/adr/0001-counting.md.
ACTIVEMQ_MAX_STEPS = 1 << 16


class Action(StrEnum):
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_ms: int | None = None


def max_deliveries(policy: Policy) -> int | None:
    """Total deliveries (the first included) after which a failure dead-letters; ``None`` = never."""
    s = policy.settings
    if isinstance(s, ActiveMQSettings):
        # rollback(): poison when redeliveryCounter (incremented) > maximumRedeliveries, unless -1. (With
        # Integer.MAX_VALUE the client's int counter wraps and never exceeds it, while the broker's RedeliveryPlugin,
        # whose bound an imported activemq.xml policy follows, stops at it: delivery 2**31 dead-letters, as here.)
        return None if s.maximum_redeliveries == -1 else max(s.maximum_redeliveries + 1, 1)
    if isinstance(s, ArtemisSettings):
        # checkRedelivery(): maxDeliveries > 0 && deliveryCount >= maxDeliveries.
        return s.max_delivery_attempts if s.max_delivery_attempts > 0 else None
    if isinstance(s, RocketMQSettings):
        # reconsumeTimes >= maxReconsumeTimes, reconsumeTimes = k - 1.
        return max(s.effective_max_reconsume_times + 1, 1)
    return s.max_deliveries


def exhausted(policy: Policy, k: int) -> bool:
    limit = max_deliveries(policy)
    return limit is not None and k >= limit


def decide(policy: Policy, k: int, message_id: str = "") -> Decision:
    """What happens after the ``k``-th delivery (``k >= 1``) of ``message_id`` fails."""
    if k < 1:
        raise ValueError(f"failed delivery numbers start at 1, got {k}")
    if exhausted(policy, k):
        return Decision(Action.DEAD_LETTER)
    return Decision(Action.RETRY, max(0, delay_ms(policy, k, message_id)))


def delay_ms(policy: Policy, k: int, message_id: str = "") -> int:
    s = policy.settings
    if isinstance(s, ActiveMQSettings):
        return _activemq(s, k, message_id)
    if isinstance(s, ArtemisSettings):
        return _artemis(s, k, message_id)
    if isinstance(s, RocketMQSettings):
        if s.consume_message_orderly:
            return s.orderly_interval_ms
        level = min(3 + (k - 1), len(s.message_delay_level))  # delayLevel = 3 + reconsumeTimes, clamped
        return s.message_delay_level[level - 1]
    if isinstance(s, SteppedSettings):
        base = s.delays[min(k, len(s.delays)) - 1]
        return _jitter(base, s.jitter, s.jitter_factor, message_id, k, cap=None)
    assert isinstance(s, ExponentialSettings)
    base = min(java_d2l(s.initial_delay * java_pow(s.multiplier, k - 1)), s.max_delay)
    return _jitter(base, s.jitter, s.jitter_factor, message_id, k, cap=s.max_delay)


def activemq_next(s: ActiveMQSettings, previous: int) -> int:
    """``RedeliveryPolicy.getNextRedeliveryDelay`` without its random part."""
    nxt = s.redelivery_delay
    if previous > 0 and s.use_exponential_back_off and s.back_off_multiplier > 1:
        nxt = java_d2l(previous * s.back_off_multiplier)
        if s.maximum_redelivery_delay != -1 and nxt > s.maximum_redelivery_delay:
            nxt = max(s.maximum_redelivery_delay, s.redelivery_delay)
    return nxt


def activemq_base(s: ActiveMQSettings, k: int) -> int:
    """The un-jittered delay after failed delivery ``k``: initial, then getNext applied k-1 times."""
    delay = s.initial_redelivery_delay
    for _ in range(min(k, ACTIVEMQ_MAX_STEPS) - 1):
        nxt = activemq_next(s, delay)
        if nxt == delay:  # settled: every later step returns the same value
            break
        delay = nxt
    return delay


def _activemq(s: ActiveMQSettings, k: int, message_id: str) -> int:
    base = activemq_base(s, k)
    if k == 1 or not s.use_collision_avoidance:  # the initial delay is never jittered
        return base
    return _collision_avoidance(base, s.collision_avoidance_factor, message_id, k)


def _artemis(s: ArtemisSettings, k: int, message_id: str) -> int:
    if s.redelivery_delay <= 0:  # checkRedelivery only schedules when redeliveryDelay > 0
        return 0
    delay = java_d2l(s.redelivery_delay * java_pow(s.redelivery_delay_multiplier, max(k - 1, 0)))
    if s.redelivery_collision_avoidance_factor > 0:
        delay = _collision_avoidance(delay, s.redelivery_collision_avoidance_factor, message_id, k)
    return min(delay, s.effective_max_redelivery_delay)


def _collision_avoidance(delay: int, factor: float, message_id: str, k: int) -> int:
    """``delay += delay * ((coin ? f : -f) * u)``, Java's compound assignment (truncating)."""
    unit, positive = draw(message_id, k)
    variance = (factor if positive else -factor) * unit
    return java_d2l(float(delay) + float(delay) * variance)


def _jitter(base: int, jitter: Jitter, factor: float | None, message_id: str, k: int, cap: int | None) -> int:
    if jitter is Jitter.NONE:
        return base
    unit, _ = draw(message_id, k)
    d = float(base)
    if jitter is Jitter.FULL:
        out = java_d2l(d * unit)
    elif jitter is Jitter.EQUAL:
        out = java_d2l(d * 0.5 + d * 0.5 * unit)
    else:
        assert factor is not None
        out = java_d2l(d + d * (factor * (2.0 * unit - 1.0)))
    return out if cap is None else min(out, cap)


@dataclass(frozen=True)
class Step:
    failed_delivery: int
    action: Action
    delay_ms: int | None
    cumulative_ms: int | None


def schedule(policy: Policy, deliveries: int = 20, message_id: str = "") -> list[Step]:
    """The outcome of failed deliveries 1..``deliveries``, stopping at the first dead letter."""
    steps = []
    total = 0
    for k in range(1, deliveries + 1):
        d = decide(policy, k, message_id)
        if d.action is Action.DEAD_LETTER:
            steps.append(Step(k, d.action, None, None))
            break
        assert d.delay_ms is not None
        total = min(sat_add(total, d.delay_ms), LONG_MAX)
        steps.append(Step(k, d.action, d.delay_ms, total))
    return steps


def has_jitter(policy: Policy) -> bool:
    s = policy.settings
    if isinstance(s, ActiveMQSettings):
        return s.use_collision_avoidance and s.collision_avoidance_factor != 0
    if isinstance(s, ArtemisSettings):
        return s.redelivery_collision_avoidance_factor > 0
    if isinstance(s, (SteppedSettings, ExponentialSettings)):
        return s.jitter is not Jitter.NONE
    return False
