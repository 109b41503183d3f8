"""The ``reprocess`` command line.

    reprocess schedule --config FILE --address A [--address B ...] [--deliveries N]
                       [--message-id ID] [--format table|json]
    reprocess run | generate | redrive ...                       (Spark jobs; see --help)
    reprocess connect-server | jvm-archive                        (the long-lived driver; the driver's class archive)
    reprocess dlq list|show|stats, ledger stats, report ...       (operator commands, no Spark)
    reprocess prepared list|abandon ...                           (not committed runs; abandon at a URI: Spark)

Exit codes come from the error classes in :mod:`reprocess.errors`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from reprocess.errors import ConfigError, ReprocessError
from reprocess.ledger.states import REASON_CODES
from reprocess.limits import MAX_COUNT
from reprocess.policy import PolicySet, load_policies, parse_policies, schedule
from reprocess.policy.durations import human
from reprocess.policy.reference import has_jitter, max_deliveries

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "embedded default (reprocess/resources/policies.yaml)"


def load_config(path: str | None) -> PolicySet:
    """The policy file at ``path``, or the embedded default when ``path`` is None."""
    if path is None:
        text = resources.files("reprocess").joinpath("resources/policies.yaml").read_text(encoding="utf-8")
        return parse_policies(text, source="<embedded policies.yaml>")
    return load_policies(path)


def _whole_number(text: str, least: int, most: int = MAX_COUNT) -> int:
    """A whole number from ``least`` to ``most`` (past a C long, pyarrow and Spark overflowed with a traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    if value > most:
        raise argparse.ArgumentTypeError(f"must be <= {most}, got {value}")
    return value


SCHEDULE_ROWS = 100_000  # the deliveries a schedule preview lists at most


def _seconds(text: str) -> float:
    """A finite number of seconds, 0 or more (``nan`` and ``inf`` waited for ever; a negative one said nothing)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or value > 366 * 86_400:
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0 to a year, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def _positive_int(text: str) -> int:
    return _whole_number(text, 1)


def _port(text: str) -> int:
    """A TCP port, 1 to 65535 (99999 was taken, and the server failed to bind after its JVM had started)."""
    return _whole_number(text, 1, 65_535)


def _line_cap(text: str) -> int:
    from reprocess.landing.long_lines import MAX_MAX_LINE_BYTES, MIN_MAX_LINE_BYTES

    value = _positive_int(text)
    if not MIN_MAX_LINE_BYTES <= value <= MAX_MAX_LINE_BYTES:
        raise argparse.ArgumentTypeError(f"must be between {MIN_MAX_LINE_BYTES} and {MAX_MAX_LINE_BYTES}, got {value}")
    return value


def _retention_days(text: str) -> float | None:
    """``--keep-data-docs``: days (a fraction is fine), or ``all`` for no removal (None)."""
    from reprocess.storage.commit import KEEP_DATA_DOCS_ENV, check_data_docs_days

    if text.strip().lower() == "all":
        return None
    try:
        value = float(text)
        check_data_docs_days(value)
    except (ValueError, ConfigError):
        source = f" (from ${KEEP_DATA_DOCS_ENV})" if os.environ.get(KEEP_DATA_DOCS_ENV, "").strip() == text else ""
        raise argparse.ArgumentTypeError(f"expected a number of days above 0 or 'all', got {text!r}{source}") from None
    return value


def build_parser() -> argparse.ArgumentParser:
    from reprocess.storage.commit import DATA_DOCS_DAYS, KEEP_DATA_DOCS_ENV

    parser = argparse.ArgumentParser(
        prog="reprocess",
        description="Give failed messages a second life: broker-exact retry schedules, a retry ledger on Spark, "
        "re-drive and dead-letter partitions.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    exit_codes = _exit_codes()  # the epilog of each command that runs Spark work
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "schedule",
        help="preview what happens after each failed delivery on given addresses (no Spark)",
        description="Show, for each address, the policy that applies and what happens after each failed "
        "delivery: retry after a delay, or dead-letter. Stops at the first dead letter or after --deliveries.",
        epilog="example: reprocess schedule --address orders.created --address billing.eu --format json",
    )
    p.add_argument("--config", metavar="FILE", help=f"policy file (YAML); default: {DEFAULT_CONFIG}")
    p.add_argument("--address", metavar="A", action="append", required=True, type=_address,
                   help="original destination of the message; repeat for several")
    p.add_argument("--deliveries", metavar="N", default=20,
                   type=lambda text: _whole_number(text, 1, SCHEDULE_ROWS),
                   help=f"show failed deliveries 1..N at most (default: 20, at most {SCHEDULE_ROWS:,}: 3 million took "
                        "48 s and 4 GB)")
    p.add_argument("--message-id", metavar="ID",
                   help="compute the exact jittered delays of this message (jitter is seeded by id and delivery; "
                   "default: the delays of message id '')")
    p.add_argument("--consumer-group", metavar="GROUP",
                   help="the messages' consumer group: the policy of that group where one matches the address "
                   "(consumer_group: in the policy file), and its name in a dead-letter address "
                   "(dead_letter_address: '%%DLQ%%{consumer_group}')")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    p.set_defaults(func=cmd_schedule)
    _add_policies_commands(sub)

    r = sub.add_parser(
        "run",
        help="run one reprocessing cycle as of a point in time (Spark)",
        description="Ingest new landing files, merge failures into the retry ledger, re-drive every message due "
        "at --as-of through the target, reschedule or dead-letter the ones that fail, and commit everything "
        "atomically. Re-running the same --as-of is a no-op; a crashed run is resumed by the next call.",
        epilog="examples:\n  reprocess run --landing landing/ --warehouse wh/ --as-of 2026-11-21T10:15:00Z "
        "--target python:reprocess.targets.examples:flaky\n\n" + exit_codes,
        formatter_class=_ExamplesFormatter,
    )
    r.add_argument("--landing", metavar="DIR|URI", required=True,
                   help="landing root (dt=YYYY-MM-DD/hour=HH/*.jsonl): a directory, or a Hadoop filesystem URI "
                        "(s3a://, gs://, abfss://, hdfs://) that Spark's connector jars can read")
    r.add_argument("--warehouse", metavar="DIR|URI", required=True, help=WAREHOUSE_HELP)
    r.add_argument("--config", metavar="FILE", help=f"policy file (YAML); default: {DEFAULT_CONFIG}")
    r.add_argument("--as-of", metavar="ISO8601", required=True, type=parse_instant,
                   help="the run's 'now', e.g. 2026-11-21T10:15:00Z (Airflow passes the data interval end)")
    r.add_argument("--target", metavar="SPEC", default="outbox",
                   help="where due messages go: 'outbox' (default), 'python:module:function', 'amqp://...' or "
                        "'stomp://...' (README: Re-drive targets)")
    r.add_argument("--address", metavar="PATTERN", dest="address_filter", type=_pattern,
                   help="only re-drive due messages whose address matches this wildcard (e.g. 'orders.#'); an "
                        "empty one is refused, as the DAG's form refuses it (it filtered nothing)")
    r.add_argument("--dry-run", action="store_true", help="compute and report, re-drive nothing, commit nothing")
    r.add_argument("--max-payload-bytes", metavar="N", type=_positive_int, default=1 << 20,
                   help="larger payloads are quarantined (default: 1048576)")
    r.add_argument("--max-future-ms", metavar="MS", type=_positive_int, default=24 * 3600 * 1000,
                   help="a failed_at more than MS after the as-of (a clock ahead) is quarantined at the file's first "
                        "read, one within it waits for the as-of that reaches it (default: 86400000, a day)")
    r.add_argument("--max-line-bytes", metavar="N", type=_line_cap, default=32 << 20,
                   help="a landing line of N bytes or more (its line end included) is quarantined as "
                        "RECORD_TOO_LARGE without being read into memory; its file and byte offset are in the "
                        "reason (default: 33554432, 32 MiB)")
    r.add_argument("--keep-data-docs", metavar="DAYS|all", type=_retention_days,
                   default=os.environ.get(KEEP_DATA_DOCS_ENV, "").strip() or f"{DATA_DOCS_DAYS:g}",
                   help="remove the GX Data Docs (runs/<run_id>/data_docs, about 300 KB a run) of runs whose as-of "
                        "is more than DAYS before this run's; their summaries stay; 'all' keeps every run's "
                        f"(default: ${KEEP_DATA_DOCS_ENV}, else {DATA_DOCS_DAYS:g}; the DAGs' runs take the variable)")
    _add_writer_options(r)
    _add_spark_options(r)
    r.add_argument("--format", choices=("text", "json"), default="text", help="summary format (default: text)")
    r.set_defaults(func=cmd_run)

    g = sub.add_parser(
        "generate",
        help="write realistic landing data (skewed addresses, transient/poison errors, duplicates, bad lines)",
        description="Write failed-message records into OUT/dt=YYYY-MM-DD/hour=HH/, deterministic for a seed.",
    )
    g.add_argument("--out", metavar="DIR", required=True, help="landing root to write into")
    g.add_argument("--messages", metavar="N", type=_positive_int, default=1000,
                   help="distinct messages (default 1000)")
    g.add_argument("--start", metavar="ISO8601", type=parse_instant, default=parse_instant("2026-11-21T00:00:00Z"),
                   help="first failure time (default 2026-11-21T00:00:00Z)")
    g.add_argument("--hours", metavar="H", type=_positive_int, default=3,
                   help="failures spread over H hours (default 3)")
    g.add_argument("--seed", metavar="S", type=int, default=7, help="random seed (default 7)")
    g.add_argument("--format", dest="fmt", choices=("jsonl", "jsonl.gz", "parquet"), default="jsonl",
                   help="file format (default jsonl)")
    g.add_argument("--malformed", metavar="N", type=_non_negative_int, default=4,
                   help="malformed records to add (default 4): lines that break the contract, or in Parquet rows "
                        "that do (no id or failure time, a bad timestamp or delivery count)")
    g.set_defaults(func=cmd_generate)

    from reprocess.spark_env import JVM_ARCHIVE_ENV, default_jvm_archive

    j = sub.add_parser(
        "jvm-archive",
        help="record the classes a cycle's driver JVM loads, so later drivers start faster (Spark, ~1 min)",
        description="Run three small cycles in a temporary folder and record the classes their driver JVM "
        "loaded into a class-data-sharing archive. Cycle and re-drive drivers started afterwards (the DAGs' "
        "spark-submit and this CLI) map it instead of loading those classes from the jars, which saves a few "
        "seconds of every run. The archive only fits the JDK and the Spark jars it was made with: make venv "
        "re-creates it, and a driver given a stale one warns once on stderr and runs without it.",
        epilog=f"The drivers use ${JVM_ARCHIVE_ENV} if set (empty: no archive), else {default_jvm_archive()}."
        " Example: reprocess jvm-archive",
    )
    j.add_argument("--out", metavar="FILE", default=str(default_jvm_archive()),
                   help=f"the archive to write (replaced atomically; default: {default_jvm_archive()})")
    j.set_defaults(func=cmd_jvm_archive)

    from reprocess.connect_server import DEFAULT_PORT, TOKEN_ENV

    c = sub.add_parser(
        "connect-server",
        help="run one long-lived Spark driver that serves every cycle over Spark Connect (Spark, until stopped)",
        description="Start Spark's Connect server from this venv with the settings every cycle needs. Cycles "
        "and re-drives given --remote (or $REPROCESS_SPARK_REMOTE, or the DAGs with REPROCESS_SPARK=connect) run "
        "as its clients, each in a session of its own, and skip the start-up and JIT warm-up a fresh driver pays "
        "on every run. It listens on loopback by default and runs until stopped (SIGTERM).",
        epilog=f"With ${TOKEN_ENV} set, clients must present that token (they read the same variable; over "
        "loopback connect to sc://localhost:PORT, where a token needs no TLS). Example: reprocess connect-server "
        "--port 15002 --driver-memory 8g",
    )
    c.add_argument("--port", metavar="PORT", type=_port, default=DEFAULT_PORT,
                   help=f"gRPC port (default {DEFAULT_PORT})")
    c.add_argument("--host", metavar="ADDRESS", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the server runs any code a client sends: "
                   "expose it only with a token behind TLS)")
    c.add_argument("--master", metavar="URL", default="local[*]", help="Spark master of the server (default local[*])")
    c.add_argument("--driver-memory", metavar="SIZE",
                   help="driver heap (default $REPROCESS_DRIVER_MEMORY, else the deployment's $SPARK_DRIVER_MEMORY or "
                   "spark.driver.memory in spark-defaults.conf, else 2g)")
    c.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[],
                   help="extra Spark setting for the server (repeatable)")
    c.add_argument("--print-command", action="store_true", help="print the spark-submit command and exit")
    c.set_defaults(func=cmd_connect_server)

    d = sub.add_parser(
        "redrive",
        help="move dead letters back into the ledger as due (with an audit record)",
        description="Move the DLQ records matching the filters back into the retry ledger, due from --now on "
        "(spread at --rate messages per second), and write an audit record to <warehouse>/redrive_audit/. "
        "The same request (the same filters at the same --now) applied twice moves nothing the second time.",
        epilog="examples:\n  reprocess redrive --warehouse wh/ --address 'orders.#' --reason MAX_DELIVERIES_EXCEEDED "
        "--now 2026-11-22T09:00:00Z --rate 50\n\n" + exit_codes,
        formatter_class=_ExamplesFormatter,
    )
    d.add_argument("--warehouse", metavar="DIR|URI", required=True, help=WAREHOUSE_HELP)
    d.add_argument("--address", metavar="PATTERN", default="#", help="original-address wildcard (default '#': all)")
    d.add_argument("--from", dest="date_from", metavar="YYYY-MM-DD", help="dead-lettered on or after this UTC day")
    d.add_argument("--to", dest="date_to", metavar="YYYY-MM-DD", help="dead-lettered on or before this UTC day")
    d.add_argument("--reason", dest="reasons", action="append", default=[],
                   choices=REASON_CODES,
                   help="only these reason codes (repeatable; default all)")
    d.add_argument("--max", dest="max_messages", metavar="N", type=_positive_int, help="move at most N messages")
    d.add_argument("--rate", metavar="PER_SECOND", type=float,
                   help="due times spaced at this rate (messages/s), the oldest dead letter first")
    d.add_argument("--reset-deliveries", action="store_true", help="restart the delivery count at 0")
    d.add_argument("--now", metavar="ISO8601", type=parse_instant, required=True,
                   help="the request's 'now' (Airflow passes the run's run_after, stored: a retry is the same request)")
    d.add_argument("--requested-by", metavar="WHO", default="cli", help="recorded in the audit (default cli)")
    _add_writer_options(d)
    _add_spark_options(d)
    d.set_defaults(func=cmd_redrive)
    _add_operator_commands(sub)
    _add_prepared_commands(sub)
    return parser


def _add_spark_options(p: argparse.ArgumentParser) -> None:
    """Where a Spark command runs: a driver of its own (``--master``) or a Connect server's session (``--remote``)."""
    from reprocess.sparkutil import REMOTE_ENV

    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", metavar="URL", help="Spark master of a driver of its own (default: $SPARK_MASTER "
                       "or local[*])")
    where.add_argument("--remote", metavar="sc://HOST:PORT",
                       help=f"run as a client of a long-lived Spark Connect server (reprocess connect-server) "
                       f"instead (default: ${REMOTE_ENV}, if set)")


def _add_writer_options(p: argparse.ArgumentParser) -> None:
    """The options of the commands that write the warehouse (``run``, ``redrive``)."""
    p.add_argument("--lock-wait", metavar="SECONDS", type=_seconds, default=0.0,
                   help="wait this long for another writer to release the warehouse (default: fail at once)")
    p.add_argument("--private-files", action=argparse.BooleanOptionalAction, default=None,
                   help="write the warehouse owner-only (files 0600, directories 0700): payloads may hold personal "
                   "data (default: $REPROCESS_PRIVATE_FILES, else off)")


# -- operator commands: the latest committed snapshot read with pyarrow, no Spark (reprocess.ops, reprocess.report)

_OPS_NOTE = ("Reads the latest committed snapshot of the warehouse with pyarrow (no Spark): answers in about "
             "a second and never sees a half-written run.")


def _address(text: str) -> str:
    """An address as the landing contract takes it (limits.ADDRESS_WORDS): a preview of one it quarantines says
    nothing."""
    import re

    from reprocess.limits import ADDRESS_WORDS

    if not re.fullmatch(ADDRESS_WORDS, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an address the landing takes (dot-separated words: no "
                                         "empty word, whitespace, '/' or '\\')")
    return text


def _pattern(text: str) -> str:
    from reprocess.policy.wildcard import validate_pattern

    why = validate_pattern(text)
    if why:
        raise argparse.ArgumentTypeError(f"{why} (words separated by '.', '*' one word, '#' any number)")
    return text


def _since(text: str) -> int:
    from reprocess.ops import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _until(text: str) -> int:
    from reprocess.ops import parse_time

    try:
        return parse_time(text, end_of_day=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _exit_codes() -> str:
    """The exit codes, from the table of :mod:`reprocess.errors` (code, exit code and meaning of each error)."""
    import re

    from reprocess import errors

    rows = re.findall(r'code="(\w+)"[ \t]+exit (\d+)[ \t]+([^\n]+)', errors.__doc__ or "")
    lines = ["exit codes:", "  0   done, or already committed", "  1   an unexpected error: a bug (its traceback)"]
    lines += [f"  {number:<3} {code}: {meaning.strip()}" for code, number, meaning in rows]
    lines.append("  (2 is also a command line that does not parse: an unknown option, a value of the wrong form)")
    return "\n".join(lines)


class _ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description; keeps each example of the epilog on its own line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


WAREHOUSE_HELP = ("warehouse root (ledger, dlq, outbox, ...): a directory, or a Hadoop filesystem URI (s3a://...) "
                  "whose store does conditional writes, with --master or --remote "
                  "(docs/adr/0005-warehouse-on-object-storage.md)")


def _ops_parser(sub: Any, name: str, help_: str, description: str, examples: str,
                note: str = _OPS_NOTE) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help_, description=f"{description} {note}", epilog="examples:\n" + examples,
        formatter_class=_ExamplesFormatter)
    p.add_argument("--warehouse", metavar="DIR|URI", required=True,
                   help="warehouse root (holds _snapshots/): a directory, or s3a://, s3://, gs://, abfss:// (read "
                        "through pyarrow; credentials and endpoint from AWS_*, GOOGLE_APPLICATION_CREDENTIALS, "
                        "AZURE_STORAGE_*, e.g. AWS_ENDPOINT_URL for an S3-compatible store)")
    return p


def _format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")


def _dlq_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", metavar="PATTERN", type=_pattern,
                   help="original address wildcard: 'orders.#', '*.created', 'billing.eu' (default: all)")
    p.add_argument("--reason", dest="reasons", metavar="CODE", action="append", default=[], choices=REASON_CODES,
                   help=f"reason code, repeatable: {', '.join(REASON_CODES)} (default: all)")
    p.add_argument("--since", metavar="DATE", type=_since,
                   help="dead-lettered at or after: a UTC day (2026-11-21) or an instant (2026-11-21T10:00:00Z)")
    p.add_argument("--until", metavar="DATE", type=_until,
                   help="dead-lettered before this instant, or on or before this UTC day (2026-11-21 includes "
                   "the whole day)")


def _add_operator_commands(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="inspect dead letters: list, show, stats (no Spark)",
                         description="Inspect the dead letters of a warehouse. " + _OPS_NOTE)
    dsub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="SUBCOMMAND")
    p = _ops_parser(dsub, "list", "dead letters, newest first, with filters", "List dead letters, newest first.",
                    "  reprocess dlq list --warehouse wh/ --address 'orders.#' --reason NON_RETRYABLE\n"
                    "  reprocess dlq list --warehouse wh/ --since 2026-11-21 --until 2026-11-22 --limit 200 "
                    "--format json")
    _dlq_filter_args(p)
    p.add_argument("--limit", metavar="N", type=_positive_int, default=50,
                   help="show at most N dead letters (default: 50); the total matched is always reported")
    _format_arg(p)
    p.set_defaults(func=cmd_dlq_list)

    p = _ops_parser(dsub, "show", "one dead letter in full (payload, headers, error history)",
                    "Show one dead letter in full: payload, headers, error history, reason, deliveries, policy. "
                    f"Exits with {_not_found_exit()} (not_found) when the message is not a dead letter, "
                    "saying where it is if the ledger holds it.",
                    "  reprocess dlq show --warehouse wh/ m-42\n"
                    "  reprocess dlq show --warehouse wh/ m-42 --format json")
    p.add_argument("message_id", metavar="MESSAGE_ID", help="the message id (as the consumer landed it)")
    _format_arg(p)
    p.set_defaults(func=cmd_dlq_show)

    p = _ops_parser(dsub, "stats", "dead letters counted by reason, by address, by day",
                    "Count dead letters by reason, by original address and reason, by day of dead-lettering "
                    "(UTC), and the top error classes.",
                    "  reprocess dlq stats --warehouse wh/\n"
                    "  reprocess dlq stats --warehouse wh/ --address 'payments.#' --since 2026-11-01 --format json")
    _dlq_filter_args(p)
    _format_arg(p)
    p.set_defaults(func=cmd_dlq_stats)

    ledger = sub.add_parser("ledger", help="inspect the retry ledger: stats (no Spark)",
                            description="Inspect the retry ledger of a warehouse. " + _OPS_NOTE)
    lsub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="SUBCOMMAND")
    p = _ops_parser(lsub, "stats", "messages per state and policy, deliveries, waiting messages by next attempt",
                    "Count ledger messages per state and per policy, the distribution of deliveries, waiting "
                    "messages by the hour of their next attempt (and how many are overdue at the snapshot's "
                    "as-of), and the oldest waiting messages.",
                    "  reprocess ledger stats --warehouse wh/\n  reprocess ledger stats --warehouse wh/ --format json")
    p.add_argument("--oldest", metavar="N", type=_positive_int, default=5,
                   help="list the N oldest waiting messages (default: 5)")
    _format_arg(p)
    p.set_defaults(func=cmd_ledger_stats)

    p = _ops_parser(sub, "report", "write one self-contained HTML report with plots (no Spark, no network)",
                    "Write a single HTML file (plots embedded as PNG, no external resource) about the latest "
                    "snapshot: dead letters by reason and by address over time, deliveries per message, schedule "
                    "lateness per run, waiting messages by next attempt, realised retry intervals, and summary "
                    "tables.",
                    "  reprocess report --warehouse wh/ --out reports/reprocess.html",
                    note="Reads the latest committed snapshot with pyarrow (no Spark) and draws with matplotlib's "
                    "Agg canvas (no display); every record value is HTML-escaped.")
    p.add_argument("--out", metavar="FILE.html", required=True,
                   help="the HTML file to write (replaced atomically; parent folders are created)")
    p.add_argument("--newest", metavar="N", type=_positive_int, default=20,
                   help="list the N newest dead letters (default: 20)")
    p.add_argument("--private-files", action=argparse.BooleanOptionalAction, default=None,
                   help="write the report owner-only (0600): it previews payloads "
                   "(default: $REPROCESS_PRIVATE_FILES, else off)")
    p.set_defaults(func=cmd_report)


