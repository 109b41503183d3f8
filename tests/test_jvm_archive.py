"""The driver JVM's class-data archive (``reprocess jvm-archive``): recorded from real cycles, mapped by later
drivers, and harmless when stale: a refused archive warns on stderr only, and the run's results are the same."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from reprocess import spark_env
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.spark_env import JVM_ARCHIVE_ENV, archive_record, driver_java_options, spark_submit_conf

VOLATILE = {"elapsed_s", "step_seconds", "validation"}  # timings, and the Data Docs path under the warehouse


def _shared(options: str) -> list[str]:
    return [o for o in shlex.split(options) if o.startswith("-XX:SharedArchiveFile")]


@pytest.mark.unit
def test_the_driver_maps_the_archive_only_when_it_is_complete(tmp_path, monkeypatch):
    archive = tmp_path / "a dir" / "driver.jsa"
    monkeypatch.setenv(JVM_ARCHIVE_ENV, str(archive))
    assert _shared(driver_java_options()) == []

    archive.parent.mkdir()
    archive.write_bytes(b"x" * 100)
    assert _shared(driver_java_options()) == []  # no record yet: being written, or not made by jvm-archive
    archive_record(archive).write_text(json.dumps({"bytes": 100}))
    options = shlex.split(driver_java_options())  # Spark's launcher splits with the same quoting rules
    assert f"-XX:SharedArchiveFile={archive}" in options
    # JVM warnings (a stale archive's, for one) must not reach stdout, where `run --format json` writes
    assert options[:3] == ["-Duser.timezone=UTC", "-Xlog:disable", "-Xlog:all=warning:stderr"]

    archive.write_bytes(b"x" * 60)  # truncated: the JVM would map past its end and die of SIGBUS
    assert _shared(driver_java_options()) == []
    archive_record(archive).write_text("{not json")
    assert _shared(driver_java_options()) == []
    archive_record(archive).write_text(json.dumps({"bytes": 60}))

    monkeypatch.setenv(JVM_ARCHIVE_ENV, "")  # empty: switched off
    assert _shared(driver_java_options()) == []

    monkeypatch.delenv(JVM_ARCHIVE_ENV)
    monkeypatch.setattr(spark_env, "default_jvm_archive", lambda: archive)
    assert _shared(driver_java_options()) == [f"-XX:SharedArchiveFile={archive}"]
    dumping = shlex.split(driver_java_options(dump_archive=str(tmp_path / "new.jsa")))
    assert f"-XX:ArchiveClassesAtExit={tmp_path / 'new.jsa'}" in dumping
    assert _shared(" ".join(dumping)) == []  # a dynamic archive is recorded on top of the JDK's, not of another


@pytest.mark.unit
def test_the_dags_leave_the_deployments_extra_java_options_alone(monkeypatch):
    monkeypatch.setenv(JVM_ARCHIVE_ENV, "")
    conf = spark_submit_conf("/venv/bin/python")
    assert "spark.driver.extraJavaOptions" not in conf  # a deployment's spark-defaults.conf keeps it
    assert conf["spark.driver.defaultJavaOptions"] == driver_java_options()
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == "/venv/bin/python"


def _run(landing: Path, warehouse: Path, archive: Path, classes_log: Path,
         **env_vars: str) -> tuple[dict, str, list[str]]:
    """A fresh ``reprocess run`` process with ``archive``; returns its summary, stderr and class-load lines."""
    env = {**os.environ, **env_vars, JVM_ARCHIVE_ENV: str(archive),
           # extraJavaOptions come after the default ones, so this log is not switched off by -Xlog:disable
           "PYSPARK_SUBMIT_ARGS": f"--driver-java-options '-Xlog:class+load=info:file={classes_log}' pyspark-shell"}
    done = subprocess.run([sys.executable, "-m", "reprocess.cli", "run", "--landing", str(landing), "--warehouse",
                           str(warehouse), "--as-of", "2026-11-21T02:00:00Z", "--format", "json",
                           "--master", "local[2]"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # stdout is the summary alone, whatever the JVM had to say
    return summary, done.stderr, classes_log.read_text(encoding="utf-8").splitlines()


def _recorded_archive(tmp_path: Path) -> Path:
    """The archive ``make`` recorded for this venv with ``reprocess jvm-archive`` (the same command, once per venv:
    recording takes 75-280 s), or one recorded here when there is none (``make`` only warns if recording fails)."""
    archive = spark_env.default_jvm_archive()
    if archive.is_file() and archive_record(archive).is_file():
        return archive
    archive = tmp_path / "archive" / "driver.jsa"
    made = subprocess.run([sys.executable, "-m", "reprocess.cli", "jvm-archive", "--out", str(archive)],
                          capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr[-3000:]
    report = json.loads(made.stdout)
    assert report["archive"] == str(archive)
    assert report["bytes"] == archive.stat().st_size
    return archive


def test_a_recorded_archive_is_mapped_by_later_drivers_and_a_stale_one_only_warns(tmp_path):
    archive = _recorded_archive(tmp_path)
    record = json.loads(archive_record(archive).read_text(encoding="utf-8"))
    assert record["bytes"] == archive.stat().st_size > 10_000_000
    # no partial file left behind, and the record that vouches for the archive
    beside = {spark_env.default_local_fs_jar().name}  # make venv builds the local filesystem's jar in the same folder
    assert sorted(p.name for p in archive.parent.iterdir() if p.name not in beside) == [archive.name,
                                                                                        archive.name + ".json"]

    landing = tmp_path / "landing"
    write_landing(GenerateOptions(out=landing, messages=200, hours=2, seed=5))
    mapped, _, classes = _run(landing, tmp_path / "wh-mapped", archive, tmp_path / "classes-mapped.log")
    from_archive = [c for c in classes if "source: shared objects file (top)" in c]
    from_jars = [c for c in classes if ".jar" in c.partition(" source: ")[2]]
    assert len(from_archive) > 10_000, "the driver did not map the recorded archive"
    assert len(from_jars) < len(from_archive) / 10

    # Stale: another classpath than the recorded one (a deployment's SPARK_CONF_DIR comes first on it)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    unmapped, stderr, classes = _run(landing, tmp_path / "wh-stale", archive, tmp_path / "classes-stale.log",
                                     SPARK_CONF_DIR=str(conf_dir))
    assert not [c for c in classes if "shared objects file (top)" in c]
    assert len([c for c in classes if ".jar" in c.partition(" source: ")[2]]) > 10_000  # from the jars instead
    assert "Unable to use shared archive" in stderr
    assert {k: v for k, v in mapped.items() if k not in VOLATILE} == \
        {k: v for k, v in unmapped.items() if k not in VOLATILE}
    assert mapped["delivered"] > 0
    assert mapped["validation"]["passed"]
    assert unmapped["validation"]["passed"]
