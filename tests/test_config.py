"""The policy file: wildcard precedence and ConfigErrors that name file, policy and key."""

from __future__ import annotations

import json
import re

import pytest

from reprocess.errors import ConfigError
from reprocess.policy import load_policies, parse_policies
from reprocess.policy.config import policies_from_mapping
from reprocess.policy.wildcard import matches, most_specific

pytestmark = pytest.mark.unit

SAMPLE = """
policies:
  - match: "orders.#"
    profile: activemq
    settings: {initialRedeliveryDelay: 1000, useExponentialBackOff: true, maximumRedeliveries: 6}
  - match: "billing.*"
    profile: artemis
    settings: {redelivery-delay: 5000, redelivery-delay-multiplier: 2.0, max-delivery-attempts: 3,
               dead-letter-address: billing.dlq}
  - match: "#"
    profile: rocketmq
    settings: {maxReconsumeTimes: 16}
"""


@pytest.mark.parametrize(
    ("pattern", "address", "expected"),
    [
        ("orders.#", "orders", True),
        ("orders.#", "orders.created", True),
        ("orders.#", "orders.eu.created", True),
        ("orders.*", "orders", False),
        ("orders.*", "orders.created", True),
        ("orders.*", "orders.eu.created", False),
        ("#", "anything.at.all", True),
        ("*.created", "orders.created", True),
        ("a.#.z", "a.z", True),
        ("a.#.z", "a.b.c.z", True),
        ("a.#.z", "a.b.c", False),
        ("orders.created", "orders.created", True),
        ("orders.created", "orders.createdx", False),
    ],
)
def test_artemis_wildcards(pattern, address, expected):
    assert matches(pattern, address) is expected


@pytest.mark.parametrize("pattern", ["#", "*", "orders", "orders.#", "orders.*.eu", "*.#.x", "orders#1", "orders.cre*",
                                     "a.*#", "#a", "orders..x", ".orders", "orders.", "", " orders", "a b",
                                     "x/y", "ÄÖ.*", "orders-1.eu_2", "orders\n", "orders.#\n"])
def test_the_forms_address_pattern_takes_what_the_job_takes(pattern):
    """The DAG forms check an address pattern with a regex (no Python in a Param), the job with validate_pattern:
    they agree, but for '/' and spaces inside a word, which only the forms refuse. Before, the forms took a wildcard
    mixed with text (``orders#1``, as the dead-letters page pre-fills an address holding '#'): the trigger said
    "triggered" and the run then failed in its plan task."""
    import re

    from reprocess.limits import MATCH_PATTERN
    from reprocess.policy.wildcard import validate_pattern

    form = re.search(MATCH_PATTERN, pattern) is not None  # as jsonschema checks a Param's pattern
    job = validate_pattern(pattern) is None
    assert form == (job and "/" not in pattern and " " not in pattern), (form, job)


def test_most_specific_match_wins_exact_then_star_then_hash():
    pats = ["#", "orders.#", "orders.*", "orders.created", "orders.eu.#"]
    assert pats[most_specific(pats, "orders.created")] == "orders.created"
    assert pats[most_specific(pats, "orders.updated")] == "orders.*"
    assert pats[most_specific(pats, "orders.eu.x")] == "orders.eu.#"  # the longer '#' pattern wins
    assert pats[most_specific(pats, "orders.us.x")] == "orders.#"
    assert pats[most_specific(pats, "billing")] == "#"


def test_literal_word_beats_star_at_the_first_differing_word():
    pats = ["*.created", "orders.*"]
    assert pats[most_specific(pats, "orders.created")] == "orders.*"


def _artemis_order(patterns: list[str], address: str, ties: list[int] | None = None) -> list[int]:
    """The patterns matching ``address`` in the order Artemis sorts them: MatchComparator, then patterns it calls
    equal in the order ``ties`` lists them (file order when not given; a PolicySet's precedence for the broker's
    order, which tests/test_artemis_order.py checks against the JVM)."""
    from functools import cmp_to_key

    from reprocess.policy.wildcard import _compare

    place = {x: n for n, x in enumerate(ties if ties is not None else range(len(patterns)))}
    hits = [i for i, p in enumerate(patterns) if matches(p, address)]
    return sorted(hits, key=cmp_to_key(lambda x, y: _compare(patterns[x], patterns[y]) or place[x] - place[y]))


