"""The policy file: YAML in, a validated :class:`PolicySet` out, or a ConfigError naming file, policy, key.

.. code-block:: yaml

    default_dead_letter_address: DLQ      # where Artemis would drop a message; we never do
    non_retryable:                        # global rules: straight to the DLQ, reason NON_RETRYABLE
      - error_class: "com\\.acme\\.ValidationError"
    policies:
      - match: "orders.#"                 # Artemis wildcards: '*' one word, '#' any words
        profile: activemq                 # activemq | artemis | rocketmq | stepped | exponential
        settings: {initialRedeliveryDelay: 1000, useExponentialBackOff: true}
        ordered: false                    # hold back later messages of an ordering_key (per address and group)
        non_retryable:                    # rules for this policy only
          - message: "schema .* invalid"
        target: "amqp://${RABBITMQ_USER}:${RABBITMQ_PASSWORD}@mq:5672/%2F"  # optional; else --target
      - match: "#"
        profile: rocketmq
        dead_letter_address: "%DLQ%{consumer_group}"  # {address} and {consumer_group} are each message's
      - match: "trade.#"
        consumer_group: settlement-svc    # this group's messages only, before the policies of no group
        profile: rocketmq
        settings: {maxReconsumeTimes: 3}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from reprocess.errors import ConfigError
from reprocess.policy import wildcard
from reprocess.policy.settings import SETTINGS_BY_PROFILE, AnySettings, ArtemisSettings, Profile, _Bad

_TOP_KEYS = {"policies", "non_retryable", "default_dead_letter_address"}
_POLICY_KEYS = {"match", "profile", "settings", "ordered", "non_retryable", "dead_letter_address", "target", "broker",
                "consumer_group"}
_RULE_KEYS = {"error_class", "message"}
# Python's syntax Java's Pattern refuses (the cycle would fail): named groups (?P, comments (?#, \Z, the flag a (alone
# or among others), conditionals (?(1)..)
_PYTHON_ONLY_REGEX = re.compile(r"\(\?P|\(\?#|\\Z|\(\?[imsux-]*a|\(\?\(")
# a policy's dead_letter_address may name each message's own: "%DLQ%{consumer_group}" (RocketMQ's dead-letter topic),
# "ActiveMQ.DLQ.Queue.{address}" (ActiveMQ's individual strategy); a message without a consumer group goes to the
# file's default_dead_letter_address where its address needs one
DLA_FIELDS = ("address", "consumer_group")
_DLA_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")  # '{{' and '}}' are a literal brace, as in str.format


def dla_parts(template: str) -> list[tuple[bool, str]]:
    """``template`` as (is a field, text) parts: ``"%DLQ%{consumer_group}"`` is ``[(False, "%DLQ%"), (True,
    "consumer_group")]``; ``{{`` and ``}}`` are a literal ``{`` and ``}``, another lone brace itself."""
    parts: list[tuple[bool, str]] = []
    literal, at = "", 0
    for m in _DLA_TOKEN.finditer(template):
        literal += template[at:m.start()]
        if m.group(1) is None:
            literal += m.group(0)[0]
        else:
            if literal:
                parts.append((False, literal))
            parts.append((True, m.group(1)))
            literal = ""
        at = m.end()
    literal += template[at:]
    if literal:
        parts.append((False, literal))
    return parts


def dla_fixed(template: str) -> str | None:
    """The address ``template`` names when it names no field (its doubled braces single), else ``None``."""
    parts = dla_parts(template)
    return None if any(is_field for is_field, _ in parts) else "".join(text for _, text in parts)


def dla_literal(text: str) -> str:
    """``text`` as a dead-letter address that names no field: its braces doubled."""
    return text.replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class NonRetryableRule:
    """Fails straight to the DLQ when the error class matches (whole) and the message matches (anywhere).

    Patterns are regular expressions in the subset Python and Java agree on: the Spark cycle
    evaluates them with ``rlike`` (Java, with the flags that read them as Python does:
    :data:`reprocess.ledger.merge.AS_PYTHON`), the reference with ``re`` (Python).
    """

    error_class: str | None = None
    message: str | None = None

    def matches(self, error_class: str | None, error_message: str | None) -> bool:
        if self.error_class is not None and (
            error_class is None or re.fullmatch(self.error_class, error_class) is None
        ):
            return False
        if self.message is not None and (error_message is None or re.search(self.message, error_message) is None):
            return False
        return True


@dataclass(frozen=True)
class Policy:
    """One entry of ``policies``: which addresses, which profile, its settings."""

    match: str
    profile: Profile
    settings: AnySettings
    ordered: bool = False
    non_retryable: tuple[NonRetryableRule, ...] = ()
    dead_letter_address: str | None = None
    target: str | None = None  # re-drive target of this policy's messages (``${VAR}`` from the environment)
    # the settings the file gives, as written (artemis policies only): what a more specific match merges from
    given: tuple[tuple[str, Any], ...] = ()
    # an artemis policy that is one of the broker's address settings (``broker: false``: added here, such as a '#'
    # giving unmatched addresses Artemis's defaults): only those decide the broker's order on ties
    broker: bool = True
    # only the messages of this consumer group (landing records' consumer_group): taken before every policy without
    # one, for the addresses it matches; None: any message
    consumer_group: str | None = None

    @property
    def name(self) -> str:
        """What the ledger's and the DLQ's ``policy`` column call it: its ``match``, and ``@group`` after a space
        for a consumer group's (a file whose pattern ``a @g`` would read the same is refused)."""
        return self.match if self.consumer_group is None else f"{self.match} @{self.consumer_group}"

    @property
    def gives(self) -> dict[str, Any]:
        """The settings the file gives this policy, null values left out (artemis policies only): what a less
        specific policy may not fill in."""
        return {k: v for k, v in self.given if v is not None}

    @property
    def drops_without_dla(self) -> bool:
        """Artemis drops an exhausted message when no dead-letter-address is set, or an empty one (we never do)."""
        return isinstance(self.settings, ArtemisSettings) and not self.settings.dead_letter_address


