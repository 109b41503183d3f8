"""`reprocess policies import` of a RocketMQ broker.conf: its messageDelayLevel read as the broker reads it, checked
against Java running the broker's own parsing loop (tests/java/RocketMQDelayLevel.java)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tests.java_program import run_java

from reprocess.cli import main
from reprocess.errors import ConfigError
from reprocess.policy.config import load_policies
from reprocess.policy.durations import LONG_MAX
from reprocess.policy.rocketmq_import import import_rocketmq_conf
from reprocess.policy.settings import RocketMQSettings

UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# number parts: ASCII, signs, leading zeros, the largest that fit a long and one more, other scripts' decimal
# digits as escapes (Arabic-Indic, fullwidth, Devanagari), digits Java does not take as decimal (superscript two,
# a mathematical bold digit outside the BMP), and what Long.parseLong refuses
NUMBERS = ["0", "1", "5", "10", "007", "+3", "-1", "-0", "", "+", "-", "1_0", "1e3", "0x10", "\\u0663",
           "\\uff15\\u0661", "\\u0969\\u0966", "\xb2", "\\ud835\\udfcf", "\\u0031", "9223372036854775807",
           "9223372036854775808", "-9223372036854775808", "106751991167", "106751991168", "153722867280912",
           "2562047788015215", "9223372036854775", "9223372036854776"]
UNITS = ["s", "m", "h", "d", "s", "m", "h", "d", "S", "x", "ms", "", "\\u0073", "\\uff53", "\\ud83d\\ude00"]
SEPARATORS = [" ", " ", " ", " ", "  ", "\t", "\\\n   ", " \\\n\t", "\\u0020", "\\t"]
EDGES = ["", "", " ", "\t", "\\ ", "\\t", "\\u0001", "\x01", "\\u00a0", "\xa0", "\\u0000", "\\\n  "]
KEYS = ["messageDelayLevel"] * 6 + ["messageDelayLevel ", "message\\DelayLevel", "MessageDelayLevel",
                                   "messageDelayLevels", "messagedelaylevel"]


def _random_conf(rng: random.Random) -> bytes:
    lines = [rng.choice(["brokerName=broker-a", "brokerName : b", "brokerName\tc"])]
    if rng.random() < 0.2:
        lines.append("# messageDelayLevel=1s 5s")
    for _ in range(rng.choice([0, 1, 1, 1, 1, 2])):
        tokens = [rng.choice(NUMBERS) + rng.choice(UNITS) if rng.random() < 0.35
                  else str(rng.randrange(0, 200)) + rng.choice("smhd") for _ in range(rng.randrange(0, 6))]
        value = tokens[0] if tokens else ""
        for token in tokens[1:]:
            value += rng.choice(SEPARATORS) + token
        key = rng.choice(KEYS)
        lines.append(key + rng.choice(["=", ":", " = ", "\t", " "]) + rng.choice(EDGES) + value + rng.choice(EDGES))
    if rng.random() < 0.3:
        lines.append("deleteWhen=04")
    return ("\n".join(lines) + rng.choice(["", "\n", "\r\n"])).encode("latin-1")


HANDWRITTEN = [
    b"brokerName=a\n",  # the default table
    b"brokerName=a\nmessageDelayLevel=1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h\n",
    b"brokerName=a\nmessageDelayLevel=10s 1d\n",
    b"brokerName=a\nmessageDelayLevel=\n",  # an empty table: the broker does not start
    b"brokerName=a\nmessageDelayLevel=1s  5s\n",  # two spaces
    b"brokerName=a\nmessageDelayLevel=1s\t5s\n",  # a tab is not a separator
    b"brokerName=a\nmessageDelayLevel=  1s 5s \x01\n",  # String.trim takes control characters too
    b"brokerName=a\nmessageDelayLevel=1s 5s\xa0\n",  # but not a no-break space
    b"brokerName=a\nmessageDelayLevel=1s \\\n    5s \\\n 10s\n",  # continued lines
    b"brokerName=a\nmessageDelayLevel=\\u0663s +2m -0h\n",
    b"brokerName=a\nmessageDelayLevel=-1s\n",
    b"brokerName=a\nmessageDelayLevel=106751991167d 106751991168d\n",  # the last fits a long no more
    b"brokerName=a\nmessageDelayLevel=9223372036854775807s\n",  # wraps to -1000
    b"brokerName=a\nmessageDelayLevel=9223372036854775808s\n",  # not a long
    b"brokerName=a\nmessageDelayLevel=1s\nmessageDelayLevel=7s 8s\n",  # the last one counts
    b"brokerName=a\nmessageDelayLevel=1\\u0073 2\\uff53\n",  # an escaped s, a fullwidth one
    b"brokerName=a\nmessageDelayLevel=\\u12\n",  # Properties.load refuses the file
]


def _java(files: list[Path]) -> list[str]:
    return run_java("RocketMQDelayLevel.java", "", *map(str, files)).splitlines()


@pytest.mark.jvm
def test_delay_levels_read_as_the_rocketmq_broker_reads_them(tmp_path):
    """Random broker.conf files: where the broker's loop fails, the import refuses as the broker would not start;
    where it makes a negative or wrapped-around delay, the import refuses it as no policy can hold it; else the
    imported policy has the broker's table, millisecond for millisecond."""
    rng = random.Random(7)
    texts = HANDWRITTEN + [_random_conf(rng) for _ in range(600)]
    files = []
    for n, text in enumerate(texts):
        files.append(tmp_path / f"broker{n}.conf")
        files[-1].write_bytes(text)
    java = _java(files)
    assert len(java) == len(files)
    outcomes: dict[str, int] = {}
    for path, line in zip(files, java, strict=True):
        words = line.split()
        try:
            ours = import_rocketmq_conf(path)
        except ConfigError as exc:
            message = str(exc)
            if words[0] == "FAIL":
                kind = "refused file" if words[1] == "load" else "broker fails"
                says = "Properties refuses" if words[1] == "load" else "the broker does not start"
            else:
                levels = [tuple(map(int, w.split(":"))) for w in words[1:]]
                assert any(ms < 0 or not exact for ms, exact in levels), (path.read_bytes(), line, message)
                kind, says = "cannot hold", "a policy cannot hold it"
            assert says in message, (path.read_bytes(), line, message)
            assert f"file={path}" in message
            outcomes[kind] = outcomes.get(kind, 0) + 1
            continue
        assert words[0] == "OK", (path.read_bytes(), line, ours.levels)
        java_levels = [tuple(map(int, w.split(":"))) for w in words[1:]]
        assert all(exact and ms >= 0 for ms, exact in java_levels), (path.read_bytes(), line)
        assert list(ours.levels) == [ms for ms, _ in java_levels], (path.read_bytes(), line)
        settings = ours.policies.policies[0].settings
        assert isinstance(settings, RocketMQSettings)
        assert settings.message_delay_level == ours.levels
        assert load_policies_text(tmp_path, ours.text).policies == ours.policies.policies
        outcomes["imported"] = outcomes.get("imported", 0) + 1
    # every outcome is met often enough for the comparison to mean something
    assert min(outcomes.get(k, 0) for k in ("imported", "broker fails", "cannot hold", "refused file")) >= 1, outcomes
    assert outcomes["cannot hold"] >= 5, outcomes
    assert outcomes["imported"] >= 150, outcomes
    assert outcomes["broker fails"] >= 150, outcomes


