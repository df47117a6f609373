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
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.config import QueryGroupConfig
from pipeline.errors import (
    ConfigError,
    QueryGroupError,
)
from pipeline.failpoints import arm_jvm
from pipeline.kafka.retries import BROKER_WAIT_S
from pipeline.kafka.topics import ensure_topics
from pipeline.metrics import QueryGroupMetrics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark import real_time
from pipeline.spark.checks import analysed_query, check_schemas
from pipeline.spark.failures import QueryFailures
from pipeline.spark.hold import Hold
from pipeline.spark.inputs import register_inputs
from pipeline.spark.monitor import GroupMonitor
from pipeline.spark.progress import ProgressListener, QueryStats
from pipeline.spark.queue_gauges import QueueGauges
from pipeline.spark.runs import QueryRuns, RunningQuery
from pipeline.spark.session import group_session
from pipeline.spark.sink import OutputSink, sink_options, stream_writer
from pipeline.spark.states import QueryGroupState
from pipeline.spark.status import group_status

log = logging.getLogger(__name__)


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
        #: The running queries and their progress.
        self.runs = QueryRuns(config, self.metrics)
        #: What a query ending with an exception means for the group.
        self.failures = QueryFailures(self)
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
        self.monitor = GroupMonitor(self)
        self._server: Any = None
        self._stop_lock = threading.Lock()
        check_schemas(config, self.schemas)

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

    # -- lifecycle -----------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        """The query group's own SparkSession (started on first use)."""
        if self._spark is None:
            self._spark = group_session(self.config, self._parent_spark)
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
        self.gauges.add_outputs()
        self.gauges.add_inputs()
        self.runs.zero_series()
        # The bases of the processed and dead-letter counters are read before any query
        # runs, in a thread beside the first query's input views (the one waits on the
        # broker, the other on Spark's analysis): a start takes the longer of the two.
        bases = threading.Thread(
            target=self.gauges.sample_at_start, name=f"floodgate-{self.name}-bases", daemon=True
        )
        bases.start()
        spark = self.spark
        self._listener = ProgressListener(
            spark, on_progress=self._on_progress, on_terminated=self.failures.on_terminated
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
        log.info("query group %s executing %d queries", self.name, len(self.runs.all()))
        self.monitor.start()
        return self

    def running_queries(self) -> list[StreamingQuery]:
        """The group's Spark streaming queries as they run now."""
        return [r.query for r in self.runs.all()]

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

    def sample_queues(self) -> None:
        """Read every input and output stream queue once: length and lag gauges. The
        monitor thread calls it every ``queue_metrics_interval_ms``.

        Raises:
            BrokerError: the broker did not answer.
        """
        self.gauges.sample()

    def _start_query(self, spark: SparkSession, name: str, *, available_now: bool) -> None:
        df = analysed_query(spark, self.config, self.schemas, name)
        checkpoint = self.config.checkpoint(name)
        previous = self.runs.get(name)
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
        writer = stream_writer(df, self.config, name, sink, available_now=available_now)
        group = self.config.query_group
        try:
            query = writer.start()
        except Exception as exc:
            raise QueryGroupError(
                f"failed to start: {exc}", query_group=self.name, query=name
            ) from exc
        self.runs.add(
            RunningQuery(
                name, query, sink, previous.stats if previous is not None else QueryStats()
            )
        )
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
        """A micro-batch's progress, from Spark's listener bus
        (:meth:`~pipeline.spark.runs.QueryRuns.on_progress`)."""
        self.runs.on_progress(query_id, progress)

    def stats(self) -> dict[str, QueryStats]:
        """A snapshot of every query's :class:`QueryStats`."""
        return self.runs.stats()

    def queries(self) -> dict[str, StreamingQuery]:
        """The group's Spark streaming queries by name."""
        return {r.name: r.query for r in self.runs.all()}

    def sinks(self) -> dict[str, OutputSink]:
        """The group's sinks by query name."""
        return {r.name: r.sink for r in self.runs.all()}

    def check(self) -> None:
        """Raise the first failure of any query (a held or stopping group is no failure:
        :meth:`~pipeline.spark.failures.QueryFailures.check`).

        Raises:
            QueryGroupError: a query terminated with an exception.
        """
        self.failures.check()

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
                raise self.failures.raise_for(name, exc) from exc
        self.hold.raise_held()
        self.runs.await_listener()

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
                raise self.failures.raise_for(name, exc) from exc
            if done is False:
                return False
        self.hold.raise_held()
        self.runs.await_listener()
        return True

    # -- control ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The group as ``GET /status`` shows it
        (:func:`~pipeline.spark.status.group_status`)."""
        return group_status(
            self.config,
            state=self.state.value,
            held=self.hold.held,
            held_since=self.hold.held_since,
            queries=self.runs.statuses(),
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
        self.monitor.signal()
        self.hold.join()
        for running in self.runs.all():
            try:
                running.query.stop()
            except Exception:
                log.exception("query group %s: stopping query %s failed", self.name, running.name)
            running.sink.close()
        self.monitor.stop()
        if self._listener is not None and self._spark is not None:
            try:
                self._spark.streams.removeListener(self._listener)
            except Exception:
                log.debug("listener already removed", exc_info=True)
            self._listener = None
        self.runs.clear()
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
