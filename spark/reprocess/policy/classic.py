"""A policy file from an ActiveMQ Classic ``activemq.xml``: its redelivery plugin's policies as ``activemq`` ones.

ActiveMQ Classic schedules redeliveries on the broker with the ``<redeliveryPlugin>``: a ``RedeliveryPolicyMap`` of
``<redeliveryPolicy queue="...">`` entries, and a ``<defaultEntry>`` for the queues no entry matches. Each entry
becomes an ``activemq`` policy with the entry's settings, under its destination translated to the policy file's
wildcards (Classic's ``>`` at the end, any number of words, is ``#``; ``*`` is ``*``); the default entry becomes
``#``. The schedule each setting gives is the plugin's (``RedeliveryPlugin.sendToDeadLetterQueue``): the same loop
over ``getNextRedeliveryDelay`` and the same bound as the client's, docs/adr/0001-counting.md.

Which entry a queue takes is decided differently by the two brokers, and the policy file speaks Artemis's rule.
Classic (``DestinationMap.chooseValue``) sorts the matching entries with ``ActiveMQDestination.compare`` and takes
the first: an entry whose pattern, read as a name, another one matches comes before it, else the names in string
order. So for ``orders.eu`` Classic takes ``*.eu`` over ``orders.*`` (``'*' < 'o'``) where Artemis's rule takes
``orders.*``. The import checks every kind of queue name the entries tell apart (:func:`_address_kinds`) against
Classic's choice (:func:`classic_choice`), and where the file would choose another entry it adds a more specific
policy for the names where they differ (the intersection of the patterns matching them: ``orders.eu`` with
``*.eu``'s settings), until every kind agrees. That comparison is not an order: ``orders.*`` and ``orders.>`` each
compare after the other, so for ``orders.x`` Classic takes whichever of the two its ``TreeSet`` met first, in the
order of a ``HashSet`` of the entries' identity hashes, which changes from one broker start to the next. No file
can give that; the import keeps the policy file's choice, among the ones Classic can take, and names each such
case in a warning.

Dead letters: the ``deadLetterStrategy`` of the ``<policyEntry queue=">">`` (the default when there is none:
``ActiveMQ.DLQ``, shared): a shared one's queue becomes each policy's ``dead_letter_address``; an individual one
(``ActiveMQ.DLQ.Queue.<queue>``) leaves it out, so dead letters stay under each message's own address. What
ActiveMQ discards (``<discarding/>``, ``sendToDlqIfMaxRetriesExceeded="false"``, no entry and
``fallbackToDeadLetter="false"``), reprocess dead-letters or quarantines, and the summary says so.
"""

from __future__ import annotations

import copy
import re
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import permutations
from pathlib import Path
from typing import Any

import yaml

from reprocess.errors import ConfigError
from reprocess.policy.config import PolicySet, parse_policies, policies_from_mapping
from reprocess.policy.importer import substitute
from reprocess.policy.wildcard import ANY_WORDS, DELIMITER, SINGLE_WORD, matches, precedence

CORE = "http://activemq.apache.org/schema/core"
ANY_DESCENDENT = ">"  # Classic's "any number of words" (only at the end of a name)
SHARED_DLQ = "ActiveMQ.DLQ"  # SharedDeadLetterStrategy's queue
# RedeliveryPolicy's properties that are policy settings, and their Java types
SETTINGS = {"initialRedeliveryDelay": "long", "redeliveryDelay": "long", "maximumRedeliveryDelay": "long",
            "maximumRedeliveries": "int", "backOffMultiplier": "double", "collisionAvoidanceFactor": "double",
            "useExponentialBackOff": "boolean", "useCollisionAvoidance": "boolean"}
PERCENT = "collisionAvoidancePercent"  # a short: sets collisionAvoidanceFactor to percent * 0.01
DESTINATIONS = ("queue", "topic", "tempQueue", "tempTopic")
CLIENT_ONLY = ("preDispatchCheck",)  # a consumer's setting, not the plugin's
PLUGIN_MINIMUM_DELAY = 1000  # RedeliveryPlugin.installPlugin: validatePolicyDelay(1000)
MAX_RANDOM = 7  # matching entries whose orders of insertion are all tried (7! = 5040)
MAX_ADDED = 64  # policies the import may add for Classic's precedence before it gives up

