"""Operator commands on one small committed warehouse: `reprocess dlq list|show|stats`, `ledger stats`, `report`.

The warehouse is built once for the module by ONE real cycle (embedded policy file, as of 2026-11-21T10:05Z,
target `flaky`: it raises PoisonMessage for "poison" payloads and fails delivery d of message m when
xxh64("m/d") % 10 < 4, so the ids below were chosen for their outcome) and then only read, without Spark.

    o-ok, o-done   orders.created      due -> delivery 2 succeeds -> DELIVERED
    o-val          orders.created      ValidationError -> NON_RETRYABLE      (payload and a header hold markup)
    n-max          orders.created      7th delivery (activemq: 6 redeliveries) -> MAX_DELIVERIES_EXCEEDED
    o-max          orders.eu.paid      7th delivery -> MAX_DELIVERIES_EXCEEDED
    b-max          billing.eu          3rd delivery (artemis) -> MAX_DELIVERIES_EXCEEDED, into billing.dlq
    b-dead         billing.eu          2nd delivery; due; delivery 3 fails -> MAX_DELIVERIES_EXCEEDED, billing.dlq
    i-poison       inventory.stock     PoisonMessage -> NON_RETRYABLE
    i-retry        inventory.stock     due; delivery 2 fails -> waits until 10:10
    n-wait         inventory.eu.stock  failed at 10:04:30 -> waits until 10:05:30
    n-val          payments.card       SchemaError -> NON_RETRYABLE
    p-poison       payments.card       due; "poison" payload -> NON_RETRYABLE at the re-drive
    p-wait         payments.card       5th delivery -> waits 4-8 min (equal jitter)
    m-wait         misc.audit          16th delivery (rocketmq, policy '#') -> waits 2 h, until 12:03
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys

import pytest

from reprocess.cli import load_config, main, parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.errors import ConfigError, NotFoundError
from reprocess.storage.commit import Snapshot, Warehouse
from test_cycle_steps import land, rec

pytestmark = pytest.mark.spark

AS_OF = "2026-11-21T10:05:00Z"
NON_RETRYABLE = {"o-val", "i-poison", "n-val", "p-poison"}
EXCEEDED = {"n-max", "o-max", "b-max", "b-dead"}
DEAD = NON_RETRYABLE | EXCEEDED
MARKUP = '<script>alert("pwn")</script>'


@pytest.fixture(scope="module")
def wh(spark, tmp_path_factory) -> str:
    # kept under folders named like partitions: only the folders below a dataset are its partition values
    root = tmp_path_factory.mktemp("operator") / "dt=2020-01-01" / "address=elsewhere" / "bucket=7"
    land(root / "landing", "10", "a.jsonl", [
        rec("o-ok", "2026-11-21T10:00:00Z"),
        rec("o-done", "2026-11-21T10:00:00Z"),
        {**rec("o-val", "2026-11-21T10:01:00Z", error_class="com.acme.ValidationError", error_message="amount <0>",
               headers={"x-note": "<i>hi</i>"}), "payload": MARKUP},
        rec("n-max", "2026-11-21T10:02:30Z", delivery_count=7),
        rec("o-max", "2026-11-21T10:02:00Z", address="orders.eu.paid", delivery_count=7, error_class="TimeoutError"),
        rec("b-max", "2026-11-21T10:03:00Z", address="billing.eu", delivery_count=3, error_class="TimeoutError"),
        rec("b-dead", "2026-11-21T10:00:00Z", address="billing.eu", delivery_count=2, error_class="TimeoutError"),
        rec("i-poison", "2026-11-21T10:03:30Z", address="inventory.stock",
            error_class="reprocess.targets.examples.PoisonMessage"),
        rec("i-retry", "2026-11-21T10:00:00Z", address="inventory.stock"),
        rec("n-wait", "2026-11-21T10:04:30Z", address="inventory.eu.stock"),
        rec("n-val", "2026-11-21T10:01:30Z", address="payments.card", error_class="SchemaError"),
        {**rec("p-poison", "2026-11-21T10:00:00Z", address="payments.card"), "payload": "poison pill"},
        rec("p-wait", "2026-11-21T10:04:00Z", address="payments.card", delivery_count=5),
        rec("m-wait", "2026-11-21T10:03:00Z", address="misc.audit", delivery_count=16),
    ])
    # validate=False: the GX gate is tested elsewhere; these tests only read what the cycle committed
    run_cycle(spark, CycleOptions(landing=str(root / "landing"), warehouse=str(root / "wh"),
                                  policies=load_config(None), as_of_ms=parse_instant(AS_OF), validate=False,
                                  target="python:reprocess.targets.examples:flaky"))
    return str(root / "wh")


def _run(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _json(capsys, *args: str) -> dict:
    return json.loads(_run(capsys, *args, "--format", "json"))


def test_dlq_list_gives_every_dead_letter_newest_first_with_its_reason_and_dlq_address(capsys, wh):
    doc = _json(capsys, "dlq", "list", "--warehouse", wh)
    assert (doc["snapshot"], doc["as_of"], doc["matched"], doc["shown"]) == (1, AS_OF, 8, 8)
    ids = [d["message_id"] for d in doc["dead_letters"]]
    assert ids == sorted(DEAD)  # one run: the same dead-lettering time, then by id
    by_id = {d["message_id"]: d for d in doc["dead_letters"]}
    assert {i for i, d in by_id.items() if d["reason_code"] == "NON_RETRYABLE"} == NON_RETRYABLE
    assert {i for i, d in by_id.items() if d["reason_code"] == "MAX_DELIVERIES_EXCEEDED"} == EXCEEDED
    b = by_id["b-dead"]
    assert (b["dead_lettered_at"], b["original_address"], b["dead_letter_address"], b["deliveries"],
            b["last_error_class"]) == (AS_OF, "billing.eu", "billing.dlq", 3,
                                       "reprocess.targets.examples.TransientError")


@pytest.mark.parametrize(("filters", "expected"), [
    (["--address", "orders.#"], {"n-max", "o-max", "o-val"}),
    (["--address", "*.created"], {"n-max", "o-val"}),
    (["--address", "billing.eu"], {"b-max", "b-dead"}),
    (["--address", "#.card"], {"n-val", "p-poison"}),
    (["--address", "nobody.#"], set()),
    (["--reason", "NON_RETRYABLE"], NON_RETRYABLE),
    (["--reason", "NON_RETRYABLE", "--reason", "MAX_DELIVERIES_EXCEEDED"], DEAD),
    (["--reason", "NO_DEAD_LETTER_ADDRESS"], set()),
    (["--since", AS_OF], DEAD),
    (["--since", "2026-11-21T10:05:00.001Z"], set()),
    (["--until", AS_OF], set()),  # --until is exclusive for an instant ...
    (["--until", "2026-11-21"], DEAD),  # ... and includes the whole of a day
    (["--until", "2026-11-20"], set()),
    (["--since", "2026-11-22"], set()),
    (["--address", "billing.*", "--reason", "MAX_DELIVERIES_EXCEEDED", "--since", "2026-11-21T11:05:00+01:00"],
     {"b-max", "b-dead"}),
])
def test_dlq_list_filters_narrow_by_wildcard_reason_and_time(capsys, wh, filters, expected):
    doc = _json(capsys, "dlq", "list", "--warehouse", wh, *filters)
    assert {d["message_id"] for d in doc["dead_letters"]} == expected
    assert doc["matched"] == len(expected)


def test_dlq_list_table_shows_the_limit_and_the_total_matched(capsys, wh):
    out = _run(capsys, "dlq", "list", "--warehouse", wh, "--limit", "2")
    lines = out.splitlines()
    assert "8 matched, newest 2 shown" in lines[0]
    assert lines[1].split()[:3] == ["dead-lettered", "at", "message"]
    assert [line.split()[:5] for line in lines[2:]] == [
        [AS_OF, "b-dead", "billing.eu", "billing.dlq", "MAX_DELIVERIES_EXCEEDED"],
        [AS_OF, "b-max", "billing.eu", "billing.dlq", "MAX_DELIVERIES_EXCEEDED"]]


def test_dlq_show_prints_payload_headers_error_history_reason_and_deliveries(capsys, wh):
    out = _run(capsys, "dlq", "show", "--warehouse", wh, "b-dead")
    assert "dead letter b-dead" in out
    assert "dead-letter address  billing.dlq" in out
    assert "reason               MAX_DELIVERIES_EXCEEDED" in out
    assert "deliveries           3" in out
    assert "payload (8 bytes)\n    p-b-dead" in out
    history = out.split("error history (2, oldest first)\n")[1].splitlines()
    assert history[1].split()[:3] == ["2", "2026-11-21T10:00:00Z", "TimeoutError"]
    assert history[2].split() == ["3", AS_OF, "reprocess.targets.examples.TransientError", "downstream", "timed",
                                  "out", "on", "delivery", "3"]

    doc = _json(capsys, "dlq", "show", "--warehouse", wh, "o-val")
    assert (doc["payload"], doc["headers"], doc["reason_code"], doc["deliveries"]) == (
        MARKUP, {"x-note": "<i>hi</i>"}, "NON_RETRYABLE", 1)
    assert doc["error_history"] == [{"delivery": 1, "failed_at": "2026-11-21T10:01:00Z",
                                     "error_class": "com.acme.ValidationError", "error_message": "amount <0>"}]
    assert _json(capsys, "dlq", "show", "--warehouse", wh, "p-poison")["last_error_class"] == (
        "reprocess.targets.examples.PoisonMessage")


def test_dlq_show_of_an_unknown_or_waiting_message_fails_with_the_not_found_exit_code(capsys, wh):
    assert main(["dlq", "show", "--warehouse", wh, "no-such-id"]) == NotFoundError.exit_code == 10
    err = capsys.readouterr().err
    assert "not_found" in err
    assert "no message 'no-such-id'" in err
    assert main(["dlq", "show", "--warehouse", wh, "i-retry"]) == 10
    err = capsys.readouterr().err
    assert "'i-retry' is not a dead letter" in err
    assert "ledger state WAITING_RETRY, deliveries 2, next attempt 2026-11-21T10:10:00Z" in err
    assert main(["dlq", "show", "--warehouse", wh, "o-ok"]) == 10
    assert "ledger state DELIVERED, deliveries 2" in capsys.readouterr().err


def test_dlq_show_of_a_dead_lettered_row_without_a_dlq_record_says_the_ledger_and_the_dlq_disagree(capsys, wh,
                                                                                                     tmp_path):
    """A re-drive sets the ledger row waiting in the commit that moves its record, so a dead-lettered row without a
    DLQ record is a damaged warehouse: `dlq show` said it "was moved back by a re-drive or is missing"."""
    copy = tmp_path / "wh"
    shutil.copytree(wh, copy)
    w = Warehouse(copy)
    base = w.latest()
    w.commit(base, Snapshot(files={**base.files, "dlq": []}, runs=base.runs, as_of_ms=base.as_of_ms))
    assert main(["dlq", "show", "--warehouse", str(copy), "b-dead"]) == NotFoundError.exit_code
    err = capsys.readouterr().err
    assert "ledger state DEAD_LETTERED, deliveries 3; but it has no DLQ record: the ledger and the DLQ disagree" in err
    assert "no re-drive can select it" in err
    assert "moved back by a re-drive" not in err


def test_dlq_stats_counts_by_reason_by_address_and_by_day(capsys, wh):
    doc = _json(capsys, "dlq", "stats", "--warehouse", wh)
    assert doc["total"] == 8
    assert doc["by_reason"] == {"MAX_DELIVERIES_EXCEEDED": 4, "NON_RETRYABLE": 4}
    assert doc["by_address"] == {
        "billing.eu": {"MAX_DELIVERIES_EXCEEDED": 2},
        "orders.created": {"MAX_DELIVERIES_EXCEEDED": 1, "NON_RETRYABLE": 1},
        "payments.card": {"NON_RETRYABLE": 2},
        "inventory.stock": {"NON_RETRYABLE": 1},
        "orders.eu.paid": {"MAX_DELIVERIES_EXCEEDED": 1}}
    assert list(doc["by_address"]) == ["billing.eu", "orders.created", "payments.card", "inventory.stock",
                                       "orders.eu.paid"]  # most first, then by name
    assert doc["by_day"] == {"2026-11-21": {"MAX_DELIVERIES_EXCEEDED": 4, "NON_RETRYABLE": 4}}
    assert doc["by_dead_letter_address"] == {"billing.dlq": 2, "orders.created": 2, "payments.card": 2,
                                             "inventory.stock": 1, "orders.eu.paid": 1}
    assert [r["run_id"] for r in doc["latest_runs"]] == ["run-20261121T100500Z"]

    narrowed = _json(capsys, "dlq", "stats", "--warehouse", wh, "--address", "orders.#", "--reason",
                     "MAX_DELIVERIES_EXCEEDED")
    assert (narrowed["total"], narrowed["by_address"]) == (
        2, {"orders.created": {"MAX_DELIVERIES_EXCEEDED": 1}, "orders.eu.paid": {"MAX_DELIVERIES_EXCEEDED": 1}})
    rows = [line.split() for line in _run(capsys, "dlq", "stats", "--warehouse", wh).splitlines()]
    assert ["payments.card", "2", "0", "2"] in rows  # total, MAX_DELIVERIES_EXCEEDED, NON_RETRYABLE
    assert ["2026-11-21", "8", "4", "4"] in rows


def test_ledger_stats_counts_states_policies_deliveries_and_waiting_by_next_attempt_hour(capsys, wh):
    doc = _json(capsys, "ledger", "stats", "--warehouse", wh)
    assert doc["messages"] == 14
    assert doc["states"] == {"WAITING_RETRY": 4, "DELIVERED": 2, "DEAD_LETTERED": 8}
    assert doc["matches_last_run_summary"] is True
    assert {p: (v["profile"], v["total"], v["WAITING_RETRY"], v["DELIVERED"], v["DEAD_LETTERED"])
            for p, v in doc["policies"].items()} == {
        "orders.#": ("activemq", 5, 0, 2, 3), "inventory.#": ("stepped", 3, 2, 0, 1),
        "payments.#": ("exponential", 3, 1, 0, 2), "billing.*": ("artemis", 2, 0, 0, 2),
        "#": ("rocketmq", 1, 1, 0, 0)}
    assert {d["deliveries"]: d["messages"] for d in doc["deliveries"]} == {1: 4, 2: 4, 3: 2, 5: 1, 7: 2, 16: 1}
    waiting = doc["waiting"]
    assert (waiting["total"], waiting["overdue"]) == (4, 0)
    assert waiting["by_next_attempt_hour"] == {"2026-11-21T10:00:00Z": 3, "2026-11-21T12:00:00Z": 1}
    assert [o["message_id"] for o in waiting["oldest"]] == ["i-retry", "m-wait", "p-wait", "n-wait"]
    oldest = waiting["oldest"][0]
    assert (oldest["deliveries"], oldest["next_attempt_at"], oldest["age_ms"]) == (2, "2026-11-21T10:10:00Z", 300_000)
    assert waiting["oldest"][1]["next_attempt_at"] == "2026-11-21T12:03:00Z"
    out = _run(capsys, "ledger", "stats", "--warehouse", wh, "--oldest", "1")
    assert "WAITING_RETRY 4, DELIVERED 2, DEAD_LETTERED 8" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["i-retry", "inventory.stock", "2", "2026-11-21T10:00:00Z", "5m", "2026-11-21T10:10:00Z"] in rows
    assert ["#", "rocketmq", "1", "1", "0", "0"] in rows
    assert "m-wait" not in out


def test_operator_commands_name_what_is_wrong(capsys, tmp_path, wh):
    missing = str(tmp_path / "nowhere")
    assert main(["dlq", "list", "--warehouse", missing]) == ConfigError.exit_code == 3
    assert f"warehouse {missing} does not exist" in capsys.readouterr().err
    # a warehouse on a Hadoop URI: written through a Spark driver (tests/test_object_store.py, and over Spark Connect
    # tests/test_connect.py), read through pyarrow (tests/test_s3_readers.py); a reader given a scheme pyarrow cannot
    # open here refuses it by name, as a configuration error
    assert main(["dlq", "list", "--warehouse", "hdfs://namenode/wh"]) == 3
    assert ("warehouse hdfs://namenode/wh: a warehouse on hdfs:// can only be read through Spark"
            in capsys.readouterr().err)
    (tmp_path / "empty").mkdir()
    assert main(["ledger", "stats", "--warehouse", str(tmp_path / "empty")]) == 3
    assert "no committed snapshot" in capsys.readouterr().err
    assert main(["dlq", "stats", "--warehouse", wh, "--since", "2026-11-22", "--until", "2026-11-21"]) == 3
    assert "empty time range" in capsys.readouterr().err
    for bad, why in ((["--address", "orders..x"], "empty word"), (["--since", "yesterday"], "expected a date"),
                     (["--reason", "OOPS"], "invalid choice"), (["--limit", "0"], "must be >= 1")):
        with pytest.raises(SystemExit) as exc:
            main(["dlq", "list", "--warehouse", wh, *bad])
        assert exc.value.code == 2
        assert why in capsys.readouterr().err


def test_dead_letter_counts_take_an_empty_string_for_no_value_as_a_null(tmp_path):
    """The counts fold an empty error class, reason or original address into the placeholders as a null is (the
    Python loop's `or` did; pyarrow's fill_null alone let "" through as a key of its own)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reprocess.dlq_stats import dlq_stats

    root = Warehouse(tmp_path / "wh")
    rel = "dlq/address=x.dlq/dt=2026-11-21/part-0.parquet"
    (root.root / rel).parent.mkdir(parents=True)
    at = pa.array([parse_instant(AS_OF)] * 3, pa.timestamp("ms", tz="UTC"))
    pq.write_table(pa.table({"message_id": ["a", "b", "c"], "original_address": ["orders.x", "", None],
                             "reason_code": ["NON_RETRYABLE", "", None], "last_error_class": ["E", "", None],
                             "dead_lettered_at": at}), root.root / rel)
    root.commit(Snapshot(), Snapshot(files={"dlq": [rel]}, as_of_ms=parse_instant(AS_OF)))
    s = dlq_stats(str(root.root))
    assert s["by_reason"] == {"UNKNOWN": 2, "NON_RETRYABLE": 1}
    assert s["top_error_classes"] == [("(none)", 2), ("E", 1)]
    assert s["by_address"] == {"x.dlq": {"UNKNOWN": 2}, "orders.x": {"NON_RETRYABLE": 1}}
    # the report counts the keys of its own read of the same snapshot: the same counts, a filter is the read's
    from reprocess.dlq_stats import DlqFilter, dead_letter_keys, read_dead_letters
    from reprocess.storage.arrow import open_reader

    reader = open_reader(str(root.root))
    snap = reader.latest()
    keys = dead_letter_keys(read_dead_letters(reader, snap, None, None, newest_first=False))
    assert dlq_stats(str(root.root), snapshot=snap, keys=keys) == s
    with pytest.raises(ValueError, match="filtered by that read"):
        dlq_stats(str(root.root), snapshot=snap, keys=keys, where=DlqFilter(reasons=["NON_RETRYABLE"]))
    with pytest.raises(ValueError, match="with the snapshot"):
        dlq_stats(str(root.root), keys=keys)


