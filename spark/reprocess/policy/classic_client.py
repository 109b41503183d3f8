"""The redelivery policy an ActiveMQ Classic client takes from its broker URL, read as its connection factory reads it.

ActiveMQ Classic schedules redeliveries in the client unless the broker's redelivery plugin does: each consumer's
``RedeliveryPolicy`` (ADR 0001's ``activemq`` profile is its ``ActiveMQMessageConsumer.rollback``). Most clients set it
in their broker URL, ``tcp://mq:61616?jms.redeliveryPolicy.maximumRedeliveries=3``, which
``ActiveMQConnectionFactory.setBrokerURL`` reads; this module reads it the same way (ActiveMQ ``c3580e7``, the Debian
5.17 jars agree):

- the URL is a ``java.net.URI``; one with a query (``tcp://host:61616?...``, ``failover://(...)?...``) gives its options
  from ``getQuery()``, already percent-decoded once, split at ``&`` after its last ``?``, each name and value
  decoded again by ``URLDecoder`` (``+`` is a space); one without (``failover:(tcp://a,tcp://b)?...``) is read as a
  composite, its options after the parenthesis that closes the first, decoded once. A composite without the
  parentheses (``failover:tcp://a?jms...``) gives none: the ``jms.`` options stay in the nested URL, and the client
  runs with the default policy;
- the options named ``jms.redeliveryPolicy.X`` set ``X`` on a new ``RedeliveryPolicy`` (``X``'s first letter
  upper-cased to find its setter, as ``IntrospectionSupport`` does), converted as ``TypeConversionSupport`` converts:
  ``Integer.valueOf``, ``Long.valueOf`` and ``Short.valueOf`` (any Unicode decimal digits, no spaces),
  ``Double.valueOf`` (trimmed, ``d``/``f`` suffixes, hexadecimal), ``Boolean.valueOf`` (``true`` in any case,
  anything else false);
- the other ``jms.`` options go to the prefetch and blob policies and the factory itself; one that none of them can
  take makes the factory refuse the URL when another option was taken, and else stays in the URL for the transport,
  which refuses it when the client connects. Either way this module refuses it.

What a policy file cannot hold (``NaN``, an infinite multiplier) is refused too, not guessed.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprocess.errors import ConfigError
from reprocess.policy.durations import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN

# setters of the Debian 5.17 jars' classes (public, one parameter, by reflection), and the types they take
REDELIVERY_SETTERS = {
    "BackOffMultiplier": "double", "CollisionAvoidancePercent": "short", "Destination": "destination",
    "InitialRedeliveryDelay": "long", "MaximumRedeliveries": "int", "MaximumRedeliveryDelay": "long",
    "PreDispatchCheck": "boolean", "Queue": "name", "RedeliveryDelay": "long", "TempQueue": "boolean",
    "TempTopic": "boolean", "Topic": "name", "UseCollisionAvoidance": "boolean", "UseExponentialBackOff": "boolean"}
PREFETCH_SETTERS = {name: "int" for name in ("All", "DurableTopicPrefetch", "MaximumPendingMessageLimit",
                                             "OptimizeDurableTopicPrefetch", "QueueBrowserPrefetch", "QueuePrefetch",
                                             "TopicPrefetch")}
BLOB_SETTERS = {"BrokerUploadUrl": "string", "BufferSize": "int", "DefaultUploadUrl": "string",
                "UploadStrategy": "object", "UploadUrl": "string"}
FACTORY_SETTERS = {
    **{name: "boolean" for name in (
        "AlwaysSessionAsync", "AlwaysSyncSend", "CheckForDuplicates", "ConsumerExpiryCheckEnabled", "CopyMessageOnSend",
        "DisableTimeStampsByDefault", "DispatchAsync", "ExclusiveConsumer", "MessagePrioritySupported",
        "NestedMapAndListEnabled", "NonBlockingRedelivery", "ObjectMessageSerializationDefered",
        "OptimizeAcknowledge", "OptimizedMessageDispatch", "RmIdFromConnectionId", "SendAcksAsync", "StatsEnabled",
        "TransactedIndividualAck", "TrustAllPackages", "UseAsyncSend", "UseCompression", "UseDedicatedTaskRunner",
        "UseRetroactiveConsumer", "WatchTopicAdvisories")},
    **{name: "int" for name in ("AuditDepth", "AuditMaximumProducerNumber", "CloseTimeout", "ConnectResponseTimeout",
                                "MaxThreadPoolSize", "ProducerWindowSize", "SendTimeout")},
    **{name: "long" for name in ("ConsumerFailoverRedeliveryWaitPeriod", "OptimizeAcknowledgeTimeOut",
                                 "OptimizedAckScheduledAckInterval", "WarnAboutUnstartedConnectionTimeout")},
    **{name: "string" for name in ("BrokerURL", "ClientID", "ClientIDPrefix", "ConnectionIDPrefix", "Password",
                                   "UserName")},
    **{name: "object" for name in ("BlobTransferPolicy", "ClientInternalExceptionListener", "ExceptionListener",
                                   "PrefetchPolicy", "Properties", "RedeliveryPolicy", "RedeliveryPolicyMap",
                                   "RejectedTaskHandler", "SessionTaskRunner", "Transformer", "TransportListener")},
    "TrustedPackages": "list"}
# the RedeliveryPolicy properties that are activemq policy settings, and their Java (and schema) types; the
# activemq.xml import (reprocess.policy.classic_import) reads the same ones
SETTINGS = {"initialRedeliveryDelay": "long", "redeliveryDelay": "long", "maximumRedeliveryDelay": "long",
            "maximumRedeliveries": "int", "backOffMultiplier": "double", "useExponentialBackOff": "boolean",
            "useCollisionAvoidance": "boolean"}
PERCENT = "collisionAvoidancePercent"  # a short: sets collisionAvoidanceFactor to percent * 0.01 (no setter for it)
JAVA_RANGES = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX),
               "short": (-(1 << 15), (1 << 15) - 1)}


def percent_factor(percent: int) -> float:
    """``setCollisionAvoidancePercent``: the factor it sets (Java: ``percent * 0.01d``)."""
    return percent * 0.01
_JAVA_INTEGER = re.compile(r"[+-]?\d+")  # Long.parseLong: Character.digit, any Unicode decimal digit of one char
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)", re.ASCII)
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?\d+)[fFdD]?",
                              re.ASCII)
# java.net.URI: the ASCII characters it takes somewhere (the others are refused everywhere), and where it takes them
_URI_ASCII = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();/?:@&=+$,[]%#")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass
class ClientPolicy:
    """A client's redelivery policy: the ``activemq`` policy ``settings`` its URL gives (those left out are
    ActiveMQ's defaults, as in the profile), the ``jms.`` options it gives that are not policy settings, and
    ``warnings`` where ActiveMQ reads the URL otherwise than it seems to say."""

    settings: dict[str, Any]
    not_carried: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def redact(url: str) -> str:
    """``url`` without its user information (up to an authority's last '@') and the values of options whose name,
    decoded as ActiveMQ decodes it, says password, for messages and files."""
    url = re.sub(r"//[^/?#]*@", "//***@", url)  # userinfo takes ',', '(' and ')' too, not '/', '?' or '#'

    def option(match: re.Match[str]) -> str:
        name = match.group(2)
        for _ in range(3):  # getQuery, then URLDecoder (its parseInt escapes): decoded twice, and once more
            try:
                name = _url_decode(_decode_uri(name), {})
            except ConfigError:
                name = urllib.parse.unquote_plus(name)
        return match.group(1) + match.group(2) + ("=***" if "password" in name.lower() else match.group(3))

    return re.sub(r"([?&(,])([^=&?#(),]*)(=[^&#]*)", option, url)


def client_policy(url: str) -> ClientPolicy:
    """The redelivery policy an ``ActiveMQConnectionFactory`` made with the broker URL ``url`` gives its consumers."""
    read = _read_url(url, {"file": "--client " + redact(url)})
    if read.error is not None:
        raise read.error
    return _policy(read.given or {}, read.not_carried, read.warnings, read.where, read.non_blocking)


Given = dict[str, tuple[str, str | None, Any]]  # RedeliveryPolicy property: (the option, its value, the value set)


class _Unread(ConfigError):
    """A broker URL ActiveMQ refuses before it takes it (``new URI`` throws)."""


class _Undecoded(ConfigError):
    """A broker URL ActiveMQ takes, then throws on before it sets anything from it (URLDecoder)."""


class _Unparsed(ConfigError):
    """A composite URL whose parts ActiveMQ cannot parse: it sets nothing from it, and its transport refuses it."""


@dataclass
class _UrlRead:
    """What ``setBrokerURL(url)`` did: the properties of the policy it set (``None``: it set none), the other options
    it set, warnings, and the error it threw after setting them (``None``: it did not)."""

    given: Given | None
    not_carried: list[str]
    warnings: list[str]
    error: ConfigError | None
    where: dict[str, str]
    thrown: bool = False  # setBrokerURL threw (else the error is the URL it kept, which the transport refuses)
    non_blocking: bool | None = None  # what jms.nonBlockingRedelivery set (None: it is not given)


def _read_url(url: str, where: dict[str, str]) -> _UrlRead:
    """``setBrokerURL(url)``. A URL ``java.net.URI`` refuses is refused at once (a ``ConfigError``); one whose options
    are refused after some were set gives what was set and the error."""
    warnings: list[str] = []
    try:
        options = _options(url, warnings, where)
    except _Unparsed as exc:
        return _UrlRead(None, [], warnings, exc, where, False)
    jms = {name[4:]: value for name, value in options.items() if name.startswith("jms.")}
    if any(_setter(name) == "BrokerURL" for name in jms):
        raise ConfigError("jms.brokerURL in a broker URL makes ActiveMQ read another URL inside this one: not "
                          "followed; give the inner URL", **where)
    given, not_carried, left, non_blocking = _apply(jms, where)
    if any(_setter(name) == "RedeliveryPolicyMap" and value is None for name, value in jms.items()):
        raise ConfigError("jms.redeliveryPolicyMap without a value sets the client's policy map to null, and its "
                          "consumers fail", **where)
    nulled = any(_setter(name) == "RedeliveryPolicy" and value is None for name, value in jms.items())
    if nulled:
        given = {}  # setRedeliveryPolicy(null), set last: the consumers make a default RedeliveryPolicy
        warnings.append("jms.redeliveryPolicy without a value sets the policy to null, set after the others: "
                        "ActiveMQ's consumers take the default policy")
    error = None
    thrown = False
    if left:
        refusal = ("ActiveMQConnectionFactory refuses the URL ('couldn't be set on the ConnectionFactory')"
                   if len(left) < len(jms) else "the client's transport refuses the URL when it connects "
                   "('Invalid connect parameters')")
        error = ConfigError("jms. options no setter takes, or with a value its setter cannot take: "
                            + ", ".join(f"jms.{n}" for n in sorted(left)) + f": {refusal}", **where)
        thrown = len(left) < len(jms)
    elif len(left) < len(jms) and any(value is None for name, value in options.items()
                                      if not name.startswith("jms.")):
        # createRemainingURI (or CompositeData.toURI) writes the other options back: URLEncoder.encode(null)
        error = ConfigError("an option without '=' (or an empty one, as in '&&') beside the jms. ones: "
                            "ActiveMQConnectionFactory fails with a NullPointerException", **where)
        thrown = True
    elif _scheme_end(url) < 0:
        error = ConfigError("a broker URL without a scheme (tcp://, failover:...): the client's transport refuses it "
                            "when it connects ('Transport not scheme specified')", **where)
    return _UrlRead(given if given or nulled else None, not_carried, warnings, error, where, thrown, non_blocking)


def _policy(given: Given, not_carried: list[str], warnings: list[str], where: dict[str, str],
            non_blocking: bool | None = None) -> ClientPolicy:
    """The policy settings of the properties ``given`` (:func:`_apply`); ``non_blocking``, the client's
    ``nonBlockingRedelivery``."""
    settings: dict[str, Any] = {}
    not_carried = list(not_carried)
    warnings = list(warnings)
    for prop, (name, raw, value) in given.items():
        if prop in SETTINGS:
            settings[prop] = value
        elif prop == PERCENT:
            settings["collisionAvoidanceFactor"] = percent_factor(value)
        else:
            not_carried.append(name)
        if isinstance(value, bool) and raw is not None and raw.lower() not in ("true", "false"):
            warnings.append(f"{name} is neither 'true' nor 'false': false to ActiveMQ (Boolean.valueOf: only 'true', "
                            "in any case, is true)")
    multiplier = settings.get("backOffMultiplier")
    if multiplier is not None and (multiplier != multiplier or multiplier in (float("inf"), float("-inf"))):
        raise ConfigError(f"backOffMultiplier {multiplier}: a policy holds finite multipliers only", **where,
                          key="redeliveryPolicy.backOffMultiplier")
    if non_blocking is True and _may_wait_below_zero(settings):
        warnings.append("nonBlockingRedelivery is (or may be) true: ActiveMQ's client hands each delay to a "
                        "java.util.Timer, which refuses one below 0 ('Negative delay.'): its rollback throws and the "
                        "messages are not redelivered, where this policy redelivers them at once")
    return ClientPolicy(settings, sorted(not_carried), warnings)


def _may_wait_below_zero(settings: dict[str, Any]) -> bool:
    """Whether a client with these policy settings (ActiveMQ's defaults for the others) may reach a redelivery delay
    below 0: a negative initial or redelivery delay, or collision avoidance by a factor beyond 1 either way (a
    backed-off delay saturates, never below 0), where it redelivers at all."""
    from reprocess.policy.settings import ActiveMQSettings

    default = ActiveMQSettings()
    redeliveries = settings.get("maximumRedeliveries", default.maximum_redeliveries)
    factor = settings.get("collisionAvoidanceFactor", default.collision_avoidance_factor)
    return (redeliveries == -1 or redeliveries >= 1) and (
        settings.get("initialRedeliveryDelay", default.initial_redelivery_delay) < 0
        or settings.get("redeliveryDelay", default.redelivery_delay) < 0
        or (settings.get("useCollisionAvoidance", default.use_collision_avoidance) is True and abs(factor) > 1))


def _options(url: str, warnings: list[str], where: dict[str, str]) -> dict[str, str | None]:
    """The URL's options as ``setBrokerURL`` finds them (module docstring)."""
    _check_uri(url, where)
    scheme_end = _scheme_end(url)
    body = url.split("#", 1)[0]
    hierarchical = scheme_end < 0 or body[scheme_end + 1:].startswith("/")
    if hierarchical and "?" in body:
        query = _decode_uri(body.split("?", 1)[1])  # URI.getQuery(): decoded once
        options = _parse_query(query, warnings, where)
    else:
        ssp = body[scheme_end + 1:].strip(JAVA_SPACE)
        ssp = (ssp[2:] if ssp.startswith("//") else ssp).strip(JAVA_SPACE)
        composite = _composite_options(ssp, warnings, where)
        if composite is None and "jms." in ssp and not warnings:
            warnings.append("ActiveMQ reads no jms. option of this URL (a composite URL's options go after the "
                            "parenthesis closing its URLs, as in failover:(tcp://a:61616)?jms...): its consumers "
                            "take the default redelivery policy")
        options = composite or {}
    return options


def _apply(options: dict[str, str | None], where: dict[str, str], prefix: str = "jms.") -> tuple[
        Given, list[str], dict[str, str | None], bool | None]:
    """``buildFromMap(options)``: the RedeliveryPolicy properties the options set, the other options set (named with
    ``prefix``, as given), those nothing took, and what ``nonBlockingRedelivery`` was set to (None: not set)."""
    given: Given = {}
    not_carried: list[str] = []
    non_blocking: bool | None = None
    left = dict(options)
    for policy, setters in (("prefetchPolicy.", PREFETCH_SETTERS), ("redeliveryPolicy.", REDELIVERY_SETTERS),
                            ("blobTransferPolicy.", BLOB_SETTERS)):
        seen: dict[str, str] = {}
        for name, value in options.items():
            if not name.startswith(policy):
                continue
            converted = _set(setters, name[len(policy):], value)
            if converted is _UNSET:
                continue
            setter = _setter(name[len(policy):])
            if setter in seen:
                raise ConfigError(f"{prefix}{seen[setter]} and {prefix}{name} set one property, and ActiveMQ takes "
                                  "them in the order of a HashMap: give it once", **where)
            seen[setter] = name
            del left[name]
            if policy == "redeliveryPolicy.":
                given[setter[0].lower() + setter[1:]] = (prefix + name, value, converted)
            else:
                not_carried.append(prefix + name)
    for name, value in list(left.items()):
        converted = _set(FACTORY_SETTERS, name, value)
        if converted is not _UNSET:
            del left[name]
            not_carried.append(prefix + name)
            if _setter(name) == "NonBlockingRedelivery":
                non_blocking = converted
    return given, not_carried, left, non_blocking


_UNSET = object()
_QUALIFIED = ("queue://", "topic://", "temp-queue://", "temp-topic://")
JAVA_SPACE = "".join(chr(c) for c in range(0x21))  # String.trim: every character up to U+0020


def _set(setters: dict[str, str], name: str, value: str | None) -> Any:
    """What ``IntrospectionSupport.setProperty`` sets for the property ``name``, or ``_UNSET`` where it sets nothing
    (no setter of that name, or a value its converter refuses)."""
    if not name:
        return _UNSET
    kind = setters.get(_setter(name))
    if kind is None:
        return _UNSET
    if value is None:  # Method.invoke(target, null): a primitive parameter refuses it; setBrokerURL(null) throws
        return None if kind in ("string", "list", "object", "destination") and _setter(name) != "BrokerURL" else _UNSET
    return _convert(kind, value)


def _setter(name: str) -> str:
    """The setter ``findSetterMethod`` looks for, without its ``set``: the first letter upper-cased (Java's
    Character.toUpperCase, which gives 'I' for the dotless 'ı' too)."""
    first = name[:1].upper()
    return (first if len(first) == 1 else name[:1]) + name[1:]


def _convert(kind: str, value: str) -> Any:
    if kind == "string":
        return value
    if kind in ("name", "destination"):  # new ActiveMQQueue(value), or createDestination(value, QUEUE_TYPE)
        return value if _destination_ok(value, qualified=kind == "destination") else _UNSET
    if kind == "boolean":
        return value.lower() == "true"
    if kind in JAVA_RANGES:
        number = java_integer(value, kind)
        return _UNSET if number is None else number
    if kind == "double":
        text = value.strip(JAVA_SPACE)
        hexadecimal = _JAVA_HEX_DOUBLE.fullmatch(text)
        if hexadecimal:
            try:
                return float.fromhex(hexadecimal.group(1))
            except OverflowError:  # Java rounds it to an infinity
                return float("-inf") if hexadecimal.group(1).startswith("-") else float("inf")
        if not _JAVA_DOUBLE.fullmatch(text):
            return _UNSET
        return float(text[:-1] if text[-1] in "fFdD" else text)
    if kind == "list":  # StringToListOfActiveMQDestinationConverter: "[a, b]", each a queue
        inner = value[1:-1].strip(JAVA_SPACE) if value.startswith("[") and value.endswith("]") else ""
        return value if inner and all(_destination_ok(item.strip(JAVA_SPACE), qualified=True)
                                      for item in java_split(inner, ",")) else _UNSET
    return _UNSET  # no converter from a String


def java_integer(value: str, kind: str = "long") -> int | None:
    """``Long.parseLong`` (``Integer.parseInt``... by ``kind``, of :data:`JAVA_RANGES`): a sign, then decimal
    digits (``Character.digit``: any Unicode decimal digit of one Java char); ``None`` where it throws."""
    if not _JAVA_INTEGER.fullmatch(value) or not all(ord(c) < 0x10000 for c in value):
        return None
    number = int(value)
    low, high = JAVA_RANGES[kind]
    return number if low <= number <= high else None


def java_split(text: str, separator: str) -> list[str]:
    """``String.split``: its trailing empty strings dropped."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _destination_ok(value: str, *, qualified: bool) -> bool:
    """Whether ActiveMQ makes a destination of ``value``: ``createDestination`` strips a ``queue://``-style prefix
    (``qualified``); ``setPhysicalName`` trims it, refuses it empty, parses the options after a '?' (those after its
    last '?', each part with '=' decoded), and makes a queue of each name of a composite ``a,b``."""
    if qualified:
        value = next((value[len(q):] for q in _QUALIFIED if value.startswith(q)), value)
    name = value.strip(JAVA_SPACE)
    if not name:
        return False
    name, _, options = name.partition("?")
    if options:
        for part in java_split(options[options.rfind("?") + 1:], "&"):
            if "=" in part:
                try:
                    for side in part.split("=", 1):
                        _url_decode(side, {})
                except ConfigError:
                    return False
    if "," in name:  # StringTokenizer: empty names skipped
        return all(_destination_ok(piece, qualified=True) for piece in name.split(",") if piece)
    return True


def _parse_query(query: str, warnings: list[str], where: dict[str, str]) -> dict[str, str | None]:
    """``URISupport.parseQuery``: after the last '?', split at '&' (trailing empty parts dropped, as String.split
    drops them), each name and value decoded by ``URLDecoder``; a part without '=' is a name, undecoded, without a
    value. A name given twice keeps its last value, as the HashMap does."""
    query = query[query.rfind("?") + 1:]
    parts = query.split("&")
    while parts and not parts[-1]:
        parts.pop()
    options: dict[str, str | None] = {}
    for part in parts if query else []:
        if "=" in part:
            name, value = part.split("=", 1)
            name, decoded = _url_decode(name, where), _url_decode(value, where)
        else:
            name, decoded = part, None
        if name in options and name.startswith("jms."):
            warnings.append(f"{name} is given twice: ActiveMQ takes the last")
        options[name] = decoded
    return options


def _url_decode(text: str, where: dict[str, str]) -> str:
    """``URLDecoder.decode(text, "UTF-8")``: '+' a space; each run of '%' escapes as UTF-8 bytes, an escape's two
    characters read by ``Integer.parseInt(s, 16)`` (a sign, and any Unicode digit, taken; a negative value or a
    character that is no digit refused), a '%' without two characters after it refused: it throws, and
    ActiveMQConnectionFactory with it."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "+":
            out.append(" ")
            i += 1
        elif ch == "%":
            data = bytearray()
            while i < len(text) and text[i] == "%":
                value = _java_hex(text[i + 1:i + 3]) if i + 3 <= len(text) else None
                if value is None:
                    raise _Undecoded("an option has a '%' escape URLDecoder refuses (not two hexadecimal digits): "
                                     "ActiveMQ refuses the broker URL", **where)
                data.append(value)
                i += 3
            out.append(data.decode("utf-8", errors="replace"))
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _java_hex(digits: str) -> int | None:
    """``Integer.parseInt(digits, 16)`` of a two-character escape, or ``None`` where it throws or is negative."""
    sign = digits[:1] if digits[:1] in "+-" else ""
    body = digits[len(sign):]
    if not body:
        return None
    value = 0
    for c in body:
        digit = _java_digit16(c)
        if digit is None:
            return None
        value = value * 16 + digit
    value = -value if sign == "-" else value
    return value if 0 <= value < 256 else None


def _java_digit16(c: str) -> int | None:
    """``Character.digit(c, 16)``: a Unicode decimal digit, or a Latin letter a-f (ASCII or fullwidth)."""
    if ord(c) >= 0x10000:
        return None
    if c.isdecimal():
        return unicodedata.decimal(c)
    folded = chr(ord(c) - 0xFEE0) if 0xFF21 <= ord(c) <= 0xFF5A else c
    return "abcdef".index(folded.lower()) + 10 if folded.lower() in "abcdef" and len(folded) == 1 and folded.isascii() \
        else None


def _decode_uri(text: str) -> str:
    """``java.net.URI``'s decoding of a component: %XX runs as UTF-8, malformed bytes replaced; '+' stays."""
    return urllib.parse.unquote(text, errors="replace")


def _composite_options(ssp: str, warnings: list[str], where: dict[str, str]) -> dict[str, str | None] | None:
    """``URISupport.parseComposite``'s parameters, or ``None`` where it has none or throws (which the factory
    ignores): the part after the parenthesis that closes the one ``ssp`` starts with."""
    if not ssp.startswith("("):
        return None
    if ssp.count("(") != ssp.count(")"):
        raise _Unparsed("the URL's parentheses do not match: ActiveMQ reads no option of it, and the client's "
                        "transport refuses it when it connects ('Invalid location')", **where)
    depth = 0
    close = -1
    for i, ch in enumerate(ssp):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            close = i
            break
    for component in _split_components(ssp[1:close]):
        try:
            _check_uri(component.strip(JAVA_SPACE), where)
        except ConfigError as exc:
            raise _Unparsed(f"ActiveMQ cannot parse {redact(component.strip(JAVA_SPACE))!r} inside the parentheses "
                            f"({exc.message.split(': ActiveMQ')[0]}): it reads no option of the URL, and the client's "
                            "transport refuses it when it connects ('Invalid location')", **where) from None
    params = ssp[close + 1:].strip(JAVA_SPACE)
    if "?" not in params:
        return None
    return _parse_query(params[params.index("?") + 1:], warnings, where)


def _split_components(text: str) -> list[str]:
    """``URISupport.splitComponents``: at the commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    last = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    parts.append(text[last:])
    return parts


def _scheme_end(url: str) -> int:
    """The index of the ':' ending the URL's scheme, or -1 for a URL without one (java.net.URI: a ':' before any
    '/', '?' or '#')."""
    for i, ch in enumerate(url):
        if ch in "/?#":
            return -1
        if ch == ":":
            return i
    return -1


def _check_uri(url: str, where: dict[str, str]) -> None:
    """Refuses what ``new URI(url)`` refuses (ActiveMQConnectionFactory's 'Invalid broker URI'): a character no
    part of a URI takes, a '%' not followed by two hexadecimal digits (but in an IPv6 scope), a scheme of other
    characters, a scheme without a part after it, an empty authority with nothing after it, brackets around no valid
    IPv6 address or before a port beyond an int, '[' or ']' in a path, a second '#'. Other authority rules are
    java.net.URI's registry-based fallback, which takes the rest."""
    def refuse(why: str) -> ConfigError:
        return _Unread(f"not a URI (java.net.URI refuses it: {why}): ActiveMQ refuses the broker URL", **where)

    for i, ch in enumerate(url):
        if ch.isascii() and ch not in _URI_ASCII:
            raise refuse(f"the character {ch!r} at index {i}")
        if not ch.isascii() and unicodedata.category(ch) in ("Cc", "Zs", "Zl", "Zp"):  # isISOControl, isSpaceChar
            raise refuse(f"the character {ch!r} at index {i}")
    if _ESCAPE.search(_without_scope(url)):  # an IPv6 scope (fe80::1%eth0) takes a bare '%'
        raise refuse("a '%' without two hexadecimal digits")
    if url.count("#") > 1:
        raise refuse("a second '#'")
    end = _scheme_end(url)
    if end == 0:
        raise refuse("no scheme before ':'")
    if end > 0 and not _SCHEME.fullmatch(url[:end]):
        raise refuse(f"the scheme {url[:end]!r}")
    rest = url[end + 1:].split("#", 1)[0]
    if end > 0 and not rest:
        raise refuse("nothing after the scheme")
    if end < 0 or rest.startswith("/"):
        _check_hierarchical(url, end, rest, refuse)


def _without_scope(url: str) -> str:
    """``url`` without the scope of the IPv6 literal of a hierarchical URL's authority, if it has one."""
    match = re.match(r"((?:[A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#\[]*\[[^\]/?#%]*)%[A-Za-z0-9_.]+(\])", url)
    return match.group(1) + url[match.end(2) - 1:] if match else url


def _check_hierarchical(url: str, end: int, rest: str, refuse: Any) -> None:
    """The authority and path of a hierarchical URL (``rest``: after its scheme, without its fragment)."""
    part = rest.split("?", 1)[0]
    if part.startswith("//"):
        authority_end = min([i for i in (part.find("/", 2),) if i >= 0] or [len(part)])
        authority, part = part[2:authority_end], part[authority_end:]
        if url[end + 1:] == "//":
            raise refuse("an empty authority with nothing after it")
        if "[" in authority or "]" in authority:
            _check_ipv6(authority, refuse)
    if "[" in part or "]" in part:
        raise refuse("'[' or ']' in the path")


def _kept_where(error: ConfigError) -> dict[str, str]:
    """The place a ConfigError names, to raise another there."""
    return {k: v for k, v in (("file", error.file), ("policy", error.policy), ("key", error.key)) if v is not None}


def _check_ipv6(authority: str, refuse: Any) -> None:
    """java.net.URI's server authority with an IPv6 literal: ``[userinfo@][address%scope][:port]``, the address a
    valid IPv6 one, the port digits within an int (a bracket forbids the registry-based fallback)."""
    import ipaddress

    match = re.fullmatch(r"(?:[^@\[\]]*@)?\[([0-9A-Fa-f:.]+)(?:%[A-Za-z0-9_.]+)?\](?::([0-9]*))?", authority)
    if match is None:
        raise refuse("'[' or ']' in the authority outside an IPv6 address")
    address = re.sub(r"(?<=[:.])0+(?=[0-9]+(?:\.|$))", "", match.group(1)) if "." in match.group(1) \
        else match.group(1)  # java.net.URI takes an embedded IPv4 address's leading zeros
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise refuse(f"{match.group(1)!r} is not an IPv6 address") from None
    if match.group(2) and int(match.group(2)) > (1 << 31) - 1:
        raise refuse("a port number beyond an int")




# --- jndi.properties ------------------------------------------------------------------------------------------------

PROVIDER_URL = "java.naming.provider.url"  # Context.PROVIDER_URL
DEFAULT_FACTORIES = ("ConnectionFactory", "XAConnectionFactory", "QueueConnectionFactory", "TopicConnectionFactory")
_WHITE = " \t\f"  # Properties: the whitespace of a line
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}


def load_properties(data: bytes, source: str) -> dict[str, str]:
    """``java.util.Properties.load(InputStream)``: ISO-8859-1 text; '#' and '!' comment lines; a line continued by an
    odd number of backslashes at its end, the next one's leading whitespace skipped; the key ending at the first
    '=', ':' or whitespace not escaped; escapes ``\\t \\r \\n \\f \\uXXXX``, any other escaped character itself. A
    key given twice keeps its last value."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(data.decode("latin-1")):
        key_end, value_start, has_separator, escaped = len(line), len(line), False, False
        for i, ch in enumerate(line):
            if ch in "=:" and not escaped:
                key_end, value_start, has_separator = i, i + 1, True
                break
            if ch in _WHITE and not escaped:
                key_end, value_start = i, i + 1
                break
            escaped = not escaped if ch == "\\" else False
        while value_start < len(line):
            ch = line[value_start]
            if ch not in _WHITE:
                if has_separator or ch not in "=:":
                    break
                has_separator = True
            value_start += 1
        where = {"file": source, "key": f"line {number}"}
        out[_unescape(line[:key_end], where)] = _unescape(line[value_start:], where)
    return out


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """``Properties.LineReader``: (the number of the line it starts on, the logical line, its continuations joined).
    While nothing is read of a logical line, a blank line or a comment ('#', '!') is skipped, even after a
    continuation; a comment line is never continued. A file ending in a continuation, even a lone backslash, ends
    a logical line there (an empty one: the key ""), as one whose continuation's line break is a single character at
    the very end of the file does (``LineReader`` returns what it has when it meets the end right after a break,
    before it skips to the next line; after a ``\r\n`` it is past the break)."""
    if text.endswith(("\n", "\r")) and not text.endswith("\r\n") and _continued(
            re.split(r"\r\n|\r|\n", text[:-1])[-1].lstrip(_WHITE)):
        text = text[:-1]
    lines: list[tuple[int, str]] = []
    read = ""
    start = 0
    continued = False  # the last line read ended in a continuation
    for number, natural in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        content = natural.lstrip(_WHITE)
        if not read and (not content or content[0] in "#!"):
            continued = False
            continue
        if not read:
            start = number
        continued = _continued(content)
        if continued:
            read += content[:-1]
            continue
        read += content
        if read:
            lines.append((start, read))
        read = ""
    if read or continued:
        lines.append((start, read))
    return lines


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, where: dict[str, str]) -> str:
    """``Properties.loadConvert``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch != "\\" or i >= len(text):
            out.append(ch)
            continue
        ch = text[i]
        i += 1
        if ch == "u":
            digits = text[i:i + 4]
            if len(digits) < 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError("malformed \\uxxxx escape: java.util.Properties refuses the file", **where)
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    joined = "".join(out)
    return joined.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # Java's char pairs


def jndi_policies(path: str) -> dict[str, ClientPolicy]:
    """The redelivery policy of each connection factory an ``ActiveMQInitialContextFactory`` makes from the
    ``jndi.properties`` file at ``path``: the names of ``connectionFactoryNames`` (else its four defaults), each with
    the file's properties, those under ``connection.<name>.`` renamed over them; ``setProperties`` then sets the
    broker URL (``java.naming.provider.url``, else ``brokerURL``), then a new policy from the
    ``redeliveryPolicy.`` properties when any is set, then the factory's own properties, ``brokerURL`` among them,
    which sets the URL's policy again."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=path) from exc
    properties = load_properties(data, path)
    if not any(k in (PROVIDER_URL, "connectionFactoryNames", "java.naming.factory.initial")
               or k.lower().endswith("brokerurl") or "redeliveryPolicy." in k for k in properties):
        # ActiveMQ would make its default factories of any file; one naming none of these is likely another file
        raise ConfigError(f"no {PROVIDER_URL}, brokerURL, connectionFactoryNames, java.naming.factory.initial or "
                          "redeliveryPolicy.* key: not the jndi.properties of an ActiveMQ client", file=path)
    listed = properties.get("connectionFactoryNames")
    # StringTokenizer: no empty token, but a blank one is kept, trimmed to ""
    names = [t.strip(JAVA_SPACE) for t in (listed or "").split(",") if t] or list(DEFAULT_FACTORIES)
    return {name: _factory_policy(properties, name, path) for name in dict.fromkeys(names)}


def _factory_policy(properties: dict[str, str], name: str, path: str) -> ClientPolicy:
    where = {"file": path, "policy": name}
    prefix = f"connection.{name}."
    env = {k: v for k, v in properties.items() if not k.startswith(prefix)}
    env.update({k[len(prefix):]: v for k, v in properties.items() if k.startswith(prefix)})
    env.pop("xa", None)  # needsXA takes it out
    given: Given | None = None
    not_carried: list[str] = []
    warnings: list[str] = []
    kept: ConfigError | None = None  # what the transport refuses of the URL the factory keeps
    non_blocking: bool | None = None  # nonBlockingRedelivery, set as the policy is: the URL's, its own, the URL's
    url = env.get(PROVIDER_URL) or env.get("brokerURL")
    if url:
        read = _read_url(url, {**where, "key": PROVIDER_URL if env.get(PROVIDER_URL) else "brokerURL"})
        if read.error is not None and read.thrown:  # InitialContext: NamingException("Invalid broker URL")
            raise read.error
        kept = read.error
        given = read.given if read.given is not None else given
        non_blocking = read.non_blocking
        not_carried += read.not_carried
        warnings += read.warnings
    own, others, _, own_non_blocking = _apply({k: v for k, v in env.items() if k != PROVIDER_URL}, where, prefix="")
    given = own or given
    non_blocking = own_non_blocking if own_non_blocking is not None else non_blocking
    setters = [k for k in env if _setter(k) == "BrokerURL"]  # the factory's own setter, set last
    not_carried += [n for n in others if n not in setters]
    if len(setters) > 1:
        raise ConfigError(f"{' and '.join(setters)} both set the broker URL, in the order of a HashMap: give one",
                          **where)
    for key in setters:  # setBrokerURL again; what it throws is only logged
        try:
            again: _UrlRead | None = _read_url(env[key], {**where, "key": key})
        except _Unread:
            again = None  # it threw before taking the URL
        except _Undecoded as exc:  # it took the URL, then threw
            again = _UrlRead(None, [], [], exc, _kept_where(exc), True)
        if again is not None:
            kept = again.error  # the URL is taken first, and kept as given where it throws
            if kept is not None and again.thrown:
                kept = ConfigError(f"{kept.message}; set as the factory's own {key}, ActiveMQ only logs this, keeps "
                                   "the URL as given, and its transport refuses it when it connects",
                                   **_kept_where(kept))
            not_carried += again.not_carried
            warnings += again.warnings
            if again.non_blocking is not None:
                # the factory's own nonBlockingRedelivery and brokerURL's are set in one loop, in a HashMap's order:
                # either may be the last, so where they differ it may be true
                differ = own_non_blocking is not None and own_non_blocking != again.non_blocking
                non_blocking = True if differ else again.non_blocking
            if again.given is not None:
                if (env.get(PROVIDER_URL) or own) and again.given != given:
                    warnings.append(f"{key}'s jms.redeliveryPolicy options replace the policy set before it "
                                    "(ActiveMQ sets the factory's own properties, the broker URL among them, last)")
                given = again.given
    if kept is not None:
        raise kept
    # without a provider URL, brokerURL is read twice, as ActiveMQ reads it: its warnings once
    return _policy(given or {}, sorted(set(not_carried)), list(dict.fromkeys(warnings)), where, non_blocking)


__all__ = ["ClientPolicy", "client_policy", "jndi_policies", "load_properties", "redact"]
