"""Re-drive to real brokers: RabbitMQ over AMQP (running here) and ActiveMQ Classic over STOMP (installed and
started by dev/services.sh). Closed loops, headers, outage protection, rate limit."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.errors import ConfigError, TargetUnavailableError
from reprocess.loop import closed_loop, drain_amqp, drain_stomp, transient_and_poison, write_failures
from reprocess.policy import parse_policies
from reprocess.storage.commit import Warehouse
from reprocess.storage.read import read_dataset
from reprocess.targets.base import parse_target
from reprocess.targets.broker import DestinationDown, MessageRefused, RateLimiter, TargetDown, redact

pytestmark = [pytest.mark.spark, pytest.mark.integration]

AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
STOMP_HOST, STOMP_PORT = "127.0.0.1", 61613
POLICIES = parse_policies("""
default_dead_letter_address: loop.dlq
policies:
  - match: "loop.#"
    profile: stepped
    settings: {delays: [1m], max_deliveries: 4}
""")
QUEUES = ["loop.orders", "loop.billing"]
T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module", autouse=True)
def _brokers_up():
    missing = [name for name, port in (("RabbitMQ", 5672), ("ActiveMQ STOMP", STOMP_PORT)) if not _port_open(port)]
    assert not missing, f"{missing} not reachable: run `make services` (dev/services.sh) first"


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _amqp_queues(names: list[str]):
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    ch = conn.channel()
    for q in names:
        ch.queue_declare(q, durable=True)
        ch.queue_purge(q)
    return conn, ch


def _messages() -> list[tuple[str, str]]:
    """(message id, queue): transient ones succeed on delivery 3, poison ones never, the rest at once."""
    out = []
    for i in range(6):
        out += [(f"transient-{i}", QUEUES[i % 2]), (f"poison-{i}", QUEUES[(i + 1) % 2]), (f"fine-{i}", QUEUES[0])]
    return out


def _closed_loop(spark, tmp_path, target: str, drain) -> tuple[dict, list[tuple[str, int]]]:
    return closed_loop(spark, tmp_path / "landing", tmp_path / "wh", POLICIES, target, drain, start=T0, max_cycles=8)


def _check_loop(spark, tmp_path, summary, consumed):
    assert summary["waiting"] == 0, summary
    consumed_ids = sorted(m for m, _ in consumed)
    assert consumed_ids == sorted(m for m, _ in _messages() if not m.startswith("poison-")), "each exactly once"
    assert {m: d for m, d in consumed if m.startswith("transient-")} == {f"transient-{i}": 3 for i in range(6)}
    dlq = {r.message_id: r for r in read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()}
    assert sorted(dlq) == sorted(f"poison-{i}" for i in range(6))
    assert {r.deliveries for r in dlq.values()} == {4}, "stepped max_deliveries 4"
    assert {r.reason_code for r in dlq.values()} == {"MAX_DELIVERIES_EXCEEDED"}
    assert {r.original_address for r in dlq.values()} <= set(QUEUES)


def test_closed_loop_through_rabbitmq(spark, tmp_path):
    conn, ch = _amqp_queues(QUEUES)
    import pika

    def publish(mid: str, q: str) -> None:
        ch.basic_publish("", q, f"payload of {mid}".encode(), pika.BasicProperties(message_id=mid, delivery_mode=2))

    for mid, q in _messages():  # the producers, on a connection closed before the cycles (no idle heartbeat loss)
        publish(mid, q)
    conn.close()
    summary, consumed = _closed_loop(spark, tmp_path, AMQP,
                                     lambda land: drain_amqp(AMQP, QUEUES, transient_and_poison, land))
    _check_loop(spark, tmp_path, summary, consumed)


def test_closed_loop_through_activemq_over_stomp(spark, tmp_path):
    import stomp

    conn = stomp.Connection12([(STOMP_HOST, STOMP_PORT)], heartbeats=(0, 0))
    conn.connect(wait=True)
    drain_stomp(STOMP_HOST, STOMP_PORT, QUEUES, lambda m, d: None, idle_seconds=0.5)  # start empty

    for mid, q in _messages():  # the producers
        conn.send(f"/queue/{q}", f"payload of {mid}", headers={"app-message-id": mid, "persistent": "true"})
    conn.disconnect()
    summary, consumed = _closed_loop(spark, tmp_path, f"stomp://{STOMP_HOST}:{STOMP_PORT}",
                                     lambda land: drain_stomp(STOMP_HOST, STOMP_PORT, QUEUES, transient_and_poison,
                                                              land=land))
    _check_loop(spark, tmp_path, summary, consumed)


def test_redriven_messages_carry_the_original_id_address_deliveries_and_an_idempotency_key(spark, tmp_path):
    conn, ch = _amqp_queues(["hdr.q"])
    write_failures(tmp_path / "landing", T0, "a", [
        {"message_id": "h-1", "address": "hdr.q", "payload": "body-1", "failed_at": "2026-11-21T10:00:00Z",
         "headers": {"traceparent": "00-ab-01"}, "delivery_count": 2}])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m], "
                              "max_deliveries: 9}}]")
    s = run_cycle(spark, CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"),
                                      policies=policies, as_of_ms=_ms(T0 + timedelta(minutes=5)), target=AMQP))
    assert (s["due"], s["delivered"]) == (1, 1)
    method, props, body = ch.basic_get("hdr.q", auto_ack=True)
    conn.close()
    assert (body, props.message_id, props.delivery_mode) == (b"body-1", "h-1", 2)
    assert props.headers == {"traceparent": "00-ab-01", "x-reprocess-message-id": "h-1",
                             "x-reprocess-original-address": "hdr.q", "x-reprocess-delivery": "3",
                             "x-reprocess-deliveries-before": "2", "x-reprocess-idempotency-key": "h-1:3"}
    assert s["target"] == "amqp://guest:***@127.0.0.1:5672/%2F", "no password in the summary"


def test_a_target_outage_consumes_no_delivery_and_the_retry_redrives_what_was_left(spark, tmp_path):
    conn, ch = _amqp_queues(["outage.q"])
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_failures(landing, T0, "a", [
        {"message_id": f"o-{i}", "address": "outage.q", "payload": "x", "failed_at": "2026-11-21T10:00:00Z"}
        for i in range(5)])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m], "
                              "max_deliveries: 3}}]")

    def cycle(target: str) -> dict:
        return run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=policies,
                                             as_of_ms=_ms(T0 + timedelta(minutes=5)), target=target))

    with pytest.raises(TargetUnavailableError, match="5 due messages consumed no delivery") as err:
        cycle("amqp://guest:secret@127.0.0.1:1/?timeout=2&partitions=5")  # nothing listens on port 1
    assert "secret" not in str(err.value)
    snap = Warehouse(str(wh)).latest()
    (first,) = snap.runs
    assert first["summary"]["target_down"]["left_due"] == 5
    # a message a connection: each of the five stopped (more than the three it was once counted up to)
    assert first["summary"]["target_down"]["partitions_stopped"] == 5
    assert first["summary"]["new_messages"] == 5, "the landing batch was ingested and committed"
    rows = read_dataset(spark, str(wh), "ledger").collect()
    assert {(r.state, r.deliveries, r.next_attempt_ms) for r in rows} == {
        ("WAITING_RETRY", 1, _ms(T0 + timedelta(minutes=1)))}, "still due, no delivery consumed"
    s = cycle(AMQP)  # the task retry: same as-of, RabbitMQ back
    assert (s["run_id"], s["due"], s["delivered"]) == (first["run_id"] + "-2", 5, 5)
    assert {(r.state, r.deliveries) for r in read_dataset(spark, str(wh), "ledger").collect()} == {("DELIVERED", 2)}
    assert ch.queue_declare("outage.q", passive=True).method.message_count == 5
    assert cycle(AMQP)["already_committed"]
    conn.close()


def test_a_message_amqp_cannot_carry_is_a_failed_delivery_and_the_others_go(spark, tmp_path):
    """A message id longer than AMQP's 255-byte short string cannot be encoded: pika raises before sending, on a
    connection that stays fine. Headers larger than the connection's frame size are refused before sending too
    (RabbitMQ would close the connection on the frame). That message's delivery fails (its policy reschedules it,
    then dead-letters it, the reason named), and the messages after it in its partition are published: it is not the
    broker failing, which would stop the partition at that message on every run."""
    conn, ch = _amqp_queues(["long.q"])
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    long_id = "L" * 300
    # headers larger than the frame RabbitMQ takes (frame_max, 128 KiB): it would close the connection on the frame
    big = {"stack_trace": "at x.y(Z.java:1)\n" * 12_000}
    write_failures(landing, T0, "a", [
        {"message_id": mid, "address": "long.q", "payload": mid[:8], "failed_at": "2026-11-21T10:00:00Z",
         "headers": big if mid == "m-big-headers" else {}}
        for mid in ("a-before", long_id, "m-big-headers", "z-after")])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m], "
                              "max_deliveries: 3}}]")
    target = AMQP + "?partitions=1"  # one partition: the long id has a message on either side of it
    summaries = [run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=policies,
                                               as_of_ms=_ms(T0 + timedelta(minutes=m)), target=target))
                 for m in (5, 10)]
    assert [(s["due"], s["delivered"], s["rescheduled"]) for s in summaries] == [(4, 2, 2), (2, 0, 0)]
    assert summaries[1]["dead_lettered"]["total"] == 2
    got = []
    while (msg := ch.basic_get("long.q", auto_ack=True))[0] is not None:
        got.append(msg[1].message_id)
    conn.close()
    assert sorted(got) == ["a-before", "z-after"]
    dead = {r.message_id: r for r in read_dataset(spark, str(wh), "dlq").collect()}
    assert {m: (r.deliveries, r.reason_code, r.last_error_class) for m, r in dead.items()} == {
        long_id: (3, "MAX_DELIVERIES_EXCEEDED", "pika.exceptions.ShortStringTooLong"),
        "m-big-headers": (3, "MAX_DELIVERIES_EXCEEDED", "reprocess.AmqpFrameTooLarge")}


@pytest.mark.parametrize("broker", ["amqp", "stomp"])
def test_the_loop_consumer_acknowledges_a_drain_only_once_its_failures_are_landed(broker):
    """The closed loop's consumer acknowledged each message as it took it and wrote the drain's failures after: a
    consumer stopped in between, or a landing write that failed, lost them (the broker had them acknowledged, the
    landing never got them). Now a drain whose landing fails leaves every message with the broker, which delivers
    them again to the next drain."""
    import pika
    import stomp

    queue = f"loop.acked.{broker}"
    if broker == "amqp":
        conn, ch = _amqp_queues([queue])
        for mid in ("f-1", "f-2"):
            ch.basic_publish("", queue, b"p", pika.BasicProperties(message_id=mid, delivery_mode=2))
        conn.close()

        def drain(land):  # type: ignore[no-untyped-def]
            return drain_amqp(AMQP, [queue], lambda m, d: "Failed", land)
    else:
        drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=2.0)  # start empty
        sender = stomp.Connection12([(STOMP_HOST, STOMP_PORT)], heartbeats=(0, 0))
        sender.connect(wait=True)
        for mid in ("f-1", "f-2"):
            sender.send(f"/queue/{queue}", "p", headers={"app-message-id": mid, "persistent": "true"})
        sender.disconnect()

        def drain(land):  # type: ignore[no-untyped-def]
            return drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: "Failed", idle_seconds=0.5, land=land)

    def broken(failures: list) -> None:  # a STOMP drain lands in rounds: f-1 and f-2 may come in two
        assert failures
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        drain(broken)
    landed: list = []
    failures, _ = drain(landed.extend)
    assert sorted(f["_"][0] for f in landed) == ["f-1", "f-2"]
    assert failures == landed
    assert drain(landed.extend) == ([], [])  # acknowledged once landed


def test_a_stomp_drain_takes_every_message_in_one_pass_past_activemqs_prefetch_and_page():
    """ActiveMQ stops dispatching to a subscription at its prefetch (1000 by default) of unacknowledged messages, and
    a queue pages in only ``maxPageSize`` messages at a time: with them unacknowledged and nothing else waking the
    queue it pages in no more. A drain that acknowledged only at its end stopped after one page (200 of 1,100 on a
    busy CI); it takes a larger prefetch and lands and acknowledges in rounds. ``paged.>`` queues page 10 at a time
    here (dev/activemq/activemq.xml), which made the old drain stop early six times in ten on an idle machine, so
    three drains in a row check it."""
    import stomp

    for n in range(3):
        queue = f"paged.loop.{n}"
        drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=2.0)  # start empty
        sender = stomp.Connection12([(STOMP_HOST, STOMP_PORT)], heartbeats=(0, 0))
        sender.connect(wait=True)
        for i in range(1100):
            sender.send(f"/queue/{queue}", "p", headers={"app-message-id": f"m-{i:04d}"})
        sender.disconnect()  # with a receipt: every SEND before it was taken
        landed: list = []
        fails = (lambda m, d: "Failed" if m.endswith("7") else None)  # noqa: E731
        failures, consumed = drain_stomp(STOMP_HOST, STOMP_PORT, [queue], fails, idle_seconds=2.0,
                                         land=landed.extend)
        assert sorted(m for m, _ in consumed) == [f"m-{i:04d}" for i in range(1100) if i % 10 != 7]
        assert sorted(f["_"][0] for f in landed) == [f"m-{i:04d}" for i in range(1100) if i % 10 == 7]
        assert failures == landed
        assert drain_stomp(STOMP_HOST, STOMP_PORT, [queue], fails, idle_seconds=0.5) == ([], [])  # all acknowledged


def test_a_stomp_drain_round_lands_at_most_its_size_when_messages_pile_up_during_a_landing(monkeypatch):
    """A round took every message taken so far: those that arrived while the round before it was landed, past
    ``DRAIN_ROUND``, so a slow landing made one large file and one large set of unacknowledged messages."""
    import stomp

    from reprocess import loop

    queue = "loop.rounds"
    drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=2.0)  # start empty
    sender = stomp.Connection12([(STOMP_HOST, STOMP_PORT)], heartbeats=(0, 0))
    sender.connect(wait=True)
    for i in range(600):
        sender.send(f"/queue/{queue}", "p", headers={"app-message-id": f"m-{i:04d}"})
    sender.disconnect()
    monkeypatch.setattr(loop, "DRAIN_ROUND", 50)
    rounds: list[list] = []

    def land(failures: list) -> None:
        if not rounds:
            time.sleep(1.0)  # the broker dispatches the rest meanwhile
        rounds.append(list(failures))

    failures, consumed = drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: "Failed", idle_seconds=2.0,
                                     land=land)
    assert max(len(r) for r in rounds) <= 50
    assert sorted(f["_"][0] for r in rounds for f in r) == [f"m-{i:04d}" for i in range(600)]
    assert consumed == []
    assert len(failures) == 600
    assert drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=0.5) == ([], [])


def _stomp_headers_of(queue: str, count: int) -> list[dict[str, str]]:
    """The headers of the next ``count`` messages on ``queue``, as a STOMP consumer reads them."""
    import stomp

    got: list[dict[str, str]] = []
    cond = threading.Condition()

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame) -> None:  # type: ignore[no-untyped-def]
            with cond:
                got.append(dict(frame.headers))
                cond.notify_all()

    conn = stomp.Connection12([(STOMP_HOST, STOMP_PORT)], heartbeats=(0, 0))
    conn.set_listener("headers", Listener())
    conn.connect(wait=True)
    conn.subscribe(f"/queue/{queue}", id="1", ack="auto")
    with cond:
        cond.wait_for(lambda: len(got) >= count, timeout=30)
    conn.disconnect()
    return got


def test_stomp_header_names_arrive_as_sent_and_a_nul_in_a_header_is_that_message_refused():
    """A header's name is escaped as STOMP 1.2 says, as its value is: a name holding ':' was split by the broker at
    it ({"a:b": "1"} arrived as {"a": "b:1"}), one holding a newline broke the frame. A NUL cannot be escaped: it
    ended the frame where it stood, ActiveMQ took the message without the headers after it (the idempotency key)
    and the SEND was counted delivered. Such a message is refused instead, and the next one goes."""
    queue = "stomp.names"
    drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=2.0)  # start empty
    publisher = parse_target(f"stomp://{STOMP_HOST}:{STOMP_PORT}?timeout=5").publisher_factory()()
    names = {"a:b": "colon", "x\ny": "newline", "back\\slash": "backslash", "cr\rname": "return", "k": "v:\\n"}
    rec = {"address": queue, "payload": "p", "delivery": 1}
    try:
        publisher.publish({**rec, "message_id": "named", "headers": names})
        with pytest.raises(MessageRefused, match="header 'v' holds a NUL") as info:
            publisher.publish({**rec, "message_id": "nul", "headers": {"v": "cut\x00here"}})
        publisher.publish({**rec, "message_id": "after", "headers": {}})
    finally:
        publisher.close()
    assert info.value.error_class == "reprocess.StompNulInHeader"
    got = _stomp_headers_of(queue, 2)
    assert [h["x-reprocess-message-id"] for h in got] == ["named", "after"]
    assert {name: got[0].get(name) for name in names} == names
    assert got[0]["x-reprocess-idempotency-key"] == "named:1"


def test_a_message_activemq_drops_the_connection_on_or_refuses_is_a_failed_delivery_and_the_others_go(spark,
                                                                                                        tmp_path):
    """ActiveMQ Classic closes the connection, with no ERROR frame, on a SEND whose header it reads as a JMS field
    and cannot parse (``priority: high``); it answers a SEND naming a transaction it does not know with an ERROR
    frame carrying the SEND's receipt, and keeps the connection. Either is that message refused, not the broker
    down: its delivery fails (its policy reschedules it, then dead-letters it, the reason named), and the messages
    after it in its partition are sent. Before, the closed connection stopped the partition at that message on
    every run (it never used a delivery, and the messages behind it never went), as did the ERROR frame."""
    queue = "stomp.refused"
    drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=2.0)  # start empty
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_failures(landing, T0, "a", [
        {"message_id": mid, "address": queue, "payload": mid, "failed_at": "2026-11-21T10:00:00Z", "headers": h}
        for mid, h in (("a-before", {}), ("b-priority", {"priority": "high"}),
                       ("c-transaction", {"transaction": "t-unknown"}), ("z-after", {"priority": "7"}))])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m], "
                              "max_deliveries: 3}}]")
    target = f"stomp://{STOMP_HOST}:{STOMP_PORT}?partitions=1&timeout=5"  # one partition: all four on one connection
    summaries = [run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=policies,
                                               as_of_ms=_ms(T0 + timedelta(minutes=m)), target=target))
                 for m in (5, 10)]
    assert [(s["due"], s["delivered"], s["rescheduled"]) for s in summaries] == [(4, 2, 2), (2, 0, 0)]
    assert summaries[1]["dead_lettered"]["total"] == 2
    _failures, consumed = drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=0.5)
    assert sorted(m for m, _ in consumed) == ["a-before", "z-after"]
    dead = {r.message_id: r for r in read_dataset(spark, str(wh), "dlq").collect()}
    assert sorted(dead) == ["b-priority", "c-transaction"]
    assert {r.deliveries for r in dead.values()} == {3}
    assert dead["b-priority"].last_error_class == "reprocess.StompConnectionClosed"
    assert "closed the connection on this message twice" in dead["b-priority"].last_error_message
    assert dead["c-transaction"].last_error_class == "stomp.ERROR"
    assert "Invalid transaction id: t-unknown" in dead["c-transaction"].last_error_message


def test_an_original_content_length_header_is_not_the_length_of_the_stomp_frame(spark, tmp_path):
    """A failure captured from a STOMP frame carries that frame's ``content-length``. It went out with the re-driven
    message, whose body differs: ActiveMQ waited for 1,000 bytes that never came (no receipt: the broker taken for
    down, on every run, the message never re-driven), or read 2 bytes of a longer body. The frame's own length is
    the body's."""
    queue = "stomp.length"
    drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: None, idle_seconds=2.0)  # start empty
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_failures(landing, T0, "a", [
        {"message_id": mid, "address": queue, "payload": body, "failed_at": "2026-11-21T10:00:00Z",
         "headers": {"content-length": length, "app": mid}}
        for mid, body, length in (("longer", "x", "1000"), ("shorter", "hello world", "2"), ("empty", "", "7"))])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m], "
                              "max_deliveries: 3}}]")
    s = run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=policies,
                                      as_of_ms=_ms(T0 + timedelta(minutes=5)),
                                      target=f"stomp://{STOMP_HOST}:{STOMP_PORT}?partitions=1&timeout=3"))
    assert (s["due"], s["delivered"]) == (3, 3)
    taken, _ = drain_stomp(STOMP_HOST, STOMP_PORT, [queue], lambda m, d: "kept", idle_seconds=0.5)
    got = sorted((mid, body, headers["app"]) for mid, _q, body, _d, _e, headers in (t["_"] for t in taken))
    assert got == [("empty", "", "empty"), ("longer", "x", "longer"), ("shorter", "hello world", "shorter")]


