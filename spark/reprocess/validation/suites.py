"""Great Expectations suites of ``expectations/`` run on Spark DataFrames (GX Core, ephemeral context).

Checks GX cannot state directly (per-policy bounds, "waiting rows have a next attempt") are built
as boolean columns with the cycle's own expressions, and the suites expect them to be true.
See :class:`Validator` for result formats, caching and Data Docs.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from reprocess.errors import ValidationFailedError
from reprocess.ledger.model import DEAD_LETTERED, NO_POLICY, NON_RETRYABLE, WAITING
from reprocess.policy.columns import policy_case
from reprocess.policy.durations import LONG_MAX
from reprocess.policy.reference import max_deliveries
from reprocess.sparkutil import as_of_column

if TYPE_CHECKING:
    import pandas
    from pyspark.sql import Column, DataFrame

    from reprocess.policy.config import Policy, PolicySet
    from reprocess.storage.commit import AnyWarehouse

log = logging.getLogger(__name__)

SUITES_DIR = Path(__file__).resolve().parents[3] / "expectations"  # the repo's; REPROCESS_EXPECTATIONS overrides
SUITES = ("landing", "ledger", "dlq", "run")  # a cycle's
REDRIVE_SUITES = ("redrive_ledger", "redrive_run")  # a DLQ re-drive's
SMALL_ROWS = int(os.environ.get("REPROCESS_GX_SMALL_ROWS", "20000"))  # validated with GX's pandas engine
# ... when they also hold at most this many bytes (a landing frame carries payloads): collecting 1,000 payloads of
# 400 KB through Arrow ran a 2 GB driver out of heap (bench/RESULTS.md, fortieth run)
SMALL_BYTES = int(os.environ.get("REPROCESS_GX_SMALL_BYTES", str(64 << 20)))

_gx_import: threading.Thread | None = None


def _import_gx() -> None:
    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # before the import: it logs at INFO
    import great_expectations  # noqa: F401
    from great_expectations.core import run_identifier  # noqa: F401
    from great_expectations.data_context.types import base  # noqa: F401


def _stable_metric_bundles() -> None:
    """Make GX's Spark engine send the same query for the same suite every time.

    GX's Spark engine computes a suite's aggregate metrics in one ``df.agg`` per domain, in the order its
    validation graph yields them. That order changes from one validation to the next, even for the same suite
    and data in the same process. Spark generates code per query, so every validation was new classes, in a
    long-lived driver too: Janino, then the JIT from the interpreter up (bench/RESULTS.md, thirteenth run). Sorted
    by metric id, the aggregation is the same query each time. GX keys the results by metric id, so the order
    changes nothing else.
    """
    from great_expectations.execution_engine.sparkdf_execution_engine import SparkDFExecutionEngine

    original = SparkDFExecutionEngine.resolve_metric_bundle
    if getattr(original, "_reprocess_sorted", False):
        return

    def resolve_metric_bundle(self: Any, metric_fn_bundle: Any) -> Any:
        return original(self, sorted(metric_fn_bundle, key=lambda c: str(c.metric_configuration.id)))

    resolve_metric_bundle._reprocess_sorted = True  # type: ignore[attr-defined]
    setattr(SparkDFExecutionEngine, "resolve_metric_bundle", resolve_metric_bundle)  # noqa: B010


_TEMPLATE_CODE: dict[str, bytes] = {}  # compiled Data Docs templates by Jinja's bucket key, for the process


def _shared_template_code() -> None:
    """Make every GX view compile each Data Docs template once per process.

    GX's ``DefaultJinjaView`` makes a Jinja environment of its own for each view it renders with, a dozen per run,
    and each environment parses and compiles its templates again: 51 compiles per small cycle, about a fifth of the
    GX gate's time (bench/RESULTS.md, sixty-sixth run). Jinja's bytecode cache, set on each of those environments,
    keeps the compiled code across them; Jinja checks each template's source checksum before reusing its code, and
    every view's environment is made with the same options, so the rendered pages are the same.
    """
    from great_expectations.render.view.view import DefaultJinjaView
    from jinja2 import BytecodeCache

    original = DefaultJinjaView.__init__
    if getattr(original, "_reprocess_shared", False):
        return

    class ProcessCache(BytecodeCache):
        def load_bytecode(self, bucket: Any) -> None:
            code = _TEMPLATE_CODE.get(bucket.key)
            if code is not None:
                bucket.bytecode_from_string(code)

        def dump_bytecode(self, bucket: Any) -> None:
            _TEMPLATE_CODE[bucket.key] = bucket.bytecode_to_string()

    cache = ProcessCache()

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.env.bytecode_cache = cache

    __init__._reprocess_shared = True  # type: ignore[attr-defined]
    setattr(DefaultJinjaView, "__init__", __init__)  # noqa: B010


def preload_gx() -> None:
    """Start importing Great Expectations on a background thread; :class:`Validator` waits for it.

    The import takes about 3 s of Python on a 2-core machine, and a cycle validates only at its end, so a
    cycle that imported GX there paid it on top of its Spark work. Started before the JVM is launched, the
    import overlaps the JVM's start and the first steps, during which the driver's Python mostly waits on
    py4j. What GX shares with the caller (pandas, pyarrow, pyspark.sql) is imported here on the calling
    thread first, so the two threads never wait on each other's module locks. Any error is left for the
    :class:`Validator`'s own import to raise, on the main thread.
    """
    global _gx_import
    if _gx_import is not None:
        return
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark.sql.functions  # noqa: F401

    def run() -> None:
        try:
            _import_gx()
        except Exception:  # noqa: BLE001 - re-raised by Validator's import on the main thread
            log.debug("background import of great_expectations failed", exc_info=True)

    _gx_import = threading.Thread(target=run, name="import-great_expectations", daemon=True)
    _gx_import.start()


@dataclass
class SuiteResult:
    suite: str
    success: bool
    evaluated: int
    failed: list[dict[str, Any]] = field(default_factory=list)
    engine: str = "spark"  # GX's execution engine that validated it: spark or pandas

    def describe(self) -> str:
        if self.success:
            return f"suite {self.suite}: {self.evaluated} expectations passed"
        parts = [f"{f['expectation']}({f.get('column') or ''}) unexpected={f.get('unexpected_count')}"
                 + (f" e.g. {f['sample']}" if f.get("sample") else "")
                 + (f" message ids {f['message_ids']}" if f.get("message_ids") else "")
                 + (f" error: {f['error']}" if f.get("error") else "")
                 for f in self.failed]
        return f"suite {self.suite}: {len(self.failed)} of {self.evaluated} failed: " + "; ".join(parts)


def _columns(kwargs: dict[str, Any]) -> str | None:
    """The column(s) an expectation is about: its ``column``, or a pair's ``column_A, column_B`` (the run suite's
    pairs printed with none, so which of them failed went unsaid)."""
    if kwargs.get("column"):
        return str(kwargs["column"])
    names = [kwargs[k] for k in ("column_A", "column_B") if kwargs.get(k)] or list(kwargs.get("column_list") or [])
    return ", ".join(map(str, names)) or None


def load_suite(name: str) -> dict[str, Any]:
    """The suite ``name`` of the suites folder (``$REPROCESS_EXPECTATIONS``, else the repo's ``expectations/``). One
    that is not there is a ConfigError naming it (a copy of the folder made before a suite was added was a
    FileNotFoundError: exit 1, retried by Airflow, the re-drive staged again each time)."""
    from reprocess.errors import ConfigError

    path = Path(os.environ.get("REPROCESS_EXPECTATIONS") or SUITES_DIR) / f"{name}.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"GX suite {name!r} is not in {path.parent} (REPROCESS_EXPECTATIONS): copy "
                          f"expectations/{name}.json from this release there", key="REPROCESS_EXPECTATIONS") from None
    return json.loads(text)


# The static files GX's pages link to from a site's own folder (the templates of great_expectations/render/view): only
# the favicon. GX copies its whole static folder into every site, 4.3 MB, mostly two animated GIFs and fonts no page
# names, which a site per run wrote into the warehouse each run.
LINKED_STATIC = ("images/favicon.ico",)


_static_folder: Path | None = None


def _linked_static() -> str:
    """A folder named ``static`` (GX keys each file it copies from that name on) holding :data:`LINKED_STATIC` from
    GX's own static folder; made once per process and removed at its exit, or made again if something removed it
    meanwhile (a long-lived driver's temporary folder outlives a cleaner of old files)."""
    global _static_folder
    if _static_folder is None or not all((_static_folder / name).is_file() for name in LINKED_STATIC):
        import great_expectations

        source = Path(great_expectations.__file__).parent / "render" / "view" / "static"
        top = tempfile.mkdtemp(prefix="reprocess-gx-")
        atexit.register(shutil.rmtree, top, ignore_errors=True)
        folder = Path(top) / "static"
        for name in LINKED_STATIC:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, folder / name)
        _static_folder = folder
    return str(_static_folder)


@functools.cache
def _site_builder_class() -> type:
    from great_expectations.render.renderer.site_builder import SiteBuilder

    class RunSiteBuilder(SiteBuilder):
        """GX's site builder, copying into the site only the static files its pages link to (:data:`LINKED_STATIC`)."""

        def build(self, *args: Any, **kwargs: Any) -> Any:
            store = self.target_store
            copy = type(store).copy_static_assets
            setattr(store, "copy_static_assets",  # noqa: B010 - an instance's method, which mypy will not assign
                    lambda source=None: copy(store, source or _linked_static()))
            return super().build(*args, **kwargs)

    return RunSiteBuilder


def __getattr__(name: str) -> Any:
    """``RunSiteBuilder``, made on first use: GX is imported lazily (:func:`preload_gx`) and GX finds the class by name
    in this module (the site's ``module_name``)."""
    if name == "RunSiteBuilder":
        return _site_builder_class()
    raise AttributeError(name)


class Validator:
    """GX validations of one run: a fresh ephemeral context, results dated at the run's as-of (logical time).

    Result formats are chosen for cost: ``BOOLEAN_ONLY`` computes only the unexpected counts GX needs for
    success (one bundled aggregation per batch); a failing suite (a bug) is re-run with ``SUMMARY`` so its
    error shows counts and sample values. Batches are validated from cache and released afterwards. With
    ``docs_dir``, :meth:`build_docs` renders GX Data Docs for the run's validations there.
    """

    def __init__(self, run_name: str = "adhoc", run_time_ms: int = 0, docs_dir: str | None = None) -> None:
        if _gx_import is not None:
            _gx_import.join()
        _import_gx()
        _stable_metric_bundles()
        _shared_template_code()
        import great_expectations as gx
        from great_expectations.core.run_identifier import RunIdentifier
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.ctx = gx.get_context(mode="ephemeral")
        self.ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        for site in list(self.ctx.list_data_docs_sites()):  # the ephemeral default site writes to a temp dir
            self.ctx.delete_data_docs_site(site)
        self.docs_dir = docs_dir
        if docs_dir is not None:
            self.ctx.add_data_docs_site("run", {
                "class_name": "RunSiteBuilder", "module_name": __name__,
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": docs_dir},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
        # GX would persist every frame it is given (and never unpersist it): the caller caches what it validates
        # (validate's ``cached``), and a projection of a cached frame, as the landing suite's is, needs no second copy
        self.source = self.ctx.data_sources.add_spark(name="reprocess", persist=False)
        self.small_source = self.ctx.data_sources.add_pandas(name="reprocess_small")
        self.run_id = RunIdentifier(run_name=run_name, run_time=datetime.fromtimestamp(run_time_ms / 1000, tz=UTC))
        self.results: list[SuiteResult] = []

    def validate(self, df: DataFrame | pandas.DataFrame, suite: str | dict[str, Any], only: list[int] | None = None,
                 params: dict[str, Any] | None = None, cached: bool = False, rows: int | None = None,
                 engine: str | None = None, data_bytes: int | None = None) -> SuiteResult:
        """Run a suite (a name under expectations/, or its JSON) on ``df``; ``only`` keeps some expectations.

        ``cached``: ``df`` is persisted by the caller, or is a projection of a frame it persisted (do not cache it
        again). ``rows``: the frame's row count when the caller knows it: a frame of at most ``SMALL_ROWS`` rows is
        collected (Arrow) and validated by GX's pandas engine, which spares the dozen tiny Spark jobs GX's Spark
        engine runs per suite; larger ones stay on Spark. ``data_bytes``: the bytes of the frame's strings when
        they may be many (payloads): above ``SMALL_BYTES`` the frame stays on Spark however few its rows, since
        collecting it holds it whole in the driver, several times over. ``engine`` ("spark" | "pandas") forces one.
        ``df`` may be a pandas DataFrame (made in the driver): it goes to Spark only for the Spark engine.
        """
        import great_expectations as gx

        doc = load_suite(suite) if isinstance(suite, str) else suite
        if only is not None:
            doc = {**doc, "expectations": [doc["expectations"][i] for i in only]}
        name = doc["name"]
        n = sum(1 for r in self.results if r.suite == name)
        key = name if n == 0 else f"{name}-{n}"
        if engine is None:
            few = rows is not None and rows <= SMALL_ROWS and (data_bytes is None or data_bytes <= SMALL_BYTES)
            engine = "pandas" if few else "spark"
        source = self.small_source if engine == "pandas" else self.source
        asset = source.add_dataframe_asset(name=key)
        batch = asset.add_batch_definition_whole_dataframe(key)
        gx_suite = self.ctx.suites.add(gx.ExpectationSuite(**{**doc, "name": key}))
        definition = self.ctx.validation_definitions.add(gx.ValidationDefinition(name=key, data=batch,
                                                                                  suite=gx_suite))
        local = not hasattr(df, "sparkSession")  # a pandas frame
        # a failure names the rows: the message ids of a few that broke it (their values alone, e.g. [False, False],
        # said nothing of which messages)
        summary: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 5}
        if "message_id" in df.columns:
            summary |= {"unexpected_index_column_names": ["message_id"], "return_unexpected_index_query": False}
        if engine == "pandas":
            return self._finish(name, engine, definition.run(
                batch_parameters={"dataframe": df if local else df.toPandas()}, expectation_parameters=params or {},
                result_format=summary, run_id=self.run_id))
        if local:
            from pyspark.sql import SparkSession

            df = SparkSession.active().createDataFrame(df)
        data = df if cached else df.persist()
        try:
            result = definition.run(batch_parameters={"dataframe": data}, expectation_parameters=params or {},
                                    result_format={"result_format": "BOOLEAN_ONLY"}, run_id=self.run_id)
            if not result.success:
                result = definition.run(batch_parameters={"dataframe": data}, expectation_parameters=params or {},
                                        result_format=summary, run_id=self.run_id)
        finally:
            if not cached:
                data.unpersist()
        return self._finish(name, engine, result)

    def _finish(self, name: str, engine: str, result: Any) -> SuiteResult:
        failed = [
            {"expectation": r.expectation_config.type if r.expectation_config else None,
             "column": _columns(r.expectation_config.kwargs) if r.expectation_config else None,
             "unexpected_count": (r.result or {}).get("unexpected_count"),
             "sample": (r.result or {}).get("partial_unexpected_list"),
             "message_ids": [row.get("message_id") for row in (r.result or {}).get("partial_unexpected_index_list")
                             or [] if isinstance(row, dict)] or None,
             "error": (r.exception_info or {}).get("exception_message")}
            for r in result.results if not r.success]
        out = SuiteResult(name, bool(result.success), len(result.results), failed, engine)
        self.results.append(out)
        log.info("validation %s engine=%s", out.describe(), engine)
        return out

    def build_docs(self) -> str | None:
        """Render the run's Data Docs; the path of their ``index.html`` (None without ``docs_dir``)."""
        if self.docs_dir is None:
            return None
        self.ctx.build_data_docs(site_names=["run"])
        return str(Path(self.docs_dir) / "index.html")


def validate(df: DataFrame, suite: str | dict[str, Any], only: list[int] | None = None,
             params: dict[str, Any] | None = None, engine: str = "spark") -> SuiteResult:
    """Validate ``df`` with a suite outside a run (no Data Docs)."""
    return Validator().validate(df, suite, only=only, params=params, engine=engine)


def gate(wh: AnyWarehouse, run_id: str, as_of_ms: int, checks: Sequence[tuple[Any, str, dict[str, Any]]],
         what: str = "run", detail: str = "") -> dict[str, Any]:
    """The GX gate before a commit (a cycle's, a re-drive's): each ``(frame, suite, validate's keyword arguments)``
    of ``checks`` validated in turn, Data Docs built into ``runs/<run_id>/data_docs`` even when one fails. A failed
    suite raises :class:`ValidationFailedError` (exit 9) naming them, ``detail`` and the Data Docs: a bug, as nothing
    was committed. Returns what the audit records: rows evaluated and engine per suite, the docs, the seconds."""
    rel_docs = f"runs/{run_id}/data_docs"
    index = str(wh.path(rel_docs, "index.html"))
    t = time.monotonic()
    with wh.local_folder(rel_docs) as docs:  # GX renders into a local folder
        v = Validator(run_id, as_of_ms, docs)
        try:
            for frame, suite, kwargs in checks:
                v.validate(frame, suite, **kwargs)
        finally:
            v.build_docs()
            log.info("data docs %s=%s path=%s", "run_id" if what == "run" else "request_id", run_id, index)
    failed = [r for r in v.results if not r.success]
    if failed:
        error = ValidationFailedError(f"{what} {run_id}: " + "; ".join(r.describe() for r in failed) + detail
                                      + f". This is a bug: nothing was committed. Data Docs: {index}")
        error.data_docs = index
        raise error
    return {"suites": {r.suite: r.evaluated for r in v.results}, "engines": {r.suite: r.engine for r in v.results},
            "passed": True, "data_docs": index, "seconds": round(time.monotonic() - t, 3)}


def _limit(policies: PolicySet, address: Column, consumer_group: Column) -> Column:
    def bound(p: Policy) -> Column:
        limit = max_deliveries(p)
        return F.lit(LONG_MAX if limit is None else limit).cast("long")

    out = policy_case(policies, address, consumer_group, lambda _n, p: bound(p))
    return F.coalesce(out, F.lit(LONG_MAX).cast("long"))  # an address no policy matches any more: no bound


def _row_checks() -> list[Column]:
    """The checks every ledger row must pass, in the ledger suite and in the re-drive's: a waiting message has a
    next attempt, and it is no earlier than its last failure."""
    waiting = F.col("state") == WAITING
    return [
        _true(~waiting | F.col("next_attempt_ms").isNotNull()).alias("waiting_has_next_attempt"),
        _true(~waiting | F.col("last_failed_ms").isNull() | (F.col("next_attempt_ms") >= F.col("last_failed_ms")))
        .alias("next_attempt_after_last_failure"),
    ]


def ledger_frame(ledger: DataFrame, policies: PolicySet, run_id: str | None = None) -> DataFrame:
    """The ledger with the boolean columns the ledger suite expects to be true. With ``run_id``, a row that run left
    as it was (``updated_run`` another's) is not judged against its policy's bound: it was by the run that wrote it,
    and the bound may have been lowered since (a terminal row rewritten because its file holds a changed one)."""
    waiting = F.col("state") == WAITING
    # the bound in a projection of its own: used twice below, inlined it would match every address twice
    ledger = ledger.withColumn("_bound", _limit(policies, F.col("address"), F.col("consumer_group")))
    limit = F.col("_bound")
    if "released_deliveries" in ledger.columns:
        # moved back from the DLQ by an operator without a reset: one delivery beyond its count then
        limit = F.greatest(limit, F.coalesce(F.col("released_deliveries") + 1, limit))
    within = F.col("deliveries") <= limit
    if "waited_deliveries" in ledger.columns:  # a run's ledger rows (reprocess.ledger.merge)
        # A message waiting before this run gets its next delivery whatever bound the policy file gives now, as a
        # broker gives a message it had already scheduled when its bound was lowered; it is dead-lettered if that
        # delivery fails. Only a message left waiting as it was may stay beyond the bound: one this run keeps
        # waiting (a new failure, a failed re-drive) must have deliveries left by it.
        waited = F.col("waited_deliveries")
        within = F.col("deliveries") <= F.greatest(limit, F.coalesce(waited + 1, limit))
        unchanged = F.coalesce(F.col("deliveries") == waited, F.lit(False))
        within = within & (~waiting | unchanged | (F.col("deliveries") < limit))
    if "error_history" in ledger.columns:
        # A message may arrive already past its bound: its source made the deliveries (a landing record's
        # delivery_count, or more failures of one id than the bound). Counting keeps the source's number
        # (docs/adr/0001-counting.md) and the message is dead-lettered at once; only a dead letter whose last
        # delivery reprocess made itself (a re-drive: history entries without a landing fingerprint) is bounded.
        last = F.try_element_at(F.col("error_history"), F.lit(-1))
        within = within | ((F.col("state") == DEAD_LETTERED) & F.coalesce(last["fp"].isNotNull(), F.lit(False)))
    if run_id is not None and "updated_run" in ledger.columns:
        within = within | ~F.coalesce(F.col("updated_run") == F.lit(run_id), F.lit(False))
    return ledger.select(
        "message_id", "state", "deliveries",
        *_row_checks(),
        _true(within).alias("deliveries_within_policy_bound"),
    )


def redrive_ledger_frame(rows: DataFrame, request_id: str, as_of_ms: int, reset_deliveries: bool) -> DataFrame:
    """The ledger rows a re-drive rewrites, with the boolean columns the ``redrive_ledger`` suite expects to be true:
    the ledger suite's row checks for every row, and for the rows request ``request_id`` moved (``updated_run``) that
    they wait again, due no earlier than its ``as_of_ms`` (its now), with their deliveries as ``reset_deliveries``
    asks. The policy bound is not judged: a moved message gets one delivery beyond its count by design (ADR 0001)."""
    waiting = F.col("state") == WAITING
    moved = F.coalesce(F.col("updated_run") == F.lit(request_id), F.lit(False))
    again = waiting & F.col("reason_code").isNull() & F.col("dead_letter_address").isNull() \
        & F.col("terminal_ms").isNull()
    due = (F.col("next_attempt_ms") >= F.lit(as_of_ms)) & (
        F.col("last_failed_ms").isNull() | (F.col("next_attempt_ms") >= F.col("last_failed_ms")))
    if reset_deliveries:
        asked = (F.col("deliveries") == 0) & F.col("released_deliveries").isNull()
        if "reset_ms" in rows.columns:  # the reset's time: failures from before it do not bring their count back
            asked = asked & F.coalesce((F.col("reset_ms") >= F.lit(as_of_ms)) & (
                F.col("last_failed_ms").isNull() | (F.col("reset_ms") >= F.col("last_failed_ms"))), F.lit(False))
    else:
        asked = F.col("released_deliveries") == F.col("deliveries")
    return rows.select(
        "message_id", "state", "deliveries",
        *_row_checks(),
        _true(~moved | again).alias("redriven_waiting_again"),
        _true(~moved | due).alias("redriven_due_from_request"),
        _true(~moved | asked).alias("redriven_deliveries_as_asked"),
    )


def redrive_table(balance: dict[str, int]) -> pandas.DataFrame:
    """A re-drive's balance counts (``redrive._balance``) as the one-row table the ``redrive_run`` suite checks."""
    import pandas as pd

    row = dict(balance)
    row["dlq_rows_before_minus_moved_records"] = balance["dlq_rows_before"] - balance["dlq_records_moved"]
    return pd.DataFrame([row])


def _true(check: Column) -> Column:
    """``check``, false where it is null: GX's in-set expectation passes a null, and a check of a null input (a
    state or a count missing) is null."""
    return F.coalesce(check, F.lit(False))


def dlq_frame(dlq: DataFrame, policies: PolicySet) -> DataFrame:
    """DLQ rows with ``really_exhausted_or_non_retryable``."""
    ok = F.col("reason_code").isin(NON_RETRYABLE, NO_POLICY) | (
        F.col("deliveries") >= _limit(policies, F.col("original_address"), F.col("consumer_group")))
    return dlq.select("message_id", "original_address", "reason_code",
                      _true(ok).alias("really_exhausted_or_non_retryable"))


FAILED_AFTER_AS_OF = "failed_after_as_of_ms"  # failed_ms minus the run's as-of: a column landing records carry
LANDING_COLUMNS = ("message_id", "address", "payload", "failed_ms", FAILED_AFTER_AS_OF, "delivery_count",
                   "payload_bytes")


def landing_columns() -> dict[str, Column]:
    """The columns the landing suite speaks of (``LANDING_COLUMNS``), over parsed landing records that carry
    :data:`FAILED_AFTER_AS_OF` (:func:`failed_after_as_of`)."""
    return {name: F.col(name) for name in LANDING_COLUMNS[:-1]} | {"payload_bytes": F.octet_length("payload")}


def failed_after_as_of(as_of: int | Column) -> Column:
    """``failed_ms`` minus the run's as-of (epoch ms, or the column of :func:`reprocess.sparkutil.with_as_of`).

    The landing suite bounds this difference, not ``failed_ms`` by the as-of plus the skew: GX writes a suite's
    parameters into the queries it runs as literals, and with generated code a literal that changes at every run
    is new classes at every run (bench/RESULTS.md, twelfth run). Timestamps parse to years 1-9999, so the difference
    cannot overflow."""
    return F.col("failed_ms") - as_of_column(as_of)


def landing_params(max_payload_bytes: int, max_future_ms: int) -> dict[str, Any]:
    """Values of the landing suite's ``$PARAMETER`` s for a run: the same at every as-of."""
    return {"max_payload_bytes": max_payload_bytes, "max_future_ms": max_future_ms}


def landing_frame(records: DataFrame) -> DataFrame:
    """Landing records as the landing suite sees them."""
    return records.select(*[c.alias(n) for n, c in landing_columns().items()])


def run_table(balance: dict[str, int]) -> pandas.DataFrame:
    """One row: the run's balance counts and the totals the run suite expects them to equal. A pandas frame made in
    the driver: GX's pandas engine validates it with no Spark job (:meth:`Validator.validate` makes a Spark frame of
    it for the Spark engine)."""
    import pandas as pd

    b = balance
    return pd.DataFrame([{
        "messages_after": b["messages_after"], "messages_before_plus_new": b["messages_before"] + b["new_messages"],
        "ingested": b["ingested"], "new_plus_repeat_plus_duplicates_plus_quarantined":
            b["new_message_failures"] + b["repeat_failures"] + b["duplicates"] + b["bad_records"],
        "quarantined": b["quarantined"], "bad_records_plus_corrupt_files": b["bad_records"] + b["corrupt_files"],
        "ledger_rows": b["ledger_rows"], "ledger_distinct_ids": b["ledger_distinct_ids"],
        "due": b["due"], "delivered_plus_rescheduled_plus_dead_lettered_plus_left_due":
            b["delivered"] + b["rescheduled"] + b["redriven_dead_lettered"] + left_without_outcome(b),
        "left_due_only_when_target_failed": left_due_only_when_target_failed(b),
        # runs before these counts had none: they balance as they did
        "records_read": b.get("records_read", 0), "ingested_plus_deferred_plus_decided_earlier":
            b.get("ingested", 0) + b.get("deferred", 0) + b.get("decided_earlier", 0) if "records_read" in b else 0,
        "records_not_in_one_place": b.get("records_not_in_one_place", 0),
    }])


def left_without_outcome(b: dict[str, int]) -> int:
    """The due messages a run's re-drive left without an outcome, as counted where they were left (``not_redriven``);
    for runs before those counts, inferred (``left_due``: due minus outcomes)."""
    return b.get("not_redriven", b["left_due"])


def left_due_only_when_target_failed(b: dict[str, int]) -> bool:
    """A due message goes without an outcome only when its target, or its destination on it, failed (a run's
    ``balance``; runs before destinations were counted have no ``target_down_destinations``)."""
    return b["left_due"] == 0 or b.get("target_down_partitions", 0) + b.get("target_down_destinations", 0) > 0


__all__ = ["DEAD_LETTERED", "FAILED_AFTER_AS_OF", "LANDING_COLUMNS", "SUITES", "SuiteResult", "Validator", "dlq_frame",
           "failed_after_as_of", "gate", "landing_columns", "landing_frame", "landing_params", "ledger_frame",
           "left_due_only_when_target_failed", "left_without_outcome", "load_suite", "run_table", "validate"]
