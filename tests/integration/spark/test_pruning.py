"""Pruning in the JVM source (``floodgate_kafka``, docs/spark-source.md, "Reading"):
option ``fields`` shapes the source's schema, so a query reading a field outside it
fails its analysis naming the column instead of reading NULL; a misspelled field is
refused; the fields read decode to their real values; and a query group that cannot
find a query's fields decodes them all, with ``FG-QG-011`` and a counter."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry
from pyspark.errors import AnalysisException, IllegalArgumentException

from pipeline.config.loading import parse_query_group
from pipeline.kafka.topics import ensure_topics
from pipeline.metrics import QueryGroupMetrics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.inputs import register_inputs
from pipeline.spark.options import SOURCE_NAME
from tests.integration.helpers import flights_raw_config, wait_until

#: Nothing listens there: these tests define views and analyse queries, which read no offsets.
NO_BROKER = "127.0.0.1:9"

METADATA = ["event_time", "_key", "_partition", "_offset", "_timestamp"]


def _options(schemas: SchemaRepository, bootstrap: str, topic: str, fields: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "fields": fields,
    }


def test_a_column_outside_fields_fails_the_analysis_naming_it(
    spark: Any, schemas: SchemaRepository
) -> None:
    df = (
        spark.readStream.format(SOURCE_NAME)
        .options(**_options(schemas, NO_BROKER, "pruned", "carrier,flight"))
        .load()
    )
    assert df.columns[:2] == ["carrier", "flight"]
    assert "origin" not in df.columns
    with pytest.raises(AnalysisException, match="origin"):
        df.select("carrier", "origin")


def test_a_misspelled_field_is_refused_naming_it_and_the_streams_fields(
    spark: Any, schemas: SchemaRepository
) -> None:
    reader = spark.readStream.format(SOURCE_NAME).options(
        **_options(schemas, NO_BROKER, "pruned", "carrier,orgin")
    )
    with pytest.raises(IllegalArgumentException) as refused:
        reader.load()
    message = str(refused.value)
    assert "option 'fields' names [orgin]" in message
    assert "its fields: year, month, day, dep_time" in message


def test_the_fields_read_have_their_values(
    spark: Any,
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    topic = f"pruned.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for flight in flights[:6]:
        producer.produce(topic, value=codec.encode(flight), partition=0)
    assert producer.flush(30) == 0
    table = f"pruned_{uuid.uuid4().hex[:8]}"
    df = (
        spark.readStream.format(SOURCE_NAME)
        .options(**_options(schemas, bootstrap, topic, "dest,carrier"))
        .load()
    )
    query = (
        df.select("carrier", "dest", "_offset")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    expected = {(f["carrier"], f["dest"], i) for i, f in enumerate(flights[:6])}

    def read() -> set[tuple[str, str, int]]:
        query.processAllAvailable()
        rows = spark.sql(f"SELECT carrier, dest, _offset FROM {table}").collect()
        return {(r.carrier, r.dest, r._offset) for r in rows}

    try:
        wait_until(lambda: read() == expected, 120, "the six flights' carrier and dest")
    finally:
        query.stop()


def test_a_query_groups_view_has_the_fields_its_query_reads_only(
    spark: Any, schemas: SchemaRepository, tmp_path: Path
) -> None:
    config = parse_query_group(flights_raw_config(uuid.uuid4().hex[:10], tmp_path), env={})
    registry = CollectorRegistry()
    metrics = QueryGroupMetrics(registry)
    register_inputs(
        spark,
        config,
        "delays_by_origin_hour",
        bootstrap_servers=NO_BROKER,
        schemas=schemas,
        discard_before={},
        pruning_failures=metrics.pruning_failures,
    )
    # dep_time, dep_delay, arr_delay and origin in schema order; time_hour is the
    # stream's timestamp_field.
    fields = ["dep_time", "dep_delay", "arr_delay", "origin", "time_hour"]
    assert spark.table("flights").columns[:10] == fields + METADATA
    with pytest.raises(AnalysisException, match="dest"):
        spark.sql("SELECT origin, dest FROM flights")
    labels = {"query_group": config.name, "query": "delays_by_origin_hour"}
    assert registry.get_sample_value("floodgate_query_pruning_failures_total", labels) is None


def test_a_query_whose_fields_are_not_found_decodes_every_field_warned_and_counted(
    spark: Any, schemas: SchemaRepository, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = flights_raw_config(uuid.uuid4().hex[:10], tmp_path)
    # A query Spark cannot analyse (no such column): its plan cannot be optimized.
    raw["queries"]["delays_by_origin_hour"]["sql"] = "SELECT no_such_field FROM flights"
    config = parse_query_group(raw, env={})
    registry = CollectorRegistry()
    metrics = QueryGroupMetrics(registry)
    with caplog.at_level(logging.WARNING, logger="pipeline.spark.inputs"):
        register_inputs(
            spark,
            config,
            "delays_by_origin_hour",
            bootstrap_servers=NO_BROKER,
            schemas=schemas,
            discard_before={},
            pruning_failures=metrics.pruning_failures,
        )
    assert spark.table("flights").columns[:19] == schemas.get("flight").field_names
    warnings = [r.getMessage() for r in caplog.records if "FG-QG-011" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "delays_by_origin_hour" in warnings[0]
    labels = {"query_group": config.name, "query": "delays_by_origin_hour"}
    assert registry.get_sample_value("floodgate_query_pruning_failures_total", labels) == 1.0


def test_a_batch_query_reading_event_time_alone_gets_it_from_its_field(
    spark: Any, bootstrap: str, schemas: SchemaRepository, flights: list[dict[str, Any]]
) -> None:
    """Spark prunes a batch scan to ``event_time``; with ``timestampMode = data_source``
    the source reads ``timestampField`` too, which the event time is taken from."""
    topic = f"pruned.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (1, None)})
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for flight in flights[:3]:
        producer.produce(topic, value=codec.encode(flight), partition=0)
    assert producer.flush(30) == 0
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "timestampMode": "data_source",
        "timestampField": "time_hour",
    }
    rows = (
        spark.read.format(SOURCE_NAME)
        .options(**options)
        .load()
        .selectExpr("unix_millis(event_time) AS ms", "_offset")
        .collect()
    )
    assert {(r.ms, r._offset) for r in rows} == {
        (f["time_hour"], i) for i, f in enumerate(flights[:3])
    }
