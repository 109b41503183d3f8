"""A long-lived driver: cycles as clients of a Spark Connect server (``reprocess connect-server``) give what cycles on
a driver of their own give; a client killed mid-run leaves nothing behind that the next writer does not stop first;
the server refuses clients without its token; the cycle DAG runs on it with ``REPROCESS_SPARK=connect``."""

from __future__ import annotations

import gzip
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.test_dags import _dag_test

from airflow_env import airflow_env, migrate
from reprocess.connect_server import free_port, running_server
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.sparkutil import REMOTE_ENV
from reprocess.storage.commit import Warehouse
from reprocess.storage.connect_clients import sessions_dir
from warehouse_state import (
    CFILE,
    FLAKY,
    IN_PLACE,
    assert_committed_cleanly,
    assert_only_live_files,
    cycle_at,
    warehouse_state,
)

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
GATED = "python:gated_target:gated"
# timings, the Data Docs path under the warehouse, and the heap of the driver (the server's, or the test's own)
VOLATILE = {"elapsed_s", "step_seconds", "validation", "driver_memory", "landing_read"}


@dataclass
class Server:
    url: str  # sc://localhost:PORT
    token: str
    gate: Path  # the gated target's gate (its path is fixed in the server's environment)
    log: Path

    def client_env(self, token: bool = True) -> dict[str, str]:
        # the client sets its session's shuffle partitions: 2, as the in-process runs compared with it
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}:{os.environ.get('PYTHONPATH', '')}",
               "REPROCESS_SHUFFLE_PARTITIONS": "2"}
        env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
        if token:
            env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = self.token
        return env


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("connect-server")
    port, token = free_port(), secrets.token_hex(16)
    gate = work / "gate"
    env = {**os.environ, "SPARK_CONNECT_AUTHENTICATE_TOKEN": token, "REPROCESS_TEST_GATE": str(gate),
           "PYTHONPATH": f"{ROOT / 'tests'}:{os.environ.get('PYTHONPATH', '')}", "REPROCESS_SHUFFLE_PARTITIONS": "2"}
    log = work / "server.log"
    # cfile: the tests' object store, for a client's warehouse at a URI
    args = ["--master", "local[2]", "--driver-memory", "2g", "--conf", f"spark.hadoop.fs.cfile.impl={CFILE}"]
    with running_server(port, log, args, env):
        yield Server(f"sc://localhost:{port}", token, gate, log)


def _cli(server: Server, *args: str) -> list[str]:
    return [sys.executable, "-m", "reprocess.cli", *args, "--remote", server.url]


