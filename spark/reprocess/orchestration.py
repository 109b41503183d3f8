"""What the Airflow DAGs call: small, Airflow-free functions (the DAG files only declare).

Each raises :class:`reprocess.errors.ConfigError` or :class:`ContractError` for problems a retry
cannot fix; the DAGs turn those into ``AirflowFailException`` (no retry) and let everything else
(infrastructure) fail normally so Airflow retries.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reprocess.errors import FINAL_ERRORS, ConfigError, ContractError
from reprocess.landing.manifest import list_landing, local_root_problem, pending, read_manifest
from reprocess.policy.wildcard import validate_pattern
from reprocess.storage.arrow import open_reader
from reprocess.storage.commit import (
    KEEP_DATA_DOCS_ENV,
    docs_text,
    not_applied,
    not_applied_text,
    run_summary,
    with_docs_state,
)
from reprocess.targets.broker import redact
from reprocess.uris import local_path, remote_scheme

log = logging.getLogger(__name__)


def to_iso(value: Any) -> str:
    """A datetime (or ISO string) as ``2026-11-21T10:15:00Z``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:  # the form's pattern lets 2026-02-30 through
            raise ConfigError(f"bad as-of {value!r}: {exc}", key="as_of") from None
    if value.tzinfo is None:
        raise ConfigError(f"the as-of needs a timezone: {value!r}", key="as_of")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before year 1 in UTC: the form's pattern lets it through
        raise ConfigError(f"bad as-of {value.isoformat()!r}: outside the years 1-9999 in UTC", key="as_of") from None
    return utc.isoformat(timespec="milliseconds").replace(".000", "").replace("+00:00", "Z")


def resolve_as_of(override: str | None, data_interval_end: Any, run_after: Any,
                  backfill_grid: timedelta | None = None, manual: bool = False) -> str:
    """The run's "now": the form's override, else the data interval end, else the run's run_after.

    An override, or a data interval end, later than the run's ``run_after`` (when it was triggered; stored, so a
    retry decides alike) is refused: a mistyped year would re-drive and dead-letter messages before their time, and
    every scheduled run after it would be refused as out of order until that instant. A scheduled or backfill run's
    interval ends at its ``run_after``; a later end is one typed into the form's "Data interval" or the REST API's
    ``data_interval_end``.

    ``manual``, a run triggered by hand: Airflow's trigger form fills its logical date, whose instant ends the run's
    data interval, from the browser's clock when the form opens, and a browser clock ahead of the server's gives a
    data interval end later than the trigger; the refusal says so.

    ``backfill_grid``, the length of a backfill run's interval: it must end on that length's grid from the epoch,
    where the live runs end (:func:`reprocess.spark_env.cycle_schedule`). A backfill counts its intervals from its
    ``--from-date``, and one off the grid committed as-ofs the live runs never take."""
    if override:
        return _not_after_trigger(to_iso(override), run_after, "as-of", "as_of")
    if data_interval_end is not None:
        chosen = _not_after_trigger(to_iso(data_interval_end), run_after, "the data interval's end (the as-of)",
                                    "data_interval_end", _BROWSER_CLOCK if manual else "")
        if backfill_grid is not None:
            from reprocess.spark_env import off_grid

            backfill_grid = timedelta(seconds=backfill_grid.total_seconds())  # not pendulum's Interval of the two
            end = datetime.fromisoformat(chosen.replace("Z", "+00:00"))
            off = off_grid(end, backfill_grid)
            if off:
                raise ConfigError(
                    f"this backfill's interval ends at {chosen}, {off} past the {backfill_grid} grid counted from the "
                    "Unix epoch, where the live runs end: it would commit as-ofs the live runs never take. Create "
                    f"the backfill with a --from-date on the grid, e.g. {to_iso(end - off)}", key="data_interval_end")
        return chosen
    return to_iso(run_after)


_BROWSER_CLOCK = (". Airflow's trigger form fills the logical date (where the data interval ends) from the browser's "
                  "clock as the form opens: if nobody typed it, that clock is ahead of the server's. Trigger again "
                  "with an earlier logical date, or with it cleared (the REST API's logical_date null): the as-of is "
                  "then the trigger's time")


