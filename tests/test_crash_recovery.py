"""A cycle killed at each crash point is finished by the next call: nothing lost, nothing doubled, deliveries counted.
A DLQ re-drive killed at each of its own is settled by the next writer and answered when asked again.

Random kills of the spark-submit driver are in tests/test_fault_injection.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reprocess import redrive
from reprocess.cli import parse_instant
from reprocess.cycle.run import CRASH_POINTS
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.storage.commit import Warehouse
from warehouse_state import (
    FLAKY,
    assert_committed_cleanly,
    assert_only_live_files,
    cli_run,
    cycle_at,
    warehouse_state,
)

pytestmark = pytest.mark.spark

T1, T2 = "2026-11-21T01:00:00Z", "2026-11-21T02:30:00Z"
ASKED = "2026-11-21T01:10:00Z"  # when the DLQ re-drive is asked, between the two cycles


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("landing")
    write_landing(GenerateOptions(out=root, messages=150, hours=3, seed=5, malformed=3))
    return root


@pytest.fixture(scope="module")
def after_t1(spark, landing, tmp_path_factory) -> dict[str, Path]:
    """A warehouse after the first run, per target, copied by each test (saves a run per test)."""
    out = {}
    for target in (FLAKY, "outbox"):
        wh = tmp_path_factory.mktemp("t1")
        cycle_at(spark, landing, wh, T1, target)
        out[target] = wh
    return out


@pytest.fixture(scope="module")
def after_t2(spark, landing, tmp_path_factory, after_t1) -> dict[str, Path]:
    """The warehouse after the uninterrupted second run, per target (not to be written to: copy it)."""
    out = {}
    for target in (FLAKY, "outbox"):
        wh = tmp_path_factory.mktemp("ref") / "wh"
        shutil.copytree(after_t1[target], wh)
        cycle_at(spark, landing, wh, T2, target)
        out[target] = wh
    return out


@pytest.fixture(scope="module")
def reference(spark, after_t2):
    """The state after the uninterrupted second run, per target."""
    return {target: warehouse_state(spark, wh) for target, wh in after_t2.items()}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_at_each_step_then_rerun_ends_in_the_uninterrupted_state(spark, landing, tmp_path, reference, point,
                                                                      after_t1):
    target = "outbox" if point == "after_publish" else FLAKY
    wh = tmp_path / "wh"
    shutil.copytree(after_t1[target], wh)
    proc = cli_run(landing, wh, T2, "--target", target, env={"REPROCESS_CRASH_AT": point})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert Warehouse(wh).latest().run("run-20261121T023000Z") is None  # nothing committed by the killed run
    prepared = Warehouse(wh).read_prepared("run-20261121T023000Z")
    assert prepared is not None
    assert prepared["due"] > 0
    summary = cycle_at(spark, landing, wh, T2, target)  # the next call resumes and commits
    assert all(summary["conservation"].values())
    assert warehouse_state(spark, wh) == reference[target]
    assert_committed_cleanly(wh)


def test_a_run_killed_between_its_commit_and_clearing_its_folder_has_it_cleared_by_the_next_call(spark, landing,
                                                                                                 tmp_path, after_t1):
    """A committed run is never resumed, so its folder in _runs/ (its prepared record, inflight list and re-drive
    outcomes) stayed for good when the run stopped before clearing it."""
    wh = tmp_path / "wh"
    shutil.copytree(after_t1[FLAKY], wh)
    proc = cli_run(landing, wh, T2, "--target", FLAKY, env={"REPROCESS_CRASH_AT": "after_commit"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert Warehouse(wh).latest().run("run-20261121T023000Z") is not None
    assert Warehouse(wh).run_ids("run-") == ["run-20261121T023000Z"]
    assert Warehouse(wh).prepared_runs() == []  # committed: not resumed
    summary = cycle_at(spark, landing, wh, T2, FLAKY)
    assert summary["already_committed"]
    assert_committed_cleanly(wh)


def test_a_removed_policy_target_with_a_password_no_delivery_went_to_does_not_block_the_resume(spark, tmp_path):
    """A run killed after its prepare recorded a policy's own target whose password is not stored. The target was
    then removed from the policy file: the resume stopped (exit 3) on every run, though none of its deliveries was
    recorded for that target. It resumes, through the targets its deliveries were recorded for."""
    import json

    from reprocess.cli import parse_instant
    from reprocess.cycle.run import CycleOptions, run_cycle
    from reprocess.policy import parse_policies
    from reprocess.storage.read import read_dataset

    body = ('policies:\n  - match: "orders.#"\n    profile: stepped\n    settings: {delays: [1m], max_deliveries: 5}\n'
            '  - match: "billing.#"\n    profile: stepped\n    settings: {delays: [1m], max_deliveries: 5}\n')
    config = tmp_path / "policies.yaml"
    config.write_text(body + "    target: amqp://guest:guest@127.0.0.1:5672/%2F\n")
    folder = tmp_path / "landing" / "dt=2026-11-21" / "hour=10"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text(json.dumps({"message_id": "m", "address": "orders.created", "payload": "p",
                                                "failed_at": "2026-11-21T10:00:00Z"}) + "\n")
    wh = tmp_path / "wh"
    proc = cli_run(tmp_path / "landing", wh, "2026-11-21T10:05:00Z", "--config", str(config), "--target", "outbox",
                   env={"REPROCESS_CRASH_AT": "after_prepare"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    prepared = Warehouse(wh).read_prepared("run-20261121T100500Z")
    assert prepared["policy_targets"] == {"billing.#": "amqp://guest:***@127.0.0.1:5672/%2F"}
    summary = run_cycle(spark, CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(wh),
                                            policies=parse_policies(body), target="outbox",
                                            as_of_ms=parse_instant("2026-11-21T10:05:00Z")))
    assert (summary["run_id"], summary["due"], summary["delivered"]) == ("run-20261121T100500Z", 1, 1)
    assert [r.message_id for r in read_dataset(spark, str(wh), "outbox").collect()] == ["m"]
    assert_committed_cleanly(wh)


def _redrive_in_process(spark, wh: Path) -> dict:
    """The request ``reprocess redrive --warehouse wh --now ASKED --requested-by op`` makes, in this process."""
    return redrive.redrive_dead_letters(spark, str(wh), redrive.RedriveRequest(), parse_instant(ASKED),
                                        requested_by="op")


@pytest.fixture(scope="module")
def redrive_references(spark, tmp_path_factory, landing, after_t1, after_t2, reference) -> dict:
    """Uninterrupted: the re-drive, then the cycle at T2 (``moved``, ``then_cycle``); the cycle at T2 without it
    (``cycle_only``), then the same request asked (``cycle_then_asked``)."""
    out = {}
    wh = tmp_path_factory.mktemp("redrive-ref") / "wh"
    shutil.copytree(after_t1["outbox"], wh)
    audit = _redrive_in_process(spark, wh)
    out["moved"], out["messages"], out["request_id"] = audit["moved"], audit["messages"], audit["request_id"]
    cycle_at(spark, landing, wh, T2, "outbox")
    out["then_cycle"] = warehouse_state(spark, wh)
    wh = tmp_path_factory.mktemp("redrive-ref") / "wh"
    shutil.copytree(after_t2["outbox"], wh)  # the cycle at T2 without the re-drive
    out["cycle_only"] = reference["outbox"]
    assert _redrive_in_process(spark, wh)["moved"] > 0  # the cycle dead-lettered more since
    out["cycle_then_asked"] = warehouse_state(spark, wh)
    return out


@pytest.mark.parametrize("point", redrive.CRASH_POINTS)
def test_a_redrive_killed_at_each_step_is_settled_by_the_next_cycle_and_answered_when_asked_again(
        spark, landing, tmp_path, after_t1, redrive_references, point):
    """``reprocess redrive`` killed (SIGKILL) after staging, after publishing its files, after its commit and after
    its audit record. Not asked again, the next cycle settles it: one that committed gets its audit record, with the
    ids it moved, and the warehouse is the uninterrupted re-drive's then the cycle's; one that did not has moved
    nothing, and its stage and published files are gone. Asked again, it answers with its record (committed) or
    applies (not): each message moved once, no file left that no snapshot names."""
    ref = redrive_references
    assert ref["moved"] > 0, "the first cycle dead-lettered nothing to re-drive"
    wh = tmp_path / "wh"
    shutil.copytree(after_t1["outbox"], wh)
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "redrive", "--warehouse", str(wh), "--now", ASKED,
                           "--requested-by", "op", "--master", "local[2]"],
                          env={**os.environ, "REPROCESS_CRASH_AT": point, "PYSPARK_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    committed = point in ("redrive_after_commit", "redrive_after_record")
    assert [r["run_id"] for r in Warehouse(wh).latest().runs if r.get("kind") == "redrive"] == (
        [ref["request_id"]] if committed else [])
    assert (wh / "_runs" / ref["request_id"]).is_dir()  # what the killed re-drive left

    summary = cycle_at(spark, landing, wh, T2, "outbox")  # the next writer, the request not asked again
    assert all(summary["conservation"].values())
    assert not (wh / "_runs" / ref["request_id"]).exists()
    record = wh / "redrive_audit" / f"{ref['request_id']}.json"
    if committed:
        assert warehouse_state(spark, wh) == ref["then_cycle"]
        assert (json.loads(record.read_text())["messages"], json.loads(record.read_text())["requested_by"]) == (
            ref["messages"], "op")
    else:
        assert warehouse_state(spark, wh) == ref["cycle_only"]
        assert not record.exists()

    again = _redrive_in_process(spark, wh)
    assert again["request_id"] == ref["request_id"]
    assert again.get("already_applied", False) == committed
    assert warehouse_state(spark, wh) == (ref["then_cycle"] if committed else ref["cycle_then_asked"])
    assert_committed_cleanly(wh)
    assert_only_live_files(wh)
    assert not [p.name for p in (wh / "_runs").iterdir() if p.name.startswith("redrive-")]
