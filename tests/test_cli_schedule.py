"""`reprocess schedule`: the documented JSON shape, the table, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reprocess.cli import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "policies.yaml"


def _json(capsys, *args: str) -> dict:
    assert main(["schedule", "--config", str(SAMPLE), "--format", "json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_is_keyed_by_address_with_one_entry_per_failed_delivery_up_to_the_dead_letter(capsys):
    out = _json(capsys, "--address", "orders.created", "--address", "billing.eu")
    orders = out["orders.created"]
    assert orders["policy"] == "orders.#"
    assert orders["profile"] == "activemq"
    assert orders["schedule"][0] == {"failed_delivery": 1, "action": "retry", "delay_ms": 1000,
                                     "cumulative_ms": 1000}
    assert orders["schedule"][-1] == {"failed_delivery": 7, "action": "dead_letter", "delay_ms": None,
                                      "cumulative_ms": None}
    assert [s["delay_ms"] for s in orders["schedule"][:6]] == [1000, 5000, 25000, 125000, 625000, 3125000]
    assert [s["cumulative_ms"] for s in orders["schedule"][:3]] == [1000, 6000, 31000]
    billing = out["billing.eu"]
    assert [s["action"] for s in billing["schedule"]] == ["retry", "retry", "dead_letter"]
    assert billing["dead_letter_address"] == "billing.dlq"


def test_deliveries_limits_the_schedule(capsys):
    out = _json(capsys, "--address", "x.y", "--deliveries", "5")
    assert [s["failed_delivery"] for s in out["x.y"]["schedule"]] == [1, 2, 3, 4, 5]


def test_message_id_makes_jitter_exact_and_repeatable(capsys):
    a = _json(capsys, "--address", "payments.card", "--message-id", "m-1")
    b = _json(capsys, "--address", "payments.card", "--message-id", "m-1")
    c = _json(capsys, "--address", "payments.card", "--message-id", "m-2")
    assert a == b
    assert a["payments.card"]["schedule"] != c["payments.card"]["schedule"]


def test_table_is_readable(capsys):
    assert main(["schedule", "--config", str(SAMPLE), "--address", "orders.created"]) == 0
    out = capsys.readouterr().out
    assert "policy='orders.#'" in out
    assert "52m 5s" in out  # 3125000 ms
    assert "dead_letter" in out


def test_an_artemis_policys_merged_settings_show_where_they_come_from(tmp_path, capsys):
    config = tmp_path / "p.yaml"
    config.write_text("""
policies:
  - match: "orders.*"
    profile: artemis
    settings: {redelivery-delay: 5000}
  - match: "*.eu"
    profile: artemis
    settings: {dead-letter-address: eu.dlq, redelivery-delay: 1}
  - match: "#"
    profile: artemis
    settings: {max-delivery-attempts: 2, dead-letter-address: DLQ}
