"""A real Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor) on this machine's
PostgreSQL: a backfill over two intervals and a trigger with conf through the UI form in headless Chromium, each
running the cycle through spark-submit, and a conf the form's schema refuses over REST."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reprocess.cli import load_config, parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.storage.commit import Warehouse
from reprocess.storage.read import read_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev"))
import airflow_local  # noqa: E402

from scoped_auth import OUTSIDER  # noqa: E402

pytestmark = pytest.mark.e2e

PORT = 18080
# Served under a path, as behind a proxy that routes only /airflow/ to it: every URL the UI, the plugin and the
# tests use must stay under it (the nav link to the dead-letters page went to /reprocess/, outside it).
BASE_PATH = "/airflow"
BASE = f"http://localhost:{PORT}{BASE_PATH}"
DAG = "reprocess_failed_messages"
TARGET = "python:reprocess.targets.examples:flaky"


def _psql(sql: str) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
                   check=True, capture_output=True)


class Api:
    def __init__(self, user: str = "admin") -> None:
        self.base = BASE
        self.token = self.call("POST", "/auth/token", {"username": user, "password": user})["access_token"]

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")

    def runs(self) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{DAG}/dagRuns?order_by=-run_after&limit=50")["dag_runs"]

    def wait(self, predicate, timeout: float = 600) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.runs()
            if predicate(runs):
                return runs
            failed = [r for r in runs if r["state"] == "failed"]
            assert not failed, f"a run failed: {failed}"
            time.sleep(3)
        raise TimeoutError(f"runs did not finish: {self.runs()}")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    base = tmp_path_factory.mktemp("af-e2e")
    landing, warehouse = base / "landing", base / "warehouse"
    write_landing(GenerateOptions(out=landing, messages=120, hours=2, seed=21, malformed=2))
    db = f"reprocess_af_{os.getpid()}"
    _psql(f"DROP DATABASE IF EXISTS {db}")
    _psql(f"CREATE DATABASE {db}")
    env = airflow_local.environment(base / "home", landing, warehouse, port=PORT, target=TARGET,
                                    db=f"postgresql+psycopg2://postgres@127.0.0.1:5432/{db}", spark_master="local[2]",
                                    password="admin", base_path=BASE_PATH)
    # Airflow's SimpleAuthManager, but for one user who may read no DAG (scoped_auth); the password is the name
    (base / "home" / "passwords.json").write_text(json.dumps({"admin": "admin", OUTSIDER: OUTSIDER}), encoding="utf-8")
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"admin:admin,{OUTSIDER}:viewer"
    env["AIRFLOW__CORE__AUTH_MANAGER"] = "scoped_auth.ScopedAuthManager"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent), env.get("PYTHONPATH")) if p)
    # no live scheduled run in this test (its as-of would be "now", after the backfilled range);
    # manual triggers and backfills still run
    env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"
    airflow_local.migrate(env)
    proc = airflow_local.start(env, base / "airflow.log")
    try:
        airflow_local.wait_healthy(PORT, base_path=BASE_PATH)
        api = Api()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the dag-processor has to parse the DAG first
            try:
                api.call("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
                break
            except OSError:
                time.sleep(3)
        yield {"api": api, "env": env, "landing": landing, "warehouse": warehouse, "base": base}
    finally:
        airflow_local.stop(proc)
        _psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


@pytest.mark.unit
def test_airflow_is_not_started_on_a_port_something_already_listens_on(tmp_path):
    """An Airflow left from a killed run kept the port: the tests then talked to it (another database, another
    warehouse) while the new api-server could not bind, and failed in ways that did not say so."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env = airflow_local.environment(tmp_path / "home", tmp_path / "l", tmp_path / "w", port=port)
        with pytest.raises(RuntimeError, match=f"port {port} is taken"):
            airflow_local.start(env, tmp_path / "log")
    assert not (tmp_path / "log").exists()


