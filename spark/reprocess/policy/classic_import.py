"""A policy file from an ActiveMQ Classic ``activemq.xml``: its redelivery plugin's entries as ``activemq`` policies.

ActiveMQ Classic schedules redeliveries on the broker with the ``<redeliveryPlugin>``: a ``RedeliveryPolicyMap`` of
``<redeliveryPolicy queue="...">`` entries, and a ``<defaultEntry>`` for the queues no entry matches. Each queue entry
becomes an ``activemq`` policy with the entry's settings, under its name translated to the policy file's wildcards
(Classic's ``>`` at the end, any number of words, is ``#``; ``*`` is ``*``); the default entry becomes ``#``. The
delays and the bound are the plugin's (``RedeliveryPlugin.sendToDeadLetterQueue`` runs the same
``getNextRedeliveryDelay`` loop and bound as ADR 0001's ``activemq`` profile); collision avoidance is drawn once per
delay, not fed back into the next one as ActiveMQ does (ADR 0002).

Where dead letters go is the ``deadLetterStrategy`` of the ``<policyEntry>`` the broker's ``PolicyMap`` takes for the
queue (a ``SharedDeadLetterStrategy`` of ``ActiveMQ.DLQ`` when none says otherwise): a shared strategy's queue
becomes the policy's ``dead_letter_address``; an individual one (``ActiveMQ.DLQ.Queue.<queue>``) becomes
``ActiveMQ.DLQ.Queue.{address}`` (its ``queuePrefix`` and ``queueSuffix`` around each message's address), the queue
``IndividualDeadLetterStrategy.createDestination`` names.

Which entries a queue takes is ActiveMQ's choice (:mod:`reprocess.policy.classic`), not the policy file's
precedence: the import walks every kind of queue name the entries of both maps tell apart
(:func:`reprocess.policy.classic.address_kinds`), and where the file would give a queue another redelivery entry or
dead-letter queue than ActiveMQ, it adds a more specific policy for it (the intersection of the patterns matching
it) with ActiveMQ's, until every kind agrees; where ActiveMQ's choice is random, a warning names it
(docs/adr/0009-activemq-classic-entry-choice.md).

The file is read as XBean reads it after the broker checked it against its schema: attribute values of the schema's
types, trimmed; destination names trimmed. What this import cannot read exactly is refused, not guessed: a map, an
entry or a strategy given as a Spring ``<bean>`` or a ``#reference``, an entry's ``<destination>`` element.
"""

from __future__ import annotations

import re
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from reprocess.errors import ConfigError
from reprocess.policy.classic import address_kinds, classic_choice, fresh_word, intersection, translate
from reprocess.policy.classic_client import (
    JAVA_RANGES,
    PERCENT,
    SETTINGS,
    ClientPolicy,
    client_policy,
    jndi_policies,
    percent_factor,
    redact,
)
from reprocess.policy.config import (
    PolicySet,
    dla_fixed,
    dla_literal,
    dump_policies,
    parse_policies,
    policies_from_mapping,
)
from reprocess.policy.importer import XML_SPACE, local_name, parse_file, substitute
from reprocess.policy.wildcard import ANY_WORDS, DELIMITER, SINGLE_WORD, matches, precedence, specificity

CORE = "http://activemq.apache.org/schema/core"
SHARED_DLQ = "ActiveMQ.DLQ"  # SharedDeadLetterStrategy's queue, and BaseDestination's default strategy's
INDIVIDUAL_PREFIX = "ActiveMQ.DLQ.Queue."  # IndividualDeadLetterStrategy's queuePrefix
# RedeliveryPolicy's properties that are policy settings, and their schema types
DESTINATIONS = ("queue", "topic", "tempQueue", "tempTopic")
CLIENT_ONLY = ("preDispatchCheck",)  # a consumer's setting, not the plugin's
PLUGIN_MINIMUM_DELAY = 1000  # RedeliveryPlugin.installPlugin: validatePolicyDelay(1000), queue and topic entries
MAX_ADDED = 64  # rounds of added or moved policies, and 4 per entry, before the import gives up

_INTEGER = re.compile(r"[+-]?[0-9]+")  # xs:integer, xs:long, xs:short
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # xs:double's finite forms
_BOOLEAN = {"true": True, "1": True, "false": False, "0": False}  # xs:boolean
_REFERENCE = "a Spring bean or reference: this import reads the configuration written out in the element"


def is_activemq_xml(path: str | Path) -> bool:
    """True when the file at ``path`` names ActiveMQ Classic's core namespace (an Artemis ``broker.xml`` never
    does); an unreadable file is left to the importer to report."""
    try:
        with open(path, "rb") as fh:
            return CORE.encode() in fh.read()
    except OSError:
        return False


# --- reading activemq.xml ------------------------------------------------------------------------------------------


def _core(element: ET.Element, *names: str) -> bool:
    return isinstance(element.tag, str) and element.tag.startswith(f"{{{CORE}}}") and local_name(element.tag) in names


def _elements(element: ET.Element) -> list[ET.Element]:
    return [e for e in element if isinstance(e.tag, str)]  # no comments or processing instructions