def _add_policies_commands(sub: Any) -> None:
    policies = sub.add_parser("policies", help="policy files from a broker's configuration: import (no Spark)",
                              description="Policy files from a broker's own configuration.")
    psub = policies.add_subparsers(dest="policies_command", required=True, metavar="SUBCOMMAND")
    p: argparse.ArgumentParser = psub.add_parser(
        "import", help="an Artemis broker.xml's address settings, or an ActiveMQ Classic activemq.xml's redelivery "
        "plugin, as a policy file",
        description="Write a broker's redelivery configuration as a policy file. An Artemis broker.xml: one "
        "artemis policy per <address-setting>, in the broker.xml's order (it decides ties, as in the broker), with "
        "its redelivery and dead-letter settings (redelivery-delay, redelivery-delay-multiplier, "
        "max-redelivery-delay, redelivery-collision-avoidance-factor, max-delivery-attempts, dead-letter-address). "
        "Settings left out merge from less specific policies as Artemis merges them. Other elements (paging, expiry, "
        "auto-creation) are named on stderr and not carried over, unchecked. A carried-over value the broker "
        "would not start with or a policy file cannot hold, an element misspelling one of them, a ${...} "
        "property in one, a literal or fully qualified match, or a non-default wildcard syntax is a "
        "configuration error. XIncludes are followed (relative to the including file; Artemis resolves them against "
        "its working directory). An ActiveMQ Classic activemq.xml (one with a <broker> of "
        "http://activemq.apache.org/schema/core): one activemq policy per queue entry of its <redeliveryPlugin>, "
        "'>' written '#', its default entry as '#', dead letters to the queue of the deadLetterStrategy of the "
        "<policyEntry> ActiveMQ takes for each queue; where ActiveMQ's choice of entry or dead-letter queue for a "
        "queue differs from the policy file's precedence, a more specific policy is added so that every queue takes "
        "what ActiveMQ gives it, and where ActiveMQ picks at random (its comparison is not an order) a warning names "
        "the choice made. Topic entries are not carried over; what ActiveMQ would discard is kept and said; Spring "
        "beans and #references are refused. An ActiveMQ Classic client's own redelivery policy, which its broker URL "
        "sets (jms.redeliveryPolicy.*), with --client URL, or its jndi.properties, with --client FILE. A RocketMQ "
        "broker.conf (a properties file): its messageDelayLevel, read as the broker reads it, as one '#' rocketmq "
        "policy (maxReconsumeTimes is each consumer's own: -1 is written, to set). A RocketMQ 5 subscriptionGroup."
        "json (the broker's store/config one, or `mqadmin exportMetadata -g`'s): each consumer group's "
        "retryMaxTimes and groupRetryPolicy, as its gRPC clients follow them, as a policy of that group.",
        epilog="examples:\n  reprocess policies import etc/broker.xml --out policies.yaml\n"
        "  reprocess policies import etc/broker.xml --property artemis.instance.etc=/var/lib/broker/etc\n"
        "  reprocess policies import conf/activemq.xml --out policies.yaml\n"
        "  reprocess policies import --client 'failover:(tcp://mq1:61616,tcp://mq2:61616)?"
        "jms.redeliveryPolicy.maximumRedeliveries=3' conf/activemq.xml\n"
        "  reprocess policies import --client app/jndi.properties --factory ConnectionFactory\n"
        "  reprocess policies import conf/broker.conf --out policies.yaml\n"
        "  reprocess policies import store/config/subscriptionGroup.json --out policies.yaml\n"
        "  reprocess schedule --config policies.yaml --address orders.eu.created",
        formatter_class=_ExamplesFormatter)
    p.add_argument("broker_xml", metavar="BROKER_XML", nargs="?",
                   help="the broker's configuration: Artemis's broker.xml, ActiveMQ Classic's activemq.xml or "
                   "RocketMQ's broker.conf or subscriptionGroup.json")
    p.add_argument("--client", metavar="URL|FILE",
                   help="an ActiveMQ Classic client's broker URL (tcp://mq:61616?jms.redeliveryPolicy."
                   "maximumRedeliveries=3) or its jndi.properties file: its redelivery policy, read as "
                   "ActiveMQConnectionFactory (or ActiveMQInitialContextFactory) reads it, as one '#' policy; with an "
                   "activemq.xml (one without a redelivery plugin), dead letters go where its policy entries send "
                   "them, else to ActiveMQ.DLQ. Passwords in it are not written out")
    p.add_argument("--factory", metavar="NAME",
                   help="with a jndi.properties --client: the connection factory whose policy to import (needed "
                   "where its factories' policies differ)")
    p.add_argument("--out", metavar="FILE",
                   help="the policy file to write (replaced atomically; refused if it exists, unless --force); "
                   "default: standard output")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--property", metavar="KEY=VALUE", type=_property, action="append", default=[],
                   help="a system property of the broker, for ${KEY} in the file (repeatable; ${KEY:default} "
                   "takes its default without one; Spring's placeholders in an activemq.xml alike)")
    p.add_argument("--max-invisible", metavar="DURATION", type=_duration_arg,
                   help="with a subscriptionGroup.json: the RocketMQ proxy's maxInvisibleTimeMills, the longest nack "
                   "it takes (default 12h; 0: no limit); a group that is not FIFO with a longer delay is refused, as "
                   "its messages would not wait it")
    p.set_defaults(func=cmd_policies_import)


