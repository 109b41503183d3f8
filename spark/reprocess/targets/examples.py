"""Deterministic example targets for demos and tests (``python:reprocess.targets.examples:flaky``).

Outcomes depend only on (message id, delivery), so re-runs and backfills re-drive identically.
"""

from __future__ import annotations

from typing import Any

from reprocess.policy.jitter import xxh64
from reprocess.targets.base import TargetUnavailable


class TransientError(Exception):
    """The downstream system was briefly unavailable; a retry may succeed."""


class PoisonMessage(Exception):
    """The message can never be processed (non-retryable under the default policy file)."""


def flaky(message: dict[str, Any]) -> None:
    """Poison payloads always fail; other messages fail transiently on about 40% of deliveries."""
    if "poison" in (message.get("payload") or ""):
        raise PoisonMessage(f"cannot parse payload of {message['message_id']}")
    h = xxh64(f"{message['message_id']}/{message['delivery']}".encode())
    if h % 10 < 4:
        raise TransientError(f"downstream timed out on delivery {message['delivery']}")


def always_ok(message: dict[str, Any]) -> None:
    """Accepts everything."""


def always_fail(message: dict[str, Any]) -> None:
    """Fails every delivery (transiently)."""
    raise TransientError("downstream is rejecting everything")


def unavailable(message: dict[str, Any]) -> None:
    """The downstream system is down: no message is delivered, none uses a delivery."""
    raise TargetUnavailable("downstream is down")


def down_for_down_addresses(message: dict[str, Any]) -> None:
    """Accepts everything but messages for addresses under ``down.``, whose endpoint is down (not the message's
    fault, and not the whole downstream's)."""
    if message["address"].startswith("down."):
        raise TargetUnavailable(f"the endpoint for {message['address']} is down", address_only=True)