def load_policies_text(tmp_path: Path, text: str):
    out = tmp_path / "read-back.yaml"
    out.write_text(text, encoding="utf-8")
    return load_policies(out)


@pytest.mark.unit
def test_an_imported_broker_conf_gives_the_brokers_schedule(tmp_path, capsys):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName = DefaultCluster\nbrokerName = broker-a\nbrokerId = 0\n"
                    "messageDelayLevel = 1s 5s 10s 30s 1m 2m 3m 4m 5m 10m 30m 1h 2h 6h 12h 1d\n", encoding="latin-1")
    out = tmp_path / "policies.yaml"
    assert main(["policies", "import", str(conf), "--out", str(out)]) == 0
    assert "messageDelayLevel (16 levels) -> 1 rocketmq policy ('#')" in capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    assert "maxReconsumeTimes: -1" in text
    assert "dead_letter_address: '%DLQ%{consumer_group}'" in text
    assert main(["schedule", "--config", str(out), "--address", "orders.created", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["orders.created"]
    assert got["profile"] == "rocketmq"
    assert got["max_deliveries"] == 17  # 16 retries: the client's -1
    assert got["dead_letter_address"] == "%DLQ%{consumer_group}"
    assert got["schedule"][-1]["action"] == "dead_letter"
    delays = [row["delay_ms"] for row in got["schedule"] if row["action"] == "retry"]
    # retry k waits level k + 2: 10s, 30s, 1m ... and the last level (1d) from the 14th retry on
    assert delays == [10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 600_000, 1_800_000, 3_600_000,
                      7_200_000, 21_600_000, 43_200_000, 86_400_000, 86_400_000, 86_400_000]
    assert main(["schedule", "--config", str(out), "--address", "a", "--consumer-group", "g1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["a"]["dead_letter_address"] == "%DLQ%g1"


@pytest.mark.unit
def test_what_the_broker_ignores_is_said_and_what_it_refuses_is_refused(tmp_path, capsys):
    def conf(text: str, name: str = "broker.conf") -> Path:
        path = tmp_path / name
        path.write_bytes(text.encode("latin-1"))
        return path

    misspelt = import_rocketmq_conf(conf("brokerName=a\nmessageDelayLevels=1s 5s\n"))
    assert not misspelt.from_file
    assert len(misspelt.levels) == 18
    assert "'messageDelayLevels' is not a key the broker reads" in misspelt.summary()
    beside = import_rocketmq_conf(conf("brokerName=a\nmessageDelayLevel=1s 5s 9s\nmessageDelayLevel_old=1s\n"))
    assert beside.levels == (1000, 5000, 9000)
    assert "warning" not in beside.summary()  # the key is set: the near miss changes nothing
    assert len(import_rocketmq_conf(conf("rocketmqHome=/opt/rocketmq\n")).levels) == 18  # any key a broker reads
    assert len(import_rocketmq_conf(conf("")).levels) == 18  # the broker starts on its defaults
    other_digits = import_rocketmq_conf(conf("brokerName=a\nmessageDelayLevel=\\u0663s +2m -0h\n"))
    assert other_digits.levels == (3000, 120_000, 0)
    assert "messageDelayLevel: 3s 2m 0h" in other_digits.text
    short = import_rocketmq_conf(conf("brokerName=a\nmessageDelayLevel=1m 1h\n"))
    assert short.levels == (60_000, 3_600_000)
    assert "every retry waits the last level" in short.summary()
    for text, says in [
        ("java.naming.factory.initial=x\nconnectionFactoryNames=cf\n", "give an ActiveMQ Classic client's file with"),
        ("server.port=8080\n", "neither XML nor a RocketMQ broker.conf"),
        ("brokerName=a\nmessageDelayLevel=1s 5\n", "'5': no unit s, m, h or d at its end"),
        ("brokerName=a\nmessageDelayLevel=1s 1.5m\n", "'1.5m': not a Java long before its unit"),
        ("brokerName=a\nmessageDelayLevel=1s -5s\n", "'-5s' is -5000 ms"),
        ("brokerName=a\nmessageDelayLevel=\n", "no level at all: the broker does not start"),
    ]:
        with pytest.raises(ConfigError) as info:
            import_rocketmq_conf(conf(text))
        assert says in str(info.value), (text, str(info.value))
    bom = conf("\ufeffbrokerName=a\nmessageDelayLevel=1s 2s\n".encode().decode("latin-1"), "bom.conf")
    assert main(["policies", "import", str(bom)]) == 0  # a UTF-8 byte-order mark: still no XML
    assert "messageDelayLevel: 1s 2s" in capsys.readouterr().out
    path = conf("brokerName=a\n")
    assert main(["policies", "import", str(path), "--property", "a=b"]) == 3
    assert "--property is for ${KEY} in an XML configuration" in capsys.readouterr().err
    assert main(["policies", "import", "--client", "tcp://mq:61616", str(path)]) == 3
    assert "not an Artemis broker.xml or a RocketMQ broker.conf" in capsys.readouterr().err


@pytest.mark.spark
def test_imported_extreme_levels_give_the_reference_delays_in_spark(spark, tmp_path):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from reprocess.policy.columns import decision_columns
    from reprocess.policy.reference import delay_ms, exhausted

    conf = tmp_path / "broker.conf"
    conf.write_bytes(b"brokerName=a\nmessageDelayLevel=0s 106751991167d 1s 106751991167d 0s\n")
    policies = import_rocketmq_conf(conf).policies
    data = [(0, k, "m") for k in (1, 2, 3, 4, 17, 18, 2**40, LONG_MAX - 1)]
    schema = T.StructType([T.StructField("idx", T.IntegerType()), T.StructField("k", T.LongType()),
                           T.StructField("message_id", T.StringType())])
    ex, delay = decision_columns(policies, F.col("idx"), F.col("k"), F.col("message_id"))
    rows = spark.createDataFrame(data, schema).select("k", ex.alias("ex"), delay.alias("delay")).collect()
    policy = policies.effective[0]
    assert [(r.k, r.ex, r.delay) for r in rows] == [(k, exhausted(policy, k), delay_ms(policy, k)) for _, k, _ in data]
    assert [r.delay for r in rows][:3] == [1000, 106751991167 * 86_400_000, 0]
