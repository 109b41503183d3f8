"""Several cycles with advancing as-of times end in the states a pure-Python simulation predicts."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from reprocess.cli import load_config, main, parse_instant, render_summary
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.storage.read import read_dataset
from reprocess.targets.examples import flaky
from simulation import Simulation, read_landing

pytestmark = pytest.mark.spark

AS_OFS = ["2026-11-21T00:30:00Z", "2026-11-21T01:00:00Z", "2026-11-21T02:15:00Z", "2026-11-21T03:00:00Z",
          "2026-11-21T04:30:00Z", "2026-11-21T08:00:00Z", "2026-11-21T20:00:00Z"]
TARGET = "python:reprocess.targets.examples:flaky"


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("landing")
    write_landing(GenerateOptions(out=root, messages=400, hours=3, seed=11, malformed=4))
    return root


def _ledger_states(spark, warehouse: str) -> dict[str, tuple]:
    df = read_dataset(spark, warehouse, "ledger")
    rows = df.select("message_id", "state", "deliveries", "next_attempt_ms", "reason_code").collect()
    return {r.message_id: (r.state, r.deliveries, r.next_attempt_ms, r.reason_code) for r in rows}


# consumer groups' policies added to the embedded file (the generator's groups are '<first word>-service'): the
# shipping group's messages on any address, the orders group's under orders.eu only (ordered, without keys)
GROUP_POLICIES = [
    {"match": "#", "consumer_group": "shipping-service", "profile": "stepped",
     "settings": {"delays": ["2m"], "max_deliveries": 3}, "dead_letter_address": "%DLQ%{consumer_group}"},
    {"match": "orders.eu.#", "consumer_group": "orders-service", "profile": "exponential",
     "settings": {"initial_delay": "1m", "max_deliveries": 4, "jitter": "full"}, "ordered": True},
    {"match": "search.#", "consumer_group": "nobody", "profile": "stepped"},
]


def _with_groups():  # type: ignore[no-untyped-def]
    import yaml

    from reprocess.policy.config import policies_from_mapping

    doc = yaml.safe_load(resources.files("reprocess").joinpath("resources/policies.yaml").read_text(encoding="utf-8"))
    doc["policies"] = GROUP_POLICIES + doc["policies"]
    return policies_from_mapping(doc)


# With the consumer groups' policies added, the embedded ones still take every other group's messages: that variant
# covers the plain one, which `make test-slow` runs (76 s on a slow machine, where CI came near its 30 minutes).
@pytest.mark.parametrize("groups", [pytest.param(False, marks=pytest.mark.slow), True])
def test_cycles_match_the_pure_python_simulation(spark, landing, tmp_path, monkeypatch, groups):
    from reprocess import sparkutil

    # With generated code, as cycles above INTERPRETED_BELOW_BYTES of input run: the small cycles of the other tests
    # run interpreted, and tests/test_bad_input.py shows both give the same outcome.
    monkeypatch.setattr(sparkutil, "INTERPRETED_BELOW_BYTES", 0)
    policies = _with_groups() if groups else load_config(None)
    sim = Simulation(policies, flaky)
    records = read_landing(landing)
    wh = str(tmp_path / "wh")
    summaries = []
    for as_of in AS_OFS:
        ms = parse_instant(as_of)
        summaries.append(run_cycle(spark, CycleOptions(landing=str(landing), warehouse=wh, policies=policies,
                                                       as_of_ms=ms, target=TARGET)))
        sim.run(records, ms)
        assert _ledger_states(spark, wh) == sim.states(), f"diverged after as-of {as_of}"
    final = sim.states()
    states = {s for s, *_ in final.values()}
    assert states == {"DELIVERED", "DEAD_LETTERED", "WAITING_RETRY"} or states == {"DELIVERED", "DEAD_LETTERED"}
    assert all(all(s["conservation"].values()) for s in summaries)
    assert sum(s["quarantined"] for s in summaries) == 4
    assert summaries[-1]["messages_after"] == len(final)
    # every dead letter is in the DLQ exactly once, with its reason
    dlq = read_dataset(spark, wh, "dlq")
    dead = {m for m, (s, *_rest) in final.items() if s == "DEAD_LETTERED"}
    assert dlq.groupBy("message_id").count().filter(F.col("count") > 1).count() == 0
    assert {r.message_id for r in dlq.select("message_id").collect()} == dead
    if groups:  # the groups' policies took their messages, and dead letters went where they name
        taken = {r.policy for r in read_dataset(spark, wh, "ledger").select("policy").distinct().collect()}
        assert {"# @shipping-service", "orders.eu.# @orders-service"} <= taken
        shipping = {r.address for r in dlq.where(F.col("original_address").startswith("shipping.")).collect()}
        assert shipping == {"%DLQ%shipping-service"}


def test_ordered_keys_are_held_back_per_address_and_consumer_group_as_the_simulation_holds_them(spark, tmp_path):
    """The generated landing's ordering keys seldom meet across addresses or groups (in the 400 messages above, no
    key is on two addresses), so this landing makes them meet: five keys on the two addresses of the embedded
    ordered policy, in four consumer groups (a missing and an empty one being one group), failing over three
    hours. Every cycle ends where the simulation, which holds a key back per address and group, says."""
    import random

    rnd = random.Random(5)
    start = datetime(2026, 11, 21, tzinfo=UTC)
    records = []
    for i in range(240):
        at = start + timedelta(seconds=rnd.randrange(3 * 3600))
        r = {"message_id": f"k-{i:03d}", "address": rnd.choice(["inventory.eu.stock", "inventory.us.stock"]),
             "payload": f"p-{i}", "failed_at": at.isoformat().replace("+00:00", "Z"), "error_class": "TimeoutError",
             "ordering_key": f"sku-{rnd.randrange(5)}"}
        group = rnd.choice([None, "", "a", "b"])
        if group is not None:
            r["consumer_group"] = group
        records.append((at.hour, r))
    landing = tmp_path / "landing"
    for hour in range(3):
        folder = landing / "dt=2026-11-21" / f"hour={hour:02d}"
        folder.mkdir(parents=True)
        (folder / "k.jsonl").write_text("".join(json.dumps(r) + "\n" for h, r in records if h == hour),
                                        encoding="utf-8")
    policies = load_config(None)
    sim = Simulation(policies, flaky)
    read = read_landing(landing)
    wh = str(tmp_path / "wh")
    for as_of in AS_OFS:
        ms = parse_instant(as_of)
        run_cycle(spark, CycleOptions(landing=str(landing), warehouse=wh, policies=policies, as_of_ms=ms,
                                                target=TARGET, validate=False))
        sim.run(read, ms)
        assert _ledger_states(spark, wh) == sim.states(), f"diverged after as-of {as_of}"
    states = sim.states()
    assert {s for s, *_ in states.values()} >= {"DELIVERED", "DEAD_LETTERED"}


@pytest.fixture(scope="module")
def after_two(spark, landing, tmp_path_factory) -> tuple[Path, str]:
    """A warehouse after the cycles at AS_OFS[0] and AS_OFS[1] (copied by each test that starts from it), and the
    second's run id."""
    wh = tmp_path_factory.mktemp("two") / "wh"
    opts = dict(landing=str(landing), warehouse=str(wh), policies=load_config(None), target=TARGET)
    summaries = [run_cycle(spark, CycleOptions(as_of_ms=parse_instant(as_of), **opts)) for as_of in AS_OFS[:2]]
    return wh, summaries[-1]["run_id"]


