"""Typed configuration of a query group, loaded from TOML, with environment overrides.

A query group file declares input streams, output streams, Spark SQL queries over
the input streams, and the settings that bound them. Everything is validated with
pydantic at start: an unknown key or a bad value is refused with a
:class:`~pipeline.errors.ConfigError` that names the key, the value and what is
allowed. Nothing is validated lazily at run time.

Settings that bound a stream resolve in three levels, as in the stream data
platforms Floodgate follows ("system definition file" -> "query group file" ->
"stream definition"): the system defaults below, overridden by the
``[query_group]`` section, overridden by the stream's own section. See
:meth:`QueryGroupConfig.input_settings`.

Environment overrides:

* ``FLOODGATE_KAFKA_BOOTSTRAP`` -- the Kafka bootstrap servers; wins over
  ``[kafka] bootstrap_servers`` (:func:`pipeline.brokers.local.resolve_broker`).
* ``FLOODGATE__<SECTION>__<KEY>[__<KEY>...]`` -- any key of the file, e.g.
  ``FLOODGATE__QUERY_GROUP__TRIGGER_INTERVAL_MS=500`` or
  ``FLOODGATE__INPUT_STREAMS__FLIGHTS__TOPIC=flights-test``. Values are parsed
  as TOML scalars when they parse (``500``, ``true``, ``"x"``), else taken as
  strings, then validated like the file. Only the file's own sections are
  overridden: ``FLOODGATE__ADMISSION__*`` and ``FLOODGATE__SWEEPER__*`` are the
  services' (one environment may serve them all, as in docker-compose.yml).

*The stream data platform* cited below is the stream data processing product whose
queue rules Floodgate follows, and whose parameter names it keeps (docs/glossary.md).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
import types
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pipeline.errors import ConfigError
from pipeline.kafka.clients import check_pass_through
from pipeline.names import (
    DEFAULT_CONSUMER_GROUP_PREFIX,
    dead_letter_topic,
    query_group_id,
    reception_group_id,
)

if typing.TYPE_CHECKING:
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

#: Environment variable naming the Kafka bootstrap servers
#: (:func:`pipeline.brokers.local.resolve_broker`).
BOOTSTRAP_ENV = "FLOODGATE_KAFKA_BOOTSTRAP"
#: Prefix of environment overrides of config keys.
OVERRIDE_ENV_PREFIX = "FLOODGATE__"

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Spark's delay threshold for withWatermark: "<n> <unit>" (a subset of its interval syntax).
_INTERVAL = re.compile(r"^\s*\d+\s+(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE)

Identifier = Annotated[str, Field(pattern=_IDENTIFIER.pattern)]
TopicName = Annotated[str, Field(pattern=_TOPIC.pattern)]


class _Strict(BaseModel):
    """Base of every config section: frozen, unknown keys refused."""

    # coerce_numbers_to_str: an environment override TOPIC=123 is the string "123".
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


#: Where running query groups write ``<name>.json`` with their endpoint's URL.
DEFAULT_CONTROL_DIR = ".floodgate/run"


def check_bind_host(value: str) -> str:
    """``value`` if it is an interface an HTTP endpoint can listen on: an IPv4 address
    (``127.0.0.1`` loopback, ``0.0.0.0`` every interface) or a host name (RFC 1123
    section 2.1: labels of letters, digits and ``-``, joined by ``.``).

    Raises:
        ValueError: anything else, naming the value and what is allowed; an empty
            host among them, which uvicorn would bind to every interface (issue 26).
    """
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        labels = value.split(".")
        if not (
            0 < len(value) <= 253
            and not value.replace(".", "").isdigit()  # 999.1.1.1 is no address, nor a name
            and all(_HOST_LABEL.fullmatch(label) for label in labels)
        ):
            raise ValueError(
                f"host {value!r} is no interface to listen on; allowed: an IPv4 address "
                "(127.0.0.1 loopback, 0.0.0.0 every interface) or a host name (letters, "
                "digits, '-' and '.'); empty is refused, as it would bind every interface"
            ) from None
    return value


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")

#: The interface of an HTTP endpoint a service listens on (:func:`check_bind_host`).
BindHost = Annotated[str, AfterValidator(check_bind_host)]


class StreamSettings(_Strict):
    """Settings that resolve system defaults -> query group -> stream.

    Every field is optional here; ``None`` means "inherit from the level above".
    """

    partitions: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """Partitions of the stream's topic when Floodgate creates it."""
    replication_factor: Annotated[int, Field(ge=1, le=32)] | None = None
    """Replication factor of the stream's topic when Floodgate creates it; unset at
    every level: the broker's ``default.replication.factor`` (KIP-464), so a 3-broker
    cluster configured for 3 replicas gets them without a word in the file."""
    max_rows_per_trigger: Annotated[int, Field(ge=1)] | None = None
    """Most tuples one micro-batch reads from an input stream (Spark ``ReadMaxRows``);
    ``0`` is not allowed -- leave it unset at every level for no limit."""
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
    max_rows_per_trigger=50_000,
    max_queue_size=100_000,
    free_input_queue_size_threshold=20,
    resume_free_queue_size_threshold=50,
    queue_refresh_interval_ms=200,
)


