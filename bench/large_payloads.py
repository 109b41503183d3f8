"""Whether a batch of large payloads fits a driver's heap, and what it costs. Prints figures; asserts nothing.

Whole ``reprocess run`` processes, one per landing of ``--payloads`` records (each count given makes a landing)
whose payloads are ``--payload-bytes`` of incompressible text (random bytes in base64), all of them dead-lettered
at once (a non-retryable error class), in a driver of ``--memory`` heap. Each run prints its wall time, how it ended
(the summary, or the CLI's last word: ``out_of_memory`` when the heap was short), the payload bytes accepted, the
GX engines and the steps' seconds. The runs take this checkout's code (``PYTHONPATH``), so the bench of another
worktree, run with this venv's Python, measures that worktree's code.

    .venv/bin/python bench/large_payloads.py --payloads 1000 2000 --payload-bytes 1000000 --memory 2g
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_runs import SPARK, reprocess_run  # noqa: E402 - the bench folder first

AS_OF = "2026-11-21T10:30:00Z"


def _landing(work: Path, payloads: int, payload_bytes: int) -> Path:
    landing = work / f"landing-{payloads}x{payload_bytes}"
    if landing.exists():
        return landing
    hour = landing / "dt=2026-11-21" / "hour=10"
    hour.mkdir(parents=True)
    with (hour / "large.jsonl").open("w") as fh:
        for i in range(payloads):
            payload = base64.b64encode(os.urandom(payload_bytes * 3 // 4)).decode()
            fh.write(json.dumps({"message_id": f"large-{i}", "address": ("orders.created", "billing.eu")[i % 2],
                                 "payload": payload, "failed_at": "2026-11-21T10:00:00Z",
                                 "error_class": "com.acme.ValidationError"}) + "\n")
    return landing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payloads", type=int, nargs="+", default=[1000, 2000],
                        help="records per landing, one landing each (default 1000 2000)")
    parser.add_argument("--payload-bytes", type=int, default=1_000_000,
                        help="each payload's bytes (default 1000000; the default --max-payload-bytes is 1048576)")
    parser.add_argument("--memory", default="2g", help="the runs' driver heap (default 2g, the platform's default)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench/large-payloads",
                        help="scratch directory; landings are kept for the next run (default "
                             "/tmp/reprocess-bench/large-payloads)")
    args = parser.parse_args(argv)

    work = Path(args.workdir)
    print(f"code: {SPARK}; payloads of {args.payload_bytes} bytes, {args.memory} heap", flush=True)
    for n in args.payloads:
        landing = _landing(work, n, args.payload_bytes)
        size = sum(f.stat().st_size for f in landing.rglob("*.jsonl"))
        elapsed, summary = reprocess_run(landing, work / f"wh-{n}", args.memory, AS_OF)
        head = f"  {n:>6} payloads, {size / 2**20:7.0f} MiB of landing: {elapsed:6.1f} s"
        if isinstance(summary, str):
            print(f"{head}  {summary}", flush=True)
            continue
        steps = " ".join(f"{k} {v:.1f}" for k, v in summary["step_seconds"].items())
        print(f"{head}  dead-lettered {summary['dead_lettered']['total']}, accepted payload bytes "
              f"{summary['accepted_payload_bytes']}, GX engines {summary['validation']['engines']}; steps s: "
              f"{steps}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