def test_precedence_picks_among_the_matching_patterns_as_artemis_sorts_them():
    """Artemis sorts only the patterns matching the address (HierarchicalObjectRepository.getMatches) by its
    MatchComparator, which is not an order over all patterns: one sort of the whole list, as before, picked
    billing.*.* for billing.x.eu when orders.* was in the file."""
    import random

    pats = ["billing.*.eu", "orders.*", "billing.*.*"]
    assert pats[most_specific(pats, "billing.x.eu")] == "billing.*.eu"
    pats = ["*.*.a", "*", "*.*.*"]
    assert pats[most_specific(pats, "a.a.a")] == "*.*.a"

    def artemis(patterns: list[str], address: str) -> int | None:
        ordered = _artemis_order(patterns, address)
        return ordered[0] if ordered else None

    rnd = random.Random(7)
    words = ["a", "b", "*", "#"]
    for _ in range(3000):
        patterns = list(dict.fromkeys(".".join(rnd.choice(words) for _ in range(rnd.randint(1, 4)))
                                      for _ in range(rnd.randint(2, 6))))
        address = ".".join(rnd.choice("ab") for _ in range(rnd.randint(1, 4)))
        assert most_specific(patterns, address) == artemis(patterns, address), (patterns, address)


def _addresses(words: str | list[str], longest: int) -> list[str]:
    """Every address of 1 to ``longest`` words, each one of ``words`` (characters of a string, or a list)."""
    from itertools import product

    return [".".join(w) for n in range(1, longest + 1) for w in product(words, repeat=n)]


def test_overlap_and_covers_agree_with_every_address_up_to_seven_words():
    """``overlap`` is exact and ``covers`` sound, against all addresses of up to seven words over three: two
    patterns of at most three words that share an address share one that short."""
    import random

    from reprocess.policy.wildcard import covers, overlap

    addresses = _addresses("abc", 7)
    rnd = random.Random(11)
    words = ["a", "b", "*", "#"]
    pats = sorted({".".join(rnd.choice(words) for _ in range(rnd.randint(1, 3))) for _ in range(400)})
    hits = {p: {a for a in addresses if matches(p, a)} for p in pats}
    covered = 0
    for x in pats:
        for y in pats:
            assert overlap(x, y) == bool(hits[x] & hits[y]), (x, y)
            if covers(x, y):
                covered += 1
                assert hits[y] <= hits[x], (x, y)
            elif x == "#" or x == y:
                raise AssertionError(f"{x} must cover {y}")
    assert covered > len(pats) * 3  # not only '#' and each pattern itself
    for _ in range(3000):  # several at once: some address matches all of them
        some = rnd.sample(pats, rnd.randint(3, 4))
        assert overlap(*some) == bool(set.intersection(*(hits[p] for p in some))), some


ARTEMIS_KEYS = {"redelivery-delay": [0, 1000, 7000], "redelivery-delay-multiplier": [1.0, 2.5],
                "max-redelivery-delay": [3000, 90_000], "redelivery-collision-avoidance-factor": [0.0, 0.5],
                "max-delivery-attempts": [-1, 2, 5], "dead-letter-address": [None, "", "x.dlq", "y.dlq"]}


