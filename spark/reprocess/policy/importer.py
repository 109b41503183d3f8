"""A policy file from an Artemis ``broker.xml``: its address settings as ``artemis`` policies, in its order.

Read as Artemis's ``FileConfigurationParser`` reads them: the first ``<address-settings>`` element anywhere in the
document, each ``<address-setting match="...">`` under it in document order, child element names compared without
case, values trimmed, a repeated ``match`` kept at its first occurrence (Artemis logs the later ones and ignores
them), an empty ``<dead-letter-address/>`` meaning none. Every address setting becomes a policy, the ones that set
nothing about redelivery too: Artemis merges every setting that matches an address, and the broker's order decides
ties (:func:`reprocess.policy.wildcard.artemis_iteration_order`), so the file keeps them all, in the same order.
Elements about anything but redelivery and dead letters (paging, expiry, auto-creation...) are not policies' business:
they are counted and named, not carried over.
"""

from __future__ import annotations

import re
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reprocess.errors import ConfigError
from reprocess.policy.config import PolicySet, parse_policies, policies_from_mapping
from reprocess.policy.wildcard import ANY_WORDS, DELIMITER, SINGLE_WORD, artemis_accepts

_LONG = re.compile(r"[+-]?[0-9]+")  # Long.parseLong / Integer.parseInt, ASCII digits
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")  # Double.parseDouble, decimal
_NUMBERS = {"redelivery-delay": "long", "max-redelivery-delay": "long", "max-delivery-attempts": "int",
            "redelivery-delay-multiplier": "double", "redelivery-collision-avoidance-factor": "double"}
DEAD_LETTER_ADDRESS = "dead-letter-address"
IMPORTED = (*_NUMBERS, DEAD_LETTER_ADDRESS)  # the elements that become policy settings


@dataclass
class Imported:
    """A policy file made from a ``broker.xml``: its YAML ``text``, the :class:`PolicySet` it reads as, the
    elements not carried over (name: how many address settings had one) and the repeated matches left out."""

    text: str
    policies: PolicySet
    not_carried: dict[str, int] = field(default_factory=dict)
    repeated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{len(self.policies.policies)} address settings -> {len(self.policies.policies)} artemis policies, "
                 "in broker.xml order"]
        if self.repeated:
            lines.append("repeated match(es) left out, as Artemis ignores them: " + ", ".join(self.repeated))
        if self.not_carried:
            lines.append("not about redelivery, not carried over: "
                         + ", ".join(f"{k} ({n})" for k, n in sorted(self.not_carried.items())))
        if not self.catch_all:
            lines.append(NO_CATCH_ALL)
        return "\n".join(lines)

    @property
    def catch_all(self) -> bool:
        """True when an address setting matches every address (``#``)."""
        return any(p.match == ANY_WORDS for p in self.policies.policies)


NO_CATCH_ALL = ("no address setting matches every address ('#'): the broker gives the other addresses its defaults "
                "(10 deliveries, no dead-letter address), where a policy file quarantines their records "
                "(UNKNOWN_ADDRESS); add a policy {match: '#', profile: artemis} for the broker's behaviour")


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _text(element: ET.Element) -> str:
    return "".join(element.itertext()).strip()


def _number(kind: str, text: str, where: dict[str, str]) -> int | float:
    if kind == "double":
        if not _DOUBLE.fullmatch(text):
            raise ConfigError(f"{text!r} is not a decimal number (Artemis would refuse to start)", **where)
        return float(text.rstrip("dDfF"))
    if not _LONG.fullmatch(text):
        raise ConfigError(f"{text!r} is not an integer (Artemis would refuse to start)", **where)
    return int(text)


def _check_wildcards(root: ET.Element, source: str) -> None:
    """Policy files speak Artemis's default wildcard syntax; a broker configured with another one is refused."""
    defaults = {"delimiter": DELIMITER, "any-words": ANY_WORDS, "single-word": SINGLE_WORD}
    for element in root.iter():
        if _local(element.tag) == "wildcard-addresses":
            for child in element:
                name = _local(child.tag)
                if name in defaults and _text(child) != defaults[name]:
                    raise ConfigError(
                        f"<wildcard-addresses> sets {name} to {_text(child)!r}: policy files use Artemis's default "
                        "syntax ('.' between words, '#' any words, '*' one word); rewrite the matches in it",
                        file=source, key=f"wildcard-addresses.{name}")
        if _local(element.tag) == "literal-match-markers" and _text(element):
            raise ConfigError("<literal-match-markers> is set: a literal match has no policy-file form",
                              file=source, key="literal-match-markers")


