"""A pure-Python simulation of reprocessing cycles: the reference the Spark cycle is checked against.

Written independently of the Spark code, from the rules in docs/adr/0001-counting.md and
docs/adr/0003-commit-protocol.md: records are ingested by the first run whose as-of reaches their
failed_at, exact duplicates count once, failures of one message count one delivery each in time
order, due messages are re-driven at the as-of, and outcomes follow the policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprocess.policy.reference import Action, decide

if TYPE_CHECKING:
    from reprocess.policy.config import PolicySet

_OFFSET = re.compile(r"(Z|[+-]\d{2}(:?\d{2})?)$")


@dataclass
class Msg:
    message_id: str
    address: str = ""
    payload: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    ordering_key: str | None = None
    consumer_group: str | None = None
    state: str = "WAITING_RETRY"
    deliveries: int = 0
    first_failed_ms: int = 0
    next_attempt_ms: int | None = None
    reason_code: str | None = None
    seen: set[str] = field(default_factory=set)


def _ms(text: str) -> int | None:
    if not isinstance(text, str) or not _OFFSET.search(text):
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def read_landing(root: Path) -> list[dict[str, Any]]:
    """The valid records of a landing tree (the simple validity rules the generator's bad lines break)."""
    out = []
    for f in sorted(root.rglob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("message_id"), str):
                continue
            ms = _ms(rec.get("failed_at"))
            if ms is None or not isinstance(rec.get("address"), str) or not isinstance(rec.get("payload"), str):
                continue
            rec["_ms"] = ms
            rec["_fp"] = json.dumps({k: v for k, v in rec.items() if k != "_ms"}, sort_keys=True)
            out.append(rec)
    return out


class Simulation:
    def __init__(self, policies: PolicySet, target: Callable[[dict[str, Any]], None]) -> None:
        self.policies = policies
        self.target = target
        self.messages: dict[str, Msg] = {}
        self.ingested_through: int | None = None

    def _dead(self, m: Msg, reason: str) -> None:
        m.state, m.reason_code, m.next_attempt_ms = "DEAD_LETTERED", reason, None

    def _after_failure(self, m: Msg, k: int, failed_ms: int, non_retryable: bool) -> None:
        policy = self.policies.resolve(m.address, m.consumer_group)
        assert policy is not None
        m.deliveries = k
        if non_retryable:
            self._dead(m, "NON_RETRYABLE")
            return
        d = decide(policy, k, m.message_id)
        if d.action is Action.DEAD_LETTER:
            self._dead(m, "NO_DEAD_LETTER_ADDRESS" if policy.drops_without_dla else "MAX_DELIVERIES_EXCEEDED")
        else:
            assert d.delay_ms is not None
            m.state, m.reason_code = "WAITING_RETRY", None
            m.next_attempt_ms = failed_ms + d.delay_ms

    def _non_retryable(self, address: str, group: str | None, error_class: str | None,
                       error_message: str | None) -> bool:
        policy = self.policies.resolve(address, group)
        assert policy is not None
        return self.policies.is_non_retryable(policy, error_class, error_message)

    def run(self, records: list[dict[str, Any]], as_of_ms: int) -> None:
        lo = self.ingested_through
        batch = [r for r in records if r["_ms"] <= as_of_ms and (lo is None or r["_ms"] > lo)]
        self.ingested_through = as_of_ms
        by_msg: dict[str, list[dict[str, Any]]] = {}
        for r in batch:
            if self.policies.resolve(r["address"], r.get("consumer_group")) is None:
                continue
            by_msg.setdefault(r["message_id"], []).append(r)
        for mid, recs in by_msg.items():
            m = self.messages.get(mid)
            new = m is None
            if m is None:
                m = Msg(mid)
            fresh = []
            # at one time, by the delivery counts they carry, a record without one first (ledger.merge)
            for r in sorted(recs, key=lambda r: (r["_ms"], r.get("delivery_count") is not None,
                                                 r.get("delivery_count") or 0)):
                if r["_fp"] in m.seen:
                    continue
                m.seen.add(r["_fp"])
                fresh.append(r)
            if not fresh:
                continue
            prev = m.deliveries + (0 if m.state == "DELIVERED" else 1) - 1
            any_nr = False
            for r in fresh:
                k = max(prev + 1, int(r.get("delivery_count", 1)))
                prev = k
                any_nr = any_nr or self._non_retryable(r["address"], r.get("consumer_group"), r.get("error_class"),
                                                       r.get("error_message"))
            last = fresh[-1]
            m.address, m.payload, m.headers = last["address"], last["payload"], dict(last.get("headers") or {})
            m.ordering_key, m.consumer_group = last.get("ordering_key"), last.get("consumer_group")
            m.first_failed_ms = fresh[0]["_ms"] if new else min(m.first_failed_ms, fresh[0]["_ms"])
            self._after_failure(m, prev, last["_ms"], any_nr)
            self.messages[mid] = m
        due = [m for m in self.messages.values()
               if m.state == "WAITING_RETRY" and m.next_attempt_ms is not None and m.next_attempt_ms <= as_of_ms]
        due = [m for m in due if self._is_head(m)]
        for m in sorted(due, key=lambda m: m.message_id):
            delivery = m.deliveries + 1
            try:
                self.target({"message_id": m.message_id, "address": m.address, "payload": m.payload,
                             "headers": m.headers, "delivery": delivery})
            except Exception as exc:  # noqa: BLE001
                cls = type(exc)
                name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
                self._after_failure(m, delivery, as_of_ms,
                                    self._non_retryable(m.address, m.consumer_group, name, str(exc)))
            else:
                m.state, m.deliveries, m.next_attempt_ms, m.reason_code = "DELIVERED", delivery, None, None

    def _is_head(self, m: Msg) -> bool:
        policy = self.policies.resolve(m.address, m.consumer_group)
        if policy is None or not policy.ordered or m.ordering_key is None:
            return True
        same = [o for o in self.messages.values() if o.state == "WAITING_RETRY" and o.ordering_key == m.ordering_key
                and o.address == m.address and (o.consumer_group or None) == (m.consumer_group or None)
                and (p := self.policies.resolve(o.address, o.consumer_group)) is not None and p.ordered]
        head = min(same, key=lambda o: (o.first_failed_ms, o.message_id))
        return head.message_id == m.message_id

    def states(self) -> dict[str, tuple[str, int, int | None, str | None]]:
        return {mid: (m.state, m.deliveries, m.next_attempt_ms, m.reason_code) for mid, m in self.messages.items()}
