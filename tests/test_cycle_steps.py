"""Each step and state transition of a cycle on tiny inline landing data."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from reprocess.cli import parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.policy import parse_policies
from reprocess.storage.read import read_dataset

pytestmark = pytest.mark.spark

POLICIES_TEXT = """
default_dead_letter_address: ops.dlq
non_retryable:
  - error_class: ".*ValidationError"
policies:
  - match: "orders.#"
    profile: stepped
    settings: {delays: [10m], max_deliveries: 3}
  - match: "billing.*"
    profile: artemis
    settings: {redelivery-delay: 60000, max-delivery-attempts: 2}
  - match: "fifo.#"
    profile: stepped
    settings: {delays: [1m], max_deliveries: 5}
    ordered: true
"""
POLICIES = parse_policies(POLICIES_TEXT)


def rec(mid: str, at: str, address: str = "orders.created", **extra) -> dict:
    return {"message_id": mid, "address": address, "payload": f"p-{mid}", "failed_at": at, **extra}


def land(root: Path, hour: str, name: str, lines: list, day: str = "2026-11-21") -> Path:
    folder = root / f"dt={day}" / f"hour={hour}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def cycle(spark, tmp_path, as_of: str, target: str = "python:reprocess.targets.examples:always_fail",
          policies=POLICIES, **kw):
    return run_cycle(spark, CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"),
                                         policies=policies, as_of_ms=parse_instant(as_of), target=target, **kw))


def ledger(spark, tmp_path) -> dict[str, dict]:
    df = read_dataset(spark, str(tmp_path / "wh"), "ledger")
    return {r.message_id: r.asDict() for r in df.collect()}


def test_bad_records_are_quarantined_with_file_line_and_reason_and_good_ones_proceed(spark, tmp_path):
    path = land(tmp_path / "landing", "10", "a.jsonl", [
        rec("ok-1", "2026-11-21T10:00:00Z"),
        "{not json",
        rec("no-offset", "2026-11-21T10:00:00"),
        {"message_id": "no-payload", "address": "orders.x", "failed_at": "2026-11-21T10:00:00Z"},
        rec("unknown", "2026-11-21T10:00:00Z", address="nobody.listens"),
        rec("bad-count", "2026-11-21T10:00:00Z", delivery_count=0),
    ])
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert s["quarantined"] == 5
    assert s["new_messages"] == 1
    q = {r.record_no: r for r in read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()}
    assert {n: q[n].reason_code for n in q} == {2: "MALFORMED_JSON", 3: "INVALID_TIMESTAMP", 4: "MISSING_FIELD",
                                                5: "UNKNOWN_ADDRESS", 6: "INVALID_DELIVERY_COUNT"}
    assert all(r.source_file == str(path.resolve()) for r in q.values())
    assert q[4].reason == "required field 'payload' is missing or null"
    assert q[2].raw == "{not json"
    assert set(ledger(spark, tmp_path)) == {"ok-1"}


def test_a_cycle_numbers_each_files_records_and_leaves_the_sessions_file_splitting_as_it_found_it(spark, tmp_path):
    # The landing is read one whole file per task; afterwards the session splits files as before, so the ledger's
    # many small bucket files are packed into few tasks (and a long-lived driver's other jobs see no change).
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    spark.conf.set(keys[0], str(64 << 20))
    spark.conf.unset(keys[1])
    before = {k: spark.conf.get(k) for k in keys}
    land(tmp_path / "landing", "10", "a.jsonl", [rec("a-1", "2026-11-21T10:00:00Z"), "{not json"])
    land(tmp_path / "landing", "10", "b.jsonl", ["[1]", rec("b-2", "2026-11-21T10:00:00Z"), "{not json"])
    try:
        cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
        after = {k: spark.conf.get(k) for k in keys}
    finally:
        spark.conf.unset(keys[0])
    assert after == before
    assert before[keys[0]] == str(64 << 20)
    q = {(Path(r.source_file).name, r.record_no): r.reason_code
         for r in read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()}
    assert q == {("a.jsonl", 2): "MALFORMED_JSON", ("b.jsonl", 1): "NOT_AN_OBJECT", ("b.jsonl", 3): "MALFORMED_JSON"}
    assert set(ledger(spark, tmp_path)) == {"a-1", "b-2"}


def test_the_ledger_scan_of_a_small_landing_runs_generated_code_once_the_ledger_is_large(spark, tmp_path, monkeypatch,
                                                                                           caplog):
    """Locating a batch's messages in the ledger reads an id per ledger row: with a small landing over a large ledger
    that scan runs generated code, sized to the ledger's rows as the last run counted them, while the batch's own
    steps stay interpreted."""
    import reprocess.sparkutil as sparkutil

    land(tmp_path / "landing", "10", "a.jsonl", [rec(f"a-{i}", "2026-11-21T10:00:00Z") for i in range(5)])
    first = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert sum(first["states"].values()) == 5
    land(tmp_path / "landing", "10", "b.jsonl", [rec(m, "2026-11-21T10:06:00Z") for m in ("a-1", "b-1")])
    chosen = []
    for as_of, rows in (("2026-11-21T10:07:00Z", 6), ("2026-11-21T10:08:00Z", 5)):  # the bound just above, then at
        monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_SCAN_ROWS", rows)
        caplog.clear()
        with caplog.at_level("INFO", logger="reprocess.cycle.run"):
            s = cycle(spark, tmp_path, as_of)
        (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step=locate")]
        chosen.append((line.split("scan_codegen=")[1].split()[0], s["codegen"]))
    assert chosen == [("interpreted", "interpreted"), ("generated", "interpreted")]
    assert sum(s["states"].values()) == 6
    assert ledger(spark, tmp_path)["a-1"]["deliveries"] == 2  # found by the scan: its second failure merged


def test_a_large_input_gets_more_shuffle_partitions_with_the_same_outcome_and_ledger_files(spark, tmp_path,
                                                                                          monkeypatch, caplog):
    """A cycle's shuffles get a partition per ``INPUT_BYTES_PER_SHUFFLE_PARTITION`` of its input when that is more than
    the session's count, so that a large batch fits a small heap, and per ``LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_
    PARTITION`` when its records are large (the step log's ``record_bytes``: the landing's payload bytes per record
    read, or the ledger files' bytes per row of those the run rewrites).
    The outcome is the same; the ledger is still written
    by the session's count of tasks (a file per task and bucket, which every later run opens); and the session's
    count is back afterwards. (A small input gets one partition, and the rule per ``INPUT_BYTES_PER_SHUFFLE_
    PARTITION`` is the same with another divisor: test_shuffles_are_sized_to_the_input... checks both rules; here a
    cycle of large records is sized by the bytes it measures, as any cycle is.)"""
    import reprocess.sparkutil as sparkutil
    from reprocess.storage.commit import Warehouse

    base = int(spark.conf.get("spark.sql.shuffle.partitions"))
    monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_BYTES", 0)  # not a small input: generated code, as above 16 MB
    records = [rec(f"m-{i}", "2026-11-21T10:00:00Z") for i in range(60)]
    chosen, ledgers = {}, {}
    for name in ("plain", "large_records"):
        root = tmp_path / name
        path = land(root / "landing", "10", "a.jsonl", records)
        size = path.stat().st_size
        monkeypatch.setattr(sparkutil, "INPUT_BYTES_PER_SHUFFLE_PARTITION", 1 << 40)
        # any record counts as large, and large records get a partition per this many bytes
        monkeypatch.setattr(sparkutil, "LARGE_RECORD_BYTES", 1 if name == "large_records" else 1 << 40)
        monkeypatch.setattr(sparkutil, "LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION", size // (base + 4))
        chosen[name] = []
        for as_of in ("2026-11-21T10:05:00Z", "2026-11-21T10:12:00Z"):  # new failures, then their re-drive
            rewritten = Warehouse(root / "wh").live_files("ledger") if (root / "wh").exists() else []
            caplog.clear()
            with caplog.at_level("INFO", logger="reprocess.cycle.run"):
                s = cycle(spark, root, as_of)
            (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step=locate")]
            chosen[name].append(int(line.split("shuffle_partitions=")[1].split()[0]))
            record_bytes = int(line.split(" record_bytes=")[1].split()[0])
            if not rewritten:  # the landing's payload bytes per record read
                assert record_bytes == sum(len(r["payload"]) for r in records) // 60, line
            else:  # no landing: the bytes per row of the ledger files rewritten (all of them: every message is due)
                assert record_bytes == sum(Path(f).stat().st_size for f in rewritten) // 60, line
            assert spark.conf.get("spark.sql.shuffle.partitions") == str(base)
        assert (s["due"], s["rescheduled"]) == (60, 60)
        ledgers[name] = ledger(spark, root)
        files = Warehouse(root / "wh").live_files("ledger")
        buckets = [f.split("bucket=")[1].split("/")[0] for f in files]
        assert max(buckets.count(b) for b in buckets) <= base, files
    assert chosen["plain"] == [base, base]
    assert chosen["large_records"][0] > base
    assert ledgers["plain"] == ledgers["large_records"]


def test_a_batch_beyond_half_the_cache_memory_is_cached_on_disk_alone_with_the_same_outcome(spark, tmp_path,
                                                                                             monkeypatch, caplog):
    """A cycle caches its records, merged ledger rows, due rows and outcomes in memory as far as they fit
    (Spark's default), but on disk alone when the batch's bytes are more than half of what the cache can hold in
    memory: a block that does not fit is otherwise tried in memory again at each read. The outcome is the same; the
    step log names the level; the frames cached during the cycle really are at that level."""
    import logging

    from reprocess.sparkutil import CACHE_MEMORY_ENV
    from reprocess.storage.commit import Warehouse

    jsc = spark.sparkContext._jsc

    class Levels(logging.Handler):
        """At the merge step's log line, the storage levels of the frames the cycle has cached so far."""

        def __init__(self, before: set[int]) -> None:
            super().__init__()
            self.before, self.levels, self.said = before, set(), {}

        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith(("step=landing", "step=locate")):
                self.said[msg.split()[0]] = msg.split(" cache=")[1].split()[0]
            if msg.startswith("step=merge"):
                rdds = jsc.getPersistentRDDs()
                for key in rdds.keySet():
                    if int(key) not in self.before:
                        level = rdds.get(key).getStorageLevel()
                        self.levels.add((level.useMemory(), level.useDisk()))

    records = [rec(f"m-{i}", "2026-11-21T10:00:00Z") for i in range(20)] + [
        rec("invalid", "2026-11-21T10:00:00Z", error_class="com.acme.ValidationError"), "{not json"]
    outcomes, levels = {}, {}
    for name, budget in (("memory", 1 << 40), ("disk", 1)):
        monkeypatch.setenv(CACHE_MEMORY_ENV, str(budget))
        root = tmp_path / name
        land(root / "landing", "10", "a.jsonl", records)
        summaries = []
        for as_of in ("2026-11-21T10:05:00Z", "2026-11-21T10:12:00Z"):  # new failures, then their re-drive
            handler = Levels({int(k) for k in jsc.getPersistentRDDs().keySet()})
            logger = logging.getLogger("reprocess.cycle.run")
            logger.addHandler(handler)
            try:
                with caplog.at_level("INFO", logger="reprocess.cycle.run"):
                    s = cycle(spark, root, as_of)
            finally:
                logger.removeHandler(handler)
            summaries.append({k: s[k] for k in ("new_messages", "quarantined", "due", "rescheduled", "waiting")}
                             | {"dead": s["dead_lettered"]["total"]})
            levels[name, as_of] = (handler.said, handler.levels)
        dlq = read_dataset(spark, str(root / "wh"), "dlq").select("message_id", "reason_code").collect()
        outcomes[name] = (summaries, ledger(spark, root), sorted(map(tuple, dlq)),
                          len(Warehouse(root / "wh").live_files("quarantine")))
    for as_of in ("2026-11-21T10:05:00Z", "2026-11-21T10:12:00Z"):
        assert levels["memory", as_of] == ({"step=landing": "memory", "step=locate": "memory"}, {(True, True)})
    assert levels["disk", "2026-11-21T10:05:00Z"] == ({"step=landing": "disk", "step=locate": "disk"},
                                                      {(False, True)})
    # the re-drive's run reads no landing (nothing to hold), and the ledger files it rewrites
    assert levels["disk", "2026-11-21T10:12:00Z"] == ({"step=landing": "memory", "step=locate": "disk"},
                                                      {(True, True), (False, True)})
    assert outcomes["disk"] == outcomes["memory"]
    summaries, _, dlq, quarantine_files = outcomes["disk"]
    assert summaries[0] == {"new_messages": 21, "quarantined": 1, "due": 0, "rescheduled": 0, "waiting": 20,
                            "dead": 1}
    assert (summaries[1]["due"], summaries[1]["rescheduled"]) == (20, 20)
    assert dlq == [("invalid", "NON_RETRYABLE")]
    assert quarantine_files == 1


def test_the_cache_level_follows_the_memory_the_settings_give(spark, monkeypatch):
    """What the cache can hold in memory comes from the session's settings the way Spark's memory manager shares a
    heap out (less 300 MiB, times spark.memory.fraction), per driver in local mode and per executor times their
    count on a cluster; unknown (Spark's default level) when executors come and go."""
    from reprocess.sparkutil import (
        CACHE_MEMORY_ENV,
        cache_level,
        cache_memory_bytes,
        jvm_size_bytes,
        memory_of_settings,
    )

    assert [jvm_size_bytes(t) for t in ("2g", "512m", "1024", "14G", "300mb", "64k")] == [
        2 << 30, 512 << 20, 1 << 30, 14 << 30, 300 << 20, 64 << 10]
    with pytest.raises(ValueError, match="not a memory size"):
        jvm_size_bytes("lots")
    local = {"spark.master": "local[*]", "spark.driver.memory": "2g"}
    assert memory_of_settings(local.get) == int((2048 - 300) * 2**20 * 0.6)
    assert memory_of_settings({"spark.master": "local[2]"}.get) == int((1024 - 300) * 2**20 * 0.6)  # 1g: Spark's
    assert memory_of_settings({**local, "spark.memory.fraction": "0.5"}.get) == (2048 - 300) * 2**20 // 2
    cluster = {"spark.master": "spark://127.0.0.1:7077", "spark.executor.memory": "4g", "spark.executor.instances": "3"}
    assert memory_of_settings(cluster.get) == 3 * int((4096 - 300) * 2**20 * 0.6)
    assert memory_of_settings({**cluster, "spark.dynamicAllocation.enabled": "true"}.get) is None
    assert memory_of_settings({"spark.master": "yarn"}.get) is None
    # a local-cluster master's tasks run in executors of their own, not in the driver's heap
    assert memory_of_settings({**local, "spark.master": "local-cluster[2,1,1024]"}.get) is None

    monkeypatch.setenv(CACHE_MEMORY_ENV, "1000")
    assert cache_memory_bytes(spark) == 1000
    assert cache_level(1000, 500)[1] == "memory"
    level, name = cache_level(1000, 501)
    assert name == "disk"
    assert (level.useMemory, level.useDisk) == (False, True)
    monkeypatch.delenv(CACHE_MEMORY_ENV)  # the tests' session: its own settings
    budget = cache_memory_bytes(spark)
    assert budget is not None
    assert budget == memory_of_settings(lambda key: spark.conf.get(key, None))
    assert cache_level(budget, budget // 2)[1] == "memory"
    assert cache_level(budget, budget // 2 + 1)[1] == "disk"
    assert cache_level(None, 1 << 40)[1] == "memory"  # not known: Spark's default


def test_new_failure_waits_then_fails_again_then_dead_letters_when_exhausted(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    m = ledger(spark, tmp_path)["m1"]
    assert (m["state"], m["deliveries"], m["next_attempt_ms"]) == (
        "WAITING_RETRY", 1, parse_instant("2026-11-21T10:10:00Z"))
    s = cycle(spark, tmp_path, "2026-11-21T10:10:00Z")  # due: delivery 2 fails "at" the as-of
    assert (s["due"], s["rescheduled"]) == (1, 1)
    m = ledger(spark, tmp_path)["m1"]
    assert (m["state"], m["deliveries"], m["next_attempt_ms"]) == (
        "WAITING_RETRY", 2, parse_instant("2026-11-21T10:20:00Z"))
    assert m["last_error_class"] == "reprocess.targets.examples.TransientError"
    s = cycle(spark, tmp_path, "2026-11-21T10:25:00Z")  # delivery 3 fails: max_deliveries 3 reached
    assert s["dead_lettered"]["MAX_DELIVERIES_EXCEEDED"] == 1
    m = ledger(spark, tmp_path)["m1"]
    assert (m["state"], m["deliveries"], m["reason_code"]) == ("DEAD_LETTERED", 3, "MAX_DELIVERIES_EXCEEDED")
    dlq = read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()
    assert len(dlq) == 1
    d = dlq[0]
    assert (d.address, d.original_address, d.deliveries, d.dt) == ("orders.created", "orders.created", 3, "2026-11-21")
    assert [h.delivery for h in d.error_history] == [1, 2, 3]


def test_delivered_message_leaves_the_waiting_set(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="python:reprocess.targets.examples:always_ok")
    assert (s["due"], s["delivered"], s["waiting"]) == (1, 1, 0)
    assert ledger(spark, tmp_path)["m1"]["state"] == "DELIVERED"
    assert ledger(spark, tmp_path)["m1"]["deliveries"] == 2


def test_non_retryable_failure_is_dead_lettered_at_once(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("bad", "2026-11-21T10:00:00Z", error_class="com.acme.ValidationError", error_message="amount")])
    s = cycle(spark, tmp_path, "2026-11-21T10:01:00Z")
    assert s["dead_lettered"]["NON_RETRYABLE"] == 1
    assert s["due"] == 0
    assert ledger(spark, tmp_path)["bad"]["reason_code"] == "NON_RETRYABLE"


@pytest.mark.parametrize("small", [True, False])
def test_a_run_writes_one_dlq_file_per_address_and_day(spark, tmp_path, monkeypatch, small):
    """Dead letters spread over every task of the merge; each address/day partition still gets one file per run
    (not one per task), and no dead letter is left out. Both ways: a small run's (interpreted, no adaptive
    execution, where Spark ignores the rebalance hint) and a larger one's."""
    import reprocess.sparkutil as sparkutil

    if not small:
        monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_BYTES", 0)  # as for batches above 16 MB
    lines = [rec(f"v-{i}", "2026-11-21T10:00:00Z", address=("orders.created", "orders.paid")[i % 2],
                 error_class="com.acme.ValidationError") for i in range(40)]
    lines += [rec(f"b-{i}", "2026-11-21T10:00:00Z", address="billing.eu", delivery_count=2) for i in range(20)]
    land(tmp_path / "landing", "10", "a.jsonl", lines)
    s = cycle(spark, tmp_path, "2026-11-21T10:01:00Z")
    assert s["codegen"] == ("interpreted" if small else "generated")
    assert s["dead_lettered"]["total"] == 60
    files = sorted(p.parent.relative_to(tmp_path / "wh" / "dlq").as_posix()
                   for p in (tmp_path / "wh" / "dlq").rglob("*.parquet"))
    assert files == ["address=ops.dlq/dt=2026-11-21", "address=orders.created/dt=2026-11-21",
                     "address=orders.paid/dt=2026-11-21"]
    dlq = read_dataset(spark, str(tmp_path / "wh"), "dlq")
    assert sorted(r.message_id for r in dlq.select("message_id").collect()) == sorted(
        [f"v-{i}" for i in range(40)] + [f"b-{i}" for i in range(20)])


def test_artemis_without_dla_dead_letters_to_the_default_dlq_never_drops(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("b1", "2026-11-21T10:00:00Z", address="billing.eu",
                                                     delivery_count=2)])
    s = cycle(spark, tmp_path, "2026-11-21T10:01:00Z")
    assert s["dead_lettered"]["NO_DEAD_LETTER_ADDRESS"] == 1
    d = read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()[0]
    assert (d.address, d.original_address, d.reason_code) == ("ops.dlq", "billing.eu", "NO_DEAD_LETTER_ADDRESS")
    assert (tmp_path / "wh" / "dlq" / "address=ops.dlq").is_dir()


def test_dead_letter_addresses_named_after_each_messages_group_or_address(spark, tmp_path, capsys):
    """RocketMQ's %DLQ%<consumer group> and ActiveMQ's individual ActiveMQ.DLQ.Queue.<queue>, at the landing's merge
    and at a re-drive's: each dead letter under its own, a message without a group under the default."""
    from reprocess.cli import main

    policies = parse_policies("""
default_dead_letter_address: ops.dlq
policies:
  - match: "orders.#"
    profile: activemq
    settings: {maximumRedeliveries: 0}
    dead_letter_address: "ActiveMQ.DLQ.Queue.{address}"
  - match: "#"
    profile: rocketmq
    settings: {maxReconsumeTimes: 1}
    dead_letter_address: "%DLQ%{consumer_group}"
""")
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("r-grp", "2026-11-21T10:00:00Z", address="trade.created", delivery_count=2, consumer_group="order-svc"),
        rec("r-none", "2026-11-21T10:00:00Z", address="trade.created", delivery_count=2),
        rec("r-empty", "2026-11-21T10:00:00Z", address="trade.created", delivery_count=2, consumer_group=""),
        rec("r-later", "2026-11-21T10:00:00Z", address="trade.paid", consumer_group="billing-svc"),
        rec("q-1", "2026-11-21T10:00:00Z", address="orders.created"),
    ])
    s = cycle(spark, tmp_path, "2026-11-21T10:00:05Z", policies=policies)
    assert s["dead_lettered"]["MAX_DELIVERIES_EXCEEDED"] == 4
    s = cycle(spark, tmp_path, "2026-11-21T10:01:00Z", policies=policies)  # r-later's retry (10 s) fails: exhausted
    assert (s["due"], s["dead_lettered"]["MAX_DELIVERIES_EXCEEDED"]) == (1, 1)
    got = {r.message_id: r.address for r in read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()}
    assert got == {"r-grp": "%DLQ%order-svc", "r-none": "ops.dlq", "r-empty": "ops.dlq", "r-later": "%DLQ%billing-svc",
                   "q-1": "ActiveMQ.DLQ.Queue.orders.created"}
    assert ledger(spark, tmp_path)["r-later"]["dead_letter_address"] == "%DLQ%billing-svc"
    orders, trade = policies.resolve("orders.created"), policies.resolve("trade.created")
    assert orders is not None
    assert trade is not None
    assert policies.dead_letter_address_for(orders, "orders.created") == got["q-1"]
    assert [policies.dead_letter_address_for(trade, "trade.created", g) for g in ("order-svc", None, "")] == [
        got["r-grp"], got["r-none"], got["r-empty"]]
    assert main(["dlq", "list", "--warehouse", str(tmp_path / "wh"), "--format", "json"]) == 0
    listed = {d["message_id"]: d["dead_letter_address"] for d in json.loads(capsys.readouterr().out)["dead_letters"]}
    assert listed == got


def test_a_consumer_groups_policy_takes_its_messages_with_its_bound_and_its_target(spark, tmp_path):
    """Two RocketMQ groups consume one topic with different maxReconsumeTimes: each message takes its group's
    policy, named after it in the ledger, with its bound and its own re-drive target."""
    policies = parse_policies("""
default_dead_letter_address: ops.dlq
policies:
  - match: "#"
    profile: rocketmq
    settings: {maxReconsumeTimes: 1}
    dead_letter_address: "%DLQ%{consumer_group}"
  - match: "trade.#"
    consumer_group: patient-svc
    profile: rocketmq
    settings: {maxReconsumeTimes: 3}
    target: "python:reprocess.targets.examples:always_ok"
""")
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("fast", "2026-11-21T10:00:00Z", address="trade.created", delivery_count=2, consumer_group="fast-svc"),
        rec("patient", "2026-11-21T10:00:00Z", address="trade.created", delivery_count=2, consumer_group="patient-svc"),
        rec("other", "2026-11-21T10:00:00Z", address="audit.created", delivery_count=2, consumer_group="patient-svc"),
    ])
    s = cycle(spark, tmp_path, "2026-11-21T10:00:05Z", policies=policies)
    assert s["dead_lettered"]["MAX_DELIVERIES_EXCEEDED"] == 2  # 'fast' and 'other': 2 deliveries are their bound
    rows = ledger(spark, tmp_path)
    assert {m: (r["policy"], r["state"]) for m, r in rows.items()} == {
        "fast": ("#", "DEAD_LETTERED"), "other": ("#", "DEAD_LETTERED"),
        "patient": ("trade.# @patient-svc", "WAITING_RETRY")}
    assert rows["patient"]["next_attempt_ms"] == parse_instant("2026-11-21T10:00:30Z")  # retry 2 waits level 4, 30s
    dlq = {r.message_id: r.address for r in read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()}
    assert dlq == {"fast": "%DLQ%fast-svc", "other": "%DLQ%patient-svc"}
    s = cycle(spark, tmp_path, "2026-11-21T10:01:00Z", policies=policies)  # the run's target fails, the group's not
    assert (s["due"], s["delivered"]) == (1, 1)
    assert ledger(spark, tmp_path)["patient"]["state"] == "DELIVERED"


