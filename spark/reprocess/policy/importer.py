"""A policy file from an Artemis ``broker.xml``: its address settings as ``artemis`` policies, in its order.

Read as a broker reads a ``broker.xml`` it starts with: as UTF-8 text (Artemis reads it in the platform's charset)
whose ``${...}`` properties are given their values (:func:`substitute`), XIncludes resolved, the first
``<address-settings>`` element anywhere in the document, each ``<address-setting match="...">`` under it in document
order, values trimmed of XML whitespace, a repeated ``match`` kept at its first occurrence (Artemis checks and then
ignores the later ones), an empty ``<dead-letter-address/>`` meaning none. Every address setting becomes a policy,
the ones that set nothing about redelivery too: Artemis merges every setting that matches an address, and the
broker's order decides ties (:func:`reprocess.policy.wildcard.artemis_iteration_order`), so the file keeps them all,
in the same order. Elements about anything but redelivery and dead letters (paging, expiry, auto-creation...) are
not policies' business: they are counted and named, not carried over; one spelled like a redelivery element but not
quite (``<max-delivery-attempt>``, ``<Dead-Letter-Address>``: the schema the broker checks is case-sensitive) is an
error, as it would stop the broker.
"""

from __future__ import annotations

import re
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit
from urllib.request import url2pathname
from xml.etree import ElementInclude

from reprocess.errors import ConfigError
from reprocess.policy.config import PolicySet, dump_policies, parse_policies, policies_from_mapping
from reprocess.policy.wildcard import ANY_WORDS, DELIMITER, SINGLE_WORD, artemis_accepts, overlap, validate_pattern

_LONG = re.compile(r"[+-]?[0-9]+")  # Long.parseLong / Integer.parseInt, ASCII digits
# what both the schema's xsd:double and Double.parseDouble take (the schema refuses Java's "1.5d", Java "INF")
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NaN")
XML_SPACE = " \t\r\n"  # what the schema's whitespace collapsing and Java's trim() both remove
_NUMBERS = {"redelivery-delay": "long", "max-redelivery-delay": "long", "max-delivery-attempts": "int",
            "redelivery-delay-multiplier": "double", "redelivery-collision-avoidance-factor": "double"}
DEAD_LETTER_ADDRESS = "dead-letter-address"
IMPORTED = (*_NUMBERS, DEAD_LETTER_ADDRESS)  # the elements that become policy settings


@dataclass
class Imported:
    """A policy file made from a ``broker.xml``: its YAML ``text``, the :class:`PolicySet` it reads as, how many
    address-setting elements were read, the elements not carried over (name: how many address settings had one)
    and the repeated matches left out."""

    text: str
    policies: PolicySet
    elements: int  # <address-setting> elements read
    not_carried: dict[str, int] = field(default_factory=dict)
    repeated: list[str] = field(default_factory=list)
    spelled: list[str] = field(default_factory=list)  # matches ending in a word and '#', written with '.#'
    overridden: str | None = None  # a broker.properties beside broker.xml setting address settings (its note)

    def summary(self) -> str:
        lines = [f"{self.elements} address settings -> {len(self.policies.policies)} artemis policies, "
                 "in broker.xml order"]
        if self.repeated:
            lines.append("repeated match(es) left out, as Artemis ignores them: " + ", ".join(self.repeated))
        if self.spelled:
            lines.append(f"{SPELLED_NOTE}: " + ", ".join(self.spelled))
        naming = {k: n for k, n in self.not_carried.items() if k in DEAD_LETTER_NAMING}
        if naming:
            lines.append(f"{DEAD_LETTER_NAMING_NOTE}: " + ", ".join(f"{k} ({n})" for k, n in sorted(naming.items())))
        others = {k: n for k, n in self.not_carried.items() if k not in DEAD_LETTER_NAMING}
        if others:
            lines.append("not about redelivery, not carried over: "
                         + ", ".join(f"{k} ({n})" for k, n in sorted(others.items())))
        if not self.catch_all:
            lines.append(NO_CATCH_ALL)
        if self.overridden:
            lines.append(self.overridden)
        return "\n".join(lines)

    @property
    def catch_all(self) -> bool:
        """True when an address setting matches every address (``#``)."""
        return any(p.match == ANY_WORDS for p in self.policies.policies)


NO_CATCH_ALL = ("no address setting matches every address ('#'): the broker gives the other addresses its defaults "
                "(10 deliveries, no dead-letter address), where a policy file quarantines their records "
                "(UNKNOWN_ADDRESS); add a policy {match: '#', profile: artemis, broker: false} for the broker's "
                "behaviour (broker: false, as it is not one of the broker's settings, which decide its order on ties)")


