"""The Spark streaming data source that reads one Kafka topic (``floodgate_kafka``).

Spark's own Kafka connector is a JVM jar that is not in the ``pyspark`` wheel;
this source is a Python streaming data source (``pyspark.sql.datasource``,
Spark >= 4.2 for admission control) and reads Kafka with confluent-kafka.

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
  (:class:`~pipeline.serde.BlockDecoder`, no Python object per tuple but the
  Kafka message), tuple by tuple with fastavro when the block cannot be vouched
  for. A tuple that fails to decode is sent to the dead-letter topic with the
  reason, stream, topic, partition and offset in headers, and the batch goes on.
  Offsets the broker no longer holds raise :class:`~pipeline.errors.DataLossError`
  (``auto.offset.reset=error``): never a silent skip.
* :meth:`KafkaStreamReader.commit` commits the end offsets to the consumer group
  (option ``commitOffsets``, default on), so any Kafka tool sees the lag. A query
  group turns it off, because its transactional sink commits the same offsets
  atomically with the batch's output (see :mod:`pipeline.output`).

Trigger.AvailableNow is supported (:class:`SupportsTriggerAvailableNow`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.errors import DeserializationError, RefusedTupleError, SchemaError
from pipeline.output import BROKER_WAIT_S, local_offset_log, parse_offset_log
from pipeline.queues import broker_retrying
from pipeline.serde import BlockDecoder, RegisteredSchema, SchemaRepository, StreamCodec
from pipeline.swept import RANGE_CONSUMER, BlobReader, catalog_for, read_partition

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Short name to use with ``spark.readStream.format(...)``.
SOURCE_NAME = "floodgate_kafka"

#: Columns the source adds to every stream's own fields.
METADATA_COLUMNS = ("event_time", "_key", "_partition", "_offset", "_timestamp")

#: Dead-letter headers (all values UTF-8). The record keeps the original key and value.
DLQ_REASON = "floodgate.reason"
DLQ_ERROR = "floodgate.error"
DLQ_STREAM = "floodgate.stream"
DLQ_QUERY = "floodgate.query"
DLQ_TOPIC = "floodgate.topic"
DLQ_PARTITION = "floodgate.partition"
DLQ_OFFSET = "floodgate.offset"

#: Rows per Arrow record batch yielded by :meth:`KafkaStreamReader.read`.
ARROW_BATCH_ROWS = 8192
#: A partition read that makes no progress for this long fails the task.
READ_STALL_TIMEOUT_S = 60.0

Offsets = dict[int, int]


def _iso(epoch_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, for messages."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def dead_letter_key(query: str | None, message: Any) -> bytes:
    """Key of a dead-letter record: ``<query>@<topic>/<partition>/<offset>``, unique per
    reading query and tuple, so a reader can drop the repeats of a retried task."""
    return f"{query or ''}@{message.topic()}/{message.partition()}/{message.offset()}".encode()


# --------------------------------------------------------------------------- offsets


def offsets_to_json(topic: str, offsets: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """``{0: 5}`` -> ``{"topic": {"0": 5}}`` (Spark's Kafka offset shape)."""
    return {topic: {str(p): int(o) for p, o in sorted(offsets.items())}}


def offsets_from_json(topic: str, value: Mapping[str, Any]) -> Offsets:
    """Inverse of :func:`offsets_to_json`; a missing topic is an empty dict.

    Raises:
        ValueError: the offset does not have the expected shape.
    """
    per_partition = value.get(topic, {})
    if not isinstance(per_partition, Mapping):
        raise ValueError(f"offset for topic {topic!r} is not an object: {value!r}")
    return {int(p): int(o) for p, o in per_partition.items()}


def plan_batch_end(
    start: Mapping[int, int], latest: Mapping[int, int], max_rows: int | None
) -> Offsets:
    """Choose a micro-batch's end offsets under a row limit.

    Args:
        start: next offset to read per partition.
        latest: the high watermark (end of available data) per partition; a
            partition missing from ``start`` starts at 0... callers pass it in ``start``.
        max_rows: most tuples to read in total; ``None`` for no limit.

    Returns:
        ``end`` per partition of ``start``, with ``start[p] <= end[p] <= max(start[p], latest[p])``.

    The rule (tested by property tests): when everything available fits in
    ``max_rows`` the batch takes all of it. Otherwise it takes exactly
    ``max_rows`` tuples: every partition with a backlog first gets one tuple,
    then the rest of the budget is shared in proportion to the backlogs
    (largest remainder). Proportional shares keep partitions aligned in event
    time when producers write in time order, which is what keeps a watermark
    from dropping tuples as late.

    When ``max_rows`` is smaller than the number of partitions with a backlog,
    one tuple each goes to ``max_rows`` of them chosen round-robin: the cursor
    is ``sum(start) // max_rows`` (the sum grows by exactly ``max_rows`` a
    batch), so every partition is served within as many batches as there are
    partitions -- without keeping state between calls.
    """
    backlog = {p: max(0, latest.get(p, s) - s) for p, s in start.items()}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return {p: start[p] + backlog[p] for p in start}
    if max_rows < 1:
        raise ValueError(f"max_rows must be positive or None, got {max_rows}")
    take = dict.fromkeys(start, 0)
    waiting = sorted(p for p in backlog if backlog[p] > 0)
    if max_rows < len(waiting):
        order = sorted(start)
        cursor = (sum(start.values()) // max_rows) % len(order)
        rotated = order[cursor:] + order[:cursor]
        for p in [p for p in rotated if backlog[p] > 0][:max_rows]:
            take[p] = 1
        return {p: start[p] + take[p] for p in start}
    budget = max_rows - len(waiting)
    for p in waiting:
        take[p] = 1
    if budget > 0:
        remaining = {p: backlog[p] - take[p] for p in start}
        remaining_total = sum(remaining.values())  # > budget, since total > max_rows
        shares = {p: budget * remaining[p] // remaining_total for p in start}
        for p, share in shares.items():
            take[p] += share
        left = budget - sum(shares.values())
        by_remainder = sorted(start, key=lambda p: (-(budget * remaining[p] % remaining_total), p))
        for p in by_remainder:
            if left == 0:
                break
            if take[p] < backlog[p]:
                take[p] += 1
                left -= 1
    return {p: start[p] + take[p] for p in start}


# --------------------------------------------------------------------------- schema


_AVRO_TO_SPARK: dict[str, DataType] = {
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
    "bytes": BinaryType(),
    "enum": StringType(),
}
_LOGICAL_TO_SPARK: dict[str, DataType] = {
    "timestamp-millis": TimestampType(),
    "timestamp-micros": TimestampType(),
    "date": DateType(),
}


def _spark_field(stream: str, avro_field: Mapping[str, Any]) -> StructField:
    name = avro_field["name"]
    avro_type = avro_field["type"]
    nullable = False
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            raise SchemaError(
                f"stream {stream!r}: field {name!r} is a union of {avro_type}; the source "
                'supports only ["null", T]',
                stream=stream,
                field=name,
            )
        avro_type = branches[0]
    if isinstance(avro_type, Mapping):
        logical = avro_type.get("logicalType")
        if logical in _LOGICAL_TO_SPARK:
            return StructField(name, _LOGICAL_TO_SPARK[logical], nullable)
        avro_type = avro_type.get("type")
    if isinstance(avro_type, str) and avro_type in _AVRO_TO_SPARK:
        return StructField(name, _AVRO_TO_SPARK[avro_type], nullable)
    raise SchemaError(
        f"stream {stream!r}: field {name!r} has Avro type {avro_type!r}, which the source "
        f"does not map to a Spark column (supported: {sorted(_AVRO_TO_SPARK)} and "
        f"{sorted(_LOGICAL_TO_SPARK)})",
        stream=stream,
        field=name,
    )


def spark_schema(stream: str, schema: RegisteredSchema) -> StructType:
    """The Spark schema of a stream read by this source.

    Returns:
        The Avro record's fields in order, then ``event_time`` (timestamp),
        ``_key`` (binary), ``_partition`` (int), ``_offset`` (long) and
        ``_timestamp`` (the Kafka record timestamp).

    Raises:
        SchemaError: a field's Avro type has no Spark column type here, or a field
            clashes with a metadata column.
    """
    fields = [_spark_field(stream, f) for f in schema.schema.get("fields", [])]
    clash = {f.name for f in fields} & set(METADATA_COLUMNS)
    if clash:
        raise SchemaError(
            f"stream {stream!r}: fields {sorted(clash)} clash with the source's metadata columns",
            stream=stream,
        )
    return StructType(
        [
            *fields,
            StructField("event_time", TimestampType(), True),
            StructField("_key", BinaryType(), True),
            StructField("_partition", IntegerType(), False),
            StructField("_offset", LongType(), False),
            StructField("_timestamp", TimestampType(), True),
        ]
    )


# --------------------------------------------------------------------------- lateness


@dataclass(frozen=True)
class EventTimeWindow:
    """The event-time window of a query's streaming aggregation,
    ``window(event_time, duration, slide, start)``, in ms (tumbling: ``slide ==
    duration``).

    Spark's stateful aggregation drops a row as late when the end of its window is at
    or before the watermark for late events (``WatermarkSupport.watermarkExpression``:
    ``window.end <= watermark`` for a window key); a tuple of a sliding window is in
    several windows, and only lost once the latest of them is. Raises
    :class:`ValueError` for a duration or slide under 1 ms, or a slide over the
    duration.
    """

    duration_ms: int
    slide_ms: int
    start_ms: int = 0

    def __post_init__(self) -> None:
        if self.duration_ms < 1 or not 1 <= self.slide_ms <= self.duration_ms:
            raise ValueError(
                f"window duration {self.duration_ms} ms and slide {self.slide_ms} ms: "
                "allowed: both >= 1 ms, the slide at most the duration (as Spark's window)"
            )

    def last_end(self, event_time_ms: int) -> int:
        """End (epoch ms, exclusive) of the latest window that holds ``event_time_ms``."""
        last_start = event_time_ms - (event_time_ms - self.start_ms) % self.slide_ms
        return last_start + self.duration_ms

    def is_late(self, event_time_ms: int, watermark_ms: int) -> bool:
        """Whether Spark would drop the tuple from every window (watermark 0: none)."""
        return watermark_ms > 0 and self.last_end(event_time_ms) <= watermark_ms

    def option(self) -> str:
        """The source option ``lateWindow``: ``<duration>,<slide>,<start>``."""
        return f"{self.duration_ms},{self.slide_ms},{self.start_ms}"

    @classmethod
    def parse_option(cls, text: str) -> EventTimeWindow:
        """Inverse of :meth:`option`.

        Raises:
            ValueError: not three whole numbers of ms, duration and slide >= 1.
        """
        try:
            duration, slide, start = (int(part) for part in text.split(","))
            return cls(duration, slide, start)
        except ValueError as exc:
            raise ValueError(
                f"{SOURCE_NAME}: lateWindow = {text!r}; allowed: '<duration ms>,<slide ms>,"
                f"<start ms>' with duration and slide >= 1 ({exc})"
            ) from exc


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed once (Spark hands them over as strings).

    Option keys (case-insensitive): ``bootstrap.servers``, ``topic``, ``stream``,
    ``schema`` (repository name), ``schemas`` (the repository as JSON),
    ``group.id``, ``maxRowsPerTrigger``, ``startingOffsets``
    (``committed``|``earliest``|``latest``), ``deadLetterTopic``,
    ``timestampMode`` (``server``|``data_source``), ``timestampField``,
    ``query`` (the reading query's name, for dead-letter headers),
    ``commitOffsets`` (``true``|``false``), ``discardBefore`` (offsets JSON in
    Spark's Kafka shape: tuples before them are skipped, never read -- how a query
    group released with ``on_hold_input = "discard"`` skips its input queue),
    ``sweepCatalog`` (the sweep catalog's SQLAlchemy URL: offsets the broker no longer
    holds are read back from their BLOBs, README.md "The sweeper service"), ``keyRequired``
    (``true``: a record without a key is dead-lettered, reason ``null-key``),
    ``maxEventTimeAheadMs`` (with ``data_source`` timestamps: an event time further
    than this after the record's Kafka timestamp is dead-lettered, reason
    ``future-event-time``), ``watermarkCheckpoint`` and ``lateWindow`` (together:
    the reading query's checkpoint directory, a local path, and its aggregation's
    event-time window as ``<duration ms>,<slide ms>,<start ms>``; a tuple whose
    latest window ended at or before the watermark Spark applies to late tuples of
    the micro-batch is dead-lettered, reason ``late``: :class:`EventTimeWindow`),
    ``maxTasks`` (most Spark tasks a micro-batch is read with; Kafka partitions are
    dealt out to them, :func:`group_ranges`; default one task per Kafka partition,
    as Spark's Kafka source), and ``kafka.<property>`` for any librdkafka property.
    """

    bootstrap_servers: str
    topic: str
    stream: str
    schema_name: str
    schemas_json: str
    group_id: str
    max_rows_per_trigger: int | None
    starting_offsets: str
    dead_letter_topic: str | None
    timestamp_mode: str
    timestamp_field: str | None
    commit_offsets: bool
    client: dict[str, str]
    query: str | None = None
    discard_before: dict[int, int] = dataclass_field(default_factory=dict)
    sweep_catalog: str | None = None
    key_required: bool = False
    max_event_time_ahead_ms: int | None = None
    watermark_checkpoint: str | None = None
    late_window: EventTimeWindow | None = None
    max_tasks: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map.

        Raises:
            ValueError: a required option is missing or a value is not allowed.
        """
        lower = {str(k).lower(): str(v) for k, v in options.items()}

        def required(key: str) -> str:
            if not lower.get(key):
                raise ValueError(f"{SOURCE_NAME}: option {key!r} is required")
            return lower[key]

        max_rows_text = lower.get("maxrowspertrigger")
        max_rows = None
        if max_rows_text:
            try:
                max_rows = int(max_rows_text)
            except ValueError:
                max_rows = 0
            if max_rows < 1:
                raise ValueError(
                    f"{SOURCE_NAME}: maxRowsPerTrigger = {max_rows_text!r}; "
                    "allowed: a whole number >= 1"
                )
        commit = lower.get("commitoffsets", "true").lower()
        if commit not in ("true", "false"):
            raise ValueError(f"{SOURCE_NAME}: commitOffsets = {commit!r}; allowed: true, false")
        starting = lower.get("startingoffsets", "committed")
        if starting not in ("committed", "earliest", "latest"):
            raise ValueError(
                f"{SOURCE_NAME}: startingOffsets = {starting!r}; "
                "allowed: committed, earliest, latest"
            )
        mode = lower.get("timestampmode", "server")
        if mode not in ("server", "data_source"):
            raise ValueError(
                f"{SOURCE_NAME}: timestampMode = {mode!r}; allowed: server, data_source"
            )
        discard_before: dict[int, int] = {}
        if lower.get("discardbefore"):
            try:
                discard_before = offsets_from_json(
                    required("topic"), json.loads(lower["discardbefore"])
                )
            except (ValueError, AttributeError) as exc:
                raise ValueError(
                    f"{SOURCE_NAME}: discardBefore = {lower['discardbefore']!r}; allowed: "
                    'offsets as {"<topic>": {"<partition>": <offset>}}'
                ) from exc
        key_required = lower.get("keyrequired", "false").lower()
        if key_required not in ("true", "false"):
            raise ValueError(f"{SOURCE_NAME}: keyRequired = {key_required!r}; allowed: true, false")
        if bool(lower.get("watermarkcheckpoint")) != bool(lower.get("latewindow")):
            given = [k for k in ("watermarkCheckpoint", "lateWindow") if lower.get(k.lower())]
            raise ValueError(
                f"{SOURCE_NAME}: watermarkCheckpoint and lateWindow go together; given: {given}"
            )
        ahead_text = lower.get("maxeventtimeaheadms")
        ahead = None
        if ahead_text:
            if not ahead_text.isdigit():
                raise ValueError(
                    f"{SOURCE_NAME}: maxEventTimeAheadMs = {ahead_text!r}; "
                    "allowed: a whole number of milliseconds >= 0"
                )
            ahead = int(ahead_text)
        max_tasks = None
        if lower.get("maxtasks"):
            if not lower["maxtasks"].isdigit() or int(lower["maxtasks"]) < 1:
                raise ValueError(
                    f"{SOURCE_NAME}: maxTasks = {lower['maxtasks']!r}; allowed: a whole number >= 1"
                )
            max_tasks = int(lower["maxtasks"])
        return cls(
            bootstrap_servers=required("bootstrap.servers"),
            topic=required("topic"),
            stream=lower.get("stream") or required("topic"),
            schema_name=required("schema"),
            schemas_json=required("schemas"),
            group_id=required("group.id"),
            max_rows_per_trigger=max_rows,
            starting_offsets=starting,
            dead_letter_topic=lower.get("deadlettertopic") or None,
            timestamp_mode=mode,
            timestamp_field=lower.get("timestampfield") or None,
            commit_offsets=commit == "true",
            client={k[len("kafka.") :]: v for k, v in lower.items() if k.startswith("kafka.")},
            query=lower.get("query") or None,
            discard_before=discard_before,
            sweep_catalog=lower.get("sweepcatalog") or None,
            key_required=key_required == "true",
            max_event_time_ahead_ms=ahead,
            watermark_checkpoint=lower.get("watermarkcheckpoint") or None,
            late_window=EventTimeWindow.parse_option(lower["latewindow"])
            if lower.get("latewindow")
            else None,
            max_tasks=max_tasks,
        )

    def consumer_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka consumer properties for this source."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            **self.client,
            **extra,
            # A missing topic is an error, never one the broker creates with its default
            # partition count (issue 26).
            "allow.auto.create.topics": False,
        }


# --------------------------------------------------------------------------- data source


class KafkaStreamDataSource(DataSource):
    """``spark.readStream.format("floodgate_kafka")``: one Kafka topic of Avro tuples.

    Register it once per SparkSession with ``spark.dataSource.register(KafkaStreamDataSource)``.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The stream's columns (see :func:`spark_schema`)."""
        opts = SourceOptions.parse(self.options)
        repository = SchemaRepository.from_json(opts.schemas_json)
        return spark_schema(opts.stream, repository.get(opts.schema_name))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        """The stream reader (one per streaming query)."""
        return KafkaStreamReader(SourceOptions.parse(self.options), schema)


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task's share of a micro-batch: ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int
    watermark_ms: int | None = None
    """The watermark for the micro-batch's late tuples (epoch ms; ``None``: no
    lateness check, :func:`batch_watermark`)."""
    batch_id: int | None = None


@dataclass(frozen=True)
class KafkaTaskPartition(InputPartition):
    """One Spark task of a micro-batch: Kafka partition ranges read one after the other.

    Spark pays for every task of a Python data source (a worker round trip, the
    reader shipped and set up: ~0.1-0.2 s a task on the 2-core development machine,
    more than decoding 15 000 flights), so a micro-batch is read with at most
    ``maxTasks`` tasks, not one per Kafka partition (``bench/README.md``, issue 9).
    """

    ranges: tuple[KafkaInputPartition, ...]

    @property
    def tuples(self) -> int:
        """Offsets spanned by the ranges (an upper bound of the tuples)."""
        return sum(r.end - r.start for r in self.ranges)


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


def batch_watermark(
    checkpoint: str, topic: str, end: Mapping[int, int], *, look_back: int = 8
) -> tuple[int, int] | None:
    """The watermark Spark applies to late tuples of the micro-batch that ends at ``end``.

    Spark writes ``<checkpoint>/offsets/<batch>`` before it plans a micro-batch: a
    version line, the batch's metadata (``batchWatermarkMs``, the event-time watermark
    its stateful operators evict state by), then one offsets line per source. The
    batch is the newest of the last ``look_back`` whose line for ``topic`` equals
    ``end``. Late tuples are judged by the *previous* batch's watermark (Spark >= 3.4,
    ``PropagateWatermarkSimulator.getInputWatermarkForLateEvents``, the default with
    ``spark.sql.streaming.statefulOperator.allowMultiple``): 0 for the first batch.

    Returns:
        ``(batch id, watermark ms)``, or ``None`` when no logged batch matches (the
        checkpoint is not a local directory, or the batch is not logged yet).
    """
    directory = os.path.join(checkpoint, "offsets")
    try:
        batches = sorted((int(n) for n in os.listdir(directory) if n.isdigit()), reverse=True)
    except OSError:
        return None
    wanted = {int(p): int(o) for p, o in end.items()}
    for batch in batches[:look_back]:
        text = local_offset_log(directory, batch)
        for logged in parse_offset_log(text or ""):
            with contextlib.suppress(ValueError, AttributeError):
                if offsets_from_json(topic, logged) == wanted:
                    previous = local_offset_log(directory, batch - 1) if batch > 0 else None
                    if previous is None:
                        return batch, 0
                    metadata = json.loads(previous.splitlines()[1])
                    return batch, int(metadata.get("batchWatermarkMs", 0))
    return None


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
        return sorted(topic.partitions)

    def _broker_read(self, read: Callable[[], _T], what: str) -> _T:
        """``read()``, tried again with exponential backoff (0.1 s to 2 s) for up to
        :data:`~pipeline.output.BROKER_WAIT_S` while it raises ``KafkaException``.

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
        """Where a query with a new checkpoint starts (option ``startingOffsets``)."""
        watermarks = self._watermarks()
        if self.options.starting_offsets == "latest":
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

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxRowsPerTrigger)`` when set, else ``ReadAllAvailable``."""
        if self.options.max_rows_per_trigger:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: available data capped by ``limit``.

        Partitions added to the topic since ``start`` join from offset 0. Under
        Trigger.AvailableNow the end never passes the target recorded by
        :meth:`prepareForTriggerAvailableNow`.
        """
        begin = self._skip_discarded(offsets_from_json(self.options.topic, start))
        latest = self._latest()
        for p in latest:
            begin.setdefault(p, 0)
        if self._available_now_target is not None:
            latest = {
                p: min(o, self._available_now_target.get(p, begin[p])) for p, o in latest.items()
            }
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = plan_batch_end(begin, latest, max_rows)
        return offsets_to_json(self.options.topic, end)

    def _skip_discarded(self, begin: Offsets) -> Offsets:
        """``begin`` moved past what option ``discardBefore`` skips."""
        skip = self.options.discard_before
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
        ranges = [
            KafkaInputPartition(self.options.topic, p, begin.get(p, 0), e, watermark, batch)
            for p, e in sorted(finish.items())
            if e > begin.get(p, 0)
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
        """Close the planning consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

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
        yield from _PartitionReader(self.options, self.schema).batches(partition.ranges)


class _PartitionReader:
    """Reads the :class:`KafkaInputPartition` ranges of one task in a Python worker."""

    #: The range being read (set by :meth:`batches`).
    partition: KafkaInputPartition

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self.options = options
        repository = SchemaRepository.from_json(options.schemas_json)
        self.codec = StreamCodec(options.stream, repository.get(options.schema_name), repository)
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        # Timestamps arrive as epoch milliseconds and dates as epoch days (logical types
        # stripped for speed): build with those, then cast the few columns concerned.
        self._raw_schema = pa.schema(
            [
                pa.field(f.name, pa.int64(), f.nullable)
                if pa.types.is_timestamp(f.type)
                else pa.field(f.name, pa.int32(), f.nullable)
                if pa.types.is_date32(f.type)
                else f
                for f in self.arrow_schema
            ]
        )
        self.fields = self.codec.schema.field_names
        # Columns built from epoch-millisecond longs / epoch-day ints (logical types stripped).
        self._time_fields = {
            f.name for f in schema.fields if isinstance(f.dataType, TimestampType)
        } - {"event_time", "_timestamp"}
        self._date_fields = {f.name for f in schema.fields if isinstance(f.dataType, DateType)}
        self._pa = pa
        self._decoder = BlockDecoder(self.codec)
        self._dead: list[tuple[Any, DeserializationError]] = []
        self._blobs: BlobReader | None = None

    def batches(self, ranges: Sequence[KafkaInputPartition]) -> Iterator[Any]:
        """Arrow record batches of ``ranges``, in order, through one consumer; the
        dead letters of all of them are sent at the end."""
        consumer = Consumer(
            # A user's kafka.* properties win over the range reader's.
            self.options.consumer_config(**{**RANGE_CONSUMER, **self.options.client})
        )
        try:
            for part in ranges:
                self.partition = part
                pending: list[Any] = []
                for fetched in self._records(consumer):
                    pending.extend(fetched)
                    while len(pending) >= ARROW_BATCH_ROWS:
                        chunk, pending = pending[:ARROW_BATCH_ROWS], pending[ARROW_BATCH_ROWS:]
                        yield from self._convert(chunk)
                if pending:
                    yield from self._convert(pending)
        finally:
            consumer.close()
        self._send_dead_letters()

    def _convert(self, messages: list[Any]) -> Iterator[Any]:
        """One Arrow record batch of ``messages`` (none if every one was refused).

        The block decoder decodes them all at once; when it cannot vouch for the
        block (a malformed tuple, an older writer schema), they are decoded one by
        one, which dead-letters exactly the bad ones.
        """
        table = self._decoder.decode([m.value() for m in messages])
        if table is not None:
            batch = self._columns(table, messages)
            if batch.num_rows:
                yield batch
            return
        dead_before = len(self._dead)
        rows: list[dict[str, Any]] = []
        kept: list[Any] = []
        for message in messages:
            row = self._decode(message)
            if row is not None:
                rows.append(row)
                kept.append(message)
        if len(self._dead) == dead_before and self._decoder.enabled:
            # Every tuple decoded alone, so the block reader is what failed: a type it
            # reads differently. Leave it off for the rest of this range.
            log.info(
                "stream %r: block decoding is off for %s[%d]; decoding tuple by tuple",
                self.options.stream,
                self.partition.topic,
                self.partition.partition,
            )
            self._decoder.enabled = False
        if rows:
            yield self._to_arrow_or_dead_letter(rows, kept)

    def _columns(self, table: Any, messages: list[Any]) -> Any:
        """The source's record batch from a block-decoded ``table`` of ``messages``:
        the stream's columns, then the metadata columns; tuples the source refuses
        (:meth:`_refusal`) are dead-lettered and left out."""
        pa = self._pa
        import pyarrow.compute as pc

        keys = [m.key() for m in messages]
        timestamps = [
            ts if kind != 0 and ts >= 0 else None for kind, ts in (m.timestamp() for m in messages)
        ]
        timestamp_col = pa.array(timestamps, pa.int64())
        options = self.options
        if options.timestamp_mode == "data_source":
            field = options.timestamp_field or ""
            event_col = (
                pc.cast(table.column(field).combine_chunks(), pa.int64())
                if field in table.column_names
                else pa.nulls(len(messages), pa.int64())
            )
        else:
            event_col = timestamp_col
        # Rows that may be refused, found by column; each is then judged on its own.
        suspects = None
        if options.key_required:
            suspects = pc.is_null(pa.array(keys, pa.binary()))
        ahead = options.max_event_time_ahead_ms
        if ahead is not None and options.timestamp_mode == "data_source":
            future = pc.greater(event_col, pc.add(timestamp_col, ahead))
            suspects = future if suspects is None else pc.or_kleene(suspects, future)
        watermark = self.partition.watermark_ms
        if options.late_window is not None and watermark is not None:
            early = pc.less(event_col, watermark)
            suspects = early if suspects is None else pc.or_kleene(suspects, early)
        refused: list[int] = []
        if suspects is not None:
            for index in pc.indices_nonzero(pc.fill_null(suspects, False)).to_pylist():
                message = messages[index]
                error = self._refusal(
                    message, keys[index], timestamps[index], event_col[index].as_py()
                )
                if error is not None:
                    self._dead.append((message, error))
                    refused.append(index)
        columns = [table.column(name).combine_chunks() for name in self.fields]
        columns += [
            event_col,
            pa.array(keys, pa.binary()),
            pa.array(np.full(len(messages), self.partition.partition, dtype=np.int32)),
            pa.array([m.offset() for m in messages], pa.int64()),
            timestamp_col,
        ]
        batch = self._cast([c.cast(f.type) for c, f in zip(columns, self._raw_schema, strict=True)])
        if refused:
            keep = np.ones(len(messages), dtype=bool)
            keep[refused] = False
            batch = batch.filter(pa.array(keep))
        return batch

    def _records(self, consumer: Consumer) -> Iterator[list[Any]]:
        """The records of ``[start, end)`` in offset order, batch by batch: from the
        broker while it holds them, from the BLOB chain where the sweeper moved them
        (unsweep; :func:`pipeline.swept.read_partition`).

        Raises:
            DataLossError: an offset neither the broker nor a BLOB holds.
        """
        part = self.partition
        if self.options.sweep_catalog and self._blobs is None:
            self._blobs = BlobReader(catalog_for(self.options.sweep_catalog))
        return read_partition(
            consumer,
            part.topic,
            part.partition,
            part.start,
            part.end,
            blobs=self._blobs,
            stall_timeout_s=READ_STALL_TIMEOUT_S,
        )

    def _decode(self, message: Any) -> dict[str, Any] | None:
        value = message.value()
        try:
            row = self.codec.decode(value if value is not None else b"", logical=False)
        except DeserializationError as exc:
            self._dead.append(
                (
                    message,
                    exc.at(
                        topic=message.topic(),
                        partition=message.partition(),
                        offset=message.offset(),
                    ),
                )
            )
            return None
        ts_type, ts = message.timestamp()
        key = message.key()
        row["_key"] = key
        row["_partition"] = message.partition()
        row["_offset"] = message.offset()
        timestamp = row["_timestamp"] = ts if ts_type != 0 and ts >= 0 else None
        if self.options.timestamp_mode == "data_source":
            event_time = row["event_time"] = row.get(self.options.timestamp_field or "")
        else:
            event_time = row["event_time"] = timestamp
        error = self._refusal(message, key, timestamp, event_time)
        if error is not None:
            self._dead.append((message, error))
            return None
        return row

    def _refusal(
        self, message: Any, key: bytes | None, timestamp: int | None, event_time: int | None
    ) -> RefusedTupleError | None:
        """Why the source refuses a decoded tuple (``null-key``, ``future-event-time``,
        ``late``), or ``None`` to keep it. Times are epoch ms."""
        refusal = None
        if key is None and self.options.key_required:
            refusal = ("null-key", "the record has no key; the stream is keyed")
        elif event_time is not None:
            ahead = self.options.max_event_time_ahead_ms
            watermark = self.partition.watermark_ms
            window = self.options.late_window
            if (
                ahead is not None
                and timestamp is not None
                and self.options.timestamp_mode == "data_source"
                and event_time > timestamp + ahead
            ):
                refusal = (
                    "future-event-time",
                    f"event time {_iso(event_time)} is {(event_time - timestamp) / 1000:,.0f} s "
                    f"after the record's timestamp {_iso(timestamp)}; at most "
                    f"{ahead / 1000:,.0f} s is accepted (max_event_time_ahead_ms)",
                )
            elif (
                window is not None
                and watermark is not None
                and window.is_late(event_time, watermark)
            ):
                refusal = (
                    "late",
                    f"event time {_iso(event_time)}: its latest window ended "
                    f"{_iso(window.last_end(event_time))}, at or before the watermark "
                    f"{_iso(watermark)} for micro-batch {self.partition.batch_id}; Spark "
                    "would drop it from the aggregation",
                )
        if refusal is None:
            return None
        reason, text = refusal
        return RefusedTupleError(
            text,
            reason=reason,
            stream=self.options.stream,
            topic=message.topic(),
            partition=message.partition(),
            offset=message.offset(),
        )

    def _to_arrow_or_dead_letter(self, rows: list[dict[str, Any]], messages: list[Any]) -> Any:
        """Arrow batch of ``rows``; a row whose values Arrow cannot hold (an Avro ``int``
        beyond 32 bits written by a careless producer, say) is dead-lettered with reason
        ``bad-value`` instead of failing every retry of the batch."""
        pa = self._pa
        try:
            return self._to_arrow(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            kept = []
            for row, message in zip(rows, messages, strict=True):
                try:
                    self._to_arrow([row])
                    kept.append(row)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    self._dead.append(
                        (
                            message,
                            DeserializationError(
                                f"a value does not fit its column: {exc}",
                                reason="bad-value",
                                stream=self.options.stream,
                                topic=message.topic(),
                                partition=message.partition(),
                                offset=message.offset(),
                            ),
                        )
                    )
            return self._to_arrow(kept)

    def _to_arrow(self, rows: list[dict[str, Any]]) -> Any:
        # from_pylist transposes in C++: ~2.3x faster than a list per column here.
        return self._cast(self._pa.RecordBatch.from_pylist(rows, schema=self._raw_schema).columns)

    def _cast(self, raw_columns: Sequence[Any]) -> Any:
        """The record batch of :func:`spark_schema` from columns of the raw schema
        (timestamps as epoch-ms longs, dates as epoch-day ints)."""
        pa = self._pa
        columns = []
        for field, column in zip(self.arrow_schema, raw_columns, strict=True):
            if pa.types.is_timestamp(field.type):
                # epoch milliseconds -> the microsecond timestamps Spark expects
                column = column.cast(pa.timestamp("ms", tz="UTC")).cast(field.type)
            elif pa.types.is_date32(field.type):
                column = column.cast(field.type)
            columns.append(column)
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)

    def _send_dead_letters(self) -> None:
        """Send undecodable tuples to the dead-letter topic, then wait for the acks.

        At least once: a retried task sends them again; the record key
        ``<query>@<topic>/<partition>/<offset>`` lets a reader drop repeats. Each
        query that reads the stream dead-letters the tuple once, under its name.
        """
        if not self._dead:
            return
        if not self.options.dead_letter_topic:
            first = self._dead[0][1]
            raise first
        producer = Producer(
            {
                "bootstrap.servers": self.options.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                **self.options.client,
            }
        )
        failures: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        for message, error in self._dead:
            headers = [
                *(message.headers() or []),
                (DLQ_REASON, error.reason.encode()),
                (DLQ_ERROR, str(error).encode()),
                (DLQ_STREAM, self.options.stream.encode()),
                (DLQ_QUERY, (self.options.query or "").encode()),
                (DLQ_TOPIC, message.topic().encode()),
                (DLQ_PARTITION, str(message.partition()).encode()),
                (DLQ_OFFSET, str(message.offset()).encode()),
            ]
            producer.produce(
                self.options.dead_letter_topic,
                key=dead_letter_key(self.options.query, message),
                value=message.value(),
                headers=headers,
                on_delivery=on_delivery,
            )
            log.warning("FG-SOURCE-001 dead-lettered: %s", error)
        remaining = producer.flush(30)
        if remaining or failures:
            raise KafkaException(
                f"dead-letter topic {self.options.dead_letter_topic!r}: {remaining} undelivered, "
                f"errors: {failures[:3]}"
            )
