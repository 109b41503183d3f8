"""A disk that fills up during a run: the run stops with exit code 14 and a message that says a disk is full, which file
it was writing and where to free space (:class:`reprocess.errors.DiskFullError`), not a Java stack trace; nothing is
committed, and once there is space the next run commits what a run on a roomy disk commits.

The disk fills for real: the warehouse is a tmpfs of 8 MB (mounting it needs root, as installing the suite's services
does), all but 400 KB of it taken by a file before the run.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess

import pytest

from reprocess.errors import DiskFullError
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.sparkutil import no_space_advice, no_space_evidence, spark_local_dir
from reprocess.storage.commit import Warehouse
from warehouse_state import assert_committed_cleanly, assert_only_live_files, cli_run, cycle_at, warehouse_state

AS_OF = "2026-11-21T03:00:00Z"
RUN = "run-20261121T030000Z"


def test_the_advice_names_where_spark_writes_and_over_connect_the_servers_disks():
    settings = {"spark.local.dir": "/data/spark"}
    tmpdir = {"java.io.tmpdir": "/var/tmp"}
    where = spark_local_dir(settings.get, tmpdir.get, env={})
    assert where == "/data/spark (spark.local.dir)"
    local = no_space_advice("java.io.IOException: No space left on device", where)
    assert local.startswith("a disk is full (java.io.IOException: No space left on device). Nothing is lost")
    assert "Spark's local directory, /data/spark (spark.local.dir), where Spark spills" in local
    assert "the Spark Connect server's disks" in no_space_advice("x", None)
    # Spark's order: the executor's and the local directories of the environment before the setting, then the JVM's
    assert spark_local_dir(settings.get, tmpdir.get, env={"SPARK_LOCAL_DIRS": "/ssd1,/ssd2"}) == \
        "/ssd1,/ssd2 ($SPARK_LOCAL_DIRS)"
    assert spark_local_dir(settings.get, tmpdir.get, env={"SPARK_EXECUTOR_DIRS": "/w", "SPARK_LOCAL_DIRS": "/l"}) == \
        "/w ($SPARK_EXECUTOR_DIRS)"
    assert spark_local_dir({}.get, tmpdir.get, env={}).startswith("/var/tmp (java.io.tmpdir: neither")


@pytest.mark.spark
def test_the_sessions_local_directory_is_the_one_spark_itself_picks(spark):
    """What the advice names for the tests' own session is what Spark's own rule gives its driver."""
    conf = spark.sparkContext.getConf()
    where = spark_local_dir(conf.get, spark._jvm.java.lang.System.getProperty)
    spark_says = spark._jvm.org.apache.spark.util.Utils.getConfiguredLocalDirs(spark.sparkContext._jsc.sc().getConf())
    assert where.split(" (")[0] == ",".join(spark_says), (where, list(spark_says))


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
    again = cli_run(landing, small_disk, AS_OF)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
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
