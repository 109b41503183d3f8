"""Helpers for Airflow tests: an isolated AIRFLOW_HOME with the project's DAGs and plugin, SQLite by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def airflow_env(home: Path, landing: Path, warehouse: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "REPROCESS_LANDING": str(landing),
        "REPROCESS_WAREHOUSE": str(warehouse),
        "REPROCESS_TARGET": "python:reprocess.targets.examples:flaky",
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    })
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def migrate(env: dict[str, str]) -> None:
    proc = run([str(BIN / "airflow"), "db", "migrate"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def python(code: str, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-c", code], env, timeout)
