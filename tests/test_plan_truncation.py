"""A small run in a local-mode driver checkpoints the frames it keeps (sparkutil.truncates_plans) instead of caching
them: the same warehouse as caching them, and nothing kept after the run."""

from __future__ import annotations

import logging
import weakref
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from pyspark import StorageLevel
from tests.warehouse_state import cycle_at, kept_rdds, warehouse_state

from reprocess import sparkutil
from reprocess.cycle import run as run_module
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.spark_env import tasks_in_driver
from reprocess.sparkutil import truncates_plans

pytestmark = pytest.mark.spark

AS_OFS = ("2026-11-21T02:00:00Z", "2026-11-21T04:00:00Z")


def _plan(df: Any) -> str:
    """The leaf a query over ``df`` starts from while ``df`` is kept."""
    return str(df._jdf.queryExecution().withCachedData().getClass().getSimpleName())


def test_checkpointed_and_cached_frames_give_the_same_warehouse_and_leave_nothing_kept(spark, tmp_path, monkeypatch):
    """Generated failures (poison messages, repeats, an ordered policy's hold-back, the flaky target's second
    failures) through two cycles, once as a small local run does and once with the frames cached as a large run
    does. Each run keeps the landing's records, the merged ledger rows, the due ones and the outcomes: checkpointed,
    their plans start at the kept rows (a ``LogicalRDD``), cached at a cached relation; either way the session holds
    no more kept blocks after a cycle than before it."""
    write_landing(GenerateOptions(out=tmp_path / "landing", messages=200, hours=4, seed=5,
                                  start=datetime(2026, 11, 21, tzinfo=UTC)))
    assert truncates_plans(spark, small=True)
    assert not truncates_plans(spark, small=False)
    assert spark.sparkContext.master == "local[2]"
    pinned: list[str] = []
    checkpoints: list[int] = []  # the RDD ids whose blocks the checkpoints keep
    pin = sparkutil.pin

    def recording(df: Any, level: Any, truncate: bool) -> Any:
        kept = pin(df, level, truncate)
        pinned.append(_plan(kept))
        if truncate:
            checkpoints.append(int(kept._jdf.queryExecution().analyzed().rdd().id()))
        return kept

    monkeypatch.setattr(sparkutil, "pin", recording)
    states, plans, dead_lettered = {}, {}, {}
    for mode in ("checkpoint", "cache"):
        if mode == "cache":
            monkeypatch.setattr(run_module, "truncates_plans", lambda spark, small: False)
        pinned.clear()
        wh = tmp_path / f"wh-{mode}"
        summaries = []
        for as_of in AS_OFS:
            # ids, not a count: what an earlier test left may be collected meanwhile
            before = kept_rdds(spark)
            summaries.append(cycle_at(spark, tmp_path / "landing", wh, as_of))
            assert kept_rdds(spark) <= before, f"{mode}: a kept frame outlived its run as of {as_of}"
            assert not kept_rdds(spark) & set(checkpoints)
        assert len(pinned) == 4 * len(AS_OFS)
        plans[mode] = set(pinned)
        states[mode] = warehouse_state(spark, wh)
        dead_lettered[mode] = [s["dead_lettered"]["total"] for s in summaries]
        assert summaries[1]["due"] > 0, "the second cycle re-drives what the first rescheduled"
        assert summaries[1]["rescheduled"] > 0, "and the flaky target fails some of them again"
    assert len(checkpoints) == 4 * len(AS_OFS), "only the first mode checkpoints"
    assert plans == {"checkpoint": {"LogicalRDD"}, "cache": {"InMemoryRelation"}}
    assert states["checkpoint"] == states["cache"]
    assert dead_lettered["checkpoint"] == dead_lettered["cache"]
    assert any(dead_lettered["cache"]), "the landing has poison messages"
    assert states["cache"]["quarantine"], "and malformed records"


def test_a_failed_run_frees_what_it_kept_and_a_free_that_fails_in_turn_does_not_hide_its_error(spark, monkeypatch,
                                                                                             caplog):
    """sparkutil.pinning frees a run's kept frames, cached and checkpointed, when the run raises; a long-lived
    driver would keep them otherwise. If freeing fails too (the error took the JVM with it), that is logged and the
    run's own error is the one raised."""
    df = spark.range(50)
    before = kept_rdds(spark)
    kept: list[Any] = []

    def failing_run() -> None:
        with sparkutil.pinning() as pins:
            kept.append(pins.pin(df, StorageLevel.MEMORY_AND_DISK, False))
            kept.append(pins.pin(df.selectExpr("id * 2 AS x"), StorageLevel.MEMORY_AND_DISK, True))
            assert [k.count() for k in kept] == [50, 50]
            assert len(kept_rdds(spark) - before) == 2, "both frames keep blocks while the run runs"
            raise RuntimeError("the run's own error")

    with pytest.raises(RuntimeError, match="the run's own error"):
        failing_run()
    assert kept_rdds(spark) <= before
    assert not kept[0].is_cached

    def gone(df: Any) -> None:
        raise ConnectionError("the JVM is gone")

    monkeypatch.setattr(sparkutil, "unpin", gone)
    kept.clear()
    try:
        with caplog.at_level(logging.WARNING, logger="reprocess.sparkutil"), \
                pytest.raises(RuntimeError, match="the run's own error"):
            failing_run()
        assert caplog.text.count("could not free a kept frame: ConnectionError: the JVM is gone") == 2, \
            "each frame is tried"
    finally:
        monkeypatch.undo()
        for k in kept:
            sparkutil.unpin(k)


