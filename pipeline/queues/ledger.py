"""The tuple ledger: where every tuple of an input stream queue is, from the broker,
the sweep catalog and the dead-letter topic.

Floodgate's promise is that a tuple handed to it is processed, still queued, swept,
dead-lettered with a reason, or reported back to its producer (the last never reaches
the topic). Per input stream and partition, with ``H`` the high watermark, ``L`` the
log start and ``C`` the slowest reading query's committed offset (0 before its first
commit), every offset of ``[0, H)`` is in exactly one place:

* **processed**: below ``C`` and not dead-lettered;
* **dead-lettered**: below ``C``, and in the dead-letter topic with a reason
  (headers ``floodgate.topic`` / ``floodgate.partition`` / ``floodgate.offset``);
* **swept**: at or above ``C`` and held in a BLOB (read back by the queries);
* **queued**: at or above ``max(C, L)``, in the broker and in no BLOB;
* **unaccounted**: in ``[C, L)`` -- not processed, and gone from the broker -- and in
  no BLOB. Retention (``retention.ms`` / ``retention.bytes``) or a ``DeleteRecords``
  removed tuples nobody read: that is data loss, and the ledger names where.

So ``H = processed + dead-lettered + swept + queued + unaccounted``, and a row
balances when ``unaccounted`` is 0. ``floodgate audit`` prints the rows (exit status
0 only when every row balances); the sweeper reconciles the queues it sweeps every
cycle and exports ``floodgate_ledger_unaccounted_tuples``
(alert ``FloodgateLedgerUnaccounted``).

Offsets are counted, not tuples: an input stream written by the back-pressure client
(idempotent, not transactional) has one tuple per offset. Tuples skipped on release
with ``on_hold_input = "discard"`` are below ``C`` and count as processed; their
number is ``floodgate_query_group_discarded_tuples_total``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.errors import BrokerError
from pipeline.kafka.clients import reader_settings
from pipeline.kafka.fetching import bounded_fetch
from pipeline.names import ledger_group_id
from pipeline.queues.probe import QueueProbe
from pipeline.queues.snapshot import PartitionQueue

if TYPE_CHECKING:
    from pipeline.config import QueryGroupConfig
    from pipeline.swept.catalog import SweepCatalog


@dataclass(frozen=True)
class LedgerRow:
    """Where the tuples of one input stream partition are (see the module docstring).

    Attributes:
        query_group / stream / topic / partition: what the row is about.
        written: offsets since the topic was created (the high watermark ``H``).
        processed: committed by the slowest reading query, less those dead-lettered.
        dead_lettered: below the commit and in the dead-letter topic.
        swept: not processed, held in BLOBs.
        queued: not processed, in the broker, in no BLOB.
        unaccounted: not processed, gone from the broker, in no BLOB (lost).
        committed: ``C`` (``None`` before the first commit).
        log_start: ``L``.
    """

    query_group: str
    stream: str
    topic: str
    partition: int
    written: int
    processed: int
    dead_lettered: int
    swept: int
    queued: int
    unaccounted: int
    committed: int | None
    log_start: int

    @property
    def balanced(self) -> bool:
        """Every offset is processed, dead-lettered, swept or queued."""
        return self.unaccounted == 0


def _covered(ranges: Iterable[tuple[int, int]], start: int, end: int) -> int:
    """Offsets of ``[start, end)`` inside the disjoint ``ranges`` (BLOBs of a chain)."""
    return sum(max(0, min(e, end) - max(s, start)) for s, e in ranges)


def ledger_row(
    queue: PartitionQueue,
    blobs: Iterable[tuple[int, int]],
    dead_offsets: Iterable[int],
    *,
    query_group: str = "",
    stream: str = "",
    topic: str = "",
    partition: int = 0,
) -> LedgerRow:
    """One partition's ledger (pure: the tests' and the property tests' entry).

    Args:
        queue: the partition's high watermark, log start and slowest commit.
        blobs: the ``[start, end)`` ranges its BLOB chain holds (disjoint).
        dead_offsets: offsets of the partition found in the dead-letter topic (the
            same offset dead-lettered by several queries counts once).
    """
    high, low = queue.high, queue.log_start
    committed = 0 if queue.committed is None else min(queue.committed, high)
    ranges = list(blobs)
    dead = sum(1 for o in set(dead_offsets) if 0 <= o < committed)
    swept = _covered(ranges, committed, high)
    queued = max(0, high - max(committed, low)) - _covered(ranges, max(committed, low), high)
    gone = max(0, min(low, high) - committed)
    unaccounted = gone - _covered(ranges, committed, min(low, high))
    return LedgerRow(
        query_group=query_group,
        stream=stream,
        topic=topic,
        partition=partition,
        written=high,
        processed=committed - dead,
        dead_lettered=dead,
        swept=swept,
        queued=queued,
        unaccounted=unaccounted,
        committed=queue.committed,
        log_start=low,
    )


class DeadLetters:
    """The offsets in a dead-letter topic, by source topic and partition, read on from
    where the last :meth:`refresh` stopped (the sweeper keeps one per query group).

    Fetches are bounded (:func:`~pipeline.kafka.fetching.bounded_fetch`): the topic of a
    long-running group holds hundreds of megabytes, more than one fetch answer may hold.

    Args:
        bootstrap_servers: the cluster.
        topic: the dead-letter topic.
        client: extra librdkafka properties.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        client: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self._consumer = Consumer(
            reader_settings(
                bootstrap_servers,
                client,
                group_id=ledger_group_id(topic),
                own={
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    # A dead-letter topic grows without bound: fetches librdkafka can receive.
                    **bounded_fetch(client),
                },
            )
        )
        self._positions: dict[int, int] = {}
        self._offsets: dict[tuple[str, int], set[int]] = defaultdict(set)
        #: ``(stream, reason)`` -> tuples, each counted at its first dead letter.
        self._counts: dict[tuple[str, str], int] = defaultdict(int)
        self._lock = threading.Lock()

    def refresh(self, timeout_s: float = 30.0) -> None:
        """Read what was dead-lettered since the last refresh (up to the high
        watermarks of now).

        Raises:
            BrokerError: the topic cannot be read, or not to its end in ``timeout_s``.
        """
        with self._lock:
            metadata = self._consumer.list_topics(self.topic, timeout=timeout_s)
            found = metadata.topics.get(self.topic)
            if found is None or found.error is not None:
                return  # no dead letter yet: the topic is made on the first one
            ends = {
                p: self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=timeout_s
                )
                for p in found.partitions
            }
            todo = {p: hi for p, (_lo, hi) in ends.items() if self._positions.get(p, 0) < hi}
            if not todo:
                return
            self._consumer.assign(
                [TopicPartition(self.topic, p, self._positions.get(p, 0)) for p in todo]
            )
            deadline = time.monotonic() + timeout_s
            while todo:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"dead-letter topic {self.topic!r}: not read to its end in "
                        f"{timeout_s:.0f} s (partitions {sorted(todo)} left)"
                    )
                for message in self._consumer.consume(num_messages=1_000, timeout=0.5):
                    p = int(message.partition() or 0)
                    offset = int(message.offset() or 0)
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            self._positions[p] = max(self._positions.get(p, 0), offset)
                            if self._positions[p] >= todo.get(p, 0):
                                todo.pop(p, None)
                            continue
                        raise BrokerError(f"dead-letter topic {self.topic!r}: {error.str()}")
                    self._take(message)
                    self._positions[p] = offset + 1
                    if self._positions[p] >= todo.get(p, 0):
                        todo.pop(p, None)

    def _take(self, message: Any) -> None:
        from pipeline.deadletter import DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, DLQ_STREAM, DLQ_TOPIC

        headers = {k: v for k, v in (message.headers() or []) if v is not None}
        try:
            source = headers[DLQ_TOPIC].decode()
            partition = int(headers[DLQ_PARTITION])
            offset = int(headers[DLQ_OFFSET])
        except (KeyError, ValueError):
            return  # not a dead letter of an input tuple (no source position)
        seen = self._offsets[(source, partition)]
        if offset in seen:
            return  # a retried task's repeat, or another query's refusal of the tuple
        seen.add(offset)
        stream = headers.get(DLQ_STREAM, source.encode()).decode(errors="replace")
        reason = headers.get(DLQ_REASON, b"unknown").decode(errors="replace")
        self._counts[(stream, reason)] += 1

    def counts(self) -> dict[tuple[str, str], int]:
        """Input tuples dead-lettered so far by ``(stream, reason)`` (the
        ``floodgate.stream`` and ``floodgate.reason`` headers), each tuple counted once,
        at its first dead letter: a retried task's repeats and other queries'
        refusals of the same tuple are not counted again (a copy)."""
        with self._lock:
            return dict(self._counts)

    def offsets(self, topic: str, partition: int) -> set[int]:
        """Offsets of ``topic[partition]`` dead-lettered so far (a copy)."""
        with self._lock:
            return set(self._offsets.get((topic, partition), ()))

    def close(self) -> None:
        self._consumer.close()


