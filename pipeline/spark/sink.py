"""A query's output, written on Spark's executors by the JVM sink: its Python side.

Every query of a query group writes its micro-batches with
``writeStream.format("floodgate_kafka")`` (docs/spark-source.md, "The sink"): each
write task encodes its rows as the output stream's tuples and produces them in a Kafka
transaction of its own, with a *batch marker* that lets a replayed batch skip the
partitions already committed. No output tuple passes through the driver. This module
holds what the control plane needs of it:

* :class:`SinkOptions`: the sink's options, typed, for one query
  (:func:`sink_options` builds them from the query group's config);
* :class:`OutputSink`: what the group knows of a query's sink, counted from each
  micro-batch's progress (``sink.metrics``);
* :func:`held_from`: the :class:`~pipeline.errors.QueryGroupHeld` a query that failed
  on a full output stream queue (``FG-QG-002``) stands for, and :func:`oversized_from`
  the :class:`~pipeline.errors.OversizedBatchError` of one whose batch can never fit
  (``FG-QG-005``).

Exactly once: a batch replayed after a crash anywhere (mid-task, after some tasks
committed, after all did but before Spark's commit log, a retried or speculative task)
writes only its partitions not yet committed, for ``read_committed`` readers. A
task's producer has a stable ``transactional.id``, ``<consumer group>.sink.<task
partition>``, so a restarted driver or task attempt fences the one before (Kafka's
zombie fencing). The query's consumer group receives the batch's input offsets once
every task committed, from the driver; a crash in between leaves it one micro-batch
behind the output until the replay commits it.

The output stream queue's bound: the driver reads the queue's free space once per
micro-batch; each of its ``n`` write tasks may commit ``1/n`` of it. A task keeps its
encoded tuples until its last row, and sends nothing unless they fit. One whose output
does not fit sleeps ``sleep_on_over_store_ms`` and reads the queue again, up to
``sleep_on_over_store_retry_count`` times, then fails with ``FG-QG-002``, having sent
nothing; the query fails, and the query group holds (:func:`held_from`). On release the
batch is replayed; its tasks that had committed skip their rows. A task that needs more
than ``1/n`` of the whole queue fails the query at once (``FG-QG-005``).

Stable message codes (in the driver's log, as Spark logs its executors'): ``FG-QG-001``
(warning) a write task sleeps on a full output stream queue; ``FG-QG-002`` (error) the
query group is held; ``FG-QG-003`` (info) it is released; ``FG-QG-004`` (warning) input
was discarded on release; ``FG-QG-005`` (error) a micro-batch larger than its output
stream queue.

*The stream data platform* cited in the query group's docs is the stream data
processing product whose queue rules Floodgate follows (docs/glossary.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.errors import OversizedBatchError, QueryGroupHeld
from pipeline.names import sink_transactional_id
from pipeline.spark.options import SOURCE_NAME
from pipeline.spark.real_time import real_time_transaction_timeout_ms

if TYPE_CHECKING:
    from pipeline.config import QueryGroupConfig
    from pipeline.serde.schemas import SchemaRepository

log = logging.getLogger(__name__)

#: The sink's short name: the same data source as the source (``floodgate_kafka``).
SINK_NAME = SOURCE_NAME

#: Seconds a write task's transaction may stay open before Kafka's coordinator aborts
#: it (the producers' ``transaction.timeout.ms``): an open transaction keeps the last
#: stable offset of its partitions, and so ``read_committed`` readers, back for as long.
TRANSACTION_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SinkOptions:
    """The options of one query's ``floodgate_kafka`` sink, typed.

    :meth:`to_options` renders them as the strings Spark hands the JVM sink, whose
    ``io.floodgate.spark.write.SinkOptions`` checks them again.

    Attributes:
        bootstrap_servers: the Kafka cluster.
        topic: the output topic.
        stream: the output stream's name (for errors and logs).
        schema_name: the output stream's schema.
        schemas_json: the schema repository (:meth:`SchemaRepository.as_json`).
        key_columns: the columns joined with ``|`` into the record key.
        transactional_id_prefix: task ``p``'s producer is ``<prefix>.<p>``.
        consumer_group: where the driver commits the input offsets; ``None``: nowhere.
        input_topics: the query's input topics (other sources' offsets are not committed).
        checkpoint: the query's checkpoint location (its offset log).
        encoding: ``single-object`` or ``confluent``.
        schema_id: the registry's id of the schema (``confluent``).
        max_queue_size: the output stream queue's bound, tuples; ``None``: unbounded.
        queue_readers: the consumer groups that read the output stream queue.
        sleep_ms: ``sleep_on_over_store_ms``.
        retry_count: ``sleep_on_over_store_retry_count``.
        sole_writer: the query is the only writer of the stream (a task may then read
            the queue again before it gives up).
        query_group, query: names for errors and logs.
        client: ``kafka.<property>`` options (librdkafka's names, translated on the JVM).
        delivery: ``exactly-once`` (a transaction per write task) or ``at-least-once``
            (an idempotent producer, each tuple sent at once, no transaction).
        real_time: the query runs in Spark's Real-Time Mode: a write task lasts the
            whole batch, so a bounded queue is checked as its tuples go out, not once
            at its end.
        transaction_timeout_ms: the write tasks' ``transaction.timeout.ms``; ``None``:
            the sink's default (60 s), longer than any micro-batch's write.
        source_ends_logged: the query's sources log where each real-time task stopped
            (their ``realTimeEndsGroup``), so a write task after a shuffle commits
            exactly once by its batch marker.
    """

    bootstrap_servers: str
    topic: str
    stream: str
    schema_name: str
    schemas_json: str
    key_columns: tuple[str, ...]
    transactional_id_prefix: str
    checkpoint: str
    consumer_group: str | None = None
    input_topics: tuple[str, ...] = ()
    encoding: str = "single-object"
    schema_id: int | None = None
    max_queue_size: int | None = None
    queue_readers: tuple[str, ...] = ()
    sleep_ms: int = 0
    retry_count: int = 0
    sole_writer: bool = True
    query_group: str = ""
    query: str = ""
    client: Mapping[str, Any] = field(default_factory=dict)
    delivery: str = "exactly-once"
    real_time: bool = False
    transaction_timeout_ms: int | None = None
    source_ends_logged: bool = False

    def to_options(self) -> dict[str, str]:
        """The option map Spark hands the sink (``writeStream.options(...)``)."""
        given: dict[str, Any] = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "topic": self.topic,
            "stream": self.stream,
            "schema": self.schema_name,
            "schemas": self.schemas_json,
            "key": ",".join(self.key_columns) or None,
            "transactionalIdPrefix": self.transactional_id_prefix,
            "consumerGroup": self.consumer_group,
            "inputTopics": ",".join(self.input_topics) or None,
            "checkpointLocation": self.checkpoint,
            "encoding": self.encoding,
            "schemaId": self.schema_id,
            "maxQueueSize": self.max_queue_size,
            "queueReaders": ",".join(self.queue_readers) or None,
            "sleepOnOverStoreMs": self.sleep_ms,
            "sleepOnOverStoreRetryCount": self.retry_count,
            "soleWriter": self.sole_writer,
            "queryGroup": self.query_group,
            "query": self.query,
            "delivery": self.delivery,
            "realTime": self.real_time,
            "transactionTimeoutMs": self.transaction_timeout_ms,
            "sourceEndsLogged": self.source_ends_logged,
            **{f"kafka.{k}": v for k, v in self.client.items()},
        }
        return {
            key: (str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in given.items()
            if value is not None
        }


def sink_options(
    config: QueryGroupConfig,
    query: str,
    *,
    bootstrap_servers: str,
    schemas: SchemaRepository,
    checkpoint: str,
    real_time: bool | None = None,
) -> SinkOptions:
    """The sink options of query ``query`` of a query group.

    The output stream queue is bounded unless ``output_queue_check = false``; the query
    is its stream's sole writer unless another query of the group writes it too.
    ``real_time``: the query runs in Spark's Real-Time Mode (default: the group's
    ``trigger = "real-time"``; a real-time group run ``--available-now`` runs
    micro-batches).

    Raises:
        SchemaError, SchemaRegistryError: ``encoding = "confluent"`` and the registry
            refused the schema or could not be asked.
    """
    query_config = config.queries[query]
    group = config.query_group
    in_real_time = group.real_time if real_time is None else real_time
    name = query_config.output
    output = config.output_streams[name]
    schema_id = None
    if output.encoding == "confluent":
        codec = config.stream_codec("output", name, schemas)
        schema_id = codec.registered_id()  # type: ignore[attr-defined]  # a ConfluentCodec
    return SinkOptions(
        bootstrap_servers=bootstrap_servers,
        topic=output.topic,
        stream=name,
        schema_name=output.schema_,
        schemas_json=schemas.as_json(),
        key_columns=tuple(output.key),
        transactional_id_prefix=sink_transactional_id(config.consumer_group(query)),
        consumer_group=config.consumer_group(query),
        input_topics=tuple(s.topic for s in config.input_streams.values()),
        checkpoint=checkpoint,
        encoding=output.encoding,
        schema_id=schema_id,
        max_queue_size=config.output_settings(name).max_queue_size
        if group.output_queue_check
        else None,
        queue_readers=tuple(config.reception_groups(name)),
        sleep_ms=group.sleep_on_over_store_ms,
        retry_count=group.sleep_on_over_store_retry_count,
        sole_writer=len(writers_of(config, name)) == 1,
        query_group=config.name,
        query=query,
        client=dict(config.kafka.client),
        delivery=group.delivery,
        real_time=in_real_time,
        transaction_timeout_ms=real_time_transaction_timeout_ms(group) if in_real_time else None,
        # The sources log their real-time ends in an exactly-once real-time group
        # (pipeline.spark.inputs.source_options).
        source_ends_logged=in_real_time and group.delivery == "exactly-once",
    )


class OutputSink:
    """What a query group knows of one query's sink: its options, and its counts since
    the group started it, from each micro-batch's progress (:meth:`record`).

    Args:
        options: the sink's options.
    """

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        #: The ``transactional.id`` prefix of the query's write tasks.
        self.transactional_id = options.transactional_id_prefix
        #: Tuples committed, and tuples of replayed batches skipped as committed before.
        self.tuples_written = 0
        self.tuples_skipped = 0
        #: Micro-batches that wrote tuples; micro-batches whose every tuple was skipped.
        self.batches_written = 0
        self.batches_skipped = 0
        #: Micro-batches written whose input offsets could not be committed to the query's
        #: consumer group (it stays behind the output until a later micro-batch's commit).
        self.offset_commits_failed = 0
        #: Times the query slept on a full output stream queue (its tasks sleep side by
        #: side: per micro-batch, the most any of them slept).
        self.sleeps = 0
        #: How long the driver's read of the output stream queue took for the micro-batch
        #: of the last progress, seconds (``None``: unbounded, or no new micro-batch).
        self.queue_check_s: float | None = None
        #: The error the query failed with (Spark's, without Java stacks), if it failed.
        self.last_error: BaseException | None = None
        self._seen: dict[str, int] = {}

    def record(self, metrics: Mapping[str, str] | None) -> int:
        """Take one micro-batch's ``sink.metrics`` (the JVM sink's totals since the
        query's run started, as strings; a new run starts them at 0).

        Returns:
            The sleeps of write tasks since the last progress.
        """
        if not metrics:
            return 0
        check_ms = metrics.get("queueCheckMs")
        totals = {k: int(v) for k, v in metrics.items() if _integer(v)}
        deltas: dict[str, int] = {}
        for name in ("tuplesWritten", "tuplesSkipped", "sleeps", "batches", "offsetCommitsFailed"):
            now = totals.get(name, 0)
            before = self._seen.get(name, 0)
            deltas[name] = now - before if now >= before else now  # a new run: from 0
            self._seen[name] = now
        self.tuples_written += deltas["tuplesWritten"]
        self.tuples_skipped += deltas["tuplesSkipped"]
        self.sleeps += deltas["sleeps"]
        self.offset_commits_failed += deltas["offsetCommitsFailed"]
        # A progress without a new micro-batch (an idle trigger) repeats the last check.
        self.queue_check_s = (
            float(check_ms) / 1000.0 if check_ms is not None and deltas["batches"] else None
        )
        if deltas["batches"]:
            if deltas["tuplesWritten"]:
                self.batches_written += deltas["batches"]
            elif deltas["tuplesSkipped"]:
                self.batches_skipped += deltas["batches"]
        return deltas["sleeps"]

    def new_run(self) -> None:
        """The query starts again (after a hold): its JVM totals start from 0."""
        self._seen.clear()

    def close(self) -> None:
        """Nothing to release: the producers live on the executors."""


def _integer(text: str) -> bool:
    return text.lstrip("-").isdigit()


#: The JVM sink's ``FG-QG-002`` (``OutputQueueFullException``).
_HELD = re.compile(
    r"FG-QG-002 (?:query group \S+ )?query (?P<query>\S+): output stream (?P<stream>\S+) is "
    r"full: micro-batch (?P<batch>\d+) task (?P<task>\d+) of (?P<tasks>\d+) needs "
    r"(?P<required>\d+) offsets, its share of the free space is (?P<share>\d+) "
    r"\(max_queue_size (?P<max>\d+)\) after (?P<sleeps>\d+) sleep"
)


def held_from(text: str, *, query_group: str) -> QueryGroupHeld | None:
    """The hold a query's failure stands for, when a write task gave up on a full output
    stream queue (``FG-QG-002`` in the failure's text), else ``None``.

    A task needs ``required`` offsets and may take ``1/n`` of the free space, so the
    batch fits once the queue has ``required * n`` free: that is the hold's
    ``required`` (what ``auto_release`` waits for), and ``free`` is ``share * n``.
    """
    found = _HELD.search(text)
    if found is None:
        return None
    tasks = int(found["tasks"])
    return QueryGroupHeld(
        query_group=query_group,
        query=found["query"],
        stream=found["stream"],
        batch_id=int(found["batch"]),
        required=int(found["required"]) * tasks,
        free=int(found["share"]) * tasks,
        max_queue_size=int(found["max"]),
        sleeps=int(found["sleeps"]),
    )


#: The JVM sink's ``FG-QG-005`` (``OversizedOutputException``).
_OVERSIZED = re.compile(
    r"FG-QG-005 (?:query group \S+ )?query (?P<query>\S+): micro-batch (?P<batch>\d+) task "
    r"\d+ of (?P<tasks>\d+) writes (?P<required>\d+) offsets to output stream (?P<stream>\S+), "
    r"more than its share of the whole queue \(max_queue_size = (?P<max>\d+)"
)


def oversized_from(text: str, *, query_group: str) -> OversizedBatchError | None:
    """The error a query's failure stands for when a write task's output needs more than
    its share of the whole output stream queue (``FG-QG-005`` in the failure's text), else
    ``None``. Its ``required`` is the task's need times the batch's tasks: the queue the
    batch would need for that task's share to hold it."""
    found = _OVERSIZED.search(text)
    if found is None:
        return None
    return OversizedBatchError(
        query_group=query_group,
        query=found["query"],
        stream=found["stream"],
        batch_id=int(found["batch"]),
        required=int(found["required"]) * int(found["tasks"]),
        max_queue_size=int(found["max"]),
    )


def writers_of(config: QueryGroupConfig, stream: str) -> Sequence[str]:
    """The queries of a group that write output stream ``stream``."""
    return [q for q, c in config.queries.items() if c.output == stream]


def stream_writer(
    df: Any, config: QueryGroupConfig, query: str, sink: OutputSink, *, available_now: bool
) -> Any:
    """Query ``query``'s ``DataStreamWriter`` of ``df``: named ``<group>.<query>``, its
    output mode, the JVM sink with ``sink``'s options, and its trigger: AvailableNow,
    the group's real-time checkpoint interval, or its processing-time interval."""
    group = config.query_group
    writer = (
        df.writeStream.queryName(f"{config.name}.{query}")
        .outputMode(config.queries[query].output_mode)
        .format(SINK_NAME)
        .options(**sink.options.to_options())
    )
    if available_now:
        return writer.trigger(availableNow=True)
    if group.real_time:
        # Spark 4.3 runs a stateless real-time query with asynchronous progress
        # tracking unless told not to, and only for its own sinks; the sink commits a
        # batch's input offsets from the offset log once the batch is written.
        return writer.option("asyncProgressTrackingEnabled", "false").trigger(
            realTime=f"{group.real_time_checkpoint_interval_ms} milliseconds"
        )
    return writer.trigger(processingTime=f"{group.trigger_interval_ms} milliseconds")
