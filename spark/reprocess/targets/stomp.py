"""The ``stomp://`` target: send due messages back to ActiveMQ Classic (or any STOMP 1.2 broker) with receipts.

``stomp://user:password@host:61613?destination=/queue/{address}&rate=100&timeout=10&partitions=2``

``destination`` (default ``/queue/{address}``) maps a message to where it came from; ``{address}`` and
``{message_id}`` are replaced. Each SEND is persistent and asks for a RECEIPT; the delivery counts once
the receipt arrives. An ERROR frame, a refused or lost connection or a missing receipt after ``timeout``
seconds is the broker failing: see :mod:`reprocess.targets.broker`, as is a frame the broker has not taken
within ``timeout`` seconds (a broker that stopped reading its socket).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from reprocess.targets.broker import (
    BrokerOptions,
    BrokerTarget,
    Publisher,
    TargetDown,
    message_headers,
    parse_broker_uri,
)


class _Receipts:
    """A STOMP listener that records receipts and errors."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.receipts: set[str] = set()
        self.error: str | None = None
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
            self.error = f"{frame.headers.get('message', 'ERROR frame')}: {frame.body}"[:500]
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
    def __init__(self, opts: BrokerOptions) -> None:
        import stomp
        from stomp.exception import StompException

        self.timeout = opts.timeout
        self.destination = opts.query.get("destination", "/queue/{address}")
        self.listener = _Receipts()
        self.conn = stomp.Connection12([(opts.host, opts.port)], reconnect_attempts_max=1, timeout=opts.timeout,
                                       heartbeats=(0, 0))
        self.conn.set_listener("receipts", self.listener)
        self.conn.transport.send = _send_within(self.conn.transport, opts.timeout)
        self.n = 0
        self.broken = False
        where = f"stomp://{opts.host}:{opts.port}"
        try:
            # not wait=True: stomp.py waits for the CONNECTED frame with no deadline, so a broker (or a proxy in front
            # of a dead one) that takes the connection and never answers held the task, and the cycle its lease
            self.conn.connect(opts.user, opts.password, wait=False)
        except (StompException, OSError) as exc:
            raise TargetDown(f"cannot connect to {where}: {type(exc).__name__} {exc}") from exc
        with self.listener.cond:
            self.listener.cond.wait_for(lambda: self.listener.connected or self.listener.error, timeout=self.timeout)
            connected, error = self.listener.connected, self.listener.error
        if not connected:
            self.conn.transport.disconnect_socket()  # ends its receiver thread
            raise TargetDown(f"cannot connect to {where}: {error or f'no CONNECTED frame within {self.timeout}s'}")

    def publish(self, rec: dict[str, Any]) -> None:
        from stomp.exception import StompException

        self.n += 1
        receipt = f"r-{self.n}"
        dest = self.destination.replace("{address}", rec["address"]).replace("{message_id}", rec["message_id"])
        headers = message_headers(rec) | {"persistent": "true", "receipt": receipt}
        try:
            self.conn.send(dest, (rec["payload"] or "").encode("utf-8"), headers=headers)
        except (StompException, OSError) as exc:
            self.broken = True  # a frame may be half written: nothing more goes on this connection
            raise TargetDown(f"{type(exc).__name__}: {exc}") from exc
        with self.listener.cond:
            ok = self.listener.cond.wait_for(lambda: receipt in self.listener.receipts or self.listener.error,
                                             timeout=self.timeout)
            if receipt in self.listener.receipts:  # confirmed, whatever came after it (a lost connection)
                self.listener.receipts.discard(receipt)
                return
            if self.listener.error:
                raise TargetDown(self.listener.error)
            if not ok:
                raise TargetDown(f"no receipt from the broker within {self.timeout}s")

    def close(self) -> None:
        try:
            if self.conn.is_connected() and not self.broken:
                self.conn.disconnect()
        finally:
            # the receiver thread ends with its socket; after a broker that stopped answering, DISCONNECT gets no
            # receipt that would close it, and a reused Python worker kept the thread and the socket
            self.conn.transport.disconnect_socket()


class StompTarget(BrokerTarget):
    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.opts = parse_broker_uri(spec, 61613, {"destination"})

    def publisher_factory(self) -> Callable[[], Publisher]:
        opts = self.opts
        return lambda: StompPublisher(opts)