def _value(kind: str, text: str, where: dict[str, str]) -> Any:
    """An attribute value of the schema type ``kind`` (trimmed, as the schema's types collapse whitespace), as
    Spring then converts it."""
    if "${" in text:
        raise ConfigError("holds a ${...} placeholder, which the broker's schema refuses in a typed attribute (it "
                          "checks the file before Spring substitutes placeholders): write the value", **where)
    value = text.strip(XML_SPACE)
    if kind == "boolean":
        if value not in _BOOLEAN:
            raise ConfigError(f"{text!r} is not a boolean of the schema (true, false, 1, 0): the broker would not "
                              "start", **where)
        return _BOOLEAN[value]
    if kind == "double":
        if not _DOUBLE.fullmatch(value):
            raise ConfigError(f"{text!r} is not a finite decimal number (the broker would not start, or the policy "
                              "file cannot hold it)", **where)
        return float(value)
    if not _INTEGER.fullmatch(value):
        raise ConfigError(f"{text!r} is not an integer (the broker would not start)", **where)
    low, high = JAVA_RANGES[kind]
    if not low <= int(value) <= high:
        raise ConfigError(f"{text!r} does not fit a Java {kind} (the broker would not start)", **where)
    return int(value)


def _only(element: ET.Element, attributes: tuple[str, ...], where: dict[str, str]) -> None:
    """Refuses an attribute of ``element`` other than ``attributes`` and ``id``: in these elements the others are
    Spring references (``#name``), which this import does not follow."""
    for attr in element.attrib:
        if local_name(attr) not in (*attributes, "id"):
            raise ConfigError(f"{_REFERENCE} ({local_name(attr)}={element.attrib[attr]!r})", **where,
                              key=f"{local_name(element.tag)}.{local_name(attr)}")


def _bean(holder: ET.Element, name: str, where: dict[str, str]) -> ET.Element | None:
    """The one ``<name>`` element of the core namespace inside the property element ``holder`` (XBean's nesting, as
    ``<redeliveryPolicyMap><redeliveryPolicyMap>``), or ``None`` for an empty one; anything else is refused."""
    inner = _elements(holder)
    if not inner:
        return None
    if len(inner) > 1 or not _core(inner[0], name):
        held = ", ".join(f"<{local_name(e.tag)}>" for e in inner)
        raise ConfigError(f"<{local_name(holder.tag)}> holds {held}, not "
                          f"one <{name}>: {_REFERENCE}", **where)
    return inner[0]


@dataclass
class _Entry:
    """A ``RedeliveryPolicy`` for a queue (``name``; ``None`` for the default entry) and its policy settings."""

    name: str | None
    settings: dict[str, Any]


def _checked(name: str, value: Any, key: dict[str, str]) -> Any:
    """``value`` of the setting ``name`` as the policy file checks it, refused here naming the XML's entry and
    attribute (``key``), not the generated file's policy and key."""
    from reprocess.policy.settings import ActiveMQSettings, _Bad

    try:
        ActiveMQSettings._convert(name, value)
    except _Bad as bad:
        raise ConfigError(str(bad), **key) from None
    return value


def _entry(element: ET.Element, label: str, source: str, not_carried: Counter[str]) -> tuple[str | None, _Entry]:
    """One ``<redeliveryPolicy>``: (its destination attribute, the entry)."""
    where = {"file": source, "policy": label}
    if _elements(element):
        raise ConfigError("a <redeliveryPolicy> with child elements (a <destination>?): write its queue attribute",
                          **where)
    settings: dict[str, Any] = {}
    destination: tuple[str, str] | None = None
    for attr, raw in element.attrib.items():
        name = local_name(attr)
        key = {**where, "key": name}
        if name in DESTINATIONS:
            if destination is not None:
                raise ConfigError(f"gives both {destination[0]} and {name}", **key)
            destination = (name, raw.strip())  # setPhysicalName trims; tempQueue="..." sets a temporary '>'
        elif name in SETTINGS:
            settings[name] = _checked(name, _value(SETTINGS[name], raw, key), key)
        elif name == PERCENT:
            settings["collisionAvoidanceFactor"] = percent_factor(_value("short", raw, key))
        elif name in CLIENT_ONLY:
            not_carried[name] += 1
        elif name != "id":
            raise ConfigError(f"{name!r} is not an attribute of redeliveryPolicy (the broker would not start)"
                              + (f", or {_REFERENCE}" if name == "destination" else ""), **key)
    if destination is None or destination[0] in ("queue", "topic"):  # validatePolicyDelay: not temporary ones
        for name in ("initialRedeliveryDelay", "redeliveryDelay"):
            if settings.get(name, PLUGIN_MINIMUM_DELAY) < PLUGIN_MINIMUM_DELAY:
                raise ConfigError(f"the redelivery plugin refuses a {name} under {PLUGIN_MINIMUM_DELAY} ms (the "
                                  "broker would not start)", **where, key=name)
    if destination is None:
        return None, _Entry(None, settings)
    kind, name = destination
    return kind, _Entry(name if kind == "queue" else None, settings)


