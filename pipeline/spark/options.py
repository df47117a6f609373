"""The options of the ``floodgate_kafka`` source, parsed and checked."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from pipeline.offsets import topic_offsets_to_json
from pipeline.serde.codec import StreamCodec
from pipeline.serde.confluent import ENCODINGS, KEY_ENCODINGS, ConfluentKey, stream_codec
from pipeline.serde.schemas import SchemaRepository

#: Short name to use with ``spark.readStream.format(...)``: the source on the JVM
#: (``jvm/``, :mod:`pipeline.spark.jvm`), whose jar every Floodgate session loads.
SOURCE_NAME = "floodgate_kafka"

#: The Python source's name (:class:`~pipeline.spark.source.KafkaStreamDataSource`),
#: the reference implementation, chosen per query group with ``source = "python"``:
#: Spark refuses a Python data source under a name a JVM source already has.
PYTHON_SOURCE_NAME = "floodgate_kafka_python"

#: The sources a query group reads its input streams with (``query_group.source``).
SOURCES = ("jvm", "python")


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


#: Spark's Kafka source options the source refuses, and why (docs/reference/spark-kafka-options.md).
REFUSED_OPTIONS: dict[str, str] = {
    "endingOffsets": (
        "it applies to batch queries only (Spark's Kafka source refuses it in streaming "
        "queries too), and the source is a streaming source"
    ),
    "startingTimestamp": "offsets by timestamp are not supported; use startingOffsets",
    "startingOffsetsByTimestamp": "offsets by timestamp are not supported; use startingOffsets",
    "startingOffsetsByTimestampStrategy": (
        "offsets by timestamp are not supported; use startingOffsets"
    ),
    "endingTimestamp": "it applies to batch queries only",
    "endingOffsetsByTimestamp": "it applies to batch queries only",
    "minPartitions": (
        "the source never splits a Kafka partition over tasks; it groups them (maxTasks) instead"
    ),
    "maxRecordsPerPartition": (
        "the source never splits a Kafka partition over tasks; bound a micro-batch "
        "with maxOffsetsPerTrigger"
    ),
}

#: ``kafka.<property>`` options the source refuses, and why (as Spark's Kafka source
#: refuses ``auto.offset.reset``, ``enable.auto.commit``, the deserializers and
#: interceptors: the source owns what they decide).
REFUSED_CLIENT_PROPERTIES: dict[str, str] = {
    "auto.offset.reset": (
        "the source decides where to start (startingOffsets) and what a lost offset "
        "does (failOnDataLoss)"
    ),
    "enable.auto.commit": "the source commits the offsets of a micro-batch itself (commitOffsets)",
    "enable.auto.offset.store": "the source commits the offsets of a micro-batch itself",
    "key.deserializer": "a Java client property: keys are read as bytes",
    "value.deserializer": "a Java client property: values are read as bytes (decoded with schema)",
    "interceptor.classes": "a Java client property, which librdkafka does not have",
}

#: Pairs of keys that say the same thing: Floodgate's own name, then Spark's.
ALIASES: tuple[tuple[str, str], ...] = (
    ("bootstrap.servers", "kafka.bootstrap.servers"),
    ("group.id", "kafka.group.id"),
    ("maxRowsPerTrigger", "maxOffsetsPerTrigger"),
)

#: The keys that name what to read; exactly one is given.
TOPIC_KEYS = ("topic", "subscribe", "subscribePattern", "assign")

#: Spark's default ``maxTriggerDelay`` with ``minOffsetsPerTrigger``.
DEFAULT_MAX_TRIGGER_DELAY = "15m"

#: Spark's ``startingOffsets`` JSON: -2 is a partition's earliest offset, -1 its latest.
EARLIEST, LATEST = -2, -1

#: The largest whole number an option takes, and the range of an offset: a Java ``long``,
#: as the JVM source (``io.floodgate.spark.SourceOptions``) and Spark's Kafka source read them.
MAX_WHOLE = 2**63 - 1

#: The largest Kafka partition number (a Java ``int``).
MAX_PARTITION = 2**31 - 1

_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000}
_TIME_UNITS_MS |= {"h": 3_600_000, "d": 86_400_000}


def time_string_ms(key: str, text: str) -> int:
    """Spark's time string (``JavaUtils.timeStringAsMs``: a whole number with an optional
    unit ``us``, ``ms``, ``s``, ``m``/``min``, ``h``, ``d``; no unit is ms) in ms, at
    most :data:`MAX_WHOLE` (as Spark's ``TimeUnit.convert`` saturates).

    Raises:
        ValueError: another text (names ``key``).
    """
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS_MS):
        raise ValueError(
            f"{SOURCE_NAME}: {key} = {text!r}; allowed: a whole number with a unit "
            f"({', '.join(_TIME_UNITS_MS)}; none is ms), as Spark's time strings"
        )
    return min(int(int(match.group(1)) * _TIME_UNITS_MS.get(match.group(2), 1)), MAX_WHOLE)


def topic_matcher(pattern: str) -> Callable[[str], bool]:
    """Whether a topic's name matches ``subscribePattern``: a match anywhere in the name
    (``re.search``), as Spark's Kafka source finds its topics by default (its
    Admin-based ``SubscribePatternStrategy`` keeps a topic when
    ``regex.findFirstIn(name)`` finds one); anchor the pattern (``^...$``) to match
    whole names, as Kafka's consumer's ``subscribe(Pattern)`` does.

    The pattern is compiled by Python's :mod:`re`, the JVM source's by
    ``java.util.regex``: only their common subset means the same in both (literals,
    ``.``, classes such as ``[a-z]``, ``\\d``, ``\\w``, ``*``, ``+``, ``?``,
    ``{m,n}``, ``|``, groups ``(...)`` and ``(?:...)``); named groups, inline flags and
    Unicode classes differ.

    Raises:
        ValueError: the pattern does not compile (with :mod:`re`'s reason).
    """
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(str(exc)) from exc
    return lambda name: compiled.search(name) is not None


def json_offsets(value: Any) -> dict[str, dict[int, int]]:
    """Spark's Kafka offsets JSON ``{"<topic>": {"<partition>": <offset>}, ...}`` as an
    option gives it, strictly, for every topic it names: partitions are decimal texts of
    a Java ``int``, offsets JSON whole numbers of a Java ``long`` (as Spark's Kafka
    source reads them with json4s, ``JsonUtils.partitionOffsets``). Where
    :func:`~pipeline.offsets.offsets_from_json` would take ``"5"``, ``5.7`` or ``true``
    as an offset, this refuses them, as the JVM source does.

    Returns:
        ``{topic: {partition: offset}}``, topics and partitions in the JSON's order; a
        topic with no partitions maps to an empty dict.

    Raises:
        ValueError: another shape (names the topic, partition and offset concerned).
    """
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object: {value!r}")
    per_topic: dict[str, dict[int, int]] = {}
    for topic, per_partition in value.items():
        if not isinstance(per_partition, dict):
            raise ValueError(f"offsets of topic {topic!r} are not an object: {per_partition!r}")
        offsets: dict[int, int] = {}
        for partition, offset in per_partition.items():
            if (
                re.fullmatch(r"-?[0-9]+", partition) is None
                or not -MAX_PARTITION - 1 <= int(partition) <= MAX_PARTITION
                or isinstance(offset, bool)
                or not isinstance(offset, int)
                or not -MAX_WHOLE - 1 <= offset <= MAX_WHOLE
            ):
                raise ValueError(f"topic {topic!r}, partition {partition!r}: offset {offset!r}")
            offsets[int(partition)] = offset
        per_topic[topic] = offsets
    return per_topic


@dataclass(frozen=True)
class Reads:
    """What a source reads, as exactly one of :data:`TOPIC_KEYS` names it
    (:meth:`OptionMap.reads`).

    Attributes:
        key: the option that named it (``topic``, ``subscribe``, ``subscribePattern``
            or ``assign``).
        topics: the topics named, in the option's order (``assign``: sorted);
            ``None`` for a pattern.
        pattern: ``subscribePattern``'s regular expression (its text stripped), else
            ``None``.
        assigned: ``assign``'s partitions per topic, sorted and distinct, else
            ``None``.
    """

    key: str
    topics: tuple[str, ...] | None
    pattern: str | None = None
    assigned: dict[str, tuple[int, ...]] | None = None

    def stream_default(self) -> str:
        """The stream's name when option ``stream`` is not given: the one topic named,
        else the topics joined by ``,`` (``subscribe``, ``assign``), else the pattern."""
        if self.topics is None:
            return self.pattern or ""
        return ",".join(self.topics)


def _offsets_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """Per topic, per partition -> Spark's offsets JSON shape
    (:func:`pipeline.offsets.topic_offsets_to_json`)."""
    return topic_offsets_to_json({(t, p): o for t, ps in offsets.items() for p, o in ps.items()})


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, parsed once (Spark hands them over as strings).

    The source speaks Spark's Kafka source dialect (Structured Streaming Kafka
    Integration Guide) as well as its own; docs/reference/spark-kafka-options.md maps
    every Spark option. Keys are case-insensitive.

    What to read, exactly one of (as Spark's ``SubscribeStrategy``,
    ``SubscribePatternStrategy``, ``AssignStrategy``): ``topic`` (Floodgate's: one
    topic), ``subscribe`` (Spark's comma-separated topics: each stripped, empty names
    left out, a repeated one kept once, as the set Kafka's consumer subscribes to),
    ``subscribePattern`` (a regular expression found anywhere in the name of every
    topic of the cluster, as Spark's; re-listed at every micro-batch: :func:`topic_matcher`), or
    ``assign`` (Spark's JSON ``{"<topic>": [0, 1], ...}``: partitions of one or more
    topics). The source plans, sweeps, dead-letters and commits per topic-partition.
    Where, one of ``bootstrap.servers`` / ``kafka.bootstrap.servers``.

    Spark's names: ``maxOffsetsPerTrigger`` (= ``maxRowsPerTrigger``),
    ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (default ``15m``: a micro-batch
    waits for that many new tuples, at most that long, as Spark's
    ``KafkaMicroBatchStream.delayBatch``), ``startingOffsets`` (``earliest``,
    ``latest``, or Spark's JSON ``{"<topic>": {"0": 23, "1": -2}, ...}`` with -2 the
    earliest and -1 the latest offset, only topics read and, checked when the query
    starts, every partition read named; Floodgate adds
    ``committed``, the default when a consumer group is named, else ``latest`` as
    Spark), ``failOnDataLoss`` (default ``true``; ``false``: offsets the broker no
    longer holds are skipped with a ``FG-SOURCE-004`` warning), ``includeHeaders``
    (the ``headers`` column), ``groupIdPrefix`` (the consumer group's prefix when
    none is named: ``spark-kafka-source``), ``kafka.group.id`` (= ``group.id``), and
    ``kafka.<property>`` for librdkafka properties (:data:`REFUSED_CLIENT_PROPERTIES`
    are refused). Two keys of :data:`ALIASES` or :data:`TOPIC_KEYS` given together are
    refused, naming both; :data:`REFUSED_OPTIONS` are refused with the reason.

    Floodgate's own: ``stream`` (the stream's name in metrics, errors and dead
    letters; default :meth:`Reads.stream_default`), ``schema`` (repository name) and
    ``schemas`` (the repository as JSON; without them the columns are Spark's Kafka
    columns alone, :func:`~pipeline.spark.schema.spark_schema`), ``group.id`` (when
    named, the source commits each micro-batch's end to it), ``maxRowsPerTrigger``,
    ``deadLetterTopic``, ``timestampMode`` (``server``|``data_source``, the latter
    needs ``schema``), ``timestampField``, ``query`` (the reading query's name, for
    dead-letter headers), ``commitOffsets`` (``true``|``false``; default ``true``
    when a group is named), ``discardBefore`` (offsets JSON in Spark's Kafka shape, of
    any topics read: tuples before them are skipped, never read -- how a query group
    released with ``on_hold_input = "discard"`` skips its input queue), ``sweepCatalog`` (the sweep
    catalog's SQLAlchemy URL: offsets the broker no longer holds are read back from
    their BLOBs, docs/architecture.md, "The sweeper"), ``keyRequired`` (``true``: a
    record without a key is dead-lettered, reason ``null-key``),
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
    (``single-object``|``confluent``: :mod:`pipeline.serde.confluent`; needs
    ``schema``) with ``schemaRegistry.<property>`` (the ``SchemaRegistryClient``
    configuration, ``url`` first), ``keyEncoding`` (``raw``|``confluent``: the Kafka
    key in the Confluent wire format, an Avro record of the ``keyFields``,
    comma-separated fields of the stream's schema, :func:`~pipeline.serde.confluent.key_schema`;
    needs ``schema``, ``keyFields`` and ``schemaRegistry.url``; the ``key`` column is
    then a struct of those fields, and a key that does not decode is dead-lettered,
    reason ``bad-key``), ``fields`` (the stream's fields the queries read,
    comma-separated: the JVM source decodes only those and reads the others as null;
    this source checks the option and decodes every field, so one option map serves
    both).

    Whole numbers are at most :data:`MAX_WHOLE`; offsets JSON is read by
    :func:`json_offsets`. ``tests/golden/options/cases.json`` holds what this parser
    makes of many option maps; the JVM source's tests check its parser against it.
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
    #: decodes only these; this source decodes every field and ignores the option.
    fields: tuple[str, ...] | None = None

    @property
    def topic(self) -> str:
        """The one topic read (transitional, while the source reads one topic).

        Raises:
            ValueError: the options name several topics or a pattern.
        """
        if self.topics is None or len(self.topics) != 1:
            raise ValueError(
                f"{SOURCE_NAME}: this source reads one topic; "
                f"given {self.topics or self.topic_pattern!r}"
            )
        return self.topics[0]

    @property
    def decoded(self) -> bool:
        """Whether tuples are decoded with a schema (``schema`` given)."""
        return self.schema_name is not None

    def to_options(self) -> dict[str, str]:
        """The option map Spark hands the source, for these options: the inverse of
        :meth:`parse` (``parse(o.to_options()) == o`` for every ``o`` it returned,
        ``test_options_model.py``). This is how a query group configures the source
        (:mod:`pipeline.spark.inputs` builds a ``SourceOptions`` from its config, typed,
        and renders it here): the strings an option takes are written and read in
        this module alone, whichever source reads them.

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

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map.

        Raises:
            ValueError: a required option is missing, two keys that say the same thing
                are both given (naming both), an option is refused (with the reason),
                or a value is not allowed (naming the option and the allowed values).
        """
        opts = OptionMap(options)
        for key, why in REFUSED_OPTIONS.items():
            if opts.get(key) is not None:
                raise ValueError(f"{SOURCE_NAME}: option {key!r} is not supported: {why}")
        for own, spark in ALIASES:
            opts.exclusive(own, spark)
        reads = opts.reads()
        if bool(opts.get("watermarkCheckpoint")) != bool(opts.get("lateWindow")):
            given = [k for k in ("watermarkCheckpoint", "lateWindow") if opts.get(k)]
            raise ValueError(
                f"{SOURCE_NAME}: watermarkCheckpoint and lateWindow go together; given: {given}"
            )
        schema_name = opts.get("schema")
        schemas_json = opts.get("schemas")
        if schema_name is not None and schemas_json is None:
            opts.required("schemas")
        timestamp_mode = opts.choice("timestampMode", ("server", "data_source"), "server")
        if schema_name is None:
            needs = [
                k for k in ("schemas", "deadLetterTopic", "lateWindow") if opts.get(k) is not None
            ]
            if timestamp_mode == "data_source":
                needs.append("timestampMode")
            if needs:
                raise ValueError(
                    f"{SOURCE_NAME}: options {needs} need option 'schema' (the stream's "
                    "schema in the repository): without it the source reads raw Kafka "
                    "columns and decodes nothing"
                )
        client = opts.prefixed("kafka.")
        for key, why in REFUSED_CLIENT_PROPERTIES.items():
            if key in client:
                raise ValueError(f"{SOURCE_NAME}: option 'kafka.{key}' is not supported: {why}")
        bootstrap = client.pop("bootstrap.servers", None) or opts.get("bootstrap.servers")
        if bootstrap is None:
            raise ValueError(
                f"{SOURCE_NAME}: option 'kafka.bootstrap.servers' (or 'bootstrap.servers') "
                "is required"
            )
        group_id = client.pop("group.id", None) or opts.get("group.id")
        named_group = group_id is not None
        if group_id is None:
            # As Spark's Kafka source: a group of its own, nothing committed to it.
            prefix = opts.get("groupIdPrefix") or "spark-kafka-source"
            group_id = f"{prefix}-{uuid.uuid4()}"
        max_rows = opts.whole("maxRowsPerTrigger", minimum=1)
        if max_rows is None:
            max_rows = opts.whole("maxOffsetsPerTrigger", minimum=1)
        starting, partition_offsets = opts.starting_offsets(
            reads, default="committed" if named_group else "latest"
        )
        fail_on_data_loss = opts.flag("failOnDataLoss", default=True)
        if not fail_on_data_loss and opts.get("sweepCatalog"):
            raise ValueError(
                f"{SOURCE_NAME}: failOnDataLoss = false and sweepCatalog go not together: "
                "offsets the broker no longer holds are read back from their BLOBs, "
                "never skipped"
            )
        key_encoding = opts.choice("keyEncoding", KEY_ENCODINGS, "raw")
        key_fields = opts.names("keyFields")
        if key_encoding == "confluent":
            needs = [k for k in ("schema", "keyFields", "schemaRegistry.url") if not opts.get(k)]
            if needs:
                raise ValueError(
                    f"{SOURCE_NAME}: keyEncoding = 'confluent' needs options {needs} (the "
                    "key is an Avro record of keyFields of the stream's schema, its ids from "
                    "the Schema Registry); allowed: keyEncoding 'raw', or give them"
                )
        late_window = opts.get("lateWindow")
        idle = opts.whole("idlePartitionTimeoutMs", minimum=0, unit="milliseconds")
        delay = opts.get("maxTriggerDelay") or DEFAULT_MAX_TRIGGER_DELAY
        return cls(
            bootstrap_servers=bootstrap,
            topics=reads.topics,
            stream=opts.get("stream") or reads.stream_default(),
            schema_name=schema_name,
            schemas_json=schemas_json,
            group_id=group_id,
            max_rows_per_trigger=max_rows,
            starting_offsets=starting,
            dead_letter_topic=opts.get("deadLetterTopic"),
            timestamp_mode=timestamp_mode,
            timestamp_field=opts.get("timestampField"),
            commit_offsets=opts.flag("commitOffsets", default=named_group),
            client=client,
            query=opts.get("query"),
            discard_before=opts.offsets("discardBefore"),
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
            starting_partition_offsets=partition_offsets,
            topic_pattern=reads.pattern,
            assigned=reads.assigned,
            min_rows_per_trigger=opts.whole("minOffsetsPerTrigger", minimum=1),
            max_trigger_delay_ms=time_string_ms("maxTriggerDelay", delay),
            fail_on_data_loss=fail_on_data_loss,
            include_headers=opts.flag("includeHeaders", default=False),
            encoding=opts.choice("encoding", ENCODINGS, "single-object"),
            schema_registry=opts.prefixed("schemaregistry."),  # keys come lower-cased
            key_encoding=key_encoding,
            key_fields=key_fields,
            fields=opts.names("fields"),
        )

    def codec(self, topic: str) -> StreamCodec:
        """The stream's codec in its ``encoding`` for the tuples of ``topic``, with the
        schema repository of option ``schemas``
        (:func:`~pipeline.serde.confluent.stream_codec`; ``confluent``: the subject is
        ``<topic>-value``, Confluent's ``TopicNameStrategy``, so each topic read has
        a codec of its own).

        Raises:
            SchemaError: the schema is not in the repository, or ``confluent``
                without ``schemaRegistry.url``.
        """
        repository = SchemaRepository.from_json(self.schemas_json or "{}")
        return stream_codec(
            self.stream,
            repository.get(self.schema_name or ""),
            repository,
            encoding=self.encoding,
            topic=topic,
            registry=self.schema_registry,
        )

    def confluent_key(self, topic: str) -> ConfluentKey | None:
        """The key codec of ``keyEncoding = confluent`` for the keys of ``topic``
        (subject ``<topic>-key``; ``None`` for raw keys).

        Raises:
            SchemaError: the schema is not in the repository, or a key field is no field
                of it.
        """
        if self.key_encoding != "confluent":
            return None
        repository = SchemaRepository.from_json(self.schemas_json or "{}")
        return ConfluentKey(
            self.stream,
            repository.get(self.schema_name or ""),
            repository,
            self.key_fields or (),
            topic=topic,
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
        if value is None or not minimum <= value <= MAX_WHOLE:
            what = f"a whole number of {unit}" if unit else "a whole number"
            raise ValueError(f"{SOURCE_NAME}: {key} = {text!r}; allowed: {what} >= {minimum}")
        return value

    def offsets(self, key: str) -> dict[str, dict[int, int]]:
        """Offsets per topic and partition in Spark's Kafka JSON shape
        (:func:`json_offsets`), of any number of topics; empty when missing.

        Raises:
            ValueError: not that JSON (names the key and the value).
        """
        text = self.get(key)
        if text is None:
            return {}
        try:
            return json_offsets(json.loads(text))
        except ValueError as exc:
            raise ValueError(
                f"{SOURCE_NAME}: {key} = {text!r}; allowed: "
                'offsets as {"<topic>": {"<partition>": <offset>}}'
            ) from exc

    def exclusive(self, first: str, second: str) -> None:
        """Refuse ``first`` and ``second`` given together (two names of one thing).

        Raises:
            ValueError: both are given; names both.
        """
        if self.get(first) is not None and self.get(second) is not None:
            raise ValueError(
                f"{SOURCE_NAME}: options {first!r} and {second!r} say the same thing; "
                "give one of them"
            )

    def reads(self) -> Reads:
        """What the source reads, from exactly one of :data:`TOPIC_KEYS`.

        ``topic`` takes one topic; ``subscribe`` Spark's comma-separated list (each name
        stripped, empty ones left out, a repeated one kept once, in the list's order);
        ``subscribePattern`` a regular expression (stripped, as Spark's
        ``SubscribePatternStrategy``), which must compile here (:func:`topic_matcher`);
        ``assign`` Spark's JSON ``{"<topic>": [<partition>, ...], ...}``: one or more
        topics, each with one or more partitions (whole numbers 0 to
        :data:`MAX_PARTITION`), kept sorted and distinct.

        Raises:
            ValueError: none or several of the keys given (naming them), no topic in
                ``subscribe``, several in ``topic``, a pattern that does not compile, or
                ``assign`` not that JSON; each names the option, the value and what is
                allowed.
        """
        given = [k for k in TOPIC_KEYS if self.get(k) is not None]
        if len(given) > 1:
            raise ValueError(
                f"{SOURCE_NAME}: options {' and '.join(repr(k) for k in given)} each name "
                "what to read; give one of them"
            )
        if not given:
            raise ValueError(
                f"{SOURCE_NAME}: option 'subscribe' (or 'subscribePattern', 'topic', or "
                "'assign') is required"
            )
        key = given[0]
        text = self.required(key)
        if key == "subscribePattern":
            pattern = text.strip()
            if not pattern:
                raise ValueError(
                    f"{SOURCE_NAME}: subscribePattern = {text!r}; allowed: a regular "
                    "expression matched against topic names"
                )
            try:
                topic_matcher(pattern)
            except ValueError as exc:
                raise ValueError(
                    f"{SOURCE_NAME}: subscribePattern = {text!r}; allowed: a regular "
                    f"expression matched against topic names ({exc})"
                ) from exc
            return Reads(key, None, pattern=pattern)
        if key != "assign":
            topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
            if not topics:
                raise ValueError(
                    f"{SOURCE_NAME}: {key} = {text!r}; allowed: topic names separated by commas"
                )
            if key == "topic" and len(topics) != 1:
                raise ValueError(
                    f"{SOURCE_NAME}: topic = {text!r}; allowed: one topic (name several "
                    "with subscribe)"
                )
            return Reads(key, topics)
        allowed = (
            'allowed: {"<topic>": [<partition>, ...], ...}: one or more topics, each with '
            f"one or more partitions 0..{MAX_PARTITION}"
        )
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{SOURCE_NAME}: assign = {text!r}; {allowed}") from exc
        if (
            not isinstance(value, dict)
            or not value
            or not all(
                topic
                and isinstance(partitions, list)
                and partitions
                and all(
                    isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= MAX_PARTITION
                    for p in partitions
                )
                for topic, partitions in value.items()
            )
        ):
            raise ValueError(f"{SOURCE_NAME}: assign = {text!r}; {allowed}")
        assigned = {str(t): tuple(sorted(set(value[t]))) for t in sorted(value)}
        return Reads(key, tuple(assigned), assigned=assigned)

    def starting_offsets(
        self, reads: Reads, *, default: str
    ) -> tuple[str, dict[str, dict[int, int]]]:
        """``startingOffsets``: ``committed``, ``earliest``, ``latest`` or Spark's JSON
        of one or more topics.

        The JSON may name only topics read (``topic``, ``subscribe``, ``assign``; any
        topic with ``subscribePattern``), and with ``assign`` exactly the partitions
        assigned (Spark: "you must specify all TopicPartitions"). That every partition
        read is named is checked when the query starts, against the broker.

        Returns:
            ``(kind, offsets)``: kind one of the words or ``specific`` (then the
            offsets per topic and partition, -2 earliest, -1 latest; else empty).

        Raises:
            ValueError: another word; JSON of another shape, a topic without
                partitions, an offset below -2, a negative partition, a topic not read
                (naming it, in sorted order), or (with ``assign``) partitions other
                than those assigned (naming the first topic, in sorted order).
        """
        text = self.get("startingOffsets")
        words = ("committed", "earliest", "latest")
        if text is None:
            return default, {}
        if text.strip().lower() in words:
            return text.strip().lower(), {}
        allowed = (
            f"allowed: {', '.join(words)}, or JSON "
            '{"<topic>": {"<partition>": <offset>}, ...} with -2 for earliest and -1 '
            "for latest, as Spark's Kafka source"
        )
        try:
            offsets = json_offsets(json.loads(text))
        except ValueError as exc:
            raise ValueError(f"{SOURCE_NAME}: startingOffsets = {text!r}; {allowed}") from exc
        if (
            not offsets
            or not all(offsets.values())
            or min(o for per in offsets.values() for o in per.values()) < EARLIEST
            or min(p for per in offsets.values() for p in per) < 0
        ):
            raise ValueError(f"{SOURCE_NAME}: startingOffsets = {text!r}; {allowed}")
        if reads.topics is not None:
            for topic in sorted(offsets):
                if topic not in reads.topics:
                    raise ValueError(
                        f"{SOURCE_NAME}: startingOffsets names topic {topic!r}, which "
                        f"{reads.key} does not; allowed: the topics read "
                        f"({', '.join(repr(t) for t in reads.topics)})"
                    )
        if reads.assigned is not None:
            for topic in sorted(set(offsets) | set(reads.assigned)):
                named = sorted(offsets.get(topic, {}))
                assigned = list(reads.assigned.get(topic, ()))
                if named != assigned:
                    raise ValueError(
                        f"{SOURCE_NAME}: startingOffsets names partitions {named} of "
                        f"{topic!r} and assign {assigned}: name the same partitions (as Spark)"
                    )
        return "specific", offsets

    def names(self, key: str) -> tuple[str, ...] | None:
        """A comma-separated list of names (each stripped), or ``None`` when missing.

        Raises:
            ValueError: no name in it.
        """
        text = self.get(key)
        if text is None:
            return None
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        if not names:
            raise ValueError(f"{SOURCE_NAME}: {key} = {text!r}; allowed: names separated by commas")
        return names

    def prefixed(self, prefix: str) -> dict[str, str]:
        """Every option under ``prefix``, the prefix removed (``kafka.<property>``)."""
        return {k[len(prefix) :]: v for k, v in self._values.items() if k.startswith(prefix)}
