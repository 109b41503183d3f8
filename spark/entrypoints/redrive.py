"""spark-submit entry point of a dead-letter re-drive: the arguments are those of ``reprocess redrive``."""

import sys

from reprocess.cli import main

if __name__ == "__main__":
    sys.exit(main(["redrive", *sys.argv[1:]]))
