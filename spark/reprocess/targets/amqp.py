"""The ``amqp://`` target: publish due messages back to RabbitMQ (AMQP 0-9-1) with publisher confirms.

``amqp://user:password@host:5672/vhost?exchange=&routing_key={address}&rate=100&timeout=10&partitions=2``

* ``exchange`` (default ``""``, the default exchange) and ``routing_key`` (default ``{address}``: on the
  default exchange, the queue named after the original address) map a message to where it came from;
  ``{address}`` and ``{message_id}`` are replaced. Messages are published ``mandatory`` and persistent.
* A message the broker returns as unroutable is a failure of that delivery (``pika.exceptions.UnroutableError``), as
  is one that AMQP cannot carry (``pika.exceptions.ShortStringTooLong``: a message id, routing key or header name
  longer than 255 bytes; ``reprocess.AmqpFrameTooLarge``: properties and headers larger than the frame size the
  connection negotiated, which RabbitMQ would close the connection on); a refused or lost connection, a closed
  channel, a timeout or no confirm within ``timeout`` seconds is the broker failing: see
  :mod:`reprocess.targets.broker`. A nack is its queue down (full under ``x-overflow: reject-publish``).
* A routing key the user may not publish with (RabbitMQ's topic permissions: the channel closed with 403
  ``ACCESS_REFUSED - access to topic ...``) is that destination down: its messages stay due, the others go on a new
  channel. Refused access to the exchange itself is the broker failing, for every message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from reprocess.errors import ConfigError
from reprocess.targets.broker import (
    BrokerOptions,
    BrokerTarget,
    DestinationDown,
    MessageRefused,
    Publisher,
    TargetDown,
    filled,
    message_headers,
    parse_broker_uri,
    redact,
)

ROUTING_KEY = "{address}"  # the routing_key option's default


# rabbit_channel:check_msg_size's refusal (3.8 to 4.x): "message size 5 is larger than [configured ]max size 4"
_TOO_LARGE = re.compile(r"message size \d+ is larger than (configured )?max size \d+")


class AmqpPublisher(Publisher):
    def __init__(self, opts: BrokerOptions) -> None:
        import pika
        import pika.exceptions as pe

        self.pe = pe
        self.pika = pika
        self.timeout = opts.timeout
        self.exchange = opts.query.get("exchange", "")
        self.routing_key = opts.query.get("routing_key", ROUTING_KEY)
        credentials = pika.PlainCredentials(opts.user or "guest", opts.password or "guest")
        params = pika.ConnectionParameters(
            host=opts.host, port=opts.port, virtual_host=opts.path or "/", credentials=credentials,
            socket_timeout=opts.timeout, blocked_connection_timeout=opts.timeout, connection_attempts=1,
            stack_timeout=opts.timeout)
        self.connection: Any = None
        try:
            self.connection = pika.BlockingConnection(params)  # stack_timeout bounds the handshake
            with self._deadline("the first channel"):  # and this the channel's opening, which nothing else bounds
                self.channel = self.connection.channel()
                self.channel.confirm_delivery()
        except (pe.AMQPError, OSError) as exc:
            self.close()  # a connection opened before its channel failed is not left open
            raise TargetDown(f"cannot connect to amqp://{opts.host}:{opts.port}: {type(exc).__name__} {exc}") \
                from exc

    @contextmanager
    def _deadline(self, what: str) -> Iterator[None]:
        """Ends the connection if the block has not returned within the timeout.

        pika's blocking calls wait for the broker's answer with no deadline of their own: a broker that stays up and
        withholds confirms (a quorum queue that lost its majority), that never answers a channel's opening, or a proxy
        that stopped forwarding held the task until the connection's heartbeat gave up, and with heartbeats flowing
        never. The deadline ends the connection the way pika's own blocked-connection timeout does (on its I/O loop,
        the one the wait runs), and the wait raises its error: the broker down."""
        impl = self.connection._impl
        pe = self.pe

        def give_up() -> None:
            if impl.is_open and impl._transport is not None:  # not a stream that ended in the same loop iteration
                impl._terminate_stream(pe.AMQPConnectionError(f"no answer to {what} within {self.timeout}s"))

        deadline = impl._adapter_call_later(self.timeout, give_up)
        try:
            yield
        finally:
            impl._adapter_remove_timeout(deadline)

    def publish(self, rec: dict[str, Any]) -> None:
        key = filled(self.routing_key, rec)
        props = self.pika.BasicProperties(message_id=rec["message_id"], headers=message_headers(rec),
                                          delivery_mode=2, content_type="application/octet-stream")
        # this message's confirm (and a new channel's opening) within the timeout, else the broker is down
        with self._deadline("a publisher confirm (or a new channel)"):
            self._publish(key, props, rec)

    def _publish(self, key: str, props: Any, rec: dict[str, Any]) -> None:
        pe = self.pe
        try:
            if not self.channel.is_open:  # closed by the broker on the last message's destination (see below)
                try:
                    self.channel = self.connection.channel()
                    self.channel.confirm_delivery()
                except (pe.AMQPError, OSError) as exc:
                    raise TargetDown(f"cannot open a channel: {type(exc).__name__}: {exc}") from exc
            body = (rec["payload"] or "").encode("utf-8")
            self._check_frame(len(body), props)
            self.channel.basic_publish(self.exchange, key, body, props, mandatory=True)
        except pe.UnroutableError as exc:
            raise MessageRefused("pika.exceptions.UnroutableError",
                                 f"no queue bound for routing key {key!r} on exchange {self.exchange!r}") from exc
        except pe.ShortStringTooLong as exc:
            # pika refuses to encode the frame, before a byte is sent: the connection is fine, only this message
            # cannot go (it is an AMQPError, which would otherwise stop the partition at it on every run)
            raise MessageRefused("pika.exceptions.ShortStringTooLong", "a field of this message is longer than AMQP's "
                                 "255 bytes for a short string (the message id, the routing key or a header's name): "
                                 f"{str(exc)[:120]}") from exc
        except pe.NackError as exc:
            # RabbitMQ nacks for one queue (full under x-overflow: reject-publish, or its process failing), not for
            # the broker: that destination's messages stay due, the others go (16 in a row still stop the partition)
            raise DestinationDown(f"{self.exchange}/{key}", f"the broker nacked the message: {exc}") from exc
        except pe.ChannelClosedByBroker as exc:
            if exc.reply_code == 403 and "access to topic" in exc.reply_text:  # this routing key, not the exchange
                raise DestinationDown(f"{self.exchange}/{key}", f"{exc.reply_code} {exc.reply_text}") from exc
            if exc.reply_code == 406 and _TOO_LARGE.search(exc.reply_text or ""):
                # RabbitMQ's max_message_size: this body, not the broker (406 is also an unknown exchange type, a
                # queue declared twice otherwise...: those stay the broker failing)
                raise MessageRefused("reprocess.AmqpMessageTooLarge", f"{exc.reply_code} {exc.reply_text}") from exc
            raise TargetDown(f"{type(exc).__name__}: {exc}") from exc
        except (pe.AMQPError, OSError) as exc:
            raise TargetDown(f"{type(exc).__name__}: {exc}") from exc

    def _check_frame(self, body_bytes: int, props: Any) -> None:
        """Raises :class:`MessageRefused` for a message whose properties (its headers among them) do not fit in one
        frame of the size the connection negotiated: AMQP cannot split them, pika sends them anyway, and RabbitMQ
        closes the connection on the frame (``frame_too_large``), which would be the broker down, at that message,
        on every run."""
        frame_max = self.connection._impl.params.frame_max
        size = len(self.pika.frame.Header(self.channel.channel_number, body_bytes, props).marshal())
        if frame_max and size > frame_max:
            raise MessageRefused("reprocess.AmqpFrameTooLarge", f"its properties and headers take a frame of {size} "
                                 f"bytes, more than the {frame_max} bytes the broker takes in one (frame_max)")

    def close(self) -> None:
        if self.connection is not None and self.connection.is_open:
            self.connection.close()


class AmqpTarget(BrokerTarget):
    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.opts = parse_broker_uri(spec, 5672, {"exchange", "routing_key"})
        if len(self.opts.query.get("exchange", "").encode("utf-8")) > 255:  # else every message would be refused
            raise ConfigError(f"target {redact(spec)}: an AMQP exchange name has at most 255 bytes", key="--target")

    def publisher_factory(self) -> Callable[[], Publisher]:
        opts = self.opts
        return lambda: AmqpPublisher(opts)

    def destination_of(self) -> Callable[[dict[str, Any]], str]:
        exchange, template = self.opts.query.get("exchange", ""), self.opts.query.get("routing_key", ROUTING_KEY)
        return lambda rec: f"{exchange}/{filled(template, rec)}"
