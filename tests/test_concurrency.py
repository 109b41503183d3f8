"""Two writers on one warehouse at once: the writer lock admits one, the other fails cleanly or waits.

The lock is an exclusive ``flock`` on ``<warehouse>/_lock`` (docs/adr/0003-commit-protocol.md). These tests race
real processes for it, kill a holder with SIGKILL, and run a scheduled cycle and a dead-letter re-drive through
the CLI against the same warehouse at the same time, on a local warehouse and on a warehouse URI (a lease).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from reprocess.cli import parse_instant
from reprocess.errors import CommitConflictError
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.redrive import RedriveRequest, redrive_dead_letters
from reprocess.storage.commit import Warehouse
from warehouse_state import CFILE, assert_committed_cleanly, cycle_at, warehouse_state

TESTS = Path(__file__).resolve().parent
T1, T2 = "2026-11-21T01:00:00Z", "2026-11-21T02:30:00Z"
GATED = "python:gated_target:gated"

_HOLDER = textwrap.dedent("""
    import sys, time
    from reprocess.storage.commit import Warehouse
    with Warehouse(sys.argv[1]).lock(owner="holder-run"):
        print("locked", flush=True)
        time.sleep(600)
""")

_RACER = textwrap.dedent("""
    import os, sys, time
    from reprocess.storage.commit import Warehouse
    wh, log, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(rounds):
        with Warehouse(wh).lock(owner=f"racer-{os.getpid()}-{i}", wait_seconds=120, poll=0.01):
            with open(log, "a") as fh:
                fh.write(f"enter {os.getpid()}\\n")
            time.sleep(0.05)
            with open(log, "a") as fh:
                fh.write(f"leave {os.getpid()}\\n")
""")


# A child that logs what the lock does to stderr, where :func:`_waiting` reads it.
_LOGGING = ("import logging, sys\nlogging.basicConfig(level=logging.INFO, stream=sys.stderr, format='%(message)s')\n"
            "from reprocess.storage.commit import Warehouse\n")


def _waiting(child: subprocess.Popen) -> str:
    """The line in which ``child`` says it waits for the lock (its stderr read up to it; "" if it ends first)."""
    for line in child.stderr:
        if "waiting up to" in line:
            return line
    return ""


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.unit
def test_a_second_writer_fails_at_once_naming_the_holder_and_the_holder_may_re_enter(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    with wh.lock(owner="run-20261121T010000Z"):
        with wh.lock(owner="run-20261121T010000Z"):  # the CLI holds it, then the run takes it again
            pass
        other = subprocess.run([sys.executable, "-c", "import sys\nfrom reprocess.storage.commit import Warehouse\n"
                                "with Warehouse(sys.argv[1]).lock(owner='redrive-abc'):\n    pass", str(wh.root)],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode != 0
        assert re.search(r"CommitConflictError: warehouse .* is locked by run-20261121T010000Z "
                         rf"\(pid {os.getpid()} on .+, since 20\d\d-", other.stderr), other.stderr
        threaded: list[BaseException] = []

        def other_thread() -> None:
            try:
                with wh.lock(owner="thread"):
                    pass
            except CommitConflictError as exc:
                threaded.append(exc)
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert len(threaded) == 1, "another thread of the same process got the held lock"
    with wh.lock(owner="redrive-abc"):  # released on exit
        pass


@pytest.mark.unit
def test_a_waiting_writer_gets_the_lock_when_the_holder_releases_it(tmp_path):
    holder = _python(_HOLDER, str(tmp_path / "wh"))
    assert holder.stdout.readline().strip() == "locked"
    waiter = _python(_LOGGING + "with Warehouse(sys.argv[1]).lock(owner='waiter', wait_seconds=60):\n"
                     "    print('got it')", str(tmp_path / "wh"))
    assert "waiting up to 60s for the warehouse lock held by holder-run" in _waiting(waiter)
    assert waiter.poll() is None, "the waiter did not wait for the holder"
    holder.terminate()
    out, err = waiter.communicate(timeout=60)
    holder.wait(timeout=10)
    assert waiter.returncode == 0, err
    assert out.strip() == "got it"


@pytest.mark.unit
def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(tmp_path):
    holder = _python(_HOLDER, str(tmp_path / "wh"))
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(CommitConflictError, match=f"holder-run \\(pid {holder.pid} "):
        with Warehouse(tmp_path / "wh").lock(owner="next"):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with Warehouse(tmp_path / "wh").lock(owner="next"):  # no wait, no manual unlock
        pass


@pytest.mark.unit
def test_racing_writers_never_hold_the_lock_together_even_when_its_holder_dies(tmp_path):
    """Eight processes race for the lock 5 times each while the first holder is killed: one holder at a time."""
    wh, log = tmp_path / "wh", tmp_path / "holders.log"
    holder = _python(_HOLDER, str(wh))
    assert holder.stdout.readline().strip() == "locked"
    racers = [_python(_LOGGING + _RACER, str(wh), str(log), "5") for _ in range(8)]
    for r in racers:  # every racer is polling the held lock
        assert "waiting up to 120s for the warehouse lock held by holder-run" in _waiting(r)
    holder.send_signal(signal.SIGKILL)
    for r in racers:
        _, err = r.communicate(timeout=120)
        assert r.returncode == 0, err
    events = log.read_text().split("\n")[:-1]
    assert len(events) == 8 * 5 * 2
    for enter, leave in zip(events[::2], events[1::2], strict=True):
        assert enter.startswith("enter "), events
        assert leave == "leave " + enter.split()[1], events


# -- a scheduled cycle and a dead-letter re-drive through the CLI on one warehouse ------------------------------

@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("landing")
    write_landing(GenerateOptions(out=root, messages=120, hours=3, seed=23, malformed=2))
    return root


@pytest.fixture(scope="module")
def after_t1(spark, landing, tmp_path_factory) -> Path:
    """A warehouse whose first cycle dead-lettered the poison messages."""
    wh = tmp_path_factory.mktemp("t1") / "wh"
    cycle_at(spark, landing, wh, T1)
    return wh


@pytest.fixture(scope="module")
def serial_reference(spark, landing, after_t1, tmp_path_factory) -> tuple[dict, int]:
    """The same cycle, then the same re-drive, one after the other: the warehouse's state and how many moved."""
    ref = tmp_path_factory.mktemp("ref") / "wh"
    shutil.copytree(after_t1, ref)
    cycle_at(spark, landing, ref, T2, target="python:reprocess.targets.examples:always_ok")
    audit = redrive_dead_letters(spark, str(ref), RedriveRequest(address_pattern="#"), parse_instant(T2),
                                 requested_by="test")
    return warehouse_state(spark, ref), audit["moved"]


