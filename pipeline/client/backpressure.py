"""The back-pressure of an input stream queue as one producer counts it: its free queue
size between reads of the broker, the threshold it warns at, when a blocked put resumes.

*The stream data platform* cited below is the stream data processing product whose
queue rules Floodgate follows, and whose parameter names it keeps (docs/glossary.md).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from pipeline.config import ResolvedStreamSettings
from pipeline.errors import BrokerError, QueueFullError
from pipeline.kafka.retries import broker_retrying, transient_kafka_error
from pipeline.metrics import ClientMetrics
from pipeline.queues.budget import QueueBudget
from pipeline.queues.probe import QueueProbe
from pipeline.queues.snapshot import QueueSnapshot

log = logging.getLogger(__name__)


#: Stable message code of the threshold warning (the stream data platform's
#: KFSP42032-W).
THRESHOLD_MESSAGE_CODE = "FG-CLIENT-001"


#: How long a stream input's first queue reading is asked again through transient
#: broker errors, seconds (:meth:`BackPressure.refresh`).
FIRST_READING_WAIT_S = 30.0


class BackPressure:
    """The free space of one input stream queue, as one producer counts it, and what
    its thresholds say.

    Each :meth:`refresh` reads the queue length from the broker (the
    :class:`~pipeline.queues.probe.QueueProbe`); between reads, the producer's sends
    are counted against it (:class:`~pipeline.queues.budget.QueueBudget`), so one
    producer never makes the queue exceed its max queue size. Tracks the
    ``free_input_queue_size_threshold`` crossings (warning :data:`THRESHOLD_MESSAGE_CODE`
    once per crossing) and answers the ``resume_free_queue_size_threshold`` check of a
    blocked put. Exports the client's queue gauges and crossing counter.

    Not thread-safe: its owner serialises every call (a
    :class:`~pipeline.client.input.StreamInput` holds its lock around each).

    Args:
        query_group: the query group's name (metric label, messages).
        stream: the input stream's name (metric label, messages).
        settings: the stream's resolved queue settings: max queue size (tuples),
            thresholds (percent of it), refresh interval (ms).
        probe: reads the input stream queue from the broker.
        metrics: the client's metric families.
    """

    def __init__(
        self,
        *,
        query_group: str,
        stream: str,
        settings: ResolvedStreamSettings,
        probe: QueueProbe,
        metrics: ClientMetrics,
    ) -> None:
        self.query_group = query_group
        self.stream = stream
        self.settings = settings
        self.probe = probe
        self._budget = QueueBudget(settings.max_queue_size)
        self._snapshot: QueueSnapshot | None = None
        self._below_threshold = False
        self._broker_lost = False
        labels = {"query_group": query_group, "stream": stream}
        self._m_length = metrics.queue_length.labels(**labels)
        self._m_free_ratio = metrics.queue_free_ratio.labels(**labels)
        self._m_crossings = metrics.threshold_crossings.labels(**labels)
        metrics.queue_max_size.labels(**labels).set(settings.max_queue_size)
        metrics.free_threshold_ratio.labels(**labels).set(
            settings.free_input_queue_size_threshold / 100
        )

    @property
    def max_queue_size(self) -> int:
        """The input stream queue's bound (its max queue size), tuples."""
        return self.settings.max_queue_size

    @property
    def available(self) -> int:
        """The free queue size as this producer counts it now, tuples: the last
        reading's, less what was sent since (0 before the first reading)."""
        return self._budget.available

    @property
    def length(self) -> int | None:
        """The queue length at the last reading of the broker, tuples; ``None``: never
        read."""
        return self._snapshot.length if self._snapshot is not None else None

    @property
    def threshold_exceeded(self) -> bool:
        """Whether the free space was at or below ``free_input_queue_size_threshold``
        at the last check (:meth:`update_threshold_state`)."""
        return self._below_threshold

    def stale(self) -> bool:
        """Whether the last reading is ``queue_refresh_interval_ms`` old, or there is
        none."""
        if self._snapshot is None:
            return True
        age_ms = (time.monotonic() - self._snapshot.taken_at) * 1000
        return age_ms >= self.settings.queue_refresh_interval_ms

    def refresh(self, in_flight: int) -> None:
        """Read the queue from the broker; while the broker does not answer (a restart),
        go on counting this producer's sends against the last reading.

        That is safe: since the last reading only this producer's sends (counted) and
        other producers' (the known overshoot) can have added to the queue, and
        readers only take from it. A put that does not fit is then refused with
        :class:`QueueFullError`, as at any other time; one warning ``FG-CLIENT-002``
        is logged per outage. The first reading is asked again for up to
        :data:`FIRST_READING_WAIT_S` while the broker answers a transient error.

        Args:
            in_flight: tuples this producer had sent and not seen acknowledged, read
                *before* this call (never undercounted): counted as used.

        Raises:
            BrokerError: the broker did not answer and there is no earlier reading.
        """
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
        self.update_threshold_state()

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

    def try_reserve(self, count: int) -> bool:
        """Count ``count`` tuples as sent if they fit in the free space; all or nothing."""
        return self._budget.try_reserve(count)

    def may_resume(self, count: int) -> bool:
        """The resume check of a blocked put of ``count`` tuples: the batch fits *and*
        the free space is above ``resume_free_queue_size_threshold`` percent, so a
        blocked producer does not nibble at a nearly full queue."""
        resume = self._percent_free() > self.settings.resume_free_queue_size_threshold
        return resume and self._budget.available >= count

    def full_error(self, count: int, *, waited_s: float = 0.0) -> QueueFullError:
        """The error refusing a put of ``count`` tuples that does not fit: how full the
        queue is, and how long the put waited (seconds)."""
        return QueueFullError(
            stream=self.stream,
            requested=count,
            free=self._budget.available,
            max_queue_size=self.max_queue_size,
            length=self.length,
            waited_s=waited_s,
        )

    def _percent_free(self) -> float:
        return 100.0 * self._budget.available / self.max_queue_size

    def update_threshold_state(self) -> bool:
        """Track threshold crossings: whether the free space is at or below
        ``free_input_queue_size_threshold`` percent now; on a downward crossing, count
        it and log :data:`THRESHOLD_MESSAGE_CODE` (once per crossing).

        Returns:
            True when this call saw a downward crossing.
        """
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
