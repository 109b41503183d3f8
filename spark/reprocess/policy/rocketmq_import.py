"""A policy file from a RocketMQ broker's ``broker.conf``: its ``messageDelayLevel`` as one ``rocketmq`` policy.

A RocketMQ push consumer's retries wait the broker's delay levels: ``consumerSendMsgBack`` sets
``delayLevel = 3 + reconsumeTimes`` and the store clamps it to the last level, so retry ``k`` waits level ``k + 2``
(the ``rocketmq`` profile of ADR 0001). The table is the broker's ``messageDelayLevel``, one string for every topic
and group; the bound is each consumer's own ``maxReconsumeTimes``, set in its code, not in any broker file.

The file is read as ``BrokerStartup -c broker.conf`` reads it: ``java.util.Properties.load`` of its bytes
(ISO-8859-1, escapes, continuations: :func:`reprocess.policy.classic_client.load_properties`), then
``MixAll.properties2Object``, which trims a String value (``String.trim``: every character up to U+0020) and
silently ignores a key no setter has, so a misspelled ``messageDelayLevels`` leaves the default table (said here as a
warning). ``ScheduleMessageService.parseDelayLevel`` then splits the value at single spaces (``String.split(" ")``:
two spaces make an empty level), takes each level's last character as its unit (``s m h d``) and the rest as a
``Long.parseLong`` (a sign, any Unicode decimal digit of the BMP), and multiplies them as Java longs. A table it
cannot parse stops the broker (``initialize`` fails, ``System.exit(-3)``): here a :class:`ConfigError` naming the
file, the level and why. A level the broker parses into a negative or wrapped-around delay (``-1s``,
``9223372036854775807s``), which it would deliver at once or at a time nobody meant, is refused too, as a policy
file cannot hold it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from importlib import resources
from pathlib import Path

from reprocess.errors import ConfigError
from reprocess.policy.classic_client import JAVA_SPACE, java_integer, java_split, load_properties
from reprocess.policy.config import PolicySet, dump_policies, parse_policies, policies_from_mapping
from reprocess.policy.durations import LONG_MAX, LONG_MIN
from reprocess.policy.settings import ROCKETMQ_DEFAULT_DELAY_LEVELS, RocketMQSettings

DELAY_KEY = "messageDelayLevel"
UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}  # parseDelayLevel's timeUnitTable


def broker_keys() -> frozenset[str]:
    """The keys a RocketMQ broker (4.1 to 5.3) reads from its properties file (resources/rocketmq_broker_keys.txt)."""
    text = resources.files("reprocess").joinpath("resources/rocketmq_broker_keys.txt").read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


JNDI_KEYS = ("java.naming.", "connectionFactoryNames")
DEAD_LETTER_TOPIC = "%DLQ%{consumer_group}"  # MixAll.getDLQTopic(group)


@dataclass
class RocketMQImport:
    """A policy file made from a ``broker.conf``: its YAML ``text``, the :class:`PolicySet` it reads as, the delay
    levels in milliseconds, whether the file set them, and warnings."""

    text: str
    policies: PolicySet
    levels: tuple[int, ...]
    from_file: bool
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        what = f"{DELAY_KEY} ({len(self.levels)} levels)" if self.from_file else f"no {DELAY_KEY}: the broker's default"
        lines = [f"RocketMQ broker.conf, {what} -> 1 rocketmq policy ('#')",
                 "maxReconsumeTimes is each consumer's own, set in its code: -1 written (16 retries, orderly "
                 "unlimited); set your consumers' value"]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def file_kind(path: str | Path) -> str:
    """What the file at ``path`` holds, by its first bytes: ``"xml"`` (``<`` after a UTF-8 byte-order mark and
    blanks, or a UTF-16 byte-order mark), ``"json"`` (``{``), else ``"properties"``; ``"unreadable"`` where it cannot
    be opened, left to the XML importer to report."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return "unreadable"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "xml"  # UTF-16: XML here, never a file java.util.Properties reads
    first = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1]
    return {b"<": "xml", b"{": "json"}.get(first, "properties")


