"""What a scheduled cycle costs as it really runs: a fresh ``reprocess run`` process per cycle, side by side.

Each DAG run starts a new driver (a fresh ``spark-submit``), so a small cycle pays the JVM's start, class loading
and warm-up every time. This times whole ``reprocess run`` processes over a small generated landing, hour after
hour, and interleaves the variants (round-robin, each into its own warehouse) so that machine noise falls on all
of them alike. A variant is a name and environment settings, e.g. ``no-archive:REPROCESS_JVM_ARCHIVE=`` runs
without the class-data archive of ``reprocess jvm-archive``. With ``--connect-server PORT`` a ``reprocess
connect-server`` runs on that port for the whole benchmark, for variants that run as its clients. Prints figures;
asserts nothing.

    .venv/bin/python bench/fresh_runs.py --rounds 5 --variant archive: --variant no-archive:REPROCESS_JVM_ARCHIVE=
    .venv/bin/python bench/fresh_runs.py --connect-server 15002 --variant submit: \
        --variant connect:REPROCESS_SPARK_REMOTE=sc://localhost:15002
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from reprocess.connect_server import running_server


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, settings = text.partition(":")
    env = dict(s.split("=", 1) for s in settings.split(",") if s)
    return name, env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", type=parse_variant, required=True,
                        help="NAME:VAR=VALUE,... (repeat; at least one)")
    parser.add_argument("--rounds", type=int, default=5, help="cycles per variant, one hour apart (default 5)")
    parser.add_argument("--messages", type=int, default=400, help="messages in the landing (default 400)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench-fresh", help="scratch folder (wiped)")
    parser.add_argument("--results", default=None, help="append the JSON figures to this file (JSON lines)")
    parser.add_argument("--connect-server", metavar="PORT", type=int,
                        help="run a reprocess connect-server on this port meanwhile (started cold: its first "
                        "cycles show the warm-up)")
    args = parser.parse_args()
    if not args.connect_server:
        return _bench(args)
    work = Path(args.workdir)
    work.parent.mkdir(parents=True, exist_ok=True)
    with running_server(args.connect_server, work.parent / f"{work.name}-connect-server.log"):
        return _bench(args)


def _bench(args: argparse.Namespace) -> int:

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    python = sys.executable
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
           "PATH": f"{Path(python).parent}:{os.environ['PATH']}"}
    subprocess.run([python, "-m", "reprocess.cli", "generate", "--out", str(work / "landing"), "--messages",
                    str(args.messages), "--hours", str(args.rounds), "--seed", "11"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    walls: dict[str, list[float]] = {name: [] for name, _ in args.variant}
    steps: dict[str, list[dict[str, float]]] = {name: [] for name, _ in args.variant}
    print(f"{args.messages} messages over {args.rounds} hours; fresh `reprocess run` processes, variants "
          f"interleaved: {', '.join(walls)}")
    print(f"{'hour':>4} {'variant':<14} {'wall s':>7} {'steps s':>8} {'landing':>8} {'validate':>8}")
    for hour in range(1, args.rounds + 1):
        for name, settings in args.variant:
            t0 = time.perf_counter()
            done = subprocess.run(
                [python, "-m", "reprocess.cli", "run", "--landing", str(work / "landing"), "--warehouse",
                 str(work / f"wh-{name}"), "--as-of", f"2026-11-21T{hour:02d}:00:00Z", "--format", "json"],
                env={**env, **settings}, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-3000:])
                raise SystemExit(f"variant {name} failed at hour {hour} (exit {done.returncode})")
            s = json.loads(done.stdout)["step_seconds"]
            walls[name].append(wall)
            steps[name].append(s)
            print(f"{hour:>4} {name:<14} {wall:>7.1f} {sum(s.values()):>8.1f} {s['landing']:>8.2f} "
                  f"{s.get('validate', 0.0):>8.2f}", flush=True)
    print(f"\n{'variant':<14} {'median wall s':>13} {'range':>13} {'median steps s':>14}")
    figures = {}
    for name, w in walls.items():
        med_steps = statistics.median(sum(s.values()) for s in steps[name])
        figures[name] = {"wall_s": [round(x, 2) for x in w], "median_wall_s": round(statistics.median(w), 2),
                         "median_steps_s": round(med_steps, 2)}
        print(f"{name:<14} {statistics.median(w):>13.1f} {min(w):>6.1f}-{max(w):<6.1f} {med_steps:>14.1f}")
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(json.dumps({"bench": "fresh_runs", "messages": args.messages, "rounds": args.rounds,
                                "variants": {n: e for n, e in args.variant}, "figures": figures,
                                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