# the string attributes this import reads: Spring's placeholder configurer gives their ${...} values after the broker
# checked the file against its schema, which refuses a placeholder in any other (typed) attribute
STRING_ATTRIBUTES = ("queue", "topic", "physicalName", "queuePrefix", "queueSuffix")


def _read(source: str, properties: Mapping[str, str]) -> ET.Element:
    """The document, the ``${...}`` placeholders of its string attributes given their values (``properties``, else
    their ``:default``)."""
    root = parse_file(source)
    for element in root.iter():
        for attr in element.attrib:
            if local_name(attr) in STRING_ATTRIBUTES:
                element.set(attr, substitute(element.attrib[attr], properties))
    return root


def _boolean(element: ET.Element, name: str, default: bool, source: str) -> bool:
    raw = element.get(name)
    return default if raw is None else bool(_value("boolean", raw, {"file": source, "key": name}))


@dataclass
class _Dead:
    """The dead-letter strategy of a queue ``<policyEntry>`` (``name``; ``None`` for the policy map's default entry,
    or the broker's default strategy): ``dlq`` the shared queue, or an individual strategy's
    ``<prefix>{address}<suffix>``."""

    name: str | None
    dlq: str
    note: str | None = None  # what ActiveMQ does that reprocess does not
    drops_non_persistent: bool = True  # processNonPersistent="false", the default


_DEFAULT_DEAD = _Dead(None, SHARED_DLQ)


def _strategy(entry: ET.Element, name: str | None, where: dict[str, str]) -> _Dead:
    """A ``<policyEntry>``'s dead-letter strategy (``PolicyEntry``'s default: shared, ``ActiveMQ.DLQ``)."""
    if "deadLetterStrategy" in entry.attrib:
        raise ConfigError(f"{_REFERENCE} (deadLetterStrategy={entry.get('deadLetterStrategy')!r})", **where,
                          key="deadLetterStrategy")
    holders = [e for e in _elements(entry) if _core(e, "deadLetterStrategy")]
    strategy = _elements(holders[0]) if holders else []
    if holders and not strategy:
        raise ConfigError("an empty <deadLetterStrategy> (the broker would not start)", **where,
                          key="deadLetterStrategy")
    if not strategy:
        return _Dead(name, SHARED_DLQ)
    if len(strategy) > 1 or not _core(strategy[0], "sharedDeadLetterStrategy", "individualDeadLetterStrategy",
                                      "discarding"):
        raise ConfigError(f"the dead-letter strategy <{local_name(strategy[0].tag)}> is not one this import reads, or "
                          f"{_REFERENCE}", **where, key="deadLetterStrategy")
    s = strategy[0]
    kind = local_name(s.tag)
    keeps = _boolean(s, "processNonPersistent", False, where["file"])
    if kind == "individualDeadLetterStrategy":
        prefix, suffix = s.get("queuePrefix", INDIVIDUAL_PREFIX), s.get("queueSuffix", "")
        if not _boolean(s, "useQueueForQueueMessages", True, where["file"]):
            raise ConfigError("an individual strategy sending queues' dead letters to topics: this import keeps them "
                              "per queue; remove useQueueForQueueMessages=\"false\" or set the policies' "
                              "dead_letter_address by hand", **where, key="useQueueForQueueMessages")
        return _Dead(name, f"{dla_literal(prefix)}{{address}}{dla_literal(suffix)}", None, not keeps)
    if "deadLetterQueue" in s.attrib:
        raise ConfigError(f"{_REFERENCE} (deadLetterQueue={s.get('deadLetterQueue')!r})", **where,
                          key="deadLetterQueue")
    queue = SHARED_DLQ
    for holder in (e for e in _elements(s) if _core(e, "deadLetterQueue")):
        named = [e for e in _elements(holder) if _core(e, "queue")]
        if len(named) != 1 or len(_elements(holder)) != 1 or not named[0].get("physicalName", "").strip():
            raise ConfigError("a <deadLetterQueue> not holding one named <queue> (a topic, or "
                              f"{_REFERENCE}): policy files send dead letters to queues", **where,
                              key="deadLetterQueue")
        queue = named[0].get("physicalName", "").strip()
    if kind == "discarding":
        return _Dead(name, dla_literal(queue), "ActiveMQ discards the dead letters of some queues (<discarding/>): "
                     f"reprocess keeps them, under {queue}", not keeps)
    return _Dead(name, dla_literal(queue), None, not keeps)


