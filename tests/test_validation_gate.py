"""The GX gate inside a cycle: landing rows quarantined with the expectations they broke, a failing output
suite stops the commit, Data Docs per run."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from tests.test_cycle_steps import cycle, land, ledger, rec
from tests.warehouse_state import kept_rdds

from reprocess.errors import ValidationFailedError
from reprocess.storage.commit import Warehouse
from reprocess.storage.read import read_dataset
from reprocess.validation.suites import SUITES_DIR

pytestmark = pytest.mark.spark


def _suites(tmp_path: Path, name: str, extra: dict) -> Path:
    """A copy of the repo's suites with one expectation added to ``name``."""
    out = tmp_path / "expectations"
    shutil.copytree(SUITES_DIR, out)
    doc = json.loads((out / f"{name}.json").read_text())
    doc["expectations"].append(extra)
    (out / f"{name}.json").write_text(json.dumps(doc))
    return out


def test_quarantined_rows_name_the_expectations_they_broke(spark, tmp_path):
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("ok-1", "2026-11-21T10:00:00Z"),
        rec("bad-count", "2026-11-21T10:00:00Z", delivery_count=0),
        rec("bad-address", "2026-11-21T10:00:00Z", address="orders..created"),
        rec("", "2026-11-21T10:00:00Z"),
        rec("future", "2026-11-23T10:00:00Z"),
        "{not json",
    ])
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    q = {r.record_no: r for r in read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()}
    assert {n: (q[n].reason_code, list(q[n].expectations)) for n in q} == {
        2: ("INVALID_DELIVERY_COUNT", ["expect_column_values_to_be_between(delivery_count)"]),
        3: ("INVALID_ADDRESS", ["expect_column_values_to_match_regex(address)"]),
        4: ("EMPTY_MESSAGE_ID", ["expect_column_value_lengths_to_be_between(message_id)"]),
        5: ("FUTURE_TIMESTAMP", ["expect_column_values_to_be_between(failed_after_as_of_ms)"]),
        6: ("MALFORMED_JSON", []),  # no record to speak of: the contract's reason says why
    }
    assert set(ledger(spark, tmp_path)) == {"ok-1"}
    assert s["validation"]["passed"]
    assert set(s["validation"]["suites"]) == {"landing", "ledger", "dlq", "run"}
    index = Path(s["validation"]["data_docs"])
    assert index == tmp_path / "wh" / "runs" / s["run_id"] / "data_docs" / "index.html"
    html = index.read_text()
    for suite in ("landing", "ledger", "dlq", "run"):
        assert suite in html
    assert list(index.parent.glob("validations/**/*.html")), "one page per validation"
    # The site's static files are the ones its pages link to (GX's own copies 4.3 MB into every site): the favicon,
    # which the index and the suite pages find
    docs = index.parent
    assert sorted(str(p.relative_to(docs)) for p in (docs / "static").rglob("*") if p.is_file()) == [
        "static/images/favicon.ico"]
    for page in [index, *docs.glob("expectations/*.html")]:
        local = [link for link in re.findall(r'(?:href|src)="([^"#]+)"', page.read_text()) if "://" not in link]
        assert local, page
        assert all((page.parent / link).resolve().is_file() for link in local), (page, local)
    assert sum(p.stat().st_size for p in docs.rglob("*") if p.is_file()) < 1 << 20



def test_the_static_files_a_site_links_to_are_made_again_when_something_removed_them():
    """A long-lived driver keeps its copy of the linked static files in a temporary folder, which a cleaner of old
    temporary files may remove: the next site is built from a new copy, not failed."""
    from reprocess.validation import suites

    first = Path(suites._linked_static())
    assert sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file()) == list(suites.LINKED_STATIC)
    assert suites._linked_static() == str(first)  # once per process
    shutil.rmtree(first.parent)
    again = Path(suites._linked_static())
    assert again != first
    assert all((again / name).is_file() for name in suites.LINKED_STATIC)

