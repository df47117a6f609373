"""The Python streaming data source that reads Kafka topics (``floodgate_kafka_python``).

Floodgate's source runs on the JVM (``floodgate_kafka``, ``jvm/``); this one is its
reference implementation in Python, with the same options, columns, offsets and
behaviour, chosen per query group with ``source = "python"``. It is a Python
streaming data source (``pyspark.sql.datasource``, Spark >= 4.2 for admission
control) and reads Kafka with confluent-kafka; it goes once the JVM source has run
as the default for a release with nothing found that it does differently
(docs/spark-source.md, "When the Python source goes").

It reads what Spark's Kafka source reads (``subscribe``: one or more topics,
``subscribePattern``: every topic whose whole name matches, ``assign``: partitions of
one or more topics; Floodgate's ``topic``: one), and keys everything by
topic-partition, ``(topic, partition)``. Offsets are JSON per topic and partition in
the shape Spark's Kafka source uses, the *next* offset to read of each
topic-partition: ``{"arrivals": {"0": 310}, "flights": {"0": 1200, "1": 1187}}``.
A micro-batch reads exactly ``[start, end)`` of every topic-partition:

* :meth:`KafkaStreamReader.latestOffset` finds the topic-partitions read now (a
  pattern's topics re-listed, partitions added; :meth:`KafkaStreamReader.discover`),
  starts those it has not read at their earliest offset, and honours the read limit
  Spark passes (``ReadMaxRows`` from ``max_rows_per_trigger``, or
  ``ReadAllAvailable``), one budget over every topic-partition, spread by
  :func:`plan_batch_end`;
* :meth:`KafkaStreamReader.partitions` deals the topic-partition ranges out to
  at most ``maxTasks`` Spark tasks (:func:`group_ranges`; a task of a Python data
  source costs Spark ~0.1-0.2 s whatever it reads);
* :meth:`KafkaStreamReader.read` assigns and seeks, reads up to ``end``, and
  decodes the Avro tuples into Arrow record batches of the stream's columns,
  plus ``event_time``, ``_key``, ``_partition``, ``_offset`` and ``_timestamp``:
  8 192 at a time as one Avro container block read by polars
  (:class:`~pipeline.serde.block.BlockDecoder`, no Python object per tuple but the
  Kafka message), tuple by tuple with fastavro when the block cannot be vouched
  for. A tuple that fails to decode is sent to the dead-letter topic with the
  reason, stream, and its own Kafka record's topic, partition and offset in headers,
  and the batch goes on.
  Offsets the broker no longer holds raise :class:`~pipeline.errors.DataLossError`
  (``auto.offset.reset=error``): never a silent skip.
* :meth:`KafkaStreamReader.commit` commits the end offset of every topic-partition
  to the consumer group (option ``commitOffsets``, default on), so any Kafka tool sees
  the lag. A query
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

from pipeline.errors import DataLossError, DeserializationError
from pipeline.kafka.retries import BROKER_WAIT_S, broker_retrying
from pipeline.offsets import (
    TopicOffsets,
    TopicPartitionKey,
    batch_watermark,
    plan_batch_end,
    topic_offsets_from_json,
    topic_offsets_to_json,
)
from pipeline.serde.codec import StreamCodec
from pipeline.serde.confluent import key_schema
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.alignment import EventTimeProbe, IdleTracker, align_batch_end
from pipeline.spark.options import (
    EARLIEST,
    LATEST,
    PYTHON_SOURCE_NAME,
    SOURCE_NAME,
    SourceOptions,
    topic_matcher,
)
from pipeline.spark.partition_reader import (
    KafkaInputPartition,
    KafkaTaskPartition,
    PartitionReader,
)
from pipeline.spark.schema import spark_schema

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Kafka's internal topics (``Topic.isInternal``), which a pattern never matches, as
#: Kafka's consumer leaves them out (``exclude.internal.topics``, default true).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

#: Low and high watermark of each topic-partition read.
Watermarks = dict[TopicPartitionKey, tuple[int, int]]


class KafkaStreamDataSource(DataSource):
    """``spark.readStream.format("floodgate_kafka_python")``: Kafka topics of Avro
    tuples (or raw Kafka records), read in Python; the reference for the JVM source
    ``floodgate_kafka``, with the same options, columns and behaviour.

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
        key = None
        if opts.key_encoding == "confluent" and registered is not None:
            key = key_schema(registered, opts.key_fields or ())
        return spark_schema(
            opts.stream, registered, include_headers=opts.include_headers, key_schema=key
        )

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        """The stream reader (one per streaming query)."""
        return KafkaStreamReader(SourceOptions.parse(self.options), schema)


