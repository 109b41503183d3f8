"""`reprocess policies import`: an Artemis broker.xml's address settings as a policy file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reprocess.cli import main
from reprocess.errors import ConfigError
from reprocess.policy import load_policies
from reprocess.policy.importer import import_broker_xml

pytestmark = pytest.mark.unit

# Artemis's own broker.xml, the one `artemis create` instantiates (artemis-cli's etc/broker.xml, Apache License 2.0):
# its ${...} properties sit in elements that are not about redelivery
ARTEMIS_DEFAULT = Path(__file__).parent / "data" / "artemis" / "broker.xml"

BROKER = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <core xmlns="urn:activemq:core">
    <name>shop</name>
    <address-settings>
      <!-- the regions' dead letters -->
      <address-setting match="*.eu.#">
        <dead-letter-address>eu.dlq</dead-letter-address>
        <expiry-address>eu.expired</expiry-address>
      </address-setting>
      <address-setting match="shop.#">
        <dead-letter-address> shop.dlq </dead-letter-address>
        <redelivery-delay>+2000</redelivery-delay>
        <redelivery-delay-multiplier>2.5</redelivery-delay-multiplier>
      </address-setting>
      <address-setting match="shop.audit">
        <dead-letter-address/>
      </address-setting>
      <address-setting match="shop.#">
        <redelivery-delay>1</redelivery-delay>
      </address-setting>
      <address-setting match="#">
        <dead-letter-address>DLQ</dead-letter-address>
        <max-delivery-attempts>3</max-delivery-attempts>
        <max-size-bytes>10M</max-size-bytes>
      </address-setting>
    </address-settings>
  </core>
</configuration>
"""