def test_artemis_policies_merge_settings_as_artemis_merges_address_settings():
    """The settings an address gets equal Artemis's merge (HierarchicalObjectRepository.merge: every artemis
    pattern matching the address, most specific first, a setting taken from the first that gives it, then the
    broker's default), on random policy files and every address of up to four words; other profiles do not
    merge, and a stepped policy between two artemis ones is passed over."""
    import random

    from reprocess.policy.settings import ArtemisSettings

    rnd = random.Random(5)
    words = ["a", "b", "*", "#"]
    addresses = _addresses("abc", 4)
    variants = 0
    for _ in range(150):
        patterns = list(dict.fromkeys(".".join(rnd.choice(words) for _ in range(rnd.randint(1, 3)))
                                      for _ in range(rnd.randint(1, 6))))
        raw = []
        for pattern in patterns:
            if rnd.random() < 0.2:
                raw.append({"match": pattern, "profile": "stepped", "settings": {"delays": ["1s"]}})
                continue
            keys = rnd.sample(sorted(ARTEMIS_KEYS), rnd.randint(0, 3))
            raw.append({"match": pattern, "profile": "artemis",
                        "settings": {k: rnd.choice(ARTEMIS_KEYS[k]) for k in keys}})
        ps = policies_from_mapping({"policies": raw})
        variants += len(ps.variants) - len(patterns)
        for address in addresses:
            order = _artemis_order(patterns, address, ps.precedence)
            got = ps.resolve(address)
            if not order:
                assert got is None
                continue
            assert got is not None
            assert got.match == patterns[order[0]]
            if raw[order[0]]["profile"] != "artemis":
                assert got.settings == ps.policies[order[0]].settings
                continue
            merged: dict = {}
            for i in order:
                if raw[i]["profile"] == "artemis":
                    for k, v in raw[i]["settings"].items():
                        if v is not None:
                            merged.setdefault(k, v)
            assert got.settings == ArtemisSettings.parse(merged), (raw, address)
            assert got.drops_without_dla == (not merged.get("dead-letter-address"))
    assert variants > 20  # many files had policies merging from partial matches


def test_an_artemis_policy_takes_a_dead_letter_address_from_the_default_policy():
    ps = policies_from_mapping({"default_dead_letter_address": "ops.dlq", "policies": [
        {"match": "billing.*", "profile": "artemis", "settings": {"redelivery-delay": 5000}},
        {"match": "#", "profile": "artemis", "settings": {"dead-letter-address": "DLQ", "max-delivery-attempts": 3}},
        {"match": "orders.#", "profile": "activemq"}]})
    billing = ps.resolve("billing.eu")
    assert billing is not None
    assert billing.match == "billing.*"
    assert (billing.settings.redelivery_delay, billing.settings.effective_max_redelivery_delay,
            billing.settings.max_delivery_attempts, billing.settings.dead_letter_address) == (5000, 50_000, 3, "DLQ")
    assert not billing.drops_without_dla
    assert ps.dead_letter_address_for(billing, "billing.eu") == "DLQ"
    assert len(ps.variants) == 3  # '#' matches every address: no variant tests it
    orders = ps.resolve("orders.x")
    assert orders is not None
    assert orders.profile.value == "activemq"
    assert orders.dead_letter_address is None


def test_an_empty_dead_letter_address_is_none_even_where_a_less_specific_policy_gives_one():
    """Artemis's empty <dead-letter-address/> overrides '#': the broker would drop the message; we send it to the
    default DLQ with NO_DEAD_LETTER_ADDRESS. A null inherits, as leaving the key out does."""
    raw = [{"match": "billing.*", "profile": "artemis", "settings": {"dead-letter-address": ""}},
           {"match": "audit.*", "profile": "artemis", "settings": {"dead-letter-address": None}},
           {"match": "#", "profile": "artemis", "settings": {"dead-letter-address": "DLQ"}}]
    ps = policies_from_mapping({"default_dead_letter_address": "ops.dlq", "policies": raw})
    billing, audit = ps.resolve("billing.eu"), ps.resolve("audit.eu")
    assert billing is not None
    assert audit is not None
    assert billing.drops_without_dla
    assert ps.dead_letter_address_for(billing, "billing.eu") == "ops.dlq"
    assert not audit.drops_without_dla
    assert ps.dead_letter_address_for(audit, "audit.eu") == "DLQ"


def test_files_that_differ_only_in_what_they_leave_out_are_not_equal():
    """Cached expressions are keyed by the policy set: two files resolving differently must never compare equal."""
    def file(billing: dict) -> dict:
        return {"policies": [{"match": "billing.*", "profile": "artemis", "settings": billing},
                             {"match": "#", "profile": "artemis", "settings": {"redelivery-delay": 60000}}]}

    explicit, left_out = policies_from_mapping(file({"redelivery-delay": 0})), policies_from_mapping(file({}))
    assert explicit.policies[0].settings == left_out.policies[0].settings
    assert explicit != left_out
    assert explicit.resolve("billing.eu") != left_out.resolve("billing.eu")


