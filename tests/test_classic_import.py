"""`reprocess policies import` of an ActiveMQ Classic activemq.xml: its redelivery plugin's entries as activemq
policies, each queue given the redelivery entry and the dead-letter queue ActiveMQ gives it. Checked against the
broker's own classes (the Debian activemq package's jars, tests/java/ClassicBrokerChoice.java): its
RedeliveryPolicyMap and java.util.TreeSet for the choice, XBean loading the same activemq.xml for the reading."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tests.java_program import activemq_classpath, run_java
from tests.test_config import _addresses

from reprocess.cli import main
from reprocess.errors import ConfigError
from reprocess.policy import load_policies
from reprocess.policy.classic import classic_choice, intersection, translate
from reprocess.policy.classic_import import import_activemq_xml
from reprocess.policy.reference import delay_ms, exhausted
from reprocess.policy.wildcard import matches

# ActiveMQ's own conf/activemq.xml (the release's, Apache License 2.0) with schedulerSupport and the redelivery plugin
# as ActiveMQ's documentation configures it, plus entries for a few queues and a topic
ACTIVEMQ = Path(__file__).parent / "data" / "activemq" / "activemq.xml"
SCHEMAS = ('xmlns="http://www.springframework.org/schema/beans" '
           'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
           'xsi:schemaLocation="http://www.springframework.org/schema/beans '
           "http://www.springframework.org/schema/beans/spring-beans.xsd http://activemq.apache.org/schema/core "
           'http://activemq.apache.org/schema/core/activemq-core.xsd"')
# a broker XBean builds without starting it: the tests load these files through the broker's own classes
BROKER = 'start="false" useJmx="false" persistent="false" schedulerSupport="true"'


def _plugin(entries: list[str], *, default: str = "", plugin: str = "", broker: str = BROKER,
            policies: str = "") -> str:
    return (f'<beans {SCHEMAS}><broker xmlns="http://activemq.apache.org/schema/core" {broker}>'
            + (f"<destinationPolicy><policyMap>{policies}</policyMap></destinationPolicy>" if policies else "")
            + f"<plugins><redeliveryPlugin {plugin}><redeliveryPolicyMap><redeliveryPolicyMap>"
            + "<redeliveryPolicyEntries>" + "".join(entries) + "</redeliveryPolicyEntries>"
            + (f"<defaultEntry>{default}</defaultEntry>" if default else "")
            + "</redeliveryPolicyMap></redeliveryPolicyMap></redeliveryPlugin></plugins></broker></beans>")


def _write(tmp_path: Path, text: str, name: str = "activemq.xml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _max(ps, queue: str) -> int:  # type: ignore[no-untyped-def]
    policy = ps.resolve(queue)
    assert policy is not None, queue
    return int(policy.settings.maximum_redeliveries)


@pytest.mark.unit
def test_an_activemq_xml_in_the_encoding_its_declaration_names_imports_as_in_utf_8(tmp_path):
    """Spring's parser honours the XML declaration's encoding: an activemq.xml in ISO-8859-1 (a comment in German)
    starts the broker; the import refused it as not UTF-8. A declaration naming an encoding nobody knows is refused
    by name."""
    text = ACTIVEMQ.read_text(encoding="utf-8")
    assert text.startswith("<!--")
    latin = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<!-- Übersicht der Wiederzustellungen -->\n' + text
    path = tmp_path / "latin1.xml"
    path.write_bytes(latin.encode("iso-8859-1"))
    assert [p.match for p in import_activemq_xml(path).policies.policies] == ["SpecialQueue", "orders.#", "*.eu", "#"]
    path.write_bytes(latin.replace("ISO-8859-1", "x-nonesuch").encode("iso-8859-1"))
    with pytest.raises(ConfigError, match="names an encoding that cannot be read: unknown encoding: x-nonesuch"):
        import_activemq_xml(path)


@pytest.mark.unit
def test_activemq_own_configuration_with_the_documented_plugin_imports(tmp_path):
    imported = import_activemq_xml(ACTIVEMQ)
    ps = imported.policies
    assert [p.match for p in ps.policies] == ["SpecialQueue", "orders.#", "*.eu", "#"]
    assert imported.not_carried == {"topic entries": 1}
    assert imported.added == []
    assert imported.warnings == []
    special = ps.resolve("SpecialQueue")
    assert special is not None
    assert special.settings.maximum_redeliveries == 4
    assert special.dead_letter_address == "ActiveMQ.DLQ"
    assert ps.default_dead_letter_address == "ActiveMQ.DLQ"
    # ${eu.queues:*.eu}: Spring's placeholder, its default without a value
    eu = ps.resolve("shop.eu")
    assert eu is not None
    assert eu.settings.redelivery_delay == 3000
    assert eu.settings.maximum_redeliveries == 2
    given = import_activemq_xml(ACTIVEMQ, {"eu.queues": "*.europe"}).policies
    assert [p.match for p in given.policies] == ["SpecialQueue", "orders.#", "*.europe", "#"]
    # ActiveMQ takes '*.eu' for orders.eu as well: the narrower pattern, as Artemis's rule does
    assert ps.resolve("orders.eu") == eu
    orders = ps.resolve("orders")  # 'orders.>' matches 'orders' itself, as '#' does
    assert orders is not None
    assert orders.settings.use_exponential_back_off
    # the plugin's schedule: initial delay, then getNextRedeliveryDelay (x2) capped at maximumRedeliveryDelay
    assert [delay_ms(orders, k) for k in range(1, 7)] == [2000, 4000, 8000, 16000, 32000, 60000]
    assert not exhausted(orders, 6)
    assert exhausted(orders, 7)  # 1 + 6 redeliveries
    default = ps.resolve("billing")
    assert default is not None
    assert default.settings.initial_redelivery_delay == 5000
    assert "processNonPersistent" in imported.summary()  # ActiveMQ drops non-persistent dead letters; we do not
    assert load_policies(_write(tmp_path, imported.text, "p.yaml")).policies == ps.policies


@pytest.mark.unit
def test_entries_activemq_ranks_otherwise_get_a_policy_for_the_queues_where_the_rules_differ(tmp_path):
    """For orders.eu ActiveMQ takes '*.eu' ('*' sorts before 'o'; neither pattern matches the other's name) where
    Artemis's rule takes 'orders.*': the import adds 'orders.eu' with '*.eu''s settings. For 'orders.x', 'orders.*'
    and 'orders.>' each compare after the other, and ActiveMQ takes either: a warning, and the file's choice."""
    path = _write(tmp_path, _plugin(['<redeliveryPolicy queue="orders.*" maximumRedeliveries="1"/>',
                                     '<redeliveryPolicy queue="*.eu" maximumRedeliveries="2"/>',
                                     '<redeliveryPolicy queue="orders.>" maximumRedeliveries="3"/>']))
    imported = import_activemq_xml(path)
    ps = imported.policies
    assert [p.match for p in ps.policies[:1]] == ["orders.eu"]
    assert imported.added == ["orders.eu (the entry for *.eu, dead letters to ActiveMQ.DLQ)"]
    assert {q: _max(ps, q) for q in ("orders.eu", "shop.eu", "orders.us", "orders.us.x", "billing")} == {
        "orders.eu": 2, "shop.eu": 2, "orders.us": 1, "orders.us.x": 3,
        "billing": 0}  # no default entry: fallbackToDeadLetter dead-letters the others at their first failure
    assert len(imported.warnings) == 1
    assert "orders.* or orders.>" in imported.warnings[0]
    assert "orders.eu (the entry for *.eu" in imported.text
    assert "Warning:" in imported.text
    assert load_policies(_write(tmp_path, imported.text, "p.yaml")).policies == ps.policies


SHARED = ('<policyEntry queue="{queue}"><deadLetterStrategy><sharedDeadLetterStrategy><deadLetterQueue>'
          '<queue physicalName="{dlq}"/></deadLetterQueue></sharedDeadLetterStrategy></deadLetterStrategy>'
          "</policyEntry>")
INDIVIDUAL = ('<policyEntry queue="{queue}"><deadLetterStrategy><individualDeadLetterStrategy queuePrefix="DLQ."/>'
              "</deadLetterStrategy></policyEntry>")
# ActiveMQ's own prefix (ActiveMQ.DLQ.Queue.) and a suffix
SUFFIXED = ('<policyEntry queue="{queue}"><deadLetterStrategy><individualDeadLetterStrategy queueSuffix=".{{x}}"/>'
            "</deadLetterStrategy></policyEntry>")


@pytest.mark.unit
def test_dead_letters_follow_the_policy_entry_activemq_takes_for_each_queue(tmp_path):
    """'>' sends dead letters to each queue's own DLQ (individual); 'orders.>' has no strategy, so PolicyEntry's
    default (shared, ActiveMQ.DLQ) applies to its queues; 'orders.eu.>' a shared queue of its own. One redelivery
    entry ('orders.>') spans all three: the import adds 'orders.eu.#' for the last."""
    policies = ("<policyEntries>" + INDIVIDUAL.format(queue=">") + '<policyEntry queue="orders.>" memoryLimit="1mb"/>'
                + SHARED.format(queue="orders.eu.>", dlq="eu.dead") + "</policyEntries>")
    imported = import_activemq_xml(_write(tmp_path, _plugin(
        ['<redeliveryPolicy queue="orders.>" maximumRedeliveries="3"/>'],
        default='<redeliveryPolicy maximumRedeliveries="9"/>', policies=policies)))
    ps = imported.policies

    def dlq(queue: str) -> str:
        policy = ps.resolve(queue)
        assert policy is not None
        return ps.dead_letter_address_for(policy, queue)

    assert {q: (_max(ps, q), dlq(q)) for q in ("orders.x", "orders.eu.x", "orders.eu", "billing")} == {
        "orders.x": (3, "ActiveMQ.DLQ"), "orders.eu.x": (3, "eu.dead"), "orders.eu": (3, "eu.dead"),
        "billing": (9, "DLQ.billing")}  # the individual strategy's queuePrefix before each queue's name
    assert imported.added == ["orders.eu.# (the entry for orders.>, dead letters to eu.dead)"]
    assert "dead_letter_address: DLQ.{address}" in imported.text


@pytest.mark.unit
def test_dead_letters_of_a_narrower_policy_entry_and_many_literal_ones(tmp_path):
    """'orders.*' sends dead letters to orders.DLQ, 'orders.>' (the redelivery entry) and the others to ActiveMQ.DLQ:
    the policy for 'orders.#' keeps ActiveMQ.DLQ (its typical queue is longer than 'orders.*' matches) and
    'orders.*' is added. Seventy literal policy entries under an individual '>' add seventy policies."""
    policies = "<policyEntries>" + SHARED.format(queue="orders.*", dlq="orders.DLQ") + "</policyEntries>"
    ps = import_activemq_xml(_write(tmp_path, _plugin(['<redeliveryPolicy queue="orders.>"/>'],
                                                      policies=policies))).policies
    got = {q: ps.dead_letter_address_for(ps.resolve(q), q) for q in ("orders", "orders.x", "orders.a.b")}  # type: ignore[arg-type]
    assert got == {"orders": "ActiveMQ.DLQ", "orders.x": "orders.DLQ", "orders.a.b": "ActiveMQ.DLQ"}
    many = "<policyEntries>" + INDIVIDUAL.format(queue=">") + "".join(
        SHARED.format(queue=f"app.q{n}", dlq=f"dead{n}") for n in range(70)) + "</policyEntries>"
    imported = import_activemq_xml(_write(tmp_path, _plugin([], default='<redeliveryPolicy/>', policies=many)))
    assert len(imported.added) == 70
    assert imported.policies.dead_letter_address_for(imported.policies.resolve("app.q42"), "app.q42") == "dead42"  # type: ignore[arg-type]
    assert imported.policies.dead_letter_address_for(imported.policies.resolve("app.x"), "app.x") == "DLQ.app.x"  # type: ignore[arg-type]


@pytest.mark.unit
def test_what_activemq_drops_is_kept_and_said(tmp_path):
    quiet = _plugin(['<redeliveryPolicy queue="a.>" maximumRedeliveries="1"/>'],
                    plugin='fallbackToDeadLetter="false" sendToDlqIfMaxRetriesExceeded="false"')
    imported = import_activemq_xml(_write(tmp_path, quiet))
    assert [p.match for p in imported.policies.policies] == ["a.#"]  # no '#': the others are quarantined
    summary = imported.summary()
    assert "UNKNOWN_ADDRESS" in summary
    assert "discards exhausted messages" in summary
    shared = "<policyEntries>" + SHARED.format(queue=">", dlq="shop.dead") + "</policyEntries>"
    ps = import_activemq_xml(_write(tmp_path, _plugin(['<redeliveryPolicy queue="a.>"/>'], policies=shared))).policies
    assert {p.dead_letter_address for p in ps.policies} == {"shop.dead"}
    assert ps.default_dead_letter_address == "ActiveMQ.DLQ"
    discarding = ('<policyEntries><policyEntry queue=">"><deadLetterStrategy><discarding/></deadLetterStrategy>'
                  "</policyEntry></policyEntries>")
    kept = import_activemq_xml(_write(tmp_path, _plugin(['<redeliveryPolicy queue="a.>"/>'], policies=discarding)))
    assert {p.dead_letter_address for p in kept.policies.policies} == {"ActiveMQ.DLQ"}
    assert "<discarding/>" in kept.summary()


REFERENCES = [
    (_plugin([]).replace("<redeliveryPlugin >", '<redeliveryPlugin redeliveryPolicyMap="#map">'), "reference"),
    (_plugin([], default="").replace("<redeliveryPolicyMap><redeliveryPolicyEntries>",
                                     '<redeliveryPolicyMap defaultEntry="#d"><redeliveryPolicyEntries>'), "reference"),
    (_plugin(['<bean xmlns="http://www.springframework.org/schema/beans" '
              'class="org.apache.activemq.RedeliveryPolicy"/>']), "among the redelivery entries"),
    (_plugin(['<redeliveryPolicy destination="#q"/>']), "reference"),
    (_plugin(['<redeliveryPolicy><destination><queue physicalName="a"/></destination></redeliveryPolicy>']),
     "child elements"),
    (_plugin([], policies='<policyEntries><policyEntry queue=">" deadLetterStrategy="#s"/></policyEntries>'),
     "reference"),
    (_plugin([], policies='<policyEntries><policyEntry queue=">"><deadLetterStrategy><sharedDeadLetterStrategy '
                          'deadLetterQueue="#q"/></deadLetterStrategy></policyEntry></policyEntries>'), "reference"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "says"), [
    (_plugin([], broker='start="false"'), "schedulerSupport"),
    (_plugin(['<redeliveryPolicy queue="a" redeliveryDelay="500"/>']), "under 1000 ms"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="x"/>']), "not an integer"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="1 2"/>']), "not an integer"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="3000000000"/>']), "does not fit a Java int"),
    (_plugin(['<redeliveryPolicy queue="a" useExponentialBackOff="yes"/>']), "not a boolean"),
    (_plugin(['<redeliveryPolicy queue="a" backOffMultiplier="INF"/>']), "finite"),
    (_plugin(['<redeliveryPolicy queue="a" collisionAvoidanceFactor="0.1"/>']), "not an attribute"),
    (_plugin(['<redeliveryPolicy queue="a.>.b"/>']), "'>' anywhere but at the end"),
    (_plugin(['<redeliveryPolicy queue="a.>.>"/>']), "one word more"),
    (_plugin(['<redeliveryPolicy queue="a,b"/>']), "composite"),
    (_plugin(['<redeliveryPolicy queue="a"/>', '<redeliveryPolicy queue=" a "/>']), "two redelivery entries"),
    (_plugin(['<redeliveryPolicy maximumRedeliveries="1"/>']), "without a destination"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="${n}"/>']), "schema refuses"),
    (_plugin(['<redeliveryPolicy queue="${q}"/>']), "--property"),
    (_plugin([], policies='<policyEntries><policyEntry><destination><queue physicalName="a.>"/></destination>'
                          "</policyEntry></policyEntries>"), "<destination> element"),
    (_plugin([], policies='<policyEntries><policyEntry destination="#a"/></policyEntries>'), "<destination> element"),
    (_plugin([], policies='<policyEntries><policyEntry queue=">"><deadLetterStrategy/></policyEntry>'
                          "</policyEntries>"), "empty <deadLetterStrategy>"),
    (_plugin([], policies=SHARED.format(queue=">", dlq="x").replace("<queue physicalName", "<topic physicalName")
             .join(["<policyEntries>", "</policyEntries>"])), "to queues"),
    (_plugin([]).replace("<plugins><redeliveryPlugin >", '<plugins><bean xmlns="http://www.springframework.org/'
                         'schema/beans" class="x"/><redeliveryPluginX >').replace("</redeliveryPlugin>",
                                                                                  "</redeliveryPluginX>"),
     "a plugin given as a <bean>"),
    (f"<beans {SCHEMAS}/>", "not an ActiveMQ Classic configuration"),
    (f'<beans {SCHEMAS}><broker xmlns="http://activemq.apache.org/schema/core"/></beans>', "no <redeliveryPlugin>"),
    ("<beans>", "not well-formed"),
    *REFERENCES,
])
def test_what_the_broker_would_not_start_with_or_the_import_cannot_give_is_refused(tmp_path, text, says):
    with pytest.raises(ConfigError, match=says) as err:
        import_activemq_xml(_write(tmp_path, text))
    assert err.value.file == str(tmp_path / "activemq.xml")


@pytest.mark.unit
@pytest.mark.parametrize(("attribute", "says"), [
    # an overflowing one is infinity to the broker (a negative one, taken since the eighty-eighth run, was the case)
    ('backOffMultiplier="1e400"', "must be finite, got inf"),
])
def test_a_value_a_policy_cannot_hold_is_named_as_the_xml_writes_it(tmp_path, attribute, says):
    """It was refused by the generated file's check, naming that file's policy and key
    (``policy='orders.#' key='settings.backOffMultiplier'``), which the user never wrote."""
    with pytest.raises(ConfigError, match=says) as err:
        import_activemq_xml(_write(tmp_path, _plugin([f'<redeliveryPolicy queue="orders.>" {attribute}/>'])))
    assert (err.value.policy, err.value.key) == ("orders.>", attribute.split("=")[0])


@pytest.mark.unit
def test_values_read_as_the_broker_reads_them(tmp_path):
    path = _write(tmp_path, _plugin(['<redeliveryPolicy queue=" pay.> " useExponentialBackOff=" 1 " '
                                     'maximumRedeliveries=" 12 " collisionAvoidancePercent="15" '
                                     'useCollisionAvoidance="true" preDispatchCheck="false"/>',
                                     '<redeliveryPolicy queue="refund.>" collisionAvoidancePercent="-20"/>',
                                     '<redeliveryPolicy tempQueue="true" redeliveryDelay="10"/>']))
    imported = import_activemq_xml(path)  # a temporary entry's delay is not checked by the plugin
    pay = imported.policies.resolve("pay.card")  # the name trimmed, as setPhysicalName trims it
    assert pay is not None
    assert pay.settings.use_exponential_back_off
    assert pay.settings.use_collision_avoidance
    assert pay.settings.maximum_redeliveries == 12
    assert pay.settings.collision_avoidance_factor == 15 * 0.01  # setCollisionAvoidancePercent: percent * 0.01d
    refund = imported.policies.resolve("refund.card")
    assert refund is not None
    assert refund.settings.collision_avoidance_factor == -20 * 0.01  # any short, as ActiveMQ takes it
    assert imported.not_carried == {"preDispatchCheck": 1, "tempQueue entries": 1}


@pytest.mark.unit
def test_translation_and_intersection():
    assert translate("orders.>") == "orders.#"
    assert translate(">") == "#"
    assert translate("a.*.>") == "a.*.#"
    assert translate("a.>.>") is None
    assert translate("a.>.b") is None
    assert translate("a.#") is None
    assert intersection(["orders.*", "*.eu"]) == "orders.eu"
    assert intersection(["a.#", "*.b.#"]) == "a.b.#"
    assert intersection(["a.#", "*.b"]) == "a.b"
    assert intersection(["a.*", "b.*"]) is None
    assert intersection(["a.*.*.#", "a.b"]) is None


@pytest.mark.unit
def test_policies_import_cli_reads_either_broker(tmp_path, capsys):
    out = tmp_path / "policies.yaml"
    assert main(["policies", "import", str(ACTIVEMQ), "--out", str(out), "--property", "eu.queues=*.europe"]) == 0
    err = capsys.readouterr().err
    assert "5 redelivery entries -> 4 activemq policies" in err
    assert "topic entries (1)" in err
    assert load_policies(out).resolve("x.europe").settings.redelivery_delay == 3000  # type: ignore[union-attr]
    assert main(["schedule", "--config", str(out), "--address", "orders.created", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["orders.created"]["policy"] == "orders.#"


# words that sort before '*' ('!'), between '*' and '>' ('0') and after '>' ('a', 'b'): Java's string order decides
# between patterns that do not match each other's names
WORDS = ["!", "0", "a", "b"]


def _broker_choices(cases: list[tuple[list[str], list[str]]]) -> list[list[tuple[list[int], list[int], int | None]]]:
    """For each (entry names, queues): the entries ActiveMQ's RedeliveryPolicyMap finds for each queue, those it can
    choose (every order of insertion into chooseValue's TreeSet) and the one getEntryFor chose."""
    text = "".join("\t".join(n) + "\n" + "\t".join(q) + "\n" for n, q in cases)
    lines = iter(run_java("ClassicBrokerChoice.java", text, "choice", classpath=activemq_classpath()).split("\n"))

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x]

    out = []
    for _, queues in cases:
        rows = []
        for _ in queues:
            found, first, real = next(lines).split("|")
            rows.append((ints(found), ints(first), int(real) if real else None))
        out.append(rows)
    return out


def _random_names(rnd: random.Random, size: int, *, importable: bool) -> list[str]:
    names: dict[str, None] = {}
    while len(names) < size:
        body = [rnd.choice([*WORDS, "*"]) for _ in range(rnd.randint(0 if not importable else 1, 3))]
        tail = rnd.random()
        if tail < 0.45 or not body:
            body.append(">")
        elif not importable and tail < 0.55:
            body[rnd.randrange(len(body))] = ">"  # '>' in the middle, or the only word
        elif not importable and tail < 0.6:
            body += [">", ">"]
        names[".".join(body)] = None
    return list(names)


@pytest.mark.jvm
def test_classic_choice_is_the_brokers():
    """Random entry sets (with '>' in the middle and repeated too, which the import refuses) and every queue of up to
    four words: the entries ActiveMQ's own RedeliveryPolicyMap finds, and those chooseValue's TreeSet can put first,
    equal classic_choice's; the entry getEntryFor returned is one of them."""
    rnd = random.Random(11)
    queues = _addresses(WORDS, 4)
    cases = [(_random_names(rnd, rnd.choice([1, 2, 4, 7]), importable=False), queues) for _ in range(80)]
    # where the TreeSet's red-black rebalancing decides what comes first (for 0.b.a and b.!.a)
    cases += [(["a", "0.*.a.>", "*.*.*.>", "*.b.>", "*", "0.>"], queues),
              (["b.*.a.>", "*.!.>", "b.>", "0.0.a.>", "*.!.*.>", "*.*", "a.a.>"], queues)]
    random_seen = 0
    for (names, qs), broker in zip(cases, _broker_choices(cases), strict=True):
        for queue, (found, first, real) in zip(qs, broker, strict=True):
            assert classic_choice(names, queue) == (found, first), (names, queue)
            assert real in first if first else real is None
            random_seen += len(first) > 1
    assert random_seen > 0  # some choices depend on the identity hashes


@pytest.mark.jvm
def test_imported_policies_give_every_queue_the_entry_activemq_gives_it(tmp_path):
    """Random importable plugins: every queue of up to three words resolves, in the imported policy file, to the
    settings of the entry ActiveMQ's RedeliveryPolicyMap chooses (one of those it can choose, when it picks at
    random), or to the default entry's when none matches."""
    rnd = random.Random(12)
    queues = _addresses(WORDS, 3)
    cases = [(_random_names(rnd, rnd.choice([2, 3, 5, 7]), importable=True), queues) for _ in range(60)]
    added = 0
    for n, ((names, qs), broker) in enumerate(zip(cases, _broker_choices(cases), strict=True)):
        entries = [f'<redeliveryPolicy queue="{q}" maximumRedeliveries="{i}"/>' for i, q in enumerate(names)]
        imported = import_activemq_xml(_write(tmp_path, _plugin(
            entries, default='<redeliveryPolicy maximumRedeliveries="99"/>'), f"{n}.xml"))
        added += len(imported.added)
        own = imported.policies.policies[len(imported.added):][:len(names)]
        for queue, (found, first, _) in zip(qs, broker, strict=True):
            assert _max(imported.policies, queue) in (first or [99]), (names, queue)
            assert [i for i, p in enumerate(own) if matches(p.match, queue)] == found, (names, queue)
    assert added > 0  # the rules differ on some of them


def _broker_reads(files: list[Path], queues: list[str]) -> list[list[tuple[str, str]]]:
    """For each activemq.xml: what the broker, loaded from it by XBean, gives each queue (its redelivery entry's
    settings, or "none"; its dead-letter strategy)."""
    lines = iter(run_java("ClassicBrokerChoice.java", "\t".join(queues) + "\n", "xml", *map(str, files),
                          classpath=activemq_classpath()).split("\n"))
    return [[tuple(next(lines).split("|")) for _ in queues] for _ in files]  # type: ignore[misc]


def _random_policy_entries(rnd: random.Random, dead: list[str], default: bool) -> str:
    """Policy entries for the queues ``dead``, each with a shared, an individual or no dead-letter strategy, and an
    individual default entry when ``default``."""
    policies = "<policyEntries>" + "".join(
        rnd.choice([SHARED.format(queue=q, dlq=f"dead{i}"), INDIVIDUAL.format(queue=q), SUFFIXED.format(queue=q),
                    SHARED.format(queue=q, dlq=f"d{{{i}}}"),  # a literal brace in a queue's name
                    f'<policyEntry queue="{q}" memoryLimit="1mb"/>']) for i, q in enumerate(dead))
    policies += "</policyEntries>"
    if default:
        policies += "<defaultEntry>" + INDIVIDUAL.format(queue="x").replace(' queue="x"', "") + "</defaultEntry>"
    return policies


def _ours(ps, queue: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """What the imported policy file gives ``queue``, in the terms of ClassicBrokerChoice.java's xml mode."""
    policy = ps.resolve(queue)
    if policy is None:
        return "none", "?"
    s = policy.settings
    settings = (f"{s.maximum_redeliveries},{s.initial_redelivery_delay},{s.redelivery_delay},"
                f"{str(s.use_exponential_back_off).lower()},{s.back_off_multiplier},{s.maximum_redelivery_delay},"
                f"{str(s.use_collision_avoidance).lower()},{round(s.collision_avoidance_factor * 100)}")
    return settings, f"dlq:{ps.dead_letter_address_for(policy, queue)}"


@pytest.mark.jvm
def test_the_import_reads_an_activemq_xml_as_the_broker_does(tmp_path):
    """Files with values in several schema forms, the default and fallback entries, and policy entries whose
    dead-letter strategies differ by queue, loaded by the broker's own XBean (schema-checked): every queue of up to
    three words gets from the imported policy file the settings of the entry the broker returned, and its dead-letter
    queue, wherever the broker's choice is not random (where it is, one of those it can take: the other tests)."""
    rnd = random.Random(13)
    files: list[Path] = []
    kept: list[tuple[list[str], list[str], bool]] = []
    for n in range(30):
        names = _random_names(rnd, rnd.choice([1, 3, 5]), importable=True)
        entries = [f'<redeliveryPolicy queue=" {q} " maximumRedeliveries=" {i} " initialRedeliveryDelay="{1000 + i}"'
                   f' redeliveryDelay="{2000 + 7 * i}" useExponentialBackOff="{rnd.choice(["1", "false"])}" '
                   f'backOffMultiplier="{rnd.choice(["2", "1.5e0", ".5"])}" '
                   f'maximumRedeliveryDelay="{rnd.choice([-1, 60000])}" '
                   f'useCollisionAvoidance="{rnd.choice(["true", "0"])}" '
                   f'collisionAvoidancePercent="{rnd.randint(-50, 50)}"/>'
                   for i, q in enumerate(names)]
        dead = _random_names(rnd, rnd.choice([1, 2, 4]), importable=True) if n % 3 else []
        policies = _random_policy_entries(rnd, dead, n % 4 == 1)
        default = '<redeliveryPolicy maximumRedeliveries="99" redeliveryDelay="5000"/>' if n % 2 else ""
        plugin = 'fallbackToDeadLetter="false"' if n % 5 == 0 else ""
        files.append(_write(tmp_path, _plugin(entries, default=default, plugin=plugin,
                                              policies=policies if dead or n % 4 == 1 else ""), f"{n}.xml"))
        kept.append((names, dead, bool(default) or n % 5 != 0))
    queues = _addresses(WORDS, 3)
    exact = 0
    for path, (names, dead, handled), broker in zip(files, kept, _broker_reads(files, queues), strict=True):
        ps = import_activemq_xml(path).policies
        for queue, (settings, strategy) in zip(queues, broker, strict=True):
            ours = _ours(ps, queue)
            if settings == "none" and not handled:  # no entry, no fallback: ActiveMQ keeps nothing, we quarantine
                assert ours == ("none", "?"), (path.read_text(), queue)
                continue
            if settings == "none":  # fallbackToDeadLetter: dead-lettered at the first failure
                assert ours[0].startswith("0,"), (path.read_text(), queue)
            elif len(classic_choice(names, queue)[1]) == 1:
                assert ours[0] == settings, (path.read_text(), queue)
            if len(classic_choice(dead, queue)[1]) <= 1:  # else the broker's strategy is one of its random choices
                assert ours[1] == strategy, (path.read_text(), queue)
                exact += 1
    assert exact > len(queues) * len(files) // 2


@pytest.mark.unit
def test_random_plugins_with_policy_entries_import_and_agree_with_the_emulation(tmp_path):
    """Random redelivery and policy entries (shared, individual and strategy-less, overlapping in every way): each
    imports, and every queue of up to three words takes one of the entries and dead-letter queues ActiveMQ can give
    it (classic_choice, itself checked against the broker above). A policy's typical queue matched by a narrower
    policy entry, an intersection that already exists and lost a tie, and a queue whose kind no intersection of
    patterns isolates each refused such files before."""
    from reprocess.policy.classic_import import _Broker, _Dead, _Entry

    rnd = random.Random(14)
    queues = _addresses(WORDS, 3)
    for n in range(100):
        names = _random_names(rnd, rnd.choice([1, 3, 5]), importable=True)
        dead = _random_names(rnd, rnd.choice([1, 2, 4]), importable=True)
        strategies = [rnd.choice([f"dead{i}", "DLQ.{address}", "ActiveMQ.DLQ"]) for i in range(len(dead))]
        entries = [f'<redeliveryPolicy queue="{q}" maximumRedeliveries="{i}"/>' for i, q in enumerate(names)]
        policies = "<policyEntries>" + "".join(
            SHARED.format(queue=q, dlq=d) if d.startswith("dead") else INDIVIDUAL.format(queue=q) if "{" in d
            else f'<policyEntry queue="{q}"/>' for q, d in zip(dead, strategies, strict=True)) + "</policyEntries>"
        ps = import_activemq_xml(_write(tmp_path, _plugin(
            entries, default='<redeliveryPolicy maximumRedeliveries="99"/>', policies=policies), f"{n}.xml")).policies
        broker = _Broker([_Entry(q, {}) for q in names], _Entry(None, {}), True,
                         [_Dead(q, d) for q, d in zip(dead, strategies, strict=True)], _Dead(None, "ActiveMQ.DLQ"), "")
        for queue in queues:
            possible, dlqs, _, _ = broker.choices(queue)
            policy = ps.resolve(queue)
            assert policy is not None
            assert policy.settings.maximum_redeliveries in [99 if e < 0 else e for e in possible], (names, queue)
            assert policy.dead_letter_address in dlqs, (names, dead, queue)


@pytest.mark.jvm
def test_the_import_refuses_what_the_broker_refuses_to_start_with(tmp_path):
    """The plugin's own start-up checks (RedeliveryPlugin.installPlugin), run by starting the broker (no transport
    connector: no port): it refuses a file without schedulerSupport and a delay under 1000 ms in a queue or topic entry
    or the default entry, and starts with one in a temporary entry. The import refuses exactly the files the broker
    refuses."""
    cases = {
        "ok": ('schedulerSupport="true"', ['<redeliveryPolicy queue="a" redeliveryDelay="1000"/>'], ""),
        "no-scheduler": ("", ['<redeliveryPolicy queue="a"/>'], ""),
        "queue-delay": ('schedulerSupport="true"', ['<redeliveryPolicy queue="a" redeliveryDelay="999"/>'], ""),
        "queue-initial": ('schedulerSupport="true"', ['<redeliveryPolicy queue="a.>" initialRedeliveryDelay="0"/>'],
                          ""),
        "topic-delay": ('schedulerSupport="true"', ['<redeliveryPolicy topic="t.>" initialRedeliveryDelay="10"/>'], ""),
        "temporary-delay": ('schedulerSupport="true"', ['<redeliveryPolicy tempQueue="true" redeliveryDelay="10"/>'],
                            ""),
        "default-delay": ('schedulerSupport="true"', [], '<redeliveryPolicy redeliveryDelay="10"/>'),
    }
    files = []
    for name, (scheduler, entries, default) in cases.items():
        broker = f'start="false" useJmx="false" persistent="false" dataDirectory="{tmp_path / name}" {scheduler}'
        files.append(_write(tmp_path, _plugin(entries, default=default, broker=broker), f"{name}.xml"))
    answers = run_java("ClassicBrokerChoice.java", "", "start", *map(str, files),
                       classpath=activemq_classpath()).strip().split("\n")
    started = {name: answer == "started" for name, answer in zip(cases, answers, strict=True)}
    assert started == {"ok": True, "no-scheduler": False, "queue-delay": False, "queue-initial": False,
                       "topic-delay": False, "temporary-delay": True, "default-delay": False}, answers
    for name, path in zip(cases, files, strict=True):
        try:
            import_activemq_xml(path)
            imported = True
        except ConfigError:
            imported = False
        assert imported == started[name], name


def _no_plugin(policies: str) -> str:
    return (f'<beans {SCHEMAS}><broker xmlns="http://activemq.apache.org/schema/core" {BROKER}>'
            f"<destinationPolicy><policyMap>{policies}</policyMap></destinationPolicy></broker></beans>")


@pytest.mark.jvm
def test_a_client_policy_with_the_brokers_dead_letter_strategies(tmp_path):
    """`--client URL` with an activemq.xml without a redelivery plugin: every queue of up to three words takes the
    client's settings (as the client's own ActiveMQConnectionFactory reads the URL: test_classic_client.py) and the
    dead-letter strategy of the policy entry the broker, loaded by XBean, takes for it."""
    from reprocess.policy.classic_import import import_activemq_client

    rnd = random.Random(29)
    url = ("failover:(tcp://mq1:61616,tcp://mq2:61616)?randomize=false&jms.redeliveryPolicy.maximumRedeliveries=3"
           "&jms.redeliveryPolicy.useExponentialBackOff=true&jms.redeliveryPolicy.backOffMultiplier=2"
           "&jms.redeliveryPolicy.initialRedeliveryDelay=500")
    files, deads = [], []
    for n in range(12):
        dead = _random_names(rnd, rnd.choice([1, 2, 4]), importable=True)
        policies = _random_policy_entries(rnd, dead, n % 3 == 1)
        files.append(_write(tmp_path, _no_plugin(policies), f"{n}.xml"))
        deads.append(dead)
    queues = _addresses(WORDS, 3)
    exact = 0
    for path, dead, broker in zip(files, deads, _broker_reads(files, queues), strict=True):
        imported = import_activemq_client(url, path)
        assert imported.read == "the client's redelivery policy"
        for queue, (settings, strategy) in zip(queues, broker, strict=True):
            assert settings == "none"  # no plugin: the client's policy is all there is
            ours = _ours(imported.policies, queue)
            assert ours[0] == "3,500,1000,true,2.0,-1,false,15", (path.read_text(), queue)
            if len(classic_choice(dead, queue)[1]) <= 1:
                assert ours[1] == strategy, (path.read_text(), queue)
                exact += 1
    assert exact > len(queues) * len(files) // 2


@pytest.mark.unit
def test_a_client_policy_alone_and_what_is_refused(tmp_path, capsys):
    from reprocess.policy.classic_import import import_activemq_client

    alone = import_activemq_client("tcp://app:pw@mq:61616?jms.redeliveryPolicy.maximumRedeliveries=-1"
                                   "&jms.password=s3cret&jms.redeliveryPolicy.redeliveryDelay=30000")
    assert "s3cret" not in alone.text
    assert ":pw@" not in alone.text
    policy = alone.policies.resolve("any.queue")
    assert policy is not None
    assert policy.settings.maximum_redeliveries == -1
    assert alone.policies.dead_letter_address_for(policy, "any.queue") == "ActiveMQ.DLQ"
    assert alone.not_carried == {"jms.password": 1}
    with pytest.raises(ConfigError, match="has a <redeliveryPlugin>"):
        import_activemq_client("tcp://mq:61616", ACTIVEMQ)
    out = tmp_path / "policies.yaml"
    assert main(["policies", "import", "--client", "tcp://mq:61616?jms.redeliveryPolicy.maximumRedeliveries=2",
                 str(_write(tmp_path, _no_plugin(INDIVIDUAL.format(queue="orders.>").join(
                     ["<policyEntries>", "</policyEntries>"])))), "--out", str(out)]) == 0
    ps = load_policies(out)
    assert ps.dead_letter_address_for(ps.resolve("orders.eu"), "orders.eu") == "DLQ.orders.eu"  # type: ignore[arg-type]
    assert ps.dead_letter_address_for(ps.resolve("billing"), "billing") == "ActiveMQ.DLQ"  # type: ignore[arg-type]
    assert "the client's redelivery policy -> 2 activemq policies" in capsys.readouterr().err
    assert main(["policies", "import"]) == 3
    assert "give BROKER_XML, or --client URL" in capsys.readouterr().err
    assert main(["policies", "import", "--client", "tcp://mq:61616?jms.redeliveryPolicy.maximumRedeliverie=2"]) == 3
    assert "jms.redeliveryPolicy.maximumRedeliverie" in capsys.readouterr().err


@pytest.mark.unit
def test_a_client_policy_from_jndi_properties(tmp_path, capsys):
    """A jndi.properties --client: its factories' policy where they agree, one chosen by --factory where they do not
    (the reading itself is checked against ActiveMQ's InitialContext in test_classic_client.py)."""
    same = _write(tmp_path, "java.naming.provider.url = tcp://mq:61616?jms.redeliveryPolicy.maximumRedeliveries=2\n"
                  "java.naming.security.credentials = s3cret\n", "same.properties")
    out = tmp_path / "same.yaml"
    assert main(["policies", "import", "--client", str(same), "--out", str(out)]) == 0
    assert "s3cret" not in out.read_text()
    policy = load_policies(out).resolve("orders")
    assert policy is not None
    assert policy.settings.maximum_redeliveries == 2
    differ = _write(tmp_path, "connectionFactoryNames = fast, slow\nredeliveryPolicy.maximumRedeliveries = 1\n"
                    "connection.slow.redeliveryPolicy.redeliveryDelay = 60000\n", "differ.properties")
    assert main(["policies", "import", "--client", str(differ)]) == 3
    assert "choose one with --factory" in capsys.readouterr().err
    assert main(["policies", "import", "--client", str(differ), "--factory", "slow", "--out",
                 str(tmp_path / "slow.yaml")]) == 0
    slow = load_policies(tmp_path / "slow.yaml").resolve("orders")
    assert slow is not None
    assert (slow.settings.maximum_redeliveries, slow.settings.redelivery_delay) == (1, 60000)
    assert main(["policies", "import", "--client", str(differ), "--factory", "medium"]) == 3
    assert "no connection factory 'medium'" in capsys.readouterr().err
    assert main(["policies", "import", "--client", "tcp://mq:61616", "--factory", "slow"]) == 3
    capsys.readouterr()
    assert main(["policies", "import", "--client", str(tmp_path / "jndi.propertes")]) == 3  # a mistyped file
    assert "no such file, and not a broker URL" in capsys.readouterr().err
    assert main(["policies", "import", "--client", str(ACTIVEMQ)]) == 3  # an activemq.xml given as --client
    assert "not the jndi.properties of an ActiveMQ client" in capsys.readouterr().err