def test_data_docs_templates_are_compiled_once_per_process_and_render_the_same_pages(spark, tmp_path, monkeypatch):
    """GX makes a Jinja environment per view, and each compiled its templates again at every run's Data Docs (51
    compiles in a small cycle). They are compiled once per process: a second site compiles none, and its pages are
    the first's (but for GX's wall-clock stamps)."""
    import jinja2
    import pandas as pd

    from reprocess.validation import suites

    compiles = []
    original = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda env, *a, **k: compiles.append(1) or original(env, *a, **k))
    monkeypatch.setattr(suites, "_TEMPLATE_CODE", {})  # as in a new process
    suite = {"name": "t", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "message_id"}}]}

    def site(name: str) -> tuple[int, dict[str, str]]:
        compiles.clear()
        docs = tmp_path / name
        v = suites.Validator("run-x", 1_700_000_000_000, str(docs))
        assert v.validate(pd.DataFrame([{"message_id": "a"}]), suite).success
        v.build_docs()
        stamp = re.compile(r"\d{8}T\d{6}\.\d{6}Z")  # GX's own: when it rendered or validated
        pages = {str(p.relative_to(docs)): stamp.sub("<now>", p.read_text()) for p in docs.rglob("*.html")}
        return len(compiles), pages

    first, second = site("a"), site("b")
    assert first[0] > 0
    assert second[0] == 0
    assert len(first[1]) == 3  # the index, the suite's page, the validation's page
    assert second[1] == first[1]


def test_a_landing_of_few_rows_and_many_payload_bytes_is_validated_on_spark_not_collected(spark, tmp_path,
                                                                                            monkeypatch):
    """GX's pandas engine collects a frame into the driver, which spares small frames a dozen Spark jobs; a landing
    of few records can still hold many payload bytes (1,000 payloads of 400 KB ran a 2 GB driver out of heap).
    The cycle counts the payload bytes of the records it accepts, and the landing suite goes to Spark above
    SMALL_BYTES of them, however few the rows; the other suites, without payloads, stay on pandas."""
    from reprocess.validation import suites

    land(tmp_path / "a" / "landing", "10", "a.jsonl", [
        {**rec("wide", "2026-11-21T10:00:00Z"), "payload": "\u00e9" * 300},  # 600 bytes in UTF-8, 300 characters
        rec("ok", "2026-11-21T10:01:00Z"),  # p-ok: 4 bytes
        {**rec("bad", "2026-11-21T10:00:00Z", delivery_count=0), "payload": "y" * 5000},  # quarantined
        {**rec("later", "2026-11-21T11:00:00Z"), "payload": "z" * 5000},  # after the as-of: deferred
    ])
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    accepted = 600 + 4
    engines = {}
    for name, bound in (("a", accepted), ("b", accepted - 1)):
        monkeypatch.setattr(suites, "SMALL_BYTES", bound)
        s = cycle(spark, tmp_path / name, "2026-11-21T10:05:00Z")
        assert s["accepted_payload_bytes"] == accepted
        assert s["validation"]["passed"]
        assert s["quarantined"] == 1
        assert s["deferred_until_later_as_of"] == 1
        engines[name] = s["validation"]["engines"]
    assert engines == {"a": dict.fromkeys(("landing", "ledger", "dlq", "run"), "pandas"),
                       "b": {"landing": "spark", "ledger": "pandas", "dlq": "pandas", "run": "pandas"}}
    assert ledger(spark, tmp_path / "a") == ledger(spark, tmp_path / "b")


