"""ActiveMQ Classic's choice of a destination's entry, emulated: which ``RedeliveryPolicyMap`` (or ``PolicyMap``)
entry a broker takes for a queue, so that an imported ``activemq.xml`` gives each queue that entry
(:mod:`reprocess.policy.classic_import`, docs/adr/0009-activemq-classic-entry-choice.md).

Classic (``DestinationMap.chooseValue``) finds the entries in its tree (``DestinationMapNode``), keeps those whose
filter matches the queue, sorts them with ``ActiveMQDestination.compare`` in a ``TreeSet`` and takes the first: an
entry whose pattern, read as a name, another one matches comes before it, else the names in string order. So for
``orders.eu`` Classic takes ``*.eu`` over ``orders.*`` (``'*' < 'o'``) where the policy file's precedence (Artemis's)
takes ``orders.*``. That comparison is not an order: ``orders.*`` and ``orders.>`` each compare after the other, so
for ``orders.x`` Classic takes whichever its ``TreeSet`` met first, in the order of a ``HashSet`` of the entries'
identity hashes, which changes from one broker start to the next: :func:`classic_choice` gives every entry it can
take. ``tests/test_classic_import.py`` checks it against the broker's own classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import permutations

from reprocess.errors import ConfigError
from reprocess.policy.wildcard import ANY_WORDS, DELIMITER, SINGLE_WORD, utf16_units

ANY_DESCENDENT = ">"  # Classic's "any number of words" (only at the end of a name)
MAX_RANDOM = 7  # matching entries whose orders of insertion are all tried (7! = 5040)


def _paths(name: str) -> list[str]:
    return name.split(DELIMITER)  # DestinationPath.getDestinationPaths: empty words kept


def is_pattern(name: str) -> bool:
    """``ActiveMQDestination.isPattern``: a ``*`` or ``>`` anywhere in the name."""
    return SINGLE_WORD in name or ANY_DESCENDENT in name


def classic_matches(pattern: str, name: str) -> bool:
    """``DestinationFilter.parseFilter(pattern).matches(name)``, both queues: a ``PrefixDestinationFilter`` when the
    last word is ``>`` (a word ``*`` of the name matches any word there), a ``WildcardDestinationFilter`` when a
    word is ``*``, else equality."""
    prefixes, path = _paths(pattern), _paths(name)
    if prefixes[-1] == ANY_DESCENDENT:
        while len(prefixes) > 1 and prefixes[-2] == ANY_DESCENDENT:  # trailing '>'s collapse to one
            prefixes.pop()

        def word(p: str, w: str) -> bool:
            return w == SINGLE_WORD or p == SINGLE_WORD or p == w

        if len(path) >= len(prefixes):
            return all(word(p, w) for p, w in zip(prefixes[:-1], path, strict=False))
        return all(word(p, w) for p, w in zip(prefixes, path, strict=False)) and len(prefixes) == len(path) + 1
    if SINGLE_WORD in prefixes:
        return len(path) == len(prefixes) and all(p == SINGLE_WORD or p == w for p, w in zip(prefixes, path,
                                                                                             strict=True))
    return pattern == name


def _tree_finds(pattern: list[str], queue: list[str], i: int = 0, j: int = 0) -> bool:
    """True when ``DestinationMapNode.appendMatchingValues`` reaches the entry stored under ``pattern``'s words when
    looking up ``queue``'s (a queue without wildcard words): a ``*`` child is walked from the next word, a ``>``
    child gives every entry under it, a word walks to its child, and at the end the node's own entries and its
    ``>`` child's are taken. So ``a.>.>`` is found for ``a.b`` but not for ``a``, which its filter matches."""
    while i < len(queue):
        if j < len(pattern):
            if pattern[j] == ANY_DESCENDENT:
                return True
            if pattern[j] == SINGLE_WORD and _tree_finds(pattern, queue, i + 1, j + 1):
                return True
        if j < len(pattern) and pattern[j] == queue[i]:
            i, j = i + 1, j + 1
        else:
            return False
    return j == len(pattern) or (j == len(pattern) - 1 and pattern[j] == ANY_DESCENDENT)