def test_a_message_id_failing_in_two_consumer_groups_is_named_in_the_log_and_the_summary(spark, tmp_path, caplog):
    """The ledger keeps one row per message_id: two RocketMQ groups failing on one msgId count as one message's
    failures. That is the landing's to avoid (ids of their own per group), and each run names it: two groups in one
    batch, however many failures come between them, and a group other than the ledger row's. A message failing
    again in its own group, in none, or in none and then one (a missing or empty group names none) is not named."""
    from reprocess.cli import render_summary

    def at(second: int) -> str:
        return f"2026-11-21T10:{second // 60:02d}:{second % 60:02d}Z"

    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("both", at(0), consumer_group="order-svc"),
        rec("both", at(1), consumer_group="audit-svc"),
        *(rec("deep", at(i), consumer_group="order-svc" if i < 5 else "audit-svc", delivery_count=i + 1)
          for i in range(30)),  # the groups change among failures older than the merge's last twenty
        rec("later", at(0), consumer_group="order-svc"),
        rec("same", at(0), consumer_group="order-svc"),
        rec("same", at(2), consumer_group="order-svc"),
        rec("none", at(0)),
        rec("unnamed", at(0)),
        rec("unnamed", at(1), consumer_group=""),
        rec("unnamed", at(2), consumer_group="order-svc"),
    ])
    assert cycle(spark, tmp_path, at(45), dry_run=True)["consumer_group_conflicts"] == 2
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="reprocess.cycle.run"):
        s = cycle(spark, tmp_path, at(45))
    assert s["consumer_group_conflicts"] == 2
    assert all(s["conservation"].values()), s["conservation"]
    assert "messages failed in more than one consumer group under one message_id" in caplog.text
    assert "messages=2 examples=" in caplog.text
    for named in ("('both', ['audit-svc', 'order-svc'])", "('deep', ['audit-svc', 'order-svc'])"):
        assert named in caplog.text
    assert ", failed in another consumer group under the same id 2" in render_summary(s)
    land(tmp_path / "landing", "10", "b.jsonl", [
        rec("later", "2026-11-21T10:10:00Z", consumer_group="billing-svc"),
        rec("same", "2026-11-21T10:10:00Z", consumer_group="order-svc"),
        rec("none", "2026-11-21T10:10:00Z"),
        rec("unnamed", "2026-11-21T10:10:00Z", consumer_group=""),
    ])
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="reprocess.cycle.run"):
        s = cycle(spark, tmp_path, "2026-11-21T10:15:00Z")
    assert s["consumer_group_conflicts"] == 1
    assert "messages=1 examples=[('later', ['billing-svc', 'order-svc'])]" in caplog.text
    assert "another consumer group" not in render_summary(cycle(spark, tmp_path, "2026-11-21T10:20:00Z"))


def test_an_artemis_policy_takes_what_it_leaves_out_from_a_less_specific_one_as_artemis_merges(spark, tmp_path):
    """billing.* gives the delay only; '#' gives the attempts and the dead-letter address, as a broker.xml with a
    '#' address-setting does: Artemis dead-letters billing.eu's messages there after two deliveries."""
    policies = parse_policies("""
default_dead_letter_address: ops.dlq
policies:
  - match: "billing.*"
    profile: artemis
    settings: {redelivery-delay: 60000}
  - match: "#"
    profile: artemis
    settings: {max-delivery-attempts: 2, dead-letter-address: all.dlq}
""")
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("b1", "2026-11-21T10:00:00Z", address="billing.eu", delivery_count=2),
        rec("b2", "2026-11-21T10:00:00Z", address="billing.eu", delivery_count=1)])
    s = cycle(spark, tmp_path, "2026-11-21T10:00:30Z", policies=policies)
    assert (s["dead_lettered"]["MAX_DELIVERIES_EXCEEDED"], s["dead_lettered"]["NO_DEAD_LETTER_ADDRESS"]) == (1, 0)
    d = read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()
    assert [(r.message_id, r.address, r.original_address, r.policy) for r in d] == [
        ("b1", "all.dlq", "billing.eu", "billing.*")]
    waiting = ledger(spark, tmp_path)["b2"]
    assert (waiting["state"], waiting["policy"], waiting["next_attempt_ms"]) == (
        "WAITING_RETRY", "billing.*", parse_instant("2026-11-21T10:01:00Z"))


def test_a_failed_redrive_is_dead_lettered_by_the_settings_its_address_merges(spark, tmp_path):
    """orders.* takes its dead-letter address from *.eu for orders.eu only, and from '#' for orders.us: the
    outcomes of a re-drive pick the variant by address, beside a row that has no outcome."""
    policies = parse_policies("""
default_dead_letter_address: ops.dlq
policies:
  - match: "orders.*"
    profile: artemis
    settings: {redelivery-delay: 60000, max-delivery-attempts: 2}
  - match: "*.eu"
    profile: artemis
    settings: {dead-letter-address: eu.dlq}
  - match: "#"
    profile: artemis
    settings: {dead-letter-address: DLQ}
""")
    assert len(policies.variants) > len(policies.policies)
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("o-eu", "2026-11-21T10:00:00Z", address="orders.eu", delivery_count=1),
        rec("o-us", "2026-11-21T10:00:00Z", address="orders.us", delivery_count=1)])
    cycle(spark, tmp_path, "2026-11-21T10:00:30Z", policies=policies)
    land(tmp_path / "landing", "10", "b.jsonl", [
        rec("o-late", "2026-11-21T10:01:30Z", address="orders.eu", delivery_count=1)])
    s = cycle(spark, tmp_path, "2026-11-21T10:02:00Z", policies=policies)
    assert (s["due"], s["dead_lettered"]["MAX_DELIVERIES_EXCEEDED"]) == (2, 2)
    dlq = {r.message_id: (r.address, r.reason_code, r.policy)
           for r in read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()}
    assert dlq == {"o-eu": ("eu.dlq", "MAX_DELIVERIES_EXCEEDED", "orders.*"),
                   "o-us": ("DLQ", "MAX_DELIVERIES_EXCEEDED", "orders.*")}
    late = ledger(spark, tmp_path)["o-late"]
    assert (late["state"], late["next_attempt_ms"]) == ("WAITING_RETRY", parse_instant("2026-11-21T10:02:30Z"))


def test_exact_duplicates_count_once_and_repeat_failures_count_a_delivery_each(spark, tmp_path):
    first = rec("m1", "2026-11-21T10:00:00Z")
    land(tmp_path / "landing", "10", "a.jsonl", [first, first, rec("m1", "2026-11-21T10:01:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:02:00Z")
    assert (s["duplicates"], s["new_messages"], s["new_message_failures"]) == (1, 1, 2)
    assert ledger(spark, tmp_path)["m1"]["deliveries"] == 2
    # the same failure written again in a later file is still a duplicate
    land(tmp_path / "landing", "10", "b.jsonl", [first, rec("m1", "2026-11-21T10:03:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:04:00Z")
    assert (s["duplicates"], s["repeat_failures"]) == (1, 1)
    assert ledger(spark, tmp_path)["m1"]["deliveries"] == 3


def test_records_differing_only_in_which_field_holds_a_value_are_two_failures(spark, tmp_path):
    """Spark's xxhash64 of several columns skips the null ones: a record with error_class "E" and no message had the
    fingerprint of one with error_message "E" and no class (a group of an ordering key, headers of an unknown
    field), and the second was dropped as an exact duplicate of the first, in its batch or a later one."""
    at = "2026-11-21T10:00:00Z"
    pairs = [({"error_class": "E"}, {"error_message": "E"}), ({"consumer_group": "g"}, {"ordering_key": "g"}),
             ({"headers": {"a": "b"}}, {"a": "b"})]
    land(tmp_path / "landing", "10", "a.jsonl", [
        *[rec(f"same-{i}", at, **one) for i, (one, _) in enumerate(pairs)],
        *[rec(f"same-{i}", at, **other) for i, (_, other) in enumerate(pairs)],
        *[rec(f"later-{i}", at, **one) for i, (one, _) in enumerate(pairs)],
        rec("copy", at, error_class="E"), rec("copy", at, error_class="E")])
    s = cycle(spark, tmp_path, "2026-11-21T10:00:30Z")
    assert s["duplicates"] == 1  # the copy alone
    land(tmp_path / "landing", "10", "b.jsonl", [
        *[rec(f"later-{i}", at, **other) for i, (_, other) in enumerate(pairs)], rec("copy", at, error_class="E")])
    s = cycle(spark, tmp_path, "2026-11-21T10:00:40Z")
    assert (s["duplicates"], s["repeat_failures"]) == (1, 3)
    rows = ledger(spark, tmp_path)
    assert {m: r["deliveries"] for m, r in rows.items()} == {
        **{f"same-{i}": 2 for i in range(3)}, **{f"later-{i}": 2 for i in range(3)}, "copy": 1}


def test_a_late_landing_record_leaves_the_last_error_to_the_last_failure(spark, tmp_path):
    """A consumer's failure landed after a re-drive's later failure was recorded: the row's last failure time stayed
    the re-drive's, but its last error became the late record's, an older error beside a newer time. Unless the late
    record dead-letters the message: its error is the one that decided it."""
    policies = parse_policies(POLICIES_TEXT.replace("settings: {delays: [10m], max_deliveries: 3}",
                                                    "settings: {delays: [5m], max_deliveries: 5}"))
    land(tmp_path / "landing", "10", "a.jsonl", [rec(m, "2026-11-21T10:00:00Z", error_class="First")
                                                 for m in ("m1", "m2")])
    cycle(spark, tmp_path, "2026-11-21T10:01:00Z", policies=policies)
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z", policies=policies)  # due: delivery 2 fails at 10:05
    land(tmp_path / "landing", "10", "b.jsonl", [
        rec("m1", "2026-11-21T10:03:00Z", error_class="Late", error_message="late"),
        rec("m2", "2026-11-21T10:03:00Z", error_class="com.acme.ValidationError")])  # late, and dead-letters it
    cycle(spark, tmp_path, "2026-11-21T10:07:00Z", policies=policies)
    rows = ledger(spark, tmp_path)
    m1, m2 = rows["m1"], rows["m2"]
    assert (m1["state"], m1["deliveries"], m1["last_failed_ms"], m1["last_error_class"]) == (
        "WAITING_RETRY", 3, parse_instant("2026-11-21T10:05:00Z"), "reprocess.targets.examples.TransientError")
    assert m1["last_error_message"] != "late"
    assert [h["error_class"] for h in m1["error_history"]][-1] == "Late"  # counted, and in the history
    assert (m2["state"], m2["reason_code"], m2["last_error_class"]) == (
        "DEAD_LETTERED", "NON_RETRYABLE", "com.acme.ValidationError")  # the error that decided it
    land(tmp_path / "landing", "10", "c.jsonl", [rec("m1", "2026-11-21T10:08:00Z", error_class="Newer")])
    cycle(spark, tmp_path, "2026-11-21T10:09:00Z", policies=policies)  # a newer one is the last error again
    m1 = ledger(spark, tmp_path)["m1"]
    assert (m1["deliveries"], m1["last_error_class"]) == (4, "Newer")
    dead = {r.message_id: r.last_error_class for r in read_dataset(spark, str(tmp_path / "wh"), "dlq").collect()}
    assert dead == {"m2": "com.acme.ValidationError"}


def test_failures_at_one_time_count_in_the_order_of_the_delivery_counts_they_carry(spark, tmp_path):
    """A source whose timestamps are in seconds lands immediate redeliveries (Artemis' default redelivery-delay 0)
    at one failed_at, with delivery counts 1, 2 and 3: the message has had 3 deliveries. Taken in the order of their
    fingerprints, a 3 before a 2 counted the 2 as a fourth delivery, and a message could be dead-lettered deliveries
    early; a record without a count goes first."""
    policies = parse_policies("policies: [{match: '#', profile: artemis, settings: {redelivery-delay: 60000, "
                              "max-delivery-attempts: 5}}]")
    lines = [rec(f"m{i}", "2026-11-21T10:00:00Z", delivery_count=n, error_message=f"boom {i}-{n}")
             for i in range(8) for n in (3, 1, 2)]
    lines += [rec("none", "2026-11-21T10:00:00Z", error_message="no count"),
              rec("none", "2026-11-21T10:00:00Z", delivery_count=2, error_message="two")]
    land(tmp_path / "landing", "10", "a.jsonl", lines)
    cycle(spark, tmp_path, "2026-11-21T10:00:30Z", policies=policies)
    rows = ledger(spark, tmp_path)
    assert {m: (r["deliveries"], r["state"]) for m, r in rows.items()} == {
        **{f"m{i}": (3, "WAITING_RETRY") for i in range(8)}, "none": (2, "WAITING_RETRY")}
    assert {r["next_attempt_ms"] for r in rows.values()} == {parse_instant("2026-11-21T10:01:00Z")}


def test_a_lowered_bound_gives_a_waiting_message_its_next_delivery_then_dead_letters_it_and_the_run_commits(
        spark, tmp_path):
    """Messages waiting at 4 and 5 deliveries when an operator lowers max_deliveries from 7 to 3: as a broker gives a
    message it had scheduled before its bound was lowered, the due one is re-driven once more (delivery 5) and
    dead-lettered when that fails; the other waits beyond the new bound until its turn, then is delivered. The
    ledger suite took both for deliveries beyond the bound and failed every cycle until the old bound came back.
    A message this run keeps waiting must still have deliveries left: a new one at 2 of 3 waits, at 3 it goes."""
    text = "policies: [{match: '#', profile: stepped, settings: {delays: [1m], max_deliveries: 7}}]"
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("due", "2026-11-21T10:00:00Z", delivery_count=4),
        rec("later", "2026-11-21T10:00:20Z", delivery_count=5)])
    cycle(spark, tmp_path, "2026-11-21T10:00:30Z", policies=parse_policies(text))
    lowered = parse_policies(text.replace("max_deliveries: 7", "max_deliveries: 3"))
    land(tmp_path / "landing", "10", "b.jsonl", [
        rec("new-2", "2026-11-21T10:01:00Z", delivery_count=2), rec("new-3", "2026-11-21T10:01:00Z", delivery_count=3)])
    s = cycle(spark, tmp_path, "2026-11-21T10:01:10Z", policies=lowered)
    assert s["validation"]["passed"]
    rows = ledger(spark, tmp_path)
    assert {m: (r["state"], r["deliveries"]) for m, r in rows.items()} == {
        "due": ("DEAD_LETTERED", 5), "later": ("WAITING_RETRY", 5), "new-2": ("WAITING_RETRY", 2),
        "new-3": ("DEAD_LETTERED", 3)}
    s = cycle(spark, tmp_path, "2026-11-21T10:01:30Z", policies=lowered,
              target="python:reprocess.targets.examples:always_ok")
    assert s["validation"]["passed"]
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items() if m == "later"} == {
        "later": ("DELIVERED", 6)}
    # a new failure of new-3 rewrites the file of the month's terminal rows: "due" (dead-lettered at 5 by a
    # re-drive) and "later" (delivered at 6) are in it as they were, judged by the runs that wrote them
    land(tmp_path / "landing", "10", "c.jsonl", [rec("new-3", "2026-11-21T10:01:40Z", delivery_count=4)])
    s = cycle(spark, tmp_path, "2026-11-21T10:01:50Z", policies=lowered)
    assert s["validation"]["passed"]
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items()} == {
        "due": ("DEAD_LETTERED", 5), "later": ("DELIVERED", 6), "new-2": ("WAITING_RETRY", 2),
        "new-3": ("DEAD_LETTERED", 4)}


def test_a_batchs_failures_group_per_message_in_failed_at_order_without_exact_duplicates(spark):
    """aggregate_failures against a plain-Python reference on a random batch: each message's failures sorted by
    (failed_ms, delivery_count, fp), a null count first, an exact duplicate (same fp) kept once and counted, the
    whole records of the last RECENT of them; several partitions, so a message's records arrive from different
    tasks."""
    import random

    from reprocess.ledger.merge import RECENT, aggregate_failures
    from reprocess.sparkutil import SORT_AGGREGATE_KEY, restoring_conf

    rnd = random.Random(26)
    rows = []
    for m in range(1500):
        many = rnd.random() < 0.05
        for _ in range(rnd.choice([30, 45]) if many else rnd.choice([1, 1, 1, 2, 3, 6])):
            failed_ms = rnd.randrange(1, 40) * 1_000 if many else rnd.choice([1_000, 2_000, 3_000])
            variant = rnd.choice([0, 1, 2])
            # a record's content decides its fingerprint, in the opposite order of the counts
            fp = (m * 7 + 2 - variant) * 1_000_000 + failed_ms
            rows.append((f"m{m:05d}", failed_ms, fp, -fp, (1, None, 3)[variant], f"E{variant}", "boom",
                         "orders.created", f"p{variant}", {"h": str(variant)}, None, None, None, 0, variant == 2))
    rnd.shuffle(rows)
    schema = ("message_id string, failed_ms long, fp long, fp_v1 long, delivery_count long, error_class string, "
              "error_message string, address string, payload string, headers map<string,string>, extra string, "
              "consumer_group string, ordering_key string, policy_idx int, non_retryable boolean")
    got = {}
    for streamed in ("true", "false"):  # the cycle's sessions stream the aggregation; a session without the setting
        with restoring_conf(spark, SORT_AGGREGATE_KEY):  # hashes it, and its lists are sorted afterwards
            spark.conf.set(SORT_AGGREGATE_KEY, streamed)
            aggregated = aggregate_failures(spark.createDataFrame(rows, schema).withColumn("errors", F.lit(0))
                                            .repartition(5))
            plan = aggregated._jdf.queryExecution().executedPlan().toString()
            got[streamed] = {r.message_id: ([(x.failed_ms, x.fp, x.delivery_count, x.non_retryable)
                                             for x in r.new_failures],
                                            [(x.failed_ms, x.fp, x.payload, x.error_class) for x in r.recent],
                                            r.batch_duplicates)
                             for r in aggregated.collect()}
        assert (plan.count("Exchange hashpartitioning"), plan.count("Sort [")) == (1, 1)  # one shuffle, one sort
        # the lists are collected by an aggregation, not written into every row by a window (n squared)
        assert ("SortAggregate(" in plan) == (streamed == "true")
        assert not [line for line in plan.splitlines() if "Window [" in line and "collect_list" in line]
    assert got["true"] == got["false"]
    want: dict[str, tuple[list[tuple[int, int, int, bool]], list[tuple[int, int, str, str]], int]] = {}
    for mid in sorted({r[0] for r in rows}):
        mine = sorted((r for r in rows if r[0] == mid), key=lambda r: (r[1], r[4] is not None, r[4] or 0, r[2]))
        kept = [r for i, r in enumerate(mine) if i == 0 or r[2] != mine[i - 1][2]]
        want[mid] = ([(r[1], r[2], r[4], r[14]) for r in kept], [(r[1], r[2], r[8], r[5]) for r in kept[-RECENT:]],
                     len(mine) - len(kept))
    assert got["true"] == want
    assert sum(d for _, _, d in want.values()) > 100  # the batch has exact duplicates to drop
    assert max(len(f) for f, _, _ in want.values()) > RECENT  # and messages with more failures than RECENT


