"""Run a query group: its continuous Spark SQL queries, in one SparkSession.

A query group (docs/architecture.md, "Terms", and docs/reference/configuration.md)
is one config file: input streams, read with the ``floodgate_kafka`` source and registered as SQL
views (with a watermark on ``event_time`` where configured); Spark SQL queries
over those views; and the output streams each query writes to through the JVM sink
(``floodgate_kafka``, :mod:`pipeline.spark.sink`). All queries of a group run
together in one SparkSession (a child session of the one given, so temporary
views and listeners of two groups sharing a SparkContext never mix).

States: STARTING, EXECUTING, SLEEPING, HELD, STOPPED, FAILED. SLEEPING and HELD
belong to the bounded output stream queues (docs/architecture.md, "The hold";
:mod:`pipeline.spark.sink` and :class:`~pipeline.spark.hold.Hold`): a query whose
micro-batch output does not fit sleeps (SLEEPING: its write tasks sleep), and after
``sleep_on_over_store_retry_count`` sleeps the group is HELD -- every query stops, the
batch uncommitted. The group's :class:`~pipeline.spark.hold.Hold` (``group.hold``) owns
all of that; its ``release`` (CLI, HTTP, or ``auto_release``) starts them again
from their checkpoints, so the held batch is replayed (``on_hold_input =
"retain"``) or skipped with the rest of the input queue (``"discard"``: a held group's
input tuples are discarded, and counted).

:meth:`QueryGroup.serve` publishes the group's metrics and its control endpoint
(``/status``, ``/release``, ``/stop``; :mod:`pipeline.spark.control`) on one port.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.config import QueryGroupConfig
from pipeline.errors import (
    NO_SPACE,
    CheckpointDiskFullError,
    ConfigError,
    QueryGroupError,
    compact_error,
)
from pipeline.failpoints import arm_jvm
from pipeline.kafka.retries import BROKER_WAIT_S
from pipeline.kafka.topics import ensure_topics
from pipeline.metrics import QueryGroupMetrics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark import real_time
from pipeline.spark.hold import Hold
from pipeline.spark.inputs import register_inputs
from pipeline.spark.progress import ProgressListener, QueryStats
from pipeline.spark.queue_gauges import QueueGauges
from pipeline.spark.session import build_spark_session
from pipeline.spark.sink import SINK_NAME, OutputSink, held_from, oversized_from, sink_options
from pipeline.spark.states import QueryGroupState
from pipeline.spark.status import QueryStatus, group_status

log = logging.getLogger(__name__)


def free_bytes(location: str) -> int | None:
    """Bytes an unprivileged writer may still write on the file system of ``location``
    (a local path or a ``file:`` URI; ``statvfs`` of its nearest existing folder),
    ``None`` for another scheme (``hdfs://``, ``s3a://``) or when it cannot be read."""
    if location.startswith("file:"):
        location = "/" + location.removeprefix("file:").lstrip("/")
    elif "://" in location:
        return None
    path = os.path.abspath(location)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


@dataclass
class _RunningQuery:
    name: str
    query: StreamingQuery
    sink: OutputSink
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
        self._listener: ProgressListener | None = None
        self._lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._state = QueryGroupState.STOPPED
        self.state = QueryGroupState.STOPPED
        self.failure: BaseException | None = None
        #: The group's sleeps, hold and release.
        self.hold = Hold(self, self._state_lock)
        #: The gauges of its input and output stream queues.
        self.gauges = QueueGauges(config, bootstrap_servers=bootstrap_servers, metrics=self.metrics)
        #: Set by :meth:`request_stop` (``POST /stop``); whoever runs the group exits.
        self.stop_requested = threading.Event()
        self._stopping = False
        self._available_now = False
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

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` has begun."""
        return self._stopping

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
                allow_unauthenticated=self.config.query_group.allow_unauthenticated_spark,
            )
            self._spark = parent.newSession()
            self._spark.conf.set(
                "spark.sql.streaming.noDataMicroBatches.enabled",
                str(self.config.query_group.no_data_micro_batches).lower(),
            )
            if self.config.query_group.real_time:
                for key, value in real_time.session_settings(self.config).items():
                    self._spark.conf.set(key, value)
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
        self._available_now = available_now
        if self.config.query_group.real_time and not available_now:
            try:
                real_time.check_real_time(self.config, self.spark)
            except ConfigError:
                self.state = QueryGroupState.FAILED
                raise
        client = dict(self.config.kafka.client)
        # A driver started while its broker restarts waits for it (FG-BROKER-002).
        ensure_topics(self.bootstrap_servers, self.topics(), client=client, wait_s=BROKER_WAIT_S)
        self._add_outputs()
        self.gauges.add_inputs()
        self._zero_query_series()
        # The bases of the processed and dead-letter counters are read before any query
        # runs, in a thread beside the first query's input views (the one waits on the
        # broker, the other on Spark's analysis): a start takes the longer of the two.
        bases = threading.Thread(
            target=self._sample_bases, name=f"floodgate-{self.name}-bases", daemon=True
        )
        bases.start()
        spark = self.spark
        self._listener = ProgressListener(
            spark, on_progress=self._on_progress, on_terminated=self._on_terminated
        )
        spark.streams.addListener(self._listener)
        try:
            self._start_queries(before_first=bases.join)
        except BaseException as exc:
            bases.join()  # done with the broker's clients before stop() closes them
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

    def running_queries(self) -> list[StreamingQuery]:
        """The group's Spark streaming queries as they run now."""
        with self._lock:
            return [r.query for r in self._queries.values()]

    def start_queries(self) -> None:
        """Start every query again from its checkpoint (after a release).

        Raises:
            QueryGroupError: a query failed to start; the group is FAILED.
        """
        try:
            self._start_queries()
        except BaseException as exc:
            self.state = QueryGroupState.FAILED
            self.failure = exc
            raise

    def _sample_bases(self) -> None:
        """:meth:`sample_queues` at start; a broker that does not answer is logged (the
        counters then start from the first reading of the monitor)."""
        try:
            self.sample_queues()
        except Exception:
            log.warning("query group %s: queues not read at start", self.name, exc_info=True)

    def _start_queries(self, before_first: Callable[[], object] | None = None) -> None:
        """Define each query's input views and start it, in the config's order;
        ``before_first`` is called before the first query starts."""
        spark = self.spark
        arm_jvm(spark._jvm)  # a crash test's failpoint, into the driver's JVM
        for name in self.config.queries:
            register_inputs(
                spark,
                self.config,
                name,
                bootstrap_servers=self.bootstrap_servers,
                schemas=self.schemas,
                discard_before=self.hold.discard_before,
                pruning_failures=self.metrics.pruning_failures,
            )
            if before_first is not None:
                before_first()
                before_first = None
            self._start_query(spark, name, available_now=self._available_now)

    def _add_outputs(self) -> None:
        """Read each output stream queue in the group's gauges; every series of its
        sleeps and holds exists at 0 before the first (no "no data" panels)."""
        for name in self.config.output_streams:
            self.gauges.add_output(name)
            for family in (
                self.metrics.sleeps,
                self.metrics.holds,
                self.metrics.output_queue_check,
            ):
                family.labels(self.name, name)

    def _zero_query_series(self) -> None:
        """Every query's series exist at 0 before its first micro-batch."""
        for query in self.config.queries:
            for family in (
                self.metrics.batch_duration,
                self.metrics.input_tuples,
            ):
                family.labels(self.name, query)

    def sample_queues(self) -> None:
        """Read every input and output stream queue once: length and lag gauges. The
        monitor thread calls it every ``queue_metrics_interval_ms``.

        Raises:
            BrokerError: the broker did not answer.
        """
        self.gauges.sample()

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
        checkpoint = self.config.checkpoint(name)
        with self._lock:
            previous = self._queries.get(name)
        if previous is not None:
            sink = previous.sink
            sink.new_run()
        else:
            sink = OutputSink(
                sink_options(
                    self.config,
                    name,
                    bootstrap_servers=self.bootstrap_servers,
                    schemas=self.schemas,
                    checkpoint=checkpoint,
                    real_time=self.config.query_group.real_time and not available_now,
                )
            )
        writer = (
            df.writeStream.queryName(f"{self.name}.{name}")
            .outputMode(query_config.output_mode)
            .format(SINK_NAME)
            .options(**sink.options.to_options())
        )
        group = self.config.query_group
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif group.real_time:
            # Spark 4.3 runs a stateless real-time query with asynchronous progress
            # tracking unless told not to, and only for its own sinks; the sink commits a
            # batch's input offsets from the offset log once the batch is written.
            writer = writer.option("asyncProgressTrackingEnabled", "false").trigger(
                # pyspark 4.3's overloads of trigger() do not name realTime yet
                realTime=f"{group.real_time_checkpoint_interval_ms} milliseconds"  # type: ignore[call-overload]
            )
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
        if group.real_time and not available_now:
            real_time.check_plan(
                spark,
                query,
                query_group=self.name,
                name=name,
                exactly_once=group.delivery == "exactly-once",
            )

    # -- progress ------------------------------------------------------------

    def _on_progress(self, query_id: str, progress: Any) -> None:
        with self._lock:
            running = self._by_id.get(query_id)
            if running is None:
                return
            stats = running.stats
            stats.input_tuples += int(progress.numInputRows)
            stats.batches += 1
            stats.last_batch_id = int(progress.batchId)
            stats.last_duration_ms = int(progress.batchDuration)
            stats.input_tuples_per_second = float(progress.inputRowsPerSecond or 0.0)
            stats.processed_tuples_per_second = float(progress.processedRowsPerSecond or 0.0)
            for op in progress.stateOperators or []:
                stats.dropped_by_watermark += int(op.numRowsDroppedByWatermark or 0)
            name = running.name
            sink_progress = getattr(progress, "sink", None)
            failed_before = running.sink.offset_commits_failed
            slept = running.sink.record(getattr(sink_progress, "metrics", None))
            offsets_failed = running.sink.offset_commits_failed - failed_before
            output = self.config.queries[name].output
        if offsets_failed:
            self.metrics.offset_commit_failures.labels(self.name, name).inc(offsets_failed)
        if slept:
            self.metrics.sleeps.labels(self.name, output).inc(slept)
        if running.sink.queue_check_s is not None:
            self.metrics.output_queue_check.labels(self.name, output).observe(
                running.sink.queue_check_s
            )
        self.metrics.batch_duration.labels(self.name, name).observe(
            int(progress.batchDuration) / 1000.0
        )
        self.metrics.input_tuples.labels(self.name, name).inc(int(progress.numInputRows))

    def _on_terminated(self, query_id: str, run_id: str, exception: str | None) -> None:
        if run_id in self.hold.retired_runs:
            return  # stopped by a hold; its end may be reported after the release
        if exception and self._held_by(exception):
            return
        if exception and not self._expected_termination():
            with self._lock:
                running = self._by_id.get(query_id)
            if running is None:
                log.error("query group %s: query %s failed: %s", self.name, query_id, exception)
            else:
                # Recorded on the sink before the state changes: whoever sees FAILED
                # finds the error there.
                self._query_failure(running.name, RuntimeError(exception))
            self.state = QueryGroupState.FAILED

    def stats(self) -> dict[str, QueryStats]:
        """A snapshot of every query's :class:`QueryStats`."""
        with self._lock:
            return {name: QueryStats(**vars(r.stats)) for name, r in self._queries.items()}

    def queries(self) -> dict[str, StreamingQuery]:
        """The group's Spark streaming queries by name."""
        with self._lock:
            return {name: r.query for name, r in self._queries.items()}

    def sinks(self) -> dict[str, OutputSink]:
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
            if str(query.runId) in self.hold.retired_runs:
                continue  # ended by a hold, and not restarted yet: no failure
            exc = query.exception()
            if exc is not None and self._held_by(str(exc)):
                return
            if exc is not None and not self._expected_termination():
                self.state = QueryGroupState.FAILED
                raise self._query_failure(name, exc)

    def _held_by(self, failure: str) -> bool:
        """Hold the group when a query's ``failure`` (its exception's text) is a write
        task giving up on a full output stream queue (``FG-QG-002``,
        :func:`~pipeline.spark.sink.held_from`); whether it was one."""
        held = held_from(failure, query_group=self.name)
        if held is None:
            return False
        if self.state != QueryGroupState.HELD:
            log.error("%s", held)
            self.metrics.sleeps.labels(self.name, held.stream).inc(held.sleeps)
            self.hold.on_hold(held)
        return True

    def _query_failure(self, name: str, exc: BaseException) -> QueryGroupError:
        """The error a failed query ends the group with: the hold it stands for
        (``FG-QG-002``), a full disk's, else Spark's, without Java stacks
        (:func:`~pipeline.errors.compact_error`); the full text is in the log."""
        with self._lock:
            running = self._queries.get(name)
        if self._held_by(str(exc)):
            self.hold.join()
            assert self.hold.held is not None
            return self.hold.held
        error: QueryGroupError
        if NO_SPACE in str(exc):
            error = self._disk_full(name, exc)
            log.error("%s", error)
        elif (oversized := oversized_from(str(exc), query_group=self.name)) is not None:
            error = oversized
            log.error("%s", error)
        else:
            log.error("query group %s query %s failed: %s", self.name, name, exc)
            error = QueryGroupError(compact_error(exc), query_group=self.name, query=name)
        if running is not None:
            running.sink.last_error = error
        return error

    def _disk_full(self, name: str, cause: BaseException | str) -> CheckpointDiskFullError:
        """The error of a query that failed on a full disk (``ENOSPC``): its checkpoint
        and the bytes free there now (``FG-QG-010``); ``cause``: the query's own error
        or Spark's (an exception, or the listener's text of one)."""
        checkpoint = self.config.checkpoint(name)
        text = compact_error(cause if isinstance(cause, BaseException) else RuntimeError(cause))
        return CheckpointDiskFullError(
            query_group=self.name,
            query=name,
            checkpoint=checkpoint,
            free_bytes=free_bytes(checkpoint),
            cause=text,
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
                self._held_by(str(exc))
                self.hold.raise_held()
                self.state = QueryGroupState.FAILED
                raise self._query_failure(name, exc) from exc
        self.hold.raise_held()
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
                self._held_by(str(exc))
                self.hold.raise_held()
                self.state = QueryGroupState.FAILED
                raise self._query_failure(name, exc) from exc
            if done is False:
                return False
        self.hold.raise_held()
        self._await_listener()
        return True

    # -- output stream queues: sleep, hold, release ---------------------------

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
                self._sample_sleeping()
            except Exception:
                log.debug("query group %s: driver JVM not read", self.name, exc_info=True)
            sampled = time.monotonic() >= queues_due
            if sampled:
                queues_due = time.monotonic() + queues_every
                try:
                    self.sample_queues()  # output queues included
                except Exception:
                    log.warning("query group %s: queues not read", self.name, exc_info=True)
            try:
                if self.state == QueryGroupState.HELD and group.auto_release:
                    self.gauges.refresh_outputs()
                    if self.hold.resume_ready(self.gauges.output_snapshots):
                        log.info("query group %s: output queues drained: auto release", self.name)
                        self.hold.release()
                elif not sampled and self.state not in (
                    QueryGroupState.HELD,
                    QueryGroupState.STARTING,
                ):
                    self.gauges.refresh_outputs()
            except Exception:
                log.warning("query group %s: monitor pass failed", self.name, exc_info=True)

    def _sample_sleeping(self) -> None:
        """Tell the hold which queries' write tasks sleep now on a full output stream
        queue (those in the driver's JVM: every one with a local master)."""
        jvm = self.spark._jvm
        assert jvm is not None  # a classic (not Connect) session
        pairs = jvm.io.floodgate.spark.write.SleepingTasks.of(self.name)
        self.hold.set_sleeping(tuple(str(p).split("\t", 1)) for p in pairs)  # type: ignore[misc]

    def _sample_heap(self) -> None:
        jvm = self.spark._jvm
        assert jvm is not None  # a classic (not Connect) session
        runtime = jvm.java.lang.Runtime.getRuntime()
        total, free, most = runtime.totalMemory(), runtime.freeMemory(), runtime.maxMemory()
        self.metrics.jvm_heap_used.labels(self.name).set(total - free)
        self.metrics.jvm_heap_max.labels(self.name).set(most)

    # -- control ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The group as ``GET /status`` shows it
        (:func:`~pipeline.spark.status.group_status`)."""
        with self._lock:
            queries = {
                name: QueryStatus(
                    active=bool(r.query.isActive),
                    stats=QueryStats(**vars(r.stats)),
                    tuples_written=r.sink.tuples_written,
                )
                for name, r in self._queries.items()
            }
        return group_status(
            self.config,
            state=self.state.value,
            held=self.hold.held,
            held_since=self.hold.held_since,
            queries=queries,
            output_queues=self.gauges.output_snapshots,
            discarded=self.hold.discarded,
            spark=self._spark,
        )

    def request_stop(self) -> None:
        """Stop the group from another thread (``POST /stop``); sets :attr:`stop_requested`."""
        self.stop_requested.set()
        threading.Thread(target=self.stop, name=f"floodgate-{self.name}-stop", daemon=True).start()

    def serve(
        self, *, host: str | None = None, port: int | None = None, token: str | None = None
    ) -> str:
        """Serve ``/metrics``, ``/status``, ``/release`` and ``/stop``
        (:mod:`pipeline.spark.control`) and write the control file
        ``<control_dir>/<name>.json``. ``/release`` and ``/stop`` need the control token
        (``FLOODGATE_CONTROL_TOKEN``, else a random one written to
        ``<control_dir>/<name>.token``, mode 0600).

        Args:
            host / port: default ``[query_group] metrics_host`` / ``metrics_port``
                (port 0: a free one).
            token: the control token (default: ``FLOODGATE_CONTROL_TOKEN``, else a
                random one), for a caller that took it out of the environment.

        Returns:
            The endpoint's base URL, ``http://host:port``.

        Raises:
            ConfigError: ``FLOODGATE_CONTROL_TOKEN`` is set but empty or unusable, or
                ``control_dir`` is another user's or writable by others
                (:func:`pipeline.spark.control.check_control_dir`).
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
                token=token,
                allowed_hosts=group.allowed_hosts,
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
        self._monitor_stop.set()
        self.hold.join()
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
        # Drop the queue probes (their admin clients would keep reconnecting to a broker
        # that is gone); a later start() makes new ones.
        self.gauges.close()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self.state != QueryGroupState.FAILED:
            self.state = QueryGroupState.STOPPED

    def __enter__(self) -> QueryGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
