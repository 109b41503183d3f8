"""The target interface and the spec parser."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import types as T

from reprocess.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OUTCOME_SCHEMA = T.StructType([
    T.StructField("message_id", T.StringType(), False),
    T.StructField("delivery", T.LongType(), False),
    T.StructField("ok", T.BooleanType(), False),
    T.StructField("error_class", T.StringType()),
    T.StructField("error_message", T.StringType()),
])


@dataclass(frozen=True)
class RunContext:
    """What a target may need of the run: its id, as-of and where it stages outputs."""

    run_id: str
    as_of_ms: int
    stage_dir: str


class Target(Protocol):
    spec: str

    def redrive(self, due: DataFrame, run: RunContext) -> DataFrame:
        """Deliver each due message once; return one outcome row per message (OUTCOME_SCHEMA)."""
        ...


def parse_target(spec: str) -> Target:
    """``python:module:function`` or ``outbox``."""
    if spec == "outbox":
        from reprocess.targets.outbox import OutboxTarget

        return OutboxTarget()
    if spec.startswith("python:"):
        from reprocess.targets.python_call import PythonTarget

        parts = spec.split(":")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise ConfigError(f"a python target is 'python:module:function', got {spec!r}", key="--target")
        return PythonTarget(spec, parts[1], parts[2])
    raise ConfigError(f"unknown target {spec!r}; use 'outbox' or 'python:module:function'", key="--target")
