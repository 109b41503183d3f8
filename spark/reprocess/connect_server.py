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
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


def server_command(port: int = DEFAULT_PORT, host: str = "127.0.0.1", master: str = "local[*]",
                   driver_memory: str | None = None, conf: Sequence[str] = (),
                   python: str = sys.executable) -> list[str]:
    """The ``spark-submit`` command line of the server (``conf``: extra ``key=value`` settings, which win)."""
    from reprocess.spark_env import spark_submit_conf
    from reprocess.sparkutil import APP_CONF, SESSION_CONF, shuffle_partitions_default

    settings = {**SESSION_CONF, **APP_CONF, "spark.sql.shuffle.partitions": str(shuffle_partitions_default()),
                **spark_submit_conf(python), **store_plugin_conf(),
                "spark.connect.grpc.binding.address": host, "spark.connect.grpc.binding.port": str(port),
                # a killed client's operations stop within a minute instead of five (see reprocess.cycle.run)
                "spark.connect.execute.manager.detachedTimeout": "60s"}
    if driver_memory:  # else spark_submit_conf's heap: $REPROCESS_DRIVER_MEMORY, the deployment's, or 2g
        settings["spark.driver.memory"] = driver_memory
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            from reprocess.errors import ConfigError

            raise ConfigError(f"expected KEY=VALUE, got {item!r}", key="--conf")
        settings[key] = value
    cmd = [_spark_submit(python), "--class", SERVER_CLASS, "--name", "reprocess-connect-server", "--master", master]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "spark-internal"]


def store_plugin_conf() -> dict[str, str]:
    """The setting that loads the store plugin (``reprocess.connect.StorePlugin``, in the jar ``make venv`` builds,
    on the driver's class path through :func:`reprocess.spark_env.local_fs_conf`): it makes the Hadoop calls of a
    client's warehouse at a URI (:mod:`reprocess.storage.hadoop_fs`). None without that jar, or with one built
    before the plugin: the server then refuses such warehouses by name, and serves every other client."""
    import zipfile

    from reprocess.spark_env import local_fs_jar
    from reprocess.storage.hadoop_fs import PLUGIN_CLASS, PLUGIN_CONF

    jar = local_fs_jar()
    if jar is None:
        return {}
    try:
        with zipfile.ZipFile(jar) as archive:
            present = PLUGIN_CLASS.replace(".", "/") + ".class" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return {}
    return {PLUGIN_CONF: PLUGIN_CLASS} if present else {}


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


STARTED = b"Spark Connect server started"  # the server's log line once it accepts clients


def free_port() -> int:
    """A loopback port free at the moment of asking."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(port: int, log: Path, args: Sequence[str] = (), env: dict[str, str] | None = None,
                   start_timeout: float = 120.0) -> Iterator[subprocess.Popen[bytes]]:
    """``reprocess connect-server --port PORT ARGS`` in a process group of its own, its output in ``log``, from
    the moment it accepts clients until the block ends (then stopped: SIGTERM, and SIGKILL to the group if it is
    not gone within a minute). For benchmarks and tests; raises ``RuntimeError`` if it does not start."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "reprocess.cli", "connect-server", "--port", str(port),
                                 *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while STARTED not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Connect server did not start (log {log}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
