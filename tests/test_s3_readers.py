"""The readers without Spark on a warehouse in an S3 bucket: `reprocess dlq|ledger stats|report`, the UI's counts and
the DAG tasks around the Spark job, through pyarrow's S3 filesystem, against a real S3 server over HTTP (moto in
server mode, installed into .s3server/ by dev/services.sh).

The warehouse is written by real cycles and a DLQ re-drive on the local disk, then copied object by object into the
bucket: its layout is the one the Hadoop writer gives a bucket (tests/test_object_store.py shows the two writers
commit the same files). No Hadoop S3A connector can be installed here, so the writer itself never talks to S3 in
these tests. Every reader must answer from the bucket exactly what it answers from the disk.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reprocess.cli import main, parse_instant
from reprocess.connect_server import free_port
from reprocess.dlq_stats import dlq_stats
from reprocess.errors import ConfigError, NotFoundError, StorageUnavailableError, WarehouseDamagedError
from reprocess.landing.generate import GenerateOptions, write_landing
from reprocess.orchestration import check_outputs, find_new_landing, read_summary, redrive_audit, run_on_connect
from reprocess.redrive import RedriveRequest, redrive_dead_letters
from warehouse_state import cycle_at

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
from s3_server import admin_filesystem, aws_env, running_s3_server  # noqa: E402 - dev/ is not a package

pytestmark = pytest.mark.spark

BUCKET = "reprocess-wh"
AS_OFS = ("2026-11-21T01:00:00Z", "2026-11-21T02:00:00Z", "2026-11-21T06:00:00Z")
LATER = "2026-11-21T07:00:00Z"


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[str]:
    """A fresh S3 server on a free loopback port, and the AWS environment pointing pyarrow at it; its endpoint. A
    server not installed or not starting is an error of every test here, naming the cause."""
    with running_s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as endpoint, \
            pytest.MonkeyPatch.context() as mp:
        for key, value in aws_env(endpoint).items():
            mp.setenv(key, value)
        yield endpoint


@pytest.fixture(scope="module")
def warehouses(spark, s3, tmp_path_factory) -> dict[str, object]:
    """Three cycles, a DLQ re-drive and a later cycle on a local warehouse, its copy in the bucket, and a landing
    holding files no cycle has read yet."""
    import pyarrow.fs as pafs

    root = tmp_path_factory.mktemp("s3-readers")
    landing, local = root / "landing", root / "wh"
    write_landing(GenerateOptions(out=landing, messages=300, hours=2, seed=11, malformed=3))
    for as_of in AS_OFS:
        cycle_at(spark, landing, local, as_of)
    request = RedriveRequest(address_pattern="#", max_messages=5, reset_deliveries=True)
    assert redrive_dead_letters(spark, str(local), request, parse_instant("2026-11-21T06:30:00Z"),
                                requested_by="test")["moved"] == 5
    cycle_at(spark, landing, local, LATER)
    # files a next run would read: a new hour of failures
    write_landing(GenerateOptions(out=root / "more", messages=40, hours=1, seed=12,
                                  start=datetime(2026, 11, 21, 8, tzinfo=UTC)))
    for f in (root / "more").rglob("*.jsonl"):
        dest = landing / f.relative_to(root / "more")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    fs = admin_filesystem(s3)
    fs.create_dir(BUCKET)
    pafs.copy_files(str(local), f"{BUCKET}/wh", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    return {"landing": str(landing), "local": str(local), "fs": fs,
            "request": request.at(parse_instant("2026-11-21T06:30:00Z")).request_id}


def _json(capsys, *args: str) -> dict:
    assert main([*args, "--format", "json"]) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    doc.pop("warehouse", None)
    return doc


@pytest.mark.parametrize("scheme", ["s3a", "s3"])
def test_operator_commands_answer_from_the_bucket_what_they_answer_from_the_disk(capsys, warehouses, scheme):
    local, uri = warehouses["local"], f"{scheme}://{BUCKET}/wh"
    listed = _json(capsys, "dlq", "list", "--warehouse", local, "--limit", "500")
    assert listed["matched"] > 5  # dead letters of every kind, some moved back and dead-lettered again
    assert _json(capsys, "dlq", "list", "--warehouse", uri, "--limit", "500") == listed
    for filters in (["--reason", "NON_RETRYABLE"], ["--address", "orders.#"], ["--since", "2026-11-21T03:00:00Z"]):
        assert (_json(capsys, "dlq", "list", "--warehouse", uri, *filters)
                == _json(capsys, "dlq", "list", "--warehouse", local, *filters))
    some = listed["dead_letters"][len(listed["dead_letters"]) // 2]["message_id"]
    shown = _json(capsys, "dlq", "show", "--warehouse", uri, some)
    assert shown["message_id"] == some
    assert shown["payload"] is not None
    assert shown == _json(capsys, "dlq", "show", "--warehouse", local, some)
    assert _json(capsys, "dlq", "stats", "--warehouse", uri) == _json(capsys, "dlq", "stats", "--warehouse", local)
    assert (_json(capsys, "ledger", "stats", "--warehouse", uri)
            == _json(capsys, "ledger", "stats", "--warehouse", local))
    # the UI's page reads the same counts (plugins/reprocess_plugin.py calls dlq_stats)
    ui, ui_local = dlq_stats(uri), dlq_stats(local)
    assert ui.pop("warehouse") == uri
    assert ui_local.pop("warehouse") == local
    assert ui == ui_local
    assert ui["total"] == listed["matched"]
    # a message that is waiting, not dead: the same "not found" answer, naming its ledger state
    assert main(["dlq", "show", "--warehouse", uri, "no-such-id"]) == NotFoundError.exit_code
    assert "no message 'no-such-id'" in capsys.readouterr().err


def test_the_report_from_the_bucket_is_the_report_from_the_disk(warehouses, tmp_path):
    local, uri = warehouses["local"], f"s3a://{BUCKET}/wh"
    assert main(["report", "--warehouse", uri, "--out", str(tmp_path / "s3.html")]) == 0
    assert main(["report", "--warehouse", local, "--out", str(tmp_path / "local.html")]) == 0
    page = (tmp_path / "s3.html").read_text(encoding="utf-8")
    assert f"<code>{uri}</code>" in page
    assert page.count('<img class="plot"') == 6
    assert page.replace(uri, "WH") == (tmp_path / "local.html").read_text(encoding="utf-8").replace(local, "WH")


def test_the_dag_tasks_read_a_warehouse_in_the_bucket(spark, warehouses):
    local, uri, landing = warehouses["local"], f"s3a://{BUCKET}/wh", warehouses["landing"]
    for as_of in (*AS_OFS, LATER):
        summary = read_summary(uri, as_of)
        assert summary is not None
        assert summary == read_summary(local, as_of)
        assert check_outputs(summary)["checked"]
    # the re-drive committed at 06:00's state is no cycle of 06:00: the DAG checks, and a re-run of that cycle
    # returns, the cycle's summary (both used to take the re-drive's, which has no conservation to check)
    again = cycle_at(spark, landing, local, AS_OFS[-1])
    assert again["already_committed"]
    assert again["run_id"] == read_summary(uri, AS_OFS[-1])["run_id"]
    assert read_summary(uri, "2026-11-21T05:00:00Z") is None  # no run committed as of then
    # the manifest in the bucket says which landing files are new: only the hour written after the last cycle
    found = find_new_landing(landing, uri, "2026-11-21T09:00:00Z")
    assert found == find_new_landing(landing, local, "2026-11-21T09:00:00Z")
    assert found["files"] > 0
    assert found["partitions"] == ["dt=2026-11-21/hour=08"]
    audit = redrive_audit(uri, warehouses["request"])
    assert audit is not None
    assert audit == redrive_audit(local, warehouses["request"])
    assert audit["request_id"] == warehouses["request"]
    assert redrive_audit(uri, "redrive-0000000000000000") is None
    assert audit["moved"] == 5


def test_readers_in_the_bucket_see_only_what_the_latest_snapshot_lists(capsys, warehouses):
    """Objects a crashed or running writer left (a staged run, a published file no snapshot lists yet, a lease)
    change no answer: the readers read the snapshot's list, never a listing of the data."""
    fs, uri = warehouses["fs"], f"s3a://{BUCKET}/wh"
    before = _json(capsys, "dlq", "stats", "--warehouse", uri)
    ledger = _json(capsys, "ledger", "stats", "--warehouse", uri)
    snap = json.loads(Path(warehouses["local"], "_snapshots", "00000005.json").read_text())
    one_dlq = snap["files"]["dlq"][0]
    stray = {f"{BUCKET}/wh/{one_dlq.rsplit('/', 1)[0]}/run-crashed-part-0.parquet": f"{BUCKET}/wh/{one_dlq}",
             f"{BUCKET}/wh/{snap['files']['ledger'][0].rsplit('/', 1)[0]}/run-crashed-part-0.parquet":
                 f"{BUCKET}/wh/{snap['files']['ledger'][0]}"}
    for dest, src in stray.items():
        fs.copy_file(src, dest)
    with fs.open_output_stream(f"{BUCKET}/wh/_runs/run-crashed/prepared.json") as out:
        out.write(b'{"run_id": "run-crashed", "as_of_ms": 1}')
    with fs.open_output_stream(f"{BUCKET}/wh/_lock") as out:
        out.write(b'{"owner": "run-crashed", "token": "x", "expires_ms": 1}')
    try:
        assert _json(capsys, "dlq", "stats", "--warehouse", uri) == before
        assert _json(capsys, "ledger", "stats", "--warehouse", uri) == ledger
    finally:
        for dest in (*stray, f"{BUCKET}/wh/_runs/run-crashed/prepared.json", f"{BUCKET}/wh/_lock"):
            fs.delete_file(dest)


