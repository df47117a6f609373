"""The ``floodgate_kafka`` source's options in Spark's Kafka source dialect (issue 29):
Spark's keys parse to what Floodgate's own do, Spark's offsets JSON, conflicting and
refused keys, and the columns read without a schema."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from pipeline.spark.options import (
    REFUSED_CLIENT_PROPERTIES,
    REFUSED_OPTIONS,
    SourceOptions,
    time_string_ms,
    topic_matcher,
)
from pipeline.spark.partition_reader import binary_array
from pipeline.spark.schema import spark_schema
from pipeline.spark.source import KafkaStreamReader

#: The least a Spark user writes for ``format("kafka")``.
SPARK = {"kafka.bootstrap.servers": "broker:9092", "subscribe": "flights"}

#: Spark's Kafka source schema (Structured Streaming Kafka Integration Guide).
SPARK_COLUMNS = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int"
)


def parse(**extra: str) -> SourceOptions:
    return SourceOptions.parse({**SPARK, **extra})


def test_spark_keys_mean_what_floodgates_own_mean() -> None:
    spark = parse(**{"maxOffsetsPerTrigger": "500", "kafka.group.id": "g"})
    own = SourceOptions.parse(
        {
            "bootstrap.servers": "broker:9092",
            "topic": "flights",
            "maxRowsPerTrigger": "500",
            "group.id": "g",
        }
    )
    assert spark == own
    assert (spark.bootstrap_servers, spark.topics, spark.group_id) == (
        "broker:9092",
        ("flights",),
        "g",
    )
    assert spark.max_rows_per_trigger == 500
    assert spark.client == {}  # kafka.bootstrap.servers and kafka.group.id are taken out


def test_without_a_group_the_source_uses_its_own_and_commits_nothing_as_spark() -> None:
    parsed = parse()
    assert parsed.group_id.startswith("spark-kafka-source-")
    assert parsed.commit_offsets is False
    assert parsed.starting_offsets == "latest"  # Spark's default for streaming queries
    assert parse(groupIdPrefix="mine").group_id.startswith("mine-")
    named = parse(**{"kafka.group.id": "g"})
    assert (named.commit_offsets, named.starting_offsets) == (True, "committed")


@pytest.mark.parametrize(
    ("first", "second", "options"),
    [
        ("topic", "subscribe", {**SPARK, "topic": "flights"}),
        ("subscribe", "assign", {**SPARK, "assign": '{"flights": [0]}'}),
        ("subscribe", "subscribePattern", {**SPARK, "subscribePattern": "f.*"}),
        ("bootstrap.servers", "kafka.bootstrap.servers", {**SPARK, "bootstrap.servers": "b"}),
        (
            "maxRowsPerTrigger",
            "maxOffsetsPerTrigger",
            {**SPARK, "maxRowsPerTrigger": "5", "maxOffsetsPerTrigger": "5"},
        ),
        ("group.id", "kafka.group.id", {**SPARK, "group.id": "g", "kafka.group.id": "g"}),
    ],
)
def test_two_keys_for_one_thing_are_refused_naming_both(
    first: str, second: str, options: dict[str, str]
) -> None:
    with pytest.raises(ValueError) as info:
        SourceOptions.parse(options)
    assert repr(first) in str(info.value)
    assert repr(second) in str(info.value)


def test_what_to_read_is_required() -> None:
    with pytest.raises(ValueError, match="'subscribe'"):
        SourceOptions.parse({"kafka.bootstrap.servers": "broker:9092"})
    with pytest.raises(ValueError, match=r"'kafka\.bootstrap\.servers'"):
        SourceOptions.parse({"subscribe": "flights"})


def test_subscribe_takes_a_set_of_topics_in_order_as_kafkas_consumer() -> None:
    parsed = parse(subscribe=" b , a ,, b ")
    assert (parsed.topics, parsed.topic_pattern, parsed.assigned) == (("b", "a"), None, None)
    assert parsed.stream == "b,a"  # no stream named: the topics
    assert parse(subscribe=" flights, flights").topics == ("flights",)
    assert parse(subscribe=" flights, flights").stream == "flights"
    with pytest.raises(ValueError, match="subscribe = ',, '; allowed: topic names"):
        parse(subscribe=",, ")
    with pytest.raises(ValueError, match="topic = 'a,b'; allowed: one topic"):
        SourceOptions.parse({"kafka.bootstrap.servers": "b", "topic": "a,b"})


def test_subscribe_pattern_is_a_regular_expression_found_in_names_as_sparks() -> None:
    options = {"kafka.bootstrap.servers": "b:9092", "subscribePattern": r" flights\.\w+ "}
    parsed = SourceOptions.parse(options)
    assert (parsed.topics, parsed.topic_pattern) == (None, r"flights\.\w+")
    assert parsed.stream == r"flights\.\w+"
    matches = topic_matcher(parsed.topic_pattern or "")
    # Found anywhere in the name, as Spark's Admin-based SubscribePatternStrategy
    # (findFirstIn); anchored, it matches whole names only.
    assert matches("flights.eu") and matches("xflights.eu") and not matches("flights")
    anchored = topic_matcher(r"^flights\.\w+$")
    assert anchored("flights.eu") and not anchored("xflights.eu")
    with pytest.raises(ValueError, match=r"subscribePattern = 'flights\.\['; allowed: a regular"):
        SourceOptions.parse({**options, "subscribePattern": "flights.["})
    with pytest.raises(ValueError, match="subscribePattern"):
        SourceOptions.parse({**options, "subscribePattern": "  "})


def test_assign_names_partitions_of_one_or_more_topics() -> None:
    options = {"kafka.bootstrap.servers": "b:9092", "assign": '{"flights": [2, 0], "a": [1, 1]}'}
    parsed = SourceOptions.parse(options)
    assert parsed.topics == ("a", "flights")
    assert parsed.assigned == {"a": (1,), "flights": (0, 2)}
    for bad in ("{}", '{"a": [0], "b": []}', '{"a": [-1]}', "[0]", "flights"):
        with pytest.raises(ValueError, match="assign"):
            SourceOptions.parse({**options, "assign": bad})
    with pytest.raises(ValueError, match="same partitions"):
        SourceOptions.parse(
            {**options, "startingOffsets": '{"flights": {"0": 5, "2": 1}, "a": {"0": 5}}'}
        )


def test_starting_offsets_take_sparks_json_with_minus_two_and_minus_one() -> None:
    parsed = parse(startingOffsets='{"flights": {"0": 23, "1": -2, "2": -1}}')
    assert parsed.starting_offsets == "specific"
    assert parsed.starting_partition_offsets == {"flights": {0: 23, 1: -2, 2: -1}}
    two = parse(
        subscribe="flights,arrivals", startingOffsets='{"arrivals": {"0": 4}, "flights": {"1": -2}}'
    )
    assert two.starting_partition_offsets == {"arrivals": {0: 4}, "flights": {1: -2}}
    assert parse(startingOffsets="earliest").starting_offsets == "earliest"


@pytest.mark.parametrize(
    "bad",
    ['{"flights": {"0": -3}}', '{"flights": {}}', "{", '{"flights": 3}', "{}"],
)
def test_other_starting_offsets_are_refused_with_the_allowed_shape(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(startingOffsets=bad)
    assert f"startingOffsets = {bad!r}" in str(info.value)
    assert '{"<topic>": {"<partition>": <offset>}, ...}' in str(info.value)


def test_starting_offsets_of_a_topic_not_read_are_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="names topic 'other', which subscribe does not"):
        parse(subscribe="flights,arrivals", startingOffsets='{"other": {"0": 1}}')
    # A pattern's topics are known at the query's start only: any topic is taken.
    pattern = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": "b",
            "subscribePattern": "f.*",
            "startingOffsets": '{"other": {"0": 1}}',
        }
    )
    assert pattern.starting_partition_offsets == {"other": {0: 1}}


def test_discard_before_is_per_topic_and_partition() -> None:
    parsed = parse(
        subscribe="flights,arrivals", discardBefore='{"flights": {"0": 3}, "arrivals": {"1": 9}}'
    )
    assert parsed.discard_before == {"flights": {0: 3}, "arrivals": {1: 9}}


@pytest.mark.parametrize("key", sorted(REFUSED_OPTIONS))
def test_sparks_options_the_source_cannot_honour_are_refused_with_the_reason(key: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(**{key: "1"})
    assert repr(key) in str(info.value)
    assert REFUSED_OPTIONS[key] in str(info.value)


@pytest.mark.parametrize("prop", sorted(REFUSED_CLIENT_PROPERTIES))
def test_client_properties_the_source_owns_are_refused(prop: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"'kafka.{prop}'")):
        parse(**{f"kafka.{prop}": "x"})


def test_fail_on_data_loss() -> None:
    assert parse().fail_on_data_loss is True
    assert parse(failOnDataLoss="false").fail_on_data_loss is False
    with pytest.raises(ValueError, match="allowed: true, false"):
        parse(failOnDataLoss="maybe")
    with pytest.raises(ValueError, match="sweepCatalog"):
        parse(failOnDataLoss="false", sweepCatalog="sqlite://")


@pytest.mark.parametrize(
    ("text", "ms"),
    [("15m", 900_000), ("5s", 5_000), ("250", 250), ("250ms", 250), ("2h", 7_200_000)],
)
def test_trigger_delay_is_a_spark_time_string(text: str, ms: int) -> None:
    assert time_string_ms("maxTriggerDelay", text) == ms


def test_a_bad_trigger_delay_names_the_key() -> None:
    with pytest.raises(ValueError, match="maxTriggerDelay = '5 parsecs'"):
        parse(minOffsetsPerTrigger="10", maxTriggerDelay="5 parsecs")


def test_min_offsets_wait_for_enough_tuples_until_the_delay_passes() -> None:
    """Spark's ``delayBatch``: the first micro-batch is never delayed; later ones wait
    until ``minOffsetsPerTrigger`` tuples are new or ``maxTriggerDelay`` has passed."""
    patient = KafkaStreamReader(parse(minOffsetsPerTrigger="10", maxTriggerDelay="1h"), SCHEMA)
    begin = {0: 100, 1: 100}
    assert not patient._delayed(begin, {0: 101, 1: 100})  # the first one goes
    assert patient._delayed(begin, {0: 105, 1: 104})  # 9 new: wait
    assert not patient._delayed(begin, {0: 105, 1: 105})  # 10 new: go
    hasty = KafkaStreamReader(parse(minOffsetsPerTrigger="10", maxTriggerDelay="0s"), SCHEMA)
    assert not hasty._delayed(begin, {0: 101, 1: 100})
    assert not hasty._delayed(begin, {0: 101, 1: 100})  # the delay has always passed
    assert not KafkaStreamReader(parse(), SCHEMA)._delayed(begin, {0: 100, 1: 100})


SCHEMA = StructType()


def test_without_a_schema_the_columns_are_sparks_kafka_columns() -> None:
    assert spark_schema("flights", None).simpleString() == SPARK_COLUMNS + ">"
    with_headers = spark_schema("flights", None, include_headers=True).simpleString()
    assert with_headers == SPARK_COLUMNS + ",headers:array<struct<key:string,value:binary>>>"
    assert all(f.nullable for f in spark_schema("flights", None).fields)  # as Spark's


@pytest.mark.parametrize(
    "extra",
    [{"schemas": "{}"}, {"deadLetterTopic": "d"}, {"timestampMode": "data_source"}],
    ids=["schemas", "deadLetterTopic", "timestampMode"],
)
def test_options_that_decode_need_a_schema(extra: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="need option 'schema'"):
        parse(**extra)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=50))
def test_the_value_column_holds_every_value_as_given(values: list[bytes | None]) -> None:
    """The ``value`` column built from one joined buffer is what Arrow builds from the
    list (the fast path when no value is ``None``, ``pa.array`` otherwise)."""
    import pyarrow as pa

    built = binary_array(values)
    built.validate(full=True)
    assert built.type == pa.binary()
    assert built.to_pylist() == values
