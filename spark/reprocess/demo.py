"""``make demo``: the main job end to end on embedded defaults."""

from __future__ import annotations

import sys

from reprocess.cli import main as cli


def main() -> int:
    print("== reprocess demo: retry schedules of the embedded policy file ==\n")
    return cli(["schedule", "--address", "orders.created", "--address", "billing.eu", "--address",
                "payments.card", "--address", "inventory.eu.stock", "--address", "shipping.label",
                "--message-id", "demo-1"])


if __name__ == "__main__":
    sys.exit(main())