class ResolvedStreamSettings(_Strict):
    """A stream's settings after the three levels are resolved."""

    partitions: int
    replication_factor: int | None
    max_rows_per_trigger: int | None
    max_queue_size: int
    free_input_queue_size_threshold: int
    resume_free_queue_size_threshold: int
    queue_refresh_interval_ms: int


class KafkaConfig(_Strict):
    """The ``[kafka]`` section."""

    bootstrap_servers: str | None = None
    """``host:port[,host:port...]``; ``FLOODGATE_KAFKA_BOOTSTRAP`` wins over it. Unset:
    the broker is resolved by :func:`pipeline.brokers.local.resolve_broker` (an engine named by
    ``FLOODGATE_KAFKA_ENGINE``, else Docker, else the embedded one)."""
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra librdkafka properties for every client (``security.protocol``, ``sasl.*``...);
    not those Floodgate sets itself (:data:`pipeline.kafka.clients.RESERVED_KAFKA_KEYS`)."""

    @field_validator("client")
    @classmethod
    def _check_client(
        cls, value: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        check_pass_through(value)
        return value


class SchemaRegistryConfig(_Strict):
    """The ``[schema_registry]`` section: the Schema Registry of the streams with
    ``encoding = "confluent"`` (any registry with Confluent's REST API: Confluent's
    own, Karapace, Apicurio Registry's ``/apis/ccompat/v7``)."""

    url: str | None = None
    """The registry's base URL, e.g. ``http://registry:8081``; required when a stream's
    ``encoding`` is ``confluent``."""
    basic_auth_user_info: SecretStr | None = None
    """``user:password`` for HTTP basic authentication (confluent-kafka's
    ``basic.auth.user.info``); never shown in errors or logs."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL, e.g. 'http://registry:8081'")
        return value

    def client_config(self) -> dict[str, str]:
        """confluent-kafka's ``SchemaRegistryClient`` configuration (``url``, and
        ``basic.auth.user.info`` when set); empty when no URL is set."""
        if self.url is None:
            return {}
        conf = {"url": self.url}
        if self.basic_auth_user_info is not None:
            conf["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        return conf


#: The values of a stream's ``encoding`` key (:mod:`pipeline.serde.confluent`).
Encoding = Literal["single-object", "confluent"]

#: The values of an input stream's ``key_encoding`` key
#: (:data:`pipeline.serde.confluent.KEY_ENCODINGS`).
KeyEncoding = Literal["raw", "confluent"]


class SparkConfig(_Strict):
    """The ``[spark]`` section."""

    master: str = "local[2]"
    """Used only when not already set (e.g. by ``spark-submit --master``)."""
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra Spark configuration, e.g. ``{"spark.sql.shuffle.partitions" = 2}``."""


