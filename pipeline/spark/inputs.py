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
from dataclasses import replace

from prometheus_client import Counter
from pyspark.sql import SparkSession

from pipeline.config import QueryGroupConfig
from pipeline.names import real_time_ends_group_id, sink_transactional_id
from pipeline.offsets import local_checkpoint_path
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.late_plan import late_plan
from pipeline.spark.options import SOURCE_NAME, EventTimeWindow, SourceOptions

log = logging.getLogger(__name__)


def register_inputs(
    spark: SparkSession,
    config: QueryGroupConfig,
    query: str,
    *,
    bootstrap_servers: str,
    schemas: SchemaRepository,
    discard_before: Mapping[str, Mapping[int, int]],
    pruning_failures: Counter | None = None,
) -> None:
    """(Re)define the input views for ``query``, which is analysed right after.

    Every input stream of the group becomes a temporary view of the stream's name,
    read with the ``floodgate_kafka`` source, with a watermark on ``event_time`` where
    the stream has one. The view is then defined again with option ``fields``, the
    fields the query reads (:func:`read_fields`): the source's schema has columns for
    those only, so it decodes only them, and a column the query reads that is not
    among them fails the query's analysis naming it (it never reads NULL). When the
    fields cannot be found, every field is decoded, logged as ``FG-QG-011``.

    Args:
        spark: the group's SparkSession.
        config: the group's config.
        query: the query's name.
        bootstrap_servers: the Kafka cluster.
        schemas: the schema repository.
        discard_before: per input stream, the offsets a discarding release skipped
            to (:attr:`Hold.discard_before <pipeline.spark.hold.Hold.discard_before>`).
        pruning_failures: incremented (labels ``query_group``, ``query``) when the
            query's fields cannot be found
            (``floodgate_query_pruning_failures_total``); ``None``: not counted.
    """
    real_time = config.query_group.real_time
    # A real-time batch has no end offset: each partition is one task, and no late
    # tuples are cut out of it (check_real_time refuses what would need either).
    late = None if real_time else late_window(spark, config, query)
    views: dict[str, SourceOptions] = {}
    for name in config.input_streams:
        views[name] = source_options(
            config,
            query,
            name,
            bootstrap_servers=bootstrap_servers,
            schemas_json=schemas.as_json(),
            # One task per core, not per Kafka partition (option maxTasks: the source
            # deals the partitions out to the tasks).
            max_tasks=None if real_time else spark.sparkContext.defaultParallelism,
            late=late[1:] if late is not None and late[0] == name else None,
            discard_before=discard_before.get(name),
        )
        _define_view(spark, config, name, views[name])
    try:
        fields = read_fields(
            spark,
            config.queries[query].sql,
            {name: schemas.get(s.schema_).field_names for name, s in config.input_streams.items()},
        )
    except PruningError as exc:
        log.warning(
            "FG-QG-011 query group %s, query %s: the fields it reads are not known, so its "
            "sources decode every field: %s",
            config.name,
            query,
            exc,
        )
        if pruning_failures is not None:
            pruning_failures.labels(config.name, query).inc()
        return
    for name, options in views.items():
        if fields.get(name):  # none read: decode them all (option fields takes one or more)
            _define_view(spark, config, name, replace(options, fields=tuple(fields[name])))


