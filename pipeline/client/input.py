"""Writing tuples to an input stream queue: the back-pressure client.

*The stream data platform* cited below is the stream data processing product whose
queue rules Floodgate follows, and whose parameter names it keeps (docs/glossary.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import (
    KafkaError,
    KafkaException,
    Producer,
)

from pipeline.config import QueryGroupConfig
from pipeline.errors import (
    BrokerError,
    ConfigError,
    DeliveryError,
    EventTimeError,
    FloodgateError,
    NullKeyError,
    QueueFullError,
    QueueThresholdExceeded,
    SchemaError,
    TupleTooLargeError,
)
from pipeline.kafka.clients import idempotent_producer_settings
from pipeline.kafka.retries import broker_retrying, transient_kafka_error
from pipeline.metrics import ClientMetrics
from pipeline.queues.budget import QueueBudget
from pipeline.queues.probe import QueueProbe, SweptCounter
from pipeline.queues.snapshot import QueueSnapshot
from pipeline.serde.block import BlockEncoder, epoch_millis
from pipeline.serde.codec import TupleKey, epoch_ms, field_kind
from pipeline.serde.schemas import SchemaRepository

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


def require_stream(config: QueryGroupConfig, kind: str, stream: str) -> None:
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
    (:func:`~pipeline.serde.codec.epoch_ms`); ``None`` for anything else."""
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
        require_stream(config, "input", stream)
        self.query_group = config.name
        self.stream = stream
        stream_config = config.input_streams[stream]
        self.topic = stream_config.topic
        self.settings = config.input_settings(stream)
        self.key = TupleKey(stream_config.key)
        self._confluent_key = stream_config.key_encoding == "confluent"
        self._event_field = (
            stream_config.timestamp_field if stream_config.timestamp_mode == "data_source" else None
        )
        self._max_ahead_ms = stream_config.max_event_time_ahead_ms
        self.codec = config.stream_codec("input", stream, schemas)
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
        if self._confluent_key:  # after the check above names a key field it lacks
            self.key = config.input_key(stream, schemas)
        self._block_encoder = BlockEncoder(self.codec)
        self.probe = QueueProbe.for_input_stream(
            config, stream, bootstrap_servers=bootstrap_servers, swept=swept
        )
        self.on_threshold = on_threshold
        self.raise_on_threshold = raise_on_threshold
        self._producer_config = idempotent_producer_settings(
            bootstrap_servers,
            # Defaults a user may change: Java's key partitioning (murmur2), a short linger.
            {"partitioner": "murmur2_random", "linger.ms": 5, **config.kafka.client},
            # Only failures call back (Python per tuple is the cost centre); what is in
            # flight is len(producer): tuples not yet acknowledged.
            {"delivery.report.only.error": True},
        )
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
        (:func:`~pipeline.kafka.retries.transient_kafka_error`): a new cluster's group
        coordinators answer NOT_COORDINATOR until ``__consumer_offsets`` has leaders.

        Raises:
            BrokerError: another error, or a transient one for longer.
        """
        retrying = broker_retrying(
            lambda exc: isinstance(exc, BrokerError) and transient_kafka_error(exc.__cause__),
            FIRST_READING_WAIT_S,
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
                A table is encoded a column at a time (:class:`~pipeline.serde.block.BlockEncoder`,
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
                Values are checked strictly
                (:meth:`~pipeline.serde.codec.StreamCodec.normalise`): a float with a
                fraction or a ``bool`` for an ``int``/``long`` field is refused, never
                truncated; ``1545.0`` is the int ``1545``, and a ``datetime`` (naive:
                UTC) for a ``timestamp-millis`` field is its epoch ms, so the same tuple
                given either way has the same Kafka key.
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

        if self._confluent_key:  # keys through the registry's serializer: row by row
            return None
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
        """A key column as the row path keys it (:class:`~pipeline.serde.codec.TupleKey` of
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
            max_queue_size=self.max_queue_size,
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
