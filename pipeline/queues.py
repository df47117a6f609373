"""Queue accounting: length, max and free space of input and output stream queues.

An *input stream queue* (docs/tutorials/producer.md) is the
tuples of an input stream that its query group has not processed yet. On Kafka, per partition:

    length_p = high_watermark_p - position_p - swept_p

where ``position_p`` is the slowest reading query's committed offset (each query
commits to its own consumer group, ``floodgate.<group>.<query>``; before its first
commit, a query is at the log start), and ``swept_p`` is what the sweeper moved
out of the broker into BLOBs (the sweep catalog's count; zero until a sweeper
registers one). The queue length is the sum over partitions; the free queue size
is ``max_queue_size - length`` (the back-pressure rule of the input stream queues:
``StreamInput.free_queue_size()``, docs/tutorials/producer.md).

:class:`QueueBudget` is the client side of the bound: between two reads of the
broker, a producer counts what it sends itself, so one producer can never make
the queue exceed its max, whatever the broker's state lags behind (property-
tested in ``tests/unit/pipeline/test_queue_budget.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.errors import BrokerError
from pipeline.kafka.retries import broker_retrying

if TYPE_CHECKING:
    from pipeline.config import QueryGroupConfig
    from pipeline.swept.catalog import SweepCatalog
    from pipeline.swept.reading import BlobReader

log = logging.getLogger(__name__)


def _catalog(config: QueryGroupConfig) -> SweepCatalog:
    """The query group's sweep catalog (one per URL per process)."""
    from pipeline.swept.catalog import catalog_for  # SQLAlchemy, only for swept groups

    assert config.query_group.sweep_catalog_url
    return catalog_for(config.query_group.sweep_catalog_url)


@dataclass(frozen=True)
class PartitionQueue:
    """One partition's share of a queue.

    Attributes:
        high: the high watermark (next offset to be written).
        log_start: the first offset the broker still holds.
        committed: the slowest reader's committed offset; ``None`` before any commit.
        swept: tuples of ``[position, high)`` held in BLOBs instead of the broker.
    """

    high: int
    log_start: int = 0
    committed: int | None = None
    swept: int = 0

    @property
    def position(self) -> int:
        """Where the slowest reader is: its commit, or the log start before it has one."""
        return self.log_start if self.committed is None else max(self.committed, self.log_start)

    @property
    def length(self) -> int:
        """Tuples of this partition still queued in the broker."""
        return max(0, self.high - self.position - self.swept)


@dataclass(frozen=True)
class QueueSnapshot:
    """A queue's state as read from the broker at one moment.

    Attributes:
        stream: the stream's name.
        max_queue_size: the configured bound, in tuples.
        partitions: per partition :class:`PartitionQueue`.
        taken_at: ``time.monotonic()`` when it was read.
    """

    stream: str
    max_queue_size: int
    partitions: Mapping[int, PartitionQueue]
    taken_at: float = field(default_factory=time.monotonic)

    @property
    def length(self) -> int:
        """Queue length in tuples (sum over partitions)."""
        return sum(p.length for p in self.partitions.values())

    @property
    def free_queue_size(self) -> int:
        """``max_queue_size - length``, never below 0 (tuples)."""
        return max(0, self.max_queue_size - self.length)

    @property
    def free_ratio(self) -> float:
        """Free space as a ratio of the max, 0..1."""
        return self.free_queue_size / self.max_queue_size if self.max_queue_size else 0.0


