"""The options of the ``floodgate_kafka`` source, typed: what a query group hands to
``spark.readStream.format("floodgate_kafka")`` (:meth:`SourceOptions.to_options`).

The source on the JVM (``jvm/``, ``io.floodgate.spark.options.SourceOptions``) parses and
checks them; ``tests/golden/options/cases.json`` is the reviewed specification of
what it makes of an option map.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Literal

from pipeline.offsets import topic_offsets_to_json

#: The largest ``minPartitions`` (a Java int, as Spark's option).
_MAX_INT = 2**31 - 1

#: Most ``fetchOffset.numRetries`` the source takes.
_MAX_RETRIES = 1000

#: Short name to use with ``spark.readStream.format(...)``: the source on the JVM
#: (``jvm/``, :mod:`pipeline.spark.jvm`), whose jar every Floodgate session loads.
SOURCE_NAME = "floodgate_kafka"


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

    def option(self) -> str:
        """The source option ``lateWindow``: ``<duration>,<slide>,<start>``."""
        return f"{self.duration_ms},{self.slide_ms},{self.start_ms}"


def _offsets_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """Per topic, per partition -> Spark's offsets JSON shape
    (:func:`pipeline.offsets.topic_offsets_to_json`)."""
    return topic_offsets_to_json({(t, p): o for t, ps in offsets.items() for p, o in ps.items()})


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, typed, as a query group sets them
    (:func:`pipeline.spark.inputs.source_options`); :meth:`to_options` renders them as
    the option map Spark hands the source.

    The source on the JVM parses that map (``io.floodgate.spark.options.SourceOptions``): it
    speaks Spark's Kafka source dialect as well as its own, keys case-insensitive.
    docs/spark-source.md describes every option and
    docs/reference/spark-kafka-options.md maps every Spark option;
    ``tests/golden/options/cases.json`` specifies what the source makes of many
    option maps. A field here is one option: ``topics`` is ``subscribe`` (``assigned``
    ``assign``, ``topic_pattern`` ``subscribePattern``), ``max_rows_per_trigger``
    ``maxOffsetsPerTrigger``, ``late_window`` ``lateWindow``
    (:meth:`EventTimeWindow.option`), ``client`` the ``kafka.<property>`` options and
    ``schema_registry`` the ``schemaRegistry.<property>`` ones.
    """

    bootstrap_servers: str
    #: The topics read (``topic``, ``subscribe``; ``assign``: its topics sorted);
    #: ``None`` with ``subscribePattern``.
    topics: tuple[str, ...] | None
    stream: str
    schema_name: str | None
    schemas_json: str | None
    group_id: str
    max_rows_per_trigger: int | None
    starting_offsets: str
    dead_letter_topic: str | None
    timestamp_mode: str
    timestamp_field: str | None
    commit_offsets: bool
    client: dict[str, str]
    query: str | None = None
    #: ``discardBefore``: per topic, per partition, the first offset read.
    discard_before: dict[str, dict[int, int]] = dataclass_field(default_factory=dict)
    sweep_catalog: str | None = None
    #: ``realTimeEndsGroup``: the consumer group where each real-time task logs where it
    #: stopped, so that a batch run again reads the same input (exactly once after a
    #: shuffle); ``None``: no log.
    real_time_ends_group: str | None = None
    key_required: bool = False
    max_event_time_ahead_ms: int | None = None
    watermark_checkpoint: str | None = None
    late_window: EventTimeWindow | None = None
    max_tasks: int | None = None
    max_event_time_drift_ms: int | None = None
    idle_partition_timeout_ms: int = 10_000
    encoding: str = "single-object"
    schema_registry: dict[str, str] = dataclass_field(default_factory=dict)
    key_encoding: str = "raw"
    #: ``keyFields``: the key record's fields (``keyEncoding = confluent``).
    key_fields: tuple[str, ...] | None = None
    #: ``startingOffsets`` JSON (kind ``specific``): per topic, per partition, the
    #: offset, -2 the earliest, -1 the latest; else empty.
    starting_partition_offsets: dict[str, dict[int, int]] = dataclass_field(default_factory=dict)
    #: ``subscribePattern``: the regular expression (stripped), else ``None``.
    topic_pattern: str | None = None
    #: ``assign``: the partitions read per topic, sorted (``None``: every partition of
    #: the topics read).
    assigned: dict[str, tuple[int, ...]] | None = None
    #: ``startingTimestamp``: a new checkpoint starts each partition at its first offset
    #: whose Kafka timestamp is at or after this (epoch ms); wins over
    #: ``starting_offsets``, as Spark's precedence.
    starting_timestamp_ms: int | None = None
    #: ``startingOffsetsByTimestamp``: per topic read, per partition, that timestamp
    #: (epoch ms); wins over ``starting_offsets``. Not with ``starting_timestamp_ms``.
    starting_partition_timestamps: dict[str, dict[int, int]] = dataclass_field(default_factory=dict)
    #: ``startingOffsetsByTimestampStrategy``: a partition with no offset at or after its
    #: starting timestamp fails the query (``error``, the source's default) or starts
    #: at the latest offset (``latest``). Only with a starting timestamp.
    starting_timestamp_strategy: Literal["error", "latest"] | None = None
    #: ``minPartitions``: least Spark tasks a micro-batch is read with, a partition's
    #: range split over several (Spark's ``KafkaOffsetRangeCalculator``). Not with
    #: ``max_tasks``.
    min_partitions: int | None = None
    #: ``maxRecordsPerPartition``: most offsets one Spark task reads of a partition.
    #: Not with ``max_tasks``.
    max_records_per_partition: int | None = None
    #: ``fetchOffset.numRetries``: attempts at the driver's offset reads (the source's
    #: default 3, as Spark's).
    fetch_offset_num_retries: int | None = None
    #: ``fetchOffset.retryIntervalMs``: ms between those attempts (default 1000).
    fetch_offset_retry_interval_ms: int | None = None
    min_rows_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    #: ``fields``: the stream's fields the queries read (``None``: all). The JVM source
    #: decodes only these.
    fields: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        """Refuse values the source would refuse, naming the option and what it takes.

        Raises:
            ValueError: a starting timestamp below 0, both kinds of starting timestamp,
                timestamps for a topic not read, a strategy other than ``error`` or
                ``latest`` or one without a starting timestamp, ``minPartitions``
                outside 1 .. 2147483647, ``maxRecordsPerPartition`` under 1, either of
                them with ``maxTasks``, ``fetchOffset.numRetries`` outside 1 .. 1000, or
                ``fetchOffset.retryIntervalMs`` below 0.
        """
        _whole("startingTimestamp", self.starting_timestamp_ms, 0, "milliseconds since the epoch")
        self._check_partition_timestamps()
        if self.starting_timestamp_strategy is not None:
            if self.starting_timestamp_strategy not in ("error", "latest"):
                raise ValueError(
                    "startingOffsetsByTimestampStrategy = "
                    f"{self.starting_timestamp_strategy!r}; allowed: error, latest"
                )
            if self.starting_timestamp_ms is None and not self.starting_partition_timestamps:
                raise ValueError(
                    "startingOffsetsByTimestampStrategy is only used with startingTimestamp "
                    "or startingOffsetsByTimestamp; allowed: give one of them, or leave the "
                    "strategy out"
                )
        _whole("minPartitions", self.min_partitions, 1, "", _MAX_INT)
        _whole("maxRecordsPerPartition", self.max_records_per_partition, 1, "")
        for key, value in (
            ("minPartitions", self.min_partitions),
            ("maxRecordsPerPartition", self.max_records_per_partition),
        ):
            if value is not None and self.max_tasks is not None:
                raise ValueError(
                    f"options '{key}' and 'maxTasks' go not together: {key} splits a Kafka "
                    "partition's range over more tasks, maxTasks deals ranges out to fewer; "
                    "give one of them"
                )
        _whole("fetchOffset.numRetries", self.fetch_offset_num_retries, 1, "", _MAX_RETRIES)
        _whole("fetchOffset.retryIntervalMs", self.fetch_offset_retry_interval_ms, 0, "ms")

    def _check_partition_timestamps(self) -> None:
        timestamps = self.starting_partition_timestamps
        if not timestamps:
            return
        if self.starting_timestamp_ms is not None:
            raise ValueError(
                "startingTimestamp and startingOffsetsByTimestamp go not together (Spark's "
                "source would ignore the second); allowed: one of them"
            )
        for topic, per_partition in timestamps.items():
            if self.topics is not None and topic not in self.topics:
                raise ValueError(
                    f"startingOffsetsByTimestamp names topic {topic!r}, which is not read; "
                    f"allowed: the topics read {sorted(self.topics)}"
                )
            bad = not per_partition or any(
                type(p) is not int or p < 0 or type(t) is not int or t < 0
                for p, t in per_partition.items()
            )
            if bad:
                raise ValueError(
                    f"startingOffsetsByTimestamp of topic {topic!r} = {per_partition!r}; "
                    "allowed: one or more partitions >= 0, each to milliseconds since the "
                    "epoch >= 0"
                )

    def to_options(self) -> dict[str, str]:
        """The option map Spark hands the source, for these options. This is how a query
        group configures the source (:mod:`pipeline.spark.inputs` builds a
        ``SourceOptions`` from its config, typed, and renders it here): the strings an
        option takes are written in this module alone.

        Every option is given, defaults included, by Spark's names where Spark has one
        (``kafka.bootstrap.servers``, ``subscribe``, ``maxOffsetsPerTrigger``); the
        consumer group always (``kafka.group.id``), so ``commitOffsets`` and
        ``startingOffsets`` are given too.
        """
        if self.assigned is not None:
            what = {"assign": json.dumps({t: list(ps) for t, ps in self.assigned.items()})}
        elif self.topic_pattern is not None:
            what = {"subscribePattern": self.topic_pattern}
        else:
            what = {"subscribe": ",".join(self.topics or ())}
        starting = (
            json.dumps(_offsets_json(self.starting_partition_offsets))
            if self.starting_offsets == "specific"
            else self.starting_offsets
        )
        given: dict[str, Any] = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            **what,
            "stream": self.stream,
            "schema": self.schema_name,
            "schemas": self.schemas_json,
            "kafka.group.id": self.group_id,
            "maxOffsetsPerTrigger": self.max_rows_per_trigger,
            "minOffsetsPerTrigger": self.min_rows_per_trigger,
            "maxTriggerDelay": f"{self.max_trigger_delay_ms}ms",
            "startingOffsets": starting,
            "startingTimestamp": self.starting_timestamp_ms,
            "startingOffsetsByTimestamp": (
                json.dumps(_offsets_json(self.starting_partition_timestamps))
                if self.starting_partition_timestamps
                else None
            ),
            "startingOffsetsByTimestampStrategy": self.starting_timestamp_strategy,
            "minPartitions": self.min_partitions,
            "maxRecordsPerPartition": self.max_records_per_partition,
            "fetchOffset.numRetries": self.fetch_offset_num_retries,
            "fetchOffset.retryIntervalMs": self.fetch_offset_retry_interval_ms,
            "failOnDataLoss": self.fail_on_data_loss,
            "includeHeaders": self.include_headers,
            "deadLetterTopic": self.dead_letter_topic,
            "timestampMode": self.timestamp_mode,
            "timestampField": self.timestamp_field,
            "commitOffsets": self.commit_offsets,
            "query": self.query,
            "discardBefore": (
                json.dumps(_offsets_json(self.discard_before)) if self.discard_before else None
            ),
            "sweepCatalog": self.sweep_catalog,
            "realTimeEndsGroup": self.real_time_ends_group,
            "keyRequired": self.key_required,
            "maxEventTimeAheadMs": self.max_event_time_ahead_ms,
            "watermarkCheckpoint": self.watermark_checkpoint,
            "lateWindow": self.late_window.option() if self.late_window else None,
            "maxTasks": self.max_tasks,
            "maxEventTimeDriftMs": self.max_event_time_drift_ms,
            "idlePartitionTimeoutMs": self.idle_partition_timeout_ms,
            "encoding": self.encoding,
            "keyEncoding": self.key_encoding,
            "keyFields": ",".join(self.key_fields) if self.key_fields else None,
            "fields": ",".join(self.fields) if self.fields else None,
            **{f"kafka.{k}": v for k, v in self.client.items()},
            **{f"schemaRegistry.{k}": v for k, v in self.schema_registry.items()},
        }
        return {
            key: (str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in given.items()
            if value is not None
        }


def _whole(
    key: str, value: int | None, minimum: int, unit: str, maximum: int | None = None
) -> None:
    """Refuse ``value`` of option ``key`` unless it is ``None`` or a whole number (not a
    ``bool``) from ``minimum`` to ``maximum``, with the words the source uses.

    Raises:
        ValueError: naming the option, the value and what is allowed.
    """
    if value is None:
        return
    if type(value) is not int or value < minimum or (maximum is not None and value > maximum):
        what = f"a whole number of {unit}" if unit else "a whole number"
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise ValueError(f"{key} = {value!r}; allowed: {what} >= {minimum}{upper}")
