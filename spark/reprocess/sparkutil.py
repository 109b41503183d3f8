"""Building the SparkSession: the one place that knows Spark's start-up settings.

Only a job's ``main`` (and the test fixture) calls :func:`build_session`; transforms take and
return DataFrames.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from pyspark import StorageLevel
    from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession


log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

CODEGEN_CACHE_ENTRIES = "1000"  # static: it only takes effect when the session (its JVM) is created
REMOTE_ENV = "REPROCESS_SPARK_REMOTE"

SORT_AGGREGATE_KEY = "spark.sql.execution.replaceHashWithSortAgg"

# Settings of every cycle's session, classic or Spark Connect: runtime SQL settings, set per session.
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    # What a cycle reads must not depend on a deployment's spark-defaults.conf, where older ones often set these:
    # LEGACY parses failed_at with SimpleDateFormat, which takes the pattern's optional fraction for literal text
    # (every record INVALID_TIMESTAMP, quarantined for good), and the ignore* settings skip an unreadable or vanished
    # landing file without an error, which would then be marked done with its records unread.
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.files.ignoreMissingFiles": "false",
    # and how a Parquet landing file's columns are taken: by name whatever their case (the contract's fields), a
    # BINARY payload as bytes to be checked as UTF-8, a nanosecond timestamp refused (quarantined), not read as a long
    "spark.sql.caseSensitive": "false",
    "spark.sql.parquet.binaryAsString": "false",
    "spark.sql.legacy.parquet.nanosAsLong": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # A cycle caches a few frames for one run and drops them: building compressed columns costs more CPU (about
    # 15% of a cycle, measured with JFR) than the memory it saves.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Partitioned writes (ledger buckets, DLQ address/day) keep a writer per partition open instead of sorting
    # every row by partition first; beyond this many open files a task falls back to the sort.
    "spark.sql.maxConcurrentOutputFileWriters": "64",
    # A read of more than 32 paths lists them in a Spark job, by default with one task per path: the 721 ledger
    # files of a 10M-message ledger took 2-4 s of 721 tiny tasks, twice per cycle (locating the batch's messages,
    # the ordered hold-back). Sixteen tasks list them in 0.2-0.35 s here and still spread an object store's
    # status requests over a cluster (bench/RESULTS.md, twenty-seventh run).
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "16",
    # An aggregation whose input is already sorted by its keys streams through it (SortAggregate) instead of
    # hashing it: a batch's failures are grouped per message that way, in the order of their list
    # (ledger.merge.aggregate_failures).
    SORT_AGGREGATE_KEY: "true",
}

# Settings of the application (its JVM), fixed when it starts: the classic driver's, or a Connect server's.
APP_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # A cycle generates about 130 classes; with Spark's default cache of 100 every cycle compiled all of them
    # again (2-3 s of a 15 s small cycle, by Spark's "Code generated in" log). With room for several cycles'
    # worth, a warm cycle at a new as-of compiled 27-52 of them and a re-run of the same as-of 4-6.
    "spark.sql.codegen.cache.maxEntries": CODEGEN_CACHE_ENTRIES,
    # PySpark 4 wraps every column function to record the Python call site for error messages: an inspection of the
    # Python stack and four more py4j calls per function (active session, a setting, set, clear). A cycle builds
    # thousands of column expressions, so that was seconds per cycle with no task running: building the landing step's
    # columns alone took 0.57-0.80 s with it, 0.28-0.43 s without (bench/RESULTS.md, thirteenth run). Errors keep
    # Spark's own context (the failing expression and plan); only the Python file:line of the call is lost.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


SHUFFLE_PARTITIONS_KEY = "spark.sql.shuffle.partitions"
ADAPTIVE_KEY = "spark.sql.adaptive.enabled"
# What a cycle sizes its shuffles with (:func:`fit_shuffles`); it restores them after the run.
SHUFFLE_KEYS = (SHUFFLE_PARTITIONS_KEY, ADAPTIVE_KEY)
# A cycle's shuffles get a partition per this many bytes of its input (landing plus the ledger files it rewrites) when
# that is more than the session's own count: each task then caches and sorts a bounded share. With 8 partitions a
# 10M-message batch (4.1 GB) stopped a 2 GB driver with OutOfMemoryError while caching its due set; with 32 it ran
# (bench/RESULTS.md, thirtieth run). Up to 1 GB of input (1M messages) nothing changes.
INPUT_BYTES_PER_SHUFFLE_PARTITION = 128 * 2**20
# ... and per this many when its records are large (:data:`LARGE_RECORD_BYTES` on average): a task caches its rows in
# batches of 10,000 and writes Parquet row groups of 128 MB, so a partition of 1 MB payloads is held whole, several
# times over. 2,000 payloads of 1 MB (1.9 GB) stopped a 2 GB driver at 128 MB per partition and ran at 32 MB
# (bench/RESULTS.md, fortieth run).
LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION = 32 * 2**20
LARGE_RECORD_BYTES = 16 << 10
# A small input (one that runs interpreted, :func:`fit_codegen`) runs without adaptive execution, its shuffles in
# this many partitions. Adaptive execution re-plans the rest of a query after each of its stages (39 jobs for 18
# queries in a small cycle) to coalesce or split partitions and change joins: with a few megabytes there is nothing
# to adapt, and the re-planning was a fifth of a small cycle's CPU (a fresh 120-message driver 26-27 against 20
# CPU-s; three warm cycles 21-25 against 17-21; bench/RESULTS.md, thirty-sixth run). For such sizes its coalescing
# gave one or two partitions; one gives one file per ledger bucket and DLQ partition.
SMALL_INPUT_SHUFFLE_PARTITIONS = 1


def fit_shuffles(spark: SparkSession, input_bytes: int, base: dict[str, str | None], small: bool = False,
                 record_bytes: int = 0) -> int:
    """Size the shuffles of later queries; ``base``: the session's :data:`SHUFFLE_KEYS` on entry, as
    ``restoring_conf(spark, *SHUFFLE_KEYS)`` yields them (the caller restores them). A ``small`` input gets no
    adaptive execution and :data:`SMALL_INPUT_SHUFFLE_PARTITIONS`; any other the session's adaptive execution and
    its partition count or, when more, one per :data:`INPUT_BYTES_PER_SHUFFLE_PARTITION` of ``input_bytes``
    (:data:`LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION` when its records average ``record_bytes`` of at least
    :data:`LARGE_RECORD_BYTES`). Returns the partition count set."""
    if small:
        _set_conf(spark, {ADAPTIVE_KEY: "false", SHUFFLE_PARTITIONS_KEY: str(SMALL_INPUT_SHUFFLE_PARTITIONS)})
        return SMALL_INPUT_SHUFFLE_PARTITIONS
    per = LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION if record_bytes >= LARGE_RECORD_BYTES \
        else INPUT_BYTES_PER_SHUFFLE_PARTITION
    wanted = max(base_partitions(base), -(-input_bytes // per))
    _set_conf(spark, {ADAPTIVE_KEY: base.get(ADAPTIVE_KEY), SHUFFLE_PARTITIONS_KEY: str(wanted)})
    return wanted


def base_partitions(base: dict[str, str | None]) -> int:
    """The session's shuffle partitions in ``base`` (:func:`fit_shuffles`); Spark's 200 when unset."""
    return int(base.get(SHUFFLE_PARTITIONS_KEY) or 200)


def shuffle_partitions_default() -> int:
    """Cycles shuffle modest data; 200 default partitions cost seconds of scheduling on small runs."""
    return int(os.environ.get("REPROCESS_SHUFFLE_PARTITIONS", "8"))


def build_session(app_name: str, master: str | None = None, shuffle_partitions: int | None = None,
                  dump_jvm_archive: str | None = None, remote: str | None = None) -> SparkSession:
    """A session in UTC with ANSI on; ``master`` defaults to ``$SPARK_MASTER`` or ``local[*]``.

    With ``remote`` (default ``$REPROCESS_SPARK_REMOTE`` unless ``master`` is given), a Spark Connect URL such as
    ``sc://localhost:15002``, the session is a new client session of that long-lived server
    (:mod:`reprocess.connect_server`) instead of a driver JVM of its own, with :data:`SESSION_CONF` set on it.

    Python workers run the driver's interpreter (STACK.md trap 4), not ``python3`` from PATH. When this call
    starts the JVM, it maps the class-data archive (:func:`reprocess.spark_env.driver_java_options`);
    ``dump_jvm_archive`` instead records one into that file when the JVM exits.
    """
    from pyspark.sql import SparkSession

    from reprocess.spark_env import driver_java_options, driver_memory_conf, local_fs_conf

    partitions = str(shuffle_partitions or shuffle_partitions_default())
    if remote is None and master is None:
        remote = os.environ.get(REMOTE_ENV) or None
    if remote:
        if dump_jvm_archive is not None:
            raise ValueError("a class-data archive is recorded by a driver JVM of its own, not over Spark Connect")
        session = SparkSession.builder.remote(remote).appName(app_name).create()
        for key, value in {**SESSION_CONF, SHUFFLE_PARTITIONS_KEY: partitions}.items():
            session.conf.set(key, value)
        return session
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    for key, value in {**SESSION_CONF, **APP_CONF, SHUFFLE_PARTITIONS_KEY: partitions}.items():
        builder = builder.config(key, value)
    master = master or os.environ.get("SPARK_MASTER")
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit, which sets the master
        builder = builder.master("local[*]")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # the JVM starts here: its heap is the local executor's memory
        for key, value in driver_memory_conf().items():  # $REPROCESS_DRIVER_MEMORY, the deployment's, or 2g
            builder = builder.config(key, value)
        # defaultJavaOptions, so that spark-defaults.conf's spark.driver.extraJavaOptions still applies
        builder = builder.config("spark.driver.defaultJavaOptions", driver_java_options(dump_jvm_archive))
        for key, value in local_fs_conf().items():
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


# Parquet checks a page's and a row group's size only every so many rows, from 100 on (then as often as the rows'
# average size says): a writer of rows carrying 1 MB payloads buffered 100 MB pages and a larger row group before the
# first check, and copied them while compressing (bench/RESULTS.md, fortieth run).
PAGE_CHECK_KEY = "parquet.page.size.row.check.min"


def parquet_options(writer: DataFrameWriter, columns: Iterable[str]) -> DataFrameWriter:
    """``writer`` with the Parquet options of message data: dictionary encoding off for ``columns`` (Parquet column
    paths, such as ``headers.key_value.value`` or ``error_history.list.element.fp``), and page and row group sizes
    checked from the first row (:data:`PAGE_CHECK_KEY`).

    Parquet dictionary-encodes every column by default: each value is hashed into a dictionary until the dictionary
    outgrows a page (1 MB), then the column falls back to plain encoding. For values that are unique per message
    (ids, payloads, millisecond times) the dictionary never pays: it is hashing for nothing, and in files too small
    to reach the fallback it is kept, larger than the plain values. Low-cardinality columns (address, state, policy,
    error class) keep theirs. Measured on the outbox write of a 10M cycle: 8.3-9.4 s instead of 13.5-15.7 s, files
    5% smaller (bench/RESULTS.md, eighth run).

    Rows of large payloads (or quarantined lines of up to 32 MiB) would otherwise fill a page of a hundred of them
    before its size is first checked: a writer's buffers then outgrow its share of the heap. Small rows are checked
    as often as before once the first rows have given their average size.
    """
    writer = writer.option(PAGE_CHECK_KEY, "1")
    for column in columns:
        writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
    return writer


# The bytes of a JVM's heap Spark reserves before its memory manager shares out the rest (UnifiedMemoryManager).
RESERVED_HEAP_BYTES = 300 << 20
CACHE_MEMORY_ENV = "REPROCESS_CACHE_MEMORY_BYTES"
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)


def jvm_size_bytes(text: str) -> int:
    """A JVM memory setting (``spark.driver.memory`` and the like: ``2g``, ``512m``, ``1024``, in MiB when it has
    no unit) in bytes."""
    found = _SIZE.match(text)
    if not found:
        raise ValueError(f"not a memory size: {text!r}")
    return int(found.group(1)) << {"": 20, "k": 10, "m": 20, "g": 30, "t": 40}[found.group(2).lower()]


def cache_memory_bytes(spark: SparkSession) -> int | None:
    """The bytes the session's cache can hold in memory (:func:`memory_of_settings` of its settings), or
    ``$REPROCESS_CACHE_MEMORY_BYTES`` when set."""
    if override := os.environ.get(CACHE_MEMORY_ENV):
        return int(override)
    return memory_of_settings(lambda key: spark.conf.get(key, None))


def memory_of_settings(get: Callable[[str], str | None]) -> int | None:
    """The bytes a cache can hold in memory by the settings ``get`` returns: in local mode (:func:`tasks_in_driver`;
    not ``local-cluster[...]``, whose executors have heaps of their own) the driver's heap less
    Spark's reserve, times ``spark.memory.fraction``; on a cluster the same of each executor, times
    ``spark.executor.instances`` when that is set and executors are not added on demand. None when it cannot be
    told."""
    from reprocess.spark_env import tasks_in_driver

    fraction = float(get("spark.memory.fraction") or 0.6)
    if tasks_in_driver(get("spark.master") or "local"):
        heap = jvm_size_bytes(get("spark.driver.memory") or "1g")
        return max(0, int((heap - RESERVED_HEAP_BYTES) * fraction))
    instances = get("spark.executor.instances")
    if not instances or (get("spark.dynamicAllocation.enabled") or "false").lower() == "true":
        return None
    heap = jvm_size_bytes(get("spark.executor.memory") or "1g")
    return max(0, int((heap - RESERVED_HEAP_BYTES) * fraction)) * int(instances)


def cache_level(budget: int | None, estimated_bytes: int) -> tuple[StorageLevel, str]:
    """The storage level for caching a frame of about ``estimated_bytes`` (and its name for the step log): on disk
    alone when that is more than half of ``budget``, what the cache can hold in memory (:func:`cache_memory_bytes`,
    read once per cycle: over Spark Connect each setting read is a request; a cycle caches two or three such frames
    at once), else Spark's default, in memory as far as it fits. A budget of None (not known) keeps the default.

    A frame cached in memory that does not fit is written to disk block by block, and every later read of a block
    from disk tries again to hold it in memory and gives up (the landing of 2,000 payloads of 1 MB in a 2 GB
    driver: each of its blocks unrolled up to 113 MiB at each read; bench/RESULTS.md, forty-first run)."""
    from pyspark import StorageLevel

    if budget is not None and estimated_bytes > budget // 2:
        return StorageLevel.DISK_ONLY, "disk"
    return StorageLevel.MEMORY_AND_DISK_DESER, "memory"


def is_remote(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no JVM in this process: no ``sparkContext``, no py4j)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def task_slots(spark: SparkSession) -> int:
    """How many tasks a scan of files runs at once, as Spark plans one: ``spark.sql.leafNodeDefaultParallelism``
    when set, else the default parallelism (a local driver's cores, or a cluster's executors' cores now). A Spark
    Connect client has no ``sparkContext``: it reads the number off a range, which Spark cuts into that many
    partitions (a query of a few milliseconds)."""
    from pyspark.sql import functions as F

    value = spark.conf.get("spark.sql.leafNodeDefaultParallelism", None)
    if value:
        return max(1, int(value))
    if not is_remote(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    last = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("task")).agg(F.max("task")).first()
    return 1 if last is None or last[0] is None else int(last[0]) + 1


@contextmanager
def restoring_conf(spark: SparkSession, *keys: str) -> Iterator[dict[str, str | None]]:
    """On exit, put back the session's values of ``keys`` (or their absence) as they were on entry; yields those
    values (``None``: unset)."""
    old = {key: spark.conf.get(key, None) for key in keys}
    try:
        yield dict(old)
    finally:
        _set_conf(spark, old)


def _set_conf(spark: SparkSession, values: dict[str, str | None]) -> None:
    """Set each key of the session's conf to its value, or unset it where the value is ``None``."""
    for key, value in values.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@contextmanager
def owner_only_writes(enabled: bool) -> Iterator[None]:
    """While active, files and folders this process writes get no group or other permissions (umask 077).

    Not the Spark JVM's: Hadoop's local filesystem takes its umask from the configuration it was first created
    with (``FileSystem`` instances are cached per JVM), so a session setting of ``fs.permissions.umask-mode``
    changes nothing (measured: Spark's files stayed 0644). Spark writes a private warehouse's files only under
    ``_runs/``, which :meth:`reprocess.storage.commit.Warehouse.lock` makes 0700 with the root, and
    :meth:`~reprocess.storage.commit.Warehouse.publish` sets 0600/0700 on what it moves into place.
    """
    if not enabled:
        yield
        return
    old_umask = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old_umask)