class QueryGroupSection(StreamSettings):
    """The ``[query_group]`` section: identity, trigger, and group-level settings."""

    name: Identifier
    """The query group's name: its consumer groups (``<prefix>.<name>.<query>``), its
    checkpoint root (``{name}`` in ``checkpoint_dir``), its dead-letter topic
    (``<name>.dead-letter``) and its control file (``<control_dir>/<name>.json``) derive
    from it."""
    trigger_interval_ms: Annotated[int, Field(ge=0, le=86_400_000)] = 1_000
    """Processing-time trigger interval of every query; 0 starts each micro-batch as soon
    as the previous one ends."""
    no_data_micro_batches: bool = True
    """Whether a query runs a micro-batch with no new tuples when the watermark has
    moved (Spark's ``spark.sql.streaming.noDataMicroBatches.enabled``, set on the group's
    own session). Such a batch is how ``append`` mode emits the windows the watermark
    closed and how state past the watermark is evicted; in ``update`` and ``complete``
    mode it emits nothing, and ``false`` leaves the eviction to the next batch with
    data, saving a micro-batch's fixed cost after each one (issue 9). Spark records a
    query's watermark in the offset log of the batch *after* the one that moved it, so
    with ``false`` a query stopped after a batch with data restarts from the watermark
    before that batch: tuples late by the newer one are then aggregated (and not
    dead-lettered as late), nothing is lost."""
    checkpoint_dir: str = ".floodgate/checkpoints/{name}"
    """Spark checkpoint root; each query checkpoints under ``<checkpoint_dir>/<query>``.
    ``{name}`` is replaced by the query group's name. Any Hadoop path works."""
    dead_letter_topic: TopicName | None = None
    """Where tuples that cannot be decoded go, with the reason in headers.
    Default: ``<name>.dead-letter``."""
    consumer_group_prefix: str = DEFAULT_CONSUMER_GROUP_PREFIX
    """Each query commits its input offsets to the consumer group
    ``<prefix>.<query group>.<query>``."""
    sleep_on_over_store_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 1_000
    """How long a query sleeps before it re-checks an output stream queue that has no
    room for its micro-batch's output (the stream data platform's
    ``querygroup.sleepOnOverStore``)."""
    sleep_on_over_store_retry_count: Annotated[int, Field(ge=0, le=1_000_000)] = 10
    """Sleeps before the query group is held; 0 holds at once (the stream data
    platform's ``querygroup.sleepOnOverStoreRetryCount``)."""
    on_hold_input: Literal["retain", "discard"] = "retain"
    """What happens to the input of a held query group. ``retain``: it stays in Kafka and
    is processed after release (producers feel back-pressure through the input queue);
    ``discard``: the stream data platform's behaviour -- on release, every query starts
    from the end of its input, and the skipped tuples are counted in a metric and the log."""
    auto_release: bool = False
    """Release a held query group by itself once every output stream queue has at least
    ``resume_free_queue_size_threshold`` percent free (and room for the held batch)."""
    output_queue_check: bool = True
    """Compare each micro-batch's output with the output stream queue's free space before
    writing it. ``false`` leaves output queues unbounded (no sleep, no hold): for
    benchmarks, and output streams whose readers are known to keep up."""
    queue_metrics_interval_ms: Annotated[int, Field(ge=100, le=3_600_000)] = 5_000
    """How often the query group reads its input and output stream queues for the
    ``..._queue_length`` and ``..._queue_lag_seconds`` gauges (one ``ListOffsets`` pair,
    one ``OffsetFetch`` per consumer group and one record per non-empty partition)."""
    metrics_host: BindHost = "127.0.0.1"
    """Interface of the query group's metrics and control endpoint (``0.0.0.0`` in a
    container)."""
    metrics_port: Annotated[int, Field(ge=0, le=65_535)] = 0
    """Port of the metrics and control endpoint (``/metrics``, ``/status``, ``/release``,
    ``/stop``); 0 picks a free one, announced in the log and the control file."""
    source: Literal["jvm", "python"] = "jvm"
    """The Spark source the queries read their input streams with: ``jvm``, the
    ``floodgate_kafka`` source on the JVM (``jvm/``, shipped as a jar in the wheel), or
    ``python``, its reference implementation in Python (``floodgate_kafka_python``).
    Both take the same options, give the same columns and write the same offsets, so a
    query's checkpoint resumes under either."""
    sweep_catalog_url: str | None = None
    """The sweep catalog (SQLAlchemy URL) of the sweeper that sweeps this group's
    queues (``sweeper/``): the sources read offsets the broker no longer
    holds back from their BLOBs, and swept tuples stop counting in queue lengths.
    ``None``: not swept (an offset the broker lost is a data-loss error)."""
    control_dir: str = DEFAULT_CONTROL_DIR
    """Where a running query group writes ``<name>.json`` with its endpoint's URL, for
    ``floodgate query-group status|release|stop NAME`` on the same host."""


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
        if value is not None and not _INTERVAL.match(value):
            raise ValueError(
                "must be '<n> <unit>' with unit millisecond, second, minute, hour, day or week "
                "(e.g. '2 hours')"
            )
        return value

    @model_validator(mode="after")
    def _check_timestamp(self) -> InputStreamConfig:
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


