"""A warehouse on a Hadoop filesystem URI (docs/adr/0005-warehouse-on-object-storage.md), against
``reprocess.hadoop.ConditionalLocalFileSystem``: the local disk under the scheme ``cfile:``, which Python cannot open,
with the conditional creates and ETags S3A gives. The same code runs against S3A in a deployment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reprocess.cli import main, parse_instant
from reprocess.errors import CommitConflictError, ConfigError
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.redrive import RedriveRequest, redrive_dead_letters
from reprocess.storage.commit import Snapshot, Warehouse, open_warehouse
from reprocess.storage.hadoop import HadoopWarehouse
from reprocess.targets.base import RunContext
from warehouse_state import CFILE, IN_PLACE, assert_only_live_files, cycle_at, warehouse_state

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("cfile")]

def _uri(path: Path) -> str:
    return "cfile://" + str(path.resolve())


def test_the_commit_is_a_create_if_absent_and_the_loser_gets_a_conflict(spark, tmp_path):
    wh = open_warehouse(_uri(tmp_path / "wh"))
    assert isinstance(wh, HadoopWarehouse)
    assert wh.root == "cfile:" + str((tmp_path / "wh").resolve())
    base = wh.latest()
    assert base.version == 0
    wh.commit(base, Snapshot(runs=[{"run_id": "a", "as_of_ms": 1, "summary": {}}]))
    with pytest.raises(CommitConflictError, match="00000001.json already exists"):
        wh.commit(base, Snapshot(runs=[{"run_id": "b", "as_of_ms": 1, "summary": {}}]))
    latest = open_warehouse(_uri(tmp_path / "wh")).latest()
    assert (latest.version, [r["run_id"] for r in latest.runs]) == (1, ["a"])
    # the file is on the local disk under the URI's path, whole
    on_disk = json.loads((tmp_path / "wh" / "_snapshots" / "00000001.json").read_text())
    assert on_disk["runs"][0]["run_id"] == "a"


def test_a_replace_if_the_etag_matches_fails_once_the_file_changed(spark, tmp_path):
    wh = open_warehouse(_uri(tmp_path / "wh"))
    path = wh.path("x.json")
    assert wh.etag(path) is None
    assert wh._conditional_write(path, b"one", None)
    first = wh.etag(path)
    assert first is not None
    assert not wh._conditional_write(path, b"two", None)  # exists
    assert wh._conditional_write(path, b"two", first)
    assert wh.read_bytes(path) == b"two"
    assert not wh._conditional_write(path, b"three", first)  # stale ETag
    assert wh.read_bytes(path) == b"two"


def test_a_filesystem_without_conditional_creates_is_refused(spark, tmp_path):
    """viewfs over the local disk has no conditional create: the warehouse is refused, never run with a weaker
    commit."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.viewfs.mounttable.plainwh.link./wh", (tmp_path).resolve().as_uri())
    with pytest.raises(ConfigError, match="does not declare fs.option.create.conditional.overwrite"):
        open_warehouse("viewfs://plainwh/wh/x")
    with pytest.raises(ConfigError, match="no Hadoop FileSystem for nosuch://"):
        open_warehouse("nosuch://bucket/wh")


def test_the_lease_excludes_a_second_writer_and_is_taken_over_once_expired(spark, tmp_path, monkeypatch):
    uri = _uri(tmp_path / "wh")
    first, second = open_warehouse(uri), open_warehouse(uri)
    with first.lock("run-a"):
        holder = json.loads((tmp_path / "wh" / "_lock").read_text())
        assert holder["owner"] == "run-a"
        errors: list[Exception] = []

        def other() -> None:  # another thread: the lock's re-entrance is per thread
            try:
                with second.lock("run-b", wait_seconds=0.5):
                    pass
            except Exception as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert [type(e) for e in errors] == [CommitConflictError]
        assert "locked by run-a" in str(errors[0])
        first.check_lease()  # still held
    assert not (tmp_path / "wh" / "_lock").exists()  # released

    # the empty _lock a POSIX writer leaves (a warehouse copied to the store) is free; anything else that is no
    # lease blocks, and the error says what to do
    (tmp_path / "wh" / "_lock").write_text("")
    with second.lock("run-b"):
        pass
    (tmp_path / "wh" / "_lock").write_text("not a lease")
    with pytest.raises(CommitConflictError, match="a lease it cannot read .*_lock: delete it if no writer runs"):
        with second.lock("run-b"):
            pass
    (tmp_path / "wh" / "_lock").unlink()

    # a holder that died without releasing: its lease blocks until it expires, then the next writer takes it over
    dead = {"owner": "run-dead", "pid": 1, "host": "gone", "token": "t", "since": "2026-11-25T00:00:00Z",
            "expires_ms": int(time.time() * 1000) + 5000}  # the next attempt comes before it, however loaded
    (tmp_path / "wh" / "_lock").write_text(json.dumps(dead))
    with pytest.raises(CommitConflictError, match="locked by run-dead"):
        with second.lock("run-b"):
            pass
    with second.lock("run-b", wait_seconds=10):
        assert json.loads((tmp_path / "wh" / "_lock").read_text())["owner"] == "run-b"


