"""A stream's settings and sections: the settings that resolve system defaults ->
``[query_group]`` -> the stream's own section, and the ``[input_streams.<name>]`` and
``[output_streams.<name>]`` sections."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from pipeline.config.durations import SPARK_DURATION
from pipeline.config.section import Identifier, Section, TopicName


class StreamSettings(Section):
    """Settings that resolve system defaults -> query group -> stream.

    Every field is optional here; ``None`` means "inherit from the level above".
    """

    partitions: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """Partitions of the stream's topic when Floodgate creates it."""
    replication_factor: Annotated[int, Field(ge=1, le=32)] | None = None
    """Replication factor of the stream's topic when Floodgate creates it; unset at
    every level: the broker's ``default.replication.factor`` (KIP-464), so a 3-broker
    cluster configured for 3 replicas gets them without a word in the file."""
    max_tuples_per_trigger: Annotated[int, Field(ge=1)] | None = None
    """Most tuples one micro-batch reads from an input stream (the source's
    ``maxRowsPerTrigger``, Spark's ``ReadMaxRows``); ``0`` is not allowed -- leave it
    unset at every level for no limit."""
    max_queue_size: Annotated[int, Field(ge=1)] | None = None
    """Most tuples the stream's queue may hold (the stream data platform's
    ``stream.maxQueueSize``)."""
    free_input_queue_size_threshold: Annotated[int, Field(ge=0, le=100)] | None = None
    """Percent of free space at or below which producers are told the queue is filling
    (the stream data platform's ``stream.freeInputQueueSizeThreshold``)."""
    resume_free_queue_size_threshold: Annotated[int, Field(ge=0, le=100)] | None = None
    """Percent of free space a blocked ``put`` waits for before it sends (the
    resume check of a stream data platform's producer, built into the client)."""
    queue_refresh_interval_ms: Annotated[int, Field(ge=0, le=60_000)] | None = None
    """Longest a producer goes without reading the queue's state from the broker; in
    between it counts its own sends. 0 reads before every put."""


#: The system defaults: the first of the three levels.
SYSTEM_DEFAULTS = StreamSettings(
    partitions=4,
    replication_factor=None,
    max_tuples_per_trigger=50_000,
    max_queue_size=100_000,
    free_input_queue_size_threshold=20,
    resume_free_queue_size_threshold=50,
    queue_refresh_interval_ms=200,
)


class ResolvedStreamSettings(Section):
    """A stream's settings after the three levels are resolved."""

    partitions: int
    replication_factor: int | None
    max_tuples_per_trigger: int | None
    max_queue_size: int
    free_input_queue_size_threshold: int
    resume_free_queue_size_threshold: int
    queue_refresh_interval_ms: int


#: The values of a stream's ``encoding`` key (:mod:`pipeline.serde.confluent`).
Encoding = Literal["single-object", "confluent"]

#: The values of an input stream's ``key_encoding`` key
#: (:data:`pipeline.serde.confluent.KEY_ENCODINGS`).
KeyEncoding = Literal["raw", "confluent"]