# Code generation is sized to the cycle's input (landing bytes, then those plus the ledger files it rewrites):
#
# - Small inputs run interpreted. Spark compiles every query's expressions to Java and compiles that with Janino
#   before running it, about forty times per cycle; a cycle of a few hundred messages spends more on compiling than
#   on its rows, and more still in a fresh driver, where Janino itself runs cold. Interpreted expressions skip the
#   compiler and evaluate each row more slowly, which pays below :data:`INTERPRETED_BELOW_BYTES`
#   (``bench/codegen_modes.py``; bench/RESULTS.md, ninth run).
# - Large inputs keep every generated method within the JIT's limit. HotSpot does not JIT-compile a method of more
#   than 8000 bytes of bytecode, and whole-stage code generation fuses a stage's expressions into one method: the
#   retry schedules over five policies make one that big, which then runs interpreted, about three times slower
#   (bench/RESULTS.md). With ``spark.sql.codegen.hugeMethodLimit`` at 8000, Spark compiles such a stage per operator
#   instead, in methods the JIT takes. Finding out costs a second compilation of each stage, about 2 s per small
#   cycle, so it pays only from :data:`JIT_SIZED_CODEGEN_FROM_BYTES` on.
# - A scan of many rows through few expressions runs generated from :data:`INTERPRETED_BELOW_SCAN_ROWS` rows, whatever
#   the landing's size: the locate step reads every ledger row's id, and with a small landing over a ledger of 10M
#   rows it ran interpreted in 4.0-4.9 s warm against 1.6-1.8 s generated; at 110k rows both took 0.2-0.3 s, and
#   the first such query of a fresh driver cost the same in either mode (bench/RESULTS.md, twenty-eighth run).
HUGE_METHOD_LIMIT_KEY = "spark.sql.codegen.hugeMethodLimit"
WHOLE_STAGE_KEY = "spark.sql.codegen.wholeStage"
# Spark's (internal) choice between generated and interpreted projections, predicates and orderings; NO_CODEGEN
# interprets them all. Without it, turning whole-stage code generation off alone saves nothing (Spark then
# generates code per expression instead).
FACTORY_MODE_KEY = "spark.sql.codegen.factoryMode"
CODEGEN_KEYS = (HUGE_METHOD_LIMIT_KEY, WHOLE_STAGE_KEY, FACTORY_MODE_KEY)
INTERPRETED_BELOW_BYTES = 16 << 20
INTERPRETED_BELOW_SCAN_ROWS = 100_000
JIT_SIZED_CODEGEN_FROM_BYTES = 64 << 20
_CODEGEN_BASE: ContextVar[dict[str, str | None] | None] = ContextVar("codegen_base", default=None)