def _not_after_trigger(chosen: str, run_after: Any, what: str, key: str, hint: str = "") -> str:
    if run_after is not None and as_of_ms(chosen) > as_of_ms(to_iso(run_after)):
        raise ConfigError(f"{what} {chosen} is later than the run was triggered ({to_iso(run_after)}); a run "
                          f"cannot re-drive messages before their time{hint}", key=key)
    return chosen


def as_of_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def check_config(config: str | None) -> str:
    """Validate the policy file (or the embedded default); returns a one-line description."""
    from reprocess.cli import load_config

    policies = load_config(config)
    return f"{len(policies.policies)} policies from {policies.source}"


def check_address_filter(pattern: str | None) -> None:
    if pattern:
        why = validate_pattern(pattern)
        if why:
            raise ConfigError(f"bad address filter: {why}", key="address_filter")


def check_target_override(target: str | None) -> None:
    """A target typed into a trigger form, by anyone who may trigger the DAG: refused with a ``${VAR}`` (the driver
    fills it in from the deployment's environment, its secrets included, and would send one to whatever host was
    typed) or a password (it would be in the task's arguments, its log and XCom). A target that needs credentials is
    the deployment's: ``REPROCESS_TARGET`` or a policy's own, with its password as ``${VAR}``."""
    if not target:
        return
    from reprocess.targets.base import parse_target
    from reprocess.targets.broker import redact

    if "$" in target:
        raise ConfigError("a target override may not use ${VAR}: the Spark job would fill it in from the deployment's "
                          "environment and its secrets; set REPROCESS_TARGET or a policy's target instead",
                          key="target")
    from urllib.parse import urlsplit

    try:
        urlsplit(target)
    except ValueError as exc:  # urlsplit's own refusals ("amqp://[broker": Invalid IPv6 URL)
        raise ConfigError(f"bad target override: {exc}", key="target") from None
    shown = redact(target)  # also a password urlsplit cannot find ('/', '?' or '#' in it)
    if shown != target:  # (redact reads no port: a port that is not a number is parse_target's to name)
        raise ConfigError(f"a target override may not carry a password ({shown}): it would be in the run's "
                          "arguments and logs; set REPROCESS_TARGET or a policy's target, its password as ${VAR}",
                          key="target")
    if target.startswith("python:"):
        _check_python_override(target)
    parse_target(target)


PYTHON_OVERRIDES = "REPROCESS_PYTHON_OVERRIDES"


def python_overrides() -> list[str]:
    """The ``module:function`` patterns (``*``, ``?`` and ``[...]`` as in file names) a trigger form's python target
    may name: ``REPROCESS_PYTHON_OVERRIDES``, comma-separated (unset or empty: none), and the deployment's own python
    target (``REPROCESS_TARGET``). None by default: even the shipped examples hold ``always_ok``, which counts every
    message delivered and sends none."""
    raw = os.environ.get(PYTHON_OVERRIDES) or ""
    patterns = [p.strip() for p in raw.split(",") if p.strip()]
    deployment = os.environ.get("REPROCESS_TARGET") or ""
    if deployment.startswith("python:"):
        patterns.append(deployment.removeprefix("python:"))
    return patterns


def _check_python_override(target: str) -> None:
    """A python target typed into a trigger form names a function the deployment allows (:func:`python_overrides`),
    before anything imports its module: importing runs the module's code, and any function that takes a message and
    returns counts it delivered (``python:builtins:len`` would mark every due message delivered, sending none)."""
    from fnmatch import fnmatchcase

    name = target.removeprefix("python:")
    allowed = python_overrides()
    if not any(fnmatchcase(name, p) for p in allowed):
        raise ConfigError(f"the target override {target} is not one this deployment allows from a trigger form "
                          f"(allowed: {', '.join(allowed) or 'none'}); add its module:function to "
                          f"{PYTHON_OVERRIDES} (comma-separated patterns) or make it REPROCESS_TARGET", key="target")


