"""The Python streaming data source that reads one Kafka topic (``floodgate_kafka_python``).

Floodgate's source runs on the JVM (``floodgate_kafka``, ``jvm/``); this one is its
reference implementation in Python, with the same options, columns, offsets and
behaviour, chosen per query group with ``source = "python"``. It is a Python
streaming data source (``pyspark.sql.datasource``, Spark >= 4.2 for admission
control) and reads Kafka with confluent-kafka; it goes once the JVM source has run
as the default for a release with nothing found that it does differently
(docs/spark-source.md, "When the Python source goes").

Offsets are per-partition JSON in the shape Spark's Kafka source uses, the
*next* offset to read of each partition: ``{"flights": {"0": 1200, "1": 1187}}``.
A micro-batch reads exactly ``[start, end)`` of every partition:

* :meth:`KafkaStreamReader.latestOffset` honours the read limit Spark passes
  (``ReadMaxRows`` from ``max_rows_per_trigger``, or ``ReadAllAvailable``),
  spread over partitions by :func:`plan_batch_end`;
* :meth:`KafkaStreamReader.partitions` deals the Kafka partition ranges out to
  at most ``maxTasks`` Spark tasks (:func:`group_ranges`; a task of a Python data
  source costs Spark ~0.1-0.2 s whatever it reads);
* :meth:`KafkaStreamReader.read` assigns and seeks, reads up to ``end``, and
  decodes the Avro tuples into Arrow record batches of the stream's columns,
  plus ``event_time``, ``_key``, ``_partition``, ``_offset`` and ``_timestamp``:
  8 192 at a time as one Avro container block read by polars
  (:class:`~pipeline.serde.block.BlockDecoder`, no Python object per tuple but the
  Kafka message), tuple by tuple with fastavro when the block cannot be vouched
  for. A tuple that fails to decode is sent to the dead-letter topic with the
  reason, stream, topic, partition and offset in headers, and the batch goes on.
  Offsets the broker no longer holds raise :class:`~pipeline.errors.DataLossError`
  (``auto.offset.reset=error``): never a silent skip.
* :meth:`KafkaStreamReader.commit` commits the end offsets to the consumer group
  (option ``commitOffsets``, default on), so any Kafka tool sees the lag. A query
  group turns it off, because its transactional sink commits the same offsets
  atomically with the batch's output (see :mod:`pipeline.spark.sink`).

Trigger.AvailableNow is supported (:class:`SupportsTriggerAvailableNow`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StructType,
)

from pipeline.errors import DeserializationError
from pipeline.kafka.retries import BROKER_WAIT_S, broker_retrying
from pipeline.offsets import (
    Offsets,
    batch_watermark,
    offsets_from_json,
    offsets_to_json,
    plan_batch_end,
)
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.alignment import EventTimeProbe, IdleTracker, align_batch_end
from pipeline.spark.options import (
    EARLIEST,
    LATEST,
    PYTHON_SOURCE_NAME,
    SOURCE_NAME,
    SourceOptions,
)
from pipeline.spark.partition_reader import (
    KafkaInputPartition,
    KafkaTaskPartition,
    PartitionReader,
)
from pipeline.spark.schema import spark_schema

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class KafkaStreamDataSource(DataSource):
    """``spark.readStream.format("floodgate_kafka_python")``: one Kafka topic of Avro
    tuples, read in Python; the reference for the JVM source ``floodgate_kafka``, with
    the same options, columns and behaviour.

    Register it once per SparkSession with ``spark.dataSource.register(KafkaStreamDataSource)``.
    """

    @classmethod
    def name(cls) -> str:
        """The format name (not ``floodgate_kafka``: the JVM source has that one)."""
        return PYTHON_SOURCE_NAME

    def schema(self) -> StructType:
        """The stream's columns (see :func:`spark_schema`)."""
        opts = SourceOptions.parse(self.options)
        registered = None
        if opts.schema_name is not None:
            repository = SchemaRepository.from_json(opts.schemas_json or "{}")
            registered = repository.get(opts.schema_name)
        key = opts.confluent_key()
        return spark_schema(
            opts.stream,
            registered,
            include_headers=opts.include_headers,
            key_schema=key.schema if key is not None else None,
        )

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        """The stream reader (one per streaming query)."""
        return KafkaStreamReader(SourceOptions.parse(self.options), schema)