class QueryConfig(_Strict):
    """One ``[queries.<name>]`` section: a continuous Spark SQL query and its output."""

    sql: Annotated[str, Field(min_length=1)]
    """The Spark SQL query, over views named after the input streams; its columns are
    written to the ``output`` stream by name."""
    output: Identifier
    """The output stream the query's rows are written to."""
    output_mode: Literal["append", "update", "complete"] = "append"
    """Spark output mode. ``update`` re-emits a group's row each time it changes; readers
    take the latest per key, as for a compacted topic."""
    inputs: list[Identifier] | None = None
    """The input streams the query reads; default: those whose name appears as a word
    in ``sql``. Input queue lengths are counted from the slowest of these readers."""


class QueryGroupConfig(_Strict):
    """A whole query group file."""

    query_group: QueryGroupSection
    input_streams: dict[Identifier, InputStreamConfig] = Field(min_length=1)
    output_streams: dict[Identifier, OutputStreamConfig] = Field(default_factory=dict)
    queries: dict[Identifier, QueryConfig] = Field(min_length=1)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    schema_registry: SchemaRegistryConfig = Field(default_factory=SchemaRegistryConfig)
    schema_dir: str | None = None
    """Directory of ``.avsc`` files, relative to the query group file unless absolute;
    default: the schemas Floodgate ships (``pipeline/resources.py``)."""

    def stream_registry(self, kind: str, stream: str) -> tuple[str, dict[str, str]]:
        """``(encoding, SchemaRegistryClient configuration)`` of a stream, as
        :func:`pipeline.serde.confluent.stream_codec` takes them.

        Args:
            kind: ``input`` or ``output``.
            stream: the stream's name.
        """
        declared = self.input_streams if kind == "input" else self.output_streams
        encoding = declared[stream].encoding
        return encoding, self.schema_registry.client_config() if encoding == "confluent" else {}

    def stream_codec(self, kind: str, stream: str, schemas: SchemaRepository) -> StreamCodec:
        """The codec of an input or output stream: its schema from ``schemas``, in its
        encoding (single-object, or the Confluent wire format through the registry).

        Args:
            kind: ``input`` or ``output``.
            stream: the stream's name.
            schemas: the schema repository.

        Raises:
            SchemaError: the stream's schema is not in ``schemas``.
        """
        from pipeline.serde.confluent import stream_codec

        declared = (self.input_streams if kind == "input" else self.output_streams)[stream]
        encoding, registry = self.stream_registry(kind, stream)
        return stream_codec(
            stream,
            schemas.get(declared.schema_),
            schemas,
            encoding=encoding,
            topic=declared.topic,
            registry=registry,
        )

    def input_key(self, stream: str, schemas: SchemaRepository) -> Any:
        """The key maker of an input stream in its ``key_encoding``
        (:func:`pipeline.serde.confluent.stream_key`): a
        :class:`~pipeline.serde.codec.TupleKey`, or a
        :class:`~pipeline.serde.confluent.ConfluentKey` asking the registry.

        Raises:
            SchemaError: the stream's schema is not in ``schemas``, or a key field is
                no field of it.
        """
        from pipeline.serde.confluent import stream_key

        declared = self.input_streams[stream]
        return stream_key(
            stream,
            schemas.get(declared.schema_),
            schemas,
            declared.key,
            key_encoding=declared.key_encoding,
            topic=declared.topic,
            registry=self.schema_registry.client_config(),
        )

    @property
    def name(self) -> str:
        """The query group's name."""
        return self.query_group.name

    @property
    def dead_letter_topic(self) -> str:
        """The dead-letter topic (``<name>.dead-letter`` unless set)."""
        return self.query_group.dead_letter_topic or dead_letter_topic(self.name)

    @property
    def checkpoint_root(self) -> str:
        """The checkpoint root with ``{name}`` filled in."""
        return self.query_group.checkpoint_dir.replace("{name}", self.name)

    def consumer_group(self, query: str) -> str:
        """The Kafka consumer group a query commits its input offsets to."""
        return query_group_id(self.query_group.consumer_group_prefix, self.name, query)

    def reception_groups(self, stream: str) -> list[str]:
        """The consumer groups that read an output stream (``reception_groups`` or the default)."""
        groups = self.output_streams[stream].reception_groups
        prefix = self.query_group.consumer_group_prefix
        return list(groups) or [reception_group_id(prefix, self.name, stream)]

    def readers(self, stream: str) -> list[str]:
        """Names of the queries that read an input stream (``inputs``, or a word match
        of the stream's name in the query's SQL)."""
        pattern = re.compile(rf"\b{re.escape(stream)}\b", re.IGNORECASE)
        return [
            name
            for name, query in self.queries.items()
            if (stream in query.inputs if query.inputs is not None else pattern.search(query.sql))
        ]

    def topics(self) -> dict[str, tuple[int, int | None]]:
        """Every topic the group reads or writes, with ``(partitions, replication)``:
        its input and output streams' and its dead-letter topic."""
        topics: dict[str, tuple[int, int | None]] = {}
        for name, stream in self.input_streams.items():
            s = self.input_settings(name)
            topics[stream.topic] = (s.partitions, s.replication_factor)
        for name, out in self.output_streams.items():
            s = self.output_settings(name)
            topics[out.topic] = (s.partitions, s.replication_factor)
        group = self.query_group
        topics[self.dead_letter_topic] = (group.partitions or 1, group.replication_factor)
        return topics

    def input_settings(self, stream: str) -> ResolvedStreamSettings:
        """Resolve an input stream's settings: system defaults -> query group -> stream."""
        return _resolve(self.query_group, self.input_streams[stream])

    def output_settings(self, stream: str) -> ResolvedStreamSettings:
        """Resolve an output stream's settings: system defaults -> query group -> stream."""
        return _resolve(self.query_group, self.output_streams[stream])


