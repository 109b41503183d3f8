"""Deterministic jitter: a uniform draw seeded by (message id, delivery number).

Spark's built-in ``xxhash64`` (XXH64, seed 42) hashes the UTF-8 string ``"<message_id>#<k>"``;
this module is the same hash in pure Python, so the reference and the Spark expression draw the
very same numbers. From the 64-bit hash ``h``:

* ``unit(h)  = (h >>> 11) / 2**53``: a double in ``[0, 1)`` (exact, no rounding);
* ``sign(h)  = h & 1``: the coin of ActiveMQ/Artemis collision avoidance (1 means ``+``).

See docs/adr/0002-jitter.md.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5

SPARK_HASH_SEED = 42
TWO_POW_53 = float(1 << 53)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = SPARK_HASH_SEED) -> int:
    """XXH64 of ``data`` as an unsigned 64-bit integer."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        while i + 32 <= n:
            v1 = _round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h


def seed_text(message_id: str, delivery: int) -> str:
    """The string hashed for a message's ``delivery``-th failed delivery."""
    return f"{message_id}#{delivery}"


def draw(message_id: str, delivery: int) -> tuple[float, bool]:
    """``(unit, positive)``: a double in ``[0, 1)`` and a coin, fixed for (message, delivery)."""
    h = xxh64(seed_text(message_id, delivery).encode("utf-8"))
    return (h >> 11) / TWO_POW_53, bool(h & 1)


def to_signed(h: int) -> int:
    """The unsigned hash as Spark's signed ``bigint``."""
    return h - (1 << 64) if h >= (1 << 63) else h
