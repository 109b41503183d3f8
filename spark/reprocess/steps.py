"""The step log of a Spark job: each step's name and duration, as it ends (progress on long runs)."""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

log = logging.getLogger(__name__)


class StepLog:
    """Logs ``<prefix>step=<name> <key>=<value> seconds=<s> <fact>=<v> ...`` to ``logger`` as each step ends, and keeps
    each step's seconds in :attr:`timings`. ``steps`` are the names a job may log: tests aim at them (a cycle's
    fault-injection test kills it after each), so an unknown name is a bug."""

    def __init__(self, logger: logging.Logger, steps: tuple[str, ...], key: str, value: str, prefix: str = "") -> None:
        self.logger = logger
        self.steps = steps
        self.value = value
        self.format = f"{prefix}step=%s {key}=%s seconds=%.2f %s"
        self.t = time.monotonic()
        self.timings: dict[str, float] = {}

    def done(self, step: str, **facts: Any) -> None:
        if step not in self.steps:
            raise ValueError(f"unknown step {step!r}: add it to {self.steps}")
        now = time.monotonic()
        self.timings[step] = round(now - self.t, 3)
        self.t = now
        extra = " ".join(f"{k}={v}" for k, v in facts.items())
        self.logger.info(self.format, step, self.value, self.timings[step], extra)


def crash_point(name: str) -> None:
    """Fault injection for tests: ``REPROCESS_CRASH_AT=<name>`` kills this process with SIGKILL here (a cycle's
    points are ``reprocess.cycle.run.CRASH_POINTS``, a re-drive's ``reprocess.redrive.CRASH_POINTS``)."""
    if os.environ.get("REPROCESS_CRASH_AT") == name:
        log.warning("fault injection: SIGKILL at %s", name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