def test_racing_writers_never_hold_the_lease_together_even_when_its_holder_died(spark, tmp_path, monkeypatch):
    """Six writers (each its own warehouse object and lease, on threads of this process) take the lease 4 times
    each, while a dead holder's lease is still running and renewals go on: one holder at a time."""
    # renewed every 1.33 s while held: a renewal late by more than 2.6 s (a loaded machine) would lose it
    monkeypatch.setenv("REPROCESS_LEASE_SECONDS", "4")
    uri = _uri(tmp_path / "wh")
    open_warehouse(uri)._conditional_write(str(open_warehouse(uri).path("_lock")), json.dumps(
        {"owner": "run-dead", "expires_ms": int(time.time() * 1000) + 1000}).encode(), None)
    events: list[str] = []
    errors: list[BaseException] = []
    guard = threading.Lock()

    def racer(name: str) -> None:
        wh = open_warehouse(uri)
        try:
            for i in range(4):
                with wh.lock(f"{name}-{i}", wait_seconds=120, poll=0.05):
                    with guard:
                        events.append(f"enter {name}")
                    time.sleep(1.6 if i == 0 else 0.05)  # the first hold outlives a renewal
                    wh.check_lease()
                    with guard:
                        events.append(f"leave {name}")
        except BaseException as exc:  # noqa: BLE001 (reported below, with the events)
            errors.append(exc)

    threads = [threading.Thread(target=racer, args=(f"w{k}",)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == [], errors
    assert len(events) == 6 * 4 * 2
    for enter, leave in zip(events[::2], events[1::2], strict=True):
        assert enter.startswith("enter "), events
        assert leave == "leave " + enter.split()[1], events
    assert not (tmp_path / "wh" / "_lock").exists()


def test_a_writer_whose_lease_was_taken_over_stops_before_its_next_write(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("REPROCESS_LEASE_SECONDS", "3")  # renewed every second: late by 2 s on a loaded machine at most
    uri = _uri(tmp_path / "wh")
    wh = open_warehouse(uri)
    with wh.lock("run-a"):
        time.sleep(4)  # renewed meanwhile: still ours
        wh.check_lease()
        wh.commit(wh.latest(), Snapshot())
        # someone replaces the lease (a writer that judged it expired): the renewal notices, the next write stops
        (tmp_path / "wh" / "_lock").write_text(json.dumps({"owner": "run-b", "expires_ms": 2 ** 60}))
        time.sleep(2.5)  # a renewal or two
        with pytest.raises(CommitConflictError, match="lease is lost"):
            wh.commit(wh.latest(), Snapshot())
    assert wh.latest().version == 1
    assert json.loads((tmp_path / "wh" / "_lock").read_text())["owner"] == "run-b"  # not deleted: not ours


def test_a_writer_whose_lease_is_lost_deletes_nothing_in_its_vacuum(spark, tmp_path, caplog):
    """A writer paused past its lease after its commit (a GC pause, a stopped VM) woke and vacuumed: it deleted the
    attempt folder of the writer that had taken the lease over, which then published nothing of it."""
    uri = _uri(tmp_path / "wh")
    wh = open_warehouse(uri)
    with wh.lock("run-a"):
        wh.commit(wh.latest(), Snapshot())
        theirs = tmp_path / "wh" / "ledger" / "run-b.attempt-0123456789ab" / "bucket=1"
        theirs.mkdir(parents=True)
        (theirs / "part-0.parquet").write_bytes(b"PAR1")
        wh._lease["lost"] = "taken over by run-b"  # what the renewal thread sets when it finds the lease replaced
        assert wh.vacuum(wh.latest()) == 0  # its commit stands: a warning, no error
        assert (theirs / "part-0.parquet").exists()
        assert "vacuum stopped, this writer's lease is lost" in caplog.text
        wh._lease["lost"] = None
        assert wh.vacuum(wh.latest()) == 1  # its own lease holding, the unreferenced folder goes
        assert not theirs.exists()


@pytest.mark.parametrize("point", ["after_stage", "after_publish"])
def test_a_writer_whose_lease_is_lost_writes_no_summary_nor_data_docs(spark, tmp_path, monkeypatch, point):
    """The run's summary.json (after the publish) and its Data Docs (at the gate, after the stage) are written
    outside the commit's condition: a writer paused past its lease there (while another resumed the run and
    committed it) wrote its own over the committed attempt's, which reports and the UI then read. It checks its
    lease first: the summary is not written, the Data Docs not copied (a warning), and the commit refused."""
    import reprocess.cycle.run as cycle_run

    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=40, hours=1, seed=5, malformed=0))
    lost: list[str] = []
    monkeypatch.setattr(cycle_run, "crash_point", lambda name: name == point and lost.append(name))
    held = HadoopWarehouse.check_lease

    def check_lease(self: HadoopWarehouse) -> None:
        if self._lease is not None and lost:
            self._lease["lost"] = "taken over by run-b"  # what the renewal thread sets when it finds it replaced
        held(self)

    monkeypatch.setattr(HadoopWarehouse, "check_lease", check_lease)
    with pytest.raises(CommitConflictError, match="lease is lost"):
        cycle_at(spark, landing, _uri(tmp_path / "wh"), "2026-11-21T01:00:00Z")
    assert lost == [point]
    assert list((tmp_path / "wh").rglob("summary.json")) == []
    if point == "after_stage":
        assert list((tmp_path / "wh").rglob("data_docs")) == []
    assert open_warehouse(_uri(tmp_path / "wh")).latest().version == 0


def test_cycles_on_a_hadoop_warehouse_equal_cycles_on_a_local_one(spark, tmp_path):
    """Three cycles (new failures, re-drives, dead letters) into a ``cfile:`` warehouse commit what the same cycles
    commit into a local one, and remove the same expired Data Docs (a retention of 0.2 days: 4.8 hours)."""
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=300, hours=2, seed=11, malformed=3))
    uri, local = _uri(tmp_path / "wh-uri"), tmp_path / "wh-local"
    for as_of in ("2026-11-21T01:00:00Z", "2026-11-21T02:00:00Z", "2026-11-21T06:00:00Z"):
        remote_summary = cycle_at(spark, landing, uri, as_of, data_docs_days=0.2)
        local_summary = cycle_at(spark, landing, local, as_of, data_docs_days=0.2)
        for key in ("balance", "dead_lettered", "due", "delivered", "rescheduled", "states"):
            assert remote_summary[key] == local_summary[key], (as_of, key)
        assert all(remote_summary["conservation"].values())
        assert remote_summary["validation"]["passed"]
    assert warehouse_state(spark, uri) == warehouse_state(spark, local)
    snap, local_snap = open_warehouse(uri).latest(), Warehouse(local).latest()
    assert snap.version == local_snap.version == 3
    assert {k: len(v) for k, v in snap.files.items()} == {k: len(v) for k, v in local_snap.files.items()}
    root = tmp_path / "wh-uri"
    # every listed file is where its attempt wrote it (the publish renamed nothing) and nothing else is left of
    # the runs: no file no snapshot names, nothing in _runs/; the lease is released, Data Docs were copied
    listed = [f for files in snap.files.values() for f in files]
    assert all((root / f).is_file() and IN_PLACE.match(f) for f in listed), listed[:5]
    assert_only_live_files(root)
    assert not (root / "_runs").exists() or not list((root / "_runs").iterdir())
    assert not (root / "_lock").exists()
    last = snap.runs[-1]
    docs = f"{open_warehouse(uri).root}/runs/{last['run_id']}/data_docs/index.html"
    assert last["summary"]["validation"]["data_docs"] == docs
    assert (root / "runs" / last["run_id"] / "data_docs" / "index.html").is_file()
    assert json.loads((root / "runs" / last["run_id"] / "summary.json").read_text())["due"] == last["summary"]["due"]
    # the first run's Data Docs expired at the last one (5 h later), on both; its summary stays
    first = snap.runs[0]["run_id"]
    for wh_root in (root, local):
        assert not (wh_root / "runs" / first / "data_docs").exists()
        assert (wh_root / "runs" / snap.runs[1]["run_id"] / "data_docs" / "index.html").is_file()
        assert (wh_root / "runs" / first / "summary.json").is_file()
    marks = [r.get("data_docs") for r in snap.runs]
    assert marks == [r.get("data_docs") for r in local_snap.runs] == [None, True, True]
    # a re-run of a committed as-of does nothing, as on a local warehouse
    assert cycle_at(spark, landing, uri, "2026-11-21T06:00:00Z")["already_committed"]

    # an operator's DLQ re-drive, then the cycle that re-drives those messages: the same on both warehouses
    request = RedriveRequest(address_pattern="#", max_messages=5, reset_deliveries=True)
    now = parse_instant("2026-11-21T06:30:00Z")
    audit = redrive_dead_letters(spark, uri, request, now, requested_by="test")
    assert audit["moved"] == 5
    on_local = redrive_dead_letters(spark, str(local), request, now, requested_by="test")
    # the same but for the GX gate's timing and Data Docs path: the same counts, passed
    assert _without_validation(audit) == _without_validation(on_local)
    assert audit["validation"]["counts"] == on_local["validation"]["counts"]
    docs = f"{open_warehouse(uri).root}/runs/{audit['request_id']}/data_docs/index.html"
    assert audit["validation"]["data_docs"] == docs
    assert (root / "runs" / audit["request_id"] / "data_docs" / "index.html").is_file()
    assert (root / "redrive_audit" / f"{audit['request_id']}.json").is_file()
    assert redrive_dead_letters(spark, uri, request, now)["already_applied"]
    later = "2026-11-21T07:00:00Z"
    assert cycle_at(spark, landing, uri, later)["due"] == cycle_at(spark, landing, local, later)["due"] >= 5
    assert warehouse_state(spark, uri) == warehouse_state(spark, local)
    assert_only_live_files(root)  # the re-drive's replaced ledger and DLQ files are gone once two commits passed


