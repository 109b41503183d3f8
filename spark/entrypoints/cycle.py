"""spark-submit entry point of a reprocessing cycle: ``spark-submit spark/entrypoints/cycle.py <reprocess run args>``.

The master, deploy mode and resources come from spark-submit (Airflow's ``spark_default``
connection); the arguments are those of ``reprocess run``.
"""

import sys

from reprocess.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
