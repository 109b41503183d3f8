"""Shared fixtures: one local SparkSession for the whole run (local[2], few partitions, no UI)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "spark"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from reprocess.sparkutil import build_session

    session = build_session("reprocess-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()
