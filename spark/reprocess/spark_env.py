"""The spark-submit environment of this venv (light: imported by DAG files at parse time)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reprocess.errors import ConfigError

JVM_ARCHIVE_ENV = "REPROCESS_JVM_ARCHIVE"
LOCAL_FS_JAR_ENV = "REPROCESS_LOCAL_FS_JAR"
LOCAL_FS_CLASS = "reprocess.hadoop.PosixLocalFileSystem"  # spark/java/reprocess/hadoop/PosixLocalFileSystem.java
SPARK_MODES = ("submit", "connect")  # $REPROCESS_SPARK: how the DAGs run their Spark jobs
# JVM warnings go to stderr: by default the JVM prints them on stdout, where `reprocess run --format json`
# writes its summary (a stale class-data archive, for one, warns once at start).
JVM_LOG_OPTIONS = ("-Xlog:disable", "-Xlog:all=warning:stderr")
DRIVER_MEMORY_ENV = "REPROCESS_DRIVER_MEMORY"
DEFAULT_DRIVER_MEMORY = "2g"  # the heap of every driver the project starts; in local mode it holds the tasks too
# spark.driver.memory becomes the driver JVM's -Xmx as it is: digits and a unit the JVM reads (k, m, g, t). Without a
# unit it means bytes and the JVM does not start; "3gb" Spark would read, but the JVM refuses.
_JVM_SIZE = re.compile(r"[0-9]+[kmgt]", re.IGNORECASE)
DRIVER_GC_ENV = "REPROCESS_DRIVER_GC"
# $REPROCESS_DRIVER_GC: the driver JVM's garbage collector. "parallel" (the default): a cycle is a batch job whose
# tasks run in the driver in local mode, and HotSpot's throughput collector ran fresh 1M cycles 7-15% faster than G1
# (bench/RESULTS.md, twenty-ninth run). "jvm": no option, the JVM's own choice (G1 on a server-class machine).
DRIVER_GCS = {"parallel": "-XX:+UseParallelGC", "jvm": None}
# Where else a JVM option may choose a collector: two choices stop the JVM ("Multiple garbage collectors selected").
JVM_OPTION_ENVS = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "PYSPARK_SUBMIT_ARGS")
_GC_CHOICE = re.compile(r"-XX:\+Use\w+GC\b")
_PROPERTY = re.compile(r"\s*(?P<key>[^\s=:#!]+)\s*[=:\s]\s*(?P<value>.*)")


def spark_submit_env(python: str, path: str) -> dict[str, str]:
    """Environment for ``spark-submit`` from this venv: workers and driver run ``python`` (STACK.md trap 4)."""
    bin_dir = Path(python).parent
    return {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
            "SPARK_HOME": str(Path(python).parents[1] / "lib" / "python3.11" / "site-packages" / "pyspark"),
            "PATH": f"{bin_dir}:{path}"}


def spark_submit_conf(python: str) -> dict[str, str]:
    """``--conf`` of the DAGs' ``spark-submit``: the venv's Python, the driver's heap and its default JVM options.

    The options go in ``spark.driver.defaultJavaOptions``, so a deployment's ``spark.driver.extraJavaOptions``
    (in its ``spark-defaults.conf``) still applies. Likewise the local filesystem's jar (:func:`local_fs_conf`) goes
    in ``spark.{driver,executor}.defaultExtraClassPath``, leaving a deployment's ``extraClassPath`` alone. The heap
    is :func:`driver_memory_conf`'s.
    """
    return {"spark.pyspark.python": python, "spark.pyspark.driver.python": python, **driver_memory_conf(),
            "spark.driver.defaultJavaOptions": driver_java_options(), **local_fs_conf()}


def driver_memory_conf() -> dict[str, str]:
    """``spark.driver.memory`` for a driver the project starts: ``$REPROCESS_DRIVER_MEMORY``, or
    :data:`DEFAULT_DRIVER_MEMORY` when it is unset or empty. Without it spark-submit gives the driver 1 GB, and in
    local mode every task runs in that heap.

    When the variable is unset and the deployment sizes the driver itself (``$SPARK_DRIVER_MEMORY``, or
    ``spark.driver.memory`` in its ``spark-defaults.conf``), nothing is set: a ``--conf`` would override it. A value
    that is not a JVM size (``2g``, ``1536m``...) is a :class:`~reprocess.errors.ConfigError` naming the variable,
    not a JVM that fails to start."""
    value = os.environ.get(DRIVER_MEMORY_ENV, "").strip()
    if not value and (os.environ.get("SPARK_DRIVER_MEMORY", "").strip() or spark_defaults("spark.driver.memory")):
        return {}
    value = value or DEFAULT_DRIVER_MEMORY
    if not _JVM_SIZE.fullmatch(value):
        raise ConfigError(f"{DRIVER_MEMORY_ENV}={value!r} is not a JVM size: give digits and a unit, such as 2g or "
                          "1536m (the driver's heap; in local mode the tasks run in it)", key=DRIVER_MEMORY_ENV)
    return {"spark.driver.memory": value}


def tasks_in_driver(master: str) -> bool:
    """Whether a driver of ``master`` runs its tasks itself: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``;
    not ``local-cluster[...]`` (executors of their own, as on a cluster) nor a cluster's master URL."""
    return master == "local" or master.startswith("local[")


