"""Run a query group: its continuous Spark SQL queries, in one SparkSession.

A query group (seed 000_eb6ebce252a05f96.txt, "query group") is one config file:
input streams, read with the ``floodgate_kafka`` source and registered as SQL
views (with a watermark on ``event_time`` where configured); Spark SQL queries
over those views; and the output streams each query writes to through a
:class:`~pipeline.output.KafkaTransactionalSink`. All queries of a group run
together in one SparkSession (a child session of the one given, so temporary
views and listeners of two groups sharing a SparkContext never mix).

States (DESIGN.md section 4.2): STARTING, EXECUTING, SLEEPING, HELD, STOPPED,
FAILED. SLEEPING and HELD belong to the bounded output queues.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from pipeline.broker import ensure_topics
from pipeline.config import QueryGroupConfig
from pipeline.errors import ConfigError, QueryGroupError
from pipeline.output import KafkaTransactionalSink
from pipeline.serde import SchemaRepository, StreamCodec
from pipeline.source import SOURCE_NAME, KafkaStreamDataSource

log = logging.getLogger(__name__)


class QueryGroupState(enum.StrEnum):
    """States of a query group (DESIGN.md section 4.2)."""

    STARTING = "STARTING"
    EXECUTING = "EXECUTING"
    SLEEPING = "SLEEPING"
    HELD = "HELD"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


def build_spark_session(
    *,
    app_name: str = "floodgate",
    master: str = "local[2]",
    conf: Mapping[str, Any] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession with Floodgate's defaults.

    ``master`` is used only when none is set already (``spark-submit --master``
    sets one). Defaults: UI off, 2 shuffle partitions, session time zone UTC,
    Python workers running this interpreter (``PYSPARK_PYTHON``).
    """
    from pyspark import SparkConf

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if not SparkConf().contains("spark.master"):
        builder = builder.master(master)
    defaults: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.ui.showConsoleProgress": "false",
    }
    for key, value in {**defaults, **(conf or {})}.items():
        builder = builder.config(key, str(value).lower() if isinstance(value, bool) else str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


@dataclass
class QueryStats:
    """What the progress listener saw of one query (updated from listener events).

    Attributes:
        input_rows: tuples read by the query's source, all batches.
        batches: micro-batches completed.
        dropped_by_watermark: rows the stateful operators dropped as late.
        last_batch_id: id of the last completed micro-batch (-1: none yet).
        last_duration_ms: wall time of the last micro-batch.
        input_rows_per_second / processed_rows_per_second: from the last progress.
    """

    input_rows: int = 0
    batches: int = 0
    dropped_by_watermark: int = 0
    last_batch_id: int = -1
    last_duration_ms: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0


class _ProgressListener(StreamingQueryListener):
    """Copies query progress into :class:`QueryStats`; never blocks (DESIGN.md section 6)."""

    def __init__(self, group: QueryGroup) -> None:
        self._group = group

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        self._group._on_progress(str(progress.id), progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self._group._on_terminated(str(event.id), event.exception)


@dataclass
class _RunningQuery:
    name: str
    query: StreamingQuery
    sink: KafkaTransactionalSink
    stats: QueryStats = field(default_factory=QueryStats)


class QueryGroup:
    """A running query group.

    Args:
        config: the validated query group file.
        bootstrap_servers: the Kafka cluster.
        spark: a SparkSession to run in (a child session is made of it); default:
            :func:`build_spark_session` with the ``[spark]`` section.
        schemas: the schema repository; default: ``config.schema_dir`` or ``schemas/``.

    Raises:
        ConfigError: a query's columns do not fit its output stream's schema, or a
            schema named by the file does not exist.
    """

    def __init__(
        self,
        config: QueryGroupConfig,
        *,
        bootstrap_servers: str,
        spark: SparkSession | None = None,
        schemas: SchemaRepository | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.bootstrap_servers = bootstrap_servers
        self.schemas = schemas or SchemaRepository.load(config.schema_dir)
        self._parent_spark = spark
        self._spark: SparkSession | None = None
        self._queries: dict[str, _RunningQuery] = {}
        self._by_id: dict[str, _RunningQuery] = {}
        self._listener: _ProgressListener | None = None
        self._lock = threading.Lock()
        self.state = QueryGroupState.STOPPED
        self.failure: BaseException | None = None
        self._check_schemas()

    # -- config checks -------------------------------------------------------

    def _check_schemas(self) -> None:
        for kind, streams in (
            ("input_streams", self.config.input_streams),
            ("output_streams", self.config.output_streams),
        ):
            for name, stream in streams.items():
                if stream.schema_ not in self.schemas.names():
                    raise ConfigError(
                        f"{kind}.{name}.schema = {stream.schema_!r}: no such schema; "
                        f"known: {self.schemas.names()}",
                        key=f"{kind}.{name}.schema",
                        value=stream.schema_,
                        allowed=", ".join(self.schemas.names()),
                    )
        for name, stream in self.config.input_streams.items():
            fields = self.schemas.get(stream.schema_).field_names
            if stream.timestamp_field and stream.timestamp_field not in fields:
                raise ConfigError(
                    f"input_streams.{name}.timestamp_field = {stream.timestamp_field!r} is not a "
                    f"field of schema {stream.schema_!r}; fields: {fields}",
                    key=f"input_streams.{name}.timestamp_field",
                    value=stream.timestamp_field,
                    allowed=", ".join(fields),
                )

    # -- lifecycle -----------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The query group's own SparkSession (started on first use)."""
        if self._spark is None:
            parent = self._parent_spark or build_spark_session(
                app_name=f"floodgate-{self.name}",
                master=self.config.spark.master,
                conf=self.config.spark.conf,
            )
            self._spark = parent.newSession()
            self._spark.dataSource.register(KafkaStreamDataSource)
        return self._spark

    def topics(self) -> dict[str, tuple[int, int]]:
        """Every topic the group reads or writes, with ``(partitions, replication)``."""
        topics: dict[str, tuple[int, int]] = {}
        for name, stream in self.config.input_streams.items():
            s = self.config.input_settings(name)
            topics[stream.topic] = (s.partitions, s.replication_factor)
        for name, out in self.config.output_streams.items():
            s = self.config.output_settings(name)
            topics[out.topic] = (s.partitions, s.replication_factor)
        group = self.config.query_group
        topics[self.config.dead_letter_topic] = (
            group.partitions or 1,
            group.replication_factor or 1,
        )
        return topics

    def start(self, *, available_now: bool = False) -> QueryGroup:
        """Create missing topics, then start every query of the group.

        Args:
            available_now: run with ``Trigger.AvailableNow``: process what is in the
                input topics now, then stop.

        Raises:
            ConfigError: a query's SQL does not analyse, or its columns do not fit
                the output schema.
            QueryGroupError: a query failed to start.
        """
        self.state = QueryGroupState.STARTING
        client = dict(self.config.kafka.client)
        ensure_topics(self.bootstrap_servers, self.topics(), client=client)
        spark = self.spark
        self._listener = _ProgressListener(self)
        spark.streams.addListener(self._listener)
        try:
            for name in self.config.queries:
                self._register_inputs(spark, name)
                self._start_query(spark, name, available_now=available_now)
        except BaseException as exc:
            self.state = QueryGroupState.FAILED
            self.failure = exc
            self.stop()
            self.state = QueryGroupState.FAILED
            raise
        self.state = QueryGroupState.EXECUTING
        log.info("query group %s executing %d queries", self.name, len(self._queries))
        return self

    def _register_inputs(self, spark: SparkSession, query: str) -> None:
        """(Re)define the input views for ``query``, which is analysed right after.

        Each query reads its inputs with its own source (Spark cannot share one),
        so each gets views of its own: its source then names the query in
        dead-letter records and reads with a group of its own.
        """
        schemas_json = self.schemas.as_json()
        for name, stream in self.config.input_streams.items():
            settings = self.config.input_settings(name)
            options = {
                "bootstrap.servers": self.bootstrap_servers,
                "topic": stream.topic,
                "stream": name,
                "query": query,
                "schema": stream.schema_,
                "schemas": schemas_json,
                # Offsets are committed by the transactional sinks, per query.
                "group.id": f"{self.config.consumer_group(query)}.reader",
                "commitOffsets": "false",
                "startingOffsets": stream.starting_offsets,
                "deadLetterTopic": self.config.dead_letter_topic,
                "timestampMode": stream.timestamp_mode,
                **({"timestampField": stream.timestamp_field} if stream.timestamp_field else {}),
                **(
                    {"maxRowsPerTrigger": str(settings.max_rows_per_trigger)}
                    if settings.max_rows_per_trigger
                    else {}
                ),
                **{f"kafka.{k}": str(v) for k, v in self.config.kafka.client.items()},
            }
            df = spark.readStream.format(SOURCE_NAME).options(**options).load()
            if stream.watermark:
                df = df.withWatermark("event_time", stream.watermark)
            df.createOrReplaceTempView(name)

    def _start_query(self, spark: SparkSession, name: str, *, available_now: bool) -> None:
        query_config = self.config.queries[name]
        output = self.config.output_streams[query_config.output]
        try:
            df = spark.sql(query_config.sql)
        except Exception as exc:
            raise ConfigError(
                f"queries.{name}.sql does not analyse: {exc}", key=f"queries.{name}.sql"
            ) from exc
        schema = self.schemas.get(output.schema_)
        missing = [f for f in schema.field_names if f not in df.columns]
        if missing:
            raise ConfigError(
                f"queries.{name}: columns {missing} of output schema {output.schema_!r} are not "
                f"produced by the query; it produces {df.columns}",
                key=f"queries.{name}.sql",
                allowed=", ".join(schema.field_names),
            )
        absent_keys = [k for k in output.key if k not in df.columns]
        if absent_keys:
            raise ConfigError(
                f"output_streams.{query_config.output}.key names columns {absent_keys} the query "
                f"{name!r} does not produce; it produces {df.columns}",
                key=f"output_streams.{query_config.output}.key",
                value=output.key,
                allowed=", ".join(df.columns),
            )
        checkpoint = f"{self.config.checkpoint_root.rstrip('/')}/{name}"
        input_topics = [s.topic for s in self.config.input_streams.values()]
        sink = KafkaTransactionalSink(
            query_group=self.name,
            query=name,
            codec=StreamCodec(query_config.output, schema, self.schemas),
            topic=output.topic,
            key_columns=output.key,
            input_topics=input_topics,
            group_id=self.config.consumer_group(name),
            checkpoint_dir=checkpoint,
            bootstrap_servers=self.bootstrap_servers,
            client=self.config.kafka.client,
        )
        writer = (
            df.writeStream.queryName(f"{self.name}.{name}")
            .outputMode(query_config.output_mode)
            .option("checkpointLocation", checkpoint)
            .foreachBatch(sink)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(
                processingTime=f"{self.config.query_group.trigger_interval_ms} milliseconds"
            )
        try:
            query = writer.start()
        except Exception as exc:
            raise QueryGroupError(
                f"failed to start: {exc}", query_group=self.name, query=name
            ) from exc
        running = _RunningQuery(name, query, sink)
        with self._lock:
            self._queries[name] = running
            self._by_id[str(query.id)] = running

    # -- progress ------------------------------------------------------------

    def _on_progress(self, query_id: str, progress: Any) -> None:
        with self._lock:
            running = self._by_id.get(query_id)
            if running is None:
                return
            stats = running.stats
            stats.input_rows += int(progress.numInputRows)
            stats.batches += 1
            stats.last_batch_id = int(progress.batchId)
            stats.last_duration_ms = int(progress.batchDuration)
            stats.input_rows_per_second = float(progress.inputRowsPerSecond or 0.0)
            stats.processed_rows_per_second = float(progress.processedRowsPerSecond or 0.0)
            for op in progress.stateOperators or []:
                stats.dropped_by_watermark += int(op.numRowsDroppedByWatermark or 0)

    def _on_terminated(self, query_id: str, exception: str | None) -> None:
        if exception:
            with self._lock:
                running = self._by_id.get(query_id)
            where = running.name if running else query_id
            log.error("query group %s: query %s failed: %s", self.name, where, exception)
            self.state = QueryGroupState.FAILED

    def stats(self) -> dict[str, QueryStats]:
        """A snapshot of every query's :class:`QueryStats`."""
        with self._lock:
            return {name: QueryStats(**vars(r.stats)) for name, r in self._queries.items()}

    def queries(self) -> dict[str, StreamingQuery]:
        """The group's Spark streaming queries by name."""
        with self._lock:
            return {name: r.query for name, r in self._queries.items()}

    def sinks(self) -> dict[str, KafkaTransactionalSink]:
        """The group's sinks by query name."""
        with self._lock:
            return {name: r.sink for name, r in self._queries.items()}

    def check(self) -> None:
        """Raise the first failure of any query.

        Raises:
            QueryGroupError: a query terminated with an exception.
        """
        for name, query in self.queries().items():
            exc = query.exception()
            if exc is not None:
                self.state = QueryGroupState.FAILED
                raise QueryGroupError(str(exc), query_group=self.name, query=name)

    def process_all_available(self) -> None:
        """Block until every query has processed all input available now.

        Raises:
            QueryGroupError: a query failed meanwhile.
        """
        for name, query in self.queries().items():
            try:
                query.processAllAvailable()
            except Exception as exc:
                self.state = QueryGroupState.FAILED
                raise QueryGroupError(str(exc), query_group=self.name, query=name) from exc
        self._await_listener()

    def _await_listener(self, timeout_s: float = 10.0) -> None:
        """Wait until the listener has seen each query's last progress.

        Listener events reach Python asynchronously (Spark's listener bus); the query's
        ``lastProgress`` is set before the event is posted, so this bounds the lag.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            running = list(self._queries.values())
        for r in running:
            last = r.query.lastProgress
            if last is None:
                continue
            while r.stats.last_batch_id < int(last.batchId) and time.monotonic() < deadline:
                time.sleep(0.02)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until every query has terminated (e.g. AvailableNow finished).

        Returns:
            Whether all terminated within ``timeout_s``.

        Raises:
            QueryGroupError: a query failed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for name, query in self.queries().items():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                done = (
                    query.awaitTermination(math.ceil(remaining))
                    if remaining is not None
                    else query.awaitTermination()
                )
            except Exception as exc:
                self.state = QueryGroupState.FAILED
                raise QueryGroupError(str(exc), query_group=self.name, query=name) from exc
            if done is False:
                return False
        self._await_listener()
        return True

    def stop(self) -> None:
        """Stop every query (the current micro-batch is interrupted, not committed) and
        release the sinks. Safe to call twice."""
        for running in list(self._queries.values()):
            try:
                running.query.stop()
            except Exception:
                log.exception("query group %s: stopping query %s failed", self.name, running.name)
            running.sink.close()
        if self._listener is not None and self._spark is not None:
            try:
                self._spark.streams.removeListener(self._listener)
            except Exception:
                log.debug("listener already removed", exc_info=True)
            self._listener = None
        with self._lock:
            self._queries.clear()
            self._by_id.clear()
        if self.state != QueryGroupState.FAILED:
            self.state = QueryGroupState.STOPPED

    def __enter__(self) -> QueryGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
