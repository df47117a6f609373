"""How old a stream queue's oldest tuple is (its age, in seconds), and how long its last
stable offset has not moved (a hanging transaction).

Words (docs/glossary.md): a queue's *length* is how many tuples it holds (what Kafka's
lag exporters call consumer lag); its *age* is how long its oldest tuple has waited.
The age is exported as the ``..._queue_lag_seconds`` gauges, whose names stay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException

from pipeline.errors import BrokerError
from pipeline.kafka.clients import reader_settings
from pipeline.names import queue_age_group_id
from pipeline.queues.probe import group_catalog
from pipeline.queues.snapshot import QueueSnapshot

if TYPE_CHECKING:
    from pipeline.config import QueryGroupConfig
    from pipeline.swept.reading import BlobReader

log = logging.getLogger(__name__)


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
    soak, ``bench/soak.py``). Every reader of the stream is blocked at it until an operator
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


def age_seconds(timestamps_ms: Iterable[int], now_s: float) -> float:
    """The age of the oldest of ``timestamps_ms`` (epoch milliseconds) at ``now_s``
    (epoch seconds): 0 for no tuple, never below 0 (a producer's clock ahead of
    ours)."""
    oldest = min(timestamps_ms, default=None)
    return 0.0 if oldest is None else max(0.0, now_s - oldest / 1000.0)


class QueueAge:
    """The age of a queue's oldest unconsumed tuple, from its Kafka record timestamp:
    the ``..._lag_seconds`` gauges (docs/metrics.md). Kafka's lag exporters give a
    queue's length (tuples); its age says how stale the query group's (or the
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
            reader_settings(
                bootstrap_servers,
                client,
                group_id=queue_age_group_id(topic),
                # Uncommitted records count (an open transaction's tuples are queued
                # too), and reading them never waits for the transaction to end.
                committed_only=False,
                # One record per partition is read: no prefetch.
                own={**RANGE_CONSUMER, "queued.min.messages": 1},
            )
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

            blobs = BlobReader(group_catalog(config))
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

    def age_seconds(self, snapshot: QueueSnapshot, now_s: float | None = None) -> float:
        """The age in seconds of the queue's oldest unconsumed tuple at ``now_s``
        (epoch seconds, default now); 0 for an empty queue."""
        stamps = self.timestamps(snapshot).values()
        return age_seconds(stamps, time.time() if now_s is None else now_s)

    def close(self) -> None:
        """Close the consumer (a later reading raises ``BrokerError``)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