def source_options(
    config: QueryGroupConfig,
    query: str,
    name: str,
    *,
    bootstrap_servers: str,
    schemas_json: str,
    max_tasks: int | None,
    late: tuple[str, EventTimeWindow] | None = None,
    discard_before: Mapping[int, int] | None = None,
) -> SourceOptions:
    """The source's options for input stream ``name`` of ``query``, typed, from the
    group's config: the one model both the config and the source use
    (:meth:`SourceOptions.to_options` renders it for Spark; the source parses it on
    the JVM).

    Args:
        config: the group's config.
        query: the reading query (named in dead letters; its consumer group).
        name: the input stream.
        bootstrap_servers: the Kafka cluster.
        schemas_json: the schema repository as JSON.
        max_tasks: most Spark tasks a micro-batch is read with; ``None``: one per
            topic-partition (a real-time batch's).
        late: ``(the query's local checkpoint, its aggregation's window)`` when the
            source dead-letters the tuples that window would drop (:func:`late_window`).
        discard_before: the offsets a discarding release skipped to, per partition.
    """
    stream = config.input_streams[name]
    settings = config.input_settings(name)
    encoding, registry = config.stream_registry("input", name)
    if stream.key_encoding != "raw":
        registry = config.schema_registry.client_config()
    return SourceOptions(
        bootstrap_servers=bootstrap_servers,
        topics=(stream.topic,),
        stream=name,
        schema_name=stream.schema_,
        schemas_json=schemas_json,
        # Offsets are committed by the JVM sink's driver, per query, to this group;
        # the source commits nothing, and reads the group's commits where a new
        # checkpoint starts (startingOffsets "committed"). A group of its own here had
        # no commits: a new checkpoint started at the log start, output again what the
        # query had written and skipped what was swept into BLOBs.
        group_id=config.consumer_group(query),
        commit_offsets=False,
        # The system default cap is for micro-batches; a real-time batch has no end.
        max_rows_per_trigger=None
        if config.query_group.real_time
        else settings.max_tuples_per_trigger,
        starting_offsets=stream.starting_offsets,
        starting_timestamp_ms=stream.starting_timestamp_ms,
        starting_timestamp_strategy=(
            stream.starting_timestamp_strategy if stream.starting_timestamp_ms is not None else None
        ),
        dead_letter_topic=config.dead_letter_topic,
        timestamp_mode=stream.timestamp_mode,
        timestamp_field=stream.timestamp_field,
        client={k: str(v) for k, v in config.kafka.client.items()},
        query=query,
        discard_before={stream.topic: dict(discard_before)} if discard_before else {},
        sweep_catalog=config.query_group.sweep_catalog_url,
        # Exactly once in real time: a batch run again after a crash reads to where its
        # first run stopped, so that write tasks after a shuffle may skip what they
        # committed by their batch markers (the sink's sourceEndsLogged).
        real_time_ends_group=(
            real_time_ends_group_id(sink_transactional_id(config.consumer_group(query)), name)
            if config.query_group.real_time and config.query_group.delivery == "exactly-once"
            else None
        ),
        key_required=bool(stream.key),
        max_event_time_ahead_ms=(
            stream.max_event_time_ahead_ms if stream.timestamp_mode == "data_source" else None
        ),
        watermark_checkpoint=late[0] if late else None,
        late_window=late[1] if late else None,
        max_tasks=max_tasks,
        max_event_time_drift_ms=stream.max_event_time_drift_ms,
        idle_partition_timeout_ms=stream.idle_partition_timeout_ms,
        encoding=encoding,
        schema_registry={k: str(v) for k, v in registry.items()},
        key_encoding=stream.key_encoding,
        key_fields=tuple(stream.key) if stream.key_encoding != "raw" else None,
    )


def _define_view(
    spark: SparkSession, config: QueryGroupConfig, name: str, options: SourceOptions
) -> None:
    """The temporary view ``name``: the input stream read with ``options``."""
    df = spark.readStream.format(SOURCE_NAME).options(**options.to_options()).load()
    watermark = config.input_streams[name].watermark
    if watermark:
        df = df.withWatermark("event_time", watermark)
    df.createOrReplaceTempView(name)


class PruningError(Exception):
    """Spark's optimizer could not be run on a query's plan here, so the fields the
    query reads are not known (:func:`read_fields`)."""


def read_fields(
    spark: SparkSession, sql: str, stream_fields: Mapping[str, list[str]]
) -> dict[str, list[str]]:
    """The fields of each input stream that the query ``sql`` reads, in schema order.

    Spark plans a streaming scan without pushing the query's projection down to the
    source (its ``MicroBatchExecution`` gives the scan the relation's whole output as
    the required columns), so the query group finds it: Spark's optimizer, run on
    the analysed plan, prunes the columns each operator needs down to the relations
    (``ColumnPruning``), and the attributes left name the fields. By name, so a field
    is kept if any stream's column of that name is read (a superset, never too few).

    Returns:
        ``{stream: [field, ...]}``.

    Raises:
        PruningError: the plan could not be analysed or optimized here (a private
            Spark API that changed, or a query Spark cannot analyse); the message
            names the query and the cause.
    """
    try:
        session = spark._jsparkSession
        analysed = spark.sql(sql)._jdf.queryExecution().analyzed()
        optimized = session.sessionState().optimizer().execute(analysed)
        plan = json.loads(optimized.toJSON())
    except Exception as exc:
        raise PruningError(f"query {sql!r} was not optimized: {exc}") from exc
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
) -> tuple[str, str, EventTimeWindow] | None:
    """``(stream, its query's local checkpoint, the window)``: what the source's options
    ``watermarkCheckpoint`` and ``lateWindow`` take (:func:`source_options`) for the one
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
    return stream, os.path.abspath(f"{local}/{query}"), plan.window