def local_name(tag: Any) -> str:
    """An element's or attribute's name without its namespace; "" for a comment or processing instruction."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _text(element: ET.Element) -> str:
    return "".join(element.itertext()).strip(XML_SPACE)


def _number(kind: str, text: str, where: dict[str, str]) -> int | float:
    if kind == "double":
        if not _DOUBLE.fullmatch(text):
            raise ConfigError(f"{text!r} is not a decimal number (the broker would not start)", **where)
        return float(text)
    if not _LONG.fullmatch(text):
        raise ConfigError(f"{text!r} is not an integer (the broker would not start)", **where)
    return int(text)


def _check_wildcards(root: ET.Element, source: str) -> str | None:
    """Policy files speak Artemis's default wildcard syntax: a broker configured with another one is refused.
    Returns the literal-match markers, if set (two characters)."""
    defaults = {"delimiter": DELIMITER, "any-words": ANY_WORDS, "single-word": SINGLE_WORD}
    # Artemis reads the first
    syntax = next((e for e in root.iter() if local_name(e.tag) == "wildcard-addresses"), None)
    for child in syntax if syntax is not None else ():
        name = local_name(child.tag)
        value = _text(child)[:1]  # Artemis takes the first character
        if name in defaults and value != defaults[name]:
            raise ConfigError(
                f"<wildcard-addresses> sets {name} to {value!r}: policy files use Artemis's default syntax ('.' "
                "between words, '#' any words, '*' one word); rewrite the matches in it", file=source,
                key=f"wildcard-addresses.{name}")
    markers = next((e for e in root.iter() if local_name(e.tag) == "literal-match-markers"), None)
    if markers is None:
        return None
    if len(_text(markers)) != 2:
        raise ConfigError("<literal-match-markers> must be two characters (the broker would not start)",
                          file=source, key="literal-match-markers")
    return _text(markers)


# Artemis's naming of the queue it creates on the dead-letter address for each original address (DEAD.<address>.X):
# about dead letters, not redelivery, and not carried over either. reprocess keeps each message's dead letters in the
# DLQ partition of its dead-letter address with its original address, which `reprocess dlq list --address` selects.
DEAD_LETTER_NAMING = frozenset({"auto-create-dead-letter-resources", "dead-letter-queue-prefix",
                                "dead-letter-queue-suffix"})
DEAD_LETTER_NAMING_NOTE = ("dead-letter queue naming, not carried over (the dead letters of each original address "
                           "are kept under their dead-letter address with that address: reprocess dlq list --address "
                           "selects them)")


def _settings(setting: ET.Element, where: dict[str, str], not_carried: Counter[str]) -> dict[str, Any]:
    """One ``<address-setting>``'s redelivery and dead-letter settings; the names of its other elements are counted
    into ``not_carried``."""
    settings: dict[str, Any] = {}
    for child in setting:
        name = local_name(child.tag)
        if not name:
            continue  # a comment or processing instruction
        key = {**where, "key": f"settings.{name}"}
        if name not in IMPORTED:
            near = name.lower() if name.lower() in IMPORTED else next(iter(get_close_matches(name, IMPORTED, 1, 0.9)),
                                                                      None)
            if near:
                raise ConfigError(f"<{name}> is not an element of address-setting (the broker would not start): "
                                  f"<{near}>?", **key)
            not_carried[name] += 1
            continue
        text = _text(child)
        if "${" in text:
            raise ConfigError(f"<{name}> holds a ${{...}} property the broker substitutes: give its value (--property)",
                              **key)
        if name in settings:
            raise ConfigError(f"<{name}> is given twice in one address-setting", **key)
        settings[name] = text if name == DEAD_LETTER_ADDRESS else _number(_NUMBERS[name], text, key)
    return settings


_PROPERTY = re.compile(r"\$\{([^}]*)\}")


def substitute(text: str, properties: Mapping[str, str]) -> str:
    """``${name}`` and ``${name:default}`` replaced as Artemis replaces them when it reads a ``broker.xml``
    (``XMLUtil.replaceSystemPropsInString``): the value given for ``name`` (the broker's system property, here
    ``properties``), else the default after ``:``. A property with neither is left as written, so that a setting
    holding one is an error that names it (the broker would read the JVM's property, else an empty string)."""

    def value(m: re.Match[str]) -> str:
        name, colon, default = m.group(1).strip().partition(":")
        name = name.strip()
        if name in properties:
            return properties[name]
        return default.strip() if colon else m.group(0)

    return _PROPERTY.sub(value, text)


def _loader(source: str, properties: Mapping[str, str]) -> Callable[..., Any]:
    """ElementInclude's loader for a ``broker.xml``'s XIncludes: files only (``file:`` URLs or paths relative to the
    including file), their properties substituted as the broker's are, every failure a :class:`ConfigError`."""

    def load(href: str, parse: str, encoding: str | None = None) -> Any:
        parts = urlsplit(href)
        if parts.scheme != "file":
            raise ConfigError(f"the XInclude {href!r} is not a file", file=source)
        if "${" in href:
            raise ConfigError(f"the XInclude {href!r} holds a ${{...}} property: give its value (--property)",
                              file=source)
        path = url2pathname(parts.path)
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            if parse == "xml":
                node = ET.fromstring(substitute(raw.decode("utf-8"), properties))
                _fallbacks(node, href, source)  # its own includes, relative to it (ElementInclude recurses into it)
                return node
            return substitute(raw.decode(encoding or "utf-8"), properties)
        except OSError as exc:
            raise ConfigError(f"cannot read the XInclude {path}: {exc.strerror}", file=source) from exc
        except (UnicodeError, LookupError) as exc:
            raise ConfigError(f"cannot decode the XInclude {path}: {exc}", file=source) from exc
        except ET.ParseError as exc:
            raise ConfigError(f"not well-formed XML in the XInclude {path}: {exc}", file=source) from exc

    return load


def parse_file(source: str, prepare: Callable[[str], str] | None = None) -> ET.Element:
    """The XML document in the file ``source``; a file that cannot be read, decoded or parsed is a
    :class:`ConfigError` naming it. Without ``prepare`` its bytes are parsed in the encoding its XML declaration
    names (UTF-8 without one), as ActiveMQ Classic's Spring parser reads activemq.xml; with ``prepare`` (Artemis,
    whose loader reads the text in the platform's charset, UTF-8 here, whatever the declaration) the UTF-8 text is
    passed through it first."""
    try:
        with open(source, "rb") as fh:
            raw = fh.read()
        return ET.fromstring(prepare(raw.decode("utf-8")) if prepare else raw)
    except ET.ParseError as exc:
        raise ConfigError(f"not well-formed XML: {exc}", file=source) from exc
    except UnicodeError as exc:
        raise ConfigError(f"not UTF-8: {exc}", file=source) from exc
    except LookupError as exc:  # the declaration names an encoding Python does not know
        raise ConfigError(f"its XML declaration names an encoding that cannot be read: {exc}", file=source) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=source) from exc