def test_many_failures_of_one_message_count_and_keep_their_last_history_as_the_reference_does(spark):
    """merge_failures against ADR 0001's count, one failure at a time (k = max(previous + 1, delivery_count)), for
    messages with 1 to 30 failures in each of two batches, the second merged into the first's ledger: the count, the
    history's last ten entries (merge computes only those, from the maximum over the failures before them) and the
    last failure's payload. The second batch also lands again failures the ledger's history holds (cross-batch
    duplicates, dropped), among new failures older and newer than them: the last ten kept can lie anywhere among
    the batch's last RECENT."""
    import random

    from reprocess.ledger.merge import aggregate_failures, errors_hash, merge_failures
    from reprocess.ledger.model import HISTORY_LIMIT, LEDGER_COLUMNS

    rnd = random.Random(33)
    schema = ("message_id string, failed_ms long, fp long, fp_v1 long, delivery_count long, error_class string, "
              "error_message string, address string, payload string, headers map<string,string>, extra string, "
              "consumer_group string, ordering_key string, policy_idx int, non_retryable boolean")
    want: dict[str, tuple[int, list[tuple[int, int, int, str]], str]] = {}
    landed: dict[tuple[str, int], tuple[object, ...]] = {}  # every record landed, by message and failed_ms
    existing = None
    relanded = 0
    for batch in range(2):
        rows = []
        for m in range(60):
            mid = f"m{m:02d}"
            count, history, payload = want.get(mid, (0, [], ""))
            n = rnd.choice([1, 2, 9, 10, 11, 17, 30]) if m % 2 or not batch else 0
            taken = {h[0] for h in history}
            times = rnd.sample([t for t in range(batch * 25_000, batch * 25_000 + 50_000) if t not in taken], n)
            again = rnd.sample(history, min(len(history), rnd.choice([0, 1, 3, 10]))) if n else []
            relanded += len(again)
            for failed_ms in times:
                landed[(mid, failed_ms)] = (mid, failed_ms, m * 1_000_000 + failed_ms, -(m * 1_000_000 + failed_ms),
                                            rnd.choice([1, 1, 1, 2, 5, 14, 40]), f"E{failed_ms % 5}", "boom",
                                            "orders.created", f"p{failed_ms}", {}, None, None, None, 0, False)
            # failures landed again as the code after a ledger's (the fingerprints' fix) sees them: the history
            # holds the fp the older code gave, now the record's fp_v1; and, with that fp_v1, a failure whose class
            # is its message (the older fp took one for the other): a new one
            def later(r: tuple[object, ...]) -> tuple[object, ...]:
                draw = rnd.random()
                if draw < 0.4:
                    return r[:2] + (r[2] + 10**12, r[2]) + r[4:]  # type: ignore[operator]
                if draw < 0.6:
                    return r[:2] + (r[2] + 2 * 10**12, r[2], r[4], None, r[5]) + r[7:]  # type: ignore[operator]
                return r

            mine = [landed[(mid, t)] for t in times] + [later(landed[(mid, h[0])]) for h in again]
            rows += mine
            recorded = {h[2]: h[3] for h in history}
            for r in sorted(mine, key=lambda r: (r[1], r[2])):
                if r[2] in recorded or (r[3] in recorded and recorded[r[3]] == r[5]):
                    continue  # a failure the ledger already holds
                count = max(count + 1, r[4])
                history = [*history, (r[1], count, r[2], r[5])][-HISTORY_LIMIT:]
                payload = r[8]
            if mine:
                want[mid] = (count, history, payload)
        rnd.shuffle(rows)
        failures = aggregate_failures(spark.createDataFrame(rows, schema).withColumn(
            "errors", F.expr(errors_hash("error_class", "error_message"))).repartition(3))
        merged = merge_failures(existing, failures, POLICIES, f"run-{batch}", 200_000, "interpreted")
        existing = merged.select(*[c for c in LEDGER_COLUMNS if c != "bucket"]).localCheckpoint()
        got = {r.message_id: (r.deliveries, [(h.failed_ms, h.delivery, h.fp, h.error_class) for h in r.error_history],
                              r.payload)
               for r in existing.collect()}
        assert got == want
    assert max(len(h) for _, h, _ in want.values()) == HISTORY_LIMIT  # histories were cut
    assert any(c >= 40 for c, _, _ in want.values())  # a delivery_count above the count took over
    assert relanded > 50  # and the second batch held failures the ledger had


def test_records_after_the_as_of_wait_for_a_later_run_and_late_files_are_picked_up(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("early", "2026-11-21T10:01:00Z"),
                                                 rec("later", "2026-11-21T10:40:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:15:00Z")
    assert (s["new_messages"], s["deferred_until_later_as_of"]) == (1, 1)
    land(tmp_path / "landing", "10", "late.jsonl", [rec("late", "2026-11-21T10:05:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:45:00Z")
    assert s["new_messages"] == 2  # 'later' from the old file, 'late' from the late file
    assert set(ledger(spark, tmp_path)) == {"early", "later", "late"}
    s = cycle(spark, tmp_path, "2026-11-21T11:00:00Z")
    assert s["landing_files"] == 0  # both files are done: never read again


def test_a_landing_file_whose_name_spark_would_read_as_a_glob_is_quarantined_whole(spark, tmp_path):
    """Spark's readers take a path holding {}[]*?\\ for a pattern: batch[1].jsonl read batch1.jsonl a second time and
    never itself, which was then done, its record lost. Such a file is quarantined whole, named, with the reason."""
    from reprocess.storage.read import read_dataset as read

    land(tmp_path / "landing", "10", "batch[1].jsonl", [rec("x", "2026-11-21T10:00:00Z")])
    land(tmp_path / "landing", "10", "batch1.jsonl", [rec("y", "2026-11-21T10:00:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert (s["new_messages"], s["duplicates"], s["quarantined"]) == (1, 0, 1)
    assert set(ledger(spark, tmp_path)) == {"y"}
    (q,) = read(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert (q.reason_code, q.source_file.rsplit("/", 1)[-1]) == ("CORRUPT_FILE", "batch[1].jsonl")
    assert "the name holds '[' ']', which Spark's reader takes for a glob pattern" in q.reason


def test_a_parquet_landing_file_with_a_column_spark_refuses_is_quarantined_whole(spark, tmp_path):
    """A consumer's Parquet file with a nanosecond timestamp column (pandas' default) has a footer pyarrow reads, but
    Spark refuses its schema (PARQUET_TYPE_ILLEGAL): the read failed the run, and every later one, until the file was
    moved. It is quarantined whole with Spark's reason; the other files go on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reprocess.storage.read import read_dataset as read

    land(tmp_path / "landing", "10", "a.jsonl", [rec("ok", "2026-11-21T10:00:00Z")])
    nanos = tmp_path / "landing" / "dt=2026-11-21" / "hour=10" / "b.parquet"
    pq.write_table(pa.table({**{k: [v] for k, v in rec("ns", "2026-11-21T10:00:00Z").items()},
                             "seen": pa.array([1_795_255_200_123_456_789], pa.timestamp("ns"))}), nanos)
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert (s["new_messages"], s["quarantined"]) == (1, 1)
    (q,) = read(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert (q.reason_code, q.source_file) == ("CORRUPT_FILE", str(nanos))
    assert "Spark cannot read its schema: [PARQUET_TYPE_ILLEGAL]" in q.reason


def test_a_parquet_binary_payload_is_its_utf8_text_or_quarantined(spark, tmp_path):
    """A Parquet payload column of BINARY (no UTF-8 annotation) became its bytes in base64, which passed as text and
    was re-driven in place of the payload. Bytes that are UTF-8 are that text; others are INVALID_UTF8."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reprocess.storage.read import read_dataset as read

    rows = [rec("text", "2026-11-21T10:00:00Z"), rec("bytes", "2026-11-21T10:00:00Z")]
    table = pa.table({k: [r[k] for r in rows] for k in rows[0] if k != "payload"})
    table = table.append_column("payload", pa.array(["héllo".encode(), b"\xff\xfe"], pa.binary()))
    table = table.append_column("consumer_group", pa.array([None, b"g"], pa.binary()))  # a null is absent, not bad
    folder = tmp_path / "landing" / "dt=2026-11-21" / "hour=10"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "a.parquet")
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert (s["new_messages"], s["quarantined"]) == (1, 1)
    text = ledger(spark, tmp_path)["text"]
    assert (text["payload"], text["consumer_group"]) == ("héllo", None)
    (q,) = read(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert (q.record_no, q.reason_code) == (2, "INVALID_UTF8")


def test_binary_nested_in_parquet_headers_and_unknown_fields_is_its_utf8_text_or_quarantined(spark, tmp_path):
    """BINARY inside a map, a struct or an array (headers written as map<binary, binary>) went through ``to_json``
    as base64 values and JVM array names as keys: a header ``b"k": b"v"`` was re-driven as ``"[B@6d3af739": "dg=="``.
    Bytes that are UTF-8 are that text at any depth; others quarantine their record as INVALID_UTF8; nulls stay
    null. A column name with a backtick in it is read too (it failed every run as a syntax error)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reprocess.storage.read import read_dataset as read

    rows = [rec(m, "2026-11-21T10:00:00Z") for m in ("text", "bad-value", "bad-key", "bad-deep", "nulls")]
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    headers = pa.array([[(b"k", "vé".encode()), (b"k2", b"w")], [(b"k", b"\xff")], [(b"\xfe", b"v")], [(b"k", b"v")],
                        None], pa.map_(pa.binary(), pa.binary()))
    meta = pa.array([{"it's": [b"a", None], "n": 1}, None, None, {"it's": [b"\xc3"], "n": 3}, None],
                    pa.struct([("it's", pa.list_(pa.binary())), ("n", pa.int64())]))
    table = table.append_column("headers", headers).append_column("me`ta", meta)
    folder = tmp_path / "landing" / "dt=2026-11-21" / "hour=10"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "a.parquet")
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert (s["new_messages"], s["quarantined"]) == (2, 3)
    kept = ledger(spark, tmp_path)
    assert kept["text"]["headers"] == {"k": "vé", "k2": "w"}
    assert json.loads(kept["text"]["extra"]) == {"me`ta": {"it's": ["a", None], "n": 1}}
    assert (kept["nulls"]["headers"], json.loads(kept["nulls"]["extra"] or "{}")) == ({}, {})  # absent: as in JSONL
    q = read(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert sorted((r.record_no, r.reason_code) for r in q) == [(2, "INVALID_UTF8"), (3, "INVALID_UTF8"),
                                                                 (4, "INVALID_UTF8")]


def test_run_takes_the_future_bound_from_max_future_ms(spark, tmp_path, capsys, monkeypatch):
    """`reprocess run --max-future-ms`: README and the resume error named it, and the CLI had no such option (the
    bound was a day, fixed). A record more than the bound after the as-of is quarantined at its file's first read,
    its reason in the bound's own unit; one within it waits for its as-of."""
    from reprocess.cli import main

    # the CLI's session is this one (getOrCreate): its shuffle partitions as this session's, which later tests expect
    base = spark.conf.get("spark.sql.shuffle.partitions")
    monkeypatch.setenv("REPROCESS_SHUFFLE_PARTITIONS", base)
    land(tmp_path / "landing", "10", "a.jsonl", [rec("near", "2026-11-21T10:30:30Z"),
                                                 rec("far", "2026-11-21T10:32:00Z")])
    assert main(["run", "--landing", str(tmp_path / "landing"), "--warehouse", str(tmp_path / "wh"), "--as-of",
                 "2026-11-21T10:30:00Z", "--max-future-ms", "60000", "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["quarantined"], s["deferred_until_later_as_of"]) == (1, 1)
    (q,) = read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert (q.message_id, q.reason_code) == ("far", "FUTURE_TIMESTAMP")
    assert q.reason.endswith("is more than 60000 ms after the as-of")
    assert spark.conf.get("spark.sql.shuffle.partitions") == str(base)


def test_a_record_waiting_for_its_time_is_decided_once_when_it_comes(spark, tmp_path):
    """A file is read again while it holds records for a later as-of. Problems were taken from its first read only:
    a record that waited and then broke a check (its policy removed here) was neither quarantined nor ingested, and
    the file was done, so it was lost; and a record quarantined as from the future was ingested once its time came
    (in the quarantine and the ledger). Each record is decided once, when the as-of passes it (or at the first read
    when it is beyond the future bound)."""
    legacy = parse_policies(POLICIES_TEXT + '  - match: "legacy.#"\n    profile: stepped\n'
                            '    settings: {delays: [10m], max_deliveries: 5}\n')
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("a", "2026-11-21T10:40:00Z"),
        rec("b", "2026-11-22T11:30:00Z"),  # 25 h after the first as-of: from the future
        rec("c", "2026-11-21T10:40:00Z", address="legacy.x")])
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", policies=legacy)
    assert (s["quarantined"], s["deferred_until_later_as_of"], s["new_messages"]) == (1, 2, 0)
    s = cycle(spark, tmp_path, "2026-11-21T12:30:00Z", policies=POLICIES)  # the legacy policy removed
    assert (s["new_messages"], s["quarantined"], s["deferred_until_later_as_of"]) == (1, 1, 0)
    assert all(s["conservation"].values())
    s = cycle(spark, tmp_path, "2026-11-22T12:00:00Z", policies=POLICIES)
    assert s["landing_files"] == 0  # done: nothing in it was left for a later as-of
    q = read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert sorted((r.message_id, r.reason_code) for r in q) == [("b", "FUTURE_TIMESTAMP"), ("c", "UNKNOWN_ADDRESS")]
    assert set(ledger(spark, tmp_path)) == {"a"}


def test_landing_files_changed_or_gone_while_records_of_theirs_wait_are_named(spark, tmp_path, caplog):
    """Files must be written whole and never appended to. One that changed after a run read it was named only when it
    was done; one still waiting for a later as-of that grew, or was removed, went unmentioned, its records with it."""
    import logging

    grows = land(tmp_path / "landing", "10", "grows.jsonl", [rec("g1", "2026-11-21T10:00:00Z"),
                                                             rec("g2", "2026-11-21T10:40:00Z")])
    goes = land(tmp_path / "landing", "10", "goes.jsonl", [rec("r1", "2026-11-21T10:45:00Z")])
    done = land(tmp_path / "landing", "10", "done.jsonl", [rec("d1", "2026-11-21T10:00:00Z")])
    assert cycle(spark, tmp_path, "2026-11-21T10:30:00Z")["deferred_until_later_as_of"] == 2
    with grows.open("a", encoding="utf-8") as f:  # one record the last read's as-of passed, one for later
        f.write(json.dumps(rec("g3", "2026-11-21T10:10:00Z")) + "\n" + json.dumps(rec("g4", "2026-11-21T10:50:00Z"))
                + "\n")
    goes.unlink()
    with done.open("a", encoding="utf-8") as f:
        f.write(json.dumps(rec("d2", "2026-11-21T10:20:00Z")) + "\n")
    with caplog.at_level(logging.ERROR, logger="reprocess.landing.manifest"):
        s = cycle(spark, tmp_path, "2026-11-21T11:00:00Z")
    assert sorted(s["changed_files_ignored"]) == sorted(str(p.resolve()) for p in (grows, goes, done))
    # the one gone is done once named; the done one that changed is named on each run, as it is never read again
    assert cycle(spark, tmp_path, "2026-11-21T11:15:00Z")["changed_files_ignored"] == [str(done.resolve())]
    assert "changed while records of theirs waited" in caplog.text
    assert "are gone" in caplog.text
    assert set(ledger(spark, tmp_path)) == {"g1", "g2", "g4", "d1"}  # g3 and d2 added after their as-of: not read


@pytest.mark.parametrize("first_read", ["this code", "the code before future_ms"])
def test_a_re_read_decides_each_record_once_by_the_rules_its_first_read_followed(spark, tmp_path, first_read):
    """What a re-read does with each record of a file still waiting (landed's bad / in_window / deferred), the last
    read at 10:30, this one at 11:00 with a future bound lowered to 1 h. A first read by this code left every record
    after its as-of undecided up to its future bound, and decides it now or later. One by the code before quarantined
    every problem at that read: its re-reads quarantine nothing (b was quarantined then; quarantining it again
    doubled it), and take what has no problem, as that code did."""
    from reprocess.cycle.run import landed
    from reprocess.landing.manifest import ManifestEntry, list_landing

    path = land(tmp_path / "landing", "10", "a.jsonl", [
        rec("c", "2026-11-21T10:20:00Z"),  # at or before the last read's as-of: decided then
        rec("a", "2026-11-21T10:40:00Z"),
        {**rec("b", "2026-11-21T10:45:00Z"), "payload": "x" * 100},  # too large
        rec("d", "2026-11-21T11:30:00Z"),
        rec("e", "2026-11-21T12:30:00Z"),  # beyond the lowered bound: waits, as the first read let it
        "{not json"])
    last = parse_instant("2026-11-21T10:30:00Z")
    future = last + 24 * 3_600_000 if first_read == "this code" else None
    manifest = {str(path.resolve()): ManifestEntry(str(path.resolve()), path.stat().st_size, last, False, "run-1",
                                                   future)}
    as_of = parse_instant("2026-11-21T11:00:00Z")
    opts = CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"), policies=POLICIES,
                        as_of_ms=as_of, max_payload_bytes=50, max_future_ms=3_600_000)
    _batch, rows = landed(spark, list_landing(tmp_path / "landing", as_of), manifest, opts, "interpreted")
    got = {r.record_no: (r.message_id, r.bad, r.in_window, r.deferred) for r in rows.collect()}
    assert got == {1: ("c", False, False, False), 2: ("a", False, True, False),
                   3: ("b", first_read == "this code", False, False), 4: ("d", False, False, True),
                   # e, old rules: a problem on a re-read is not quarantined (it may have been at the first read)
                   5: ("e", False, False, first_read == "this code"), 6: (None, False, False, False)}


def test_ordered_policy_holds_later_messages_of_a_key_behind_the_earliest(spark, tmp_path):
    """A key is ordered within its address and consumer group, as a broker orders a queue as one group consumes it:
    the same key on another address, or in another group, is not held behind this one's head, nor holds it. An empty
    group is no group, as a policy takes it."""
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("k-first", "2026-11-21T10:00:00Z", address="fifo.q", ordering_key="k"),
        rec("k-second", "2026-11-21T10:00:30Z", address="fifo.q", ordering_key="k"),
        rec("other", "2026-11-21T10:00:30Z", address="fifo.q", ordering_key="z"),
        # failed at the same instant: the least id goes first
        rec("tie-b", "2026-11-21T10:00:10Z", address="fifo.q", ordering_key="t"),
        rec("tie-a", "2026-11-21T10:00:10Z", address="fifo.q", ordering_key="t"),
        rec("k-other-address", "2026-11-21T10:00:30Z", address="fifo.r", ordering_key="k"),
        rec("k-group-first", "2026-11-21T10:00:20Z", address="fifo.q", ordering_key="k", consumer_group="g2"),
        rec("k-group-second", "2026-11-21T10:00:40Z", address="fifo.q", ordering_key="k", consumer_group="g2"),
        rec("k-empty-group", "2026-11-21T10:00:45Z", address="fifo.q", ordering_key="k", consumer_group=""),
        rec("k-early-g3", "2026-11-21T10:00:00Z", address="fifo.q", ordering_key="k", consumer_group="g3"),
    ])
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert s["due"] == 6  # k-first, other, tie-a, k-other-address, k-group-first and k-early-g3; the rest wait
    rows = ledger(spark, tmp_path)
    assert {m: rows[m]["deliveries"] for m in rows} == {
        "k-first": 2, "k-second": 1, "other": 2, "tie-a": 2, "tie-b": 1, "k-other-address": 2,
        "k-group-first": 2, "k-group-second": 1, "k-empty-group": 1, "k-early-g3": 2}


@pytest.mark.parametrize("many_waiting", [False, True])
def test_an_ordered_key_is_held_by_an_earlier_message_waiting_in_a_bucket_the_run_does_not_rewrite(
        spark, tmp_path, monkeypatch, caplog, many_waiting):
    """The earlier message of the key waits in a later hour's bucket, which this run neither rewrites nor re-drives:
    the hold-back still finds it among the ledger's other waiting files. It reads every waiting row: with as many as
    a large ledger holds, a small run's shuffles keep the session's settings (adaptive execution, its partitions)."""
    import reprocess.sparkutil as sparkutil

    if many_waiting:
        monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_SCAN_ROWS", 1)  # one waiting row is "many"
    policies = parse_policies("""
policies:
  - match: "fifo.#"
    profile: stepped
    settings: {delays: [1m, 3h], max_deliveries: 5}
    ordered: true
""")

    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("k-first", "2026-11-21T10:00:00Z", address="fifo.q", ordering_key="k", delivery_count=2)])
    assert cycle(spark, tmp_path, "2026-11-21T10:05:00Z", policies=policies)["due"] == 0
    assert ledger(spark, tmp_path)["k-first"]["next_attempt_ms"] == parse_instant("2026-11-21T13:00:00Z")
    land(tmp_path / "landing", "10", "b.jsonl", [
        rec("k-second", "2026-11-21T10:20:00Z", address="fifo.q", ordering_key="k"),
        rec("z-only", "2026-11-21T10:20:00Z", address="fifo.q", ordering_key="z")])
    caplog.clear()  # the first cycle's records too, when an earlier test left the logger at INFO
    with caplog.at_level("INFO", logger="reprocess.cycle.run"):
        s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", policies=policies)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step=locate")]
    assert int(line.split("shuffle_partitions=")[1].split()[0]) == (2 if many_waiting else 1)
    assert s["due"] == 1  # z-only; k-second waits behind k-first
    rows = ledger(spark, tmp_path)
    assert (rows["k-second"]["deliveries"], rows["z-only"]["deliveries"]) == (1, 2)


