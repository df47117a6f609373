"""One typed model of the source's options: :class:`SourceOptions`. A query group
builds one from its config (:func:`pipeline.spark.inputs.source_options`) and renders
it (:meth:`SourceOptions.to_options`) as the option map Spark hands the
``floodgate_kafka`` source on the JVM, which parses it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from pipeline.spark.options import EventTimeWindow, SourceOptions

MINIMAL = SourceOptions(
    bootstrap_servers="b:1",
    topics=("flights",),
    stream="flights",
    schema_name="flight",
    schemas_json="{}",
    group_id="floodgate.flights.q",
    max_rows_per_trigger=None,
    starting_offsets="committed",
    dead_letter_topic=None,
    timestamp_mode="server",
    timestamp_field=None,
    commit_offsets=False,
    client={},
)


def test_every_typed_field_is_rendered_by_the_option_that_sets_it() -> None:
    options = dataclasses.replace(
        MINIMAL,
        watermark_checkpoint="/tmp/cp/q",
        late_window=EventTimeWindow(60_000, 10_000, 0),
        max_event_time_drift_ms=30_000,
        discard_before={"flights": {1: 5, 0: 3}},
        starting_offsets="specific",
        starting_partition_offsets={"flights": {1: -2, 0: 7}},
        client={"security.protocol": "SASL_SSL"},
        schema_registry={"url": "http://r:8081"},
        key_fields=("origin", "dest"),
        fields=("origin",),
        commit_offsets=True,
    )
    rendered = options.to_options()
    assert rendered["kafka.bootstrap.servers"] == "b:1"
    assert rendered["subscribe"] == "flights"
    assert rendered["kafka.group.id"] == "floodgate.flights.q"
    assert rendered["maxEventTimeDriftMs"] == "30000"
    assert rendered["lateWindow"] == "60000,10000,0"
    assert rendered["watermarkCheckpoint"] == "/tmp/cp/q"
    # Spark's offsets JSON: topics, then partitions, in order.
    assert rendered["discardBefore"] == '{"flights": {"0": 3, "1": 5}}'
    assert json.loads(rendered["startingOffsets"]) == {"flights": {"0": 7, "1": -2}}
    assert rendered["kafka.security.protocol"] == "SASL_SSL"
    assert rendered["schemaRegistry.url"] == "http://r:8081"
    assert rendered["keyFields"] == "origin,dest"
    assert rendered["fields"] == "origin"
    assert rendered["commitOffsets"] == "true"  # Spark's words for a flag
    assert rendered["maxTriggerDelay"] == "900000ms"


def test_options_left_unset_are_not_rendered_and_what_to_read_is_one_key() -> None:
    rendered = MINIMAL.to_options()
    assert "maxOffsetsPerTrigger" not in rendered and "lateWindow" not in rendered
    pattern = dataclasses.replace(MINIMAL, topics=None, topic_pattern=r"^flights\.\w+$")
    assert pattern.to_options()["subscribePattern"] == r"^flights\.\w+$"
    assert "subscribe" not in pattern.to_options()
    assigned = dataclasses.replace(MINIMAL, assigned={"flights": (0, 2)})
    assert json.loads(assigned.to_options()["assign"]) == {"flights": [0, 2]}
    assert "subscribe" not in assigned.to_options()


def test_a_query_group_configures_the_source_through_the_typed_model() -> None:
    """The shipped flights group: its stream's settings reach the source typed
    (``max_event_time_drift_ms`` an int of ms, the key required) and are rendered once."""
    from pipeline.config import load_query_group
    from pipeline.resources import query_group_file
    from pipeline.spark.inputs import source_options

    config = load_query_group(query_group_file("flights"), env={})
    query = next(iter(config.queries))
    stream = config.input_streams["flights"]
    options = source_options(
        config,
        query,
        "flights",
        bootstrap_servers="b:1",
        schemas_json="{}",
        max_tasks=2,
        late=("/tmp/cp/q", EventTimeWindow(3_600_000, 3_600_000)),
        discard_before={0: 7},
    )
    assert options.max_event_time_drift_ms == stream.max_event_time_drift_ms == 3_600_000
    assert options.group_id == config.consumer_group(query)
    assert (options.topics, options.commit_offsets) == ((stream.topic,), False)
    assert options.discard_before == {stream.topic: {0: 7}}
    rendered = options.to_options()
    assert rendered["maxEventTimeDriftMs"] == "3600000"
    assert rendered["subscribe"] == stream.topic
    assert rendered["kafka.group.id"] == config.consumer_group(query)
    assert rendered["keyRequired"] == str(bool(stream.key)).lower()
    assert rendered["maxTasks"] == "2"
    assert rendered["lateWindow"] == "3600000,3600000,0"
    assert rendered["discardBefore"] == json.dumps({stream.topic: {"0": 7}})


def test_the_options_by_timestamp_splitting_and_retries_are_rendered_by_spark_s_names() -> None:
    by_time = dataclasses.replace(
        MINIMAL,
        starting_timestamp_ms=1_357_000_000_000,
        starting_timestamp_strategy="latest",
        fetch_offset_num_retries=5,
        fetch_offset_retry_interval_ms=0,
    ).to_options()
    assert by_time["startingTimestamp"] == "1357000000000"
    assert by_time["startingOffsetsByTimestampStrategy"] == "latest"
    assert (by_time["fetchOffset.numRetries"], by_time["fetchOffset.retryIntervalMs"]) == (
        "5",
        "0",
    )
    per_partition = dataclasses.replace(
        MINIMAL, starting_partition_timestamps={"flights": {1: 20, 0: 10}}
    ).to_options()
    # Spark's partitionTimestamps JSON: topics, then partitions, in order.
    assert per_partition["startingOffsetsByTimestamp"] == '{"flights": {"0": 10, "1": 20}}'
    split = dataclasses.replace(
        MINIMAL, min_partitions=8, max_records_per_partition=1000
    ).to_options()
    assert (split["minPartitions"], split["maxRecordsPerPartition"]) == ("8", "1000")
    unset = MINIMAL.to_options()
    assert not {
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "minPartitions",
        "maxRecordsPerPartition",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
    } & set(unset)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"starting_timestamp_ms": -1}, "startingTimestamp = -1; allowed: a whole number of"),
        (
            {"starting_timestamp_ms": 1, "starting_partition_timestamps": {"flights": {0: 1}}},
            "startingTimestamp and startingOffsetsByTimestamp go not together",
        ),
        (
            {"starting_partition_timestamps": {"arrivals": {0: 1}}},
            "names topic 'arrivals', which is not read; allowed: the topics read ['flights']",
        ),
        (
            {"starting_partition_timestamps": {"flights": {0: -5}}},
            "allowed: one or more partitions >= 0",
        ),
        (
            {"starting_timestamp_ms": 1, "starting_timestamp_strategy": "next"},
            "startingOffsetsByTimestampStrategy = 'next'; allowed: error, latest",
        ),
        (
            {"starting_timestamp_strategy": "latest"},
            "startingOffsetsByTimestampStrategy is only used with startingTimestamp",
        ),
        ({"min_partitions": 0}, "minPartitions = 0; allowed: a whole number >= 1"),
        ({"min_partitions": 2**31}, "and <= 2147483647"),
        ({"max_records_per_partition": 0}, "maxRecordsPerPartition = 0; allowed"),
        (
            {"max_records_per_partition": 10, "max_tasks": 2},
            "options 'maxRecordsPerPartition' and 'maxTasks' go not together",
        ),
        (
            {"min_partitions": 4, "max_tasks": 2},
            "options 'minPartitions' and 'maxTasks' go not together",
        ),
        ({"fetch_offset_num_retries": 1001}, "fetchOffset.numRetries = 1001; allowed"),
        ({"fetch_offset_num_retries": True}, "fetchOffset.numRetries = True; allowed"),
        (
            {"fetch_offset_retry_interval_ms": -1},
            "fetchOffset.retryIntervalMs = -1; allowed: a whole number of ms >= 0",
        ),
    ],
)
def test_a_value_the_source_would_refuse_is_refused_naming_the_option(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        dataclasses.replace(MINIMAL, **given)
    assert message in str(info.value)


def test_a_query_group_s_starting_timestamp_reaches_the_source() -> None:
    """``starting_timestamp_ms`` and its strategy, in an input stream's section, become
    the source's ``startingTimestamp`` and ``startingOffsetsByTimestampStrategy``."""
    from pipeline.config import load_query_group
    from pipeline.resources import query_group_file
    from pipeline.spark.inputs import source_options

    config = load_query_group(
        query_group_file("flights"),
        env={
            "FLOODGATE__INPUT_STREAMS__FLIGHTS__STARTING_TIMESTAMP_MS": "1357000000000",
            "FLOODGATE__INPUT_STREAMS__FLIGHTS__STARTING_TIMESTAMP_STRATEGY": "latest",
        },
    )
    query = next(iter(config.queries))
    rendered = source_options(
        config, query, "flights", bootstrap_servers="b:1", schemas_json="{}", max_tasks=2
    ).to_options()
    assert rendered["startingTimestamp"] == "1357000000000"
    assert rendered["startingOffsetsByTimestampStrategy"] == "latest"
    plain = load_query_group(query_group_file("flights"), env={})
    rendered = source_options(
        plain, query, "flights", bootstrap_servers="b:1", schemas_json="{}", max_tasks=2
    ).to_options()
    assert "startingTimestamp" not in rendered
    assert "startingOffsetsByTimestampStrategy" not in rendered
