"""The back-pressure client: the data transmission API.

The stream data platform's "preventing the input stream queue from overflowing"
loop, on Kafka::

    from pipeline import connect
    from pipeline.errors import QueueFullError, QueueThresholdExceeded

    with connect(bootstrap_servers="kafka:9092", config="conf/flights.toml") as connector:
        stream_input = connector.open_stream_input("flights", "flights")
        stream_input.max_queue_size        # tuples: the queue's bound
        stream_input.free_queue_size()     # tuples, fresh from the broker
        result = stream_input.put(tuples)  # all or nothing
        stream_input.put(tuples, block=True, timeout_s=30.0)
        stream_input.put_end()             # every delivery report, or DeliveryError

Rules:

* ``put`` encodes every tuple first (a tuple that does not match the stream's
  Avro schema is refused, naming the field, before anything is sent), then
  checks the free space: a batch that does not fit sends nothing and raises
  :class:`~pipeline.errors.QueueFullError` (stream, requested, free, max).
* Types are strict and keys are one per tuple (issue 26): a float with a fraction
  or a ``bool`` for an ``int``/``long`` field is refused, never truncated; a
  ``datetime`` (naive: UTC) for a ``timestamp-millis`` field is its epoch ms, so a
  tuple given with a datetime, epoch ms or ``1545.0`` has one Kafka key, one
  partition (:meth:`~pipeline.serde.StreamCodec.normalise`,
  :class:`~pipeline.serde.TupleKey`).
* A stream's topic must exist: the client never lets the broker auto-create it
  (``allow.auto.create.topics`` is false on every client it makes, whatever
  ``[kafka] client`` says), since the broker would give it its default partition
  count; the first read of a missing topic raises
  :class:`~pipeline.errors.BrokerError` naming it. The query group creates its
  topics when it starts (:func:`pipeline.broker.ensure_topics`).
* After an accepted put, free space at or below
  ``free_input_queue_size_threshold`` percent is signalled: ``result.threshold_exceeded``,
  the ``on_threshold`` callback, and with ``raise_on_threshold=True``
  :class:`~pipeline.errors.QueueThresholdExceeded` *after* the tuples were
  accepted. One warning line ``FG-CLIENT-001`` is logged per crossing.
* ``put(block=True)`` waits, sleeping between reads of the broker (no busy
  loop), until the batch fits and the free space is above
  ``resume_free_queue_size_threshold`` percent, so a blocked producer does not
  nibble at a nearly full queue.
* Free space comes from the broker (:class:`~pipeline.queues.QueueProbe`), read at
  most ``queue_refresh_interval_ms`` apart and again before a refusal; in between
  the client counts its own sends (:class:`~pipeline.queues.QueueBudget`), so
  one producer never overfills the queue. Several producers can overshoot by at
  most what the others send within one refresh interval (see ``QueueBudget``).
* The producer is idempotent with ``acks=all``; ``put_end`` raises
  :class:`~pipeline.errors.DeliveryError` listing every tuple the broker did not
  acknowledge, by its index in the order of ``put`` calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tenacity
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from prometheus_client import CollectorRegistry

from pipeline.broker import rest_until_records, resume_fetching
from pipeline.config import QueryGroupConfig, bootstrap_from, load_query_group
from pipeline.errors import (
    BrokerError,
    ConfigError,
    DeliveryError,
    DeserializationError,
    EventTimeError,
    FloodgateError,
    NullKeyError,
    QueueFullError,
    QueueThresholdExceeded,
    SchemaError,
    TupleTooLargeError,
)
from pipeline.metrics import ClientMetrics
from pipeline.queues import (
    QueueBudget,
    QueueProbe,
    QueueSnapshot,
    SweptCounter,
    transient_kafka_error,
)
from pipeline.serde import (
    BlockEncoder,
    SchemaRepository,
    StreamCodec,
    TupleKey,
    epoch_millis,
    epoch_ms,
    field_kind,
)

if TYPE_CHECKING:
    from pipeline.swept import BlobReader, SweptRecord

log = logging.getLogger(__name__)

#: Stable message code of the threshold warning (the stream data platform's
#: KFSP42032-W).
THRESHOLD_MESSAGE_CODE = "FG-CLIENT-001"
#: librdkafka's default ``message.max.bytes`` (its local limit on one record's key,
#: value and headers; set ``[kafka.client] "message.max.bytes"`` to change it).
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000

#: How long a stream input's first queue reading is asked again through transient
#: broker errors, seconds (:meth:`StreamInput._first_reading`).
FIRST_READING_WAIT_S = 30.0


def _require_stream(config: QueryGroupConfig, kind: str, stream: str) -> None:
    """Raise ConfigError naming the known streams when ``stream`` is not declared."""
    declared = config.input_streams if kind == "input" else config.output_streams
    if stream not in declared:
        raise ConfigError(
            f"query group {config.name!r} has no {kind} stream {stream!r}; "
            f"it has {sorted(declared)}",
            key=f"{kind}_streams",
            value=stream,
            allowed=", ".join(sorted(declared)),
        )


@dataclass(frozen=True)
class PutResult:
    """What an accepted ``put`` did.

    Attributes:
        accepted: tuples handed to the broker.
        free_queue_size: free space after the put, as the client counts it (tuples).
        max_queue_size: the queue's bound (tuples).
        threshold_exceeded: free space is at or below ``free_input_queue_size_threshold``.
        blocked_s: seconds the put waited for space (``block=True``).
    """

    accepted: int
    free_queue_size: int
    max_queue_size: int
    threshold_exceeded: bool
    blocked_s: float = 0.0

    @property
    def free_ratio(self) -> float:
        """``free_queue_size / max_queue_size`` (0..1)."""
        return self.free_queue_size / self.max_queue_size


def _epoch_ms(value: Any) -> int | None:
    """An event-time field of a normalised tuple (epoch ms, or a datetime where the
    field is no ``timestamp-millis``) as epoch ms, a naive datetime as UTC
    (:func:`~pipeline.serde.epoch_ms`); ``None`` for anything else."""
    if isinstance(value, datetime):
        return epoch_ms(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_arrow_table(value: Any) -> bool:
    """Whether ``value`` is a ``pyarrow.Table`` or ``RecordBatch`` (a caller holding
    one has imported pyarrow; a list of dicts does not import it)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(value, pa.Table | pa.RecordBatch)