def _write(tmp_path: Path, text: str, name: str = "broker.xml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_artemis_own_broker_xml_imports_with_its_dead_letter_address_and_defaults(tmp_path):
    imported = import_broker_xml(ARTEMIS_DEFAULT)
    ps = imported.policies
    assert [(p.match, dict(p.gives)) for p in ps.policies] == [
        ("activemq.management.#", {"dead-letter-address": "DLQ", "redelivery-delay": 0}),
        ("#", {"dead-letter-address": "DLQ", "redelivery-delay": 0})]
    orders = ps.resolve("orders.created")
    assert orders is not None
    assert (orders.match, orders.settings.max_delivery_attempts, orders.settings.dead_letter_address) == (
        "#", 10, "DLQ")
    assert imported.not_carried["expiry-address"] == 2
    assert imported.not_carried["address-full-policy"] == 2  # ${full-policy}: not carried over, so no error
    assert imported.repeated == []
    written = _write(tmp_path, imported.text, "policies.yaml")
    assert load_policies(written).policies == ps.policies


def test_a_match_ending_in_a_word_and_any_words_imports_as_artemis_reads_it(tmp_path):
    """Every broker.xml `artemis create` wrote before 2.42 holds <address-setting match="activemq.management#">, which
    Artemis reads as activemq.management.# (Match.java drops the '.' before a '#'): the import refused it, and a
    team could not import its broker.xml unchanged. It is written with '.#', unless its one more character of length
    changes the broker's ranking of '#' matches (by length), or both forms are there."""
    old = ARTEMIS_DEFAULT.read_text(encoding="utf-8").replace('match="activemq.management.#"',
                                                              'match="activemq.management#"')
    assert 'match="activemq.management#"' in old
    imported = import_broker_xml(_write(tmp_path, old))
    assert [p.match for p in imported.policies.policies] == ["activemq.management.#", "#"]
    assert imported.spelled == ["activemq.management#"]
    assert "written with '.#' (the addresses Artemis matches them with" in imported.summary()
    assert "activemq.management#" in imported.text.split("policies:")[0]
    assert imported.policies.policies == import_broker_xml(ARTEMIS_DEFAULT).policies.policies
    resolved = {a: imported.policies.resolve(a).match  # type: ignore[union-attr]
                for a in ("activemq.management", "activemq.management.x.y", "activemq.managementx", "orders")}
    assert resolved == {"activemq.management": "activemq.management.#", "activemq.management.x.y":
                        "activemq.management.#", "activemq.managementx": "#", "orders": "#"}
    setting = '<address-setting match="{}"><redelivery-delay>5</redelivery-delay></address-setting>'

    def broker(*matches: str) -> Path:
        return _write(tmp_path, BROKER.replace('<address-setting match="#">', "".join(map(setting.format, matches))
                                               + '<address-setting match="#">'))

    for both in (("orders#", "orders.#"), ("orders.#", "orders#")):  # ranked by their length in the broker
        with pytest.raises(ConfigError, match=r"both 'orders#' and 'orders.#', which Artemis reads alike"):
            import_broker_xml(broker(*both))
    # 10 characters, or 7 matching no address of orders#: ranked alike with 7 characters or 8
    for other in ("*.abcd.x.#", "ord.x.#"):
        assert [p.match for p in import_broker_xml(broker("orders#", other)).policies.policies][3:5] == [
            "orders.#", other]
    for other in ("*.abc.#", "*.abcd.#"):  # 7 and 8 characters, matching orders.abc(d) alike: the ranking changes
        with pytest.raises(ConfigError, match=rf"the match 'orders#' is written 'orders.#'.*{re.escape(repr(other))}"):
            import_broker_xml(broker("orders#", other))
    # two written with '.#' keep their order between them (each one character longer), beside a third
    assert import_broker_xml(broker("orders#", "orders.x#", "ord.#")).spelled == ["orders#", "orders.x#"]
    # but not a tie of theirs, which the broker breaks by the order its map iterates their text in (a review found
    # eu.*# and *.ab# ranked the other way round for eu.ab, written eu.*.# and *.ab.#)
    with pytest.raises(ConfigError, match=r"the match 'euro.\*#' is written 'euro.\*.#'.*'\*.abcd#'"):
        import_broker_xml(broker("euro.*#", "*.abcd#"))
    with pytest.raises(ConfigError, match=r"policy='ab\*#'.*bad wildcard: wildcard mixed with text in word 'ab\*#'"):
        import_broker_xml(broker("ab*#"))  # named as broker.xml has it, not as it would be written


def test_a_broker_properties_beside_broker_xml_setting_address_settings_is_named(tmp_path):
    """`artemis run` applies etc/broker.properties over broker.xml's configuration: address settings there changed
    the broker's schedules, and the import, which reads broker.xml alone, said nothing of them."""
    xml = _write(tmp_path, BROKER)
    (tmp_path / "broker.properties").write_text("# tuned\nglobalMaxSize=1G\n", encoding="latin-1")
    assert import_broker_xml(xml).overridden is None  # nothing about address settings
    (tmp_path / "broker.properties").write_text(
        'globalMaxSize=1G\naddressSettings."shop.#".maxDeliveryAttempts=7\n  addressSettings."#".redeliveryDelay'
        ' = 5000\n#addressSettings."x".maxDeliveryAttempts=1\n', encoding="latin-1")
    imported = import_broker_xml(xml)
    note = f"WARNING: {tmp_path / 'broker.properties'} sets address settings (2 addressSettings.* key(s))"
    assert (imported.overridden or "").startswith(note)
    assert note in imported.summary()
    assert "# WARNING: " in imported.text.split("policies:")[0]
    written = _write(tmp_path, imported.text, "policies.yaml")
    assert load_policies(written).policies == imported.policies.policies


def test_artemis_dead_letter_queue_naming_is_named_as_what_it_is_not_as_unrelated(tmp_path):
    """auto-create-dead-letter-resources with a prefix and suffix names a queue per original address on the
    dead-letter address (DEAD.<address>.X): it was listed as "not about redelivery", which it is not; the policy file
    keeps no such queues (the DLQ keeps each dead letter's original address), and the import says so."""
    naming = ("<auto-create-dead-letter-resources>true</auto-create-dead-letter-resources>"
              "<dead-letter-queue-prefix>DEAD.</dead-letter-queue-prefix>"
              "<dead-letter-queue-suffix>.X</dead-letter-queue-suffix>")
    imported = import_broker_xml(_write(tmp_path, BROKER.replace("<max-size-bytes>10M</max-size-bytes>",
                                                                 "<max-size-bytes>10M</max-size-bytes>" + naming)))
    summary = imported.summary()
    assert ("dead-letter queue naming, not carried over (the dead letters of each original address are kept under "
            "their dead-letter address with that address: reprocess dlq list --address selects them): "
            "auto-create-dead-letter-resources (1), dead-letter-queue-prefix (1), dead-letter-queue-suffix (1)"
            ) in summary
    assert "not about redelivery, not carried over: expiry-address (1), max-size-bytes (1)" in summary
    header = imported.text.split("policies:")[0]
    assert "# Dead-letter queue naming, not carried over" in header
    assert "dead-letter-queue-prefix" not in header.split("Not carried over (not about redelivery)")[1]


def test_a_broker_xml_imports_as_artemis_reads_it(tmp_path):
    """Namespaces, trimmed values, a signed number, an empty dead-letter address, a repeated match kept at its first
    occurrence; the policies in broker.xml order, so ties break as in the broker."""
    imported = import_broker_xml(_write(tmp_path, BROKER))
    ps = imported.policies
    assert [p.match for p in ps.policies] == ["*.eu.#", "shop.#", "shop.audit", "#"]
    assert imported.repeated == ["shop.#"]
    assert imported.not_carried == {"expiry-address": 1, "max-size-bytes": 1}
    shop = ps.policies[1]
    assert dict(shop.gives) == {"dead-letter-address": "shop.dlq", "redelivery-delay": 2000,
                                "redelivery-delay-multiplier": 2.5}
    cart = ps.resolve("shop.eu.cart")  # ties with *.eu.#: the broker merges shop.# first
    assert cart is not None
    assert (cart.match, cart.settings.dead_letter_address, cart.settings.max_delivery_attempts) == (
        "shop.#", "shop.dlq", 3)
    audit = ps.resolve("shop.audit")
    assert audit is not None
    assert audit.settings.dead_letter_address == ""  # none, though '#' gives one: Artemis drops, we keep
    assert audit.drops_without_dla
    assert "expiry-address" in imported.text  # named in the file's header as not carried over
    assert "repeated match(es) left out" in imported.summary()
    assert imported.summary().startswith("5 address settings -> 4 artemis policies")
    assert imported.catch_all
    # without '#' the broker gives other addresses its defaults; a policy file quarantines them: said in both places
    bare = import_broker_xml(_write(tmp_path, BROKER.replace('match="#"', 'match="other.#"'), "bare.xml"))
    assert not bare.catch_all
    assert "no address setting matches every address" in bare.summary()
    assert "# No address setting matches every address" in bare.text
    assert bare.policies.resolve("orders.created") is None


@pytest.mark.parametrize(("change", "message", "where"), [
    (("<redelivery-delay>+2000</redelivery-delay>", "<redelivery-delay>${delay}</redelivery-delay>"),
     "--property", ("shop.#", "settings.redelivery-delay")),
    (("<redelivery-delay>+2000</redelivery-delay>", "<redelivery-delay>2_000</redelivery-delay>"),
     "not an integer", ("shop.#", "settings.redelivery-delay")),
    (("<redelivery-delay-multiplier>2.5</redelivery-delay-multiplier>",
      "<redelivery-delay-multiplier>2.5d</redelivery-delay-multiplier>"),  # Java reads it, the schema does not
     "not a decimal number", ("shop.#", "settings.redelivery-delay-multiplier")),
    (("<redelivery-delay-multiplier>2.5</redelivery-delay-multiplier>",  # the broker takes NaN; a policy does not
      "<redelivery-delay-multiplier>NaN</redelivery-delay-multiplier>"),
     "finite", ("shop.#", "settings.redelivery-delay-multiplier")),
    (("<dead-letter-address> shop.dlq </dead-letter-address>", "<Dead-Letter-Address>x</Dead-Letter-Address>"),
     "<dead-letter-address>?", ("shop.#", "settings.Dead-Letter-Address")),
    (("<max-delivery-attempts>3</max-delivery-attempts>", "<max-delivery-attempt>3</max-delivery-attempt>"),
     "<max-delivery-attempts>?", ("#", "settings.max-delivery-attempt")),
    (("<redelivery-delay>1</redelivery-delay>", "<redelivery-delay>soon</redelivery-delay>"),  # in the repeat
     "not an integer", ("shop.#", "settings.redelivery-delay")),
    (('match="*.eu.#"', 'match="orders::q1"'), "fully qualified", ("orders::q1", "match")),
    (("<name>shop</name>", "<literal-match-markers>()</literal-match-markers>"), "", (None, None)),  # no literal
    (('match="shop.audit"', 'match="(shop.#)"'), "anywhere but at the end", ("(shop.#)", "match")),  # no markers
    (("<name>shop</name>", "<literal-match-markers>(</literal-match-markers>"), "two characters",
     (None, "literal-match-markers")),
    (("<max-delivery-attempts>3</max-delivery-attempts>",
      "<max-delivery-attempts>3</max-delivery-attempts><redelivery-collision-avoidance-factor>1.5"
      "</redelivery-collision-avoidance-factor>"), "", ("#", "settings.redelivery-collision-avoidance-factor")),
    (('match="*.eu.#"', 'match="#.eu"'), "'#' anywhere but at the end", ("#.eu", "match")),
    (('match="*.eu.#"', 'match="orders+.#"'), "regular expression, in which +", ("orders+.#", "match")),
    (('match="*.eu.#"', 'match="sensors.[ab].*"'), "in which [ ]", ("sensors.[ab].*", "match")),
    (('match="*.eu.#"', 'match="orders.>"'), "", ("orders.>", "match")),
    (('match="*.eu.#"', 'match="${region}.#"'), "property", ("${region}.#", "match")),
    (("<name>shop</name>", "<wildcard-addresses><delimiter>/</delimiter></wildcard-addresses>"),
     "default syntax", (None, "wildcard-addresses.delimiter")),
    (("<address-settings>", "<address-settingz>"), "not well-formed", (None, None)),
    (("address-settings>", "settings>"), "no <address-settings>", (None, None)),
])
def test_what_artemis_would_refuse_is_a_config_error_naming_the_file_and_setting(tmp_path, change, message, where):
    text = BROKER.replace(*change)
    if change[1].startswith("<literal-match-markers>()"):  # markers set and no match between them: imports
        text = text.replace('match="shop.audit"', 'match="(shop.#)"')
        with pytest.raises(ConfigError, match="literal match"):
            import_broker_xml(_write(tmp_path, text))
        assert [p.match for p in import_broker_xml(_write(tmp_path, BROKER.replace(*change))).policies.policies] == [
            "*.eu.#", "shop.#", "shop.audit", "#"]
        return
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        import_broker_xml(path)
    assert message in caught.value.message
    assert (caught.value.file, caught.value.policy, caught.value.key) == (str(path), *where)


def test_address_settings_in_an_xinclude_are_read_where_it_stands(tmp_path):
    """Artemis's parser follows XIncludes, and its documentation keeps address settings in a file of their own."""
    settings = BROKER[BROKER.index("<address-settings>"):BROKER.index("</address-settings>") + 19]
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "settings.xml").write_text(
        settings.replace("<address-settings>", '<address-settings xmlns="urn:activemq:core">'), encoding="utf-8")
    main_xml = BROKER.replace(settings, '<xi:include href="conf/settings.xml"/>').replace(
        "<configuration ", '<configuration xmlns:xi="http://www.w3.org/2001/XInclude" ')
    imported = import_broker_xml(_write(tmp_path, main_xml))
    assert [p.match for p in imported.policies.policies] == ["*.eu.#", "shop.#", "shop.audit", "#"]
    with pytest.raises(ConfigError, match="cannot read") as caught:
        import_broker_xml(_write(tmp_path, main_xml.replace("conf/settings.xml", "conf/gone.xml"), "gone.xml"))
    assert caught.value.file == str(tmp_path / "gone.xml")


