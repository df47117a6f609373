"""The options of the ``floodgate_kafka`` source, parsed and checked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from pipeline.offsets import offsets_from_json

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