def finds(name: str, queue: str) -> bool:
    """True when the entry for ``name`` applies to ``queue`` (no wildcard words in it): ``DestinationMap.get`` finds
    it in its tree and ``chooseValue`` keeps it (the same name, or its filter matches)."""
    return name == queue or (_tree_finds(_paths(name), _paths(queue)) and classic_matches(name, queue))


def _java_compare(a: str, b: str) -> int:
    """``String.compareTo``: UTF-16 code units."""
    units_a, units_b = utf16_units(a), utf16_units(b)
    return (units_a > units_b) - (units_a < units_b)


def classic_compare(a: str, b: str) -> int:
    """``ActiveMQDestination.compare`` of two queues named ``a`` and ``b``: after the other when, as a pattern, it
    matches the other's name; before it when matched so; else the names in string order."""
    if is_pattern(a) and is_pattern(b) and a == b:
        return 0
    if is_pattern(a) and classic_matches(a, b):
        return 1
    if is_pattern(b) and classic_matches(b, a):
        return -1
    return _java_compare(a, b)


class _TreeSet:
    """A ``java.util.TreeSet`` with a comparator: ``TreeMap.put`` and its red-black ``fixAfterInsertion``. With a
    comparison that is not an order, which key comes first depends on the order of insertion and on the tree's
    shape, so both are followed."""

    def __init__(self, cmp: Callable[[int, int], int]) -> None:
        self.cmp = cmp
        self.root: int | None = None
        self.left: dict[int, int | None] = {}
        self.right: dict[int, int | None] = {}
        self.parent: dict[int, int | None] = {}
        self.red: dict[int, bool] = {}

    def add(self, key: int) -> None:
        at, c, t = None, 0, self.root
        while t is not None:
            at, c = t, self.cmp(key, t)
            if c == 0:
                return  # an equal key is there: TreeSet.add keeps it
            t = self.left[t] if c < 0 else self.right[t]
        self.left[key], self.right[key], self.parent[key], self.red[key] = None, None, at, at is not None
        if at is None:
            self.root = key
            return
        (self.left if c < 0 else self.right)[at] = key
        self._fix(key)

    def _fix(self, x: int) -> None:
        parent, red = self.parent, self.red
        while x != self.root and red[parent[x]]:  # type: ignore[index]
            p = parent[x]
            g = parent[p]  # type: ignore[index]
            assert p is not None
            assert g is not None
            on_left = p == self.left[g]
            uncle = self.right[g] if on_left else self.left[g]
            if uncle is not None and red[uncle]:
                red[p], red[uncle], red[g] = False, False, True
                x = g
                continue
            if x == (self.right[p] if on_left else self.left[p]):
                x = p
                self._rotate(x, on_left)
            p = parent[x]
            assert p is not None
            g = parent[p]
            red[p] = False
            if g is not None:
                red[g] = True
                self._rotate(g, not on_left)
        red[self.root] = False  # type: ignore[index]

    def _rotate(self, x: int, to_left: bool) -> None:
        near, far = (self.right, self.left) if to_left else (self.left, self.right)
        y = near[x]
        assert y is not None
        near[x] = far[y]
        if far[y] is not None:
            self.parent[far[y]] = x  # type: ignore[index]
        self.parent[y] = px = self.parent[x]
        if px is None:
            self.root = y
        elif self.left[px] == x:
            self.left[px] = y
        else:
            self.right[px] = y
        far[y] = x
        self.parent[x] = y

    def first(self) -> int:
        node = self.root
        assert node is not None
        while (nxt := self.left[node]) is not None:
            node = nxt
        return node


def _tree_first(keys: Iterable[int], cmp: Callable[[int, int], int]) -> int:
    """The first key of a :class:`_TreeSet` with comparator ``cmp`` after adding ``keys`` in this order."""
    tree = _TreeSet(cmp)
    for key in keys:
        tree.add(key)
    return tree.first()


