"""The order an Artemis broker gives tied address settings, against the JVM: Artemis's comparator and match
pattern with java.util.HashMap (tests/java/ArtemisSettingsOrder.java)."""

from __future__ import annotations

import pytest
from tests.java_program import run_java
from tests.test_config import _addresses

from reprocess.policy.wildcard import matches

pytestmark = pytest.mark.jvm


def _artemis_java_order(cases: list[tuple[list[str], list[str]]]) -> list[list[list[str]]]:
    """For each (patterns in broker.xml order, addresses): the patterns matching each address in the order an
    Artemis broker merges them, computed by the JVM with Artemis's comparator and java.util.HashMap
    (tests/java/ArtemisSettingsOrder.java)."""
    text = "".join("\t".join(p) + "\n" + "\t".join(a) + "\n" for p, a in cases)
    lines = iter(run_java("ArtemisSettingsOrder.java", text).split("\n"))
    return [[[m for m in next(lines).split("\t") if m] for _ in addresses] for _, addresses in cases]


def test_ties_among_artemis_patterns_break_as_the_broker_breaks_them():
    """Artemis's sort of the matching patterns is stable over its HashMap of wildcard settings, so two patterns its
    MatchComparator calls equal (``a.*.#`` and ``*.b.#``) come in that map's order, not the file's. Checked against
    the JVM: random broker files of 2 to 70 patterns (HashMap resizes at 12, 24, 48), with words that collide in
    ``String.hashCode`` ("Aa" and "BB") so chains share bins, and every address of up to three words; and files with
    nine and ten patterns of one hash, whose chains make the map grow early."""
    import random
    from itertools import product

    from reprocess.policy.wildcard import artemis_iteration_order, precedence

    rnd = random.Random(5)
    words = ["Aa", "BB", "x", "*"]
    addresses = _addresses(["Aa", "BB", "x"], 3)
    cases = []
    for _ in range(120):
        size = rnd.choice([2, 5, 12, 13, 25, 49, 70])
        pats: dict[str, None] = {}
        while len(pats) < size:
            body = [rnd.choice(words) for _ in range(rnd.randint(0, 3))]
            pats[".".join([*body, "#"] if rnd.random() < 0.6 or not body else body)] = None
        cases.append((list(pats), addresses))
    # nine and ten patterns with one hash: a chain of nine in a table under 64 bins doubles it (``treeifyBin``)
    same_hash = [".".join([*w, "#"]) for w in product(["Aa", "BB"], repeat=4)]
    for n in (9, 10):
        cases.append((["*.#", *same_hash[:n], "x.*"], _addresses(["Aa", "BB"], 4)))
    assert artemis_iteration_order(same_hash[:11]) is None  # a tree bin: its order is not followed
    # exact settings grow the configuration's map past the wildcard map, so the wildcard map is filled in an order
    # other than the file's: here it puts ``*.#`` before ``x.#`` in one bin, and ``x.billing`` merges ``*.#`` first
    cases.append((["x.#", "billing.#", "x.billing.#", "billing.us.#", "eu.#", "orders.eu.#", "*.#", "*.billing.#",
                   "eu.eu.#", "*.*.#", "us.x.#", "orders", "orders.eu", "billing.billing.eu", "x", "us", "billing.eu.x",
                   "billing", "eu.eu", "x.x.x", "us.billing.billing", "orders.x.billing", "billing.us",
                   "orders.orders.orders", "orders.x.us", "orders.us", "us.us.orders"],
                  _addresses(["orders", "billing", "eu", "us", "x"], 3)))
    expected = _artemis_java_order(cases)
    differ = 0
    for (patterns, some), orders in zip(cases, expected, strict=True):
        assert artemis_iteration_order(patterns) is not None
        order = precedence(patterns, range(len(patterns)))
        file_order = precedence(patterns)
        for address, java in zip(some, orders, strict=True):
            ours = [patterns[i] for i in order if matches(patterns[i], address)]
            assert ours == java, (patterns, address)
            differ += ours != [patterns[i] for i in file_order if matches(patterns[i], address)]
    assert differ > 0  # the broker's order is not the file's on some of them


def test_a_policy_file_orders_its_broker_settings_as_the_broker_among_policies_that_are_not():
    """A file holding a broker's twelve address settings, a '#' added with ``broker: false`` (a thirteenth setting
    would double the broker's map and change its order) and a policy of another profile: the broker's settings
    matching each address come in the JVM's order."""
    from reprocess.policy.config import policies_from_mapping

    broker = ["*.f.#", "a.#", "b.#", "d.#", "d.f.#", "e.#", "e.c.#", "e.d.#", "e.e.#", "f.#", "f.c.#", "g.#"]
    addresses = _addresses(list("abcdefg"), 3)
    [expected] = _artemis_java_order([(broker, addresses)])
    raw = [{"match": m, "profile": "artemis"} for m in broker]
    for extra in ([{"match": "#", "profile": "artemis", "broker": False}],
                  [{"match": "#", "profile": "artemis", "broker": False},
                   {"match": "*.c.#", "profile": "stepped", "settings": {"delays": ["1s"]}}]):
        ps = policies_from_mapping({"policies": [*raw, *extra]})
        for address, java in zip(addresses, expected, strict=True):
            assert [broker[i] for i in ps.precedence if i < len(broker) and matches(broker[i], address)] == java
    # counted as a broker setting, the '#' doubles the emulated map: d.f takes d.f.# before *.f.#, not after
    counted = policies_from_mapping({"policies": [*raw, {"match": "#", "profile": "artemis"}]})
    got = [broker[i] for i in counted.precedence if i < len(broker) and matches(broker[i], "d.f")]
    assert got != expected[addresses.index("d.f")]
