"""The target interface and the spec parser."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql import types as T

from reprocess.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

OUTCOME_SCHEMA = T.StructType([
    T.StructField("message_id", T.StringType(), False),
    T.StructField("delivery", T.LongType(), False),
    T.StructField("ok", T.BooleanType(), False),
    T.StructField("error_class", T.StringType()),
    T.StructField("error_message", T.StringType()),
])


# error_class of the one outcome row a partition emits when its target is down (a broker failing, a ``python:`` target
# raising TargetUnavailable): no later message of that partition is tried
TARGET_DOWN = "reprocess.TargetUnavailable"
# error_class of the one row a partition adds at its end when some of its messages were not tried (after TARGET_DOWN,
# or for a destination down): ``delivery`` holds how many, so that the run counts every due message left without an
# outcome instead of inferring them (reprocess.cycle.run.conservation); ``message_id`` is empty
NOT_TRIED = "reprocess.NotTried"
# error_class of the outcome row of a message whose destination refuses every write while the target takes others
# (a queue the broker does not let the target's user write to): like TARGET_DOWN, the message consumes no delivery and
# stays due, and so do the partition's later messages for that destination, which are not tried; the partition goes
# on with the other destinations
DESTINATION_DOWN = "reprocess.DestinationUnavailable"
# destinations refusing writes one after another, with nothing delivered or failed between them: rather the target
# failing as a whole (a full store refuses every destination), and the partition stops as at TARGET_DOWN
DESTINATIONS_DOWN_IN_A_ROW = 16


def deliver_each(batches: Iterator[pd.DataFrame], deliver: Callable[[dict[str, Any]], None],
                 failure: Callable[[Exception], tuple[str, str] | None],
                 destination: Callable[[dict[str, Any]], str] | None = None) -> Iterator[pd.DataFrame]:
    """One partition's outcomes (OUTCOME_SCHEMA's columns), for the targets that deliver message by message in the
    executors (the brokers, ``python:``). ``deliver(rec)`` returning is a delivery; an exception it raises is given to
    ``failure``, which names it ``(error_class, message)``, or None to let it end the task. ``TARGET_DOWN`` stops the
    partition: its row is the last, and the messages after it get no row (no delivery used, they stay due).
    ``DESTINATION_DOWN`` (for targets that give ``destination(rec)``, where a message goes) stops only the messages
    for that destination: they get no row after its own, whose message is ``<destination>\n<error>``;
    DESTINATIONS_DOWN_IN_A_ROW of them in a row stop the partition, the last one's row becoming TARGET_DOWN. The
    messages not tried are counted in one ``NOT_TRIED`` row at the partition's end."""
    import pandas as pd

    down = False
    refusing: set[str] = set()  # destinations down
    in_a_row = 0
    not_tried = 0
    for batch in batches:
        if down:
            not_tried += len(batch)
            continue
        rows: list[tuple[Any, ...]] = []
        for rec in batch.to_dict("records"):
            if down:
                not_tried += 1
                continue
            where = None if destination is None else destination(rec)
            if where in refusing:
                not_tried += 1
                continue
            delivery = int(rec["delivery"])
            try:
                deliver(rec)
                rows.append((rec["message_id"], delivery, True, None, None))
                in_a_row = 0
            except Exception as exc:
                named = failure(exc)
                if named is None:
                    raise
                error_class, message = named
                if error_class == DESTINATION_DOWN and where is not None:
                    refusing.add(where)
                    in_a_row += 1
                    if in_a_row >= DESTINATIONS_DOWN_IN_A_ROW:
                        error_class = TARGET_DOWN
                        message = f"{in_a_row} destinations in a row refused every write, the last {where}: {message}"
                    else:  # the first line names the destination (a newline in it, from a template, escaped)
                        first_line = where.replace("\n", "\\n")
                        message = f"{first_line}\n{message}"
                elif error_class == DESTINATION_DOWN:
                    error_class = TARGET_DOWN
                else:
                    in_a_row = 0
                down = error_class == TARGET_DOWN
                rows.append((rec["message_id"], delivery, False, error_class, message[:2000]))
        yield pd.DataFrame(rows, columns=OUTCOME_SCHEMA.fieldNames())
    if not_tried:
        yield pd.DataFrame([("", not_tried, False, NOT_TRIED, None)], columns=OUTCOME_SCHEMA.fieldNames())


