"""Reading a stream queue from the broker (and the sweep catalog): :class:`QueueProbe`."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.errors import BrokerError
from pipeline.kafka.clients import kafka_settings, reader_settings
from pipeline.kafka.retries import broker_retrying
from pipeline.queues.snapshot import PartitionQueue, QueueSnapshot, slowest_commits

if TYPE_CHECKING:
    from pipeline.config import QueryGroupConfig
    from pipeline.swept.catalog import SweepCatalog

log = logging.getLogger(__name__)


def group_catalog(config: QueryGroupConfig) -> SweepCatalog:
    """The query group's sweep catalog (one per URL per process)."""
    from pipeline.swept.catalog import catalog_for

    assert config.query_group.sweep_catalog_url
    return catalog_for(config.query_group.sweep_catalog_url)


class SweptCounter(Protocol):
    """What the sweep catalog tells queue accounting: swept tuples no longer count in a
    queue's length (docs/architecture.md, "The sweeper")."""

    def swept(self, topic: str, partition: int, position: int) -> int:
        """Tuples of ``[position, high)`` of a partition that are held in BLOBs."""


class NothingSwept:
    """The :class:`SweptCounter` before a sweeper exists: nothing is swept."""

    def swept(self, topic: str, partition: int, position: int) -> int:
        return 0


#: Kafka error codes of a request sent with stale leadership metadata
#: (:meth:`QueueProbe._renew_after`; the Java client refreshes its metadata on the same
#: ones before it retries a ListOffsets, KAFKA-9535).
_LEADERSHIP_ERRORS = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    }
)