def test_a_run_whose_jvm_or_server_is_gone_does_not_try_to_free_its_frames(spark, monkeypatch):
    """After an error that says the JVM (py4j) or the Connect server (gRPC UNAVAILABLE) no longer answers, freeing
    would fail too, and a Connect client would first retry for minutes: the run's error is raised at once. Any
    other error, a target's connection refused among them, frees them."""
    from py4j.protocol import Py4JNetworkError
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    unreachable = SparkConnectGrpcException("server gone", grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    assert sparkutil.connection_lost(Py4JNetworkError("Answer from Java side is empty"))
    assert sparkutil.connection_lost(unreachable)
    wrapped = RuntimeError("the cycle failed")
    wrapped.__cause__ = unreachable
    assert sparkutil.connection_lost(wrapped)
    assert not sparkutil.connection_lost(SparkConnectGrpcException("bad plan",
                                                                   grpc_status_code=grpc.StatusCode.INTERNAL))
    assert not sparkutil.connection_lost(ConnectionRefusedError("amqp://127.0.0.1:5672"))
    assert not sparkutil.connection_lost(SystemExit(2))  # a code that is not a gRPC status

    freed: list[Any] = []
    pinned: list[Any] = []
    monkeypatch.setattr(sparkutil, "unpin", freed.append)
    try:
        for error, frees in ((unreachable, False), (ConnectionRefusedError("amqp://127.0.0.1:5672"), True)):
            freed.clear()

            def run(error: Exception = error) -> None:
                with sparkutil.pinning() as pins:
                    pinned.append(pins.pin(spark.range(3), StorageLevel.MEMORY_AND_DISK, False))
                    raise error

            with pytest.raises(type(error)):
                run()
            assert freed == ([pinned[-1]] if frees else []), error
    finally:
        monkeypatch.undo()
        for df in pinned:
            sparkutil.unpin(df)


@pytest.mark.unit
def test_a_connect_clients_checkpoints_are_let_go_without_a_call_once_its_server_is_gone(monkeypatch):
    """Over Spark Connect a checkpoint is a relation the server holds, which pyspark releases when the client's
    object is collected, through a call that retries for minutes against a server that no longer answers. After a
    lost connection the run's checkpoints no longer name their relations (nothing to release), and nothing is
    freed; after any other error they are freed."""
    from types import SimpleNamespace

    from pyspark.errors.exceptions.connect import SparkConnectGrpcException
    from pyspark.sql.connect.plan import CachedRemoteRelation

    events: list[Any] = []
    monkeypatch.setattr(sparkutil, "unpin", lambda df: events.append(("unpin", df.name)))
    monkeypatch.setattr(sparkutil, "_free_checkpoints",
                        lambda spark, relations: events.append(("free", [r._relation_id for r in relations])))
    monkeypatch.setattr(sparkutil, "pin", lambda df, level, truncate: df)
    unreachable = SparkConnectGrpcException("server gone", grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    for error, frees in ((unreachable, False), (RuntimeError("a failed suite"), True)):
        events.clear()
        relation = CachedRemoteRelation("rel-1", None)  # type: ignore[arg-type]  # no session: its release is a no-op
        # a small landing checkpointed, then frames made from it and cached (a small batch on a large ledger)
        frames = (SimpleNamespace(_plan=relation, sparkSession=None, name="landing"),
                  SimpleNamespace(_plan=None, name="merged"), SimpleNamespace(_plan=None, name="final"))

        def run(error: Exception = error, frames: tuple[Any, ...] = frames) -> None:
            with sparkutil.pinning() as pins:
                for df in frames:
                    pins.pin(df, StorageLevel.MEMORY_AND_DISK, True)
                raise error

        with pytest.raises(type(error)):
            run()
        # the cached frames, last kept first, while the relation their plans start at is still there; then it
        assert (events, relation._relation_id) == (
            ([("unpin", "final"), ("unpin", "merged"), ("free", ["rel-1"])], "rel-1") if frees else ([], None)), error

    class Classic:  # a classic frame takes any missing attribute for a column, and asks its JVM for the schema
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"asked the JVM for {name}")

    assert sparkutil._checkpointed_relation(Classic()) is None  # type: ignore[arg-type]


@pytest.mark.unit
def test_a_free_that_finds_the_server_gone_lets_the_other_frames_go_without_a_call(monkeypatch, caplog):
    """A committed run whose server stops answering while it frees: once a call says the server is gone, nothing
    else is tried (each call would retry for minutes) and the checkpoints no longer name their relations."""
    from types import SimpleNamespace

    from pyspark.errors.exceptions.connect import SparkConnectGrpcException
    from pyspark.sql.connect.plan import CachedRemoteRelation

    requests: list[list[str]] = []

    def gone(spark: Any, relations: list[Any]) -> None:
        requests.append([r._relation_id for r in relations])
        raise SparkConnectGrpcException("server gone", grpc_status_code=grpc.StatusCode.UNAVAILABLE)

    def unpin(df: Any) -> None:
        raise SparkConnectGrpcException("server gone", grpc_status_code=grpc.StatusCode.UNAVAILABLE)

    monkeypatch.setattr(sparkutil, "_free_checkpoints", gone)
    monkeypatch.setattr(sparkutil, "unpin", unpin)
    monkeypatch.setattr(sparkutil, "pin", lambda df, level, truncate: df)
    relations = [CachedRemoteRelation(f"rel-{i}", None) for i in (1, 2)]  # type: ignore[arg-type]
    with sparkutil.pinning() as pins:
        for df in (SimpleNamespace(_plan=relations[0], sparkSession=None), SimpleNamespace(_plan=None),
                   SimpleNamespace(_plan=relations[1], sparkSession=None)):
            pins.pin(df, StorageLevel.MEMORY_AND_DISK, True)  # type: ignore[arg-type]
    assert requests == []  # the cached frame's unpersist found the server gone: no request after it
    assert [r._relation_id for r in relations] == [None, None]

    # a small run's frames, all checkpoints: the one request finds the server gone
    relations = [CachedRemoteRelation(f"rel-{i}", None) for i in (3, 4)]  # type: ignore[arg-type]
    with sparkutil.pinning() as pins:
        for relation in relations:
            frame = SimpleNamespace(_plan=relation, sparkSession=None)
            pins.pin(frame, StorageLevel.MEMORY_AND_DISK, True)  # type: ignore[arg-type]
    assert requests == [["rel-3", "rel-4"]]
    assert [r._relation_id for r in relations] == [None, None]
    assert "could not free the kept frames, the driver no longer answers" in caplog.text


@pytest.mark.unit
def test_a_connect_server_checkpoints_only_in_local_mode_with_a_plugin_that_frees(monkeypatch, caplog):
    """Which Connect servers get a small run's checkpoints (sparkutil.server_frees), asked once per session: one in
    local mode whose store plugin answers the ``kept`` request. A server without the plugin, on a cluster, or with a
    plugin built before ``free`` (it refuses ``kept``) caches the frames; a server that no longer answers fails the
    run as any call would."""
    from types import SimpleNamespace

    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    from reprocess.storage import hadoop_fs

    requests: list[str] = []
    answer: list[Exception | None] = [None]

    def request(spark: Any, op: str, **args: Any) -> list[Any]:
        requests.append(op)
        if answer[0] is not None:
            raise answer[0]
        return []

    monkeypatch.setattr(hadoop_fs, "plugin_request", request)
    monkeypatch.setattr(sparkutil, "_SERVER_FREES", weakref.WeakKeyDictionary())
    plugin = f"other.Plugin, {hadoop_fs.PLUGIN_CLASS}"

    class Session:  # a client session: its server's settings
        def __init__(self, master: str, plugins: str | None) -> None:
            settings = {"spark.master": master, hadoop_fs.PLUGIN_CONF: plugins}
            self.conf = SimpleNamespace(get=lambda k, d=None: settings.get(k) or d)

    session = Session("local[2]", plugin)
    assert sparkutil.server_frees(session)  # type: ignore[arg-type]
    assert sparkutil.server_frees(session)  # type: ignore[arg-type]  # the session's answer, not asked again
    assert requests == ["kept"]
    assert sparkutil.server_frees(Session("local[2]", plugin))  # type: ignore[arg-type]  # another session asks
    assert requests == ["kept", "kept"]
    assert not sparkutil.server_frees(Session("local[2]", None))  # type: ignore[arg-type]
    assert not sparkutil.server_frees(Session("spark://127.0.0.1:7077", plugin))  # type: ignore[arg-type]
    assert requests == ["kept", "kept"]
    answer[0] = RuntimeError("IllegalArgumentException: unknown request kept")
    assert not sparkutil.server_frees(Session("local[*]", plugin))  # type: ignore[arg-type]
    assert "cannot free a run's checkpoints" in caplog.text
    answer[0] = SparkConnectGrpcException("server gone", grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(SparkConnectGrpcException):
        sparkutil.server_frees(Session("local[*]", plugin))  # type: ignore[arg-type]


@pytest.mark.unit
def test_only_a_driver_that_runs_its_tasks_itself_checkpoints():
    assert [m for m in ("local", "local[2]", "local[*]", "local[4,3]", "local-cluster[2,1,1024]",
                        "spark://127.0.0.1:7077", "yarn", "k8s://https://10.0.0.1:443") if tasks_in_driver(m)] == [
        "local", "local[2]", "local[*]", "local[4,3]"]