def _duration_arg(text: str) -> int:
    """A duration: ``12h``, ``90s``, or milliseconds (``43200000``); ``0`` alone is 0, which means no limit."""
    from reprocess.policy.durations import parse_duration_ms

    plain = text.strip()
    try:
        ms = parse_duration_ms(int(plain) if plain.isascii() and plain.isdigit() else plain)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms == 0 and any(c in "123456789" for c in plain):
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1 ms: give 0 for no limit")
    return ms


def _property(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def cmd_policies_import(args: argparse.Namespace) -> int:
    from reprocess.policy.classic_import import import_activemq_client, import_activemq_xml, is_activemq_xml
    from reprocess.policy.importer import import_broker_xml
    from reprocess.policy.rocketmq_groups import MAX_INVISIBLE_MS, import_subscription_groups
    from reprocess.policy.rocketmq_import import file_kind, import_rocketmq_conf

    kind = None if args.broker_xml is None else file_kind(args.broker_xml)
    if args.max_invisible is not None and kind not in ("json", "unreadable"):  # an unreadable file: said below
        raise ConfigError("--max-invisible goes with a RocketMQ subscriptionGroup.json")
    if args.client is not None:
        if args.broker_xml is not None and not is_activemq_xml(args.broker_xml):
            raise ConfigError("--client goes with an ActiveMQ Classic activemq.xml (for its dead-letter strategies), "
                              "not an Artemis broker.xml or a RocketMQ broker.conf", file=args.broker_xml)
        imported: Any = import_activemq_client(args.client, args.broker_xml, dict(args.property), args.factory)
    elif args.factory is not None:
        raise ConfigError("--factory goes with a jndi.properties --client")
    elif args.broker_xml is None:
        raise ConfigError("give BROKER_XML, or --client URL|FILE for an ActiveMQ Classic client's redelivery policy")
    elif kind in ("json", "properties"):
        if args.property:
            raise ConfigError("--property is for ${KEY} in an XML configuration; a RocketMQ "
                              f"{'subscriptionGroup.json' if kind == 'json' else 'broker.conf'} has none",
                              file=args.broker_xml)
        if kind == "json":
            imported = import_subscription_groups(args.broker_xml, MAX_INVISIBLE_MS if args.max_invisible is None
                                                  else args.max_invisible)
        else:
            imported = import_rocketmq_conf(args.broker_xml)
    else:
        read = import_activemq_xml if is_activemq_xml(args.broker_xml) else import_broker_xml
        imported = read(args.broker_xml, dict(args.property))
    if args.out is None:
        sys.stdout.write(imported.text)
    else:
        from reprocess.files import publish_file

        publish_file(Path(args.out), imported.text, replace=args.force)
    sys.stderr.write(imported.summary() + (f"\nwrote {args.out}" if args.out else "") + "\n")
    return 0


_PREPARED_NOTE = ("The next cycle resumes a prepared run first; a DLQ re-drive waits until it has. Listing needs "
                  "no Spark; abandoning a run of a warehouse at a URI (s3a://...) writes through a Spark driver, as "
                  "the cycle does (--master, --remote).")


def _add_prepared_commands(sub: Any) -> None:
    prepared = sub.add_parser("prepared", help="runs that persisted their deliveries and did not commit: list, "
                              "abandon", description="Prepared runs: runs that persisted their "
                              "deliveries and did not commit. " + _PREPARED_NOTE)
    psub = prepared.add_subparsers(dest="prepared_command", required=True, metavar="SUBCOMMAND")
    p: argparse.ArgumentParser = psub.add_parser(
        "list", help="the prepared runs, oldest first, with their targets and how far their re-drive got",
        description="List the prepared runs, oldest first: as-of, due messages, targets (passwords masked) and how "
        "far the re-drive got (not finished, some targets done, or finished: then a resume sends nothing again). "
        + _PREPARED_NOTE, epilog="examples:\n  reprocess prepared list --warehouse wh/\n"
        "  reprocess prepared list --warehouse wh/ --format json", formatter_class=_ExamplesFormatter)
    p.add_argument("--warehouse", metavar="DIR|URI", required=True, help="warehouse root (a directory or a URI)")
    _format_arg(p)
    p.set_defaults(func=cmd_prepared_list)
    p = psub.add_parser(
        "abandon", help="forget a prepared run that cannot be resumed; the next cycle does its work again",
        description="Forget a prepared run that cannot be resumed (its target's password gone, a target "
        "retired): under the writer lock its record, then its folder, are removed. Nothing of it was committed, so "
        "the next cycle reads its landing files and selects its due messages again, with the same delivery "
        "numbers, through the targets configured then: a message its attempts sent (confirmed or not) is sent "
        "again with the same idempotency key. A run whose re-drive finished, or some of whose targets' shares did, "
        "resumes without calling them again: it is refused without --force. " + _PREPARED_NOTE,
        epilog="examples:\n  reprocess prepared abandon --warehouse wh/ run-20261121T103000Z\n"
        "  reprocess prepared abandon --warehouse wh/ run-20261121T103000Z --lock-wait 600",
        formatter_class=_ExamplesFormatter)
    p.add_argument("run_id", metavar="RUN_ID", type=_run_id, help="the prepared run (reprocess prepared list)")
    p.add_argument("--warehouse", metavar="DIR|URI", required=True, help="warehouse root (a directory or a URI)")
    p.add_argument("--force", action="store_true",
                   help="abandon a run whose re-drive finished, or some targets' shares of it, too (their confirmed "
                   "messages are sent again)")
    p.add_argument("--lock-wait", metavar="SECONDS", type=_seconds, default=0.0,
                   help="wait this long for another writer to release the warehouse (default: fail at once)")
    _add_spark_options(p)
    p.set_defaults(func=cmd_prepared_abandon)


def _run_id(text: str) -> str:
    """A cycle's run id (``run-20261121T103000Z``, milliseconds and a follow-up's ``-2`` allowed): never a path."""
    from reprocess.storage.commit import CYCLE_RUN_ID

    if not CYCLE_RUN_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a cycle's run id such as run-20261121T103000Z, got {text!r}")
    return text


def _warehouse_there(wh: Any, path: str) -> None:
    """A :class:`ConfigError` unless ``wh`` holds a warehouse's folders (a lock would create a mistyped one)."""
    if not wh.exists(wh.path("_snapshots")) and not wh.exists(wh.path("_runs")):
        raise ConfigError(f"{path} is not a warehouse (no _snapshots/ or _runs/ in it)", key="--warehouse")


@contextmanager
def _abandoning(args: argparse.Namespace) -> Iterator[Any]:
    """The warehouse, which must exist, under the writer's lock: a local one's flock, taken without Spark; for one at
    a URI the lease, taken through a Spark driver (``--master``, else ``--remote``, as the cycle's). Over Spark Connect
    the session is on record as a writer's, and what a killed writer left running on the server is stopped first."""
    from reprocess.uris import remote_scheme

    path, owner = args.warehouse, f"abandon {args.run_id}"
    if not remote_scheme(path):
        from reprocess.storage.commit import Warehouse

        wh = Warehouse(path)
        _warehouse_there(wh, path)
        with wh.lock(owner=owner, wait_seconds=args.lock_wait):
            yield wh
        return
    from reprocess.sparkutil import build_session
    from reprocess.storage.hadoop import HadoopWarehouse

    remote = _remote(args)
    spark = build_session("reprocess-prepared", master=args.master, remote=remote)
    try:
        uri = HadoopWarehouse(path)
        _warehouse_there(uri, path)
    except BaseException:
        if remote:
            spark.stop()  # the Connect session; a driver of our own ends with this process
        raise
    # _remote_writer takes the lease first over Connect (re-entrant: the lock below then holds it already)
    with _remote_writer(spark, remote, path, owner, lock_wait=args.lock_wait), \
            uri.lock(owner=owner, wait_seconds=args.lock_wait):
        yield uri


def _prepared_row(doc: dict[str, Any]) -> dict[str, Any]:
    from reprocess.storage.arrow import iso_ms  # the operator commands' times; not the cycle's module (pyspark)
    from reprocess.storage.commit import done_parts

    done = [part["target"] for part in done_parts(doc)]
    redrive = "finished" if doc.get("outcomes") else f"{len(done)} target(s) done" if done else "not finished"
    return {"run_id": doc["run_id"], "as_of": iso_ms(doc["as_of_ms"]), "due": doc.get("due"), "target": doc["target"],
            "policy_targets": doc.get("policy_targets") or {}, "redrive": redrive, "targets_done": done}


def cmd_prepared_list(args: argparse.Namespace) -> int:
    from reprocess.storage.arrow import open_reader

    wh = open_reader(args.warehouse)  # read without Spark, a bucket through pyarrow
    _warehouse_there(wh, args.warehouse)
    runs = [_prepared_row(doc) for doc in wh.prepared_runs()]

    def render(doc: dict[str, Any]) -> str:
        if not doc["prepared"]:
            return "no prepared run: nothing waits to be resumed\n"
        lines = [f"{len(doc['prepared'])} prepared run(s), oldest first (each is resumed by the next writer):"]
        for r in doc["prepared"]:
            lines.append(f"  {r['run_id']}  as of {r['as_of']}  due {r['due']}  re-drive {r['redrive']}")
            lines.append(f"    target {r['target']}")
            lines += [f"    policy {m!r} target {t}" for m, t in sorted(r["policy_targets"].items())]
            lines += [f"    done: {t}" for t in r["targets_done"]]
        return "\n".join(lines) + "\n"

    return _emit({"warehouse": args.warehouse, "prepared": runs}, args.format, render)


def cmd_prepared_abandon(args: argparse.Namespace) -> int:
    from reprocess.errors import WarehouseDamagedError
    from reprocess.storage.commit import abandon_prepared

    with _abandoning(args) as wh:
        try:
            doc = wh.read_prepared(args.run_id)
        except WarehouseDamagedError:
            if not args.force:
                raise  # it names the way out: --force
            doc = None  # abandon_prepared removes a record that does not read
        if doc is not None and doc.get("outcomes") and not args.force:
            raise ConfigError(f"{args.run_id}'s re-drive finished: resuming it needs no target and sends nothing "
                              "again (the next cycle does); abandoning it sends its confirmed messages again. Pass "
                              "--force to abandon it anyway", key="run_id")
        done = _prepared_row(doc)["targets_done"] if doc is not None else []
        if done and not args.force:
            raise ConfigError(f"{args.run_id}'s re-drive is done through {', '.join(done)}: resuming it needs "
                              "none of them and sends their messages no more; abandoning it sends their confirmed "
                              "messages again, through the targets configured then. Pass --force to abandon it "
                              "anyway", key="run_id")
        doc = abandon_prepared(wh, args.run_id)
    if doc is not None and "damaged" in doc:
        sys.stdout.write(json.dumps({"abandoned": doc}, sort_keys=True) + "\n")
        return 0
    if doc is None:
        log.warning("removed the folder of run_id=%s, which an abandon stopped part-way left", args.run_id)
        sys.stdout.write(json.dumps({"abandoned": None, "removed_folder_of": args.run_id}) + "\n")
        return 0
    row = _prepared_row(doc)
    log.warning("abandoned prepared run_id=%s as_of=%s due=%s target=%s re-drive %s: the next cycle selects its due "
                "messages again (a message it sent is sent again with the same key)", row["run_id"], row["as_of"],
                row["due"], row["target"], row["redrive"])
    sys.stdout.write(json.dumps({"abandoned": row}, sort_keys=True) + "\n")
    return 0


def _not_found_exit() -> int:
    from reprocess.errors import NotFoundError

    return NotFoundError.exit_code


def _emit(doc: dict[str, Any], fmt: str, render: Any) -> int:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if fmt == "json" else render(doc))
    return 0


