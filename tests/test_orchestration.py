"""What the DAGs' tasks check before a Spark job starts: the as-of a form may ask for, a target a form may name."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reprocess.errors import ConfigError
from reprocess.orchestration import check_target_override, resolve_as_of

pytestmark = pytest.mark.unit

TRIGGERED = datetime(2026, 11, 21, 10, 20, tzinfo=UTC)


def test_the_as_of_is_the_override_else_the_interval_end_else_run_after():
    assert resolve_as_of("2026-11-21T10:15:00Z", None, TRIGGERED) == "2026-11-21T10:15:00Z"
    assert resolve_as_of("2026-11-21T11:20:00+01:00", None, TRIGGERED) == "2026-11-21T10:20:00Z"  # run_after itself
    assert resolve_as_of(None, datetime(2026, 11, 21, 10, 15, tzinfo=UTC), TRIGGERED) == "2026-11-21T10:15:00Z"
    assert resolve_as_of(None, None, TRIGGERED) == "2026-11-21T10:20:00Z"


def test_an_as_of_override_after_the_trigger_or_not_a_date_is_refused_as_configuration():
    """A mistyped year re-drove and dead-lettered messages before their time, and every scheduled run after it was
    refused as out of order; an impossible date (the form's pattern lets 2026-02-30 through) failed with a plain
    ValueError, which the task retried."""
    with pytest.raises(ConfigError, match=r"as-of 2027-11-21T10:15:00Z is later than the run was triggered "
                                          r"\(2026-11-21T10:20:00Z\)"):
        resolve_as_of("2027-11-21T10:15:00Z", None, TRIGGERED)
    with pytest.raises(ConfigError, match="bad as-of '2026-02-30T10:00Z'"):
        resolve_as_of("2026-02-30T10:00Z", None, TRIGGERED)
    # in the form's pattern, but outside a datetime's years in UTC: an OverflowError, which the task retried
    with pytest.raises(ConfigError, match=r"bad as-of '0001-01-01T00:00:00\+01:00': outside the years 1-9999"):
        resolve_as_of("0001-01-01T00:00+01:00", None, TRIGGERED)
    with pytest.raises(ConfigError, match="outside the years 1-9999"):
        resolve_as_of("9999-12-31T23:30-01:00", None, TRIGGERED)


def test_a_data_interval_that_ends_after_the_trigger_is_refused_as_the_override_is():
    """Airflow 3's form ("Data interval: manual") and REST API take a data interval for a run triggered now: its end
    was the as-of unchecked, so a run re-drove messages before their time, as an override that late would."""
    with pytest.raises(ConfigError, match=r"the data interval's end \(the as-of\) 2027-11-21T10:15:00Z is later than "
                                          r"the run was triggered \(2026-11-21T10:20:00Z\)") as info:
        resolve_as_of(None, datetime(2027, 11, 21, 10, 15, tzinfo=UTC), TRIGGERED)
    assert info.value.key == "data_interval_end"
    assert resolve_as_of(None, TRIGGERED, TRIGGERED) == "2026-11-21T10:20:00Z"  # a scheduled run's: at its run_after


def test_a_manual_run_ending_after_its_trigger_names_the_browser_clock():
    """Airflow's trigger form fills the logical date from the browser's clock as it opens, and a manual run's data
    interval ends at it: a browser clock ahead of the server's was refused with nothing to say why, to a user who
    typed nothing."""
    ahead = datetime(2026, 11, 21, 10, 20, 30, tzinfo=UTC)
    with pytest.raises(ConfigError, match=r"later than the run was triggered \(2026-11-21T10:20:00Z\).*browser's "
                                          r"clock.*with it cleared") as info:
        resolve_as_of(None, ahead, TRIGGERED, None, True)
    assert info.value.key == "data_interval_end"
    with pytest.raises(ConfigError) as info:  # a scheduled or backfill run's interval is the server's
        resolve_as_of(None, ahead, TRIGGERED)
    assert "browser" not in str(info.value)
    with pytest.raises(ConfigError) as info:  # an override is typed: no browser clock in it
        resolve_as_of("2026-11-21T10:20:30Z", None, TRIGGERED, None, True)
    assert "browser" not in str(info.value)
    assert resolve_as_of(None, datetime(2026, 11, 21, 10, 19, 58, tzinfo=UTC), TRIGGERED, None, True) == (
        "2026-11-21T10:19:58Z")  # the form's logical date, opened two seconds before the trigger


def test_an_address_or_requester_beginning_with_a_dash_reaches_the_job_as_a_value():
    """``-orders.created`` is a landing address and a valid pattern; passed as ``--address -orders.created`` argparse
    took it for an option, and the job (or the re-drive DAG's plan task) exited 2 on every try."""
    from reprocess.cli import build_parser
    from reprocess.orchestration import cycle_args, redrive_args, redrive_request

    run = build_parser().parse_args(["run", *cycle_args("/l", "/wh", "2026-11-21T10:15:00Z", None, None,
                                                        "-orders.created", False)])
    assert run.address_filter == "-orders.created"
    params = {"address_pattern": "-orders.#"}
    req = redrive_request(redrive_args("/wh", params, "2026-11-21T01:05:00Z", "-alice"))
    assert req.address_pattern == "-orders.#"
    assert build_parser().parse_args(["redrive", *redrive_args("/wh", params, "2026-11-21T01:05:00Z", "-alice")]
                                     ).requested_by == "-alice"


@pytest.mark.parametrize("target", [None, "", "outbox", "amqp://broker:5672/%2F?routing_key={address}",
                                    "stomp://user@broker:61613?destination=/queue/{address}"])
def test_a_target_override_without_credentials_is_accepted(target):
    check_target_override(target)


@pytest.mark.parametrize(("target", "why"), [
    ("amqp://x:${REPROCESS_AIRFLOW_PASSWORD}@elsewhere:5672/%2F", r"may not use \$\{VAR\}"),
    ("stomp://${USER_AND_PASSWORD}@broker:61613", r"may not use \$\{VAR\}"),
    ("amqp://u:secret@broker:5672/%2F", r"may not carry a password \(amqp://u:\*\*\*@broker:5672/%2F\)"),
    ("amqp://u:p@broker:notaport/", r"may not carry a password \(amqp://u:\*\*\*@broker:notaport/\)"),
    ("amqp://broker:notaport/", "Port could not be cast"),
    ("python:no_such_module_here:fn", "python:no_such_module_here:fn is not one this deployment allows"),
    ("python:builtins:len", "allows from a trigger form"),
    ("python:reprocess.targets.examples:always_ok", "allows from a trigger form"),  # delivers nothing, counts all
    ("kafka://broker:9092", "unknown target"),
    ("amqp://[broker", r"bad target override: Invalid IPv6 URL"),  # urlsplit's ValueError: a traceback, retried
    # a password holding '/' or '#' (urlsplit finds none: it passed as one without), masked in the error
    ("amqp://svc:Xk9/q#Tz@rabbit:5672/%2F", r"may not carry a password \(amqp://svc:\*\*\*@rabbit:5672/%2F\)"),
])
def test_a_target_override_with_a_variable_a_password_or_no_target_is_refused(target, why, monkeypatch):
    """Anyone who may trigger the DAG types the form's target: a ${VAR} in it was filled in by the Spark job from the
    deployment's environment (the Airflow admin password, the JWT secret) and sent to whatever host was typed; a
    literal password went into the task's arguments, log and XCom."""
    monkeypatch.delenv("REPROCESS_PYTHON_OVERRIDES", raising=False)  # the python targets: allowed by none
    monkeypatch.delenv("REPROCESS_TARGET", raising=False)
    with pytest.raises(ConfigError, match=why):
        check_target_override(target)


def test_a_python_target_override_names_a_function_the_deployment_allows_before_its_module_is_imported(
        monkeypatch, tmp_path):
    """A trigger form's python target was imported and called whatever it named: importing runs a module's code, and
    a function that takes a message and returns counts it delivered (python:builtins:len marked every due message
    delivered, sending none). The deployment lists what a form may name; its own target is always allowed."""
    module = tmp_path / "imported_once_named.py"
    module.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\ndef call(message):\n    pass\n",
                      encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("REPROCESS_PYTHON_OVERRIDES", raising=False)
    monkeypatch.setenv("REPROCESS_TARGET", "outbox")
    with pytest.raises(ConfigError, match="not one this deployment allows"):
        check_target_override("python:imported_once_named:call")
    assert not (tmp_path / "ran").exists()  # refused before the import
    for allowed in ("imported_once_named:call", "imported_once_named:*", "x:y, imported_once_*:c?ll"):
        monkeypatch.setenv("REPROCESS_PYTHON_OVERRIDES", allowed)
        check_target_override("python:imported_once_named:call")
    assert (tmp_path / "ran").exists()
    for nothing in ("", " , "):  # set but empty: none, as unset ...
        monkeypatch.setenv("REPROCESS_PYTHON_OVERRIDES", nothing)
        with pytest.raises(ConfigError, match=r"\(allowed: none\)"):
            check_target_override("python:reprocess.targets.examples:always_ok")
    monkeypatch.setenv("REPROCESS_TARGET", "python:reprocess.targets.examples:always_ok")  # ... but the deployment's
    check_target_override("python:reprocess.targets.examples:always_ok")
    with pytest.raises(ConfigError, match=r"allowed: reprocess.targets.examples:always_ok\)"):
        check_target_override("python:reprocess.targets.examples:always_fail")
    monkeypatch.setenv("REPROCESS_PYTHON_OVERRIDES", "imported_once_named:cal,IMPORTED_once_named:call")
    with pytest.raises(ConfigError, match="not one this deployment allows"):  # a pattern is matched whole, by case
        check_target_override("python:imported_once_named:call")


def test_a_literal_password_in_the_deployments_target_is_masked_in_the_task_logs():
    from airflow.sdk._shared.secrets_masker import redact

    from reprocess.spark_env import mask_target_password

    line = "Spark-Submit cmd: spark-submit ... --target amqp://svc:Tr0ub4dor-3@broker:5672/%2F"
    assert redact(line) == line
    mask_target_password("amqp://svc:Tr0ub4dor-3@broker:5672/%2F")
    mask_target_password("outbox")
    mask_target_password("amqp://broker:notaport/")
    assert redact(line) == "Spark-Submit cmd: spark-submit ... --target amqp://svc:***@broker:5672/%2F"
    # a password urlsplit cuts short at its '/', '#' or '?': the job refuses it, after the provider logged the command
    for spec, secret in (("amqp://svc:Xk9/q#Tz@rabbit/", "Xk9/q#Tz"), ("amqp://svc:pw?k=1@rabbit/", "pw?k=1"),
                         ("amqp://svc:pass%2Fword@rabbit/", "pass/word")):
        mask_target_password(spec)
        assert secret not in redact(f"--target {spec} and {secret}"), spec


def test_the_requester_of_a_redrive_is_the_authenticated_trigger_and_conf_only_says_for_whom():
    from reprocess.orchestration import requester

    assert requester("alice", None) == "alice"
    assert requester("alice", {"requested_by": "alice"}) == "alice"
    assert requester("mallory", {"requested_by": "alice"}) == "mallory (for alice)"  # taken alone before
    assert requester(None, {}) == "airflow"


def test_the_dags_redrive_request_is_the_one_the_job_parses_from_its_arguments():
    """The re-drive DAG's report reads the audit of the request its job makes: the same id from the same arguments,
    asked at the run's run_after (a retry the same request, another run a new one)."""
    from reprocess.cli import parse_instant
    from reprocess.orchestration import redrive_args, redrive_request
    from reprocess.redrive import RedriveRequest

    params = {"address_pattern": "orders.#", "date_from": "2026-11-20", "date_to": None,
              "reason_codes": ["NON_RETRYABLE"], "max_messages": 5, "rate_per_second": 2, "reset_deliveries": True}
    req = redrive_request(redrive_args("/wh", params, "2026-11-21T01:05:00Z", "alice"))
    assert req == RedriveRequest("orders.#", "2026-11-20", None, ("NON_RETRYABLE",), 5, 2.0, True,
                                 now_ms=parse_instant("2026-11-21T01:05:00Z"))
    assert req.request_id == redrive_request(redrive_args("/wh", params, "2026-11-21T01:05:00Z", "bob")).request_id
    assert req.request_id != redrive_request(redrive_args("/wh", params, "2026-11-28T01:05:00Z", "alice")).request_id


def test_a_dry_runs_note_says_so_when_it_shows_what_an_earlier_run_committed():
    from reprocess.orchestration import summary_markdown

    summary = {"run_id": "run-20261121T101500Z", "as_of": "2026-11-21T10:15:00Z", "ingested": 3, "quarantined": 0,
               "duplicates": 0, "due": 2, "delivered": 2, "rescheduled": 0, "waiting": 1,
               "dead_lettered": {"total": 0}, "lateness_ms": {"p50": 0, "p99": 0}, "conservation": {"balanced": True}}
    assert summary_markdown(None, "2026-11-21T10:15:00Z", True).startswith("**Dry run**")
    real = summary_markdown(summary, "2026-11-21T10:15:00Z", False)
    assert real.startswith("### reprocess run `run-20261121T101500Z`")
    dry = summary_markdown(summary, "2026-11-21T10:15:00Z", True)
    assert dry.startswith("**Dry run** as of `2026-11-21T10:15:00Z`: nothing re-driven, nothing committed. What an "
                          "earlier run committed at this as-of:")
    assert dry.endswith(real)


def test_the_dags_suite_check_counts_every_suite_and_names_one_a_suites_folder_lacks(tmp_path, monkeypatch):
    """The cycle DAG's pre-flight check loads every suite, the re-drive's too: a suites folder copied before they
    existed (REPROCESS_EXPECTATIONS) failed each re-drive after its staging, as exit 1, retried."""
    import json

    from reprocess.orchestration import check_landing_suite
    from reprocess.validation.suites import REDRIVE_SUITES, SUITES, load_suite

    counts = check_landing_suite()
    assert list(counts) == [*SUITES, *REDRIVE_SUITES]
    assert counts["redrive_run"] == len(load_suite("redrive_run")["expectations"]) == 7
    for name in SUITES:
        (tmp_path / f"{name}.json").write_text(json.dumps(load_suite(name)))
    monkeypatch.setenv("REPROCESS_EXPECTATIONS", str(tmp_path))
    with pytest.raises(ConfigError, match=f"GX suite 'redrive_ledger' is not in {tmp_path}"):
        check_landing_suite()


def test_a_runs_note_says_nothing_ran_when_its_as_of_was_committed_by_a_run_asked_otherwise():
    """A manual run at an as-of a run committed first, with another address filter or target, ran nothing; its note
    showed the earlier run's summary as its own. It now says so; a retry (asked the same) and a summary from before
    the filter was recorded are shown as they were."""
    from reprocess.orchestration import summary_markdown

    summary = {"run_id": "run-20261121T101500Z", "as_of": "2026-11-21T10:15:00Z", "ingested": 3, "quarantined": 0,
               "duplicates": 0, "due": 2, "delivered": 2, "rescheduled": 0, "waiting": 1,
               "dead_lettered": {"total": 0}, "lateness_ms": {"p50": 0, "p99": 0}, "conservation": {"balanced": True},
               "address_filter": None, "target": "amqp://app:***@mq:5672/orders"}
    at = "2026-11-21T10:15:00Z"
    plain = summary_markdown(summary, at, False)
    assert summary_markdown(summary, at, False, (None, "amqp://app:s3cret@mq:5672/orders")) == plain  # a retry
    other = summary_markdown(summary, at, False, ("orders.#", "amqp://app:s3cret@mq:5672/orders"))
    assert other == ("**Nothing ran**: not applied: this request's address filter orders.# (the committed run's: "
                     "none); the as-of was already committed, so nothing ran: ask at a later as-of. What the earlier "
                     "run committed at this as-of:\n\n" + plain)
    moved = summary_markdown(summary, at, False, (None, "outbox"))
    assert "target outbox (the committed run's: amqp://app:***@mq:5672/orders)" in moved
    assert "s3cret" not in other + moved
    old = {k: v for k, v in summary.items() if k != "address_filter"}  # committed before the filter was recorded
    assert summary_markdown(old, at, False, ("orders.#", "amqp://app:x@mq:5672/orders")) == summary_markdown(
        old, at, False)
    assert summary_markdown(summary, at, True, ("orders.#", "outbox")) == summary_markdown(summary, at, True)


def test_the_redrive_report_reads_its_own_request_and_the_run_log_when_its_audit_file_is_gone(tmp_path):
    import json

    from reprocess.orchestration import redrive_audit
    from reprocess.storage.commit import Snapshot, Warehouse, redrive_audit_path

    wh = Warehouse(tmp_path / "wh")
    for request_id, moved in (("redrive-a", 3), ("redrive-b", 0)):
        base = wh.latest()
        audit = {"request_id": request_id, "moved": moved}
        wh.write_bytes(redrive_audit_path(wh, request_id), json.dumps({**audit, "messages": []}).encode())
        wh.commit(base, Snapshot(files=base.files, runs=[*base.runs, {"run_id": request_id, "kind": "redrive",
                                                                     "summary": audit}]))
    wh.write_bytes(redrive_audit_path(wh, "redrive-c"), b'{"request_id": "redrive-c", "moved": 9}')  # never committed
    assert redrive_audit(str(wh.root), "redrive-a") == {"request_id": "redrive-a", "moved": 3, "messages": []}
    assert redrive_audit(str(wh.root), "redrive-c") is None
    (wh.root / "redrive_audit" / "redrive-b.json").unlink()
    assert redrive_audit(str(wh.root), "redrive-b") == {"request_id": "redrive-b", "moved": 0}


def test_a_run_that_was_not_a_dry_run_and_left_no_summary_fails_its_check():
    """check_outputs took a missing summary for a dry run's: with the Airflow worker reading another warehouse than
    the Spark job wrote (REPROCESS_WAREHOUSE differing between them), the check passed and the note said "Dry run"."""
    from reprocess.errors import ContractError
    from reprocess.orchestration import check_outputs

    assert check_outputs(None, True) == {"checked": False, "reason": "dry run: nothing committed"}
    with pytest.raises(ContractError, match="as of 2026-11-21T10:15:00Z in /mnt/wh.*REPROCESS_WAREHOUSE"):
        check_outputs(None, False, "as of 2026-11-21T10:15:00Z in /mnt/wh")


def test_the_same_redrive_asked_with_its_reasons_in_another_order_is_the_same_request():
    """The request id hashed the reason codes as given: asked again with them in another order, or one repeated, the
    same re-drive at the same now got another id and moved another batch."""
    from reprocess.redrive import RedriveRequest

    ids = {RedriveRequest(reason_codes=codes, max_messages=100, now_ms=1).request_id for codes in (
        ("NON_RETRYABLE", "NO_POLICY"), ("NO_POLICY", "NON_RETRYABLE"), ["NO_POLICY", "NON_RETRYABLE", "NO_POLICY"])}
    assert len(ids) == 1
    assert RedriveRequest(reason_codes=("NO_POLICY",), now_ms=1).request_id not in ids


def test_the_new_landing_of_symlinked_folders_and_files_is_listed_by_its_partitions(tmp_path):
    """The listing follows links and names files by their resolved path: a day folder, an hour folder or a file
    linked from outside the landing raised ValueError in this task (relative_to), so every scheduled run stopped
    there while `reprocess run` read the same landing."""
    from reprocess.orchestration import find_new_landing

    landing, elsewhere = tmp_path / "landing", tmp_path / "elsewhere"
    for folder in (landing / "dt=2026-11-21" / "hour=08", elsewhere / "day" / "hour=09", elsewhere / "hour"):
        folder.mkdir(parents=True)
    (landing / "dt=2026-11-21" / "hour=08" / "a.jsonl").write_text("{}\n", encoding="utf-8")
    (elsewhere / "day" / "hour=09" / "b.jsonl").write_text("{}\n", encoding="utf-8")
    (elsewhere / "hour" / "c.jsonl").write_text("{}\n", encoding="utf-8")
    (elsewhere / "d.jsonl").write_text("{}\n", encoding="utf-8")
    (landing / "dt=2026-11-20").symlink_to(elsewhere / "day")  # a linked day folder: its hour=09 inside
    (landing / "dt=2026-11-21" / "hour=10").symlink_to(elsewhere / "hour")  # a linked hour folder
    (landing / "dt=2026-11-21" / "hour=08" / "d.jsonl").symlink_to(elsewhere / "d.jsonl")  # a linked file
    (landing / "dt=2026-11-31" / "hour=01").mkdir(parents=True)  # no real date: quarantined by the run, named
    (landing / "dt=2026-11-31" / "hour=01" / "e.jsonl").write_text("{}\n", encoding="utf-8")
    found = find_new_landing(str(landing), str(tmp_path / "wh"), "2026-11-21T12:00:00Z")
    assert found["files"] == 5
    assert found["partitions"] == ["dt=2026-11-20/hour=09", "dt=2026-11-21/hour=08", "dt=2026-11-21/hour=10",
                                   "dt=2026-11-31/hour=01"]


def test_the_cycle_schedule_starts_on_the_grid_airflow_rounds_live_runs_onto(monkeypatch):
    """The cycle DAG does not catch up: after a pause Airflow's scheduler skips to the latest interval rounded on
    the interval's grid from the epoch (DeltaDataIntervalTimetable._round), while a backfill counts from the start.
    A start off that grid gave live runs and backfills different as-ofs; it fails the DAG's import now."""
    from datetime import timedelta

    from airflow.timetables.interval import DeltaDataIntervalTimetable  # the scheduler's, which skips

    from reprocess.spark_env import cycle_schedule

    for name in ("REPROCESS_INTERVAL_MINUTES", "REPROCESS_START_DATE", "REPROCESS_END_DATE"):
        monkeypatch.delenv(name, raising=False)
    assert cycle_schedule() == (timedelta(minutes=15), datetime(2026, 11, 21, tzinfo=UTC), None)
    monkeypatch.setenv("REPROCESS_START_DATE", "2026-11-21T05:00:00")  # no offset: UTC
    monkeypatch.setenv("REPROCESS_INTERVAL_MINUTES", "60")
    interval, start, _ = cycle_schedule()
    # on the grid, Airflow's rounding of any instant past the start is a boundary of the start's own grid
    later = datetime(2026, 12, 3, 17, 42, 9, tzinfo=UTC)
    rounded = DeltaDataIntervalTimetable(interval)._round(later, start).timestamp()
    assert (datetime.fromtimestamp(rounded, UTC) - start) % interval == timedelta(0)
    for env, says in [({"REPROCESS_INTERVAL_MINUTES": "7", "REPROCESS_START_DATE": "2026-11-21T00:00:00Z"},
                       "is 0:03:00 past the 0:07:00 grid"),
                      ({"REPROCESS_INTERVAL_MINUTES": "15", "REPROCESS_START_DATE": "2026-11-21T00:07:00Z"},
                       "is 0:07:00 past the 0:15:00 grid .* e.g. at 2026-11-21T00:00:00"),
                      ({"REPROCESS_INTERVAL_MINUTES": "60", "REPROCESS_START_DATE": "2026-11-21T00:00:00+05:30"},
                       "is 0:30:00 past the 1:00:00 grid"),
                      ({"REPROCESS_INTERVAL_MINUTES": "0"}, "not a whole number of minutes from 1 to"),
                      ({"REPROCESS_INTERVAL_MINUTES": "99999999999"}, "not a whole number of minutes from 1 to"),
                      ({"REPROCESS_INTERVAL_MINUTES": "1.5"}, "not a whole number of minutes"),
                      ({"REPROCESS_INTERVAL_MINUTES": "15", "REPROCESS_END_DATE": "tomorrow"},
                       "REPROCESS_END_DATE='tomorrow' \\(not ISO 8601\\) must be an ISO 8601 instant")]:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(ConfigError, match=says):
            cycle_schedule()
        monkeypatch.delenv("REPROCESS_END_DATE", raising=False)
        monkeypatch.setenv("REPROCESS_START_DATE", "2026-11-21T00:00:00Z")
    off = datetime(2026, 11, 21, 0, 7, tzinfo=UTC)  # what the rounding does off the grid: another grid
    rounded = DeltaDataIntervalTimetable(timedelta(minutes=15))._round(later, off).timestamp()
    assert (datetime.fromtimestamp(rounded, UTC) - off) % timedelta(minutes=15) == timedelta(minutes=8)


def test_a_backfill_off_the_interval_grid_is_refused_and_a_naive_start_is_in_airflows_timezone(monkeypatch):
    """A backfill counts its intervals from its own --from-date (TimeRestriction with catchup, _align_to_next of a
    delta returns it as is): one from 00:07 committed as-ofs 00:22, 00:37... which the live runs never take. Its
    first task refuses it, naming a from-date on the grid; scheduled and manual runs are not judged by the grid."""
    from datetime import timedelta

    from airflow.timetables.base import TimeRestriction
    from airflow.timetables.interval import DeltaDataIntervalTimetable

    grid = timedelta(minutes=15)
    off = datetime(2026, 11, 21, 0, 7, tzinfo=UTC)
    first = DeltaDataIntervalTimetable(grid).next_dagrun_info(
        last_automated_data_interval=None, restriction=TimeRestriction(off, None, True))
    assert first.data_interval.end.timestamp() == (off + grid).timestamp()  # what Airflow's backfill runs first
    end = off + grid
    with pytest.raises(ConfigError, match="0:07:00 past the 0:15:00 grid .* --from-date on the grid, e.g. "
                                          "2026-11-21T00:15:00Z"):
        resolve_as_of(None, end, TRIGGERED, grid)
    assert resolve_as_of(None, end, TRIGGERED) == "2026-11-21T00:22:00Z"  # not a backfill: as it is
    on = datetime(2026, 11, 21, 0, 30, tzinfo=UTC)
    assert resolve_as_of(None, on, TRIGGERED, grid) == "2026-11-21T00:30:00Z"
    assert resolve_as_of("2026-11-21T00:22:00Z", end, TRIGGERED, grid) == "2026-11-21T00:22:00Z"  # an override
    import pendulum  # the DAG's grid: the run's own interval, end - start of the context's pendulum DateTimes

    with pytest.raises(ConfigError, match="0:07:00 past the 0:15:00 grid"):
        resolve_as_of(None, end, TRIGGERED, pendulum.instance(end) - pendulum.instance(off))

    from reprocess.spark_env import cycle_schedule

    monkeypatch.setenv("AIRFLOW__CORE__DEFAULT_TIMEZONE", "Asia/Kolkata")
    monkeypatch.setenv("REPROCESS_START_DATE", "2026-11-21T05:30:00")  # 00:00 UTC, as Airflow takes it
    monkeypatch.delenv("REPROCESS_INTERVAL_MINUTES", raising=False)
    code = ("from reprocess.spark_env import cycle_schedule; print(cycle_schedule()[1].isoformat())")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "2026-11-21T00:00:00+00:00"
    monkeypatch.delenv("AIRFLOW__CORE__DEFAULT_TIMEZONE")
    assert cycle_schedule()[1] == datetime(2026, 11, 21, 5, 30, tzinfo=UTC)  # this process's Airflow: UTC