def find_new_landing(landing: str, warehouse: str, as_of: str) -> dict[str, Any]:
    """Landing files this run will read (not yet ingested), without Spark.

    A landing URI (``s3a://``...) is listed by the Spark job alone, through its Hadoop ``FileSystem`` and
    connector jars; this task then only names the scheme."""
    scheme = remote_scheme(landing)
    if scheme is not None:
        return {"as_of": as_of, "files": None, "bytes": None, "partitions": [], "changed_files_ignored": [],
                "listed_by": f"the Spark job (landing on {scheme}://)"}
    root = local_path(landing)
    problem = local_root_problem(root)
    if problem:
        raise ContractError(f"landing root {landing} {problem}")
    wh = open_reader(warehouse)
    manifest = read_manifest(wh.live_files("manifest"), wh.read_source)
    files, changed = pending(list_landing(landing, as_of_ms(as_of)), manifest, as_of_ms(as_of))
    return {"as_of": as_of, "files": len(files), "bytes": sum(f.size for f in files),
            "partitions": sorted({_partition(f.path, f.hour_start_ms, root.resolve()) for f in files}),
            "changed_files_ignored": changed}


def _partition(path: str, hour_start_ms: int, root: Path) -> str:
    """``dt=.../hour=...`` of a listed local file: the hour the listing placed it in (by the names of the folders it
    was found under, ``dt=YYYY-MM-DD/hour=HH``, which a symlinked folder or file keeps while its resolved path may lie
    elsewhere: taking that path relative to the root raised there, and failed every run). A folder that is no real
    date or hour (start 0) is named by its path below the root."""
    if hour_start_ms:
        return datetime.fromtimestamp(hour_start_ms / 1000, UTC).strftime("dt=%Y-%m-%d/hour=%H")
    parent = Path(path).parent
    return str(parent.relative_to(root)) if parent.is_relative_to(root) else "/".join(parent.parts[-2:])


def lock_wait_seconds() -> str:
    """How long a DAG's Spark job waits for another writer of the warehouse (``$REPROCESS_LOCK_WAIT``, default
    1800 s): a scheduled cycle and a re-drive triggered by hand queue behind each other instead of failing."""
    return os.environ.get("REPROCESS_LOCK_WAIT", "1800")


def cycle_args(landing: str, warehouse: str, as_of: str, config: str | None, target: str | None,
               address_filter: str | None, dry_run: bool) -> list[str]:
    """The arguments of ``reprocess run`` for this DAG run, as the task that computes them returns them (an XCom,
    kept in Airflow's database and shown in its UI). ``target`` is the form's override, which carries no password
    (:func:`check_target_override`); the deployment's own, which may, is added by the task that runs the job
    (:func:`with_target`), so it is never in an XCom."""
    args = ["--landing", landing, "--warehouse", warehouse, "--as-of", as_of, "--format", "json",
            "--lock-wait", lock_wait_seconds()]
    keep = os.environ.get(KEEP_DATA_DOCS_ENV, "").strip()
    if keep:  # as an argument: a driver in cluster mode gets only the arguments, not the worker's environment
        args += ["--keep-data-docs", keep]
    if config:
        args += ["--config", config]
    if target:
        args += ["--target", target]
    if address_filter:
        args.append(f"--address={address_filter}")  # one argument: an address may begin with '-'

    if dry_run:
        args.append("--dry-run")
    return args


def with_target(args: list[str], target: str) -> list[str]:
    """``args`` as the Spark job gets them: with ``--target target`` unless they carry the form's own. Added where
    the job starts, not in :func:`cycle_args`: a literal password in ``REPROCESS_TARGET`` then stays out of the
    XCom, and the logs that show the command mask it (:func:`reprocess.spark_env.mask_target_password`)."""
    return list(args) if "--target" in args else [*args, "--target", target]


def read_summary(warehouse: str, as_of: str) -> dict[str, Any] | None:
    """The committed summary of the run as of ``as_of`` (None for a dry run, which commits nothing)."""
    wh = open_reader(warehouse)
    runs = wh.latest().runs_at(as_of_ms(as_of))  # the last: a follow-up after a target outage
    if not runs:
        return None
    summary = run_summary(wh, runs[-1])
    return None if summary is None else with_docs_state(wh, runs[-1], summary)


def check_outputs(summary: dict[str, Any] | None, dry_run: bool = False, where: str = "") -> dict[str, Any]:
    """Fail (a bug, not bad luck) when a committed run does not balance, or when a run that was not a ``dry_run``
    left no summary in the warehouse read (``where``: which, for the message)."""
    if summary is None:
        if not dry_run:  # it was taken for a dry run and passed, the run's note saying "Dry run"
            raise ContractError(f"the job finished but no run is committed {where or 'at this as-of'}: does the "
                                "Airflow worker read the warehouse the Spark job writes (REPROCESS_WAREHOUSE on both)?")
        return {"checked": False, "reason": "dry run: nothing committed"}
    broken = [k for k, ok in summary["conservation"].items() if not ok]
    if broken:
        raise ContractError(f"run {summary['run_id']} committed but does not balance: {broken}")
    validation = summary.get("validation")
    if validation is None:
        log.warning("run %s committed without the GX gate (validation turned off)", summary["run_id"])
    else:
        log.info("GX suites passed: %s; Data Docs: %s", validation["suites"], docs_text(validation))
    return {"checked": True, "conservation": summary["conservation"], "validation": validation}


