"""The spark-submit environment of this venv (light: imported by DAG files at parse time)."""

from __future__ import annotations

from pathlib import Path


def spark_submit_env(python: str, path: str) -> dict[str, str]:
    """Environment for ``spark-submit`` from this venv: workers and driver run ``python`` (STACK.md trap 4)."""
    bin_dir = Path(python).parent
    return {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
            "SPARK_HOME": str(Path(python).parents[1] / "lib" / "python3.11" / "site-packages" / "pyspark"),
            "PATH": f"{bin_dir}:{path}"}
