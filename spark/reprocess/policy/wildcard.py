"""Artemis address wildcards: words split on ``.``, ``*`` is one word, ``#`` is any number of words.

Precedence is Artemis's ``HierarchicalObjectRepository.MatchComparator`` (read from Artemis's
source): a pattern without ``#`` beats one with ``#``; between two ``#`` patterns the longer
string wins; a pattern without ``*`` beats one with ``*``; between two ``*`` patterns, walking
word by word, the first word where only one of them has ``*`` decides (the literal word wins);
otherwise the shorter string sorts first. Ties among an Artemis broker's address settings keep the order its
repository iterates them in (:func:`artemis_iteration_order`); other ties keep the order of the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from itertools import groupby

ANY_WORDS = "#"
SINGLE_WORD = "*"
DELIMITER = "."


def validate_pattern(pattern: str) -> str | None:
    """Return why ``pattern`` is not a valid match expression, or ``None`` when it is."""
    if not isinstance(pattern, str) or pattern == "":
        return "a match must be a non-empty string"
    if pattern != pattern.strip():
        return "a match must not start or end with whitespace"
    for word in pattern.split(DELIMITER):
        if word == "":
            return f"empty word in {pattern!r} (two dots, or a leading/trailing dot)"
        if word not in (ANY_WORDS, SINGLE_WORD) and (ANY_WORDS in word or SINGLE_WORD in word):
            return f"wildcard mixed with text in word {word!r} of {pattern!r}; '#' and '*' must be whole words"
    return None


def matches(pattern: str, address: str) -> bool:
    """True when ``address`` matches the Artemis wildcard ``pattern``."""
    return _match_words(pattern.split(DELIMITER), address.split(DELIMITER))


def _match_words(pat: list[str], words: list[str]) -> bool:
    # Iterative DP over (pattern index, word index); '#' may consume zero or more words.
    reachable = {0}
    for p in pat:
        nxt: set[int] = set()
        for i in reachable:
            if p == ANY_WORDS:
                nxt.update(range(i, len(words) + 1))
            elif i < len(words) and ((p == SINGLE_WORD and words[i] != "") or p == words[i]):
                nxt.add(i + 1)
        if not nxt:
            return False
        reachable = nxt
    return len(words) in reachable


def _reaches(ends: tuple[int, ...], moves: Callable[..., list[tuple[int, ...]]]) -> bool:
    """True when ``ends`` can be reached from the start (all zeros) through ``moves``: a walk over patterns' words."""
    seen: set[tuple[int, ...]] = set()
    todo = [tuple(0 for _ in ends)]
    while todo:
        state = todo.pop()
        if state == ends:
            return True
        if state not in seen:
            seen.add(state)
            todo.extend(moves(*state))
    return False


def overlap(*patterns: str) -> bool:
    """True when some address matches every one of ``patterns`` (the product of their word automata)."""
    split = [p.split(DELIMITER) for p in patterns]

    def moves(*at: int) -> list[tuple[int, ...]]:
        out = []
        for n, (words, i) in enumerate(zip(split, at, strict=True)):
            if i < len(words) and words[i] == ANY_WORDS:
                out.append((*at[:n], i + 1, *at[n + 1:]))  # '#' stops taking words
        tokens = [words[i] if i < len(words) else None for words, i in zip(split, at, strict=True)]
        literals = {t for t in tokens if t not in (ANY_WORDS, SINGLE_WORD)}
        if len(literals) <= 1 and None not in literals:  # one word taken by all: their literals are that word
            out.append(tuple(i if t == ANY_WORDS else i + 1 for t, i in zip(tokens, at, strict=True)))
        return out

    return _reaches(tuple(len(words) for words in split), moves)


def covers(general: str, specific: str) -> bool:
    """True when every address matching ``specific`` matches ``general`` as well.

    Sound but not complete: a True is always right, a False may miss a cover that only unfolding both patterns'
    ``#`` would show (``#.*`` over ``*.#``); callers use it to skip a test, never to decide a match."""
    s, g = specific.split(DELIMITER), general.split(DELIMITER)

    def moves(i: int, j: int) -> list[tuple[int, ...]]:
        if j < len(g) and g[j] == ANY_WORDS:
            # '#' stops, or takes whatever the specific word stands for, '#' included
            out: list[tuple[int, ...]] = [(i, j + 1)]
            return out + [(i + 1, j)] if i < len(s) else out
        if i < len(s) and j < len(g) and (
                (g[j] == SINGLE_WORD and s[i] != ANY_WORDS) or (g[j] != SINGLE_WORD and s[i] == g[j])):
            return [(i + 1, j + 1)]
        return []

    return _reaches((len(s), len(g)), moves)