def out_of_memory_advice(evidence: str, heap: str | None, master: str | None) -> str:
    """What to tell the operator of a run that ran out of heap: the evidence, the heap it had, what to raise.

    ``heap`` is the driver's ``spark.driver.memory`` (``None``: not known here, as for a Spark Connect client);
    ``master`` the Spark master (:func:`tasks_in_driver`: ``local``, ``local[N]`` runs the tasks in the driver's heap,
    anything else, ``local-cluster[...]`` too, in executors).
    """
    local = master is None or tasks_in_driver(master)
    if heap is None:
        had = "The driver runs in the Spark Connect server, whose heap is set where it starts."
        more = "Restart the server with more (reprocess connect-server --driver-memory) and run again"
    else:
        had = f"The driver had {heap} of heap" + (", and in local mode the tasks run in it." if local else ".")
        twice = _doubled(heap)
        more = (f"Set {DRIVER_MEMORY_ENV}={twice} (twice this run's) and run again" if twice
                else f"Set {DRIVER_MEMORY_ENV} above {heap} (say, twice it) and run again")
    if master is not None and master.startswith("local-cluster["):
        # its executors get the URL's memory (MB each), and Spark refuses a spark.executor.memory above it
        more += f", or give the executors of {master} more (the last number of local-cluster[N,cores,MB])"
    elif not local:
        more += f", or give the executors of {master} more (spark.executor.memory)"
    return (f"Spark ran out of memory ({evidence}). {had} Nothing is lost: a run stopped before its commit is "
            f"resumed or redone by the next run. {more}; the README's \"Sizing and speed\" gives the heap per batch "
            "size.")


def _doubled(size: str) -> str | None:
    """``2g`` -> ``4g``, ``1536m`` -> ``3072m``: twice the JVM size ``size``; None when ``size`` is not one that
    :data:`DRIVER_MEMORY_ENV` takes (Spark also reads ``2gb``, or ``2048`` as MiB)."""
    size = size.strip()
    return f"{int(size[:-1]) * 2}{size[-1]}" if _JVM_SIZE.fullmatch(size) else None


def on_spark_connect() -> bool:
    """Whether the DAGs run their Spark jobs as clients of the long-lived server of the ``spark_connect_default``
    connection (``$REPROCESS_SPARK=connect``, see ``reprocess connect-server``) rather than, by default
    (``submit``), a fresh driver per run through ``SparkSubmitOperator`` and the ``spark_default`` connection.

    Any other value is a :class:`~reprocess.errors.ConfigError`: the DAG files fail to import with it (a "Broken
    DAG" in the Airflow UI) instead of a typo silently meaning ``submit``.
    """
    return _env_choice("REPROCESS_SPARK", SPARK_MODES, "'submit' (the default) runs each Spark job as a fresh "
                       "spark-submit driver, 'connect' as a client of the Spark Connect server") == "connect"


def cycle_schedule() -> tuple[timedelta, datetime, datetime | None]:
    """The cycle DAG's interval, first start and last end: ``$REPROCESS_INTERVAL_MINUTES`` (default 15),
    ``$REPROCESS_START_DATE`` (default 2026-11-21T00:00:00+00:00), ``$REPROCESS_END_DATE`` (none), ISO 8601 (one
    without an offset in Airflow's default timezone, as Airflow takes a DAG's start date).

    The start must be on the interval's grid counted from the Unix epoch (:func:`off_grid`). The DAG does not catch
    up: after a pause or an outage Airflow's scheduler skips to the latest interval, rounded onto that grid whatever
    the start, while the intervals before are counted from the start. Off the grid (15 minutes from 00:07, or 7
    minutes, which does not divide a day, from midnight) the live runs took different as-ofs after a pause than
    before it, and than a backfill of the same hours. Any such value is a :class:`~reprocess.errors.ConfigError`: the
    DAG fails to import with it. (A backfill counts from its own ``--from-date``: the cycle's first task refuses a
    backfill run off the grid, :func:`reprocess.orchestration.resolve_as_of`.)
    """
    raw = os.environ.get("REPROCESS_INTERVAL_MINUTES", "").strip() or "15"
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 10**8:  # a timedelta holds 10**9 days
        raise ConfigError(f"REPROCESS_INTERVAL_MINUTES={raw!r} is not a whole number of minutes from 1 to 10**8",
                          key="REPROCESS_INTERVAL_MINUTES")
    interval = timedelta(minutes=int(raw))
    bounds: list[datetime | None] = []
    for name, default in (("REPROCESS_START_DATE", "2026-11-21T00:00:00+00:00"), ("REPROCESS_END_DATE", None)):
        text = os.environ.get(name, "").strip() or default
        try:
            value = None if text is None else datetime.fromisoformat(text)
        except ValueError:
            value = None
            text = f"{text!r} (not ISO 8601)"
        if text is not None and value is None:
            raise ConfigError(f"{name}={text} must be an ISO 8601 instant, e.g. 2026-11-21T00:00:00+00:00", key=name)
        bounds.append(value if value is None or value.tzinfo is not None else _in_default_timezone(value))
    start, end = bounds
    assert start is not None
    off = off_grid(start, interval)
    if off:
        raise ConfigError(
            f"REPROCESS_START_DATE={start.isoformat()} is {off} past the {interval} grid counted from the Unix epoch, "
            "onto which Airflow rounds the live runs after a pause: the runs before a pause, after it, and a "
            f"backfill would take different as-ofs. Start on the grid, e.g. at {(start - off).isoformat()} (for an "
            "interval that divides a day, any midnight UTC)", key="REPROCESS_START_DATE")
    return interval, start, end