@contextmanager
def sized_codegen(spark: SparkSession) -> Iterator[None]:
    """While active, :func:`fit_codegen` may size code generation to an input; on exit the session's code
    generation settings are as they were on entry."""
    with restoring_conf(spark, *CODEGEN_KEYS) as base:
        token = _CODEGEN_BASE.set(base)
        try:
            yield
        finally:
            _CODEGEN_BASE.reset(token)


def fit_codegen(spark: SparkSession, input_bytes: int, scan_rows: int = 0) -> str:
    """Size the code generation of later queries to ``input_bytes`` of input, and ``scan_rows`` rows a query scans
    through few expressions (see above), starting from the settings :func:`sized_codegen` found on entry; returns
    the mode chosen: ``interpreted``, ``generated`` or ``generated-jit-sized``."""
    base = _CODEGEN_BASE.get()
    if base is None:
        raise RuntimeError("fit_codegen is called inside sized_codegen(spark), which restores the settings")
    wanted = dict(base)
    if is_small(input_bytes, scan_rows):
        wanted.update({WHOLE_STAGE_KEY: "false", FACTORY_MODE_KEY: "NO_CODEGEN"})
        mode = "interpreted"
    elif input_bytes >= JIT_SIZED_CODEGEN_FROM_BYTES:
        wanted[HUGE_METHOD_LIMIT_KEY] = "8000"
        mode = "generated-jit-sized"
    else:
        mode = "generated"
    _set_conf(spark, wanted)
    return mode