def _dlq_filter(args: argparse.Namespace) -> Any:
    from reprocess.dlq_stats import DlqFilter

    return DlqFilter(address=args.address, reasons=tuple(args.reasons), since_ms=args.since, until_ms=args.until)


def cmd_dlq_list(args: argparse.Namespace) -> int:
    from reprocess.ops import list_dead_letters
    from reprocess.ops_text import render_dead_letters

    return _emit(list_dead_letters(args.warehouse, _dlq_filter(args), args.limit), args.format, render_dead_letters)


def cmd_dlq_show(args: argparse.Namespace) -> int:
    from reprocess.ops import show_dead_letter
    from reprocess.ops_text import render_dead_letter

    return _emit(show_dead_letter(args.warehouse, args.message_id), args.format, render_dead_letter)


def cmd_dlq_stats(args: argparse.Namespace) -> int:
    from reprocess.dlq_stats import dlq_stats
    from reprocess.ops_text import render_dlq_stats
    from reprocess.storage.arrow import open_snapshot

    where = _dlq_filter(args)
    where.validate()
    _, snap = open_snapshot(args.warehouse)
    return _emit(dlq_stats(args.warehouse, where=where, snapshot=snap), args.format, render_dlq_stats)


def cmd_ledger_stats(args: argparse.Namespace) -> int:
    from reprocess.ops import ledger_stats
    from reprocess.ops_text import render_ledger_stats

    return _emit(ledger_stats(args.warehouse, oldest=args.oldest), args.format, render_ledger_stats)