""")
    assert main(["schedule", "--config", str(config), "--format", "json", "--address", "orders.eu",
                 "--address", "orders.us", "--address", "x.y"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["orders.eu"]["merged_from"], out["orders.eu"]["dead_letter_address"]) == (["*.eu", "#"], "eu.dlq")
    assert [s["delay_ms"] for s in out["orders.eu"]["schedule"]] == [5000, None]
    assert (out["orders.us"]["merged_from"], out["orders.us"]["dead_letter_address"]) == (["#"], "DLQ")
    assert "merged_from" not in out["x.y"]  # its own policy, '#', gives what it has
    assert main(["schedule", "--config", str(config), "--address", "orders.eu"]) == 0
    assert "merged from '*.eu', '#', as Artemis merges" in capsys.readouterr().out


def test_bad_config_exits_with_the_config_code_and_names_the_key(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("policies: [{match: '#', profile: activemq, settings: {maximumRedeliveries: x}}]")
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "schedule", "--config", str(bad), "--address", "a"],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "maximumRedeliveries" in proc.stderr
    assert str(bad) in proc.stderr


def test_help_describes_every_option():
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "schedule", "--help"], capture_output=True,
                          text=True, check=True)
    for option in ("--config", "--address", "--deliveries", "--message-id", "--format"):
        assert option in proc.stdout


@pytest.mark.parametrize("command", ["run", "redrive"])
def test_the_spark_commands_help_lists_the_exit_code_of_every_error_class(command):
    from reprocess import errors
    from reprocess.cycle.run import OutOfOrderError

    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", command, "--help"], capture_output=True, text=True,
                          check=True)
    assert f"examples:\n  reprocess {command} --" in proc.stdout
    listed = proc.stdout.split("exit codes:\n", 1)[1].splitlines()
    kinds = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ReprocessError)}
    expected = sorted((c.exit_code, c.code) for c in kinds | {OutOfOrderError})
    rows = [line.split() for line in listed[2:] if line.strip()[:1].isdigit()]
    assert [(int(row[0]), row[1].rstrip(":")) for row in rows] == expected
    assert "  (2 is also a command line that does not parse" in proc.stdout
    assert listed[:2] == ["  0   done, or already committed", "  1   an unexpected error: a bug (its traceback)"]


def test_redrive_of_a_warehouse_nothing_was_committed_to_exits_3_and_creates_nothing(tmp_path):
    """A mistyped --warehouse: the writer's lock created the folder and the request committed there, moving
    nothing, exit 0; the operator concluded the DLQ was empty."""
    typo = tmp_path / "warehose"
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "redrive", "--warehouse", str(typo), "--now",
                           "2026-11-21T10:00:00Z"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert f"warehouse {typo} has no committed run" in proc.stderr
    assert not typo.exists()


def test_a_tie_on_specificity_is_shown_with_what_broke_it(tmp_path, capsys):
    """``shop.#`` and ``*.eu.#`` are equally specific for ``shop.eu.cart``. Both artemis: the broker's order takes
    ``shop.#`` (tests/test_artemis_order.py) whichever the file gives first; neither: the file's order; one: the
    broker's settings keep their places. The preview says which; an address only one of them matches has no tie."""
    def report(first: str, second: str, *addresses: str) -> dict:
        config = tmp_path / "tie.yaml"
        config.write_text(f"""policies:
  - {{match: "*.eu.#", profile: {first}, settings: {{}}}}
  - {{match: "shop.#", profile: {second}, settings: {{}}}}
""", encoding="utf-8")
        assert main(["schedule", "--config", str(config), *(a for x in addresses for a in ("--address", x)),
                     "--format", "json"]) == 0
        return json.loads(capsys.readouterr().out)

    keys = ("policy", "tied_with", "tie_broken_by")
    out = report("artemis", "artemis", "shop.eu.cart", "news.eu.x")
    assert [out["shop.eu.cart"][k] for k in keys] == ["shop.#", ["*.eu.#"], "broker"]
    assert "tied_with" not in out["news.eu.x"]
    out = report("stepped", "stepped", "shop.eu.cart")
    assert [out["shop.eu.cart"][k] for k in keys] == ["*.eu.#", ["shop.#"], "file"]
    out = report("artemis", "stepped", "shop.eu.cart")
    assert [out["shop.eu.cart"][k] for k in keys] == ["*.eu.#", ["shop.#"], "both"]
    assert main(["schedule", "--config", str(tmp_path / "tie.yaml"), "--address", "shop.eu.cart"]) == 0
    assert "(ties on specificity with 'shop.#'; it comes first as the broker's settings" in capsys.readouterr().out


def test_an_address_no_policy_matches_is_shown_and_exits_not_found(tmp_path, capsys):
    """It was printed with an error and exit 0: a script checking a deployment's addresses could not tell."""
    config = tmp_path / "p.yaml"
    config.write_text("policies: [{match: 'orders.#', profile: stepped}]\n")
    args = ["schedule", "--config", str(config), "--address", "orders.created", "--address", "billing.eu"]
    assert main([*args, "--format", "json"]) == 10
    out = json.loads(capsys.readouterr().out)
    assert out["orders.created"]["policy"] == "orders.#"
    assert out["billing.eu"]["policy"] is None
    assert "no policy matches this address" in out["billing.eu"]["error"]
    assert main(args[:5]) == 0  # the matched one alone