def _without_validation(audit: dict) -> dict:
    return {k: v for k, v in audit.items() if k != "validation"}


@pytest.mark.parametrize("point", ["after_prepare", "after_publish"])
def test_a_writer_killed_on_a_hadoop_warehouse_blocks_until_its_lease_expires_then_the_run_resumes(
        spark, tmp_path, point):
    """``kill -9`` of ``reprocess run`` at a crash point: its lease outlives it (flock would not), so the next run
    is refused naming the dead holder until the lease expires; then it resumes the prepared run, and the warehouse
    ends as an uninterrupted run leaves it."""
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=150, hours=3, seed=5, malformed=3))
    t1, t2 = "2026-11-21T01:00:00Z", "2026-11-21T02:30:00Z"
    target = "outbox" if point == "after_publish" else "python:reprocess.targets.examples:flaky"
    reference, root = tmp_path / "reference", tmp_path / "wh"
    cycle_at(spark, landing, reference, t1, target)
    shutil.copytree(reference, root)  # a local warehouse's files after the first run, read below through cfile:
    cycle_at(spark, landing, reference, t2, target)
    uri = _uri(root)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "REPROCESS_CRASH_AT": point, "REPROCESS_LEASE_SECONDS": "8",
           "PYSPARK_SUBMIT_ARGS": f"--conf spark.hadoop.fs.cfile.impl={CFILE} pyspark-shell"}
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "run", "--landing", str(landing), "--warehouse",
                           uri, "--as-of", t2, "--target", target, "--master", "local[2]"],
                          env=env, capture_output=True, text=True, timeout=600)
    killed_at = time.time()
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    wh = open_warehouse(uri)
    assert wh.latest().run("run-20261121T023000Z") is None  # the killed run committed nothing
    assert wh.read_prepared("run-20261121T023000Z")["due"] > 0
    holder = json.loads((root / "_lock").read_text())
    assert holder["owner"] == "run-20261121T023000Z"
    with pytest.raises(CommitConflictError, match="locked by run-20261121T023000Z"):
        cycle_at(spark, landing, uri, t2, target)
    # the lease of REPROCESS_LEASE_SECONDS, taken or renewed before the kill (a lease, not a timing of ours)
    assert holder["expires_ms"] <= killed_at * 1000 + 8_000
    time.sleep(max(0.0, holder["expires_ms"] / 1000 - time.time()) + 0.5)
    summary = cycle_at(spark, landing, uri, t2, target)  # takes the expired lease over, resumes and commits
    assert all(summary["conservation"].values())
    assert warehouse_state(spark, uri) == warehouse_state(spark, reference)
    assert not list((root / "_runs").iterdir())
    assert not (root / "_lock").exists()
    assert_only_live_files(root)  # the killed attempt's files, written in place but never committed, are gone