@pytest.mark.unit
def test_make_airflow_takes_the_callers_landing_warehouse_and_target(tmp_path, monkeypatch):
    """`REPROCESS_WAREHOUSE=/srv/wh make airflow` scheduled cycles against demo-out/warehouse: the started Airflow's
    environment set the three from the options' fixed defaults over the caller's. An option still wins."""
    monkeypatch.setenv("REPROCESS_LANDING", str(tmp_path / "in"))
    monkeypatch.setenv("REPROCESS_WAREHOUSE", "s3a://bucket/wh")  # a URI as it is (a Path made it s3a:/bucket/wh)
    monkeypatch.setenv("REPROCESS_TARGET", "python:reprocess.targets.examples:flaky")
    args = airflow_local.options_parser().parse_args([])
    env = airflow_local.environment(tmp_path / "home", airflow_local.location(args.landing),
                                    airflow_local.location(args.warehouse), target=args.target)
    assert (env["REPROCESS_LANDING"], env["REPROCESS_WAREHOUSE"], env["REPROCESS_TARGET"]) == (
        str(tmp_path / "in"), "s3a://bucket/wh", "python:reprocess.targets.examples:flaky")
    assert airflow_local.location("rel/wh") == str(Path("rel/wh").resolve())  # the DAGs run elsewhere
    assert airflow_local.location("file:///srv/wh") == "/srv/wh"  # not <cwd>/file:/srv/wh
    assert airflow_local.options_parser().parse_args(["--warehouse", "elsewhere"]).warehouse == "elsewhere"
    for name in ("REPROCESS_LANDING", "REPROCESS_WAREHOUSE", "REPROCESS_TARGET"):
        monkeypatch.delenv(name)
    args = airflow_local.options_parser().parse_args([])
    assert (args.landing, args.target) == (str(airflow_local.ROOT / "demo-out" / "landing"), "outbox")