_LONG = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")  # Spring's CustomBooleanEditor
_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1),
           "short": (-(1 << 15), (1 << 15) - 1)}


# --- Classic's matching and precedence (org.apache.activemq.filter, ActiveMQDestination.compare) ----------------


def _paths(name: str) -> list[str]:
    return name.split(DELIMITER)  # DestinationPath.getDestinationPaths: empty words kept


def is_pattern(name: str) -> bool:
    """``ActiveMQDestination.isPattern``: a ``*`` or ``>`` anywhere in the name."""
    return SINGLE_WORD in name or ANY_DESCENDENT in name


def classic_matches(pattern: str, name: str) -> bool:
    """``DestinationFilter.parseFilter(pattern).matches(name)``, both queues: a ``PrefixDestinationFilter`` when the
    last word is ``>`` (a word ``*`` of the name matches any word there), a ``WildcardDestinationFilter`` when a
    word is ``*``, else equality."""
    prefixes, path = _paths(pattern), _paths(name)
    if prefixes[-1] == ANY_DESCENDENT:
        while len(prefixes) > 1 and prefixes[-2] == ANY_DESCENDENT:  # trailing '>'s collapse to one
            prefixes.pop()

        def word(p: str, w: str) -> bool:
            return w == SINGLE_WORD or p == SINGLE_WORD or p == w

        if len(path) >= len(prefixes):
            return all(word(p, w) for p, w in zip(prefixes[:-1], path, strict=False))
        return all(word(p, w) for p, w in zip(prefixes, path, strict=False)) and len(prefixes) == len(path) + 1
    if SINGLE_WORD in prefixes:
        return len(path) == len(prefixes) and all(p == SINGLE_WORD or p == w for p, w in zip(prefixes, path,
                                                                                             strict=True))
    return pattern == name


def _tree_finds(pattern: list[str], queue: list[str], i: int = 0, j: int = 0) -> bool:
    """True when ``DestinationMapNode.appendMatchingValues`` reaches the entry stored under ``pattern``'s words when
    looking up ``queue``'s (a queue without wildcard words): a ``*`` child is walked from the next word, a ``>``
    child gives every entry under it, a word walks to its child, and at the end the node's own entries and its
    ``>`` child's are taken. So ``a.>.>`` is found for ``a.b`` but not for ``a``, which its filter matches."""
    while i < len(queue):
        if j < len(pattern):
            if pattern[j] == ANY_DESCENDENT:
                return True
            if pattern[j] == SINGLE_WORD and _tree_finds(pattern, queue, i + 1, j + 1):
                return True
        if j < len(pattern) and pattern[j] == queue[i]:
            i, j = i + 1, j + 1
        else:
            return False
    return j == len(pattern) or (j == len(pattern) - 1 and pattern[j] == ANY_DESCENDENT)


def finds(name: str, queue: str) -> bool:
    """True when the entry for ``name`` applies to ``queue`` (no wildcard words in it): ``DestinationMap.get`` finds
    it in its tree and ``chooseValue`` keeps it (the same name, or its filter matches)."""
    return name == queue or (_tree_finds(_paths(name), _paths(queue)) and classic_matches(name, queue))


def _java_compare(a: str, b: str) -> int:
    """``String.compareTo``: UTF-16 code units."""
    x, y = a.encode("utf-16-be", "surrogatepass"), b.encode("utf-16-be", "surrogatepass")
    units_a = [x[i] << 8 | x[i + 1] for i in range(0, len(x), 2)]
    units_b = [y[i] << 8 | y[i + 1] for i in range(0, len(y), 2)]
    return (units_a > units_b) - (units_a < units_b)