def _copy(after_two: tuple[Path, str], tmp_path: Path) -> str:
    wh = tmp_path / "wh"
    shutil.copytree(after_two[0], wh)
    return str(wh)


def test_rerunning_a_committed_as_of_changes_nothing(spark, landing, tmp_path, after_two):
    wh = _copy(after_two, tmp_path)
    opts = dict(landing=str(landing), warehouse=wh, policies=load_config(None), target=TARGET)
    before = _ledger_states(spark, wh)
    again = run_cycle(spark, CycleOptions(as_of_ms=parse_instant(AS_OFS[1]), **opts))
    assert again["already_committed"] is True
    assert again["run_id"] == after_two[1]
    assert "not_applied" not in again  # asked as the committed run was
    assert _ledger_states(spark, wh) == before
    # asked otherwise (a manual run with a filter, after the scheduled run committed): it ran nothing, and says so
    other = run_cycle(spark, CycleOptions(as_of_ms=parse_instant(AS_OFS[1]), address_filter="orders.#", **opts))
    assert other["not_applied"] == {"address_filter": {"asked": "orders.#", "committed": None}}
    assert "  not applied: this request's address filter orders.# (the committed run's: none); the as-of was " \
        "already committed, so nothing ran: ask at a later as-of\n" in render_summary(other)
    assert _ledger_states(spark, wh) == before


def test_an_earlier_as_of_than_the_last_commit_is_refused(spark, landing, tmp_path, after_two):
    from reprocess.cycle.run import OutOfOrderError

    wh = _copy(after_two, tmp_path)  # committed at AS_OFS[0] and AS_OFS[1]
    # Between the two commits: never committed itself (a committed as-of is an idempotent re-run), yet earlier
    # than the last one.
    between = "2026-11-21T00:45:00Z"
    with pytest.raises(OutOfOrderError, match="before the last committed as-of"):
        run_cycle(spark, CycleOptions(landing=str(landing), warehouse=wh, policies=load_config(None),
                                      as_of_ms=parse_instant(between)))


def test_cli_run_prints_a_json_summary_and_writes_it_to_the_warehouse(landing, tmp_path, capsys):
    wh = tmp_path / "wh"
    code = main(["run", "--landing", str(landing), "--warehouse", str(wh), "--as-of", AS_OFS[1], "--target", TARGET,
                 "--format", "json", "--master", "local[2]"])
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    written = json.loads((wh / "runs" / out["run_id"] / "summary.json").read_text())
    assert written == out
    for key in ("ingested", "quarantined", "duplicates", "due", "delivered", "rescheduled", "dead_lettered",
                "waiting", "conservation", "lateness_ms"):
        assert key in out
    assert set(out["dead_lettered"]) == {"total", "MAX_DELIVERIES_EXCEEDED", "NON_RETRYABLE", "NO_DEAD_LETTER_ADDRESS",
                                         "NO_POLICY"}
    assert out["lateness_ms"]["p50"] is not None
    assert datetime.fromisoformat(out["as_of"].replace("Z", "+00:00")) == datetime(2026, 11, 21, 1, tzinfo=UTC)