def test_a_prepared_run_record_that_does_not_read_is_named_and_abandoned_with_force(capsys, tmp_path):
    """A prepared.json cut short or overwritten: `prepared list`, `prepared abandon` (the way out of a stuck run) and
    every cycle failed with a JSONDecodeError or KeyError traceback. It is the damaged warehouse's error naming the
    file and the way out; whether its re-drive finished cannot be read, so abandoning it takes --force."""
    root = Warehouse(tmp_path / "wh")
    root.root.mkdir()
    root.commit(Snapshot(), Snapshot(as_of_ms=parse_instant(AS_OF)))
    wh, run_id = str(root.root), "run-20261121T103000Z"
    record = root.root / "_runs" / run_id / "prepared.json"
    for damage in ("{", '{"run_id": "run-20261121T103000Z"}'):
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(damage, encoding="utf-8")
        assert main(["prepared", "list", "--warehouse", wh]) == 12
        err = capsys.readouterr().err
        assert f"{record} is not a readable prepared-run record" in err
        assert f"reprocess prepared abandon --force --warehouse <warehouse> {run_id}" in err
        assert "Traceback" not in err
        assert main(["prepared", "abandon", "--warehouse", wh, run_id]) == 12
        assert record.exists()
        capsys.readouterr()
        assert main(["prepared", "abandon", "--warehouse", wh, run_id, "--force"]) == 0
        assert json.loads(capsys.readouterr().out)["abandoned"]["run_id"] == run_id
        assert not record.parent.exists()
        assert _json(capsys, "prepared", "list", "--warehouse", wh)["prepared"] == []