def classic_compare(a: str, b: str) -> int:
    """``ActiveMQDestination.compare`` of two queues named ``a`` and ``b``: after the other when, as a pattern, it
    matches the other's name; before it when matched so; else the names in string order."""
    if is_pattern(a) and is_pattern(b) and a == b:
        return 0
    if is_pattern(a) and classic_matches(a, b):
        return 1
    if is_pattern(b) and classic_matches(b, a):
        return -1
    return _java_compare(a, b)


class _TreeSet:
    """A ``java.util.TreeSet`` with a comparator: ``TreeMap.put`` and its red-black ``fixAfterInsertion``. With a
    comparison that is not an order, which key comes first depends on the order of insertion and on the tree's
    shape, so both are followed."""

    def __init__(self, cmp: Callable[[int, int], int]) -> None:
        self.cmp = cmp
        self.root: int | None = None
        self.left: dict[int, int | None] = {}
        self.right: dict[int, int | None] = {}
        self.parent: dict[int, int | None] = {}
        self.red: dict[int, bool] = {}

    def add(self, key: int) -> None:
        at, c, t = None, 0, self.root
        while t is not None:
            at, c = t, self.cmp(key, t)
            if c == 0:
                return  # an equal key is there: TreeSet.add keeps it
            t = self.left[t] if c < 0 else self.right[t]
        self.left[key], self.right[key], self.parent[key], self.red[key] = None, None, at, at is not None
        if at is None:
            self.root = key
            return
        (self.left if c < 0 else self.right)[at] = key
        self._fix(key)

    def _fix(self, x: int) -> None:
        parent, red = self.parent, self.red
        while x != self.root and red[parent[x]]:  # type: ignore[index]
            p = parent[x]
            g = parent[p]  # type: ignore[index]
            assert p is not None
            assert g is not None
            on_left = p == self.left[g]
            uncle = self.right[g] if on_left else self.left[g]
            if uncle is not None and red[uncle]:
                red[p], red[uncle], red[g] = False, False, True
                x = g
                continue
            if x == (self.right[p] if on_left else self.left[p]):
                x = p
                self._rotate(x, on_left)
            p = parent[x]
            assert p is not None
            g = parent[p]
            red[p] = False
            if g is not None:
                red[g] = True
                self._rotate(g, not on_left)
        red[self.root] = False  # type: ignore[index]

    def _rotate(self, x: int, to_left: bool) -> None:
        near, far = (self.right, self.left) if to_left else (self.left, self.right)
        y = near[x]
        assert y is not None
        near[x] = far[y]
        if far[y] is not None:
            self.parent[far[y]] = x  # type: ignore[index]
        self.parent[y] = px = self.parent[x]
        if px is None:
            self.root = y
        elif self.left[px] == x:
            self.left[px] = y
        else:
            self.right[px] = y
        far[y] = x
        self.parent[x] = y

    def first(self) -> int:
        node = self.root
        assert node is not None
        while (nxt := self.left[node]) is not None:
            node = nxt
        return node


def _tree_first(keys: Iterable[int], cmp: Callable[[int, int], int]) -> int:
    """The first key of a :class:`_TreeSet` with comparator ``cmp`` after adding ``keys`` in this order."""
    tree = _TreeSet(cmp)
    for key in keys:
        tree.add(key)
    return tree.first()


def classic_choice(names: list[str], address: str) -> tuple[list[int], list[int]]:
    """The entries (indexes of ``names``) matching the queue ``address``, and the ones ``DestinationMap.chooseValue``
    can take: the first of a ``TreeSet`` sorted by its comparator, into which the matching entries are added in the
    order of a ``HashSet`` of them, which their identity hashes decide (so any order, from one broker start to the
    next). One when a matching entry sorts before every other both ways round; else each that comes first in some
    order of insertion (every order of at most :data:`MAX_RANDOM` entries is tried; ``ConfigError`` beyond)."""
    matching = [i for i, n in enumerate(names) if finds(n, address)]

    def cmp(i: int, j: int) -> int:
        if names[i] == address:
            return -1
        if names[j] == address:
            return 1
        return classic_compare(names[i], names[j])

    first = [m for m in matching if all(cmp(m, e) < 0 and cmp(e, m) > 0 for e in matching if e != m)]
    if first or not matching:
        return matching, first
    if len(matching) > MAX_RANDOM:
        raise ConfigError(f"the queue {address} matches {len(matching)} entries whose ActiveMQ order is not "
                          f"consistent (more than {MAX_RANDOM}, too many to try every order): "
                          + ", ".join(names[m] for m in matching))
    return matching, sorted({_tree_first(order, cmp) for order in permutations(matching)})


