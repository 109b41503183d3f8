"""Limits shared by the jobs and the DAG forms that check them first (no Spark import: the DAG files load this)."""

from __future__ import annotations

MIN_RATE_PER_SECOND = 1 / 86_400  # a DLQ re-drive's slowest rate: one message a day

# An address pattern as the forms take it: dot-separated words, each '*' (one word), '#' (any words) or text without
# either (the job refuses a wildcard mixed with text: reprocess.policy.wildcard.validate_pattern), no space or '/'.
# The lookahead refuses a final newline, which '$' lets through in Python (jsonschema checks with re.search).
MATCH_PATTERN = r"^(?!.*\n)(?:[*#]|[^\s./*#]+)(?:\.(?:[*#]|[^\s./*#]+))*$"
