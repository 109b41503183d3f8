"""Where the landing step's time goes: each stage of the landing transform, built up one piece at a time.

Every variant is written to Spark's ``noop`` sink (everything computed, nothing stored), in one JVM, twice:
the first pass pays the JIT's warm-up, the second shows the steady state. The input is ``bench/scale.py``'s
generated landing data (made on first use, kept in the work directory). Prints figures; asserts nothing.

    .venv/bin/python bench/landing_profile.py --messages 1000000
    .venv/bin/python bench/landing_profile.py --landing DIR --driver-memory 2g   # any landing directory
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _variants(spark: Any, landing: Path, as_of: int) -> dict[str, Callable[[], Any]]:
    """Name -> a function building that variant's DataFrame, each one piece more than the one before."""
    from pyspark.sql import functions as F

    from reprocess.cli import load_config
    from reprocess.cycle.landing_batch import read_batch
    from reprocess.landing import contract
    from reprocess.landing.manifest import list_landing
    from reprocess.policy.columns import policy_index_column
    from reprocess.sparkutil import fit_codegen
    from reprocess.validation import rowchecks, suites

    files = list_landing(str(landing), as_of)
    paths = [f.path for f in files]
    contract.one_file_per_partition(spark, max(f.size for f in files))
    fit_codegen(spark, sum(f.size for f in files))  # as the cycle does, from the same listing
    policies = load_config(None)
    jvm = contract.use_jvm_parser(spark)  # as read_batch does: False without the project's jar
    limits = (contract.DEFAULT_MAX_PAYLOAD_BYTES, contract.DEFAULT_MAX_FUTURE_MS)

    def raw() -> Any:
        return contract.read_text_records(spark, paths)

    def batch() -> Any:
        return read_batch(spark, files, {}, as_of, *limits).records

    def with_policy() -> Any:
        return batch().withColumn("policy_idx", policy_index_column(policies, F.col("address"),
                                                                                F.col("consumer_group")))

    def with_rowchecks() -> Any:
        params = suites.landing_params(*limits)
        broken = rowchecks.broken_expectations(suites.load_suite("landing"), suites.landing_columns(), params)
        return with_policy().withColumn(suites.FAILED_AFTER_AS_OF, suites.failed_after_as_of(as_of)) \
            .withColumn("expectations", broken)

    return {
        "text read alone": raw,
        "strict parse of [line] only": lambda: raw().select(contract._json_array_of_the_line(F.col("raw"))),
        "from_json into the typed struct only": lambda: raw().select(F.from_json("raw", contract._VALUES_SCHEMA)),
        "fields (both parses, types, extra, timestamp)": lambda: contract._fields(raw()),
        "parse_records (+ the contract checks)": lambda: contract.parse_records(raw(), as_of, *limits),
        "JVM parser of well-formed lines only": lambda: raw().select(
            F.call_function(contract.JVM_PARSER_FUNCTION, F.col("raw"))),
        "parse_records with the JVM parser": lambda: contract.parse_records(raw(), as_of, *limits, jvm=jvm),
        "+ manifest window join (read_batch, JVM parser if built)": batch,
        "+ policy index": with_policy,
        "+ GX row checks": with_rowchecks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="landing messages (default 1000000)")
    parser.add_argument("--workdir", default="/tmp/reprocess-bench",
                        help="scratch directory, shared with bench/scale.py (default /tmp/reprocess-bench)")
    parser.add_argument("--landing", help="profile this landing directory instead of the generated one (for example "
                                          "bench/large_payloads.py's; --messages is then ignored)")
    parser.add_argument("--as-of", help="with --landing: the as-of (ISO 8601) its files are listed at (default "
                                         "bench/scale.py's)")
    parser.add_argument("--passes", type=int, default=2, help="passes over all variants (default 2)")
    parser.add_argument("--driver-memory", default=os.environ.get("REPROCESS_DRIVER_MEMORY", "8g"),
                        help="heap of the local Spark JVM (default 8g)")
    args = parser.parse_args(argv)

    import scale

    as_of = scale.AS_OF_MS
    if args.landing:
        landing = Path(args.landing)
        if args.as_of:
            from reprocess.orchestration import as_of_ms

            as_of = as_of_ms(args.as_of)
        sizes = [f.stat().st_size for f in landing.rglob("*") if f.is_file()]
        print(f"input: {landing}, {len(sizes)} files, {sum(sizes)} bytes", flush=True)
    else:
        landing = Path(args.workdir) / f"landing-{args.messages}"
        print(f"input: {scale._generate(landing, args.messages)}", flush=True)
    os.environ["REPROCESS_DRIVER_MEMORY"] = args.driver_memory
    from reprocess.sparkutil import build_session

    spark = build_session("landing-profile")
    spark.sparkContext.setLogLevel("ERROR")
    from reprocess.sparkutil import sized_codegen

    with sized_codegen(spark):
        variants = _variants(spark, landing, as_of)
        width = max(map(len, variants))
        for n in range(1, args.passes + 1):
            print(f"pass {n} of {args.passes}{' (JIT warm-up)' if n == 1 else ''}:", flush=True)
            for name, build in variants.items():
                t = time.monotonic()
                build().write.format("noop").mode("overwrite").save()
                print(f"  {name:<{width}}  {time.monotonic() - t:6.1f} s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
