"""Write ``tests/golden/options/cases.json``: what the Python source's option parser,
``pipeline.spark.options.SourceOptions.parse``, makes of many option maps.

Both sources' tests read the file: ``tests/unit/pipeline/spark/test_golden_options.py``
checks the Python parser against it, ``SourceOptionsGoldenTest`` the JVM source's
``io.floodgate.spark.SourceOptions.parse``. A case is

- ``{"name", "options", "parsed": {<field>: <value>}}``: every field of the parsed
  options, by the Python name (``max_rows_per_trigger``; the Java field is its camel
  case, ``maxRowsPerTrigger``); offsets are maps of topics to maps of partitions,
  whose numbers are JSON keys (``{"flights": {"0": 5}}``), ``assigned`` a map of
  topics to lists of partitions, ``late_window`` is ``[duration, slide, start]`` ms,
  tuples are lists. A consumer group
  the parser makes up (``<groupIdPrefix>-<random UUID>``) is given as
  ``group_id_prefix`` (``"spark-kafka-source-"``) instead of ``group_id``;
- ``{"name", "options", "error": <text>}``: the parser refuses the map (Python
  ``ValueError``, Java ``IllegalArgumentException``) with a message containing the
  text: the whole Python message, or its start where the rest quotes a Python error.

Run from the repository's root after changing the parser or the cases:
``.venv/bin/python tests/golden/make_options.py``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.spark.options import (  # noqa: E402
    REFUSED_CLIENT_PROPERTIES,
    REFUSED_OPTIONS,
    EventTimeWindow,
    SourceOptions,
)

GOLDEN = ROOT / "tests" / "golden" / "options" / "cases.json"

#: The least a Spark user writes for ``format("kafka")``.
SPARK = {"kafka.bootstrap.servers": "broker:9092", "subscribe": "flights"}
#: Decoded with a schema (the repository's text is not read by the parser).
SCHEMA = {"schema": "flight", "schemas": '{"flight": {}}'}
#: Late tuples dead-lettered.
LATE = {
    **SPARK,
    **SCHEMA,
    "watermarkCheckpoint": "/tmp/checkpoint/q",
    "lateWindow": "60000,10000,0",
}


def _cases() -> list[tuple[str, dict[str, str], str | None]]:
    """``(name, options, cut)``: ``cut`` ends the stored error text before it."""
    cases: list[tuple[str, dict[str, str], str | None]] = []

    def case(name: str, options: dict[str, str], cut: str | None = None) -> None:
        cases.append((name, options, cut))

    # What to read, where, and the defaults.
    case("spark minimal: defaults", SPARK)
    case(
        "floodgate's own names",
        {"bootstrap.servers": "b:1", "topic": "flights", "group.id": "g", "maxRowsPerTrigger": "5"},
    )
    case("keys in any case", {"KAFKA.Bootstrap.Servers": "b:1", "SUBSCRIBE": "flights"})
    case("groupIdPrefix", {**SPARK, "groupIdPrefix": "mine"})
    case("kafka.group.id: committed, commits", {**SPARK, "kafka.group.id": "g"})
    case("group.id with commitOffsets false", {**SPARK, "group.id": "g", "commitOffsets": "false"})
    case("commitOffsets TRUE without a group", {**SPARK, "commitOffsets": "TRUE"})
    case("empty kafka.group.id is missing", {**SPARK, "kafka.group.id": "", "group.id": "g"})
    case("empty group.id is missing", {**SPARK, "group.id": ""})
    case(
        "empty kafka.bootstrap.servers is missing",
        {"subscribe": "flights", "kafka.bootstrap.servers": "", "bootstrap.servers": "b:2"},
    )
    case("empty options are missing", {**SPARK, "maxOffsetsPerTrigger": "", "startingOffsets": ""})
    case("no bootstrap servers", {"subscribe": "flights"})
    case("no topic", {"kafka.bootstrap.servers": "b:1"})
    case(
        "client properties, keys lower-cased",
        {
            **SPARK,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanisms": "SCRAM-SHA-512",
            "kafka.sasl.username": "alice",
            "kafka.SASL.PASSWORD": "Secret",
            "kafka.ssl.ca.location": "/etc/ca.pem",
            "kafka.fetch.wait.max.ms": "10",
            "kafka.empty": "",
        },
    )
    for key in REFUSED_OPTIONS:
        case(f"refused {key}", {**SPARK, key: "x"})
    case("refused option in another case", {**SPARK, "MINPARTITIONS": "2"})
    for key in REFUSED_CLIENT_PROPERTIES:
        case(f"refused kafka.{key}", {**SPARK, f"kafka.{key}": "x"})
    case("refused client property in another case", {**SPARK, "kafka.Auto.Offset.Reset": "x"})

    # Two names of one thing.
    case("bootstrap twice", {**SPARK, "bootstrap.servers": "b:2"})
    case("group twice", {**SPARK, "group.id": "g", "kafka.group.id": "g"})
    case("max rows twice", {**SPARK, "maxRowsPerTrigger": "5", "maxOffsetsPerTrigger": "5"})
    case("topic and subscribe", {**SPARK, "topic": "flights"})
    case("subscribe and assign", {**SPARK, "assign": '{"flights": [0]}'})
    case(
        "topic, subscribe and assign",
        {**SPARK, "topic": "flights", "assign": '{"flights": [0]}'},
    )
    case("subscribe and subscribePattern", {**SPARK, "subscribePattern": "f.*"})
    case(
        "topic and subscribePattern",
        {"kafka.bootstrap.servers": "b:1", "topic": "flights", "subscribePattern": "f.*"},
    )

    # subscribe / topic / subscribePattern / assign.
    case("subscribe: two topics", {**SPARK, "subscribe": "a,b"})
    case("subscribe: spaced, empty, repeated", {**SPARK, "subscribe": " b , a ,, b,a "})
    case("subscribe: one topic repeated", {**SPARK, "subscribe": "flights, flights"})
    case("subscribe: two topics, stream named", {**SPARK, "subscribe": "a,b", "stream": "s"})
    case("subscribe: commas and spaces", {**SPARK, "subscribe": " flights , "})
    case("subscribe: only commas", {**SPARK, "subscribe": ",,"})
    case("subscribe: quoted as Python", {**SPARK, "subscribe": "a\tb,c\u00a0'd'"})
    case("topic: two topics", {"kafka.bootstrap.servers": "b:1", "topic": "a, b"})
    case("topic: quoted as Python", {"kafka.bootstrap.servers": "b:1", "topic": "a\tb,c'd'"})
    p = {"kafka.bootstrap.servers": "b:1"}
    case("subscribePattern", {**p, "subscribePattern": r"flights\.[a-z]+"})
    case("subscribePattern: spaced", {**p, "subscribePattern": " flights-[0-9]+ "})
    case("subscribePattern: alternatives", {**p, "subscribePattern": "(a|b)x?|c{2,3}"})
    case("subscribePattern: blank", {**p, "subscribePattern": "  "})
    case("subscribePattern: not compiling", {**p, "subscribePattern": "flights.["}, cut=" (")
    case("subscribePattern: unbalanced", {**p, "subscribePattern": "(flights"}, cut=" (")
    case(
        "subscribePattern: stream named",
        {**p, "subscribePattern": "flights.*", "stream": "flights"},
    )
    a = {"kafka.bootstrap.servers": "b:1"}
    case("assign: sorted, distinct", {**a, "assign": '{"flights": [10, 2, 0, 2]}'})
    case("assign: no partitions", {**a, "assign": '{"flights": []}'})
    case("assign: two topics", {**a, "assign": '{"a": [0], "b": [1]}'})
    case("assign: two topics, sorted", {**a, "assign": '{"b": [3, 1, 3], "a": [2]}'})
    case("assign: no topics", {**a, "assign": "{}"})
    case("assign: a topic without partitions", {**a, "assign": '{"a": [0], "b": []}'})
    case("assign: empty topic name", {**a, "assign": '{"": [0]}'})
    case("assign: a list", {**a, "assign": "[0]"})
    case("assign: not JSON", {**a, "assign": "flights:0"})
    case("assign: negative partition", {**a, "assign": '{"flights": [-1]}'})
    case("assign: boolean partition", {**a, "assign": '{"flights": [true]}'})
    case("assign: fractional partition", {**a, "assign": '{"flights": [1.0]}'})
    case("assign: partition over int", {**a, "assign": '{"flights": [2147483648]}'})
    case("assign: largest partition", {**a, "assign": '{"flights": [2147483647]}'})
    case("assign: text after the JSON", {**a, "assign": '{"flights": [0]} [1]'})
    case("assign: partitions not a list", {**a, "assign": '{"flights": "0"}'})

    # startingOffsets.
    case("startingOffsets earliest", {**SPARK, "startingOffsets": "earliest"})
    case("startingOffsets LATEST", {**SPARK, "startingOffsets": "LATEST"})
    case("startingOffsets committed, spaced", {**SPARK, "startingOffsets": " Committed "})
    case("startingOffsets a word", {**SPARK, "startingOffsets": "soon"})
    case(
        "startingOffsets JSON",
        {**SPARK, "startingOffsets": '{"flights": {"10": 7, "2": -1, "0": -2}}'},
    )
    case(
        "startingOffsets JSON, Spark's form, large offset",
        {**SPARK, "startingOffsets": '{"flights":{"0":9223372036854775807}}'},
    )
    case(
        "startingOffsets JSON over long",
        {**SPARK, "startingOffsets": '{"flights":{"0":9223372036854775808}}'},
    )
    case("startingOffsets JSON another topic", {**SPARK, "startingOffsets": '{"other": {"0": 1}}'})
    case(
        "startingOffsets JSON two topics",
        {**SPARK, "startingOffsets": '{"flights": {"0": 1}, "other": {"0": 1}}'},
    )
    case("startingOffsets JSON no partitions", {**SPARK, "startingOffsets": '{"flights": {}}'})
    case("startingOffsets JSON offset -3", {**SPARK, "startingOffsets": '{"flights": {"0": -3}}'})
    case(
        "startingOffsets JSON partition -1", {**SPARK, "startingOffsets": '{"flights": {"-1": 0}}'}
    )
    case(
        "startingOffsets JSON offset text", {**SPARK, "startingOffsets": '{"flights": {"0": "5"}}'}
    )
    case(
        "startingOffsets JSON offset fraction",
        {**SPARK, "startingOffsets": '{"flights": {"0": 5.5}}'},
    )
    case(
        "startingOffsets JSON offset boolean",
        {**SPARK, "startingOffsets": '{"flights": {"0": true}}'},
    )
    case(
        "startingOffsets JSON offset null", {**SPARK, "startingOffsets": '{"flights": {"0": null}}'}
    )
    case(
        "startingOffsets JSON partition spaced",
        {**SPARK, "startingOffsets": '{"flights": {" 1": 5}}'},
    )
    case(
        "startingOffsets JSON partition signed",
        {**SPARK, "startingOffsets": '{"flights": {"+1": 5}}'},
    )
    case("startingOffsets JSON partitions a list", {**SPARK, "startingOffsets": '{"flights": [5]}'})
    case("startingOffsets JSON text after", {**SPARK, "startingOffsets": '{"flights": {"0": 5}} x'})
    case(
        "startingOffsets JSON with assign",
        {**a, "assign": '{"flights": [1, 0]}', "startingOffsets": '{"flights": {"0": 5, "1": -2}}'},
    )
    case(
        "startingOffsets JSON other partitions than assign",
        {**a, "assign": '{"flights": [0, 2]}', "startingOffsets": '{"flights": {"0": 5, "1": 7}}'},
    )
    two = {**SPARK, "subscribe": "flights,arrivals"}
    case(
        "startingOffsets JSON two topics subscribed",
        {**two, "startingOffsets": '{"flights": {"1": 4, "0": -2}, "arrivals": {"0": -1}}'},
    )
    case(
        "startingOffsets JSON one of two topics subscribed",
        {**two, "startingOffsets": '{"arrivals": {"0": 7}}'},
    )
    case(
        "startingOffsets JSON unsubscribed topics",
        {**two, "startingOffsets": '{"zz": {"0": 1}, "flights": {"0": 1}, "other": {"0": 1}}'},
    )
    case(
        "startingOffsets JSON a topic without partitions",
        {**two, "startingOffsets": '{"flights": {"0": 1}, "arrivals": {}}'},
    )
    case(
        "startingOffsets JSON with subscribePattern",
        {**p, "subscribePattern": "f.*", "startingOffsets": '{"other": {"0": 3}, "f1": {"2": -1}}'},
    )
    aa = {**a, "assign": '{"flights": [1, 0], "arrivals": [2]}'}
    case(
        "startingOffsets JSON with assign of two topics",
        {**aa, "startingOffsets": '{"arrivals": {"2": 9}, "flights": {"0": 5, "1": -2}}'},
    )
    case(
        "startingOffsets JSON other partitions than assign, second topic",
        {**aa, "startingOffsets": '{"arrivals": {"3": 9}, "flights": {"0": 5, "1": -2}}'},
    )
    case(
        "startingOffsets JSON an assigned topic missing",
        {**aa, "startingOffsets": '{"flights": {"0": 5, "1": -2}}'},
    )
    case(
        "startingOffsets JSON a topic not assigned",
        {
            **aa,
            "startingOffsets": '{"arrivals": {"2": 9}, "flights": {"0": 5, "1": -2}, '
            '"x": {"1": 1}}',
        },
    )
    case(
        "startingOffsets word with a group",
        {**SPARK, "kafka.group.id": "g", "startingOffsets": "earliest"},
    )

    # discardBefore.
    case("discardBefore", {**SPARK, "discardBefore": '{"flights": {"1": 40, "0": 30}}'})
    case("discardBefore of another topic", {**SPARK, "discardBefore": '{"other": {"0": 30}}'})
    case(
        "discardBefore of two topics",
        {**two, "discardBefore": '{"flights": {"0": 30}, "arrivals": {"1": 5, "0": 0}}'},
    )
    case(
        "discardBefore with subscribePattern",
        {**p, "subscribePattern": "f.*", "discardBefore": '{"f1": {"0": 30}, "f2": {"1": 2}}'},
    )
    case(
        "discardBefore offset text, second topic",
        {**two, "discardBefore": '{"flights": {"0": 30}, "arrivals": {"0": "5"}}'},
    )
    case("discardBefore not JSON", {**SPARK, "discardBefore": "30"})
    case("discardBefore a list", {**SPARK, "discardBefore": "[30]"})
    case("discardBefore partitions a list", {**SPARK, "discardBefore": '{"flights": [30]}'})
    case("discardBefore offset text", {**SPARK, "discardBefore": '{"flights": {"0": "30"}}'})

    # maxTriggerDelay and minOffsetsPerTrigger.
    for text in ("30s", "500", "2 min", "1h", "1d", "1500us", "3001us", "10MS", " 5s ", "5 m"):
        case(f"maxTriggerDelay {text!r}", {**SPARK, "maxTriggerDelay": text})
    case("maxTriggerDelay exact in ms", {**SPARK, "maxTriggerDelay": "9007199254740993"})
    case("maxTriggerDelay exact in days", {**SPARK, "maxTriggerDelay": "106751991167d"})
    case("maxTriggerDelay beyond long, days", {**SPARK, "maxTriggerDelay": "106751991168d"})
    case(
        "maxTriggerDelay beyond long, digits", {**SPARK, "maxTriggerDelay": "99999999999999999999"}
    )
    case("maxTriggerDelay fullwidth digit", {**SPARK, "maxTriggerDelay": "\uff15s"})
    for text in ("5sec", "-1s", "1.5s", "s", " ", "5 o'clock"):
        case(f"maxTriggerDelay {text!r}", {**SPARK, "maxTriggerDelay": text})
    case("minOffsetsPerTrigger", {**SPARK, "minOffsetsPerTrigger": "100", "maxTriggerDelay": "1m"})
    case("minOffsetsPerTrigger 0", {**SPARK, "minOffsetsPerTrigger": "0"})

    # lateWindow and watermarkCheckpoint.
    case("lateWindow sliding", LATE)
    case("lateWindow spaced, signed", {**LATE, "lateWindow": " 60000 , +60000 , -100 "})
    case("lateWindow digits grouped", {**LATE, "lateWindow": "60_000,10_000,0"})
    case("lateWindow two numbers", {**LATE, "lateWindow": "60000,10000"}, cut=" (")
    case("lateWindow four numbers", {**LATE, "lateWindow": "1,1,1,1"}, cut=" (")
    case("lateWindow words", {**LATE, "lateWindow": "a,b,c"}, cut=" (")
    case("lateWindow zero duration", {**LATE, "lateWindow": "0,1,0"})
    case("lateWindow slide over duration", {**LATE, "lateWindow": "10,20,0"})
    case("lateWindow without watermarkCheckpoint", {**SCHEMA, "lateWindow": "10,10,0", **SPARK})
    case("watermarkCheckpoint without lateWindow", {**SCHEMA, "watermarkCheckpoint": "/c", **SPARK})
    case(
        "lateWindow without schema",
        {**SPARK, "watermarkCheckpoint": "/c", "lateWindow": "10,10,0"},
    )

    # Decoding.
    case(
        "decoded, every own option",
        {
            **SPARK,
            **SCHEMA,
            "stream": "arrivals",
            "deadLetterTopic": "flights.dead",
            "timestampMode": "data_source",
            "timestampField": "event_time",
            "query": "q1",
            "sweepCatalog": "sqlite:///catalog.db",
            "keyRequired": "true",
            "maxEventTimeAheadMs": "5000",
            "maxTasks": "3",
            "maxEventTimeDriftMs": "250",
            "idlePartitionTimeoutMs": "0",
            "includeHeaders": "True",
            "fields": "origin, dest,,event_time",
        },
    )
    case("schema without schemas", {**SPARK, "schema": "flight"})
    case("schemas without schema", {**SPARK, "schemas": "{}"})
    case(
        "options needing schema",
        {**SPARK, "schemas": "{}", "deadLetterTopic": "d", "timestampMode": "data_source"},
    )
    case("timestampMode another", {**SPARK, **SCHEMA, "timestampMode": "event"})
    case(
        "confluent with a registry",
        {
            **SPARK,
            **SCHEMA,
            "encoding": "confluent",
            "schemaRegistry.URL": "http://registry:8081",
            "schemaRegistry.Basic.Auth.User.Info": "u:P",
        },
    )
    case(
        "confluent key with a registry",
        {
            **SPARK,
            **SCHEMA,
            "keyEncoding": "confluent",
            "keyFields": "carrier, flight",
            "schemaRegistry.url": "http://registry:8081",
        },
    )
    case("confluent key without its options", {**SPARK, "keyEncoding": "confluent"})
    case("keyEncoding another", {**SPARK, "keyEncoding": "avro"})
    case("encoding another", {**SPARK, "encoding": "avro"})
    case("encoding in capitals", {**SPARK, "encoding": "Confluent"})
    case("fields only commas", {**SPARK, "fields": " , "})

    # Flags.
    case("failOnDataLoss FALSE", {**SPARK, "failOnDataLoss": "FALSE"})
    case("failOnDataLoss no", {**SPARK, "failOnDataLoss": "No"})
    case("failOnDataLoss empty", {**SPARK, "failOnDataLoss": ""})
    case(
        "failOnDataLoss false with sweepCatalog",
        {**SPARK, "failOnDataLoss": "false", "sweepCatalog": "s"},
    )
    case("includeHeaders 1", {**SPARK, "includeHeaders": "1"})
    case("keyRequired yes", {**SPARK, "keyRequired": "yes"})

    # Whole numbers.
    case("maxOffsetsPerTrigger largest", {**SPARK, "maxOffsetsPerTrigger": "9223372036854775807"})
    for text in ("0", "-1", "1.5", " 5", "1e3", "9223372036854775808"):
        case(f"maxOffsetsPerTrigger {text!r}", {**SPARK, "maxOffsetsPerTrigger": text})
    case("maxTasks over int", {**SPARK, "maxTasks": "3000000000"})
    case("maxTasks 0", {**SPARK, "maxTasks": "0"})
    case("idlePartitionTimeoutMs words", {**SPARK, "idlePartitionTimeoutMs": "ten"})
    case("maxEventTimeDriftMs negative", {**SPARK, "maxEventTimeDriftMs": "-5"})
    case("maxEventTimeAheadMs fraction", {**SPARK, "maxEventTimeAheadMs": "0.5"})

    # The first refusal wins, in the Python parser's order.
    case(
        "idle before commitOffsets", {**SPARK, "idlePartitionTimeoutMs": "x", "commitOffsets": "x"}
    )
    case("discardBefore before keyRequired", {**SPARK, "discardBefore": "x", "keyRequired": "x"})
    case("includeHeaders before encoding", {**SPARK, "includeHeaders": "x", "encoding": "x"})
    case("lateWindow before maxTasks", {**LATE, "lateWindow": "0,0,0", "maxTasks": "0"})
    case(
        "maxTriggerDelay before includeHeaders",
        {**SPARK, "maxTriggerDelay": "x", "includeHeaders": "x"},
    )
    case("refused before two names", {**SPARK, "endingOffsets": "x", "topic": "t"})
    case("topic before lateWindow", {"kafka.bootstrap.servers": "b", "lateWindow": "1,1,0"})
    case(
        "startingOffsets before failOnDataLoss",
        {**SPARK, "startingOffsets": "x", "failOnDataLoss": "x"},
    )
    return cases


def describe(parsed: SourceOptions) -> dict[str, Any]:
    """``parsed``'s fields as JSON values (see the module docstring)."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(parsed):
        out[field.name] = _json_value(getattr(parsed, field.name))
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, EventTimeWindow):
        return [value.duration_ms, value.slide_ms, value.start_ms]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def golden_case(name: str, options: dict[str, str], cut: str | None) -> dict[str, Any]:
    """The case ``options`` makes, as stored in the golden file."""
    try:
        first = SourceOptions.parse(options)
    except ValueError as exc:
        message = str(exc)
        error = message.split(cut)[0] if cut and cut in message else message
        return {"name": name, "options": options, "error": error}
    parsed = describe(first)
    if SourceOptions.parse(options).group_id != first.group_id:  # made up: a random UUID
        prefix = first.group_id[: -len("00000000-0000-0000-0000-000000000000")]
        del parsed["group_id"]
        parsed["group_id_prefix"] = prefix
    return {"name": name, "options": options, "parsed": parsed}


def render() -> str:
    """The golden file's text."""
    cases = [golden_case(*c) for c in _cases()]
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "case names are unique"
    return json.dumps(cases, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    GOLDEN.write_text(render(), encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(ROOT)}")
