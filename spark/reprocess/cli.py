"""The ``reprocess`` command line.

    reprocess schedule --config FILE --address A [--address B ...] [--deliveries N]
                       [--message-id ID] [--format table|json]

Exit codes come from the error classes in :mod:`reprocess.errors`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any

from reprocess.errors import ConfigError, ReprocessError
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprocess",
        description="Give failed messages a second life: broker-exact retry schedules, a retry ledger on Spark, "
        "re-drive and dead-letter partitions.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "schedule",
        help="preview what happens after each failed delivery on given addresses (no Spark)",
        description="Show, for each address, the policy that applies and what happens after each failed "
        "delivery: retry after a delay, or dead-letter. Stops at the first dead letter or after --deliveries.",
        epilog="example: reprocess schedule --address orders.created --address billing.eu --format json",
    )
    p.add_argument("--config", metavar="FILE", help=f"policy file (YAML); default: {DEFAULT_CONFIG}")
    p.add_argument("--address", metavar="A", action="append", required=True,
                   help="original destination of the message; repeat for several")
    p.add_argument("--deliveries", metavar="N", type=_positive_int, default=20,
                   help="show failed deliveries 1..N at most (default: 20)")
    p.add_argument("--message-id", metavar="ID",
                   help="compute the exact jittered delays of this message (jitter is seeded by id and delivery)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    p.set_defaults(func=cmd_schedule)
    return parser


def schedule_report(policies: PolicySet, addresses: Sequence[str], deliveries: int,
                    message_id: str | None) -> dict[str, Any]:
    """The JSON document of ``reprocess schedule``: one object per address."""
    out: dict[str, Any] = {}
    for address in addresses:
        policy = policies.resolve(address)
        if policy is None:
            out[address] = {"policy": None, "profile": None, "schedule": [],
                            "error": "no policy matches this address (add a '#' default policy)"}
            continue
        steps = schedule(policy, deliveries, message_id or "")
        entry: dict[str, Any] = {
            "policy": policy.match,
            "profile": policy.profile.value,
            "max_deliveries": max_deliveries(policy),
            "dead_letter_address": policies.dead_letter_address_for(policy, address),
            "schedule": [
                {"failed_delivery": s.failed_delivery, "action": s.action.value, "delay_ms": s.delay_ms,
                 "cumulative_ms": s.cumulative_ms}
                for s in steps
            ],
        }
        if has_jitter(policy):
            entry["jitter_seed"] = message_id or ""
        out[address] = entry
    return out


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
    policies = load_config(args.config)
    report = schedule_report(policies, args.address, args.deliveries, args.message_id)
    if args.format == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(_render_table(report))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
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