def _session_left(sid: int) -> list[str]:
    """The processes of session ``sid`` still running, zombies aside (this machine's init does not reap them). A scan
    of its own, not airflow_local's: the test checks what that one finds."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            state, _ppid, _pgrp, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
            if int(session) == sid and state != "Z":
                found.append(stat.parent.name)
    return found


@pytest.mark.unit
def test_stopping_airflow_gives_its_components_time_to_shut_down_and_kills_what_ignores_sigterm(tmp_path):
    """`make airflow` ran `airflow standalone` in the foreground; it runs the components the tests run now, in a
    session of their own that Ctrl-C does not reach, so stopping is its job. A component shutting down on SIGTERM (a
    scheduler ending its tasks) gets its time: the shell that waited for the components dies at once, and taking its
    exit for theirs killed them mid-shutdown. One that ignores SIGTERM is killed with the rest of the group."""
    import subprocess

    ready, task_ready, done = tmp_path / "ready", tmp_path / "task-ready", tmp_path / "shut-down"
    component = f"trap 'sleep 1; touch {done}; exit 0' TERM; touch {ready}; while :; do sleep 0.1; done"
    # a task process, as Airflow's supervisor starts one: in a process group of its own, ignoring SIGTERM
    task = f"trap '' TERM; touch {task_ready}; exec sleep 300"
    proc = subprocess.Popen(["sh", "-c", f"sh -c {shlex.quote(component)} & "
                             f"python3 -c 'import os; os.setpgid(0, 0); os.execvp(\"sh\", [\"sh\", \"-c\", "
                             f"{json.dumps(task)}])' & wait"], start_new_session=True)
    deadline = time.monotonic() + 30
    # the component has set its trap, the task has left the group and ignores SIGTERM
    while not (ready.exists() and task_ready.exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    airflow_local.stop(proc, grace=5)
    assert done.exists()  # its shutdown ran to the end
    assert _session_left(proc.pid) == []  # the task, in a group of its own, too

    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"], start_new_session=True)
    time.sleep(0.5)
    started = time.monotonic()
    airflow_local.stop(proc, grace=1)
    assert time.monotonic() - started < 30  # not the sleeps' 300 s: SIGKILL after the grace
    deadline = time.monotonic() + 10
    while _session_left(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_left(proc.pid) == []
    airflow_local.stop(proc, grace=1)  # stopping again is harmless


def _ledger(spark, warehouse: Path) -> dict:
    df = read_dataset(spark, str(warehouse), "ledger")
    return {r.message_id: (r.state, r.deliveries, r.next_attempt_ms)
            for r in df.select("message_id", "state", "deliveries", "next_attempt_ms").collect()}


def test_backfill_over_two_intervals_equals_live_runs(airflow, spark, tmp_path):
    api = airflow["api"]
    proc = subprocess.run([str(airflow_local.BIN / "airflow"), "backfill", "create", "--dag-id", DAG,
                           "--from-date", "2026-11-21T00:30:00+00:00", "--to-date", "2026-11-21T00:45:00+00:00",
                           "--max-active-runs", "1", "--reprocess-behavior", "none"],
                          env=airflow["env"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = api.wait(lambda rs: len([r for r in rs if r["run_type"] == "backfill" and r["state"] == "success"]) == 2)
    assert len([r for r in runs if r["run_type"] == "backfill"]) == 2
    snap = Warehouse(airflow["warehouse"]).latest()
    assert [r["run_id"] for r in snap.runs] == ["run-20261121T004500Z", "run-20261121T010000Z"]
    # no deployment setting sizes the driver here: the CLI's default heap, not spark-submit's 1g
    assert [r["summary"]["driver_memory"] for r in snap.runs] == ["2g", "2g"]
    # the same as-ofs run live, in order, on the same landing data give the same ledger
    live = tmp_path / "live"
    for as_of in ("2026-11-21T00:45:00Z", "2026-11-21T01:00:00Z"):
        run_cycle(spark, CycleOptions(landing=str(airflow["landing"]), warehouse=str(live),
                                      policies=load_config(None), as_of_ms=parse_instant(as_of), target=TARGET))
    assert _ledger(spark, airflow["warehouse"]) == _ledger(spark, live)


def test_invalid_conf_is_refused_by_the_form_schema(airflow):
    api = airflow["api"]
    with pytest.raises(urllib.error.HTTPError) as info:
        api.call("POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": {"as_of": "tomorrow"}})
    assert info.value.code == 400


@contextlib.contextmanager
def _logged_in_page(path: str) -> Iterator[Any]:
    """A page of headless Chromium logged in to the test Airflow as admin, sent on to ``path`` (closed after)."""
    from playwright.sync_api import sync_playwright

    base = BASE
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page()
            page.goto(f"{base}/auth/login?next={base}{path}")
            page.fill('input[name="username"]', "admin")
            page.fill('input[name="password"]', "admin")
            page.click('button[type="submit"]')
            yield page
        finally:
            browser.close()


def test_ui_trigger_form_with_conf_runs_the_cycle_as_of_the_override(airflow):
    """The trigger form in headless Chromium posts its fields as the run's conf (the REST call above): the run
    carries the form's as-of and address filter, the cycle runs as of the override, and the run gets the summary as
    its note."""
    api = airflow["api"]
    with _logged_in_page(f"/dags/{DAG}") as page:
        page.get_by_test_id("trigger-dag-button").first.click(timeout=60_000)
        page.locator('input[name="element_as_of"]').fill("2026-11-21T03:00:00Z")
        page.locator('input[name="element_address_filter"]').fill("orders.#")
        page.get_by_test_id("trigger-dag-submit").click()
        page.get_by_text("Dag Run Triggered").first.wait_for(timeout=30_000)
        page.screenshot(path=str(airflow["base"] / "ui-trigger.png"))
    (run,) = [r for r in api.runs() if r["run_type"] == "manual"]
    assert run["conf"]["as_of"] == "2026-11-21T03:00:00Z"
    assert run["conf"]["address_filter"] == "orders.#"
    api.wait(lambda rs: any(r["dag_run_id"] == run["dag_run_id"] and r["state"] == "success" for r in rs))
    done = Warehouse(airflow["warehouse"]).latest().run("run-20261121T030000Z")
    assert done is not None
    assert all(done["summary"]["conservation"].values())
    assert done["summary"]["target"] == TARGET  # the deployment's, added by run_cycle as it started the job ...
    xcom = api.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}/taskInstances/validate_landing/"
                           "xcomEntries/return_value")["value"]
    assert "--as-of" in json.dumps(xcom), xcom  # the job's arguments ...
    assert "--target" not in json.dumps(xcom), xcom  # ... without the deployment's target
    note = api.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}")["note"]
    assert note
    assert "run-20261121T030000Z" in note


def test_the_dead_letters_page_answers_only_users_the_auth_manager_lets_read_the_cycle_dag(airflow):
    """A login alone was enough: a user whom the deployment's auth manager lets read no DAG (another team's) saw
    every dead letter's address and error class. The page and its JSON now answer 403 to such a user."""
    airflow["warehouse"].mkdir(parents=True, exist_ok=True)
    outsider = Api(OUTSIDER)
    for path in ("/reprocess/api/stats", "/reprocess/"):
        with pytest.raises(urllib.error.HTTPError) as info:
            outsider.call("GET", path)
        assert info.value.code == 403, path
    with pytest.raises(urllib.error.HTTPError) as info:  # the auth manager is asked: the same user, a DAG's runs
        outsider.call("GET", f"/api/v2/dags/{DAG}/dagRuns")
    assert info.value.code == 403
    assert "total" in airflow["api"].call("GET", "/reprocess/api/stats")