def test_dry_run_reports_and_commits_nothing(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z"), "nope"])
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", dry_run=True)
    assert (s["due"], s["would_quarantine"], s["would_ingest"]) == (1, 1, 1)
    assert read_dataset(spark, str(tmp_path / "wh"), "ledger") is None


def test_data_docs_older_than_the_retention_are_removed_by_as_of_and_their_summaries_stay(spark, tmp_path):
    """A committing cycle removes the Data Docs of cycles whose as-of is more than ``data_docs_days`` before its own
    (logical time: the wall clock plays no part), takes their mark off the run log, and keeps their summaries,
    which then say the docs are gone; with no retention (None) it removes none."""
    from reprocess.cli import render_summary
    from reprocess.orchestration import read_summary, summary_markdown
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z")])
    wh = Warehouse(tmp_path / "wh")

    def docs(run_id: str) -> bool:
        return (wh.root / "runs" / run_id / "data_docs" / "index.html").is_file()

    a = cycle(spark, tmp_path, "2026-11-21T10:05:00Z", data_docs_days=1)["run_id"]
    first_b = cycle(spark, tmp_path, "2026-11-22T10:05:00Z", data_docs_days=1)
    b = first_b["run_id"]
    assert (docs(a), docs(b)) == (True, True)  # a is exactly one day older than b: not more, so kept
    c = cycle(spark, tmp_path, "2026-11-22T12:00:00Z", data_docs_days=1)["run_id"]
    assert (docs(a), docs(b), docs(c)) == (False, True, True)
    assert (wh.root / "runs" / a / "summary.json").is_file()
    assert [r.get("data_docs") for r in wh.latest().runs] == [None, True, True]
    # a run asked again of a committed as-of reports its docs as they are now, from the CLI and from a DAG
    again_a = cycle(spark, tmp_path, "2026-11-21T10:05:00Z", data_docs_days=1)
    again_b = cycle(spark, tmp_path, "2026-11-22T10:05:00Z", data_docs_days=1)
    assert (again_a["already_committed"], again_a["run_id"], again_a["validation"]["data_docs"]) == (True, a, None)
    assert "Data Docs: no longer there (removed past the Data Docs retention, or by hand)" in render_summary(again_a)
    assert again_b["validation"]["data_docs"] == first_b["validation"]["data_docs"]
    assert f"Data Docs: {first_b['validation']['data_docs']}" in render_summary(again_b)
    dag_a = read_summary(str(tmp_path / "wh"), "2026-11-21T10:05:00Z")
    assert dag_a is not None
    assert dag_a["validation"]["data_docs"] is None
    assert "Data Docs: no longer there" in summary_markdown(dag_a, "2026-11-21T10:05:00Z", dry_run=False)
    assert [r.get("data_docs") for r in wh.latest().runs] == [None, True, True]  # asking changed nothing
    d = cycle(spark, tmp_path, "2026-11-24T12:00:00Z", data_docs_days=None)["run_id"]  # None: all kept
    assert (docs(b), docs(c), docs(d)) == (True, True, True)
    assert [r.get("data_docs") for r in wh.latest().runs] == [None, True, True, True]


def test_a_ledger_file_damaged_outside_reprocess_stops_the_run_naming_it_and_commits_nothing(spark, tmp_path):
    """A ledger file the snapshot lists, cut short or deleted by something other than reprocess: the next run and a
    DLQ re-drive fail with a WarehouseDamagedError naming it (not Spark's stack trace), commit nothing and leave the
    warehouse unlocked."""
    from reprocess.errors import WarehouseDamagedError
    from reprocess.redrive import RedriveRequest, redrive_dead_letters
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("m1", "2026-11-21T10:00:00Z"), rec("m2", "2026-11-21T10:01:00Z"),
        rec("bad", "2026-11-21T10:02:00Z", error_class="com.acme.ValidationError")])
    assert cycle(spark, tmp_path, "2026-11-21T10:30:00Z")["dead_lettered"]["NON_RETRYABLE"] == 1
    wh = Warehouse(tmp_path / "wh")
    before = wh.latest()
    intact = {rel: (tmp_path / "wh" / rel).read_bytes() for rel in before.files["ledger"]}
    for rel, data in intact.items():
        (tmp_path / "wh" / rel).write_bytes(data[: len(data) // 2])
    with pytest.raises(WarehouseDamagedError) as info:
        cycle(spark, tmp_path, "2026-11-21T10:45:00Z")
    named = [rel for rel in intact if f"snapshot {before.version} lists {rel}, which is not a readable Parquet file"
             in str(info.value)]
    assert named, str(info.value)
    assert "\tat org.apache" not in str(info.value)
    with pytest.raises(WarehouseDamagedError, match=f"snapshot {before.version} lists ledger/"):
        redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(address_pattern="#"),
                             parse_instant("2026-11-21T10:40:00Z"))
    assert wh.latest().version == before.version
    gone = sorted(intact)[0]
    (tmp_path / "wh" / gone).unlink()
    with pytest.raises(WarehouseDamagedError, match=f"lists {gone}, which is not there"):
        cycle(spark, tmp_path, "2026-11-21T10:45:00Z")
    for rel, data in intact.items():  # put back, the same run goes through
        (tmp_path / "wh" / rel).write_bytes(data)
    s = cycle(spark, tmp_path, "2026-11-21T10:45:00Z")
    assert s["due"] == 2
    assert all(s["conservation"].values())
    after = wh.latest()
    dead = sorted(after.files["dlq"])[0]
    (tmp_path / "wh" / dead).unlink()
    with pytest.raises(WarehouseDamagedError, match=f"snapshot {after.version} lists {dead}, which is not there"):
        redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(address_pattern="#"),
                             parse_instant("2026-11-21T10:50:00Z"))
    assert wh.latest().version == after.version


def test_a_redrive_is_sized_to_the_ledger_like_a_cycle_and_moves_the_same_messages_either_way(spark, tmp_path,
                                                                                              monkeypatch, caplog):
    """A DLQ re-drive sizes its queries to the ledger's rows as the last commit counted them: a small ledger's
    re-drive runs interpreted, its shuffles in one partition without adaptive execution; a large one's keeps the
    session's settings. Both move the same messages into the same ledger and DLQ, and the settings are back after."""
    import shutil

    import reprocess.redrive as redrive
    import reprocess.sparkutil as sparkutil
    from warehouse_state import warehouse_state

    land(tmp_path / "small" / "landing", "10", "a.jsonl", [
        *[rec(f"bad-{i}", "2026-11-21T10:00:00Z", address=("orders.created", "billing.eu")[i % 2],
              error_class="com.acme.ValidationError") for i in range(4)],
        *[rec(f"m-{i}", "2026-11-21T10:00:00Z") for i in range(3)]])
    assert cycle(spark, tmp_path / "small", "2026-11-21T10:01:00Z")["dead_lettered"]["NON_RETRYABLE"] == 4
    shutil.copytree(tmp_path / "small", tmp_path / "large")
    keys = (sparkutil.FACTORY_MODE_KEY, sparkutil.WHOLE_STAGE_KEY, *sparkutil.SHUFFLE_KEYS)
    session = {k: spark.conf.get(k, None) for k in keys}
    during = {}
    original = redrive._redrive_on

    def recording(spark_, wh, *args):
        during[wh.root.parent.name] = {k: spark.conf.get(k, None) for k in keys}
        return original(spark_, wh, *args)

    monkeypatch.setattr(redrive, "_redrive_on", recording)
    request = redrive.RedriveRequest(address_pattern="orders.#", reset_deliveries=True)
    audits, logged = {}, {}
    for name in ("small", "large"):
        if name == "large":  # the ledger's 7 rows count as many
            monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_SCAN_ROWS", 7)
        caplog.clear()
        with caplog.at_level("INFO", logger="reprocess.redrive"):
            audits[name] = redrive.redrive_dead_letters(spark, str(tmp_path / name / "wh"), request,
                                                        parse_instant("2026-11-21T10:05:00Z"))
        lines = [r.getMessage() for r in caplog.records if r.name == "reprocess.redrive"]
        (line,) = [m for m in lines if "codegen=" in m]
        logged[name] = line.split("ledger_rows=")[1]
        # each step with its duration, then the commit
        steps = [m.split()[1] for m in lines if m.startswith("re-drive step=")]
        assert steps == ["step=select", "step=stage_ledger", "step=stage_dlq", "step=validate"], lines
        assert "dlq_files=2 moved=2" in lines[lines.index(line) + 1]
        asked = request.at(parse_instant("2026-11-21T10:05:00Z"))
        assert lines[-1].startswith(f"re-drive committed request_id={asked.request_id} moved=2")
        assert {k: spark.conf.get(k, None) for k in keys} == session
    assert logged == {"small": "7 codegen=interpreted", "large": "7 codegen=generated"}
    assert during["small"] == {sparkutil.FACTORY_MODE_KEY: "NO_CODEGEN", sparkutil.WHOLE_STAGE_KEY: "false",
                               sparkutil.SHUFFLE_PARTITIONS_KEY: "1", sparkutil.ADAPTIVE_KEY: "false"}
    assert during["large"] == session
    assert audits["small"]["moved"] == 2
    # the GX gate's counts: the one ledger file holding the two (its bucket's 4 rows) rewritten, 2 of them moved;
    # the DLQ file of orders.created (their 2 records) rewritten empty
    assert audits["small"]["validation"]["counts"] == audits["large"]["validation"]["counts"] == {
        "ledger_rows_before": 4, "ledger_rows_after": 4, "ledger_distinct_ids": 4, "redriven_rows": 2, "moved": 2,
        "moved_with_dlq_record": 2, "dlq_rows_before": 2, "dlq_records_moved": 2, "dlq_rows_after": 0,
        "moved_left_in_dlq": 0}
    assert audits["small"]["messages"] == audits["large"]["messages"] == ["bad-0", "bad-2"]
    small, large = (warehouse_state(spark, tmp_path / name / "wh") for name in ("small", "large"))
    assert small == large
    assert [m for m, _ in small["dlq"]] == ["bad-1", "bad-3"]
    assert small["ledger"]["bad-0"][:2] == ("WAITING_RETRY", 0)


def test_a_dead_letter_a_new_failure_takes_back_leaves_the_dlq_and_a_message_has_one_dlq_record(spark, tmp_path):
    """A dead-lettered message that fails again in a consumer (a new landing record) waits again by its policy, or
    is dead-lettered again. Its DLQ record stayed: the message was both waiting in the ledger and listed as a dead
    letter (dlq list, stats, the UI), no re-drive could move it, and dead-lettered again it had two records, the old
    one matching a re-drive's filters. The run that takes it back rewrites the DLQ files holding its record."""
    from reprocess.dlq_stats import dlq_stats

    wh = str(tmp_path / "wh")
    bad = {"error_class": "com.acme.ValidationError"}
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z", **bad),
                                                 rec("other", "2026-11-21T10:00:00Z", **bad)])
    assert cycle(spark, tmp_path, "2026-11-21T10:05:00Z")["dead_lettered"]["NON_RETRYABLE"] == 2
    assert dlq_stats(wh)["total"] == 2

    land(tmp_path / "landing", "10", "b.jsonl", [rec("m", "2026-11-21T10:10:00Z")])  # retryable this time
    cycle(spark, tmp_path, "2026-11-21T10:15:00Z")
    assert ledger(spark, tmp_path)["m"]["state"] == "WAITING_RETRY"
    dlq = read_dataset(spark, wh, "dlq").collect()
    assert [r.message_id for r in dlq] == ["other"]  # m is only in the ledger now
    assert dlq_stats(wh)["total"] == 1

    land(tmp_path / "landing", "10", "c.jsonl", [rec("m", "2026-11-21T10:20:00Z", **bad)])
    s = cycle(spark, tmp_path, "2026-11-21T10:25:00Z")
    assert s["dead_lettered"]["NON_RETRYABLE"] == 1
    dlq = read_dataset(spark, wh, "dlq").collect()
    assert sorted((r.message_id, r.run_id) for r in dlq) == [("m", "run-20261121T102500Z"),
                                                             ("other", "run-20261121T100500Z")]
    assert all(s["conservation"].values())


