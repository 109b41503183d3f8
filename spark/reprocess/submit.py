"""The DAGs' spark-submit task: Airflow's ``SparkSubmitOperator``, which says so when the driver ran out of heap.

Imported by the DAG files only: it needs Airflow and its Spark provider.
"""

from __future__ import annotations

import os
import re
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from reprocess.spark_env import out_of_memory_advice, spark_defaults
from reprocess.sparkutil import SPARK_OOM_EXIT_CODE, out_of_memory_exit

# the provider's message when spark-submit exits non-zero, and on Kubernetes the driver pod's own exit code
_EXIT_CODES = re.compile(r"(?:Error code is|Kubernetes spark exit code is): (-?\d+)")


class ReprocessSubmitOperator(SparkSubmitOperator):
    """``spark-submit`` of a reprocess job through the ``spark_default`` connection.

    A driver JVM whose task thread runs out of heap (local mode) exits at once with Spark's code 52, before the job's
    own Python can say why; the provider then fails the task with only "Error code is: 52". This operator fails it
    with what the driver had and what to raise instead (:func:`reprocess.spark_env.out_of_memory_advice`), the same
    advice ``reprocess run`` gives. Every other outcome is the provider's.
    """

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except AirflowException as exc:
            if SPARK_OOM_EXIT_CODE not in {int(code) for code in _EXIT_CODES.findall(str(exc))}:
                raise
            connection = getattr(self._hook, "_connection", None) or {}
            raise AirflowException(out_of_memory_advice(out_of_memory_exit("spark-submit"), self.driver_heap(),
                                                        connection.get("master"))) from exc

    def driver_heap(self) -> str:
        """The heap spark-submit gave the driver, by its precedence: ``--driver-memory``, ``--conf``, the
        deployment's ``spark-defaults.conf``, ``$SPARK_DRIVER_MEMORY``, else Spark's 1g."""
        env = {**os.environ, **(self.env_vars or {})}
        defaults = spark_defaults("spark.driver.memory")
        return (self._driver_memory or (self.conf or {}).get("spark.driver.memory")
                or (defaults[-1] if defaults else None) or env.get("SPARK_DRIVER_MEMORY") or "1g")