def test_options_that_cannot_be_honoured_are_refused_by_argparse_not_a_traceback_or_a_hang(capsys, tmp_path):
    """An empty run --address filtered nothing (every due message re-driven); --lock-wait nan or inf waited for
    ever; bytes that are not UTF-8 failed later with a UnicodeEncodeError; a --limit past a C long overflowed in
    pyarrow; a schedule preview of an address the landing refuses, or of millions of deliveries, said nothing or
    took gigabytes; a connect-server --port past 65535 started a JVM that could not bind."""
    cases = [(["run", "--landing", "l", "--warehouse", "w", "--as-of", AS_OF, "--address", ""], "empty"),
             (["run", "--landing", "l", "--warehouse", "w", "--as-of", AS_OF, "--lock-wait", "nan"], "from 0 to"),
             (["prepared", "abandon", "--warehouse", "w", "run-20261121T103000Z", "--lock-wait", "-5"], "from 0 to"),
             (["dlq", "show", "--warehouse", "w", "m\udcff"], "is not valid UTF-8"),
             (["dlq", "list", "--warehouse", "w", "--limit", "99999999999999999999999"], "must be <="),
             (["schedule", "--address", "a..b"], "is not an address the landing takes"),
             (["schedule", "--address", "x", "--deliveries", "3000000"], "must be <= 100000"),
             (["connect-server", "--port", "99999"], "must be <= 65535")]
    for args, said in cases:
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 2, args
        assert said in capsys.readouterr().err, args


