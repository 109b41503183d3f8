"""The ``stomp://`` target: send due messages back to ActiveMQ Classic (or any STOMP 1.2 broker) with receipts.

``stomp://user:password@host:61613?destination=/queue/{address}&rate=100&timeout=10&partitions=2``

``destination`` (default ``/queue/{address}``) maps a message to where it came from; ``{address}`` and
``{message_id}`` are replaced. Each SEND is persistent and asks for a RECEIPT; the delivery counts once
the receipt arrives. A refused or lost connection, an ERROR frame about no SEND or a missing receipt after
``timeout`` seconds is the broker failing: see :mod:`reprocess.targets.broker`, as is a frame the broker has not
taken within ``timeout`` seconds (a broker that stopped reading its socket). An ERROR frame refusing one SEND as
written (``FRAME_REFUSED``), or a connection the broker closes on one message twice while it answers other
frames, is that message refused (a failed delivery); any other ERROR about a SEND is its destination refusing
writes (ActiveMQ's "not authorized to write to"): see :class:`StompPublisher`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

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
)

# How ActiveMQ Classic's ERROR frame begins (its body is the exception's stack trace) when it cannot take a frame as
# written: a header it cannot read (an unknown transaction...). Its other ERRORs about a SEND (a write it is not
# authorised to make, a destination's memory limit, a full store, a failing persistence adapter) carry the SEND's
# receipt too, and would come for every message to that destination, or to every one: they, and any other broker's
# ERRORs about a SEND, are the destination down (see reprocess.targets.base.deliver_each).
FRAME_REFUSED = "org.apache.activemq.transport.stomp.ProtocolException"
DESTINATION = "/queue/{address}"  # the destination option's default
# STOMP 1.2's header escapes. stomp.py applies them to header values only; a name holding ':' was split by the broker
# at it ({"a:b": "1"} arrived as {"a": "b:1"}) and one holding a newline broke the frame.
_NAME_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", ":": "\\c"})


def stomp_headers(headers: dict[str, str], destination: str) -> dict[str, str]:
    """``headers`` with their names escaped as STOMP 1.2 says (their values are escaped by stomp.py). Raises
    :class:`MessageRefused` when a name, a value or the destination holds a NUL: STOMP has no escape for it, and
    the NUL ends the frame where it stands (ActiveMQ took the message with the headers after it cut off, the
    idempotency key among them, and read the rest of the frame as a frame of its own)."""
    held = [f"header {name[:60]!r}" for name, value in headers.items() if "\x00" in name + value]
    if "\x00" in destination:
        held.insert(0, f"the destination {destination[:60]!r}")
    if held:
        raise MessageRefused("reprocess.StompNulInHeader", f"{', '.join(held)} holds a NUL character, which a "
                             "STOMP frame cannot carry outside its body")
    return {name.translate(_NAME_ESCAPES): value for name, value in headers.items()}


class _Receipts:
    """A STOMP listener that records receipts and errors."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.receipts: set[str] = set()
        self.error: str | None = None
        self.error_receipt: str | None = None  # the receipt header of the frame an ERROR is about, if it says
        self.error_is_the_frames = False  # the ERROR refuses the frame as written, not the broker failing
        self.connected = False

    def on_connected(self, frame: Any) -> None:
        with self.cond:
            self.connected = True
            self.cond.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.add(frame.headers.get("receipt-id", ""))
            self.cond.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.cond:
            body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body or "")
            message = frame.headers.get("message") or "ERROR frame"
            # ActiveMQ's body is the exception's message, or its stack trace, which begins with it
            self.error = (body if message in body.split("\n", 1)[0] else f"{message}: {body}")[:500]
            self.error_receipt = frame.headers.get("receipt-id")
            self.error_is_the_frames = body.startswith(FRAME_REFUSED)
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        with self.cond:
            self.error = self.error or "connection lost"
            self.cond.notify_all()

    def __getattr__(self, name: str) -> Any:  # the other listener callbacks: nothing to do
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)