def _dead_letters(broker: ET.Element, source: str) -> tuple[list[_Dead], _Dead]:
    """The queue ``<policyEntry>`` elements' dead-letter strategies, in document order, and the default one (the
    policy map's ``<defaultEntry>``'s, else the broker's: shared, ``ActiveMQ.DLQ``)."""
    where = {"file": source, "policy": "destinationPolicy"}
    if "destinationPolicy" in broker.attrib:
        raise ConfigError(f"{_REFERENCE} (destinationPolicy={broker.get('destinationPolicy')!r})", **where)
    holders = [e for e in _elements(broker) if _core(e, "destinationPolicy")]
    policy_map = _bean(holders[0], "policyMap", where) if holders else None
    if policy_map is None:
        return [], _DEFAULT_DEAD
    _only(policy_map, (), where)
    dead: list[_Dead] = []
    default = _DEFAULT_DEAD
    for holder in _elements(policy_map):
        if _core(holder, "policyEntries", "entries"):
            for entry in _elements(holder):
                if not _core(entry, "policyEntry"):
                    raise ConfigError(f"<{local_name(entry.tag)}> among the policy entries: {_REFERENCE}", **where)
                if "destination" in entry.attrib or any(_core(e, "destination") for e in _elements(entry)):
                    raise ConfigError("a <policyEntry> naming its destination with a <destination> element or a "
                                      f"reference: write its queue attribute ({_REFERENCE})", **where)
                if entry.get("queue") is not None:
                    name = entry.get("queue", "").strip()
                    dead.append(_strategy(entry, name, {**where, "policy": name}))
        elif _core(holder, "defaultEntry"):
            entry = _bean(holder, "policyEntry", where)  # type: ignore[assignment]
            if entry is not None:
                default = _strategy(entry, None, {**where, "policy": "defaultEntry"})
        else:
            raise ConfigError(f"<{local_name(holder.tag)}> in the policy map: {_REFERENCE}", **where)
    return dead, default


def _entries(plugin: ET.Element, source: str, not_carried: Counter[str]) -> tuple[list[_Entry], _Entry | None, int]:
    """The plugin's queue entries in document order, its default entry, and how many entries were read (the topic
    and temporary ones are counted into ``not_carried``)."""
    where = {"file": source, "policy": "redeliveryPlugin"}
    _only(plugin, ("fallbackToDeadLetter", "sendToDlqIfMaxRetriesExceeded"), where)
    children = _elements(plugin)
    if any(not _core(e, "redeliveryPolicyMap") for e in children) or len(children) > 1:
        raise ConfigError("<redeliveryPlugin> holds " + ", ".join(f"<{local_name(e.tag)}>" for e in children)
                          + f", not one <redeliveryPolicyMap>: {_REFERENCE}", **where)
    policy_map = _bean(children[0], "redeliveryPolicyMap", where) if children else None
    if policy_map is None:
        return [], None, 0
    _only(policy_map, (), where)
    queues: list[_Entry] = []
    default: _Entry | None = None
    read = 0
    for holder in _elements(policy_map):
        if _core(holder, "redeliveryPolicyEntries", "entries"):
            for element in _elements(holder):
                if not _core(element, "redeliveryPolicy"):
                    raise ConfigError(f"<{local_name(element.tag)}> among the redelivery entries: {_REFERENCE}",
                                      **where)
                read += 1
                kind, entry = _entry(element, element.get("queue", f"#{read}").strip(), source, not_carried)
                if kind is None:
                    raise ConfigError("an entry without a destination (queue, topic, tempQueue or tempTopic)",
                                      file=source, policy=f"#{read}")
                if kind == "queue":
                    queues.append(entry)
                else:
                    not_carried[f"{kind} entries"] += 1
        elif _core(holder, "defaultEntry"):
            element = _bean(holder, "redeliveryPolicy", where)  # type: ignore[assignment]
            if element is not None:
                read += 1
                kind, default = _entry(element, "defaultEntry", source, not_carried)
                if kind is not None:
                    raise ConfigError(f"the default entry names a {kind}", file=source, policy="defaultEntry",
                                      key=kind)
        else:
            raise ConfigError(f"<{local_name(holder.tag)}> in the redelivery policy map: {_REFERENCE}", **where)
    return queues, default, read


# --- the import ----------------------------------------------------------------------------------------------------


@dataclass
class ClassicImport:
    """A policy file made from an ``activemq.xml``: its YAML ``text``, the :class:`PolicySet` it reads as, the
    redelivery entries read, what was not carried over, the policies added for ActiveMQ's choices, notes on what
    ActiveMQ does that reprocess does not (it drops nothing), and warnings where ActiveMQ's choice is random."""

    text: str
    policies: PolicySet
    read: str  # what was read: "3 redelivery entries", "the client's redelivery policy"
    not_carried: dict[str, int] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.read} -> {len(self.policies.policies)} activemq policies"]
        if self.added:
            lines.append("added for ActiveMQ's choice of entry: " + ", ".join(self.added))
        if self.not_carried:
            lines.append("not carried over: " + ", ".join(f"{k} ({n})" for k, n in sorted(self.not_carried.items())))
        lines += self.notes
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass
class _Broker:
    """What the import reads of one broker: its queue redelivery entries, its default entry, the plugin's switches,
    and the dead-letter strategies of its queue policy entries and its default one."""

    entries: list[_Entry]
    default: _Entry | None
    fallback: bool
    dead: list[_Dead]
    dead_default: _Dead
    source: str

    @cached_property
    def names(self) -> list[str]:
        return [e.name or "" for e in self.entries]

    @cached_property
    def dead_names(self) -> list[str]:
        return [d.name or "" for d in self.dead]

    @cached_property
    def _choices(self) -> dict[str, _Choices]:
        return {}

    def choices(self, queue: str) -> _Choices:
        """What ActiveMQ does for ``queue`` (:class:`_Choices`), computed once per queue: the walk of
        :func:`_agree` asks again for each queue in every round, and trying every order of insertion is dear."""
        if queue not in self._choices:
            try:
                found, entries = classic_choice(self.names, queue)
                found_dead, dead = classic_choice(self.dead_names, queue)
            except ConfigError as exc:
                raise ConfigError(exc.message, file=self.source) from exc
            self._choices[queue] = _Choices(entries or [-1], list(dict.fromkeys(self.dead[d].dlq for d in dead))
                                            or [self.dead_default.dlq], found, found_dead)
        return self._choices[queue]


