"""An ActiveMQ Classic client's redelivery policy read from its broker URL, checked against the client's own
ActiveMQConnectionFactory (the Debian activemq jars, through tests/java/ClassicClientPolicy.java)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.java_program import activemq_classpath, run_java

from reprocess.errors import ConfigError
from reprocess.policy.classic_client import ClientPolicy, client_policy, jndi_policies, load_properties, redact

DEFAULTS = {"maximumRedeliveries": 6, "initialRedeliveryDelay": 1000, "redeliveryDelay": 1000,
            "maximumRedeliveryDelay": -1, "backOffMultiplier": 5.0, "useExponentialBackOff": False,
            "useCollisionAvoidance": False, "collisionAvoidanceFactor": 0.15}
FIELDS = list(DEFAULTS)


def _java(urls: list[str], *args: str) -> list[list[str]]:
    text = "".join(u.encode("utf-8").hex() + "\n" for u in urls)
    lines = run_java("ClassicClientPolicy.java", text, *args, classpath=activemq_classpath()).splitlines()
    assert len(lines) == len(urls)
    return [line.split("\t") for line in lines]


def _java_policy(row: list[str]) -> dict[str, object]:
    values = row[1:9]
    out: dict[str, object] = {}
    for name, raw in zip(FIELDS, values, strict=True):
        default = DEFAULTS[name]
        out[name] = (raw == "true") if isinstance(default, bool) else type(default)(float(raw) if isinstance(
            default, float) else int(raw))
    return out


HANDWRITTEN = [
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliverie=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliverie=3&jms.redeliveryPolicy.redeliveryDelay=5",
    "failover:(tcp://127.0.0.1:1,tcp://127.0.0.2:1)?jms.redeliveryPolicy.maximumRedeliveries=3"
    "&jms.redeliveryPolicy.collisionAvoidancePercent=20&timeout=100",
    "failover:tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3",
    "failover://(tcp://127.0.0.1:1)?jms.redeliveryPolicy.initialRedeliveryDelay=2000",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=%zz",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.useExponentialBackOff=yes&jms.redeliveryPolicy.backOffMultiplier=+2.5d",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.\u0131nitialRedeliveryDelay=%D9%A3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries",
    "tcp://127.0.0.1:1?jms.foo=1",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.backOffMultiplier=NaN",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.backOffMultiplier=0x1.8p1&jms.redeliveryPolicy.useExponentialBackOff=TRUE",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=1&jms.redeliveryPolicy.maximumRedeliveries=2",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.redeliveryDelay=2000%26jms.redeliveryPolicy.maximumRedeliveries=9",
    "failover:(tcp://127.0.0.1:1)?jms.redeliveryPolicy.redeliveryDelay=2000%26jms.redeliveryPolicy.maximumRedeliveries"
    "=9",
    "tcp://127.0.0.1:1?jms.prefetchPolicy.all=5&jms.redeliveryPolicy.maximumRedeliveries=-1&jms.useAsyncSend=true",
    "tcp://127.0.0.1:1?jms.prefetchPolicy.all=x&jms.redeliveryPolicy.maximumRedeliveries=0",
    "tcp://127.0.0.1:1 ?jms.redeliveryPolicy.maximumRedeliveries=0",
    "vm://localhost?broker.persistent=false&jms.redeliveryPolicy.maximumRedeliveryDelay=60000",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.backOffMultiplier=%202%20&jms.redeliveryPolicy.maximumRedeliveries=+4",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=2147483648",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.collisionAvoidancePercent=33&jms.redeliveryPolicy.useCollisionAvoidance="
    "true",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.collisionAvoidancePercent=40000",
    "tcp://127.0.0.1:1#frag?jms.redeliveryPolicy.maximumRedeliveries=2",
    "(tcp://127.0.0.1:1)?jms.redeliveryPolicy.maximumRedeliveries=2",
    "failover:(tcp://127.0.0.1:1?x=(1))?jms.redeliveryPolicy.maximumRedeliveries=2",
    "failover:(tcp://127.0.0.1:1?x=(1)?jms.redeliveryPolicy.maximumRedeliveries=2",
    "tcp://[::1]:1?jms.redeliveryPolicy.maximumRedeliveries=2",
    "tcp://127.0.0.1:1/a[b]?jms.redeliveryPolicy.maximumRedeliveries=2",
    "tcp://127.0.0.1:1?jms.userName=a&jms.password=s3cret&jms.redeliveryPolicy.redeliveryDelay=1500",
    "",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=5&",
    "tcp://127.0.0.1:1?&&jms.redeliveryPolicy.maximumRedeliveries=5",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=5&jms.redeliveryPolicy.MaximumRedeliveries=7",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=%25zz&jms.redeliveryPolicy.maximumRedeliveries=1",
    # found by a review: IPv6 scopes and literals, empty authorities, hex overflow, null object options, URLDecoder's
    # parseInt, destination names and lists, composite components java.net.URI refuses
    "tcp://[fe80::1%eth0]:61616?jms.redeliveryPolicy.maximumRedeliveries=2",
    "failover:(tcp://[fe80::1%25eth0]:61616)?jms.redeliveryPolicy.maximumRedeliveries=3",
    "failover:(tcp://)?jms.redeliveryPolicy.maximumRedeliveries=3",
    "failover:(tcp://[1]:1)?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://[1]:1?jms.redeliveryPolicy.maximumRedeliveries=2", "tcp://[::1]:99999999999?jms.redeliveryPolicy.maximumRedeliveries=2",
    "tcp://", "//", "tcp://#f", "tcp://?jms.redeliveryPolicy.maximumRedeliveries=2",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.backOffMultiplier=0x1p1024",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.destination&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=%25%D9%A3%D9%A3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3&jms.clientID=%25+41",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.redeliveryDelay=%F0%9D%9F%A7",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3&jms.trustedPackages=[,a]",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3&jms.trustedPackages=[a,%20,b]",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3&jms.trustedPackages=[a,b]",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=a,queue://&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=a%253F%2525zz&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=a?x=%25zz?y&jms.redeliveryPolicy.maximumRedeliveries=3",
    "conf/jndi.propertes", "tcp://u:p@ss@127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3",
    # and by a second one: a bare '%' in brackets outside an authority, scope characters, embedded IPv4 zeros,
    # composites ActiveMQ cannot parse, empty names in composites and lists
    "failover:(tcp://[fe80::1%eth0]:61999)?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:61999?[%]?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:61999?jms.redeliveryPolicy.maximumRedeliveries=3#[%]",
    "tcp://[fe80::1%br-0a1b]:61999?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://[::ffff:01.2.3.4]:61999?jms.redeliveryPolicy.maximumRedeliveries=3",
    "failover:((tcp://127.0.0.1:61999))?jms.redeliveryPolicy.maximumRedeliveries=3",
    "failover:(tcp://user:pa)ss@127.0.0.1:61999)?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://user:pa,ss@127.0.0.1:61999?jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=a,,b&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=,&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.trustedPackages=[,]&jms.redeliveryPolicy.maximumRedeliveries=3",
    "tcp://127.0.0.1:1?jms.redeliveryPolicy.queue=a?x=%25zz&jms.redeliveryPolicy.maximumRedeliveries=1",
]


def _random_urls(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    bases = ["tcp://127.0.0.1:1", "failover:(tcp://127.0.0.1:1,tcp://127.0.0.2:1)", "failover://(tcp://127.0.0.1:1)",
             "failover:tcp://127.0.0.1:1", "nio+ssl://127.0.0.1:1", "vm://localhost", "127.0.0.1:1",
             "failover:(tcp://127.0.0.1:1?wireFormat.maxInactivityDuration=0)", "tcp://user:pw@127.0.0.1:1/",
             "static:(tcp://127.0.0.1:1", "tcp://127.0.0.1:1#x"]
    names = ["maximumRedeliveries", "initialRedeliveryDelay", "redeliveryDelay", "maximumRedeliveryDelay",
             "backOffMultiplier", "useExponentialBackOff", "useCollisionAvoidance", "collisionAvoidancePercent",
             "preDispatchCheck", "queue", "MaximumRedeliveries", "maximumredeliveries", "redeliverydelay", "",
             "\u0131nitialRedeliveryDelay", "maximumRedeliveries "]
    others = ["jms.prefetchPolicy.all", "jms.prefetchPolicy.queuePrefetch", "jms.useAsyncSend", "jms.clientID",
              "jms.sendTimeout", "jms.bogus", "jms.trustedPackages", "jms.transformer", "timeout",
              "jms.blobTransferPolicy.bufferSize", "jms.redeliveryPolicy"]
    values = ["0", "1", "-1", "3", "+4", "-5", "1000", "2000", "60000", "2147483647", "2147483648",
              "9223372036854775808", "32767", "32768", "\u0663", "%D9%A3", "", "x", "2.5", "2.5d", "1e3", ".5", "5.",
              "0x1p2", "%202%20", "NaN",
              "Infinity", "-Infinity", "1e400", "true", "TRUE", "false", "yes", "tRuE", "%74rue", "+", "[a,b]", "[]",
              "1%2B1", "%zz", "50", "%", "2%26jms.redeliveryPolicy.maximumRedeliveries=1", "a b", "%E2%80%8B1"]
    urls = []
    for _ in range(n):
        options = []
        for _ in range(rng.randint(0, 4)):
            if rng.random() < 0.7:
                name = "jms.redeliveryPolicy." + rng.choice(names)
            else:
                name = rng.choice(others)
            options.append(name if rng.random() < 0.05 else f"{name}={rng.choice(values)}")
        separator = rng.choice(["?", "?", "?", "/?", "??"])
        url = rng.choice(bases) + (separator + "&".join(options) if options or rng.random() < 0.2 else "")
        if rng.random() < 0.05:
            url += rng.choice(["#f", "&", " ", "#a#b", "\t"])
        urls.append(url)
    return urls


def _ours(url: str) -> ClientPolicy | str:
    """The policy read here, or the message refusing the URL."""
    try:
        return client_policy(url)
    except ConfigError as exc:
        return exc.message


def _compare(urls: list[str]) -> int:
    """Each URL read here and by ActiveMQ: the same policy, or both refusing it (or this module refusing what
    ActiveMQ refuses only later, or what a policy cannot hold, saying so). The number of URLs ActiveMQ took."""
    rows = _java(urls)
    connect_checks: list[tuple[str, str]] = []
    took = 0
    for url, row in zip(urls, rows, strict=True):
        ours = _ours(url)
        if isinstance(ours, str):  # refused here
            if row[0] == "refused":
                continue
            kept = bytes.fromhex(row[9]).decode("utf-8")
            multiplier = _java_policy(row)["backOffMultiplier"]
            if "without a scheme" in ours:
                assert ":" not in kept.split("/", 1)[0], (url, ours, row)  # the transport needs one
            elif "Invalid location" in ours:  # a composite ActiveMQ cannot parse: kept as given
                assert kept == url, (url, ours, row)
            elif "when it connects" in ours:
                assert "jms." in kept, (url, ours, row)
                connect_checks.append((url, ours))
            elif "jms.brokerURL" in ours or "redeliveryPolicyMap" in ours:
                assert "brokerURL" in url or "redeliveryPolicyMap" in url  # not followed / consumers fail
            elif "finite multipliers" in ours:
                assert multiplier in (float("inf"), float("-inf")) or multiplier != multiplier, (url, row)
            else:
                assert "HashMap" in ours, (url, ours, row)  # ActiveMQ takes either
            continue
        assert row[0] == "ok", (url, row, ours)
        took += 1
        assert {**DEFAULTS, **ours.settings} == _java_policy(row), (url, ours, row)
        kept = bytes.fromhex(row[9]).decode("utf-8")
        if "jms." in kept.split("#", 1)[0] and not ours.settings:
            assert any("reads no jms. option" in w for w in ours.warnings), (url, kept, ours)
    # where this module says the transport refuses the URL's leftover options, a connection (to a closed port)
    # does refuse them; only tcp URLs connect at once here
    tcp = [(u, m) for u, m in connect_checks if u.startswith("tcp://")][:20]
    if tcp:
        for (url, _), row in zip(tcp, _java([u for u, _ in tcp], "connect"), strict=True):
            assert "Invalid connect parameters" in row[-1], (url, row)
    return took


@pytest.mark.jvm
def test_handwritten_broker_urls_read_as_activemq_reads_them():
    assert _compare(HANDWRITTEN) >= 15


@pytest.mark.jvm
@pytest.mark.parametrize("seed", [1, 2])
def test_random_broker_urls_read_as_activemq_reads_them(seed):
    assert _compare(_random_urls(600, seed)) >= 150


@pytest.mark.unit
def test_what_activemq_reads_of_the_usual_forms():
    plain = client_policy("tcp://mq:61616?jms.redeliveryPolicy.maximumRedeliveries=3"
                          "&jms.redeliveryPolicy.useExponentialBackOff=true")
    assert plain.settings == {"maximumRedeliveries": 3, "useExponentialBackOff": True}
    assert not plain.warnings
    composite = client_policy("failover:(tcp://a:61616,tcp://b:61616)?randomize=false"
                              "&jms.redeliveryPolicy.collisionAvoidancePercent=20&jms.prefetchPolicy.all=10")
    assert composite.settings == {"collisionAvoidanceFactor": 0.2}
    assert composite.not_carried == ["jms.prefetchPolicy.all"]
    nested = client_policy("failover:tcp://a:61616?jms.redeliveryPolicy.maximumRedeliveries=3")
    assert nested.settings == {}
    assert "reads no jms. option" in nested.warnings[0]
    loose = client_policy("tcp://a:61616?jms.redeliveryPolicy.useExponentialBackOff=yes")
    assert loose.settings == {"useExponentialBackOff": False}
    assert "false to ActiveMQ" in loose.warnings[0]
    with pytest.raises(ConfigError, match="jms.redeliveryPolicy.maximumRedeliverie: the client's transport refuses"):
        client_policy("tcp://a:61616?jms.redeliveryPolicy.maximumRedeliverie=3")
    with pytest.raises(ConfigError, match="couldn't be set on the ConnectionFactory"):
        client_policy("tcp://a:61616?jms.redeliveryPolicy.maximumRedeliverie=3&jms.redeliveryPolicy.redeliveryDelay=9")


@pytest.mark.unit
def test_passwords_are_never_repeated():
    url = "tcp://app:hunter2@mq:61616?jms.password=s3cret&jms.redeliveryPolicy.maximumRedeliveries=x"
    assert "hunter2" not in redact(url)
    assert "s3cret" not in redact(url)
    for other in ("tcp://user:pa,ss@h:1", "tcp://u:p@ss@h:1", "failover:(tcp://a:b(c@h:1,tcp://h2:1)",
                  "tcp://h:1?jms.pass%77ord=SECRET", "tcp://h:1?jms.pass%25%D9%A7%D9%A7ord=SECRET"):
        assert not [w for w in ("pa,ss", "p@ss", "b(c", "SECRET") if w in redact(other)], redact(other)
    with pytest.raises(ConfigError) as unparsed:
        client_policy("failover:(tcp://user:s3cret@[zz]:61999)?jms.redeliveryPolicy.maximumRedeliveries=3")
    assert "s3cret" not in str(unparsed.value)
    loose = client_policy("tcp://h:1?jms.redeliveryPolicy.useExponentialBackOff=s3cret")
    assert "s3cret" not in " ".join(loose.warnings)
    with pytest.raises(ConfigError) as caught:
        client_policy(url)
    assert "hunter2" not in str(caught.value)
    assert "s3cret" not in str(caught.value)


def _java_jndi(files: list[Path]) -> list[tuple[list[str], dict[str, list[str]] | str]]:
    """Per file: Java's Properties entries (sorted "hexkey=hexvalue", or ["refused"]) and its factories' policy rows
    by name, or why the context was refused."""
    text = run_java("ClassicClientPolicy.java", "", "jndi", *map(str, files), classpath=activemq_classpath())
    out: list[tuple[list[str], dict[str, list[str]] | str]] = []
    for block in text.split("end\n")[:-1]:
        rows = [line.split("\t") for line in block.splitlines()]
        props = rows[0][1:] if rows[0][0] == "props" else ["refused"]
        if rows[0][0] == "props-refused" or rows[-1][0] == "context-refused":
            out.append((props, rows[-1][-1]))
        else:
            out.append((props, {bytes.fromhex(r[1]).decode("utf-8"): ["ok", *r[2:]] for r in rows[1:]}))
    assert len(out) == len(files)
    return out


URL = "java.naming.provider.url=tcp://127.0.0.1:1"
# found by a review: brokerURL set last (whatever the provider URL did), spelt BrokerURL too, or empty; a line that is
# only a continuation before a comment
JNDI_HANDWRITTEN = [t.encode("latin-1") for t in [
    f"{URL}?jms.bogus=1\nbrokerURL=tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3\n",
    f"{URL}?jms.redeliveryPolicy.maximumRedeliveries=3\nbrokerURL=tcp://127.0.0.1:1?jms.bogus=1\n",
    "brokerURL=tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=4&jms.bogus=1\n",
    "brokerURL=tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=4&x\n",
    f"{URL}\nbrokerURL=\n",
    "java.naming.factory.initial=org.apache.activemq.jndi.ActiveMQInitialContextFactory\n"
    "BrokerURL=tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=5\n",
    f"{URL}?jms.redeliveryPolicy.maximumRedeliveries=3\nBrokerURL=tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=5\n",
    f"{URL}\n\\\n# note \\\nredeliveryPolicy.maximumRedeliveries=1\n",
    f"{URL}\n\\\n!x\n\\\n\nredeliveryPolicy.maximumRedeliveries=2\n",
    f"{URL}?jms.redeliveryPolicy.maximumRedeliveries=3\nbrokerURL=tcp://127.0.0.1:1?jms.redeliveryPolicy."
    "maximumRedeliveries=%25zz\n",
    f"{URL}?jms.redeliveryPolicy.maximumRedeliveries=2\nbrokerURL=failover:tcp://127.0.0.1:1?jms.redeliveryPolicy."
    "maximumRedeliveries=5\n",
    # a continuation at the end of the file: a lone backslash is an empty line (the key ""), with one line break
    # after it too, not two, nor \r\n, nor a blank or a comment
    f"{URL}\n\\", f"{URL}\n\\\n", f"{URL}\n\\\r", f"{URL}\n\\\r\n", f"{URL}\n\\\n\n", f"{URL}\n\\\n  ",
    f"{URL}\n\\\n#c", f"{URL}\nx=1\\", f"{URL}\nx=1\\\n", f"{URL}\n  \\", f"{URL}\r\\", f"{URL}\n#c\\\n",
]]


def _random_jndi(rng: random.Random) -> bytes:
    names = rng.choice([None, "ConnectionFactory", "a, b", "a,,b , a", "  ", " ,x", "a,\\\n   b"])
    urls = ["tcp://127.0.0.1:1", "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliveries=3",
            "failover:(tcp://127.0.0.1:1)?jms.redeliveryPolicy.redeliveryDelay=2500",
            "tcp://127.0.0.1:1?jms.redeliveryPolicy.maximumRedeliverie=3", "tcp://127.0.0.1:1 x", "",
            "tcp://127.0.0.1:1?jms.redeliveryPolicy.useExponentialBackOff=true&jms.prefetchPolicy.all=x"]
    keys = ["redeliveryPolicy.maximumRedeliveries", "redeliveryPolicy.initialRedeliveryDelay",
            "redeliveryPolicy.useExponentialBackOff", "redeliveryPolicy.backOffMultiplier", "redeliveryPolicy.bogus",
            "redeliveryPolicy.collisionAvoidancePercent", "prefetchPolicy.all", "clientID", "sendTimeout"]
    values = ["0", "7", "-1", " 4", "2.5", "TRUE", "yes", "x", "\\u0035", "1\\\n  2", "30"]
    separators = ["=", " = ", ":", " ", "\t:\t", "="]
    lines = []
    if rng.random() < 0.8:
        lines.append(f"java.naming.provider.url{rng.choice(separators)}{rng.choice(urls)}")
    if rng.random() < 0.3:
        lines.append(f"brokerURL={rng.choice(urls)}")
    if names is not None:
        lines.append(f"connectionFactoryNames={names}")
    for _ in range(rng.randint(0, 4)):
        key = rng.choice(keys)
        if rng.random() < 0.3:
            key = f"connection.{rng.choice(['a', 'b', 'ConnectionFactory', 'x'])}.{key}"
        lines.append(f"{key}{rng.choice(separators)}{rng.choice(values)}")
    if rng.random() < 0.2:
        lines.append(f"connection.{rng.choice(['a', 'b'])}.brokerURL={rng.choice(urls)}")
    if rng.random() < 0.3:
        odd = ["# a comment \\", "! another", "   ", "\\u00e9t\\u00e9=1", "bad\\u00zz=1", "key\\=with\\:colon = v\\t"]
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(odd))
    rng.shuffle(lines)
    end = rng.choice(["", "", "", "", "\n", "\\", "\\\n", "\\\r\n", "\\\r", "\n\\"])  # continued at the end
    return (rng.choice(["\n", "\r\n", "\r"]).join(lines) + end).encode("latin-1")


@pytest.mark.jvm
def test_jndi_properties_read_as_activemqs_initial_context_reads_them(tmp_path):
    """Random jndi.properties files: the same entries as java.util.Properties.load, and for each connection factory
    the InitialContext makes, the same policy (or both refusing the file, or this module refusing what ActiveMQ
    refuses only at connect time, as for URLs)."""
    rng = random.Random(5)
    files = []
    for n, text in enumerate([_random_jndi(rng) for _ in range(300)] + JNDI_HANDWRITTEN):
        path = tmp_path / f"{n}.properties"
        path.write_bytes(text)
        files.append(path)
    compared = 0
    for path, (props, java) in zip(files, _java_jndi(files), strict=True):
        try:
            ours_props = load_properties(path.read_bytes(), str(path))
        except ConfigError:
            assert props == ["refused"], path.read_bytes()
            continue
        assert [f"{k}={v}" for k, v in sorted((k.encode().hex(), v.encode().hex())
                                              for k, v in ours_props.items())] == props
        try:
            ours = jndi_policies(str(path))
        except ConfigError as exc:
            message = exc.message
            ours = {}
        else:
            message = ""
        if isinstance(java, str):
            assert message, (path.read_bytes(), java)
            continue
        if message:
            assert "when it connects" in message or "not the jndi.properties" in message, (path.read_bytes(), message)
            continue
        assert set(ours) == set(java), path.read_bytes()
        for name, policy in ours.items():
            assert {**DEFAULTS, **policy.settings} == _java_policy(java[name]), (path.read_bytes(), name)
            compared += 1
    assert compared >= 300


@pytest.mark.unit
def test_a_negative_delay_with_non_blocking_redelivery_is_warned_of(tmp_path):
    """The policy redelivers at once where a delay is below 0, as the client's blocking rollback does; with
    ``nonBlockingRedelivery`` the client hands the delay to a ``java.util.Timer``, which throws on a negative one, and
    the messages are not redelivered. Taken since negative delays are (they were refused before)."""
    base = "tcp://127.0.0.1:1?jms.redeliveryPolicy.initialRedeliveryDelay=-5"
    warned = client_policy(base + "&jms.nonBlockingRedelivery=true")
    assert warned.settings == {"initialRedeliveryDelay": -5}
    assert any("java.util.Timer, which refuses one below 0" in w for w in warned.warnings)
    assert client_policy(base).warnings == []  # blocking: at once, as the policy
    assert client_policy(base + "&jms.nonBlockingRedelivery=false").warnings == []
    assert client_policy(base + "&jms.nonBlockingRedelivery=true&jms.redeliveryPolicy.maximumRedeliveries=0"
                         ).warnings == []  # no redelivery: no delay handed to the timer
    assert client_policy("tcp://127.0.0.1:1?jms.nonBlockingRedelivery=true&jms.redeliveryPolicy.useCollisionAvoidance"
                         "=true&jms.redeliveryPolicy.collisionAvoidancePercent=-150").warnings != []
    jndi = tmp_path / "jndi.properties"
    jndi.write_text(f"java.naming.provider.url={base}\nnonBlockingRedelivery=true\n")
    assert all(any("java.util.Timer" in w for w in p.warnings) for p in jndi_policies(str(jndi)).values())
    jndi.write_text(f"java.naming.provider.url={base}&jms.nonBlockingRedelivery=true\nnonBlockingRedelivery=false\n")
    assert all(p.warnings == [] for p in jndi_policies(str(jndi)).values())  # its own property, set after the URL
    # a brokerURL's and the factory's own, set in one loop in a HashMap's order: either may be last
    jndi.write_text(f"brokerURL={base}&jms.nonBlockingRedelivery=false\nnonBlockingRedelivery=true\n")
    assert all(any("may be" in w for w in p.warnings) for p in jndi_policies(str(jndi)).values())