def reconcile(
    config: QueryGroupConfig,
    *,
    bootstrap_servers: str,
    dead_letters: DeadLetters | None = None,
    catalog: SweepCatalog | None = None,
    probes: Mapping[str, QueueProbe] | None = None,
) -> list[LedgerRow]:
    """The ledger of every input stream partition of a query group, now.

    Args:
        config: the query group.
        bootstrap_servers: the cluster.
        dead_letters: a reader of the group's dead-letter topic, refreshed here
            (default: one made and closed for this call).
        catalog: the sweep catalog (default: the group's ``sweep_catalog_url``, if any).
        probes: queue probes by input stream (default: made for this call).

    Raises:
        BrokerError: the broker did not answer.
    """
    from pipeline.swept.catalog import catalog_for

    own_dead = dead_letters is None
    dead = dead_letters or DeadLetters(
        bootstrap_servers, config.dead_letter_topic, config.kafka.client
    )
    if catalog is None and config.query_group.sweep_catalog_url:
        catalog = catalog_for(config.query_group.sweep_catalog_url)
    rows: list[LedgerRow] = []
    made: list[QueueProbe] = []
    try:
        dead.refresh()
        for stream in config.input_streams:
            if not config.readers(stream):
                continue  # read by no query: not a queue of this group
            probe = (probes or {}).get(stream)
            if probe is None:
                probe = QueueProbe.for_input_stream(
                    config, stream, bootstrap_servers=bootstrap_servers
                )
                made.append(probe)
            snapshot = probe.snapshot()
            topic = config.input_streams[stream].topic
            for p, queue in sorted(snapshot.partitions.items()):
                chain = (
                    [(b.start_offset, b.end_offset) for b in catalog.chain(topic, p)]
                    if catalog is not None
                    else []
                )
                rows.append(
                    ledger_row(
                        queue,
                        chain,
                        dead.offsets(topic, p),
                        query_group=config.name,
                        stream=stream,
                        topic=topic,
                        partition=p,
                    )
                )
    finally:
        for probe in made:
            probe.close()
        if own_dead:
            dead.close()
    return rows


__all__ = ["DeadLetters", "LedgerRow", "ledger_row", "reconcile"]