class _Choices(NamedTuple):
    """What ActiveMQ can do for a queue: the redelivery entries it can take (``-1``: none matches, the default's
    turn), the dead-letter queues it can send its dead letters to (an individual one's ``<prefix>{address}``), and the
    redelivery
    and policy entries matching the queue (indexes)."""

    entries: list[int]
    dlqs: list[str]
    found: list[int]
    found_dead: list[int]


def _broker_element(source: str, properties: Mapping[str, str]) -> tuple[ET.Element, list[ET.Element]]:
    """The ``<broker>`` of the ``activemq.xml`` at ``source``, and its ``<redeliveryPlugin>`` elements."""
    root = _read(source, properties)
    broker_element = next((e for e in root.iter() if _core(e, "broker")), None)
    if broker_element is None:
        raise ConfigError(f"no <broker> element of {CORE}: not an ActiveMQ Classic configuration", file=source)
    if "plugins" in broker_element.attrib:
        raise ConfigError(f"{_REFERENCE} (plugins={broker_element.get('plugins')!r})", file=source, key="plugins")
    if any("RedeliveryPlugin" in (e.get("class") or "") for e in broker_element.iter()):
        raise ConfigError(f"a redelivery plugin given as a <bean>: {_REFERENCE}", file=source)
    return broker_element, [e for e in broker_element.iter() if _core(e, "redeliveryPlugin")]


def import_activemq_xml(path: str | Path, properties: Mapping[str, str] | None = None) -> ClassicImport:
    """The redelivery plugin of the ActiveMQ Classic ``activemq.xml`` at ``path`` as a policy file (module
    docstring), its ``${...}`` placeholders given values by ``properties``."""
    source = str(path)
    broker_element, plugins = _broker_element(source, properties or {})
    if not plugins:
        beans = [e for holder in _elements(broker_element) if _core(holder, "plugins") for e in _elements(holder)
                 if not isinstance(e.tag, str) or not e.tag.startswith(f"{{{CORE}}}")]
        if beans:
            raise ConfigError(f"no <redeliveryPlugin>, and <plugins> holds {_REFERENCE} (a plugin given as a <bean> "
                              "or <ref> is not read)", file=source)
        raise ConfigError("no <redeliveryPlugin>: the broker schedules no redelivery; its clients do, each with the "
                          "redelivery policy of its connection factory: give one's broker URL (--client URL)",
                          file=source)
    if len(plugins) > 1:
        raise ConfigError("more than one <redeliveryPlugin>", file=source)
    plugin = plugins[0]
    if not _boolean(broker_element, "schedulerSupport", False, source):
        raise ConfigError('the redelivery plugin needs schedulerSupport="true" on <broker> (the broker would not '
                          "start)", file=source, key="schedulerSupport")
    not_carried: Counter[str] = Counter()
    queues, default, read = _entries(plugin, source, not_carried)
    dead, dead_default = _dead_letters(broker_element, source)
    broker = _Broker(queues, default, _boolean(plugin, "fallbackToDeadLetter", True, source), dead, dead_default,
                     source)
    notes = _notes(broker, plugin, source)
    header = (f"Imported from {Path(source).name} by `reprocess policies import`: the redelivery plugin's queue "
              "entries in its order, its default entry as '#'.")
    return _finish(broker, header, f"{read} redelivery entries", not_carried, notes, [])


