"""The flights query group on a real broker and a real SparkSession."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from pipeline.config import QueryGroupConfig
from pipeline.demo.reception import read_all
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryGroupState
from tests.integration.helpers import Drained
from tests.integration.spark.figures import (
    actual,
    assert_same_figures,
    expected_by_carrier_day,
    expected_by_origin_hour,
    read_outputs,
)


def test_flights_figures_equal_an_independent_pandas_computation(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    flights_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
    start_query_group: Callable[..., QueryGroup],
) -> None:
    config = flights_config(max_tuples_per_trigger=1_000)
    produce(config, flights)

    with start_query_group(config) as group:
        assert group.state == QueryGroupState.EXECUTING
        group.process_all_available()
        stats = group.stats()
    assert group.state == QueryGroupState.STOPPED

    # Every query read every tuple, in batches no larger than the read limit.
    for name, s in stats.items():
        assert s.input_tuples == len(flights), name
        assert s.batches >= math.ceil(len(flights) / 1_000), name

    outputs = read_outputs(bootstrap, config, schemas)
    assert_same_figures(
        actual(outputs["delays_by_origin_hour"], ["origin", "hour_start"]),
        expected_by_origin_hour(flights),
    )
    assert_same_figures(
        actual(outputs["delays_by_carrier_day"], ["carrier", "day"]),
        expected_by_carrier_day(flights),
    )

    # The queries' consumer groups show no lag to any Kafka tool.
    topic = config.input_streams["flights"].topic
    for query in config.queries:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": config.consumer_group(query)}
        )
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
            highs = [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(4)
            ]
        finally:
            consumer.close()
        assert [tp.offset for tp in committed] == highs, query


def test_stop_and_restart_from_the_checkpoint_loses_and_duplicates_nothing(
    bootstrap: str,
    drain: Callable[[QueryGroupConfig], Drained],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    flights_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
) -> None:
    """The group stopped and restarted on its checkpoint goes on where it stopped (a
    checkpoint of the removed Python source resumes too:
    ``test_python_source_checkpoint.py``)."""
    half = len(flights) // 2
    config = None
    for part in (flights[:half], flights[half:]):
        config = flights_config(max_tuples_per_trigger=500, passthrough=True)
        produce(config, part)
        # The restarted group went on from the checkpoint: it read only the new part.
        stats = drain(config).stats
        assert all(s.input_tuples == len(part) for s in stats.values()), stats
    assert config is not None

    copies = [m for m in read_all(bootstrap, config.output_streams["flights_copy"].topic)]
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    got = Counter(_identity(codec.decode(m.value(), logical=False)) for m in copies)
    assert got == Counter(_identity(r) for r in flights)  # a duplicate would count twice

    outputs = read_outputs(bootstrap, config, schemas)
    assert_same_figures(
        actual(outputs["delays_by_origin_hour"], ["origin", "hour_start"]),
        expected_by_origin_hour(flights),
    )


def _identity(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record[k] for k in sorted(record))


def test_trigger_available_now_reads_what_was_there_and_stops(
    flights: list[dict[str, Any]],
    flights_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
    start_query_group: Callable[..., QueryGroup],
) -> None:
    config = flights_config(max_tuples_per_trigger=700, only_passthrough=True)
    produce(config, flights[:2_000])

    with start_query_group(config, available_now=True) as group:
        assert group.await_termination(timeout_s=300)
        stats = group.stats()["copy"]
    assert stats.input_tuples == 2_000
    assert stats.batches >= 3  # 2 000 rows at most 700 per micro-batch


def test_no_data_micro_batches_is_set_on_the_groups_own_session_only(
    bootstrap: str,
    spark: Any,
    schemas: SchemaRepository,
    flights_config: Callable[..., QueryGroupConfig],
) -> None:
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    shipped = QueryGroup(
        flights_config(), bootstrap_servers=bootstrap, spark=spark, schemas=schemas
    )
    spark_default = QueryGroup(
        flights_config(no_data_micro_batches=True),
        bootstrap_servers=bootstrap,
        spark=spark,
        schemas=schemas,
    )
    assert shipped.spark.conf.get(key) == "false"  # conf/flights.toml: update mode only
    assert spark_default.spark.conf.get(key) == "true"
    assert spark.conf.get(key) == "true"  # the session both were made from keeps Spark's
