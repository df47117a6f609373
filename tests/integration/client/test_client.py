"""The back-pressure client on a real broker (and a real query group where it consumes)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry

from pipeline.brokers.local import LocalBroker
from pipeline.client import Connector, connect
from pipeline.client.input import THRESHOLD_MESSAGE_CODE, PutResult, StreamInput
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.flights import flight_table, load_flights
from pipeline.demo.reception import read_all
from pipeline.errors import (
    BrokerError,
    DeliveryError,
    EventTimeError,
    NullKeyError,
    QueueFullError,
    QueueThresholdExceeded,
    SchemaError,
    TupleTooLargeError,
)
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from tests.integration.helpers import flights_raw_config


def topic_total(bootstrap: str, topic: str) -> int:
    """Tuples ever written to a topic (sum of high watermarks). A just-created topic's
    partitions may have no leader yet on Apache Kafka (NOT_LEADER_FOR_PARTITION):
    asked again for up to 30 s, as the client's own queue reads are."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
                return sum(
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in partitions
                )
            except KafkaException as exc:
                error = exc.args[0]
                transient = error.retriable() or error.code() in (
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                )
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def commit_half(bootstrap: str, config: QueryGroupConfig) -> None:
    """Act as the query group's queries: commit half of every partition as processed."""
    topic = config.input_streams["flights"].topic
    for query in config.readers("flights"):
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": config.consumer_group(query)}
        )
        try:
            highs = [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(4)
            ]
            consumer.commit(
                offsets=[TopicPartition(topic, p, h // 2) for p, h in enumerate(highs)],
                asynchronous=False,
            )
        finally:
            consumer.close()


@pytest.fixture
def small_queue(run_id: str, tmp_path: Any, bootstrap: str) -> Callable[..., QueryGroupConfig]:
    """The flights group (passthrough only) with a small input queue; topics created."""

    def make(max_queue_size: int, suffix: str = "", **group: Any) -> QueryGroupConfig:
        raw = flights_raw_config(
            run_id + suffix,
            tmp_path / f"checkpoints{suffix}",
            only_passthrough=True,
            max_tuples_per_trigger=200,
        )
        # On the input stream itself: at the group level it would bound the output
        # stream queue too, which nobody reads here.
        raw["input_streams"]["flights"]["max_queue_size"] = max_queue_size
        raw["query_group"].update(**group)
        config = parse_query_group(raw, env={})
        ensure_topics(bootstrap, {config.input_streams["flights"].topic: (4, 1)})
        return config

    return make


@pytest.fixture
def open_input(schemas: SchemaRepository) -> Iterator[Callable[..., StreamInput]]:
    """Open the flights input of a config; every connector opened is closed after the test."""
    connectors: list[Connector] = []

    def open_(
        bootstrap: str, config: QueryGroupConfig, _schemas: Any = None, **kwargs: Any
    ) -> StreamInput:
        connector = connect(
            bootstrap_servers=bootstrap,
            config=config,
            schemas=schemas,
            registry=kwargs.pop("registry", None),
        )
        connectors.append(connector)
        return connector.open_stream_input(config.name, "flights", **kwargs)

    yield open_
    for connector in connectors:
        connector.close()


def test_fill_to_exactly_max_then_one_more_is_refused_and_nothing_reaches_the_topic(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    caplog: pytest.LogCaptureFixture,
    open_input: Callable[..., StreamInput],
) -> None:
    config = small_queue(500, free_input_queue_size_threshold=20)
    topic = config.input_streams["flights"].topic
    registry = CollectorRegistry()
    signalled: list[PutResult] = []
    stream_input = open_input(
        bootstrap, config, schemas, registry=registry, on_threshold=signalled.append
    )
    assert (stream_input.max_queue_size, stream_input.free_queue_size()) == (500, 500)

    caplog.set_level(logging.WARNING, logger="pipeline.client")
    results = [stream_input.put(flights[i : i + 100]) for i in range(0, 500, 100)]
    stream_input.put_end()
    # Free after each put: 400, 300, 200, 100 (= 20 %, the threshold), 0.
    assert [r.free_queue_size for r in results] == [400, 300, 200, 100, 0]
    assert [r.threshold_exceeded for r in results] == [False, False, False, True, True]
    assert len(signalled) == 2  # the callback hears every put at or below the threshold...
    crossings = [r for r in caplog.records if r.getMessage().startswith(THRESHOLD_MESSAGE_CODE)]
    assert len(crossings) == 1  # ...the log only the crossing
    assert "length=400 max=500 threshold=20%" in crossings[0].getMessage()
    assert topic_total(bootstrap, topic) == 500

    with pytest.raises(QueueFullError) as info:
        stream_input.put(flights[500])
    assert (
        info.value.stream,
        info.value.requested,
        info.value.free,
        info.value.max_queue_size,
    ) == (
        "flights",
        1,
        0,
        500,
    )
    assert "500 of 500 tuples in use (100% full)" in str(info.value)
    stream_input.put_end()
    assert topic_total(bootstrap, topic) == 500  # the high watermark did not move

    labels = {"query_group": config.name, "stream": "flights"}
    sample = registry.get_sample_value
    assert sample("floodgate_stream_put_tuples_total", {**labels, "result": "accepted"}) == 500
    assert sample("floodgate_stream_put_tuples_total", {**labels, "result": "rejected"}) == 1
    assert sample("floodgate_input_stream_queue_threshold_crossings_total", labels) == 1
    assert sample("floodgate_input_stream_queue_max_size", labels) == 500

    # Once the queries have processed half, the queue is above the threshold again;
    # filling it past the threshold once more is a second crossing.
    commit_half(bootstrap, config)
    assert stream_input.free_queue_size() >= 240
    stream_input.put(flights[500:700])
    assert sample("floodgate_input_stream_queue_threshold_crossings_total", labels) == 2


def test_raise_on_threshold_raises_after_the_tuples_were_accepted(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    config = small_queue(100, free_input_queue_size_threshold=50)
    stream_input = open_input(bootstrap, config, schemas, raise_on_threshold=True)
    stream_input.put(flights[:40])
    with pytest.raises(QueueThresholdExceeded) as info:
        stream_input.put(flights[40:60])
    assert info.value.result.accepted == 20
    stream_input.put_end()
    assert topic_total(bootstrap, config.input_streams["flights"].topic) == 60


def test_a_blocked_put_resumes_when_the_query_group_consumes(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
    start_query_group: Callable[..., QueryGroup],
) -> None:
    config = small_queue(600, resume_free_queue_size_threshold=50, queue_refresh_interval_ms=100)
    stream_input = open_input(bootstrap, config, schemas)
    stream_input.put(flights[:600])
    stream_input.put_end()

    outcome: list[Any] = []
    blocked = threading.Thread(
        target=lambda: outcome.append(
            stream_input.put(flights[600:700], block=True, timeout_s=240)
        ),
        daemon=True,
    )
    blocked.start()
    blocked.join(timeout=2.0)
    assert blocked.is_alive() and not outcome  # nothing consumes yet: the put waits

    with start_query_group(config) as group:
        blocked.join(timeout=240)
        assert outcome and outcome[0].accepted == 100
        assert outcome[0].blocked_s >= 2.0
        stream_input.put_end()
        group.process_all_available()
    assert len(read_all(bootstrap, config.output_streams["flights_copy"].topic)) == 700


@pytest.mark.parametrize("refresh_ms", [0, 60_000])
def test_three_producers_in_parallel_stay_within_the_documented_overshoot(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    refresh_ms: int,
    open_input: Callable[..., StreamInput],
) -> None:
    """QueueBudget's bound: P producers overshoot by at most (P - 1) * F, F the free space
    at their reads; each producer alone never sends more than the F it saw."""
    config = small_queue(2_000, queue_refresh_interval_ms=refresh_ms)
    topic = config.input_streams["flights"].topic
    prefill = open_input(bootstrap, config, schemas)
    prefill.put(flights[:1_200])
    prefill.put_end()
    free = 2_000 - 1_200

    accepted = [0, 0, 0]

    def produce(i: int) -> None:
        stream_input = open_input(bootstrap, config, schemas)
        offset = 1_000 * i  # each has more to send (1 000) than the free space (800)
        try:
            for start in range(offset, offset + 1_000, 25):
                accepted[i] += stream_input.put(flights[start : start + 25]).accepted
        except QueueFullError:
            pass
        stream_input.put_end()

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    total = topic_total(bootstrap, topic)
    assert total == 1_200 + sum(accepted)
    assert all(a <= free for a in accepted), accepted
    assert total <= 2_000 + (3 - 1) * free, (total, accepted)
    assert sum(accepted) >= free  # together they did fill the queue


def test_put_end_with_the_broker_stopped_raises_delivery_error_naming_the_tuples(
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Any,
    open_input: Callable[..., StreamInput],
    new_broker: Callable[..., LocalBroker],
) -> None:
    broker = new_broker().start()
    try:
        raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
        # Hold the tuples in the producer long enough to stop the broker under them.
        # log_level 2: the producer's connection-refused lines after the stop are expected.
        raw["kafka"] = {"client": {"linger.ms": 1_500, "message.timeout.ms": 4_000, "log_level": 2}}
        config = parse_query_group(raw, env={})
        ensure_topics(broker.bootstrap_servers, {config.input_streams["flights"].topic: (4, 1)})
        stream_input = open_input(broker.bootstrap_servers, config, schemas)
        stream_input.put(flights[:10])
        broker.stop()
        with pytest.raises(DeliveryError) as info:
            stream_input.put_end(timeout_s=30)
    finally:
        broker.stop()
    # Every tuple comes back, decoded, with the broker's error: the caller can put it again.
    identity = ("carrier", "flight", "origin", "sched_dep_time", "dep_delay")
    returned = sorted(tuple(t[k] for k in identity) for t, _ in info.value.failed)
    assert returned == sorted(tuple(t[k] for k in identity) for t in flights[:10])
    assert all(error for _, error in info.value.failed)
    assert "10 tuples were not acknowledged" in str(info.value)


def put_across_a_recreated_topic(
    bootstrap: str, topic: str, stream_input: StreamInput, flights: list[dict[str, Any]]
) -> None:
    """Put 100 flights, delete the topic and create it again under the running
    producer, then put 50 more (not yet acknowledged)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    stream_input.put(flights[:100])
    stream_input.put_end()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    time.sleep(1.0)
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    time.sleep(1.0)
    stream_input.put(flights[100:150])


@pytest.mark.noida_db
def test_after_a_fatal_producer_error_the_held_tuples_come_back_and_puts_go_on(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    """A topic deleted and created again under a running idempotent producer: noida-db
    answers OUT_OF_ORDER_SEQUENCE_NUMBER, fatal in librdkafka, as after a broker that
    lost its producer state (found by the soak). The client reports what it held and
    goes on. (The trigger is noida-db's: Apache Kafka answers UNKNOWN_PRODUCER_ID and
    librdkafka bumps the producer's epoch instead, KIP-360; the next test.)"""
    config = small_queue(10_000)
    topic = config.input_streams["flights"].topic
    stream_input = open_input(bootstrap, config, schemas)
    put_across_a_recreated_topic(bootstrap, topic, stream_input, flights)
    with pytest.raises(DeliveryError) as info:
        stream_input.put_end(timeout_s=30)
    identity = ("carrier", "flight", "origin", "sched_dep_time", "dep_delay")
    returned = sorted(tuple(t[k] for k in identity) for t, _ in info.value.failed)
    assert returned == sorted(tuple(t[k] for k in identity) for t in flights[100:150])
    assert stream_input.producer_replacements == 1
    # A new producer goes on: the next tuples are delivered, no KafkaException(_FATAL).
    stream_input.put(flights[150:170])
    stream_input.put_end(timeout_s=30)
    assert len(read_all(bootstrap, topic)) == 20


@pytest.mark.apache_kafka
def test_a_topic_recreated_under_a_running_producer_takes_its_next_tuples(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    """The scenario of the test above on Apache Kafka: the re-created partitions have
    no state of the producer, the broker answers UNKNOWN_PRODUCER_ID, and librdkafka
    resets the sequence (KIP-360) without a fatal error: every tuple put after the
    re-creation is delivered, and the client keeps its producer."""
    config = small_queue(10_000)
    topic = config.input_streams["flights"].topic
    stream_input = open_input(bootstrap, config, schemas)
    put_across_a_recreated_topic(bootstrap, topic, stream_input, flights)
    stream_input.put_end(timeout_s=60)
    assert stream_input.producer_replacements == 0
    stream_input.put(flights[150:170])
    stream_input.put_end(timeout_s=30)
    assert len(read_all(bootstrap, topic)) == 70


def test_a_tuple_with_a_wrong_field_type_is_refused_before_sending(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    config = small_queue(1_000)
    stream_input = open_input(bootstrap, config, schemas)
    bad = dict(flights[1], dep_delay="late")
    with pytest.raises(SchemaError) as info:
        stream_input.put([flights[0], bad, flights[2]])
    assert info.value.field == "dep_delay" and "'late'" in str(info.value)
    stream_input.put_end()
    assert topic_total(bootstrap, config.input_streams["flights"].topic) == 0
    assert stream_input.free_queue_size() == 1_000


def test_an_oversized_tuple_is_refused_before_anything_of_its_batch_is_sent(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    config = small_queue(1_000)
    stream_input = open_input(bootstrap, config, schemas)
    huge = dict(flights[1], tailnum="N" * (stream_input.max_message_bytes + 1))
    with pytest.raises(TupleTooLargeError) as info:
        stream_input.put([flights[0], huge, flights[2]])
    assert info.value.index == 1 and info.value.size > info.value.limit == 1_000_000
    assert "message.max.bytes" in str(info.value)
    # The rest goes on: the refused batch took no room, the next one is sent.
    assert stream_input.put([flights[0], flights[2]]).accepted == 2
    stream_input.put_end()
    assert topic_total(bootstrap, config.input_streams["flights"].topic) == 2
    assert stream_input.free_queue_size() == 998


def test_a_tuple_without_a_key_field_is_refused_naming_the_field(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    config = small_queue(1_000)
    assert config.input_streams["flights"].key == ["carrier", "flight", "time_hour"]
    stream_input = open_input(bootstrap, config, schemas)
    keyless = {k: v for k, v in flights[1].items() if k != "flight"}
    with pytest.raises(NullKeyError) as info:
        stream_input.put([flights[0], dict(flights[2], carrier=None), keyless])
    assert (info.value.index, info.value.field) == (1, "carrier")
    assert "key field 'carrier'" in str(info.value)
    with pytest.raises(NullKeyError) as info:
        stream_input.put([flights[0], keyless])
    assert (info.value.index, info.value.field) == (1, "flight")
    stream_input.put_end()
    assert topic_total(bootstrap, config.input_streams["flights"].topic) == 0
    assert stream_input.free_queue_size() == 1_000


def test_an_event_time_far_ahead_of_now_is_refused_before_it_can_move_the_watermark(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    config = small_queue(1_000)
    stream_input = open_input(bootstrap, config, schemas)
    now_ms = int(time.time() * 1000)
    future = dict(flights[1], time_hour=now_ms + 10 * 365 * 86_400_000)
    with pytest.raises(EventTimeError) as info:
        stream_input.put([flights[0], future])
    assert info.value.index == 1 and info.value.field == "time_hour"
    assert info.value.limit_ms == 3_600_000 and "max_event_time_ahead_ms" in str(info.value)
    # Within the hour allowed ahead (a producer's clock a little fast) it is accepted.
    assert stream_input.put(dict(flights[1], time_hour=now_ms + 600_000)).accepted == 1
    stream_input.put_end()
    assert topic_total(bootstrap, config.input_streams["flights"].topic) == 1


def test_a_put_of_an_arrow_table_sends_what_a_put_of_its_rows_as_dicts_sends(
    bootstrap: str,
    schemas: SchemaRepository,
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    """The column-at-a-time path (BlockEncoder) and the dict path give the broker the
    same keys and values, so the same partitions; and a table the block path cannot
    vouch for is refused with the dict path's own errors."""
    df = load_flights(1_000)
    table = flight_table(df)
    by_dicts, by_table = small_queue(5_000), small_queue(5_000, suffix="_table")
    stream_input = open_input(bootstrap, by_dicts, schemas)
    assert stream_input.put(table.to_pylist()).accepted == 1_000
    stream_input.put_end()
    stream_input = open_input(bootstrap, by_table, schemas)
    assert stream_input.put(table.slice(0, 400)).accepted == 400
    assert stream_input.put(table.slice(400)).accepted == 600

    years = [str(y) for y in table.column("year").to_pylist()]
    with pytest.raises(SchemaError) as wrong:
        stream_input.put(table.set_column(0, "year", pa.array(years)))
    assert wrong.value.field == "year"
    carriers = table.column("carrier").to_pylist()
    carriers[5] = None
    index = table.schema.get_field_index("carrier")
    with pytest.raises(NullKeyError) as keyless:
        stream_input.put(table.set_column(index, "carrier", pa.array(carriers)))
    assert (keyless.value.index, keyless.value.field) == (5, "carrier")
    hours = table.column("time_hour").to_pylist()
    hours[9] = int(time.time() * 1000) + 10 * 365 * 86_400_000
    index = table.schema.get_field_index("time_hour")
    with pytest.raises(EventTimeError) as ahead:
        stream_input.put(table.set_column(index, "time_hour", pa.array(hours, pa.int64())))
    assert ahead.value.index == 9
    stream_input.put_end()

    def records(config: QueryGroupConfig) -> dict[tuple[int, int], tuple[bytes, bytes]]:
        read = read_all(bootstrap, config.input_streams["flights"].topic)
        return {(m.partition(), m.offset()): (m.key(), m.value()) for m in read}

    sent_as_dicts = records(by_dicts)
    assert len(sent_as_dicts) == 1_000
    assert records(by_table) == sent_as_dicts


def test_one_flight_given_in_any_accepted_form_has_one_key_and_one_partition(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    """Epoch ms, an aware datetime, the same in another zone, a naive datetime
    (UTC), integral floats and an Arrow timestamp column reach the broker as one key,
    one partition and one value, so the flight's tuples keep their order."""
    config = small_queue(1_000)
    stream_input = open_input(bootstrap, config, schemas)
    flight = flights[0]
    instant = datetime.fromtimestamp(flight["time_hour"] / 1000, tz=UTC)
    forms = [
        flight,
        dict(flight, time_hour=instant),
        dict(flight, time_hour=instant.astimezone(timezone(timedelta(hours=-5)))),
        dict(flight, time_hour=instant.replace(tzinfo=None)),
        dict(flight, time_hour=float(flight["time_hour"]), flight=float(flight["flight"])),
    ]
    assert stream_input.put(forms).accepted == len(forms)
    # An Arrow table whose time_hour is a timestamp column: keyed a column at a time.
    table = pa.Table.from_pylist([flight])
    index = table.schema.get_field_index("time_hour")
    stamps = pa.array([instant], pa.timestamp("ms", tz="UTC"))
    assert stream_input.put(table.set_column(index, "time_hour", stamps)).accepted == 1
    stream_input.put_end()
    read = read_all(bootstrap, config.input_streams["flights"].topic)
    assert len(read) == len(forms) + 1
    key = f"{flight['carrier']}|{flight['flight']}|{flight['time_hour']}"
    assert {m.key() for m in read} == {key.encode()}
    assert len({m.partition() for m in read}) == 1
    assert len({m.value() for m in read}) == 1


def test_a_truncating_float_a_bool_or_a_non_dict_is_refused_and_nothing_is_sent(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    small_queue: Callable[..., QueryGroupConfig],
    open_input: Callable[..., StreamInput],
) -> None:
    """``1400.7`` was once written as 1400, ``True`` as 1, and a non-dict tuple raised
    a bare TypeError."""
    config = small_queue(1_000)
    stream_input = open_input(bootstrap, config, schemas)
    for bad, field in [
        (dict(flights[1], distance=1400.7), "distance"),
        (dict(flights[1], dep_delay=True), "dep_delay"),
        (dict(flights[1], time_hour=float("nan")), "time_hour"),
    ]:
        with pytest.raises(SchemaError) as info:
            stream_input.put([flights[0], bad])
        assert info.value.field == field
        assert str(info.value).startswith(
            f"tuple 1 of the batch: stream 'flights': field {field!r}"
        )
    with pytest.raises(SchemaError) as shape:
        stream_input.put([flights[0], ("UA", 1545)])  # type: ignore[list-item]
    assert "tuple 1 of the batch" in str(shape.value) and "not tuple" in str(shape.value)
    with pytest.raises(SchemaError) as whole:
        stream_input.put(1545)  # type: ignore[arg-type]
    assert "put takes a dict" in str(whole.value) and "not int" in str(whole.value)
    stream_input.put_end()
    assert topic_total(bootstrap, config.input_streams["flights"].topic) == 0
    assert stream_input.free_queue_size() == 1_000


def test_a_stream_input_on_a_missing_topic_is_refused_and_the_topic_is_not_created(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Any,
    open_input: Callable[..., StreamInput],
) -> None:
    """The first read of the queue once created the topic with the broker's default
    of 1 partition (the config says 4), and ensure_topics then kept it."""
    from confluent_kafka.admin import AdminClient

    config = parse_query_group(
        flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True), env={}
    )
    topic = config.input_streams["flights"].topic
    stream_input = open_input(bootstrap, config, schemas)
    with pytest.raises(BrokerError) as info:
        stream_input.free_queue_size()
    assert f"topic {topic!r} does not exist" in str(info.value)
    assert "ensure_topics" in str(info.value)
    with pytest.raises(BrokerError):
        stream_input.put(flights[:3])
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    # Created as configured, the same stream input goes on.
    ensure_topics(bootstrap, config.topics())
    assert stream_input.put(flights[:3]).accepted == 3
    stream_input.put_end()
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == config.input_settings("flights").partitions
