"""Limits shared by the jobs and the DAG forms that check them first (no Spark import: the DAG files load this)."""

from __future__ import annotations

MIN_RATE_PER_SECOND = 1 / 86_400  # a DLQ re-drive's slowest rate: one message a day

# The latest instant an option takes, 9999-12-31T23:59:59.999Z: the reports write times as ISO-8601, which (and
# Python's datetime) ends there; a later one (9999-12-31T23:30-01:00) was taken and failed the command later.
LATEST_INSTANT_MS = 253_402_300_799_999


def instant_problem(ms: int) -> str | None:
    """Why an instant (epoch ms) given as an option is refused, or None."""
    return "it is after 9999-12-31T23:59:59.999Z, the last instant ISO-8601 writes" if ms > LATEST_INSTANT_MS else None

# An address pattern as the forms take it: dot-separated words, each '*' (one word), '#' (any words) or text without
# either (the job refuses a wildcard mixed with text: reprocess.policy.wildcard.validate_pattern), no space or '/'.
# The lookahead refuses a final newline, which '$' lets through in Python (jsonschema checks with re.search).
MATCH_PATTERN = r"^(?!.*\n)(?:[*#]|[^\s./*#]+)(?:\.(?:[*#]|[^\s./*#]+))*$"