# An artemis policy's addresses may match at most this many combinations of the less specific artemis policies that
# match only some of them (``orders.*`` under ``*.eu``, ``*.us``... : one combination per region, and none); each is a
# case the cycle's expressions test for. Those matching all of its addresses (``#``) cost nothing.
MAX_MERGE_COMBINATIONS = 16


@dataclass(frozen=True)
class Variant:
    """One policy as the addresses it resolves see it: ``policy`` (its settings merged as Artemis merges address
    settings), from the file's policy ``base``, for the addresses that also match every policy of ``also`` and none
    of ``never``, for one of the pairs of ``when`` (``None``: every address the base policy resolves)."""

    policy: Policy
    base: int
    when: tuple[tuple[frozenset[int], frozenset[int]], ...] | None = None

    def applies(self, patterns: list[str], address: str) -> bool:
        return self.when is None or any(
            all(wildcard.matches(patterns[j], address) for j in also)
            and not any(wildcard.matches(patterns[j], address) for j in never) for also, never in self.when)


@dataclass(frozen=True)
class PolicySet:
    """All policies of a file, with Artemis's most-specific-match resolution and its merging of address settings.

    An address takes the most specific policy that matches it. When that is an ``artemis`` policy, a setting it
    leaves out comes from the next less specific ``artemis`` policy matching the address that gives it, as Artemis
    merges address settings (``HierarchicalObjectRepository.merge``), then from Artemis's default. Other profiles
    are not merged. The policies as addresses see them are :attr:`variants` (:attr:`effective`, their policies):
    the cycle's expressions and :meth:`resolve_index` number policies in that list."""

    policies: tuple[Policy, ...]
    non_retryable: tuple[NonRetryableRule, ...] = ()
    default_dead_letter_address: str = "DLQ"
    source: str = "<inline>"

    @cached_property
    def precedence(self) -> list[int]:
        """Indexes of the file's policies, most specific first: the first that matches an address applies. The
        ``artemis`` policies are taken as one broker's address settings (:attr:`broker`), so ties among them are
        broken as that broker breaks them (:func:`wildcard.precedence`); other ties keep file order."""
        return wildcard.precedence([p.match for p in self.policies], self.broker)

    @property
    def broker(self) -> list[int]:
        """Indexes of the policies taken as the Artemis broker's address settings, in file order: the ``artemis``
        ones Artemis accepts, but those marked ``broker: false``."""
        return [i for i, p in enumerate(self.policies)
                if p.profile is Profile.ARTEMIS and p.broker and wildcard.artemis_accepts(p.match)]

    @cached_property
    def variants(self) -> tuple[Variant, ...]:
        """Each policy of the file as one or more variants, in file order: one unless it is an ``artemis`` policy
        merging from less specific ones that match only some of its addresses (then one per merged outcome)."""
        order = self.precedence
        out: list[Variant] = []
        for i, p in enumerate(self.policies):
            out.extend(self._merged(i, order[order.index(i) + 1:]) if p.profile is Profile.ARTEMIS
                       else [Variant(p, i)])
        return tuple(out)

    @cached_property
    def effective(self) -> tuple[Policy, ...]:
        """The variants' policies: ``policy_idx`` in the cycle indexes this."""
        return tuple(v.policy for v in self.variants)

    def _merged(self, i: int, later: list[int]) -> list[Variant]:
        p = self.policies[i]
        settled = set(p.gives)  # keys no later policy can change any more
        forced: list[int] = []
        partial: list[int] = []
        for j in later:
            q = self.policies[j]
            if (q.profile is not Profile.ARTEMIS or not (set(q.gives) - settled)
                    or not wildcard.overlap(p.match, q.match)):
                continue  # not an address setting, nothing left to give, or never on the same address
            if wildcard.covers(q.match, p.match):
                forced.append(j)
                settled |= set(q.gives)
            else:
                partial.append(j)
        combos = self._combinations(p, partial)
        outcomes: dict[Any, list[tuple[frozenset[int], frozenset[int]]]] = {}
        for also in combos:
            merged = p.gives
            for j in later:
                if j in forced or j in also:
                    for k, v in self.policies[j].gives.items():
                        merged.setdefault(k, v)
            try:
                settings = ArtemisSettings.parse(merged)
            except _Bad as exc:  # each value was checked in its own policy; kept for a check across keys
                raise ConfigError(f"merged settings: {exc}", file=self.source, policy=p.match,
                                  key=f"settings.{exc.key}") from exc
            # the partial matches that could match beside all of ``also``: the others cannot, no need to test them
            never = frozenset(j for j in partial if j not in also and wildcard.overlap(
                p.match, self.policies[j].match, *(self.policies[m].match for m in also)))
            outcomes.setdefault(settings, []).append((also, never))
        if len(outcomes) == 1:
            return [Variant(replace(p, settings=next(iter(outcomes))), i)]
        return [Variant(replace(p, settings=settings), i, tuple(when)) for settings, when in outcomes.items()]

    def _combinations(self, p: Policy, partial: list[int]) -> list[frozenset[int]]:
        """The sets of ``partial`` policies that match one of ``p``'s addresses together, at most
        :data:`MAX_MERGE_COMBINATIONS` of them."""
        out: list[frozenset[int]] = []

        def extend(chosen: tuple[int, ...], rest: list[int]) -> None:
            if len(out) > MAX_MERGE_COMBINATIONS:
                return
            out.append(frozenset(chosen))
            for n, j in enumerate(rest):
                if wildcard.overlap(p.match, *(self.policies[m].match for m in (*chosen, j))):
                    extend((*chosen, j), rest[n + 1:])

        extend((), partial)
        if len(out) > MAX_MERGE_COMBINATIONS:
            names = ", ".join(self.policies[j].match for j in partial)
            raise ConfigError(
                f"would merge settings from more than {MAX_MERGE_COMBINATIONS} combinations of the less specific "
                f"artemis policies matching some of its addresses ({names}): give the settings it leaves out",
                file=self.source, policy=p.match, key="settings")
        return out

    def _matching(self, address: str, consumer_group: str | None = None) -> list[int]:
        """Indexes of the policies whose pattern matches ``address``, most specific first (:attr:`precedence`): those
        of ``consumer_group`` where any matches, else those of no group."""
        def of(group: str | None) -> list[int]:
            return [i for i in self.precedence
                    if self.policies[i].consumer_group == group and wildcard.matches(self.policies[i].match, address)]

        return (consumer_group is not None and of(consumer_group)) or of(None)

    @cached_property
    def group_precedence(self) -> list[tuple[int, int]]:
        """(file index, :attr:`effective` index) of the policies of a consumer group, most specific first: a
        message of the group takes the first whose pattern matches its address, before any policy of no group."""
        variant = {v.base: n for n, v in enumerate(self.variants)}  # one variant each: they are never artemis
        return [(i, variant[i]) for i in self.precedence if self.policies[i].consumer_group is not None]

    def resolve_index(self, address: str, consumer_group: str | None = None) -> int | None:
        """Index in :attr:`effective` of the policy a message of ``consumer_group`` on ``address`` takes, or
        ``None`` when no pattern matches."""
        matching = self._matching(address, consumer_group)
        if not matching:
            return None
        base, patterns = matching[0], [p.match for p in self.policies]
        for n, v in enumerate(self.variants):
            if v.base == base and v.applies(patterns, address):
                return n
        raise AssertionError(f"no variant of policy {base} applies to {address!r}")  # the variants cover them all

    def merged_from(self, address: str, consumer_group: str | None = None) -> list[str]:
        """The less specific ``artemis`` policies that give ``address`` a setting its own policy leaves out, most
        specific first (empty when its policy gives every setting, or is not an ``artemis`` policy)."""
        order = self._matching(address, consumer_group)
        if not order or self.policies[order[0]].profile is not Profile.ARTEMIS:
            return []
        settled = set(self.policies[order[0]].gives)
        out = []
        for j in order[1:]:
            q = self.policies[j]
            gives = set(q.gives) - settled if q.profile is Profile.ARTEMIS else set()
            if gives:
                out.append(q.match)
                settled |= gives
        return out

    def tie(self, address: str, consumer_group: str | None = None) -> tuple[list[str], str] | None:
        """The patterns matching ``address`` that precedence calls equal to the one it takes, in the order after it,
        and what broke the tie: ``"broker"`` (all are the broker's settings: its order), ``"file"`` (none are: file
        order) or ``"both"`` (the broker's settings in its order, in the places they hold in the file); ``None``
        when there is no tie. A consumer group's policies tie among themselves, in file order."""
        order = self._matching(address, consumer_group)
        if not order:
            return None
        patterns = [p.match for p in self.policies]
        tied = [i for i in order[1:] if wildcard.specificity(patterns[i]) == wildcard.specificity(patterns[order[0]])]
        if not tied:
            return None
        members = {order[0], *tied} & set(self.broker)
        by = "broker" if len(members) == len(tied) + 1 else "file" if not members else "both"
        return [self.policies[i].name for i in tied], by

    def resolve(self, address: str, consumer_group: str | None = None) -> Policy | None:
        """The policy for a message of ``consumer_group`` on ``address`` (its settings merged), or ``None`` when no
        pattern matches (no ``#``)."""
        i = self.resolve_index(address, consumer_group)
        return None if i is None else self.effective[i]

    def is_non_retryable(self, policy: Policy, error_class: str | None, error_message: str | None) -> bool:
        return any(r.matches(error_class, error_message) for r in (*self.non_retryable, *policy.non_retryable))

    def dead_letter_address_for(self, policy: Policy, address: str, consumer_group: str | None = None) -> str:
        """The DLQ partition: the policy's dead-letter address (its ``{address}`` and ``{consumer_group}`` the
        message's), Artemis's DLA, else the original address.

        An Artemis policy without ``dead-letter-address`` goes to ``default_dead_letter_address`` (Artemis would drop
        the message: reason ``NO_DEAD_LETTER_ADDRESS``); so does a message without a consumer group (None or empty)
        where the policy's address names one.
        """
        fixed = self.fixed_dead_letter_address(policy)
        if fixed is not None or policy.dead_letter_address is None:
            return fixed or address
        parts = dla_parts(policy.dead_letter_address)
        fields = {"address": address, "consumer_group": consumer_group}
        if any(is_field and not fields[text] for is_field, text in parts):
            return self.default_dead_letter_address
        return "".join(str(fields[text]) if is_field else text for is_field, text in parts)

    def fixed_dead_letter_address(self, policy: Policy) -> str | None:
        """The policy's dead-letter address when it does not depend on the message (None where it does)."""
        if isinstance(policy.settings, ArtemisSettings):
            return policy.settings.dead_letter_address or self.default_dead_letter_address
        return None if policy.dead_letter_address is None else dla_fixed(policy.dead_letter_address)


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: str, mark: yaml.Mark) -> None:
        super().__init__(f"duplicate key {key!r} at line {mark.line + 1}")
        self.key = key
        self.mark = mark