def test_the_dead_letters_nav_view_shows_the_page_under_airflows_own_path(airflow):
    """Browse > Dead letters is an iframe of the plugin's href. The href was "/reprocess/", the host's root: with
    Airflow served under a path (here /airflow, as behind a proxy), the frame showed {"detail":"Not Found"} from
    http://localhost:18080/reprocess/. Relative, it resolves against the UI's <base href>, Airflow's own path."""
    airflow["warehouse"].mkdir(parents=True, exist_ok=True)
    with _logged_in_page("/plugin/dead-letters") as page:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            frames = [f for f in page.frames if f != page.main_frame]
            if any(f.url.startswith("http") for f in frames):
                break
            page.wait_for_timeout(500)
        shown = {f.url for f in frames}
        assert f"{BASE}/reprocess/" in shown, shown
        frame = next(f for f in frames if f.url == f"{BASE}/reprocess/")
        frame.locator("#redrive-form").wait_for(state="attached", timeout=30_000)
        assert "dead letters in" in frame.locator("body").inner_text()


def test_the_dead_letters_pages_redrive_form_triggers_one_run_however_often_it_is_clicked(airflow):
    """The plugin's page in headless Chromium: a double click on "Trigger re-drive" sent two requests, each a DAG run
    of its own (its own run_after, its own request id), so twice the batch was moved. The button is disabled while
    its request is out, and the page shows the run it triggered."""
    api = airflow["api"]
    airflow["warehouse"].mkdir(parents=True, exist_ok=True)  # run alone, before any cycle: an empty page, not an error
    with _logged_in_page("/reprocess/") as page:
        page.wait_for_url(f"{BASE}/reprocess/", timeout=60_000)
        page.evaluate('document.getElementById("redrive-form").hidden = false')
        page.fill('input[name="address_pattern"]', "orders.#")
        page.fill('input[name="max_messages"]', "1")
        page.locator("#redrive-form button").dblclick()
        page.get_by_text("triggered ").wait_for(timeout=30_000)
        shown = page.locator("#redrive-result").text_content()
    runs = api.call("GET", "/api/v2/dags/redrive_dead_letters/dagRuns")["dag_runs"]
    assert len(runs) == 1, runs
    # it runs: created paused, the page said "triggered" and nothing moved until someone unpaused it
    assert api.call("GET", "/api/v2/dags/redrive_dead_letters")["is_paused"] is False
    assert shown == f"triggered {runs[0]['dag_run_id']}"
    assert runs[0]["conf"]["address_pattern"] == "orders.#"