def test_a_dlq_redrive_waits_until_a_prepared_cycle_is_finished(spark, tmp_path, monkeypatch):
    """A cycle stopped after persisting its deliveries resumes with that due set, checked by count. A DLQ re-drive in
    between could change it (an ordered key's earlier message waiting again holds a later one back), and the resume
    then failed on the count at every call. The re-drive refuses while a cycle is prepared, naming it."""
    import reprocess.cycle.run as cycle_run
    from reprocess.errors import CommitConflictError
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    class Stopped(Exception):
        pass

    def stop(name: str) -> None:
        if name == "after_prepare":
            raise Stopped(name)

    land(tmp_path / "landing", "10", "a.jsonl", [rec("dead", "2026-11-21T10:00:00Z",
                                                     error_class="com.acme.ValidationError"),
                                                 rec("due", "2026-11-21T10:00:00Z")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop)
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    wh = str(tmp_path / "wh")
    with pytest.raises(CommitConflictError, match="cycle run-20261121T103000Z persisted its deliveries"):
        redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:31:00Z"))
    assert cycle(spark, tmp_path, "2026-11-21T10:45:00Z")["run_id"] == "run-20261121T104500Z"  # resumed 10:30 first
    # "dead", and "due", which the resumed run and the 10:45 one failed for good (orders.#: 3 deliveries)
    assert redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:46:00Z"))["moved"] == 2


def test_a_retry_of_an_applied_redrive_answers_while_a_cycle_is_prepared_and_a_missing_warehouse_is_refused(
        spark, tmp_path, monkeypatch):
    """A retry of a re-drive that committed (its task failed after the commit) was refused while a cycle was
    prepared, so the DAG run failed though the DLQ had been drained, and pressing the button again moved a second
    batch. It answers with the applied request. A re-drive of a warehouse nothing was committed to (a mistyped path)
    created it and committed a request there that moved nothing, exit 0; it is refused and creates nothing."""
    import reprocess.cycle.run as cycle_run
    from reprocess.errors import CommitConflictError, ConfigError
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    class Stopped(Exception):
        pass

    def stop(name: str) -> None:
        if name == "after_prepare":
            raise Stopped(name)

    land(tmp_path / "landing", "10", "a.jsonl", [rec("dead", "2026-11-21T10:00:00Z",
                                                     error_class="com.acme.ValidationError"),
                                                 rec("due", "2026-11-21T10:00:00Z")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    wh = str(tmp_path / "wh")
    applied = redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"))
    assert applied["moved"] == 1
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop)
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    again = redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"))
    assert (again["request_id"], again["moved"], again["already_applied"]) == (applied["request_id"], 1, True)
    with pytest.raises(CommitConflictError, match="cycle run-20261121T103000Z persisted its deliveries"):
        redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:31:00Z"))
    typo = tmp_path / "whx"
    with pytest.raises(ConfigError, match=f"warehouse {typo} has no committed run"):
        redrive_dead_letters(spark, str(typo), RedriveRequest(), parse_instant("2026-11-21T10:31:00Z"))
    assert not typo.exists()


@pytest.mark.parametrize("bug", ["doubled", "lost"])
def test_a_redrive_whose_rewrite_doubles_or_loses_a_ledger_row_fails_its_gx_gate_and_commits_nothing(
        spark, tmp_path, monkeypatch, bug):
    """A re-drive commits rewritten ledger and DLQ files. It had no GX gate: a bug in the rewrite (a row doubled or
    lost) committed, and the next cycle's gate then stopped every cycle. The staged files are now validated before
    the commit (the redrive_ledger and redrive_run suites); a failure is exit 9, nothing committed, with Data Docs;
    the same request asked again, the bug gone, moves the message."""
    import reprocess.redrive as redrive
    from reprocess.errors import ConfigError, ValidationFailedError
    from reprocess.ledger.merge import with_bucket
    from reprocess.storage.commit import Warehouse
    from reprocess.validation.suites import SUITES, load_suite

    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("dead", "2026-11-21T10:00:00Z", error_class="com.acme.ValidationError"),
        # dead-lettered with it, in the same ledger file: not moved, but rewritten
        rec("kept", "2026-11-21T10:00:00Z", address="billing.eu", error_class="com.acme.ValidationError"),
        rec("due", "2026-11-21T10:00:00Z")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    wh = str(tmp_path / "wh")
    before = Warehouse(wh).latest()
    broken = {"doubled": lambda df: with_bucket(df.unionByName(df.filter(F.col("_seq").isNotNull()))),
              "lost": lambda df: with_bucket(df.filter(F.col("_seq").isNotNull()))}[bug]
    request = redrive.RedriveRequest(address_pattern="orders.#")
    at = parse_instant("2026-11-21T10:06:00Z")
    with monkeypatch.context() as m:
        m.setattr(redrive, "with_bucket", broken)
        with pytest.raises(ValidationFailedError) as err:
            redrive.redrive_dead_letters(spark, wh, request, at)
    message = str(err.value)
    assert f"re-drive {request.at(at).request_id}: " in message
    assert "nothing was committed" in message
    if bug == "doubled":  # named by both suites: the id twice, and a row more than the files held
        assert "suite redrive_ledger" in message
        assert "expect_column_values_to_be_unique(message_id)" in message
        assert "message ids ['dead', 'dead']" in message
        assert "expect_column_pair_values_to_be_equal(ledger_rows_after, ledger_rows_before)" in message
    else:  # the row that shared the moved message's file, gone
        assert "suite redrive_ledger" not in message
        assert "expect_column_pair_values_to_be_equal(ledger_rows_after, ledger_rows_before)" in message
    assert Path(err.value.data_docs).is_file()
    assert Warehouse(wh).latest().version == before.version  # nothing committed
    assert sorted(r.message_id for r in read_dataset(spark, wh, "dlq").collect()) == ["dead", "kept"]
    audit = redrive.redrive_dead_letters(spark, wh, request, at)
    assert (audit["moved"], audit["validation"]["passed"]) == (1, True)
    counts = audit["validation"]["counts"]
    assert (counts["ledger_rows_before"], counts["ledger_rows_after"], counts["redriven_rows"]) == (2, 2, 1)
    rows = ledger(spark, tmp_path)
    assert {m: r["state"] for m, r in rows.items()} == {"dead": "WAITING_RETRY", "kept": "DEAD_LETTERED",
                                                        "due": "WAITING_RETRY"}
    # its Data Docs are marked in the run log, and expire with the cycles' (here: older than 10 minutes of as-of)
    docs = Path(audit["validation"]["data_docs"]).parent
    assert docs.is_dir()
    assert Warehouse(wh).latest().runs[-1]["data_docs"] is True
    cycle(spark, tmp_path, "2026-11-21T10:30:00Z", data_docs_days=10 / 1440)
    assert not docs.exists()
    assert "data_docs" not in Warehouse(wh).latest().runs[-2]
    again = redrive.redrive_dead_letters(spark, wh, request, at)  # a retry answers, naming its docs gone
    assert (again["already_applied"], again["validation"]["data_docs"]) == (True, None)
    # a suites folder without the re-drive's suites (a copy made before them) is refused before any work
    only_cycles = tmp_path / "suites"
    only_cycles.mkdir()
    for name in SUITES:
        (only_cycles / f"{name}.json").write_text(json.dumps(load_suite(name)))
    monkeypatch.setenv("REPROCESS_EXPECTATIONS", str(only_cycles))
    with pytest.raises(ConfigError, match=f"GX suite 'redrive_ledger' is not in {only_cycles}"):
        redrive.redrive_dead_letters(spark, wh, redrive.RedriveRequest(), parse_instant("2026-11-21T10:31:00Z"))
    assert not list((tmp_path / "wh" / "_runs").glob("redrive-*"))  # nothing staged


def test_a_call_that_resumes_the_prepared_run_of_its_own_as_of_is_not_told_it_ran_nothing(spark, tmp_path,
                                                                                          monkeypatch):
    """A call at an as-of whose run was prepared (persisted its deliveries, then stopped) resumes it with the target it
    prepared with and commits it: that call ran it, though it passed another target. It was told "nothing ran" (the
    committed run's target differed from its own). The summary says the run was resumed: whichever call resumed it is
    not known later (a DAG run's note reads the summary), so no call is judged against it."""
    import reprocess.cycle.run as cycle_run

    class Stopped(Exception):
        pass

    def stop(name: str) -> None:
        if name == "after_prepare":
            raise Stopped(name)

    land(tmp_path / "landing", "10", "a.jsonl", [rec("due", "2026-11-21T10:00:00Z")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop)
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z")  # always_fail, prepared
    ok = "python:reprocess.targets.examples:always_ok"
    resumed = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=ok)
    assert resumed["already_committed"] is True
    assert "not_applied" not in resumed
    assert resumed["target"] == "python:reprocess.targets.examples:always_fail"  # the one it prepared with
    assert resumed["resumed"] is True
    from reprocess.orchestration import summary_markdown

    assert "Nothing ran" not in summary_markdown(resumed, "2026-11-21T10:30:00Z", False, (None, ok))


def stopped_before_its_record(monkeypatch, redrive) -> None:
    """``redrive()`` stopped between its commit and its audit record (the record's write fails: a full disk)."""
    from reprocess.storage.commit import Warehouse

    real = Warehouse.write_bytes

    def no_record(self, location, data):
        if "/redrive_audit/" in str(location):
            raise OSError(28, "No space left on device")
        return real(self, location, data)

    with monkeypatch.context() as m:
        m.setattr(Warehouse, "write_bytes", no_record)
        with pytest.raises(OSError, match="No space left"):
            redrive()


def test_a_redrive_stopped_between_its_commit_and_its_audit_record_writes_the_record_when_asked_again(
        spark, tmp_path, monkeypatch):
    """The audit record was written before the commit (a commit that failed left a record of a move that never
    happened), then after it (a stop between the two lost it for good: the retry answered from the snapshot's
    summary, without the message ids, and later not at all). It is staged beside the request until the commit,
    and the request asked again writes it."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [rec("dead", "2026-11-21T10:00:00Z",
                                                     error_class="com.acme.ValidationError")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    wh = str(tmp_path / "wh")
    stopped_before_its_record(monkeypatch, lambda: redrive_dead_letters(
        spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"), requested_by="op"))
    assert Warehouse(wh).latest().runs[-1]["kind"] == "redrive"  # committed
    assert not list((tmp_path / "wh").glob("redrive_audit/*.json"))
    again = redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"))
    assert (again["already_applied"], again["moved"], again["messages"], again["requested_by"]) == (True, 1, ["dead"],
                                                                                                   "op")
    (written,) = (tmp_path / "wh").glob("redrive_audit/*.json")
    assert json.loads(written.read_text())["messages"] == ["dead"]
    assert not (tmp_path / "wh" / "_runs" / again["request_id"]).exists()


def test_a_redrive_that_stopped_on_its_way_and_was_not_asked_again_is_settled_by_the_next_writer(
        spark, tmp_path, monkeypatch):
    """A re-drive stopped between its commit and its audit record got the record only if asked again: otherwise
    never, and once its entry was past the snapshot's FULL_RUNS the ids it moved were nowhere. One stopped before its
    commit left its stage (rewritten ledger and DLQ files, with payloads) for good. The next writer settles both: a
    cycle writes the first's record and removes the second's stage; asked again, the second starts over."""
    from reprocess.dlq_stats import dlq_stats
    from reprocess.redrive import RedriveRequest, redrive_dead_letters
    from reprocess.storage.commit import Warehouse

    runs = tmp_path / "wh" / "_runs"

    def redrives() -> list[str]:
        return sorted(p.name for p in runs.iterdir() if p.name.startswith("redrive-"))

    def dead(at: str) -> list:
        return [rec(m, at, error_class="com.acme.ValidationError") for m in ("dead-1", "dead-2")]

    land(tmp_path / "landing", "10", "a.jsonl", dead("2026-11-21T10:00:00Z"))
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    wh = str(tmp_path / "wh")
    stopped_before_its_record(monkeypatch, lambda: redrive_dead_letters(
        spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"), requested_by="op"))
    (committed,) = [r["run_id"] for r in Warehouse(wh).latest().runs if r.get("kind") == "redrive"]
    assert redrives() == [committed]
    assert not list((tmp_path / "wh").glob("redrive_audit/*.json"))

    land(tmp_path / "landing", "10", "b.jsonl", dead("2026-11-21T10:10:00Z"))  # they fail for good once more
    cycle(spark, tmp_path, "2026-11-21T10:15:00Z")  # the next writer
    record = json.loads((tmp_path / "wh" / "redrive_audit" / f"{committed}.json").read_text())
    assert (record["moved"], record["messages"], record["requested_by"]) == (2, ["dead-1", "dead-2"], "op")
    assert redrives() == []
    assert dlq_stats(wh)["total"] == 2

    second = RedriveRequest(reset_deliveries=True)
    def no_commit(self, base, new):
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(Warehouse, "commit", no_commit)
        with pytest.raises(OSError, match="Input/output error"):
            redrive_dead_letters(spark, wh, second, parse_instant("2026-11-21T10:16:00Z"))
    (stopped,) = redrives()
    assert (runs / stopped / "stage").is_dir()  # its stage (its files published, not committed: the vacuum's)
    cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    assert redrives() == []
    assert dlq_stats(wh)["total"] == 2  # it moved nothing
    again = redrive_dead_letters(spark, wh, second, parse_instant("2026-11-21T10:16:00Z"))
    assert (again["request_id"], again["moved"], again.get("already_applied")) == (stopped, 2, None)


def test_a_redrive_record_that_cannot_be_completed_stops_no_other_writer(tmp_path, caplog):
    """Settling the re-drives that stopped on their way is every writer's first step: one whose record cannot be
    completed (the final one cut short, the staged one not the committed request's) stopped every cycle with a
    JSONDecodeError. It is left, and said, for the request itself to answer; the others are settled."""
    from reprocess.redrive import settle_redrives
    from reprocess.storage.commit import Snapshot, Warehouse, redrive_audit_path

    wh = Warehouse(tmp_path / "wh")
    audit = {"request_id": "redrive-a", "moved": 1, "requested_by": "op"}
    wh.commit(wh.latest(), Snapshot(runs=[{"run_id": "redrive-a", "kind": "redrive", "as_of_ms": 0,
                                           "summary": {**audit, "states": {}}}]))
    wh.write_bytes(str(wh.run_dir("redrive-a") / "audit.json"), json.dumps({**audit, "moved": 2}).encode())
    cut_short = Path(redrive_audit_path(wh, "redrive-a"))
    cut_short.parent.mkdir()
    cut_short.write_bytes(b'{"request_id": "redr')
    (wh.run_dir("redrive-b") / "stage" / "attempt-1").mkdir(parents=True)  # never committed
    settle_redrives(wh, wh.latest())
    assert sorted(p.name for p in (wh.root / "_runs").iterdir()) == ["redrive-a"]
    assert "re-drive request_id=redrive-a committed, but its audit record could not be completed" in caplog.text


def test_a_redrive_audit_record_cut_short_is_written_again_from_the_staged_one(spark, tmp_path, monkeypatch):
    """On a store that writes a file in place (HDFS) a stop while the audit record is written leaves it cut short,
    and every later call of the request failed reading it. The staged record, removed only after the final one is
    whole, is read first; one staged by a writer that lost its lease (not the committed request's) is not."""
    from reprocess.redrive import RedriveRequest, _is_committed, redrive_dead_letters
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [rec("dead", "2026-11-21T10:00:00Z",
                                                     error_class="com.acme.ValidationError")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    wh = str(tmp_path / "wh")
    real = Warehouse.write_bytes

    def cut_short(self, location, data):
        if "/redrive_audit/" in str(location):
            Path(location).parent.mkdir(parents=True, exist_ok=True)
            Path(location).write_bytes(data[:10])
            raise OSError(5, "Input/output error")
        return real(self, location, data)

    with monkeypatch.context() as m:
        m.setattr(Warehouse, "write_bytes", cut_short)
        with pytest.raises(OSError, match="Input/output error"):
            redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"), requested_by="op")
    again = redrive_dead_letters(spark, wh, RedriveRequest(), parse_instant("2026-11-21T10:06:00Z"))
    assert (again["already_applied"], again["moved"], again["messages"]) == (True, 1, ["dead"])
    (written,) = (tmp_path / "wh").glob("redrive_audit/*.json")
    assert json.loads(written.read_text())["messages"] == ["dead"]

    entry = next(r for r in Warehouse(wh).latest().runs if r.get("kind") == "redrive")
    assert _is_committed(entry, written.read_bytes())
    other = {**json.loads(written.read_text()), "moved": 3, "messages": ["a", "b", "c"]}
    assert not _is_committed(entry, json.dumps(other).encode())
    assert not _is_committed(entry, b'{"request_id": "redr')
    assert _is_committed({"run_id": entry["run_id"]}, json.dumps(other).encode())  # past FULL_RUNS: no summary


@pytest.mark.parametrize(("field", "value", "why"), [
    ("date_to", "20261121", "expected a UTC day YYYY-MM-DD"),  # date.fromisoformat takes it; compared as text
    ("date_from", "2026-W47-6", "expected a UTC day YYYY-MM-DD"),
    ("date_from", "2026-11-22", "is empty: from is after to"),
    ("rate_per_second", float("nan"), "of at least 1.16e-05"),
    ("rate_per_second", 1e-12, "of at least 1.16e-05"),  # spaced beyond a long's milliseconds
])
def test_a_redrive_request_refuses_dates_and_rates_its_filter_would_misread(field, value, why):
    from reprocess.errors import ConfigError
    from reprocess.redrive import RedriveRequest

    ok = RedriveRequest(date_from="2026-11-21", date_to="2026-11-21", rate_per_second=1 / 86_400)
    ok.validate()
    with pytest.raises(ConfigError, match=why):
        RedriveRequest(**{**ok.__dict__, field: value}).validate()


def test_deliveries_after_a_reset_redrive_never_reuse_an_idempotency_key(spark, tmp_path):
    """A DLQ re-drive with reset_deliveries starts the delivery numbers again at 1. The keys were
    <message_id>:<delivery>, so those of the deliveries before came back, and a consumer that drops keys it has seen
    (what the key is for) dropped the re-driven message, which the ledger then called delivered. After a reset they
    are <message_id>:r<resets>.<delivery>."""
    import uuid

    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    keys = tmp_path / "keys"
    module = tmp_path / f"keyed_{uuid.uuid4().hex}.py"  # a module of its own: the session's workers import it once
    module.write_text(f"def call(message):\n    with open({str(keys)!r}, 'a') as f:\n"
                      f"        f.write(message['idempotency_key'] + '\\n')\n"
                      f"    raise RuntimeError('still failing')\n", encoding="utf-8")
    spark.sparkContext.addPyFile(str(module))
    target = f"python:{module.stem}:call"
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z")])  # orders.#: 10m, 3 deliveries
    for at in ("10:05", "10:15", "10:30"):
        cycle(spark, tmp_path, f"2026-11-21T{at}:00Z", target=target)
    assert ledger(spark, tmp_path)["m"]["state"] == "DEAD_LETTERED"
    assert keys.read_text().split() == ["m:2", "m:3"]
    moved = redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(reset_deliveries=True),
                                 parse_instant("2026-11-21T10:31:00Z"))
    assert moved["moved"] == 1
    assert ledger(spark, tmp_path)["m"]["resets"] == 1
    for at in ("10:35", "10:50"):
        cycle(spark, tmp_path, f"2026-11-21T{at}:00Z", target=target)
    assert keys.read_text().split() == ["m:2", "m:3", "m:r1.1", "m:r1.2"]  # before: m:1, then m:2 again
    assert ledger(spark, tmp_path)["m"]["deliveries"] == 2


def test_a_failure_from_before_a_reset_that_lands_after_it_does_not_bring_its_old_count_back(spark, tmp_path):
    """A consumer's failure from before an operator's reset re-drive carries the count of the deliveries the reset
    forgave. Landing late, its delivery_count won over the reset ledger's (the merge takes the higher), and the
    message went back to the DLQ at once with its old count. It counts as the next delivery after the reset, as a
    late failure does, and its consumer's count is not taken; one from after the reset is."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z"),
                                                 rec("n", "2026-11-21T10:00:00Z")])  # orders.#: 10m, 3 deliveries
    for at in ("10:05", "10:15", "10:30"):
        cycle(spark, tmp_path, f"2026-11-21T{at}:00Z")
    assert {k: v["state"] for k, v in ledger(spark, tmp_path).items()} == {"m": "DEAD_LETTERED", "n": "DEAD_LETTERED"}
    # asked at 10:29, before the cycle that dead-lettered them (a retried DAG run asks at its stored run_after): the
    # reset is no earlier than the failures it forgave and the dead-lettering
    moved = redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(reset_deliveries=True),
                                 parse_instant("2026-11-21T10:29:00Z"))
    assert moved["moved"] == 2
    assert ledger(spark, tmp_path)["m"]["reset_ms"] == parse_instant("2026-11-21T10:30:00Z")
    # m: a consumer's failure of 10:29:30, before the reset, lands late; n: one of 10:31:30, after it
    land(tmp_path / "landing", "10", "late.jsonl", [rec("m", "2026-11-21T10:29:30Z", delivery_count=7),
                                                    rec("n", "2026-11-21T10:31:30Z", delivery_count=7)])
    cycle(spark, tmp_path, "2026-11-21T10:32:00Z", target="python:reprocess.targets.examples:always_ok")
    rows = ledger(spark, tmp_path)
    assert (rows["m"]["state"], rows["m"]["deliveries"]) == ("WAITING_RETRY", 1)  # before: DEAD_LETTERED with 7
    assert rows["m"]["next_attempt_ms"] == parse_instant("2026-11-21T10:40:00Z")  # 10m after its last failure
    assert (rows["n"]["state"], rows["n"]["deliveries"]) == ("DEAD_LETTERED", 7)
    cycle(spark, tmp_path, "2026-11-21T10:40:00Z", target="python:reprocess.targets.examples:always_ok")
    assert (ledger(spark, tmp_path)["m"]["state"], ledger(spark, tmp_path)["m"]["deliveries"]) == ("DELIVERED", 2)


def test_a_python_target_that_exits_is_cancelled_or_returns_before_delivering_loses_nothing(spark, tmp_path):
    """A python target's SystemExit or asyncio.CancelledError (no Exception) failed the Spark task, every retry
    sending the partition again, and the job; an exception whose str() raised did too. Each is now the message's
    failure. An async or generator function returned without running its body, every message counted delivered and
    none sent: refused when loaded; a plain function returning a coroutine is the target down (the message stays
    due, no delivery used)."""
    import uuid

    from reprocess.errors import ConfigError, TargetUnavailableError
    from reprocess.targets.base import parse_target

    module = tmp_path / f"odd_{uuid.uuid4().hex}.py"  # a module of its own: the session's workers import it once
    module.write_text(
        "import asyncio\n"
        "class BadStr(Exception):\n"
        "    def __str__(self):\n"
        "        raise ValueError('no text')\n"
        "def mixed(message):\n"
        "    kind = message['message_id']\n"
        "    if kind == 'exits':\n"
        "        raise SystemExit(3)\n"
        "    if kind == 'cancelled':\n"
        "        raise asyncio.CancelledError()\n"
        "    if kind == 'bad-str':\n"
        "        raise BadStr()\n"
        "async def coroutine(message):\n"
        "    pass\n"
        "def generator(message):\n"
        "    yield message\n"
        "def returns_a_coroutine(message):\n"
        "    return asyncio.sleep(0)\n", encoding="utf-8")
    spark.sparkContext.addPyFile(str(module))
    for name in ("coroutine", "generator"):
        with pytest.raises(ConfigError, match="is an async or generator function"):
            parse_target(f"python:{module.stem}:{name}")
    land(tmp_path / "landing", "10", "a.jsonl", [rec(m, "2026-11-21T10:00:00Z")
                                                 for m in ("exits", "cancelled", "bad-str", "ok")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")  # taken in, due at 10:10 (orders.#: 10m)
    s = cycle(spark, tmp_path, "2026-11-21T10:15:00Z", target=f"python:{module.stem}:mixed")
    assert (s["due"], s["delivered"], s["rescheduled"]) == (4, 1, 3)
    rows = ledger(spark, tmp_path)
    assert {m: (r["state"], r["last_error_class"]) for m, r in rows.items()} == {
        "exits": ("WAITING_RETRY", "SystemExit"), "cancelled": ("WAITING_RETRY", "asyncio.exceptions.CancelledError"),
        "bad-str": ("WAITING_RETRY", f"{module.stem}.BadStr"), "ok": ("DELIVERED", None)}
    assert rows["bad-str"]["last_error_message"] == f"<{module.stem}.BadStr whose str() raised ValueError>"
    with pytest.raises(TargetUnavailableError, match="returned a coroutine, not having delivered the message"):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=f"python:{module.stem}:returns_a_coroutine")
    after = ledger(spark, tmp_path)
    assert {m: (r["state"], r["deliveries"]) for m, r in after.items() if m != "ok"} == {
        m: (rows[m]["state"], rows[m]["deliveries"]) for m in ("exits", "cancelled", "bad-str")}  # no delivery used


@pytest.mark.unit
def test_no_two_messages_share_an_idempotency_key_whatever_their_ids_hold():
    """In the form `<id>:r<resets>:<delivery>`, `order-7:r1` at its 2nd delivery and `order-7` at its 2nd after one
    reset both had the key `order-7:r1:2`: a consumer that drops the keys it has seen dropped one of them. Every
    (id, resets, delivery) of ids built from the characters that make such ids gets a key of its own."""
    import itertools

    from reprocess.targets.base import idempotency_key

    assert idempotency_key({"message_id": "order-7:r1", "delivery": 2, "resets": None}) != \
        idempotency_key({"message_id": "order-7", "delivery": 2, "resets": 1})
    ids = ["".join(p) for n in range(5) for p in itertools.product(["a", ":", "r", "1", "."], repeat=n)]
    keys: dict[str, tuple[str, int, int]] = {}
    for message_id, resets, delivery in itertools.product(ids, (0, 1, 11), (1, 2, 12)):
        key = idempotency_key({"message_id": message_id, "delivery": delivery, "resets": resets})
        assert keys.setdefault(key, (message_id, resets, delivery)) == (message_id, resets, delivery), key
    assert len(keys) == len(ids) * 9


def test_the_outbox_computes_each_idempotency_key_as_the_other_targets_do(spark):
    """The outbox computes keys in Spark (idempotency_key_column), the brokers and python targets in Python
    (idempotency_key): the same key for the same delivery, the ids that collided in the old form included."""
    from reprocess.targets.base import idempotency_key, idempotency_key_column

    rows = [("order-7:r1", 2, None), ("order-7", 2, 1), ("a:r1.2", 12, 11), ("a", 2, 0), ("", 1, 3)]
    df = spark.createDataFrame(rows, "message_id string, delivery int, resets int")
    got = [r[0] for r in df.select(idempotency_key_column()).collect()]
    assert got == [idempotency_key({"message_id": m, "delivery": d, "resets": n}) for m, d, n in rows]
    assert len(set(got)) == len(rows)


def test_outbox_rows_carry_the_idempotency_key_that_a_reset_keeps_from_coming_back(spark, tmp_path):
    """The outbox's rows had (message_id, delivery) only: after a reset re-drive they repeat the rows written before it,
    and a consumer of the outbox that drops what it has seen dropped the re-driven message. They carry the brokers'
    idempotency key, computed in Spark as targets.base.idempotency_key computes it for the others."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters
    from reprocess.targets.base import idempotency_key

    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z", delivery_count=2),
                                                 rec("n", "2026-11-21T10:00:00Z")])
    cycle(spark, tmp_path, "2026-11-21T10:15:00Z", target="outbox")  # m: 3rd delivery, n: 2nd, both delivered
    cycle(spark, tmp_path, "2026-11-21T10:16:00Z", target="outbox")
    land(tmp_path / "landing", "10", "b.jsonl", [rec("m", "2026-11-21T10:20:00Z", delivery_count=3,
                                                     error_class="com.acme.ValidationError")])
    cycle(spark, tmp_path, "2026-11-21T10:25:00Z", target="outbox")  # m: NON_RETRYABLE
    assert redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(reset_deliveries=True),
                                parse_instant("2026-11-21T10:26:00Z"))["moved"] == 1
    cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="outbox")
    rows = [r.asDict() for r in read_dataset(spark, str(tmp_path / "wh"), "outbox").collect()]
    got = sorted((r["message_id"], r["delivery"], r["idempotency_key"]) for r in rows)
    assert got == [("m", 1, "m:r1.1"), ("m", 3, "m:3"), ("n", 2, "n:2")]
    assert idempotency_key({"message_id": "m", "delivery": 1, "resets": 1}) == "m:r1.1"  # the brokers' own


def test_address_filter_only_redrives_matching_due_messages(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("o", "2026-11-21T10:00:00Z"),
                                                 rec("f", "2026-11-21T10:00:00Z", address="fifo.q")])
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", address_filter="fifo.#")
    assert s["due"] == 1
    assert ledger(spark, tmp_path)["o"]["deliveries"] == 1


def test_a_late_landing_failure_waits_its_delay_from_the_messages_last_failure(spark, tmp_path):
    """A late file brings a consumer's failure older than the re-drive failure already recorded. Its next attempt was
    that old failure plus the delay, before the last failure: the ledger suite failed the run, and as the message was
    not re-driven in it (another partition's filter here; its target down or an ordered hold-back alike) every resume
    failed the same way, and the DLQ re-drive was refused behind it. The delay runs from the last failure."""
    policies = parse_policies(POLICIES_TEXT + '  - match: "late.#"\n    profile: stepped\n'
                              '    settings: {delays: [10m], max_deliveries: 5}\n')
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z", address="late.x")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z", policies=policies)
    assert cycle(spark, tmp_path, "2026-11-21T10:15:00Z", policies=policies)["due"] == 1  # fails again at 10:15
    land(tmp_path / "landing", "10", "late.jsonl", [rec("m", "2026-11-21T10:02:00Z", address="late.x",
                                                        error_class="SomeOtherConsumerError")])
    s = cycle(spark, tmp_path, "2026-11-21T10:20:00Z", policies=policies, address_filter="orders.#")
    assert s["validation"]["passed"]
    m = ledger(spark, tmp_path)["m"]
    assert (m["state"], m["deliveries"]) == ("WAITING_RETRY", 3)
    assert m["last_failed_ms"] == parse_instant("2026-11-21T10:15:00Z")
    assert m["next_attempt_ms"] == parse_instant("2026-11-21T10:25:00Z")  # was 10:12