_Step = tuple[str | int, yaml.Node]  # a mapping key or a list index, and the node it leads to


def _path_to(node: yaml.Node, mark: yaml.Mark, path: tuple[_Step, ...] = ()) -> tuple[_Step, ...] | None:
    """The mapping keys and list indices from ``node`` down to the key node that starts at ``mark``. A node met again
    (an alias inside its own anchor) is not walked again."""
    if isinstance(node, yaml.MappingNode):
        items: list[tuple[str | int, yaml.Node, yaml.Node | None]] = [(str(k.value), v, k) for k, v in node.value]
    elif isinstance(node, yaml.SequenceNode):
        items = [(i, v, None) for i, v in enumerate(node.value)]
    else:
        return None
    for step, value, key in items:
        if key is not None and key.start_mark.index == mark.index:
            return (*path, (step, value))
        if value is node or any(value is above for _, above in path):
            continue
        if value.start_mark.index <= mark.index < value.end_mark.index:
            found = _path_to(value, mark, (*path, (step, value)))
            if found is not None:
                return found
    return None


def _where_duplicate(text: str, exc: _DuplicateKeyError) -> tuple[str | None, str]:
    """The policy (its ``match``, else ``#index``, as every other policy error names it) and the key path (as in
    ``settings.max_deliveries``) of a duplicate key; the key alone where the text does not compose."""
    try:
        root = yaml.compose(text, Loader=_UniqueKeyLoader)  # nodes only: no mapping is constructed, none refused
    except yaml.YAMLError:
        root = None
    path = _path_to(root, exc.mark) if root is not None else None
    if not path:
        return None, exc.key
    policy = None
    if len(path) > 2 and path[0][0] == "policies" and isinstance(path[1][0], int):
        item = path[1][1]
        matches = [v.value for k, v in item.value if k.value == "match" and v.tag == "tag:yaml.org,2002:str"] \
            if isinstance(item, yaml.MappingNode) else []  # a match that is no string: #index, as _policy names it
        policy = str(matches[0]) if matches else f"#{path[1][0]}"
        path = path[2:]
    key = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step, _ in path)
    key = key[1:] if key.startswith(".") else key
    return policy, key


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error, not 'the last one wins', and
    numbers are YAML 1.2's: PyYAML's YAML 1.1 read ``010`` as 8 (octal), ``1:30`` as 90 (base 60) and ``1_000`` as
    1000, where Artemis and ActiveMQ read ``010`` as 10 and the others are no numbers at all."""


_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+)$")
_FLOAT_12 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
                       r"|\.(?:nan|NaN|NAN))$")
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(_INT_TAG, _INT_12, list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_12, list("-+0123456789."))


def _int_12(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith(("0x", "0o")):
        return int(text[2:], 16 if text[1] == "x" else 8)
    return int(text, 10)  # '010' is ten


def _float_12(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).lower()
    return float(text.replace(".inf", "inf").replace(".nan", "nan"))


_UniqueKeyLoader.add_constructor(_INT_TAG, _int_12)
_UniqueKeyLoader.add_constructor(_FLOAT_TAG, _float_12)


class _PolicyDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string the loader reads as a number: PyYAML quotes only YAML 1.1's, so an
    imported dead-letter address '1e3' or a group '0o17' came back as a number."""