class StreamInput:
    """Writes tuples of one input stream of one query group, within its queue's bound.

    Made by :meth:`Connector.open_stream_input`; see the module docstring.

    Args:
        config: the query group.
        stream: the input stream's name.
        bootstrap_servers: the cluster.
        schemas: the schema repository.
        metrics: the client's metric families (one set per registry, shared by streams).
        swept: the sweep catalog's counts (default: nothing swept).
        on_threshold: called with the :class:`PutResult` of each put that leaves the
            free space at or below the threshold.
        raise_on_threshold: raise :class:`QueueThresholdExceeded` after such a put.
    """

    def __init__(
        self,
        *,
        config: QueryGroupConfig,
        stream: str,
        bootstrap_servers: str,
        schemas: SchemaRepository,
        metrics: ClientMetrics,
        swept: SweptCounter | None = None,
        on_threshold: Callable[[PutResult], None] | None = None,
        raise_on_threshold: bool = False,
    ) -> None:
        _require_stream(config, "input", stream)
        self.query_group = config.name
        self.stream = stream
        stream_config = config.input_streams[stream]
        self.topic = stream_config.topic
        self.settings = config.input_settings(stream)
        self.key = TupleKey(stream_config.key)
        self._event_field = (
            stream_config.timestamp_field if stream_config.timestamp_mode == "data_source" else None
        )
        self._max_ahead_ms = stream_config.max_event_time_ahead_ms
        self.codec = StreamCodec(stream, schemas.get(stream_config.schema_), schemas)
        fields = self.codec.schema.field_names
        for name in self.key.fields:
            if name not in fields:  # checked at load too, against the file's schema_dir
                raise ConfigError(
                    f"input_streams.{stream}.key names {name!r}, which is no field of schema "
                    f"{stream_config.schema_!r}; its fields: {', '.join(fields)}",
                    key=f"input_streams.{stream}.key",
                    value=name,
                    allowed=", ".join(fields),
                )
        self._block_encoder = BlockEncoder(self.codec)
        self.probe = QueueProbe.for_input_stream(
            config, stream, bootstrap_servers=bootstrap_servers, swept=swept
        )
        self.on_threshold = on_threshold
        self.raise_on_threshold = raise_on_threshold
        self._producer_config = {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            # Only failures call back (Python per tuple is the cost centre); what is
            # in flight is len(producer): tuples not yet acknowledged.
            "delivery.report.only.error": True,
            **config.kafka.client,
            # A missing topic is never created by the broker with its default partition
            # count: it is refused (issue 26; librdkafka's default is true for producers).
            "allow.auto.create.topics": False,
        }
        self._producer = Producer(self._producer_config)
        #: Producers replaced after a fatal error (:meth:`_replace_if_fatal`).
        self.producer_replacements = 0
        #: librdkafka's ``message.max.bytes``: a larger tuple is refused before sending.
        self.max_message_bytes = int(
            config.kafka.client.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES)
        )
        self._budget = QueueBudget(self.settings.max_queue_size)
        self._closed = False
        self._snapshot: QueueSnapshot | None = None
        self._lock = threading.Lock()
        # Failure reports run in the thread that polls the producer, and every poll
        # happens under self._lock, so the list needs no lock of its own.
        self._failed: list[tuple[bytes | None, bytes, str]] = []
        self._on_delivery_callback = self._on_delivery  # one bound method for every tuple
        self._below_threshold = False
        self._broker_lost = False
        self._wakeup = threading.Event()
        labels = {"query_group": self.query_group, "stream": stream}
        self._m_length = metrics.queue_length.labels(**labels)
        self._m_free_ratio = metrics.queue_free_ratio.labels(**labels)
        self._m_accepted = metrics.put_tuples.labels(**labels, result="accepted")
        self._m_rejected = metrics.put_tuples.labels(**labels, result="rejected")
        self._m_crossings = metrics.threshold_crossings.labels(**labels)
        self._m_blocked = metrics.blocked_seconds.labels(**labels)
        metrics.queue_max_size.labels(**labels).set(self.settings.max_queue_size)
        metrics.free_threshold_ratio.labels(**labels).set(
            self.settings.free_input_queue_size_threshold / 100
        )

    # -- the queue -------------------------------------------------------------

    @property
    def max_queue_size(self) -> int:
        """The input stream queue's bound (its max queue size), tuples."""
        return self.settings.max_queue_size

    def free_queue_size(self) -> int:
        """Free space in the input stream queue now, tuples, read fresh from the broker
        (its free queue size). This producer's unacknowledged tuples count as used.

        Raises:
            BrokerError: the broker did not answer, or the topic does not exist (it is
                never created here: see the module docstring).
        """
        self._require_open()
        with self._lock:
            self._refresh()
            return self._budget.available

    def _require_open(self) -> None:
        if self._closed:
            raise FloodgateError(
                f"stream input {self.stream!r} of query group {self.query_group!r} is closed"
            )

    def queue_length(self) -> int:
        """Tuples in the queue at the last read of the broker (read now if never read)."""
        self._require_open()
        with self._lock:
            if self._snapshot is None:
                self._refresh()
            assert self._snapshot is not None
            return self._snapshot.length

    def _refresh(self) -> None:
        """Read the queue from the broker; while the broker does not answer (a restart),
        go on counting this producer's sends against the last reading.

        That is safe: since the last reading only this producer's sends (counted) and
        other producers' (the known overshoot) can have added to the queue, and
        readers only take from it. A put that does not fit is then refused with
        :class:`QueueFullError`, as at any other time; one warning ``FG-CLIENT-002``
        is logged per outage.

        Raises:
            BrokerError: the broker did not answer and there is no earlier reading.
        """
        in_flight = len(self._producer)  # read before the broker: never undercounted
        try:
            snapshot = self.probe.snapshot() if self._snapshot else self._first_reading()
        except BrokerError as exc:
            if self._snapshot is None:
                raise
            if not self._broker_lost:
                log.warning(
                    "FG-CLIENT-002 stream %s: queue state not read (%s); counting this "
                    "producer's sends against the last reading (length %d) until it is",
                    self.stream,
                    exc,
                    self._snapshot.length,
                )
            self._broker_lost = True
            # Try again one refresh interval from now, not on every put.
            self._snapshot = dataclasses.replace(self._snapshot, taken_at=time.monotonic())
            return
        if self._broker_lost:
            log.warning("FG-CLIENT-002 stream %s: queue state read again", self.stream)
            self._broker_lost = False
        self._snapshot = snapshot
        self._budget.refresh(snapshot.length, in_flight)
        self._m_length.set(snapshot.length)
        self._update_threshold_state()

    def _first_reading(self) -> QueueSnapshot:
        """The queue's first reading, asked again for up to :data:`FIRST_READING_WAIT_S`
        while the broker answers a transient error
        (:func:`~pipeline.queues.transient_kafka_error`): a new cluster's group
        coordinators answer NOT_COORDINATOR until ``__consumer_offsets`` has leaders.

        Raises:
            BrokerError: another error, or a transient one for longer.
        """
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(
                lambda exc: isinstance(exc, BrokerError) and transient_kafka_error(exc.__cause__)
            ),
            stop=tenacity.stop_after_delay(FIRST_READING_WAIT_S),
            wait=tenacity.wait_exponential(multiplier=0.1, max=2.0),
            reraise=True,
        )
        return retrying(self.probe.snapshot)

    def _settle_and_refresh(self, timeout_s: float = 10.0) -> None:
        """Wait for this producer's delivery reports, then read the broker.

        A refresh counts tuples in flight when it starts as used, even those that
        land in the high watermark while it reads (counted twice: safe, but it can
        refuse a put that fits). With nothing in flight the count is exact, so a
        refusal always means the queue really is that full.
        """
        self._flush(timeout_s)
        self._refresh()

    # -- the producer ------------------------------------------------------------

    def _replace_if_fatal(self, exc: KafkaException | SystemError) -> bool:
        """After a fatal error, fail what the producer holds and go on with a new one.

        librdkafka's idempotent producer is unusable after a fatal error: every later
        ``produce`` raises ``_FATAL``. The soak met one: a broker that lost its
        producer state answered ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (so does a topic
        deleted and created again under a running producer). The tuples the producer
        still held are purged and their failures kept for :meth:`put_end`'s
        :class:`DeliveryError` (reported back, never dropped), and a new producer,
        with a new producer id, takes its place. Logs ``FG-CLIENT-003``. Call with
        ``self._lock`` held.

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
        self._producer = Producer(self._producer_config)
        self.producer_replacements += 1
        log.warning(
            "FG-CLIENT-003 stream %s: the producer hit a fatal error (%s); the %d tuples it "
            "held are reported back by put_end (DeliveryError); a new producer goes on",
            self.stream,
            error,
            held,
        )
        return True

    def _poll(self, timeout_s: float) -> None:
        try:
            self._producer.poll(timeout_s)
        except (KafkaException, SystemError) as exc:
            if not self._replace_if_fatal(exc):
                raise

    def _flush(self, timeout_s: float) -> int:
        """``flush``; a fatal error replaces the producer (what it held is failed)."""
        try:
            return int(self._producer.flush(timeout_s))
        except (KafkaException, SystemError) as exc:
            if not self._replace_if_fatal(exc):
                raise
            return int(self._producer.flush(timeout_s))

    def _stale(self) -> bool:
        if self._snapshot is None:
            return True
        age_ms = (time.monotonic() - self._snapshot.taken_at) * 1000
        return age_ms >= self.settings.queue_refresh_interval_ms

    def _percent_free(self) -> float:
        return 100.0 * self._budget.available / self.max_queue_size

    def _update_threshold_state(self) -> bool:
        """Track threshold crossings; True when this call saw a downward crossing."""
        free = self._budget.available
        self._m_free_ratio.set(free / self.max_queue_size)
        below = self._percent_free() <= self.settings.free_input_queue_size_threshold
        crossed = below and not self._below_threshold
        self._below_threshold = below
        if crossed:
            self._m_crossings.inc()
            length = self.max_queue_size - free
            log.warning(
                "%s free space of stream queue at or below threshold: query_group=%s stream=%s "
                "length=%d max=%d threshold=%d%%",
                THRESHOLD_MESSAGE_CODE,
                self.query_group,
                self.stream,
                length,
                self.max_queue_size,
                self.settings.free_input_queue_size_threshold,
            )
        return crossed

    # -- put -------------------------------------------------------------------

    def put(
        self,
        tuples: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        block: bool = False,
        timeout_s: float | None = None,
    ) -> PutResult:
        """Hand tuples to the input stream queue, all or nothing.

        Args:
            tuples: one tuple (a dict), a list of them, or a ``pyarrow.Table`` (or
                ``RecordBatch``) whose columns are the stream's fields, a row a tuple.
                A table is encoded a column at a time (:class:`~pipeline.serde.BlockEncoder`,
                ~6x less CPU than a list of dicts) when its columns map exactly onto
                the schema, and row by row as dicts (``to_pylist``) otherwise: the same
                bytes, keys and errors either way.
            block: wait for free space instead of raising :class:`QueueFullError`.
            timeout_s: with ``block``, the longest wait (seconds); ``None`` waits forever.

        Returns:
            The :class:`PutResult`.

        Raises:
            SchemaError: a tuple does not match the schema: names the tuple's index and
                the field, or the type of what was given instead of a dict; nothing sent.
                Values are checked strictly (:meth:`~pipeline.serde.StreamCodec.normalise`,
                issue 26): a float with a fraction or a ``bool`` for an ``int``/``long``
                field is refused, never truncated; ``1545.0`` is the int ``1545``, and a
                ``datetime`` (naive: UTC) for a ``timestamp-millis`` field is its epoch
                ms, so the same tuple given either way has the same Kafka key.
            TupleTooLargeError: a tuple's encoded key and value exceed
                ``message.max.bytes`` (names its index, size and the limit); nothing sent.
            QueueFullError: the batch does not fit (at once, or at ``timeout_s``); nothing sent.
            QueueThresholdExceeded: with ``raise_on_threshold``, *after* the tuples were accepted.
            BrokerError: the queue's state could not be read.
        """
        self._require_open()
        encoded = self._encode(tuples)
        for i, (key, value) in enumerate(encoded):
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
        count = len(encoded)
        if count == 0:
            with self._lock:
                return PutResult(
                    0, self._budget.available, self.max_queue_size, self._below_threshold
                )
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        with self._lock:
            if count > self.max_queue_size:
                raise self._refuse(count)
            if self._stale():
                self._refresh()
            fits = self._budget.try_reserve(count)
            if not fits:
                self._settle_and_refresh()  # never refuse on a stale or doubled count
                fits = self._budget.try_reserve(count)
            while not fits and block:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                fits = self._wait_for_space(count, deadline) and self._budget.try_reserve(count)
            blocked_s = time.monotonic() - started if block else 0.0
            if blocked_s:
                self._m_blocked.inc(blocked_s)
            if not fits:
                raise self._refuse(count, waited_s=blocked_s)
            self._send(encoded)
            self._m_accepted.inc(count)
            crossed = self._update_threshold_state()
            result = PutResult(
                count, self._budget.available, self.max_queue_size, self._below_threshold, blocked_s
            )
        if result.threshold_exceeded:
            if self.on_threshold is not None:
                self.on_threshold(result)
            if self.raise_on_threshold:
                raise QueueThresholdExceeded(
                    f"stream {self.stream!r}: put of {count} tuples accepted; free space "
                    f"{result.free_queue_size} of {self.max_queue_size} is at or below "
                    f"{self.settings.free_input_queue_size_threshold}%"
                    + (" (crossed now)" if crossed else ""),
                    result=result,
                )
        return result

    def _encode(self, tuples: Any) -> list[tuple[bytes | None, bytes]]:
        """``(key, value)`` of every tuple of a ``put``, checked (see :meth:`put`)."""
        if _is_arrow_table(tuples):
            encoded = self._encode_table(tuples)
            if encoded is not None:
                return encoded
            tuples = tuples.to_pylist()
        if isinstance(tuples, Mapping):
            batch = [tuples]
        elif isinstance(tuples, Iterable) and not isinstance(tuples, str | bytes):
            batch = list(tuples)
        else:
            raise SchemaError(
                f"stream {self.stream!r}: put takes a dict (one tuple), a list of dicts or a "
                f"pyarrow Table, not {type(tuples).__name__}; nothing was sent",
                stream=self.stream,
            )
        normalise = self.codec.normalise
        for i, t in enumerate(batch):
            try:
                batch[i] = normalise(t)
            except SchemaError as exc:
                raise SchemaError(
                    f"tuple {i} of the batch: {exc}; nothing of the batch was sent",
                    stream=self.stream,
                    field=exc.field,
                ) from exc
        self._check_keys_and_event_times(batch)
        key, encode = self.key, self.codec.encode_normalised
        return [(key(t), encode(t)) for t in batch]

    def _encode_table(self, table: Any) -> list[tuple[bytes | None, bytes]] | None:
        """An Arrow table's tuples encoded a column at a time, or ``None`` when only
        the row-by-row path can encode them or name what is wrong with them: a column
        set or type the block encoder does not write, a null key field, an event time
        too far ahead, a key column whose text the row path writes otherwise."""
        import pyarrow as pa
        import pyarrow.compute as pc

        fields = self.key.fields
        names = set(table.column_names)
        if any(f not in names or table.column(f).null_count for f in fields):
            return None
        key_columns = []
        for f in fields:
            column = self._key_column(table.column(f), field_kind(self.codec.schema.schema, f))
            if column is None:
                return None
            key_columns.append(column)
        event = self._event_field
        if event is not None and event in names and table.num_rows:
            column = epoch_millis(table.column(event))
            if column is None:
                return None
            latest = pc.max(column).as_py()
            if latest is not None and latest > time.time() * 1000 + self._max_ahead_ms:
                return None
        values = self._block_encoder.encode(table)
        if values is None:
            return None
        if not fields:
            return [(None, v) for v in values]
        texts = [pc.cast(c, pa.string()) for c in key_columns]
        joined = texts[0] if len(texts) == 1 else pc.binary_join_element_wise(*texts, "|")
        keys = pc.cast(joined, pa.binary()).to_pylist()
        return list(zip(keys, values, strict=True))

    @staticmethod
    def _key_column(column: Any, kind: str | None) -> Any | None:
        """A key column as the row path keys it (:class:`~pipeline.serde.TupleKey` of
        normalised tuples): an integer column of an ``int``/``long`` field, a string
        column of a ``string`` field, a ``timestamp-millis`` field's column as epoch ms;
        ``None`` for anything else (row by row)."""
        import pyarrow as pa

        if kind in ("int", "long") and pa.types.is_integer(column.type):
            return column
        if kind == "string" and pa.types.is_string(column.type):
            return column
        if kind == "timestamp-millis":
            return epoch_millis(column)
        return None

    def _check_keys_and_event_times(self, batch: Sequence[Any]) -> None:
        """Refuse a tuple with no value for a key field of a keyed stream, or with an
        event time more than ``max_event_time_ahead_ms`` ahead of now (``data_source``
        timestamps).

        Raises:
            NullKeyError: names the tuple's index and the key field.
            EventTimeError: names the tuple's index, its event time and the limit.
        """
        fields, event = self.key.fields, self._event_field
        if not fields and event is None:
            return
        limit_ms = time.time() * 1000 + self._max_ahead_ms
        for i, t in enumerate(batch):
            for name in fields:
                if t.get(name) is None:
                    raise NullKeyError(
                        f"stream {self.stream!r}: tuple {i} of the batch has no value for key "
                        f"field {name!r} (the stream is keyed by {fields}); nothing of the "
                        "batch was sent",
                        stream=self.stream,
                        index=i,
                        field=name,
                    )
            if event is not None:
                ms = _epoch_ms(t.get(event))
                if ms is not None and ms > limit_ms:
                    ahead_s = (ms - time.time() * 1000) / 1000
                    raise EventTimeError(
                        f"stream {self.stream!r}: tuple {i} of the batch has event time "
                        f"{event} = {datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()}, "
                        f"{ahead_s:,.0f} s ahead of now; at most "
                        f"{self._max_ahead_ms / 1000:,.0f} s is accepted "
                        "(input_streams.<stream>.max_event_time_ahead_ms); nothing of the "
                        "batch was sent",
                        stream=self.stream,
                        index=i,
                        field=event,
                        event_time_ms=int(ms),
                        limit_ms=self._max_ahead_ms,
                    )

    def _refuse(self, count: int, *, waited_s: float = 0.0) -> QueueFullError:
        """Count a refused put and say how full the queue is."""
        self._m_rejected.inc(count)
        return QueueFullError(
            stream=self.stream,
            requested=count,
            free=self._budget.available,
            max_size=self.max_queue_size,
            length=self._snapshot.length if self._snapshot else None,
            waited_s=waited_s,
        )

    def _wait_for_space(self, count: int, deadline: float | None) -> bool:
        """Sleep one refresh interval (or until ``deadline``), then read the broker.

        Returns:
            Whether to resume: the batch fits *and* the free space is above
            ``resume_free_queue_size_threshold`` percent (the resume check), so a
            blocked producer does not nibble at a nearly full queue.
        """
        interval = max(self.settings.queue_refresh_interval_ms, 50) / 1000
        if deadline is not None:
            interval = max(0.0, min(interval, deadline - time.monotonic()))
        self._poll(0)
        self._wakeup.wait(interval)
        self._refresh()
        resume = self._percent_free() > self.settings.resume_free_queue_size_threshold
        return resume and self._budget.available >= count

    def _send(self, encoded: list[tuple[bytes | None, bytes]]) -> None:
        produce, topic, callback = self._producer.produce, self.topic, self._on_delivery_callback
        for key, value in encoded:
            while True:
                try:
                    produce(topic, value, key, on_delivery=callback)
                    break
                except BufferError:
                    # librdkafka's local queue is full: serve delivery reports, retry.
                    self._poll(0.05)
                    produce = self._producer.produce
                except (KafkaException, SystemError) as exc:
                    # A fatal error: this tuple goes to the new producer; those of the
                    # batch the old one held are reported back by put_end.
                    if not self._replace_if_fatal(exc):
                        raise
                    produce = self._producer.produce
        self._poll(0)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            try:
                key, value = msg.key(), msg.value()
            except SystemError:
                # confluent-kafka 2.16 calls back with a fatal error still set: the
                # first call into the message raises it; the tuple must still come back.
                key, value = msg.key(), msg.value()
            self._failed.append((key, value, str(err)))

    def put_end(self, timeout_s: float = 60.0) -> None:
        """Wait for every delivery report.

        Raises:
            DeliveryError: the tuples the broker did not acknowledge, each decoded
                back to its dict (``failed`` holds ``(tuple, error)`` pairs), so they can
                be put again; nothing is dropped silently.
            FloodgateError: the stream input is closed.
        """
        self._require_open()
        with self._lock:
            remaining = self._flush(timeout_s)
            failed, self._failed = self._failed, []
            in_flight = len(self._producer)
        if not failed and not remaining:
            return
        undelivered: list[tuple[object, str]] = []
        for key, value, error in failed:
            try:
                undelivered.append((self.codec.decode(value), error))
            except Exception:
                undelivered.append(((key, value), error))
        text = (
            f"stream {self.stream!r}: {len(undelivered)} tuples were not acknowledged by the broker"
        )
        if undelivered:
            text += f"; first: {undelivered[0][0]!r}: {undelivered[0][1]}"
        if remaining:
            text += f"; {in_flight} more still unacknowledged after {timeout_s:.0f} s"
        raise DeliveryError(text, failed=undelivered)

    def close(self) -> None:
        """Wait briefly for what is in flight (use :meth:`put_end` to be told of failures),
        then let go of the producer and the queue probe; later calls raise
        ``FloodgateError``. Safe to call twice."""
        if self._closed:
            return
        try:
            with self._lock:
                self._producer.flush(5)
        except KafkaException:
            log.exception("flush on close failed")
        self._closed = True
        self._producer = None  # type: ignore[assignment]  # destroys the client handle
        self.probe.close()


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
    offset order (unsweep: ``docs/runbook.md`` and the README's sweeper section).

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
        _require_stream(config, "output", stream)
        self.query_group = config.name
        self.stream = stream
        stream_config = config.output_streams[stream]
        self.topic = stream_config.topic
        self.settings = config.output_settings(stream)
        groups = config.reception_groups(stream)
        self.group = group or groups[0]
        self.codec = StreamCodec(stream, schemas.get(stream_config.schema_), schemas)
        self.probe = QueueProbe.for_output_stream(
            config, stream, bootstrap_servers=bootstrap_servers, also=[self.group]
        )
        #: Reads swept tuples back (a ``swept`` output stream); ``None``: not swept.
        self._blobs: BlobReader | None = None
        if stream_config.swept and config.query_group.sweep_catalog_url:
            from pipeline.swept import BlobReader, catalog_for  # SQLAlchemy: when swept

            self._blobs = BlobReader(catalog_for(config.query_group.sweep_catalog_url))
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": self.group,
                "enable.auto.commit": False,
                # Swept: an offset the broker no longer holds is read from the BLOBs,
                # never skipped by a reset (get() handles the error).
                "auto.offset.reset": "error" if self._blobs is not None else "earliest",
                "isolation.level": "read_committed",
                **config.kafka.client,
                "allow.auto.create.topics": False,  # issue 26: never a broker-default topic
            }
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
        from pipeline.swept import read_swept, swept_records

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
        refuses ``seek()`` on it (``_STATE``; librdkafka issue 2961), and an eager
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
        (:func:`pipeline.broker.resume_fetching`: librdkafka alone took seconds)."""
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
        end all along (:func:`pipeline.broker.rest_until_records`)."""
        rest_until_records(
            [output._consumer for output in outputs], stop=stop, poll_s=poll_s, max_s=max_s
        )

    def close(self) -> None:
        """Leave the consumer group and let go of the queue probe."""
        self._consumer.close()
        self.probe.close()


class Connector:
    """A connection to Floodgate for data transmission and reception applications.

    Made by :func:`connect`. Holds the query group configs, the schema repository and
    a metrics registry; opens :class:`StreamInput` and :class:`StreamOutput` objects.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        configs: Sequence[QueryGroupConfig],
        schemas: SchemaRepository,
        registry: CollectorRegistry,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.configs = {c.name: c for c in configs}
        self.schemas = schemas
        self.registry = registry
        self.metrics = ClientMetrics(registry)
        self._inputs: list[StreamInput] = []
        self._outputs: list[StreamOutput] = []

    def config(self, query_group: str) -> QueryGroupConfig:
        """The config of a query group.

        Raises:
            ConfigError: no such query group; names the known ones.
        """
        try:
            return self.configs[query_group]
        except KeyError:
            raise ConfigError(
                f"no query group {query_group!r}; this connector knows {sorted(self.configs)}",
                key="query_group.name",
                value=query_group,
                allowed=", ".join(sorted(self.configs)),
            ) from None

    def open_stream_input(
        self,
        query_group: str,
        stream: str,
        *,
        on_threshold: Callable[[PutResult], None] | None = None,
        raise_on_threshold: bool = False,
        swept: SweptCounter | None = None,
    ) -> StreamInput:
        """Open an input stream of a query group for writing.

        Raises:
            ConfigError: no such query group or stream, or a key field the stream's
                schema does not have.
        """
        stream_input = StreamInput(
            config=self.config(query_group),
            stream=stream,
            bootstrap_servers=self.bootstrap_servers,
            schemas=self.schemas,
            metrics=self.metrics,
            swept=swept,
            on_threshold=on_threshold,
            raise_on_threshold=raise_on_threshold,
        )
        self._inputs.append(stream_input)
        return stream_input

    def open_stream_output(
        self, query_group: str, stream: str, *, group: str | None = None
    ) -> StreamOutput:
        """Open an output stream of a query group for reading (data reception API).

        Raises:
            ConfigError: no such query group or stream.
        """
        stream_output = StreamOutput(
            config=self.config(query_group),
            stream=stream,
            bootstrap_servers=self.bootstrap_servers,
            schemas=self.schemas,
            group=group,
        )
        self._outputs.append(stream_output)
        return stream_output

    def close(self) -> None:
        """Close every stream opened here."""
        for stream_input in self._inputs:
            stream_input.close()
        self._inputs.clear()
        for stream_output in self._outputs:
            stream_output.close()
        self._outputs.clear()

    def __enter__(self) -> Connector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    *,
    config: str | Path | QueryGroupConfig | Sequence[str | Path | QueryGroupConfig],
    bootstrap_servers: str | None = None,
    registry: CollectorRegistry | None = None,
    schemas: SchemaRepository | None = None,
) -> Connector:
    """Connect a data transmission application to Floodgate.

    Args:
        config: one or more query group files (or loaded configs).
        bootstrap_servers: the cluster; default: ``FLOODGATE_KAFKA_BOOTSTRAP``, then the
            first config's ``[kafka] bootstrap_servers``.
        registry: where the client's metrics go (default: a new registry).
        schemas: the schema repository (default: the first config's ``schema_dir``).

    Raises:
        ConfigError: a config is refused, or no cluster is named anywhere.
    """
    items = [config] if isinstance(config, str | Path | QueryGroupConfig) else list(config)
    configs = [c if isinstance(c, QueryGroupConfig) else load_query_group(c) for c in items]
    if not configs:
        raise ConfigError("connect() needs at least one query group config", key="config")
    servers = bootstrap_servers or bootstrap_from(configs[0].kafka)
    if not servers:
        raise ConfigError(
            "no Kafka cluster: pass bootstrap_servers=, set FLOODGATE_KAFKA_BOOTSTRAP, "
            "or set [kafka] bootstrap_servers",
            key="kafka.bootstrap_servers",
        )
    return Connector(
        bootstrap_servers=servers,
        configs=configs,
        schemas=schemas or SchemaRepository.load(configs[0].schema_dir),
        registry=registry or CollectorRegistry(),
    )


__all__ = ["Connector", "PutResult", "StreamInput", "StreamOutput", "connect"]