def delay_levels(value: str, source: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The delay of each level in milliseconds, as ``parseDelayLevel`` computes it from the trimmed ``value``, and
    each level written as a policy file writes it; a :class:`ConfigError` where the broker would not start or a
    policy cannot hold the delay."""
    parsed: list[tuple[str, int, str]] = []  # (token, number, unit), every level first: one bad level stops it
    for i, token in enumerate(java_split(value, " "), start=1):
        where = {"file": source, "policy": f"level {i}", "key": DELAY_KEY}
        if not token:
            why = "no level at all" if not value else f"an empty level (two spaces in a row, in {ascii(value)})"
            raise ConfigError(f"{why}: the broker does not start (parseDelayLevel fails)", **where)
        number = java_integer(token[:-1])
        if number is None or token[-1] not in UNITS:
            why = "no unit s, m, h or d at its end" if token[-1] not in UNITS else "not a Java long before its unit"
            raise ConfigError(f"{ascii(token)}: {why}; the broker does not start (parseDelayLevel fails)", **where)
        parsed.append((token, number, token[-1]))
    levels: list[int] = []
    written: list[str] = []
    for i, (token, number, unit) in enumerate(parsed, start=1):
        millis = number * UNITS[unit]
        if millis < 0 or millis > LONG_MAX:
            wrapped = (millis - LONG_MIN) % 2**64 + LONG_MIN
            raise ConfigError(f"{ascii(token)} is {wrapped} ms as the broker computes it (a Java long"
                              f"{' that wraps around' if millis > LONG_MAX else ''}), which it delivers at once or "
                              "when nobody meant: a policy cannot hold it; write the delay you mean",
                              file=source, policy=f"level {i}", key=DELAY_KEY)
        levels.append(millis)
        written.append(f"{number}{unit}")
    return tuple(levels), tuple(written)


def _near_misses(keys: list[str]) -> list[str]:
    """Keys the broker ignores that look like ``messageDelayLevel`` (another case, a letter more or less)."""
    target = DELAY_KEY.lower()
    return [k for k in keys if k != DELAY_KEY and (k.strip().lower() == target
                                                     or SequenceMatcher(None, k.lower(), target).ratio() >= 0.85)]


def import_rocketmq_conf(path: str | Path) -> RocketMQImport:
    """The policy file of the RocketMQ broker configured by the properties file at ``path``."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=source) from exc
    props = load_properties(data, source)
    if any(k.startswith(JNDI_KEYS) for k in props):
        raise ConfigError("a jndi.properties (java.naming.* keys): give an ActiveMQ Classic client's file with "
                          "--client", file=source)
    if props and not broker_keys().intersection(props):
        raise ConfigError("neither XML nor a RocketMQ broker.conf (none of its keys is one a RocketMQ broker reads, "
                          f"such as brokerName, namesrvAddr or {DELAY_KEY}): give an Artemis broker.xml, an ActiveMQ "
                          "Classic activemq.xml, a RocketMQ broker.conf or its subscriptionGroup.json", file=source)
    from_file = DELAY_KEY in props
    warnings = [] if from_file else [
        f"{k!r} is not a key the broker reads, so it keeps the default {DELAY_KEY}: did you mean {DELAY_KEY!r}?"
        for k in _near_misses(sorted(props))]
    value = props[DELAY_KEY].strip(JAVA_SPACE) if from_file else ROCKETMQ_DEFAULT_DELAY_LEVELS
    levels, written = delay_levels(value, source)
    if len(levels) < 3:
        warnings.append(f"{len(levels)} delay level(s): a retry waits level 3 + reconsumeTimes, clamped to the last, "
                        "so every retry waits the last level")
    settings = {DELAY_KEY: " ".join(written), "maxReconsumeTimes": -1}
    doc = {"policies": [{"match": "#", "profile": "rocketmq", "settings": settings,
                         "dead_letter_address": DEAD_LETTER_TOPIC}]}
    policy_set = policies_from_mapping(doc, source=source)
    text = _render(source, from_file, doc)
    assert parse_policies(text, source) == policy_set, "the written file reads back as another policy set"
    settings_read = policy_set.policies[0].settings
    assert isinstance(settings_read, RocketMQSettings)
    assert settings_read.message_delay_level == levels
    return RocketMQImport(text, policy_set, levels, from_file, warnings)


def _render(source: str, from_file: bool, doc: Mapping[str, object]) -> str:
    name = Path(source).name
    read = (f"the RocketMQ broker's {DELAY_KEY}" if from_file
            else f"no {DELAY_KEY}, so the broker's default table")
    header = [f"Imported from {name} by `reprocess policies import`: {read}. Retry k (k = 1, 2, ...) waits level "
              "k + 2, the last level past the end, as the broker sets delayLevel = 3 + reconsumeTimes.",
              "maxReconsumeTimes is each consumer's own (DefaultMQPushConsumer.setMaxReconsumeTimes, in its code), not "
              "the broker's: -1, the client's default, is 16 retries, and unlimited retries every "
              "suspendCurrentQueueTimeMillis (1000) for an orderly consumer (consumeMessageOrderly: true). Set your "
              "consumers' values; a consumer group whose consumers differ takes a policy of its own (consumer_group: "
              "its name).",
              "Dead letters go to %DLQ%<consumer group>, as RocketMQ sends them (MixAll.getDLQTopic); a message "
              "that names no consumer group to the file's default_dead_letter_address (DLQ)."]
    return policy_file(header, doc)


def policy_file(header: list[str], doc: Mapping[str, object], flow: bool | None = False) -> str:
    """A policy file's text: the ``header`` paragraphs as comments, then ``doc`` as YAML (``flow=None``: lists and
    mappings of plain values on one line, ``delays: [1s, 5s]``)."""
    lines: list[str] = []
    for paragraph in header:
        lines += textwrap.wrap(paragraph, width=116, initial_indent="# ", subsequent_indent="# ",
                               break_on_hyphens=False)
    body = dump_policies(doc, sort_keys=False, allow_unicode=True, default_flow_style=flow, width=120)
    return "\n".join(lines) + "\n" + body


__all__ = ["DELAY_KEY", "RocketMQImport", "delay_levels", "file_kind", "import_rocketmq_conf", "policy_file"]
