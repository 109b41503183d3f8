"""Durations: parse ``"10s"``/``"2h"``/``1500`` (ms) and print them for people; Java's long arithmetic."""

from __future__ import annotations

import math
import re
from fractions import Fraction

LONG_MAX = (1 << 63) - 1
LONG_MIN = -(1 << 63)
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$", re.ASCII)  # not '١٠s' (Arabic-Indic digits)


def parse_duration_ms(value: object) -> int:
    """``"10s"`` -> 10000; an int is taken as milliseconds. Raises ValueError on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '10s', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        if value > LONG_MAX:  # as one with a unit: the cycle's long arithmetic cannot hold it
            raise ValueError(f"duration {value} ms is too large")
        return value
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            ms = Fraction(m.group(1)) * _UNITS_MS[m.group(2)]  # exact: 2.01s is 2010 ms (as a float, 2009)
            if ms > LONG_MAX:
                raise ValueError(f"duration {value!r} is too large")
            return int(ms)
    raise ValueError(f"expected a duration like '500ms', '10s', '5m', '2h', '1d', got {value!r}")


def java_d2l(x: float) -> int:
    """Java's ``(long) x``: NaN -> 0, saturates at the long range, truncates toward zero."""
    if math.isnan(x):
        return 0
    if x >= 9.223372036854775807e18:
        return LONG_MAX
    if x <= -9.223372036854775808e18:
        return LONG_MIN
    return int(x)


def java_pow(base: float, exponent: float) -> float:
    """Java's ``Math.pow`` for a base of any sign and an integral exponent: overflow gives infinity instead of
    raising, negative for a negative base raised to an odd power (the exponent's parity as a double, as Java sees it:
    ``2**60 + 1`` is ``2**60``, even)."""
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return -math.inf if base < 0 and float(exponent) % 2.0 == 1.0 else math.inf


def sat_add(a: int, b: int) -> int:
    """``a + b`` clamped to the long range (no wrap-around)."""
    return max(LONG_MIN, min(LONG_MAX, a + b))


def human(ms: int | None) -> str:
    """``90061000`` -> ``'1d 1h 1m 1s'``; exact, largest units first."""
    if ms is None:
        return "-"
    if ms >= LONG_MAX:
        return "forever"
    if ms == 0:
        return "0s"
    parts = []
    rest = ms
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if rest >= size:
            n, rest = divmod(rest, size)
            parts.append(f"{n}{unit}")
        if len(parts) == 3:
            break
    return " ".join(parts) if rest == 0 or len(parts) < 3 else "~" + " ".join(parts)