def _cli(args: list[str], env: dict[str, str], stderr=subprocess.PIPE) -> subprocess.Popen:
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "reprocess.cli", *args, "--master", "local[2]"], env=env,
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, log: Path, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {path.name}: {log.read_text()[-3000:]}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


# The cfile: variant runs in `make test-slow`: a lease's exclusion, its holder named to the refused writer and its
# wait are tests/test_object_store.py's, in one process (CI near its 30 minutes: bench/RESULTS.md, eighty-third run)
@pytest.mark.spark
@pytest.mark.parametrize("kind", ["local", pytest.param("cfile", marks=pytest.mark.slow)])
def test_a_redrive_during_a_scheduled_cycle_fails_cleanly_or_waits_and_the_warehouse_stays_whole(
        spark, landing, after_t1, serial_reference, tmp_path, kind):
    """Through the CLI, on a local warehouse (flock) and on a warehouse URI (``cfile:``, the tests' object store:
    the lease in tests/test_object_store.py)."""
    ref_state, ref_moved = serial_reference
    assert ref_moved > 0, "the first cycle dead-lettered nothing: the test would prove nothing"
    wh = tmp_path / "wh"
    shutil.copytree(after_t1, wh)
    uri, env, lock = str(wh), {}, "lock"
    if kind == "cfile":
        uri, lock = f"cfile://{wh}", "lease"
        env = {"PYSPARK_SUBMIT_ARGS": f"--conf spark.hadoop.fs.cfile.impl={CFILE} pyspark-shell"}
    gate = tmp_path / "gate"
    cycle_log = tmp_path / "cycle.err"
    with open(cycle_log, "w", encoding="utf-8") as err_file:  # a file, not a pipe nobody reads while it runs
        cycle = _cli(["run", "--landing", str(landing), "--warehouse", uri, "--as-of", T2, "--target", GATED,
                      "--format", "json"], {**env, "REPROCESS_TEST_GATE": str(gate)}, stderr=err_file)
    _wait_for(Path(str(gate) + ".entered"), cycle, cycle_log)  # the cycle is re-driving: it holds the lock
    if kind == "cfile":
        assert json.loads((wh / "_lock").read_text())["owner"] == "run-20261121T023000Z"  # a lease, not a flock
    redrive = ["redrive", "--warehouse", uri, "--address", "#", "--now", T2, "--requested-by", "test"]

    loser = _cli(redrive, env)
    _, err = loser.communicate(timeout=300)
    assert loser.returncode == CommitConflictError.exit_code, err[-3000:]
    assert "locked by run-20261121T023000Z (pid" in err, err[-3000:]
    assert "--lock-wait" in err, err[-3000:]
    assert "Traceback" not in err

    waiter_log = tmp_path / "waiter.err"
    with open(waiter_log, "w", encoding="utf-8") as err_file:
        waiter = _cli([*redrive, "--lock-wait", "300"], env, stderr=err_file)
    waiting = f"waiting up to 300s for the warehouse {lock} held by run-20261121T023000Z"
    deadline = time.monotonic() + 300
    while waiting not in waiter_log.read_text():
        assert waiter.poll() is None, waiter_log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the waiter never reached the lock"
        time.sleep(0.2)
    assert cycle.poll() is None, "the cycle finished before the test opened its gate"
    gate.touch()
    out, _ = cycle.communicate(timeout=300)
    assert cycle.returncode == 0, cycle_log.read_text()[-3000:]
    assert json.loads(out)["run_id"] == "run-20261121T023000Z"
    wout, _ = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, waiter_log.read_text()[-3000:]
    assert json.loads(wout)["moved"] == ref_moved

    assert_committed_cleanly(wh)
    assert warehouse_state(spark, wh) == ref_state
    if kind == "cfile":
        assert not (wh / "_lock").exists()  # both released their leases