def _represent_str(dumper: _PolicyDumper, data: str) -> yaml.ScalarNode:
    if _INT_12.match(data) or _FLOAT_12.match(data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return dumper.represent_str(data)


_PolicyDumper.add_representer(str, _represent_str)


def dump_policies(doc: Any, **options: Any) -> str:
    """``doc`` (a policy file's mapping) as YAML the loader reads back as written (yaml.dump's ``options``)."""
    return str(yaml.dump(doc, Dumper=_PolicyDumper, **options))


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *anchor' merges: keys given here override the merged ones, as YAML intends
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
        if duplicate:
            raise _DuplicateKeyError(str(key), key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_policies(path: str | Path) -> PolicySet:
    """Read and validate a policy file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read policy file: {exc.strerror}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset {exc.start}",
                          file=str(path)) from exc
    return parse_policies(text, source=str(path))


def parse_policies(text: str, source: str = "<inline>") -> PolicySet:
    """Validate YAML text into a :class:`PolicySet`."""
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader that also refuses duplicate keys
    except _DuplicateKeyError as exc:
        policy, key = _where_duplicate(text, exc)
        raise ConfigError(f"duplicate key at line {exc.mark.line + 1}: YAML would silently keep only the last one",
                          file=source, policy=policy, key=key) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", file=source) from exc
    return policies_from_mapping(doc, source=source)


def policies_from_mapping(doc: Any, source: str = "<inline>") -> PolicySet:
    if not isinstance(doc, Mapping):
        raise ConfigError("the top level must be a mapping with a 'policies' list", file=source)
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {sorted(map(str, unknown))}; allowed: {sorted(_TOP_KEYS)}",
                          file=source, key=str(sorted(map(str, unknown))[0]))
    raw_policies = doc.get("policies")
    if not isinstance(raw_policies, list) or not raw_policies:
        raise ConfigError("'policies' must be a non-empty list", file=source, key="policies")
    dla = doc.get("default_dead_letter_address", "DLQ")
    if not isinstance(dla, str) or not dla.strip():
        raise ConfigError("must be a non-empty address", file=source, key="default_dead_letter_address")
    global_rules = _rules(doc.get("non_retryable"), source, None)
    policies = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_policies):
        policy = _policy(raw, i, source)
        if policy.name in seen:
            also = "" if policy.consumer_group is None else f" for consumer group {policy.consumer_group!r}"
            raise ConfigError(f"duplicate match{also}; policy #{seen[policy.name]} already has it (or its name, "
                              f"{policy.name!r})", file=source, policy=policy.name, key="match")
        seen[policy.name] = i
        policies.append(policy)
    out = PolicySet(tuple(policies), global_rules, dla, source)
    _ = out.variants  # an artemis policy merging from too many partial matches is refused now, not at a cycle
    return out


def _policy(raw: Any, index: int, source: str) -> Policy:
    label = f"#{index}"
    if not isinstance(raw, Mapping):
        raise ConfigError("each policy must be a mapping", file=source, policy=label)
    match = raw.get("match")
    if isinstance(match, str):
        label = match
    unknown = set(raw) - _POLICY_KEYS
    if unknown:
        key = sorted(map(str, unknown))[0]
        raise ConfigError(f"unknown key; allowed: {sorted(_POLICY_KEYS)}", file=source, policy=label, key=key)
    why = wildcard.validate_pattern(match) if isinstance(match, str) else "'match' is required and must be a string"
    if why:
        raise ConfigError(f"bad wildcard: {why}", file=source, policy=label, key="match")
    if ">" in str(match).split(wildcard.DELIMITER):  # an address word '>' is possible, a Classic file far likelier
        raise ConfigError("'>' is ActiveMQ Classic's wildcard; policies match with Artemis's: write '#' (any number "
                          "of words) for it", file=source, policy=label, key="match")
    try:
        profile = Profile(str(raw.get("profile")))
    except ValueError:
        raise ConfigError(f"must be one of {[p.value for p in Profile]}, got {raw.get('profile')!r}",
                          file=source, policy=label, key="profile") from None
    settings_raw = raw.get("settings")
    if settings_raw is None:
        settings_raw = {}
    if not isinstance(settings_raw, Mapping):  # 'settings: false' or '[]' was read as no settings: the defaults
        raise ConfigError("'settings' must be a mapping", file=source, policy=label, key="settings")
    try:
        settings = SETTINGS_BY_PROFILE[profile].parse(settings_raw)
    except _Bad as exc:
        raise ConfigError(str(exc), file=source, policy=label, key=f"settings.{exc.key}") from exc
    ordered = raw.get("ordered", False)
    if not isinstance(ordered, bool):
        raise ConfigError(f"must be true or false, got {ordered!r}", file=source, policy=label, key="ordered")
    dla = _dead_letter_address(raw.get("dead_letter_address"), profile, source, label)
    rules = _rules(raw.get("non_retryable"), source, label)
    target = _target(raw.get("target"), source, label)
    given = tuple(settings_raw.items()) if profile is Profile.ARTEMIS else ()
    broker = raw.get("broker", True)
    if not isinstance(broker, bool):
        raise ConfigError(f"must be true or false, got {broker!r}", file=source, policy=label, key="broker")
    if "broker" in raw and profile is not Profile.ARTEMIS:
        raise ConfigError("only artemis policies are a broker's address settings", file=source, policy=label,
                          key="broker")
    return Policy(match, profile, settings, ordered, rules, dla, target, given,  # type: ignore[arg-type]
                  broker=broker, consumer_group=_consumer_group(raw["consumer_group"], profile, source, label)
                  if "consumer_group" in raw else None)


def _consumer_group(group: Any, profile: Profile, source: str, label: str) -> str | None:
    where = {"file": source, "policy": label, "key": "consumer_group"}
    if group is None:
        raise ConfigError("must be a consumer group's name (left out, the policy takes every group's messages)",
                          **where)
    if not isinstance(group, str) or not group:
        raise ConfigError(f"must be a consumer group's name, got {group!r}", **where)
    if profile is Profile.ARTEMIS:
        raise ConfigError("artemis policies are a broker's address settings, which consumer groups do not choose "
                          "among", **where)
    return group


def _dead_letter_address(dla: Any, profile: Profile, source: str, label: str) -> str | None:
    where = {"file": source, "policy": label, "key": "dead_letter_address"}
    if dla is None:
        return None
    if not isinstance(dla, str) or not dla.strip():
        raise ConfigError("must be a non-empty address", **where)
    if profile is Profile.ARTEMIS:
        raise ConfigError("artemis policies name their DLA in settings as 'dead-letter-address'", **where)
    for is_field, text in dla_parts(dla):
        if is_field and text not in DLA_FIELDS:
            raise ConfigError(f"{{{text}}}: a dead-letter address names only each message's {{address}} and "
                              "{consumer_group}", **where)
    return dla


def _target(value: Any, source: str, label: str) -> str | None:
    """A policy's target spec, checked now; ``${VAR}`` is read from the environment when re-driving."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("must be a target spec string", file=source, policy=label, key="target")
    from reprocess.targets.base import expand_target, parse_target

    try:
        parse_target(expand_target(value, check=False))
    except ConfigError as exc:
        raise ConfigError(exc.message, file=source, policy=label, key="target") from exc
    return value


def _rules(raw: Any, source: str, policy: str | None) -> tuple[NonRetryableRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("'non_retryable' must be a list of rules", file=source, policy=policy, key="non_retryable")
    rules = []
    for i, rule in enumerate(raw):
        key = f"non_retryable[{i}]"
        if not isinstance(rule, Mapping) or not rule or set(rule) - _RULE_KEYS:
            raise ConfigError(f"a rule is a mapping with 'error_class' and/or 'message', got {rule!r}",
                              file=source, policy=policy, key=key)
        for field_name in rule:
            pattern = rule[field_name]
            if not isinstance(pattern, str) or not pattern:
                raise ConfigError("must be a non-empty regular expression", file=source, policy=policy,
                                  key=f"{key}.{field_name}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"bad regular expression: {exc}", file=source, policy=policy,
                                  key=f"{key}.{field_name}") from exc
            if _PYTHON_ONLY_REGEX.search(pattern):
                raise ConfigError("use only regex syntax Java and Python share ((?P<..>), (?#..), \\Z, the flag a, "
                                  "(?(..)..) are Python-only)",
                                  file=source, policy=policy, key=f"{key}.{field_name}")
        rules.append(NonRetryableRule(rule.get("error_class"), rule.get("message")))
    return tuple(rules)
