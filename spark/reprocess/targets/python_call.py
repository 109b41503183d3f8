"""The ``python:module:function`` target: user code called once per message, inside the executors.

``function(message)`` gets a dict with ``message_id``, ``address``, ``payload``, ``headers``,
``delivery`` (the number of this delivery), ``deliveries_before``, ``first_failed_at`` and
``idempotency_key`` (``<message_id>:<delivery>``, or ``<message_id>:r<resets>.<delivery>`` once an operator's
re-drive reset the count). Returning is success; an exception (``SystemExit`` and ``asyncio.CancelledError`` too) is a
failure whose class (module-qualified) and message are recorded, except
:class:`reprocess.targets.TargetUnavailable`: the system behind the function is down, and as with a broker
that is down the message consumes no delivery and stays due, and the partition calls no more messages; raised with
``address_only=True``, only the partition's messages for that address are held so.

The function must do its work before it returns: an ``async def`` or generator function is refused when the target is
loaded (called, it returns without running its body: every message counted delivered, none sent), and a returned
coroutine or generator is taken as the target down (the message stays due; the run says why).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from reprocess.errors import ConfigError
from reprocess.targets.base import (
    DESTINATION_DOWN,
    OUTCOME_SCHEMA,
    TARGET_DOWN,
    TargetUnavailable,
    deliver_each,
    idempotency_key,
)

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from reprocess.targets.base import RunContext


def _load(module: str, function: str) -> Any:
    try:
        fn = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load target python:{module}:{function}: {exc}", key="--target") from exc
    if not callable(fn):
        raise ConfigError(f"python:{module}:{function} is not callable", key="--target")
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own method, as inspect needs it
    for kind in (fn, call):
        if inspect.iscoroutinefunction(kind) or inspect.isasyncgenfunction(kind) or inspect.isgeneratorfunction(kind):
            raise ConfigError(f"python:{module}:{function} is an async or generator function: called, it returns "
                              "without running its body, and every message would be counted delivered; give a plain "
                              "function that delivers before it returns", key="--target")
    return fn


class _Escaped(Exception):  # noqa: N818 - not an error of its own: carries one
    """A BaseException user code raised that is not an Exception (SystemExit, asyncio.CancelledError): the
    message's failure, not the task's (it failed the Spark task, every retry sending the partition again)."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(original)
        self.original = original


def _text(exc: BaseException) -> str:
    """``str(exc)``, or what it is when that raises (user code's exception types may)."""
    try:
        return str(exc)
    except Exception as inner:  # noqa: BLE001 - any: the failure must still be recorded
        return f"<{error_class_name(exc)} whose str() raised {error_class_name(inner)}>"


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    return dict(value)  # arrow maps may arrive as lists of (key, value) pairs


def error_class_name(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


class PythonTarget:
    def __init__(self, spec: str, module: str, function: str) -> None:
        self.spec = spec
        self.module = module
        self.function = function
        _load(module, function)  # fail fast on the driver, before any work

    def redrive(self, due: DataFrame, run: RunContext) -> DataFrame:
        module, function = self.module, self.function

        def call(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            fn = _load(module, function)

            def deliver(rec: dict[str, Any]) -> None:
                delivery = int(rec["delivery"])
                message = {
                    "message_id": rec["message_id"], "address": rec["address"], "payload": rec["payload"],
                    "headers": _headers(rec["headers"]), "delivery": delivery, "deliveries_before": delivery - 1,
                    "first_failed_at": datetime.fromtimestamp(rec["first_failed_ms"] / 1000, tz=UTC),
                    "idempotency_key": idempotency_key(rec),
                }
                try:
                    result = fn(message)
                except Exception:
                    raise
                except KeyboardInterrupt:  # the worker being stopped: the task's, not the message's
                    raise
                except BaseException as exc:  # noqa: BLE001 - SystemExit, CancelledError: the message's failure
                    raise _Escaped(exc) from exc
                if inspect.isawaitable(result) or inspect.isgenerator(result) or inspect.isasyncgen(result):
                    close = getattr(result, "close", None)
                    if callable(close):
                        close()  # no "never awaited" warning for each message
                    raise TargetUnavailable(f"returned a {type(result).__name__}, not having delivered the message "
                                            "(a plain function must deliver before it returns)")

            def failure(exc: Exception) -> tuple[str, str]:
                if isinstance(exc, TargetUnavailable):
                    down = DESTINATION_DOWN if exc.address_only else TARGET_DOWN
                    return down, f"python:{module}:{function}: {_text(exc)}"
                cause: BaseException = exc.original if isinstance(exc, _Escaped) else exc
                return error_class_name(cause), _text(cause)  # any other failure of user code is the message's

            yield from deliver_each(batches, deliver, failure, lambda rec: rec["address"])

        cols = due.select("message_id", "address", "payload", "headers", "delivery", "first_failed_ms", "resets")
        return cols.mapInPandas(call, OUTCOME_SCHEMA)
