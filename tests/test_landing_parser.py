"""The JVM parser of well-formed landing lines (spark/java/reprocess/landing/WellFormedLine.java) changes nothing
but the cost: on every line, generated or from the bad-input corpus, the landing contract gives the same problem,
detail and values with it as with the built-in expressions alone (the reference), and it does take the lines a
consumer normally writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reprocess.landing import contract
from reprocess.sparkutil import restoring_conf

pytestmark = pytest.mark.spark

AS_OF_MS = 1_795_240_800_000  # 2026-11-21T04:00:00Z
CORPUS = Path(__file__).resolve().parent / "data" / "bad" / "records"


@pytest.fixture(scope="module")
def jvm(spark) -> bool:
    registered = contract.use_jvm_parser(spark)
    assert registered, "make venv builds the jar with reprocess.landing.WellFormedLine (needs javac, a JDK 17)"
    return registered


def _parsed(spark, path: Path, jvm: bool) -> list:
    raw = contract.read_text_records(spark, [str(path)])
    parsed = contract.parse_records(raw, AS_OF_MS, jvm=jvm).drop("source_file")
    # as microseconds: Python's datetime has no year 0, which an early instant in the local time zone can reach
    rows = parsed.withColumn("failed_at", F.unix_micros("failed_at")).collect()
    return sorted(rows, key=lambda r: r.record_no)


def _agree(spark, tmp_path: Path, lines: list[bytes]) -> tuple[list, list]:
    """Both paths over ``lines`` (one landing file): the expression path's rows and the JVM path's, equal."""
    path = tmp_path / "landing.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    reference = _parsed(spark, path, jvm=False)
    with_jvm = _parsed(spark, path, jvm=True)
    assert len(with_jvm) == len(reference)
    for ref, got in zip(reference, with_jvm, strict=True):
        assert got == ref, f"line {ref.record_no} ({ref.raw!r}): {got} != {ref}"
    return reference, with_jvm


def _accepted(spark, lines: list[str]) -> list[bool]:
    """Which lines the JVM parser takes (a non-null struct) rather than leaving to the general path."""
    df = spark.createDataFrame([(i, line) for i, line in enumerate(lines)], "i int, raw string")
    got = df.select("i", F.call_function(contract.JVM_PARSER_FUNCTION, F.col("raw")).isNotNull().alias("ok"))
    return [r.ok for r in sorted(got.collect())]


# -- generated lines -------------------------------------------------------------------------------------------------
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
tricky = st.sampled_from(["", "]", "a]b", "}", "\u0000", "\u007f", "\n", "\u00a0", "\u2028", "\ufeff", "\ufffd",
                          "x" * 300, "\u00e9\u6ce8\U0001f600"])
string_json = st.one_of(texts, tricky).flatmap(
    lambda t: st.sampled_from([json.dumps(t), json.dumps(t, ensure_ascii=False)])) | st.sampled_from(
    ['"\\ud800"', '"a\\u0000b"', '"\\u005d"', '"\\/"', '"tab\\tsep"'])
addresses = st.sampled_from(["orders.created", "a.b.c", "x", "a..b", "a b", "a/b", "a\\\\b", "", ".a", "a\u00a0b",
                             "weird.k=v", "größe.注文"]).map(json.dumps)
timestamps = st.sampled_from([
    "2026-11-21T02:41:52.280Z", "2026-11-21T02:41:52Z", "2026-11-21T02:41:52+01:00", "2026-11-21T02:41:52-0530",
    "2026-11-21T02:41:52+01", "2026-11-21T02:41:52.1Z", "2026-11-21T02:41:52.123456789Z", "2026-11-21T02:41:52.Z",
    "2026-11-21T02:41:52", "2026-11-21", "2026-02-30T10:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21t02:41:52z",
    "2026-11-21T02:41:52+19:00", "2026-11-22T10:00:00Z", "1969-12-31T23:59:59.9995Z", "0001-01-01T00:00:00Z",
    "2026-11-21 02:41:52Z", "2026-11-21T02:41:52.123+00:00"]).map(json.dumps)
integers = st.one_of(st.integers(-3, 5), st.sampled_from([2**31, 2**63 - 1, 2**63, -(2**63), 10**30])).map(str)
others = st.sampled_from(["1.0", "1e2", "-0", "true", "false", "null", "[]", '["a"]', "{}", '{"a":"b"}', '{"a":1}',
                          '{"a":{"b":"c"}}', '{"a":null}', '{"a":"b","a":"c"}', '"s"', "NaN", "01",
                          # nested values, which the JVM parser builds with the variant builder (a lone surrogate, a
                          # nested duplicate: the general path decides)
                          '{"b":[1.50,{"d":-0.0,"c":1e400}],"a":10000000000000000000}', '["\\ud83d\\ude00",{}]',
                          '{"\\ud800":1}', '[{"a":"\\udfff"}]', '[[["x\\u0001y"]]]', '{"a":{"a":{"b":2,"b":3}}}'])
headers = st.one_of(
    st.dictionaries(texts, texts, max_size=3).map(json.dumps),
    st.sampled_from(['{"k":1}', '{"k":"v","k":"w"}', '{"k":["v"]}', '{"k":null}', "{}", "null", '"h"',
                     '{"k":"\\udc00"}', '{"\\ud800":"v"}', '{"k":"\\ud83d\\ude00"}']))
KNOWN_VALUES = {"message_id": string_json, "address": addresses | string_json, "payload": string_json,
                "failed_at": timestamps, "headers": headers, "delivery_count": integers,
                "error_class": string_json, "error_message": string_json, "consumer_group": string_json,
                "ordering_key": string_json}
space = st.sampled_from(["", " ", "\t", "  "])  # JSON's whitespace (a line end is where the line ends)
edge = st.sampled_from(["", " ", "\t", "\r", "\f", "\u00a0"])  # what the blank-line filter and JSON see apart


PERTURBATIONS = ("none", "none", "none", "wrong_type", "null", "missing", "unknown", "unknowns", "unknowns",
                 "duplicate", "escaped_key", "case_key", "lead", "trail", "garbage", "twice", "cut", "bom", "bytes",
                 "nul", "fffd", "array", "bracket", "chaos")


def _fields(draw, kind: str) -> list[tuple[str, str]]:
    """The (key, value) JSON texts of one record, perturbed by ``kind``, in a drawn order."""
    required = ("message_id", "address", "payload", "failed_at")
    fields: list[tuple[str, str]] = []
    for name, values in KNOWN_VALUES.items():
        if kind == "chaos":
            presence = draw(st.sampled_from(["valid", "absent", "other", "null"]))
        else:
            presence = "valid" if name in required else draw(st.sampled_from(["valid", "absent", "null"]))
        if presence != "absent":
            value = {"valid": values, "other": st.one_of(others, integers, string_json), "null": st.just("null")}
            fields.append((json.dumps(name), draw(value[presence])))
    if kind in ("wrong_type", "null", "missing"):
        at = draw(st.integers(0, len(fields) - 1))
        if kind == "missing":
            del fields[at]
        else:
            fields[at] = (fields[at][0], "null" if kind == "null" else draw(st.one_of(others, integers)))
    added = {"unknown": lambda: ('"anything_else"', draw(st.one_of(others, string_json, integers))),
             "duplicate": lambda: (draw(st.sampled_from(fields))[0], draw(string_json)),
             "escaped_key": lambda: ('"message\\u005fid"', draw(string_json)),
             "case_key": lambda: ('"Message_ID"', draw(string_json))}
    if kind in added:
        fields.append(added[kind]())
    if kind == "unknowns":  # fields a producer added, any names (escapes, lone surrogates, non-ASCII): extra's order
        fields += draw(st.lists(st.tuples(string_json, st.one_of(others, string_json, integers)), min_size=1,
                                max_size=4))
    if kind == "fffd":  # U+FFFD itself on the line (invalid bytes become it), not its escape
        fields = [(k, json.dumps("m\ufffd", ensure_ascii=False) if k == '"message_id"' else v) for k, v in fields]
    return draw(st.permutations(fields))


def _insert(draw, data: bytes, what: st.SearchStrategy[bytes]) -> bytes:
    at = draw(st.integers(0, len(data)))
    return data[:at] + draw(what) + data[at:]


@st.composite
def records(draw) -> bytes:
    """One landing line: a well-formed record with one perturbation of the kind real and broken writers make (or,
    for ``chaos``, any presence and type of every field); a perturbation the JVM parser mishandles shows as a line
    whose result differs from the reference's."""
    kind = draw(st.sampled_from(PERTURBATIONS))
    sep = draw(space)
    line = "{" + ",".join(f"{sep}{k}{draw(space)}:{v}" for k, v in _fields(draw, kind)) + sep + "}"
    data = line.encode("utf-8", "surrogatepass")
    damage = {
        "lead": lambda d: draw(edge).encode() + d,
        "trail": lambda d: d + draw(edge).encode(),
        "garbage": lambda d: d + draw(st.sampled_from([b" x", b"}", b"]", b" {}", b",", b" //c"])),
        "twice": lambda d: d + d,
        "cut": lambda d: d[: draw(st.integers(0, max(len(d) - 1, 0)))],
        "bom": lambda d: b"\xef\xbb\xbf" + d,
        "bytes": lambda d: _insert(draw, d, st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])),
        "nul": lambda d: _insert(draw, d, st.just(b"\x00")),
        "array": lambda d: b"[" + d + b"]",
        "bracket": lambda d: d + b"]",
    }
    if kind in damage:
        data = damage[kind](data)
    return data.replace(b"\n", b" ")  # one line each: a newline inside a line is where the next one starts