def _dictionary_columns(files: list[Path]) -> tuple[set[str], set[str], dict[str, list[bool]]]:
    """Parquet column paths with a dictionary page in some column chunk of ``files``, those with a chunk without
    one, and for every column the dictionary flag of each chunk holding one value repeated (two or more values,
    no null, min == max): such a chunk keeps its dictionary unless it was turned off (the dictionary and one index
    per value are then smaller than the plain values, so Parquet does not fall back)."""
    import pyarrow.parquet as pq

    with_dict: set[str] = set()
    plain: set[str] = set()
    repeated: dict[str, list[bool]] = {}
    for f in files:
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                (with_dict if col.has_dictionary_page else plain).add(col.path_in_schema)
                st = col.statistics
                if (st is not None and st.has_min_max and st.has_null_count and st.null_count == 0
                        and col.num_values >= 2 and st.min == st.max):
                    repeated.setdefault(col.path_in_schema, []).append(col.has_dictionary_page)
    return with_dict, plain, repeated


def test_values_unique_per_message_are_written_without_a_parquet_dictionary(spark, landing, tmp_path):
    from reprocess.ledger.model import LEDGER_UNIQUE_COLUMNS
    from reprocess.routing.dlq import DLQ_UNIQUE_COLUMNS
    from reprocess.targets.outbox import OUTBOX_UNIQUE_COLUMNS

    wh = tmp_path / "wh"
    # (dataset, columns written plain, low-cardinality columns that keep their dictionary, of which some must be
    # seen holding a repeated value: the DLQ's files are too small to promise one)
    checks = (("ledger", LEDGER_UNIQUE_COLUMNS, {"state", "policy", "address", "profile"}, {"state"}),
              ("dlq", DLQ_UNIQUE_COLUMNS, {"reason_code", "original_address", "policy"}, set()),
              ("outbox", OUTBOX_UNIQUE_COLUMNS, {"run_id", "headers.key_value.key"}, {"run_id"}))
    # the files each run leaves, read before the next (which rewrites the ledger buckets it touches). A small run
    # writes one file per ledger bucket: the outbox run leaves one terminal bucket of delivered and dead-lettered
    # rows; the flaky target's run leaves waiting buckets, each of one state.
    found: dict[str, list[tuple]] = {dataset: [] for dataset, *_ in checks}
    for as_of, target in ((AS_OFS[1], "outbox"), (AS_OFS[-1], TARGET)):
        run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=load_config(None),
                                      as_of_ms=parse_instant(as_of), target=target))
        for dataset, runs in found.items():
            files = sorted((wh / dataset).rglob("*.parquet"))
            assert files, dataset
            runs.append(_dictionary_columns(files))
    for dataset, unique, keeps, seen in checks:
        with_dict = set().union(*(run[0] for run in found[dataset]))
        plain = set().union(*(run[1] for run in found[dataset]))
        repeated = {c: [flag for run in found[dataset] for flag in run[2].get(c, [])]
                    for c in set().union(*(run[2] for run in found[dataset]))}
        assert set(unique) <= plain - with_dict, (dataset, set(unique) & with_dict)
        # Parquet drops a dictionary where it does not pay (one-row files, all-distinct values): only a chunk
        # holding one value repeated says for sure that the dictionary was left on.
        assert {c for c in keeps if not all(repeated.get(c, []))} == set(), (dataset, repeated)
        assert {c for c in seen if repeated.get(c)} == seen, (dataset, sorted(repeated))