def is_small(input_bytes: int, scan_rows: int = 0) -> bool:
    """Whether ``input_bytes`` of input and a scan of ``scan_rows`` rows run interpreted (:func:`fit_codegen`), and
    a cycle's shuffles without adaptive execution (:func:`fit_shuffles`)."""
    return input_bytes < INTERPRETED_BELOW_BYTES and scan_rows < INTERPRETED_BELOW_SCAN_ROWS


def sort_aggregated(spark: SparkSession) -> bool:
    """Whether ``spark`` streams an aggregation over input sorted by its keys (:data:`SORT_AGGREGATE_KEY`, one of
    :data:`SESSION_CONF`): then ``collect_list`` keeps the rows' order."""
    return str(spark.conf.get(SORT_AGGREGATE_KEY, "false")).lower() == "true"


def sql_lambda(text: str) -> Column:
    """A higher-order function (``filter``, ``transform``, ``map_filter``...) written in SQL ``text`` over columns
    by name, so that its lambda variables keep the names written there.

    PySpark's Python lambdas (``F.filter(c, lambda x: ...)``) name their variables afresh each time they are built
    (``x_88``, then ``x_95``: a process-wide counter), and generated code writes that name into its Java source. A
    long-lived driver then compiled each stage holding one again at every cycle (Janino and the JIT), however
    warm it was; with the names fixed the next cycle reuses the compiled classes. Nested lambdas need distinct
    names.
    """
    from pyspark.sql import functions as F

    return F.expr(text)