def check_landing_suite() -> dict[str, int]:
    """The landing suite (expectations/landing.json) compiles to row checks: a broken suite stops the run
    before any work, with the expectation it cannot honour."""
    from reprocess.validation.rowchecks import check_suite
    from reprocess.validation.suites import LANDING_COLUMNS, REDRIVE_SUITES, SUITES, landing_params, load_suite

    check_suite(load_suite("landing"), dict.fromkeys(LANDING_COLUMNS), landing_params(1, 1))  # type: ignore[arg-type]
    return {name: len(load_suite(name)["expectations"]) for name in (*SUITES, *REDRIVE_SUITES)}


def summary_markdown(summary: dict[str, Any] | None, as_of: str, dry_run: bool,
                     asked: tuple[str | None, str] | None = None) -> str:
    """A short Markdown note for the DAG run. A dry run at an as-of a run has committed shows that run's summary
    (read_summary finds it) under a line saying so: it was shown as this run's results. ``asked``: this DAG run's
    address filter and run target; when the committed run's differ, this one ran nothing (its as-of was already
    committed, by a run asked otherwise), and a line says so above the summary, which was shown as its own."""
    dry = f"**Dry run** as of `{as_of}`: nothing re-driven, nothing committed."
    if summary is None:
        return dry
    dl = summary["dead_lettered"]
    reasons = ", ".join(f"{k} {v}" for k, v in dl.items() if k != "total" and v)
    diff = not_applied(summary, asked[0], redact(asked[1])) if asked is not None and not dry_run else {}
    return "\n".join([
        *([dry + " What an earlier run committed at this as-of:", ""] if dry_run else []),
        *([f"**Nothing ran**: {not_applied_text(diff)}. What the earlier run committed at this as-of:", ""]
          if diff else []),
        f"### reprocess run `{summary['run_id']}` as of `{summary['as_of']}`",
        "",
        "| ingested | quarantined | duplicates | due | delivered | rescheduled | dead-lettered | waiting |",
        "|---|---|---|---|---|---|---|---|",
        f"| {summary['ingested']} | {summary['quarantined']} | {summary['duplicates']} | {summary['due']} | "
        f"{summary['delivered']} | {summary['rescheduled']} | {dl['total']} | {summary['waiting']} |",
        "",
        f"Dead letters by reason: {reasons or 'none'}. Lateness p50 {summary['lateness_ms']['p50']} ms, "
        f"p99 {summary['lateness_ms']['p99']} ms. Conservation: "
        + ("OK" if all(summary["conservation"].values()) else "**BROKEN**") + ".",
        *([f"GX suites passed ({', '.join(summary['validation']['suites'])}); Data Docs: "
           + (f"`{summary['validation']['data_docs']}`." if summary["validation"]["data_docs"]
              else docs_text(summary["validation"]) + ".")] if summary.get("validation") else []),
    ])


