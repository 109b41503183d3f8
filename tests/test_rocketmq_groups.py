"""`reprocess policies import` of a RocketMQ 5 subscriptionGroup.json: each consumer group's retryMaxTimes and
groupRetryPolicy as a policy of that group, checked against Java running the proxy's and the gRPC client's arithmetic
(tests/java/RocketMQGroupRetry.java)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tests.java_program import run_java

from reprocess.cli import main
from reprocess.errors import ConfigError
from reprocess.policy.config import load_policies
from reprocess.policy.durations import INT_MAX
from reprocess.policy.reference import Action, decide
from reprocess.policy.rocketmq_groups import (
    DEFAULT_NEXT,
    MAX_DELAY_MS,
    import_subscription_groups,
)
from reprocess.policy.settings import ExponentialSettings, SteppedSettings

DAY = 86_400_000
# delays in ms: zero, sub-second, whole units, the last that doubles hold to the nanosecond (104 days), the largest
# a protobuf duration holds in nanoseconds and one more
DELAYS = [0, 1, 500, 999, 1000, 1500, 60_000, 7_200_000, DAY, 9_007_199_254, 9_007_199_255, 200 * DAY,
          MAX_DELAY_MS - 1, MAX_DELAY_MS, MAX_DELAY_MS + 1]
RETRY_MAX_TIMES = [0, 1, 2, 3, 5, 16, 16, 40, 100, -1, -2, INT_MAX, INT_MAX - 1]
MULTIPLIERS = [0, 1, 2, 2, 3, 3, 7, 10, 2**24 + 1, 2**40 + 3, 10**18]


def _random_group(rng: random.Random) -> tuple[dict, str]:
    """A group's config as the broker writes it, and the line tests/java/RocketMQGroupRetry.java reads."""
    retry = rng.choice(RETRY_MAX_TIMES)
    if rng.random() < 0.5:
        nxt = [rng.choice(DELAYS) if rng.random() < 0.5 else rng.randrange(0, 10 * DAY)
               for _ in range(rng.randrange(1, 7))]
        config = {"groupRetryPolicy": {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": nxt}}}
        line = f"C {retry} {','.join(map(str, nxt))}"
    else:
        initial = rng.choice(DELAYS) if rng.random() < 0.7 else rng.randrange(0, DAY)
        maximum = rng.choice(DELAYS) if rng.random() < 0.7 else rng.randrange(0, 200 * DAY)
        multiplier = rng.choice(MULTIPLIERS)
        config = {"groupRetryPolicy": {"type": rng.choice(["EXPONENTIAL", 0]), "exponentialRetryPolicy": {
            "initial": initial, "max": maximum, "multiplier": multiplier}}}
        line = f"E {retry} {initial} {maximum} {multiplier}"
    config.update({"retryMaxTimes": retry, "consumeMessageOrderly": rng.random() < 0.2, "consumeEnable": True})
    return config, line


EXP = "EXPONENTIAL"
# groups written by hand, with the line of the same settings for the Java program: fields left out take their
# defaults; a multiplier a float cannot hold (2^24 + 1 is 2^24 to the client) within the exact range
HANDWRITTEN = [
    ({}, "C 16 " + ",".join(map(str, DEFAULT_NEXT))),
    ({"groupRetryPolicy": {"type": EXP}}, "E 16 5000 7200000 2"),
    ({"groupRetryPolicy": {"type": EXP, "exponentialRetryPolicy": {"max": 60000}}, "retryMaxTimes": 9},
     "E 9 5000 60000 2"),
    ({"groupRetryPolicy": {"type": 1, "customizedRetryPolicy": {}}}, "C 16 " + ",".join(map(str, DEFAULT_NEXT))),
    ({"groupRetryPolicy": {"type": EXP, "exponentialRetryPolicy": {
        "initial": 1, "max": 9_007_199_254, "multiplier": 2**24 + 1}}, "retryMaxTimes": 5},
     f"E 5 1 9007199254 {2**24 + 1}"),
    ({"groupRetryPolicy": {"type": EXP, "exponentialRetryPolicy": {
        "initial": 3, "max": 9_007_199_254, "multiplier": 3}}, "retryMaxTimes": 40}, "E 40 3 9007199254 3"),
]


def _file(tmp_path: Path, table: dict, name: str = "subscriptionGroup.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"dataVersion": {"counter": 1}, "subscriptionGroupTable": table}, indent=2),
                    encoding="utf-8")
    return path


@pytest.mark.jvm
def test_group_policies_give_what_the_grpc_client_computes(tmp_path):
    """Random groups, one file each: where the client cannot take the settings the import refuses; else the group's
    policy retries failed delivery k after the client's delay, millisecond for millisecond, and dead-letters
    delivery maxAttempts (the first, where maxAttempts wraps or is below 1, as the broker never redelivers)."""
    rng = random.Random(11)
    groups = HANDWRITTEN + [_random_group(rng) for _ in range(400)]
    java = run_java("RocketMQGroupRetry.java", "".join(line + "\n" for _, line in groups)).splitlines()
    assert len(java) == len(groups)
    outcomes = {"refused": 0, "exponential": 0, "stepped": 0, "stepped from exponential": 0, "wrapped": 0}
    for n, ((config, line), out) in enumerate(zip(groups, java, strict=True)):
        path = _file(tmp_path, {f"GID_{n}": config}, f"g{n}.json")
        words = out.split()
        if words[0] == "FAIL":
            with pytest.raises(ConfigError, match="gRPC clients fail on it"):
                import_subscription_groups(path, max_invisible=0)
            outcomes["refused"] += 1
            continue
        imported = import_subscription_groups(path, max_invisible=0)  # a proxy that takes any nack
        max_attempts, delays = int(words[0]), [int(w) for w in words[1:]]
        policy = imported.policies.policies[0]
        assert policy.consumer_group == f"GID_{n}"
        assert policy.ordered == config.get("consumeMessageOrderly", False)
        assert imported.policies.policies[-1].consumer_group is None  # the broker's defaults for other groups
        kind = type(policy.settings).__name__
        if max_attempts < 1:
            outcomes["wrapped"] += 1
            assert decide(policy, 1).action is Action.DEAD_LETTER, line
            assert "max_deliveries 1 written" in imported.summary()
            continue
        outcomes["exponential" if isinstance(policy.settings, ExponentialSettings)
                 else "stepped from exponential" if line[0] == "E" else "stepped"] += 1
        for k, want in enumerate(delays, start=1):
            got = decide(policy, k)
            assert (got.action, got.delay_ms) == (Action.RETRY, want), (line, out, kind, k)
        if max_attempts <= 71:
            assert decide(policy, max_attempts).action is Action.DEAD_LETTER, (line, kind)
        assert load_policies(_written(tmp_path, imported.text)).policies == imported.policies.policies
    assert min(outcomes.values()) >= 5, outcomes
    assert outcomes["exponential"] + outcomes["stepped"] >= 150, outcomes


def _written(tmp_path: Path, text: str) -> Path:
    out = tmp_path / "read-back.yaml"
    out.write_text(text, encoding="utf-8")
    return out


@pytest.mark.unit
def test_an_imported_subscription_group_file_gives_each_group_its_schedule(tmp_path, capsys):
    path = _file(tmp_path, {
        "TOOLS_CONSUMER": {"groupName": "TOOLS_CONSUMER", "retryMaxTimes": 16},
        "CID_RMQ_SYS_TRANS": {"groupName": "CID_RMQ_SYS_TRANS"},
        "GID_orders": {"groupName": "GID_orders", "consumeEnable": True, "consumeMessageOrderly": False,
                       "groupRetryPolicy": {"type": "CUSTOMIZED"}, "retryMaxTimes": 3, "retryQueueNums": 1},
        "GID_pay": {"groupName": "GID_pay", "consumeMessageOrderly": True, "retryMaxTimes": 5,
                    "groupRetryPolicy": {"type": "EXPONENTIAL", "exponentialRetryPolicy": {
                        "initial": 1000, "max": 60000, "multiplier": 3}}},
        "GID_custom": {"groupRetryPolicy": {"customizedRetryPolicy": {"next": [500, 2000, 90000]}}},
    })
    out = tmp_path / "policies.yaml"
    assert main(["policies", "import", str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "3 consumer group(s) -> 3 policies of one group and a '#' policy" in err
    assert "the broker's own groups left out: TOOLS_CONSUMER, CID_RMQ_SYS_TRANS" in err
    text = out.read_text(encoding="utf-8")
    assert "delays: [500ms, 2s, 90s]" in text

    def schedule(group: str | None) -> dict:
        argv = ["schedule", "--config", str(out), "--address", "orders.created", "--format", "json"]
        assert main(argv + (["--consumer-group", group] if group else [])) == 0
        return json.loads(capsys.readouterr().out)["orders.created"]

    def retries(got: dict) -> list[int]:
        assert got["schedule"][-1]["action"] == "dead_letter"
        return [row["delay_ms"] for row in got["schedule"] if row["action"] == "retry"]

    orders = schedule("GID_orders")
    assert (orders["policy"], orders["max_deliveries"], orders["dead_letter_address"]) == (
        "# @GID_orders", 4, "%DLQ%GID_orders")
    assert retries(orders) == [1000, 5000, 10_000]  # next[k - 1]: the gRPC client's own index, not level k + 2
    pay = schedule("GID_pay")
    assert (pay["profile"], pay["max_deliveries"]) == ("exponential", 6)
    assert retries(pay) == [1000, 3000, 9000, 27_000, 60_000]
    custom = schedule("GID_custom")
    assert custom["max_deliveries"] == 17  # retryMaxTimes left out: 16
    assert retries(custom) == [500, 2000] + [90_000] * 14
    other = schedule("GID_new")  # a group the broker creates with its defaults
    assert (other["policy"], other["max_deliveries"], other["dead_letter_address"]) == ("#", 17, "%DLQ%GID_new")
    assert retries(other) == list(DEFAULT_NEXT[:16])
    policies = load_policies(out)
    assert [p.ordered for p in policies.policies] == [False, True, False, False]
    assert isinstance(policies.policies[0].settings, SteppedSettings)


@pytest.mark.unit
def test_what_the_grpc_clients_fail_on_or_fastjson_may_read_otherwise_is_refused(tmp_path, capsys):
    base = {"groupName": "G", "retryMaxTimes": 2}
    for change, key, says in [
        ({"groupRetryPolicy": {"type": None}}, "groupRetryPolicy.type", "the proxy fails on the group's settings"),
        ({"groupRetryPolicy": {"type": "LINEAR"}}, "groupRetryPolicy.type", "must be one of"),
        ({"groupRetryPolicy": {"customizedRetryPolicy": {"next": []}}}, "groupRetryPolicy.customizedRetryPolicy.next",
         "a non-empty list"),
        ({"groupRetryPolicy": {"customizedRetryPolicy": {"next": [1000, -5]}}},
         "groupRetryPolicy.customizedRetryPolicy.next[1]", "a negative delay"),
        ({"groupRetryPolicy": {"customizedRetryPolicy": {"next": [MAX_DELAY_MS + 1]}}},
         "groupRetryPolicy.customizedRetryPolicy.next[0]", "ArithmeticException"),
        ({"groupRetryPolicy": {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"multiplier": -2}}},
         "groupRetryPolicy.exponentialRetryPolicy.multiplier", "a negative multiplier"),
        ({"groupRetryPolicy": {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1.5}}},
         "groupRetryPolicy.exponentialRetryPolicy.initial", "must be a JSON integer"),
        ({"retryMaxTimes": 2**31}, "retryMaxTimes", "is not a Java int"),
        ({"retryMaxTimes": "3"}, "retryMaxTimes", "must be a JSON integer"),
        ({"retry_max_times": 3}, "retry_max_times", "the broker writes 'retryMaxTimes'"),
        ({"consumeMessageOrderly": "yes"}, "consumeMessageOrderly", "must be true or false"),
        ({"isConsumeMessageOrderly": True}, "isConsumeMessageOrderly", "the broker writes 'consumeMessageOrderly'"),
        # fastjson reads the policy the type does not use too: its values must be of their types
        ({"groupRetryPolicy": {"type": "CUSTOMIZED", "exponentialRetryPolicy": {"initial": "x"}}},
         "groupRetryPolicy.exponentialRetryPolicy.initial", "must be a JSON integer"),
        ({"groupRetryPolicy": {"type": EXP, "customizedRetryPolicy": {"next": 5}}},
         "groupRetryPolicy.customizedRetryPolicy.next", "must be a non-empty list"),
    ]:
        with pytest.raises(ConfigError) as info:
            import_subscription_groups(_file(tmp_path, {"G": {**base, **change}}))
        message = str(info.value)
        assert says in message, (change, message)
        assert f"key={key!r}" in message, (change, message)
        assert "policy='G'" in message, (change, message)
    for text, says in [("{}", "no subscriptionGroupTable"), ("{\"subscriptionGroupTable\": [1]}",
                                                             "no subscriptionGroupTable"), ("{,", "not JSON"),
                       ('{"subscriptionGroupTable": {"G": {"retryMaxTimes": 1' + "0" * 5000 + "}}}", "not JSON")]:
        path = tmp_path / "bad.json"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=says):
            import_subscription_groups(path)
    wrapped = import_subscription_groups(_file(tmp_path, {"G": {**base, "retryMaxTimes": INT_MAX}}))
    assert "makes maxAttempts -2147483648" in wrapped.summary()
    assert wrapped.policies.policies[0].settings.max_deliveries == 1  # type: ignore[union-attr]
    # the unused policy's values are not checked as the client would take them: it never takes them
    unused = import_subscription_groups(_file(tmp_path, {"G": {**base, "groupRetryPolicy": {
        "type": "CUSTOMIZED", "exponentialRetryPolicy": {"initial": -5, "multiplier": -2}}}}))
    assert unused.groups[0].next == DEFAULT_NEXT
    named = import_subscription_groups(_file(tmp_path, {"G": {**base, "groupName": "H"}}))
    assert "the broker finds it by 'G'" in named.summary()
    path = _file(tmp_path, {"G": base})
    assert main(["policies", "import", str(path), "--property", "a=b"]) == 3
    assert "a RocketMQ subscriptionGroup.json has none" in capsys.readouterr().err


@pytest.mark.spark
def test_imported_group_policies_give_the_reference_delays_in_spark(spark, tmp_path):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from reprocess.policy.columns import decision_columns
    from reprocess.policy.reference import delay_ms, exhausted

    exp = "EXPONENTIAL"
    imported = import_subscription_groups(_file(tmp_path, {
        "a": {"retryMaxTimes": 40, "groupRetryPolicy": {"customizedRetryPolicy": {"next": [0, MAX_DELAY_MS, 7]}}},
        "b": {"retryMaxTimes": 40, "groupRetryPolicy": {"type": exp, "exponentialRetryPolicy": {
            "initial": 1, "max": 9_007_199_254, "multiplier": 3}}},
        "c": {"retryMaxTimes": 40, "groupRetryPolicy": {"type": exp, "exponentialRetryPolicy": {
            "initial": 7, "max": MAX_DELAY_MS, "multiplier": 3}}},
        "d": {"retryMaxTimes": 40, "groupRetryPolicy": {"type": exp, "exponentialRetryPolicy": {
            "initial": 9000, "max": 100, "multiplier": 0}}},
    }), max_invisible=0)  # a proxy that takes any nack
    policies = imported.policies
    kinds = [type(p.settings).__name__ for p in policies.policies]
    assert kinds == ["SteppedSettings", "ExponentialSettings", "SteppedSettings", "SteppedSettings",
                     "SteppedSettings"]
    data = [(i, k, "m") for i in range(len(policies.effective)) for k in (1, 2, 3, 4, 20, 21, 33, 40, 41)]
    schema = T.StructType([T.StructField("idx", T.IntegerType()), T.StructField("k", T.LongType()),
                           T.StructField("message_id", T.StringType())])
    ex, delay = decision_columns(policies, F.col("idx"), F.col("k"), F.col("message_id"))
    rows = spark.createDataFrame(data, schema).select("idx", "k", ex.alias("ex"), delay.alias("delay")).collect()
    want = [(i, k, exhausted(policies.effective[i], k), delay_ms(policies.effective[i], k)) for i, k, _ in data]
    assert [(r.idx, r.k, r.ex, r.delay) for r in rows] == want


@pytest.mark.unit
def test_a_nack_longer_than_the_proxy_takes_is_refused_unless_fifo(tmp_path, capsys):
    """The proxy refuses a nack past its maxInvisibleTimeMills (12h by default): only the delays a group's bound lets
    happen count, a FIFO group waits in its client, and --max-invisible gives the proxy's own value."""
    def group(retry: int, orderly: bool = False) -> Path:
        return _file(tmp_path, {"G": {"retryMaxTimes": retry, "consumeMessageOrderly": orderly, "groupRetryPolicy": {
            "customizedRetryPolicy": {"next": [1000, 13 * 3_600_000]}}}})

    assert import_subscription_groups(group(1)).groups[0].delays() == [1000]  # delivery 2 is the last: no wait
    for never_retried in ({"retryMaxTimes": 0, "groupRetryPolicy": {"customizedRetryPolicy": {"next": [86_400_000]}}},
                          {"retryMaxTimes": -1, "groupRetryPolicy": {"type": EXP, "exponentialRetryPolicy": {
                              "initial": 86_400_000, "max": 86_400_000}}}):
        assert import_subscription_groups(_file(tmp_path, {"G": never_retried})).groups  # no delay is ever waited
    with pytest.raises(ConfigError, match=r"failed delivery 2 waits 13h, more than the proxy's maxInvisibleTimeMills "
                                          r"\(12h\)") as info:
        import_subscription_groups(group(2))
    assert "key='groupRetryPolicy'" in str(info.value)
    assert import_subscription_groups(group(2, orderly=True)).policies.policies[0].ordered
    exp = _file(tmp_path, {"G": {"groupRetryPolicy": {"type": EXP, "exponentialRetryPolicy": {
        "initial": 3_600_000, "max": 86_400_000, "multiplier": 2}}, "retryMaxTimes": 4}})
    # 1h 2h 4h 8h: within 12h, and delivery 5 is the last
    assert import_subscription_groups(exp).groups[0].delays() == [3_600_000, 7_200_000, 14_400_000, 28_800_000]
    out = tmp_path / "p.yaml"
    assert main(["policies", "import", str(group(2)), "--out", str(out)]) == 3
    assert "--max-invisible" in capsys.readouterr().err
    assert main(["policies", "import", str(group(2)), "--max-invisible", "1d", "--out", str(out)]) == 0
    assert "delays: [1s, 13h]" in out.read_text(encoding="utf-8")
    assert main(["policies", "import", str(group(2)), "--max-invisible", "0", "--out", str(out), "--force"]) == 0
    with pytest.raises(SystemExit):  # rounds to 0, which would mean no limit
        main(["policies", "import", str(group(2)), "--max-invisible", "0.5ms"])
    assert "is less than 1 ms: give 0 for no limit" in capsys.readouterr().err
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=a\n", encoding="latin-1")
    assert main(["policies", "import", str(conf), "--max-invisible", "1d"]) == 3
    assert "--max-invisible goes with a RocketMQ subscriptionGroup.json" in capsys.readouterr().err
    longer = _file(tmp_path, {"G": {"groupRetryPolicy": {"type": EXP, "exponentialRetryPolicy": {
        "initial": 3_600_000, "max": 86_400_000, "multiplier": 2}}, "retryMaxTimes": 5}})
    with pytest.raises(ConfigError, match="failed delivery 5 waits 16h"):
        import_subscription_groups(longer)
