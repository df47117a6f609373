"""The input views of a query: each input stream read with the ``floodgate_kafka`` source.

Each query reads its inputs with its own source (Spark cannot share one), so each
gets views of its own: its source then names the query in dead-letter records and
reads with a consumer group of its own.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from pyspark.sql import SparkSession

from pipeline.config import QueryGroupConfig
from pipeline.offsets import local_checkpoint_path, offsets_to_json
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.late_plan import late_plan
from pipeline.spark.options import PYTHON_SOURCE_NAME, SOURCE_NAME

log = logging.getLogger(__name__)


def register_inputs(
    spark: SparkSession,
    config: QueryGroupConfig,
    query: str,
    *,
    bootstrap_servers: str,
    schemas: SchemaRepository,
    discard_before: Mapping[str, Mapping[int, int]],
) -> None:
    """(Re)define the input views for ``query``, which is analysed right after.

    Every input stream of the group becomes a temporary view of the stream's name,
    read with the group's source (``query_group.source``: ``floodgate_kafka`` on the
    JVM, or ``floodgate_kafka_python``), with a watermark on ``event_time`` where the
    stream has one. The JVM source then decodes only the fields the query reads
    (option ``fields``, :func:`read_fields`).

    Args:
        spark: the group's SparkSession.
        config: the group's config.
        query: the query's name.
        bootstrap_servers: the Kafka cluster.
        schemas: the schema repository.
        discard_before: per input stream, the offsets a discarding release skipped
            to (:attr:`Hold.discard_before <pipeline.spark.hold.Hold.discard_before>`).
    """
    schemas_json = schemas.as_json()
    late = late_window(spark, config, query)
    jvm = config.query_group.source == "jvm"
    views: dict[str, dict[str, str]] = {}
    for name, stream in config.input_streams.items():
        settings = config.input_settings(name)
        options = {
            "bootstrap.servers": bootstrap_servers,
            "topic": stream.topic,
            "stream": name,
            "query": query,
            "schema": stream.schema_,
            "schemas": schemas_json,
            # Offsets are committed by the transactional sinks, per query, to this
            # group; the source commits nothing, and reads the group's commits where a
            # new checkpoint starts (startingOffsets "committed"). A group of its own
            # here had no commits: a new checkpoint started at the log start, output
            # again what the query had written and skipped what was swept into BLOBs.
            "group.id": config.consumer_group(query),
            "commitOffsets": "false",
            "startingOffsets": stream.starting_offsets,
            "deadLetterTopic": config.dead_letter_topic,
            "timestampMode": stream.timestamp_mode,
            **({"timestampField": stream.timestamp_field} if stream.timestamp_field else {}),
            **(
                {"maxRowsPerTrigger": str(settings.max_tuples_per_trigger)}
                if settings.max_tuples_per_trigger
                else {}
            ),
            **{f"kafka.{k}": str(v) for k, v in config.kafka.client.items()},
        }
        encoding, registry = config.stream_registry("input", name)
        if encoding != "single-object":
            options["encoding"] = encoding
        if stream.key_encoding != "raw":
            options["keyEncoding"] = stream.key_encoding
            options["keyFields"] = ",".join(stream.key)
            registry = config.schema_registry.client_config()
        options.update({f"schemaRegistry.{k}": v for k, v in registry.items()})
        # One task per core, not per Kafka partition: a Python data source task
        # costs ~0.1-0.2 s of Spark's time however little it reads (group_ranges).
        options["maxTasks"] = str(spark.sparkContext.defaultParallelism)
        if config.query_group.sweep_catalog_url:
            options["sweepCatalog"] = config.query_group.sweep_catalog_url
        if stream.key:
            options["keyRequired"] = "true"
        if stream.timestamp_mode == "data_source":
            options["maxEventTimeAheadMs"] = str(stream.max_event_time_ahead_ms)
        if stream.max_event_time_drift_ms is not None:
            options["maxEventTimeDriftMs"] = str(stream.max_event_time_drift_ms)
            options["idlePartitionTimeoutMs"] = str(stream.idle_partition_timeout_ms)
        if late is not None and late[0] == name:
            # Tuples Spark's aggregation would drop as late go to the dead-letter
            # topic instead (reason "late"): same predicate, same watermark.
            options["watermarkCheckpoint"], options["lateWindow"] = late[1:]
        if name in discard_before:
            options["discardBefore"] = json.dumps(
                offsets_to_json(stream.topic, discard_before[name])
            )
        views[name] = options
        _define_view(spark, config, name, options)
    if not jvm:
        return
    fields = read_fields(
        spark,
        config.queries[query].sql,
        {name: schemas.get(s.schema_).field_names for name, s in config.input_streams.items()},
    )
    for name, options in views.items():
        if fields.get(name):  # none read: decode them all (option fields takes one or more)
            _define_view(spark, config, name, {**options, "fields": ",".join(fields[name])})


def _define_view(
    spark: SparkSession, config: QueryGroupConfig, name: str, options: Mapping[str, str]
) -> None:
    """The temporary view ``name``: the input stream read with ``options``."""
    source = SOURCE_NAME if config.query_group.source == "jvm" else PYTHON_SOURCE_NAME
    df = spark.readStream.format(source).options(**options).load()
    watermark = config.input_streams[name].watermark
    if watermark:
        df = df.withWatermark("event_time", watermark)
    df.createOrReplaceTempView(name)


def read_fields(
    spark: SparkSession, sql: str, stream_fields: Mapping[str, list[str]]
) -> dict[str, list[str]]:
    """The fields of each input stream that the query ``sql`` reads, in schema order.

    Spark plans a streaming scan without pushing the query's projection down to the
    source, so the query group finds it: Spark's optimizer, run on the analysed plan,
    prunes the columns each operator needs down to the relations (``ColumnPruning``),
    and the attributes left name the fields. By name, so a field is kept if any
    stream's column of that name is read (a superset, never too few).

    Returns:
        ``{stream: [field, ...]}``; a stream is missing (decode every field) when the
        plan could not be optimized here (logged at DEBUG).
    """
    try:
        session = spark._jsparkSession
        analysed = spark.sql(sql)._jdf.queryExecution().analyzed()
        optimized = session.sessionState().optimizer().execute(analysed)
        plan = json.loads(optimized.toJSON())
    except Exception as exc:  # an optimisation only: every field is decoded
        log.debug("the fields of query %r are not known (%s): every field is decoded", sql, exc)
        return {}
    referenced: set[str] = set()
    _attribute_names(plan, referenced)
    return {
        stream: [f for f in fields if f in referenced] for stream, fields in stream_fields.items()
    }


def _attribute_names(node: object, names: set[str]) -> None:
    """The names of every attribute an operator of a plan's JSON refers to; a relation's
    own ``output`` (every column it has) is not a reference."""
    if isinstance(node, dict):
        if str(node.get("class", "")).endswith(".AttributeReference"):
            names.add(str(node.get("name")))
        for key, value in node.items():
            if key != "output":
                _attribute_names(value, names)
    elif isinstance(node, list):
        for item in node:
            _attribute_names(item, names)


def late_window(
    spark: SparkSession, config: QueryGroupConfig, query: str
) -> tuple[str, str, str] | None:
    """``(stream, watermarkCheckpoint, lateWindow)``: the source options for the one
    input stream ``query`` reads when the query aggregates it over an event-time
    window (the only operator that drops late tuples the source can foresee:
    :func:`~pipeline.spark.late_plan.late_plan`) and the stream has a watermark;
    else ``None``. Logged, ``FG-QG-006``, when the query has a window the source cannot follow or a
    checkpoint that is not local: late tuples of that query are then dropped by
    Spark and only counted."""
    query_config = config.queries[query]
    if query_config.output_mode == "complete":
        return None  # nothing is dropped: complete mode keeps all state
    parser = spark._jsparkSession.sessionState().sqlParser()
    plan = late_plan(parser.parsePlan(query_config.sql).toJSON())
    streams_read = [s for s in config.input_streams if s.lower() in plan.relations]
    if len(streams_read) != 1 or not config.input_streams[streams_read[0]].watermark:
        return None  # no stream, several, or no watermark: nothing to foresee
    stream = streams_read[0]
    root = config.checkpoint_root.rstrip("/")
    local = local_checkpoint_path(root)
    why_not = plan.why_not
    if why_not is None and plan.window is not None and local is None:
        why_not = f"checkpoint_dir {root} is not local (the source reads its offset log)"
    if why_not is not None:
        log.warning(
            "FG-QG-006 query group %s, query %s: late tuples of stream %s are dropped by "
            "Spark, not dead-lettered: %s",
            config.name,
            query,
            stream,
            why_not,
        )
        return None
    if plan.window is None:
        return None
    assert local is not None  # a window with a non-local root was refused above
    return stream, os.path.abspath(f"{local}/{query}"), plan.window.option()