@given(st.lists(records(), min_size=20, max_size=60))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
def test_the_jvm_parser_agrees_with_the_expressions_on_every_generated_line(spark, jvm, tmp_path_factory, lines):
    _agree(spark, tmp_path_factory.mktemp("gen"), lines)


def test_the_jvm_parser_agrees_with_the_expressions_on_the_bad_input_corpus(spark, jvm, tmp_path):
    lines = [line for f in sorted(CORPUS.iterdir()) for line in f.read_bytes().splitlines()]
    reference, _ = _agree(spark, tmp_path, lines)
    problems = {r.problem for r in reference}
    # the corpus reaches every structural check the JVM parser takes over, and the value checks after them
    assert {contract.INVALID_UTF8, contract.MALFORMED_JSON, contract.NOT_AN_OBJECT, contract.MISSING_FIELD,
            contract.WRONG_TYPE, contract.INVALID_DELIVERY_COUNT, contract.EMPTY_MESSAGE_ID,
            contract.CONTROL_CHARACTER, contract.INVALID_ADDRESS, contract.INVALID_TIMESTAMP} <= problems
    assert None in problems


def test_the_jvm_parser_takes_the_records_consumers_write_and_leaves_the_rest(spark, jvm, tmp_path):
    from reprocess.landing.generate import GenerateOptions, generate_records

    records = generate_records(GenerateOptions(out=tmp_path, messages=300, seed=5))
    written = [json.dumps(r, separators=(",", ":")) for r in records]
    assert len(written) >= 300
    assert any("source_partition" in r for r in records)  # the unknown field a consumer added
    assert all(_accepted(spark, written))
    good = json.loads(written[0])
    declined = [
        json.dumps({**good, "delivery_count": 1.0}),
        json.dumps({**good, "headers": {"k": 1}}),
        json.dumps({k: v for k, v in good.items() if k != "payload"}),
        json.dumps(good) + " x",
        json.dumps(good) + json.dumps(good),
        json.dumps(good).replace('"address"', '"address": "a", "address"'),
        json.dumps(good) + "\ufffd",
        f"[{json.dumps(good)}]",
    ]
    assert _accepted(spark, declined) == [False] * len(declined)
    # what the value checks decide is not the JVM parser's: it takes these, and the checks then quarantine them
    taken = [json.dumps({**good, "message_id": ""}), json.dumps({**good, "address": "a..b"}),
             json.dumps({**good, "failed_at": "2026-02-30T10:00:00Z"}), json.dumps({**good, "delivery_count": 0})]
    # unknown fields of strings, integers, booleans and null: the JVM parser renders extra as the expressions do
    taken += [json.dumps({**good, "source_partition": 3}), json.dumps({"z": None, **good, "A": True, "é": "x "}),
              json.dumps({**good, "b": False, "😀": -(2**63), "￿": ""}, ensure_ascii=False)]
    # and of any other value, built into a variant by Spark's own builder: fractions as decimals or doubles, integers
    # beyond a long, objects (their keys sorted at every depth) and arrays, with escapes and non-BMP text inside
    nested = {"z": {"b": [1, {"y": None, "x": True}], "a": "é\n\u0001\u2028😀", "😀": {}, "é": []},
              "m": [[], {}, [1.5, -0.0, 1e2, 10**20, 10**40]], "q\"": {"k": {"k": {"k": "v"}}}}
    taken += [json.dumps({**good, "f": 1.5}), json.dumps({**good, "f": 1.50, "g": 100.0, "h": -0.0}),
              json.dumps({**good, "anything_else": {"a": 1}}), json.dumps({**good, "anything_else": [1]}),
              json.dumps({**good, "big": 10**20, "bigger": -(10**40)}), json.dumps({**good, **nested}),
              json.dumps({**good, **nested}, ensure_ascii=False),
              json.dumps(good)[:-1] + ", " + ", ".join([
                  '"x": 1e2', '"y": 1.5E-7', '"w": 1e400', '"t": 1.0e0', '"s": [1E2, {"b": 1, "a": 2.50}]',
                  '"u": 12345678901234567890123456789012345678.5', '"v": 0.000000000000000000000000000000000000001',
              ]) + "}"]
    # one level less deep; and a line longer than Jackson's first buffer, with escapes and a nested value at its end
    taken += [json.dumps(good)[:-1] + ', "o": ' + "[" * 998 + "]" * 998 + "}",
              json.dumps({**good, "payload": "x" * 40_000, "o": {"e": "😀", "a": [1.5, {"é": None}]}})]
    assert all(_accepted(spark, taken))
    # a nested lone surrogate or duplicate key (the variant builder refuses both), a value nested as deep as Jackson
    # allows (the general path's [line] is one level deeper): the general path's to judge
    declined += [json.dumps({**good, "o": {"k": "\ud800"}}), json.dumps({**good, "o": ["\udfff"]}),
                 json.dumps({**good, "e": "😀", "o": {"\udbff": 1}}),
                 json.dumps({**good, "o": [{"k": 1}]})[:-3] + ', "k": 2}]}',  # a nested duplicate key
                 json.dumps(good)[:-1] + ', "o": ' + "[" * 999 + "]" * 999 + "}"]  # depth 1000, the object's 1
    assert _accepted(spark, declined) == [False] * len(declined)
    _agree(spark, tmp_path, [line.encode() for line in [*written[:50], *declined, *taken]])


