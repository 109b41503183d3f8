"""Run Airflow locally with the project's DAGs and plugin: ``make airflow`` and the scheduler tests.

    python dev/airflow_local.py [--home .airflow] [--port 8080] [--db URL] [--landing DIR] [--warehouse DIR]

Prepares an AIRFLOW_HOME (LocalExecutor, SQLite unless --db, the ``spark_default`` connection on
``local[*]``, a login from ``--user``/``--password``), migrates the metadata DB, then runs Airflow's four
components (api-server, scheduler, dag-processor, triggerer) in the foreground until Ctrl-C or SIGTERM, which stops
them all. They are started as the tests start them (:func:`start`), not by ``airflow standalone``, which would replace
an auth manager the environment sets (``AIRFLOW__CORE__AUTH_MANAGER``) with SimpleAuthManager. Other
``AIRFLOW__SECTION__KEY`` variables of the caller's are passed on (and named) where the options set nothing, the
database's aside (``--db``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def environment(home: Path, landing: Path | str, warehouse: Path | str, port: int = 8080, db: str | None = None,
                user: str = "admin", password: str | None = None, target: str = "outbox",
                spark_master: str = "local[*]", base_path: str = "") -> dict[str, str]:
    """The environment of an Airflow made for this project (also writes the password file, owner-only), served at
    ``http://localhost:<port><base_path>`` (``base_path`` such as ``/airflow``: as behind a proxy that serves
    Airflow under a path).

    No password is built in: without one a random password is generated (``REPROCESS_AIRFLOW_PASSWORD`` in the
    returned environment holds it).
    """
    home.mkdir(parents=True, exist_ok=True)
    password = password or secrets.token_urlsafe(12)
    passwords = home / "passwords.json"
    fd = os.open(passwords, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({user: password}, fh)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{user}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{port}{base_path}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}{base_path}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
        "REPROCESS_LANDING": str(landing),
        "REPROCESS_WAREHOUSE": str(warehouse),
        "REPROCESS_TARGET": target,
        "REPROCESS_AIRFLOW_API": f"http://localhost:{port}{base_path}",
        "REPROCESS_AIRFLOW_USER": user,
        "REPROCESS_AIRFLOW_PASSWORD": password,
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    })
    if db:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db
    return env


def migrate(env: dict[str, str]) -> None:
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True)


COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")


def start(env: dict[str, str], log_path: Path | None) -> subprocess.Popen[bytes]:
    """Airflow's four components (scheduler, dag-processor, triggerer, api-server) in the background, in one process
    group, logging to ``log_path`` (None: to this process's output): what ``airflow standalone`` starts, but with the
    environment's own auth manager (standalone replaces any with SimpleAuthManager, so a deployment's permissions
    could not be tried). :func:`stop` stops them."""
    port = int(env["AIRFLOW__API__PORT"])
    with socket.socket() as probe:  # an Airflow left from a killed run: the tests would talk to it, not to this one
        probe.settimeout(0.5)
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise RuntimeError(f"port {port} is taken (an Airflow left from an earlier run?): stop what listens there")
    fh = None if log_path is None else open(log_path, "wb")  # noqa: SIM115 - the file lives as long as the process
    airflow = shlex.quote(str(BIN / "airflow"))
    script = " ".join(f"{airflow} {c} &" for c in COMPONENTS) + " wait"
    return subprocess.Popen(["sh", "-c", script], env=env, stdout=fh, stderr=subprocess.STDOUT if fh else None,
                            start_new_session=True)


def _session_running(sid: int) -> list[int] | None:
    """The processes of session ``sid`` still running, zombies aside (an init that reaps no orphans leaves them): the
    components, and the task processes Airflow's supervisors put in process groups of their own. None without /proc."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return None
    found = []
    for stat in proc_dir.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            state, _ppid, _pgrp, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
            if int(session) == sid and state != "Z":
                found.append(int(stat.parent.name))
    return found