_XI = "{http://www.w3.org/2001/XInclude}"


def _fallbacks(root: ET.Element, base: str, source: str) -> None:
    """What Python's ElementInclude does not do of XInclude, as the broker's parser does it: an include whose file is
    missing is replaced by its ``<xi:fallback>`` (the broker starts; the import refused it). An ``xpointer``, which
    takes part of the file, is refused: ElementInclude ignored it and imported the whole file, settings the broker
    never read among them."""
    parents = {child: parent for parent in root.iter() for child in parent}
    for include in [e for e in root.iter(f"{_XI}include")]:
        href = include.get("href", "")
        if "${" in href:  # its file cannot be looked for, nor its fallback taken, before the property has a value
            raise ConfigError(f"the XInclude {href!r} holds a ${{...}} property: give its value (--property)",
                              file=source)
        if include.get("xpointer") is not None:
            raise ConfigError(f"the XInclude {href!r} takes part of its file (xpointer={include.get('xpointer')!r}), "
                              "which this import cannot read as the broker does: include a file holding just those "
                              "settings", file=source)
        fallback = include.find(f"{_XI}fallback")
        if fallback is None or include not in parents:
            continue
        parts = urlsplit(urljoin(base, href))
        if parts.scheme == "file" and not Path(url2pathname(parts.path)).exists():
            parent = parents[include]
            at = list(parent).index(include)
            parent.remove(include)
            for offset, child in enumerate(fallback):
                parent.insert(at + offset, child)


def _read(source: str, properties: Mapping[str, str]) -> ET.Element:
    """The document, its properties substituted (:func:`substitute`) and its XIncludes resolved relative to it
    (Artemis's parser is XInclude-aware: its documentation keeps address settings in a file of their own so); the
    loader turns an include's own failures into ``ConfigError``s."""
    root = parse_file(source, lambda text: substitute(text, properties))
    base = Path(source).resolve().as_uri()
    _fallbacks(root, base, source)
    try:
        ElementInclude.include(root, loader=_loader(source, properties), base_url=base)
    except ElementInclude.FatalIncludeError as exc:
        raise ConfigError(f"an XInclude failed: {exc}", file=source) from exc
    return root