def _compare(a: str, b: str) -> int:
    """Artemis's ``MatchComparator``: negative when ``a`` is more specific than ``b``."""
    a_any, b_any = ANY_WORDS in a, ANY_WORDS in b
    if a_any and not b_any:
        return 1
    if not a_any and b_any:
        return -1
    if a_any and b_any:
        return len(b) - len(a)
    a_one, b_one = SINGLE_WORD in a, SINGLE_WORD in b
    if a_one and not b_one:
        return 1
    if not a_one and b_one:
        return -1
    if a_one and b_one:
        left, right = a.split(DELIMITER), b.split(DELIMITER)
        for i, word in enumerate(left):
            if i >= len(right):
                return -1
            if word == SINGLE_WORD and right[i] != SINGLE_WORD:
                return 1
            if word != SINGLE_WORD and right[i] == SINGLE_WORD:
                return -1
    return len(a) - len(b)


def specificity(pattern: str) -> tuple[int, int, tuple[bool, ...], int]:
    """The sort key of :func:`precedence`, lowest first: two patterns that can match one address have equal keys
    exactly when Artemis's ``MatchComparator`` calls them equal."""
    if ANY_WORDS in pattern:
        return 2, 0, (), -len(pattern)  # the longer string first
    if SINGLE_WORD in pattern:
        words = pattern.split(DELIMITER)
        return 1, len(words), tuple(w == SINGLE_WORD for w in words), len(pattern)
    return 0, 0, (), len(pattern)


def precedence(patterns: list[str], broker: Collection[int] = ()) -> list[int]:
    """Indexes of ``patterns``, most specific first.

    Resolving an address is "the first pattern in this order that matches", as the Spark expression does with a
    ``when`` chain. Artemis's repository sorts only the patterns that match the address by ``MatchComparator``
    (``HierarchicalObjectRepository.getMatches``); over all patterns that comparator is not an order (``*.*.a``
    before ``*``, ``*`` before ``*.*.*``, yet ``*.*.*`` before ``*.*.a``), and one sort of the whole list put
    ``billing.*.*`` before ``billing.*.eu`` next to ``orders.*``. Patterns with ``*`` and no ``#`` are therefore
    grouped by their number of words first: two of different lengths never match one address, and within a length
    the comparator's order is lexicographic (the first word where only one has ``*``, then the string's length),
    so this order puts the patterns matching any address in the order Artemis's sort gives them.

    Patterns the comparator calls equal (``a.*.#`` and ``*.b.#``, both matching ``a.b``) come in file order, but
    for those whose indexes are in ``broker``, the address settings of one Artemis broker in its ``broker.xml``'s
    order: Artemis's sort is stable, so among them the order its repository iterates them in decides
    (:func:`artemis_iteration_order`). In each group of equal patterns they take the places the group's members of
    ``broker`` hold in the file, in that order; the others keep theirs. So a tie between a broker's pattern and
    another (a policy of another profile) depends on no pattern outside the group.
    """

    def key(x: int) -> tuple[int, int, tuple[bool, ...], int]:
        return specificity(patterns[x])

    order = sorted(range(len(patterns)), key=lambda x: (key(x), x))
    members = sorted(broker)
    iterated = artemis_iteration_order([patterns[i] for i in members])
    if iterated is None:
        return order
    rank = {members[n]: r for r, n in enumerate(iterated)}
    out: list[int] = []
    for _, tied in groupby(order, key=key):
        group = list(tied)
        ranked = iter(sorted((x for x in group if x in rank), key=rank.__getitem__))
        out.extend(next(ranked) if x in rank else x for x in group)
    return out


def artemis_accepts(pattern: str) -> bool:
    """True unless Artemis refuses ``pattern`` as an address-setting match (2.x's ``Match.verify``: a ``#`` anywhere
    but at the end); such a pattern is never one of a broker's address settings."""
    return ANY_WORDS not in pattern or pattern.index(ANY_WORDS) == len(pattern) - 1


def utf16_units(text: str) -> list[int]:
    """The UTF-16 code units of ``text``, as a Java string holds them (a lone surrogate included)."""
    units = text.encode("utf-16-be", "surrogatepass")
    return [units[k] << 8 | units[k + 1] for k in range(0, len(units), 2)]


