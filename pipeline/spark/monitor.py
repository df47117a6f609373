"""A running query group's monitor: a daemon thread that, while the group runs, reads
the driver JVM's heap and which write tasks sleep on a full output stream queue (often,
for the hold), reads every input and output stream queue (every
``queue_metrics_interval_ms``), and releases a held group once its output queues have
drained (``auto_release``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.config import QueryGroupConfig
from pipeline.metrics import QueryGroupMetrics
from pipeline.spark.hold import Hold
from pipeline.spark.queue_gauges import QueueGauges
from pipeline.spark.states import QueryGroupState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DriverJvm:
    """What the monitor calls in the driver's JVM (Py4J objects): the JVM's view, the
    static ``SleepingTasks.of`` and the ``Runtime``."""

    jvm: Any
    sleeping_tasks: Any
    runtime: Any


class MonitoredGroup(Protocol):
    """What :class:`GroupMonitor` needs of its query group."""

    name: str
    config: QueryGroupConfig
    metrics: QueryGroupMetrics
    hold: Hold
    gauges: QueueGauges

    @property
    def state(self) -> QueryGroupState:
        """The group's state."""

    @property
    def spark(self) -> Any:
        """The group's SparkSession (a classic one: its driver JVM is read)."""

    def sample_queues(self) -> None:
        """Read every input and output stream queue once."""


class GroupMonitor:
    """The monitor thread of ``group`` (:meth:`start` once the queries run, :meth:`stop`
    when the group stops).

    Args:
        group: the running query group.
    """

    def __init__(self, group: MonitoredGroup) -> None:
        self.group = group
        self.name = group.name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._jvm: DriverJvm | None = None

    def start(self) -> None:
        """Start the thread."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"floodgate-{self.name}-monitor", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (from any thread but its own, whose pass then ends)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def signal(self) -> None:
        """Ask the thread to stop after its pass, without waiting."""
        self._stop.set()

    def _loop(self) -> None:
        """Refresh output queue and driver heap gauges; release a held group when
        ``auto_release``."""
        group = self.group.config.query_group
        interval = min(1.0, max(0.2, group.sleep_on_over_store_ms / 1000.0))
        queues_every = group.queue_metrics_interval_ms / 1000.0
        queues_due = 0.0
        while not self._stop.wait(interval):
            try:
                self.sample_heap()
                self.sample_sleeping()
            except Exception:
                log.debug("query group %s: driver JVM not read", self.name, exc_info=True)
            sampled = time.monotonic() >= queues_due
            if sampled:
                queues_due = time.monotonic() + queues_every
                try:
                    self.group.sample_queues()  # output queues included
                except Exception:
                    log.warning("query group %s: queues not read", self.name, exc_info=True)
            try:
                if self.group.state == QueryGroupState.HELD and group.auto_release:
                    self.group.gauges.refresh_outputs()
                    if self.group.hold.resume_ready(self.group.gauges.output_snapshots):
                        log.info("query group %s: output queues drained: auto release", self.name)
                        self.group.hold.release()
                elif not sampled and self.group.state not in (
                    QueryGroupState.HELD,
                    QueryGroupState.STARTING,
                ):
                    self.group.gauges.refresh_outputs()
            except Exception:
                log.warning("query group %s: monitor pass failed", self.name, exc_info=True)

    def _driver_jvm(self) -> DriverJvm:
        """The driver JVM's objects the monitor reads, looked up once per JVM.

        Py4J finds ``jvm.io.floodgate.spark.write.SleepingTasks`` by asking the JVM for
        a class at each dotted prefix (``io``, ``io.floodgate``, ...), and every prefix
        that is no class is a miss searched through each jar on the class path, some
        300 with Spark's: at 2-5 passes a second, that was a fifth of the driver JVM's
        CPU in a real-time query group, taken from its long-running tasks. (For the
        same reason ``SleepingTasks.of`` answers one string, not a Java list.)
        """
        jvm = self.group.spark._jvm
        assert jvm is not None  # a classic (not Connect) session
        if self._jvm is None or self._jvm.jvm is not jvm:
            self._jvm = DriverJvm(
                jvm=jvm,
                sleeping_tasks=jvm.io.floodgate.spark.write.SleepingTasks.of,
                runtime=jvm.java.lang.Runtime.getRuntime(),
            )
        return self._jvm

    def sample_sleeping(self) -> None:
        """Tell the hold which queries' write tasks sleep on a full output stream queue
        now, or slept since the last pass (those in the driver's JVM: every one with a
        local master), so that a sleep shorter than a pass still shows SLEEPING."""
        lines = str(self._driver_jvm().sleeping_tasks(self.name)).splitlines()
        self.group.hold.set_sleeping(tuple(line.split("\t", 1)) for line in lines)  # type: ignore[misc]

    def sample_heap(self) -> None:
        """Set the driver JVM's heap gauges (used, and its most)."""
        runtime = self._driver_jvm().runtime
        total, free, most = runtime.totalMemory(), runtime.freeMemory(), runtime.maxMemory()
        self.group.metrics.jvm_heap_used.labels(self.name).set(total - free)
        self.group.metrics.jvm_heap_max.labels(self.name).set(most)