def stop(proc: subprocess.Popen[bytes], grace: float = 30) -> None:
    """Stop what :func:`start` started: SIGTERM to its process group, so that each component shuts down as it does on
    its own (the scheduler's task supervisors pass it on to their tasks), then SIGKILL to whatever of its session
    still runs after ``grace`` seconds, task processes in groups of their own included (the shell that waited for the
    components dies at once, so its exit says nothing). Without /proc, the group alone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        left = _session_running(proc.pid)
        if left == [] or (left is None and proc.poll() is not None):  # no /proc: the shell's exit is all there is
            break
        time.sleep(0.2)
    for pid in _session_running(proc.pid) or []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # a process SIGKILLed a moment ago may still be exiting: stopped means gone, for the caller that starts again
    deadline = time.monotonic() + 10
    while _session_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_healthy(port: int, timeout: float = 240, base_path: str = "",
                 proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until the scheduler at ``port`` reports healthy; with ``proc`` (:func:`start`'s), stop waiting once its
    components have all exited."""
    deadline = time.monotonic() + timeout
    url = f"http://localhost:{port}{base_path}/api/v2/monitor/health"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"Airflow's components exited (status {proc.returncode}) before it was healthy")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                doc = json.loads(resp.read())
            if doc.get("scheduler", {}).get("status") == "healthy":
                return
        except OSError:
            pass
        time.sleep(2)
    raise TimeoutError(f"Airflow on port {port} was not healthy after {timeout}s")


def location(value: str) -> str:
    """A landing or warehouse as the DAGs take it: a URI (``s3a://bucket/wh``) as given, a local path absolute."""
    from reprocess.uris import local_path, remote_scheme

    return value if remote_scheme(value) else str(local_path(value).resolve())


def options_parser() -> argparse.ArgumentParser:
    """``make airflow``'s options; the landing, warehouse, target and password default to the caller's ``REPROCESS_*``
    variables, which the started Airflow's environment would otherwise override."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=str(ROOT / ".airflow"), help="AIRFLOW_HOME (default .airflow)")
    parser.add_argument("--port", type=int, default=8080, help="api-server port (default 8080)")
    parser.add_argument("--base-path", default="", metavar="PATH",
                        help="serve Airflow under this path, e.g. /airflow (default: the host's root)")
    parser.add_argument("--db", help="SQLAlchemy URL of the metadata DB (default SQLite in the home)")
    parser.add_argument("--landing", default=os.environ.get("REPROCESS_LANDING", str(ROOT / "demo-out" / "landing")),
                        help="the DAGs' landing root (default: $REPROCESS_LANDING, else demo-out/landing)")
    parser.add_argument("--warehouse",
                        default=os.environ.get("REPROCESS_WAREHOUSE", str(ROOT / "demo-out" / "warehouse")),
                        help="the DAGs' warehouse (default: $REPROCESS_WAREHOUSE, else demo-out/warehouse)")
    parser.add_argument("--target", default=os.environ.get("REPROCESS_TARGET", "outbox"),
                        help="the cycles' re-drive target (default: $REPROCESS_TARGET, else outbox)")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default=os.environ.get("REPROCESS_AIRFLOW_PASSWORD"),
                        help="the login's password (default: $REPROCESS_AIRFLOW_PASSWORD, else a random one, printed)")
    return parser


def main() -> int:
    args = options_parser().parse_args()
    path = args.base_path.strip("/")
    base_path = f"/{path}" if path else ""
    env = environment(Path(args.home), location(args.landing), location(args.warehouse), args.port, args.db,
                      args.user, args.password, target=args.target, base_path=base_path)
    # the caller's own Airflow settings (an auth manager, say), where the options set nothing; not a database: that is
    # --db's, and a shell's exported connection would migrate and schedule against another Airflow's database
    passed = {k: v for k, v in os.environ.items()
              if k.startswith("AIRFLOW__") and k not in env and not k.startswith("AIRFLOW__DATABASE__")}
    env.update(passed)
    if passed:
        print(f"passing on the caller's Airflow settings: {', '.join(sorted(passed))}", flush=True)
    migrate(env)
    # SIGTERM (a supervisor, `kill`) stops the components as Ctrl-C does: they run in a session of their own, which
    # neither signal reaches
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    proc = None
    try:
        proc = start(env, None)
        wait_healthy(args.port, base_path=base_path, proc=proc)
        print(f"Airflow UI: {env['AIRFLOW__API__BASE_URL']}/  login: {args.user} / "
              f"{env['REPROCESS_AIRFLOW_PASSWORD']}")
        print("DAGs: reprocess_failed_messages (scheduled, paused until you unpause it), redrive_dead_letters; "
              "Browse > Dead letters for the DLQ page. Ctrl-C stops everything.", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        if proc is not None:
            # a second Ctrl-C or SIGTERM (`timeout` and a shell both passing one on) must not cut the stop short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("stopping Airflow's components (at most 30 s)", flush=True)
            stop(proc)


if __name__ == "__main__":
    sys.exit(main())
