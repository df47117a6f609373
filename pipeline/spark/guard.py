"""The bounded output stream queue's guard: sleep, retry, then hold the query group."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from pipeline.errors import (
    BatchInterrupted,
    OversizedBatchError,
    QueryGroupHeld,
)
from pipeline.kafka.retries import BROKER_WAIT_S
from pipeline.queues.snapshot import QueueSnapshot

log = logging.getLogger(__name__)


class QueueReader(Protocol):
    """Reads an output stream queue's state (a :class:`~pipeline.queues.probe.QueueProbe`)."""

    #: The queue's bound, tuples: held by the reader alone (read once from the config).
    max_queue_size: int

    def snapshot(self, *, wait_s: float = 0.0) -> QueueSnapshot:
        """The queue now, trying for up to ``wait_s`` seconds while the broker does not
        answer."""


class QueueReadings(Protocol):
    """Where an :class:`OutputQueueGuard`'s reads of its queue go (the query group's
    gauges, :class:`~pipeline.spark.queue_gauges.QueueGauges`)."""

    def record_output(
        self, stream: str, snapshot: QueueSnapshot, check_s: float | None = None
    ) -> None:
        """A fresh read of an output stream queue; ``check_s``: how long the read took,
        when it was a micro-batch's check (seconds)."""


class HoldListener(Protocol):
    """What an :class:`OutputQueueGuard` tells of its sleeps and holds (the query
    group's :class:`~pipeline.spark.hold.Hold`)."""

    def on_sleep(self, query: str, stream: str, retry: int, sleep_s: float) -> None:
        """A query starts sleeping on a full output stream queue (retry is 1-based)."""

    def on_awake(self, query: str, stream: str) -> None:
        """A query that slept found room and goes on."""

    def on_hold(self, held: QueryGroupHeld) -> None:
        """A query gives up: the group must be held (called before the error is raised)."""


def required_space(tuples: int, partitions: int) -> int:
    """Output queue space a micro-batch of ``tuples`` output tuples takes, in offsets.

    Each transaction's commit marker takes one offset in every partition it wrote
    to, and queue length is read from offsets, so a batch takes its tuples plus at
    most ``min(tuples, partitions)`` markers. An empty batch writes nothing.
    """
    return 0 if tuples <= 0 else tuples + min(tuples, partitions)


class OutputQueueGuard:
    """Keeps one output stream queue within its max (sleep, re-check, then hold).

    Every sink writing to the stream shares the guard, and writes while holding it
    (:meth:`reserve`), so two queries of the group never both fill the same free
    space. The reception applications free space as they read; the guard only
    reads the queue, never waits on them.

    Args:
        query_group: the query group's name.
        stream: the output stream's name.
        reader: reads the queue's state, and holds its bound (``max_queue_size``);
            ``None`` turns the check off (``output_queue_check = false``).
        partitions: partitions of the output topic (for transaction markers).
        sleep_ms: ``sleep_on_over_store_ms``.
        retry_count: ``sleep_on_over_store_retry_count``; 0 holds at once.
        interrupted: set when the group is held or stopped; wakes a sleeping query,
            which then gives up without writing.
        readings: where each read of the queue goes (the group's gauges).
        hold: told of each sleep, wake and hold (the group's :class:`~pipeline.spark.hold.Hold`).
        wait: how to sleep (``Event.wait``-like; for unit tests of the rule).
    """

    def __init__(
        self,
        *,
        query_group: str,
        stream: str,
        reader: QueueReader | None,
        partitions: int,
        sleep_ms: int,
        retry_count: int,
        interrupted: threading.Event | None = None,
        readings: QueueReadings | None = None,
        hold: HoldListener | None = None,
        wait: Callable[[float], Any] | None = None,
    ) -> None:
        self.query_group = query_group
        self.stream = stream
        self.reader = reader
        self.partitions = partitions
        self.sleep_s = sleep_ms / 1000.0
        self.retry_count = retry_count
        self.interrupted = interrupted or threading.Event()
        self.readings = readings
        self.hold = hold
        self._wait = wait or self.interrupted.wait
        self._lock = threading.Lock()
        #: Sleeps and holds so far (also in the group's metrics).
        self.sleeps = 0
        self.holds = 0

    @contextlib.contextmanager
    def reserve(self, tuples: int, *, query: str, batch_id: int) -> Iterator[None]:
        """Wait until ``tuples`` output tuples fit, then keep the queue while the caller
        writes them.

        Raises:
            OversizedBatchError: the batch is larger than the whole queue.
            QueryGroupHeld: it still did not fit after ``retry_count`` sleeps, or the
                group was held or stopped meanwhile. Nothing may be written.
        """
        with self._lock:
            self._admit(tuples, query=query, batch_id=batch_id)
            yield

    @property
    def max_queue_size(self) -> int:
        """The queue's bound, tuples (its reader's; 0 with the check off)."""
        return self.reader.max_queue_size if self.reader is not None else 0

    def _admit(self, tuples: int, *, query: str, batch_id: int) -> None:
        required = required_space(tuples, self.partitions)
        if self.reader is None or required == 0:
            return
        if required > self.max_queue_size:
            log.error(
                "FG-QG-005 query group %s query %s: micro-batch %d needs %d tuples of room "
                "in output stream %s, more than its max_queue_size %d",
                self.query_group,
                query,
                batch_id,
                required,
                self.stream,
                self.max_queue_size,
            )
            raise OversizedBatchError(
                query_group=self.query_group,
                query=query,
                stream=self.stream,
                batch_id=batch_id,
                required=required,
                max_queue_size=self.max_queue_size,
            )
        retry = 0
        while True:
            if self.interrupted.is_set():
                raise BatchInterrupted(query_group=self.query_group, query=query, batch_id=batch_id)
            started = time.perf_counter()
            snapshot = self.reader.snapshot(wait_s=BROKER_WAIT_S)
            if self.readings is not None:
                self.readings.record_output(self.stream, snapshot, time.perf_counter() - started)
            if required <= snapshot.free_queue_size:
                if retry and self.hold is not None:
                    self.hold.on_awake(query, self.stream)
                return
            if retry >= self.retry_count:
                raise self._held(
                    query, batch_id, required, free=snapshot.free_queue_size, retry=retry
                )
            retry += 1
            self.sleeps += 1
            log.warning(
                "FG-QG-001 query group %s query %s: output stream %s has %d free of %d, "
                "micro-batch %d needs %d: sleeping %.3f s before retry %d of %d",
                self.query_group,
                query,
                self.stream,
                snapshot.free_queue_size,
                self.max_queue_size,
                batch_id,
                required,
                self.sleep_s,
                retry,
                self.retry_count,
            )
            if self.hold is not None:
                self.hold.on_sleep(query, self.stream, retry, self.sleep_s)
            self._wait(self.sleep_s)

    def _held(
        self, query: str, batch_id: int, required: int, *, free: int, retry: int
    ) -> QueryGroupHeld:
        held = QueryGroupHeld(
            query_group=self.query_group,
            query=query,
            stream=self.stream,
            batch_id=batch_id,
            required=required,
            free=free,
            max_queue_size=self.max_queue_size,
            sleeps=retry,
        )
        self.holds += 1
        log.error("%s", held)
        if self.hold is not None:
            self.hold.on_hold(held)
        return held