def slowest_commits(
    commits: Iterable[Mapping[int, int | None]], partitions: Iterable[int]
) -> dict[int, int | None]:
    """Per partition, the slowest of several readers' committed offsets.

    A reader with no commit on a partition is at the log start there, which is
    behind any commit: the result is then ``None`` for that partition.
    """
    result: dict[int, int | None] = {}
    readers = list(commits)
    for p in partitions:
        values = [c.get(p) for c in readers]
        result[p] = (
            None
            if not values or any(v is None for v in values)
            else min(v for v in values if v is not None)
        )
    return result


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
    resent across a broker restart (found by the soak, issue 8).
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
        self._client_config = {
            "bootstrap.servers": bootstrap_servers,
            **(client or {}),
            # The metadata request for the topic must not create it (librdkafka's default
            # for an admin client, a producer handle, is true): issue 26.
            "allow.auto.create.topics": False,
        }
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
            swept = _catalog(config)
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
            swept = _catalog(config)
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
        would create it with its default partition count, not the configured one
        (issue 26). So the metadata asked for is every topic's (a request that names
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
            reader = self._group_readers[group] = Consumer(
                {**self._client_config, "group.id": group, "enable.auto.commit": False}
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


class StableOffsetWatch:
    """How long an output stream's transactions have kept ``read_committed`` readers
    waiting: per partition, the time its last stable offset (LSO) has stayed at one
    offset below the high watermark.

    A transaction open for a micro-batch holds the LSO for seconds; the transaction
    coordinator aborts one left open past ``transaction.timeout.ms`` (60 s here,
    :data:`pipeline.spark.sink.TRANSACTION_TIMEOUT_S`). An LSO unmoved for longer belongs
    to a *hanging transaction* (Kafka's KIP-664, fixed for good by KIP-890): records
    in a transaction the coordinator does not know, which no producer will end.
    noida-db 0.2.3 leaves one when it restarts during a transaction (found by the
    soak, issue 8). Every reader of the stream is blocked at it until an operator
    aborts it (``kafka-transactions.sh abort``; noida-db: a restart).
    """

    def __init__(self) -> None:
        self._since: dict[int, tuple[int, float]] = {}
        #: Per partition, seconds its LSO has stayed unmoved below its high watermark,
        #: as of the last :meth:`observe` (partitions with none left out).
        self.stuck_s: dict[int, float] = {}

    def observe(self, stable: Mapping[int, int], high: Mapping[int, int], now: float) -> float:
        """Take one reading (``now``: monotonic seconds); return the longest time, s, a
        partition's LSO has stayed unmoved below its high watermark (0: none)."""
        self.stuck_s = {}
        for partition, end in high.items():
            lso = stable.get(partition, end)
            if lso >= end:
                self._since.pop(partition, None)
                continue
            seen = self._since.get(partition)
            if seen is None or seen[0] != lso:
                self._since[partition] = (lso, now)
                continue
            self.stuck_s[partition] = now - seen[1]
        for partition in set(self._since) - set(high):
            del self._since[partition]
        return max(self.stuck_s.values(), default=0.0)


class QueueBudget:
    """How many tuples one producer may still send, between reads of the broker.

    After a read (:meth:`refresh`), the free space is the snapshot's, less the
    tuples this producer had in flight *before* the read began (they were not in
    the high watermark yet, or were: counting them again only errs on the safe
    side). Every send is then counted against it until the next read. Since
    consumption only ever frees space, the estimate never exceeds the truth, and
    one producer can never make ``length + in flight`` exceed the max.

    Several producers each count only their own sends, and see the others' tuples
    only once the broker has acknowledged them. Each may fill the free space ``F``
    it saw, and no more (a later read only ever shows less free space while
    nothing is consumed), so ``P`` producers together overshoot the max by at most
    ``(P - 1) * F``. The bound is tight when producers start together: a new
    producer sends its first batches before its connection is even up, so none
    sees the others' (measured: three fresh producers, ``F`` = 800, overshoot
    1 600). Producers already running, reading before every put
    (``queue_refresh_interval_ms = 0``), overshoot by what the others have in
    flight: measured 300 for the same three. Where several producers must not
    overshoot at all, give each its own share of ``max_queue_size``.

    Args:
        max_queue_size: the bound, tuples.
    """

    def __init__(self, max_queue_size: int) -> None:
        self.max_queue_size = max_queue_size
        self._free_at_refresh = 0
        self._sent_since_refresh = 0
        self.refreshed = False

    def refresh(self, length: int, in_flight_before: int) -> None:
        """Take a fresh queue length read from the broker.

        Args:
            length: the queue length read (tuples in the broker, not yet processed).
            in_flight_before: tuples this producer had sent but not seen acknowledged
                when the read began.
        """
        self._free_at_refresh = self.max_queue_size - length - in_flight_before
        self._sent_since_refresh = 0
        self.refreshed = True

    @property
    def available(self) -> int:
        """Tuples this producer may still send before the next read."""
        return max(0, self._free_at_refresh - self._sent_since_refresh)

    def try_reserve(self, count: int) -> bool:
        """Count ``count`` tuples as sent if they fit; all or nothing."""
        if count <= self.available:
            self._sent_since_refresh += count
            return True
        return False


def oldest_offsets(snapshot: QueueSnapshot) -> dict[int, int]:
    """Per partition with unconsumed tuples, the offset of the oldest one.

    That is the slowest reader's committed offset, or the log start before its first
    commit; a partition whose readers are at its high watermark is left out. The
    offset may lie below the log start: the sweeper moved it into a BLOB (or
    retention deleted it, which :class:`QueueAge` then skips).
    """
    oldest = {}
    for p, queue in snapshot.partitions.items():
        start = queue.log_start if queue.committed is None else queue.committed
        if start < queue.high:
            oldest[p] = start
    return oldest


def lag_seconds(timestamps_ms: Iterable[int], now_s: float) -> float:
    """The age of the oldest of ``timestamps_ms`` (epoch milliseconds) at ``now_s``
    (epoch seconds): 0 for no tuple, never below 0 (a producer's clock ahead of
    ours)."""
    oldest = min(timestamps_ms, default=None)
    return 0.0 if oldest is None else max(0.0, now_s - oldest / 1000.0)


class QueueAge:
    """The age of a queue's oldest unconsumed tuple, from its Kafka record timestamp:
    the ``..._lag_seconds`` gauges (docs/metrics.md). Lag in tuples is what Kafka
    lag exporters give; lag in time says how stale the query group's (or the
    reception's) view is.

    For each partition with unconsumed tuples (:func:`oldest_offsets` of a
    :class:`QueueSnapshot`), it reads the one record at the slowest reader's
    position: from the broker, or, for a swept queue, from the BLOB that holds it.
    The timestamp is the producer's ``CreateTime`` or the broker's
    ``LogAppendTime``, as the topic's ``message.timestamp.type`` says.

    Args:
        bootstrap_servers: the cluster.
        topic: the queue's topic.
        blobs: the queue's BLOB reader when it is swept; ``None`` otherwise.
        client: extra librdkafka properties.
        timeout_s: how long one partition's read may make no progress; a partition
            that does not answer in time is left out of that reading.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topic: str,
        blobs: BlobReader | None = None,
        client: Mapping[str, str | int | float | bool] | None = None,
        timeout_s: float = 2.0,
    ) -> None:
        from confluent_kafka import Consumer

        from pipeline.swept.reading import RANGE_CONSUMER

        self.topic = topic
        self.blobs = blobs
        self.timeout_s = timeout_s
        self._consumer: Consumer | None = Consumer(
            {
                **(client or {}),
                **RANGE_CONSUMER,
                "bootstrap.servers": bootstrap_servers,
                "group.id": f"floodgate.queue-age.{topic}",  # never commits
                "enable.auto.commit": False,
                # One record per partition is read: no prefetch. Uncommitted records
                # count (an open transaction's tuples are queued too), and reading
                # them never waits for the transaction to end.
                "queued.min.messages": 1,
                "isolation.level": "read_uncommitted",
                "allow.auto.create.topics": False,  # issue 26: never a 1-partition topic
            }
        )

    @classmethod
    def for_stream(
        cls, config: QueryGroupConfig, stream: str, *, output: bool, bootstrap_servers: str
    ) -> QueueAge:
        """The reader of an input (or, with ``output``, an output) stream queue of a
        query group; it reads BLOBs too where :class:`QueueProbe` counts them: every
        input stream of a swept group, and output streams marked ``swept``."""
        if output:
            topic = config.output_streams[stream].topic
            swept = config.output_streams[stream].swept
        else:
            topic = config.input_streams[stream].topic
            swept = bool(config.query_group.sweep_catalog_url)
        blobs = None
        if swept:
            from pipeline.swept.reading import BlobReader

            blobs = BlobReader(_catalog(config))
        return cls(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            blobs=blobs,
            client=config.kafka.client,
        )

    def timestamps(self, snapshot: QueueSnapshot) -> dict[int, int]:
        """Per partition with unconsumed tuples, the oldest one's timestamp (epoch ms).

        Raises:
            BrokerError: the reader is closed.
        """
        from confluent_kafka import KafkaException

        from pipeline.errors import DataLossError

        if self._consumer is None:
            raise BrokerError(f"topic {self.topic!r}: the queue age reader is closed")
        found: dict[int, int] = {}
        for p, start in oldest_offsets(snapshot).items():
            queue = snapshot.partitions[p]
            if start < queue.log_start and self.blobs is None:
                start = queue.log_start  # deleted by retention: the oldest left
            try:
                timestamp = self._first_timestamp(p, start, queue.high)
            except DataLossError as exc:  # not swept after all: retention deleted it
                left = queue.log_start if exc.available_from is None else exc.available_from
                if left <= start or left >= queue.high:
                    continue
                try:
                    timestamp = self._first_timestamp(p, left, queue.high)
                except (DataLossError, KafkaException):
                    continue
            except KafkaException:
                continue  # no answer in time: this reading goes without the partition
            if timestamp is not None:
                found[p] = timestamp
        return found

    def _first_timestamp(self, partition: int, start: int, end: int) -> int | None:
        from pipeline.swept.reading import read_partition

        assert self._consumer is not None
        batches = read_partition(
            self._consumer,
            self.topic,
            partition,
            start,
            end,
            blobs=self.blobs,
            batch_records=1,
            stall_timeout_s=self.timeout_s,
        )
        try:
            for batch in batches:
                for record in batch:
                    kind, timestamp = record.timestamp()
                    if kind != 0:  # TIMESTAMP_NOT_AVAILABLE
                        return int(timestamp)
                    return None
        finally:
            batches.close()
        return None

    def lag_seconds(self, snapshot: QueueSnapshot, now_s: float | None = None) -> float:
        """The age in seconds of the queue's oldest unconsumed tuple at ``now_s``
        (epoch seconds, default now); 0 for an empty queue."""
        stamps = self.timestamps(snapshot).values()
        return lag_seconds(stamps, time.time() if now_s is None else now_s)

    def close(self) -> None:
        """Close the consumer (a later reading raises ``BrokerError``)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
