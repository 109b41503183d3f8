"""The schedules as built-in Spark column expressions (no Python UDF).

Every function here mirrors one in :mod:`reprocess.policy.reference`, operation for operation,
so that doubles round the same way on the JVM as in CPython; tests/test_policy_agreement.py
checks the two agree on generated inputs. Long arithmetic saturates where Java's ``(long)``
cast of a double saturates, and never wraps (Spark runs with ANSI mode on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from reprocess.policy.durations import LONG_MAX, LONG_MIN
from reprocess.policy.reference import ACTIVEMQ_MAX_STEPS, activemq_next, max_deliveries
from reprocess.policy.settings import (
    ActiveMQSettings,
    ArtemisSettings,
    ExponentialSettings,
    Jitter,
    RocketMQSettings,
    SteppedSettings,
)
from reprocess.policy.wildcard import to_regex

if TYPE_CHECKING:
    from pyspark.sql import Column

    from reprocess.policy.config import Policy, PolicySet

_TWO_POW_53 = float(1 << 53)


def d2l(x: Column) -> Column:
    """Java's ``(long) x`` for a double column: NaN -> 0, saturating, truncating toward zero."""
    return (
        F.when(F.isnan(x), F.lit(0).cast("long"))
        .when(x >= F.lit(9.223372036854775807e18), F.lit(LONG_MAX).cast("long"))
        .when(x <= F.lit(-9.223372036854775808e18), F.lit(LONG_MIN).cast("long"))
        .otherwise(x.cast("long"))
    )


def _hash(message_id: Column, k: Column) -> Column:
    return F.xxhash64(F.concat(message_id, F.lit("#"), k.cast("string")))


def _unit(h: Column) -> Column:
    """``(h >>> 11) / 2**53``: a double in [0, 1), exactly as :func:`reprocess.policy.jitter.draw`."""
    return F.shiftrightunsigned(h, 11).cast("double") / F.lit(_TWO_POW_53)


def _positive(h: Column) -> Column:
    return h.bitwiseAND(F.lit(1).cast("long")) == F.lit(1).cast("long")


def _long_array(values: list[int] | tuple[int, ...]) -> Column:
    """``values`` as an ``array<bigint>``: one string literal, split and cast, which the optimizer folds into one
    array literal. A literal per value took a py4j call each: ActiveMQ's table of a slowly backed-off delay (up to
    65,536 of them, :func:`activemq_table`) took 140 s to build in a driver, every run."""
    return F.split(F.lit(",".join(str(v) for v in values)), ",").cast("array<bigint>")


def _table(values: list[int] | tuple[int, ...], index: Column) -> Column:
    """``values[min(index, len)]`` (1-based); the last entry repeats."""
    if len(values) == 1:
        return F.lit(values[0]).cast("long")
    return F.element_at(_long_array(values), F.least(index, F.lit(len(values)).cast("long")).cast("int"))


def activemq_table(s: ActiveMQSettings) -> list[int]:
    """The un-jittered ActiveMQ delays after failed deliveries 1..T, T where the sequence settles."""
    table = [s.initial_redelivery_delay]
    while len(table) < ACTIVEMQ_MAX_STEPS:
        nxt = activemq_next(s, table[-1])
        if nxt == table[-1]:
            break
        table.append(nxt)
    return table


def _collision_avoidance(delay: Column, factor: float, message_id: Column, k: Column) -> Column:
    h = _hash(message_id, k)
    variance = F.when(_positive(h), F.lit(factor)).otherwise(F.lit(-factor)) * _unit(h)
    d = delay.cast("double")
    return d2l(d + d * variance)


def _jitter(base: Column, jitter: Jitter, factor: float | None, message_id: Column, k: Column) -> Column:
    if jitter is Jitter.NONE:
        return base
    u = _unit(_hash(message_id, k))
    d = base.cast("double")
    if jitter is Jitter.FULL:
        return d2l(d * u)
    if jitter is Jitter.EQUAL:
        return d2l(d * F.lit(0.5) + d * F.lit(0.5) * u)
    assert factor is not None
    return d2l(d + d * (F.lit(factor) * (F.lit(2.0) * u - F.lit(1.0))))