def translate(name: str) -> str | None:
    """The policy-file pattern matching the queues Classic's ``name`` matches, or ``None`` when there is none
    (a ``>`` not at the end matches only a queue of that literal name, ``a.>.>`` matches ``a.b`` but not ``a``,
    a word ``#`` is Artemis's wildcard)."""
    words = _paths(name)
    if ANY_DESCENDENT in words[:-1] or ANY_WORDS in words:
        return None
    return DELIMITER.join(ANY_WORDS if w == ANY_DESCENDENT else w for w in words)


def intersection(patterns: list[str]) -> str | None:
    """The pattern matching exactly the addresses all of ``patterns`` match (``#`` only at their ends), or None."""
    split = [p.split(DELIMITER) for p in patterns]
    open_ended = all(w[-1] == ANY_WORDS for w in split)
    fixed = [w for w in split if w[-1] != ANY_WORDS]
    length = len(fixed[0]) if fixed else max(len(w) - 1 for w in split)
    if any(len(w) != length for w in fixed) or any(len(w) - 1 > length for w in split if w[-1] == ANY_WORDS):
        return None
    out = []
    for i in range(length):
        literal = {w[i] for w in split if i < len(w) and w[i] not in (ANY_WORDS, SINGLE_WORD)}
        if len(literal) > 1:
            return None
        out.append(literal.pop() if literal else SINGLE_WORD)
    return DELIMITER.join(out + ([ANY_WORDS] if open_ended else [])) or None


def _address_kinds(patterns: list[str]) -> Iterator[str]:
    """One address of each kind ``patterns`` (``#`` only at their ends) tell apart: every way the words can equal
    the patterns' literals or none of them, up to one word longer than the longest pattern, each kind once (a walk
    that stops where the patterns still alive and the depth were met before)."""
    split = [p.split(DELIMITER) for p in patterns]
    literals = {w for words in split for w in words}
    fresh = next(f"x{n}" for n in range(len(literals) + 1) if f"x{n}" not in literals)
    longest = max(len(w) for w in split) + 1
    seen: set[tuple[int, frozenset[int]]] = set()

    def alive(words: list[str]) -> frozenset[int]:
        out = set()
        for n, pat in enumerate(split):
            ok = True
            for i, w in enumerate(words):
                if i >= len(pat):
                    ok = False
                    break
                if pat[i] == ANY_WORDS:
                    break
                if pat[i] != SINGLE_WORD and pat[i] != w:
                    ok = False
                    break
            if ok:
                out.add(n)
        return frozenset(out)

    todo: list[list[str]] = [[]]
    while todo:
        words = todo.pop()
        if words:
            yield DELIMITER.join(words)
        state = (len(words), alive(words))
        if len(words) >= longest or state in seen:
            continue
        seen.add(state)
        nxt = {split[n][len(words)] for n in state[1] if len(words) < len(split[n])} - {ANY_WORDS, SINGLE_WORD}
        todo.extend([*words, w] for w in sorted(nxt, reverse=True) + [fresh])


# --- reading activemq.xml ------------------------------------------------------------------------------------------


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _ns(tag: Any) -> str:
    return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""


