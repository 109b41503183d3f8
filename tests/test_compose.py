"""docker-compose.yaml has the production shape (Docker cannot run here, so the file is checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_every_service_of_the_production_shape_is_there(compose):
    assert set(compose["services"]) == {"postgres", "airflow-init", *AIRFLOW, "spark-master", "spark-worker-1",
                                        "spark-worker-2", "spark-connect"}


def test_airflow_runs_on_postgres_with_the_local_executor_and_spark_default_on_the_master(compose):
    for name in (*AIRFLOW, "airflow-init"):
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert '"host": "spark://spark-master", "port": 7077' in env["AIRFLOW_CONN_SPARK_DEFAULT"]
        assert "SimpleAuthManager" in env["AIRFLOW__CORE__AUTH_MANAGER"]  # auth on, not all-admins
        assert "SIMPLE_AUTH_MANAGER_ALL_ADMINS" not in " ".join(env)


def test_services_wait_for_healthy_dependencies_and_have_healthchecks(compose):
    services = compose["services"]
    for name in AIRFLOW:
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    for name in (*AIRFLOW, "postgres", "spark-master", "spark-worker-1", "spark-worker-2", "spark-connect"):
        assert services[name]["healthcheck"]["test"], name
    assert services["spark-connect"]["depends_on"]["spark-master"]["condition"] == "service_healthy"


def _published(service: dict) -> list[tuple[str, str]]:
    """(host address, host port) of each port a service publishes; the address is "" for every interface."""
    out = []
    for spec in service.get("ports", []):
        parts = str(spec).split(":")
        out.append((parts[0], parts[1]) if len(parts) == 3 else ("", parts[0]))
    return out


def test_ports_do_not_clash_and_the_spark_master_is_not_open_to_other_hosts(compose):
    published = [p for s in compose["services"].values() for _, p in _published(s)]
    assert "8080" in published
    assert len(published) == len(set(published))
    assert "8081" in compose["services"]["spark-master"]["command"]  # master UI moved off Airflow's 8080
    # a standalone master without spark.authenticate runs any job sent to 7077: the stack's network only, and its
    # UI on this host's loopback
    assert _published(compose["services"]["spark-master"]) == [("127.0.0.1", "8081")]


def test_spark_services_run_their_command_not_the_airflow_entrypoint(compose):
    """The image is Airflow's, whose /entrypoint runs every command but bash and python as `airflow <command>`:
    `spark-class ...` would have been `airflow spark-class ...` and the cluster never up."""
    for name in ("spark-master", "spark-worker-1", "spark-worker-2", "spark-connect"):
        service = compose["services"][name]
        assert service["entrypoint"] == ["/usr/bin/dumb-init", "--"], name
        assert service["command"][0] in {"spark-class", "reprocess"}, name
    for name in AIRFLOW:  # these are Airflow's commands, through its entrypoint
        assert "entrypoint" not in compose["services"][name], name


def test_the_image_makes_the_volumes_mount_points_the_airflow_users():
    """A new named volume takes the owner of the folder it mounts on, and one the image lacks is root's: the init
    job (running as airflow) could not write the password file, nor the cycles the warehouse."""
    text = (ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    made = re.search(r"install -d -o airflow -g 0 -m 775 ([^&\n]+)", text)
    assert made, "the image creates no mount points for the volumes"
    folders = set(made.group(1).split())
    compose_text = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    mounts = {v.split(":", 1)[1] for s in compose_text["services"].values() for v in s.get("volumes", [])
              if not v.startswith("postgres-db:")}
    assert mounts == folders


def test_landing_and_warehouse_are_shared_volumes(compose):
    for name in (*AIRFLOW, "spark-master", "spark-worker-1", "spark-worker-2", "spark-connect"):
        vols = compose["services"][name]["volumes"]
        assert "landing:/data/landing" in vols
        assert "warehouse:/data/warehouse" in vols
    assert {"landing", "warehouse"} <= set(compose["volumes"])


def test_the_long_lived_driver_serves_the_cluster_and_is_not_published(compose):
    connect = compose["services"]["spark-connect"]
    assert connect["command"][:2] == ["reprocess", "connect-server"]
    assert "spark://spark-master:7077" in connect["command"]  # its executors are the cluster's workers
    assert "ports" not in connect  # it runs any code a client sends: only the stack's network reaches it
    for name in AIRFLOW:
        env = compose["services"][name]["environment"]
        conn = env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]
        assert '"conn_type": "spark_connect", "host": "spark-connect", "port": 15002' in conn
        assert env["REPROCESS_SPARK"] == "${REPROCESS_SPARK:-submit}"  # spark-submit unless switched


def test_no_secret_is_written_in_the_file():
    text = (ROOT / "docker-compose.yaml").read_text()
    for var in ("POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_ADMIN_PASSWORD"):
        assert re.search(r"\$\{" + var + r":\?", text), f"{var} must come from the environment"
    assert not re.search(r"(?i)password:\s*['\"]?[a-z0-9]{3,}['\"]?\s*$", text, re.M)


def _dockerfile() -> tuple[list[tuple[list[str], str]], dict[str, str]]:
    """The image's COPY instructions (sources, destination) and ENV values, continuation lines joined."""
    import shlex

    text = (ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    copies, env = [], {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["COPY"]:
            paths = [w for w in words[1:] if not w.startswith("--")]
            copies.append((paths[:-1], paths[-1]))
        elif words[:1] == ["ENV"]:
            env.update(w.split("=", 1) for w in words[1:])
    return copies, env


def test_the_image_holds_what_the_dags_look_for_where_they_look(compose, tmp_path):
    """The image as its COPY lines lay it out: the DAGs' Spark entrypoints (ROOT/spark/entrypoints, ROOT the folder
    above the DAGs), the GX suites and the plugin are where Airflow and the DAGs read them. (The DAGs were copied to
    /opt/airflow/dags, away from the project under /opt/reprocess, and the suites not at all: a run in the image
    could not have found its job.)"""
    import shutil

    copies, env = _dockerfile()
    image = tmp_path / "image"
    for sources, dest in copies:
        target = image / dest.lstrip("/")
        for src in sources:
            path = ROOT / src
            into = target / path.name if dest.endswith("/") else target
            if path.is_dir():
                shutil.copytree(path, into, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, into)
    for name in (*AIRFLOW, "airflow-init"):
        service_env = compose["services"][name]["environment"]
        for key in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER"):
            assert service_env.get(key, env[key]) == env[key], (name, key)
    dags = image / env["AIRFLOW__CORE__DAGS_FOLDER"].lstrip("/")
    assert sorted(p.name for p in dags.glob("*.py")) == sorted(p.name for p in (ROOT / "dags").glob("*.py"))
    for dag in (ROOT / "dags").glob("*.py"):
        source = dag.read_text()
        assert "ROOT = Path(__file__).resolve().parents[1]" in source
        for app in re.findall(r'ROOT / "spark" / "entrypoints" / "(\w+\.py)"', source):
            assert (dags.parent / "spark" / "entrypoints" / app).is_file(), (dag.name, app)
    suites = image / env["REPROCESS_EXPECTATIONS"].lstrip("/")
    assert {p.name for p in suites.glob("*.json")} >= {"landing.json", "ledger.json", "dlq.json", "run.json"}
    assert (image / env["AIRFLOW__CORE__PLUGINS_FOLDER"].lstrip("/") / "reprocess_plugin.py").is_file()