def test_run_names_a_scheme_this_spark_has_no_filesystem_for(spark, tmp_path, capsys):
    """``reprocess run`` with a warehouse on ``s3a://`` where the image lacks the connector: exit 3, the reason.
    Through the CLI's entry point in this process: the check is the driver's, whichever process it runs in."""
    code = main(["run", "--landing", str(tmp_path), "--warehouse", "s3a://bucket/wh", "--as-of",
                 "2026-11-21T10:00:00Z", "--master", "local[2]"])
    err = capsys.readouterr().err
    assert code == ConfigError.exit_code, err[-2000:]
    assert "warehouse s3a://bucket/wh: this Spark has no Hadoop FileSystem for s3a://" in err
    assert "connector jars" in err


def test_an_attempt_writes_into_its_datasets_folder_and_a_stage_uri_keeps_its_bucket(spark, tmp_path):
    """Where an attempt writes: ``<dataset>/<run_id>.<attempt>/`` on a Hadoop warehouse (in place), its stage on a
    local one; and a target's paths under the stage of an ``s3a://`` warehouse keep ``//bucket``."""
    wh = open_warehouse(_uri(tmp_path / "wh"))
    stage = wh.new_stage("run-20261121T010000Z")
    staged = wh.staged("run-20261121T010000Z", stage, "dlq")
    assert staged == f"{wh.root}/dlq/run-20261121T010000Z.{stage.name}"
    assert IN_PLACE.match(f"{wh.relative(staged)}/address=a/dt=2026-11-21/part-00000-x.c000.snappy.parquet")
    local = Warehouse(tmp_path / "local")
    local_stage = local.new_stage("run-20261121T010000Z")
    assert local.staged("run-20261121T010000Z", local_stage, "dlq") == local_stage / "dlq"
    ctx = RunContext("run-1", 0, "s3a://bucket/wh/_runs/run-1/stage/attempt-0123456789ab")
    assert ctx.stage("outcomes", "target=0") == "s3a://bucket/wh/_runs/run-1/stage/attempt-0123456789ab/outcomes/target=0"