def _resolve(group: StreamSettings, stream: StreamSettings) -> ResolvedStreamSettings:
    values: dict[str, Any] = {}
    for field in StreamSettings.model_fields:
        value = getattr(stream, field)
        if value is None:
            value = getattr(group, field)
        if value is None:
            value = getattr(SYSTEM_DEFAULTS, field)
        values[field] = value
    return ResolvedStreamSettings(**values)


def load_query_group(path: str | Path, *, env: Mapping[str, str] | None = None) -> QueryGroupConfig:
    """Load and validate a query group file.

    Args:
        path: the TOML file.
        env: environment for overrides (default ``os.environ``); see the module docstring.

    Returns:
        The validated, frozen config.

    Raises:
        ConfigError: the file is missing or not TOML, or a key is unknown or its value
            refused. The message names the file, the dotted key, the value and what is
            allowed.
    """
    raw = read_toml(path, "query group file")
    schemas = raw.get("schema_dir")
    if isinstance(schemas, str) and not Path(schemas).is_absolute():
        raw["schema_dir"] = str(Path(path).parent / schemas)  # relative to the file
    return parse_query_group(raw, source=str(path), env=env)


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML config file, parsed.

    Raises:
        ConfigError: ``no such <what>``, or not valid TOML (with the parser's position).
    """
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such {what}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


ServiceConfig = TypeVar("ServiceConfig", bound=BaseModel)


def load_service_config(
    path: str | Path | None,
    model: type[ServiceConfig],
    *,
    section: str,
    env: Mapping[str, str] | None = None,
) -> tuple[ServiceConfig, str]:
    """A service's config file (one ``[<section>]``: the admission service, the
    sweeper): read, overridden by ``FLOODGATE__<SECTION>__KEY`` variables only (other
    sections' overrides are not the service's), and validated by ``model``.

    Args:
        path: the TOML file; ``None``: defaults and environment only.
        model: the file's pydantic model.
        section: the section's name.
        env: environment (default ``os.environ``).

    Returns:
        ``(the validated file, how to name it in errors)``.

    Raises:
        ConfigError: the file is missing or not TOML, or a key is unknown or refused
            (named with its value and what is allowed).
    """
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        raw = read_toml(path, f"{section} config file")
    prefix = f"{OVERRIDE_ENV_PREFIX}{section.upper()}__"
    ours = {k: v for k, v in env.items() if k.upper().startswith(prefix)}
    verbatim = {f"{section}.{key}" for key in secret_keys(model.model_fields[section].annotation)}
    try:
        return model.model_validate(apply_env_overrides(raw, ours, verbatim=verbatim)), source
    except ValidationError as exc:
        raise config_error(exc, source, model=model, what=f"{section} config") from None


def parse_query_group(
    raw: Mapping[str, Any], *, source: str = "<config>", env: Mapping[str, str] | None = None
) -> QueryGroupConfig:
    """Validate a query group given as a mapping (the parsed TOML).

    Args:
        raw: the parsed file.
        source: how to name the file in errors.
        env: environment for overrides (default ``os.environ``).

    Raises:
        ConfigError: as :func:`load_query_group`.
    """
    env = os.environ if env is None else env
    sections = {name.upper() for name in QueryGroupConfig.model_fields}
    ours = {
        k: v
        for k, v in env.items()
        if k.upper().startswith(OVERRIDE_ENV_PREFIX)
        and k[len(OVERRIDE_ENV_PREFIX) :].upper().split("__")[0] in sections
    }
    data = apply_env_overrides(raw, ours)
    try:
        config = QueryGroupConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, source) from None
    for name, query in config.queries.items():
        for stream in query.inputs or []:
            if stream not in config.input_streams:
                allowed = ", ".join(sorted(config.input_streams))
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key 'queries.{name}.inputs' names "
                    f"{stream!r}, which is no input stream; declared: {allowed}",
                    key=f"queries.{name}.inputs",
                    value=stream,
                    allowed=allowed,
                )
        if query.output not in config.output_streams:
            allowed = ", ".join(sorted(config.output_streams)) or "(no output streams declared)"
            raise ConfigError(
                f"{source}: invalid query group file:\n  key 'queries.{name}.output' = "
                f"{query.output!r} names no output stream; declared: {allowed}",
                key=f"queries.{name}.output",
                value=query.output,
                allowed=allowed,
            )
    if not config.query_group.sweep_catalog_url:
        for output_name, output in config.output_streams.items():
            if output.swept:
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key "
                    f"'output_streams.{output_name}.swept' "
                    "= true needs query_group.sweep_catalog_url (the sweep catalog its "
                    "readers read swept tuples back from); allowed: false, or set the catalog",
                    key=f"output_streams.{output_name}.swept",
                    value=True,
                    allowed="false, or set query_group.sweep_catalog_url",
                )
    if config.schema_registry.url is None:
        streams: list[tuple[str, str, InputStreamConfig | OutputStreamConfig]] = [
            *(("input_streams", name, s) for name, s in config.input_streams.items()),
            *(("output_streams", name, s) for name, s in config.output_streams.items()),
        ]
        for kind, stream_name, declared in streams:
            if declared.encoding == "confluent":
                key = f"{kind}.{stream_name}.encoding"
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key {key!r} = 'confluent' "
                    "needs schema_registry.url (the Schema Registry the stream's schema "
                    "ids come from); allowed: 'single-object', or set schema_registry.url",
                    key=key,
                    value="confluent",
                    allowed="single-object, or confluent with schema_registry.url",
                )
        for stream_name, declared_input in config.input_streams.items():
            if declared_input.key_encoding == "confluent":
                key = f"input_streams.{stream_name}.key_encoding"
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key {key!r} = 'confluent' "
                    "needs schema_registry.url (the Schema Registry the key schema's ids "
                    "come from); allowed: 'raw', or set schema_registry.url",
                    key=key,
                    value="confluent",
                    allowed="raw, or confluent with schema_registry.url",
                )
    _check_schema_fields(config, source)
    return config


def _check_schema_fields(config: QueryGroupConfig, source: str) -> None:
    """Refuse a stream whose ``key`` (or ``timestamp_field``) names a field its schema
    does not have: every put would otherwise fail with a ``NullKeyError`` that blames
    the tuples (issue 26).

    The schemas are those of ``schema_dir``; a directory that does not load, or a schema
    it does not hold, is refused where the schemas are loaded (the query group's start,
    :func:`pipeline.client.connector.connect`), not here.

    Raises:
        ConfigError: names the key (``input_streams.<name>.key``), the field and the
            schema's fields.
    """
    from pipeline.errors import SchemaError
    from pipeline.serde.schemas import SchemaRepository  # fastavro: only once a file is loaded

    try:
        schemas = SchemaRepository.load(config.schema_dir)
    except SchemaError:
        return
    streams: list[tuple[str, str, InputStreamConfig | OutputStreamConfig]] = [
        *(("input_streams", name, s) for name, s in config.input_streams.items()),
        *(("output_streams", name, s) for name, s in config.output_streams.items()),
    ]
    for kind, name, stream in streams:
        if stream.schema_ not in schemas.names():
            continue
        fields = schemas.get(stream.schema_).field_names
        named = [("key", field) for field in stream.key]
        if isinstance(stream, InputStreamConfig) and stream.timestamp_field:
            named.append(("timestamp_field", stream.timestamp_field))
        for what, field in named:
            if field not in fields:
                key = f"{kind}.{name}.{what}"
                allowed = ", ".join(fields)
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key {key!r} names {field!r}, "
                    f"which is no field of schema {stream.schema_!r}; its fields: {allowed}",
                    key=key,
                    value=field,
                    allowed=allowed,
                )


def bootstrap_from(config: KafkaConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The bootstrap servers named by the environment or the config, if any."""
    env = os.environ if env is None else env
    return env.get(BOOTSTRAP_ENV) or config.bootstrap_servers


