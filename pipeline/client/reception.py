"""Reading an output stream queue: the data reception API, swept backlog first."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from pipeline.client.input import require_stream
from pipeline.config import QueryGroupConfig
from pipeline.errors import (
    DeserializationError,
)
from pipeline.kafka.clients import committed_reader_settings
from pipeline.kafka.fetching import bounded_fetch, rest_until_records, resume_fetching
from pipeline.queues.probe import QueueProbe
from pipeline.serde.schemas import SchemaRepository

if TYPE_CHECKING:
    from pipeline.swept.blob import SweptRecord
    from pipeline.swept.reading import BlobReader

log = logging.getLogger(__name__)


@dataclass
class _Unsweep:
    """A partition of an output stream being read from its BLOB chain."""

    records: Iterator[SweptRecord]
    covered_to: int
    """The offset after the BLOB range: where the broker (or the next BLOB) takes over."""


class StreamOutput:
    """Reads tuples of one output stream: the data reception API.

    Made by :meth:`Connector.open_stream_output`. Reads through a Kafka consumer
    group (by default the output stream's first ``reception_groups`` entry),
    ``read_committed`` so only what the query group's transactions committed is
    seen, decodes the Avro tuples, and commits what :meth:`get` returned: that is
    what frees room in the output stream queue. A ``swept`` output stream's tuples
    that the sweeper moved out of the broker are read back from their BLOBs, in
    offset order (unsweep: ``docs/runbook.md`` and docs/how-to/operate-sweeper.md).

    Args:
        config: the query group.
        stream: the output stream's name.
        bootstrap_servers: the cluster.
        schemas: the schema repository.
        group: the consumer group to read with (default: the stream's first
            reception group).
    """

    def __init__(
        self,
        *,
        config: QueryGroupConfig,
        stream: str,
        bootstrap_servers: str,
        schemas: SchemaRepository,
        group: str | None = None,
    ) -> None:
        require_stream(config, "output", stream)
        self.query_group = config.name
        self.stream = stream
        stream_config = config.output_streams[stream]
        self.topic = stream_config.topic
        self.settings = config.output_settings(stream)
        groups = config.reception_groups(stream)
        self.group = group or groups[0]
        self.codec = config.stream_codec("output", stream, schemas)
        self.probe = QueueProbe.for_output_stream(
            config, stream, bootstrap_servers=bootstrap_servers, also=[self.group]
        )
        #: Reads swept tuples back (a ``swept`` output stream); ``None``: not swept.
        self._blobs: BlobReader | None = None
        if stream_config.swept and config.query_group.sweep_catalog_url:
            from pipeline.swept.catalog import catalog_for
            from pipeline.swept.reading import BlobReader  # SQLAlchemy: when swept

            self._blobs = BlobReader(catalog_for(config.query_group.sweep_catalog_url))
        self._consumer = Consumer(
            committed_reader_settings(
                bootstrap_servers,
                config.kafka.client,
                group_id=self.group,
                own={
                    # Swept: an offset the broker no longer holds is read from the BLOBs,
                    # never skipped by a reset (get() handles the error).
                    "auto.offset.reset": "error" if self._blobs is not None else "earliest",
                    # A new reader of a long-running output stream starts at its beginning:
                    # fetches librdkafka can receive however much is there.
                    **bounded_fetch(config.kafka.client),
                },
            )
        )
        self._consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        #: Per partition, the offset this reader committed last (-1: none this session).
        self._committed: dict[int, int] = {}
        #: Per assigned partition, the next offset get() returns (set on assignment
        #: for a swept stream, then after each tuple returned).
        self._next: dict[int, int] = {}
        #: Partitions read from BLOBs now: the broker no longer holds their next offset.
        self._unsweeping: dict[int, _Unsweep] = {}

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # A (re)assigned partition may have been read by another member meanwhile:
        # forget what this reader committed, so its next commit is checked anew.
        for tp in partitions:
            self._committed.pop(tp.partition, None)
            self._next.pop(tp.partition, None)
            self._unsweeping.pop(tp.partition, None)
        if self._blobs is None or not partitions:
            return  # librdkafka starts at the committed offsets, else at the earliest
        # Swept: choose each partition's start here, so no reset policy ever applies
        # (auto.offset.reset is "error"): the committed offset, else the earliest
        # tuple held by the broker or a BLOB; one below the log start is unswept.
        committed = consumer.committed(partitions, timeout=10)
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            start = tp.offset if 0 <= tp.offset <= high else self._earliest(tp.partition, low)
            self._next[tp.partition] = start
            if start < low:
                self._unsweep(tp.partition, start, low=low, high=high)
        self._assign_all([tp.partition for tp in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._next.pop(tp.partition, None)
            self._unsweeping.pop(tp.partition, None)

    @property
    def max_queue_size(self) -> int:
        """The output stream queue's bound, tuples."""
        return self.settings.max_queue_size

    def queue_length(self) -> int:
        """Tuples written to the stream that its slowest reception group has not read
        (high watermarks minus committed offsets), read from the broker now.

        Output is written in Kafka transactions, and each commit puts a marker at an
        offset of every partition it wrote to: unread markers count too, so the
        length is over by at most one per partition per unread micro-batch (on the
        safe side). :meth:`get` commits past the markers it reaches.

        Raises:
            BrokerError: the broker did not answer.
        """
        return self.probe.snapshot().length

    def get(self, max_tuples: int = 500, timeout_s: float = 1.0) -> list[dict[str, Any]]:
        """Read up to ``max_tuples`` tuples, waiting at most ``timeout_s`` seconds, and
        commit them as read.

        Returns:
            The decoded tuples, in partition order (a list of dicts; empty when
            nothing arrived in time).

        Raises:
            DeserializationError: a tuple does not decode; names topic, partition and
                offset. Nothing of this call is committed.
            DataLossError: (a ``swept`` stream) the next offset of a partition is held
                neither by the broker nor by a BLOB; names topic, partition, offsets
                and the broker's log start. Never a silent skip.
            KafkaException: the broker failed.
        """
        if max_tuples < 1:
            raise ValueError(f"max_tuples must be >= 1, got {max_tuples}")
        tuples: list[dict[str, Any]] = []
        read_to: dict[int, int] = {}
        if self._unsweeping:
            self._read_swept(max_tuples, tuples, read_to)
            if tuples:
                self._commit_read(read_to)
                return tuples
        messages = self._consumer.consume(num_messages=max_tuples, timeout=timeout_s)
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if self._blobs is not None and error.code() in (
                    KafkaError.OFFSET_OUT_OF_RANGE,
                    KafkaError._AUTO_OFFSET_RESET,
                ):
                    self._out_of_range(int(message.partition() or 0))
                    continue
                raise KafkaException(error)
            partition, offset = int(message.partition() or 0), int(message.offset() or 0)
            if offset < self._next.get(partition, -1):
                continue  # fetched before a re-assignment and returned already
            self._append(tuples, message, partition, offset)
            read_to[partition] = offset + 1
        self._commit_read(read_to)
        return tuples

    def _append(
        self, tuples: list[dict[str, Any]], message: Any, partition: int, offset: int
    ) -> None:
        try:
            tuples.append(self.codec.decode(message.value() or b""))
        except DeserializationError as exc:
            raise exc.at(topic=self.topic, partition=partition, offset=offset) from exc
        self._next[partition] = offset + 1

    # -- unsweep: offsets the sweeper moved into BLOBs ----------------------------------

    def _earliest(self, partition: int, low: int) -> int:
        """The earliest offset of a partition held by the broker or a BLOB."""
        assert self._blobs is not None
        chain = self._blobs.catalog.chain(self.topic, partition)
        return min(chain[0].start_offset, low) if chain else low

    def _unsweep(self, partition: int, start: int, *, low: int, high: int) -> None:
        """Read ``partition`` from its BLOB chain from ``start`` (below the log start
        ``low``) on.

        Raises:
            DataLossError: no BLOB holds ``start`` either; names topic, partition,
                offsets and the log start.
        """
        from pipeline.swept.reading import read_swept, swept_records

        assert self._blobs is not None
        batches, covered_to = read_swept(self._blobs, self.topic, partition, start, high, low)
        # swept_records: a damaged BLOB raises again on every later get, never skipped.
        self._unsweeping[partition] = _Unsweep(swept_records(batches), covered_to)
        log.info(
            "%s[%d]: offset %d is swept (log start %d): reading BLOBs up to %d",
            self.topic,
            partition,
            start,
            low,
            covered_to,
        )

    def _out_of_range(self, partition: int) -> None:
        """The broker no longer holds the next offset of ``partition`` (the sweeper
        truncated it after a sweep): read on from the BLOB chain; or, when the broker
        holds it after all (an error fetched before a re-assignment), fetch on.

        Raises:
            DataLossError: neither the broker nor a BLOB holds the next offset.
        """
        low, high = self._consumer.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=10
        )
        start = self._next.get(partition)
        if start is None:
            start = self._earliest(partition, low)
            self._next[partition] = start
        if start < low:
            self._unsweep(partition, start, low=low, high=high)
        self._assign_all()

    def _read_swept(
        self, max_tuples: int, tuples: list[dict[str, Any]], read_to: dict[int, int]
    ) -> None:
        """Up to ``max_tuples`` tuples of the partitions being unswept, in offset order;
        a partition whose BLOBs are read goes back to the broker (or to more BLOBs, if
        the sweeper truncated further meanwhile)."""
        for partition in sorted(self._unsweeping):
            state = self._unsweeping[partition]
            for record in itertools.islice(state.records, max_tuples - len(tuples)):
                offset = record.offset()
                self._append(tuples, record, partition, offset)
                read_to[partition] = offset + 1
            if len(tuples) >= max_tuples:
                return
            # This partition's BLOB range is read: on from where it ends. The offsets
            # up to there are all read (markers and aborted records are in the range
            # and not records): commit them, or the queue would count them forever.
            del self._unsweeping[partition]
            self._next[partition] = max(self._next.get(partition, 0), state.covered_to)
            read_to[partition] = max(read_to.get(partition, 0), state.covered_to)
            self._out_of_range(partition)

    def _assign_all(self, partitions: list[int] | None = None) -> None:
        """Fetch every assigned partition (or ``partitions``, in the rebalance callback)
        from its next offset; pause those being read from BLOBs.

        librdkafka stops fetching a partition on an offset-out-of-range error and
        refuses ``seek()`` on it (``_STATE``; librdkafka#2961 on GitHub), and an eager
        consumer group allows no incremental assignment: the whole assignment is set
        anew. What was fetched and not returned yet is fetched again, and skipped by
        :meth:`get` if it comes twice.
        """
        offsets = []
        if partitions is None:
            partitions = [tp.partition for tp in self._consumer.assignment()]
        for p in partitions:
            state = self._unsweeping.get(p)
            at = state.covered_to if state is not None else self._next.get(p, OFFSET_INVALID)
            offsets.append(TopicPartition(self.topic, p, at))
        self._consumer.assign(offsets)
        fetching = [tp for tp in offsets if tp.partition not in self._unsweeping]
        held = [tp for tp in offsets if tp.partition in self._unsweeping]
        if fetching:
            self._consumer.resume(fetching)
        if held:
            self._consumer.pause(held)

    def _commit_read(self, read_to: Mapping[int, int]) -> None:
        """Commit, per assigned partition, the furthest of what :meth:`get` returned and
        the consumer's position, where that is past what this reader committed last.

        The position steps over transaction markers the consumer has passed (one per
        partition per micro-batch the query group wrote), so committing it also on a
        read that returned nothing lets the queue length fall to 0 once the reader
        has caught up; otherwise the marker after the last tuple stayed counted.
        """
        assigned = self._consumer.assignment()
        if not assigned and not read_to:
            return
        wanted = {tp.partition for tp in assigned} | set(read_to)
        positions = self._consumer.position([TopicPartition(self.topic, p) for p in wanted])
        commits = []
        for tp in positions:
            # A partition read from BLOBs: its consumer position is not where it is.
            position = -1 if tp.partition in self._unsweeping else tp.offset
            target = max(read_to.get(tp.partition, -1), position if position >= 0 else -1)
            if target > self._committed.get(tp.partition, -1):
                commits.append(TopicPartition(self.topic, tp.partition, target))
        if commits:
            self._consumer.commit(offsets=commits, asynchronous=False)
            for tp in commits:
                self._committed[tp.partition] = tp.offset

    def pause(self) -> None:
        """Stop fetching the stream's assigned partitions until :meth:`resume` (Kafka's
        ``Consumer.pause``); nothing read is lost, a resumed reader goes on where it was.

        For a reader that waits between reads: librdkafka fetches the partitions it is
        assigned all the time, and a broker that answers a fetch at the log end at once
        instead of holding it for ``fetch.wait.max.ms`` (the embedded broker,
        ``docs/kafka-engines.md``) makes an idle reader spin.
        """
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.pause(assigned)

    def resume(self) -> None:
        """Fetch the assigned partitions again after :meth:`pause`, at once
        (:func:`pipeline.kafka.fetching.resume_fetching`: librdkafka alone took seconds)."""
        resume_fetching(self._consumer, self._consumer.assignment())

    @staticmethod
    def rest(
        outputs: Iterable[StreamOutput],
        *,
        stop: threading.Event,
        poll_s: float = 0.25,
        max_s: float = 5.0,
    ) -> None:
        """For a reader whose last :meth:`get` on each of ``outputs`` returned nothing:
        pause them until one has tuples past where it read (or ``stop`` is set, or
        ``max_s`` passed), then fetch again at once. Waiting this way costs a
        ListOffsets request a partition every ``poll_s`` instead of fetches at the log
        end all along (:func:`pipeline.kafka.fetching.rest_until_records`)."""
        rest_until_records(
            [output._consumer for output in outputs], stop=stop, poll_s=poll_s, max_s=max_s
        )

    def close(self) -> None:
        """Leave the consumer group and let go of the queue probe."""
        self._consumer.close()
        self.probe.close()