def import_activemq_client(client_spec: str, path: str | Path | None = None,
                           properties: Mapping[str, str] | None = None,
                           factory: str | None = None) -> ClassicImport:
    """The redelivery policy an ActiveMQ Classic client takes from its broker URL, or from the ``jndi.properties``
    file ``client_spec`` names (:mod:`reprocess.policy.classic_client`; ``factory`` the connection factory, needed
    where its factories' policies differ), as a policy file: one ``#`` policy, its dead letters where the
    ``<policyEntry>`` ActiveMQ takes for each queue sends them, in the ``activemq.xml`` at ``path`` (else an ActiveMQ
    broker's default, the shared ``ActiveMQ.DLQ``). A broker with a redelivery plugin is refused: it schedules more
    redeliveries after the client's policy gives up, counted on from the client's, which this import does not
    join."""
    is_file = Path(client_spec).is_file()
    if is_file:
        client, origin = _jndi_client(client_spec, factory)
    else:
        if "://" not in client_spec and ":(" not in client_spec and not client_spec.startswith("vm:"):
            raise ConfigError("no such file, and not a broker URL (no scheme such as tcp:// or failover:)",
                              file="--client " + redact(client_spec))
        if factory is not None:
            raise ConfigError("--factory names a connection factory of a jndi.properties file, not of a URL",
                              file="--client " + redact(client_spec))
        client = client_policy(client_spec)
        origin = f"the ActiveMQ client URL {redact(client_spec)}"
    label = "--client " + (client_spec if is_file else redact(client_spec))
    dead: list[_Dead] = []
    if path is None:
        source, dead_default = label, _DEFAULT_DEAD
        where = "an ActiveMQ broker's default dead-letter strategy (a shared ActiveMQ.DLQ) sends them"
    else:
        source = str(path)
        broker_element, plugins = _broker_element(source, properties or {})
        if plugins:
            raise ConfigError("the broker has a <redeliveryPlugin>: it redelivers again after the client's policy "
                              "gives up, counting on from the client's redeliveries, and this import does not join the "
                              "two; import the activemq.xml alone for the plugin's schedule (its clients with "
                              "maximumRedeliveries 0 leave it all to the plugin)", file=source)
        dead, dead_default = _dead_letters(broker_element, source)
        where = f"the dead-letter strategy of the <policyEntry> of {Path(source).name} ActiveMQ takes for each queue " \
                "sends them"
    broker = _Broker([], _Entry(None, dict(client.settings)), False, dead, dead_default, source)
    header = (f"Imported from {origin} by `reprocess policies import --client`: its redelivery policy as '#', "
              f"settings left out being ActiveMQ's defaults; dead letters go where {where}.")
    not_carried = Counter(client.not_carried)
    return _finish(broker, header, "the client's redelivery policy", not_carried, _notes(broker, None, source),
                   client.warnings)


def _jndi_client(path: str, factory: str | None) -> tuple[ClientPolicy, str]:
    """The policy of the connection factory ``factory`` of a ``jndi.properties`` file, or of all of them where they
    agree, and what the file header calls it."""
    policies = jndi_policies(path)
    if factory is not None:
        if factory not in policies:
            raise ConfigError(f"no connection factory {factory!r}: the file makes " + ", ".join(map(repr, policies)),
                              file=path, key="--factory")
        return policies[factory], f"the connection factory {factory} of {Path(path).name}"
    kinds = {repr(sorted(p.settings.items())) for p in policies.values()}
    if len(kinds) > 1:
        raise ConfigError("its connection factories have different redelivery policies: choose one with --factory ("
                          + ", ".join(f"{n}: {p.settings or 'the defaults'}" for n, p in policies.items()) + ")",
                          file=path)
    first = next(iter(policies.values()))
    merged = ClientPolicy(first.settings, sorted({n for p in policies.values() for n in p.not_carried}),
                          list(dict.fromkeys(w for p in policies.values() for w in p.warnings)))
    return merged, f"the connection factories of {Path(path).name} ({', '.join(policies)})"


def _finish(broker: _Broker, header: str, what: str, not_carried: Counter[str], notes: list[str],
            warnings: list[str]) -> ClassicImport:
    """The policy file of ``broker``: its base policies, and those added so that every kind of queue takes what
    ActiveMQ gives it."""
    source = broker.source
    for kind, names in (("redelivery entries", broker.names), ("policy entries", broker.dead_names)):
        _check_names(kind, names, source)
    policies, stands = _base_policies(broker)
    if not policies:
        raise ConfigError("the redelivery plugin has no queue entry and no default entry, and fallbackToDeadLetter is "
                          "false: nothing to import", file=source)
    ordered, choice_warnings = _agree(broker, policies, stands, source)
    warnings = warnings + choice_warnings
    base = {id(p) for p in policies}
    added = [(p, e) for p, e in ordered if id(p) not in base]
    described = [f"{p['match']} (the entry for {broker.names[e]}" if e >= 0 else f"{p['match']} (the default entry"
                 for p, e in added]
    described = [f"{d}, dead letters to {p['dead_letter_address']})" for d, (p, _) in zip(described, added,
                                                                                          strict=True)]
    # a shared default queue's name; an individual default names no one queue
    doc = {"default_dead_letter_address": dla_fixed(broker.dead_default.dlq) or SHARED_DLQ,
           "policies": [p for p, _ in ordered]}
    policy_set = policies_from_mapping(doc, source=source)
    text = _render(header, doc, not_carried, described, notes, warnings, bool(broker.entries or broker.dead))
    assert parse_policies(text, source) == policy_set, "the written file reads back as another policy set"
    return ClassicImport(text, policy_set, what, dict(not_carried), described, notes, warnings)