COLUMN_CACHE_ENTRIES = 64  # per builder: the distinct arguments a process sees are a few (limits, parser, policies)


def columns_once(builder: Callable[P, T]) -> Callable[P, T]:
    """``builder``, a function of hashable arguments that returns column expressions (and nothing tied to a
    DataFrame), called once per process and kind of session for the same arguments; later calls return the same
    ``Column`` objects.

    PySpark classic makes every expression node in the driver JVM through py4j, and releases it through py4j again
    once Python drops it: a small cycle made about 8,700 calls, most of them expressions that are the same at every
    cycle (bench/RESULTS.md, forty-fifth run). A ``Column`` is an unresolved expression, bound to no plan: it can be
    used in any number of DataFrames. The cache is keyed by the JVM gateway PySpark classic talks to (or Spark
    Connect's client, whose columns live in Python), so a process that starts another JVM builds them afresh.
    """

    def build(factory: object, *args: P.args, **kwargs: P.kwargs) -> T:
        return builder(*args, **kwargs)

    built = cast("Callable[..., T]", functools.lru_cache(maxsize=COLUMN_CACHE_ENTRIES)(build))

    @functools.wraps(builder)
    def cached(*args: P.args, **kwargs: P.kwargs) -> T:
        return built(_column_factory(), *args, **kwargs)

    return cached


def _column_factory() -> object:
    """What makes this process's columns now: Spark Connect's client, or the JVM gateway of PySpark classic."""
    from pyspark import SparkContext
    from pyspark.sql.utils import is_remote

    return "connect" if is_remote() else SparkContext._gateway


AS_OF_COLUMN = "_as_of_ms"


def as_of_column(as_of: int | Column) -> Column:
    """The run's as-of as a column: a long literal for epoch ms, or the column of :func:`with_as_of` as it is."""
    from pyspark.sql import functions as F

    return F.lit(int(as_of)).cast("long") if isinstance(as_of, int) else as_of


def with_as_of(df: DataFrame, as_of_ms: int, codegen: str) -> tuple[DataFrame, Column]:
    """``df`` and the column that gives the run's as-of to expressions over it, for code generation mode ``codegen``
    (what :func:`fit_codegen` chose).

    Generated code writes a long literal into its Java source, so with the as-of as a literal every scheduled run (a
    new as-of) compiles its stages again, with Janino and then with the JIT, even in a long-lived driver that ran
    the same stages an hour before. With generated code the as-of therefore comes as data: ``df`` is joined with a
    one-row relation holding it (column :data:`AS_OF_COLUMN`, to drop once used), a broadcast nested-loop join
    the stage reads like any column, and the stage's source is the same at every as-of. Interpreted cycles compile
    nothing: they keep the literal and skip the join (bench/RESULTS.md, eleventh run).
    """
    from pyspark.sql import functions as F

    if codegen == "interpreted":
        return df, as_of_column(int(as_of_ms))
    one = df.sparkSession.sql(f"SELECT * FROM VALUES (CAST({int(as_of_ms)} AS BIGINT)) AS t({AS_OF_COLUMN})")
    return df.crossJoin(one), F.col(AS_OF_COLUMN)


# org.apache.spark.util.SparkExitCode.OOM: a local-mode driver JVM exits with it as soon as a task thread runs out of
# heap (SparkUncaughtExceptionHandler), so the Python side may see only "SparkContext was shut down" or a lost
# connection, without the OutOfMemoryError.
SPARK_OOM_EXIT_CODE = 52
JVM_EXIT_WAIT_SECONDS = 30.0  # how long a stopped driver JVM is given to exit before its exit code is asked
# The JVM's error, or Spark's own subclass of it (a task's memory manager could not get enough). Only the heap's kinds
# count: more heap does not help a full Metaspace, a native thread or direct buffer refused, or an array above the
# JVM's limit, and those errors go through as they are.
_OOM = re.compile(r"(java\.lang\.OutOfMemoryError|org\.apache\.spark\.memory\.SparkOutOfMemoryError)"
                  r"(?::[ \t]*([^\r\n]*\S))?")
_HEAP_KINDS = ("Java heap space", "GC overhead limit exceeded")


