"""The policy file: wildcard precedence and ConfigErrors that name file, policy and key."""

from __future__ import annotations

import pytest

from reprocess.errors import ConfigError
from reprocess.policy import load_policies, parse_policies
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


def test_precedence_picks_among_the_matching_patterns_as_artemis_sorts_them():
    """Artemis sorts only the patterns matching the address (HierarchicalObjectRepository.getMatches) by its
    MatchComparator, which is not an order over all patterns: one sort of the whole list, as before, picked
    billing.*.* for billing.x.eu when orders.* was in the file."""
    import random
    from functools import cmp_to_key

    from reprocess.policy.wildcard import _compare

    pats = ["billing.*.eu", "orders.*", "billing.*.*"]
    assert pats[most_specific(pats, "billing.x.eu")] == "billing.*.eu"
    pats = ["*.*.a", "*", "*.*.*"]
    assert pats[most_specific(pats, "a.a.a")] == "*.*.a"

    def artemis(patterns: list[str], address: str) -> int | None:
        hits = [i for i, p in enumerate(patterns) if matches(p, address)]
        ordered = sorted(hits, key=cmp_to_key(lambda x, y: _compare(patterns[x], patterns[y]) or x - y))
        return ordered[0] if ordered else None

    rnd = random.Random(7)
    words = ["a", "b", "*", "#"]
    for _ in range(3000):
        patterns = list(dict.fromkeys(".".join(rnd.choice(words) for _ in range(rnd.randint(1, 4)))
                                      for _ in range(rnd.randint(2, 6))))
        address = ".".join(rnd.choice("ab") for _ in range(rnd.randint(1, 4)))
        assert most_specific(patterns, address) == artemis(patterns, address), (patterns, address)


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
        ("policies: [{match: 'a.#', profile: activemq, settings: {initialRedeliveryDelay: -5}}]", "a.#",
         "settings.initialRedeliveryDelay"),
        ("policies: [{match: 'a.#', profile: artemis, settings: {redelivery-delay: -1}}]", "a.#",
         "settings.redelivery-delay"),
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
        ("policies: [{match: 'a.b#', profile: stepped}]", "a.b#", "match"),
        ("policies: [{match: 'a..b', profile: stepped}]", "a..b", "match"),
        ("policies: [{match: 'a.#', profile: kafka}]", "a.#", "profile"),
        ("policies: [{match: 'a.#', profile: stepped, retries: 3}]", "a.#", "retries"),
        ("policies: [{match: 'a.#', profile: stepped}, {match: 'a.#', profile: stepped}]", "a.#", "match"),
        ("policies: [{match: 'a.#', profile: stepped, non_retryable: [{error_class: '('}]}]", "a.#",
         "non_retryable[0].error_class"),
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
