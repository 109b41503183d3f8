"""What the broker targets (``amqp://``, ``stomp://``) share: URI options, headers, rate limit, outage stop.

Each Spark partition opens one connection and publishes its messages one by one, waiting for the broker's
confirmation (AMQP publisher confirm, STOMP receipt) before counting a delivery. Outcomes:

* confirmed: the message is back on its address, the delivery is counted (``ok``);
* refused for this message only (AMQP ``basic.return``: no queue for that address; STOMP: an ERROR frame refusing
  that SEND as written, or the connection closed on it twice while the broker answers other frames): a failure of
  that delivery, scheduled by the message's policy like any other;
* the broker itself failing (connection refused or lost, timeout): the partition stops at once and reports one
  ``TARGET_DOWN`` row; the messages it did not get a confirmation for consume no delivery and stay due. The cycle
  commits what was confirmed and fails with ``TargetUnavailableError``;
* one destination refusing writes while the broker answers (STOMP: any other ERROR frame about a SEND, such as
  ActiveMQ's "User x is not authorized to write to: queue://y"; AMQP: a routing key RabbitMQ's topic permissions
  refuse, the channel closed with 403 "access to topic ...", or a nack: a full queue): that destination's messages
  in the partition stay due like the above (one ``DESTINATION_DOWN`` row, the others not tried), the other
  destinations' go on, and the cycle fails the same way once it has committed.

Every published message carries the original message id and address, the deliveries so far and a stable
idempotency key ``<message_id>:<delivery>`` (``<message_id>:r<resets>.<delivery>`` once an operator's re-drive reset
the count: targets.base.idempotency_key): after a crash between publish and commit the same delivery
may be published again with the same key (at-least-once), never lost.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from reprocess.errors import ConfigError
from reprocess.redaction import redact, userinfo_cut_short
from reprocess.targets.base import DESTINATION_DOWN, OUTCOME_SCHEMA, TARGET_DOWN, deliver_each, idempotency_key

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from reprocess.targets.base import RunContext

log = logging.getLogger(__name__)

HEADER_PREFIX = "x-reprocess-"


@dataclass(frozen=True)
class BrokerOptions:
    scheme: str
    host: str
    port: int
    user: str | None
    password: str | None
    path: str  # AMQP virtual host
    query: dict[str, str]
    rate: float | None  # messages per second for the whole target, None = unlimited
    timeout: float  # seconds to wait for a connection or a confirmation
    partitions: int  # connections publishing in parallel


def parse_broker_uri(spec: str, default_port: int, known: set[str]) -> BrokerOptions:
    """``scheme://[user[:password]@]host[:port][/vhost][?key=value&...]`` with common keys rate, timeout,
    partitions; ``known`` are the scheme's own keys (anything else is a ConfigError)."""
    try:
        u = urlsplit(spec)
    except ValueError as exc:  # an unclosed '[' of an IPv6 host (or of a password: redact masks it)
        raise ConfigError(f"target {redact(spec)}: {exc}", key="--target") from None
    if userinfo_cut_short(u):
        # 'amqp://svc:Xk9/q#Tz@rabbit/': a password holding '/', '?' or '#' ends the host early, and the '@' lands in
        # the path or the fragment (read as host svc, port 'Xk9'); the password went into the error unmasked
        raise ConfigError(f"target {redact(spec)}: an '@' after the host; a user or password holding '/', '?', '#' "
                          "or '@' must be percent-encoded (%2F, %3F, %23, %40)", key="--target")
    # a '+' is a plus (a URI's query, not a form's): parse_qs read destination=/topic/a+b as '/topic/a b'
    q = {k: v[-1] for k, v in parse_qs(u.query.replace("+", "%2B"), keep_blank_values=True).items()}
    unknown = set(q) - known - {"rate", "timeout", "partitions"}
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)} in target {redact(spec)}; known: "
                          f"{sorted(known | {'rate', 'timeout', 'partitions'})}", key="--target")
    if not u.hostname:
        raise ConfigError(f"target {redact(spec)} has no host", key="--target")

    def number(key: str, default: float | None, kind: Callable[[str], float]) -> Any:
        if key not in q:
            return default
        try:
            value = kind(q[key])
        except ValueError:
            raise ConfigError(f"target option {key}={q[key]!r} is not a number", key="--target") from None
        if not math.isfinite(value) or value <= 0:  # nan passed '<= 0' (no rate limit); inf waited for ever
            raise ConfigError(f"target option {key} must be a finite number > 0, got {q[key]}", key="--target")
        return value

    try:
        port = u.port or default_port
    except ValueError as exc:
        raise ConfigError(f"target {redact(spec)}: {exc}", key="--target") from None
    return BrokerOptions(
        scheme=u.scheme, host=u.hostname, port=port, user=unquote(u.username) if u.username else None,
        password=unquote(u.password) if u.password else None, path=unquote(u.path[1:]) if u.path else "",
        query=q, rate=number("rate", None, float), timeout=number("timeout", 10.0, float),
        partitions=int(number("partitions", 2, int)))