def test_without_the_class_the_landing_is_checked_by_the_expressions_alone(spark, monkeypatch, caplog):
    monkeypatch.setattr(contract, "JVM_PARSER_CLASS", "reprocess.landing.NotBuilt")
    # a name this worker's session has not registered yet (the session's other tests register the real one)
    monkeypatch.setattr(contract, "JVM_PARSER_FUNCTION", "reprocess_not_built")
    with caplog.at_level("INFO", logger=contract.__name__):
        assert contract.use_jvm_parser(spark) is False
    assert "landing parser=expressions (reprocess.landing.NotBuilt is not on the class path" in caplog.text


def test_a_session_registers_the_parser_once(spark, jvm, monkeypatch):
    """Every cycle asks for the parser; a session that has it keeps it. Registering it again at each cycle made Spark
    warn each time that the function "replaced a previously registered function"."""
    calls = []
    udf = type(spark.udf)
    register = udf.registerJavaFunction
    monkeypatch.setattr(udf, "registerJavaFunction", lambda self, *args: calls.append(args) or register(self, *args))
    assert contract.use_jvm_parser(spark) is True
    assert calls == []
    # a session without it registers it: here under another name, as a new session would its own
    monkeypatch.setattr(contract, "JVM_PARSER_FUNCTION", "reprocess_well_formed_record_again")
    assert contract.use_jvm_parser(spark) is True
    assert [name for name, *_ in calls] == ["reprocess_well_formed_record_again"]
    assert contract.use_jvm_parser(spark) is True
    assert len(calls) == 1


