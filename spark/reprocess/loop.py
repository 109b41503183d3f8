"""A small consumer for closed-loop runs (tests, ``make demo``): it reads a broker's queues, fails on some
messages, and writes its failures to landing, as the platform's real users' consumers do.

A message fails while ``fails(message_id, delivery)`` says so: the delivery number comes from the
``x-reprocess-delivery`` header a re-drive sets (1 for a message no re-drive has touched). Failures are
written as one JSON-lines file per drain (per round of a STOMP drain), whole (written, synced, then renamed), at the
caller's logical time, and only then are those messages acknowledged: a consumer stopped in between, or one whose
landing write fails, leaves them with the broker, which delivers them again (at least once), never acknowledged
and not landed.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reprocess.storage.commit import fsync_dir
from reprocess.targets.broker import HEADER_PREFIX

log = logging.getLogger(__name__)

Fails = Callable[[str, int], str | None]  # (message_id, delivery) -> error class, or None to succeed
Land = Callable[[list[dict[str, Any]]], None]  # writes a drain's (or round's) failures durably, before its acks
DRAIN_PREFETCH = 100_000  # unacknowledged messages a STOMP subscription may hold: more than a round's
DRAIN_ROUND = 10_000  # messages a STOMP drain lands and acknowledges together, at most
DRAIN_SETTLE_SECONDS = 0.2  # a pause in the broker's dispatch that ends a STOMP drain's round


def transient_and_poison(message_id: str, delivery: int) -> str | None:
    """``poison-*`` always fails; ``transient-*`` fails its first two deliveries; the rest succeed."""
    if message_id.startswith("poison-"):
        return "com.acme.SchemaError"
    if message_id.startswith("transient-") and delivery < 3:
        return "TimeoutError"
    return None


def write_failures(landing: Path, at: datetime, name: str, failures: list[dict[str, Any]]) -> Path | None:
    """Write failure records under ``landing/dt=/hour=/`` whole (temp file, then rename)."""
    if not failures:
        return None
    folder = landing / f"dt={at:%Y-%m-%d}" / f"hour={at:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    tmp = folder / f".{name}.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(f) + "\n" for f in failures))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(folder)
    return path


def _record(message_id: str, address: str, payload: str, delivery: int, error: str, at: datetime,
            headers: dict[str, str]) -> dict[str, Any]:
    return {"message_id": message_id, "address": address, "payload": payload,
            "failed_at": at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "headers": {k: v for k, v in headers.items() if not k.startswith(HEADER_PREFIX)},
            "delivery_count": 1, "error_class": error, "error_message": f"{error} on delivery {delivery}",
            "consumer_group": "loop-consumer"}


class _Drained:
    """What a drain took: the failures (to land) and the consumed (message_id, delivery) pairs."""

    def __init__(self, fails: Fails) -> None:
        self.fails = fails
        self.failures: list[dict[str, Any]] = []
        self.consumed: list[tuple[str, int]] = []

    def take(self, mid: str, queue: str, body: str | bytes, headers: dict[str, str]) -> None:
        delivery = int(headers.get(f"{HEADER_PREFIX}delivery", "1"))
        error = self.fails(mid, delivery)
        if error is None:
            self.consumed.append((mid, delivery))
        else:
            text = body if isinstance(body, str) else body.decode("utf-8")
            self.failures.append({"_": (mid, queue, text, delivery, error, headers)})

    def result(self) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
        return self.failures, self.consumed


def drain_amqp(url: str, queues: list[str], fails: Fails,
               land: Land | None = None) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Consume everything waiting on ``queues``; return (failures, consumed (message_id, delivery)). With ``land``,
    the failures are handed to it before any message is acknowledged (see the module's doc)."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    drained = _Drained(fails)
    last_tag = None
    try:
        for q in queues:
            while True:
                method, props, body = ch.basic_get(q, auto_ack=False)
                if method is None:
                    break
                last_tag = method.delivery_tag
                headers = {str(k): str(v) for k, v in (props.headers or {}).items()}
                drained.take(props.message_id or headers.get(f"{HEADER_PREFIX}message-id", ""), q, body, headers)
        if land is not None:
            land(drained.failures)
        if last_tag is not None:
            ch.basic_ack(last_tag, multiple=True)  # every message this channel got, once landed
    finally:
        conn.close()  # unacknowledged: the broker delivers them again
    return drained.result()


def drain_stomp(host: str, port: int, queues: list[str], fails: Fails, idle_seconds: float = 1.0,
                land: Land | None = None) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """The same over STOMP (ActiveMQ): subscribe, take messages until ``idle_seconds`` pass without one.

    Messages are taken in rounds: a round ends when the broker pauses (``DRAIN_SETTLE_SECONDS`` without a message)
    or holds ``DRAIN_ROUND`` messages; ``land`` (if given) writes that round's failures, and only then are the
    round's messages acknowledged by the consumer (``ack:client-individual``). With the broker's own
    acknowledgement (``ack:auto``) a message dispatched while the connection closed counted as delivered and was
    never seen. The rounds are what keeps the messages coming: an ActiveMQ queue pages in ``maxPageSize`` (200)
    messages at a time and, when nothing wakes it, pages in no more while they are unacknowledged, so a drain that
    acknowledged only at its end stopped after 200 of its 1,100 on a busy broker. One that arrives once the drain
    is closing is neither taken nor acknowledged, so the broker delivers it again to the next drain, as it does every
    message of a round whose landing write failed."""
    import stomp

    got: list[tuple[dict[str, str], str]] = []
    cond = threading.Condition()
    closing = False

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            with cond:
                if closing:
                    return
                got.append((dict(frame.headers), frame.body))
                cond.notify_all()

    drained = _Drained(fails)
    done = 0  # messages of the rounds landed and acknowledged
    conn = stomp.Connection12([(host, port)], heartbeats=(0, 0))
    conn.set_listener("loop", Listener())
    conn.connect(wait=True)
    try:
        for i, q in enumerate(queues):
            # ActiveMQ's prefetch (1000 by default) would stop dispatching at that many unacknowledged messages
            conn.subscribe(f"/queue/{q}", id=str(i), ack="client-individual",
                           headers={"activemq.prefetchSize": str(DRAIN_PREFETCH)})
        while True:
            with cond:
                if len(got) == done and not cond.wait(timeout=idle_seconds):  # only a message notifies
                    closing = True
                    break
                while len(got) - done < DRAIN_ROUND and cond.wait(timeout=DRAIN_SETTLE_SECONDS):
                    pass
                batch = got[done:done + DRAIN_ROUND]  # more came while the round before was landed: the rest next
            landed = len(drained.failures)
            for headers, body in batch:
                mid = (headers.get(f"{HEADER_PREFIX}message-id") or headers.get("app-message-id")
                       or headers["message-id"])
                drained.take(mid, headers["destination"].removeprefix("/queue/"), body, headers)
            if land is not None:
                land(drained.failures[landed:])
            for headers, _body in batch:  # sent before the DISCONNECT, on the same connection
                conn.ack(headers["ack"])
            done += len(batch)
    finally:
        conn.disconnect()  # what is not acknowledged goes back to its queue
    return drained.result()


def as_records(failures: list[dict[str, Any]], at: datetime) -> list[dict[str, Any]]:
    """Turn drained failures into landing records failed at ``at``."""
    out = []
    for f in failures:
        mid, address, payload, delivery, error, headers = f["_"]
        keep = {k: v for k, v in headers.items() if k.startswith("app-")}
        out.append(_record(mid, address, payload, delivery, error, at, keep))
    return out


def closed_loop(spark: Any, landing: Path, warehouse: Path, policies: Any, target: str,
                drain: Callable[[Land], tuple[list[dict[str, Any]], list[tuple[str, int]]]],
                start: datetime, step: timedelta = timedelta(minutes=2),
                max_cycles: int = 10) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """Once producers have published: until nothing is left, the consumer drains and lands its failures at
    logical time t, and a cycle as of t + ``step`` re-drives what is due. Returns the last run summary and
    every (message id, delivery) consumed successfully. ``drain(land)`` hands its failures to ``land`` before it
    acknowledges its messages."""
    from reprocess.cycle.run import CycleOptions, run_cycle

    landing.mkdir(parents=True, exist_ok=True)
    consumed: list[tuple[str, int]] = []
    t = start
    summary: dict[str, Any] = {}
    for i in range(max_cycles):
        rounds = itertools.count()

        def land(failures: list[dict[str, Any]], at: datetime = t, name: str = f"drain-{i}",
                 rounds: Iterator[int] = rounds) -> None:  # a STOMP drain lands once per round
            write_failures(landing, at, f"{name}-{next(rounds)}", as_records(failures, at))

        failures, ok = drain(land)
        consumed += ok
        t += step
        summary = run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(warehouse), policies=policies,
                                                as_of_ms=int(t.timestamp() * 1000), target=target))
        log.info("closed loop cycle=%s consumed=%s failed=%s due=%s waiting=%s dead_lettered=%s", i, len(ok),
                 len(failures), summary["due"], summary["waiting"], summary["states"]["DEAD_LETTERED"])
        if not failures and summary["waiting"] == 0 and summary["due"] == 0:
            break
    return summary, consumed


LOOP_POLICIES = """
default_dead_letter_address: loop.dlq
policies:
  - match: "#"
    profile: stepped
    settings: {delays: [1m, 5m], max_deliveries: 4}
