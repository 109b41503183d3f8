"""The DAGs' spark-submit task: Airflow's ``SparkSubmitOperator``, which says so when the driver ran out of heap.

Imported by the DAG files only: it needs Airflow and its Spark provider.
"""

from __future__ import annotations

import os
import re
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from reprocess.errors import FINAL_ERRORS
from reprocess.spark_env import out_of_memory_advice, spark_defaults
from reprocess.sparkutil import SPARK_OOM_EXIT_CODE, out_of_memory_exit

# the provider's message when spark-submit exits non-zero, and on Kubernetes the driver pod's own exit code
_EXIT_CODES = re.compile(r"(?:Error code is|Kubernetes spark exit code is): (-?\d+)")
# The job's exit codes that a retry of the task cannot change (reprocess.errors.FINAL_ERRORS)
FINAL_EXITS = {error.exit_code: says for error, says in FINAL_ERRORS.items()}


def fail_fast(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a DAG task: the errors no retry can change (FINAL_ERRORS: a core check's, or a Spark Connect
    job's exit) fail the task at once, as :class:`ReprocessSubmitOperator` does for spark-submit's exit codes."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        return fn(*args)
    except tuple(FINAL_ERRORS) as exc:
        raise AirflowFailException(str(exc)) from exc


class ReprocessSubmitOperator(SparkSubmitOperator):
    """``spark-submit`` of a reprocess job through the ``spark_default`` connection.

    A driver JVM whose task thread runs out of heap (local mode) exits at once with Spark's code 52, before the job's
    own Python can say why; the provider then fails the task with only "Error code is: 52". This operator fails it
    with what the driver had and what to raise instead (:func:`reprocess.spark_env.out_of_memory_advice`), the same
    advice ``reprocess run`` gives. The job's exit codes that no retry can change (:data:`FINAL_EXITS`: a bad option,
    a broken contract, books that do not balance, an as-of before the last committed one, a failed GX gate, a damaged
    warehouse) fail the task without its
    retries, as the Spark Connect path does. Every other outcome is the provider's. ``target`` (the deployment's,
    ``REPROCESS_TARGET``) is added to the job's arguments when it runs unless they carry the form's own.
    """

    def __init__(self, *, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target

    def execute(self, context: Any) -> Any:
        if self.target:  # after rendering: the deployment's target is neither in an XCom nor in the rendered fields
            from reprocess.orchestration import with_target

            self.application_args = with_target(self.application_args or [], self.target)
        try:
            return super().execute(context)
        except AirflowException as exc:
            codes = self.exit_codes(exc)
            final = sorted(codes & FINAL_EXITS.keys())
            if final:
                from airflow.sdk.exceptions import AirflowFailException

                raise AirflowFailException(f"the Spark job {FINAL_EXITS[final[0]]} (exit {final[0]}): a retry cannot "
                                           "change that; see its log above") from exc
            if SPARK_OOM_EXIT_CODE not in codes:
                raise
            connection = getattr(self._hook, "_connection", None) or {}
            raise AirflowException(out_of_memory_advice(out_of_memory_exit("spark-submit"), self.driver_heap(),
                                                        connection.get("master"))) from exc

    def exit_codes(self, exc: AirflowException) -> set[int]:
        """The job's exit code: spark-submit's, and on Kubernetes the driver pod's, as the provider's hook holds them.
        Not from the exception's text, which quotes the command line first: a run's conf is in it (the re-drive's
        ``--requested-by``), and "Error code is: 3" written there made any failure final. The text's own, after
        the command, only where the hook has none."""
        hook = getattr(self, "_hook", None)
        codes: set[int] = set()
        returncode = getattr(getattr(hook, "_submit_sp", None), "returncode", None)
        if isinstance(returncode, int):
            codes.add(returncode)
        pod = getattr(hook, "_spark_exit_code", None)
        if getattr(hook, "_is_kubernetes", False) and isinstance(pod, int):
            codes.add(pod)
        if codes:
            return codes
        first = str(exc).split("\n", 1)[0]
        return {int(code) for code in _EXIT_CODES.findall(first[first.rfind(". Error code is: "):])}

    def driver_heap(self) -> str:
        """The heap spark-submit gave the driver, by its precedence: ``--driver-memory``, ``--conf``, the
        deployment's ``spark-defaults.conf``, ``$SPARK_DRIVER_MEMORY``, else Spark's 1g."""
        env = {**os.environ, **(self.env_vars or {})}
        defaults = spark_defaults("spark.driver.memory")
        return (self._driver_memory or (self.conf or {}).get("spark.driver.memory")
                or (defaults[-1] if defaults else None) or env.get("SPARK_DRIVER_MEMORY") or "1g")