def _value(kind: str, text: str, where: dict[str, str]) -> Any:
    """A property value as Spring converts it for XBean (``CustomNumberEditor`` after removing all whitespace,
    ``CustomBooleanEditor`` after trimming): decimal numbers only, where Spring also reads hexadecimal."""
    if "${" in text:
        raise ConfigError("holds a ${...} placeholder Spring substitutes: give its value (--property)", **where)
    if kind == "boolean":
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ConfigError(f"{text!r} is not a boolean (the broker would not start)", **where)
    compact = "".join(text.split())
    if kind == "double":
        if not _DOUBLE.fullmatch(compact):
            raise ConfigError(f"{text!r} is not a decimal number this import reads", **where)
        return float(compact)
    if not _LONG.fullmatch(compact):
        raise ConfigError(f"{text!r} is not a decimal integer this import reads", **where)
    low, high = _RANGES[kind]
    if not low <= int(compact) <= high:
        raise ConfigError(f"{text!r} does not fit a Java {kind} (the broker would not start)", **where)
    return int(compact)


@dataclass
class _Entry:
    name: str | None  # the queue name; None for the default entry
    settings: dict[str, Any]
    label: str


def _entry(element: ET.Element, label: str, source: str, not_carried: Counter[str]) -> tuple[str | None, _Entry]:
    """One ``<redeliveryPolicy>``: (its destination attribute, the entry)."""
    where = {"file": source, "policy": label}
    if len(element):
        raise ConfigError("a <redeliveryPolicy> with child elements: this import reads its attributes only",
                          **where)
    settings: dict[str, Any] = {}
    destination: tuple[str, str] | None = None
    for attr, raw in element.attrib.items():
        name = _local(attr)
        key = {**where, "key": name}
        if name in DESTINATIONS:
            if destination is not None:
                raise ConfigError(f"gives both {destination[0]} and {name}", **key)
            destination = (name, raw)
        elif name in SETTINGS:
            settings[name] = _value(SETTINGS[name], raw, key)
        elif name == PERCENT:
            if "collisionAvoidanceFactor" in element.attrib:
                raise ConfigError("gives both collisionAvoidancePercent and collisionAvoidanceFactor", **key)
            settings["collisionAvoidanceFactor"] = _value("short", raw, key) * 0.01  # Java: percent * 0.01d
        elif name in CLIENT_ONLY:
            not_carried[name] += 1
        else:
            raise ConfigError(f"{name!r} is not a property of RedeliveryPolicy (the broker would not start)", **key)
    for name in ("initialRedeliveryDelay", "redeliveryDelay"):
        if settings.get(name, PLUGIN_MINIMUM_DELAY) < PLUGIN_MINIMUM_DELAY:
            raise ConfigError(f"the redelivery plugin refuses a {name} under {PLUGIN_MINIMUM_DELAY} ms (the broker "
                              "would not start)", **where, key=name)
    if destination is None:
        return None, _Entry(None, settings, label)
    kind, name = destination
    return kind, _Entry(name, settings, label if kind != "queue" else name)


def _read(source: str, properties: Mapping[str, str]) -> ET.Element:
    try:
        with open(source, "rb") as fh:
            return ET.fromstring(substitute(fh.read().decode("utf-8"), properties))
    except ET.ParseError as exc:
        raise ConfigError(f"not well-formed XML: {exc}", file=source) from exc
    except UnicodeError as exc:
        raise ConfigError(f"not UTF-8: {exc}", file=source) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=source) from exc


def _boolean(element: ET.Element, name: str, default: bool, source: str) -> bool:
    raw = element.get(name)
    return default if raw is None else bool(_value("boolean", raw, {"file": source, "key": name}))


def _children(element: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in element if _local(e.tag) == name]