def group_ranges(
    ranges: Sequence[KafkaInputPartition], max_tasks: int | None
) -> list[KafkaTaskPartition]:
    """Deal ``ranges`` out to at most ``max_tasks`` tasks (``None``: one range a task),
    largest range first to the task with the fewest offsets so far (LPT scheduling);
    a task reads its ranges in partition order.

    Returns:
        The tasks, in the order of their first partition; none empty.
    """
    if max_tasks is None or max_tasks >= len(ranges):
        return [KafkaTaskPartition((r,)) for r in ranges]
    tasks: list[list[KafkaInputPartition]] = [[] for _ in range(max_tasks)]
    sizes = [0] * max_tasks
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.partition)):
        least = sizes.index(min(sizes))
        tasks[least].append(r)
        sizes[least] += r.end - r.start
    grouped = [KafkaTaskPartition(tuple(sorted(t, key=lambda r: r.partition))) for t in tasks if t]
    return sorted(grouped, key=lambda t: t.ranges[0].partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over a Kafka topic and reads them (see the module docstring).

    The planning methods run in Spark's Python streaming source process next to the
    driver; :meth:`read` runs in Python workers and shares no state with them.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._consumer: Consumer | None = None
        self._available_now_target: Offsets | None = None
        #: Where each partition added to the topic since the query started begins: its
        #: earliest offset when first seen, as Spark's Kafka source starts it.
        self._added_starts: Offsets = {}
        #: Event-time alignment (option ``maxEventTimeDriftMs``): made on first use.
        self._probe: EventTimeProbe | None = None
        self._idle = IdleTracker(options.idle_partition_timeout_ms / 1000)
        #: When the last micro-batch was let through (``minOffsetsPerTrigger``; ``None``:
        #: never, so the first is not delayed, as Spark's ``lastTriggerMillis = 0``).
        self._last_trigger_s: float | None = None

    # -- driver side -------------------------------------------------------

    @property
    def consumer(self) -> Consumer:
        """A consumer for metadata, watermarks and commits (never subscribes)."""
        if self._consumer is None:
            self._consumer = Consumer(self.options.consumer_config())
        return self._consumer

    def _partitions(self) -> list[int]:
        metadata = self.consumer.list_topics(self.options.topic, timeout=30)
        topic = metadata.topics.get(self.options.topic)
        if topic is None or topic.error is not None:
            error = topic.error if topic is not None else "unknown topic"
            raise KafkaException(f"topic {self.options.topic!r} is not available: {error}")
        assigned = (self.options.assigned or {}).get(self.options.topic)
        if assigned is None:
            return sorted(topic.partitions)
        absent = sorted(set(assigned) - set(topic.partitions))
        if absent:
            raise ValueError(
                f"{SOURCE_NAME}: assign names partitions {absent} of {self.options.topic!r}, "
                f"which has partitions {sorted(topic.partitions)}"
            )
        return list(assigned)

    def _broker_read(self, read: Callable[[], _T], what: str) -> _T:
        """``read()``, tried again with exponential backoff (0.1 s to 2 s) for up to
        :data:`~pipeline.kafka.retries.BROKER_WAIT_S` while it raises ``KafkaException``.

        A broker restart or a leader election makes librdkafka answer ``_TRANSPORT``,
        ``_UNKNOWN_PARTITION`` or "no leaders found" for a few seconds; raised from
        ``latestOffset`` it would fail the query (and the driver) for nothing. Logs
        ``FG-SOURCE-003`` before each new try.

        Raises:
            KafkaException: the last error, when the broker did not answer in time.
        """
        started = time.monotonic()
        retrying = broker_retrying(
            KafkaException,
            BROKER_WAIT_S,
            lambda attempt, error: log.warning(
                "FG-SOURCE-003 source %s: broker not answering, retrying %s "
                "(attempt %d, %.1f s so far): %s",
                self.options.stream,
                what,
                attempt,
                time.monotonic() - started,
                error,
            ),
        )
        return retrying(read)

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        topic = self.options.topic

        def read() -> dict[int, tuple[int, int]]:
            return {
                p: tuple(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30))  # type: ignore[misc]
                for p in self._partitions()
            }

        return self._broker_read(read, f"the watermarks of {topic!r}")

    def _latest(self) -> Offsets:
        return {p: high for p, (_, high) in self._watermarks().items()}

    def initialOffset(self) -> dict[str, Any]:
        """Where a query with a new checkpoint starts (option ``startingOffsets``).

        Raises:
            ValueError: ``startingOffsets`` JSON that does not name every partition read
                (Spark's Kafka source refuses it too).
        """
        watermarks = self._watermarks()
        if self.options.starting_offsets == "specific":
            start = self._specific_start(watermarks)
        elif self.options.starting_offsets == "latest":
            start = {p: high for p, (_, high) in watermarks.items()}
        elif self.options.starting_offsets == "earliest":
            start = {p: low for p, (low, _) in watermarks.items()}
        else:
            committed = self._broker_read(
                lambda: self.consumer.committed(
                    [TopicPartition(self.options.topic, p) for p in watermarks], timeout=30
                ),
                "the consumer group's commits",
            )
            start = {}
            for tp in committed:
                low = watermarks[tp.partition][0]
                start[tp.partition] = tp.offset if tp.offset >= 0 else low
        log.info("source %s: initial offsets %s", self.options.stream, start)
        return offsets_to_json(self.options.topic, start)

    def _specific_start(self, watermarks: dict[int, tuple[int, int]]) -> Offsets:
        """``startingOffsets`` JSON resolved: -2 the low watermark, -1 the high one."""
        given = self.options.starting_partition_offsets.get(self.options.topic, {})
        if set(given) != set(watermarks):
            raise ValueError(
                f"{SOURCE_NAME}: startingOffsets names partitions {sorted(given)} of "
                f"{self.options.topic!r}, which reads partitions {sorted(watermarks)}: "
                "name every one (as Spark's Kafka source requires)"
            )
        ends = {EARLIEST: 0, LATEST: 1}
        return {p: watermarks[p][ends[o]] if o in ends else o for p, o in sorted(given.items())}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxRowsPerTrigger)`` when set, else ``ReadAllAvailable``."""
        if self.options.max_rows_per_trigger:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: available data capped by ``limit``.

        Partitions added to the topic since ``start`` join from their earliest offset
        (Spark's Kafka source: "Added partition ... starting from earliest"), not 0,
        which retention or ``DeleteRecords`` may have removed. Under
        Trigger.AvailableNow the end never passes the target recorded by
        :meth:`prepareForTriggerAvailableNow`.
        """
        begin = self._skip_discarded(offsets_from_json(self.options.topic, start))
        watermarks = self._watermarks()
        latest = {p: high for p, (_, high) in watermarks.items()}
        for p, (low, _) in watermarks.items():
            if p not in begin:
                if p not in self._added_starts:
                    log.info(
                        "source %s: partition %d added to %s since the query started: read "
                        "from its earliest offset %d",
                        self.options.stream,
                        p,
                        self.options.topic,
                        low,
                    )
                begin[p] = self._added_starts.setdefault(p, low)
        if self._available_now_target is not None:
            latest = {
                p: min(o, self._available_now_target.get(p, begin[p])) for p, o in latest.items()
            }
        if self._delayed(begin, latest):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = plan_batch_end(begin, latest, max_rows)
        drift = self.options.max_event_time_drift_ms
        if drift is not None:
            end = self._aligned(begin, end, latest, drift)
        return offsets_to_json(self.options.topic, end)

    def _delayed(self, begin: Offsets, latest: Offsets) -> bool:
        """Whether to wait for more tuples before the next micro-batch: fewer than
        ``minOffsetsPerTrigger`` are new and ``maxTriggerDelay`` has not passed since
        the last one (Spark's ``KafkaMicroBatchStream.delayBatch``). Never under
        Trigger.AvailableNow, whose run would otherwise wait for tuples that may never
        come."""
        minimum = self.options.min_rows_per_trigger
        if minimum is None or self._available_now_target is not None:
            return False
        now = time.monotonic()
        delay_s = self.options.max_trigger_delay_ms / 1000
        if self._last_trigger_s is None or now - self._last_trigger_s >= delay_s:
            self._last_trigger_s = now
            return False
        if sum(max(0, o - begin.get(p, 0)) for p, o in latest.items()) < minimum:
            return True
        self._last_trigger_s = now
        return False

    def _aligned(self, begin: Offsets, end: Offsets, latest: Offsets, drift_ms: int) -> Offsets:
        """``end`` capped so no partition is read more than ``drift_ms`` past the least
        planned event time (:func:`~pipeline.spark.alignment.align_batch_end`)."""
        if self._probe is None:
            self._probe = EventTimeProbe(
                self.options.consumer_config(), self.options.topic, self._event_time_reader()
            )
        idle = self._idle.observe(latest)
        if self._available_now_target is not None:
            # Under Trigger.AvailableNow a partition at its target gets nothing more
            # in this run: it holds nobody back.
            idle |= {p for p, o in latest.items() if begin.get(p, 0) >= o}
        aligned = align_batch_end(
            begin, end, latest, self._probe.many, drift_ms, idle, known=self._probe.known
        )
        self._probe.forget_before(begin)
        if aligned != end:
            log.debug(
                "source %s: micro-batch aligned in event time: %s instead of %s (idle: %s)",
                self.options.stream,
                aligned,
                end,
                sorted(idle),
            )
        return aligned

    def _event_time_reader(self) -> Callable[[Any], int | None]:
        """``(message) -> event time`` (epoch ms) as the tasks read it: the Kafka
        timestamp, or the decoded ``timestampField``; ``None`` when it has none."""
        if self.options.timestamp_mode != "data_source":

            def kafka_time(message: Any) -> int | None:
                kind, ts = message.timestamp()
                return ts if kind != 0 and ts >= 0 else None

            return kafka_time
        codec = self.options.codec()
        field = self.options.timestamp_field or ""

        def field_time(message: Any) -> int | None:
            try:
                value = codec.decode(message.value() or b"", logical=False).get(field)
            except DeserializationError:
                return None
            return value if isinstance(value, int) else None

        return field_time

    def _skip_discarded(self, begin: Offsets) -> Offsets:
        """``begin`` moved past what option ``discardBefore`` skips."""
        skip = self.options.discard_before.get(self.options.topic, {})
        if not skip:
            return begin
        moved = dict(begin)
        for p, o in skip.items():
            moved[p] = max(moved.get(p, 0), o)
        return moved

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The high watermarks, shown as ``latestOffset`` in query progress."""
        return offsets_to_json(self.options.topic, self._latest())

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the high watermarks now as the end of an AvailableNow run."""
        self._available_now_target = self._latest()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks of a micro-batch: each Kafka partition with tuples in ``[start,
        end)`` is a range, the ranges dealt out to at most ``maxTasks`` tasks
        (:func:`group_ranges`)."""
        begin = self._skip_discarded(offsets_from_json(self.options.topic, start))
        finish = offsets_from_json(self.options.topic, end)
        watermark = batch = None
        if self.options.watermark_checkpoint:
            logged = batch_watermark(self.options.watermark_checkpoint, self.options.topic, finish)
            if logged is None:
                log.warning(
                    "FG-SOURCE-002 source %s: no offset log entry for %s under %s: late "
                    "tuples of this micro-batch are not dead-lettered (Spark drops them)",
                    self.options.stream,
                    finish,
                    self.options.watermark_checkpoint,
                )
            else:
                batch, watermark = logged
        unseen = [p for p in finish if p not in begin and p not in self._added_starts]
        if unseen:  # added partitions another driver planned: one read of the broker
            watermarks = self._watermarks()
            self._added_starts.update({p: watermarks[p][0] for p in unseen})
        for p in finish:
            begin.setdefault(p, self._added_starts.get(p, 0))
        ranges = [
            KafkaInputPartition(self.options.topic, p, begin[p], e, watermark, batch)
            for p, e in sorted(finish.items())
            if e > begin[p]
        ]
        return group_ranges(ranges, self.options.max_tasks)

    def commit(self, end: dict[str, Any]) -> None:
        """Commit ``end`` to the consumer group (if ``commitOffsets``)."""
        if not self.options.commit_offsets:
            return
        offsets = offsets_from_json(self.options.topic, end)
        if offsets:
            self.consumer.commit(
                offsets=[TopicPartition(self.options.topic, p, o) for p, o in offsets.items()],
                asynchronous=False,
            )

    def stop(self) -> None:
        """Close the planning consumers."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    # -- executor side -----------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Read and decode the ranges of one task, ``[start, end)`` of a Kafka
        partition each, one after the other.

        Yields:
            Arrow record batches of at most :data:`ARROW_BATCH_ROWS` rows in the
            columns of :func:`spark_schema`, in offset order.

        Raises:
            DataLossError: the broker no longer holds offsets of the range.
            KafkaException: the broker failed in another way (the task is retried).
        """
        assert isinstance(partition, KafkaTaskPartition)
        yield from PartitionReader(self.options, self.schema).batches(partition.ranges)