def test_a_destination_activemq_does_not_let_the_target_write_to_stays_due_and_the_others_go(spark, tmp_path):
    """The ActiveMQ here (dev/activemq/activemq.xml) lets the user "limited" write only to queues under
    reprocess.allowed.; to any other it answers a SEND with an ERROR naming the SEND's receipt ("User limited is not
    authorized to write to: queue://..."), and keeps the connection. That destination's messages stay due with no
    delivery used and the run fails as for a target down, but the partition goes on with the other destinations.
    Before, the ERROR stopped the partition at the first forbidden message on every run: nothing behind it went."""
    allowed, forbidden = "reprocess.allowed.q", "reprocess.forbidden"
    drain_stomp(STOMP_HOST, STOMP_PORT, [allowed, forbidden], lambda m, d: None, idle_seconds=0.5)  # start empty
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_failures(landing, T0, "a", [
        {"message_id": mid, "address": address, "payload": mid, "failed_at": "2026-11-21T10:00:00Z"}
        for mid, address in (("0-f", forbidden), ("1-a", allowed), ("2-f", forbidden), ("3-a", allowed),
                             ("4-a", allowed))])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m], "
                              "max_deliveries: 3}}]")
    # one partition: all five on one connection, a forbidden one first (in the order written and in the ids' order)
    target = f"stomp://limited:limited@{STOMP_HOST}:{STOMP_PORT}?partitions=1&timeout=5"
    with pytest.raises(TargetUnavailableError, match="not authorized to write to: queue://reprocess.forbidden") as err:
        run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=policies,
                                      as_of_ms=_ms(T0 + timedelta(minutes=5)), target=target))
    assert "2 due messages consumed no delivery" in str(err.value)
    (run,) = Warehouse(str(wh)).latest().runs
    down = run["summary"]["target_down"]
    assert (down["partitions_stopped"], down["destinations_down"], down["left_due"]) == (0, 1, 2)
    (error,) = down["destination_errors"]
    assert error.startswith("/queue/reprocess.forbidden: stomp://limited:***@"), error
    assert (run["summary"]["delivered"], run["summary"]["balance"]["target_down_destinations"]) == (3, 1)
    assert all(run["summary"]["conservation"].values()), run["summary"]["conservation"]
    ledger = {r.message_id: (r.state, r.deliveries) for r in read_dataset(spark, str(wh), "ledger").collect()}
    assert ledger == {"1-a": ("DELIVERED", 2), "3-a": ("DELIVERED", 2), "4-a": ("DELIVERED", 2),
                      "0-f": ("WAITING_RETRY", 1), "2-f": ("WAITING_RETRY", 1)}, "no delivery used on the refused"
    _failures, consumed = drain_stomp(STOMP_HOST, STOMP_PORT, [allowed], lambda m, d: None, idle_seconds=0.5)
    assert sorted(m for m, _ in consumed) == ["1-a", "3-a", "4-a"]