def _dead_letters(broker: ET.Element, source: str, notes: list[str]) -> str | None:
    """The dead-letter queue of the ``<policyEntry queue=">">``'s strategy: its shared queue, or ``None`` for an
    individual one (each message's own address)."""
    entries = [e for e in broker.iter() if _local(e.tag) == "policyEntry" and _ns(e.tag) == CORE]
    strategies = [(e, s) for e in entries for d in _children(e, "deadLetterStrategy") for s in d]
    catch_all = [(e, s) for e, s in strategies if e.get("queue") == ANY_DESCENDENT]
    others = sorted({e.get("queue") or e.get("topic") or "?" for e, s in strategies
                     if e.get("queue") != ANY_DESCENDENT})
    if others:
        notes.append("the dead-letter strategies of the policy entries for " + ", ".join(others) + " are not "
                     "carried over: set those policies' dead_letter_address by hand")
    if not catch_all:
        return SHARED_DLQ
    _, strategy = catch_all[0]
    kind = _local(strategy.tag)
    if kind == "sharedDeadLetterStrategy":
        queues = [q for d in _children(strategy, "deadLetterQueue") for q in d if _local(q.tag) == "queue"]
        return queues[0].get("physicalName", SHARED_DLQ) if queues else SHARED_DLQ
    if kind == "individualDeadLetterStrategy":
        prefix = strategy.get("queuePrefix", "ActiveMQ.DLQ.Queue.")
        suffix = strategy.get("queueSuffix", "")
        notes.append(f"ActiveMQ names each queue's dead letters {prefix}<queue>{suffix} "
                     "(individualDeadLetterStrategy): reprocess keeps them under each message's own address "
                     "(dlq/address=<queue>/)")
        return None
    if kind == "discarding":
        notes.append("ActiveMQ discards dead letters (<discarding/>): reprocess keeps them, under " + SHARED_DLQ)
        return SHARED_DLQ
    raise ConfigError(f"the dead-letter strategy <{kind}> is not one this import reads", file=source,
                      key="policyEntry.deadLetterStrategy")


def is_activemq_xml(path: str | Path) -> bool:
    """True when the file at ``path`` names ActiveMQ Classic's core namespace (an Artemis ``broker.xml`` never
    does); an unreadable file is left to the importer to report."""
    try:
        with open(path, "rb") as fh:
            return CORE.encode() in fh.read()
    except OSError:
        return False


# --- the import ----------------------------------------------------------------------------------------------------


@dataclass
class ClassicImport:
    """A policy file made from an ``activemq.xml``: its YAML ``text``, the :class:`PolicySet` it reads as, the
    redelivery entries read, what was not carried over, the policies added for Classic's precedence, notes on what
    ActiveMQ does that reprocess does not (it drops nothing), and warnings where Classic's choice is random."""

    text: str
    policies: PolicySet
    entries: int
    not_carried: dict[str, int] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.entries} redelivery entries -> {len(self.policies.policies)} activemq policies"]
        if self.added:
            lines.append("added for ActiveMQ's precedence: " + ", ".join(self.added))
        if self.not_carried:
            lines.append("not carried over: " + ", ".join(f"{k} ({n})" for k, n in sorted(self.not_carried.items())))
        lines += self.notes
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def import_activemq_xml(path: str | Path, properties: Mapping[str, str] | None = None) -> ClassicImport:
    """The redelivery plugin of the ActiveMQ Classic ``activemq.xml`` at ``path`` as a policy file (module
    docstring), its ``${...}`` placeholders given values by ``properties``."""
    source = str(path)
    root = _read(source, properties or {})
    broker = next((e for e in root.iter() if _local(e.tag) == "broker" and _ns(e.tag) == CORE), None)
    if broker is None:
        raise ConfigError(f"no <broker> element of {CORE}: not an ActiveMQ Classic configuration", file=source)
    plugins = [e for e in broker.iter() if _local(e.tag) == "redeliveryPlugin"]
    if not plugins:
        raise ConfigError("no <redeliveryPlugin>: the broker schedules no redelivery (clients' own redelivery "
                          "policies are set on their connection factories, not here)", file=source)
    if len(plugins) > 1:
        raise ConfigError("more than one <redeliveryPlugin>", file=source)
    plugin = plugins[0]
    if not _boolean(broker, "schedulerSupport", False, source):
        raise ConfigError('the redelivery plugin needs schedulerSupport="true" on <broker> (the broker would not '
                          "start)", file=source, key="schedulerSupport")
    notes: list[str] = []
    not_carried: Counter[str] = Counter()
    queues, default, read = _entries(plugin, source, not_carried)
    dlq = _dead_letters(broker, source, notes)
    names = [_queue_name(e, source) for e in queues]
    for n, name in enumerate(names):
        if name in names[:n]:
            raise ConfigError("two entries for one queue: ActiveMQ takes either, depending on their identity hashes",
                              file=source, policy=name)
    policies: list[dict[str, Any]] = [_policy(translate(n) or "", e.settings, dlq) for n, e in zip(names, queues,
                                                                                                  strict=True)]
    policies += _default(default, plugin, policies, dlq, source, notes)
    if not _boolean(plugin, "sendToDlqIfMaxRetriesExceeded", True, source):
        notes.append("sendToDlqIfMaxRetriesExceeded=\"false\": ActiveMQ discards exhausted messages; reprocess "
                     "dead-letters them")
    if not policies:
        raise ConfigError("the redelivery plugin has no queue entry and no default entry: nothing to import",
                          file=source)
    added, warnings = _agree(names, policies, source)
    described = [f"{p} (the entry for {names[e]})" if e < len(names) else f"{p} (the default entry)"
                 for p, e in added]
    doc = {"default_dead_letter_address": dlq or SHARED_DLQ, "policies": policies}
    policy_set = policies_from_mapping(doc, source=source)
    text = _render(source, doc, not_carried, described, notes, warnings)
    assert parse_policies(text, source) == policy_set, "the written file reads back as another policy set"
    return ClassicImport(text, policy_set, read, dict(not_carried), [p for p, _ in added], notes, warnings)


