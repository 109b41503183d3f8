"""Profile settings: one frozen dataclass per profile, parsed and validated from the YAML ``settings``.

Broker profiles take the broker's own keys and units (milliseconds) and every value the broker
accepts; our own profiles (``stepped``, ``exponential``) take durations and words. Counting
(what -1 and 0 mean, deliveries vs redeliveries vs retries) is in docs/adr/0001-counting.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar

from reprocess.policy.durations import INT_MAX, LONG_MAX, LONG_MIN, parse_duration_ms

UNLIMITED = "unlimited"


class Profile(StrEnum):
    ACTIVEMQ = "activemq"
    ARTEMIS = "artemis"
    ROCKETMQ = "rocketmq"
    STEPPED = "stepped"
    EXPONENTIAL = "exponential"


class Jitter(StrEnum):
    """Jitter of our own profiles; broker profiles use their broker's collision avoidance."""

    NONE = "none"
    FULL = "full"  # uniform in [0, d)
    EQUAL = "equal"  # d/2 + uniform in [0, d/2)
    PROPORTIONAL = "proportional"  # d * (1 + factor * uniform in [-1, 1))


class _Bad(ValueError):
    """A bad value for one key; turned into a ConfigError naming file, policy and key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _long(key: str, v: Any) -> int:
    """Any Java long of milliseconds, as the brokers' setters and parsers take one (what a negative one means is the
    reference's: docs/adr/0001-counting.md)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(key, f"must be an integer number of milliseconds, got {v!r}")
    if not LONG_MIN <= v <= LONG_MAX:
        raise _Bad(key, f"must fit a Java long, got {v}")
    return v