def _settings(setting: ET.Element, where: dict[str, str], not_carried: Counter[str]) -> dict[str, Any]:
    """One ``<address-setting>``'s redelivery and dead-letter settings; the names of its other elements are counted
    into ``not_carried``."""
    settings: dict[str, Any] = {}
    for child in setting:
        name = _local(child.tag).lower()  # Artemis compares element names without case
        if not name:
            continue  # a comment or processing instruction
        if name not in IMPORTED:
            not_carried[name] += 1
            continue
        text = _text(child)
        key = {**where, "key": f"settings.{name}"}
        if "${" in text:
            raise ConfigError(f"<{name}> holds a ${{...}} property Artemis substitutes at start: give its value", **key)
        if name in settings:
            raise ConfigError(f"<{name}> is given twice in one address-setting", **key)
        settings[name] = text if name == DEAD_LETTER_ADDRESS else _number(_NUMBERS[name], text, key)
    return settings


def import_broker_xml(path: str | Path) -> Imported:
    """The address settings of the Artemis ``broker.xml`` at ``path`` as a policy file (module docstring)."""
    source = str(path)
    try:
        root = ET.parse(source).getroot()
    except ET.ParseError as exc:
        raise ConfigError(f"not well-formed XML: {exc}", file=source) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=source) from exc
    _check_wildcards(root, source)
    block = next((e for e in root.iter() if _local(e.tag) == "address-settings"), None)
    if block is None:
        raise ConfigError("no <address-settings> element: nothing to import", file=source)
    policies: list[dict[str, Any]] = []
    seen: set[str] = set()
    repeated: list[str] = []
    not_carried: Counter[str] = Counter()
    for n, setting in enumerate(e for e in block.iter() if _local(e.tag) == "address-setting"):
        match = setting.get("match")
        if match is None:
            raise ConfigError(f"address-setting #{n + 1} has no match attribute", file=source)
        where = {"file": source, "policy": match}
        if "${" in match:
            raise ConfigError("the match holds a ${...} property Artemis substitutes at start: give its value",
                              **where, key="match")
        if not artemis_accepts(match):
            raise ConfigError("Artemis refuses this match ('#' anywhere but at the end): the broker would not start",
                              **where, key="match")
        if match in seen:
            repeated.append(match)
            continue
        seen.add(match)
        settings = _settings(setting, where, not_carried)
        policies.append({"match": match, "profile": "artemis", "settings": settings})
    if not policies:
        raise ConfigError("<address-settings> holds no <address-setting>: nothing to import", file=source)
    policy_set = policies_from_mapping({"policies": policies}, source=source)  # errors name broker.xml and the match
    text = _render(source, policies, not_carried)
    assert parse_policies(text, source) == policy_set, "the written file reads back as another policy set"
    return Imported(text, policy_set, dict(not_carried), repeated)


def _render(source: str, policies: list[dict[str, Any]], not_carried: Counter[str]) -> str:
    header = [
        f"# Imported from {Path(source).name} by `reprocess policies import`: its address settings, in its order",
        "# (the order decides ties between patterns Artemis ranks equal). A setting an address setting leaves out",
        "# is merged from the less specific ones matching the same address, then Artemis's default, as the broker",
        "# does (docs/adr/0008-artemis-settings-merge.md).",
    ]
    if not_carried:
        header += textwrap.wrap("Not carried over (not about redelivery): " + ", ".join(sorted(not_carried)) + ".",
                                width=116, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False)
    if not any(p["match"] == ANY_WORDS for p in policies):
        header += textwrap.wrap(NO_CATCH_ALL[0].upper() + NO_CATCH_ALL[1:] + ".", width=116, initial_indent="# ",
                                subsequent_indent="# ", break_on_hyphens=False)
    body = yaml.safe_dump({"policies": policies}, sort_keys=False, allow_unicode=True, default_flow_style=None,
                          width=120)
    return "\n".join(header) + "\n" + body


__all__ = ["IMPORTED", "Imported", "import_broker_xml"]
