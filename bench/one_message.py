"""What many failures of one message in one batch cost (``ledger.merge.aggregate_failures``). Prints figures;
asserts nothing.

Whole ``reprocess run`` processes in a small heap, on a landing of ordinary generated messages, then on the same
landing plus a file of ``--failures`` records of one more message: exact duplicates (one failure written again and
again), then distinct failures (a consumer retrying one message and writing each failure, ``failed_at`` a
millisecond apart). Each run prints its wall time and its ``merge`` step. The runs take this checkout's code
(``PYTHONPATH``), so the bench of another worktree, run with this venv's Python, measures that worktree's code.

    .venv/bin/python bench/one_message.py --failures 20000
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_runs import SPARK, reprocess_run  # noqa: E402 - the bench folder first

sys.path.insert(0, str(SPARK))

AS_OF = "2026-11-21T03:00:00Z"


def _landing(work: Path, name: str, messages: int, failures: int) -> Path:
    from reprocess.landing.generate import GenerateOptions, write_landing

    landing = work / f"landing-{name}-{messages}-{failures}"
    if landing.exists():
        return landing
    write_landing(GenerateOptions(out=landing, messages=messages, hours=1, seed=5))
    if name != "ordinary":
        hour = next(landing.glob("dt=*/hour=*"))
        start = datetime(2026, 11, 21, 0, 30, tzinfo=UTC)
        with (hour / "one-message.jsonl").open("w") as fh:
            for i in range(failures):
                at = start if name == "duplicates" else start + timedelta(milliseconds=i)
                fh.write(json.dumps({"message_id": "stuck", "address": "orders.created", "payload": "p" * 200,
                                     "failed_at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                                     "error_class": "java.lang.IllegalStateException",
                                     "error_message": "boom"}) + "\n")
    return landing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="ordinary messages (default 10000)")
    parser.add_argument("--failures", type=int, default=20_000, help="records of the one message (default 20000)")
    parser.add_argument("--memory", default="1g", help="the runs' driver heap (default 1g)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each landing, alternating (default 2)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench/one-message",
                        help="scratch directory (default /tmp/reprocess-bench/one-message)")
    args = parser.parse_args(argv)

    work = Path(args.workdir)
    names = ("ordinary", "duplicates", "distinct")
    landings = {n: _landing(work, n, args.messages, args.failures) for n in names}
    print(f"code: {SPARK}; {args.messages} ordinary messages, {args.failures} records of one message, "
          f"{args.memory} heap", flush=True)
    for r in range(args.repeat):
        for name in names:
            elapsed, summary = reprocess_run(landings[name], work / f"wh-{name}-{r}", args.memory, AS_OF)
            if isinstance(summary, str):
                print(f"  {name:<10} {elapsed:6.1f} s  {summary}", flush=True)
                continue
            steps = summary["step_seconds"]
            print(f"  {name:<10} {elapsed:6.1f} s  merge {steps.get('merge', 0):5.1f} s  records "
                  f"{summary['records_read']}, duplicates {summary.get('duplicates')}, new messages "
                  f"{summary.get('new_messages')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
