"""A disk that fills up during a run: the run stops with exit code 14 and a message that says a disk is full, which file
it was writing and where to free space (:class:`reprocess.errors.DiskFullError`), not a Java stack trace; nothing is
committed, and once there is space the next run commits what a run on a roomy disk commits.

The disk fills for real: the warehouse is a tmpfs of 8 MB (mounting it needs root, as installing the suite's services
does), all but 400 KB of it taken by a file before the run.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest

from reprocess.errors import DiskFullError
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.sparkutil import local_dir_source, no_space_advice, no_space_evidence, spark_local_dir
from reprocess.storage.commit import Warehouse
from warehouse_state import assert_committed_cleanly, assert_only_live_files, cli_run, cycle_at, warehouse_state

AS_OF = "2026-11-21T03:00:00Z"
RUN = "run-20261121T030000Z"


def test_the_advice_names_where_spark_writes_and_over_connect_the_servers_disks():
    local = no_space_advice("java.io.IOException: No space left on device", "/data/spark (spark.local.dir)")
    assert local.startswith("a disk is full (java.io.IOException: No space left on device). Nothing is lost")
    assert "Spark's local directory, /data/spark (spark.local.dir), where Spark spills" in local
    assert "the Spark Connect server's disks" in no_space_advice("x", None)
    # what set the directories, in Spark's order: a YARN container's, the environment's, the setting, the JVM's
    env = {"CONTAINER_ID": "c1", "SPARK_EXECUTOR_DIRS": "/w", "SPARK_LOCAL_DIRS": "/l"}
    assert local_dir_source(env.get, lambda key: True) == "YARN's directories of the container"
    del env["CONTAINER_ID"]
    assert local_dir_source(env.get, lambda key: True) == "$SPARK_EXECUTOR_DIRS"
    del env["SPARK_EXECUTOR_DIRS"]
    assert local_dir_source(env.get, lambda key: True) == "$SPARK_LOCAL_DIRS"
    assert local_dir_source({}.get, {"spark.local.dir"}.__contains__) == "spark.local.dir"
    assert local_dir_source({}.get, set().__contains__).startswith("java.io.tmpdir: neither")


@pytest.mark.spark
def test_the_advice_names_the_local_directories_of_the_tests_own_driver(spark):
    """The tests' session sets no local directory: Spark's is the JVM's temporary directory, or the environment's."""
    dirs, source = spark_local_dir(spark).split(" (", 1)
    if os.environ.get("SPARK_LOCAL_DIRS"):
        assert (dirs, source) == (os.environ["SPARK_LOCAL_DIRS"], "$SPARK_LOCAL_DIRS)")
    else:
        assert dirs == spark._jvm.java.lang.System.getProperty("java.io.tmpdir")
        assert source.startswith("java.io.tmpdir: neither")


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MB tmpfs, mounted for the test and unmounted after."""
    assert os.geteuid() == 0, "mounting a tmpfs needs root"
    disk = tmp_path / "wh"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


@pytest.mark.spark
def test_a_run_whose_disk_fills_says_so_and_after_freeing_space_the_next_run_commits_everything(spark, tmp_path,
                                                                                                small_disk):
    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=2000, hours=1, seed=11, malformed=0))
    filler = small_disk / "filler"
    filler.write_bytes(bytes(shutil.disk_usage(small_disk).free - (400 << 10)))

    full = cli_run(landing, small_disk, AS_OF)
    assert full.returncode == DiskFullError.exit_code, full.stderr[-3000:]
    said = [line for line in full.stderr.splitlines() if line.startswith("reprocess: no_space: ")]
    assert len(said) == 1, full.stderr[-3000:]
    assert said[0].startswith("reprocess: no_space: a disk is full (java.io.IOException: No space left on device, "
                              f"while writing file:{small_disk}/"), said[0]
    for words in ("Nothing is lost", "Free space", "spark.local.dir"):
        assert words in said[0], said[0]
    assert "\tat org.apache" not in full.stderr.split(said[0])[1], full.stderr[-3000:]  # no stack trace after it
    assert Warehouse(small_disk).latest().run(RUN) is None  # nothing committed

    filler.unlink()
    summary = cycle_at(spark, landing, small_disk, AS_OF, target="outbox")  # the next run, in this process
    assert summary["run_id"] == RUN
    assert all(summary["conservation"].values()), summary["conservation"]
    roomy = tmp_path / "roomy"  # the same run in this process, on an ordinary disk
    cycle_at(spark, landing, roomy, AS_OF, target="outbox")
    assert warehouse_state(spark, small_disk) == warehouse_state(spark, roomy)
    assert_committed_cleanly(small_disk)
    assert_only_live_files(small_disk)


def test_a_python_write_out_of_space_is_evidence_and_other_errors_are_not(small_disk):
    """The commit's own writes (snapshots, the manifest, the lock) are Python's: a full disk raises OSError(ENOSPC)."""
    path = small_disk / "00000002.json"
    with pytest.raises(OSError, match="No space left on device") as full:
        path.write_bytes(bytes(shutil.disk_usage(small_disk).free + (1 << 20)))
    assert no_space_evidence(full.value) == "OSError: [Errno 28] No space left on device"  # a write names no file
    assert no_space_evidence(ValueError("No space left on device")) is None  # neither Spark's nor an OSError
    assert no_space_evidence(OSError(errno.EACCES, "Permission denied")) is None