def test_a_dlq_redrive_asked_before_the_last_failure_makes_the_message_due_after_that_failure(spark, tmp_path):
    """A retried re-drive DAG run asks at its stored run_after, which a cycle dead-lettering the message since can
    have passed: its due time was that run_after, before its last failure (the ledger suite's
    next_attempt_after_last_failure). It is due at the last cycle's as-of then, which is not before any failure the
    ledger holds."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    bad = "com.acme.ValidationError"
    # at their policy's bound (3 deliveries): a failure of their one delivery more dead-letters them again
    land(tmp_path / "landing", "10", "a.jsonl", [rec("d", "2026-11-21T10:00:00Z", error_class=bad, delivery_count=3)])
    land(tmp_path / "landing", "09", "b.jsonl", [rec("e", "2026-11-21T09:00:00Z", error_class=bad, delivery_count=3)])
    cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    audit = redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(), parse_instant("2026-11-21T09:50:00Z"))
    assert audit["moved"] == 2
    rows = ledger(spark, tmp_path)
    # asked before the last cycle's as-of: due at it (the next cycle's first chance), after both last failures
    assert rows["d"]["last_failed_ms"] == parse_instant("2026-11-21T10:00:00Z")
    assert rows["d"]["next_attempt_ms"] == rows["e"]["next_attempt_ms"] == parse_instant("2026-11-21T10:30:00Z")
    # at a rate, e is not due a minute before d, which its place after d would make it: each one a spacing after the
    # one before (before, both failed re-drives dead-lettered at one as-of were due at that instant, at any rate)
    assert cycle(spark, tmp_path, "2026-11-21T10:40:00Z")["dead_lettered"]["total"] == 2  # always_fail: at 10:40
    audit = redrive_dead_letters(spark, str(tmp_path / "wh"), RedriveRequest(rate_per_second=1 / 60),
                                 parse_instant("2026-11-21T10:35:00Z"))
    rows = ledger(spark, tmp_path)
    assert (audit["moved"], rows["d"]["next_attempt_ms"], rows["e"]["next_attempt_ms"]) == (
        2, parse_instant("2026-11-21T10:40:00Z"), parse_instant("2026-11-21T10:41:00Z"))


def test_a_paced_dlq_redrive_makes_the_oldest_dead_letter_due_first_and_takes_any_max(spark, tmp_path):
    """At a rate, the due times went by message id, so of a batch the oldest dead letter could wait longest; and a max
    beyond a Java int (the form allows up to 2**62, "drain everything") failed in Spark's limit after the scan."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    bad = "com.acme.ValidationError"
    land(tmp_path / "landing", "10", "a.jsonl", [rec("z-old", "2026-11-21T10:00:00Z", error_class=bad)])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    land(tmp_path / "landing", "10", "b.jsonl", [rec("a-new", "2026-11-21T10:06:00Z", error_class=bad)])
    cycle(spark, tmp_path, "2026-11-21T10:10:00Z")
    audit = redrive_dead_letters(spark, str(tmp_path / "wh"),
                                 RedriveRequest(rate_per_second=1 / 60, max_messages=5_000_000_000),
                                 parse_instant("2026-11-21T10:30:00Z"))
    assert (audit["moved"], audit["messages"]) == (2, ["z-old", "a-new"])  # the audit lists them as they are due
    rows = ledger(spark, tmp_path)
    assert (rows["z-old"]["next_attempt_ms"], rows["a-new"]["next_attempt_ms"]) == (
        parse_instant("2026-11-21T10:30:00Z"), parse_instant("2026-11-21T10:31:00Z"))


def test_a_paced_dlq_redrive_applied_after_later_cycles_is_spaced_from_their_as_of(spark, tmp_path):
    """A re-drive DAG run refused while a cycle was prepared, then cleared once cycles had committed an hour on, is
    applied at its stored run_after: its messages were spaced from that time, so all those spaced before the last
    as-of were due at once, and the next cycle sent them in one burst, whatever the rate. They are spaced from the
    last as-of when it is later than the request."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    bad = "com.acme.ValidationError"
    land(tmp_path / "landing", "10", "a.jsonl", [rec(f"m{i}", "2026-11-21T10:00:00Z", error_class=bad)
                                                 for i in range(3)])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    cycle(spark, tmp_path, "2026-11-21T11:00:00Z")  # the cycles go on
    audit = redrive_dead_letters(spark, str(tmp_path / "wh"),
                                 RedriveRequest(rate_per_second=1 / 60, reset_deliveries=True),
                                 parse_instant("2026-11-21T10:10:00Z"))
    assert audit["moved"] == 3
    assert audit["requested_at"].startswith("2026-11-21T10:10:00")  # asked then, as the audit says
    rows = ledger(spark, tmp_path)
    assert [rows[f"m{i}"]["next_attempt_ms"] for i in range(3)] == [
        parse_instant(f"2026-11-21T11:0{i}:00Z") for i in range(3)]
    # the reset forgives the failures until the spacing starts, not until the request's time
    assert {rows[f"m{i}"]["reset_ms"] for i in range(3)} == {parse_instant("2026-11-21T11:00:00Z")}
    assert cycle(spark, tmp_path, "2026-11-21T11:01:30Z")["due"] == 2  # a minute apart, not the three at once


def test_a_kept_message_failing_again_after_its_policy_was_removed_is_dead_lettered_with_reason_no_policy(spark,
                                                                                                          tmp_path):
    """A waiting message whose address no policy matches any more (the policy removed from the file; or re-driven
    from the DLQ after that) that fails again has no schedule to wait by. It was kept WAITING_RETRY with no next
    attempt: the ledger suite failed every later run, which resumed the prepared run and re-drove it again. It goes
    to the default dead-letter address with reason NO_POLICY, and the run commits. A message another policy matches
    now is rescheduled by that one and kept under it from then on (its name and profile in the ledger, as a
    consumer's new failure re-keys it in the merge); the dead letters keep the name they had."""
    from reprocess.storage.read import read_dataset as read

    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-gone", "2026-11-21T10:00:00Z", address="legacy.x"),
                                                 rec("m-ok", "2026-11-21T10:00:00Z", address="legacy.y"),
                                                 rec("m-moved", "2026-11-21T10:00:00Z", address="legacy.z")])
    with_legacy = parse_policies(POLICIES_TEXT + '  - match: "legacy.#"\n    profile: stepped\n'
                                 '    settings: {delays: [10m], max_deliveries: 5}\n')
    assert cycle(spark, tmp_path, "2026-11-21T10:05:00Z", policies=with_legacy)["due"] == 0
    assert {r["policy"] for r in ledger(spark, tmp_path).values()} == {"legacy.#"}
    moved = parse_policies(POLICIES_TEXT + '  - match: "legacy.z"\n    profile: artemis\n'
                           '    settings: {redelivery-delay: 60000, max-delivery-attempts: 5}\n')
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="python:reprocess.targets.examples:always_fail",
              policies=moved)
    assert (s["due"], s["delivered"], s["rescheduled"], s["dead_lettered"]["NO_POLICY"]) == (3, 0, 1, 2)
    rows = ledger(spark, tmp_path)
    assert {m: (r["state"], r["reason_code"], r["dead_letter_address"], r["deliveries"], r["policy"], r["profile"])
            for m, r in rows.items()} == {
        "m-gone": ("DEAD_LETTERED", "NO_POLICY", "ops.dlq", 2, "legacy.#", "stepped"),
        "m-ok": ("DEAD_LETTERED", "NO_POLICY", "ops.dlq", 2, "legacy.#", "stepped"),
        "m-moved": ("WAITING_RETRY", None, None, 2, "legacy.z", "artemis")}
    assert rows["m-moved"]["next_attempt_ms"] == parse_instant("2026-11-21T10:31:00Z")  # legacy.z's delay
    dlq = read(spark, str(tmp_path / "wh"), "dlq").collect()
    assert sorted((r.message_id, r.address, r.reason_code, r.policy, r.profile) for r in dlq) == [
        ("m-gone", "ops.dlq", "NO_POLICY", "legacy.#", "stepped"),
        ("m-ok", "ops.dlq", "NO_POLICY", "legacy.#", "stepped")]


# orders.created re-driven to the outbox by its policy, the other orders.# messages to the run's target
OWN_OUTBOX = """
policies:
  - match: "orders.created"
    profile: stepped
    settings: {delays: [1m], max_deliveries: 3}
    target: outbox
  - match: "orders.#"
    profile: stepped
    settings: {delays: [10m], max_deliveries: 3}
"""


def test_outbox_target_writes_due_messages_under_their_address(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z", headers={"h": "v"})])
    cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="outbox")
    out = read_dataset(spark, str(tmp_path / "wh"), "outbox").collect()
    assert [(r.message_id, r.address, r.delivery, r.headers) for r in out] == [("m1", "orders.created", 2,
                                                                                {"h": "v"})]
    assert ledger(spark, tmp_path)["m1"]["state"] == "DELIVERED"


def test_an_outbox_shared_by_a_policys_target_and_the_runs_gets_every_due_message(spark, tmp_path):
    """A policy's own target and the run's are re-driven group by group; when both are the outbox, the groups are
    one: two policies take messages of one address (a consumer group's, re-driven to the run's target, and the
    address's own, whose target is the outbox), and the second group's write of that address's partition replaced
    the first's, whose messages the ledger called delivered without being in the outbox."""
    policies = parse_policies(OWN_OUTBOX + '  - match: "orders.#"\n    consumer_group: billing\n'
                              '    profile: stepped\n    settings: {delays: [1m], max_deliveries: 3}\n')
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-run", "2026-11-21T10:00:00Z", consumer_group="billing"),
                                                 rec("m-own", "2026-11-21T10:00:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="outbox", policies=policies)
    assert s["due"] == 2
    rows = ledger(spark, tmp_path)
    assert (rows["m-run"]["policy"], rows["m-own"]["policy"]) == ("orders.# @billing", "orders.created")
    assert {m: r["state"] for m, r in rows.items()} == {"m-run": "DELIVERED", "m-own": "DELIVERED"}
    out = read_dataset(spark, str(tmp_path / "wh"), "outbox").collect()
    assert sorted((r.message_id, r.address) for r in out) == [("m-own", "orders.created"),
                                                              ("m-run", "orders.created")]


def test_a_waiting_message_goes_through_the_target_of_the_policy_that_matches_it_now(spark, tmp_path):
    """A policy added to the file takes the messages already waiting on its addresses from their next re-drive on, as
    a broker looks a queue's settings up at each delivery: its target delivers them, and the ledger keeps them under
    its name. Before, that re-drive went through the target of the policy they were kept under (the run's, which
    fails them here); only its failure moved them. A message the new policy does not match stays where it was."""
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-moved", "2026-11-21T10:00:00Z"),
                                                 rec("m-stays", "2026-11-21T10:00:00Z", address="orders.paid")])
    assert cycle(spark, tmp_path, "2026-11-21T10:05:00Z")["due"] == 0  # both wait under orders.# until 10:10
    added = parse_policies(OWN_OUTBOX.replace("target: outbox", "target: python:reprocess.targets.examples:always_ok"))
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", policies=added)  # the run's target fails every message
    assert (s["due"], s["delivered"], s["rescheduled"]) == (2, 1, 1)
    rows = ledger(spark, tmp_path)
    assert {m: (r["state"], r["deliveries"], r["policy"]) for m, r in rows.items()} == {
        "m-moved": ("DELIVERED", 2, "orders.created"), "m-stays": ("WAITING_RETRY", 2, "orders.#")}


def test_a_key_the_policy_file_has_made_ordered_since_its_messages_failed_is_re_driven_head_first(spark, tmp_path):
    """Two messages of one key wait under an unordered policy; the file then gives their address an ordered one. The
    next run re-drives the key's earlier message and holds the later one back until it is delivered. Before, both
    were re-driven as the policy they were kept under said; and with only the due messages under the new policy, the
    key had no head among its waiting messages and neither was ever re-driven again."""
    text = "policies:\n  - match: '#'\n    profile: stepped\n    settings: {delays: [1m], max_deliveries: 5}\n"
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("k-first", "2026-11-21T10:00:00Z", address="fifo.q", ordering_key="k"),
        rec("k-second", "2026-11-21T10:00:30Z", address="fifo.q", ordering_key="k")])
    ok = "python:reprocess.targets.examples:always_ok"
    assert cycle(spark, tmp_path, "2026-11-21T10:00:45Z", target=ok, policies=parse_policies(text))["due"] == 0
    ordered = parse_policies(text + "  - match: 'fifo.#'\n    profile: stepped\n"
                                    "    settings: {delays: [1m], max_deliveries: 5}\n    ordered: true\n")
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z", target=ok, policies=ordered)
    assert (s["due"], s["delivered"]) == (1, 1)
    rows = ledger(spark, tmp_path)
    assert {m: (r["state"], r["policy"]) for m, r in rows.items()} == {
        "k-first": ("DELIVERED", "fifo.#"), "k-second": ("WAITING_RETRY", "#")}
    s = cycle(spark, tmp_path, "2026-11-21T10:10:00Z", target=ok, policies=ordered)
    assert (s["due"], s["delivered"]) == (1, 1)
    assert ledger(spark, tmp_path)["k-second"]["policy"] == "fifo.#"


@pytest.mark.parametrize("change", ["target dropped", "policy renamed"])
def test_a_resumed_run_redrives_through_the_policy_targets_it_prepared_with_when_the_policy_file_changed(
        spark, tmp_path, monkeypatch, change):
    """A run stopped after its re-drive resumes with the targets it prepared with: prepared.json records each
    policy's own target, and the inflight deliveries the target of each message. A policy file changed in between
    does not send the run's messages, some already delivered by its first attempt, to another target: neither a
    policy's own target dropped, nor a policy renamed with the same target (the resumed run merges its landing files
    again with the file as it is, so a message new in this run is kept under the new name). Without either record,
    the resumed run sent the policy's message to the run's target, and the outbox never got it."""
    import reprocess.cycle.run as cycle_run

    class Stopped(Exception):
        pass

    def stop_after_redrive(name: str) -> None:
        if name == "after_redrive":
            raise Stopped(name)

    own = OWN_OUTBOX
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-own", "2026-11-21T10:00:00Z"),
                                                 rec("m-run", "2026-11-21T10:00:00Z", address="orders.paid")])
    ok = "python:reprocess.targets.examples:always_ok"
    monkeypatch.setattr(cycle_run, "crash_point", stop_after_redrive)
    with pytest.raises(Stopped):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=ok, policies=parse_policies(own))
    prepared = json.loads(next((tmp_path / "wh").rglob("prepared.json")).read_text())
    assert prepared["policy_targets"] == {"orders.created": "outbox"}
    monkeypatch.undo()
    changed = parse_policies(own.replace("    target: outbox\n", "") if change == "target dropped"
                             else own.replace('"orders.created"', '"*.created"'))
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=ok, policies=changed)
    assert (s["run_id"], s["due"], s["delivered"]) == ("run-20261121T103000Z", 2, 2)
    out = read_dataset(spark, str(tmp_path / "wh"), "outbox").collect()
    assert [r.message_id for r in out] == ["m-own"]
    assert {m: r["state"] for m, r in ledger(spark, tmp_path).items()} == {"m-own": "DELIVERED", "m-run": "DELIVERED"}


def test_a_resumed_run_whose_due_set_the_changed_policy_file_changes_says_why_and_how_out(spark, tmp_path,
                                                                                         monkeypatch):
    """A run prepared with a delay of 1m (its new failure due at once) resumes with a file that says 1h: its due set
    is not the one persisted, and it must not send a different one. The error names what changed and the two ways
    out; the file put back, the run commits, and abandoned instead, the next cycle does the work again."""
    import reprocess.cycle.run as cycle_run
    from reprocess.errors import ConservationError
    from reprocess.storage.commit import Warehouse, abandon_prepared

    class Stopped(Exception):
        pass

    def stop_after_prepare(name: str) -> None:
        if name == "after_prepare":
            raise Stopped(name)

    text = "policies: [{match: '#', profile: stepped, settings: {delays: [1m], max_deliveries: 3}}]"
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z")])
    ok = "python:reprocess.targets.examples:always_ok"
    monkeypatch.setattr(cycle_run, "crash_point", stop_after_prepare)
    with pytest.raises(Stopped):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=ok, policies=parse_policies(text))
    monkeypatch.undo()
    longer = parse_policies(text.replace("[1m]", "[1h]"))
    with pytest.raises(ConservationError, match=r"0 due messages, but 1 were persisted: what decides the due set "
                                                r"changed since the run was prepared \(the policy file.*prepared "
                                                r"abandon run-20261121T103000Z"):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=ok, policies=longer)
    for way_out in ("put back", "abandoned"):
        if way_out == "abandoned":
            land(tmp_path / "again" / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z")])
            monkeypatch.setattr(cycle_run, "crash_point", stop_after_prepare)
            with pytest.raises(Stopped):
                cycle(spark, tmp_path / "again", "2026-11-21T10:30:00Z", target=ok, policies=parse_policies(text))
            monkeypatch.undo()
            assert abandon_prepared(Warehouse(tmp_path / "again" / "wh"), "run-20261121T103000Z") is not None
            s = cycle(spark, tmp_path / "again", "2026-11-21T10:30:00Z", target=ok, policies=longer)
            assert (s["due"], s["delivered"]) == (0, 0)
        else:
            s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=ok, policies=parse_policies(text))
            assert (s["due"], s["delivered"]) == (1, 1)


@pytest.mark.parametrize(("point", "outbox"), [("after_redrive", "outbox"),
                                               ("after_stage", "${REPROCESS_TEST_OUTBOX}")])
def test_a_run_stopped_after_its_redrive_resumes_from_its_outcomes_and_sends_nothing_again(spark, tmp_path,
                                                                                          monkeypatch, point, outbox):
    """Once every target's outcomes are written, prepared.json records them: a run stopped after that (a crash while
    staging, a failed conservation or GX check, the Airflow task's retry) reads them on resume and calls its targets
    no more. Only the outbox's messages are written again: its files were in the stopped attempt's stage. Before, every
    resume re-drove the whole delivery list, so a check failing after the re-drive sent it again on each retry and
    each later call. The outbox is known by what it is, not by its spelling: a ${VAR} naming it was taken for a
    target whose outcomes stood, and its messages were in no outbox."""
    import uuid

    import reprocess.cycle.run as cycle_run

    class Stopped(Exception):
        pass

    def stop(name: str) -> None:
        if name == point:
            raise Stopped(name)

    calls = tmp_path / "calls"
    module = tmp_path / f"counted_{uuid.uuid4().hex}.py"  # a module of its own: the session's workers import it once
    module.write_text(f"def call(message):\n    with open({str(calls)!r}, 'a') as f:\n"
                      f"        f.write(message['message_id'] + '\\n')\n", encoding="utf-8")
    spark.sparkContext.addPyFile(str(module))
    monkeypatch.syspath_prepend(str(tmp_path))
    target = f"python:{module.stem}:call"
    monkeypatch.setenv("REPROCESS_TEST_OUTBOX", "outbox")
    policies = parse_policies(OWN_OUTBOX.replace("target: outbox", f"target: {outbox}"))
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-own", "2026-11-21T10:00:00Z"),
                                                 rec("m-run", "2026-11-21T10:00:00Z", address="orders.paid"),
                                                 rec("m-run2", "2026-11-21T10:00:00Z", address="orders.paid")])
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop)
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    assert sorted(calls.read_text().split()) == ["m-run", "m-run2"]
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    assert sorted(calls.read_text().split()) == ["m-run", "m-run2"]  # each called once
    assert (s["run_id"], s["due"], s["delivered"]) == ("run-20261121T103000Z", 3, 3)
    out = read_dataset(spark, str(tmp_path / "wh"), "outbox").collect()
    assert [r.message_id for r in out] == ["m-own"]
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items()} == {
        "m-own": ("DELIVERED", 2), "m-run": ("DELIVERED", 2), "m-run2": ("DELIVERED", 2)}


def test_a_prepared_policy_target_with_a_password_is_taken_from_the_policy_file_only_while_it_still_matches():
    from reprocess.cycle.run import _prepared_policy_targets
    from reprocess.errors import ConfigError

    def policies(target: str | None) -> object:
        line = f"    target: {target}\n" if target else ""
        return parse_policies(f'policies:\n  - match: "a.#"\n    profile: stepped\n'
                              f'    settings: {{delays: [1m]}}\n{line}')

    secret = "amqp://u:s3cret@broker:5672/"
    prep = {"run_id": "run-x", "policy_targets": {"a.#": "amqp://u:***@broker:5672/"}}
    assert _prepared_policy_targets(prep, policies(secret)) == {"a.#": secret}
    with pytest.raises(ConfigError, match=r"resumed with its target amqp://u:\*\*\*@broker:5672/ for policy 'a.#'"):
        _prepared_policy_targets(prep, policies(None))
    assert _prepared_policy_targets({"run_id": "run-x", "policy_targets": {"a.#": "outbox"}}, policies(None)) == {
        "a.#": "outbox"}
    assert _prepared_policy_targets({"run_id": "run-x"}, policies(secret)) is None  # recorded before: the file's
    # the policy renamed, or its target now the run's: the password is taken from where the target is written now
    renamed = parse_policies(f'policies:\n  - match: "b.#"\n    profile: stepped\n    settings: {{delays: [1m]}}\n'
                             f'    target: {secret}\n')
    assert _prepared_policy_targets(prep, renamed) == {"a.#": secret}
    assert _prepared_policy_targets(prep, policies(None), run_target=secret) == {"a.#": secret}
    rotated = "amqp://u:n3w@broker:5672/"  # the same target, its password changed in between
    assert _prepared_policy_targets(prep, policies(None), run_target=rotated) == {"a.#": rotated}
    # removed, and none of the run's deliveries was recorded for it (they all went to the run's target): the run
    # needs no such target and resumes without it; one recorded for it, or a prepare that recorded none, still stops
    asked = []

    def inflight(*targets: str) -> object:
        return lambda: asked.append(1) or (set(targets) if targets else None)

    assert _prepared_policy_targets(prep, policies(None), "outbox", inflight("outbox")) == {}
    for recorded in (inflight("outbox", "amqp://u:***@broker:5672/"), inflight()):
        with pytest.raises(ConfigError, match=r"resumed with its target amqp://u:\*\*\*@broker:5672/"):
            _prepared_policy_targets(prep, policies(None), "outbox", recorded)
    assert _prepared_policy_targets(prep, policies(secret), "outbox", inflight("outbox")) == {"a.#": secret}
    assert len(asked) == 3, "asked only when a stored password is written nowhere"
    # its share of the re-drive done before a stop (outcomes_done): not called again, so not needed
    shown = "amqp://u:***@broker:5672/"
    done = {**prep, "outcomes_done": {"parts": [{"path": "outcomes-a/target=0", "target": shown}]}}
    assert _prepared_policy_targets(done, policies(None), "outbox", inflight("outbox", shown)) == {}
    # the way out named, on a local warehouse as on object storage
    with pytest.raises(ConfigError, match=r"prepared abandon --warehouse /data/wh run-x\) and run again"):
        _prepared_policy_targets(prep, policies(None), "outbox", inflight(shown), "/data/wh")
    with pytest.raises(ConfigError, match=r"prepared abandon --warehouse s3a://b/wh run-x with the run's --master "
                       r"or --remote\) and run again"):
        _prepared_policy_targets(prep, policies(None), "outbox", inflight(shown), "s3a://b/wh")


