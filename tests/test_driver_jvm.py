"""The driver JVM the project starts: its heap (:func:`reprocess.spark_env.driver_memory_conf`) and its garbage
collector (:func:`reprocess.spark_env.driver_gc_options`). Each is ours by default (2g, the parallel collector),
the deployment's when it makes its own choice, and what ``REPROCESS_DRIVER_MEMORY`` / ``REPROCESS_DRIVER_GC`` say.
The DAGs' spark-submit runs give their heap in the run summary (tests/test_dags.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from reprocess.errors import ConfigError
from reprocess.spark_env import (
    DRIVER_GC_ENV,
    DRIVER_MEMORY_ENV,
    JVM_OPTION_ENVS,
    driver_gc_options,
    driver_java_options,
    driver_memory_conf,
    spark_defaults,
    spark_submit_conf,
)

PARALLEL = "-XX:+UseParallelGC"


@pytest.fixture
def no_choice(monkeypatch, tmp_path):
    """An environment that chooses no collector and no heap anywhere, and an empty ``SPARK_CONF_DIR`` to write into."""
    for name in (*JVM_OPTION_ENVS, DRIVER_GC_ENV, DRIVER_MEMORY_ENV, "SPARK_DRIVER_MEMORY", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    return conf_dir


@pytest.mark.unit
def test_the_driver_runs_the_parallel_collector_unless_told_otherwise(no_choice, monkeypatch):
    assert driver_gc_options() == [PARALLEL]
    assert PARALLEL in shlex.split(driver_java_options())
    assert PARALLEL in shlex.split(driver_java_options(dump_archive="/tmp/x.jsa"))  # the archive is GC-neutral
    monkeypatch.setenv(DRIVER_GC_ENV, " Parallel ")
    assert driver_gc_options() == [PARALLEL]
    monkeypatch.setenv(DRIVER_GC_ENV, "")  # empty: the default
    assert driver_gc_options() == [PARALLEL]
    monkeypatch.setenv(DRIVER_GC_ENV, "jvm")
    assert driver_gc_options() == []
    assert not [o for o in shlex.split(driver_java_options()) if o.endswith("GC")]
    monkeypatch.setenv(DRIVER_GC_ENV, "g1")
    with pytest.raises(ConfigError) as e:
        driver_gc_options()
    assert e.value.key == DRIVER_GC_ENV
    assert "'g1' is not one of parallel, jvm" in str(e.value)


@pytest.mark.unit
@pytest.mark.parametrize("name", JVM_OPTION_ENVS)
def test_a_collector_chosen_in_the_jvms_environment_wins(no_choice, monkeypatch, name):
    monkeypatch.setenv(name, "-XX:TieredStopAtLevel=1 -Xss4m")  # other options: still ours
    assert driver_gc_options() == [PARALLEL]
    monkeypatch.setenv(name, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    assert driver_gc_options() == []
    monkeypatch.setenv(name, "--conf spark.driver.extraJavaOptions=-XX:+UseZGC pyspark-shell")
    assert driver_gc_options() == []


@pytest.mark.unit
@pytest.mark.parametrize(("line", "theirs"), [
    ("spark.driver.extraJavaOptions -XX:+UseG1GC", True),
    ("spark.driver.extraJavaOptions=-Dx=1 -XX:+UseShenandoahGC", True),
    ("  spark.driver.extraJavaOptions : -XX:+UseSerialGC", True),
    ("spark.driver.extraJavaOptions -Xss4m", False),
    ("spark.executor.extraJavaOptions -XX:+UseG1GC", False),  # the executors' own: not the driver's
    ("# spark.driver.extraJavaOptions -XX:+UseG1GC", False),
    ("spark.driver.extraJavaOptions -XX:-UseParallelGC", False),  # switches one off, chooses none
])
def test_a_collector_chosen_in_spark_defaults_wins(no_choice, monkeypatch, line, theirs):
    (no_choice / "spark-defaults.conf").write_text(f"spark.master local[2]\n{line}\n", encoding="utf-8")
    assert driver_gc_options() == ([] if theirs else [PARALLEL])
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(no_choice.parent / "spark-home"))
    assert driver_gc_options() == [PARALLEL]  # $SPARK_HOME/conf has no such file
    (no_choice.parent / "spark-home").mkdir()
    no_choice.rename(no_choice.parent / "spark-home" / "conf")
    assert driver_gc_options() == ([] if theirs else [PARALLEL])


@pytest.mark.unit
def test_spark_defaults_without_a_conf_dir_or_file_give_nothing(no_choice, monkeypatch):
    assert spark_defaults("spark.driver.extraJavaOptions") == []
    monkeypatch.delenv("SPARK_CONF_DIR")
    assert spark_defaults("spark.driver.extraJavaOptions") == []


MEMORY = "spark.driver.memory"


@pytest.mark.unit
def test_a_submitted_driver_gets_the_clis_heap_unless_told_otherwise(no_choice, monkeypatch):
    # spark-submit alone would give the driver 1g, and in local mode every task runs in that heap
    assert driver_memory_conf() == {MEMORY: "2g"}
    assert spark_submit_conf("/venv/bin/python")[MEMORY] == "2g"  # what the DAGs' SparkSubmitOperator passes
    for value in ("8g", " 1536M ", "4194304k", "1T"):
        monkeypatch.setenv(DRIVER_MEMORY_ENV, value)
        assert driver_memory_conf() == {MEMORY: value.strip()}
    monkeypatch.setenv(DRIVER_MEMORY_ENV, "")  # empty: the default
    assert driver_memory_conf() == {MEMORY: "2g"}
    for bad in ("2 g", "two gigs", "-1g", "2.5g", "3gb", "2048", "2x"):  # -Xmx3gb, -Xmx2048: the JVM refuses them
        monkeypatch.setenv(DRIVER_MEMORY_ENV, bad)
        with pytest.raises(ConfigError) as e:
            driver_memory_conf()
        assert e.value.key == DRIVER_MEMORY_ENV
        assert f"{DRIVER_MEMORY_ENV}={bad.strip()!r} is not a JVM size" in str(e.value)


@pytest.mark.unit
def test_a_heap_the_deployment_gives_is_kept_unless_reprocess_driver_memory_is_set(no_choice, monkeypatch):
    (no_choice / "spark-defaults.conf").write_text("spark.executor.memory 4g\n# spark.driver.memory 9g\n")
    assert driver_memory_conf() == {MEMORY: "2g"}  # the executors' heap and a comment size no driver
    (no_choice / "spark-defaults.conf").write_text("spark.driver.memory=6g\n")
    assert driver_memory_conf() == {}  # a --conf would override the deployment's
    assert MEMORY not in spark_submit_conf("/venv/bin/python")
    monkeypatch.setenv(DRIVER_MEMORY_ENV, "3g")  # said for this project: it wins
    assert driver_memory_conf() == {MEMORY: "3g"}
    monkeypatch.delenv(DRIVER_MEMORY_ENV)
    monkeypatch.delenv("SPARK_CONF_DIR")
    assert driver_memory_conf() == {MEMORY: "2g"}
    monkeypatch.setenv("SPARK_DRIVER_MEMORY", "5g")  # spark-submit reads it when no --conf says otherwise
    assert driver_memory_conf() == {}


# Reader settings a deployment's spark-defaults.conf may hold (older ones often do) that would change what a cycle
# reads: LEGACY parses failed_at with SimpleDateFormat (every record INVALID_TIMESTAMP, quarantined for good), and
# the ignore* settings skip an unreadable or vanished landing file silently, which is then marked done; the others
# change how a Parquet landing file's columns are read.
READER_DEFAULTS = {"spark.sql.legacy.timeParserPolicy": ("LEGACY", "CORRECTED"),
                   "spark.sql.files.ignoreCorruptFiles": ("true", "false"),
                   "spark.sql.files.ignoreMissingFiles": ("true", "false"),
                   "spark.sql.caseSensitive": ("true", "false"),
                   "spark.sql.parquet.binaryAsString": ("true", "false"),
                   "spark.sql.legacy.parquet.nanosAsLong": ("true", "false")}


def _collectors(env: dict[str, str]) -> tuple[set[str], dict[str, str]]:
    """The collectors of a driver JVM that ``build_session`` starts in a fresh process with ``env``, and its
    session's values of READER_DEFAULTS."""
    code = ("from reprocess.sparkutil import build_session\n"
            "s = build_session('gc-test', master='local[1]')\n"
            f"print(','.join(s.conf.get(k) for k in {list(READER_DEFAULTS)!r}))\n"
            "print(','.join(b.getName() for b in "
            "s._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()))\n"
            "s.stop()\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    *_, conf, names = done.stdout.strip().splitlines()
    return set(names.split(",")), dict(zip(READER_DEFAULTS, conf.split(","), strict=True))


@pytest.mark.spark
def test_a_fresh_driver_runs_the_parallel_collector_or_the_deployments(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k not in (*JVM_OPTION_ENVS, DRIVER_GC_ENV, "SPARK_CONF_DIR")}
    if "JAVA_TOOL_OPTIONS" in os.environ:  # `make test` chooses the serial collector for its JVMs there
        env["JAVA_TOOL_OPTIONS"] = " ".join(o for o in os.environ["JAVA_TOOL_OPTIONS"].split() if "GC" not in o)
    assert _collectors(env)[0] == {"PS Scavenge", "PS MarkSweep"}

    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -XX:+UseSerialGC\n" + "".join(
        f"{key} {theirs}\n" for key, (theirs, _ours) in READER_DEFAULTS.items()))
    # Both options would stop the JVM ("Multiple garbage collectors selected"): the deployment's alone is given.
    collectors, conf = _collectors({**env, "SPARK_CONF_DIR": str(conf_dir)})
    assert collectors == {"Copy", "MarkSweepCompact"}
    # while the deployment's reader settings that would change what a cycle reads are the project's
    assert conf == {key: ours for key, (_theirs, ours) in READER_DEFAULTS.items()}
