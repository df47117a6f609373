"""Run a query group: its continuous Spark SQL queries, in one SparkSession.

A query group (README, "Concepts" and "Configuration") is one config file:
input streams, read with the ``floodgate_kafka`` source and registered as SQL
views (with a watermark on ``event_time`` where configured); Spark SQL queries
over those views; and the output streams each query writes to through a
:class:`~pipeline.spark.sink.KafkaTransactionalSink`. All queries of a group run
together in one SparkSession (a child session of the one given, so temporary
views and listeners of two groups sharing a SparkContext never mix).

States: STARTING, EXECUTING, SLEEPING, HELD, STOPPED, FAILED. SLEEPING and HELD
belong to the bounded output stream queues (README, "Bounded output stream queues:
sleep, retry, hold"; :class:`~pipeline.spark.guard.OutputQueueGuard`): a query whose
micro-batch output does not fit sleeps (SLEEPING), and after
``sleep_on_over_store_retry_count`` sleeps the group is HELD -- every query stops, the
batch uncommitted. :meth:`QueryGroup.release` (CLI, HTTP, or ``auto_release``) starts
them again from their checkpoints, so the held batch is replayed (``on_hold_input =
"retain"``) or skipped with the rest of the input queue (``"discard"``: a held group's
input tuples are discarded, and counted).

:meth:`QueryGroup.serve` publishes the group's metrics and its control endpoint
(``/status``, ``/release``, ``/stop``; :mod:`pipeline.spark.control`) on one port.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

from pipeline.config import QueryGroupConfig
from pipeline.errors import ConfigError, QueryGroupError, QueryGroupHeld, compact_error
from pipeline.kafka.topics import ensure_topics
from pipeline.metrics import QueryGroupMetrics
from pipeline.offsets import local_checkpoint_path, offsets_to_json
from pipeline.queues import QueueAge, QueueProbe, QueueSnapshot, StableOffsetWatch
from pipeline.serde import SchemaRepository, StreamCodec
from pipeline.spark.guard import OutputQueueGuard
from pipeline.spark.late_plan import late_plan
from pipeline.spark.options import SOURCE_NAME
from pipeline.spark.session import build_spark_session, spark_settings
from pipeline.spark.sink import TRANSACTION_TIMEOUT_S, KafkaTransactionalSink
from pipeline.spark.source import KafkaStreamDataSource

log = logging.getLogger(__name__)


class QueryGroupState(enum.StrEnum):
    """States of a query group (README, "Bounded output stream queues: sleep, retry, hold")."""

    STARTING = "STARTING"
    EXECUTING = "EXECUTING"
    SLEEPING = "SLEEPING"
    HELD = "HELD"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


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


class _JsonProgressCallbacks(JStreamingQueryListener):
    """PySpark's Java-side listener callbacks, with each progress event read as one
    JSON string (``QueryProgressEvent.json``, as Spark Connect reads it).

    PySpark's own ``onQueryProgress`` builds the event field by field through py4j:
    some 40 calls back into the JVM per micro-batch, several of which resolve names by
    ``Class.forName`` over every jar of Spark's class path. In the flights demo at
    trigger 0 that was a third of the driver JVM's sampled CPU (JFR, issue 9).
    Started and idle events are not converted at all: the group ignores them.
    """

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        pass


class _ProgressListener(StreamingQueryListener):
    """Copies query progress into :class:`QueryStats`; never blocks (Spark calls a
    StreamingQueryListener on its listener bus thread, which a slow callback stalls)."""

    def __init__(self, group: QueryGroup) -> None:
        self._group = group

    @property
    def _jlistener(self) -> Any:
        """The JVM listener ``StreamingQueryManager.addListener`` registers: PySpark's
        wrapper around :class:`_JsonProgressCallbacks`."""
        if not hasattr(self, "_jlistenerobj"):
            jvm: Any = self._group.spark._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(
                _JsonProgressCallbacks(self)
            )
        return self._jlistenerobj

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        self._group._on_progress(str(progress.id), progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self._group._on_terminated(str(event.id), str(event.runId), event.exception)


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
        registry: where the group's metrics go (:class:`~pipeline.metrics.QueryGroupMetrics`);
            default: a registry of its own, served by :meth:`serve`.

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
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.bootstrap_servers = bootstrap_servers
        self.schemas = schemas or SchemaRepository.load(config.schema_dir)
        self.registry = registry or CollectorRegistry()
        self.metrics = QueryGroupMetrics(self.registry)
        self._parent_spark = spark
        self._spark: SparkSession | None = None
        self._queries: dict[str, _RunningQuery] = {}
        self._by_id: dict[str, _RunningQuery] = {}
        self._listener: _ProgressListener | None = None
        self._lock = threading.Lock()
        #: One queue sample at a time: the monitor thread's and a caller's would
        #: otherwise interleave, and a length from one snapshot stand beside a lag
        #: from an older one (length 0, lag 11.7 s, seen in CI).
        self._sample_lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._state = QueryGroupState.STOPPED
        self.state = QueryGroupState.STOPPED
        self.failure: BaseException | None = None
        #: Why the group is held (``None`` unless HELD), and since when (epoch seconds).
        self.held: QueryGroupHeld | None = None
        self.held_since: float | None = None
        #: Input tuples skipped on release, per input stream (``on_hold_input = "discard"``).
        self.discarded: dict[str, int] = {}
        #: Set by :meth:`request_stop` (``POST /stop``); whoever runs the group exits.
        self.stop_requested = threading.Event()
        self._interrupted = threading.Event()
        self._stopping = False
        self._sleeping: set[tuple[str, str]] = set()
        self._guards: dict[str, OutputQueueGuard] = {}
        self._probes: dict[str, QueueProbe] = {}
        self._input_probes: dict[str, QueueProbe] = {}
        #: ``(output?, stream)`` -> the reader of its oldest tuple's age.
        self._ages: dict[tuple[bool, str], QueueAge] = {}
        self._stable_watches: dict[str, StableOffsetWatch] = {}
        self._hanging_reported: set[str] = set()
        self._output_queues: dict[str, QueueSnapshot] = {}
        self._discard_before: dict[str, dict[int, int]] = {}
        #: Spark run ids of the query runs a hold ended: their exceptions and
        #: termination events (which may arrive after the release) are no failure.
        self._retired_runs: set[str] = set()
        self._available_now = False
        self._holder: threading.Thread | None = None
        self._monitor: threading.Thread | None = None
        self._monitor_stop = threading.Event()
        self._server: Any = None
        self._stop_lock = threading.Lock()
        self._check_schemas()

    @property
    def state(self) -> QueryGroupState:
        """The group's state (also the ``floodgate_query_group_state`` gauges)."""
        return self._state

    @state.setter
    def state(self, value: QueryGroupState) -> None:
        self._state = value
        self.metrics.set_state(self.name, value.value, [s.value for s in QueryGroupState])

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
            self._spark.conf.set(
                "spark.sql.streaming.noDataMicroBatches.enabled",
                str(self.config.query_group.no_data_micro_batches).lower(),
            )
        return self._spark

    def topics(self) -> dict[str, tuple[int, int | None]]:
        """Every topic the group reads or writes (:meth:`QueryGroupConfig.topics`)."""
        return self.config.topics()

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
        self._stopping = False
        self._interrupted.clear()
        self._available_now = available_now
        client = dict(self.config.kafka.client)
        ensure_topics(self.bootstrap_servers, self.topics(), client=client)
        self._make_guards()
        self._make_input_probes()
        self._zero_query_series()
        spark = self.spark
        self._listener = _ProgressListener(self)
        spark.streams.addListener(self._listener)
        try:
            self._start_queries()
        except BaseException as exc:
            self.state = QueryGroupState.FAILED
            self.failure = exc
            self.stop()
            self.state = QueryGroupState.FAILED
            raise
        self.state = QueryGroupState.EXECUTING
        log.info("query group %s executing %d queries", self.name, len(self._queries))
        self._monitor_stop.clear()
        self._monitor = threading.Thread(
            target=self._monitor_loop, name=f"floodgate-{self.name}-monitor", daemon=True
        )
        self._monitor.start()
        return self

    def _start_queries(self) -> None:
        spark = self.spark
        for name in self.config.queries:
            self._register_inputs(spark, name)
            self._start_query(spark, name, available_now=self._available_now)

    def _make_guards(self) -> None:
        """One :class:`OutputQueueGuard` per output stream, shared by its writers."""
        group = self.config.query_group
        for name in self.config.output_streams:
            if name in self._guards:
                continue
            settings = self.config.output_settings(name)
            probe = QueueProbe.for_output_stream(
                self.config, name, bootstrap_servers=self.bootstrap_servers
            )
            self._guards[name] = OutputQueueGuard(
                query_group=self.name,
                stream=name,
                reader=probe if group.output_queue_check else None,
                max_queue_size=settings.max_queue_size,
                partitions=len(probe.partitions()),
                sleep_ms=group.sleep_on_over_store_ms,
                retry_count=group.sleep_on_over_store_retry_count,
                interrupted=self._interrupted,
                listener=self,
            )
            self._probes[name] = probe
            self.metrics.output_queue_max_size.labels(self.name, name).set(settings.max_queue_size)
            # Series exist at 0 before the first sleep or hold (no "no data" panels).
            for family in (
                self.metrics.sleeps,
                self.metrics.holds,
                self.metrics.output_queue_check,
            ):
                family.labels(self.name, name)

    def _make_input_probes(self) -> None:
        """One :class:`QueueProbe` per input stream, for the input queue gauges."""
        for name in self.config.input_streams:
            if name in self._input_probes or not self.config.readers(name):
                continue
            self._input_probes[name] = QueueProbe.for_input_stream(
                self.config, name, bootstrap_servers=self.bootstrap_servers
            )
            self.metrics.input_queue_max_size.labels(self.name, name).set(
                self.config.input_settings(name).max_queue_size
            )
            self.metrics.discarded.labels(self.name, name)

    def _zero_query_series(self) -> None:
        """Every query's series exist at 0 before its first micro-batch."""
        for query in self.config.queries:
            for family in (
                self.metrics.batch_duration,
                self.metrics.input_rows,
                self.metrics.input_rows_per_second,
                self.metrics.processed_rows_per_second,
            ):
                family.labels(self.name, query)

    def _age(self, stream: str, *, output: bool) -> QueueAge:
        """The :class:`QueueAge` of an input or output stream queue (made on first use)."""
        age = self._ages.get((output, stream))
        if age is None:
            age = QueueAge.for_stream(
                self.config, stream, output=output, bootstrap_servers=self.bootstrap_servers
            )
            self._ages[(output, stream)] = age
        return age

    def sample_queues(self) -> None:
        """Read every input and output stream queue once: length and lag gauges. The
        monitor thread calls it every ``queue_metrics_interval_ms``.

        Raises:
            BrokerError: the broker did not answer.
        """
        with self._sample_lock:
            self._sample_queues()

    def _sample_queues(self) -> None:
        for name, probe in list(self._input_probes.items()):
            snapshot = probe.snapshot()
            self.metrics.input_queue_length.labels(self.name, name).set(snapshot.length)
            lag = self._age(name, output=False).lag_seconds(snapshot)
            self.metrics.input_queue_lag.labels(self.name, name).set(lag)
        for name, probe in list(self._probes.items()):
            snapshot = probe.snapshot()
            self.on_output_queue(name, snapshot)
            lag = self._age(name, output=True).lag_seconds(snapshot)
            self.metrics.output_queue_lag.labels(self.name, name).set(lag)
            stable = probe.last_stable_offsets()
            highs = {p: q.high for p, q in snapshot.partitions.items()}
            watch = self._stable_watches.setdefault(name, StableOffsetWatch())
            unstable = watch.observe(stable, highs, time.monotonic())
            self.metrics.output_unstable.labels(self.name, name).set(unstable)
            if unstable <= 2 * TRANSACTION_TIMEOUT_S:
                self._hanging_reported.discard(name)
            elif name not in self._hanging_reported:
                self._hanging_reported.add(name)  # once per hang
                log.error(
                    "FG-QG-007 query group %s: output stream %s has a hanging transaction: "
                    "its last stable offset has not moved for %.0f s (transaction timeout "
                    "%.0f s); read_committed readers are blocked until it is aborted",
                    self.name,
                    name,
                    unstable,
                    TRANSACTION_TIMEOUT_S,
                )

    def _register_inputs(self, spark: SparkSession, query: str) -> None:
        """(Re)define the input views for ``query``, which is analysed right after.

        Each query reads its inputs with its own source (Spark cannot share one),
        so each gets views of its own: its source then names the query in
        dead-letter records and reads with a group of its own.
        """
        schemas_json = self.schemas.as_json()
        late = self._late_window(spark, query)
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
            # One task per core, not per Kafka partition: a Python data source task
            # costs ~0.1-0.2 s of Spark's time however little it reads (group_ranges).
            options["maxTasks"] = str(spark.sparkContext.defaultParallelism)
            if self.config.query_group.sweep_catalog_url:
                options["sweepCatalog"] = self.config.query_group.sweep_catalog_url
            if stream.key:
                options["keyRequired"] = "true"
            if stream.timestamp_mode == "data_source":
                options["maxEventTimeAheadMs"] = str(stream.max_event_time_ahead_ms)
            if late is not None and late[0] == name:
                # Tuples Spark's aggregation would drop as late go to the dead-letter
                # topic instead (reason "late"): same predicate, same watermark.
                options["watermarkCheckpoint"], options["lateWindow"] = late[1:]
            if name in self._discard_before:
                options["discardBefore"] = json.dumps(
                    offsets_to_json(stream.topic, self._discard_before[name])
                )
            df = spark.readStream.format(SOURCE_NAME).options(**options).load()
            if stream.watermark:
                df = df.withWatermark("event_time", stream.watermark)
            df.createOrReplaceTempView(name)

    def _late_window(self, spark: SparkSession, query: str) -> tuple[str, str, str] | None:
        """``(stream, watermarkCheckpoint, lateWindow)``: the source options for the one
        input stream ``query`` reads when the query aggregates it over an event-time
        window (the only operator that drops late tuples the source can foresee:
        :func:`late_plan`) and the stream has a watermark; else ``None``. Logged,
        ``FG-QG-006``, when the query has a window the source cannot follow or a
        checkpoint that is not local: late tuples of that query are then dropped by
        Spark and only counted."""
        query_config = self.config.queries[query]
        if query_config.output_mode == "complete":
            return None  # nothing is dropped: complete mode keeps all state
        parser = spark._jsparkSession.sessionState().sqlParser()
        plan = late_plan(parser.parsePlan(query_config.sql).toJSON())
        streams_read = [s for s in self.config.input_streams if s.lower() in plan.relations]
        if len(streams_read) != 1 or not self.config.input_streams[streams_read[0]].watermark:
            return None  # no stream, several, or no watermark: nothing to foresee
        stream = streams_read[0]
        root = self.config.checkpoint_root.rstrip("/")
        local = local_checkpoint_path(root)
        why_not = plan.why_not
        if why_not is None and plan.window is not None and local is None:
            why_not = f"checkpoint_dir {root} is not local (the source reads its offset log)"
        if why_not is not None:
            log.warning(
                "FG-QG-006 query group %s, query %s: late tuples of stream %s are dropped by "
                "Spark, not dead-lettered: %s",
                self.name,
                query,
                stream,
                why_not,
            )
            return None
        if plan.window is None:
            return None
        assert local is not None  # a window with a non-local root was refused above
        return stream, os.path.abspath(f"{local}/{query}"), plan.window.option()

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
        with self._lock:
            previous = self._queries.get(name)
        sink = (
            previous.sink
            if previous is not None
            else KafkaTransactionalSink(
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
                guard=self._guards[query_config.output],
            )
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
        running = _RunningQuery(
            name, query, sink, previous.stats if previous is not None else QueryStats()
        )
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
            name = running.name
        self.metrics.batch_duration.labels(self.name, name).observe(
            int(progress.batchDuration) / 1000.0
        )
        self.metrics.input_rows.labels(self.name, name).inc(int(progress.numInputRows))
        self.metrics.input_rows_per_second.labels(self.name, name).set(
            float(progress.inputRowsPerSecond or 0.0)
        )
        self.metrics.processed_rows_per_second.labels(self.name, name).set(
            float(progress.processedRowsPerSecond or 0.0)
        )

    def _on_terminated(self, query_id: str, run_id: str, exception: str | None) -> None:
        if run_id in self._retired_runs:
            return  # stopped by a hold; its end may be reported after the release
        if exception and not self._expected_termination():
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
        """Raise the first failure of any query (a held or stopping group is no failure).

        Raises:
            QueryGroupError: a query terminated with an exception.
        """
        if self._expected_termination():
            return
        for name, query in self.queries().items():
            if str(query.runId) in self._retired_runs:
                continue  # ended by a hold, and not restarted yet: no failure
            exc = query.exception()
            if exc is not None and not self._expected_termination():
                self.state = QueryGroupState.FAILED
                raise self._query_failure(name, exc)

    def _query_failure(self, name: str, exc: BaseException) -> QueryGroupError:
        """The error a failed query ends the group with: the query's own, as its
        ``foreachBatch`` function raised it, else Spark's, without Java stacks
        (:func:`~pipeline.errors.compact_error`); the full text is in the log."""
        with self._lock:
            running = self._queries.get(name)
        own = running.sink.last_error if running is not None else None
        if isinstance(own, QueryGroupError):
            return own
        log.error("query group %s query %s failed: %s", self.name, name, exc)
        return QueryGroupError(
            compact_error(own if own is not None else exc), query_group=self.name, query=name
        )

    def _expected_termination(self) -> bool:
        """Queries end with an exception on purpose while the group is held or stopping."""
        return self._stopping or self.state == QueryGroupState.HELD

    def process_all_available(self) -> None:
        """Block until every query has processed all input available now.

        Raises:
            QueryGroupHeld: the group is (or became) held meanwhile.
            QueryGroupError: a query failed meanwhile.
        """
        for name, query in self.queries().items():
            try:
                query.processAllAvailable()
            except Exception as exc:
                self._raise_held()
                self.state = QueryGroupState.FAILED
                raise self._query_failure(name, exc) from exc
        self._raise_held()
        self._await_listener()

    def _raise_held(self) -> None:
        if self._holder is not None:
            self._holder.join()
        held = self.held
        if self.state == QueryGroupState.HELD and held is not None:
            raise QueryGroupHeld(
                query_group=self.name,
                query=held.query,
                stream=held.stream,
                batch_id=held.batch_id,
                required=held.required,
                free=held.free,
                max_size=held.max_size,
                sleeps=held.sleeps,
            )

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
            QueryGroupHeld: the group is held (its queries were stopped by the hold).
            QueryGroupError: a query failed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for name, query in self.queries().items():
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                if remaining is None:
                    done = query.awaitTermination()
                elif remaining >= 0.001:
                    # Seconds, int or float (PySpark's own check; its hint says int), at
                    # least 1 ms: PySpark refuses 0 (VALUE_NOT_POSITIVE) and so does
                    # the JVM's awaitTermination(ms) a timeout it rounds down to 0 ms.
                    done = query.awaitTermination(remaining)  # type: ignore[arg-type]
                elif query.isActive:
                    done = False
                else:
                    done = query.awaitTermination()  # ended: returns at once, or raises
            except Exception as exc:
                self._raise_held()
                self.state = QueryGroupState.FAILED
                raise self._query_failure(name, exc) from exc
            if done is False:
                return False
        self._raise_held()
        self._await_listener()
        return True

    # -- output stream queues: sleep, hold, release ---------------------------

    def on_output_queue(
        self, stream: str, snapshot: QueueSnapshot, check_s: float | None = None
    ) -> None:
        """:class:`~pipeline.spark.guard.GuardListener`: a fresh read of an output queue."""
        self._output_queues[stream] = snapshot
        self.metrics.output_queue_length.labels(self.name, stream).set(snapshot.length)
        if check_s is not None:
            self.metrics.output_queue_check.labels(self.name, stream).observe(check_s)

    def on_sleep(self, query: str, stream: str, retry: int, sleep_s: float) -> None:
        """:class:`~pipeline.spark.guard.GuardListener`: a query sleeps on a full output queue."""
        self.metrics.sleeps.labels(self.name, stream).inc()
        with self._state_lock:
            self._sleeping.add((query, stream))
            if self.state == QueryGroupState.EXECUTING:
                self.state = QueryGroupState.SLEEPING

    def on_awake(self, query: str, stream: str) -> None:
        """:class:`~pipeline.spark.guard.GuardListener`: a sleeping query found room."""
        with self._state_lock:
            self._sleeping.discard((query, stream))
            if self.state == QueryGroupState.SLEEPING and not self._sleeping:
                self.state = QueryGroupState.EXECUTING

    def on_hold(self, held: QueryGroupHeld) -> None:
        """:class:`~pipeline.spark.guard.GuardListener`: hold the group.

        Called in the holding query's batch thread just before it raises: the group
        turns HELD, wakes every sleeping query (they give up unwritten), and a
        thread of its own stops every query -- a query cannot stop itself.
        """
        with self._state_lock:
            if self.state == QueryGroupState.HELD or self._stopping:
                return
            self.held = held
            self.held_since = time.time()
            self._sleeping.clear()
            with self._lock:
                self._retired_runs.update(str(r.query.runId) for r in self._queries.values())
            self.state = QueryGroupState.HELD
            self._interrupted.set()
            self.metrics.holds.labels(self.name, held.stream).inc()
            self._holder = threading.Thread(
                target=self._stop_queries, name=f"floodgate-{self.name}-hold", daemon=True
            )
            self._holder.start()

    def _stop_queries(self) -> None:
        for running in list(self._queries.values()):
            try:
                running.query.stop()
            except Exception:
                log.debug("query %s: stop on hold", running.name, exc_info=True)

    def release(self) -> None:
        """Release a HELD query group: start its queries again from their checkpoints.

        With ``on_hold_input = "retain"`` the held micro-batch is replayed first (its
        offsets are in Spark's offset log, its output is not in Kafka); with
        ``"discard"``, every query skips to the end of its input as it is now, and
        the skipped tuples are counted (``floodgate_query_group_discarded_tuples_total``,
        log code ``FG-QG-004``).

        Raises:
            QueryGroupError: the group is not HELD (the message names its state).
        """
        self._require_held()
        # Wait for the hold to finish stopping the queries, outside the state lock:
        # a stopping query's batch thread may still report to the group.
        holder = self._holder
        if holder is not None:
            holder.join()
        for running in list(self._queries.values()):
            while running.query.isActive:
                time.sleep(0.05)
        with self._state_lock:
            self._require_held()
            if self.config.query_group.on_hold_input == "discard":
                self._discard_input()
            held = self.held
            self.state = QueryGroupState.STARTING
            self._interrupted.clear()
            self.held = None
            self.held_since = None
            log.info(
                "FG-QG-003 query group %s released (held on output stream %s, micro-batch %s)",
                self.name,
                held.stream if held else "?",
                held.batch_id if held else "?",
            )
            try:
                self._start_queries()
            except BaseException as exc:
                self.state = QueryGroupState.FAILED
                self.failure = exc
                raise
            self.state = QueryGroupState.EXECUTING

    def _require_held(self) -> None:
        if self.state != QueryGroupState.HELD:
            raise QueryGroupError(
                f"cannot release: the query group is {self.state.value}, not HELD",
                query_group=self.name,
            )

    def _discard_input(self) -> None:
        """Skip each input queue to its end now, counting what is skipped (``on_hold_input =
        "discard"``: a held group's input tuples are discarded on release; README,
        "Bounded output stream queues: sleep, retry, hold")."""
        for name in self.config.input_streams:
            if not self.config.readers(name):
                continue
            probe = QueueProbe.for_input_stream(
                self.config, name, bootstrap_servers=self.bootstrap_servers
            )
            snapshot = probe.snapshot()
            skipped = snapshot.length
            before = self._discard_before.setdefault(name, {})
            for p, queue in snapshot.partitions.items():
                before[p] = max(before.get(p, 0), queue.high)
            self.discarded[name] = self.discarded.get(name, 0) + skipped
            self.metrics.discarded.labels(self.name, name).inc(skipped)
            log.warning(
                "FG-QG-004 query group %s: discarded %d input tuples of stream %s on release "
                "(on_hold_input = discard); queries go on from offsets %s",
                self.name,
                skipped,
                name,
                dict(sorted(before.items())),
            )

    def _resume_ready(self) -> bool:
        """Whether every output queue has ``resume_free_queue_size_threshold`` percent
        free, and the held stream room for the held batch (``auto_release``)."""
        held = self.held
        for name, probe in self._probes.items():
            snapshot = probe.snapshot()
            self.on_output_queue(name, snapshot)
            threshold = self.config.output_settings(name).resume_free_queue_size_threshold
            if snapshot.free_queue_size * 100 < threshold * snapshot.max_queue_size:
                return False
            if (
                held is not None
                and held.stream == name
                and snapshot.free_queue_size < held.required
            ):
                return False
        return True

    def _monitor_loop(self) -> None:
        """Refresh output queue and driver heap gauges; release a held group when
        ``auto_release``."""
        group = self.config.query_group
        interval = min(1.0, max(0.2, group.sleep_on_over_store_ms / 1000.0))
        queues_every = group.queue_metrics_interval_ms / 1000.0
        queues_due = 0.0
        while not self._monitor_stop.wait(interval):
            try:
                self._sample_heap()
            except Exception:
                log.debug("query group %s: driver heap not read", self.name, exc_info=True)
            sampled = time.monotonic() >= queues_due
            if sampled:
                queues_due = time.monotonic() + queues_every
                try:
                    self.sample_queues()  # output queues included
                except Exception:
                    log.warning("query group %s: queues not read", self.name, exc_info=True)
            try:
                if self.state == QueryGroupState.HELD and group.auto_release:
                    if self._resume_ready():
                        log.info("query group %s: output queues drained: auto release", self.name)
                        self.release()
                elif not sampled and self.state not in (
                    QueryGroupState.HELD,
                    QueryGroupState.STARTING,
                ):
                    for name, probe in self._probes.items():
                        self.on_output_queue(name, probe.snapshot())
            except Exception:
                log.warning("query group %s: monitor pass failed", self.name, exc_info=True)

    def _sample_heap(self) -> None:
        jvm = self.spark._jvm
        assert jvm is not None  # a classic (not Connect) session
        runtime = jvm.java.lang.Runtime.getRuntime()
        total, free, most = runtime.totalMemory(), runtime.freeMemory(), runtime.maxMemory()
        self.metrics.jvm_heap_used.labels(self.name).set(total - free)
        self.metrics.jvm_heap_max.labels(self.name).set(most)

    # -- control ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The group as ``GET /status`` shows it: state, hold, queries, output queues.

        Returns:
            A JSON-ready dict: ``query_group``, ``state``, ``held`` (``None`` or the
            stream, micro-batch, required and free space, sleeps, since when),
            ``queries`` (per query: active, batches, input rows, last batch and its
            duration in ms, rates in tuples/s, tuples written), ``output_queues``
            (per stream: length, max and free queue size at the last read),
            ``discarded`` (per input stream), ``on_hold_input``, ``auto_release``,
            ``spark`` (master, application id, driver host, executors' block managers
            (the driver's included), settings chosen with their source).
        """
        held = self.held
        with self._lock:
            queries = {
                name: {
                    "active": bool(r.query.isActive),
                    "batches": r.stats.batches,
                    "input_rows": r.stats.input_rows,
                    "last_batch_id": r.stats.last_batch_id,
                    "last_duration_ms": r.stats.last_duration_ms,
                    "input_rows_per_second": r.stats.input_rows_per_second,
                    "processed_rows_per_second": r.stats.processed_rows_per_second,
                    "tuples_written": r.sink.tuples_written,
                }
                for name, r in self._queries.items()
            }
        return {
            "query_group": self.name,
            "state": self.state.value,
            "held": None
            if held is None
            else {
                "query": held.query,
                "stream": held.stream,
                "batch_id": held.batch_id,
                "required": held.required,
                "free_queue_size": held.free,
                "max_queue_size": held.max_size,
                "sleeps": held.sleeps,
                "since": self.held_since,
            },
            "queries": queries,
            "output_queues": {
                name: {
                    "length": snap.length,
                    "max_queue_size": snap.max_queue_size,
                    "free_queue_size": snap.free_queue_size,
                }
                for name, snap in sorted(self._output_queues.items())
            },
            "discarded": dict(self.discarded),
            "on_hold_input": self.config.query_group.on_hold_input,
            "auto_release": self.config.query_group.auto_release,
            "spark": self._spark_status(),
        }

    def _spark_status(self) -> dict[str, Any] | None:
        """Where the group's tasks run: master, application id, the block managers of
        the driver and executors (Spark's public ``SparkStatusTracker``), and the
        settings :func:`build_spark_session` chose with their source."""
        if self._spark is None:
            return None
        sc = self._spark.sparkContext
        try:
            infos = sc._jsc.sc().statusTracker().getExecutorInfos()
            executors = [
                {"host": i.host(), "port": i.port(), "running_tasks": i.numRunningTasks()}
                for i in infos
            ]
        except Exception:  # the context is stopping: no executors to tell
            executors = []
        return {
            "master": sc.master,
            "application_id": sc.applicationId,
            "driver_host": sc.getConf().get("spark.driver.host"),
            "executors": executors,
            "settings": spark_settings(),
        }

    def request_stop(self) -> None:
        """Stop the group from another thread (``POST /stop``); sets :attr:`stop_requested`."""
        self.stop_requested.set()
        threading.Thread(target=self.stop, name=f"floodgate-{self.name}-stop", daemon=True).start()

    def serve(self, *, host: str | None = None, port: int | None = None) -> str:
        """Serve ``/metrics``, ``/status``, ``/release`` and ``/stop``
        (:mod:`pipeline.spark.control`) and write the control file
        ``<control_dir>/<name>.json``. ``/release`` and ``/stop`` need the control token
        (``FLOODGATE_CONTROL_TOKEN``, else a random one written to
        ``<control_dir>/<name>.token``, mode 0600).

        Args:
            host / port: default ``[query_group] metrics_host`` / ``metrics_port``
                (port 0: a free one).

        Returns:
            The endpoint's base URL, ``http://host:port``.

        Raises:
            ConfigError: ``FLOODGATE_CONTROL_TOKEN`` is set but empty or unusable.
            OSError: the port cannot be bound.
        """
        from pipeline.spark.control import ControlServer

        group = self.config.query_group
        if self._server is None:
            self._server = ControlServer(
                self,
                host=group.metrics_host if host is None else host,
                port=group.metrics_port if port is None else port,
                control_dir=group.control_dir,
            )
            self._server.start()
        return str(self._server.url)

    def stop(self) -> None:
        """Stop every query (the current micro-batch is interrupted, not committed) and
        release the sinks and the endpoint. Safe to call twice, and from two threads."""
        with self._stop_lock:
            self._stop()

    def _stop(self) -> None:
        self._stopping = True
        self._interrupted.set()
        self._monitor_stop.set()
        if self._holder is not None:
            self._holder.join()
        for running in list(self._queries.values()):
            try:
                running.query.stop()
            except Exception:
                log.exception("query group %s: stopping query %s failed", self.name, running.name)
            running.sink.close()
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=10)
        if self._listener is not None and self._spark is not None:
            try:
                self._spark.streams.removeListener(self._listener)
            except Exception:
                log.debug("listener already removed", exc_info=True)
            self._listener = None
        with self._lock:
            self._queries.clear()
            self._by_id.clear()
        # Drop the output queue probes (their admin clients would keep reconnecting to a
        # broker that is gone); a later start() makes new ones.
        for guard in self._guards.values():
            guard.reader = None
        for probe in [*self._probes.values(), *self._input_probes.values()]:
            probe.close()
        for age in self._ages.values():
            age.close()
        self._guards.clear()
        self._probes.clear()
        self._input_probes.clear()
        self._ages.clear()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self.state != QueryGroupState.FAILED:
            self.state = QueryGroupState.STOPPED

    def __enter__(self) -> QueryGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
