"""A policy file from a RocketMQ 5 broker's ``subscriptionGroup.json``: each consumer group's own retry policy, as
RocketMQ's Java and Go gRPC clients follow it.

RocketMQ 5 keeps a retry policy per consumer group (``SubscriptionGroupConfig``: ``retryMaxTimes``, default 16, and
``groupRetryPolicy``, set with ``mqadmin updateSubGroup -r ... -p '{...}'``). The proxy hands it to every gRPC client
of the group (``GrpcClientSettingsManager.mergeSubscriptionData``): ``maxAttempts = retryMaxTimes + 1`` (a Java int:
``Integer.MAX_VALUE`` wraps around) and the backoff, CUSTOMIZED (``next``: one delay in milliseconds per attempt, the
default the broker's 18 delay levels) or EXPONENTIAL (``initial``, ``max`` in milliseconds, a whole ``multiplier``,
sent as a protobuf float). The Java client of ``rocketmq-clients`` (the Go one alike) nacks failed delivery ``k``
for ``next[min(k, len) - 1]``, or for ``min(initial * multiplier^(k-1), max)`` computed in double nanoseconds and cast
to a long, which the proxy truncates to milliseconds; delivery ``maxAttempts`` failed goes to ``%DLQ%<group>`` (the
proxy's ``PopMessageResultFilterImpl`` when the message would come back, a FIFO client at once). That is our
``stepped`` profile (``delays: next``) and ``exponential`` profile, with ``max_deliveries = retryMaxTimes + 1``. The
other languages' clients compute otherwise (C++ one step ahead and its exponential base 2, Node and Python whole
seconds or a fixed delay, Rust in 32-bit floats): not followed. The proxy refuses a nack longer than its
``maxInvisibleTimeMills`` (12 hours by default), and the message then comes back when its receipt runs out, not
after the delay: a group that is not FIFO (a FIFO client waits in its own process) with a delay past it is refused.

Clients of the remoting protocol (``DefaultMQPushConsumer``) do not follow it: their retries wait the broker's
``messageDelayLevel`` and their bound is their own ``maxReconsumeTimes`` (import the ``broker.conf`` for them).

The file is the broker's ``store/config/subscriptionGroup.json``, or what ``mqadmin exportMetadata -g`` writes: a
JSON object with a ``subscriptionGroupTable`` of group name -> config. fastjson reads it into RocketMQ's classes:
a field left out keeps its default, a field of another type or spelling than the broker writes is refused here
(fastjson would convert or match it by rules this reader does not copy), and a value the proxy or the client fails
on (``"type": null``, an empty ``next``, a delay too large for a protobuf duration in nanoseconds) is refused, as the
group's clients would get no retry policy. The broker's own groups (``TOOLS_CONSUMER``, ``CID_RMQ_SYS_*``...) are
left out; the proxy gives a group the file does not name the settings of a fresh ``SubscriptionGroupConfig``, which
the file's ``#`` policy without a group gives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reprocess.errors import ConfigError
from reprocess.policy.classic_client import JAVA_RANGES
from reprocess.policy.config import PolicySet, parse_policies, policies_from_mapping
from reprocess.policy.durations import INT_MIN, LONG_MAX, human, java_d2l, java_pow
from reprocess.policy.rocketmq_import import DEAD_LETTER_TOPIC, policy_file

# CustomizedRetryPolicy's default ``next``: the broker's default messageDelayLevel (1s 5s 10s 30s 1m ... 1h 2h)
DEFAULT_NEXT = (1000, 5000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000, 480_000,
                540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000)
DEFAULT_EXPONENTIAL = (5000, 7_200_000, 2)  # ExponentialRetryPolicy's initial, max (ms), multiplier
DEFAULT_RETRY_MAX_TIMES = 16
# a delay in ms the client can hold: Durations.toNanos multiplies the seconds by 10^9 exactly (else ArithmeticException)
MAX_DELAY_MS = LONG_MAX // 1_000_000
MAX_INVISIBLE_MS = 12 * 3_600_000  # ProxyConfig.maxInvisibleTimeMills: the longest nack the proxy takes (<= 0: any)
EXACT_NS = 2**53  # doubles hold every nanosecond up to here: the exponential profile computes the same delays
# the groups SubscriptionGroupManager.init makes for the broker's own use, and MixAll.isSysConsumerGroup's prefix
SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                           "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER"})
SYSTEM_PREFIX = "CID_RMQ_SYS_"
TYPES = ("EXPONENTIAL", "CUSTOMIZED")  # GroupRetryPolicyType, in declaration order (fastjson takes an ordinal too)
_GROUP_KEYS = ("retryMaxTimes", "groupRetryPolicy", "consumeMessageOrderly", "groupName")
_POLICY_KEYS = ("type", "exponentialRetryPolicy", "customizedRetryPolicy")


@dataclass(frozen=True)
class GroupRetry:
    """One consumer group's retry policy as its gRPC clients get it: ``max_attempts`` (``retryMaxTimes + 1`` as a
    Java int), and ``next`` (CUSTOMIZED) or ``exponential`` (initial ms, max ms, multiplier as the protobuf float)."""

    group: str
    retry_max_times: int
    orderly: bool
    next: tuple[int, ...] | None = None
    exponential: tuple[int, int, float] | None = None

    @property
    def max_attempts(self) -> int:
        """``retryMaxTimes + 1`` in Java int arithmetic (``Integer.MAX_VALUE`` wraps to ``Integer.MIN_VALUE``)."""
        return (self.retry_max_times + 1 - INT_MIN) % 2**32 + INT_MIN

    def delay_ms(self, attempt: int) -> int:
        """The client's ``getNextAttemptDelay(attempt)``, in the milliseconds the proxy makes of it."""
        if self.next is not None:
            return self.next[min(attempt, len(self.next)) - 1]
        assert self.exponential is not None
        initial, maximum, multiplier = self.exponential
        nanos = min(float(initial * 1_000_000) * java_pow(multiplier, float(attempt - 1)), float(maximum * 1_000_000))
        if math.isnan(nanos) or nanos <= 0:  # Math.min of NaN is NaN, and (long) NaN is 0
            return 0
        return java_d2l(nanos) // 1_000_000

    def delays(self) -> list[int]:
        """The delays after failed deliveries 1, 2, ... that the bound lets happen (one at least): CUSTOMIZED's
        ``next`` up to the last retry; EXPONENTIAL's up to where they stop changing (a whole multiplier >= 1 grows
        to the cap or stays, 0 gives ``[initial, 0]``), the last repeating after them."""
        last = max(1, self.max_attempts - 1)
        if self.next is not None:
            return list(self.next[:last])
        delays = [self.delay_ms(1)]
        while len(delays) < last:
            nxt = self.delay_ms(len(delays) + 1)
            if nxt == delays[-1]:
                break
            delays.append(nxt)
        return delays


