"""A cycle killed at each crash point is finished by the next call: nothing lost, nothing doubled, deliveries counted.

Random kills of the spark-submit driver are in tests/test_fault_injection.py.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from reprocess.cycle.run import CRASH_POINTS
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.storage.commit import Warehouse
from warehouse_state import FLAKY, assert_committed_cleanly, cli_run, cycle_at, warehouse_state

pytestmark = pytest.mark.spark

T1, T2 = "2026-11-21T01:00:00Z", "2026-11-21T02:30:00Z"


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
def reference(spark, landing, tmp_path_factory, after_t1):
    """The uninterrupted second run, once per target."""
    refs = {}
    for target in (FLAKY, "outbox"):
        wh = tmp_path_factory.mktemp("ref") / "wh"
        shutil.copytree(after_t1[target], wh)
        cycle_at(spark, landing, wh, T2, target)
        refs[target] = warehouse_state(spark, wh)
    return refs


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
