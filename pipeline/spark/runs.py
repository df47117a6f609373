"""A query group's running queries: each with its Spark query, its sink and what its
progress events said, by name and by Spark's query id; and each micro-batch's progress
counted into the group's metrics.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming import StreamingQuery

from pipeline.config import QueryGroupConfig
from pipeline.metrics import QueryGroupMetrics
from pipeline.spark.progress import QueryStats
from pipeline.spark.sink import OutputSink
from pipeline.spark.status import QueryStatus


@dataclass
class RunningQuery:
    """One query as it runs: its name in the file, Spark's query, its sink and the
    counts of its progress so far (kept across a hold's restarts)."""

    name: str
    query: StreamingQuery
    sink: OutputSink
    stats: QueryStats = field(default_factory=QueryStats)


class QueryRuns:
    """The running queries of query group ``config`` (thread-safe: Spark's listener bus
    reports progress from its own thread).

    Args:
        config: the query group file.
        metrics: the group's metrics, which each micro-batch's progress feeds.
    """

    def __init__(self, config: QueryGroupConfig, metrics: QueryGroupMetrics) -> None:
        self.config = config
        self.name = config.name
        self.metrics = metrics
        self._lock = threading.Lock()
        self._queries: dict[str, RunningQuery] = {}
        self._by_id: dict[str, RunningQuery] = {}

    def zero_series(self) -> None:
        """Every query's series exist at 0 before its first micro-batch."""
        for query in self.config.queries:
            for family in (self.metrics.batch_duration, self.metrics.input_tuples):
                family.labels(self.name, query)

    def add(self, running: RunningQuery) -> None:
        """Keep ``running`` (replacing the query of the same name, after a release)."""
        with self._lock:
            self._queries[running.name] = running
            self._by_id[str(running.query.id)] = running

    def get(self, name: str) -> RunningQuery | None:
        """The query of that name, if it ran."""
        with self._lock:
            return self._queries.get(name)

    def by_id(self, query_id: str) -> RunningQuery | None:
        """The query of Spark's id ``query_id``, if it is the group's."""
        with self._lock:
            return self._by_id.get(query_id)

    def all(self) -> list[RunningQuery]:
        """Every query, in the order they started."""
        with self._lock:
            return list(self._queries.values())

    def clear(self) -> None:
        """Forget every query (the group stopped)."""
        with self._lock:
            self._queries.clear()
            self._by_id.clear()

    def stats(self) -> dict[str, QueryStats]:
        """A snapshot of every query's :class:`QueryStats`."""
        with self._lock:
            return {name: QueryStats(**vars(r.stats)) for name, r in self._queries.items()}

    def statuses(self) -> dict[str, QueryStatus]:
        """Every query's line of ``GET /status``."""
        with self._lock:
            return {
                name: QueryStatus(
                    active=bool(r.query.isActive),
                    stats=QueryStats(**vars(r.stats)),
                    tuples_written=r.sink.tuples_written,
                )
                for name, r in self._queries.items()
            }

    def on_progress(self, query_id: str, progress: Any) -> None:
        """Count one micro-batch's ``QueryProgressEvent`` of query ``query_id`` (ignored
        when it is not the group's): its stats, and the batch's duration, input tuples,
        the sink's sleeps, queue check time and failed offset commits in the metrics."""
        with self._lock:
            running = self._by_id.get(query_id)
            if running is None:
                return
            stats = running.stats
            stats.input_tuples += int(progress.numInputRows)
            stats.batches += 1
            stats.last_batch_id = int(progress.batchId)
            stats.last_duration_ms = int(progress.batchDuration)
            stats.input_tuples_per_second = float(progress.inputRowsPerSecond or 0.0)
            stats.processed_tuples_per_second = float(progress.processedRowsPerSecond or 0.0)
            for op in progress.stateOperators or []:
                stats.dropped_by_watermark += int(op.numRowsDroppedByWatermark or 0)
            name = running.name
            sink_progress = getattr(progress, "sink", None)
            failed_before = running.sink.offset_commits_failed
            slept = running.sink.record(getattr(sink_progress, "metrics", None))
            offsets_failed = running.sink.offset_commits_failed - failed_before
            output = self.config.queries[name].output
        if offsets_failed:
            self.metrics.offset_commit_failures.labels(self.name, name).inc(offsets_failed)
        if slept:
            self.metrics.sleeps.labels(self.name, output).inc(slept)
        if running.sink.queue_check_s is not None:
            self.metrics.output_queue_check.labels(self.name, output).observe(
                running.sink.queue_check_s
            )
        self.metrics.batch_duration.labels(self.name, name).observe(
            int(progress.batchDuration) / 1000.0
        )
        self.metrics.input_tuples.labels(self.name, name).inc(int(progress.numInputRows))

    def await_listener(self, timeout_s: float = 10.0) -> None:
        """Wait until the listener has seen each query's last progress.

        Listener events reach Python asynchronously (Spark's listener bus); the query's
        ``lastProgress`` is set before the event is posted, so this bounds the lag.
        """
        deadline = time.monotonic() + timeout_s
        running = self.all()
        for r in running:
            last = r.query.lastProgress
            if last is None:
                continue
            while r.stats.last_batch_id < int(last.batchId) and time.monotonic() < deadline:
                time.sleep(0.02)