@contextmanager
def explaining_exhausted_resources(spark: SparkSession) -> Iterator[None]:
    """Spark work in ``spark`` whose heap or disk runs out: a JVM out of heap stops it as a
    :class:`~reprocess.errors.SparkOutOfMemoryError` that says what the driver had and what to raise, a full disk as
    a :class:`~reprocess.errors.DiskFullError`, not a Java stack trace.

    Two kinds of evidence: ``java.lang.OutOfMemoryError`` in the error (or an error it interrupted), as Spark
    reports a task's or the driver's own; or, when this process started the driver JVM and its SparkContext has
    stopped, the JVM's exit code :data:`SPARK_OOM_EXIT_CODE` (the error itself then says anything from "SparkContext
    was shut down" to a NullPointerException). Any other error goes through unchanged: at once, or, when the
    SparkContext has stopped, once its JVM has exited (at most :data:`JVM_EXIT_WAIT_SECONDS`). The error that showed
    it is logged (its first line; the whole of it with ``-v``). A full disk is found the same way
    (:func:`no_space_evidence`).
    """
    from reprocess.errors import DiskFullError, ReprocessError, SparkOutOfMemoryError
    from reprocess.spark_env import out_of_memory_advice

    conf = None if is_remote(spark) else spark.sparkContext.getConf()
    heap = None if conf is None else conf.get("spark.driver.memory", "1g")
    master = None if conf is None else spark.sparkContext.master
    local_dir = None if conf is None else spark_local_dir(spark)
    try:
        yield
    except ReprocessError:
        raise
    except Exception as exc:
        explained: ReprocessError
        if (full := no_space_evidence(exc)) is not None:
            what, explained = "out of disk space", DiskFullError(no_space_advice(full, local_dir))
        elif (evidence := out_of_memory_evidence(spark, exc)) is not None:
            what, explained = "out of memory", SparkOutOfMemoryError(out_of_memory_advice(evidence, heap, master))
        else:
            raise
        log.info("%s; the error that showed it: %s", what, error_text(exc).splitlines()[0][:500])
        log.debug("the whole error", exc_info=exc)
        raise explained from exc


_NO_SPACE = "No space left on device"
_WRITING = re.compile(r"while writing rows to (\S+?)\.?(?:\s|$)")


def no_space_evidence(exc: BaseException) -> str | None:
    """What shows that ``exc`` came from a full disk (``None``: nothing does): a Python ``OSError`` with ``ENOSPC``
    (the commit's own writes), or Spark's error saying ``No space left on device`` (its writers, shuffles and spills),
    with the file it was writing when it says; see :func:`explaining_exhausted_resources`."""
    for error in _chain(exc):
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return error_text(error).splitlines()[0][:300]
        if not type(error).__module__.startswith(("py4j", "pyspark")):
            continue  # Spark's own errors only, as for the heap
        text = error_text(error)
        if _NO_SPACE in text:
            writing = _WRITING.search(text)
            return f"java.io.IOException: {_NO_SPACE}" + (f", while writing {writing.group(1)}" if writing else "")
    return None


def spark_local_dir(spark: SparkSession) -> str:
    """Where this driver's Spark spills and shuffles, as Spark itself picks its local directories
    (``Utils.getConfiguredLocalDirs``), and what set them (:func:`local_dir_source`)."""
    jvm = spark._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.sc().getConf()
    dirs = ",".join(jvm.org.apache.spark.util.Utils.getConfiguredLocalDirs(conf))
    return f"{dirs} ({local_dir_source(jvm.java.lang.System.getenv, conf.contains)})"


def local_dir_source(getenv: Callable[[str], str | None], is_set: Callable[[str], bool]) -> str:
    """What set Spark's local directories, in the order Spark reads them: a YARN container's own directories
    (``$CONTAINER_ID`` set), ``$SPARK_EXECUTOR_DIRS``, ``$SPARK_LOCAL_DIRS``, ``spark.local.dir``, else the JVM's
    ``java.io.tmpdir``. ``getenv`` reads the driver JVM's environment, ``is_set`` whether a Spark setting is set."""
    if getenv("CONTAINER_ID"):
        return "YARN's directories of the container"
    for name in ("SPARK_EXECUTOR_DIRS", "SPARK_LOCAL_DIRS"):
        if getenv(name):
            return f"${name}"
    if is_set("spark.local.dir"):
        return "spark.local.dir"
    return "java.io.tmpdir: neither spark.local.dir nor $SPARK_LOCAL_DIRS is set"


def no_space_advice(evidence: str, local_dir: str | None) -> str:
    """What to tell the operator of a run whose disk filled up: the evidence, and where Spark writes besides the
    warehouse (``local_dir``: :func:`spark_local_dir`, the directory and what set it; ``None``: not known here, as for
    a Spark Connect client)."""
    where = f"Spark's local directory, {local_dir}" if local_dir else "the Spark Connect server's disks"
    return (f"a disk is full ({evidence}). Nothing is lost: a run stopped before its commit is resumed or redone by "
            f"the next run. Free space on the warehouse's disk and on {where}, where Spark spills and shuffles, and "
            "run again.")