def cmd_report(args: argparse.Namespace) -> int:
    from reprocess.report import write_report

    r = write_report(args.warehouse, args.out, newest=args.newest, private=args.private_files)
    sys.stdout.write(f"wrote {r['out']} ({r['bytes']} bytes, {r['plots']} plots): snapshot {r['snapshot']} as of "
                     f"{r['as_of']}, {r['messages']} ledger messages, {r['dead_letters']} dead letters\n")
    return 0


def redrive_request_of(args: argparse.Namespace) -> Any:
    """The re-drive request of ``reprocess redrive``'s parsed arguments, as asked at its ``--now``."""
    from reprocess.redrive import RedriveRequest

    return RedriveRequest(address_pattern=args.address, date_from=args.date_from, date_to=args.date_to,
                          reason_codes=tuple(args.reasons), max_messages=args.max_messages,
                          rate_per_second=args.rate, reset_deliveries=args.reset_deliveries).at(args.now)


# The option of ``reprocess redrive`` that sets each field of its request (RedriveRequest).
REDRIVE_OPTIONS = {"address_pattern": "--address", "date_from": "--from", "date_to": "--to", "reason_codes": "--reason",
                   "max_messages": "--max", "rate_per_second": "--rate", "reset_deliveries": "--reset-deliveries"}