def off_grid(instant: datetime, interval: timedelta) -> timedelta:
    """How far ``instant`` (aware) is past the latest multiple of ``interval`` after the Unix epoch."""
    return (instant - datetime(1970, 1, 1, tzinfo=UTC)) % interval


def _in_default_timezone(naive: datetime) -> datetime:
    """A naive date and time as Airflow takes a DAG's naive start date: in its default timezone (UTC without
    Airflow)."""
    try:
        from airflow.sdk import timezone
    except ImportError:
        return naive.replace(tzinfo=UTC)
    local = timezone.convert_to_utc(naive)  # as the Task SDK's DAG localises its start date
    assert local is not None
    return datetime.fromtimestamp(local.timestamp(), UTC).replace(microsecond=naive.microsecond)


def _env_choice(name: str, choices: Sequence[str], meaning: str) -> str:
    """``$name`` lower-cased, or the first of ``choices`` when it is unset or empty; any other value is a
    :class:`~reprocess.errors.ConfigError` naming the variable, the choices and ``meaning``."""
    value = os.environ.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise ConfigError(f"{name}={os.environ[name]!r} is not one of {', '.join(choices)}: {meaning}", key=name)
    return value


def _configured_path(env: str, default: Path) -> Path | None:
    """A file the environment may move or switch off: ``$env`` when set (empty: none), else ``default``."""
    configured = os.environ.get(env)
    return default if configured is None else Path(configured) if configured else None


def default_jvm_archive() -> Path:
    """Where ``reprocess jvm-archive`` writes by default: inside this venv, next to the Spark jars it maps."""
    return Path(sys.prefix) / "share" / "reprocess" / "spark-driver.jsa"


def archive_record(archive: Path) -> Path:
    """The record ``reprocess jvm-archive`` writes beside an archive once it is complete: its size in bytes."""
    return archive.with_name(archive.name + ".json")


def jvm_archive() -> Path | None:
    """The driver's class-data-sharing archive: ``$REPROCESS_JVM_ARCHIVE`` (empty: none) or the venv's.

    Only an archive whose record (:func:`archive_record`) gives its exact size is used: the JDK maps an archive
    without checking its length, and a truncated one crashes the JVM at start (SIGBUS, seen with JDK 17.0.15).
    """
    path = _configured_path(JVM_ARCHIVE_ENV, default_jvm_archive())
    if path is None:
        return None
    try:
        recorded = json.loads(archive_record(path).read_text(encoding="utf-8"))["bytes"]
        return path if path.stat().st_size == recorded else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def driver_java_options(dump_archive: str | None = None) -> str:
    """JVM options of a cycle's driver: warnings to stderr, its collector (:func:`driver_gc_options`), and the
    class-data archive when there is one.

    A driver JVM started with ``-XX:SharedArchiveFile`` maps about 16,000 classes that a cycle would otherwise
    read and verify from the jars (Spark, Hadoop, Parquet and their dependencies). An archive made for other
    jars, another classpath (``SPARK_CONF_DIR`` is on it) or another JDK is refused by the JVM with one warning,
    and the driver runs without it.
    ``dump_archive``: record this JVM's classes into that file when it exits (``reprocess jvm-archive``).
    """
    options = ["-Duser.timezone=UTC", *JVM_LOG_OPTIONS, *driver_gc_options()]
    if dump_archive is not None:  # ~1,500 warnings of classes CDS cannot hold (generated, signed jars): not news
        options += [f"-XX:ArchiveClassesAtExit={dump_archive}", "-Xlog:cds*=error:stderr"]
    elif (archive := jvm_archive()) is not None:
        options.append(f"-XX:SharedArchiveFile={archive}")
    return " ".join(shlex.quote(o) for o in options)