def set_run_note(dag_id: str, run_id: str, note: str) -> bool:
    """Put ``note`` on the DAG run through Airflow's REST API (a task cannot set it through the Task SDK).

    Uses ``REPROCESS_AIRFLOW_API`` (e.g. http://localhost:8080) and ``REPROCESS_AIRFLOW_USER`` /
    ``REPROCESS_AIRFLOW_PASSWORD``; without them (``dag.test()``) it logs why and returns False.
    """
    import os
    import urllib.error
    import urllib.parse
    import urllib.request

    base = os.environ.get("REPROCESS_AIRFLOW_API")
    user, password = os.environ.get("REPROCESS_AIRFLOW_USER"), os.environ.get("REPROCESS_AIRFLOW_PASSWORD")
    if not (base and user and password):
        log.info("run note not set: REPROCESS_AIRFLOW_API/USER/PASSWORD are not configured")
        return False

    def call(method: str, path: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
        req = urllib.request.Request(base.rstrip("/") + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")

    try:
        token = call("POST", "/auth/token", {"username": user, "password": password})["access_token"]
        path = f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
        call("PATCH", path, {"note": note[:1000]}, token)
    except (OSError, urllib.error.URLError, KeyError, ValueError) as exc:
        log.warning("run note not set: %s", exc)
        return False
    return True


def requester(triggering_user: str | None, conf: Any) -> str:
    """Who asked for a re-drive, for its audit: the user Airflow authenticated as the run's trigger. A
    ``requested_by`` in the run's conf, which whoever triggers may write, is recorded only beside it, as whom they
    asked for (it was taken alone before, so anyone could record another person)."""
    who = str(triggering_user or "airflow")
    asked_for = (conf or {}).get("requested_by")
    return f"{who} (for {asked_for})" if asked_for and str(asked_for) != who else who


def redrive_args(warehouse: str, params: dict[str, Any], now: str, requested_by: str) -> list[str]:
    """The arguments of ``reprocess redrive`` from the re-drive DAG's params."""
    # --x=value: an address, or a user's name, may begin with '-', which argparse would read as an option
    args = ["--warehouse", warehouse, f"--address={params.get('address_pattern') or '#'}", "--now", now,
            f"--requested-by={requested_by}", "--lock-wait", lock_wait_seconds()]
    if params.get("date_from"):
        args += ["--from", params["date_from"]]
    if params.get("date_to"):
        args += ["--to", params["date_to"]]
    for reason in params.get("reason_codes") or []:
        args += ["--reason", reason]
    if params.get("max_messages"):
        args += ["--max", str(int(params["max_messages"]))]
    if params.get("rate_per_second"):
        args += ["--rate", str(float(params["rate_per_second"]))]
    if params.get("reset_deliveries"):
        args.append("--reset-deliveries")
    return args


def run_on_connect(command: str, args: list[str], remote: str) -> None:
    """Run ``reprocess <command> <args>`` as a client of the Spark Connect server ``remote`` in a child process,
    its output in this task's log. The URL (it may carry a token) goes to the child in its environment, never on
    its command line. Exit codes 3, 4, 5, 8, 9 and 12 (a bad option, a broken contract, books that do not balance,
    an as-of before the last committed one, a failed GX gate, a damaged warehouse) raise what no retry can fix
    (reprocess.errors.FINAL_ERRORS); any other failure raises ``RuntimeError``, which the task's retries take."""
    import subprocess
    import sys

    from reprocess.sparkutil import REMOTE_ENV

    cmd = [sys.executable, "-m", "reprocess.cli", command, *args]
    log.info("running on Spark Connect: reprocess %s %s", command, " ".join(args))
    with subprocess.Popen(cmd, env={**os.environ, REMOTE_ENV: remote}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.info("%s", line.rstrip())
    for error, says in FINAL_ERRORS.items():
        if proc.returncode == error.exit_code:
            raise error(f"reprocess {command} {says} (exit {proc.returncode}): see the log above")
    if proc.returncode:
        raise RuntimeError(f"reprocess {command} failed with exit code {proc.returncode}: see the log above")


def redrive_audit(warehouse: str, request_id: str) -> dict[str, Any] | None:
    """The audit record of the re-drive request ``request_id`` once committed, else None. (The newest audit file,
    shown before, could be another request's: a request already applied writes none, and an attempt stopped between
    its audit and its commit leaves one.) A committed request whose audit file is gone (removed by hand) gives what
    the run log keeps of it, as the re-drive itself does."""
    from reprocess.storage.commit import redrive_audit_path

    wh = open_reader(warehouse)
    entry = next((r for r in wh.latest().runs if r.get("run_id") == request_id), None)
    if entry is None:
        return None
    path = redrive_audit_path(wh, request_id)
    if wh.exists(path):
        return dict(json.loads(wh.read_bytes(path).decode("utf-8")))
    return dict(entry.get("summary") or {"request_id": request_id, "moved": None})


def redrive_request(args: list[str]) -> Any:
    """The :class:`reprocess.redrive.RedriveRequest` that ``reprocess redrive <args>`` makes (its id names its audit
    record), parsed as the job parses them."""
    from reprocess.cli import build_parser, redrive_request_of

    return redrive_request_of(build_parser().parse_args(["redrive", *args]))
