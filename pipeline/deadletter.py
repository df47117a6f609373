"""The dead-letter topic: its record shape, and writing a task's dead letters.

A tuple Floodgate cannot process (it does not decode, it is late, its key is
missing, its producer was refused) is written to the dead-letter topic with the
original key, value and headers, plus headers giving the reason and where it came
from; never dropped. The source writes them (:class:`DeadLetterWriter`), the ledger
and ``floodgate audit`` read them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer

from pipeline.errors import DeserializationError
from pipeline.kafka.clients import kafka_settings

log = logging.getLogger(__name__)

#: Dead-letter headers (all values UTF-8). The record keeps the original key and value.
DLQ_REASON = "floodgate.reason"
DLQ_ERROR = "floodgate.error"
DLQ_STREAM = "floodgate.stream"
DLQ_QUERY = "floodgate.query"
DLQ_TOPIC = "floodgate.topic"
DLQ_PARTITION = "floodgate.partition"
DLQ_OFFSET = "floodgate.offset"

#: Floodgate's dead-letter headers, in the order a dead letter carries them (after the
#: tuple's own). The JVM source writes the same (``tests/golden/contract/source.json``).
DLQ_HEADERS = (DLQ_REASON, DLQ_ERROR, DLQ_STREAM, DLQ_QUERY, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET)

#: The dead-letter producer's own settings: idempotent, every replica's ack (a dead
#: letter is the only copy of a tuple the queries refused).
DEAD_LETTER_PRODUCER = {"enable.idempotence": True, "acks": "all"}

#: How long a task waits for the broker to acknowledge its dead letters (seconds).
DELIVERY_TIMEOUT_S = 30.0


def dead_letter_key(query: str | None, message: Any) -> bytes:
    """Key of a dead-letter record: ``<query>@<topic>/<partition>/<offset>``, unique per
    reading query and tuple, so a reader can drop the repeats of a retried task."""
    return f"{query or ''}@{message.topic()}/{message.partition()}/{message.offset()}".encode()


class DeadLetterWriter:
    """Collects the tuples one Spark task refuses, then sends them all at once.

    At least once: a retried task sends them again; the record key
    (:func:`dead_letter_key`) lets a reader drop repeats. Each query that reads the
    stream dead-letters the tuple once, under its name.

    Args:
        topic: the dead-letter topic; ``None``: there is none, and :meth:`send`
            raises the first error instead.
        bootstrap_servers: the Kafka cluster.
        stream: the input stream the tuples came from.
        query: the reading query's name (``None`` outside a query group).
        client: librdkafka properties over the producer's own.
    """

    def __init__(
        self,
        topic: str | None,
        *,
        bootstrap_servers: str,
        stream: str,
        query: str | None,
        client: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.stream = stream
        self.query = query
        self.client = dict(client or {})
        #: ``(Kafka message, why)`` of every tuple refused so far.
        self.pending: list[tuple[Any, DeserializationError]] = []

    def add(self, message: Any, error: DeserializationError) -> None:
        """Refuse ``message`` (a confluent-kafka ``Message``) for ``error``, whose
        ``reason`` becomes the ``floodgate.reason`` header."""
        self.pending.append((message, error))

    def send(self, batch_id: int | None = None) -> None:
        """Send every pending tuple to the dead-letter topic, wait for the acks, then log
        them as one ``FG-SOURCE-001`` line per reason (:meth:`log_summary`).

        Args:
            batch_id: the micro-batch the tuples were read for, named in the log line.

        Raises:
            DeserializationError: the first pending error, when there is no dead-letter topic.
            KafkaException: a record was not acknowledged within
                :data:`DELIVERY_TIMEOUT_S`, or the broker refused it.
        """
        if not self.pending:
            return
        if not self.topic:
            raise self.pending[0][1]
        producer = Producer(
            kafka_settings(self.bootstrap_servers, self.client, DEAD_LETTER_PRODUCER)
        )
        failures: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        for message, error in self.pending:
            headers = [
                *(message.headers() or []),
                (DLQ_REASON, error.reason.encode()),
                (DLQ_ERROR, str(error).encode()),
                (DLQ_STREAM, self.stream.encode()),
                (DLQ_QUERY, (self.query or "").encode()),
                (DLQ_TOPIC, message.topic().encode()),
                (DLQ_PARTITION, str(message.partition()).encode()),
                (DLQ_OFFSET, str(message.offset()).encode()),
            ]
            producer.produce(
                self.topic,
                key=dead_letter_key(self.query, message),
                value=message.value(),
                headers=headers,
                on_delivery=on_delivery,
            )
            log.debug("dead-lettered: %s", error)
        remaining = producer.flush(DELIVERY_TIMEOUT_S)
        if remaining or failures:
            raise KafkaException(
                f"dead-letter topic {self.topic!r}: {remaining} undelivered, errors: {failures[:3]}"
            )
        self.log_summary(batch_id)
        self.pending.clear()

    def log_summary(self, batch_id: int | None = None) -> None:
        """Log the pending dead letters as one ``FG-SOURCE-001`` WARNING per reason: how
        many, of which partitions, and the first one as a sample (its error, with topic,
        partition and offset, and its key).

        Why not a line per tuple: a replay behind the watermark dead-letters every
        tuple of every micro-batch, and a line each (282 359 lines for one round of
        the flights demo) buried the rest of the log. Each tuple's error is kept in
        its dead-letter record's ``floodgate.error`` header, and logged at DEBUG.

        Args:
            batch_id: the micro-batch the tuples were read for (``None``: unknown).
        """
        by_reason: dict[str, list[tuple[Any, DeserializationError]]] = {}
        for message, error in self.pending:
            by_reason.setdefault(error.reason, []).append((message, error))
        for reason, refused in by_reason.items():
            message, error = refused[0]
            partitions = sorted({m.partition() for m, _ in refused})
            log.warning(
                "FG-SOURCE-001 dead-lettered %d tuple%s of stream %r as %r (query %r, "
                "micro-batch %s, partition%s %s) to %r; first: %s, key %r",
                len(refused),
                "" if len(refused) == 1 else "s",
                self.stream,
                reason,
                self.query,
                "?" if batch_id is None else batch_id,
                "" if len(partitions) == 1 else "s",
                ", ".join(map(str, partitions)),
                self.topic,
                error,
                message.key(),
            )