"""


def main(argv: list[str] | None = None) -> int:
    """``python -m reprocess.loop``: a closed loop through RabbitMQ (used by ``make demo``)."""
    import argparse
    import shutil

    import pika

    from reprocess.policy import parse_policies
    from reprocess.sparkutil import build_session

    parser = argparse.ArgumentParser(prog="python -m reprocess.loop", description=main.__doc__)
    parser.add_argument("--amqp", default=os.environ.get("REPROCESS_AMQP_URL", LOCAL_AMQP),
                        help="RabbitMQ URL (default: $REPROCESS_AMQP_URL, else the local broker's guest account)")
    parser.add_argument("--out", default="demo-out/loop", help="where landing/ and warehouse/ go (wiped)")
    parser.add_argument("--messages", type=int, default=30, help="messages to publish (default 30)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    queues = ["orders.created", "billing.invoice"]
    conn = pika.BlockingConnection(pika.URLParameters(args.amqp))
    ch = conn.channel()
    for q in queues:
        ch.queue_declare(q, durable=True)
        ch.queue_purge(q)
    kinds = ("transient", "poison", "fine")
    messages = [(f"{kinds[i % 3]}-{i}", queues[i % 2]) for i in range(args.messages)]

    for mid, q in messages:
        ch.basic_publish("", q, f"payload of {mid}".encode(), pika.BasicProperties(message_id=mid, delivery_mode=2))
    conn.close()
    summary, consumed = closed_loop(
        build_session("reprocess-loop"), out / "landing", out / "warehouse", parse_policies(LOOP_POLICIES), args.amqp,
        lambda land: drain_amqp(args.amqp, queues, transient_and_poison, land),
        start=datetime(2026, 11, 21, 10, tzinfo=UTC), step=timedelta(minutes=10))
    print(f"closed loop through {args.amqp.split('@')[-1]}: {len(messages)} messages published, "
          f"{len(consumed)} consumed by the consumer, ledger {summary['states']} (warehouse {out / 'warehouse'})")
    return 0


# RabbitMQ's built-in account: it exists on every fresh broker and only logs in from localhost (not a secret).
LOCAL_AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"

__all__ = ["Fails", "as_records", "closed_loop", "drain_amqp", "drain_stomp", "main", "transient_and_poison",
           "write_failures"]

if __name__ == "__main__":
    raise SystemExit(main())