class QueueProbe:
    """Reads a queue's state from the broker.

    Args:
        bootstrap_servers: the cluster.
        stream: the stream's name (for snapshots and errors).
        topic: the stream's topic.
        groups: the consumer groups that read it (the queries of the query group).
        max_queue_size: the bound, tuples.
        swept: the sweep catalog's counts (default: nothing swept).
        client: extra librdkafka properties.
        timeout_s: per broker request.

    One :meth:`snapshot` costs two ``ListOffsets`` requests (admin client) and one
    ``OffsetFetch`` per group, issued while they are in flight. The commits are read
    through a consumer per group that never subscribes (``Consumer.committed``), not
    the admin client's ``list_consumer_group_offsets``: librdkafka 2.16.1 aborts the
    whole process (``rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt >
    0`` in ``rd_kafka_admin_coord_request``) when a coordinator admin request is
    resent across a broker restart (found by the soak, ``bench/soak.py``).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        stream: str,
        topic: str,
        groups: Iterable[str],
        max_queue_size: int,
        swept: SweptCounter | None = None,
        client: Mapping[str, str | int | float | bool] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.stream = stream
        self.topic = topic
        self.groups = list(groups)
        self.max_queue_size = max_queue_size
        self.swept = swept or NothingSwept()
        self.timeout_s = timeout_s
        # The metadata request for the topic must not create it (librdkafka's default
        # for an admin client, a producer handle, is true): kafka_settings sets it false.
        self._bootstrap_servers = bootstrap_servers
        self._pass_through = dict(client or {})
        self._client_config = kafka_settings(bootstrap_servers, client)
        self._admin: AdminClient | None = AdminClient(self._client_config)
        self._group_readers: dict[str, Consumer] = {}
        self._partitions: list[int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_input_stream(
        cls,
        config: QueryGroupConfig,
        stream: str,
        *,
        bootstrap_servers: str,
        swept: SweptCounter | None = None,
    ) -> QueueProbe:
        """The probe of an input stream queue: read by the consumer groups of the
        queries that read the stream, bounded by its resolved ``max_queue_size``; swept
        tuples are counted from ``swept``, else from the group's sweep catalog."""
        if swept is None and config.query_group.sweep_catalog_url:
            swept = group_catalog(config)
        return cls(
            bootstrap_servers=bootstrap_servers,
            stream=stream,
            topic=config.input_streams[stream].topic,
            groups=[config.consumer_group(q) for q in config.readers(stream)],
            max_queue_size=config.input_settings(stream).max_queue_size,
            swept=swept,
            client=config.kafka.client,
        )

    @classmethod
    def for_output_stream(
        cls,
        config: QueryGroupConfig,
        stream: str,
        *,
        bootstrap_servers: str,
        also: Iterable[str] = (),
        swept: SweptCounter | None = None,
    ) -> QueueProbe:
        """The probe of an output stream queue: read by the stream's reception groups
        (and the groups in ``also``), bounded by its resolved ``max_queue_size``; for a
        ``swept`` output stream, swept tuples are counted from ``swept``, else from the
        group's sweep catalog."""
        if swept is None and config.output_streams[stream].swept:
            swept = group_catalog(config)
        groups = config.reception_groups(stream)
        return cls(
            bootstrap_servers=bootstrap_servers,
            stream=stream,
            topic=config.output_streams[stream].topic,
            groups=[*groups, *(g for g in also if g not in groups)],
            max_queue_size=config.output_settings(stream).max_queue_size,
            swept=swept,
            client=config.kafka.client,
        )

    def partitions(self) -> list[int]:
        """The topic's partitions (cached; call :meth:`forget_partitions` after a resize).

        The topic is never created here: a broker with ``auto.create.topics.enable``
        would create it with its default partition count, not the configured one.
        So the metadata asked for is every topic's (a request that names
        no topic creates none, whatever the broker honours of
        ``allow.auto.create.topics``, false on these clients too).

        Raises:
            BrokerError: the topic does not exist (the message says how to create it),
                or the broker did not answer.
        """
        if self._partitions is None:
            try:
                metadata = self._client().list_topics(timeout=self.timeout_s)
            except KafkaException as exc:
                raise BrokerError(
                    f"stream {self.stream!r}: cannot read the metadata of topic "
                    f"{self.topic!r}: {exc}"
                ) from exc
            topic = metadata.topics.get(self.topic)
            missing = topic is None or (
                topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if topic is None or missing:
                raise BrokerError(
                    f"stream {self.stream!r}: topic {self.topic!r} does not exist; Floodgate "
                    "does not let the broker auto-create it (it would get the broker's default "
                    "partition count): start the query group, which creates its topics with "
                    "the configured partitions, or create it with "
                    "pipeline.kafka.topics.ensure_topics(bootstrap, query_group_config.topics())"
                )
            if topic.error is not None or not topic.partitions:
                raise BrokerError(
                    f"stream {self.stream!r}: topic {self.topic!r} is not available: "
                    f"{topic.error or 'no partitions'}"
                )
            self._partitions = sorted(topic.partitions)
        return self._partitions

    def _client(self) -> AdminClient:
        if self._admin is None:
            raise BrokerError(f"stream {self.stream!r}: the queue probe is closed")
        return self._admin

    def _renew_after(self, exc: BaseException) -> None:
        """Replace the admin client after a leadership error (caller holds the lock).

        The admin client's ``ListOffsets`` sends the leader epoch of its metadata cache,
        and the topic is not one the handle refreshes on its own (it was read with a
        request for every topic, which creates none: see :meth:`partitions`). After an
        Apache Kafka broker restarts or a leader moves, every later request of that
        handle is ``FENCED_LEADER_EPOCH`` (or ``NOT_LEADER_OR_FOLLOWER``) until the
        cache expires (``metadata.max.age.ms``, 15 min): seen by the soak and the fault
        tests. A new handle reads fresh metadata on its first request; the next
        attempt of :meth:`snapshot` uses it.
        """
        error = exc.args[0] if exc.args else None
        code = error.code() if isinstance(error, KafkaError) else None
        if code in _LEADERSHIP_ERRORS and self._admin is not None:
            self._admin = AdminClient(self._client_config)

    def _group_reader(self, group: str) -> Consumer:
        """The consumer that reads ``group``'s commits (created once, never subscribes)."""
        reader = self._group_readers.get(group)
        if reader is None:
            # It reads the group's commits and never commits: a reader that never commits
            # named by the group it reads.
            reader = self._group_readers[group] = Consumer(
                reader_settings(self._bootstrap_servers, self._pass_through, group_id=group)
            )
        return reader

    def close(self) -> None:
        """Let go of the clients (a later :meth:`snapshot` raises ``BrokerError``)."""
        with self._lock:
            self._admin = None
            readers, self._group_readers = self._group_readers, {}
        for reader in readers.values():
            reader.close()

    def forget_partitions(self) -> None:
        """Re-read the partition list on the next snapshot."""
        self._partitions = None

    def snapshot(self, *, wait_s: float = 0.0) -> QueueSnapshot:
        """The queue's state now.

        Args:
            wait_s: how long to keep trying while the broker does not answer (a
                restart, a leader election: librdkafka's ``_TRANSPORT``,
                ``_TIMED_OUT``, "no leaders found"), seconds, with exponential
                backoff from 0.1 s to 2 s; 0: one try.

        Raises:
            BrokerError: the broker did not answer within ``timeout_s`` (and
                ``wait_s``); the message says for how long it was tried.
        """
        if wait_s <= 0:
            return self._snapshot()
        started = time.monotonic()
        retrying = broker_retrying(
            BrokerError,
            wait_s,
            lambda attempt, error: log.warning(
                "FG-QUEUE-001 stream %s: broker not answering, retrying the queue read "
                "(attempt %d, %.1f s so far): %s",
                self.stream,
                attempt,
                time.monotonic() - started,
                error,
            ),
        )
        try:
            return retrying(self._snapshot)
        except BrokerError as exc:
            raise BrokerError(
                f"{exc} (tried for {time.monotonic() - started:.1f} s, wait_s = {wait_s:g})"
            ) from exc

    def _snapshot(self) -> QueueSnapshot:
        from confluent_kafka import KafkaException

        with self._lock:
            partitions = self.partitions()
            tps = [TopicPartition(self.topic, p) for p in partitions]
            admin = self._client()
            latest: dict[TopicPartition, Any] = {}
            earliest: dict[TopicPartition, Any] = {}
            try:
                latest = admin.list_offsets(
                    {tp: OffsetSpec.latest() for tp in tps}, request_timeout=self.timeout_s
                )
                earliest = admin.list_offsets(
                    {tp: OffsetSpec.earliest() for tp in tps}, request_timeout=self.timeout_s
                )
                commits = []
                for group in self.groups:
                    committed = self._group_reader(group).committed(tps, timeout=self.timeout_s)
                    failed = [tp for tp in committed if tp.error is not None]
                    if failed:
                        raise KafkaException(failed[0].error)
                    commits.append(
                        {
                            tp.partition: (
                                tp.offset if tp.offset is not None and tp.offset >= 0 else None
                            )
                            for tp in committed
                        }
                    )
            except KafkaException as exc:
                for future in (*latest.values(), *earliest.values()):
                    with contextlib.suppress(Exception):
                        future.result()  # nothing of ours left pending in librdkafka
                self._renew_after(exc)
                raise BrokerError(
                    f"stream {self.stream!r}: cannot read queue state of {self.topic!r}: {exc}"
                ) from exc
            try:
                highs = {tp.partition: f.result().offset for tp, f in latest.items()}
                starts = {tp.partition: f.result().offset for tp, f in earliest.items()}
            except KafkaException as exc:
                self._renew_after(exc)
                raise BrokerError(
                    f"stream {self.stream!r}: cannot read queue state of {self.topic!r}: {exc}"
                ) from exc
        slowest = slowest_commits(commits, partitions) if commits else dict.fromkeys(partitions)
        queues = {}
        for p in partitions:
            base = PartitionQueue(high=highs[p], log_start=starts[p], committed=slowest[p])
            swept = self.swept.swept(self.topic, p, base.position)
            queues[p] = PartitionQueue(base.high, base.log_start, base.committed, swept)
        return QueueSnapshot(self.stream, self.max_queue_size, queues)

    def last_stable_offsets(self) -> dict[int, int]:
        """Per partition, the last stable offset: the end of what ``read_committed``
        readers can read (below it, every transaction has ended). An open transaction
        keeps it below the high watermark until it commits or aborts.

        Raises:
            BrokerError: the broker did not answer within ``timeout_s``.
        """
        from confluent_kafka import IsolationLevel, KafkaException

        with self._lock:
            tps = [TopicPartition(self.topic, p) for p in self.partitions()]
            futures = self._client().list_offsets(
                {tp: OffsetSpec.latest() for tp in tps},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=self.timeout_s,
            )
            try:
                return {tp.partition: f.result().offset for tp, f in futures.items()}
            except KafkaException as exc:
                for future in futures.values():
                    with contextlib.suppress(Exception):
                        future.result()
                self._renew_after(exc)
                raise BrokerError(
                    f"stream {self.stream!r}: cannot read last stable offsets of "
                    f"{self.topic!r}: {exc}"
                ) from exc