def test_a_cycle_validated_on_spark_leaves_nothing_cached(spark, tmp_path, monkeypatch):
    """GX's Spark data source persists every frame it validates and never unpersists it. The landing suite reads a
    projection of the cycle's cached records (no second copy of the payloads), so with GX persisting, that projection
    would stay cached in a long-lived driver (a Spark Connect server) after every cycle. The cycle caches what it
    validates itself and releases it; after a cycle whose suites all ran on Spark, the session holds no more cached
    data than before."""
    from reprocess.validation import suites

    monkeypatch.setattr(suites, "SMALL_ROWS", 0)  # every suite on Spark, as for batches above 20,000 rows
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("m1", "2026-11-21T10:00:00Z"), rec("m2", "2026-11-21T10:01:00Z"),
        rec("bad", "2026-11-21T10:02:00Z", error_class="com.acme.ValidationError")])
    before = kept_rdds(spark)
    s = cycle(spark, tmp_path, "2026-11-21T10:30:00Z")
    assert s["validation"]["engines"] == dict.fromkeys(("landing", "ledger", "dlq", "run"), "spark")
    assert s["dead_lettered"]["total"] == 1
    assert kept_rdds(spark) <= before


def test_an_expectation_added_to_the_landing_suite_quarantines_the_rows_that_break_it(spark, tmp_path, monkeypatch):
    suites = _suites(tmp_path, "landing", {"type": "expect_column_values_to_not_match_regex",
                                           "kwargs": {"column": "address", "regex": "^orders\\.legacy"}})
    monkeypatch.setenv("REPROCESS_EXPECTATIONS", str(suites))
    land(tmp_path / "landing", "10", "a.jsonl", [
        rec("ok-1", "2026-11-21T10:00:00Z"),
        rec("legacy-1", "2026-11-21T10:00:00Z", address="orders.legacy.v1"),
        rec("ok-2", "2026-11-21T10:00:00Z", address="billing.invoice"),
    ])
    s = cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    (q,) = read_dataset(spark, str(tmp_path / "wh"), "quarantine").collect()
    assert (q.record_no, q.reason_code, list(q.expectations)) == (
        2, "EXPECTATION_FAILED", ["expect_column_values_to_not_match_regex(address)"])
    assert q.reason == "breaks the landing suite: expect_column_values_to_not_match_regex(address)"
    assert set(ledger(spark, tmp_path)) == {"ok-1", "ok-2"}
    assert (s["quarantined"], s["new_messages"]) == (1, 2)


def test_a_failing_output_suite_commits_nothing_and_the_fixed_run_then_commits(spark, tmp_path, monkeypatch):
    land(tmp_path / "landing", "10", "a.jsonl", [rec("m1", "2026-11-21T10:00:00Z"),
                                                  rec("m2", "2026-11-21T10:01:00Z", address="billing.invoice")])
    cycle(spark, tmp_path, "2026-11-21T10:05:00Z")
    wh = Warehouse(str(tmp_path / "wh"))
    before = wh.latest()
    # A stricter ledger suite than the policies allow stands in for a bug that writes a wrong ledger.
    suites = _suites(tmp_path, "ledger", {"type": "expect_column_values_to_be_between",
                                          "kwargs": {"column": "deliveries", "max_value": 1}})
    monkeypatch.setenv("REPROCESS_EXPECTATIONS", str(suites))
    kept = kept_rdds(spark)
    with pytest.raises(ValidationFailedError) as err:
        cycle(spark, tmp_path, "2026-11-21T10:15:00Z")  # m1 is due and fails again: deliveries 2
    assert kept_rdds(spark) <= kept, "the failed run freed the frames it kept (sparkutil.pinning)"
    message = str(err.value)
    assert "suite ledger" in message
    assert "expect_column_values_to_be_between(deliveries) unexpected=1" in message
    assert "nothing was committed" in message
    docs = Path(message.rsplit("Data Docs: ", 1)[1])
    assert docs.is_file()
    assert wh.latest().version == before.version
    assert ledger(spark, tmp_path)["m1"]["deliveries"] == 1
    assert wh.prepared_runs(), "the deliveries persisted before the re-drive stay, to be resumed"
    monkeypatch.delenv("REPROCESS_EXPECTATIONS")
    s = cycle(spark, tmp_path, "2026-11-21T10:15:00Z")  # resumes the prepared run with the same deliveries
    assert ledger(spark, tmp_path)["m1"]["deliveries"] == 2
    assert s["validation"]["passed"]
    assert wh.latest().version == before.version + 1
