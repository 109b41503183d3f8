"""The landing suite's row-level expectations as Spark column expressions, evaluated in the cycle's own pass.

GX validates a batch; quarantine needs to know, for each record, which expectations *it* breaks. Rather than
rescan the batch once per expectation, the landing suite (``expectations/landing.json``) is compiled here into
one ``array<string>`` column naming the expectations a row breaks, with GX's semantics: a null value breaks
only ``expect_column_values_to_not_be_null`` (the other map expectations ignore nulls), ``between`` bounds are
inclusive unless ``strict_min``/``strict_max``, regexes are Java regexes matched with ``rlike`` (what GX's
Spark engine uses), ``{"$PARAMETER": name}`` takes the run's value. The suite stays the one place the rules
live: add an expectation there and records breaking it are quarantined as ``EXPECTATION_FAILED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from reprocess.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import Column

SUPPORTED = (
    "expect_column_values_to_not_be_null",
    "expect_column_value_lengths_to_be_between",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_not_match_regex",
    "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_not_be_in_set",
)


def expectation_name(exp: Mapping[str, Any]) -> str:
    """``expect_column_values_to_not_be_null(address)``: how a quarantined row names what it broke."""
    return f"{exp['type']}({exp['kwargs'].get('column', '')})"


def _value(v: Any, params: Mapping[str, Any], where: str) -> Any:
    if isinstance(v, dict) and "$PARAMETER" in v:
        name = v["$PARAMETER"]
        if name not in params:
            raise ConfigError(f"{where}: suite parameter '{name}' has no value (known: {sorted(params)})")
        return params[name]
    return v


def _broken(exp: Mapping[str, Any], col: Column, params: Mapping[str, Any], where: str) -> Column:
    """True when the row breaks ``exp``."""
    kind = exp["type"]
    kw = {k: _value(v, params, where) for k, v in exp["kwargs"].items()}
    if kind == "expect_column_values_to_not_be_null":
        return col.isNull()
    if kind in ("expect_column_value_lengths_to_be_between", "expect_column_values_to_be_between"):
        x = F.length(col) if kind == "expect_column_value_lengths_to_be_between" else col
        bad = F.lit(False)
        if kw.get("min_value") is not None:
            lo = F.lit(kw["min_value"])
            bad = bad | ((x <= lo) if kw.get("strict_min") else (x < lo))
        if kw.get("max_value") is not None:
            hi = F.lit(kw["max_value"])
            bad = bad | ((x >= hi) if kw.get("strict_max") else (x > hi))
        return col.isNotNull() & bad
    if kind == "expect_column_values_to_match_regex":
        return col.isNotNull() & ~col.rlike(kw["regex"])
    if kind == "expect_column_values_to_not_match_regex":
        return col.isNotNull() & col.rlike(kw["regex"])
    if kind == "expect_column_values_to_be_in_set":
        return col.isNotNull() & ~col.isin(list(kw["value_set"]))
    if kind == "expect_column_values_to_not_be_in_set":
        return col.isNotNull() & col.isin(list(kw["value_set"]))
    raise ConfigError(f"{where}: {kind} is not a row-level expectation; the landing suite may hold only "
                      f"{', '.join(SUPPORTED)}")


def check_suite(doc: Mapping[str, Any], columns: Mapping[str, Column], params: Mapping[str, Any]) -> None:
    """Reject a landing suite the compiler cannot honour exactly (before any work is done)."""
    for i, exp in enumerate(doc["expectations"]):
        where = f"expectations/{doc['name']}.json expectation {i} ({exp.get('type')})"
        if exp.get("type") not in SUPPORTED:
            raise ConfigError(f"{where}: not a row-level expectation; the landing suite may hold only "
                              f"{', '.join(SUPPORTED)}")
        column = exp.get("kwargs", {}).get("column")
        if column not in columns:
            raise ConfigError(f"{where}: unknown column {column!r} (landing columns: {sorted(columns)})")
        if exp["kwargs"].get("mostly", 1) != 1:
            raise ConfigError(f"{where}: 'mostly' has no meaning for one record; quarantine is per record")
        for v in exp["kwargs"].values():
            _value(v, params, where)


def broken_expectations(doc: Mapping[str, Any], columns: Mapping[str, Column],
                        params: Mapping[str, Any]) -> Column:
    """``array<string>`` of the names of the suite's expectations the row breaks (empty when it breaks none)."""
    check_suite(doc, columns, params)
    names = []
    for i, exp in enumerate(doc["expectations"]):
        where = f"expectations/{doc['name']}.json expectation {i}"
        cond = F.coalesce(_broken(exp, columns[exp["kwargs"]["column"]], params, where), F.lit(False))
        names.append(F.when(cond, F.lit(expectation_name(exp))))
    if not names:
        return F.array().cast("array<string>")
    return F.array_compact(F.array(*names))  # no lambda: sparkutil.sql_lambda says why


__all__ = ["SUPPORTED", "broken_expectations", "check_suite", "expectation_name"]
