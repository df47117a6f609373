"""A query group file's model: its ``[query_group]`` and ``[queries.<name>]``
sections and the whole file, :class:`QueryGroupConfig`, which resolves each stream's
settings, derives the group's names (through :mod:`pipeline.names`) and makes each
stream's codec."""

from __future__ import annotations

import re
import typing
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from pipeline.config.clusters import KafkaConfig, SchemaRegistryConfig, SparkConfig
from pipeline.config.durations import duration_ms
from pipeline.config.hosts import BindHost, HostName
from pipeline.config.section import Identifier, Section, TopicName
from pipeline.config.streams import (
    SYSTEM_DEFAULTS,
    InputStreamConfig,
    OutputStreamConfig,
    ResolvedStreamSettings,
    StreamSettings,
)
from pipeline.names import (
    DEFAULT_CONSUMER_GROUP_PREFIX,
    dead_letter_topic,
    query_group_id,
    reception_group_id,
)

if typing.TYPE_CHECKING:
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository


#: Longest real-time batch: its write tasks' transactions stay open that long, and a
#: broker's ``transaction.max.timeout.ms`` is 15 minutes by default.
MAX_REAL_TIME_CHECKPOINT_INTERVAL_MS = 600_000

#: Where running query groups write ``<name>.json`` with their endpoint's URL.
DEFAULT_CONTROL_DIR = ".floodgate/run"


class QueryGroupSection(StreamSettings):
    """The ``[query_group]`` section: identity, trigger, and group-level settings."""

    name: Identifier
    """The query group's name: its consumer groups (``<prefix>.<name>.<query>``), its
    checkpoint root (``{name}`` in ``checkpoint_dir``), its dead-letter topic
    (``<name>.dead-letter``) and its control file (``<control_dir>/<name>.json``) derive
    from it."""
    trigger: Literal["processing-time", "real-time"] = "processing-time"
    """How every query of the group runs. ``processing-time``: micro-batches, one each
    ``trigger_interval_ms``. ``real-time``: Spark's Real-Time Mode (Spark 4.1+,
    ``trigger(realTime=...)``): one long-running task per input partition writes each
    tuple as it is read, and a batch ends, with its checkpoint, each
    ``real_time_checkpoint_interval``; every query needs ``output_mode = "update"``, a
    task slot per input partition, and a shape Spark runs in that mode
    (docs/real-time-mode.md)."""
    trigger_interval_ms: Annotated[int, Field(ge=0, le=86_400_000)] = 1_000
    """Processing-time trigger interval of every query; 0 starts each micro-batch as soon
    as the previous one ends. Unused with ``trigger = "real-time"``."""
    real_time_checkpoint_interval: str = "10 seconds"
    """With ``trigger = "real-time"``: how long each real-time batch lasts, a Spark
    duration (``"10 seconds"``, ``"1 minute"``). Not a latency: tuples are written as
    they are read; this is how often the query checkpoints, commits its input offsets
    and, with ``delivery = "exactly-once"``, makes its output visible. At least
    Spark's ``spark.sql.streaming.realTimeMode.minBatchDuration`` (5 s by default),
    at most 10 minutes."""
    delivery: Literal["exactly-once", "at-least-once"] = "exactly-once"
    """How output tuples reach their stream. ``exactly-once``: each write task's output
    in one Kafka transaction, committed at the end of its batch, so ``read_committed``
    readers see it then, and a replay writes nothing twice. ``at-least-once``: an
    idempotent producer without transactions sends each tuple at once, readable as
    soon as the broker has it; a batch replayed after a crash writes its tuples again
    (duplicates, never a loss). With ``trigger = "real-time"``, ``exactly-once`` makes
    output visible once per ``real_time_checkpoint_interval`` and needs a query with no
    shuffle (a write task commits the input position its output covers); a query with
    a shuffle, such as an aggregation, takes ``at-least-once``
    (docs/real-time-mode.md)."""
    no_data_micro_batches: bool = True
    """Whether a query runs a micro-batch with no new tuples when the watermark has
    moved (Spark's ``spark.sql.streaming.noDataMicroBatches.enabled``, set on the group's
    own session). Such a batch is how ``append`` mode emits the windows the watermark
    closed and how state past the watermark is evicted; in ``update`` and ``complete``
    mode it emits nothing, and ``false`` leaves the eviction to the next batch with
    data, saving a micro-batch's fixed cost after each one. Spark records a
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
    allowed_hosts: list[HostName] = Field(default_factory=list)
    """Host names the metrics and control endpoint (and ``floodgate produce``'s
    ``/metrics``) answer to besides IP addresses and ``localhost`` (the compose stack's
    ``query-group``); another ``Host`` is answered 400 (DNS rebinding)."""
    metrics_port: Annotated[int, Field(ge=0, le=65_535)] = 0
    """Port of the metrics and control endpoint (``/metrics``, ``/status``, ``/release``,
    ``/stop``); 0 picks a free one, announced in the log and the control file."""
    sweep_catalog_url: str | None = None
    """The sweep catalog (SQLAlchemy URL) of the sweeper that sweeps this group's
    queues (``sweeper/``): the source reads offsets the broker no longer
    holds back from their BLOBs, and swept tuples stop counting in queue lengths.
    ``None``: not swept (an offset the broker lost is a data-loss error)."""
    control_dir: str = DEFAULT_CONTROL_DIR
    """Where a running query group writes ``<name>.json`` with its endpoint's URL, for
    ``floodgate query-group status|release|stop NAME`` on the same host."""
    allow_unauthenticated_spark: bool = False
    """Run on a Spark cluster (a master other than ``local[...]`` and
    ``local-cluster[...]``) without ``spark.authenticate``: anyone who reaches the
    driver's or an executor's ports then talks to them as an executor would. ``false``
    refuses to start such a driver (:func:`pipeline.spark.session.check_cluster_security`)."""

    @field_validator("real_time_checkpoint_interval")
    @classmethod
    def _check_interval(cls, value: str) -> str:
        ms = duration_ms(value)
        if not 1 <= ms <= MAX_REAL_TIME_CHECKPOINT_INTERVAL_MS:
            raise ValueError(
                f"{value!r} is out of range: a real-time batch lasts at least 1 ms (and "
                "Spark's realTimeMode.minBatchDuration, 5 s by default) and at most 10 minutes"
            )
        return value

    @property
    def real_time_checkpoint_interval_ms(self) -> int:
        """``real_time_checkpoint_interval`` in milliseconds."""
        return duration_ms(self.real_time_checkpoint_interval)

    @property
    def real_time(self) -> bool:
        """Whether the group's queries run in Spark's Real-Time Mode."""
        return self.trigger == "real-time"


class QueryConfig(Section):
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


class QueryGroupConfig(Section):
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

    def checkpoint(self, query: str) -> str:
        """A query's checkpoint location: ``<checkpoint_root>/<query>`` (Spark's
        ``checkpointLocation``: its offset and commit logs, its state)."""
        return f"{self.checkpoint_root.rstrip('/')}/{query}"

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