def cmd_redrive(args: argparse.Namespace) -> int:
    from reprocess.redrive import redrive_dead_letters, require_committed
    from reprocess.sparkutil import build_session, explaining_exhausted_resources

    req = redrive_request_of(args)
    try:
        req.validate()
    except ConfigError as exc:  # named by the request's fields (the DAG form's): here, the options that set them
        raise ConfigError(exc.message, key=REDRIVE_OPTIONS.get(exc.key or "", exc.key)) from None
    require_committed(args.warehouse)  # before the lock, which would create the folder of a mistyped path
    with _writer_lock(args.warehouse, req.request_id, args.lock_wait, args.private_files):
        from reprocess.validation.suites import preload_gx

        preload_gx()  # its GX gate's 3 s import overlaps the JVM's start, as a cycle's does
        remote = _remote(args)
        spark = build_session("reprocess-redrive", master=args.master, remote=remote)
        # outside the writer's record: a cleanup that fails after the JVM ran out keeps the out-of-memory error in its
        # chain, where it is still found
        with explaining_exhausted_resources(spark), \
                _remote_writer(spark, remote, args.warehouse, req.request_id, lock_wait=args.lock_wait):
            audit = redrive_dead_letters(spark, args.warehouse, req, args.now, requested_by=args.requested_by,
                                         lock_wait_seconds=args.lock_wait, private_files=args.private_files)
    sys.stdout.write(json.dumps({k: v for k, v in audit.items() if k != "messages"}, sort_keys=True) + "\n")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from reprocess.landing.generate import GenerateOptions, write_landing
    from reprocess.limits import LATEST_INSTANT_MS

    if not args.out.strip():  # "" wrote the dt= folders into the current directory
        raise ConfigError("--out is empty: give the landing root to write into", key="--out")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"{args.out} is not a folder", key="--out")
    first_year_ms = -30_610_224_000_000  # 1000-01-01T00:00:00Z: the landing's dt= folders have four-digit years
    if args.start < first_year_ms or args.start + args.hours * 3_600_000 > LATEST_INSTANT_MS:
        raise ConfigError("--start and --hours must keep the failures between the years 1000 and 9999 (the "
                          "landing's dt=YYYY-MM-DD folders)", key="--hours")
    opts = GenerateOptions(out=Path(args.out), messages=args.messages,
                           start=datetime.fromtimestamp(args.start / 1000, tz=UTC), hours=args.hours,
                           seed=args.seed, fmt=args.fmt, malformed=args.malformed)
    try:
        result = write_landing(opts)
    except OSError as exc:
        raise ConfigError(f"cannot write under {args.out}: {exc.strerror or exc}", key="--out") from exc
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def _remote(args: argparse.Namespace) -> str | None:
    """The Spark Connect server to run on: ``--remote``, else ``$REPROCESS_SPARK_REMOTE`` unless ``--master``."""
    from reprocess.sparkutil import REMOTE_ENV

    if args.master:
        return None
    return args.remote or os.environ.get(REMOTE_ENV) or None


