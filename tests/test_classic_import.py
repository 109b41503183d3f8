"""`reprocess policies import` of an ActiveMQ Classic activemq.xml: its redelivery plugin's entries as activemq
policies, each queue given the entry ActiveMQ gives it, checked against the JVM
(tests/java/ClassicRedeliveryChoice.java: Classic's destination map, filters and comparison, and java.util.TreeSet)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tests.java_program import run_java
from tests.test_config import _addresses

from reprocess.cli import main
from reprocess.errors import ConfigError
from reprocess.policy import load_policies
from reprocess.policy.classic import classic_choice, import_activemq_xml, intersection, translate
from reprocess.policy.reference import delay_ms, exhausted
from reprocess.policy.wildcard import matches

# ActiveMQ's own conf/activemq.xml (the release's, Apache License 2.0) with schedulerSupport and the redelivery plugin
# as ActiveMQ's documentation configures it, plus entries for a few queues and a topic
ACTIVEMQ = Path(__file__).parent / "data" / "activemq" / "activemq.xml"


def _plugin(entries: list[str], *, default: str = "", plugin: str = "", broker: str = 'schedulerSupport="true"',
            extra: str = "") -> str:
    return (f'<beans xmlns="http://www.springframework.org/schema/beans"><broker '
            f'xmlns="http://activemq.apache.org/schema/core" {broker}>{extra}<plugins><redeliveryPlugin {plugin}>'
            "<redeliveryPolicyMap><redeliveryPolicyMap><redeliveryPolicyEntries>" + "".join(entries)
            + "</redeliveryPolicyEntries>" + (f"<defaultEntry>{default}</defaultEntry>" if default else "")
            + "</redeliveryPolicyMap></redeliveryPolicyMap></redeliveryPlugin></plugins></broker></beans>")


def _write(tmp_path: Path, text: str, name: str = "activemq.xml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


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
    # ${eu.delay:3000}: Spring's placeholder, its default without a value
    eu = ps.resolve("shop.eu")
    assert eu is not None
    assert eu.settings.redelivery_delay == 3000
    assert eu.settings.maximum_redeliveries == 2
    assert import_activemq_xml(ACTIVEMQ, {"eu.delay": "4500"}).policies.resolve("shop.eu").settings.redelivery_delay \
        == 4500  # type: ignore[union-attr]
    # ActiveMQ takes '*.eu' for orders.eu as well: the narrower pattern, as Artemis's rule does
    assert ps.resolve("orders.eu") == eu
    orders = ps.resolve("orders")  # 'orders.>' matches 'orders' itself, as '#' does
    assert orders is not None
    assert orders.settings.use_exponential_back_off
    # the plugin's schedule: initial delay, then getNextRedeliveryDelay (x2) capped at maximumRedeliveryDelay
    assert [delay_ms(orders, k) for k in range(1, 7)] == [2000, 4000, 8000, 16000, 32000, 60000]
    assert not exhausted(orders, 6)
    assert exhausted(orders, 7)
    default = ps.resolve("billing")
    assert default is not None
    assert default.settings.initial_redelivery_delay == 5000
    assert load_policies(_write(tmp_path, imported.text, "p.yaml")).policies == ps.policies


@pytest.mark.unit
def test_entries_classic_ranks_otherwise_get_a_policy_for_the_queues_where_the_rules_differ(tmp_path):
    """For orders.eu ActiveMQ takes '*.eu' ('*' sorts before 'o'; neither pattern matches the other's name) where
    Artemis's rule takes 'orders.*': the import adds 'orders.eu' with '*.eu''s settings. For 'orders.x', 'orders.*'
    and 'orders.>' each compare after the other, and ActiveMQ takes either: a warning, and the file's choice."""
    path = _write(tmp_path, _plugin(['<redeliveryPolicy queue="orders.*" maximumRedeliveries="1"/>',
                                     '<redeliveryPolicy queue="*.eu" maximumRedeliveries="2"/>',
                                     '<redeliveryPolicy queue="orders.>" maximumRedeliveries="3"/>']))
    imported = import_activemq_xml(path)
    ps = imported.policies
    assert imported.added == ["orders.eu"]
    assert ps.resolve("orders.eu").settings.maximum_redeliveries == 2  # type: ignore[union-attr]
    assert ps.resolve("shop.eu").settings.maximum_redeliveries == 2  # type: ignore[union-attr]
    assert ps.resolve("orders.us").settings.maximum_redeliveries == 1  # type: ignore[union-attr]
    assert ps.resolve("orders.us.x").settings.maximum_redeliveries == 3  # type: ignore[union-attr]
    # no default entry: fallbackToDeadLetter dead-letters the others at their first failure
    assert ps.resolve("billing").settings.maximum_redeliveries == 0  # type: ignore[union-attr]
    assert len(imported.warnings) == 1
    assert "orders.* or orders.>" in imported.warnings[0]
    assert "orders.eu (the entry for *.eu)" in imported.text
    assert "Warning:" in imported.text
    assert load_policies(_write(tmp_path, imported.text, "p.yaml")).policies == ps.policies


@pytest.mark.unit
def test_what_activemq_drops_is_kept_and_said(tmp_path):
    quiet = _plugin(['<redeliveryPolicy queue="a.>" maximumRedeliveries="1"/>'],
                    plugin='fallbackToDeadLetter="false" sendToDlqIfMaxRetriesExceeded="false"')
    imported = import_activemq_xml(_write(tmp_path, quiet))
    assert [p.match for p in imported.policies.policies] == ["a.#"]  # no '#': the others are quarantined
    summary = imported.summary()
    assert "UNKNOWN_ADDRESS" in summary
    assert "discards exhausted messages" in summary
    shared = '<destinationPolicy><policyMap><policyEntries><policyEntry queue=">"><deadLetterStrategy>' \
        '<sharedDeadLetterStrategy><deadLetterQueue><queue physicalName="shop.dead"/></deadLetterQueue>' \
        '</sharedDeadLetterStrategy></deadLetterStrategy></policyEntry></policyEntries></policyMap></destinationPolicy>'
    ps = import_activemq_xml(_write(tmp_path, _plugin(['<redeliveryPolicy queue="a.>"/>'], extra=shared))).policies
    assert {p.dead_letter_address for p in ps.policies} == {"shop.dead"}
    individual = shared.replace('<sharedDeadLetterStrategy><deadLetterQueue><queue physicalName="shop.dead"/>'
                                '</deadLetterQueue></sharedDeadLetterStrategy>',
                                '<individualDeadLetterStrategy queuePrefix="DLQ."/>')
    got = import_activemq_xml(_write(tmp_path, _plugin(['<redeliveryPolicy queue="a.>"/>'], extra=individual)))
    assert {p.dead_letter_address for p in got.policies.policies} == {None}  # each message's own address
    assert "DLQ.<queue>" in got.summary()
    assert got.policies.dead_letter_address_for(got.policies.resolve("a.b"), "a.b") == "a.b"  # type: ignore[arg-type]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "says"), [
    (_plugin([], broker=""), "schedulerSupport"),
    (_plugin(['<redeliveryPolicy queue="a" redeliveryDelay="500"/>']), "under 1000 ms"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="x"/>']), "not a decimal integer"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="3000000000"/>']), "does not fit a Java int"),
    (_plugin(['<redeliveryPolicy queue="a" useExponentialBackOff="maybe"/>']), "not a boolean"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedelivery="3"/>']), "not a property of RedeliveryPolicy"),
    (_plugin(['<redeliveryPolicy queue="a.>.b"/>']), "'>' anywhere but at the end"),
    (_plugin(['<redeliveryPolicy queue="a,b"/>']), "composite"),
    (_plugin(['<redeliveryPolicy queue="a"/>', '<redeliveryPolicy queue="a"/>']), "two entries for one queue"),
    (_plugin(['<redeliveryPolicy queue="a.>.>"/>']), "or a queue of one word more"),
    (_plugin(['<redeliveryPolicy maximumRedeliveries="1"/>']), "without a destination"),
    (_plugin(['<redeliveryPolicy queue="a" maximumRedeliveries="${n}"/>']), "--property"),
    ("<beans/>", "not an ActiveMQ Classic configuration"),
    ('<beans><broker xmlns="http://activemq.apache.org/schema/core"/></beans>', "no <redeliveryPlugin>"),
    ("<beans>", "not well-formed"),
])
def test_what_the_broker_would_not_start_with_or_the_import_cannot_give_is_refused(tmp_path, text, says):
    with pytest.raises(ConfigError, match=says) as err:
        import_activemq_xml(_write(tmp_path, text))
    assert err.value.file == str(tmp_path / "activemq.xml")