def _counting_targets(spark, tmp_path: Path, monkeypatch, names: tuple[str, ...]) -> tuple[Path, Path]:
    """A module of python targets ``names``, each appending "<name> <message_id>" to the calls file it returns with
    the module (a module of its own: the session's workers import it once)."""
    import uuid

    calls = tmp_path / "calls"
    module = tmp_path / f"counted_{uuid.uuid4().hex}.py"
    module.write_text("".join(f"def {name}(message):\n    with open({str(calls)!r}, 'a') as f:\n"
                              f"        f.write('{name} ' + message['message_id'] + '\\n')\n\n"
                              for name in names), encoding="utf-8")
    spark.sparkContext.addPyFile(str(module))
    monkeypatch.syspath_prepend(str(tmp_path))
    return calls, module


def test_a_run_stopped_between_its_targets_resumes_without_sending_the_done_targets_messages_again(
        spark, tmp_path, monkeypatch, capsys):
    """A run whose due messages go through several targets (policies' own, then the run's) records each target's
    outcomes in prepared.json as its share of the re-drive ends. Stopped before the next target's ends, the resumed
    run reads the done targets' outcomes and sends only the rest, and so again after a second stop in the resumed
    attempt. Before, every resume before the whole re-drive was recorded sent every target's messages again."""

    import reprocess.cycle.run as cycle_run

    class Stopped(Exception):
        pass

    calls, module = _counting_targets(spark, tmp_path, monkeypatch, ("a", "b", "c"))
    policies = parse_policies("policies:\n" + "".join(
        f'  - match: "{m}"\n    profile: stepped\n    settings: {{delays: [1m], max_deliveries: 3}}\n{t}'
        for m, t in (("orders.created", f"    target: python:{module.stem}:a\n"),
                     ("orders.paid", f"    target: python:{module.stem}:b\n"), ("orders.#", ""))))
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-a", "2026-11-21T10:00:00Z"),
                                                 rec("m-b", "2026-11-21T10:00:00Z", address="orders.paid"),
                                                 rec("m-c1", "2026-11-21T10:00:00Z", address="orders.sent"),
                                                 rec("m-c2", "2026-11-21T10:00:00Z", address="orders.sent")])

    def sent() -> list[str]:
        return sorted(calls.read_text().splitlines())

    def stop_at_group(n: int):
        seen = []

        def stop(name: str) -> None:
            if name == "after_redrive_group":
                seen.append(name)
                if len(seen) == n:
                    raise Stopped(name)
        return stop

    def parts() -> list[str]:
        prepared = json.loads(next((tmp_path / "wh").rglob("prepared.json")).read_text())
        return [part["target"] for part in prepared["outcomes_done"]["parts"]]

    target = f"python:{module.stem}:c"
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop_at_group(1))  # a's share done, b's and c's not begun
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    assert sent() == ["a m-a"]
    assert parts() == [f"python:{module.stem}:a"]
    from reprocess import cli
    from reprocess.errors import ConfigError

    wh = str(tmp_path / "wh")
    assert cli.main(["prepared", "list", "--warehouse", wh, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["prepared"]
    assert [(r["redrive"], r["targets_done"]) for r in listed] == [("1 target(s) done", [f"python:{module.stem}:a"])]
    # abandoning it would send a's confirmed message again: refused without --force
    assert cli.main(["prepared", "abandon", "--warehouse", wh, "run-20261121T103000Z"]) == ConfigError.exit_code
    assert "re-drive is done through" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a run id is never a path
        cli.main(["prepared", "abandon", "--warehouse", wh, "run-20261121T103000Z/.."])
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop_at_group(1))  # the resumed attempt's b done (a, done, not called)
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    assert sent() == ["a m-a", "b m-b"]
    assert parts() == [f"python:{module.stem}:a", f"python:{module.stem}:b"]
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    assert sent() == ["a m-a", "b m-b", "c m-c1", "c m-c2"]  # each message sent once
    assert (s["run_id"], s["due"], s["delivered"]) == ("run-20261121T103000Z", 4, 4)
    assert all(s["conservation"].values())
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items()} == {
        m: ("DELIVERED", 2) for m in ("m-a", "m-b", "m-c1", "m-c2")}


def test_a_resumed_run_needs_no_variable_of_a_target_whose_share_is_done(spark, tmp_path, monkeypatch):
    """A policy's own target written ``${VAR}``: its share of the re-drive done, the run stops in the next
    target's, and the variable is gone by the resume. The done target is called no more (ADR 0003), so the resume
    must not need it: it failed with the variable unset (exit 3) on every attempt."""

    import reprocess.cycle.run as cycle_run

    class Stopped(Exception):
        pass

    calls, module = _counting_targets(spark, tmp_path, monkeypatch, ("a", "c"))
    monkeypatch.setenv("REPROCESS_TEST_A_TARGET", f"python:{module.stem}:a")
    policies = parse_policies("policies:\n"
                              '  - match: "orders.created"\n    profile: stepped\n    settings: {delays: [1m]}\n'
                              "    target: ${REPROCESS_TEST_A_TARGET}\n"
                              '  - match: "orders.#"\n    profile: stepped\n    settings: {delays: [1m]}\n')
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m-a", "2026-11-21T10:00:00Z"),
                                                 rec("m-c", "2026-11-21T10:00:00Z", address="orders.sent")])

    def stop(name: str) -> None:
        if name == "after_redrive_group":
            raise Stopped(name)

    target = f"python:{module.stem}:c"
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop)  # a's share done, c's not begun
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    monkeypatch.delenv("REPROCESS_TEST_A_TARGET")
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target=target, policies=policies)
    assert (s["run_id"], s["due"], s["delivered"]) == ("run-20261121T103000Z", 2, 2)
    assert sorted(calls.read_text().splitlines()) == ["a m-a", "c m-c"]


def test_a_prepared_run_whose_target_is_gone_is_abandoned_and_the_next_cycle_does_its_work_again(
        spark, tmp_path, monkeypatch, capsys):
    """A run prepared with a target whose password is gone cannot be resumed, and blocks every writer. ``reprocess
    prepared list`` shows it; ``reprocess prepared abandon`` removes it under the lock, and the next cycle at its
    as-of ingests its landing files and re-drives its due messages, with the same delivery numbers, through the
    target configured now. A run whose re-drive finished resumes without its target: abandoning it is refused
    without --force. Before, the only way out was resuming with the old target."""
    import reprocess.cycle.run as cycle_run
    from reprocess import cli
    from reprocess.errors import ConfigError
    from reprocess.storage.commit import Warehouse

    class Stopped(Exception):
        pass

    def stop_at(point: str):
        def stop(name: str) -> None:
            if name == point:
                raise Stopped(name)
        return stop

    def prepared_list() -> list[dict]:
        assert cli.main(["prepared", "list", "--warehouse", wh, "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)["prepared"]

    wh, run_id = str(tmp_path / "wh"), "run-20261121T103000Z"
    land(tmp_path / "landing", "10", "a.jsonl", [rec(f"m-{i}", "2026-11-21T10:00:00Z") for i in range(3)])
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop_at("after_prepare"))
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="amqp://u:s3cret@127.0.0.1:1/")
    with pytest.raises(ConfigError, match=rf"prepared abandon --warehouse {wh} {run_id}"):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="outbox")
    assert [(r["run_id"], r["due"], r["target"], r["redrive"]) for r in prepared_list()] == [
        (run_id, 3, "amqp://u:***@127.0.0.1:1/", "not finished")]
    assert cli.main(["prepared", "abandon", "--warehouse", wh, "run-20261121T113000Z"]) == 10  # not prepared
    with monkeypatch.context() as m:  # stopped after its record was removed, before its folder was
        m.setattr(Warehouse, "clear_run", lambda self, run_id: None)
        assert cli.main(["prepared", "abandon", "--warehouse", wh, run_id]) == 0
    assert json.loads(capsys.readouterr().out)["abandoned"]["run_id"] == run_id
    assert prepared_list() == []
    assert (tmp_path / "wh" / "_runs" / run_id).is_dir()
    assert not (tmp_path / "wh" / "_runs" / run_id / "prepared.json").exists()
    assert cli.main(["prepared", "abandon", "--warehouse", wh, run_id]) == 0  # asked again: the folder left goes
    assert json.loads(capsys.readouterr().out) == {"abandoned": None, "removed_folder_of": run_id}
    assert not (tmp_path / "wh" / "_runs" / run_id).exists()
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="outbox")
    assert (s["run_id"], s["due"], s["delivered"]) == (run_id, 3, 3)
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items()} == {
        f"m-{i}": ("DELIVERED", 2) for i in range(3)}
    assert sorted(r.message_id for r in read_dataset(spark, wh, "outbox").collect()) == ["m-0", "m-1", "m-2"]

    land(tmp_path / "landing", "11", "b.jsonl", [rec("m-3", "2026-11-21T11:00:00Z")])
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop_at("after_redrive"))
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T11:30:00Z", target="outbox")
    assert [r["redrive"] for r in prepared_list()] == ["finished"]
    assert cli.main(["prepared", "abandon", "--warehouse", wh, "run-20261121T113000Z"]) == 3
    assert "re-drive finished" in capsys.readouterr().err
    assert cli.main(["prepared", "abandon", "--warehouse", wh, "run-20261121T113000Z", "--force"]) == 0
    assert json.loads(capsys.readouterr().out)["abandoned"]["redrive"] == "finished"
    assert prepared_list() == []
    assert not (tmp_path / "wh" / "_runs" / "run-20261121T113000Z").exists()
    assert cli.main(["prepared", "abandon", "--warehouse", str(tmp_path / "nowhere"), run_id]) == 3


def test_a_target_groups_outcomes_are_taken_as_done_unless_the_outbox_or_recorded_alike_as_one_not_done():
    """The outbox's files are in the stopped attempt's stage, so its share is written again; two targets differing
    only in a password record their rows alike, so neither one's rows are its own: before, the second's done took
    the first's rows too, which then got no outcome and the resume failed its conservation check at every call."""
    from reprocess.cycle.run import _recordable
    from reprocess.targets import parse_target

    def group(spec: str) -> tuple:
        return (spec, parse_target(spec.replace("${PW_A}", "a").replace("${PW_B}", "b")), None)

    first, second = "amqp://u:${PW_A}@127.0.0.1:1/", "amqp://u:${PW_B}@127.0.0.1:1/"
    ok = "python:reprocess.targets.examples:always_ok"
    groups = [group("outbox"), group(first), group(second), group(ok)]
    assert [_recordable(groups, i) for i in range(4)] == [None, None, None, ok]
    assert [_recordable(groups[1:], i) for i in range(3)] == [None, None, ok]


def test_a_resumed_runs_rows_are_each_taken_by_one_target_when_two_differ_only_in_a_password(spark, monkeypatch):
    """Two policies' targets that differ only in their password record alike (redacted) at the prepare; on resume
    each took every row recorded so, and each such message was published through both. Now each recorded spelling
    is one group, the first target written so; the run's target takes the rest."""
    from reprocess.cycle.run import RECORDED_TARGET, _target_groups

    monkeypatch.setenv("PW_A", "a")
    monkeypatch.setenv("PW_B", "b")
    first, second = "amqp://u:${PW_A}@127.0.0.1:1/", "amqp://u:${PW_B}@127.0.0.1:1/"
    policies = parse_policies("policies:\n" + "".join(
        f'  - match: "{m}"\n    profile: stepped\n    settings: {{delays: [1m]}}\n    target: "{t}"\n'
        for m, t in (("a.#", first), ("b.#", second))))
    opts = CycleOptions(landing="l", warehouse="w", policies=policies, as_of_ms=0, target="outbox")
    rows = spark.createDataFrame([("m1", "amqp://u:***@127.0.0.1:1/"), ("m2", "outbox"), ("m3", "gone://x")],
                                 ["message_id", RECORDED_TARGET])
    taken: dict[str, list[str]] = {}
    for spec, _target, where in _target_groups(opts, recorded=True):
        for r in (rows if where is None else rows.filter(where)).collect():
            taken.setdefault(r.message_id, []).append(spec)
    assert taken == {"m1": [first], "m2": ["outbox"], "m3": ["outbox"]}


def test_a_prepared_run_target_with_a_password_is_taken_from_the_target_passed_or_a_policys():
    from reprocess.cycle.run import _prepared_target
    from reprocess.errors import ConfigError

    secret = "amqp://u:s3cret@broker:5672/"
    own = parse_policies(f'policies:\n  - match: "a.#"\n    profile: stepped\n    settings: {{delays: [1m]}}\n'
                         f'    target: {secret}\n')
    bare = parse_policies('policies:\n  - match: "a.#"\n    profile: stepped\n    settings: {delays: [1m]}\n')
    prep = {"run_id": "run-x", "target": "amqp://u:***@broker:5672/"}

    def opts(target: str, policies: object) -> CycleOptions:
        return CycleOptions(landing="l", warehouse="w", policies=policies, as_of_ms=0, target=target)

    assert _prepared_target(prep, opts(secret, bare)) == secret
    assert _prepared_target(prep, opts("outbox", own)) == secret  # the run's target moved into a policy
    with pytest.raises(ConfigError, match=r"resumed with its target amqp://u:\*\*\*@broker:5672/ .*same --target"):
        _prepared_target(prep, opts("outbox", bare))
    assert _prepared_target({"run_id": "run-x", "target": "outbox"}, opts(secret, bare)) == "outbox"


def test_a_python_target_whose_downstream_is_down_uses_no_delivery_and_the_retry_redrives_what_was_left(
        spark, tmp_path):
    """A ``python:`` target's function raises ``reprocess.targets.TargetUnavailable`` when the system behind it is
    down: as with a broker that is down, the message uses no delivery and stays due, the rest of its partition is
    not called, and the run commits, then fails with ``TargetUnavailableError``; its retry (the same as-of)
    re-drives what was left. Any other exception is the message's failure (test_brokers, the other tests)."""
    from reprocess.errors import TargetUnavailableError

    land(tmp_path / "landing", "10", "a.jsonl", [rec(f"u-{i}", "2026-11-21T10:00:00Z") for i in range(3)])
    with pytest.raises(TargetUnavailableError, match="3 due messages consumed no delivery"):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="python:reprocess.targets.examples:unavailable")
    assert {(r["state"], r["deliveries"]) for r in ledger(spark, tmp_path).values()} == {("WAITING_RETRY", 1)}
    from reprocess.storage.commit import Warehouse

    balance = Warehouse(tmp_path / "wh").latest().run("run-20261121T103000Z")["summary"]["balance"]
    # the messages left are counted where the partitions left them (the down row's, then NOT_TRIED's), and agree
    assert (balance["left_due"], balance["not_redriven"]) == (3, 3)
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", target="python:reprocess.targets.examples:always_ok")
    assert (s["run_id"], s["due"], s["delivered"]) == ("run-20261121T103000Z-2", 3, 3)
    assert {(r["state"], r["deliveries"]) for r in ledger(spark, tmp_path).values()} == {("DELIVERED", 2)}


def test_a_python_target_down_for_one_address_holds_back_only_that_addresss_messages(spark, tmp_path):
    """``TargetUnavailable(..., address_only=True)``: only what serves that message's address is down. Its messages
    stay due with no delivery used and are called once per partition; the other addresses' are delivered; the run
    commits, then fails with ``TargetUnavailableError`` naming the address. Without ``address_only`` the first such
    message stopped the partition (the test above)."""
    from reprocess.errors import TargetUnavailableError

    land(tmp_path / "landing", "10", "a.jsonl", [rec("0-down", "2026-11-21T10:00:00Z", address="down.x"),
                                                 rec("1-ok", "2026-11-21T10:00:00Z"),
                                                 rec("2-down", "2026-11-21T10:00:00Z", address="down.x"),
                                                 rec("3-ok", "2026-11-21T10:00:00Z")])
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [10m]}}]")
    with pytest.raises(TargetUnavailableError, match=r"2 due messages consumed no delivery") as err:
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z", policies=policies,
              target="python:reprocess.targets.examples:down_for_down_addresses")
    assert "1 destination(s) down: down.x: " in str(err.value)
    assert "the endpoint for down.x is down" in str(err.value)
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items()} == {
        "0-down": ("WAITING_RETRY", 1), "2-down": ("WAITING_RETRY", 1), "1-ok": ("DELIVERED", 2),
        "3-ok": ("DELIVERED", 2)}


def test_a_resumed_runs_target_outage_does_not_stop_the_run_that_resumed_it(spark, tmp_path, monkeypatch):
    """A run stopped after its prepare is resumed by the next call, at a later as-of. Its target down for some of
    its messages, the resumed run commits and raised TargetUnavailableError, which ended the call there: the later
    run's own landing was not read until a call found the target up. Now the later run goes on, re-drives what is
    due by its as-of (the held-back messages among them) and fails as any run whose target is down does."""
    import reprocess.cycle.run as cycle_run
    from reprocess.errors import TargetUnavailableError

    class Stopped(Exception):
        pass

    def stop(name: str) -> None:
        if name == "after_prepare":
            raise Stopped(name)

    target = "python:reprocess.targets.examples:down_for_down_addresses"
    policies = parse_policies("policies: [{match: '#', profile: stepped, settings: {delays: [10m]}}]")
    land(tmp_path / "landing", "10", "a.jsonl", [rec("0-down", "2026-11-21T10:00:00Z", address="down.x"),
                                                 rec("1-ok", "2026-11-21T10:00:00Z")])
    with monkeypatch.context() as m:
        m.setattr(cycle_run, "crash_point", stop)
        with pytest.raises(Stopped):
            cycle(spark, tmp_path, "2026-11-21T10:30:00Z", policies=policies, target=target)
    land(tmp_path / "landing", "11", "b.jsonl", [rec("2-new", "2026-11-21T11:00:00Z")])
    with pytest.raises(TargetUnavailableError, match="failed during run run-20261121T113000Z"):
        cycle(spark, tmp_path, "2026-11-21T11:30:00Z", policies=policies, target=target)
    from reprocess.storage.commit import Warehouse

    snap = Warehouse(tmp_path / "wh").latest()
    assert [r["run_id"] for r in snap.runs] == ["run-20261121T103000Z", "run-20261121T113000Z"]
    assert {m: (r["state"], r["deliveries"]) for m, r in ledger(spark, tmp_path).items()} == {
        "0-down": ("WAITING_RETRY", 1), "1-ok": ("DELIVERED", 2), "2-new": ("DELIVERED", 2)}


def test_a_target_unavailable_subclass_that_skips_its_base_init_is_still_the_whole_target_down():
    """A user's subclass of ``TargetUnavailable`` written before ``address_only`` existed may not call its
    ``__init__``; the attribute the target reads must still be there (an AttributeError would fail the task)."""
    from reprocess.targets.base import TargetUnavailable

    class Down(TargetUnavailable):
        def __init__(self, host: str) -> None:
            Exception.__init__(self, f"{host} is down")

    assert Down("h").address_only is False
    assert TargetUnavailable("x", address_only=True).address_only is True


def test_a_target_whose_variables_break_its_uri_is_named_as_written_without_their_values(spark, monkeypatch):
    """A policy's target takes secrets from the environment (``${VAR}``); a value that breaks the URI once filled in
    (an unencoded ``/`` in a password) is a configuration error that names the target as written, never the value.
    The targets also show their spec as written in their own errors (TARGET_DOWN rows, the summary)."""
    from reprocess.cycle.run import _target_groups
    from reprocess.errors import ConfigError

    policies = parse_policies("""
policies:
  - match: "orders.#"
    profile: stepped
    settings: {delays: [1m], max_deliveries: 3}
    target: "amqp://guest:${TEST_MQ_SECRET}@127.0.0.1:5672/%2F"
""")
    opts = CycleOptions(landing="unused", warehouse="unused", policies=policies, as_of_ms=0, target="outbox")
    monkeypatch.setenv("TEST_MQ_SECRET", "fine")
    ((spec, target, _rows), (run_spec, _, _)) = _target_groups(opts)
    assert spec == target.spec == "amqp://guest:${TEST_MQ_SECRET}@127.0.0.1:5672/%2F"
    assert target.opts.password == "fine"
    assert run_spec == "outbox"
    monkeypatch.setenv("TEST_MQ_SECRET", "s3cr/et:9")
    with pytest.raises(ConfigError) as err:
        _target_groups(opts)
    assert "s3cr" not in str(err.value)
    assert "amqp://guest:***@127.0.0.1:5672/%2F does not parse once its ${...} variables are filled in" in str(
        err.value)