def _entries(plugin: ET.Element, source: str, not_carried: Counter[str]) -> tuple[list[_Entry], _Entry | None, int]:
    """The plugin's queue entries in document order, its default entry, and how many entries were read (the topic
    and temporary ones are counted into ``not_carried``)."""
    queues: list[_Entry] = []
    default: _Entry | None = None
    elements = [e for e in plugin.iter() if _local(e.tag) == "redeliveryPolicy"]
    parents = {child: p for p in plugin.iter() for child in p}
    for n, element in enumerate(elements):
        kind, entry = _entry(element, f"#{n + 1}", source, not_carried)
        if _local(parents[element].tag) == "defaultEntry":
            if kind is not None:
                raise ConfigError(f"the default entry names a {kind}", file=source, policy="defaultEntry", key=kind)
            default = entry
        elif kind is None:
            raise ConfigError("an entry without a destination (queue, topic, tempQueue or tempTopic)", file=source,
                              policy=entry.label)
        elif kind != "queue":
            not_carried[f"{kind} entries"] += 1
        else:
            queues.append(entry)
    return queues, default, len(elements)


def _default(default: _Entry | None, plugin: ET.Element, policies: list[dict[str, Any]], dlq: str | None,
             source: str, notes: list[str]) -> list[dict[str, Any]]:
    """The '#' policy for the queues no entry matches: the default entry, else, with ``fallbackToDeadLetter``, a
    policy dead-lettering at the first failure; none when an entry for '>' matches every queue."""
    if any(p["match"] == ANY_WORDS for p in policies):
        if default is not None:
            notes.append("the default entry is never used for queues (the entry for '>' matches them all): not "
                         "carried over")
        return []
    if default is not None:
        return [_policy(ANY_WORDS, default.settings, dlq)]
    if _boolean(plugin, "fallbackToDeadLetter", True, source):
        notes.append("no default entry: the queues no entry matches are dead-lettered at their first failure "
                     "(fallbackToDeadLetter), policy '#' with maximumRedeliveries 0")
        return [_policy(ANY_WORDS, {"maximumRedeliveries": 0}, dlq)]
    notes.append("no default entry and fallbackToDeadLetter=\"false\": ActiveMQ keeps no record of the failures of "
                 "queues no entry matches; reprocess quarantines them (UNKNOWN_ADDRESS)")
    return []


def _queue_name(entry: _Entry, source: str) -> str:
    assert entry.name is not None
    name, where = entry.name, {"file": source, "policy": entry.name, "key": "queue"}
    if "${" in name:
        raise ConfigError("holds a ${...} placeholder Spring substitutes: give its value (--property)", **where)
    if "," in name or "?" in name:
        raise ConfigError("a composite destination or one with options: write one entry per queue", **where)
    if not name or translate(name) is None:
        raise ConfigError("no policy-file pattern matches what this entry matches ('>' anywhere but at the end "
                          "matches only its literal name, or a queue of one word more; '#' is a wildcard in policy "
                          "files)", **where)
    return name