def _int(key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(key, f"must be an integer, got {v!r}")
    if not -(1 << 31) <= v <= INT_MAX:
        raise _Bad(key, f"must fit a Java int, got {v}")
    return v


def _double(key: str, v: Any, *, minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(key, f"must be a number, got {v!r}")
    f = float(v)
    if not math.isfinite(f):
        raise _Bad(key, f"must be finite, got {v!r}")
    if minimum is not None and f < minimum:
        raise _Bad(key, f"must be >= {minimum}, got {v}")
    if maximum is not None and f > maximum:
        raise _Bad(key, f"must be <= {maximum}, got {v}")
    return f


def _bool(key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad(key, f"must be true or false, got {v!r}")
    return v


def _duration(key: str, v: Any) -> int:
    try:
        return parse_duration_ms(v)
    except ValueError as exc:
        raise _Bad(key, str(exc)) from exc


def _max_deliveries(key: str, v: Any) -> int | None:
    if v == UNLIMITED:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= LONG_MAX:  # the cycle's long literal
        raise _Bad(key, f"must be an integer from 1 to {LONG_MAX} (total deliveries, the first included) or "
                   f"'unlimited', got {v!r}")
    return v


@dataclass(frozen=True)
class _Settings:
    """Base: ``parse`` maps YAML keys to fields through ``KEYS`` and rejects unknown keys."""

    KEYS: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> _Settings:
        raw = dict(raw or {})
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in cls.KEYS:
                allowed = ", ".join(sorted(cls.KEYS))
                raise _Bad(str(key), f"unknown key; allowed keys: {allowed}")
            attr = cls.KEYS[key]
            assert attr in names
            values[attr] = cls._convert(key, value)
        obj = cls(**values)
        obj._check()
        return obj

    @classmethod
    def _convert(cls, key: str, value: Any) -> Any:
        raise NotImplementedError

    def _check(self) -> None:
        """Cross-field checks."""


@dataclass(frozen=True)
class ActiveMQSettings(_Settings):
    """ActiveMQ Classic ``org.apache.activemq.RedeliveryPolicy``, every property, its defaults."""

    collision_avoidance_factor: float = 0.15
    maximum_redeliveries: int = 6
    maximum_redelivery_delay: int = -1
    initial_redelivery_delay: int = 1000
    redelivery_delay: int = 1000
    use_collision_avoidance: bool = False
    use_exponential_back_off: bool = False
    back_off_multiplier: float = 5.0

    KEYS: ClassVar[Mapping[str, str]] = {
        "collisionAvoidanceFactor": "collision_avoidance_factor",
        "maximumRedeliveries": "maximum_redeliveries",
        "maximumRedeliveryDelay": "maximum_redelivery_delay",
        "initialRedeliveryDelay": "initial_redelivery_delay",
        "redeliveryDelay": "redelivery_delay",
        "useCollisionAvoidance": "use_collision_avoidance",
        "useExponentialBackOff": "use_exponential_back_off",
        "backOffMultiplier": "back_off_multiplier",
    }

    @classmethod
    def _convert(cls, key: str, value: Any) -> Any:
        converters: dict[str, Callable[[str, Any], Any]] = {
            # any finite factor: ActiveMQ's coin picks +f or -f, so a negative one mirrors each draw of its positive
            "collisionAvoidanceFactor": _double,
            "maximumRedeliveries": _int,
            # -1 is no cap; ActiveMQ takes any long, and one below -1 caps every backed-off delay at the redelivery
            # delay (getNextRedeliveryDelay: next > max, so max(max, redeliveryDelay)): the reference does the same
            "maximumRedeliveryDelay": _long,
            # any long, as the client's setters take them: the consumer redelivers at once when the delay it reaches
            # is not above 0 (ActiveMQMessageConsumer.rollback: redeliveryDelay > 0, else at once)
            "initialRedeliveryDelay": _long,
            "redeliveryDelay": _long,
            "useCollisionAvoidance": _bool,
            "useExponentialBackOff": _bool,
            # any finite one: getNextRedeliveryDelay backs off only when it is above 1
            "backOffMultiplier": _double,
        }
        return converters[key](key, value)


@dataclass(frozen=True)
class ArtemisSettings(_Settings):
    """ActiveMQ Artemis address-settings for redelivery and dead letters, Artemis defaults."""

    redelivery_delay: int = 0
    redelivery_delay_multiplier: float = 1.0
    max_redelivery_delay: int | None = None  # None: Artemis derives redelivery-delay * 10
    redelivery_collision_avoidance_factor: float = 0.0
    max_delivery_attempts: int = 10
    dead_letter_address: str | None = None  # None: not set (merged from a less specific policy); "": none

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> _Settings:
        # a key set to null is absent (ADR 0008): merged from a less specific policy (Policy.gives), else the default
        # (an unknown key is still refused, null or not: a typo's empty value passed)
        return super().parse({k: v for k, v in (raw or {}).items() if v is not None or k not in cls.KEYS})

    KEYS: ClassVar[Mapping[str, str]] = {
        "redelivery-delay": "redelivery_delay",
        "redelivery-delay-multiplier": "redelivery_delay_multiplier",
        "max-redelivery-delay": "max_redelivery_delay",
        "redelivery-collision-avoidance-factor": "redelivery_collision_avoidance_factor",
        "max-delivery-attempts": "max_delivery_attempts",
        "dead-letter-address": "dead_letter_address",
    }

    @classmethod
    def _convert(cls, key: str, value: Any) -> Any:
        if key == "dead-letter-address":
            if value is None or value == "":  # "": Artemis's empty <dead-letter-address/>, none even if '#' has one
                return value
            if not isinstance(value, str) or not value.strip():
                raise _Bad(key, f"must be an address, or \"\" for none, got {value!r}")
            return value
        converters: dict[str, Callable[[str, Any], Any]] = {
            # any long and any finite multiplier, as Artemis parses them (XMLUtil.parseLong, parseDouble, no check):
            # checkRedelivery schedules only when redelivery-delay is above 0, and a delay it reaches below 0 (a
            # negative multiplier's odd powers, a negative max-redelivery-delay) is a time already past, so at once
            "redelivery-delay": _long,
            "redelivery-delay-multiplier": _double,
            "max-redelivery-delay": _long,
            # Artemis refuses to start outside [0, 1] (FileConfigurationParser: GE_ZERO, LE_ONE)
            "redelivery-collision-avoidance-factor": lambda k, v: _double(k, v, minimum=0.0, maximum=1.0),
            "max-delivery-attempts": _int,
        }
        return converters[key](key, value)

    @property
    def effective_max_redelivery_delay(self) -> int:
        """Artemis: ``maxRedeliveryDelay`` if set, else ``redeliveryDelay * 10`` (saturated, not wrapped)."""
        if self.max_redelivery_delay is not None:
            return self.max_redelivery_delay
        return max(LONG_MIN, min(self.redelivery_delay * 10, LONG_MAX))


ROCKETMQ_DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_ROCKETMQ_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(key: str, text: Any) -> tuple[int, ...]:
    """RocketMQ's ``messageDelayLevel`` string (``"1s 5s 10s ..."``) as milliseconds per level."""
    if not isinstance(text, str) or not text.split():
        raise _Bad(key, f"must be a space-separated list like {ROCKETMQ_DEFAULT_DELAY_LEVELS!r}, got {text!r}")
    # split as the broker splits it (String.split(" "): one space, trailing empty parts dropped): a tab, a newline or
    # two spaces make a level it cannot parse, and it then loads no delay levels at all
    tokens = text.split(" ")
    while tokens and not tokens[-1]:
        tokens.pop()
    levels = []
    for token in tokens:
        unit, number = token[-1:], token[:-1]
        if unit not in _ROCKETMQ_UNITS or not (number.isascii() and number.isdigit()):  # not '²', which isdigit takes
            raise _Bad(key, f"bad level {token!r}: RocketMQ levels are <integer><s|m|h|d>")
        millis = int(number) * _ROCKETMQ_UNITS[unit]
        if millis > LONG_MAX:  # the broker's long wraps around; a policy cannot hold it
            raise _Bad(key, f"bad level {token!r}: {millis} ms is more than a Java long holds")
        levels.append(millis)
    return tuple(levels)


@dataclass(frozen=True)
class RocketMQSettings(_Settings):
    """RocketMQ push-consumer retry: broker delay levels, max reconsume times, orderly mode."""

    max_reconsume_times: int = -1  # -1: 16 when concurrent, Integer.MAX_VALUE when orderly
    message_delay_level: tuple[int, ...] = field(default=parse_delay_levels("", ROCKETMQ_DEFAULT_DELAY_LEVELS))
    consume_message_orderly: bool = False
    suspend_current_queue_time_millis: int = 1000

    KEYS: ClassVar[Mapping[str, str]] = {
        "maxReconsumeTimes": "max_reconsume_times",
        "messageDelayLevel": "message_delay_level",
        "consumeMessageOrderly": "consume_message_orderly",
        "suspendCurrentQueueTimeMillis": "suspend_current_queue_time_millis",
    }

    @classmethod
    def _convert(cls, key: str, value: Any) -> Any:
        if key == "messageDelayLevel":
            return parse_delay_levels(key, value)
        if key == "consumeMessageOrderly":
            return _bool(key, value)
        if key == "suspendCurrentQueueTimeMillis":  # any long, as the client's setter takes it: clamped to [10, 30000]
            return _long(key, value)
        return _int(key, value)

    @property
    def effective_max_reconsume_times(self) -> int:
        """The client's ``getMaxReconsumeTimes()``: -1 is 16 (concurrent) or Integer.MAX_VALUE (orderly)."""
        if self.max_reconsume_times == -1:
            return INT_MAX if self.consume_message_orderly else 16
        return self.max_reconsume_times

    @property
    def orderly_interval_ms(self) -> int:
        """``submitConsumeRequestLater`` clamps the suspend time to [10, 30000] ms."""
        return max(10, min(30_000, self.suspend_current_queue_time_millis))


@dataclass(frozen=True)
class SteppedSettings(_Settings):
    """Our stepped schedule: delay i after failed delivery i; the last step repeats."""

    delays: tuple[int, ...] = (10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000)
    max_deliveries: int | None = 8
    jitter: Jitter = Jitter.NONE
    jitter_factor: float | None = None

    KEYS: ClassVar[Mapping[str, str]] = {
        "delays": "delays",
        "max_deliveries": "max_deliveries",
        "jitter": "jitter",
        "jitter_factor": "jitter_factor",
    }

    @classmethod
    def _convert(cls, key: str, value: Any) -> Any:
        if key == "delays":
            if not isinstance(value, list) or not value:
                raise _Bad(key, f"must be a non-empty list of durations, got {value!r}")
            return tuple(_duration(f"{key}[{i}]", v) for i, v in enumerate(value))
        return _convert_common(key, value)

    def _check(self) -> None:
        _check_jitter(self.jitter, self.jitter_factor)


@dataclass(frozen=True)
class ExponentialSettings(_Settings):
    """Our exponential schedule: ``initial * multiplier**(k-1)``, capped at ``max_delay``."""

    initial_delay: int = 1000
    multiplier: float = 2.0
    max_delay: int = 3_600_000
    max_deliveries: int | None = 10
    jitter: Jitter = Jitter.NONE
    jitter_factor: float | None = None

    KEYS: ClassVar[Mapping[str, str]] = {
        "initial_delay": "initial_delay",
        "multiplier": "multiplier",
        "max_delay": "max_delay",
        "max_deliveries": "max_deliveries",
        "jitter": "jitter",
        "jitter_factor": "jitter_factor",
    }

    @classmethod
    def _convert(cls, key: str, value: Any) -> Any:
        if key in ("initial_delay", "max_delay"):
            return _duration(key, value)
        if key == "multiplier":
            return _double(key, value, minimum=1.0)
        return _convert_common(key, value)

    def _check(self) -> None:
        _check_jitter(self.jitter, self.jitter_factor)
        if self.max_delay < self.initial_delay:
            raise _Bad("max_delay", f"must be >= initial_delay ({self.initial_delay} ms), got {self.max_delay} ms")


def _convert_common(key: str, value: Any) -> Any:
    if key == "max_deliveries":
        return _max_deliveries(key, value)
    if key == "jitter":
        try:
            return Jitter(value)
        except ValueError:
            raise _Bad(key, f"must be one of {[j.value for j in Jitter]}, got {value!r}") from None
    if key == "jitter_factor":
        f = _double(key, value, minimum=0.0)
        if f > 1.0:
            raise _Bad(key, f"must be in [0, 1], got {value}")
        return f
    raise _Bad(key, "unknown key")  # pragma: no cover - KEYS guards this


def _check_jitter(jitter: Jitter, factor: float | None) -> None:
    if jitter is Jitter.PROPORTIONAL and factor is None:
        raise _Bad("jitter_factor", "is required with jitter: proportional (e.g. 0.1 for +/-10%)")
    if jitter is not Jitter.PROPORTIONAL and factor is not None:
        raise _Bad("jitter_factor", f"only applies to jitter: proportional, not {jitter.value}")


SETTINGS_BY_PROFILE: dict[Profile, type[_Settings]] = {
    Profile.ACTIVEMQ: ActiveMQSettings,
    Profile.ARTEMIS: ArtemisSettings,
    Profile.ROCKETMQ: RocketMQSettings,
    Profile.STEPPED: SteppedSettings,
    Profile.EXPONENTIAL: ExponentialSettings,
}

AnySettings = ActiveMQSettings | ArtemisSettings | RocketMQSettings | SteppedSettings | ExponentialSettings
