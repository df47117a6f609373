"""One typed model of the source's options: :class:`SourceOptions`. A query group
builds one from its config (:func:`pipeline.spark.inputs.source_options`) and renders
it (:meth:`SourceOptions.to_options`) as the option map Spark hands the
``floodgate_kafka`` source on the JVM, which parses it."""

from __future__ import annotations

import dataclasses
import json

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