_REGEX_OPERATORS = "+?()[]{}|^\\"  # what java.util.regex reads as operators, '.' and '$' aside (Match escapes them)


def _check_match(match: str, markers: str | None, where: dict[str, str]) -> None:
    if markers and len(match) > 1 and match[0] == markers[0] and match[-1] == markers[1]:
        raise ConfigError(f"a literal match (between the <literal-match-markers> {markers!r}) has no policy-file "
                          "form", **where, key="match")
    if "${" in match:
        raise ConfigError("the match holds a ${...} property the broker substitutes: give its value (--property)",
                          **where, key="match")
    if "::" in match:
        raise ConfigError("a fully qualified queue name: Artemis applies the setting to the address before '::'; "
                          "write that address", **where, key="match")
    if not artemis_accepts(match):
        raise ConfigError("Artemis refuses this match ('#' anywhere but at the end): the broker would not start",
                          **where, key="match")
    operators = sorted(set(match) & set(_REGEX_OPERATORS))
    if operators and ("#" in match or "*" in match):
        # Match.java turns a wildcard match into a regular expression escaping only '.' and '$': "orders+.#" matches
        # orders.created and orderss.x, not orders+.x; the policy file reads every other character literally
        raise ConfigError(f"Artemis reads a wildcard match as a regular expression, in which {' '.join(operators)} "
                          "are operators (orders+.# matches orders.x and orderss.x, not orders+.x); a policy matches "
                          "words literally: write the addresses it is meant for", **where, key="match")


SPELLED_NOTE = ("written with '.#' (the addresses Artemis matches them with: it reads 'x.#' as 'x#', the form "
               "broker.xml had before Artemis 2.42)")


def _spelled(match: str) -> str:
    """``match`` as a policy file writes it: a ``#`` after a word's text (``activemq.management#``, every broker.xml
    ``artemis create`` wrote before 2.42) with a ``.`` before it. Artemis's ``Match`` reads ``x.#`` as ``x#`` before it
    compiles either, so both match ``x`` and the addresses below it, and nothing else."""
    if len(match) > 1 and match.endswith(ANY_WORDS) and match[-2] != DELIMITER:
        return match[:-1] + DELIMITER + ANY_WORDS
    return match


def _check_spelled(policies: list[dict[str, Any]], spelled: dict[str, str], where: dict[str, str]) -> None:
    """Refuses a match written with ``.#`` (:func:`_spelled`) where its one more character changes the broker's
    order: Artemis ranks two ``#`` matches by their length, the longer first, so a ``#`` match of the original's
    length or one more, matching some address alike, was tied with it or ranked before it. Two written so keep
    their ranking by length, but not a tie: the broker breaks it by the order its map iterates the matches in, which
    follows their text (:func:`reprocess.policy.wildcard.artemis_iteration_order`)."""
    for p in policies:
        original = spelled.get(p["match"])
        if original is None:
            continue
        for q in policies:
            if q is p or ANY_WORDS not in q["match"] or not overlap(p["match"], q["match"]):
                continue
            other = spelled.get(q["match"])
            if len(other or q["match"]) in ((len(original),) if other else (len(original), len(original) + 1)):
                raise ConfigError(
                    f"the match {original!r} is written {p['match']!r} in a policy file (the same addresses), one "
                    f"character longer, and Artemis ranks '#' matches by length: {other or q['match']!r}, matching "
                    "some address alike, would rank otherwise than in the broker: write the match with '.#' in "
                    "broker.xml (Artemis 2.42's form), check the order the broker gives, then import it", **where,
                    policy=original, key="match")


_ADDRESS_SETTINGS_KEY = re.compile(r"^[ \t\f]*addressSettings\.", re.MULTILINE)


def _broker_properties(source: str) -> str | None:
    """A note when a ``broker.properties`` beside ``source`` sets address settings: ``artemis run`` applies the one
    in the broker's ``etc`` folder over broker.xml's configuration (``Run.java``), and the import reads broker.xml
    alone."""
    beside = Path(source).parent / "broker.properties"
    try:
        text = beside.read_text(encoding="latin-1")  # java.util.Properties' own charset
    except OSError:
        return None
    keys = len(_ADDRESS_SETTINGS_KEY.findall(text))
    if not keys:
        return None
    return (f"WARNING: {beside} sets address settings ({keys} addressSettings.* key(s)), which the broker applies "
            "over broker.xml's when it starts; they are not imported: write them into broker.xml's address settings "
            "(or the policy file) for the schedules the broker gives")