def test_an_xinclude_falls_back_as_the_broker_does_and_one_taking_part_of_a_file_is_refused(tmp_path):
    """A missing included file with an <xi:fallback>: the broker starts with the fallback's settings (the import
    refused the file). An xpointer takes part of the included file: the import read all of it, settings the broker
    never saw among them; it is refused, naming it."""
    settings = BROKER[BROKER.index("<address-settings>"):BROKER.index("</address-settings>") + 19]
    fallback = ('<xi:include href="conf/optional.xml"><xi:fallback>'
                + settings.replace("<address-settings>", '<address-settings xmlns="urn:activemq:core">')
                + "</xi:fallback></xi:include>")
    main_xml = BROKER.replace(settings, fallback).replace(
        "<configuration ", '<configuration xmlns:xi="http://www.w3.org/2001/XInclude" ')
    imported = import_broker_xml(_write(tmp_path, main_xml))
    assert [p.match for p in imported.policies.policies] == ["*.eu.#", "shop.#", "shop.audit", "#"]
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "optional.xml").write_text(
        '<address-settings xmlns="urn:activemq:core"><address-setting match="#">'
        "<max-delivery-attempts>7</max-delivery-attempts></address-setting></address-settings>", encoding="utf-8")
    present = import_broker_xml(_write(tmp_path, main_xml, "present.xml"))  # the file there: its settings, only
    assert [(p.match, p.settings.max_delivery_attempts) for p in present.policies.policies] == [("#", 7)]
    part = main_xml.replace('<xi:include href="conf/optional.xml">', '<xi:include href="conf/optional.xml" '
                            'xpointer="element(/1/1)">')
    with pytest.raises(ConfigError, match=r"takes part of its file \(xpointer='element\(/1/1\)'\)"):
        import_broker_xml(_write(tmp_path, part, "part.xml"))
    # an href with a property not given: refused, not taken for a missing file and replaced by its fallback
    unknown = main_xml.replace('href="conf/optional.xml"', 'href="${conf.dir}/optional.xml"')
    with pytest.raises(ConfigError, match=r"holds a \$\{...\} property: give its value"):
        import_broker_xml(_write(tmp_path, unknown, "unknown.xml"))
    # in an included file, as at the top: its fallback when its own include's file is missing, an xpointer refused
    (tmp_path / "conf" / "nested.xml").write_text(
        '<address-settings xmlns="urn:activemq:core" xmlns:xi="http://www.w3.org/2001/XInclude">'
        '<xi:include href="missing.xml"><xi:fallback><address-setting match="#">'
        "<max-delivery-attempts>9</max-delivery-attempts></address-setting></xi:fallback></xi:include>"
        "</address-settings>", encoding="utf-8")
    nested = main_xml.replace(fallback, '<xi:include href="conf/nested.xml"/>')
    assert [(p.match, p.settings.max_delivery_attempts)
            for p in import_broker_xml(_write(tmp_path, nested, "nested.xml")).policies.policies] == [("#", 9)]
    (tmp_path / "conf" / "nested.xml").write_text((tmp_path / "conf" / "nested.xml").read_text(encoding="utf-8")
                                                  .replace('href="missing.xml"', 'href="optional.xml" xpointer="x"'),
                                                  encoding="utf-8")
    with pytest.raises(ConfigError, match="takes part of its file"):
        import_broker_xml(_write(tmp_path, nested, "nested.xml"))


