"""Whole ``reprocess run`` processes for the benches: this checkout's code, a given driver heap."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SPARK = Path(__file__).resolve().parents[1] / "spark"


def reprocess_run(landing: Path, wh: Path, memory: str, as_of: str) -> tuple[float, dict[str, Any] | str]:
    """Run one cycle of ``landing`` into ``wh`` (removed afterwards) as of ``as_of`` in a driver of ``memory`` heap,
    with this checkout's code on ``PYTHONPATH`` (the bench of another worktree, run with this venv's Python,
    measures that worktree's code). Returns the wall time and the summary, or for a failed run its exit code and
    the CLI's own last word (``reprocess: out_of_memory: ...``), else stderr's last line."""
    elapsed, done = reprocess_process(landing, wh, memory, as_of)
    return elapsed, outcome(done)


def reprocess_process(landing: Path, wh: Path, memory: str,
                      as_of: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """:func:`reprocess_run`'s process, finished, with its output (its step log is on stderr)."""
    path = os.pathsep.join(p for p in (str(SPARK), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "REPROCESS_DRIVER_MEMORY": memory, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "reprocess.cli", "run", "--landing", str(landing), "--warehouse", str(wh),
           "--as-of", as_of, "--format", "json"]
    t = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - t
    shutil.rmtree(wh, ignore_errors=True)
    return elapsed, done


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any] | str:
    """A finished run's summary, or its exit code and the CLI's own last word (else stderr's last line)."""
    if done.returncode:
        said = [line for line in done.stderr.splitlines() if line.startswith("reprocess: ")] \
            or done.stderr.strip().splitlines()[-1:]
        return f"exit {done.returncode}: {said[-1][:300] if said else ''}"
    return json.loads(done.stdout)