def test_a_line_too_long_for_the_strict_parse_is_record_too_large_not_malformed(spark, jvm, tmp_path):
    """Above 16M characters a line is the general path's, whose parse refuses a string of more than 20,000,000
    characters: such a line is RECORD_TOO_LARGE (it was MALFORMED_JSON). A long line that parses keeps its own
    outcome, and a malformed one too short to hold such a string stays MALFORMED_JSON; both paths agree."""
    def line(payload_chars: int) -> bytes:
        return json.dumps({"message_id": f"m-{payload_chars}", "address": "orders.created",
                           "payload": "x" * payload_chars, "failed_at": "2026-11-21T03:00:00Z"}).encode()

    huge, long = line(contract.JSON_STRING_CHARS + 1), line(17 << 20)  # 17 MiB: the general path's, and parses
    broken = long[:-1]  # 17 MiB without its closing brace
    with restoring_conf(spark, *contract.FILE_SPLIT_KEYS):  # as a cycle reads it: one file, one partition
        contract.one_file_per_partition(spark, len(huge) + 2 * len(long) + 100)
        reference, _ = _agree(spark, tmp_path, [huge, long, broken])
    assert [(r.record_no, r.problem) for r in reference] == \
        [(1, contract.RECORD_TOO_LARGE), (2, contract.PAYLOAD_TOO_LARGE), (3, contract.MALFORMED_JSON)]
    assert reference[0].problem_detail == (
        f"the line is {len(huge)} bytes and does not parse: a JSON string of more than 20000000 characters is refused "
        "(or the line is not valid JSON); payloads may be at most 1048576 bytes")