def driver_gc_options() -> list[str]:
    """The driver's collector option of ``$REPROCESS_DRIVER_GC`` (:data:`DRIVER_GCS`), or none when the deployment
    already chooses one: in ``JAVA_TOOL_OPTIONS``, ``JDK_JAVA_OPTIONS``, ``_JAVA_OPTIONS``, ``PYSPARK_SUBMIT_ARGS``
    or the ``spark.driver.extraJavaOptions`` of its ``spark-defaults.conf``. Its choice wins: a JVM given two
    collectors does not start. Any other value of the variable is a :class:`~reprocess.errors.ConfigError`."""
    option = DRIVER_GCS[_env_choice(DRIVER_GC_ENV, list(DRIVER_GCS), "'parallel' (the default) runs the driver JVM "
                                    "with the parallel collector, 'jvm' leaves the choice to the JVM")]
    chosen = [os.environ.get(name, "") for name in JVM_OPTION_ENVS] + spark_defaults("spark.driver.extraJavaOptions")
    if option is None or any(_GC_CHOICE.search(text) for text in chosen):
        return []
    return [option]


def spark_defaults(key: str) -> list[str]:
    """The values of ``key`` that spark-submit will read from the deployment's ``spark-defaults.conf`` (in
    ``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``); none when there is no such file."""
    if os.environ.get("SPARK_CONF_DIR"):
        conf_dir = Path(os.environ["SPARK_CONF_DIR"])
    elif os.environ.get("SPARK_HOME"):
        conf_dir = Path(os.environ["SPARK_HOME"]) / "conf"
    else:
        return []
    try:
        lines = (conf_dir / "spark-defaults.conf").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:  # "key value", "key=value" or "key: value", as Java's properties loader reads them
        if (m := _PROPERTY.match(line)) and m["key"] == key:
            found.append(m["value"])
    return found


def default_local_fs_jar() -> Path:
    """Where ``make venv`` builds the local filesystem's jar (:func:`local_fs_conf`): inside this venv."""
    return Path(sys.prefix) / "share" / "reprocess" / "reprocess-hadoop.jar"


def local_fs_jar() -> Path | None:
    """The jar of :data:`LOCAL_FS_CLASS`: ``$REPROCESS_LOCAL_FS_JAR`` (empty: none) or the venv's, if it exists."""
    path = _configured_path(LOCAL_FS_JAR_ENV, default_local_fs_jar())
    return path if path is not None and path.is_file() else None


def local_fs_conf() -> dict[str, str]:
    """Spark settings that make ``file:`` paths use :data:`LOCAL_FS_CLASS`, when its jar is built (else none).

    Without Hadoop's native library (the pyspark wheel has none) Hadoop's local filesystem starts a ``chmod``
    process for every file it creates and every folder it makes, about 730 per cycle at 3.5-5 ms each; that class
    sets the same modes with a system call (``java.nio``). The jar goes on the driver's and the executors' class
    path through ``spark.{driver,executor}.defaultExtraClassPath``, so a deployment's ``extraClassPath`` still
    applies. Every JVM that runs tasks must find the jar at the same path: true in local mode, for a cluster on
    one machine and for containers of the project's image; on a cluster whose executors have no such file, set
    ``REPROCESS_LOCAL_FS_JAR`` to empty (Hadoop's own filesystem) or to where the jar is on every node.
    """
    jar = local_fs_jar()
    if jar is None:
        return {}
    return {"spark.driver.defaultExtraClassPath": str(jar), "spark.executor.defaultExtraClassPath": str(jar),
            "spark.hadoop.fs.file.impl": LOCAL_FS_CLASS}


def mask_target_password(spec: str) -> None:
    """A literal password in the deployment's target (``REPROCESS_TARGET``) masked by Airflow's secrets masker, in
    this task's process and its supervisor: it is in the Spark job's arguments, so in the provider's "Spark-Submit
    cmd" log line. It is in no XCom and no rendered field: ``run_cycle`` adds it to the arguments as it runs
    (:func:`reprocess.orchestration.with_target`). (Written as ``${VAR}``, the driver reads it from its own
    environment, and it is in no log either.)"""
    from urllib.parse import unquote

    from reprocess.redaction import target_password

    # as redact finds it, so a password holding '/', '?', '#' or '@' (which urlsplit cuts short, and the job refuses
    # after the provider logged its command) is masked whole too; and as the driver decodes it
    password = target_password(spec)
    if password:
        from airflow.sdk.log import mask_secret

        for form in {password, unquote(password)}:
            mask_secret(form)
