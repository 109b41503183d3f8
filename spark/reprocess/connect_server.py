"""``reprocess connect-server``: one long-lived Spark driver that serves every cycle over Spark Connect.

Each DAG run started with ``spark-submit`` is a fresh driver JVM: it loads its classes, compiles the code Spark
generates and warms the JIT up again, every cycle (about 20 s of a small scheduled cycle, about a third of a
1M-message one: bench/RESULTS.md). A Spark Connect server is a driver that stays up: cycles run as its clients
(``reprocess run --remote sc://localhost:15002``, or the DAG with ``REPROCESS_SPARK=connect``), each in a session of
its own, and find its JIT warm.

The server is Spark's own (``org.apache.spark.sql.connect.service.SparkConnectServer``, in the pyspark wheel),
started through this venv's ``spark-submit`` with the application settings every cycle needs
(:data:`reprocess.sparkutil.APP_CONF`), the session defaults (:data:`~reprocess.sparkutil.SESSION_CONF`), this
venv's Python for the re-drive targets' Python workers, and the driver's class-data archive. It listens on
loopback unless told otherwise; with ``$SPARK_CONNECT_AUTHENTICATE_TOKEN`` set it refuses clients without that
token (clients read the same variable; over loopback connect to ``sc://localhost``, where the token needs no TLS).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


def server_command(port: int = DEFAULT_PORT, host: str = "127.0.0.1", master: str = "local[*]",
                   driver_memory: str | None = None, conf: Sequence[str] = (),
                   python: str = sys.executable) -> list[str]:
    """The ``spark-submit`` command line of the server (``conf``: extra ``key=value`` settings, which win)."""
    from reprocess.spark_env import driver_java_options
    from reprocess.sparkutil import APP_CONF, SESSION_CONF, shuffle_partitions_default

    settings = {**SESSION_CONF, **APP_CONF, "spark.sql.shuffle.partitions": str(shuffle_partitions_default()),
                "spark.pyspark.python": python, "spark.pyspark.driver.python": python,
                "spark.driver.defaultJavaOptions": driver_java_options(),
                "spark.connect.grpc.binding.address": host, "spark.connect.grpc.binding.port": str(port),
                # a killed client's operations stop within a minute instead of five (see reprocess.cycle.run)
                "spark.connect.execute.manager.detachedTimeout": "60s"}
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            from reprocess.errors import ConfigError

            raise ConfigError(f"expected KEY=VALUE, got {item!r}", key="--conf")
        settings[key] = value
    cmd = [_spark_submit(python), "--class", SERVER_CLASS, "--name", "reprocess-connect-server",
           "--master", master, "--driver-memory", driver_memory or os.environ.get("REPROCESS_DRIVER_MEMORY", "2g")]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "spark-internal"]


def _spark_submit(python: str) -> str:
    """The pyspark wheel's ``spark-submit`` beside ``python`` (a venv), else the one on PATH (a ``pip --user``
    install puts it in ``~/.local/bin``)."""
    beside = Path(python).parent / "spark-submit"
    return str(beside) if beside.exists() else shutil.which("spark-submit") or str(beside)


def serve(port: int = DEFAULT_PORT, host: str = "127.0.0.1", master: str = "local[*]",
          driver_memory: str | None = None, conf: Sequence[str] = ()) -> None:
    """Replace this process with the server (it runs until stopped; SIGTERM stops it cleanly)."""
    from reprocess.spark_env import spark_submit_env

    cmd = server_command(port, host, master, driver_memory, conf)
    env = {**os.environ, **spark_submit_env(sys.executable, os.environ.get("PATH", "/usr/bin:/bin"))}
    os.execve(cmd[0], cmd, env)