def test_generate_refuses_to_write_over_a_landing_or_outside_four_digit_years(capsys, tmp_path):
    """The same seed generated again into a landing wrote over its files, which a landed file never does (the cycle
    fails a run on one that changed); --out a file, or an unwritable one, was a traceback; --out '' wrote into the
    current directory; --start 0001 wrote dt=1-01-01 folders the cycle does not list, and years past 9999
    overflowed. Each is a configuration error, exit 3, nothing written."""
    land = tmp_path / "land"
    assert main(["generate", "--out", str(land), "--messages", "20", "--hours", "1"]) == 0
    files = sorted(land.rglob("*.jsonl"))
    before = [f.read_bytes() for f in files]
    capsys.readouterr()
    (tmp_path / "a-file").write_text("")
    for args, said in (([], "files it would write exist"),
                       (["--out", str(tmp_path / "a-file")], "is not a folder"),
                       (["--out", " "], "--out is empty"),
                       (["--out", "/proc/reprocess-not-here"], "cannot write under /proc/reprocess-not-here"),
                       (["--start", "0001-01-01T00:00:00Z"], "between the years 1000 and 9999"),
                       (["--start", "9999-12-31T23:00:00Z", "--hours", "5"], "between the years 1000 and 9999")):
        given = ["--out", str(land), *args] if not args or args[0] != "--out" else args
        assert main(["generate", "--messages", "20", "--hours", "1", *given]) == 3, args
        assert said in capsys.readouterr().err, args
    assert [f.read_bytes() for f in sorted(land.rglob("*.jsonl"))] == before
    assert main(["generate", "--out", str(land), "--messages", "20", "--hours", "1", "--seed", "8"]) == 0