def test_the_run_log_and_the_snapshot_files_stay_bounded_and_old_runs_stay_committed(
        spark, landing, tmp_path, monkeypatch, cfile):
    """A snapshot keeps the summaries of its newest FULL_RUNS runs and the vacuum keeps the newest KEEP_SNAPSHOTS
    snapshot files (both tiny here); older runs keep their id and as-of, so a re-run of an old as-of is still a
    no-op and a re-drive request is still applied once, with the summaries the runs wrote beside the log.

    On a ``cfile:`` warehouse (storage.hadoop's vacuum); the local warehouse's is
    test_a_local_warehouse_keeps_its_newest_snapshot_files_and_summaries. No GX gate: it reads no summary here."""
    from reprocess.dlq_stats import dlq_stats
    from reprocess.orchestration import check_outputs, read_summary
    from reprocess.redrive import RedriveRequest, redrive_dead_letters
    from reprocess.storage import commit
    from reprocess.storage.commit import Warehouse

    monkeypatch.setattr(commit, "FULL_RUNS", 2)
    monkeypatch.setattr(commit, "KEEP_SNAPSHOTS", 3)
    root = tmp_path / "wh"
    wh = f"cfile://{root}"
    policies = load_config(None)
    opts = dict(landing=str(landing), warehouse=wh, policies=policies, target=TARGET, validate=False)
    first = run_cycle(spark, CycleOptions(as_of_ms=parse_instant(AS_OFS[0]), **opts))
    run_cycle(spark, CycleOptions(as_of_ms=parse_instant(AS_OFS[1]), **opts))
    ask = RedriveRequest(address_pattern="#", max_messages=3, reset_deliveries=True)
    audit = redrive_dead_letters(spark, wh, ask, parse_instant("2026-11-21T01:10:00Z"), requested_by="test")
    assert audit["moved"] == 3
    for as_of in AS_OFS[2:5]:
        run_cycle(spark, CycleOptions(as_of_ms=parse_instant(as_of), **opts))

    # 6 commits: the newest 3 snapshot files remain; the log names all 6 runs, the newest 2 with their summaries
    assert sorted(p.name for p in (root / "_snapshots").iterdir()) == ["00000004.json", "00000005.json",
                                                                      "00000006.json"]
    runs = json.loads((root / "_snapshots" / "00000006.json").read_text())["runs"]
    assert [r["run_id"] for r in runs][:3] == [first["run_id"], "run-20261121T010000Z", audit["request_id"]]
    assert ["summary" in r for r in runs] == [False, False, False, False, True, True]
    assert runs[2] == {"run_id": audit["request_id"], "kind": "redrive", "as_of_ms": parse_instant(AS_OFS[1]),
                       # its GX gate's, expiring with the cycles', aged from the request's now
                       "data_docs": True, "docs_as_of_ms": parse_instant("2026-11-21T01:10:00Z")}
    assert audit["validation"]["passed"]

    # an old as-of is still committed: a re-run changes nothing and the DAG's check reads its summary.json
    again = run_cycle(spark, CycleOptions(as_of_ms=parse_instant(AS_OFS[0]), **opts))
    assert again["already_committed"] is True
    assert {k: again[k] for k in ("run_id", "due", "ingested")} == {k: first[k] for k in ("run_id", "due", "ingested")}
    summary = read_summary(wh, AS_OFS[0])
    assert summary == json.loads((root / "runs" / first["run_id"] / "summary.json").read_text())
    assert check_outputs(summary)["checked"]
    assert Warehouse(root).latest().version == 6
    # the re-drive request is applied once at its now (a retry), its entry brief and its audit beside the log
    again = redrive_dead_letters(spark, wh, ask, parse_instant("2026-11-21T01:10:00Z"))
    assert again["already_applied"]
    assert again["request_id"] == audit["request_id"]
    assert Warehouse(root).latest().version == 6
    # the UI and the report list the runs that have a summary in the snapshot
    assert [r["run_id"] for r in dlq_stats(wh)["latest_runs"]] == ["run-20261121T043000Z", "run-20261121T030000Z"]
    # asked again later it is a request of its own: it moves the dead letters there are now (it moved none before:
    # its id named the filters alone, so the same form submitted next week was "already applied")
    later = redrive_dead_letters(spark, wh, ask, parse_instant("2026-11-21T09:00:00Z"))
    assert "already_applied" not in later
    assert later["request_id"] != audit["request_id"]
    assert later["moved"] == 3
    assert Warehouse(root).latest().version == 7


def test_a_local_warehouse_keeps_its_newest_snapshot_files_and_summaries(tmp_path, monkeypatch):
    """The local warehouse's side of the bound, without Spark: commits and vacuums as a cycle makes them."""
    from reprocess.orchestration import read_summary
    from reprocess.storage import commit
    from reprocess.storage.commit import Snapshot, Warehouse, run_summary

    monkeypatch.setattr(commit, "FULL_RUNS", 2)
    monkeypatch.setattr(commit, "KEEP_SNAPSHOTS", 3)
    wh = Warehouse(tmp_path / "wh")
    for i, as_of in enumerate(AS_OFS[:5]):
        base = wh.latest()
        ms, run_id = parse_instant(as_of), f"run-{i}"
        summary = {"run_id": run_id, "due": i, "conservation": {"balance": True}}
        wh.write_bytes(str(wh.path("runs", run_id, "summary.json")), json.dumps(summary).encode())
        new = Snapshot(files=base.files, runs=[*base.runs, {"run_id": run_id, "as_of_ms": ms, "summary": summary}],
                       as_of_ms=ms)
        wh.commit(base, new)
        wh.vacuum(new, keep_previous=base)
    assert sorted(p.name for p in wh.snapshots_dir.iterdir()) == ["00000003.json", "00000004.json", "00000005.json"]
    runs = wh.latest().runs
    assert ["summary" in r for r in runs] == [False, False, False, True, True]
    assert wh.latest().runs_at(parse_instant(AS_OFS[0])) == [{"run_id": "run-0", "as_of_ms": parse_instant(AS_OFS[0])}]
    assert run_summary(wh, runs[0]) == {"run_id": "run-0", "due": 0, "conservation": {"balance": True}}
    assert read_summary(str(wh.root), AS_OFS[1])["due"] == 1
    (wh.root / "runs" / "run-0" / "summary.json").unlink()
    assert run_summary(wh, runs[0]) is None  # a summary removed by hand: named as missing, not invented