def classic_choice(names: list[str], address: str) -> tuple[list[int], list[int]]:
    """The entries (indexes of ``names``) matching the queue ``address``, and the ones ``DestinationMap.chooseValue``
    can take: the first of a ``TreeSet`` sorted by its comparator, into which the matching entries are added in the
    order of a ``HashSet`` of them, which their identity hashes decide (so any order, from one broker start to the
    next). One when a matching entry sorts before every other both ways round; else each that comes first in some
    order of insertion (every order of at most :data:`MAX_RANDOM` entries is tried; ``ConfigError`` beyond)."""
    matching = [i for i, n in enumerate(names) if finds(n, address)]

    def cmp(i: int, j: int) -> int:
        if names[i] == address:
            return -1
        if names[j] == address:
            return 1
        return classic_compare(names[i], names[j])

    first = [m for m in matching if all(cmp(m, e) < 0 and cmp(e, m) > 0 for e in matching if e != m)]
    if first or not matching:
        return matching, first
    if len(matching) > MAX_RANDOM:
        raise ConfigError(f"the queue {address} matches {len(matching)} entries whose ActiveMQ order is not "
                          f"consistent (more than {MAX_RANDOM}, too many to try every order): "
                          + ", ".join(names[m] for m in matching))
    return matching, sorted({_tree_first(order, cmp) for order in permutations(matching)})


def translate(name: str) -> str | None:
    """The policy-file pattern matching the queues Classic's ``name`` matches, or ``None`` when there is none
    (a ``>`` not at the end matches only a queue of that literal name, ``a.>.>`` matches ``a.b`` but not ``a``,
    a word ``#`` is Artemis's wildcard)."""
    words = _paths(name)
    if ANY_DESCENDENT in words[:-1] or ANY_WORDS in words:
        return None
    return DELIMITER.join(ANY_WORDS if w == ANY_DESCENDENT else w for w in words)


def intersection(patterns: list[str]) -> str | None:
    """The pattern matching exactly the addresses all of ``patterns`` match (``#`` only at their ends), or None."""
    split = [p.split(DELIMITER) for p in patterns]
    open_ended = all(w[-1] == ANY_WORDS for w in split)
    fixed = [w for w in split if w[-1] != ANY_WORDS]
    length = len(fixed[0]) if fixed else max(len(w) - 1 for w in split)
    if any(len(w) != length for w in fixed) or any(len(w) - 1 > length for w in split if w[-1] == ANY_WORDS):
        return None
    out = []
    for i in range(length):
        literal = {w[i] for w in split if i < len(w) and w[i] not in (ANY_WORDS, SINGLE_WORD)}
        if len(literal) > 1:
            return None
        out.append(literal.pop() if literal else SINGLE_WORD)
    return DELIMITER.join(out + ([ANY_WORDS] if open_ended else [])) or None


def fresh_word(literals: set[str]) -> str:
    """A word that is none of ``literals``: it stands for every word no pattern names."""
    return next(f"x{n}" for n in range(len(literals) + 1) if f"x{n}" not in literals)


def address_kinds(patterns: list[str]) -> Iterator[str]:
    """One address of each kind ``patterns`` (``#`` only at their ends) tell apart: every way the words can equal
    the patterns' literals or none of them, up to one word longer than the longest pattern, each kind once (a walk
    that stops where the patterns still alive and the depth were met before)."""
    split = [p.split(DELIMITER) for p in patterns]
    literals = {w for words in split for w in words}
    fresh = fresh_word(literals)
    longest = max(len(w) for w in split) + 1
    seen: set[tuple[int, frozenset[int]]] = set()

    def alive(words: list[str]) -> frozenset[int]:
        out = set()
        for n, pat in enumerate(split):
            ok = True
            for i, w in enumerate(words):
                if i >= len(pat):
                    ok = False
                    break
                if pat[i] == ANY_WORDS:
                    break
                if pat[i] != SINGLE_WORD and pat[i] != w:
                    ok = False
                    break
            if ok:
                out.add(n)
        return frozenset(out)

    todo: list[list[str]] = [[]]
    while todo:
        words = todo.pop()
        if words:
            yield DELIMITER.join(words)
        state = (len(words), alive(words))
        if len(words) >= longest or state in seen:
            continue
        seen.add(state)
        nxt = {split[n][len(words)] for n in state[1] if len(words) < len(split[n])} - {ANY_WORDS, SINGLE_WORD}
        todo.extend([*words, w] for w in sorted(nxt, reverse=True) + [fresh])


__all__ = ["ANY_DESCENDENT", "address_kinds", "classic_choice", "classic_compare", "classic_matches", "finds",
           "fresh_word", "intersection", "is_pattern", "translate"]