def test_a_mistyped_private_files_setting_is_refused_not_taken_as_off(capsys, tmp_path, monkeypatch, wh):
    """REPROCESS_PRIVATE_FILES=maybe wrote the report, payload previews in it, readable by everyone."""
    monkeypatch.setenv("REPROCESS_PRIVATE_FILES", "maybe")
    assert main(["report", "--warehouse", wh, "--out", str(tmp_path / "r.html")]) == 3
    assert "REPROCESS_PRIVATE_FILES='maybe': expected 1, true, yes or on" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
    monkeypatch.setenv("REPROCESS_PRIVATE_FILES", " Off ")
    assert main(["report", "--warehouse", wh, "--out", str(tmp_path / "r.html")]) == 0


def test_a_committed_but_empty_warehouse_gives_zero_counts_and_a_report_without_data(capsys, tmp_path):
    root = Warehouse(tmp_path / "wh")
    root.root.mkdir()
    root.commit(Snapshot(), Snapshot(as_of_ms=parse_instant(AS_OF)))
    wh = str(root.root)
    assert _json(capsys, "dlq", "list", "--warehouse", wh)["matched"] == 0
    assert _json(capsys, "dlq", "stats", "--warehouse", wh)["total"] == 0
    assert _json(capsys, "ledger", "stats", "--warehouse", wh)["states"] == {
        "WAITING_RETRY": 0, "DELIVERED": 0, "DEAD_LETTERED": 0}
    assert main(["report", "--warehouse", wh, "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.count('<img class="plot"') == 6


def test_a_report_that_cannot_be_written_is_a_clear_error_and_leaves_no_file_behind(wh, tmp_path, capsys):
    """--out an existing folder, or under a file: a traceback (exit 1) before, and a failed rename left the
    temporary file, the dead letters' payload previews in it, beside the folder."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "a-file").write_text("")
    for out, why in ((tmp_path / "taken", "is a folder; give a file name"),
                     (tmp_path / "a-file" / "r.html", "cannot make its folder")):
        assert main(["report", "--warehouse", wh, "--out", str(out)]) == 3
        err = capsys.readouterr().err
        assert why in err
        assert str(out) in err
        assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "taken"]
    assert list((tmp_path / "taken").iterdir()) == []


def test_a_damaged_snapshot_file_is_named_not_a_traceback(wh, tmp_path, capsys):
    """The latest snapshot file cut short or overwritten outside reprocess (a commit creates it whole): every reader
    failed with a JSONDecodeError traceback (the UI with a bare 500). It is the damaged warehouse's error, exit 12,
    naming the file."""
    import shutil

    from reprocess.dlq_stats import dlq_stats
    from reprocess.errors import WarehouseDamagedError

    copy = tmp_path / "wh"
    shutil.copytree(wh, copy)
    latest = sorted((copy / "_snapshots").glob("*.json"))[-1]
    latest.write_bytes(latest.read_bytes()[:40])
    assert main(["dlq", "list", "--warehouse", str(copy)]) == WarehouseDamagedError.exit_code
    err = capsys.readouterr().err
    assert f"{latest} is not a readable snapshot (JSONDecodeError" in err
    assert "Traceback" not in err
    with pytest.raises(WarehouseDamagedError, match="is not a readable snapshot"):
        dlq_stats(str(copy))
    latest.unlink()
    latest.mkdir()  # a folder where the snapshot file was: IsADirectoryError, a traceback
    assert main(["dlq", "list", "--warehouse", str(copy)]) == WarehouseDamagedError.exit_code
    assert f"{latest} is a folder, not a snapshot" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=f"warehouse {tmp_path / 'nowhere'} does not exist"):
        dlq_stats(str(tmp_path / "nowhere"))


def test_instants_up_to_the_end_of_year_9999_are_taken_and_later_ones_refused_by_name(wh, capsys):
    """``--until 9999-12-31`` overflowed in argparse's conversion (a traceback), and an instant with a negative offset
    on that day was taken and failed later, when the filter or the re-drive's time was written as ISO-8601."""
    assert _json(capsys, "dlq", "list", "--warehouse", wh, "--until", "9999-12-31")["filter"]["until"] == \
        "9999-12-31T23:59:59.999Z"
    # a year before 1000 written with its four digits (strftime's %Y wrote "1-01-01", which is no ISO-8601)
    assert _json(capsys, "dlq", "list", "--warehouse", wh, "--since", "0001-01-01")["filter"]["since"] == \
        "0001-01-01T00:00:00Z"
    late, early = "9999-12-31T23:30:00-01:00", "0001-01-01T00:30:00+01:00"
    for args, said in ((["dlq", "stats", "--warehouse", wh, "--since", late], f"'{late}': it is after 9999-12-31"),
                       (["redrive", "--warehouse", wh, "--now", late, "--requested-by", "op"], "it is after 9999"),
                       (["dlq", "list", "--warehouse", wh, "--since", early], f"'{early}': it is before 0001-01-01"),
                       (["run", "--landing", wh, "--warehouse", wh, "--as-of", early], "it is before 0001-01-01")):
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert said in err
        assert "Traceback" not in err


@pytest.mark.unit
def test_a_basic_format_date_and_a_warehouse_that_is_a_file_are_named_as_what_they_are(tmp_path, capsys):
    """``--since 20261121`` was refused as an instant lacking an offset, and a --warehouse that is a file as one that
    does not exist."""
    from reprocess.ops import parse_time

    for text in ("20261121", "2026-W47-6"):
        with pytest.raises(ValueError, match="expected a date as YYYY-MM-DD"):
            parse_time(text)
    afile = tmp_path / "wh.txt"
    afile.write_text("not a warehouse")
    for args in (["dlq", "list"], ["dlq", "stats"], ["report", "--out", str(tmp_path / "r.html")]):
        assert main([*args, "--warehouse", str(afile)]) == ConfigError.exit_code, args
        assert f"warehouse {afile} is a file, not a warehouse folder" in capsys.readouterr().err, args


def test_a_redrive_request_the_cli_refuses_names_the_option_not_the_requests_field(wh, capsys):
    """``reprocess redrive --from 20261121`` said ``key=date_from``, a name the CLI has nowhere."""
    now = ["--warehouse", wh, "--now", "2026-11-21T10:00:00Z"]
    for args, said in ((["--from", "20261121"], "[key='--from'] expected a UTC day YYYY-MM-DD"),
                       (["--address", "orders.*x"], "[key='--address'] bad address pattern"),
                       (["--from", "2026-11-22", "--to", "2026-11-21"], "[key='--from'] the range"),
                       (["--rate", "nan"], "[key='--rate'] must be a number of messages per second")):
        assert main(["redrive", *now, *args]) == ConfigError.exit_code, args
        err = capsys.readouterr().err
        assert said in err, (args, err)


def test_operator_commands_never_load_pyspark(wh):
    code = ("import sys, contextlib, io\nfrom reprocess.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['dlq', 'list', '--warehouse', {wh!r}]) == 0\n"
            f"    assert main(['dlq', 'show', '--warehouse', {wh!r}, 'o-val']) == 0\n"
            f"    assert main(['ledger', 'stats', '--warehouse', {wh!r}]) == 0\n"
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.fixture(scope="module")
def report(wh, tmp_path_factory) -> tuple[str, str]:
    out = tmp_path_factory.mktemp("report") / "sub" / "report.html"
    assert main(["report", "--warehouse", wh, "--out", str(out)]) == 0
    return str(out), out.read_text(encoding="utf-8")


def test_report_is_one_self_contained_file_with_its_plots_and_escaped_values(report, wh):
    _, page = report
    assert page.count('<img class="plot"') == 6
    assert page.count("data:image/png;base64,") == 6
    assert "http://" not in page
    assert "https://" not in page
    assert "<script" not in page
    assert html.escape(MARKUP) in page
    assert "&lt;script&gt;alert(&quot;pwn&quot;)&lt;/script&gt;" in page
    assert f"Warehouse <code>{html.escape(wh)}</code>, snapshot 1, as of {AS_OF}" in page
    for title in ("Dead letters over time, by reason", "Dead letters over time, by original address",
                  "Deliveries per message, by state", "Schedule lateness per run (p50, p99)",
                  "Waiting messages by next-attempt hour"):
        assert f'alt="{title}"' in page
    assert "<td>billing.eu</td><td class=n>2</td>" in page
    assert "<td class=p>poison pill</td>" in page


def test_report_renders_in_headless_chromium_with_visible_plots(report, tmp_path):
    import numpy as np
    from PIL import Image

    chromium = shutil.which("chromium")
    assert chromium is not None, "chromium is not installed: run `make services` (dev/services.sh), as make test does"
    path, _ = report
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2000",
                    f"file://{path}"], capture_output=True, timeout=120, check=True)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape == (2000, 1200, 3)
    non_white = (img.sum(axis=2) < 720).mean()
    assert non_white > 0.03
    assert np.unique(img[..., 0] * 65536 + img[..., 1] * 256 + img[..., 2]).size > 50  # distinct colours

    def near(hex_color: str) -> int:
        rgb = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(img - rgb).max(axis=2) < 12).sum())

    # the bars of the dead-letter plots in their reason colours (a broken image would show none)
    assert near("#d9534f") > 500  # MAX_DELIVERIES_EXCEEDED
    assert near("#f0ad4e") > 500  # NON_RETRYABLE