def _check_names(what: str, names: list[str], source: str) -> None:
    for n, name in enumerate(names):
        where = {"file": source, "policy": name, "key": "queue"}
        if "${" in name:
            raise ConfigError("holds a ${...} placeholder Spring substitutes: give its value (--property)", **where)
        if "," in name or "?" in name:
            raise ConfigError("a composite destination or one with options: write one entry per queue", **where)
        if not name or translate(name) is None:
            raise ConfigError("no policy-file pattern matches the queues this entry matches ('>' anywhere but at the "
                              "end matches only its literal name, 'a.>.>' a queue of one word more than 'a'; '#' is a "
                              "wildcard in policy files)", **where)
        if name in names[:n]:
            raise ConfigError(f"two {what} for one queue: ActiveMQ takes either, depending on their identity hashes",
                              **where)


def _notes(broker: _Broker, plugin: ET.Element | None, source: str) -> list[str]:
    notes = list(dict.fromkeys(d.note for d in (*broker.dead, broker.dead_default) if d.note))
    if any(d.drops_non_persistent for d in (*broker.dead, broker.dead_default)):
        notes.append("ActiveMQ drops the dead letters of non-persistent messages (processNonPersistent=\"false\", "
                     "its default): reprocess dead-letters every message")
    if broker.default is None and broker.fallback:
        notes.append("no default entry: the queues no entry matches are dead-lettered at their first failure "
                     "(fallbackToDeadLetter), policy '#' with maximumRedeliveries 0")
    elif plugin is not None and broker.default is None and ANY_WORDS not in [translate(n) for n in broker.names]:
        notes.append("no default entry and fallbackToDeadLetter=\"false\": ActiveMQ keeps no record of the failures "
                     "of queues no entry matches; reprocess quarantines them (UNKNOWN_ADDRESS)")
    if plugin is not None and not _boolean(plugin, "sendToDlqIfMaxRetriesExceeded", True, source):
        notes.append("sendToDlqIfMaxRetriesExceeded=\"false\": ActiveMQ discards exhausted messages; reprocess "
                     "dead-letters them")
    return notes


def _settings(broker: _Broker, entry: int) -> dict[str, Any]:
    """The policy settings of redelivery entry ``entry`` (``-1``: the default entry, or the fallback's)."""
    if entry >= 0:
        return dict(broker.entries[entry].settings)
    return dict(broker.default.settings) if broker.default is not None else {"maximumRedeliveries": 0}


def _policy(pattern: str, settings: dict[str, Any], dlq: str) -> dict[str, Any]:
    return {"match": pattern, "profile": "activemq", "settings": settings, "dead_letter_address": dlq}


def _base_policies(broker: _Broker) -> tuple[list[dict[str, Any]], list[int]]:
    """A policy per queue entry, and '#' for the default entry (or the fallback), each with the dead-letter queue of
    a typical queue of its pattern; and the entry each stands for."""
    names = broker.names + broker.dead_names
    literals = {w for n in names for w in n.split(DELIMITER)}
    fresh = fresh_word(literals)
    longest = max((len(n.split(DELIMITER)) for n in names), default=1)
    patterns = [translate(n) or "" for n in broker.names]
    stands = list(range(len(patterns)))
    if ANY_WORDS not in patterns and (broker.default is not None or broker.fallback):
        patterns.append(ANY_WORDS)
        stands.append(-1)
    policies = []
    for pattern, entry in zip(patterns, stands, strict=True):
        # a queue of the pattern no literal word of another decides, longer than every pattern of a fixed length
        words = pattern.split(DELIMITER)
        tail = [fresh] * (longest + 1 - len(words) + 1) if words[-1] == ANY_WORDS else []
        typical = DELIMITER.join([fresh if w == SINGLE_WORD else w for w in words if w != ANY_WORDS] + tail)
        policies.append(_policy(pattern, _settings(broker, entry), broker.choices(typical).dlqs[0]))
    return policies, stands


def _agree(broker: _Broker, policies: list[dict[str, Any]], stands: list[int],
           source: str) -> tuple[list[tuple[dict[str, Any], int]], list[str]]:
    """The policies in file order, so that every kind of queue name takes the redelivery entry and dead-letter queue
    ActiveMQ gives it: ``policies`` (standing for the entries ``stands``) after more specific ones, each for the
    intersection of the patterns matching a queue where they differ, or with a policy moved to the front where it
    loses a tie (file order breaks ties). Returns them with the entry each stands for, and warnings where ActiveMQ's
    choice is random."""
    entry_patterns = [translate(n) or "" for n in broker.names]
    dead_patterns = [translate(n) or "" for n in broker.dead_names]
    current = list(zip(policies, stands, strict=True))
    warnings: dict[tuple[str, ...], str] = {}
    limit = MAX_ADDED + 4 * (len(broker.entries) + len(broker.dead))
    for _ in range(limit):
        patterns = [str(p["match"]) for p, _ in current]
        order = precedence(patterns)
        fixes: dict[str, tuple[dict[str, Any], int]] = {}
        for queue in address_kinds(patterns + dead_patterns):
            entries, dlqs, found, found_dead = broker.choices(queue)
            i = next((i for i in order if matches(patterns[i], queue)), None)
            if i is None:  # quarantined: ActiveMQ has no entry for it and no fallback either
                assert entries == [-1], queue
                assert broker.default is None, queue
                assert not broker.fallback, queue
                continue
            ours, our_dlq = current[i][1], current[i][0]["dead_letter_address"]
            _warn(warnings, broker, queue, entries, dlqs, ours, our_dlq)
            if ours in entries and our_dlq in dlqs:
                continue
            want = ours if ours in entries else min(entries, key=lambda e: order.index(
                next(j for j, (_, stand) in enumerate(current) if stand == e)))
            dlq = our_dlq if our_dlq in dlqs else dlqs[0]
            matching = [entry_patterns[m] for m in found] + [dead_patterns[m] for m in found_dead]
            fix = _fix(queue, [intersection(matching or [ANY_WORDS]), _kind(queue, patterns + dead_patterns)],
                       patterns, current, i, entries, dlqs)
            if fix is None:
                raise ConfigError(f"for the queue {queue}, ActiveMQ takes the entry for "
                                  f"{broker.names[want] if want >= 0 else 'defaultEntry'} with dead letters to "
                                  f"{dlq}, and no policy this import can add does: add an entry for it",
                                  file=source)
            fixes.setdefault(fix, (_policy(fix, _settings(broker, want), dlq), want))
        if not fixes:
            return current, list(warnings.values())
        moved = [current[patterns.index(p)] for p in fixes if p in patterns]  # right, but losing a tie
        current = [*(fix for p, fix in fixes.items() if p not in patterns), *moved,
                   *(c for c in current if not any(c is m for m in moved))]
    raise ConfigError(f"more than {limit} rounds of policies would be needed to give ActiveMQ's choices everywhere: "
                      "add entries for the queues where patterns overlap", file=source)


