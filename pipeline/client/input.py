"""Writing tuples to an input stream queue: the back-pressure client.

:class:`StreamInput` puts tuples under back-pressure: its
:class:`~pipeline.client.encoding.TupleEncoder` checks and encodes them, its
:class:`~pipeline.client.backpressure.BackPressure` says whether they fit in the input
stream queue's free space, its :class:`~pipeline.client.producer.StreamProducer` sends
them and reports back what the broker did not acknowledge. The input stream's topic is
never created here: on a missing one, reading the queue raises ``BrokerError`` until
``ensure_topics`` creates it as configured.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.client.backpressure import THRESHOLD_MESSAGE_CODE as THRESHOLD_MESSAGE_CODE
from pipeline.client.backpressure import BackPressure
from pipeline.client.encoding import TupleEncoder
from pipeline.client.producer import StreamProducer
from pipeline.config import QueryGroupConfig
from pipeline.errors import (
    ConfigError,
    DeliveryError,
    FloodgateError,
    QueueFullError,
    QueueThresholdExceeded,
)
from pipeline.metrics import ClientMetrics
from pipeline.queues.probe import QueueProbe, SweptCounter
from pipeline.serde.codec import StreamCodec, TupleKey
from pipeline.serde.schemas import SchemaRepository


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
        self.topic = config.input_streams[stream].topic
        self.settings = config.input_settings(stream)
        self._encoder = TupleEncoder(config, stream, schemas)
        self.probe = QueueProbe.for_input_stream(
            config, stream, bootstrap_servers=bootstrap_servers, swept=swept
        )
        self.on_threshold = on_threshold
        self.raise_on_threshold = raise_on_threshold
        self._producer = StreamProducer(
            stream=stream,
            topic=self.topic,
            bootstrap_servers=bootstrap_servers,
            client=config.kafka.client,
        )
        self._space = BackPressure(
            query_group=self.query_group,
            stream=stream,
            settings=self.settings,
            probe=self.probe,
            metrics=metrics,
        )
        self._closed = False
        self._lock = threading.Lock()  # held around every call into _space and _producer
        self._wakeup = threading.Event()
        labels = {"query_group": self.query_group, "stream": stream}
        self._m_accepted = metrics.put_tuples.labels(**labels, result="accepted")
        self._m_rejected = metrics.put_tuples.labels(**labels, result="rejected")
        self._m_blocked = metrics.blocked_seconds.labels(**labels)

    @property
    def key(self) -> TupleKey:
        """Makes a tuple's Kafka key (:attr:`~pipeline.client.encoding.TupleEncoder.key`)."""
        return self._encoder.key

    @property
    def codec(self) -> StreamCodec:
        """The stream's codec: encodes a tuple's value, decodes one back."""
        return self._encoder.codec

    @property
    def max_message_bytes(self) -> int:
        """librdkafka's ``message.max.bytes``: a larger tuple is refused before sending."""
        return self._producer.max_message_bytes

    @property
    def producer_replacements(self) -> int:
        """Producers replaced after a fatal error (``FG-CLIENT-003``)."""
        return self._producer.replacements

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
            return self._space.available

    def _require_open(self) -> None:
        if self._closed:
            raise FloodgateError(
                f"stream input {self.stream!r} of query group {self.query_group!r} is closed"
            )

    def queue_length(self) -> int:
        """Tuples in the queue at the last read of the broker (read now if never read)."""
        self._require_open()
        with self._lock:
            if self._space.length is None:
                self._refresh()
            length = self._space.length
            assert length is not None
            return length

    def _refresh(self) -> None:
        """Read the queue from the broker
        (:meth:`~pipeline.client.backpressure.BackPressure.refresh`), this producer's
        tuples in flight, counted before the read, as used.

        Raises:
            BrokerError: the broker did not answer and there is no earlier reading.
        """
        self._space.refresh(len(self._producer))

    def _settle_and_refresh(self, timeout_s: float = 10.0) -> None:
        """Wait for this producer's delivery reports, then read the broker.

        A refresh counts tuples in flight when it starts as used, even those that
        land in the high watermark while it reads (counted twice: safe, but it can
        refuse a put that fits). With nothing in flight the count is exact, so a
        refusal always means the queue really is that full.
        """
        self._producer.flush(timeout_s)
        self._refresh()

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
        encoded = self._encoder.encode(tuples)
        self._producer.refuse_oversized(encoded)
        count = len(encoded)
        if count == 0:
            with self._lock:
                return PutResult(
                    0, self._space.available, self.max_queue_size, self._space.threshold_exceeded
                )
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        with self._lock:
            if count > self.max_queue_size:
                raise self._refuse(count)
            if self._space.stale():
                self._refresh()
            fits = self._space.try_reserve(count)
            if not fits:
                self._settle_and_refresh()  # never refuse on a stale or doubled count
                fits = self._space.try_reserve(count)
            while not fits and block:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                fits = self._wait_for_space(count, deadline) and self._space.try_reserve(count)
            blocked_s = time.monotonic() - started if block else 0.0
            if blocked_s:
                self._m_blocked.inc(blocked_s)
            if not fits:
                raise self._refuse(count, waited_s=blocked_s)
            self._producer.send(encoded)
            self._m_accepted.inc(count)
            crossed = self._space.update_threshold_state()
            result = PutResult(
                count,
                self._space.available,
                self.max_queue_size,
                self._space.threshold_exceeded,
                blocked_s,
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

    def _refuse(self, count: int, *, waited_s: float = 0.0) -> QueueFullError:
        """Count a refused put and say how full the queue is."""
        self._m_rejected.inc(count)
        return self._space.full_error(count, waited_s=waited_s)

    def _wait_for_space(self, count: int, deadline: float | None) -> bool:
        """Sleep one refresh interval (or until ``deadline``), then read the broker.

        Returns:
            Whether to resume: the batch fits *and* the free space is above
            ``resume_free_queue_size_threshold`` percent (the resume check,
            :meth:`~pipeline.client.backpressure.BackPressure.may_resume`).
        """
        interval = max(self.settings.queue_refresh_interval_ms, 50) / 1000
        if deadline is not None:
            interval = max(0.0, min(interval, deadline - time.monotonic()))
        self._producer.poll(0)
        self._wakeup.wait(interval)
        self._refresh()
        return self._space.may_resume(count)

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
            remaining = self._producer.flush(timeout_s)
            failed = self._producer.take_failed()
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
        with self._lock:
            self._producer.close(5)
        self._closed = True
        self.probe.close()