def test_readers_name_what_is_wrong_with_a_bucket(capsys, warehouses):
    fs = warehouses["fs"]
    assert main(["dlq", "list", "--warehouse", f"s3a://{BUCKET}/nowhere"]) == ConfigError.exit_code
    assert f"warehouse s3a://{BUCKET}/nowhere does not exist" in capsys.readouterr().err
    for bare in ("s3a://", "gs://"):  # no bucket: pyarrow's "Path cannot start with a separator", or a hang
        assert main(["dlq", "list", "--warehouse", bare]) == ConfigError.exit_code
        assert f"warehouse {bare} names no bucket" in capsys.readouterr().err
    with fs.open_output_stream(f"{BUCKET}/empty/readme.txt") as out:
        out.write(b"not a warehouse")
    assert main(["ledger", "stats", "--warehouse", f"s3a://{BUCKET}/empty"]) == ConfigError.exit_code
    assert "no committed snapshot" in capsys.readouterr().err
    assert dlq_stats(f"s3a://{BUCKET}/empty")["total"] == 0  # the UI shows an empty page before the first run
    # a warehouse that is not there at all: an error, not zero dead letters (the UI's REPROCESS_WAREHOUSE mistyped)
    with pytest.raises(ConfigError, match=f"warehouse s3a://{BUCKET}/nowhere does not exist: no run has committed"):
        dlq_stats(f"s3a://{BUCKET}/nowhere")