def test_merge_combinations_are_bounded_by_what_can_match_together():
    # one region per address: eight combinations (none, or one of seven), not 2**7
    regions = [{"match": f"*.r{n}", "profile": "artemis", "settings": {"dead-letter-address": f"r{n}.dlq"}}
               for n in range(7)]
    ps = policies_from_mapping({"policies": [
        {"match": "orders.*", "profile": "artemis", "settings": {"redelivery-delay": 5000}}, *regions]})
    orders = [v for v in ps.variants if v.base == 0]
    assert len(orders) == 8
    for address, dla in [("orders.r3", "r3.dlq"), ("orders.x", None)]:
        got = ps.resolve(address)
        assert got is not None
        assert (got.match, got.settings.redelivery_delay, got.settings.dead_letter_address) == ("orders.*", 5000, dla)
    # a less specific policy whose settings an earlier one matching every address gives already is not counted
    shadowed = [{"match": f"#.x{n}", "profile": "artemis", "settings": {"max-delivery-attempts": n + 2}}
                for n in range(20)]
    full = {"redelivery-delay": 1, "redelivery-delay-multiplier": 1.5, "max-redelivery-delay": 9,
            "redelivery-collision-avoidance-factor": 0.1, "max-delivery-attempts": 4, "dead-letter-address": "d"}
    ps = policies_from_mapping({"policies": [{"match": "a.*.*", "profile": "artemis", "settings": {}},
                                             {"match": "a.*.#", "profile": "artemis", "settings": full}, *shadowed]})
    assert [v.when for v in ps.variants if v.base == 0] == [None]
    # patterns that can all match one address together: 2**n combinations, refused beyond 16
    base = [{"match": "a.*.*.*.*.*.*.*", "profile": "artemis", "settings": {}}]
    others = [{"match": ".".join(["#"] + ["*"] * n + ["b"]), "profile": "artemis",
               "settings": {"max-delivery-attempts": n + 2}} for n in range(5)]
    with pytest.raises(ConfigError) as info:
        policies_from_mapping({"policies": base + others}, source="p.yaml")
    assert info.value.policy == "a.*.*.*.*.*.*.*"
    assert "more than 16 combinations" in str(info.value)
    assert len([v for v in policies_from_mapping({"policies": base + others[:4]}).variants if v.base == 0]) == 5


def test_activemq_classics_descendant_wildcard_is_refused_with_what_to_write():
    """A RedeliveryPolicyMap copied from ActiveMQ Classic says ``orders.>``: taken literally it would match nothing,
    and every orders message would silently take the '#' policy."""
    with pytest.raises(ConfigError) as info:
        parse_policies("policies: [{match: 'orders.>', profile: activemq}, {match: '#', profile: rocketmq}]")
    assert (info.value.policy, info.value.key) == ("orders.>", "match")
    assert "write '#'" in str(info.value)
    assert parse_policies("policies: [{match: 'orders.>x', profile: activemq}]").resolve("orders.>x") is not None


def test_sample_config_resolves_each_address():
    ps = parse_policies(SAMPLE)
    assert ps.resolve("orders.created").profile.value == "activemq"
    assert ps.resolve("billing.eu").profile.value == "artemis"
    assert ps.resolve("billing.eu.x").profile.value == "rocketmq"


def test_no_match_without_a_default_policy():
    ps = parse_policies("policies: [{match: 'orders.#', profile: stepped}]")
    assert ps.resolve("billing.x") is None


def _error(text: str, tmp_path) -> ConfigError:
    f = tmp_path / "policies.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_policies(f)
    return info.value