def test_a_routing_key_rabbitmq_does_not_let_the_target_publish_with_is_that_destination_down():
    """The RabbitMQ here (dev/services.sh) has a user reprocess-limited whose topic permissions let it publish to
    amq.topic only with routing keys under allowed.; with another key RabbitMQ closes the channel (403 ACCESS_REFUSED,
    "access to topic ..."). That routing key is its destination down (DestinationDown: its messages stay due and the
    others go, as in the ActiveMQ test above), and the next message goes on a new channel. Before, it was the broker
    down: the partition stopped there on every run. An exchange that is not there stays the broker down."""
    conn, ch = _amqp_queues(["reprocess.allowed.topic"])
    ch.queue_bind("reprocess.allowed.topic", "amq.topic", "allowed.#")
    target = parse_target(AMQP.replace("guest:guest", "reprocess-limited:limited")
                          + "?exchange=amq.topic&routing_key={address}&timeout=5")
    outcomes = _publish_each(target.publisher_factory()(), (("1", "allowed.a"), ("2", "forbidden.b"),
                                                             ("3", "allowed.c")))
    assert [outcomes[0], outcomes[2]] == [None, None], outcomes
    assert isinstance(outcomes[1], DestinationDown), outcomes[1]
    assert outcomes[1].destination == "amq.topic/forbidden.b"
    assert "ACCESS_REFUSED - " in str(outcomes[1])
    assert "access to topic 'forbidden.b'" in str(outcomes[1])  # newer RabbitMQs say "write access to topic"
    assert target.destination_of()({"message_id": "2", "address": "forbidden.b"}) == "amq.topic/forbidden.b"
    assert ch.queue_declare("reprocess.allowed.topic", passive=True).method.message_count == 2
    conn.close()
    missing = parse_target(AMQP + "?exchange=reprocess.no-such-exchange&timeout=5").publisher_factory()()
    err = _publish_guarded(missing, {"message_id": "m", "address": "q", "payload": "p", "headers": {},
                                    "delivery": 2})
    assert isinstance(err, TargetDown), err
    assert not isinstance(err, DestinationDown), err
    assert "NOT_FOUND" in str(err)