def _run(server: Server, landing: Path | str, wh: Path | str, as_of: str, target: str, **env: str) -> dict:
    cmd = _cli(server, "run", "--landing", str(landing), "--warehouse", str(wh), "--as-of", as_of, "--target",
               target, "--format", "json")
    done = subprocess.run(cmd, env={**server.client_env(), **env}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def _stable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def test_cycles_over_spark_connect_equal_cycles_on_a_driver_of_their_own(server, spark, cfile, tmp_path):
    """Cycles and an operator's DLQ re-drive as clients of the server commit what the same runs in a driver of their
    own commit, on a warehouse at a URI (``cfile:``, the tests' object store). A client has no JVM: the Hadoop calls
    of that warehouse run in the server's driver (``reprocess.connect.StorePlugin``): the lease, the conditional
    commit, the listings, the vacuum. Every file stays where its attempt wrote it and nothing else is left (no
    lease, no session record, no stage). The landing is at a URI too: the server's driver lists it and finds its
    corrupt file. The clients read the landing's text files in splits of 4 KB (REPROCESS_LANDING_SPLIT_BYTES), the
    driver of their own reads each file whole. A warehouse on a local disk over Connect: the tests below."""
    from reprocess.cli import parse_instant
    from reprocess.redrive import RedriveRequest, redrive_dead_letters
    from reprocess.storage.commit import open_warehouse

    write_landing(GenerateOptions(out=tmp_path / "landing", messages=200, hours=2, seed=9, malformed=2))
    (tmp_path / "landing" / "dt=2026-11-21" / "hour=00" / "not_gzip.jsonl.gz").write_bytes(b"not gzip")
    # decoded by the server's driver, which measures its bytes: they add up with its lines, so nothing is scanned
    packed = [json.dumps({"message_id": f"gz-{i}", "address": "orders.created", "payload": "p",
                          "failed_at": "2026-11-21T00:10:00Z"}) for i in range(3)]
    (tmp_path / "landing" / "dt=2026-11-21" / "hour=00" / "packed.jsonl.gz").write_bytes(
        gzip.compress("\r\n\n".join(packed).encode()))
    landing = f"cfile://{tmp_path / 'landing'}"  # listed and checked for corrupt files by the server's driver too
    root, local = tmp_path / "wh-uri", tmp_path / "wh-local"
    uri = f"cfile://{root}"
    summaries = []
    for as_of in ("2026-11-21T01:00:00Z", "2026-11-21T02:30:00Z"):
        over_connect = _run(server, landing, uri, as_of, FLAKY, REPROCESS_LANDING_SPLIT_BYTES="4096")
        on_its_own = cycle_at(spark, landing, local, as_of)
        assert _stable(over_connect) == _stable(on_its_own)
        assert (over_connect["landing_read"], on_its_own["landing_read"]) == ("splits", "whole_files")
        assert all(over_connect["conservation"].values())
        assert over_connect["validation"]["passed"]
        assert over_connect["landing_parser"] == "jvm"  # registered on the server, whose class path has the jar
        assert over_connect["driver_memory"] == "2g"  # the server's heap (--driver-memory), as a client reads it
        summaries.append(over_connect)
    # the runs did real work: quarantined bad lines, re-drove, rescheduled and dead-lettered
    assert summaries[0]["quarantined"] > 0
    assert summaries[1]["due"] > 0
    assert summaries[1]["rescheduled"] > 0
    assert sum(s["dead_lettered"]["total"] for s in summaries) >= 3
    now = "2026-11-21T03:00:00Z"
    done = subprocess.run(_cli(server, "redrive", "--warehouse", uri, "--max", "3", "--reset-deliveries", "--now", now),
                          env=server.client_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    audit = json.loads(done.stdout)
    request = RedriveRequest(address_pattern="#", max_messages=3, reset_deliveries=True)
    expected = redrive_dead_letters(spark, str(local), request, parse_instant(now), requested_by="cli")
    assert audit["moved"] == 3
    # the same but for the GX gate's timing and Data Docs path (a warehouse each)
    assert {k: v for k, v in audit.items() if k != "validation"} == json.loads(json.dumps(
        {k: v for k, v in expected.items() if k not in ("messages", "validation")}))
    assert audit["validation"]["counts"] == expected["validation"]["counts"]
    state = warehouse_state(spark, uri)
    assert state == warehouse_state(spark, local)
    corrupt = [file for file, _record in state["quarantine"] if file.endswith("not_gzip.jsonl.gz")]
    assert corrupt == [f"cfile:{tmp_path}/landing/dt=2026-11-21/hour=00/not_gzip.jsonl.gz"]  # quarantined whole
    snap = open_warehouse(uri).latest()
    assert snap.version == Warehouse(local).latest().version == 3
    listed = [f for files in snap.files.values() for f in files]
    assert listed
    assert all((root / f).is_file() and IN_PLACE.match(f) for f in listed), listed[:5]
    assert_only_live_files(root)
    assert not (root / "_lock").exists()  # each writer released its lease
    # each client recorded its session in the warehouse and took the record away; no stage is left
    assert (root / "_runs" / "_connect_sessions").is_dir()
    assert [p for p in (root / "_runs").rglob("*") if p.is_file()] == []


# A client whose server has no class of the JVM parser's name (an older jar, or none): the class and function names
# are moved to ones the server cannot have, as an older jar's server answers for the current names.
_OLD_JAR_CLIENT = """
import sys
from reprocess.landing import contract
contract.JVM_PARSER_CLASS = "reprocess.landing.NotBuilt"
contract.JVM_PARSER_FUNCTION = "reprocess_not_built"
from reprocess.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_client_counts_the_task_slots_its_servers_scans_are_planned_with(server):
    """A client has no ``sparkContext``: it reads the server's task slots (``local[2]``) off a range, which Spark
    cuts as it cuts a scan of files, or takes the session's ``spark.sql.leafNodeDefaultParallelism`` when set: the
    number a landing's split size is sized to (``contract.split_size``)."""
    code = ("import sys; from reprocess.sparkutil import build_session, task_slots; "
            "s = build_session('slots', remote=sys.argv[1]); found = task_slots(s); "
            "s.conf.set('spark.sql.leafNodeDefaultParallelism', '5'); print(found, task_slots(s))")
    done = subprocess.run([sys.executable, "-c", code, server.url], env=server.client_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["2", "5"]


def test_a_server_without_the_parsers_class_checks_the_landing_with_the_expressions_alike(server, spark, tmp_path):
    """A Connect server whose jar has no ``WellFormedLine`` (older, or none) refuses the client's registration with
    an error of Spark Connect's own: the client's cycle checks its landing with the built-in expressions alone, says
    so, and commits what a driver with the JVM parser commits, unknown nested fields and malformed lines included."""
    landing, wh, local = tmp_path / "landing", tmp_path / "wh", tmp_path / "wh-local"
    write_landing(GenerateOptions(out=landing, messages=40, hours=1, seed=11, malformed=2))
    good = {"address": "orders.created", "payload": "p", "failed_at": "2026-11-21T00:20:00Z"}
    lines = [json.dumps({**good, "message_id": "n-1", "meta": {"b": [1.50, 1e2], "a": None}}),
             json.dumps({**good, "message_id": "n-2", "headers": {"k": 1}}),  # a wrong type: quarantined
             json.dumps({**good, "message_id": "n-3", "z": 10**20, "y": [{"x": "é"}]}, ensure_ascii=False)]
    (landing / "dt=2026-11-21" / "hour=00" / "nested.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    as_of = "2026-11-21T01:00:00Z"
    cmd = [sys.executable, "-c", _OLD_JAR_CLIENT, "run", "--landing", str(landing), "--warehouse", str(wh),
           "--as-of", as_of, "--target", FLAKY, "--format", "json", "--remote", server.url]
    done = subprocess.run(cmd, env=server.client_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "landing parser=expressions (reprocess.landing.NotBuilt is not on the class path" in done.stderr
    over_connect = json.loads(done.stdout)
    assert over_connect["landing_parser"] == "expressions"
    in_process = cycle_at(spark, landing, local, as_of)
    assert in_process["landing_parser"] == "jvm"
    assert {k: v for k, v in _stable(over_connect).items() if k != "landing_parser"} == \
        {k: v for k, v in _stable(in_process).items() if k != "landing_parser"}
    assert over_connect["quarantined"] >= 3  # the malformed lines and the wrong type
    assert warehouse_state(spark, wh) == warehouse_state(spark, local)


def test_a_long_line_in_a_landing_file_at_a_uri_is_named_to_a_connect_client(server, tmp_path):
    """A client cannot stream a file at a URI to find a line too long to read: the run stops before it commits
    anything and names the file (a driver of its own quarantines the line: tests/test_long_lines.py). A file of
    whitespace-only lines, whose bytes no record holds, is no such file: it stopped every run the same way."""
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_landing(GenerateOptions(out=landing, messages=20, hours=1, seed=3))
    blank_file = landing / "dt=2026-11-21" / "hour=00" / "blank.jsonl"
    blank_file.write_text(" \t \r\n" * 300 + "   ")
    blank_gz = blank_file.with_name("blank.jsonl.gz")  # its decoded length against its lines, its stored one listed
    blank_gz.write_bytes(gzip.compress((" \t \r\n" * 300).encode()))
    run = ["run", "--landing", f"cfile://{landing}", "--warehouse", str(wh), "--max-line-bytes", "2048",
           "--format", "json"]
    done = subprocess.run(_cli(server, *run, "--as-of", "2026-11-21T02:00:00Z"), env=server.client_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"landing file's lines counted again with its blank lines file=cfile:{blank_file}" in done.stderr
    for path in (blank_file, blank_gz):
        assert f"landing file's lines counted again with its blank lines file=cfile:{path}" in done.stderr
    assert done.stderr.count("unchanged=True adds_up=True") == 2
    long_file = landing / "dt=2026-11-21" / "hour=00" / "long.jsonl"
    long_file.write_text("x" * 5000 + "\n")
    done = subprocess.run(_cli(server, *run, "--as-of", "2026-11-21T03:00:00Z"), env=server.client_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 4, done.stderr[-3000:]  # ContractError
    assert f"landing file cfile:{long_file} may hold a line of more than --max-line-bytes" in done.stderr
    assert Warehouse(wh).latest().version == 1  # nothing more committed


def test_a_file_of_blank_lines_read_in_splits_adds_up_for_a_connect_client(server, tmp_path):
    """The recount of a blank-line file runs while the session still cuts files in splits (a landing with a file
    above the split size): its lines are counted, not numbered, since a split's rows are numbered from 1 (a
    review found the recount numbered them, and such a file stopped every run)."""
    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_landing(GenerateOptions(out=landing, messages=20, hours=1, seed=3, malformed=0))
    blank_file = landing / "dt=2026-11-21" / "hour=00" / "blank.jsonl"
    blank_file.write_text(" \t \r\n" * 2000)  # 10,000 bytes: ten splits of 1,024
    # a limit above the line ends' bytes (2 a line: below it, the bytes cannot tell, long_lines.may_hold_long_lines)
    cmd = _cli(server, "run", "--landing", f"cfile://{landing}", "--warehouse", str(wh), "--max-line-bytes", "65536",
               "--format", "json", "--as-of", "2026-11-21T02:00:00Z")
    done = subprocess.run(cmd, env={**server.client_env(), "REPROCESS_LANDING_SPLIT_BYTES": "1024"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "landing text files read in splits split_bytes=1024" in done.stderr
    assert (f"landing file's lines counted again with its blank lines file=cfile:{blank_file} bytes=10000 "
            "read_bytes=6000 lines=2000 unchanged=True adds_up=True") in done.stderr
    assert json.loads(done.stdout)["quarantined"] == 0  # a blank line is no record


def test_a_server_without_the_store_plugin_is_named_for_a_warehouse_at_a_uri(tmp_path):
    """A Connect server started without reprocess's jar cannot make a client's Hadoop calls: exit 3, and what to do."""
    env = {**os.environ, "REPROCESS_LOCAL_FS_JAR": ""}
    port = free_port()
    with running_server(port, tmp_path / "server.log", ["--master", "local[1]", "--driver-memory", "1g"], env):
        done = subprocess.run([sys.executable, "-m", "reprocess.cli", "run", "--landing", str(tmp_path), "--warehouse",
                               "s3a://bucket/wh", "--as-of", "2026-11-21T01:00:00Z", "--remote",
                               f"sc://localhost:{port}"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "has no reprocess.connect.StorePlugin. Start it with `reprocess connect-server`" in done.stderr


def test_a_warehouse_scheme_without_a_connector_on_the_server_is_named(server, tmp_path):
    """The server's driver opens a client's warehouse URI: a scheme it has no filesystem for is a configuration
    error naming the scheme and the connector jars (exit 3), nothing written."""
    done = subprocess.run(_cli(server, "run", "--landing", str(tmp_path), "--warehouse", "nosuch://bucket/wh",
                               "--as-of", "2026-11-21T01:00:00Z"),
                          env=server.client_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "warehouse nosuch://bucket/wh: this Spark has no Hadoop FileSystem for nosuch://" in done.stderr
    assert "connector jars" in done.stderr


def test_the_server_refuses_a_client_without_its_token(server, tmp_path):
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=20, hours=1, seed=3))
    cmd = _cli(server, "run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh"), "--as-of",
               "2026-11-21T01:00:00Z")
    done = subprocess.run(cmd, env=server.client_env(token=False), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "UNAUTHENTICATED" in done.stderr
    assert Warehouse(tmp_path / "wh").latest().version == 0  # nothing committed


def test_a_damaged_ledger_file_is_named_to_a_connect_client(server, tmp_path):
    """The server's error reaches a client as a SparkException of its own: the run still names the file the snapshot
    lists that cannot be read (WarehouseDamagedError, exit 12) and commits nothing."""
    from reprocess.errors import WarehouseDamagedError

    landing, wh = tmp_path / "landing", tmp_path / "wh"
    write_landing(GenerateOptions(out=landing, messages=40, hours=1, seed=5))
    _run(server, landing, wh, "2026-11-21T01:00:00Z", FLAKY)
    before = Warehouse(wh).latest()
    for rel in before.files["ledger"]:
        (wh / rel).write_bytes(b"garbled")
    cmd = _cli(server, "run", "--landing", str(landing), "--warehouse", str(wh), "--as-of", "2026-11-21T03:00:00Z",
               "--target", FLAKY)
    done = subprocess.run(cmd, env=server.client_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == WarehouseDamagedError.exit_code, done.stderr[-4000:]
    assert any(f"reprocess: damaged: warehouse {wh}: snapshot {before.version} lists {rel}, which is not a readable "
               "Parquet file" in done.stderr for rel in before.files["ledger"]), done.stderr[-4000:]
    assert Warehouse(wh).latest().version == before.version


def _calls(gate: Path) -> Counter[str]:
    calls = Path(str(gate) + ".calls")
    return Counter(calls.read_text().split()) if calls.exists() else Counter()


def _stages(entered: Path) -> list[int]:
    """The Spark stages whose tasks entered the gated target, one line per call."""
    return [int(line) for line in entered.read_text(encoding="utf-8").split()]


def _reset_gate(gate: Path) -> None:
    for p in (gate, Path(str(gate) + ".entered"), Path(str(gate) + ".calls")):
        p.unlink(missing_ok=True)


def _wait_for(ok, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_killed_clients_job_is_stopped_before_the_next_run_and_delivers_nothing(server, spark, tmp_path):
    """A client killed inside its re-drive leaves its job blocked in the target on the server. The next run stops
    that job before it re-drives: each due message is delivered once, by the run that committed."""
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=60, hours=1, seed=9, malformed=0))
    as_of = "2026-11-21T01:00:00Z"

    _reset_gate(server.gate)
    server.gate.touch()  # open: the uninterrupted reference run
    reference = _run(server, landing, tmp_path / "wh-reference", as_of, GATED)
    assert set(_calls(server.gate).values()) == {1}

    _reset_gate(server.gate)  # closed: the next re-drive waits inside the target
    wh = tmp_path / "wh"
    cmd = _cli(server, "run", "--landing", str(landing), "--warehouse", str(wh), "--as-of", as_of, "--target",
               GATED, "--format", "json")
    killed = subprocess.Popen(cmd, env=server.client_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    entered = Path(str(server.gate) + ".entered")
    _wait_for(lambda: entered.exists() and _stages(entered), 300, "the first client to enter the gated target")
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    (dead_record,) = sessions_dir(Warehouse(wh).root).glob("*.json")
    assert Warehouse(wh).prepared_runs(), "the killed run persisted its deliveries before re-driving"

    killed_stage = max(_stages(entered))
    rerun = subprocess.Popen(cmd, env=server.client_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The re-run stops the dead client's session first, then resumes the prepared run and waits in the gate itself;
    # only then is the gate opened, so a job the re-run had not stopped would deliver its messages too. The killed
    # job's other tasks may still enter the gate meanwhile: the re-run's are told apart by their later stage.
    _wait_for(lambda: max(_stages(entered)) > killed_stage, 300, "the re-run to reach the target")
    server.gate.touch()
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err[-4000:]
    calls = _calls(server.gate)
    assert set(calls.values()) == {1}, "a message was delivered twice: the killed client's job went on"
    assert not dead_record.exists()
    assert "stopped the Spark Connect session of a writer that died" in err
    assert "interrupted_operations=0" not in err
    assert "interrupted_operations=None" not in err
    summary = json.loads(out)
    assert sum(calls.values()) == summary["due"] == reference["due"] > 0
    assert summary.pop("already_committed") is True  # the resumed prepared run committed; this is its summary
    assert (summary.pop("resumed"), reference["resumed"]) == (True, False)  # (no later request is judged by it)
    assert _stable(summary) == {k: v for k, v in _stable(reference).items() if k != "resumed"}
    assert warehouse_state(spark, wh) == warehouse_state(spark, tmp_path / "wh-reference")
    assert_committed_cleanly(wh)


_CHECKPOINTING_CLIENT = """
import json, sys
from reprocess import sparkutil
from reprocess.cycle import run as run_module
from reprocess.sparkutil import build_session
from reprocess.storage.hadoop_fs import plugin_request
from warehouse_state import cycle_at

url, landing, wh, *as_ofs = sys.argv[1:]
spark = build_session("checkpointing-client", remote=url)
leaves = []
pin = sparkutil.Pinned.pin

def recording_pin(self, df, level, truncate):
    kept = pin(self, df, level, truncate)
    leaves.append(type(kept._plan).__name__)
    return kept

sparkutil.Pinned.pin = recording_pin

def kept():
    return {r.n for r in plugin_request(spark, "kept")}

def mixed(spark, small, calls=[]):
    # the last cycle as a small batch on a large ledger runs it: the landing's records checkpointed, the
    # ledger's frames (made from them) cached
    calls.append(small)
    return len(calls) % 2 == 1 and sparkutil.truncates_plans(spark, small)

before, left = kept(), []
for i, as_of in enumerate(as_ofs):
    if i == len(as_ofs) - 1:
        run_module.truncates_plans = mixed
    cycle_at(spark, landing, wh, as_of)
    left.append(sorted(kept() - before))
print(json.dumps({"leaves": leaves, "left": left, "small": sparkutil.truncates_plans(spark, True),
                  "large": sparkutil.truncates_plans(spark, False)}))
"""


def test_a_small_cycle_over_connect_checkpoints_its_frames_and_the_server_keeps_none_after_it(server, spark,
                                                                                                tmp_path):
    """A server in local mode with the store plugin checkpoints a small run's kept frames, as a local driver does
    (sparkutil.truncates_plans), and frees them on the server when the run is done: after each cycle the server
    keeps blocks of no RDD it did not keep before; so too when a run caches frames made from a checkpoint (a small
    batch on a large ledger: the checkpoint is freed after them). The warehouse is the one a driver of its own
    commits."""
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=120, hours=3, seed=13, malformed=1))
    as_ofs = ("2026-11-21T01:00:00Z", "2026-11-21T02:00:00Z", "2026-11-21T03:00:00Z")
    done = subprocess.run([sys.executable, "-c", _CHECKPOINTING_CLIENT, server.url, str(landing),
                           str(tmp_path / "wh"), *as_ofs], env=server.client_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert (out["small"], out["large"]) == (True, False)
    # each cycle: the landing's records, the merged rows, the due ones, the outcomes; cached, a frame keeps its plan
    assert out["leaves"][:8] == ["CachedRemoteRelation"] * 8
    assert out["leaves"][8] == "CachedRemoteRelation"
    assert "CachedRemoteRelation" not in out["leaves"][9:]
    assert len(out["leaves"]) == 12
    assert out["left"] == [[], [], []]
    for as_of in as_ofs:
        cycle_at(spark, landing, tmp_path / "wh-local", as_of)
    assert warehouse_state(spark, tmp_path / "wh") == warehouse_state(spark, tmp_path / "wh-local")
    assert_committed_cleanly(tmp_path / "wh")


@pytest.mark.airflow
def test_the_cycle_dag_runs_as_a_client_of_the_connect_server(server, tmp_path):
    """The DAG with ``REPROCESS_SPARK=connect`` on a warehouse at a URI (``cfile:``): the cycle's store calls go to the
    server's driver, and the tasks around it read the warehouse through pyarrow (a local warehouse over Connect: the
    CLI tests above; a URI warehouse with spark-submit: tests/test_dags.py)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh"
    write_landing(GenerateOptions(out=landing, messages=100, hours=1, seed=4, malformed=1))
    port = int(server.url.rsplit(":", 1)[1])
    env = airflow_env(tmp_path / "home", landing, warehouse, REPROCESS_SPARK="connect",
                      REPROCESS_WAREHOUSE=f"cfile://{warehouse}",
                      AIRFLOW_CONN_SPARK_CONNECT_DEFAULT=json.dumps(
                          {"conn_type": "spark_connect", "host": "localhost", "port": port,
                           "password": server.token}))
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)  # the token comes from the connection only
    env.pop(REMOTE_ENV, None)
    migrate(env)
    assert _dag_test(env, "reprocess_failed_messages", "2026-11-21T01:00:00+00:00", {}) == "success"
    run = Warehouse(warehouse).latest().run("run-20261121T010000Z")
    assert run is not None
    assert all(run["summary"]["conservation"].values())
    assert run["summary"]["validation"]["passed"]
    assert run["summary"]["dead_lettered"]["total"] > 0
    # a Connect client records its session while it writes (and only a Connect client does)
    assert sessions_dir(Warehouse(warehouse).root).is_dir()
    assert list(sessions_dir(Warehouse(warehouse).root).iterdir()) == []
    assert_committed_cleanly(warehouse)  # no prepared run left, every committed run balanced
    assert not (warehouse / "_lock").exists()  # the lease, released
    # the store calls of a warehouse at a URI: every file stays in its attempt's folder, nothing unnamed is left
    live = [f for files in Warehouse(warehouse).latest().files.values() for f in files]
    assert live
    assert all(IN_PLACE.match(f) for f in live), live[:3]
    assert_only_live_files(warehouse)


def test_the_file_uris_computed_without_a_jvm_are_the_ones_spark_reads_back(spark, tmp_path):
    """A Connect client matches the files a query touched (``_metadata.file_path``) to the files it listed without
    asking a JVM: for awkward names too (spaces, '%', '#', '?', non-ASCII, a no-break space; not glob brackets,
    which Spark's reader expands)."""
    from pyspark.sql import functions as F

    from reprocess.uris import local_file_uri

    names = ["plain", "a b", "100%", "x#y?z", "dt=2026-11-21", "ünïcødé", "no\u00a0break", "a+b=c&d;e", "(p)!~'*@$,"]
    paths = []
    for i, name in enumerate(names):
        folder = tmp_path / name
        spark.range(1).withColumn("i", F.lit(i)).coalesce(1).write.parquet(str(folder))
        paths += [str(p) for p in folder.glob("*.parquet")]
    read = spark.read.parquet(*paths).select("i", F.col("_metadata.file_path").alias("uri")).collect()
    by_index = {r.i: r.uri for r in read}
    for i, name in enumerate(names):
        (path,) = [p for p in paths if Path(p).parent.name == name]
        assert local_file_uri(path) == by_index[i], name
    # the same path however it is spelled: repeated slashes, '.', '..', relative to the working directory
    assert local_file_uri(str(tmp_path) + "//a b/./x/../y") == local_file_uri(str(tmp_path / "a b" / "y"))


@pytest.mark.unit
def test_a_left_over_session_is_joined_by_its_id_with_the_servers_other_parameters():
    from reprocess.storage.connect_clients import session_url

    sid = "0b5f6c1e-5a9e-4c39-9d1e-8f0c2b7a6d21"
    assert session_url("sc://localhost:15002", sid) == f"sc://localhost:15002/;session_id={sid}"
    assert session_url("sc://h:1/;token=t;use_ssl=true", sid) == f"sc://h:1/;token=t;use_ssl=true;session_id={sid}"
    assert session_url("sc://h:1/;session_id=other;token=t", sid) == f"sc://h:1/;token=t;session_id={sid}"


@pytest.mark.unit
def test_the_server_starts_with_the_cycles_settings_on_loopback(monkeypatch):
    from reprocess.connect_server import SERVER_CLASS, server_command
    from reprocess.errors import ConfigError
    from reprocess.spark_env import JVM_ARCHIVE_ENV
    from reprocess.sparkutil import APP_CONF, SESSION_CONF

    monkeypatch.setenv(JVM_ARCHIVE_ENV, "")
    cmd = server_command(port=15999, driver_memory="3g", conf=["spark.sql.shuffle.partitions=4"])
    assert cmd[0] == str(Path(sys.executable).parent / "spark-submit")
    assert cmd[cmd.index("--class") + 1] == SERVER_CLASS
    conf = dict(cmd[i + 1].split("=", 1) for i, c in enumerate(cmd) if c == "--conf")
    assert conf["spark.driver.memory"] == "3g"
    assert {k: conf[k] for k in {**SESSION_CONF, **APP_CONF}} == {**SESSION_CONF, **APP_CONF}
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15999"
    assert conf["spark.pyspark.python"] == sys.executable  # the re-drive targets' Python workers
    assert conf["spark.sql.shuffle.partitions"] == "4"  # --conf wins
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        server_command(conf=["no-equals-sign"])


def test_the_server_loads_the_store_plugin_only_from_a_jar_that_has_it(monkeypatch, tmp_path):
    """A server whose jar lacks the plugin class (none built, or built before it) starts without it: loading a
    missing extension class would fail every client's query, not only those of a warehouse at a URI."""
    import zipfile

    from reprocess.connect_server import store_plugin_conf
    from reprocess.spark_env import LOCAL_FS_JAR_ENV
    from reprocess.storage.hadoop_fs import PLUGIN_CLASS, PLUGIN_CONF

    def conf_with(jar: str) -> dict[str, str]:
        monkeypatch.setenv(LOCAL_FS_JAR_ENV, jar)
        return store_plugin_conf()

    old, new = tmp_path / "old.jar", tmp_path / "new.jar"
    with zipfile.ZipFile(old, "w") as z:
        z.writestr("reprocess/hadoop/PosixLocalFileSystem.class", b"")
    with zipfile.ZipFile(new, "w") as z:
        z.writestr("reprocess/connect/StorePlugin.class", b"")
    (tmp_path / "broken.jar").write_bytes(b"not a zip")
    assert conf_with(str(new)) == {PLUGIN_CONF: PLUGIN_CLASS}
    assert conf_with(str(old)) == {}
    assert conf_with(str(tmp_path / "broken.jar")) == {}
    assert conf_with("") == {}


@pytest.mark.unit
@pytest.mark.parametrize(("value", "connect"), [(None, False), ("", False), ("submit", False), (" Connect ", True)])
def test_reprocess_spark_chooses_how_the_dags_run_spark(monkeypatch, value, connect):
    from reprocess.spark_env import on_spark_connect

    if value is None:
        monkeypatch.delenv("REPROCESS_SPARK", raising=False)
    else:
        monkeypatch.setenv("REPROCESS_SPARK", value)
    assert on_spark_connect() is connect


@pytest.mark.unit
def test_an_unknown_reprocess_spark_is_a_config_error_not_a_silent_submit(monkeypatch):
    from reprocess.errors import ConfigError
    from reprocess.spark_env import on_spark_connect

    monkeypatch.setenv("REPROCESS_SPARK", "yarn")
    with pytest.raises(ConfigError, match="REPROCESS_SPARK='yarn' is not one of submit, connect"):
        on_spark_connect()


_STAMPS_CLIENT = r"""
import json, sys
from reprocess.sparkutil import build_session
from reprocess.storage.hadoop_fs import ConnectFs, plugin_request

url, *paths = sys.argv[1:]
spark = build_session("stamps-client", remote=url)


class Earlier(ConnectFs):
    STAMPS = "stamps-of-a-later-build"  # what a server whose plugin predates a request answers


try:
    plugin_request(spark, "no-such-request")
    refused = None
except Exception as exc:
    refused = str(exc)
print(json.dumps({"stamps": ConnectFs(spark).stamps(paths), "earlier": Earlier(spark).stamps(paths),
                  "refused": refused}))
"""


def test_a_client_stamps_files_at_a_uri_as_a_driver_of_its_own_does_a_folder_at_a_time(server, spark, cfile,
                                                                                         tmp_path):
    """``ConnectFs.stamps``, the server's listing of each folder, gives what ``JvmFs.stamps`` gives in a driver of
    its own: each file's length, modification time and ETag, None for a file or a folder not there. A server whose
    plugin predates the request refuses it by name, and the client then asks the files' lengths alone."""
    from reprocess.storage.hadoop_fs import JvmFs

    for hour in ("hour=00", "hour=01"):
        (tmp_path / hour).mkdir()
        for name, text in (("a.jsonl", "x\n"), ("b.jsonl", "yy\n")):
            (tmp_path / hour / name).write_text(text)
    paths = [f"cfile:{tmp_path}/hour=00/a.jsonl", f"cfile:{tmp_path}/hour=01/b.jsonl",
             f"cfile:{tmp_path}/hour=00/gone.jsonl", f"cfile:{tmp_path}/hour=02/a.jsonl"]
    done = subprocess.run([sys.executable, "-c", _STAMPS_CLIENT, server.url, *paths], env=server.client_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.splitlines()[-1])
    own = JvmFs(spark.sparkContext).stamps(paths)
    assert out["stamps"] == {p: None if s is None else list(s) for p, s in own.items()}
    assert [own[p] is None for p in paths] == [False, False, True, True]
    assert [own[p][0] for p in paths[:2]] == [2, 3]  # type: ignore[index]
    assert all(own[p][2] for p in paths[:2])  # type: ignore[index]  # cfile: has ETags
    assert out["earlier"] == {p: None if s is None else [s[0], None, None] for p, s in own.items()}
    assert f"{out['refused']}\n".startswith("reprocess store plugin: unknown request no-such-request\n"), out["refused"]