@pytest.mark.parametrize(
    ("text", "policy", "key"),
    [
        ("policies: [{match: 'a.#', profile: activemq, settings: {maximumRedeliverys: 3}}]", "a.#",
         "settings.maximumRedeliverys"),
        ("policies: [{match: 'a.#', profile: activemq, settings: {maximumRedeliveries: 'six'}}]", "a.#",
         "settings.maximumRedeliveries"),
        # any long is taken (a negative delay redelivers at once), but not a duration: the brokers' keys are in ms
        ("policies: [{match: 'a.#', profile: activemq, settings: {initialRedeliveryDelay: 5s}}]", "a.#",
         "settings.initialRedeliveryDelay"),
        ("policies: [{match: 'a.#', profile: artemis, settings: {redelivery-delay: 1.5}}]", "a.#",
         "settings.redelivery-delay"),
        ("policies: [{match: 'a.#', profile: artemis, settings: {redelivery-delay-multiplier: .nan}}]", "a.#",
         "settings.redelivery-delay-multiplier"),
        # Artemis refuses to start with a factor outside [0, 1] (FileConfigurationParser)
        ("policies: [{match: 'a.#', profile: artemis, settings: {redelivery-collision-avoidance-factor: 1.5}}]",
         "a.#", "settings.redelivery-collision-avoidance-factor"),
        ("policies: [{match: 'a.#', profile: exponential, settings: {multiplier: 0.5}}]", "a.#",
         "settings.multiplier"),
        ("policies: [{match: 'a.#', profile: exponential, settings: {initial_delay: '-3s'}}]", "a.#",
         "settings.initial_delay"),
        ("policies: [{match: 'a.#', profile: stepped, settings: {max_deliveries: 0}}]", "a.#",
         "settings.max_deliveries"),
        ("policies: [{match: 'a.#', profile: stepped, settings: {jitter: proportional}}]", "a.#",
         "settings.jitter_factor"),
        ("policies: [{match: 'a.#', profile: rocketmq, settings: {messageDelayLevel: '1x 2s'}}]", "a.#",
         "settings.messageDelayLevel"),
        # a digit isdigit takes and int() refuses; a level beyond a Java long (both once a traceback or a crash)
        ("policies: [{match: 'a.#', profile: rocketmq, settings: {messageDelayLevel: '1s \u00b2s'}}]", "a.#",
         "settings.messageDelayLevel"),
        ("policies: [{match: 'a.#', profile: rocketmq, settings: {messageDelayLevel: '1s 106751991168d'}}]", "a.#",
         "settings.messageDelayLevel"),
        ("policies: [{match: 'a.b#', profile: stepped}]", "a.b#", "match"),
        ("policies: [{match: 'a..b', profile: stepped}]", "a..b", "match"),
        ("policies: [{match: 'a.#', profile: kafka}]", "a.#", "profile"),
        ("policies: [{match: 'a.#', profile: stepped, retries: 3}]", "a.#", "retries"),
        ("policies: [{match: 'a.#', profile: stepped}, {match: 'a.#', profile: stepped}]", "a.#", "match"),
        ("policies: [{match: 'a.#', profile: stepped, non_retryable: [{error_class: '('}]}]", "a.#",
         "non_retryable[0].error_class"),
        ("policies: [{match: 'a.#', profile: stepped, dead_letter_address: 'DLQ.{group}'}]", "a.#",
         "dead_letter_address"),
        ("policies: [{match: 'a.#', profile: artemis, consumer_group: g}]", "a.#", "consumer_group"),
        ("policies: [{match: 'a.#', profile: stepped, consumer_group: ''}]", "a.#", "consumer_group"),
        ("policies: [{match: 'a.#', profile: stepped, consumer_group: 7}]", "a.#", "consumer_group"),
        ("policies: [{match: 'a.#', profile: stepped, consumer_group: null}]", "a.#", "consumer_group"),
        ("policies: [{match: 'a.#', profile: stepped, consumer_group: g}, "
         "{match: 'a.#', profile: stepped, consumer_group: g}]", "a.# @g", "match"),
    ],
)
def test_invalid_config_names_file_policy_and_key(text, policy, key, tmp_path):
    err = _error(text, tmp_path)
    assert err.file == str(tmp_path / "policies.yaml")
    assert err.policy == policy
    assert err.key == key
    assert str(tmp_path / "policies.yaml") in str(err)
    assert key in str(err)


@pytest.mark.parametrize(("text", "ms"), [("2.01s", 2010), ("4.1m", 246_000), ("1.001s", 1001), ("32.3s", 32_300),
                                          ("0.5ms", 0), ("1.0005s", 1000), ("10s", 10_000), ("1.5d", 129_600_000)])
def test_decimal_durations_are_exact_milliseconds_truncated_only_below_one(text, ms):
    """As floats, 2.01 * 1000 is 2009.9999999999998: a stepped delay of 2.01s was 2009 ms."""
    from reprocess.policy.durations import parse_duration_ms

    assert parse_duration_ms(text) == ms