def test_a_queue_rabbitmq_nacks_for_is_that_destination_down_and_the_next_message_goes():
    """A full queue with x-overflow reject-publish makes RabbitMQ nack the publishes routed to it, while the broker
    takes the others. The nack stopped the partition as the broker down, at that queue's first message on every run,
    and the messages after it for other queues were never tried."""
    conn, ch = _amqp_queues(["reprocess.roomy"])
    ch.queue_delete("reprocess.full")
    ch.queue_declare("reprocess.full", durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    outcomes = _publish_each(parse_target(AMQP + "?timeout=5").publisher_factory()(),
                             (("1", "reprocess.full"), ("2", "reprocess.full"), ("3", "reprocess.roomy")))
    assert (outcomes[0], outcomes[2]) == (None, None), outcomes
    assert isinstance(outcomes[1], DestinationDown), outcomes[1]
    assert outcomes[1].destination == "/reprocess.full"
    assert [ch.queue_declare(q, passive=True).method.message_count for q in ("reprocess.full", "reprocess.roomy")] == [
        1, 1]
    ch.queue_delete("reprocess.full")
    conn.close()


def test_a_destination_down_skips_its_later_messages_and_many_in_a_row_stop_the_partition():
    """deliver_each, as a broker target's partition runs it: a destination that refused a write is not tried again
    in the partition (its messages get no outcome and stay due), the others go on; DESTINATIONS_DOWN_IN_A_ROW of them
    with nothing else between stop the partition as a target down (a broker refusing every destination)."""
    import pandas as pd

    from reprocess.targets.base import (
        DESTINATION_DOWN,
        DESTINATIONS_DOWN_IN_A_ROW,
        NOT_TRIED,
        TARGET_DOWN,
        deliver_each,
    )

    def run(recs: list[tuple[str, str]]) -> tuple[list[tuple], list[str]]:
        tried: list[str] = []

        def deliver(rec: dict) -> None:
            tried.append(rec["message_id"])
            if rec["address"].startswith("no"):
                raise RuntimeError(rec["address"])

        batch = pd.DataFrame({"message_id": [m for m, _ in recs], "address": [a for _, a in recs],
                              "delivery": [2] * len(recs)})
        out = pd.concat(deliver_each(iter([batch]), deliver, lambda exc: (DESTINATION_DOWN, str(exc)),
                                     lambda rec: rec["address"]))
        return [(r.message_id, r.delivery, r.ok, r.error_class, r.error_message) for r in out.itertuples()], tried

    rows, tried = run([("1", "ok"), ("2", "no.a"), ("3", "ok"), ("4", "no.a"), ("5", "no.b"), ("6", "ok")])
    assert rows == [("1", 2, True, None, None), ("2", 2, False, DESTINATION_DOWN, "no.a\nno.a"),
                    ("3", 2, True, None, None), ("5", 2, False, DESTINATION_DOWN, "no.b\nno.b"),
                    ("6", 2, True, None, None),
                    ("", 1, False, NOT_TRIED, None)]  # message 4, not tried: counted, so the run checks it is left
    assert tried == ["1", "2", "3", "5", "6"]
    rows, _tried = run([("1", "no.a\nx"), ("2", "no.a\ny")])  # a newline in a destination (from a template)
    assert [r[4].split("\n", 1)[0] for r in rows] == ["no.a\\nx", "no.a\\ny"], "one destination on the first line"
    n = DESTINATIONS_DOWN_IN_A_ROW
    rows, tried = run([(f"d{i}", f"no.{i}") for i in range(n + 2)])
    assert [r[3] for r in rows] == [DESTINATION_DOWN] * (n - 1) + [TARGET_DOWN, NOT_TRIED]
    assert rows[-1][1] == 2, "the two after the stop"
    assert len(tried) == n, "the partition stopped"


@pytest.mark.parametrize("broker", ["gone", "closes_every_frame", "store_full"])
def test_a_stomp_send_lost_or_refused_for_every_message_is_the_broker_down(broker):
    """The other side of the ActiveMQ test above. The connection lost on a SEND, then either no new connection is taken
    (the broker gone) or every connection is closed on the first frame after CONNECTED, a probe without a message
    included (a broker failing as a whole): the broker down. Or an ERROR naming the SEND's receipt that does not refuse
    the frame as written (ActiveMQ's full store answers every SEND so): its destination down, which stops the partition
    once DESTINATIONS_DOWN_IN_A_ROW destinations are (the test above). Neither uses a delivery: the message is not
    refused. A stand-in broker: ActiveMQ cannot be made to fail these ways on demand."""
    with socket.create_server(("127.0.0.1", 0)) as stand_in:
        port = stand_in.getsockname()[1]
        conns: list[socket.socket] = []

        def frame(conn: socket.socket) -> bytes:
            seen = b""
            while b"\x00" not in seen and (chunk := conn.recv(4096)):
                seen += chunk
            return seen

        def serve() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = stand_in.accept()
                    conns.append(conn)
                    frame(conn)  # CONNECT
                    conn.sendall(b"CONNECTED\nversion:1.2\n\n\x00")
                    send = frame(conn)  # a SEND, or the probe's BEGIN
                    if broker == "store_full":
                        receipt = next(h for h in send.decode().split("\n") if h.startswith("receipt:"))[8:]
                        conn.sendall(f"ERROR\nreceipt-id:{receipt}\nmessage:Usage Manager Store is Full\n\n"
                                     "javax.jms.ResourceAllocationException: Usage Manager Store is Full\x00".encode())
                        frame(conn)  # until the publisher closes it
                    conn.close()
                    if broker == "gone":
                        stand_in.close()
                        return

        threading.Thread(target=serve, daemon=True).start()
        publisher = parse_target(f"stomp://127.0.0.1:{port}?timeout=2").publisher_factory()()
        err = _publish_guarded(publisher, {"message_id": "m", "address": "q", "payload": "p", "headers": {},
                                          "delivery": 1})
        for conn in conns:
            conn.close()
    assert isinstance(err, TargetDown)
    assert isinstance(err, DestinationDown) == (broker == "store_full")
    expected = {"gone": ("cannot connect to stomp://127.0.0.1", 1),
                "closes_every_frame": ("the connection was lost twice on a message", 3),  # twice, then the probe
                "store_full": ("Usage Manager Store is Full", 1)}[broker]
    assert expected[0] in str(err)
    assert len(conns) == expected[1]


def test_a_stomp_connection_reset_before_connect_is_written_is_the_broker_down_not_a_crash():
    """The broker takes the connection and resets it at once (a listener closed with the connection in its backlog):
    stomp.py's receiver thread closes the socket and sets it to None a moment later. CONNECT written in between saw a
    closed socket, and poll raised ValueError (file descriptor -1), which the publisher did not catch: the run
    stopped with a traceback instead of taking the broker for down. Here the moment is made to last."""
    from reprocess.targets.stomp import _send_within

    class Transport:
        socket = socket.socket()

    Transport.socket.close()
    with pytest.raises(ConnectionResetError, match="closed before the frame"):
        _send_within(Transport(), 1)(b"CONNECT\n\n\x00")


@pytest.mark.parametrize("raised", [ValueError("file descriptor cannot be a negative integer (-1)"),
                                    AttributeError("'NoneType' object has no attribute 'sendall'")])
def test_a_stomp_connect_the_receiver_thread_breaks_is_the_broker_down_not_a_crash(monkeypatch, raised):
    """The rest of the same race: the receiver thread closes the socket (ValueError on fd -1) or clears it (None)
    between stomp.py's checks and its write of CONNECT. The publisher takes the broker for down (the messages stay
    due), where the error went through and stopped the run."""
    import stomp

    from reprocess.targets.broker import TargetDown, parse_broker_uri
    from reprocess.targets.stomp import StompPublisher

    def connect(self, *args, **kwargs):
        raise raised

    monkeypatch.setattr(stomp.Connection12, "connect", connect)
    opts = parse_broker_uri("stomp://127.0.0.1:1?timeout=1", 61613, {"destination"})
    with pytest.raises(TargetDown, match=f"cannot connect to stomp://127.0.0.1:1: {type(raised).__name__}"):
        StompPublisher(opts)


def test_an_error_about_nothing_of_ours_before_a_send_is_not_taken_for_its_answer():
    """An ERROR frame that names no receipt arrives between two messages (or the connection is lost after the last
    receipt): the next SEND goes on a new connection, once. Before, the SEND went on the old one and its wait ended at
    once on the ERROR left there, before the receipt, and the message was sent again on a new connection."""
    with socket.create_server(("127.0.0.1", 0)) as stand_in:
        port = stand_in.getsockname()[1]
        conns: list[socket.socket] = []
        sends: list[bytes] = []

        def frames(conn: socket.socket):
            buf = b""
            while chunk := conn.recv(4096):
                buf += chunk
                while b"\x00" in buf:
                    frame, buf = buf.split(b"\x00", 1)
                    yield frame.lstrip(b"\r\n")

        def serve() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = stand_in.accept()
                    conns.append(conn)
                    threading.Thread(target=answer, args=(conn, len(conns)), daemon=True).start()

        def answer(conn: socket.socket, n: int) -> None:
            with contextlib.suppress(OSError):
                for frame in frames(conn):
                    if frame.startswith((b"CONNECT", b"STOMP")):
                        conn.sendall(b"CONNECTED\nversion:1.2\n\n\x00")
                        if n == 1:  # about nothing the publisher sent; the connection stays open
                            conn.sendall(b"ERROR\nmessage:a consumer somewhere went away\n\n\x00")
                    elif frame.startswith(b"SEND"):
                        sends.append(frame)
                        receipt = next(h for h in frame.decode().split("\n") if h.startswith("receipt:"))[8:]
                        conn.sendall(f"RECEIPT\nreceipt-id:{receipt}\n\n\x00".encode())

        threading.Thread(target=serve, daemon=True).start()
        publisher = parse_target(f"stomp://127.0.0.1:{port}?timeout=2").publisher_factory()()
        with publisher.listener.cond:  # the ERROR read by the receiver thread before the SEND (not a timed wait)
            assert publisher.listener.cond.wait_for(lambda: publisher.listener.error, timeout=30), "no ERROR read"
        err = _publish_guarded(publisher, {"message_id": "m", "address": "q", "payload": "p", "headers": {},
                                          "delivery": 1})
        for conn in conns:
            conn.close()
    assert err is None
    assert len(sends) == 1, "the message was sent twice"
    assert len(conns) == 2


def _receivers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "__io_loop" in t.name}  # stomp.py's receiver threads


