"""Limits shared by the jobs and the DAG forms that check them first (no Spark import: the DAG files load this)."""

from __future__ import annotations

MIN_RATE_PER_SECOND = 1 / 86_400  # a DLQ re-drive's slowest rate: one message a day
MAX_COUNT = 2**62  # the largest count an option or a form takes (past a C long, pyarrow and Spark overflowed)

# The instants an option takes, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z: the reports write times as
# ISO-8601, which (and Python's datetime) spans those years; one past either end (9999-12-31T23:30-01:00,
# 0001-01-01T00:00+01:00) was taken and failed the command later.
EARLIEST_INSTANT_MS = -62_135_596_800_000
LATEST_INSTANT_MS = 253_402_300_799_999


def instant_problem(ms: int) -> str | None:
    """Why an instant (epoch ms) given as an option is refused, or None."""
    if ms > LATEST_INSTANT_MS:
        return "it is after 9999-12-31T23:59:59.999Z, the last instant ISO-8601 writes"
    if ms < EARLIEST_INSTANT_MS:
        return "it is before 0001-01-01T00:00:00Z, the first instant ISO-8601 writes"
    return None

# An address as the landing contract takes it (reprocess.landing.contract, the CLI's --address of a preview):
# dot-separated words, none empty, without whitespace, '/' or '\'. Unanchored: the contract matches it in Java
# (anchored there with a lookahead, since Java's '$' also matches before a final line terminator: U+2028 or NEL, which
# the control-character check does not catch), the CLI with re.fullmatch.
ADDRESS_WORDS = r"[^.\s/\\]+(?:\.[^.\s/\\]+)*"

# An address pattern as the forms take it: dot-separated words, each '*' (one word), '#' (any words) or text without
# either (the job refuses a wildcard mixed with text: reprocess.policy.wildcard.validate_pattern), no space or '/'.
# The lookahead refuses a final newline, which '$' lets through in Python (jsonschema checks with re.search).
MATCH_PATTERN = r"^(?!.*\n)(?:[*#]|[^\s./*#]+)(?:\.(?:[*#]|[^\s./*#]+))*$"