def test_the_summary_of_an_as_of_is_its_cycles_not_a_re_drive_committed_at_the_same_as_of(tmp_path):
    """A DLQ re-drive is recorded at the as-of of the state it changed; the DAG's check of a cycle (read_summary,
    then check_outputs) must still get the cycle's summary, which has the conservation checks a re-drive's lacks."""
    from reprocess.orchestration import check_outputs, read_summary

    wh = Warehouse(tmp_path / "wh")
    wh.root.mkdir()
    t = parse_instant(AS_OF)
    cycle = {"run_id": "run-a", "as_of_ms": t, "summary": {"run_id": "run-a", "conservation": {"balance": True}}}
    redrive = {"run_id": "redrive-1", "kind": "redrive", "as_of_ms": t, "summary": {"moved": 3}}
    wh.commit(Snapshot(), Snapshot(runs=[cycle, redrive], as_of_ms=t))
    assert read_summary(str(wh.root), AS_OF) == cycle["summary"]
    assert check_outputs(read_summary(str(wh.root), AS_OF))["checked"]
    assert read_summary(str(wh.root), "2026-11-21T10:20:00Z") is None


@pytest.mark.unit
def test_dlq_stats_gives_a_re_drive_the_time_of_its_request(tmp_path):
    """A re-drive's summary (its audit) has requested_at, not as_of: `dlq stats` and the plugin's runs table showed
    no time for every re-drive."""
    from reprocess.dlq_stats import dlq_stats

    wh = Warehouse(tmp_path / "wh")
    wh.root.mkdir()
    t = parse_instant(AS_OF)
    cycle = {"run_id": "run-a", "as_of_ms": t, "summary": {"run_id": "run-a", "as_of": AS_OF, "due": 2}}
    redrive = {"run_id": "redrive-1", "kind": "redrive", "as_of_ms": t,
               "summary": {"moved": 3, "requested_at": "2026-11-21T10:30:00+00:00", "requested_by": "op",
                           "request": {"now_ms": parse_instant("2026-11-21T10:30:00Z")}}}
    wh.commit(Snapshot(), Snapshot(runs=[cycle, redrive], as_of_ms=t))
    runs = dlq_stats(str(wh.root))["latest_runs"]
    assert [(r["run_id"], r["as_of"], r["moved"]) for r in runs] == [
        ("redrive-1", "2026-11-21T10:30:00Z", 3), ("run-a", AS_OF, None)]