def test_the_cli_writes_a_policy_file_that_schedule_reads(tmp_path, capsys):
    xml = _write(tmp_path, BROKER)
    out = tmp_path / "conf" / "policies.yaml"
    assert main(["policies", "import", str(xml), "--out", str(out)]) == 0
    assert "5 address settings -> 4 artemis policies" in capsys.readouterr().err
    assert main(["schedule", "--config", str(out), "--address", "shop.eu.cart", "--format", "json"]) == 0
    cart = json.loads(capsys.readouterr().out)["shop.eu.cart"]
    assert (cart["policy"], cart["dead_letter_address"]) == ("shop.#", "shop.dlq")
    assert [s["delay_ms"] for s in cart["schedule"]] == [2000, 5000, None]  # x2.5, dead-lettered at the third
    # an existing file is kept unless --force; without --out the file goes to stdout
    out.write_text("mine", encoding="utf-8")
    assert main(["policies", "import", str(xml), "--out", str(out)]) == 3
    assert out.read_text(encoding="utf-8") == "mine"
    assert main(["policies", "import", str(xml), "--out", str(out), "--force"]) == 0
    assert load_policies(out).policies == import_broker_xml(xml).policies.policies
    capsys.readouterr()
    assert main(["policies", "import", str(xml)]) == 0
    assert capsys.readouterr().out == out.read_text(encoding="utf-8")


