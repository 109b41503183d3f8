"""Parquet dictionary encoding on the columns unique per message, on and off (issue [6/7]).

Reads the outbox a large cycle wrote (``bench/core_use.py`` leaves a 10M one in ``--warehouse``), caches all of
it and its first 1M rows in 16 partitions each, then writes each partitioned by address as the outbox target
does: with Parquet's defaults (every column dictionary-encoded), and with the dictionary off for the columns
``reprocess.targets.outbox.OUTBOX_UNIQUE_COLUMNS`` names (what the platform writes). Rounds alternate the
variants after a warm-up write. Prints seconds, microseconds per row and bytes written; asserts nothing.

Example::

    .venv/bin/python bench/parquet_dictionary.py --warehouse /tmp/reprocess-bench/wh-core-use
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "spark"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default="/tmp/reprocess-bench/wh-core-use",
                        help="a warehouse whose outbox holds a large cycle's re-driven messages")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both variants at both sizes (default 3)")
    parser.add_argument("--out", default="/tmp/reprocess-bench/parquet-dictionary", help="scratch output folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("REPROCESS_DRIVER_MEMORY", "10g")

    from reprocess.sparkutil import build_session, parquet_options
    from reprocess.targets.outbox import OUTBOX_UNIQUE_COLUMNS

    spark = build_session("bench-parquet-dictionary")
    src = spark.read.parquet(str(Path(args.warehouse) / "outbox"))
    cols = ["message_id", "address", "payload", "headers", "delivery", "run_id", "redriven_at"]
    sizes = []
    for frame in (src.select(*cols).limit(1_000_000), src.select(*cols)):
        cached = frame.repartition(16).cache()
        sizes.append((cached, cached.count()))

    def write(df, plain: bool) -> tuple[float, int]:
        shutil.rmtree(args.out, ignore_errors=True)
        writer = df.write.mode("overwrite").partitionBy("address")
        # both as the cycle writes (sizes checked from the first row), with the dictionary on or off
        writer = parquet_options(writer, OUTBOX_UNIQUE_COLUMNS if plain else ())
        t = time.monotonic()
        writer.parquet(args.out)
        seconds = time.monotonic() - t
        return seconds, sum(p.stat().st_size for p in Path(args.out).rglob("*.parquet"))

    for plain in (False, True):
        write(sizes[0][0], plain)  # warm-up
    print("round | dictionary on unique columns | rows | seconds | us per row | MB written")
    for r in range(args.rounds):
        for plain in (False, True):
            for df, n in sizes:
                seconds, size = write(df, plain)
                print(f"{r + 1} | {'off' if plain else 'on (Parquet default)'} | {n:,} | {seconds:.2f} | "
                      f"{seconds / n * 1e6:.2f} | {size / 1e6:.1f}", flush=True)
    spark.stop()
    shutil.rmtree(args.out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
