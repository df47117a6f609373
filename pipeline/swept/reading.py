"""Reading a partition in offset order: its swept BLOBs, then the broker."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Generator, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pipeline.errors import DataLossError
from pipeline.swept.blob import BLOB_BATCH_RECORDS, SweptRecord, gc_paused
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.registered import read_registered
from pipeline.swept.tables import Blob

log = logging.getLogger(__name__)


class _Failed(Iterator[list[SweptRecord]]):
    """An iterator of batches that, once it raised a :class:`DataLossError`, raises it
    again on every later ``next``: a generator (or ``itertools.chain``) that raised is
    merely exhausted, and a caller that went on would take the damaged BLOB's range as
    read and commit past it."""

    def __init__(self, batches: Iterator[list[SweptRecord]]) -> None:
        self._batches = batches
        self._error: DataLossError | None = None

    def __next__(self) -> list[SweptRecord]:
        if self._error is not None:
            raise self._error
        try:
            return next(self._batches)
        except DataLossError as exc:
            self._error = exc
            raise


class _Records(Iterator[SweptRecord]):
    """:func:`swept_records`."""

    def __init__(self, batches: Iterator[list[SweptRecord]]) -> None:
        self._batches = _Failed(batches) if not isinstance(batches, _Failed) else batches
        self._batch: Iterator[SweptRecord] = iter(())

    def __next__(self) -> SweptRecord:
        while True:
            record = next(self._batch, None)
            if record is not None:
                return record
            self._batch = iter(next(self._batches))  # StopIteration: the end


def swept_records(batches: Iterator[list[SweptRecord]]) -> Iterator[SweptRecord]:
    """The records of :meth:`BlobReader.read`'s batches one by one; after a
    :class:`DataLossError` every later ``next`` raises it again, so a reader that
    catches it and reads on never skips the damaged range."""
    return _Records(batches)


class BlobReader:
    """Reads swept offsets back in Kafka order (unsweep), for the Spark source and
    ``StreamOutput.get``.

    Args:
        catalog: the sweep catalog.
    """

    def __init__(self, catalog: SweepCatalog) -> None:
        self.catalog = catalog

    def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> tuple[Iterator[list[SweptRecord]], int]:
        """The records of ``[start, end)`` held in BLOBs, from ``start`` on while the
        chain is contiguous (the files are read lazily, one at a time).

        Returns:
            ``(batches of records in offset order, the next offset not covered)``: the
            caller reads from the broker from there.

        Raises:
            DataLossError: ``start`` is in no BLOB (and, the caller found, not in the
                broker either), naming topic, partition and offsets.
            BlobIntegrityError: (a ``DataLossError``, raised when the BLOB's records
                are read) a BLOB file is missing or is not what its catalog row says
                (:func:`read_registered`); the batches stop before it.
        """
        chain: list[Blob] = []
        position = start
        for blob in self.catalog.covering(topic, partition, start, end):
            if blob.start_offset > position:
                break  # a gap: the broker holds the rest, or nothing does
            chain.append(blob)
            position = min(end, blob.end_offset)
            if position >= end:
                break
        if not chain:
            raise DataLossError(
                f"offset {start} is neither in the broker nor in any BLOB",
                topic=topic,
                partition=partition,
                start=start,
                end=end,
                available_from=None,
            )

        def batches() -> Iterator[list[SweptRecord]]:
            for blob in chain:
                for batch in read_registered(blob):
                    if batch[-1].offset() < start:
                        continue
                    if batch[0].offset() >= end:
                        return
                    if batch[0].offset() < start or batch[-1].offset() >= end:
                        batch = [r for r in batch if start <= r.offset() < end]
                    yield batch

        return _Failed(batches()), position


#: What a consumer reading ranges through :func:`read_partition` needs: an offset the
#: broker no longer holds is an error (read from BLOBs, or a ``DataLossError``), never
#: a reset; partition ends are reported. And librdkafka prefetches up to 100 000
#: messages by default: with the embedded broker that costs it 2.8 s of CPU per 336 776
#: tuples against 0.2 s at 10 000 (bench/README.md), and a range is read to a known end.
#:
#: With so low a threshold, ``fetch.queue.backoff.ms`` must be low too: librdkafka
#: (>= 2.1) postpones a partition's next fetch by it, 1 000 ms by default, once its
#: queue holds ``queued.min.messages``; a reader asking for 10 000 records at a time
#: then waits out that second between fetches whenever the broker answers a fetch with
#: fewer (Apache Kafka caps an answer at ``max.partition.fetch.bytes``; the embedded
#: broker does not). Measured on Apache Kafka 4.4.0, librdkafka 2.16.0, 2-core
#: machine: 25 000 flights of one partition read in 1.0-2.0 s, in steps of exactly
#: 1 s, against 0.02-0.11 s with 10 ms (librdkafka's own advice: "may need to be
#: decreased if the queue thresholds are set low").
#:
#: And a range reader never waits for new records: its range ends at or below the high
#: watermark. So ``fetch.wait.max.ms`` is 10, not librdkafka's 500: a fetch at the log
#: end that Apache Kafka holds for that long (a long poll; the embedded broker answers
#: at once) keeps the consumer's next request behind it, the first fetch of the next
#: range and its ListOffsets among them. One consumer reading four 10 000-flight
#: ranges to the end, one after the other: 0.55-1.12 s, in steps of 0.5 s, against
#: 0.05-0.06 s with 10 ms (same machine).
RANGE_CONSUMER: dict[str, Any] = {
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
    "queued.min.messages": 10_000,
    "fetch.queue.backoff.ms": 10,
    "fetch.wait.max.ms": 10,
}


def read_partition(
    consumer: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    blobs: BlobReader | None = None,
    batch_records: int = BLOB_BATCH_RECORDS,
    stall_timeout_s: float = 60.0,
) -> Generator[list[Any], None, None]:
    """The records of ``[start, end)`` of a partition in offset order, in batches as
    the broker fetches them: from the broker while it holds them, and from the BLOB
    chain where the sweeper moved them (unsweep, when ``blobs`` is given). The Spark
    source, the reception API and the sweeper all read a range through this.

    Args:
        consumer: a consumer with :data:`RANGE_CONSUMER`'s settings, assigned by
            this function; ``isolation.level`` is the caller's.
        topic, partition, start, end: the range.
        blobs: the BLOB reader; ``None`` for a reader of the broker only (the sweeper).
        batch_records: most records a broker fetch returns at once.
        stall_timeout_s: how long reads may make no progress.

    Yields:
        Lists of ``confluent_kafka.Message`` / :class:`SweptRecord`. Transaction
        markers and aborted records take offsets and are not records, so the range
        may hold fewer records than ``end - start``.

    Raises:
        DataLossError: an offset of the range is held neither by the broker nor by a
            BLOB (``available_from`` is the broker's log start).
        KafkaException: another broker error, or no progress for ``stall_timeout_s``
            (``_TIMED_OUT``).
    """
    tp = TopicPartition(topic, partition)
    next_offset = start
    if blobs is not None:
        low, _ = consumer.get_watermark_offsets(tp, timeout=10)
        if next_offset < low:
            swept, next_offset = read_swept(blobs, topic, partition, next_offset, end, low)
            yield from swept
    if next_offset >= end:
        return
    # Unassigned when done: an assigned partition is fetched all along, and a broker
    # that answers a fetch at the log end at once (noida-db ignores fetch.wait.max.ms)
    # turns a long-lived reader's idle assignment into a busy loop of both.
    try:
        consumer.assign([TopicPartition(topic, partition, next_offset)])
        last_progress = time.monotonic()
        while next_offset < end:
            with gc_paused():  # up to batch_records new Message objects, no cycles
                messages = consumer.consume(
                    num_messages=min(batch_records, end - next_offset), timeout=1.0
                )
            if not messages:
                position = consumer.position([tp])[0].offset
                if position >= end:  # the tail was transaction markers
                    return
                if time.monotonic() - last_progress > stall_timeout_s:
                    raise KafkaException(
                        KafkaError(
                            KafkaError._TIMED_OUT,
                            f"no progress reading {topic}[{partition}] at offset {next_offset} "
                            f"(range ends at {end}) for {stall_timeout_s:.0f} s",
                        )
                    )
                continue
            last_progress = time.monotonic()
            truncated: KafkaError | None = None
            at_end = False
            if any(m.error() is not None for m in messages):
                messages, truncated, at_end = _sift(messages, end)
            kept = _before(messages, end)
            if kept:
                yield kept
                next_offset = kept[-1].offset() + 1
            if at_end or len(kept) < len(messages):
                return
            if truncated is None:
                continue
            low, _ = consumer.get_watermark_offsets(tp, timeout=10)
            if blobs is None or next_offset >= low:
                raise DataLossError(
                    f"the broker no longer holds offset {next_offset} ({truncated.str()})",
                    topic=topic,
                    partition=partition,
                    start=next_offset,
                    end=end,
                    available_from=low,
                )
            # Swept while this range was reading: BLOBs hold the rest up to low.
            swept, next_offset = read_swept(blobs, topic, partition, next_offset, end, low)
            yield from swept
            if next_offset >= end:
                return
            consumer.assign([TopicPartition(topic, partition, next_offset)])
    finally:
        with contextlib.suppress(RuntimeError, KafkaException):  # closed meanwhile: nothing to do
            consumer.unassign()


def _sift(messages: list[Any], end: int) -> tuple[list[Any], KafkaError | None, bool]:
    """A fetched batch with errors in it: ``(the records before the first stop, the
    out-of-range error that stopped it, whether the partition's end past ``end`` did)``.

    Raises:
        KafkaException: any other error.
    """
    records: list[Any] = []
    for message in messages:
        error = message.error()
        if error is None:
            records.append(message)
        elif error.code() == KafkaError._PARTITION_EOF:
            if (message.offset() or 0) >= end:
                return records, None, True
        elif error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
            return records, error, False
        else:
            raise KafkaException(error)
    return records, None, False


def _before(messages: list[Any], end: int) -> list[Any]:
    """The messages of an offset-ordered list before ``end``."""
    if not messages or messages[-1].offset() < end:
        return messages
    return [m for m in messages if m.offset() < end]


def read_swept(
    blobs: BlobReader, topic: str, partition: int, start: int, end: int, low: int
) -> tuple[Iterator[list[SweptRecord]], int]:
    """Swept records from ``start`` up to the broker's log start ``low`` (or ``end``),
    batch by batch, and the offset after them (where the broker takes over).

    Raises:
        DataLossError: ``start`` is held neither by the broker (it is below ``low``)
            nor by a BLOB; names topic, partition, offsets and the log start.
    """
    try:
        return blobs.read(topic, partition, start, min(end, low))
    except DataLossError as exc:
        raise DataLossError(
            f"offset {start} is neither in the broker (log start {low}) nor in any BLOB "
            "of the sweep catalog",
            topic=topic,
            partition=partition,
            start=start,
            end=end,
            available_from=low,
        ) from exc