def record_fsyncs(monkeypatch) -> list[str]:
    """Every fsync from now on, by the real path of what it synced (a power cut cannot be made here)."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_a_local_warehouse_syncs_what_a_snapshot_names_before_the_snapshot(tmp_path, monkeypatch):
    """A machine that loses power after a commit comes back with the files its snapshot names: each published file,
    each folder on its way from the root and the run's summary are fsynced before the snapshot file is. Before,
    only the snapshot was: Spark's writers do not sync, so the snapshot could name files still empty on disk.
    Recorded through the fsync calls themselves (a power cut cannot be made here)."""
    from reprocess.storage.commit import Snapshot, Warehouse

    wh = Warehouse(tmp_path / "wh")
    stage = tmp_path / "wh" / "_stage" / "attempt"
    for part in ("bucket=1", "bucket=2"):
        (stage / "ledger" / part).mkdir(parents=True)
        (stage / "ledger" / part / "part-0.parquet").write_bytes(b"PAR1 not really")
    synced = record_fsyncs(monkeypatch)
    base = wh.latest()
    files = wh.publish("run-0", "ledger", stage / "ledger")
    wh.write_bytes(str(wh.path("runs", "run-0", "summary.json")), b"{}")
    wh.commit(base, Snapshot(files={**base.files, "ledger": files}, runs=[{"run_id": "run-0", "as_of_ms": 0}]))
    root = os.path.realpath(wh.root)  # /proc/self/fd names the real path
    snapshot_at = next(i for i, p in enumerate(synced) if p.startswith(f"{root}/_snapshots/"))
    before = set(synced[:snapshot_at])
    assert sorted(files) == ["ledger/bucket=1/run-0-part-0.parquet", "ledger/bucket=2/run-0-part-0.parquet"]
    assert {f"{root}/{f}" for f in files} <= before
    assert {root, f"{root}/ledger", f"{root}/ledger/bucket=1", f"{root}/ledger/bucket=2"} <= before
    # the summary (synced under its temporary name, then renamed) and its folders up to the root: runs/ was made
    # after the publish synced the root
    assert any(re.fullmatch(rf"{re.escape(root)}/runs/run-0/\.summary\.json\.[0-9a-f]+\.tmp", p) for p in before)
    assert {f"{root}/runs/run-0", f"{root}/runs"} <= before
    assert [p.name for p in (wh.root / "runs" / "run-0").iterdir()] == ["summary.json"]
    assert root in synced[synced.index(f"{root}/runs"):snapshot_at]
    assert f"{root}/_snapshots" in synced[snapshot_at:]  # and the snapshot's own name, after it
    # a new warehouse's first commit makes _snapshots/: the root holding it, and its parent, are synced before the
    # snapshot is written
    other = Warehouse(tmp_path / "new" / "wh")
    other.root.mkdir(parents=True)
    synced.clear()
    other.commit(other.latest(), Snapshot(runs=[{"run_id": "run-0", "as_of_ms": 0}]))
    new_root = os.path.realpath(other.root)
    at = next(i for i, p in enumerate(synced) if p.startswith(f"{new_root}/_snapshots/"))
    assert {new_root, os.path.dirname(new_root)} <= set(synced[:at])


def test_a_file_a_warehouse_writes_whole_is_whole_or_absent(tmp_path, monkeypatch):
    """A run's summary and a re-drive's audit record were written in place: a stop in the middle left a partial file,
    which every later read of it failed on (a re-drive's retry, its report). They are written under a temporary name,
    synced, then renamed over the old one: a failure before the rename leaves the old file (or none) and no temporary
    one."""
    from reprocess.storage.commit import Warehouse

    wh = Warehouse(tmp_path / "wh")
    target = wh.path("redrive_audit", "redrive-1.json")
    wh.write_bytes(str(target), b'{"moved": 1}')
    assert target.read_bytes() == b'{"moved": 1}'
    real = os.fsync

    def fsync(fd):
        if os.path.isfile(f"/proc/self/fd/{fd}"):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error"):
        wh.write_bytes(str(target), b'{"moved": 2, "messages": ["a", "b"]}')
    assert target.read_bytes() == b'{"moved": 1}'
    with pytest.raises(OSError, match="Input/output error"):
        wh.write_bytes(str(wh.path("redrive_audit", "redrive-2.json")), b"{}")
    assert sorted(p.name for p in target.parent.iterdir()) == ["redrive-1.json"]


def test_a_prepared_runs_record_is_written_after_the_files_it_names_are_synced(tmp_path, monkeypatch):
    """``prepared.json`` names the inflight list and, once the re-drive is done, its outcomes: Spark wrote those and
    does not sync them, so a power cut after the record could leave it naming empty files, and every later call, which
    must finish the prepared run first, failed reading them. They are synced before the record (folders up to the
    root with it)."""
    from reprocess.storage.commit import Warehouse

    wh = Warehouse(tmp_path / "wh")
    run = wh.run_dir("run-0")
    for rel in ("inflight-a/part-0.parquet", "outcomes-a/target=0/part-0.parquet", "other/part-0.parquet"):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(b"PAR1 not really")
    synced = record_fsyncs(monkeypatch)
    wh.write_prepared("run-0", {"run_id": "run-0", "inflight": "inflight-a"})
    root, d = os.path.realpath(wh.root), os.path.realpath(run)

    def record_at() -> int:  # where the record (under its temporary name, renamed after) was synced
        record = re.compile(rf"{re.escape(d)}/\.prepared\.json\.[0-9a-f]+\.tmp")
        return next(i for i, p in enumerate(synced) if record.fullmatch(p))

    first = record_at()
    assert f"{d}/inflight-a/part-0.parquet" in synced[:first]
    assert f"{d}/inflight-a" in synced[:first]
    assert {d, f"{root}/_runs", root} <= set(synced[first:])
    synced.clear()
    wh.write_prepared("run-0", {"run_id": "run-0", "inflight": "inflight-a", "outcomes": {"dir": "outcomes-a"}})
    first = record_at()
    assert {f"{d}/outcomes-a/target=0/part-0.parquet", f"{d}/outcomes-a/target=0", f"{d}/outcomes-a"} <= set(
        synced[:first])
    assert not any("/other" in p for p in synced)  # only what the record names
    synced.clear()  # a target's share of the re-drive done before the others: its folder and the one holding it
    (run / "outcomes-b/target=1").mkdir(parents=True)
    (run / "outcomes-b/target=1/part-0.parquet").write_bytes(b"PAR1 not really")
    wh.write_prepared("run-0", {"run_id": "run-0", "inflight": "inflight-a",
                                "outcomes_done": {"parts": [{"path": "outcomes-b/target=1", "target": "x"}]}})
    first = record_at()
    assert {f"{d}/outcomes-b/target=1/part-0.parquet", f"{d}/outcomes-b/target=1", f"{d}/outcomes-b"} <= set(
        synced[:first])


def test_a_folder_fsync_a_filesystem_does_not_offer_is_not_a_failed_run(tmp_path, monkeypatch):
    """Some filesystems refuse to fsync a folder (EINVAL, EBADF): a run that committed must not report failure for it
    (PostgreSQL ignores these for folders too). Any other error, such as EIO, still fails the call."""
    import errno

    from reprocess.storage import commit
    from reprocess.storage.commit import Snapshot, Warehouse

    real = os.fsync
    refuse = {"errno": errno.EINVAL}

    def fsync(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(refuse["errno"], os.strerror(refuse["errno"]))
        real(fd)

    wh = Warehouse(tmp_path / "wh")
    monkeypatch.setattr(os, "fsync", fsync)
    base = wh.latest()
    wh.commit(base, Snapshot(runs=[{"run_id": "run-0", "as_of_ms": 0}]))
    assert wh.latest().version == 1
    refuse["errno"] = errno.EIO
    with pytest.raises(OSError, match="Input/output error"):
        commit.fsync_dir(wh.root)


def test_a_partition_folder_named_like_a_parquet_file_is_published_file_by_file(tmp_path):
    """A dead letter's or an outbox row's address partition may end with ``.parquet`` (``exports.parquet`` is a valid
    address): publishing moved its folder whole as if it were a file, then failed on the files in it, and every resume
    did the same. The vacuum unlinked it as a file. Only files are published and vacuumed."""
    from reprocess.storage.commit import Snapshot, Warehouse

    wh = Warehouse(tmp_path / "wh")
    stage = tmp_path / "wh" / "_stage" / "attempt" / "dlq"
    for part in ("address=exports.parquet", "address=orders"):
        (stage / "dt=2026-11-20" / part).mkdir(parents=True)
        (stage / "dt=2026-11-20" / part / "part-0.parquet").write_bytes(b"PAR1 not really")
    files = wh.publish("run-0", "dlq", stage)
    assert sorted(files) == ["dlq/dt=2026-11-20/address=exports.parquet/run-0-part-0.parquet",
                             "dlq/dt=2026-11-20/address=orders/run-0-part-0.parquet"]
    assert all((wh.root / f).is_file() for f in files)
    base = wh.latest()
    wh.commit(base, Snapshot(files={**base.files, "dlq": files}, runs=[{"run_id": "run-0", "as_of_ms": 0}]))
    assert wh.vacuum(wh.latest()) == 0
    assert all((wh.root / f).is_file() for f in files)
    keep = [f for f in files if "orders" in f]
    wh.commit(wh.latest(), Snapshot(files={**base.files, "dlq": keep}, runs=[{"run_id": "run-1", "as_of_ms": 0}]))
    assert wh.vacuum(wh.latest()) == 1
    assert not (wh.root / files[0]).exists()
    assert (wh.root / keep[0]).is_file()


def test_the_data_docs_that_expire_at_a_commit_are_the_marked_cycles_older_than_the_retention(monkeypatch):
    """Which Data Docs a commit removes: those of the entries marked as having them (a re-drive that moved nothing
    renders none, a cycle without the GX gate neither, and the mark goes once they are removed) more than the
    retention before the committing as-of; a re-drive's aged from its request's now (``docs_as_of_ms``), which may be
    far later than the as-of of the snapshot it applied to (cycles paused). ``None`` keeps all. A snapshot keeps the
    mark on the entries it trims (else the docs of a run older than the newest FULL_RUNS would stay for good)."""
    from reprocess.storage import commit
    from reprocess.storage.commit import Snapshot, expired_data_docs

    day = 86_400_000
    runs = [{"run_id": "old-unmarked", "as_of_ms": 0},  # removed already, or never rendered
            {"run_id": "old-redrive", "as_of_ms": 0, "kind": "redrive"},
            {"run_id": "old", "as_of_ms": day // 2, "data_docs": True},
            {"run_id": "edge", "as_of_ms": day, "data_docs": True},  # exactly the retention before: kept
            {"run_id": "gated-redrive", "as_of_ms": 0, "kind": "redrive", "data_docs": True,
             "docs_as_of_ms": 2 * day},  # asked two days after the snapshot's as-of
            {"run_id": "new", "as_of_ms": 2 * day, "data_docs": True}]
    assert expired_data_docs(runs, 2 * day, 1) == [2]
    assert expired_data_docs(runs, 2 * day, 0.5) == [2, 3]
    assert expired_data_docs(runs, 2 * day, None) == []
    assert expired_data_docs(runs, day, 1) == []  # as of a day earlier, none is old enough yet
    assert expired_data_docs(runs, 4 * day, 1) == [2, 3, 4, 5]
    monkeypatch.setattr(commit, "FULL_RUNS", 1)
    trimmed = json.loads(Snapshot(runs=[{**r, "summary": {"due": 1}} for r in runs]).to_json())["runs"]
    assert ["summary" in r for r in trimmed] == [False] * 5 + [True]
    assert [r.get("data_docs") for r in trimmed] == [None, None, True, True, True, True]
    assert trimmed[4]["docs_as_of_ms"] == 2 * day  # kept where the summary is not


def test_a_committed_runs_summary_names_its_data_docs_only_while_they_are_there(tmp_path, monkeypatch, caplog):
    """A summary read back later (``reprocess run`` of a committed as-of, a DAG run's note) names the Data Docs path
    it was written with only while the docs are there: the run log's mark says so without a request; without the
    mark (removed past the retention or by hand, or a run committed before the mark existed) the reader asks the
    store where it keeps them, in its own form of path (pyarrow's reader of a warehouse at a URI takes no URI), and
    a path that is gone becomes None. A store that cannot answer leaves the path: docs never fail a command."""
    from reprocess.orchestration import summary_markdown
    from reprocess.storage.arrow import open_reader
    from reprocess.storage.commit import Warehouse, with_docs_state

    wh = Warehouse(tmp_path / "wh")
    index = str(wh.path("runs", "r", "data_docs", "index.html"))
    summary = {"validation": {"suites": {"run": 1}, "data_docs": index, "seconds": 1.0}, "due": 1}
    asked: list[str] = []
    monkeypatch.setattr(wh, "exists", lambda location: asked.append(location) or Warehouse.exists(wh, location))
    assert with_docs_state(wh, {"run_id": "r", "data_docs": True}, summary) is summary  # the mark: no request
    assert asked == []
    gone = with_docs_state(wh, {"run_id": "r"}, summary)
    assert (gone["validation"]["data_docs"], gone["validation"]["suites"], gone["due"]) == (None, {"run": 1}, 1)
    assert summary["validation"]["data_docs"] == index  # the summary read is not changed
    assert asked == [index]
    wh.write_bytes(index, b"<html/>")  # a run from before the mark, its docs still there
    assert with_docs_state(wh, {"run_id": "r"}, summary)["validation"]["data_docs"] == index
    assert with_docs_state(wh, {"run_id": "r"}, {"due": 1}) == {"due": 1}  # no GX gate: nothing to say

    # the writer of a warehouse at a URI named its docs by URI; the DAG's reader (pyarrow) finds them by its own path
    at_uri = {"validation": {**summary["validation"], "data_docs": f"cfile://{index}"}}
    reader = open_reader(f"cfile://{tmp_path / 'wh'}")
    assert type(reader).__name__ == "ArrowWarehouse"
    assert with_docs_state(reader, {"run_id": "r"}, at_uri) is at_uri
    (tmp_path / "wh" / "runs" / "r" / "data_docs" / "index.html").unlink()
    assert with_docs_state(reader, {"run_id": "r"}, at_uri)["validation"]["data_docs"] is None

    def unreachable(location: str) -> bool:
        raise OSError(f"endpoint down: {location}")

    monkeypatch.setattr(wh, "exists", unreachable)
    assert with_docs_state(wh, {"run_id": "r"}, summary) is summary
    assert "could not tell whether run r's Data Docs are there: endpoint down" in caplog.text

    run = {"run_id": "r", "as_of": "2026-11-21T10:05:00Z", "dead_lettered": {"total": 0}, "conservation": {"ok": True},
           "ingested": 1, "quarantined": 0, "duplicates": 0, "due": 1, "delivered": 1, "rescheduled": 0, "waiting": 0,
           "lateness_ms": {"p50": 0, "p99": 0}}
    assert f"Data Docs: `{index}`." in summary_markdown({**run, **summary}, run["as_of"], dry_run=False)
    assert "Data Docs: no longer there (removed past the Data Docs retention, or by hand)." in summary_markdown(
        {**run, **gone}, run["as_of"], dry_run=False)


def test_data_docs_that_cannot_be_removed_keep_their_mark_and_the_run_goes_on_unless_its_lease_is_lost(
        tmp_path, monkeypatch, caplog):
    """The removal comes after the re-drive, before the commit: a store that will not delete must not fail a run
    that delivered. What is not gone keeps its mark, for a later run; a lost lease still stops the run. Out-of-range
    retentions are refused when the options are made, not at the commit."""
    from reprocess.errors import CommitConflictError, ConfigError
    from reprocess.orchestration import cycle_args
    from reprocess.storage.commit import KEEP_DATA_DOCS_ENV, Snapshot, Warehouse, expire_data_docs, expired_data_docs

    day = 86_400_000
    wh = Warehouse(tmp_path / "wh")
    for run_id in ("a", "b"):
        wh.write_bytes(str(wh.path("runs", run_id, "data_docs", "index.html")), b"<html/>")
    (wh.root / "runs" / "c").mkdir()
    (wh.root / "runs" / "c" / "data_docs").write_bytes(b"not a folder")  # rmtree cannot remove it
    runs = [{"run_id": r, "as_of_ms": day, "data_docs": True} for r in ("a", "b", "c")]
    new = Snapshot(runs=list(runs))
    assert expire_data_docs(wh, new, 3 * day, 1) == 2
    assert [r.get("data_docs") for r in new.runs] == [None, None, True]
    assert [r.get("data_docs") for r in runs] == [True, True, True]  # the base snapshot's entries are not changed
    assert not (wh.root / "runs" / "a" / "data_docs").exists()
    assert "not removed runs=1" in caplog.text

    class Refusing(Warehouse):
        def __init__(self, root, error):
            super().__init__(root)
            self.error = error

        def remove_data_docs(self, run_ids):
            raise self.error

    new = Snapshot(runs=list(runs))
    assert expire_data_docs(Refusing(tmp_path / "wh", OSError("AccessDenied")), new, 3 * day, 1) == 0
    assert [r.get("data_docs") for r in new.runs] == [True, True, True]
    with pytest.raises(CommitConflictError):
        expire_data_docs(Refusing(tmp_path / "wh", CommitConflictError("lease lost")), new, 3 * day, 1)

    assert expired_data_docs(runs, 3 * day, 1e305) == []  # no overflow: longer than any as-of's age
    for days in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ConfigError):
            CycleOptions(landing="l", warehouse="w", policies=load_config(None), as_of_ms=3 * day,
                         data_docs_days=days)

    # a DAG run passes the variable as an argument: a driver in cluster mode has only those
    monkeypatch.delenv(KEEP_DATA_DOCS_ENV, raising=False)
    assert "--keep-data-docs" not in cycle_args("l", "w", AS_OFS[0], None, None, None, False)
    monkeypatch.setenv(KEEP_DATA_DOCS_ENV, "7.5")
    args = cycle_args("l", "w", AS_OFS[0], None, None, None, False)
    assert args[args.index("--keep-data-docs") + 1] == "7.5"


def test_a_dead_letter_moved_back_without_a_reset_gets_one_delivery_more_and_the_gate_still_passes(
        spark, landing, tmp_path, after_two):
    """A DLQ re-drive without --reset-deliveries (the default) keeps each message's count: the next cycle gives it
    exactly one delivery more, past its policy's bound if it was exhausted, and the ledger suite accepts that
    (the bound becomes the count it was released at plus one). Before, such a message failing again stopped every
    later cycle at the GX gate ("deliveries_within_policy_bound"), with nothing committed."""
    from reprocess.redrive import RedriveRequest, redrive_dead_letters

    wh = _copy(after_two, tmp_path)  # after the cycles at AS_OFS[0] and AS_OFS[1]
    opts = dict(landing=str(landing), warehouse=wh, policies=load_config(None), target=TARGET)
    before = {m: row for m, row in _ledger_states(spark, wh).items() if row[0] == "DEAD_LETTERED"}
    audit = redrive_dead_letters(spark, wh, RedriveRequest(address_pattern="#", max_messages=3),
                                 parse_instant("2026-11-21T01:10:00Z"), requested_by="test")
    moved = {m["message_id"] if isinstance(m, dict) else m for m in audit["messages"]}
    assert len(moved) == 3
    assert moved <= set(before)
    released = {r.message_id: r.released_deliveries for r in read_dataset(spark, wh, "ledger")
                .filter(F.col("message_id").isin(list(moved))).collect()}
    assert released == {m: before[m][1] for m in moved}
    summary = run_cycle(spark, CycleOptions(as_of_ms=parse_instant(AS_OFS[2]), **opts))
    assert summary["validation"]["passed"]
    after = _ledger_states(spark, wh)
    for m in moved:
        assert after[m][1] == before[m][1] + 1, (m, before[m], after[m])  # exactly one delivery more
    # one of them was exhausted: its extra delivery went past the policy's bound, and it was dead-lettered again
    # or delivered, never rescheduled
    over = [m for m in moved if before[m][3] == "MAX_DELIVERIES_EXCEEDED"]
    assert over
    assert all(after[m][0] in ("DEAD_LETTERED", "DELIVERED") for m in over)


def test_a_parquet_landing_ends_as_the_jsonl_landing_of_its_seed_and_its_malformed_rows_are_quarantined(
        spark, tmp_path, capsys):
    """``generate --format parquet`` writes the records of its seed and ``--malformed`` rows that break the contract
    (a Parquet file has no lines to break): the cycle keeps the same ledger as from the JSON lines of that seed, and
    quarantines each malformed row, naming its file and record."""
    as_of = parse_instant("2026-11-21T04:30:00Z")
    ledgers, quarantines = {}, {}
    for fmt in ("jsonl", "parquet"):
        root = tmp_path / fmt
        assert main(["generate", "--out", str(root), "--messages", "60", "--hours", "2", "--seed", "3",
                     "--format", fmt, "--malformed", "4"]) == 0
        assert json.loads(capsys.readouterr().out)["malformed"] == 4
        wh = str(tmp_path / f"wh-{fmt}")
        run_cycle(spark, CycleOptions(landing=str(root), warehouse=wh, policies=load_config(None), as_of_ms=as_of,
                                      target=TARGET))
        ledgers[fmt] = _ledger_states(spark, wh)
        quarantines[fmt] = read_dataset(spark, wh, "quarantine").collect()
    assert len(ledgers["jsonl"]) == 60
    assert ledgers["parquet"] == ledgers["jsonl"]
    assert len(quarantines["jsonl"]) == 4
    rows = quarantines["parquet"]
    assert sorted(r.reason_code for r in rows) == ["INVALID_DELIVERY_COUNT", "INVALID_TIMESTAMP", "MISSING_FIELD",
                                                   "MISSING_FIELD"]
    assert all(r.source_file.endswith(".parquet") and r.record_no >= 1 for r in rows)
    with pytest.raises(SystemExit):
        main(["generate", "--out", str(tmp_path / "x"), "--malformed", "-1"])
    assert "must be >= 0" in capsys.readouterr().err
