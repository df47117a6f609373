"""Sleeping, holding and releasing a query group on a full output stream queue.

A query whose micro-batch output does not fit its output stream queue sleeps
(SLEEPING: its write tasks sleep on the executors, :meth:`Hold.set_sleeping`) and
retries; after ``sleep_on_over_store_retry_count`` sleeps a task gives up, the query
fails with ``FG-QG-002`` and the group is HELD (:meth:`Hold.on_hold`): every query is
stopped, its batch uncommitted. :meth:`Hold.release` (CLI, HTTP, or
``auto_release`` once :meth:`Hold.resume_ready`) starts the queries again from their
checkpoints, so the held batch is replayed (``on_hold_input = "retain"``) or skipped
with the rest of the input queue (``"discard"``: the skipped tuples are counted).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pipeline.config import QueryGroupConfig
from pipeline.errors import QueryGroupError, QueryGroupHeld
from pipeline.metrics import QueryGroupMetrics
from pipeline.queues.probe import QueueProbe
from pipeline.queues.snapshot import QueueSnapshot
from pipeline.spark.states import QueryGroupState

log = logging.getLogger(__name__)


class HeldGroup(Protocol):
    """What :class:`Hold` needs of its query group."""

    name: str
    config: QueryGroupConfig
    metrics: QueryGroupMetrics
    bootstrap_servers: str

    @property
    def state(self) -> QueryGroupState:
        """The group's state."""

    @state.setter
    def state(self, value: QueryGroupState) -> None: ...

    @property
    def stopping(self) -> bool:
        """Whether the group is being stopped (a hold then changes nothing)."""

    def running_queries(self) -> Iterable[Any]:
        """The group's Spark streaming queries (``StreamingQuery``) as they run now."""

    def start_queries(self) -> None:
        """Start every query from its checkpoint."""