def _send_within(transport: Any, timeout: float) -> Callable[[bytes], None]:
    """The transport's ``send`` with a deadline: stomp.py writes a frame with a blocking ``sendall``, which waits for
    ever once a broker that keeps the connection open stops reading it and the socket's buffers are full (a SEND with
    a large payload, then the DISCONNECT after it). Here a frame not taken within ``timeout`` seconds raises
    ``TimeoutError``. The socket stays blocking for the receiver thread's reads: each write is one that cannot wait."""

    def send(frame: bytes) -> None:
        from stomp.exception import NotConnectedException

        sock = transport.socket
        if sock is None:
            raise NotConnectedException()
        if sock.fileno() < 0:  # the receiver thread closed it (connection reset) and has not set it to None yet
            raise ConnectionResetError("the connection was closed before the frame was written")
        left, deadline = memoryview(frame), time.monotonic() + timeout
        poll = select.poll()
        poll.register(sock, select.POLLOUT)
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not poll.poll(wait * 1000):
                raise TimeoutError(f"the broker took {len(frame) - len(left)} of a frame's {len(frame)} bytes "
                                   f"in {timeout}s and no more")
            try:
                left = left[sock.send(left, socket.MSG_DONTWAIT):]
            except BlockingIOError:  # writable, then full again: wait for the next chance
                continue

    return send