def _java_hash(key: str) -> int:
    """``HashMap.hash`` of a Java string: its ``hashCode`` (UTF-16 units), high half folded into the low half."""
    h = 0
    for unit in utf16_units(key):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _hash_map_order(keys: list[str]) -> list[int] | None:
    """Positions of ``keys`` in the order a ``java.util.HashMap`` (JDK 8 and later) iterates them after they were
    put into a new one in this order, or ``None`` where a bin of it would become a tree (nine keys in one bin of a
    table of at least 64): a tree bin's order follows its red-black tree, which this does not follow.

    The table starts at 16 bins and doubles when the size passes three quarters of it, or when a bin reaches nine
    keys in a table under 64 (``treeifyBin``); a key goes to bin ``hash & (bins - 1)``, at the end of its chain, and
    a resize splits each chain in order. Iteration walks the bins in order and each chain from its head."""
    table: list[list[int]] = []
    size = 0

    def resize() -> None:
        nonlocal table
        grown: list[list[int]] = [[] for _ in range(max(16, 2 * len(table)))]
        for chain in table:
            for n in chain:
                grown[_java_hash(keys[n]) & (len(grown) - 1)].append(n)
        table = grown

    for n, key in enumerate(keys):
        if not table:
            resize()
        chain = table[_java_hash(key) & (len(table) - 1)]
        if any(keys[m] == key for m in chain):
            continue  # a key put again keeps its place
        chain.append(n)
        if len(chain) >= 9:  # putVal's binCount >= TREEIFY_THRESHOLD - 1
            if len(table) >= 64:
                return None
            resize()
        size += 1
        if size > len(table) * 3 // 4:
            resize()
    return [n for chain in table for n in chain]


def artemis_iteration_order(patterns: list[str]) -> list[int] | None:
    """Positions of an Artemis broker's address-setting patterns, given in its ``broker.xml``'s order, in the order
    its ``HierarchicalObjectRepository`` iterates its wildcard ones (the patterns without a wildcard, which never tie
    with another matching the same address, come last, in file order); ``None`` when a Java ``HashMap`` involved
    would hold a tree bin (:func:`_hash_map_order`).

    ``FileConfigurationParser`` puts the address settings into the configuration's ``HashMap`` in file order;
    ``ActiveMQServerImpl.deployAddressSettingsFromConfiguration`` adds them to the repository in that map's order,
    and ``addMatch`` puts the wildcard ones into the ``HashMap`` ``wildcardMatches``, whose ``values()`` stream
    ``getMatches`` sorts, stably, by ``MatchComparator`` (Artemis 2.32 and later). This is the order of a broker
    started from that ``broker.xml``: one that reloaded a changed file keeps its maps' larger tables, and address
    settings added through management come after. It holds for a policy file that lists the broker's address
    settings in its order, or leaves some out while the maps keep their sizes (at most 12 settings either way: 16
    bins). Before 2.32 Artemis copied the matching patterns (and an exact match) into a new ``HashMap`` and sorted
    that: the same order while both that map and the broker's wildcard map have 16 bins (at most 12 entries
    each)."""
    configured = _hash_map_order(patterns)
    if configured is None:
        return None
    wild = [n for n in configured if ANY_WORDS in patterns[n] or SINGLE_WORD in patterns[n]]
    iterated = _hash_map_order([patterns[n] for n in wild])
    if iterated is None:
        return None
    taken = set(wild)
    plain = [n for n in range(len(patterns)) if n not in taken]
    return [wild[k] for k in iterated] + plain


def most_specific(patterns: list[str], address: str) -> int | None:
    """Index in ``patterns`` of the most specific pattern matching ``address``, or ``None``; ties in file order
    (:meth:`PolicySet.resolve_index` breaks an Artemis broker's as the broker does)."""
    for i in precedence(patterns):
        if matches(patterns[i], address):
            return i
    return None


def to_regex(pattern: str) -> str:
    """A regex (valid in Java and Python) matching ``address + "."`` exactly when ``pattern`` matches."""
    parts = []
    for word in pattern.split(DELIMITER):
        if word == ANY_WORDS:
            parts.append(r"(?:[^.]+\.)*")
        elif word == SINGLE_WORD:
            parts.append(r"[^.]+\.")
        else:
            parts.append(re.escape(word).replace("/", "\\/") + r"\.")
    return "^" + "".join(parts) + "$"