class Hold:
    """The sleep, hold and release of one query group: what its write tasks' sleeps
    and give-ups mean for it (:meth:`set_sleeping`, :meth:`on_hold`), and the release.

    Args:
        group: the query group (:class:`HeldGroup`).
        state_lock: the lock every change of the group's state takes.
    """

    def __init__(self, group: HeldGroup, state_lock: threading.RLock) -> None:
        self._group = group
        self._state_lock = state_lock
        #: Why the group is held (``None`` unless HELD), and since when (epoch seconds).
        self.held: QueryGroupHeld | None = None
        self.held_since: float | None = None
        #: Input tuples skipped on release, per input stream (``on_hold_input = "discard"``).
        self.discarded: dict[str, int] = {}
        #: Per input stream, the offsets each partition's reading starts at after a
        #: discarding release (the source's ``discardBefore`` option).
        self.discard_before: dict[str, dict[int, int]] = {}
        #: Spark run ids of the query runs a hold ended: their exceptions and
        #: termination events (which may arrive after the release) are no failure.
        self.retired_runs: set[str] = set()
        self._sleeping: set[tuple[str, str]] = set()
        self._holder: threading.Thread | None = None

    # -- the guards' reports -----------------------------------------------------

    def set_sleeping(self, sleeping: Iterable[tuple[str, str]]) -> None:
        """The ``(query, output stream)`` pairs whose write tasks sleep on a full output
        stream queue now or slept since the last report: EXECUTING turns SLEEPING while
        there is one, and back when there is none. (The sleeps are counted from each
        micro-batch's progress.)"""
        group = self._group
        now = set(sleeping)
        with self._state_lock:
            self._sleeping = now
            if now and group.state == QueryGroupState.EXECUTING:
                group.state = QueryGroupState.SLEEPING
            elif not now and group.state == QueryGroupState.SLEEPING:
                group.state = QueryGroupState.EXECUTING

    def on_hold(self, held: QueryGroupHeld) -> None:
        """Hold the group.

        Called when a query failed with ``FG-QG-002`` (a write task gave up on a full
        output stream queue, its transaction aborted): the group turns HELD, and a
        thread of its own stops every other query, its micro-batch uncommitted.
        """
        group = self._group
        with self._state_lock:
            if group.state == QueryGroupState.HELD or group.stopping:
                return
            self.held = held
            self.held_since = time.time()
            self._sleeping.clear()
            self.retired_runs.update(str(q.runId) for q in group.running_queries())
            group.state = QueryGroupState.HELD
            group.metrics.holds.labels(group.name, held.stream).inc()
            holder = threading.Thread(
                target=self._stop_queries, name=f"floodgate-{group.name}-hold", daemon=True
            )
            holder.start()  # before it is shared: a release may join it at once
            self._holder = holder

    def _stop_queries(self) -> None:
        for query in list(self._group.running_queries()):
            try:
                query.stop()
            except Exception:
                log.debug("query %s: stop on hold", query.name, exc_info=True)

    def join(self) -> None:
        """Wait until a hold has finished stopping the queries."""
        holder = self._holder
        if holder is not None:
            holder.join()

    def raise_held(self) -> None:
        """Raise :class:`~pipeline.errors.QueryGroupHeld` when the group is HELD.

        Raises:
            QueryGroupHeld: with the held stream, micro-batch, required and free space.
        """
        self.join()
        held = self.held
        if self._group.state == QueryGroupState.HELD and held is not None:
            raise QueryGroupHeld(
                query_group=self._group.name,
                query=held.query,
                stream=held.stream,
                batch_id=held.batch_id,
                required=held.required,
                free=held.free,
                max_queue_size=held.max_queue_size,
                sleeps=held.sleeps,
            )

    # -- release -------------------------------------------------------------------

    def release(self) -> None:
        """Release a HELD query group: start its queries again from their checkpoints.

        With ``on_hold_input = "retain"`` the held micro-batch is replayed first (its
        offsets are in Spark's offset log, its output is not in Kafka); with
        ``"discard"``, every query skips to the end of its input as it is now, and
        the skipped tuples are counted (``floodgate_query_group_discarded_tuples_total``,
        log code ``FG-QG-004``).

        Raises:
            QueryGroupError: the group is not HELD (the message names its state).
        """
        group = self._group
        self._require_held()
        # Wait for the hold to finish stopping the queries, outside the state lock:
        # a stopping query's batch thread may still report to the group.
        self.join()
        for query in list(group.running_queries()):
            while query.isActive:
                time.sleep(0.05)
        with self._state_lock:
            self._require_held()
            if group.config.query_group.on_hold_input == "discard":
                self._discard_input()
            held = self.held
            group.state = QueryGroupState.STARTING
            self.held = None
            self.held_since = None
            log.info(
                "FG-QG-003 query group %s released (held on output stream %s, micro-batch %s)",
                group.name,
                held.stream if held else "?",
                held.batch_id if held else "?",
            )
            group.start_queries()
            group.state = QueryGroupState.EXECUTING

    def _require_held(self) -> None:
        state = self._group.state
        if state != QueryGroupState.HELD:
            raise QueryGroupError(
                f"cannot release: the query group is {state.value}, not HELD",
                query_group=self._group.name,
            )

    def _discard_input(self) -> None:
        """Skip each input queue to its end now, counting what is skipped."""
        group = self._group
        config = group.config
        for name in config.input_streams:
            if not config.readers(name):
                continue
            probe = QueueProbe.for_input_stream(
                config, name, bootstrap_servers=group.bootstrap_servers
            )
            try:
                snapshot = probe.snapshot()
            finally:
                probe.close()
            skipped = snapshot.length
            before = self.discard_before.setdefault(name, {})
            for p, queue in snapshot.partitions.items():
                before[p] = max(before.get(p, 0), queue.high)
            self.discarded[name] = self.discarded.get(name, 0) + skipped
            group.metrics.discarded.labels(group.name, name).inc(skipped)
            log.warning(
                "FG-QG-004 query group %s: discarded %d input tuples of stream %s on release "
                "(on_hold_input = discard); queries go on from offsets %s",
                group.name,
                skipped,
                name,
                dict(sorted(before.items())),
            )

    def resume_ready(self, snapshots: Mapping[str, QueueSnapshot]) -> bool:
        """Whether ``auto_release`` may release now.

        Args:
            snapshots: a fresh read of every output stream queue, by stream.

        Returns:
            True when every output queue has ``resume_free_queue_size_threshold``
            percent free, and the held stream room for the held batch.
        """
        held = self.held
        for name, snapshot in snapshots.items():
            threshold = self._group.config.output_settings(name).resume_free_queue_size_threshold
            if snapshot.free_queue_size * 100 < threshold * snapshot.max_queue_size:
                return False
            if (
                held is not None
                and held.stream == name
                and snapshot.free_queue_size < held.required
            ):
                return False
        return True