def test_activemq_accepts_every_value_activemq_accepts():
    ps = parse_policies("policies: [{match: '#', profile: activemq, settings: {backOffMultiplier: 0.5, "
                        "maximumRedeliveries: -1, maximumRedeliveryDelay: -1, collisionAvoidanceFactor: 0.9}}]")
    assert ps.policies[0].settings.back_off_multiplier == 0.5


def test_unreadable_and_non_yaml_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_policies(tmp_path / "missing.yaml")
    err = _error("policies: [unclosed", tmp_path)
    assert "YAML" in str(err)
    assert "policies" in str(_error("policies: []", tmp_path))


def test_an_address_two_artemis_patterns_tie_on_merges_them_in_the_broker_order():
    """``*.eu.#`` and ``shop.#`` are equal to MatchComparator (two ``#`` patterns of six characters), and both match
    ``shop.eu.cart``. An Artemis broker with these two address settings, in either order in its broker.xml, merges
    ``shop.#`` first (its HashMap's order, checked in tests/test_artemis_order.py): its dead-letter address wins.
    Before, the file's order decided, so the file below sent the cart's dead letters to eu.dlq."""
    pair = [{"match": "*.eu.#", "profile": "artemis", "settings": {"dead-letter-address": "eu.dlq"}},
            {"match": "shop.#", "profile": "artemis",
             "settings": {"dead-letter-address": "shop.dlq", "max-delivery-attempts": 3}}]
    for ordered in (pair, pair[::-1]):
        ps = policies_from_mapping({"policies": ordered})
        cart = ps.resolve("shop.eu.cart")
        assert cart is not None
        assert (cart.match, cart.settings.dead_letter_address, cart.settings.max_delivery_attempts) == (
            "shop.#", "shop.dlq", 3)
        assert ps.merged_from("shop.eu.cart") == []
        eu = ps.resolve("news.eu.x")
        assert eu is not None
        assert (eu.match, eu.settings.dead_letter_address, eu.settings.max_delivery_attempts) == (
            "*.eu.#", "eu.dlq", 10)
    # other profiles are no broker's address settings: their ties keep file order
    ps = policies_from_mapping({"policies": [{"match": "*.eu.#", "profile": "stepped", "settings": {"delays": ["1s"]}},
                                             {"match": "shop.#", "profile": "artemis"}]})
    resolved = ps.resolve("shop.eu.cart")
    assert resolved is not None
    assert resolved.match == "*.eu.#"


def test_a_tie_with_a_policy_of_another_profile_depends_on_no_pattern_outside_it():
    """Only the tied patterns that are a broker's settings exchange places, within the group of equal patterns: an
    artemis pattern that matches nothing here and ties with nothing (``a.#`` ... ``k.#``) changes nothing. Before,
    the broker's order was applied across all of its patterns, and five of those eleven moved ``shop.#`` ahead."""
    base = [{"match": "*.eu.#", "profile": "artemis", "settings": {"dead-letter-address": "eu.dlq"}},
            {"match": "shop.#", "profile": "stepped", "settings": {"delays": ["1s"]}}]
    for word in "abcdefghijk":
        ps = policies_from_mapping({"policies": [*base, {"match": f"{word}.#", "profile": "artemis"}]})
        resolved = ps.resolve("shop.eu.cart")
        assert resolved is not None
        assert resolved.match == "*.eu.#", word


def test_broker_false_is_for_artemis_policies_and_a_lone_surrogate_is_no_crash():
    with pytest.raises(ConfigError) as caught:
        policies_from_mapping({"policies": [{"match": "#", "profile": "stepped", "broker": False}]})
    assert caught.value.key == "broker"
    assert "only artemis policies" in caught.value.message
    with pytest.raises(ConfigError, match="true or false"):
        policies_from_mapping({"policies": [{"match": "#", "profile": "artemis", "broker": "no"}]})
    ps = policies_from_mapping({"policies": [{"match": "a\ud800.#", "profile": "artemis"},
                                             {"match": "b\ud800.#", "profile": "artemis"}]})
    assert sorted(ps.precedence) == [0, 1]  # Java hashes UTF-16 units, a lone surrogate too