def test_unknown_fields_are_kept(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z", shard=3, meta={"a": [1]})])
    cycle(spark, tmp_path, "2026-11-21T10:01:00Z")
    assert json.loads(ledger(spark, tmp_path)["m1"]["extra"]) == {"shard": 3, "meta": {"a": [1]}}


def test_gzip_and_parquet_landing_files_and_a_truncated_gzip(spark, tmp_path):
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "landing" / "dt=2026-11-21" / "hour=10"
    folder.mkdir(parents=True)
    with gzip.open(folder / "a.jsonl.gz", "wt") as fh:
        fh.write(json.dumps(rec("gz", "2026-11-21T10:00:00Z")) + "\n")
    pq.write_table(pa.Table.from_pylist([rec("pq", "2026-11-21T10:00:00Z")]), folder / "b.parquet")
    data = gzip.compress(("\n".join(json.dumps(rec(f"t{i}", "2026-11-21T10:00:00Z")) for i in range(50))).encode())
    (folder / "c.jsonl.gz").write_bytes(data[: len(data) // 2])
    s = cycle(spark, tmp_path, "2026-11-21T10:01:00Z")
    assert set(ledger(spark, tmp_path)) == {"gz", "pq"}
    assert [c["file"].endswith("c.jsonl.gz") for c in s["corrupt_files"]] == [True]
    q = read_dataset(spark, str(tmp_path / "wh"), "quarantine").filter(F.col("reason_code") == "CORRUPT_FILE")
    assert q.count() == 1


def test_code_generation_is_sized_to_the_input_and_the_settings_are_restored(spark):
    from reprocess.sparkutil import (
        FACTORY_MODE_KEY,
        HUGE_METHOD_LIMIT_KEY,
        INTERPRETED_BELOW_BYTES,
        INTERPRETED_BELOW_SCAN_ROWS,
        JIT_SIZED_CODEGEN_FROM_BYTES,
        WHOLE_STAGE_KEY,
        fit_codegen,
        sized_codegen,
    )

    def settings() -> tuple:
        return tuple(spark.conf.get(k, None) for k in (HUGE_METHOD_LIMIT_KEY, WHOLE_STAGE_KEY, FACTORY_MODE_KEY))

    spark.conf.set(WHOLE_STAGE_KEY, "true")  # as a deployment's spark-defaults.conf might
    try:
        before = settings()
        assert before[0] != "8000"
        with pytest.raises(RuntimeError, match="inside sized_codegen"):
            fit_codegen(spark, 1)  # nothing would put the settings back
        with sized_codegen(spark):  # as run_cycle wraps a run
            assert fit_codegen(spark, INTERPRETED_BELOW_BYTES - 1) == "interpreted"  # a small landing
            assert settings() == (before[0], "false", "NO_CODEGEN")
            # a scan of many rows (the ledger's ids) with the same small landing: generated
            assert fit_codegen(spark, INTERPRETED_BELOW_BYTES - 1, scan_rows=INTERPRETED_BELOW_SCAN_ROWS) == "generated"
            assert settings() == before
            assert fit_codegen(spark, 0, scan_rows=INTERPRETED_BELOW_SCAN_ROWS - 1) == "interpreted"
            # the same run, once it knows the ledger files it rewrites: generated again, as the session had it
            assert fit_codegen(spark, JIT_SIZED_CODEGEN_FROM_BYTES - 1) == "generated"
            assert settings() == before
            assert fit_codegen(spark, JIT_SIZED_CODEGEN_FROM_BYTES) == "generated-jit-sized"
            assert settings() == ("8000", "true", before[2])
            fit_codegen(spark, 0)
        assert settings() == before
    finally:
        spark.conf.unset(WHOLE_STAGE_KEY)


def test_parquet_options_check_page_and_row_group_sizes_from_the_first_row(spark, tmp_path):
    """Parquet checks a page's and a row group's size first after 100 rows: rows of large payloads filled pages and
    row groups far past their sizes before that, and a 2 GB driver ran out of heap writing 1 MB payloads. Written
    through ``parquet_options``, rows of 20 KB with 256 KB row groups split into row groups near that size; written
    as Parquet does by default, the first 100 rows are one row group of 2 MB."""
    import os

    import pyarrow.parquet as pq

    from reprocess.sparkutil import parquet_options

    # incompressible payloads: Parquet weighs a row group by its compressed pages
    rows = spark.createDataFrame([(i, os.urandom(10_000).hex()) for i in range(100)], "id long, payload string") \
        .coalesce(1)
    groups = {}
    for name, options in (("default", lambda w: w), ("checked", lambda w: parquet_options(w, ["payload"]))):
        out = tmp_path / name
        options(rows.write.option("parquet.block.size", str(256 << 10))).parquet(str(out))
        (part,) = out.glob("part-*.parquet")
        meta = pq.ParquetFile(part).metadata
        assert meta.num_rows == 100
        groups[name] = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert groups["default"] == [100]
    assert len(groups["checked"]) >= 5, groups
    assert max(groups["checked"]) <= 20, groups


def test_shuffles_are_sized_to_the_input_and_the_settings_are_restored(spark):
    """A small input's shuffles run without adaptive execution in one partition; a larger one keeps the session's
    adaptive execution and its partition count, raised by the input's size; the caller's ``restoring_conf`` puts the
    session's settings back."""
    from reprocess.sparkutil import (
        ADAPTIVE_KEY,
        INPUT_BYTES_PER_SHUFFLE_PARTITION,
        LARGE_RECORD_BYTES,
        LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION,
        SHUFFLE_KEYS,
        SHUFFLE_PARTITIONS_KEY,
        fit_shuffles,
        restoring_conf,
    )

    def settings() -> tuple:
        return spark.conf.get(ADAPTIVE_KEY), spark.conf.get(SHUFFLE_PARTITIONS_KEY)

    before = settings()
    assert before == ("true", "2")  # the tests' session (tests/conftest.py)
    with restoring_conf(spark, *SHUFFLE_KEYS) as base:
        assert fit_shuffles(spark, 10, base, small=True) == 1
        assert settings() == ("false", "1")
        assert fit_shuffles(spark, 10, base) == 2
        assert settings() == before
        assert fit_shuffles(spark, 5 * INPUT_BYTES_PER_SHUFFLE_PARTITION, base) == 5
        assert settings() == ("true", "5")
        # large records: a partition per LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION
        large = INPUT_BYTES_PER_SHUFFLE_PARTITION // LARGE_RECORD_INPUT_BYTES_PER_SHUFFLE_PARTITION
        assert large > 1
        assert fit_shuffles(spark, 5 * INPUT_BYTES_PER_SHUFFLE_PARTITION, base,
                            record_bytes=LARGE_RECORD_BYTES - 1) == 5
        assert fit_shuffles(spark, 5 * INPUT_BYTES_PER_SHUFFLE_PARTITION, base,
                            record_bytes=LARGE_RECORD_BYTES) == 5 * large
        assert settings() == ("true", str(5 * large))
        fit_shuffles(spark, 10, base, small=True)
    assert settings() == before


def _compilations(spark):
    """Spark's timer of Janino compilations: its count is the number of classes generated code compiled so far."""
    return spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()


def test_generated_classes_of_a_cycle_stay_compiled_for_the_next_one(spark):
    """Spark's default cache keeps 100 generated classes and a cycle makes about 130, so each cycle compiled all of
    them again. Queries of more distinct shapes than that, built afresh as each cycle builds its own, compile
    nothing the second time."""
    from pyspark.sql import functions as F

    compilations = _compilations(spark)
    one = spark.range(1)

    def queries() -> list:
        return [one.select((F.col("id") * 7 + n).alias("x")).select((F.col("x") + 1).alias("y"))
                for n in range(1_000_003, 1_000_003 + 110)]

    assert [q.first().y for q in queries()[:2]] == [1_000_004, 1_000_005]

    def compile_all() -> int:  # whole-stage code is compiled when the plan's RDD is built, before any job runs
        before = compilations.getCount()
        for q in queries():
            q._jdf.queryExecution().executedPlan().execute()
        return compilations.getCount() - before

    compile_all()
    assert compile_all() == 0


def test_with_generated_code_a_new_as_of_compiles_nothing_again(spark, tmp_path):
    """Generated code writes a long literal into its Java source, so with the as-of as a literal each scheduled run
    (a new as-of) compiled the landing checks, the due selection and the outcomes' application again, with Janino
    and then with the JIT. With generated code they take the as-of as data and compile nothing at a new as-of; the
    same frames with the literal (as interpreted cycles keep it) do compile again, which is what this guards
    against."""
    from reprocess.cycle.run import due_at, landed
    from reprocess.landing.manifest import list_landing
    from reprocess.ledger.merge import apply_outcomes
    from reprocess.targets.base import OUTCOME_SCHEMA

    land(tmp_path / "landing", "10", "a.jsonl", [rec(f"m-{i}", "2026-11-21T10:00:00Z",
                                                     "billing.x" if i % 2 else "orders.created") for i in range(20)])
    cycle(spark, tmp_path, "2026-11-21T11:00:00Z")  # the orders messages wait again, the billing ones are dead-lettered
    # records on each side of the as-of (12:00) and of its 24 h allowance, and one the contract rejects otherwise
    land(tmp_path / "landing", "11", "b.jsonl", [
        rec("n-past", "2026-11-21T11:30:00Z"), rec("n-after", "2026-11-21T12:30:00Z"),
        rec("n-future", "2026-11-22T12:00:01Z"), rec("n-zero", "2026-11-21T11:00:00Z", delivery_count=0)])
    merged = read_dataset(spark, str(tmp_path / "wh"), "ledger").withColumns(
        {"changed": F.lit(False), "dlq_event": F.lit(False)})
    merged.select("message_id", (F.col("deliveries") + 1).alias("delivery"), (F.col("deliveries") > 1).alias("ok"),
                  F.lit("java.io.IOException").alias("error_class"), F.lit("boom").alias("error_message")) \
        .write.parquet(str(tmp_path / "outcomes"))
    outcomes = spark.read.schema(OUTCOME_SCHEMA).parquet(str(tmp_path / "outcomes"))
    compilations = _compilations(spark)
    base = parse_instant("2026-11-21T12:00:00Z")

    def due(as_of: int, codegen: str):
        return due_at(merged, as_of, codegen)

    def applied(as_of: int, codegen: str):
        return apply_outcomes(merged, outcomes, POLICIES, "run-x", as_of, codegen)

    def landing(as_of: int, codegen: str):
        opts = CycleOptions(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"), policies=POLICIES,
                            as_of_ms=as_of)
        return landed(spark, list_landing(opts.landing, as_of, spark), {}, opts, codegen)[1]

    def compiled(df) -> int:  # whole-stage code is compiled as the plan's RDDs are built
        before = compilations.getCount()
        df._jdf.queryExecution().executedPlan().execute()
        return compilations.getCount() - before

    for build in (landing, due, applied):
        compiled(build(base, "generated"))
        assert compiled(build(base + 3_600_000, "generated")) == 0, build.__name__
        compiled(build(base, "interpreted"))
        assert compiled(build(base + 3_600_000, "interpreted")) > 0, build.__name__
    # and the two ways give the same rows
    for build in (landing, due, applied):
        rows = [sorted(build(base, codegen).collect(), key=lambda r: r.message_id)
                for codegen in ("generated", "interpreted")]
        assert rows[0], build.__name__
        assert rows[0] == rows[1], build.__name__
    checked = {r.message_id: (r.problem, r.in_window) for r in landing(base, "generated").collect()}
    assert {k: v for k, v in checked.items() if k.startswith("n-")} == {
        "n-past": (None, True), "n-after": (None, False), "n-future": ("FUTURE_TIMESTAMP", False),
        "n-zero": ("INVALID_DELIVERY_COUNT", False)}


def test_a_warm_driver_compiles_nothing_for_its_next_cycles(spark, tmp_path, monkeypatch):
    """A long-lived driver (the Spark Connect server) runs the same cycle every hour at a new as-of. With generated
    code, anything a cycle writes into the Java source that changes from run to run makes Spark compile that stage
    again (Janino, then the JIT): the as-of as a literal, and PySpark's lambda variables, which get a fresh name
    each time a cycle builds its columns (hence sparkutil.sql_lambda). After one pair of cycles (a fresh warehouse,
    then one with a ledger, duplicates, re-drives, dead letters, bad records and deferred ones), the same pair at
    new as-ofs compiles nothing, Great Expectations' queries included (hence the landing suite's bound relative to the
    as-of)."""
    import reprocess.sparkutil as sparkutil
    from reprocess.validation import suites

    monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_BYTES", 0)  # generated code, as for batches above 16 MB
    monkeypatch.setattr(suites, "SMALL_ROWS", 0)  # GX on Spark, as for batches above 20,000 rows
    lines: list = [rec(f"m-{i}", f"2026-11-21T10:{i:02d}:00Z", "billing.x" if i % 3 else "orders.created",
                       headers={"h": str(i)}, delivery_count=1 + i % 2) for i in range(30)]
    lines += [rec("m-1", "2026-11-21T10:01:00Z", "billing.x", headers={"h": "1"}, delivery_count=2),  # duplicate
              rec("m-2", "2026-11-21T10:40:00Z", "billing.x"), rec("late", "2026-11-21T15:00:00Z"),
              rec("bad", "2026-11-21T10:00:00Z", delivery_count=0), "not json"]
    land(tmp_path / "landing", "10", "a.jsonl", lines)
    compilations = _compilations(spark)

    def two_cycles(shift_ms: int) -> tuple[int, list[dict]]:
        before = compilations.getCount()
        summaries = [run_cycle(spark, CycleOptions(
            landing=str(tmp_path / "landing"), warehouse=str(tmp_path / f"wh-{shift_ms}"), policies=POLICIES,
            as_of_ms=parse_instant(at) + shift_ms, target="python:reprocess.targets.examples:always_fail"))
            for at in ("2026-11-21T11:00:00Z", "2026-11-21T13:00:00Z")]
        return compilations.getCount() - before, summaries

    _, first = two_cycles(0)
    assert [s["codegen"] for s in first] == ["generated", "generated"]
    compiled, again = two_cycles(1000)
    assert compiled == 0
    # the same work both times: a real pair of cycles, not empty ones
    counts = ("records_read", "quarantined", "deferred_until_later_as_of", "duplicates", "due", "delivered")
    assert [[s[k] for k in counts] for s in again] == [[s[k] for k in counts] for s in first]
    assert first[0]["quarantined"] == 2
    assert first[0]["deferred_until_later_as_of"] == 1
    assert first[0]["duplicates"] == 1
    assert first[0]["dead_lettered"]["total"] > 0
    assert first[0]["rescheduled"] > 0
    assert first[1]["due"] > 0


def test_outcomes_recorded_before_not_tried_rows_leave_the_left_due_to_the_older_check(spark, tmp_path):
    """A run prepared by the code before NOT_TRIED rows, whose target was down, and resumed by this one from its
    recorded outcomes: its down rows alone undercount what was left, which failed conservation on every resume. Such
    outcomes (no counts_not_tried mark in prepared.json) leave not_redriven out, and the check takes left_due."""
    from reprocess.cycle.run import _outcomes
    from reprocess.targets.base import NOT_TRIED, OUTCOME_SCHEMA, TARGET_DOWN

    rows = [("m1", 2, True, None, None), ("m2", 2, False, TARGET_DOWN, "amqp://h: down"),
            ("", 3, False, NOT_TRIED, None)]
    spark.createDataFrame(rows, OUTCOME_SCHEMA).write.parquet(str(tmp_path / "new"))
    spark.createDataFrame(rows[:2], OUTCOME_SCHEMA).write.parquet(str(tmp_path / "old"))
    outcomes, down = _outcomes(spark, [str(tmp_path / "new")], "run-x")
    assert [r.message_id for r in outcomes.collect()] == ["m1"]
    assert down is not None
    assert down["not_redriven"] == 4  # m2, and the three its partition did not try
    _, old = _outcomes(spark, [str(tmp_path / "old")], "run-x", counted=False)
    assert old is not None
    assert "not_redriven" not in old


def test_landing_records_whose_file_spark_names_otherwise_stop_the_run_instead_of_vanishing(spark, tmp_path,
                                                                                         monkeypatch):
    """The records learn their file's manifest state by the URI Spark reads them from, matched to the listing. A
    record matching no listed file (a mismatch between the two spellings) was neither quarantined, ingested nor
    deferred, and its file was then done: it vanished. The run stops and commits nothing instead."""
    from reprocess.cycle import landing_batch
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z")])
    real = landing_batch.spark_file_uris
    monkeypatch.setattr(landing_batch, "spark_file_uris", lambda s, paths: [u + "-x" for u in real(s, paths)])
    with pytest.raises(RuntimeError, match="1 landing records came from files Spark names otherwise"):
        cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert Warehouse(tmp_path / "wh").latest().version == 0
    monkeypatch.setattr(landing_batch, "spark_file_uris", real)
    assert cycle(spark, tmp_path, "2026-11-21T10:05:00Z")["new_messages"] == 1


def test_ledger_files_spark_names_otherwise_stop_the_run_instead_of_doubling_their_messages(spark, tmp_path,
                                                                                            monkeypatch):
    """The run finds the ledger files holding a batch's messages by the URI Spark reads them from, matched to the
    warehouse's list. A file matching none was left out silently: its rows were not rewritten, and the merge added
    each of their messages again as new (two ledger rows for one message). The run stops and commits nothing."""
    from reprocess.cycle import run
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [rec("m", "2026-11-21T10:00:00Z")])
    assert cycle(spark, tmp_path, "2026-11-21T10:05:00Z")["new_messages"] == 1
    land(tmp_path / "landing", "10", "b.jsonl", [rec("m", "2026-11-21T10:20:00Z")])
    real = run.spark_file_uris
    monkeypatch.setattr(run, "spark_file_uris", lambda s, paths: [u + "-x" for u in real(s, paths)])
    with pytest.raises(RuntimeError, match="1 ledger files read by Spark as"):
        cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    assert Warehouse(tmp_path / "wh").latest().version == 1
    monkeypatch.setattr(run, "spark_file_uris", real)
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    assert s["new_messages"] == 0
    rows = read_dataset(spark, str(tmp_path / "wh"), "ledger").filter("message_id = 'm'").count()
    assert rows == 1



def test_a_landing_file_is_read_with_its_first_reads_line_limit_while_records_of_it_wait(spark, tmp_path):
    """A file read again for records waiting on a later as-of was read with the run's --max-line-bytes. Lowered in
    between, a waiting line now too long was skipped and neither quarantined (the first read had parsed it) nor
    ingested: lost. Raised, a line the first read had quarantined as RECORD_TOO_LARGE was parsed and ingested: in the
    quarantine and the ledger. Each file keeps its first read's limit (the manifest records it)."""
    big = "x" * 2000
    land(tmp_path / "landing", "10", "a.jsonl", [rec("a-now", "2026-11-21T10:00:00Z"),
                                                 {**rec("a-later", "2026-11-21T10:50:00Z"), "payload": big}])
    s = cycle(spark, tmp_path, "2026-11-21T10:15:00Z", max_line_bytes=1 << 20)
    assert (s["new_messages"], s["deferred_until_later_as_of"]) == (1, 1)
    land(tmp_path / "landing", "10", "b.jsonl", [{**rec("b-long", "2026-11-21T10:40:00Z"), "payload": big},
                                                 rec("b-later", "2026-11-21T10:50:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z", max_line_bytes=1024)  # lowered: a.jsonl keeps 1 MiB
    assert (s["new_messages"], s["quarantined"], s["deferred_until_later_as_of"]) == (0, 1, 2)
    assert all(s["conservation"].values())
    s = cycle(spark, tmp_path, "2026-11-21T11:00:00Z", max_line_bytes=1 << 20)  # raised: b.jsonl keeps 1 KiB
    assert (s["new_messages"], s["quarantined"], s["deferred_until_later_as_of"]) == (2, 0, 0)
    assert all(s["conservation"].values())
    assert set(ledger(spark, tmp_path)) == {"a-now", "a-later", "b-later"}
    q = read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert [(r.source_file.rsplit("/", 1)[-1], r.record_no, r.reason_code) for r in q] == [
        ("b.jsonl", 1, "RECORD_TOO_LARGE")]


def test_a_failure_before_1970_is_quarantined_not_a_stop_of_every_run(spark, tmp_path):
    """A record whose failed_at is before the epoch (a consumer's zero time in another offset, a default date)
    overflowed the merge's arithmetic: every run stopped, nothing committed, until the file was moved by hand."""
    from reprocess.storage.read import read_dataset as read

    land(tmp_path / "landing", "10", "a.jsonl", [rec("old", "1970-01-01T00:59:59+01:00"),
                                                 rec("new", "2026-11-21T10:00:00Z")])
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert (s["new_messages"], s["quarantined"]) == (1, 1)
    (q,) = read(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert (q.message_id, q.record_no, q.reason_code) == ("old", 1, "INVALID_TIMESTAMP")
    assert q.reason == 'failed_at ["1970-01-01T00:59:59+01:00"] is before 1970-01-01T00:00:00Z'


@pytest.mark.parametrize("lose", ["dropped", "twice"])
def test_a_landing_record_in_no_place_or_two_fails_the_balance_and_nothing_is_committed(spark, tmp_path, monkeypatch,
                                                                                       lose):
    """Every record read is ingested, quarantined, left for a later as-of, or decided by an earlier read of its file:
    exactly one. Nothing checked it: a record that none of the four took vanished (its file then done) while every
    conservation check held, as when a lowered line limit skipped a waiting line (fixed this run). The run's balance
    counts them now ("records"), so a record lost or counted twice fails the run before anything is committed."""
    from reprocess.cycle import run
    from reprocess.errors import ConservationError
    from reprocess.storage.commit import Warehouse

    land(tmp_path / "landing", "10", "a.jsonl", [rec("a", "2026-11-21T10:00:00Z"), rec("b", "2026-11-21T10:00:00Z")])
    real = run.landed

    def broken(*args, **kw):
        batch, rec_ = real(*args, **kw)
        hit = F.col("message_id") == "b"
        if lose == "dropped":
            return batch, rec_.withColumn("in_window", F.col("in_window") & ~hit)
        return batch, rec_.withColumn("earlier", F.col("earlier") | hit)

    monkeypatch.setattr(run, "landed", broken)
    with pytest.raises(ConservationError, match=r"does not balance \(records\)") as info:
        cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert Warehouse(tmp_path / "wh").latest().version == 0
    # the suites ran first: the run that does not balance has its Data Docs, which the error names
    docs = tmp_path / "wh" / "runs" / "run-20261121T100500Z" / "data_docs" / "index.html"
    assert f"Data Docs: {docs}" in str(info.value)
    assert docs.exists()
    monkeypatch.setattr(run, "landed", real)
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    assert (s["records_read"], s["new_messages"], s["balance"]["records_not_in_one_place"]) == (2, 2, 0)
    assert s["conservation"]["records"]


def test_a_file_first_read_before_line_limits_were_recorded_keeps_its_next_reads():
    """Manifest entries written before the line limit was recorded have none: each run's limit applied to their
    files for as long as records of theirs waited. Their next read records its own, which later reads keep."""
    from reprocess.cycle.run import _manifest_entries
    from reprocess.landing.manifest import LandingFile, ManifestEntry

    files = [LandingFile("/l/a.jsonl", 10, 0, "text"), LandingFile("/l/b.parquet", 10, 0, "parquet"),
             LandingFile("/l/c.jsonl", 10, 0, "text")]
    old = {f.path: ManifestEntry(f.path, 10, 100, False, "run-old", None, None) for f in files[:2]}
    old["/l/c.jsonl"] = ManifestEntry("/l/c.jsonl", 10, 100, False, "run-1", 5_000, 4096)
    entries = _manifest_entries(files, old, [], {f.path for f in files}, 200, "run-2", 1_000, (), 1024)
    assert {p: e.max_line_bytes for p, e in entries.items()} == {"/l/a.jsonl": 1024, "/l/b.parquet": None,
                                                                 "/l/c.jsonl": 4096}