class StompPublisher(Publisher):
    """One STOMP connection, and a new one when the broker closed it.

    A broker may close the connection on one message it cannot take, without an ERROR frame: ActiveMQ Classic does
    when a header it reads as a JMS field does not parse (``priority: high``, ``expires: soon``, a cron in
    ``AMQ_SCHEDULED_CRON`` it rejects). Taking that for the broker down stopped the partition at that message on
    every run: the message never used a delivery, never dead-lettered, and the messages after it never went. So a
    connection lost on a SEND is tried once more on a new connection (a blip, or a broker back at once: delivered);
    lost again, the broker is asked a frame that carries no message (BEGIN and ABORT of a transaction, with a
    receipt) on a third connection. Answered, the message is refused (a failed delivery, the others go on); not,
    the broker is down. An ERROR frame naming the SEND's receipt that refuses the frame as written (FRAME_REFUSED)
    is about that message alone: refused too. Another ERROR naming the SEND is its destination refusing writes
    (DestinationDown): the messages for it stay due, the others go on."""

    def __init__(self, opts: BrokerOptions) -> None:
        self.opts = opts
        self.timeout = opts.timeout
        self.destination = opts.query.get("destination", DESTINATION)
        self.where = f"stomp://{opts.host}:{opts.port}"
        self.n = 0
        self.conn: Any = None
        self._connect()

    def _connect(self) -> None:
        import stomp
        from stomp.exception import StompException

        self._drop()
        opts = self.opts
        self.broken = False
        self.listener = _Receipts()
        self.conn = stomp.Connection12([(opts.host, opts.port)], reconnect_attempts_max=1, timeout=opts.timeout,
                                       heartbeats=(0, 0))
        self.conn.set_listener("receipts", self.listener)
        self.conn.transport.send = _send_within(self.conn.transport, opts.timeout)
        try:
            # not wait=True: stomp.py waits for the CONNECTED frame with no deadline, so a broker (or a proxy in front
            # of a dead one) that takes the connection and never answered held the task, and the cycle its lease
            self.conn.connect(opts.user, opts.password, wait=False)
        except (StompException, OSError, ValueError, AttributeError) as exc:
            # ValueError, AttributeError: as in _receipt, the receiver thread closing the socket as CONNECT is written
            self.broken = True
            self._drop()
            raise TargetDown(f"cannot connect to {self.where}: {type(exc).__name__} {exc}") from exc
        with self.listener.cond:
            self.listener.cond.wait_for(lambda: self.listener.connected or self.listener.error, timeout=self.timeout)
            connected, error = self.listener.connected, self.listener.error
        if not connected:
            self.broken = True
            self._drop()  # its socket and receiver thread: a publisher that never connected is never closed
            raise TargetDown(f"cannot connect to {self.where}: {error or f'no CONNECTED frame within {self.timeout}s'}")

    def _receipt(self, send: Callable[[str], None], destination: str | None = None) -> str | None:
        """``send(receipt)`` writes a frame asking for ``receipt``. None once it arrives; the reason when the
        connection was lost (or an ERROR about another frame came) first. Raises MessageRefused for an ERROR refusing
        this frame as written, DestinationDown for another ERROR about this frame when it is a SEND to
        ``destination``, TargetDown when the broker does not take the frame or answer it within the timeout."""
        from stomp.exception import StompException

        self.n += 1
        receipt = f"r-{self.n}"
        listener = self.listener
        try:
            send(receipt)
        except TimeoutError as exc:  # the broker stopped reading (see _send_within)
            self.broken = True  # a frame may be half written: nothing more goes on this connection
            raise TargetDown(f"{type(exc).__name__}: {exc}") from exc
        except (StompException, OSError, ValueError, AttributeError) as exc:
            # ValueError, AttributeError: the receiver thread closing the socket as the write began (stomp.py
            # closes it, then sets it to None)
            self.broken = True
            return f"{type(exc).__name__}: {exc}"
        with listener.cond:
            listener.cond.wait_for(lambda: receipt in listener.receipts or listener.error, timeout=self.timeout)
            if receipt in listener.receipts:  # confirmed, whatever came after it (a lost connection)
                listener.receipts.discard(receipt)
                return None
            if listener.error and listener.error_receipt == receipt and listener.error_is_the_frames:
                error, listener.error, listener.error_receipt = listener.error, None, None
                raise MessageRefused("stomp.ERROR", error)
            if listener.error and listener.error_receipt == receipt:
                self.broken = True  # STOMP 1.2 lets the broker close the connection after an ERROR
                if destination is not None:
                    raise DestinationDown(destination, listener.error)
                raise TargetDown(listener.error)
            if listener.error:
                self.broken = True
                return listener.error
        self.broken = True
        raise TargetDown(f"no receipt from the broker within {self.timeout}s")

    def publish(self, rec: dict[str, Any]) -> None:
        dest = filled(self.destination, rec)
        body = (rec["payload"] or "").encode("utf-8")

        # The original headers less the frame's own length: one captured from a STOMP frame is that frame's, and the
        # broker read this body by it (a longer one: it waited for bytes that never came, on every run; a shorter
        # one: it cut the body). stomp.py then writes this body's.
        headers = stomp_headers({k: v for k, v in message_headers(rec).items() if k != "content-length"}, dest)

        def send(receipt: str) -> None:
            self.conn.send(dest, body, headers=headers | {"persistent": "true", "receipt": receipt})

        lost = None
        for _ in range(2):
            if not self._healthy():
                self._connect()  # the broker down: TargetDown
            lost = self._receipt(send, dest)
            if lost is None:
                return
        self._connect()

        def probe(receipt: str) -> None:  # a transaction begun and aborted: nothing reaches a destination
            transaction = f"reprocess-probe-{self.n}"
            self.conn.begin(transaction)
            self.conn.abort(transaction, headers={"receipt": receipt})

        try:
            unanswered = self._receipt(probe)
        except MessageRefused as exc:
            unanswered = str(exc)
        if unanswered is not None:
            self.broken = True
            raise TargetDown(f"the connection was lost twice on a message ({lost}), and a frame without one got no "
                             f"answer either ({unanswered})")
        raise MessageRefused("reprocess.StompConnectionClosed", "the broker closed the connection on this message "
                             f"twice ({lost}) and answers frames without one: most likely a header it could not "
                             "read (ActiveMQ Classic drops the connection on a JMS field it cannot parse, such as "
                             "'priority: high')")

    def _healthy(self) -> bool:
        """Connected, with no frame half written and no ERROR left unread (one about nothing of ours, or the
        connection lost after the last receipt: the next SEND's wait would end at once on it, its receipt unseen,
        and the message would be sent again). stomp.py's is_connected checks the socket, then uses it, while the
        receiver thread may be setting it to None: that is not connected either."""
        with self.listener.cond:
            if self.listener.error:
                return False
        try:
            return not self.broken and bool(self.conn.is_connected())
        except Exception:  # noqa: BLE001
            return False

    def _drop(self) -> None:
        """The connection's socket and receiver thread end, answered or not; a DISCONNECT first if it is healthy."""
        if self.conn is None:
            return
        try:
            if self._healthy():
                self.conn.disconnect()
        finally:
            # the receiver thread ends with its socket; after a broker that stopped answering, DISCONNECT gets no
            # receipt that would close it, and a reused Python worker kept the thread and the socket. The receiver
            # thread may be closing it too (stomp.py checks the socket, then uses it).
            with contextlib.suppress(Exception):
                self.conn.transport.disconnect_socket()
            self.conn = None

    def close(self) -> None:
        self._drop()


class StompTarget(BrokerTarget):
    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.opts = parse_broker_uri(spec, 61613, {"destination"})

    def publisher_factory(self) -> Callable[[], Publisher]:
        opts = self.opts
        return lambda: StompPublisher(opts)

    def destination_of(self) -> Callable[[dict[str, Any]], str]:
        template = self.opts.query.get("destination", DESTINATION)
        return lambda rec: filled(template, rec)
