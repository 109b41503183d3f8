"""The DAGs' spark-submit task: Airflow's ``SparkSubmitOperator``, which says so when the driver ran out of heap.

Imported by the DAG files only: it needs Airflow and its Spark provider.
"""

from __future__ import annotations

import re
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from reprocess.errors import out_of_memory_advice
from reprocess.sparkutil import SPARK_OOM_EXIT_CODE

_EXIT_CODE = re.compile(r"Error code is: (\d+)\.")  # the provider's message when spark-submit exits non-zero


class ReprocessSubmitOperator(SparkSubmitOperator):
    """``spark-submit`` of a reprocess job through the ``spark_default`` connection.

    A driver JVM whose task thread runs out of heap (local mode) exits at once with Spark's code 52, before the job's
    own Python can say why; the provider then fails the task with only "Error code is: 52". This operator fails it
    with what the driver had and what to raise instead (:func:`reprocess.errors.out_of_memory_advice`), the same
    advice ``reprocess run`` gives. Every other outcome is the provider's.
    """

    def execute(self, context: Any) -> None:
        try:
            super().execute(context)
        except AirflowException as exc:
            code = _EXIT_CODE.search(str(exc))
            if code is None or int(code.group(1)) != SPARK_OOM_EXIT_CODE:
                raise
            heap = (self.conf or {}).get("spark.driver.memory", "1g")
            connection = getattr(self._hook, "_connection", None) or {}
            evidence = f"spark-submit exited with code {SPARK_OOM_EXIT_CODE}, Spark's exit code for " \
                       "java.lang.OutOfMemoryError"
            raise AirflowException(out_of_memory_advice(evidence, heap, connection.get("master"))) from exc
