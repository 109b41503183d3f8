"""Shared fixtures: one local SparkSession for the whole run (local[2], few partitions, no UI)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from py4j_guard import drop_interrupted_call

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "spark"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
DURATIONS = ROOT / "tests" / "durations.json"
# C2 at four times its default thresholds, for the long-lived session JVM of each test worker (the spark fixture)
SESSION_JIT = ("-XX:Tier4InvocationThreshold=20000", "-XX:Tier4MinInvocationThreshold=2400",
               "-XX:Tier4CompileThreshold=60000", "-XX:Tier4BackEdgeThreshold=160000")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The test files longest first, each file's tests in their order. `make test` hands whole files to the xdist
    workers in this order (``--dist loadfile --no-loadscope-reorder``), so that a long file never starts last and
    runs alone while the other workers idle. The seconds come from tests/durations.json (dev/test_durations.py
    writes it from a run's report); a file it does not list counts as the median. Only the order depends on it."""
    try:
        seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    typical = sorted(seconds.values())[len(seconds) // 2] if seconds else 0.0
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], typical))


def _phase() -> Iterator[None]:
    """A test phase, then tests/py4j_guard.py: a call to the JVM that pytest-timeout cut off is not left to answer
    the worker's next call."""
    timed_out = False
    try:
        return (yield)
    except pytest.fail.Exception as failed:
        timed_out = "from pytest-timeout" in str(failed)
        raise
    finally:
        drop_interrupted_call(timed_out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    return (yield from _phase())


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from reprocess.sparkutil import build_session

    # `make test` has the JVMs that tests start compile with C1 only (JAVA_TOOL_OPTIONS): they live for seconds. This
    # one runs every in-process cycle of the worker for its whole session, where C2 pays (the simulation test, with
    # generated code, took 131 s with C1 only against 84 s), but not at its default thresholds: a session never stops
    # warming up on Spark's code (two passes of three small cycles, after two passes of warm-up, made 5,253 C2
    # compiles taking 30 s of CPU in 34 s of wall), and the two sessions were 39% of the suite's CPU. C2 at four times
    # its thresholds compiles only what stays hot: test_cycle_steps.py alone, the session JVM's CPU 188 -> 162 s
    # (148 s on a second run: about 8% noise; C1 only 172 s) and the file's wall 180 -> 168 s; test_cycle_e2e.py
    # 146 -> 122 s (C1 only 143 s), 126 -> 112 s (bench/RESULTS.md, thirty-seventh run).
    kept = [o for o in os.environ.get("JAVA_TOOL_OPTIONS", "").split() if not o.startswith("-XX:TieredStopAtLevel=")]
    with pytest.MonkeyPatch.context() as env:  # only this JVM's start: the variable is restored (or unset) after
        env.setenv("JAVA_TOOL_OPTIONS", " ".join([*kept, *SESSION_JIT]))
        session = build_session("reprocess-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cfile(spark) -> Iterator[None]:
    """Registers the ``cfile:`` scheme in the shared session's Hadoop configuration (read by the driver and by the
    tasks): ``cfile:///x`` is the local ``/x`` reached like ``s3a://`` (tests/test_object_store.py)."""
    from warehouse_state import CFILE

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.cfile.impl", CFILE)
    yield
    conf.unset("fs.cfile.impl")