def delay_column(policy: Policy, k: Column, message_id: Column) -> Column:
    """Delay in ms after failed delivery ``k`` under ``policy`` (before the never-negative clamp)."""
    s = policy.settings
    k = k.cast("long")
    if isinstance(s, ActiveMQSettings):
        base = _table(activemq_table(s), k)
        if not s.use_collision_avoidance:
            return base
        return F.when(k == 1, base).otherwise(_collision_avoidance(base, s.collision_avoidance_factor, message_id, k))
    if isinstance(s, ArtemisSettings):
        if s.redelivery_delay <= 0:
            return F.lit(0).cast("long")
        exponent = F.greatest(k - 1, F.lit(0).cast("long")).cast("double")
        delay = d2l(F.lit(float(s.redelivery_delay)) * F.pow(F.lit(s.redelivery_delay_multiplier), exponent))
        if s.redelivery_collision_avoidance_factor > 0:
            delay = _collision_avoidance(delay, s.redelivery_collision_avoidance_factor, message_id, k)
        return F.least(delay, F.lit(s.effective_max_redelivery_delay).cast("long"))
    if isinstance(s, RocketMQSettings):
        if s.consume_message_orderly:
            return F.lit(s.orderly_interval_ms).cast("long")
        return _table(s.message_delay_level, F.least(k, F.lit(len(s.message_delay_level)).cast("long")) + 2)
    if isinstance(s, SteppedSettings):
        return _jitter(_table(s.delays, k), s.jitter, s.jitter_factor, message_id, k)
    assert isinstance(s, ExponentialSettings)
    cap = F.lit(s.max_delay).cast("long")
    raw = F.lit(float(s.initial_delay)) * F.pow(F.lit(s.multiplier), (k - 1).cast("double"))
    base = F.least(d2l(raw), cap)
    if s.jitter is Jitter.NONE:
        return base
    return F.least(_jitter(base, s.jitter, s.jitter_factor, message_id, k), cap)


def exhausted_column(policy: Policy, k: Column) -> Column:
    """True when failed delivery ``k`` is the last one the policy allows."""
    limit = max_deliveries(policy)
    if limit is None:
        return F.lit(False)
    return k.cast("long") >= F.lit(limit).cast("long")


def policy_index_column(policies: PolicySet, address: Column, consumer_group: Column) -> Column:
    """Index in ``policies.effective`` of the policy a message of ``consumer_group`` on ``address`` takes
    (:meth:`PolicySet.resolve_index`): its group's most specific match, else the most specific match of no group, in
    the variant its other matches give; null when none matches."""
    return policy_case(policies, address, consumer_group, lambda n, _policy: F.lit(n))


def policy_case(policies: PolicySet, address: Column, consumer_group: Column,
                build: Callable[[int, Policy], Column]) -> Column:
    """``build(n, policy)`` for the policy a message of ``consumer_group`` on ``address`` takes, ``n`` its index in
    ``policies.effective``; null when no policy matches. One ``CASE`` over the addresses' matches: where only one
    column depends on the policy, it is smaller than :func:`by_policy` over :func:`policy_index_column`, which
    repeats the whole match for each policy."""
    probe = F.concat(address, F.lit("."))
    matched: dict[int, Column] = {}

    def match(j: int) -> Column:
        if j not in matched:
            matched[j] = probe.rlike(to_regex(policies.policies[j].match))
        return matched[j]

    out = None
    for i, n in policies.group_precedence:
        p = policies.effective[n]
        cond = F.coalesce(consumer_group == F.lit(p.consumer_group), F.lit(False)) & match(i)
        out = F.when(cond, build(n, p)) if out is None else out.when(cond, build(n, p))
    for i in policies.precedence:
        if policies.policies[i].consumer_group is not None:
            continue
        for n, v in enumerate(policies.variants):
            if v.base != i:
                continue
            cond = match(i)
            if v.when is not None:
                alternatives = None
                for also, never in v.when:
                    alt = F.lit(True)
                    for j in sorted(also):
                        alt = alt & match(j)
                    for j in sorted(never):
                        alt = alt & ~match(j)
                    alternatives = alt if alternatives is None else alternatives | alt
                assert alternatives is not None
                cond = cond & alternatives
            value = build(n, v.policy)
            out = F.when(cond, value) if out is None else out.when(cond, value)
    assert out is not None
    return out


def by_policy(policies: PolicySet, index: Column, build: Callable[[Policy], Column]) -> Column:
    """``build(policy)`` for the row's policy ``index`` in ``policies.effective`` (null when no policy applies)."""
    out = None
    for i, policy in enumerate(policies.effective):
        expr = build(policy)
        out = F.when(index == i, expr) if out is None else out.when(index == i, expr)
    assert out is not None
    return out


def decision_columns(policies: PolicySet, index: Column, k: Column, message_id: Column) -> tuple[Column, Column]:
    """``(exhausted, delay_ms)`` for failed delivery ``k`` of each row under its policy ``index``.

    ``delay_ms`` is clamped at 0 (a delay is never negative); it is meaningful when not exhausted.
    """
    exhausted = by_policy(policies, index, lambda p: exhausted_column(p, k))
    delay = by_policy(policies, index, lambda p: F.greatest(delay_column(p, k, message_id), F.lit(0).cast("long")))
    return exhausted, delay