@pytest.mark.unit
def test_a_consumer_groups_policies_come_first_for_its_messages_only():
    ps = parse_policies("""
policies:
  - {match: "#", profile: stepped}
  - {match: "a.b", profile: stepped}
  - {match: "a.#", profile: rocketmq, consumer_group: g}
  - {match: "a.b", profile: rocketmq, consumer_group: h}
""")

    def name(address: str, group: str | None) -> str | None:
        policy = ps.resolve(address, group)
        return None if policy is None else policy.name

    # the group's match wins over a more specific match of no group; another group's never applies
    assert [name("a.b", g) for g in (None, "g", "h", "x")] == ["a.b", "a.# @g", "a.b @h", "a.b"]
    assert [name("a.c", g) for g in (None, "g", "h")] == ["#", "a.# @g", "#"]
    assert name("z", "g") == "#"
    assert ps.tie("a.b", "h") is None
    assert ps.merged_from("a.b", "g") == []


@pytest.mark.unit
def test_a_groups_tie_and_merges_are_its_own_and_braces_double_in_dead_letter_addresses():
    ps = parse_policies("""
default_dead_letter_address: ops.dlq
policies:
  - {match: "#", profile: artemis, settings: {max-delivery-attempts: 4}}
  - {match: "*.created", profile: artemis, settings: {redelivery-delay: 5000}}
  - {match: "shop.#", profile: stepped, consumer_group: g, dead_letter_address: "dead.{{address}}"}
  - {match: "*.eu.#", profile: stepped, consumer_group: g, dead_letter_address: "{{{address}}}-{consumer_group}"}
""")
    assert ps.merged_from("shop.created") == ["#"]
    assert ps.merged_from("shop.created", "g") == []  # the group's policy is not an artemis one
    assert ps.tie("shop.eu.cart", "g") == (["*.eu.# @g"], "file")
    shop = ps.resolve("shop.eu.cart", "g")
    assert shop is not None
    assert shop.name == "shop.# @g"
    assert ps.fixed_dead_letter_address(shop) == "dead.{address}"  # doubled braces are one literal brace
    eu = ps.resolve("news.eu.x", "g")
    assert eu is not None
    assert ps.dead_letter_address_for(eu, "news.eu.x", "g") == "{news.eu.x}-g"


@pytest.mark.parametrize(("delays", "want"), [
    ("[010]", (10,)),  # YAML 1.1 read 8 (octal); Artemis and ActiveMQ read 10
    ("[0x10]", (16,)),
    ("[1:30]", "got '1:30'"),  # YAML 1.1 read 90 (base 60)
    ("[1_000]", "got '1_000'"),
    ("[100000000000000000000]", "is too large"),  # passed as a bare integer, then no Spark literal could hold it
    ("['١٠s']", "got '١٠s'"),  # Arabic-Indic digits: \d took them
])
def test_numbers_are_read_as_yaml_1_2_and_as_the_brokers_read_them(delays, want):
    """PyYAML reads YAML 1.1: `010` was 8 ms, `1:30` 90 ms, `1_000` 1000 ms, all without a word."""
    text = f"policies: [{{match: 'orders.#', profile: stepped, settings: {{delays: {delays}, max_deliveries: 3}}}}]"
    if isinstance(want, tuple):
        assert parse_policies(text).policies[0].settings.delays == want
    else:
        with pytest.raises(ConfigError, match=re.escape(want)):
            parse_policies(text)


def test_settings_that_are_no_mapping_a_huge_bound_and_spaced_delay_levels_are_refused():
    with pytest.raises(ConfigError, match=r"key='settings'\] 'settings' must be a mapping"):
        parse_policies("policies: [{match: '#', profile: rocketmq, settings: false}]")  # was: the defaults
    with pytest.raises(ConfigError, match="must be an integer from 1 to 9223372036854775807"):
        parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1s], "
                       "max_deliveries: 100000000000000000000}}]")
    # the broker splits on one space: two, or a tab, make a level it cannot parse (and it loads none)
    for levels in ("1s  5s", " 1s 5s", "1s\t5s"):
        with pytest.raises(ConfigError, match="bad level"):
            parse_policies("policies: [{match: '#', profile: rocketmq, settings: {messageDelayLevel: "
                           + json.dumps(levels) + "}}]")
    ok = parse_policies('policies: [{match: "#", profile: rocketmq, settings: {messageDelayLevel: "1s 5s "}}]')
    assert ok.policies[0].settings.message_delay_level == (1000, 5000)  # a trailing space: dropped, as Java's split


