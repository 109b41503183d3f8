"""A re-drive target for concurrency tests: it holds the cycle inside its re-drive until the test opens a gate.

``python:gated_target:gated`` (with ``tests/`` on ``PYTHONPATH``) appends the id of its Spark stage to
``$REPROCESS_TEST_GATE.entered`` on each call (a later job's stages have larger ids), then waits until the file
``$REPROCESS_TEST_GATE`` exists (two minutes at most), accepts the message and appends its id to
``$REPROCESS_TEST_GATE.calls``. The test thereby knows, without guessing at timings, that the cycle holds the
warehouse lock, and which messages were delivered how often.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def gated(message: dict[str, Any]) -> None:
    gate = Path(os.environ["REPROCESS_TEST_GATE"])
    from pyspark import TaskContext

    task = TaskContext.get()
    with open(str(gate) + ".entered", "a", encoding="utf-8") as entered:
        entered.write(f"{task.stageId() if task is not None else -1}\n")
    deadline = time.monotonic() + 120
    while not gate.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never opened {gate}")
        time.sleep(0.05)
    with open(str(gate) + ".calls", "a", encoding="utf-8") as calls:  # one short append per message
        calls.write(f"{message['message_id']}\n")
