"""The producer behind a stream input: librdkafka's idempotent producer, its
delivery failures kept to report back, and a new producer after a fatal error."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from pipeline.errors import TupleTooLargeError
from pipeline.kafka.clients import idempotent_producer_settings

log = logging.getLogger(__name__)


#: librdkafka's default ``message.max.bytes`` (its local limit on one record's key,
#: value and headers; set ``[kafka.client] "message.max.bytes"`` to change it).
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000

#: A delivery failure: the record's key and value as sent, and librdkafka's error text.
Failure = tuple[bytes | None, bytes, str]


class StreamProducer:
    """Sends one input stream's records to its topic, through fatal errors.

    Holds one ``confluent_kafka.Producer`` with the idempotent settings of
    :func:`~pipeline.kafka.clients.idempotent_producer_settings`. Only failed
    deliveries call back (``delivery.report.only.error``): each is kept, with its key
    and value, until :meth:`take_failed`, so nothing is dropped silently; ``len()`` of
    this object is the number of tuples not yet acknowledged (in flight).

    Not thread-safe: its owner serialises every call (a
    :class:`~pipeline.client.input.StreamInput` holds its lock around each); delivery
    reports run in the calling thread, inside :meth:`poll`, :meth:`flush` and
    :meth:`send`.

    Args:
        stream: the input stream's name (for messages).
        topic: the input stream queue's topic.
        bootstrap_servers: the cluster.
        client: the ``[kafka.client]`` librdkafka properties; they override the
            defaults set here (Java's key partitioning, ``murmur2_random``, and
            ``linger.ms`` = 5).

    Raises:
        KafkaException: librdkafka refused a property.
    """

    def __init__(
        self,
        *,
        stream: str,
        topic: str,
        bootstrap_servers: str,
        client: Mapping[str, Any],
    ) -> None:
        self.stream = stream
        self.topic = topic
        self._config = idempotent_producer_settings(
            bootstrap_servers,
            # Defaults a user may change: Java's key partitioning (murmur2), a short linger.
            {"partitioner": "murmur2_random", "linger.ms": 5, **client},
            # Only failures call back (Python per tuple is the cost centre); what is in
            # flight is len(producer): tuples not yet acknowledged.
            {"delivery.report.only.error": True},
        )
        self._producer = Producer(self._config)
        #: Producers replaced after a fatal error (:meth:`_replace_if_fatal`).
        self.replacements = 0
        #: librdkafka's ``message.max.bytes``: a larger tuple is refused before sending.
        self.max_message_bytes = int(client.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
        # Failure reports run in the thread that polls the producer, and every poll
        # happens in a call its owner serialises, so the list needs no lock of its own.
        self._failed: list[Failure] = []
        self._on_delivery_callback = self._on_delivery  # one bound method for every tuple

    def __len__(self) -> int:
        """Tuples handed to the producer and not yet acknowledged (nor failed)."""
        return len(self._producer)

    def refuse_oversized(self, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        """Refuse a batch with a record that librdkafka would refuse locally: its key and
        value together over ``message.max.bytes`` (bytes).

        Raises:
            TupleTooLargeError: names the first such tuple's index, its size and the
                limit; nothing of the batch was sent.
        """
        for i, (key, value) in enumerate(records):
            size = len(value) + (len(key) if key else 0)
            if size > self.max_message_bytes:
                raise TupleTooLargeError(
                    f"stream {self.stream!r}: tuple {i} of the batch is {size:,} bytes "
                    f"encoded (key + value), over message.max.bytes = "
                    f"{self.max_message_bytes:,}; nothing of the batch was sent",
                    stream=self.stream,
                    index=i,
                    size=size,
                    limit=self.max_message_bytes,
                )

    def send(self, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        """Hand ``(key, value)`` records to the producer, in order, then serve delivery
        reports.

        While librdkafka's local queue is full (``BufferError``), delivery reports are
        served and the record is handed again. After a fatal error the record goes to
        the new producer (:meth:`_replace_if_fatal`); those of the batch the old one
        held come back from :meth:`take_failed`.

        Raises:
            KafkaException: a producer error that is not fatal.
        """
        produce, topic, callback = self._producer.produce, self.topic, self._on_delivery_callback
        for key, value in records:
            while True:
                try:
                    produce(topic, value, key, on_delivery=callback)
                    break
                except BufferError:
                    # librdkafka's local queue is full: serve delivery reports, retry.
                    self.poll(0.05)
                    produce = self._producer.produce
                except (KafkaException, SystemError) as exc:
                    # A fatal error: this tuple goes to the new producer; those of the
                    # batch the old one held are reported back by take_failed.
                    if not self._replace_if_fatal(exc):
                        raise
                    produce = self._producer.produce
        self.poll(0)

    def poll(self, timeout_s: float) -> None:
        """Serve delivery reports, waiting up to ``timeout_s`` seconds for one; a fatal
        error replaces the producer (what it held is failed).

        Raises:
            KafkaException: a producer error that is not fatal.
        """
        try:
            self._producer.poll(timeout_s)
        except (KafkaException, SystemError) as exc:
            if not self._replace_if_fatal(exc):
                raise

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` seconds for every delivery report; a fatal error
        replaces the producer (what it held is failed) and the new one is flushed.

        Returns:
            The tuples still in flight after the wait.

        Raises:
            KafkaException: a producer error that is not fatal.
        """
        try:
            return int(self._producer.flush(timeout_s))
        except (KafkaException, SystemError) as exc:
            if not self._replace_if_fatal(exc):
                raise
            return int(self._producer.flush(timeout_s))

    def take_failed(self) -> list[Failure]:
        """The deliveries that failed since the last call, ``(key, value, error)`` each,
        oldest first; they are forgotten here."""
        failed, self._failed = self._failed, []
        return failed

    def close(self, timeout_s: float = 5.0) -> None:
        """Wait up to ``timeout_s`` seconds for what is in flight, then let go of the
        producer (it destroys the librdkafka handle). A ``KafkaException`` of the wait
        is logged, not raised; the object is not used after."""
        try:
            self._producer.flush(timeout_s)
        except KafkaException:
            log.exception("flush on close failed")
        self._producer = None  # type: ignore[assignment]  # destroys the client handle

    def _replace_if_fatal(self, exc: KafkaException | SystemError) -> bool:
        """After a fatal error, fail what the producer holds and go on with a new one.

        librdkafka's idempotent producer is unusable after a fatal error: every later
        ``produce`` raises ``_FATAL``. The soak met one: a broker that lost its
        producer state answered ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (so does a topic
        deleted and created again under a running producer). The tuples the producer
        still held are purged and their failures kept for :meth:`take_failed`
        (reported back, never dropped), and a new producer, with a new producer id,
        takes its place. Logs ``FG-CLIENT-003``.

        confluent-kafka 2.16 runs delivery callbacks while a fatal error is pending, so
        ``flush`` or ``poll`` can end in a ``SystemError`` instead of the fatal
        ``KafkaException`` (:meth:`_on_delivery` still records each tuple): that counts
        as fatal too.

        Returns:
            Whether ``exc`` was fatal (and the producer replaced).
        """
        error = exc.args[0] if exc.args else None
        fatal = isinstance(exc, SystemError) or (
            isinstance(error, KafkaError) and (error.fatal() or error.code() == KafkaError._FATAL)
        )
        if not fatal:
            return False
        old = self._producer
        held = len(old)
        with contextlib.suppress(KafkaException, RuntimeError, SystemError):
            old.purge(in_queue=True, in_flight=True)
        deadline = time.monotonic() + 10.0
        while len(old) and time.monotonic() < deadline:
            with contextlib.suppress(KafkaException, SystemError):
                old.poll(0.1)  # the purged tuples' failure reports, into self._failed
        self._producer = Producer(self._config)
        self.replacements += 1
        log.warning(
            "FG-CLIENT-003 stream %s: the producer hit a fatal error (%s); the %d tuples it "
            "held are reported back by put_end (DeliveryError); a new producer goes on",
            self.stream,
            error,
            held,
        )
        return True

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            try:
                key, value = msg.key(), msg.value()
            except SystemError:
                # confluent-kafka 2.16 calls back with a fatal error still set: the
                # first call into the message raises it; the tuple must still come back.
                key, value = msg.key(), msg.value()
            self._failed.append((key, value, str(err)))
