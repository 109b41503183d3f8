"""``make demo``: the main job end to end on embedded defaults.

Generates landing data (skewed addresses, transient and poison failures, duplicates, bad lines),
previews the retry schedules of the embedded policy file, then runs reprocessing cycles through
the ``reprocess`` CLI with advancing as-of times and a deterministic flaky target, and prints where
to look.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from reprocess.cli import main as cli

AS_OFS = ("2026-11-21T01:00:00Z", "2026-11-21T02:00:00Z", "2026-11-21T03:00:00Z", "2026-11-21T06:00:00Z")
TARGET = "python:reprocess.targets.examples:flaky"


def _banner(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprocess.demo", description=__doc__)
    parser.add_argument("--out", default="demo-out", help="where landing/ and warehouse/ go (default demo-out)")
    parser.add_argument("--messages", type=int, default=2000, help="messages to generate (default 2000)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    landing, warehouse = out / "landing", out / "warehouse"

    _banner("1. retry schedules of the embedded policy file (reprocess schedule)")
    cli(["schedule", "--address", "orders.created", "--address", "billing.invoice", "--address", "payments.card",
         "--message-id", "demo-1", "--deliveries", "8"])

    _banner(f"2. landing data: {args.messages} failed messages over 3 hours (reprocess generate)")
    cli(["generate", "--out", str(landing), "--messages", str(args.messages), "--hours", "3"])

    for as_of in AS_OFS:
        _banner(f"3. cycle as of {as_of} (reprocess run --target {TARGET})")
        code = cli(["run", "--landing", str(landing), "--warehouse", str(warehouse), "--as-of", as_of,
                    "--target", TARGET])
        if code:
            return code

    summaries = sorted((warehouse / "runs").glob("*/summary.json"))
    last = json.loads(summaries[-1].read_text())
    _banner("where to look")
    print(f"  run summaries     {warehouse}/runs/<run_id>/summary.json ({len(summaries)} runs)")
    print(f"  dead letters      {warehouse}/dlq/address=<dead-letter address>/dt=<date>/ "
          f"({last['states']['DEAD_LETTERED']} messages)")
    print(f"  quarantine        {warehouse}/quarantine/dt=<date>/ (bad landing records, with file, line, reason)")
    print(f"  retry ledger      {warehouse}/ledger/bucket=<due hour>/ (read it through the latest "
          f"{warehouse}/_snapshots/*.json)")
    print(f"  ledger now        {last['states']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