@pytest.mark.parametrize("where", ["disk", "bucket"])
def test_readers_name_a_live_file_that_is_gone_or_not_parquet(capsys, warehouses, tmp_path, where):
    """Something outside reprocess overwrote, truncated or deleted files the snapshot lists: every reader names the
    file and exits with WarehouseDamagedError, not a traceback from pyarrow."""
    import pyarrow.fs as pafs

    fs = warehouses["fs"]
    local = tmp_path / "wh"
    shutil.copytree(warehouses["local"], local)
    if where == "disk":
        uri, target_fs, base = str(local), pafs.LocalFileSystem(), str(local)
    else:
        base = f"{BUCKET}/damaged-{tmp_path.name}"
        pafs.copy_files(f"{BUCKET}/wh", base, source_filesystem=fs, destination_filesystem=fs)
        uri, target_fs = f"s3a://{base}", fs
    snap = json.loads(max((local / "_snapshots").glob("*.json")).read_text())
    dlq, ledger = snap["files"]["dlq"], snap["files"]["ledger"]
    assert main(["dlq", "list", "--warehouse", uri]) == 0
    capsys.readouterr()

    def damaged(*args: str) -> str:
        assert main([*args, "--warehouse", uri]) == WarehouseDamagedError.exit_code
        return capsys.readouterr().err

    with target_fs.open_output_stream(f"{base}/{dlq[0]}") as out:
        out.write(b"not parquet")
    for command in (["dlq", "list"], ["dlq", "stats"], ["dlq", "show", "some-id"]):
        err = damaged(*command)
        assert f"lists {base}/{dlq[0]}, which is not a readable Parquet file" in err, err
        assert "Traceback" not in err
    whole = target_fs.open_input_file(f"{base}/{ledger[0]}").read()
    with target_fs.open_output_stream(f"{base}/{ledger[0]}") as out:
        out.write(whole[: len(whole) // 2])  # a write cut off half-way
    assert f"lists {base}/{ledger[0]}, which is not a readable Parquet file" in damaged("ledger", "stats")
    target_fs.delete_file(f"{base}/{dlq[0]}")
    assert f"lists {base}/{dlq[0]}, which is not there" in damaged("dlq", "list")
    # a DAG task on Spark Connect runs the CLI in a child: exit 12 fails it without retries (the dlq commands start no
    # Spark, so no server is needed here)
    with pytest.raises(WarehouseDamagedError, match="exit 12"):
        run_on_connect("dlq", ["list", "--warehouse", uri], "sc://localhost:1")
    if where == "bucket":
        fs.delete_dir(base)


def test_the_cli_reads_the_bucket_in_a_fresh_process_from_the_aws_environment_without_spark(warehouses, s3):
    """What an operator's shell does: the endpoint and credentials come only from the AWS_* variables."""
    uri = f"s3a://{BUCKET}/wh"
    code = ("import sys, contextlib, io\nfrom reprocess.cli import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    assert main(['dlq', 'stats', '--warehouse', {uri!r}, '--format', 'json']) == 0\n"
            "print(out.getvalue().strip().replace(chr(10), ' '))\nprint('pyspark' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc, loaded = proc.stdout.strip().rsplit("\n", 1)
    assert json.loads(doc)["total"] == dlq_stats(warehouses["local"])["total"] > 0
    assert loaded == "False"
    # and with the endpoint gone, the reader fails by name (exit 11, which the DAG tasks retry) instead of
    # answering from nothing
    proc = subprocess.run([sys.executable, "-m", "reprocess.cli", "dlq", "stats", "--warehouse", uri],
                          capture_output=True, text=True, timeout=120,
                          env={**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"})
    assert proc.returncode == StorageUnavailableError.exit_code, proc.stderr[-2000:]
    assert f"reprocess: storage: warehouse {uri}: cannot read {BUCKET}/wh" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "total" not in proc.stdout


@pytest.mark.unit
def test_an_azure_warehouse_reads_with_the_account_key_of_the_environment(monkeypatch):
    """README promises AZURE_STORAGE_ACCOUNT_KEY; pyarrow's URI reading takes no key from the environment, and its
    default credentials cannot use one, so every reader of an abfss:// warehouse was refused."""
    from reprocess.storage.remote import arrow_filesystem

    key = base64.b64encode(b"not a real key").decode()
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", key)
    fs, path = arrow_filesystem("abfss://cont@acct.dfs.core.windows.net/wh/")
    options = fs.__reduce__()[1][0]
    assert (path, options["account_name"], options["account_key"]) == ("cont/wh", "acct", key)
    assert options["dfs_storage_authority"] == ".dfs.core.windows.net"
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
    fs, _ = arrow_filesystem("abfss://cont@acct.dfs.core.windows.net/wh/")
    assert fs.__reduce__()[1][0]["account_key"] == ""  # the default credential chain, as before


@pytest.mark.unit
def test_a_failed_lookup_of_an_s3_buckets_region_is_retryable_and_a_missing_bucket_is_configuration(monkeypatch):
    """Without an endpoint pyarrow asks AWS for the bucket's region as it opens the filesystem. When that failed (no
    network here) the reader said "configuration error" (exit 3), where README promises StorageUnavailableError
    (exit 11, which the DAG tasks retry); a bucket AWS says does not exist stays a configuration error."""
    from reprocess.storage.remote import arrow_filesystem

    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises((StorageUnavailableError, ConfigError)) as err:
        arrow_filesystem("s3a://reprocess-no-such-bucket-5c1f/wh")
    assert isinstance(err.value, ConfigError) == ("not found" in str(err.value)), err.value
    if "NETWORK_CONNECTION" in str(err.value):  # this machine: no route to AWS
        assert isinstance(err.value, StorageUnavailableError)
        assert "could not reach it" in str(err.value)