class InputStreamConfig(StreamSettings):
    """One ``[input_streams.<name>]`` section. The name is the SQL view name."""

    topic: TopicName
    """The Kafka topic that carries the stream; the query group creates it at start
    with the stream's ``partitions`` when it is missing."""
    schema_: Identifier = Field(alias="schema")
    """Name of the Avro schema in the schema repository (``schemas/<schema>.avsc``)."""
    encoding: Encoding = "single-object"
    """How the stream's tuples are framed on the wire: ``single-object`` (Avro
    single-object encoding; writer schemas found in ``schema_dir`` by fingerprint) or
    ``confluent`` (the Confluent wire format, a Schema Registry's schema id and the
    Avro body, as Kafka Connect, ksqlDB and Confluent's clients read and write it;
    needs ``[schema_registry] url``; the subject is ``<topic>-value``)."""
    timestamp_mode: Literal["server", "data_source"] = "server"
    """``server``: the event time is the Kafka record timestamp; ``data_source``: the
    event time is the field ``timestamp_field`` of the tuple (the stream data platform's
    two timestamp modes)."""
    timestamp_field: str | None = None
    """With ``timestamp_mode = "data_source"``: the field of the schema that holds the
    event time (required then, refused with ``server``)."""
    watermark: str | None = None
    """Spark watermark delay on ``event_time`` (``"2 hours"``); unset: no watermark."""
    starting_offsets: Literal["committed", "earliest", "latest"] = "committed"
    """Where a query with a new checkpoint starts: the consumer group's committed
    offsets (earliest where none), the log start, or the high watermark."""
    starting_timestamp_ms: Annotated[int, Field(ge=0)] | None = None
    """Where a query with a new checkpoint starts instead of ``starting_offsets``: in each
    partition, the first tuple whose Kafka timestamp is at or after this (ms since the
    epoch; the source's option ``startingTimestamp``, as Spark's). Not with
    ``starting_offsets``."""
    starting_timestamp_strategy: Literal["error", "latest"] | None = None
    """With ``starting_timestamp_ms``: what a partition with no tuple at or after it does:
    ``error`` (unset: Spark's default) fails the query (as Spark's
    ``startingOffsetsByTimestampStrategy``), ``latest`` starts it at its high watermark."""
    key: list[str] = Field(default_factory=list)
    """Fields whose values, joined with ``|``, form the Kafka key the client writes
    (empty: no key; ``murmur2_random`` then spreads tuples at random). A keyed stream
    requires every key field: the client refuses a tuple without one
    (``NullKeyError``), and the queries dead-letter a record without a key
    (reason ``null-key``)."""
    key_encoding: KeyEncoding = "raw"
    """How the Kafka key is written: ``raw`` (the ``key`` fields' values joined with
    ``|``, :class:`~pipeline.serde.codec.TupleKey`) or ``confluent`` (the ``key`` fields
    as an Avro record, ``<Schema>Key``, in the Confluent wire format under the subject
    ``<topic>-key``, Confluent's ``TopicNameStrategy``; needs ``key`` and
    ``[schema_registry] url``; :class:`~pipeline.serde.confluent.ConfluentKey`). With
    ``confluent`` the source gives the ``key`` column as a struct of the key fields,
    decoded as the value's fields are (``_key`` keeps the key's bytes)."""
    max_event_time_ahead_ms: Annotated[int, Field(ge=0)] = 3_600_000
    """With ``timestamp_mode = "data_source"``: how far an event time may be ahead of now
    (the client refuses the tuple: ``EventTimeError``) or of its record's Kafka
    timestamp (the queries dead-letter it, reason ``future-event-time``), ms. Default:
    one hour, the default of Kafka 4.0's ``log.message.timestamp.after.max.ms``."""
    max_event_time_drift_ms: Annotated[int, Field(ge=0)] | None = None
    """Micro-batches aligned in event time: no partition of the stream is read more than
    this (ms) past the partition that is furthest behind, so the watermark cannot pass
    tuples a partition has yet to deliver (the micro-batch is planned by offsets, then
    each partition's end is moved back to its first tuple beyond the bound). Unset: by
    offsets only, as Spark's Kafka source plans; then ``watermark`` must cover the
    whole skew of the partitions' heads."""
    idle_partition_timeout_ms: Annotated[int, Field(ge=0)] = 10_000
    """With ``max_event_time_drift_ms``: a partition whose head has not moved for this
    long (ms), with nothing more to read, holds no other partition back. Only time the
    source watched counts: a gap in planning (a broker away, a long micro-batch) starts
    the clock again (``IdleTracker``)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, coerce_numbers_to_str=True
    )

    @field_validator("watermark")
    @classmethod
    def _check_watermark(cls, value: str | None) -> str | None:
        if value is not None and not SPARK_DURATION.match(value):
            raise ValueError(
                "must be '<n> <unit>' with unit millisecond, second, minute, hour, day or week "
                "(e.g. '2 hours')"
            )
        return value

    @model_validator(mode="after")
    def _check_timestamp(self) -> InputStreamConfig:
        # "committed", the default, is what a dump of the model writes back: not a choice.
        if self.starting_timestamp_ms is not None and self.starting_offsets != "committed":
            raise ValueError(
                "starting_timestamp_ms and starting_offsets go not together (both say where "
                "a new checkpoint starts); allowed: one of them"
            )
        if self.starting_timestamp_ms is None and self.starting_timestamp_strategy is not None:
            raise ValueError("starting_timestamp_strategy is only used with starting_timestamp_ms")
        if self.key_encoding == "confluent" and not self.key:
            raise ValueError(
                "key_encoding 'confluent' needs key (the fields of the key record); "
                "allowed: key_encoding 'raw', or name the key fields"
            )
        if self.timestamp_mode == "data_source" and not self.timestamp_field:
            raise ValueError("timestamp_mode 'data_source' needs timestamp_field")
        if self.timestamp_mode == "server" and self.timestamp_field:
            raise ValueError("timestamp_field is only used with timestamp_mode 'data_source'")
        return self


class OutputStreamConfig(StreamSettings):
    """One ``[output_streams.<name>]`` section."""

    topic: TopicName
    """The Kafka topic the stream's query writes to, in Kafka transactions; the query
    group creates it at start with the stream's ``partitions`` when it is missing."""
    schema_: Identifier = Field(alias="schema")
    """Name of the Avro schema of the output tuples (``schemas/<schema>.avsc``); the
    query's columns are matched to its fields by name."""
    encoding: Encoding = "single-object"
    """How the stream's tuples are framed on the wire: ``single-object`` (Avro
    single-object encoding; writer schemas found in ``schema_dir`` by fingerprint) or
    ``confluent`` (the Confluent wire format, a Schema Registry's schema id and the
    Avro body, as Kafka Connect, ksqlDB and Confluent's clients read and write it;
    needs ``[schema_registry] url``; the subject is ``<topic>-value``)."""
    key: list[str] = Field(default_factory=list)
    """Columns whose values, joined with ``|``, form the Kafka key (empty: no key)."""
    reception_groups: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Consumer groups of the data reception applications that read the stream; the
    output stream queue is what the slowest of them has not read yet. Default:
    ``<prefix>.<query group>.<stream>.reception``."""
    swept: bool = False
    """Let the sweeper sweep this output stream queue into BLOBs (an output
    queue with a registered reader); needs the query group's
    ``sweep_catalog_url``. Every reception group must then read through
    :class:`pipeline.client.reception.StreamOutput`, which reads swept tuples back: a plain
    Kafka consumer would find them gone from the broker."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, coerce_numbers_to_str=True
    )
