"""Write tests/durations.json, the seconds each test file took, from a JUnit XML report of `make test`:

    make test PYTEST_ARGS="--junitxml=/tmp/junit.xml" && .venv/bin/python dev/test_durations.py /tmp/junit.xml

tests/conftest.py hands the files to the two xdist workers longest first from it, so that no long file starts
last and runs alone while the other worker idles. Only the order depends on it: a stale or missing entry costs
wall time, never a result.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path, help="the report of pytest --junitxml")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args()
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(args.junit).getroot().iter("testcase"):
        # classname is the dotted module (tests.test_x, or tests.test_x.Class)
        module = case.get("classname", "").split(".")
        name = next((m for m in module if m.startswith("test_")), None)
        if name is not None:
            seconds[f"tests/{name}.py"] += float(case.get("time", 0))
    ranked = dict(sorted(((f, round(s, 1)) for f, s in seconds.items()), key=lambda fs: -fs[1]))
    args.out.write_text(json.dumps(ranked, indent=1) + "\n")
    print(f"{args.out}: {len(ranked)} files, {sum(ranked.values()):.0f} s in all")


if __name__ == "__main__":
    main()