def _receiver_threads_end(before: set[threading.Thread]) -> bool:
    """The receiver threads started since ``before`` all end within 5 s."""
    deadline = time.monotonic() + 5
    while _receivers() - before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_stomp_broker_that_takes_the_connection_and_never_answers_is_down_after_the_timeout():
    """A listener that accepts the TCP connection and never sends STOMP's CONNECTED frame (a hung broker, a proxy in
    front of a dead one): the publisher gives up after the target's ``timeout`` with the broker down, not never."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        factory = parse_target(f"stomp://127.0.0.1:{port}?timeout=1").publisher_factory()
        raised: list[BaseException] = []
        before = _receivers()

        def connect() -> None:
            try:
                factory()
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                raised.append(exc)

        attempt = threading.Thread(target=connect, daemon=True)
        attempt.start()
        attempt.join(60)  # a guard: without a deadline of its own the connect never returns
        assert not attempt.is_alive(), "the publisher still waits for the broker's answer"
        assert _receiver_threads_end(before), "a publisher that never connected left its socket and receiver thread"
    (err,) = raised
    assert isinstance(err, TargetDown)
    assert "no CONNECTED frame within 1.0s" in str(err)


def _publish_each(publisher, messages) -> list[TargetDown | None]:
    """Publishes each (message id, address) of ``messages`` on one ``publisher`` (closed after): what each raised."""
    outcomes: list[TargetDown | None] = []
    for mid, address in messages:
        try:
            publisher.publish({"message_id": mid, "address": address, "payload": mid, "headers": {}, "delivery": 2})
            outcomes.append(None)
        except TargetDown as exc:
            outcomes.append(exc)
    publisher.close()
    return outcomes


def _publish_guarded(publisher, rec: dict) -> BaseException | None:
    """Publishes ``rec``, then closes the publisher, in a thread given 60 s: a publish with no deadline of its own
    fails the test instead of hanging it (the error's text names the deadline that ended it; nothing is timed).
    Returns what the publish raised."""
    raised: list[BaseException] = []

    def publish() -> None:
        try:
            publisher.publish(rec)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            raised.append(exc)
        finally:
            publisher.close()

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    sender.join(60)
    assert not sender.is_alive(), "the publisher still waits on a broker that stopped answering"
    return (raised or [None])[0]


def test_a_stomp_broker_that_stops_reading_is_down_after_the_timeout_not_never():
    """A broker that answers CONNECTED, keeps the connection open and stops reading it (hung, or a proxy whose
    back end went away): once the socket's buffers are full, a SEND with a large payload cannot be written. The
    publisher gives up after the target's ``timeout`` with the broker down; before, it waited in stomp.py's
    blocking ``sendall`` for as long as the connection lived, and the cycle held its lease all that time."""
    with socket.create_server(("127.0.0.1", 0)) as stand_in:
        port = stand_in.getsockname()[1]
        accepted: list[socket.socket] = []

        def answer_then_stop_reading() -> None:
            conn, _ = stand_in.accept()
            accepted.append(conn)
            seen = b""
            while b"\x00" not in seen:  # the CONNECT frame
                seen += conn.recv(4096)
            conn.sendall(b"CONNECTED\nversion:1.2\n\n\x00")

        broker = threading.Thread(target=answer_then_stop_reading, daemon=True)
        broker.start()
        publisher = parse_target(f"stomp://127.0.0.1:{port}?timeout=1").publisher_factory()()
        broker.join(10)
        err = _publish_guarded(publisher, {"message_id": "m-large", "address": "orders",
                                          "payload": "x" * (64 << 20), "headers": {}, "delivery": 1})
        for conn in accepted:
            conn.close()
    assert isinstance(err, TargetDown)
    assert "TimeoutError" in str(err)
    assert "in 1.0s and no more" in str(err)


@contextlib.contextmanager
def _freezable_proxy(to_port: int):
    """A proxy on a free port to 127.0.0.1:``to_port``, and the event that, once set, makes it read and drop
    everything in both directions (a back end that hangs while the connection stays open)."""
    frozen = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as proxy:
        ends: list[socket.socket] = []

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    if not frozen.is_set():
                        dst.sendall(data)

        def accept() -> None:
            client, _ = proxy.accept()
            broker = socket.create_connection(("127.0.0.1", to_port))
            ends.extend([client, broker])
            threading.Thread(target=pipe, args=(client, broker), daemon=True).start()
            threading.Thread(target=pipe, args=(broker, client), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        try:
            yield proxy.getsockname()[1], frozen
        finally:
            for end in ends:
                end.close()


def test_a_new_amqp_channel_the_broker_never_opens_is_down_after_the_timeout():
    """After RabbitMQ closed the channel on a routing key it refuses (the test above), the next message opens a new
    channel; a broker that stops answering then is down after the target's timeout, as for a confirm that never
    comes, not never (channel.open had no deadline of its own)."""
    with _freezable_proxy(5672) as (port, frozen):
        publisher = parse_target(f"amqp://reprocess-limited:limited@127.0.0.1:{port}/%2F?exchange=amq.topic"
                                 "&timeout=1").publisher_factory()()
        rec = {"payload": "p", "headers": {}, "delivery": 2}
        with pytest.raises(DestinationDown):
            publisher.publish({**rec, "message_id": "refused", "address": "forbidden.x"})
        frozen.set()
        err = _publish_guarded(publisher, {**rec, "message_id": "next", "address": "allowed.x"})
    assert isinstance(err, TargetDown), err
    assert "within 1.0s" in str(err)


def test_an_amqp_broker_whose_confirms_stop_coming_is_down_after_the_timeout_not_never():
    """RabbitMQ behind a proxy that, once the publisher is connected, stops passing anything on (a proxy whose
    back end hangs; a broker that withholds confirms, as a quorum queue without its majority does, looks the same
    to the publisher). The publish waits for its confirm only the target's ``timeout``, then the broker is down;
    before, pika's wait ended only when the connection's heartbeat gave up, and never while heartbeats flowed."""
    conn, ch = _amqp_queues(["hung.q"])
    with _freezable_proxy(5672) as (port, frozen):
        publisher = parse_target(f"amqp://guest:guest@127.0.0.1:{port}/%2F?timeout=1").publisher_factory()()
        rec = {"address": "hung.q", "payload": "p", "headers": {}, "delivery": 1}
        publisher.publish({**rec, "message_id": "through"})  # the proxy passes a publish and its confirm
        frozen.set()
        err = _publish_guarded(publisher, {**rec, "message_id": "held"})
    got = []
    while (msg := ch.basic_get("hung.q", auto_ack=True))[0] is not None:
        got.append(msg[1].message_id)
    conn.close()
    assert got == ["through"]  # "held" never reached the broker: not confirmed, not delivered
    assert isinstance(err, TargetDown)
    assert "no answer to a publisher confirm (or a new channel) within 1.0s" in str(err)


def _rabbit_eval(expr: str) -> str:
    return subprocess.run(["rabbitmqctl", "eval", expr], check=True, capture_output=True, text=True,
                          env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin"}).stdout.strip()


def test_a_body_over_rabbitmqs_max_message_size_is_a_refused_delivery_not_the_broker_down():
    """RabbitMQ closes the channel with 406 on a body over its ``max_message_size`` (128 MiB unless configured):
    that message cannot go, the broker is fine, and the next message is published on a new channel. Taken for the
    broker down, it stopped its partition at that message on every run and never dead-lettered it. The limit is
    lowered for the moment the publisher's channel opens (a channel reads it then), and put back at once."""
    conn, ch = _amqp_queues(["sized.q"])
    before = _rabbit_eval("application:get_env(rabbit, max_message_size).")
    assert before.startswith("{ok,"), before
    _rabbit_eval("application:set_env(rabbit, max_message_size, 1048576).")
    try:
        publisher = parse_target(AMQP + "?timeout=10").publisher_factory()()
    finally:
        _rabbit_eval(f"application:set_env(rabbit, max_message_size, {before[4:-1]}).")
    rec = {"address": "sized.q", "headers": {}, "delivery": 1}
    try:
        with pytest.raises(MessageRefused) as info:
            publisher.publish({**rec, "message_id": "too-big", "payload": "x" * (2 << 20)})
        publisher.publish({**rec, "message_id": "after", "payload": "small"})
    finally:
        publisher.close()
    assert info.value.error_class == "reprocess.AmqpMessageTooLarge"
    assert "message size 2097152 is larger than configured max size 1048576" in str(info.value)
    got = []
    while (msg := ch.basic_get("sized.q", auto_ack=True))[0] is not None:
        got.append(msg[1].message_id)
    conn.close()
    assert got == ["after"]


def test_an_amqp_broker_that_never_opens_the_first_channel_is_down_after_the_timeout(monkeypatch):
    """The connection is made (its handshake bounded by pika's stack timeout), then the broker stops answering before
    the publisher's first channel is open: the target is down after its ``timeout``, not when the heartbeat gives up
    minutes later, or never while a proxy keeps the socket open."""
    import pika

    opened = pika.BlockingConnection.channel
    with _freezable_proxy(5672) as (port, frozen):
        def channel(self, *args, **kwargs):  # the broker hangs between the handshake and the channel's opening
            frozen.set()
            return opened(self, *args, **kwargs)

        monkeypatch.setattr(pika.BlockingConnection, "channel", channel)
        raised: list[BaseException] = []

        def connect() -> None:
            try:
                parse_target(f"amqp://guest:guest@127.0.0.1:{port}/%2F?timeout=1").publisher_factory()()
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                raised.append(exc)

        opener = threading.Thread(target=connect, daemon=True)
        opener.start()
        opener.join(60)
        assert not opener.is_alive(), "the publisher still waits for its first channel"
    assert frozen.is_set()
    assert len(raised) == 1, raised
    assert isinstance(raised[0], TargetDown), raised
    assert "no answer to the first channel within 1.0s" in str(raised[0])


def test_rate_limiter_spaces_messages_evenly(monkeypatch):
    clock = {"t": 100.0}
    sends = []
    monkeypatch.setattr("reprocess.targets.broker.time.monotonic", lambda: clock["t"])
    monkeypatch.setattr("reprocess.targets.broker.time.sleep", lambda s: clock.__setitem__("t", clock["t"] + s))
    limiter = RateLimiter(4.0)
    for _ in range(9):
        limiter.wait()
        sends.append(clock["t"])
    assert [round(b - a, 6) for a, b in zip(sends, sends[1:], strict=False)] == [0.25] * 8
    assert RateLimiter(None).interval == 0.0
    # a target's partitions each send at rate / partitions, partition i starting i / rate later: two partitions at a
    # rate of 1 sent together every 2 s, now one a second between them
    both = sorted(t for slot in (0, 1) for t in _sends(clock, RateLimiter(0.5, slot / 1.0), 4))
    assert [round(b - a, 6) for a, b in zip(both, both[1:], strict=False)] == [1.0] * 7


def _sends(clock: dict, limiter: RateLimiter, n: int) -> list[float]:
    """The times of ``n`` sends through ``limiter`` from the clock's time now (the clock put back after)."""
    start, out = clock["t"], []
    for _ in range(n):
        limiter.wait()
        out.append(clock["t"])
    clock["t"] = start
    return out


def test_broker_target_specs_are_checked_before_any_work():
    assert parse_target("amqp://u:p@h:1/v?rate=50&exchange=x").opts.rate == 50.0
    assert parse_target("stomp://h?destination=/topic/{address}").opts.port == 61613
    with pytest.raises(ConfigError, match="unknown option"):
        parse_target("amqp://h/?exchnage=x")
    with pytest.raises(ConfigError, match="rate must be a finite number > 0"):
        parse_target("stomp://h?rate=0")
    # nan passed '<= 0' (no rate limit at all); inf waited for ever
    with pytest.raises(ConfigError, match="rate must be a finite number > 0, got nan"):
        parse_target("stomp://h?rate=nan")
    with pytest.raises(ConfigError, match="timeout must be a finite number > 0, got inf"):
        parse_target("amqp://h/?timeout=inf")
    # a '+' is a plus, not a form's space
    assert parse_target("stomp://h?destination=/topic/a+b").opts.query["destination"] == "/topic/a+b"
    # a password holding '/' or '#' ends urlsplit's host early: it was read as a port and shown whole in the error
    with pytest.raises(ConfigError, match=r"amqp://svc:\*\*\*@rabbit:5672/%2F: an '@' after the host") as bad:
        parse_target("amqp://svc:Xk9/q#Tz@rabbit:5672/%2F")
    assert "Xk9" not in str(bad.value)
    for spec, shown in (("amqp://svc:Xk9/q#Tz@rabbit:5672/%2F", "amqp://svc:***@rabbit:5672/%2F"),
                        ("amqp://svc:pa?ss@rabbit/", "amqp://svc:***@rabbit/"),
                        ("stomp://h:61613?destination=/queue/a@b", "stomp://h:61613?destination=/queue/a@b"),
                        ("amqp://[broker", "amqp://[broker"),
                        # a review's: '[' in the password (urlsplit refuses the spec), digits before its '?', an '@'
                        ("amqp://svc:a[b@rabbit/", "amqp://svc:***@rabbit/"),
                        ("amqp://svc:1234?abc@rabbit/", "amqp://svc:***@rabbit/"),
                        ("amqp://svc:a@b/c@rabbit/", "amqp://svc:***@rabbit/"),
                        # a review's: a '?' then key=value in the password, after the user's ':' (shown whole before)
                        ("stomp://svc:Pw?destination=1@broker", "stomp://svc:***@broker"),
                        ("amqp://svc:Pw?k=1@rabbit/", "amqp://svc:***@rabbit/"),
                        ("stomp://[::1]:61613?destination=/queue/a@b", "stomp://[::1]:61613?destination=/queue/a@b"),
                        ("stomp://h?destination=/queue/a@b", "stomp://h?destination=/queue/a@b"),
                        ("stomp://h:?destination=/queue/a@b", "stomp://h:?destination=/queue/a@b")):  # default port
        assert redact(spec) == shown, spec
    assert parse_target("stomp://h:61613?destination=/queue/a@b").opts.query["destination"] == "/queue/a@b"
    for spec in ("amqp://svc:a[b@rabbit/", "amqp://svc:1234?abc@rabbit/", "amqp://svc:a@b/c@rabbit/"):
        with pytest.raises(ConfigError) as bad:
            parse_target(spec)
        assert "amqp://svc:***@rabbit/" in str(bad.value), spec
    assert redact("amqp://u:p@h:1/v") == "amqp://u:***@h:1/v"
    assert redact("amqp://u:p:q@Host/v") == "amqp://u:***@Host/v"
    with pytest.raises(ConfigError, match=r"amqp://u:\*\*\*@h:99999/v: Port out of range") as info:
        parse_target("amqp://u:secret@h:99999/v")  # once a ValueError out of redact itself: exit 1, no config error
    assert "secret" not in str(info.value)


def test_a_policy_can_name_its_own_target_with_secrets_from_the_environment(spark, tmp_path, monkeypatch):
    conn, ch = _amqp_queues(["own.orders"])
    monkeypatch.setenv("TEST_MQ_PASSWORD", "guest")
    policies = parse_policies("""
policies:
  - match: "own.#"
    profile: stepped
    settings: {delays: [1m], max_deliveries: 3}
    target: "amqp://guest:${TEST_MQ_PASSWORD}@127.0.0.1:5672/%2F"
  - match: "#"
    profile: stepped
    settings: {delays: [1m], max_deliveries: 3}
""")
    write_failures(tmp_path / "landing", T0, "a", [
        {"message_id": "p-1", "address": "own.orders", "payload": "to rabbit", "failed_at": "2026-11-21T10:00:00Z"},
        {"message_id": "p-2", "address": "other.thing", "payload": "to outbox", "failed_at": "2026-11-21T10:00:00Z"}])
    s = run_cycle(spark, CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"),
                                      policies=policies, as_of_ms=_ms(T0 + timedelta(minutes=5)), target="outbox"))
    assert (s["due"], s["delivered"]) == (2, 2)
    method, props, body = ch.basic_get("own.orders", auto_ack=True)
    conn.close()
    assert (props.message_id, body) == ("p-1", b"to rabbit")
    assert [r.message_id for r in read_dataset(spark, str(tmp_path / "wh"), "outbox").collect()] == ["p-2"]


def test_a_policy_target_is_checked_when_the_file_is_loaded():
    with pytest.raises(ConfigError, match=r"policy='#'.*key='target'.*unknown option"):
        parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [1m]}, "
                       "target: 'amqp://h/?bogus=1'}]")
