"""Helpers for Airflow tests: an isolated AIRFLOW_HOME with the project's DAGs and plugin, SQLite by default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def airflow_env(home: Path, landing: Path, warehouse: Path, **extra: str) -> dict[str, str]:
    """The environment ``make airflow`` uses, with the deterministic flaky target and local[2]."""
    sys.path.insert(0, str(ROOT / "dev"))
    import airflow_local

    env = airflow_local.environment(home, landing, warehouse, target="python:reprocess.targets.examples:flaky",
                                    spark_master="local[2]", password="admin")
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def migrate(env: dict[str, str]) -> None:
    proc = run([str(BIN / "airflow"), "db", "migrate"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def python(code: str, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-c", code], env, timeout)