class TargetUnavailable(Exception):  # noqa: N818 - the name users raise
    """Raised by a ``python:`` target's function when the system it delivers to is down (not this message's fault):
    the message consumes no delivery and stays due, the rest of its partition is not called, and the run ends as
    when a broker is down (``TargetUnavailableError``, exit 6, its retry re-drives what was left).

    With ``address_only=True`` only what serves this message's address is down (an endpoint per address): as with
    a broker's destination that refuses writes, the partition's later messages for that address are not called and
    stay due too, and its other addresses go on."""

    address_only = False  # also for a subclass whose __init__ does not call this one

    def __init__(self, *args: object, address_only: bool = False) -> None:
        super().__init__(*args)
        self.address_only = address_only


@dataclass(frozen=True)
class RunContext:
    """What a target may need of the run: its id, as-of, where it stages outputs and where the outbox goes."""

    run_id: str
    as_of_ms: int
    stage_dir: str  # a path or a URI: join with stage(), not pathlib (which folds s3a://bucket into s3a:/bucket)
    codegen: str = "interpreted"  # the cycle's code generation mode: see reprocess.sparkutil.with_as_of
    outbox_dir: str = ""  # where the outbox target writes (the warehouse's staged outbox); default stage("outbox")

    def stage(self, *parts: str) -> str:
        """``stage_dir`` joined with ``parts`` by ``/``, a URI's ``//`` kept."""
        return "/".join((self.stage_dir.rstrip("/"), *parts))


class Target(Protocol):
    spec: str

    def redrive(self, due: DataFrame, run: RunContext) -> DataFrame:
        """Deliver each due message once; return one outcome row per message (OUTCOME_SCHEMA)."""
        ...


def idempotency_key(rec: dict[str, Any]) -> str:
    """``<message_id>:<delivery>`` for a due row (``message_id``, ``delivery``, ``resets``); after an operator's
    re-drive reset the count, ``<message_id>:r<resets>.<delivery>``: the numbers start again at 1, and the keys of
    the deliveries made before the reset, which a consumer may remember, must not come back. What follows the last
    ``:`` never holds one, so no two messages share a key, whatever their ids hold (``order-7:r1`` at its 2nd
    delivery and ``order-7`` at its 2nd after one reset both gave ``order-7:r1:2`` in the form before; ADR 0001)."""
    try:
        resets = int(rec.get("resets"))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # null: None, or NaN from a pandas column with nulls
        resets = 0
    if resets:
        return f"{rec['message_id']}:r{resets}.{int(rec['delivery'])}"
    return f"{rec['message_id']}:{int(rec['delivery'])}"


def idempotency_key_column() -> Column:
    """:func:`idempotency_key` as a column of a due frame (``message_id``, ``delivery``, ``resets``), for the targets
    that write in Spark (the outbox)."""
    from pyspark.sql import functions as F

    delivery = F.col("delivery").cast("long").cast("string")
    reset = F.when(F.coalesce(F.col("resets"), F.lit(0)) != 0,
                   F.concat(F.lit("r"), F.col("resets").cast("long").cast("string"), F.lit("."))).otherwise(F.lit(""))
    return F.concat(F.col("message_id"), F.lit(":"), reset, delivery).alias("idempotency_key")


def expand_target(spec: str, check: bool = True) -> str:
    """``${VAR}`` in a target spec from the environment (secrets stay out of policy files); with ``check``,
    a variable that is not set is a ConfigError."""
    import os
    import re

    missing = [v for v in re.findall(r"\$\{(\w+)\}", spec) if v not in os.environ]
    if missing and check:
        raise ConfigError(f"target needs environment variable(s) {missing}", key="target")
    return re.sub(r"\$\{(\w+)\}", lambda m: os.environ.get(m.group(1), "x"), spec)


def parse_target(spec: str) -> Target:
    """``outbox``, ``python:module:function``, ``amqp://...`` (RabbitMQ) or ``stomp://...`` (ActiveMQ)."""
    if spec == "outbox":
        from reprocess.targets.outbox import OutboxTarget

        return OutboxTarget()
    if spec.startswith("python:"):
        from reprocess.targets.python_call import PythonTarget

        parts = spec.split(":")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise ConfigError(f"a python target is 'python:module:function', got {spec!r}", key="--target")
        return PythonTarget(spec, parts[1], parts[2])
    if spec.startswith("amqp://"):
        from reprocess.targets.amqp import AmqpTarget

        return AmqpTarget(spec)
    if spec.startswith("stomp://"):
        from reprocess.targets.stomp import StompTarget

        return StompTarget(spec)
    from reprocess.targets.broker import redact

    raise ConfigError(f"unknown target {redact(spec)!r}; use 'outbox', 'python:module:function', 'amqp://...' or "
                      "'stomp://...'", key="--target")
