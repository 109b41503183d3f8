"""The core package never imports Airflow (or starts Spark on import)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_core_package_never_imports_airflow():
    mods = _modules_after("import reprocess, reprocess.cli, reprocess.policy, reprocess.policy.columns")
    assert "reprocess.policy.columns" in mods
    assert not any(m == "airflow" or m.startswith("airflow.") for m in mods)


def test_schedule_preview_does_not_load_pyspark():
    mods = _modules_after(
        "from reprocess.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['schedule', '--address', 'orders.created'])"
    )
    assert "reprocess.cli" in mods
    assert "pyspark" not in mods


def test_parsing_the_cycle_dag_loads_no_pyspark():
    """The DAG file masks the deployment's target as it is parsed (spark_env.mask_target_password), and the
    dag-processor parses it again and again: the masking's spec reading is pyspark-free (reprocess.redaction)."""
    mods = _modules_after(
        "import os, runpy\n"
        "os.environ['REPROCESS_TARGET'] = 'amqp://svc:Xk9/q#Tz@rabbit/'\n"
        "runpy.run_path('dags/reprocess_failed_messages.py')")
    assert "reprocess.redaction" in mods
    assert "pyspark" not in mods