def _policy(pattern: str, settings: Mapping[str, Any], dlq: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"match": pattern, "profile": "activemq", "settings": dict(settings)}
    if dlq is not None:
        out["dead_letter_address"] = dlq
    return out


def _agree(names: list[str], policies: list[dict[str, Any]], source: str) -> tuple[list[tuple[str, int]],
                                                                                     list[str]]:
    """Make ``policies`` (one per entry of ``names``, then maybe ``#`` for the default) choose, for every kind of
    queue name, the entry Classic chooses, by putting more specific policies first: each the intersection of the
    patterns matching a name where they differ, with the settings of Classic's choice. Returns the added (pattern,
    entry index) pairs and warnings where Classic's choice is random."""
    entries = len(names)
    added: list[tuple[str, int]] = []
    warnings: dict[tuple[int, ...], str] = {}
    while True:
        patterns = [p for p, _ in added] + [str(p["match"]) for p in policies]
        stands_for = [e for _, e in added] + list(range(len(policies)))  # index >= entries: the default's '#'
        order = precedence(patterns)
        fix = None
        for address in _address_kinds(patterns):
            matching, choices = classic_choice(names, address)
            ours = next((stands_for[i] for i in order if matches(patterns[i], address)), None)
            if not matching:
                if ours is not None and ours < entries:
                    raise AssertionError(f"{patterns[order.index(ours)]} matches {address}, no entry does")
                continue
            if len(choices) > 1 and ours in choices:
                key = tuple(sorted(choices))
                warnings.setdefault(key, f"for queues like {address}, ActiveMQ takes the entry for "
                                    + " or ".join(names[c] for c in choices) + " at random (its comparison is not "
                                    f"an order; the identity hashes of its entries decide): this file takes "
                                    f"{names[ours]}'s")
                continue
            if ours in choices:
                continue
            pattern = intersection([translate(names[m]) or "" for m in matching])
            want = choices[0] if len(choices) == 1 else min(choices, key=lambda c: order.index(c + len(added)))
            if pattern is None or pattern in patterns:
                raise ConfigError(f"for the queue {address}, ActiveMQ takes the entry for {names[want]} and no "
                                  "policy this import can add does: add an entry for it", file=source)
            fix = (pattern, want)
            break
        if fix is None:
            break
        if len(added) >= MAX_ADDED:
            raise ConfigError(f"more than {MAX_ADDED} policies would be needed to give ActiveMQ's choice of entry "
                              "everywhere: add entries for the queues where patterns overlap", file=source)
        added.insert(0, fix)
    policies[:0] = [{**copy.deepcopy(policies[entry]), "match": pattern} for pattern, entry in added]
    return added, list(warnings.values())


def _render(source: str, doc: dict[str, Any], not_carried: Counter[str], added: list[str],
            notes: list[str], warnings: list[str]) -> str:
    def wrap(text: str) -> list[str]:
        return textwrap.wrap(text, width=116, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False)

    header = wrap(f"Imported from {Path(source).name} by `reprocess policies import`: the redelivery plugin's "
                  "queue entries in its order, its default entry as '#'. Policy files choose by Artemis's precedence, "
                  "not ActiveMQ's: the import checked that each kind of queue name these entries tell apart takes "
                  "the entry ActiveMQ gives it.")
    if added:
        header += wrap("Added first, so that each queue takes the entry ActiveMQ gives it: " + ", ".join(added) + ".")
    if not_carried:
        header += wrap("Not carried over: " + ", ".join(sorted(not_carried)) + ".")
    for line in notes + [f"Warning: {w}" for w in warnings]:
        header += wrap(line[0].upper() + line[1:] + ".")
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)
    return "\n".join(header) + "\n" + body


__all__ = ["ClassicImport", "classic_choice", "classic_compare", "classic_matches", "finds", "import_activemq_xml",
           "intersection", "is_activemq_xml", "translate"]
