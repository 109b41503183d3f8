"""Security: no secret in the repository, and owner-only files when payloads may hold personal data.

(Addresses never becoming unescaped paths is tested with the bad-input corpus in tests/test_bad_input.py; the
login required by the plugin's endpoints in tests/test_dags.py and tests/test_compose.py.)
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from reprocess.cli import load_config, parse_instant
from reprocess.cycle.run import CycleOptions, run_cycle
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.redrive import RedriveRequest, redrive_dead_letters
from reprocess.report import write_report
from reprocess.storage.commit import Warehouse

ROOT = Path(__file__).resolve().parents[1]

# What a leaked secret looks like in a tracked file.
_KEYS = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), "a GitHub token"),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"), "a Slack token"),
]
# user:password@ in a URL: only placeholders, environment references, RabbitMQ's localhost-only guest account,
# or a redacted password may be written down outside the tests (which use throwaway local credentials).
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://([A-Za-z0-9._%-]+):([^/\s\"'@]+)@")
_PLACEHOLDERS = {"pass", "password", "***", "${MQ_PASSWORD}", "${RABBITMQ_PASSWORD}"}
# The local test brokers' throwaway accounts, like RabbitMQ's guest: ActiveMQ's user that may write to few queues.
_LOCAL_TEST_ACCOUNTS = {("dev/activemq/activemq.xml", "limited")}
_ASSIGNED = re.compile(r"""(?i)\b(password|passwd|secret|token|api_key)\b["']?\s*[:=]\s*["']([^"'\s]{4,})["']""")


def _tracked_text_files() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.fail("the secret scan needs the git checkout (git ls-files)")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    out = []
    for name in filter(None, names):
        path = ROOT / name.decode()
        if path.is_file() and path.stat().st_size < 2_000_000 and b"\0" not in path.read_bytes()[:8192]:
            out.append(path)
    return out


@pytest.mark.unit
def test_no_key_token_or_literal_password_is_committed():
    files = _tracked_text_files()
    assert len(files) > 100
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{rel}: {what}" for rx, what in _KEYS if rx.search(text)]
        if rel.startswith("tests/"):
            continue
        for user, password in _URL_CREDENTIALS.findall(text):
            if password not in _PLACEHOLDERS and "${" not in password and (user, password) != ("guest", "guest"):
                found.append(f"{rel}: credentials in a URL ({user}:{password[:2]}...)")
        for key, value in _ASSIGNED.findall(text):
            if not value.startswith(("$", "{", "<", "os.environ")) and (rel, value) not in _LOCAL_TEST_ACCOUNTS:
                found.append(f"{rel}: {key} = {value[:2]}...")
    assert found == []


@pytest.mark.unit
def test_the_scan_finds_what_it_looks_for():
    """The patterns themselves: a scan that can never fire proves nothing."""
    samples = ["-----BEGIN RSA " + "PRIVATE KEY-----", "AKIA" + "ABCDEFGHIJKLMNOP", "ghp_" + "a" * 36]
    assert [any(rx.search(s) for rx, _ in _KEYS) for s in samples] == [True, True, True]
    assert _URL_CREDENTIALS.findall("amqp://app:" + "s3cr3t" + "@mq:5672/") == [("app", "s3cr3t")]
    assert _ASSIGNED.findall('password = "' + 'hunter22"') == [("password", "hunter22")]


def _modes(root: Path) -> dict[str, str]:
    """Every file and directory under root (root included) whose mode lets group or others in."""
    leaks = {}
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o077:
            leaks[str(p.relative_to(root))] = oct(mode)
    return leaks


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("landing")
    write_landing(GenerateOptions(out=root, messages=80, hours=2, seed=31, malformed=3))
    return root


@pytest.mark.spark
def test_private_files_make_every_warehouse_file_owner_only_and_the_default_does_not(spark, landing, tmp_path,
                                                                                   monkeypatch):
    old = os.umask(0o022)  # what a service usually runs with: new files readable by everybody
    try:
        for private in (True, False):
            # on: from the environment, as the DAGs' Spark jobs get it; off: the default
            monkeypatch.setenv("REPROCESS_PRIVATE_FILES", "1" if private else "")
            wh = tmp_path / f"wh-{private}"
            for as_of in ("2026-11-21T01:00:00Z", "2026-11-21T02:30:00Z")[0 if private else 1:]:
                run_cycle(spark, CycleOptions(landing=str(landing), warehouse=str(wh), policies=load_config(None),
                                              as_of_ms=parse_instant(as_of),
                                              target="python:reprocess.targets.examples:flaky"))
            snap = Warehouse(wh).latest()
            assert snap.files["dlq"], "no dead letter was written"
            assert snap.files["quarantine"], "no record was quarantined"
            audit = redrive_dead_letters(spark, str(wh), RedriveRequest(address_pattern="#"),
                                         parse_instant("2026-11-21T02:30:00Z"))
            assert audit["moved"] > 0
            report = tmp_path / f"report-{private}.html"
            write_report(str(wh), report)
            leaks = _modes(wh)
            if private:
                assert leaks == {}, leaks
                assert stat.S_IMODE(report.stat().st_mode) == 0o600
            else:  # the option is what makes the difference
                assert any(k.startswith("quarantine/") and k.endswith(".parquet") for k in leaks), leaks
                assert stat.S_IMODE(report.stat().st_mode) == 0o644
                os.umask(0o077)  # a restrictive umask still applies to the report, as to any file created so
                write_report(str(wh), report)
                assert stat.S_IMODE(report.stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.unit
def test_the_cli_passes_private_files_to_runs_redrives_and_reports():
    from reprocess.cli import build_parser

    p = build_parser()
    common = ["--warehouse", "wh"]
    run = ["run", "--landing", "l", *common, "--as-of", "2026-11-21T02:30:00Z"]
    assert p.parse_args(run).private_files is None  # the environment decides
    assert p.parse_args([*run, "--private-files"]).private_files is True
    assert p.parse_args([*run, "--no-private-files"]).private_files is False
    assert p.parse_args(["redrive", *common, "--now", "2026-11-21T02:30:00Z", "--private-files"]).private_files
    assert p.parse_args(["report", *common, "--out", "r.html", "--private-files"]).private_files