def group_ranges(
    ranges: Sequence[KafkaInputPartition], max_tasks: int | None
) -> list[KafkaTaskPartition]:
    """Deal ``ranges`` (of any topics) out to at most ``max_tasks`` tasks (``None``: one
    range a task), largest range first to the task with the fewest offsets so far (LPT
    scheduling; ties to the first topic-partition); a task reads its ranges in
    topic-partition order (topic, then partition).

    Returns:
        The tasks, in the order of their first topic-partition; none empty.
    """
    if max_tasks is None or max_tasks >= len(ranges):
        return [KafkaTaskPartition((r,)) for r in ranges]
    tasks: list[list[KafkaInputPartition]] = [[] for _ in range(max_tasks)]
    sizes = [0] * max_tasks
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition)):
        least = sizes.index(min(sizes))
        tasks[least].append(r)
        sizes[least] += r.end - r.start
    grouped = [
        KafkaTaskPartition(tuple(sorted(t, key=lambda r: (r.topic, r.partition))))
        for t in tasks
        if t
    ]
    return sorted(grouped, key=lambda t: (t.ranges[0].topic, t.ranges[0].partition))


def _listed(partitions: Any) -> str:
    """Topic-partitions as ``flights[0], flights[1]``, in order (``none``: none)."""
    return ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)) or "none"


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over the topics read and reads them (see the module
    docstring).

    The planning methods run in Spark's Python streaming source process next to the
    driver; :meth:`read` runs in Python workers and shares no state with them.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._consumer: Consumer | None = None
        self._available_now_target: TopicOffsets | None = None
        #: Where each topic-partition the query did not start with begins: its earliest
        #: offset when first seen (a partition added to a topic, a topic created that the
        #: pattern matches), as Spark's Kafka source starts them.
        self._added_starts: TopicOffsets = {}
        #: Topic-partitions gone from the cluster, dropped with ``failOnDataLoss = false``.
        self._dropped: set[TopicPartitionKey] = set()
        #: ``subscribePattern``: whether a topic's whole name matches.
        self._matches = (
            topic_matcher(options.topic_pattern) if options.topic_pattern is not None else None
        )
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

    @property
    def reads(self) -> str:
        """What the source reads, for log lines and errors: ``topics 'a', 'b'`` or
        ``topics matching 'f.*'``."""
        if self.options.topic_pattern is not None:
            return f"topics matching {self.options.topic_pattern!r}"
        return "topics " + ", ".join(repr(t) for t in self.options.topics or ())

    def discover(self) -> list[TopicPartitionKey]:
        """The topic-partitions read now, in order (topic, then partition), from the
        cluster's metadata.

        ``topic``/``subscribe``: every partition of each topic named; ``assign``: the
        partitions named; ``subscribePattern``: every partition of every topic whose
        whole name matches, listed again at each call, leaving out Kafka's internal
        topics (:data:`INTERNAL_TOPICS`) and the source's own ``deadLetterTopic``
        (Spark's ``SubscribePatternStrategy`` over Kafka's consumer). A pattern that
        matches nothing gives no topic-partition: empty micro-batches, as Spark.

        Raises:
            KafkaException: a topic named (``topic``, ``subscribe``, ``assign``) is not
                available (it does not exist: the source never creates one).
            ValueError: ``assign`` names partitions a topic does not have.
        """
        if self._matches is not None:
            metadata = self.consumer.list_topics(timeout=30)
            found: list[TopicPartitionKey] = []
            for name, topic in metadata.topics.items():
                if (
                    name in INTERNAL_TOPICS
                    or name == self.options.dead_letter_topic
                    or not self._matches(name)
                ):
                    continue
                if topic.error is not None:  # being created, or leaderless: read it anyway
                    log.debug("source %s: topic %r: %s", self.options.stream, name, topic.error)
                found.extend((name, p) for p in topic.partitions)
            return sorted(found)
        found = []
        for name in self.options.topics or ():
            metadata = self.consumer.list_topics(name, timeout=30)
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                error = topic.error if topic is not None else "unknown topic"
                raise KafkaException(f"topic {name!r} is not available: {error}")
            assigned = None if self.options.assigned is None else self.options.assigned[name]
            if assigned is None:
                found.extend((name, p) for p in topic.partitions)
                continue
            absent = sorted(set(assigned) - set(topic.partitions))
            if absent:
                raise ValueError(
                    f"{SOURCE_NAME}: assign names partitions {absent} of {name!r}, "
                    f"which has partitions {sorted(topic.partitions)}"
                )
            found.extend((name, p) for p in assigned)
        return sorted(found)

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

    def _watermarks(self) -> Watermarks:
        """Low and high watermark of every topic-partition read now (:meth:`discover`)."""

        def read() -> Watermarks:
            return {
                tp: tuple(self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=30))  # type: ignore[misc]
                for tp in self.discover()
            }

        return self._broker_read(read, f"the watermarks of {self.reads}")

    def _latest(self) -> TopicOffsets:
        return {tp: high for tp, (_, high) in self._watermarks().items()}

    def initialOffset(self) -> dict[str, Any]:
        """Where a query with a new checkpoint starts (option ``startingOffsets``), for
        every topic-partition read now.

        Raises:
            ValueError: ``startingOffsets`` JSON that does not name every topic-partition
                read, or names others (Spark's Kafka source refuses it too).
        """
        watermarks = self._watermarks()
        if self.options.starting_offsets == "specific":
            start = self._specific_start(watermarks)
        elif self.options.starting_offsets == "latest":
            start = {tp: high for tp, (_, high) in watermarks.items()}
        elif self.options.starting_offsets == "earliest":
            start = {tp: low for tp, (low, _) in watermarks.items()}
        else:
            committed = (
                self._broker_read(
                    lambda: self.consumer.committed(
                        [TopicPartition(*tp) for tp in watermarks], timeout=30
                    ),
                    "the consumer group's commits",
                )
                if watermarks
                else []
            )
            start = {}
            for tp in committed:
                key = (tp.topic, tp.partition)
                start[key] = tp.offset if tp.offset >= 0 else watermarks[key][0]
        log.info("source %s: initial offsets %s", self.options.stream, start)
        return topic_offsets_to_json(start)

    def _specific_start(self, watermarks: Watermarks) -> TopicOffsets:
        """``startingOffsets`` JSON resolved: -2 the low watermark, -1 the high one.

        Raises:
            ValueError: the JSON does not name exactly the topic-partitions read (as
                Spark's ``KafkaOffsetReaderAdmin.fetchSpecificOffsets``: "you must
                specify all TopicPartitions").
        """
        given = {
            (topic, p): o
            for topic, offsets in self.options.starting_partition_offsets.items()
            for p, o in offsets.items()
        }
        if set(given) != set(watermarks):
            raise ValueError(
                f"{SOURCE_NAME}: startingOffsets names partitions {_listed(given)}, and the "
                f"source reads {_listed(watermarks)} of {self.reads}: name every one read, "
                "and no other (as Spark's Kafka source requires)"
            )
        ends = {EARLIEST: 0, LATEST: 1}
        return {tp: watermarks[tp][ends[o]] if o in ends else o for tp, o in sorted(given.items())}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxRowsPerTrigger)`` when set, else ``ReadAllAvailable``."""
        if self.options.max_rows_per_trigger:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: available data of every topic-partition read
        now, capped by ``limit`` (one budget over all of them).

        Topic-partitions read now (:meth:`discover`) that ``start`` lacks join from
        their earliest offset: partitions added to a topic, and topics created since
        that the pattern matches (Spark's Kafka source: "Added partition ... starting
        from earliest"), not 0, which retention or ``DeleteRecords`` may have removed.
        Topic-partitions of ``start`` gone from the cluster (a topic deleted) fail the
        query, or with ``failOnDataLoss = false`` are dropped with a ``FG-SOURCE-004``
        warning (as Spark). Under Trigger.AvailableNow the end never passes the target
        recorded by :meth:`prepareForTriggerAvailableNow`.

        Raises:
            DataLossError: a topic-partition of ``start`` is gone (``failOnDataLoss``).
        """
        begin = topic_offsets_from_json(start)
        watermarks = self._watermarks()
        self._drop_gone(begin, watermarks)
        latest = {tp: high for tp, (_, high) in watermarks.items()}
        for tp, (low, _) in watermarks.items():
            if tp not in begin:
                if tp not in self._added_starts:
                    log.info(
                        "source %s: partition %s not read before (added to its topic, or "
                        "a new topic): read from its earliest offset %d",
                        self.options.stream,
                        _listed([tp]),
                        low,
                    )
                begin[tp] = self._added_starts.setdefault(tp, low)
        begin = self._skip_discarded(begin)
        if self._available_now_target is not None:
            latest = {
                tp: min(o, self._available_now_target.get(tp, begin[tp]))
                for tp, o in latest.items()
            }
        if self._delayed(begin, latest):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = plan_batch_end(begin, latest, max_rows)
        drift = self.options.max_event_time_drift_ms
        if drift is not None:
            end = self._aligned(begin, end, latest, drift)
        return topic_offsets_to_json(end)

    def _drop_gone(self, begin: TopicOffsets, watermarks: Watermarks) -> None:
        """Take out of ``begin`` the topic-partitions no longer in the cluster.

        Raises:
            DataLossError: with ``failOnDataLoss`` (the default), for the first one, as
                Spark's Kafka source fails on deleted partitions.
        """
        gone = sorted(tp for tp in begin if tp not in watermarks)
        if not gone:
            return
        if self.options.fail_on_data_loss:
            topic, partition = gone[0]
            raise DataLossError(
                f"partitions {_listed(gone)} of {self.reads} are gone from the cluster "
                "(a topic deleted?); set failOnDataLoss = false to drop them and go on",
                topic=topic,
                partition=partition,
                start=begin[gone[0]],
                end=begin[gone[0]],
            )
        for tp in gone:
            if tp not in self._dropped:
                log.warning(
                    "FG-SOURCE-004 source %s: partition %s is gone from the cluster and is "
                    "no longer read from offset %d (failOnDataLoss = false)",
                    self.options.stream,
                    _listed([tp]),
                    begin[tp],
                )
                self._dropped.add(tp)
            del begin[tp]

    def _delayed(self, begin: TopicOffsets, latest: TopicOffsets) -> bool:
        """Whether to wait for more tuples before the next micro-batch: fewer than
        ``minOffsetsPerTrigger`` are new over every topic-partition and
        ``maxTriggerDelay`` has not passed since the last one (Spark's
        ``KafkaMicroBatchStream.delayBatch``). Never under Trigger.AvailableNow, whose
        run would otherwise wait for tuples that may never come."""
        minimum = self.options.min_rows_per_trigger
        if minimum is None or self._available_now_target is not None:
            return False
        now = time.monotonic()
        delay_s = self.options.max_trigger_delay_ms / 1000
        if self._last_trigger_s is None or now - self._last_trigger_s >= delay_s:
            self._last_trigger_s = now
            return False
        if sum(max(0, o - begin.get(tp, 0)) for tp, o in latest.items()) < minimum:
            return True
        self._last_trigger_s = now
        return False

    def _aligned(
        self, begin: TopicOffsets, end: TopicOffsets, latest: TopicOffsets, drift_ms: int
    ) -> TopicOffsets:
        """``end`` capped so no topic-partition is read more than ``drift_ms`` past the
        least planned event time over all of them
        (:func:`~pipeline.spark.alignment.align_batch_end`)."""
        if self._probe is None:
            self._probe = EventTimeProbe(self.options.consumer_config(), self._event_time_reader())
        idle = self._idle.observe(latest)
        if self._available_now_target is not None:
            # Under Trigger.AvailableNow a partition at its target gets nothing more
            # in this run: it holds nobody back.
            idle |= {tp for tp, o in latest.items() if begin.get(tp, 0) >= o}
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
                _listed(idle),
            )
        return aligned

    def _event_time_reader(self) -> Callable[[Any], int | None]:
        """``(message) -> event time`` (epoch ms) as the tasks read it: the Kafka
        timestamp, or the decoded ``timestampField`` (with the codec of the message's
        topic); ``None`` when it has none."""
        if self.options.timestamp_mode != "data_source":

            def kafka_time(message: Any) -> int | None:
                kind, ts = message.timestamp()
                return ts if kind != 0 and ts >= 0 else None

            return kafka_time
        codecs: dict[str, StreamCodec] = {}
        field = self.options.timestamp_field or ""

        def field_time(message: Any) -> int | None:
            topic = message.topic()
            codec = codecs.get(topic)
            if codec is None:
                codec = codecs[topic] = self.options.codec(topic)
            try:
                value = codec.decode(message.value() or b"", logical=False).get(field)
            except DeserializationError:
                return None
            return value if isinstance(value, int) else None

        return field_time

    def _skip_discarded(self, begin: TopicOffsets) -> TopicOffsets:
        """``begin`` moved past what option ``discardBefore`` skips, per topic-partition
        of ``begin`` (offsets of topic-partitions not read are left out)."""
        skip = self.options.discard_before
        if not skip:
            return begin
        moved = dict(begin)
        for topic, offsets in skip.items():
            for p, o in offsets.items():
                if (topic, p) in moved:
                    moved[(topic, p)] = max(moved[(topic, p)], o)
        return moved

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The high watermarks, shown as ``latestOffset`` in query progress."""
        return topic_offsets_to_json(self._latest())

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the high watermarks now as the end of an AvailableNow run."""
        self._available_now_target = self._latest()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks of a micro-batch: each topic-partition with tuples in ``[start,
        end)`` is a range, the ranges dealt out to at most ``maxTasks`` tasks
        (:func:`group_ranges`)."""
        begin = topic_offsets_from_json(start)
        finish = topic_offsets_from_json(end)
        watermark = batch = None
        if self.options.watermark_checkpoint:
            logged = batch_watermark(self.options.watermark_checkpoint, finish)
            if logged is None:
                log.warning(
                    "FG-SOURCE-002 source %s: no offset log entry for %s under %s: late "
                    "tuples of this micro-batch are not dead-lettered (Spark drops them)",
                    self.options.stream,
                    end,
                    self.options.watermark_checkpoint,
                )
            else:
                batch, watermark = logged
        unseen = [tp for tp in finish if tp not in begin and tp not in self._added_starts]
        if unseen:  # added partitions another driver planned: one read of the broker
            watermarks = self._watermarks()
            self._added_starts.update(
                {tp: watermarks[tp][0] if tp in watermarks else 0 for tp in unseen}
            )
        for tp in finish:
            begin.setdefault(tp, self._added_starts.get(tp, 0))
        begin = self._skip_discarded(begin)
        ranges = [
            KafkaInputPartition(topic, p, begin[(topic, p)], e, watermark, batch)
            for (topic, p), e in sorted(finish.items())
            if e > begin[(topic, p)]
        ]
        return group_ranges(ranges, self.options.max_tasks)

    def commit(self, end: dict[str, Any]) -> None:
        """Commit ``end`` of every topic-partition to the consumer group (if
        ``commitOffsets``)."""
        if not self.options.commit_offsets:
            return
        offsets = topic_offsets_from_json(end)
        if offsets:
            self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
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
        topic-partition each, one after the other.

        Yields:
            Arrow record batches of at most :data:`ARROW_BATCH_ROWS` rows in the
            columns of :func:`spark_schema`, in offset order.

        Raises:
            DataLossError: the broker no longer holds offsets of the range.
            KafkaException: the broker failed in another way (the task is retried).
        """
        assert isinstance(partition, KafkaTaskPartition)
        yield from PartitionReader(self.options, self.schema).batches(partition.ranges)
