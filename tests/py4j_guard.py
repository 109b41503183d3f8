"""Keeps a worker's Spark session usable after a test was cut off in the middle of a call to the JVM.

pytest-timeout (signal method) ends a test that runs too long by raising inside it, wherever it is. If that is inside
a Py4J call, the call's answer is never read: Py4J pins one socket per Python thread, and the next call on that socket
reads the previous call's answer. Every later test of the worker then fails with errors that have nothing to do with
it (``KeyError: 'm'``, "org does not exist in the JVM", a ``JavaObject`` where a version string was expected): one
slow test turned into 170 failures and errors in a CI run. After each test phase (tests/conftest.py),
:func:`drop_interrupted_call` closes such a socket, so the next call opens a fresh one, and cancels the Spark jobs the
cut-off call left running.
"""

from __future__ import annotations

import contextlib
import sys


def drop_interrupted_call(timed_out: bool = False) -> bool:
    """Closes this thread's Py4J connection if a call on it never got its answer; True if it closed one.

    Between calls Py4J keeps the thread's connection in its client's deque; it takes it out for a call and puts it
    back once the answer is read, so a connection out of the deque between test phases is one whose call was cut off.
    With ``timed_out`` (the phase ended with pytest-timeout's failure) the connection is closed even if it is back in
    the deque: a call made while the timeout's exception unwinds (PySpark's call-site ``with`` block makes one on its
    way out) reads the cut-off call's answer as its own, goes back to the deque, and leaves its own answer unread.
    """
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return False
    client = gateway._gateway_client
    get_connection = getattr(client, "get_thread_connection", None)
    if get_connection is None:  # not a pinned-thread client
        return False
    connection = get_connection()
    if connection is None or connection.socket is None:
        return False
    if not timed_out and any(c is connection for c in client.deque):
        return False
    connection.close(reset=True)
    context = SparkContext._active_spark_context
    if context is not None:
        # on a new connection: the job the cut-off call started would hold the cores. If the JVM is gone too, the next
        # test says so; this phase keeps its own error (the timeout's) rather than this one.
        with contextlib.suppress(Exception):
            context.cancelAllJobs()
    return True