# -- expressions made once per driver ---------------------------------------------------------------------------------
def test_a_builders_columns_are_made_once_per_arguments_and_serve_any_dataframe(spark, monkeypatch):
    from reprocess import sparkutil

    made = []

    @sparkutil.columns_once
    def plus(n: int):
        made.append(n)
        return F.col("x") + F.lit(n)

    three = plus(3)
    assert plus(3) is three
    assert plus(4) is not three
    assert made == [3, 4]
    # one Column, two DataFrames (and plans) of different data
    assert spark.createDataFrame([(1,)], "x long").select(three).first()[0] == 4
    assert spark.createDataFrame([(10,), (20,)], "x long").select(three.alias("y")).orderBy("y").collect() == \
        [(13,), (23,)]
    # the builder runs again for another kind of session: a Spark Connect client makes its columns in Python
    classic = sparkutil._column_factory()
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    assert sparkutil._column_factory() == "connect" != classic
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")
    assert sparkutil._column_factory() is classic

    # the least recently used arguments go first, past the cache's size
    seen = []

    @sparkutil.columns_once
    def ident(n: int) -> int:
        seen.append(n)
        return n

    for n in range(sparkutil.COLUMN_CACHE_ENTRIES + 1):
        ident(n)
    ident(sparkutil.COLUMN_CACHE_ENTRIES)
    assert len(seen) == sparkutil.COLUMN_CACHE_ENTRIES + 1
    ident(0)
    assert seen[-1] == 0
    assert len(seen) == sparkutil.COLUMN_CACHE_ENTRIES + 2


@pytest.mark.parametrize("codegen", ["interpreted", "codegen"])
def test_the_contracts_shared_checks_read_each_calls_own_as_of(spark, codegen):
    """The checks are built once, the as-of is each run's: a failure 30 h after one as-of is in the future there (more
    than the 24 h allowed) and fine at an as-of 10 h later, in the same driver, with the as-of as a literal or as the
    column of `with_as_of`."""
    from reprocess.sparkutil import with_as_of

    line = json.dumps({"message_id": "m", "address": "a.b", "payload": "p", "failed_at": "2026-11-22T10:00:00Z"})
    raw = spark.createDataFrame([("f", 1, line, len(line))], "source_file string, record_no long, raw string, "
                                                             "line_bytes long")
    problems = []
    for as_of in (AS_OF_MS, AS_OF_MS + 10 * 3600_000):  # 2026-11-21T04:00Z (30 h before), then 14:00Z (20 h)
        df, at = with_as_of(raw, as_of, codegen)
        problems.append(contract.parse_records(df, at).select("problem").first()[0])
    assert problems == [contract.FUTURE_TIMESTAMP, None]