def secret_keys(model: Any) -> set[str]:
    """The keys of a pydantic model whose values are secrets (``SecretStr``, optional or
    not); none when ``model`` is no pydantic model."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return set()
    return {
        name
        for name, info in model.model_fields.items()
        if info.annotation is SecretStr or SecretStr in typing.get_args(info.annotation)
    }


def apply_env_overrides(
    raw: Mapping[str, Any], env: Mapping[str, str], *, verbatim: Collection[str] = ()
) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with ``FLOODGATE__A__B=v`` overrides applied.

    A value is read as a TOML value (``250`` an int, ``true`` a bool, ``[1, 2]`` a
    list), or as text when it is none, except at the dotted keys of ``verbatim``
    (lower-case, ``admission.token``): those are taken as written, quotes and all --
    a secret such as a token is never parsed (issue 26).
    """
    data = _deep_copy(raw)
    for name, text in sorted(env.items()):
        if not name.startswith(OVERRIDE_ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(OVERRIDE_ENV_PREFIX) :].split("__") if part]
        if not path:
            continue
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    f"environment override {name}: {'.'.join(path)} crosses a scalar key",
                    key=".".join(path),
                    value=text,
                )
            node = child
        node[path[-1]] = text if ".".join(path) in verbatim else _parse_scalar(text)
    return data