def import_broker_xml(path: str | Path, properties: Mapping[str, str] | None = None) -> Imported:
    """The address settings of the Artemis ``broker.xml`` at ``path`` as a policy file (module docstring), its
    ``${...}`` properties given values by ``properties`` (the broker's system properties)."""
    source = str(path)
    root = _read(source, properties or {})
    markers = _check_wildcards(root, source)
    block = next((e for e in root.iter() if local_name(e.tag) == "address-settings"), None)
    if block is None:
        raise ConfigError("no <address-settings> element: nothing to import", file=source)
    policies: list[dict[str, Any]] = []
    repeated: list[str] = []
    seen: set[str] = set()
    spelled: dict[str, str] = {}  # a match as the policy file writes it: as broker.xml did
    not_carried: Counter[str] = Counter()
    elements = [e for e in block.iter() if local_name(e.tag) == "address-setting"]
    for n, setting in enumerate(elements):
        match = setting.get("match")
        if match is None:
            raise ConfigError(f"address-setting #{n + 1} has no match attribute", file=source)
        where = {"file": source, "policy": match}
        _check_match(match, markers, where)
        settings = _settings(setting, where, not_carried)  # checked even when repeated, as Artemis parses it first
        if match in seen:  # the broker keys its settings by the match as written
            repeated.append(match)
            continue
        seen.add(match)
        written = _spelled(match)
        if written != match and validate_pattern(written):  # named as broker.xml has it
            raise ConfigError(f"bad wildcard: {validate_pattern(match)}", **where, key="match")
        if any(p["match"] == written for p in policies):  # x# and x.#: their length decides the broker's order
            both = sorted({match, spelled.get(written, written)}, key=len)
            raise ConfigError(f"both {both[0]!r} and {both[1]!r}, which Artemis reads alike, rank by their length "
                              "in the broker: keep one", **where, key="match")
        if written != match:
            spelled[written] = match
        policies.append({"match": written, "profile": "artemis", "settings": settings})
    if not policies:
        raise ConfigError("<address-settings> holds no <address-setting>: nothing to import", file=source)
    _check_spelled(policies, spelled, {"file": source})
    policy_set = policies_from_mapping({"policies": policies}, source=source)  # errors name broker.xml and the match
    overridden = _broker_properties(source)
    text = _render(source, policies, not_carried, list(spelled.values()), overridden)
    assert parse_policies(text, source) == policy_set, "the written file reads back as another policy set"
    return Imported(text, policy_set, len(elements), dict(not_carried), repeated, list(spelled.values()), overridden)


def _render(source: str, policies: list[dict[str, Any]], not_carried: Counter[str], spelled: list[str],
            overridden: str | None) -> str:
    header = [
        f"# Imported from {Path(source).name} by `reprocess policies import`: its address settings, in its order",
        "# (the order decides ties between patterns Artemis ranks equal). A setting an address setting leaves out",
        "# is merged from the less specific ones matching the same address, then Artemis's default, as the broker",
        "# does (docs/adr/0008-artemis-settings-merge.md).",
    ]

    def comment(text: str) -> list[str]:
        """``text`` as comment lines, its first letter a capital."""
        return textwrap.wrap(text[:1].upper() + text[1:], width=116, initial_indent="# ", subsequent_indent="# ",
                             break_on_hyphens=False)

    naming = sorted(k for k in not_carried if k in DEAD_LETTER_NAMING)
    if naming:
        header += comment(f"{DEAD_LETTER_NAMING_NOTE}: " + ", ".join(naming) + ".")
    if spelled:
        header += comment(f"{SPELLED_NOTE}: " + ", ".join(spelled) + ".")
    others = sorted(k for k in not_carried if k not in DEAD_LETTER_NAMING)
    if others:
        header += comment("Not carried over (not about redelivery): " + ", ".join(others) + ".")
    if overridden:
        header += comment(overridden)
    if not any(p["match"] == ANY_WORDS for p in policies):
        header += comment(NO_CATCH_ALL + ".")
    body = dump_policies({"policies": policies}, sort_keys=False, allow_unicode=True, default_flow_style=None,
                          width=120)
    return "\n".join(header) + "\n" + body


__all__ = ["IMPORTED", "XML_SPACE", "Imported", "import_broker_xml", "local_name", "parse_file", "substitute"]