def _float32(value: int) -> float:
    """Java's widening of a long to a float (the protobuf ``multiplier``), then to a double: the long rounded to
    24 significant bits, ties to even, at once (through a double it could round twice)."""
    magnitude = abs(value)
    shift = max(0, magnitude.bit_length() - 24)
    kept, rest = divmod(magnitude, 1 << shift)
    half = (1 << shift) >> 1
    if shift and (rest > half or (rest == half and kept & 1)):
        kept += 1
    return math.copysign(float(kept << shift), value)


@dataclass
class GroupsImport:
    """A policy file made from a ``subscriptionGroup.json``: its YAML ``text``, the :class:`PolicySet` it reads
    as, each group's retry policy, the broker's own groups left out, and warnings."""

    text: str
    policies: PolicySet
    groups: list[GroupRetry]
    system: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"RocketMQ subscriptionGroup.json, {len(self.groups)} consumer group(s) -> {len(self.groups)} "
                 "policies of one group and a '#' policy for the others (the proxy's defaults), as the groups' gRPC "
                 "clients retry; remoting clients (DefaultMQPushConsumer) follow broker.conf instead"]
        if self.system:
            lines.append(f"the broker's own groups left out: {', '.join(self.system)}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


class _Reader:
    """Reads the values of one group's config, refusing what fastjson would read otherwise or the proxy fails on."""

    def __init__(self, source: str, group: str) -> None:
        self.where = {"file": source, "policy": group}

    def fail(self, key: str, why: str) -> ConfigError:
        return ConfigError(why, **self.where, key=key)

    def mapping(self, raw: Any, key: str, known: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            raise self.fail(key, f"must be a JSON object, got {json.dumps(raw)}")
        for name in raw:
            flat = name.replace("_", "").replace("-", "").lower()
            flat_is = flat.removeprefix("is")  # fastjson also matches a boolean's key with an "is" before it
            near = [k for k in known if k.lower() in (flat, flat_is) and k != name]
            if near:
                raise self.fail(f"{key}.{name}" if key else name,
                                f"the broker writes {near[0]!r}; fastjson may or may not read this spelling as it: "
                                f"write {near[0]!r}")
        return raw

    def integer(self, raw: Any, key: str, kind: str = "long") -> int:
        """A JSON integer fastjson reads as a Java ``kind`` (of :data:`JAVA_RANGES`)."""
        low, high = JAVA_RANGES[kind]
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.fail(key, f"must be a JSON integer (a Java {kind}), got {json.dumps(raw)}")
        if not low <= raw <= high:
            raise self.fail(key, f"{raw} is not a Java {kind}: fastjson refuses it")
        return raw

    def delay(self, raw: Any, key: str) -> int:
        ms = self.integer(raw, key)
        if ms < 0:
            raise self.fail(key, f"{ms} ms: a negative delay, which the client sends as is; write the delay you "
                                 "mean (0: at once)")
        if ms > MAX_DELAY_MS:
            raise self.fail(key, f"{ms} ms is more than a protobuf duration holds in nanoseconds ({MAX_DELAY_MS} "
                                 "ms): the group's gRPC clients fail on it (ArithmeticException)")
        return ms


def _group(name: str, raw: Any, source: str, max_invisible: int) -> tuple[GroupRetry, list[str]]:
    r = _Reader(source, name)
    config = r.mapping(raw, "", _GROUP_KEYS)
    warnings = []
    if "groupName" in config and config["groupName"] != name:
        warnings.append(f"group {name!r} says groupName {config['groupName']!r}: the broker finds it by {name!r}")
    retry_max_times = r.integer(config.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES), "retryMaxTimes", "int")
    orderly = config.get("consumeMessageOrderly", False)
    if not isinstance(orderly, bool):
        raise r.fail("consumeMessageOrderly", f"must be true or false, got {json.dumps(orderly)}")
    retry = _backoff(r, GroupRetry(name, retry_max_times, orderly), config.get("groupRetryPolicy", {}))
    if retry.max_attempts < 1:
        warnings.append(f"group {name!r}: retryMaxTimes {retry_max_times} makes maxAttempts {retry.max_attempts}, "
                        "so the proxy sends its messages to %DLQ% before delivering them: max_deliveries 1 written")
    if not orderly and max_invisible > 0:  # the delays after deliveries 1 .. maxAttempts - 1, which are retried
        for k, delay in enumerate(retry.delays()[:max(0, retry.max_attempts - 1)], start=1):
            if delay > max_invisible:
                raise r.fail("groupRetryPolicy", f"failed delivery {k} waits {human(delay)}, more than the proxy's "
                             f"maxInvisibleTimeMills ({human(max_invisible)}): the proxy refuses that nack and the "
                             "message comes back when its receipt runs out, not after the delay; give the proxy's "
                             "value with --max-invisible if it is higher (0: no limit)")
    return retry, warnings


def _backoff(r: _Reader, retry: GroupRetry, raw: Any) -> GroupRetry:
    """``retry`` with the backoff of the group's ``groupRetryPolicy`` (``raw``)."""
    policy = r.mapping(raw, "groupRetryPolicy", _POLICY_KEYS)
    kind = policy.get("type", "CUSTOMIZED")
    if isinstance(kind, int) and not isinstance(kind, bool) and 0 <= kind < len(TYPES):
        kind = TYPES[kind]
    if kind not in TYPES:
        raise r.fail("groupRetryPolicy.type", f"must be one of {list(TYPES)}, got {json.dumps(kind)}: the proxy "
                                              "fails on the group's settings")
    # fastjson reads both policies, whichever the type: the other one's values must be of their types too
    nxt = _customized(r, policy.get("customizedRetryPolicy"), used=kind == "CUSTOMIZED")
    exponential = _exponential(r, policy.get("exponentialRetryPolicy"), used=kind == "EXPONENTIAL")
    return replace(retry, next=nxt) if kind == "CUSTOMIZED" else replace(retry, exponential=exponential)


def _customized(r: _Reader, raw: Any, used: bool) -> tuple[int, ...]:
    """A CUSTOMIZED policy's ``next`` (the default when left out); only a ``used`` one is checked as the client
    takes it (not empty, each delay one it can hold)."""
    if raw is None:
        return DEFAULT_NEXT
    custom = r.mapping(raw, "groupRetryPolicy.customizedRetryPolicy", ("next",))
    if "next" not in custom:
        return DEFAULT_NEXT
    key = "groupRetryPolicy.customizedRetryPolicy.next"
    if not isinstance(custom["next"], list) or (used and not custom["next"]):
        raise r.fail(key, f"must be a non-empty list of delays in milliseconds, got {json.dumps(custom['next'])}: "
                          "the group's clients fail on it")
    values = tuple(r.integer(v, f"{key}[{i}]") for i, v in enumerate(custom["next"]))
    return tuple(r.delay(v, f"{key}[{i}]") for i, v in enumerate(values)) if used else values


def _exponential(r: _Reader, raw: Any, used: bool) -> tuple[int, int, float]:
    """An EXPONENTIAL policy's initial and max (ms) and multiplier (as the protobuf float), defaults for what is
    left out; only a ``used`` one is checked as the client takes it."""
    initial, maximum, multiplier = DEFAULT_EXPONENTIAL
    if raw is not None:
        key = "groupRetryPolicy.exponentialRetryPolicy"
        exp = r.mapping(raw, key, ("initial", "max", "multiplier"))
        initial, maximum, multiplier = (r.integer(exp.get(name, default), f"{key}.{name}")
                                        for name, default in zip(("initial", "max", "multiplier"), DEFAULT_EXPONENTIAL,
                                                                 strict=True))
        if used:
            initial, maximum = r.delay(initial, f"{key}.initial"), r.delay(maximum, f"{key}.max")
            if multiplier < 0:
                raise r.fail(f"{key}.multiplier", f"{multiplier}: a negative multiplier makes every other delay 0 "
                                                  "in the client; write the multiplier you mean")
    return initial, maximum, _float32(multiplier)


def _text(ms: int) -> str:
    """A delay as a policy file writes it: in the largest unit that divides it (``90s``, ``1500ms``)."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _settings(retry: GroupRetry) -> tuple[str, dict[str, Any]]:
    """The profile and settings giving ``retry``'s delays and bound: ``exponential`` where our formula computes
    the client's delays exactly, else ``stepped``, its delays tabulated until they stop changing."""
    bound = max(1, retry.max_attempts)
    if retry.next is not None:
        return "stepped", {"delays": [_text(d) for d in retry.next], "max_deliveries": bound}
    assert retry.exponential is not None
    initial, maximum, multiplier = retry.exponential
    if initial <= maximum and multiplier >= 1 and maximum * 1_000_000 <= EXACT_NS:
        return "exponential", {"initial_delay": _text(initial), "multiplier": multiplier,
                               "max_delay": _text(maximum), "max_deliveries": bound}
    # a multiplier of 0, an initial delay above the cap, or a cap past 104 days (where doubles round nanoseconds):
    # the client's own arithmetic, up to where it settles
    return "stepped", {"delays": [_text(d) for d in retry.delays()], "max_deliveries": bound}


def read_groups(path: str | Path, max_invisible: int = MAX_INVISIBLE_MS) -> tuple[list[GroupRetry], list[str],
                                                                                   list[str]]:
    """Each consumer group of the ``subscriptionGroup.json`` at ``path`` (the broker's own left out, named in the
    second list), and warnings; ``max_invisible`` is the proxy's ``maxInvisibleTimeMills``."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=source) from exc
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except ValueError as exc:  # undecodable bytes, bad JSON, an integer of more digits than Python converts
        raise ConfigError(f"not JSON: {exc}", file=source) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("subscriptionGroupTable"), dict):
        raise ConfigError("no subscriptionGroupTable: give a RocketMQ broker's store/config/subscriptionGroup.json "
                          "or what `mqadmin exportMetadata -g` writes", file=source)
    groups: list[GroupRetry] = []
    system: list[str] = []
    warnings: list[str] = []
    for name, raw in doc["subscriptionGroupTable"].items():
        if name in SYSTEM_GROUPS or name.startswith(SYSTEM_PREFIX):
            system.append(name)
            continue
        if not name or any(c.isspace() for c in name):
            raise ConfigError(f"{json.dumps(name)} is not a consumer group's name RocketMQ takes", file=source)
        retry, said = _group(name, raw, source, max_invisible)
        groups.append(retry)
        warnings += said
    return groups, system, warnings


def import_subscription_groups(path: str | Path, max_invisible: int = MAX_INVISIBLE_MS) -> GroupsImport:
    """The policy file of the consumer groups in the ``subscriptionGroup.json`` at ``path``, for a proxy whose
    ``maxInvisibleTimeMills`` is ``max_invisible`` (<= 0: no limit)."""
    source = str(path)
    groups, system, warnings = read_groups(path, max_invisible)
    policies: list[dict[str, Any]] = []
    for retry in groups:
        profile, settings = _settings(retry)
        policy: dict[str, Any] = {"match": "#", "consumer_group": retry.group, "profile": profile,
                                  "settings": settings, "dead_letter_address": DEAD_LETTER_TOPIC}
        if retry.orderly:
            policy["ordered"] = True
        policies.append(policy)
    default_profile, default_settings = _settings(GroupRetry("", DEFAULT_RETRY_MAX_TIMES, False, next=DEFAULT_NEXT))
    policies.append({"match": "#", "profile": default_profile, "settings": default_settings,
                     "dead_letter_address": DEAD_LETTER_TOPIC})
    doc = {"policies": policies}
    policy_set = policies_from_mapping(doc, source=source)
    text = _render(source, doc)
    assert parse_policies(text, source) == policy_set, "the written file reads back as another policy set"
    return GroupsImport(text, policy_set, groups, system, warnings)


def _render(source: str, doc: Mapping[str, object]) -> str:
    header = [f"Imported from {Path(source).name} by `reprocess policies import`: each consumer group's retry policy "
              "as RocketMQ 5's Java and Go gRPC clients follow it (the proxy's maxAttempts = retryMaxTimes + 1, the "
              "groupRetryPolicy's delays); a '#' policy of no group gives other groups the proxy's defaults.",
              "CUSTOMIZED: failed delivery k waits the k-th delay of next, the last one repeating (stepped). "
              "EXPONENTIAL: min(initial * multiplier^(k-1), max) (exponential, or stepped where the client's doubles "
              "round). RocketMQ dead-letters a message that is not FIFO when it would come back after its last "
              "failure's delay; here at that failure.",
              "Remoting clients (DefaultMQPushConsumer) do not follow these: import the broker.conf for them.",
              "Dead letters go to %DLQ%<consumer group>, as RocketMQ sends them; a message that names no consumer "
              "group to the file's default_dead_letter_address (DLQ). A FIFO group (consumeMessageOrderly) is "
              "ordered: later failures of an ordering key on the same topic wait for the earlier ones."]
    return policy_file(header, doc, flow=None)


__all__ = ["MAX_INVISIBLE_MS", "GroupRetry", "GroupsImport", "import_subscription_groups", "read_groups"]