def test_properties_take_the_values_given_or_their_defaults_as_the_broker_substitutes_them(tmp_path):
    """Artemis replaces ``${name}`` and ``${name:default}`` in the whole file before it parses it; an include's
    href usually names its folder so (``${artemis.instance.etc}``)."""
    text = BROKER.replace("<redelivery-delay>+2000</redelivery-delay>", "<redelivery-delay>${delay}</redelivery-delay>")
    text = text.replace("<max-delivery-attempts>3</max-delivery-attempts>",
                        "<max-delivery-attempts>${attempts : 4}</max-delivery-attempts>")
    path = _write(tmp_path, text)
    ps = import_broker_xml(path, {"delay": "750"}).policies
    assert ps.policies[1].settings.redelivery_delay == 750
    assert ps.policies[3].settings.max_delivery_attempts == 4  # the default
    given = import_broker_xml(path, {"delay": "1", "attempts": "9"}).policies
    assert given.policies[3].settings.max_delivery_attempts == 9
    assert main(["policies", "import", str(path), "--property", "delay=5", "--property", "attempts=2"]) == 0


def test_an_include_is_read_relative_to_its_file_whatever_its_folder_is_called(tmp_path):
    """A folder named with a '#' (a URL's fragment) or a space; an href naming its folder by a property; an href
    that is no file is refused; a broken included file is named."""
    settings = BROKER[BROKER.index("<address-settings>"):BROKER.index("</address-settings>") + 19]
    folder = tmp_path / "etc #1 a"
    (folder / "conf").mkdir(parents=True)
    (folder / "conf" / "settings.xml").write_text(
        settings.replace("<address-settings>", '<address-settings xmlns="urn:activemq:core">'), encoding="utf-8")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "settings.xml").write_text("<address-settings/>", encoding="utf-8")  # not this one
    including = BROKER.replace(settings, '<xi:include href="conf/settings.xml"/>').replace(
        "<configuration ", '<configuration xmlns:xi="http://www.w3.org/2001/XInclude" ')
    imported = import_broker_xml(_write(folder, including))
    assert [p.match for p in imported.policies.policies] == ["*.eu.#", "shop.#", "shop.audit", "#"]
    plain = tmp_path / "plain"
    (plain / "conf").mkdir(parents=True)
    (plain / "conf" / "settings.xml").write_text((folder / "conf" / "settings.xml").read_text(encoding="utf-8"),
                                                 encoding="utf-8")
    by_property = _write(folder, including.replace('href="conf/', 'href="${etc}/conf/'), "by-property.xml")
    assert len(import_broker_xml(by_property, {"etc": str(plain)}).policies.policies) == 4  # an absolute path
    with pytest.raises(ConfigError, match="--property"):
        import_broker_xml(by_property)
    with pytest.raises(ConfigError, match="is not a file"):
        import_broker_xml(_write(folder, including.replace('href="conf/settings.xml"', 'href="http://x/s.xml"'),
                                 "remote.xml"))
    (folder / "conf" / "broken.xml").write_text("<address-settings>", encoding="utf-8")
    with pytest.raises(ConfigError, match="broken.xml"):
        import_broker_xml(_write(folder, including.replace("settings.xml", "broken.xml"), "broken-main.xml"))


def test_the_cli_says_why_it_cannot_write_and_leaves_no_temporary_file(tmp_path, capsys):
    xml = _write(tmp_path, BROKER)
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    assert main(["policies", "import", str(xml), "--out", str(tmp_path / "a-file" / "policies.yaml")]) == 3
    assert "cannot make its folder" in capsys.readouterr().err
    out = tmp_path / "out" / "policies.yaml"
    assert main(["policies", "import", str(xml), "--out", str(out)]) == 0
    assert main(["policies", "import", str(xml), "--out", str(out)]) == 3
    assert sorted(p.name for p in out.parent.iterdir()) == ["policies.yaml"]
    capsys.readouterr()
    (tmp_path / "a-folder").mkdir()  # with --force the rename over it failed with "Is a directory"
    assert main(["policies", "import", str(xml), "--out", str(tmp_path / "a-folder"), "--force"]) == 3
    assert "is a folder; give a file name" in capsys.readouterr().err