def test_a_prepared_run_on_a_hadoop_warehouse_is_listed_and_abandoned_under_the_lease(spark, tmp_path, monkeypatch,
                                                                                        capsys):
    """``reprocess prepared list|abandon`` on a warehouse at a URI: a run prepared with a target whose password is
    gone is listed (without Spark, whoever holds the lease), not abandoned while another writer holds the lease nor
    once this writer's lease is lost, abandoned through the session's driver (also when stopped between its record
    and its folder, asked again), and the next cycle then commits what an uninterrupted cycle through today's target
    commits. Before, both commands refused every URI: such a run blocked the warehouse until its old target was
    written back."""
    import reprocess.cycle.run as cycle_run
    from reprocess import cli

    class Stopped(Exception):
        pass

    def stop_after_prepare(name: str) -> None:
        if name == "after_prepare":
            raise Stopped(name)

    def prepared_list() -> list[dict]:
        assert cli.main(["prepared", "list", "--warehouse", uri, "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)["prepared"]

    monkeypatch.delenv("REPROCESS_SPARK_REMOTE", raising=False)  # this process's driver, not a Connect server's
    landing, root, reference = tmp_path / "landing", tmp_path / "wh", tmp_path / "reference"
    write_landing(GenerateOptions(out=landing, messages=40, hours=1, seed=3))
    uri, as_of, run_id = _uri(root), "2026-11-21T01:30:00Z", "run-20261121T013000Z"
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop_after_prepare)
        with pytest.raises(Stopped):
            cycle_at(spark, landing, uri, as_of, "amqp://u:s3cret@127.0.0.1:1/")
    with pytest.raises(ConfigError, match=rf"prepared abandon --warehouse {uri} {run_id}"):
        cycle_at(spark, landing, uri, as_of, "outbox")
    [row] = prepared_list()
    assert (row["run_id"], row["target"], row["redrive"]) == (run_id, "amqp://u:***@127.0.0.1:1/", "not finished")
    assert row["due"] > 0

    # another writer's live lease: refused, nothing removed
    live = {"owner": "run-other", "pid": 1, "host": "elsewhere", "token": "t", "since": "2026-11-25T00:00:00Z",
            "expires_ms": int(time.time() * 1000) + 60_000}
    (root / "_lock").write_text(json.dumps(live))
    assert cli.main(["prepared", "abandon", "--warehouse", uri, run_id]) == CommitConflictError.exit_code
    assert "locked by run-other" in capsys.readouterr().err
    assert (root / "_runs" / run_id / "prepared.json").is_file()
    assert [r["run_id"] for r in prepared_list()] == [run_id]  # listing takes no lease
    # nor Spark: a process of its own lists it through pyarrow (a driver of its own would know no cfile: scheme)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "REPROCESS_SPARK_REMOTE")}
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "prepared", "list", "--warehouse", uri, "--format",
                           "json"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["run_id"] for r in json.loads(proc.stdout)["prepared"]] == [run_id]
    (root / "_lock").unlink()

    # this writer's lease lost once taken (as its renewal finds when another writer took it over): nothing removed
    def losing(self, rid):
        self._lease["lost"] = "another writer took the lease over"
        return read_prepared(self, rid)

    read_prepared = HadoopWarehouse.read_prepared
    with monkeypatch.context() as m:
        m.setattr(HadoopWarehouse, "read_prepared", losing)
        assert cli.main(["prepared", "abandon", "--warehouse", uri, run_id]) == CommitConflictError.exit_code
    assert "lease is lost (another writer took the lease over)" in capsys.readouterr().err
    assert (root / "_runs" / run_id / "prepared.json").is_file()
    (root / "_lock").unlink()  # a lost lease is the other writer's to release: it finished

    with monkeypatch.context() as m:  # stopped after its record was removed, before its folder was
        m.setattr(HadoopWarehouse, "clear_run", lambda self, run_id: None)
        assert cli.main(["prepared", "abandon", "--warehouse", uri, run_id]) == 0
    assert json.loads(capsys.readouterr().out)["abandoned"]["run_id"] == run_id
    assert prepared_list() == []
    assert (root / "_runs" / run_id).is_dir()
    assert not (root / "_runs" / run_id / "prepared.json").exists()
    assert cli.main(["prepared", "abandon", "--warehouse", uri, run_id]) == 0  # asked again: the folder left goes
    assert json.loads(capsys.readouterr().out) == {"abandoned": None, "removed_folder_of": run_id}
    assert not (root / "_runs" / run_id).exists()
    assert not (root / "_lock").exists()  # the lease was released

    summary = cycle_at(spark, landing, uri, as_of, "outbox")
    assert (summary["run_id"], summary["due"], summary["delivered"]) == (run_id, row["due"], row["due"])
    cycle_at(spark, landing, reference, as_of, "outbox")
    assert warehouse_state(spark, uri) == warehouse_state(spark, reference)

    nowhere = tmp_path / "nowhere"
    assert cli.main(["prepared", "abandon", "--warehouse", _uri(nowhere), run_id]) == ConfigError.exit_code
    assert "is not a warehouse" in capsys.readouterr().err
    assert not nowhere.exists()  # no lease taken in a mistyped place