def _fix(queue: str, candidates: list[str | None], patterns: list[str], current: list[tuple[dict[str, Any], int]],
         taken: int, entries: list[int], dlqs: list[str]) -> str | None:
    """The first of ``candidates`` (patterns matching ``queue``) that can give it ActiveMQ's choice: one no policy
    has yet, or the pattern of a policy giving one of ``entries`` and ``dlqs`` that only loses a tie to the policy
    ``taken`` (moved to the front, it wins)."""
    for pattern in candidates:
        if pattern is None or not matches(pattern, queue):
            continue
        if pattern not in patterns:
            return pattern
        policy, entry = current[patterns.index(pattern)]
        if (entry in entries and policy["dead_letter_address"] in dlqs
                and specificity(pattern) == specificity(patterns[taken])):
            return pattern
    return None


def _kind(queue: str, patterns: list[str]) -> str:
    """A pattern for the queues of ``queue``'s kind (:func:`address_kinds`): its words that are some pattern's
    literal, ``*`` for the others, and any words more where it is longer than every pattern (its kind holds those
    queues too)."""
    literals = {w for p in patterns for w in p.split(DELIMITER)} - {ANY_WORDS, SINGLE_WORD}
    longest = max(len(p.split(DELIMITER)) for p in patterns)
    words = [w if w in literals else SINGLE_WORD for w in queue.split(DELIMITER)]
    return DELIMITER.join([*words[:longest], SINGLE_WORD, ANY_WORDS] if len(words) > longest else words)


def _warn(warnings: dict[tuple[str, ...], str], broker: _Broker, queue: str, entries: list[int],
          dlqs: list[str], ours: int, our_dlq: str) -> None:
    """Names a random choice of ActiveMQ's, once per set of entries it chooses among."""
    if len(entries) > 1 and ours in entries:
        names = [broker.names[e] for e in entries]
        warnings.setdefault(tuple(names), f"for queues like {queue}, ActiveMQ takes the redelivery entry for "
                            + " or ".join(names) + " at random (its comparison is not an order; the identity hashes "
                            f"of its entries decide): this file takes {broker.names[ours]}'s")
    if len(dlqs) > 1 and our_dlq in dlqs:
        warnings.setdefault(("dead", *dlqs), f"for queues like {queue}, ActiveMQ sends dead letters to "
                            + " or ".join(dlqs) + " at random (its policy entries' comparison is not an order): "
                            f"this file sends them to {our_dlq}")


def _render(origin: str, doc: dict[str, Any], not_carried: Counter[str], added: list[str],
            notes: list[str], warnings: list[str], chose: bool) -> str:
    def wrap(text: str) -> list[str]:
        return textwrap.wrap(text, width=116, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False,
                             break_long_words=False)  # a long URL stays whole

    header = wrap(origin + (" Policy files choose by Artemis's precedence, not ActiveMQ's: the import checked that "
                            "each kind of queue name these entries tell apart takes the redelivery entry and the "
                            "dead-letter queue ActiveMQ gives it." if chose else ""))
    if added:
        header += wrap("Added first, so that each queue takes what ActiveMQ gives it: " + ", ".join(added) + ".")
    if not_carried:
        header += wrap("Not carried over: " + ", ".join(sorted(not_carried)) + ".")
    for line in notes + [f"Warning: {w}" for w in warnings]:
        header += wrap(line[0].upper() + line[1:] + ".")
    body = dump_policies(doc, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)
    return "\n".join(header) + "\n" + body


__all__ = ["ClassicImport", "import_activemq_client", "import_activemq_xml", "is_activemq_xml"]