@pytest.mark.unit
def test_dlq_list_prints_a_message_id_whole_and_still_cuts_the_other_columns():
    """``dlq list`` cut ids past 48 characters with '…' (ActiveMQ's ``ID:host-port-ts-1:1:1:1:n`` often are), and the
    id copied from it into ``dlq show`` found no message."""
    from reprocess.ops_text import render_dead_letters

    long_id = "ID:broker-1.example.internal-" + "1234567890" * 5 + "-1:1:1:1:17"
    doc = {"warehouse": "wh", "snapshot": 1, "as_of": AS_OF, "filter": {}, "matched": 1, "shown": 1,
           "dead_letters": [{"dead_lettered_at": AS_OF, "message_id": long_id, "original_address": "a." * 40 + "b",
                             "dead_letter_address": "DLQ", "reason_code": "NON_RETRYABLE", "deliveries": 1,
                             "last_error_class": "E"}]}
    out = render_dead_letters(doc)
    assert f"  {long_id}  " in out
    assert "a." * 40 + "b" not in out  # the address is still cut, with its mark
    assert "…" in out


@pytest.mark.unit
def test_report_plots_keep_short_gaps_and_underscored_addresses_and_stay_in_utc_under_another_time_zone():
    """The retry-interval histogram's lowest edge was 0.001 of its unit: in hours, gaps under 3.6 s were not drawn.
    Matplotlib leaves labels starting with '_' out of a legend it collects: an address '_audit.q' had a colour and
    no name. The date axes followed matplotlib's configured time zone under axes labelled UTC."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from reprocess import report

    def axes():
        fig = Figure()
        FigureCanvasAgg(fig)
        return fig, fig.add_subplot()

    hour = 3_600_000
    _, ax = axes()
    # two messages: one failed at 0, 1 s, 2 s and 10 h later (given out of order), one twice at the same instant
    gaps = report.history_gaps([[{"failed_ms": 1000}, {"failed_ms": 0}, {"failed_ms": 2000 + 10 * hour},
                                 {"failed_ms": 2000}, {"failed_ms": None}], [{"failed_ms": 5}, {"failed_ms": 5}], None])
    assert sorted(gaps.tolist()) == [1000, 1000, 10 * hour]
    report._gaps(ax, gaps)
    assert sum(p.get_height() for p in ax.patches) == 3  # every gap drawn: two of 1 s, one of 10 h
    fig, ax = axes()
    t = parse_instant("2026-11-21T01:00:00Z")
    with matplotlib.rc_context({"timezone": "America/New_York"}):
        report._stacked_time(ax, [t, t + hour, t + 2 * hour], ["_audit.q", "orders.created", "orders.created"],
                             {"_audit.q": "#1f77b4", "orders.created": "#ff7f0e"}, "dead letters")
        fig.canvas.draw()
        ticks = [label.get_text() for label in ax.get_xticklabels()]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["_audit.q", "orders.created"]
    assert "01:00" in ticks, ticks  # UTC, as the bars are binned (New York's would be 20:00 the day before)
    assert "20:00" not in ticks, ticks


@pytest.mark.unit
def test_the_tables_and_the_plots_group_dead_letters_by_one_rule():
    """`dlq stats` and the report's plots took their groups from two copies of the rules; now from one function.
    An empty string says nothing, as a null does; a missing reason is UNKNOWN; a missing original address falls back
    to the dead-letter address, then '?'. A DLQ with no file yet has untyped columns and gives typed, empty keys."""
    import pyarrow as pa

    from reprocess.dlq_stats import dead_letter_keys

    t = parse_instant("2026-11-21T23:59:59.999Z")
    table = pa.table({  # as New York writes it: 18:59 there, the day before midnight in UTC
        "dead_lettered_at": pa.array([t, t, None, t], pa.timestamp("ms", tz="America/New_York")),
        "reason_code": ["NON_RETRYABLE", "", None, "EXPIRED"],
        "original_address": ["orders.created", "", None, None],
        "address": ["DLQ.orders", "billing.dlq", None, ""],
        "last_error_class": ["ValueError", None, "", "X"],
    })
    keys = dead_letter_keys(table).to_pydict()
    assert keys["reason"] == ["NON_RETRYABLE", "UNKNOWN", "UNKNOWN", "EXPIRED"]
    assert keys["address"] == ["orders.created", "billing.dlq", "?", "?"]
    assert keys["dla"] == ["DLQ.orders", "billing.dlq", "?", "?"]
    assert keys["error"] == ["ValueError", "(none)", "(none)", "X"]
    assert keys["day"] == ["2026-11-21", "2026-11-21", "?", "2026-11-21"]  # UTC, whatever the column's zone
    assert [None if a is None else int(a.timestamp() * 1000) for a in keys["at"]] == [t, t, None, t]
    untyped = dead_letter_keys(table.set_column(1, "reason_code", pa.nulls(4)))  # read_live's column of no file
    assert untyped["reason"].to_pylist() == ["UNKNOWN"] * 4
    empty = dead_letter_keys(pa.table({c: pa.array([], pa.null()) for c in (
        "dead_lettered_at", "reason_code", "original_address", "address", "last_error_class")}))
    assert empty.num_rows == 0
    assert empty.schema.field("reason").type == pa.string()