def out_of_memory_evidence(spark: SparkSession, exc: BaseException) -> str | None:
    """What shows that ``exc`` came from a JVM out of heap (``None``: nothing does); see
    :func:`explaining_exhausted_resources`."""
    for error in _chain(exc):
        if not type(error).__module__.startswith(("py4j", "pyspark")):
            continue  # Spark's own errors only: not one of ours or a target's that quotes a message's text
        for found in _OOM.finditer(error_text(error)):
            if found.group(1).endswith("SparkOutOfMemoryError") or found.group(2) in (None, *_HEAP_KINDS):
                return found.group(0)
    proc = None if is_remote(spark) else getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None or not _context_stopped(spark):
        return None  # spark-submit started the JVM (it reports the exit code itself), or Spark is still running
    try:
        code = proc.wait(JVM_EXIT_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        return None
    return out_of_memory_exit("the driver JVM") if code == SPARK_OOM_EXIT_CODE else None


def out_of_memory_exit(process: str) -> str:
    """The evidence that ``process`` exited with :data:`SPARK_OOM_EXIT_CODE`."""
    return f"{process} exited with code {SPARK_OOM_EXIT_CODE}, Spark's exit code for java.lang.OutOfMemoryError"


def _context_stopped(spark: SparkSession) -> bool:
    """Whether the session's SparkContext has stopped, or its JVM no longer answers."""
    try:
        return bool(spark.sparkContext._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - py4j's errors when the JVM has gone
        return True


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from or while handling, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_text(exc: BaseException) -> str:
    """``Type: str(exc)``, or the type and its bare string arguments when ``str`` needs a JVM that has gone (a
    ``Py4JJavaError`` asks the JVM for its text): safe to call while handling any Spark error."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - the JVM behind the error may be gone
        return f"{type(exc).__name__}: " + " ".join(arg for arg in exc.args if isinstance(arg, str))


def truncates_plans(spark: SparkSession, small: bool) -> bool:
    """Whether :func:`pin` cuts the plans of a run's cached frames (a local checkpoint) instead of caching them:
    for a small input (:func:`is_small`) in a local-mode driver.

    Spark plans every DataFrame made from a cached one over that frame's whole plan, and matches it against every
    cached plan: the due selection, the ordered hold-back's self-joins and the outcomes' projection each did so over
    the merge's dozens of operators. On a few hundred messages that was most of those steps' time; a checkpointed
    frame is a leaf (a warm cycle of 400 messages a median 5.5 s against 12.0 s, select_due 1.2-1.4 s against
    8.6-9.1 s a round of four cycles; bench/RESULTS.md, fiftieth run). A large input keeps the cache: its columns
    are compressed and read only as far as a query needs them, and a checkpoint's rows are not (at 1M messages
    stage_ledger took 33 s against 25 s and the summary 8.5 s against 4.4 s, the cycle no faster). Local mode only:
    a checkpoint's blocks are kept by the executors that computed them, with no plan to compute them again, so on a
    cluster a lost executor would fail the run; in local mode the executor is the driver. Over Spark Connect, the
    same for a server in local mode that has the store plugin, which frees a checkpoint's blocks when the run is
    done (:func:`unpin`; a warm small cycle over Connect a median 2.2 s against 5.2 s, bench/RESULTS.md, fifty-second
    run; :func:`server_frees`); without the plugin the frames are cached."""
    from reprocess.spark_env import tasks_in_driver

    if not small:
        return False
    if is_remote(spark):
        return server_frees(spark)
    return tasks_in_driver(str(spark.sparkContext.master))


# a Connect session -> server_frees's answer, for as long as the session object lives (not by its id, which a
# client may fix in its URL and reuse against a restarted server)
_SERVER_FREES: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def server_frees(spark: SparkSession) -> bool:
    """Whether the Spark Connect server of session ``spark`` can keep a run's frames as local checkpoints and free
    them: it runs in local mode and loads a store plugin that takes the ``kept`` and ``free`` requests (a build from
    before them takes neither, and its server caches the frames, as before). Asked once per session: two settings
    and one request."""
    if spark not in _SERVER_FREES:
        _SERVER_FREES[spark] = _asks_server(spark)
    return _SERVER_FREES[spark]


def _asks_server(spark: SparkSession) -> bool:
    from reprocess.spark_env import tasks_in_driver
    from reprocess.storage.hadoop_fs import PLUGIN_CLASS, PLUGIN_CONF, plugin_request

    plugins = {name.strip() for name in (spark.conf.get(PLUGIN_CONF, "") or "").split(",")}
    if PLUGIN_CLASS not in plugins or not tasks_in_driver(spark.conf.get("spark.master", "") or ""):
        return False
    try:
        plugin_request(spark, "kept")  # type: ignore[arg-type]
    except Exception as exc:
        if connection_lost(exc):
            raise
        log.warning("the Spark Connect server's %s cannot free a run's checkpoints (%s): small runs cache their "
                    "frames; restart the server from this version's venv", PLUGIN_CLASS, error_text(exc))
        return False
    return True


def pin(df: DataFrame, level: StorageLevel, truncate: bool) -> DataFrame:
    """``df`` kept at ``level`` for its later uses, computed once, by the first action on it: cached, or with
    ``truncate`` (:func:`truncates_plans`) checkpointed locally, a frame whose plan starts at the kept rows. Free
    it with :func:`unpin`."""
    if truncate:
        return df.localCheckpoint(eager=False, storageLevel=level)
    return df.persist(level)


def unpin(df: DataFrame) -> None:
    """Free what :func:`pin` kept. A checkpoint's blocks are not in the cache ``unpersist`` empties: its RDD's are
    removed (else they stay until the driver's garbage collector has collected that RDD), as ``RDD.unpersist`` does
    without its warning that a checkpointed RDD cannot be computed again. A cached frame (``persist`` marks it) is
    unpersisted, whatever its plan. Over Spark Connect a checkpoint is a relation the server holds for the client: the
    store plugin removes it and its blocks in one request, and the client's object no longer names it (else its
    collection would ask the server to release it again)."""
    if is_remote(df.sparkSession):
        relation = _checkpointed_relation(df)
        if relation is None:
            df.unpersist()
        else:
            _free_checkpoints(df.sparkSession, [relation])
        return
    if df.is_cached:
        df.unpersist()
        return
    plan = df._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        df.sparkSession.sparkContext._jsc.sc().unpersistRDD(plan.rdd().id(), False)


def _checkpointed_relation(df: DataFrame) -> Any:
    """The server's relation behind a Spark Connect frame that ``localCheckpoint`` returned, None for any other."""
    from pyspark.sql.connect.plan import CachedRemoteRelation

    # not getattr: a classic frame's __getattr__ takes a missing attribute for a column and asks its JVM for the schema
    plan = vars(df).get("_plan") if hasattr(df, "__dict__") else None
    return plan if isinstance(plan, CachedRemoteRelation) and plan._relation_id is not None else None


def _free_checkpoints(spark: SparkSession, relations: list[Any]) -> None:
    """Free these Connect checkpoints (:func:`_checkpointed_relation`) in one request to the store plugin, and take
    their ids off the client's objects."""
    from reprocess.storage.hadoop_fs import plugin_request

    plugin_request(spark, "free", ids=[r._relation_id for r in relations])  # type: ignore[arg-type]
    for relation in relations:
        relation._relation_id = None


class Pinned:
    """The frames one run keeps (:func:`pin`), freed together by :meth:`free`; :func:`pinning` frees what is left
    however the run ends."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []

    def pin(self, df: DataFrame, level: StorageLevel, truncate: bool) -> DataFrame:
        kept = pin(df, level, truncate)
        self._frames.append(kept)
        return kept

    def unpin(self, kept: DataFrame) -> None:
        """Free one frame :meth:`pin` returned now, not with the others (a read that another replaces), as
        :meth:`free` frees them: never failing the run."""
        self._frames = [df for df in self._frames if df is not kept]
        alone = Pinned()
        alone._frames = [kept]
        alone.free()

    def free(self) -> None:
        """Free every frame, the last kept first (the outcomes before the merged rows they were made from); a Connect
        client's checkpoints last, in one request: a cached frame's plan may start at one of them (a small landing
        checkpointed, the ledger's frames cached), and over Connect unpersisting it names that relation. One that
        cannot be freed is logged and the others are freed still: freeing never fails a run, nor hides its error.
        Once the driver or the server no longer answers, the rest are let go without a call (:meth:`forget`)."""
        frames, self._frames = self._frames, []
        kept = [(df, _checkpointed_relation(df)) for df in frames]
        frees = [functools.partial(unpin, df) for df, relation in reversed(kept) if relation is None]
        checkpoints = [(df, relation) for df, relation in kept if relation is not None]
        if checkpoints:  # a Connect client's: one request for all, after the frames that may be made of them
            frees.append(functools.partial(_free_checkpoints, checkpoints[0][0].sparkSession,
                                           [relation for _, relation in checkpoints]))
        for free in frees:
            try:
                free()
            except Exception as exc:  # noqa: BLE001 - a kept frame is memory, not data: never worth a run
                if connection_lost(exc):  # every other call would fail too, after minutes of a Connect client's retries
                    log.warning("could not free the kept frames, the driver no longer answers: %s", error_text(exc))
                    self._frames = frames
                    self.forget()
                    return
                log.warning("could not free a kept frame: %s", error_text(exc))

    def forget(self) -> None:
        """Let go of every frame without a call: after a lost connection. A Connect client's checkpoints no longer
        name their relations, whose release, when the objects are collected, would otherwise retry against a server
        that no longer answers."""
        frames, self._frames = self._frames, []
        for df in frames:
            relation = _checkpointed_relation(df)
            if relation is not None:
                relation._relation_id = None


@contextmanager
def pinning() -> Iterator[Pinned]:
    """A run's kept frames (:class:`Pinned`), freed when it ends, by an error too: a long-lived driver (a Connect
    server, a test worker, a notebook) would otherwise keep a failed run's cached frames until it stops. A committing
    run frees them itself once it has committed.

    Not freed: after an error that says the JVM or the Connect server no longer answers (:func:`connection_lost`),
    where every call would fail too and a Connect client retries for minutes first (the frames are let go without a
    call, :meth:`Pinned.forget`); and after an interrupt or a timeout (not an ``Exception``), which may have cut a
    py4j call short, whose answer the next call would read."""
    pins = Pinned()
    try:
        yield pins
    except Exception as exc:
        if connection_lost(exc):
            pins.forget()
        else:
            pins.free()
        raise
    pins.free()


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it came from, says the driver's JVM (py4j) or the Spark Connect server
    (gRPC ``UNAVAILABLE``) no longer answers."""
    for error in _chain(exc):
        if type(error).__name__ == "Py4JNetworkError":
            return True
        status = getattr(error, "getGrpcStatusCode", None) or getattr(error, "code", None)
        if callable(status):
            try:
                if getattr(status(), "name", None) == "UNAVAILABLE":
                    return True
            except Exception:  # noqa: BLE001,S112 - some other error's code(), which takes arguments or fails
                continue
    return False