@contextmanager
def _remote_writer(spark: Any, remote: str | None, warehouse: str, owner: str, writes: bool = True,
                   lock_wait: float = 0.0) -> Iterator[None]:
    """Around a Spark command holding the warehouse lock: over Spark Connect, stop what a killed writer left running
    on the server, keep this session on record while it writes, and close it on the server at the end (its
    cached frames go with it). A driver of our own needs none of it: its jobs end with its process.

    A warehouse at a URI is locked by a lease taken through Spark (the local flock is taken before Spark starts):
    here it is taken before the records are read, so that only the lease's holder ever stops a session."""
    if not remote:
        yield
        return
    from reprocess.storage.commit import Warehouse
    from reprocess.storage.connect_clients import recorded_session
    from reprocess.uris import remote_scheme

    try:
        if writes and remote_scheme(warehouse):
            from reprocess.storage.hadoop import HadoopWarehouse

            wh = HadoopWarehouse(warehouse)
            with wh.lock(owner=owner, wait_seconds=lock_wait), recorded_session(wh, spark, remote, owner):
                yield
        elif writes:
            with recorded_session(Warehouse(warehouse).root, spark, remote, owner):
                yield
        else:
            yield
    finally:
        spark.stop()


def cmd_connect_server(args: argparse.Namespace) -> int:
    import shlex

    from reprocess.connect_server import serve, server_command

    if args.print_command:
        cmd = server_command(args.port, args.host, args.master, args.driver_memory, args.conf)
        sys.stdout.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
        return 0
    serve(args.port, args.host, args.master, args.driver_memory, args.conf)
    return 0  # not reached: serve() replaces this process


def cmd_jvm_archive(args: argparse.Namespace) -> int:
    from pathlib import Path

    from reprocess.jvm_archive import build

    sys.stdout.write(json.dumps(build(Path(args.out))) + "\n")
    return 0


def parse_instant(text: str) -> int:
    """ISO-8601 with an offset (or Z) -> epoch milliseconds."""
    from datetime import datetime

    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ISO-8601 like 2026-11-21T10:15:00Z, got {text!r}") from None
    if dt.tzinfo is None:
        raise argparse.ArgumentTypeError(f"the instant needs an offset or Z (it is compared with UTC data): {text!r}")
    from reprocess.limits import instant_problem

    ms = int(dt.timestamp() * 1000)
    problem = instant_problem(ms)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return ms


def _writer_lock(warehouse: str, owner: str, wait_seconds: float, private: bool | None,
                 skip: bool = False) -> Any:
    """The warehouse's writer lock, taken before Spark starts so that a busy warehouse fails in a second. A
    warehouse on a Hadoop URI is reached through the driver JVM: the run takes its lease once Spark is up."""
    from contextlib import nullcontext

    from reprocess.storage.commit import Warehouse
    from reprocess.uris import remote_scheme

    if skip or remote_scheme(warehouse):
        return nullcontext()
    return Warehouse(warehouse, private=private).lock(owner=owner, wait_seconds=wait_seconds)


