"""The options of the ``floodgate_kafka`` source, parsed and checked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from pipeline.offsets import offsets_from_json
from pipeline.serde.codec import StreamCodec
from pipeline.serde.confluent import ENCODINGS, stream_codec
from pipeline.serde.schemas import SchemaRepository

#: Short name to use with ``spark.readStream.format(...)``.
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
    holds are read back from their BLOBs, docs/architecture.md, "The sweeper"), ``keyRequired``
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
    as Spark's Kafka source), ``maxEventTimeDriftMs`` (micro-batches aligned in event
    time: no partition is read more than this past the least one,
    :mod:`pipeline.spark.alignment`) with ``idlePartitionTimeoutMs`` (a partition whose
    head stands still this long holds nobody back; default 10 000), ``encoding``
    (``single-object``|``confluent``: :mod:`pipeline.serde.confluent`) with
    ``schemaRegistry.<property>`` (the ``SchemaRegistryClient`` configuration, ``url``
    first), and ``kafka.<property>`` for any librdkafka property.
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
    max_event_time_drift_ms: int | None = None
    idle_partition_timeout_ms: int = 10_000
    encoding: str = "single-object"
    schema_registry: dict[str, str] = dataclass_field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map.

        Raises:
            ValueError: a required option is missing or a value is not allowed (the
                message names the option and the allowed values).
        """
        opts = OptionMap(options)
        topic = opts.required("topic")
        if bool(opts.get("watermarkCheckpoint")) != bool(opts.get("lateWindow")):
            given = [k for k in ("watermarkCheckpoint", "lateWindow") if opts.get(k)]
            raise ValueError(
                f"{SOURCE_NAME}: watermarkCheckpoint and lateWindow go together; given: {given}"
            )
        late_window = opts.get("lateWindow")
        idle = opts.whole("idlePartitionTimeoutMs", minimum=0, unit="milliseconds")
        return cls(
            bootstrap_servers=opts.required("bootstrap.servers"),
            topic=topic,
            stream=opts.get("stream") or topic,
            schema_name=opts.required("schema"),
            schemas_json=opts.required("schemas"),
            group_id=opts.required("group.id"),
            max_rows_per_trigger=opts.whole("maxRowsPerTrigger", minimum=1),
            starting_offsets=opts.choice(
                "startingOffsets", ("committed", "earliest", "latest"), "committed"
            ),
            dead_letter_topic=opts.get("deadLetterTopic"),
            timestamp_mode=opts.choice("timestampMode", ("server", "data_source"), "server"),
            timestamp_field=opts.get("timestampField"),
            commit_offsets=opts.flag("commitOffsets", default=True),
            client=opts.prefixed("kafka."),
            query=opts.get("query"),
            discard_before=opts.offsets("discardBefore", topic),
            sweep_catalog=opts.get("sweepCatalog"),
            key_required=opts.flag("keyRequired", default=False),
            max_event_time_ahead_ms=opts.whole(
                "maxEventTimeAheadMs", minimum=0, unit="milliseconds"
            ),
            watermark_checkpoint=opts.get("watermarkCheckpoint"),
            late_window=EventTimeWindow.parse_option(late_window) if late_window else None,
            max_tasks=opts.whole("maxTasks", minimum=1),
            max_event_time_drift_ms=opts.whole(
                "maxEventTimeDriftMs", minimum=0, unit="milliseconds"
            ),
            idle_partition_timeout_ms=10_000 if idle is None else idle,
            encoding=opts.choice("encoding", ENCODINGS, "single-object"),
            schema_registry=opts.prefixed("schemaregistry."),  # keys come lower-cased
        )

    def codec(self) -> StreamCodec:
        """The stream's codec in its ``encoding``, with the schema repository of
        option ``schemas`` (:func:`~pipeline.serde.confluent.stream_codec`).

        Raises:
            SchemaError: the schema is not in the repository, or ``confluent``
                without ``schemaRegistry.url``.
        """
        repository = SchemaRepository.from_json(self.schemas_json)
        return stream_codec(
            self.stream,
            repository.get(self.schema_name),
            repository,
            encoding=self.encoding,
            topic=self.topic,
            registry=self.schema_registry,
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


class OptionMap:
    """Spark's option map for the source, read by kind: option keys are
    case-insensitive (Spark's ``CaseInsensitiveStringMap``) and values are strings.

    Every reader raises ``ValueError`` naming the option, the value given and what is
    allowed.

    Args:
        options: the options as Spark hands them over.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._values = {str(k).lower(): str(v) for k, v in options.items()}

    def get(self, key: str) -> str | None:
        """The value of ``key``, or ``None`` when missing or empty."""
        return self._values.get(key.lower()) or None

    def required(self, key: str) -> str:
        """The value of ``key``.

        Raises:
            ValueError: ``key`` is missing or empty.
        """
        value = self.get(key)
        if value is None:
            raise ValueError(f"{SOURCE_NAME}: option {key!r} is required")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        """The value of ``key``, one of ``allowed`` (``default`` when missing).

        Raises:
            ValueError: another value.
        """
        value = self._values.get(key.lower(), default)
        if value not in allowed:
            raise ValueError(f"{SOURCE_NAME}: {key} = {value!r}; allowed: {', '.join(allowed)}")
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        """``true`` or ``false`` (any case).

        Raises:
            ValueError: another value.
        """
        value = self._values.get(key.lower(), str(default)).lower()
        if value not in ("true", "false"):
            raise ValueError(f"{SOURCE_NAME}: {key} = {value!r}; allowed: true, false")
        return value == "true"

    def whole(self, key: str, *, minimum: int, unit: str = "") -> int | None:
        """A whole number at least ``minimum``, or ``None`` when missing.

        Raises:
            ValueError: not a whole number, or below ``minimum``.
        """
        text = self.get(key)
        if text is None:
            return None
        value = int(text) if text.isdigit() else None
        if value is None or value < minimum:
            what = f"a whole number of {unit}" if unit else "a whole number"
            raise ValueError(f"{SOURCE_NAME}: {key} = {text!r}; allowed: {what} >= {minimum}")
        return value

    def offsets(self, key: str, topic: str) -> dict[int, int]:
        """Per-partition offsets of ``topic`` in Spark's Kafka JSON shape
        (:func:`~pipeline.offsets.offsets_from_json`); empty when missing.

        Raises:
            ValueError: not that JSON.
        """
        text = self.get(key)
        if text is None:
            return {}
        try:
            return offsets_from_json(topic, json.loads(text))
        except (ValueError, AttributeError) as exc:
            raise ValueError(
                f"{SOURCE_NAME}: {key} = {text!r}; allowed: "
                'offsets as {"<topic>": {"<partition>": <offset>}}'
            ) from exc

    def prefixed(self, prefix: str) -> dict[str, str]:
        """Every option under ``prefix``, the prefix removed (``kafka.<property>``)."""
        return {k[len(prefix) :]: v for k, v in self._values.items() if k.startswith(prefix)}