@pytest.mark.unit
def test_values_read_as_spring_reads_them(tmp_path):
    path = _write(tmp_path, _plugin(['<redeliveryPolicy queue="a" useExponentialBackOff=" YES " '
                                     'maximumRedeliveries=" 1 2" collisionAvoidancePercent="15" '
                                     'useCollisionAvoidance="on" preDispatchCheck="false"/>']))
    imported = import_activemq_xml(path)
    a = imported.policies.resolve("a")
    assert a is not None
    assert a.settings.use_exponential_back_off
    assert a.settings.use_collision_avoidance
    assert a.settings.maximum_redeliveries == 12  # CustomNumberEditor removes all whitespace
    assert a.settings.collision_avoidance_factor == 15 * 0.01  # setCollisionAvoidancePercent: percent * 0.01d
    assert imported.not_carried == {"preDispatchCheck": 1}


@pytest.mark.unit
def test_translation_and_intersection():
    assert translate("orders.>") == "orders.#"
    assert translate(">") == "#"
    assert translate("a.>.>") is None
    assert translate("a.*.>") == "a.*.#"
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
    assert main(["policies", "import", str(ACTIVEMQ), "--out", str(out), "--property", "eu.delay=2500"]) == 0
    err = capsys.readouterr().err
    assert "redelivery entries -> 4 activemq policies" in err
    assert "topic entries (1)" in err
    assert load_policies(out).resolve("x.eu").settings.redelivery_delay == 2500  # type: ignore[union-attr]
    assert main(["schedule", "--config", str(out), "--address", "orders.created", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["orders.created"]["policy"] == "orders.#"


def _java_choices(cases: list[tuple[list[str], list[str]]]) -> list[list[tuple[list[int], list[int]]]]:
    """For each (entry names, queues): the entries matching each queue and those ActiveMQ can choose, computed by the
    JVM (tests/java/ClassicRedeliveryChoice.java)."""
    text = "".join("\t".join(n) + "\n" + "\t".join(q) + "\n" for n, q in cases)
    lines = iter(run_java("ClassicRedeliveryChoice.java", text).split("\n"))

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x]

    return [[tuple(map(ints, next(lines).split("|"))) for _ in queues] for _, queues in cases]  # type: ignore[misc]


def _random_names(rnd: random.Random, size: int, words: list[str], *, importable: bool) -> list[str]:
    names: dict[str, None] = {}
    while len(names) < size:
        body = [rnd.choice([*words, "*"]) for _ in range(rnd.randint(0 if not importable else 1, 3))]
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
def test_classic_choice_is_the_jvms():
    """Random entry sets (with '>' in the middle and repeated too, which the import refuses) and every queue of up to
    four words: the entries matching it and the ones ActiveMQ can choose, against the JVM's TreeSet."""
    rnd = random.Random(11)
    words = ["a", "b", "c"]
    queues = _addresses(words, 4)
    cases = [(_random_names(rnd, rnd.choice([1, 2, 4, 7]), words, importable=False), queues) for _ in range(80)]
    random_seen = 0
    for (names, qs), java in zip(cases, _java_choices(cases), strict=True):
        for queue, (matching, choices) in zip(qs, java, strict=True):
            try:
                got = classic_choice(names, queue)
            except ConfigError:
                assert len(matching) > 7
                continue
            assert got == (matching, choices), (names, queue)
            random_seen += len(choices) > 1
    assert random_seen > 0  # some choices depend on the identity hashes


@pytest.mark.jvm
def test_imported_policies_give_every_queue_the_entry_activemq_gives_it(tmp_path):
    """Random importable plugins: every queue of up to four words resolves, in the imported policy file, to the
    settings of the entry the JVM chooses (one of those it can choose, when it picks at random), or to the default
    entry's when none matches."""
    rnd = random.Random(12)
    words = ["a", "b", "c"]
    queues = _addresses(words, 4)
    cases = []
    for _ in range(60):
        names = _random_names(rnd, rnd.choice([2, 3, 5, 7]), words, importable=True)  # 7: every order tried
        cases.append((names, queues))
    added = 0
    for n, ((names, qs), java) in enumerate(zip(cases, _java_choices(cases), strict=True)):
        entries = [f'<redeliveryPolicy queue="{q}" maximumRedeliveries="{i}"/>' for i, q in enumerate(names)]
        text = _plugin(entries, default='<redeliveryPolicy maximumRedeliveries="99"/>')
        imported = import_activemq_xml(_write(tmp_path, text, f"{n}.xml"))
        added += len(imported.added)
        for queue, (matching, choices) in zip(qs, java, strict=True):
            policy = imported.policies.resolve(queue)
            assert policy is not None
            got = policy.settings.maximum_redeliveries
            assert got in (choices or [99]), (names, queue, [p.match for p in imported.policies.policies])
            assert all(matches(p.match, queue) == (i in matching)
                       for i, p in enumerate(imported.policies.policies[len(imported.added):][:len(names)]))
    assert added > 0  # the rules differ on some of them