def cmd_run(args: argparse.Namespace) -> int:
    from reprocess.cycle.run import CycleOptions, run_cycle, run_id_for
    from reprocess.sparkutil import build_session, explaining_exhausted_resources

    policies = load_config(args.config)
    opts = CycleOptions(landing=args.landing, warehouse=args.warehouse, policies=policies, as_of_ms=args.as_of,
                        target=args.target, dry_run=args.dry_run, address_filter=args.address_filter,
                        max_payload_bytes=args.max_payload_bytes, max_line_bytes=args.max_line_bytes,
                        max_future_ms=args.max_future_ms,
                        lock_wait_seconds=args.lock_wait, data_docs_days=args.keep_data_docs,
                        private_files=args.private_files)
    with _writer_lock(args.warehouse, run_id_for(args.as_of), args.lock_wait, args.private_files,
                      skip=args.dry_run):
        if opts.validate and not opts.dry_run:
            from reprocess.validation.suites import preload_gx

            preload_gx()  # overlaps GX's 3 s import with the JVM's start
        remote = _remote(args)
        spark = build_session("reprocess-cycle", master=args.master, remote=remote)
        with explaining_exhausted_resources(spark), \
                _remote_writer(spark, remote, args.warehouse, run_id_for(args.as_of), writes=not args.dry_run,
                               lock_wait=args.lock_wait):
            summary = run_cycle(spark, opts)
    if args.format == "json":
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_summary(summary))
    return 0


def render_summary(s: dict[str, Any]) -> str:
    """A short human summary of a run."""
    from reprocess.storage.commit import docs_text, not_applied_text

    if s.get("dry_run"):
        return "".join(f"{k:>28}: {v}\n" for k, v in s.items())
    dl = s["dead_lettered"]
    lines = [
        f"run {s['run_id']} as of {s['as_of']}" + (" (already committed)" if s.get("already_committed") else ""),
        *([f"  {not_applied_text(s['not_applied'])}"] if s.get("not_applied") else []),
        f"  landing files {s['landing_files']}, records ingested {s['ingested']}, quarantined {s['quarantined']}, "
        f"duplicates {s['duplicates']}",
        f"  new messages {s['new_messages']}, repeat failures {s['repeat_failures']}"
        + (f", failed in another consumer group under the same id {n}" if (n := s.get("consumer_group_conflicts"))
           else ""),
        f"  due {s['due']}: delivered {s['delivered']}, rescheduled {s['rescheduled']}",
        "  dead-lettered " + str(dl["total"]) + " (" + ", ".join(f"{k} {v}" for k, v in dl.items() if k != "total")
        + ")",
        "  ledger now: " + ", ".join(f"{k} {v}" for k, v in s["states"].items()),
        f"  lateness p50 {s['lateness_ms']['p50']} ms, p99 {s['lateness_ms']['p99']} ms; conservation "
        + ("OK" if all(s["conservation"].values()) else "BROKEN"),
    ]
    if s.get("validation"):
        v = s["validation"]
        lines.append(f"  GX suites passed ({', '.join(v['suites'])}) in {v['seconds']}s; Data Docs: {docs_text(v)}")
    return "\n".join(lines) + "\n"


def schedule_report(policies: PolicySet, addresses: Sequence[str], deliveries: int,
                    message_id: str | None, consumer_group: str | None = None) -> dict[str, Any]:
    """The JSON document of ``reprocess schedule``: one object per address (a dead-letter address naming the
    message's consumer group shows ``{consumer_group}`` without one)."""
    out: dict[str, Any] = {}
    for address in addresses:
        policy = policies.resolve(address, consumer_group)
        if policy is None:
            out[address] = {"policy": None, "profile": None, "schedule": [],
                            "error": "no policy matches this address (add a '#' default policy; a consumer group's "
                            "policies take only its messages: --consumer-group)"}
            continue
        steps = schedule(policy, deliveries, message_id or "")
        entry: dict[str, Any] = {
            "policy": policy.name,
            "profile": policy.profile.value,
            "max_deliveries": max_deliveries(policy),
            "dead_letter_address": policies.dead_letter_address_for(
                policy, address, "{consumer_group}" if consumer_group is None else consumer_group),
            "schedule": [
                {"failed_delivery": s.failed_delivery, "action": s.action.value, "delay_ms": s.delay_ms,
                 "cumulative_ms": s.cumulative_ms}
                for s in steps
            ],
        }
        if has_jitter(policy):
            entry["jitter_seed"] = message_id or ""
        merged_from = policies.merged_from(address, consumer_group)
        if merged_from:
            entry["merged_from"] = merged_from
        tie = policies.tie(address, consumer_group)
        if tie:
            entry["tied_with"], entry["tie_broken_by"] = tie
        out[address] = entry
    return out


_TIE_BROKEN_BY = {"broker": "first in the order an Artemis broker with these address settings gives them",
                  "file": "first in the file",
                  "both": "first as the broker's settings take the broker's order in the places they hold in the file"}


def _render_table(report: dict[str, Any]) -> str:
    lines = []
    for address, entry in report.items():
        if entry["policy"] is None:
            lines.append(f"{address}: {entry['error']}")
            lines.append("")
            continue
        limit = entry["max_deliveries"]
        head = (f"{address}  policy={entry['policy']!r} profile={entry['profile']} "
                f"max_deliveries={'unlimited' if limit is None else limit} dlq={entry['dead_letter_address']}")
        lines.append(head)
        if "merged_from" in entry:
            lines.append("  (settings it leaves out merged from " + ", ".join(map(repr, entry["merged_from"]))
                         + ", as Artemis merges address settings)")
        if "tied_with" in entry:
            lines.append("  (ties on specificity with " + ", ".join(map(repr, entry["tied_with"])) + "; it comes "
                         + _TIE_BROKEN_BY[entry["tie_broken_by"]] + ")")
        if "jitter_seed" in entry:
            lines.append(f"  (jittered; seeded by message id {entry['jitter_seed']!r} and delivery number)")
        lines.append(f"  {'failed delivery':>15}  {'action':<11}  {'then wait':>14}  {'elapsed':>14}")
        for s in entry["schedule"]:
            lines.append(f"  {s['failed_delivery']:>15}  {s['action']:<11}  {human(s['delay_ms']):>14}  "
                         f"{human(s['cumulative_ms']):>14}")
        last = entry["schedule"][-1] if entry["schedule"] else None
        if last is not None and last["action"] == "retry":
            lines.append("  ... (still retrying; raise --deliveries to see more)")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def cmd_schedule(args: argparse.Namespace) -> int:
    from reprocess.errors import NotFoundError

    policies = load_config(args.config)
    report = schedule_report(policies, args.address, args.deliveries, args.message_id, args.consumer_group)
    if args.format == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(_render_table(report))
    # an address no policy matches is printed with the others, and is a NotFoundError's exit (it was 0: a script
    # checking a deployment's addresses could not tell)
    return NotFoundError.exit_code if any(r.get("policy") is None for r in report.values()) else 0


def _without_py4j_info(record: logging.LogRecord) -> bool:
    """Leave out py4j's INFO records: its connections closing, and once a driver has run out of heap a traceback
    for each call that finds it gone (309 of them hid the one line that says so). Some go to the root logger, so
    they are told by the module that logged them."""
    return record.levelno >= logging.WARNING or "py4j" not in record.pathname.replace("\\", "/").split("/")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else list(argv)
    for arg in given:  # bytes that are not UTF-8 reach Python as surrogates, which every later encode refused
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            parser.error(f"argument {arg.encode('utf-8', 'backslashreplace').decode()!r} is not valid UTF-8")
    args = parser.parse_args(given)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_without_py4j_info)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        sys.stderr.write(f"reprocess: configuration error: {exc}\n")
        return exc.exit_code
    except ReprocessError as exc:
        sys.stderr.write(f"reprocess: {exc.code}: {exc}\n")
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
