"""The ``python:module:function`` target: user code called once per message, inside the executors.

``function(message)`` gets a dict with ``message_id``, ``address``, ``payload``, ``headers``,
``delivery`` (the number of this delivery), ``deliveries_before``, ``first_failed_at`` and
``idempotency_key`` (``<message_id>:<delivery>``). Returning is success; an exception is a failure
whose class (module-qualified) and message are recorded, except
:class:`reprocess.targets.TargetUnavailable`: the system behind the function is down, and as with a broker
that is down the message consumes no delivery and stays due, and the partition calls no more messages; raised with
``address_only=True``, only the partition's messages for that address are held so.
"""

from __future__ import annotations

import importlib
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
    return fn


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
                fn({
                    "message_id": rec["message_id"], "address": rec["address"], "payload": rec["payload"],
                    "headers": _headers(rec["headers"]), "delivery": delivery, "deliveries_before": delivery - 1,
                    "first_failed_at": datetime.fromtimestamp(rec["first_failed_ms"] / 1000, tz=UTC),
                    "idempotency_key": idempotency_key(rec),
                })

            def failure(exc: Exception) -> tuple[str, str]:
                if isinstance(exc, TargetUnavailable):
                    down = DESTINATION_DOWN if exc.address_only else TARGET_DOWN
                    return down, f"python:{module}:{function}: {exc}"
                return error_class_name(exc), str(exc)  # any other failure of user code is the message's

            yield from deliver_each(batches, deliver, failure, lambda rec: rec["address"])

        cols = due.select("message_id", "address", "payload", "headers", "delivery", "first_failed_ms", "resets")
        return cols.mapInPandas(call, OUTCOME_SCHEMA)
