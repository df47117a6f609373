"""The options of the ``floodgate_kafka`` source, typed: what a query group hands to
``spark.readStream.format("floodgate_kafka")`` (:meth:`SourceOptions.to_options`).

The source on the JVM (``jvm/``, ``io.floodgate.spark.SourceOptions``) parses and
checks them; ``tests/golden/options/cases.json`` is the reviewed specification of
what it makes of an option map.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from pipeline.offsets import topic_offsets_to_json

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

    The source on the JVM parses that map (``io.floodgate.spark.SourceOptions``): it
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
    min_rows_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    #: ``fields``: the stream's fields the queries read (``None``: all). The JVM source
    #: decodes only these.
    fields: tuple[str, ...] | None = None

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