# A spec's user and password up to its last '@', however they are written: with a '/', '?' or '#' in the password,
# urlsplit finds none (the host ends early), and the whole spec was shown
def message_headers(rec: dict[str, Any]) -> dict[str, str]:
    """The original headers plus reprocess's: id, address, deliveries so far, idempotency key."""
    delivery = int(rec["delivery"])
    headers = {str(k): str(v) for k, v in dict(rec.get("headers") or {}).items()}
    headers.update({
        f"{HEADER_PREFIX}message-id": rec["message_id"],
        f"{HEADER_PREFIX}original-address": rec["address"],
        f"{HEADER_PREFIX}delivery": str(delivery),
        f"{HEADER_PREFIX}deliveries-before": str(delivery - 1),
        f"{HEADER_PREFIX}idempotency-key": idempotency_key(rec),
    })
    return headers


def filled(template: str, rec: dict[str, Any]) -> str:
    """A target's ``template`` (a STOMP destination, an AMQP routing key) with ``rec``'s ``{address}`` and
    ``{message_id}``."""
    return template.replace("{address}", rec["address"]).replace("{message_id}", rec["message_id"])


class RateLimiter:
    """At most ``rate`` calls per second (evenly spaced), the first ``delay`` seconds from now; None = no limit."""

    def __init__(self, rate: float | None, delay: float = 0.0) -> None:
        self.interval = 0.0 if not rate else 1.0 / rate
        self.next = time.monotonic() + (delay if rate else 0.0)

    def wait(self) -> None:
        if not self.interval:
            return
        now = time.monotonic()
        if self.next > now:
            time.sleep(self.next - now)
        self.next = max(self.next, now) + self.interval


class TargetDown(Exception):  # noqa: N818 - a signal inside a partition, not an error of reprocess
    """The broker as a whole is failing."""


class DestinationDown(TargetDown):
    """The broker refuses every write to the message's destination (not authorised, say) and may take others."""

    def __init__(self, destination: str, message: str) -> None:
        super().__init__(message)
        self.destination = destination


class MessageRefused(Exception):  # noqa: N818
    """The broker refused this one message (e.g. no queue for its address)."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


class Publisher:
    """One connection of a broker target, inside an executor."""

    def publish(self, rec: dict[str, Any]) -> None:
        """Publish and wait for the broker's confirmation; raise TargetDown or MessageRefused."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class BrokerTarget:
    """Base of the broker targets: subclasses give ``opts`` and a picklable ``publisher_factory``."""

    spec: str
    opts: BrokerOptions

    def publisher_factory(self) -> Callable[[], Publisher]:
        raise NotImplementedError

    def destination_of(self) -> Callable[[dict[str, Any]], str] | None:
        """Where a message goes, for the targets whose publishers raise DestinationDown (picklable)."""
        return None

    def redrive(self, due: DataFrame, run: RunContext) -> DataFrame:
        factory = self.publisher_factory()
        parts = self.opts.partitions
        rate = self.opts.rate  # the closure takes the numbers, not the target
        per_partition_rate = None if rate is None else rate / parts
        shown = redact(self.spec)
        destination = self.destination_of()

        def publish_all(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            from pyspark import TaskContext

            # the partitions' sends interleaved, not together: partition i's first a 1/rate step after i-1's
            task = TaskContext.get()
            slot = (task.partitionId() % parts) if task is not None else 0
            limiter = RateLimiter(per_partition_rate, slot / rate if rate else 0.0)
            publisher: Publisher | None = None

            def publish(rec: dict[str, Any]) -> None:
                nonlocal publisher
                limiter.wait()  # before a first connection too: none is held open while a partition waits its turn
                if publisher is None:
                    publisher = factory()  # a connection refused here is the broker down too
                publisher.publish(rec)

            def failure(exc: Exception) -> tuple[str, str] | None:
                if isinstance(exc, MessageRefused):
                    return exc.error_class, str(exc)
                if isinstance(exc, DestinationDown):
                    return DESTINATION_DOWN, f"{shown}: {exc}"
                if isinstance(exc, TargetDown):
                    return TARGET_DOWN, f"{shown}: {exc}"
                return None

            try:
                yield from deliver_each(batches, publish, failure, destination)
            finally:
                if publisher is not None:
                    try:
                        publisher.close()
                    except Exception:  # noqa: BLE001, S110 - closing a broken connection may fail too
                        pass

        cols = due.select("message_id", "address", "payload", "headers", "delivery", "resets").repartition(parts)
        return cols.mapInPandas(publish_all, OUTCOME_SCHEMA)


__all__ = ["HEADER_PREFIX", "TARGET_DOWN", "BrokerOptions", "BrokerTarget", "DestinationDown", "MessageRefused",
           "Publisher", "RateLimiter", "TargetDown", "filled", "message_headers", "parse_broker_uri", "redact"]