def _parse_scalar(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def config_error(
    exc: ValidationError,
    source: str,
    *,
    model: type[BaseModel] | None = None,
    what: str = "query group file",
) -> ConfigError:
    """A :class:`ConfigError` from pydantic's ``exc`` that names, for the first refused
    key, the dotted key, the value (never a secret) and what is allowed; every refused
    key is listed in the message.

    Args:
        exc: the validation error.
        source: how to name the file.
        model: the config model validated (for the keys allowed where an unknown one
            was found); default :class:`QueryGroupConfig`.
        what: what the file is, for the message.
    """
    model = model or QueryGroupConfig
    lines = []
    first: dict[str, Any] | None = None
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        key = ".".join(loc) or "<file>"
        if error["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(model, loc[:-1]))
            text = f"unknown key {key!r}; allowed here: {allowed}"
            value, allowed_text = _shown(key, error.get("input")), allowed
        elif error["type"] == "missing":
            text = f"missing key {key!r}"
            value, allowed_text = None, "a value is required"
        else:
            value = _shown(key, error.get("input"))
            allowed_text = error["msg"].removeprefix("Value error, ")
            if value is _HIDDEN:
                text = f"key {key!r} is refused: {allowed_text}"
            else:
                text = f"key {key!r} = {value!r} is refused: {allowed_text}"
        lines.append(text)
        if first is None:
            first = {"key": key, "value": value, "allowed": allowed_text}
    message = f"{source}: invalid {what}:\n  " + "\n  ".join(lines)
    return ConfigError(message, **(first or {}))


#: Stands for a value that an error must not echo (a section, or a secret).
_HIDDEN = "<not shown>"
_SECRET_WORDS = ("password", "secret", "token", "sasl", "key.pem", "credential")


def _shown(key: str, value: Any) -> Any:
    """The value as an error may show it: scalars only, never a secret."""
    if isinstance(value, Mapping | list) or any(w in key.lower() for w in _SECRET_WORDS):
        return _HIDDEN
    return value


def _allowed_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    """Keys allowed at ``loc`` inside ``model`` (walking dict values and optionals)."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if origin is dict:
            annotation = typing.get_args(annotation)[1]
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = _field_by_key(annotation, part)
            if field is None:
                return []
            annotation = field
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sorted(info.alias or name for name, info in annotation.model_fields.items())
    return []


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        else:
            return annotation