def test_strings_an_import_writes_that_yaml_1_2_reads_as_numbers_are_quoted():
    """PyYAML quotes only YAML 1.1's numbers: an imported dead-letter address '1e3' was written bare and read back
    as 1000.0."""
    from reprocess.policy.config import dump_policies

    doc = {"policies": [{"match": "#", "profile": "artemis",
                         "settings": {"dead-letter-address": "1e3", "max-delivery-attempts": 3}},
                        {"match": "0o17.#", "profile": "stepped", "settings": {"delays": ["1s"]}}]}
    text = dump_policies(doc, sort_keys=False)
    assert "'1e3'" in text
    ps = parse_policies(text)
    assert ps.policies[0].settings.dead_letter_address == "1e3"
    assert ps.policies[1].match == "0o17.#"
    assert ps.policies[0].settings.max_delivery_attempts == 3  # numbers stay numbers


def test_an_artemis_setting_given_as_null_is_inherited_as_adr_0008_says():
    ps = parse_policies("policies: [{match: '#', profile: artemis, settings: {max-delivery-attempts: 3}}, "
                        "{match: 'billing.*', profile: artemis, settings: {max-delivery-attempts: ~, "
                        "redelivery-delay: 5000}}]")  # was: 'must be an integer, got None'
    settings = ps.resolve("billing.eu", None).settings
    assert (settings.max_delivery_attempts, settings.redelivery_delay) == (3, 5000)
    with pytest.raises(ConfigError, match="unknown key"):  # a typo's empty value is not taken for a null setting
        parse_policies("policies: [{match: '#', profile: artemis, settings: {max-delivery-atempts: ~}}]")


def test_a_duplicate_key_beside_an_alias_of_its_own_mapping_is_named_not_a_recursion():
    """Finding the policy and path of a duplicate key walks the file's nodes: an alias inside the mapping it names
    led the walk back into that mapping for good (a RecursionError, a traceback instead of exit 3)."""
    text = """
policies:
  - match: a
    profile: stepped
    settings: &s
      loop: *s
      max_deliveries: 1
      max_deliveries: 2
"""
    with pytest.raises(ConfigError) as info:
        parse_policies(text)
    assert (info.value.policy, info.value.key) == ("a", "settings.max_deliveries")
    assert "duplicate key at line 8" in str(info.value)


@pytest.mark.parametrize(("match", "policy"), [("5", "#0"), ("'5'", "5"), ("~", "#0")])
def test_a_duplicate_keys_policy_is_its_match_only_where_that_is_a_string(match, policy):
    with pytest.raises(ConfigError) as info:
        parse_policies(f"policies:\n  - match: {match}\n    profile: stepped\n    profile: stepped\n")
    assert (info.value.policy, info.value.key) == (policy, "profile")


@pytest.mark.parametrize(("pattern", "python_only"), [
    (r"(?a)\w+ invalid", True),  # ASCII-only classes: Java has no flag a, and its Pattern refuses the cycle's rlike
    (r"(?ia)timeout", True),
    (r"(<)?a(?(1)>)", True),  # a conditional group
    (r"(?P<f>amount) invalid", True),
    (r"(?i)timeout", False),
    (r"(?iu)échec", False),
    (r"(?x) time out", False),
    (r"(?i:time)out", False),
])
def test_a_rule_in_regex_syntax_java_refuses_is_refused_as_the_file_is_read(pattern, python_only):
    """Python compiles (?a), (?L) and (?(1)..); Java's Pattern refuses them, so the cycle failed at its rlike."""
    doc = {"non_retryable": [{"message": pattern}], "policies": [{"match": "#", "profile": "stepped"}]}
    if python_only:
        with pytest.raises(ConfigError, match="Python-only"):
            policies_from_mapping(doc)
    else:
        assert policies_from_mapping(doc).non_retryable[0].message == pattern
