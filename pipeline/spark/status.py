"""A query group as ``GET /status`` shows it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.spark.session import spark_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.config import QueryGroupConfig
    from pipeline.errors import QueryGroupHeld
    from pipeline.queues.snapshot import QueueSnapshot


@dataclass(frozen=True)
class QueryStatus:
    """One query's line of the status: whether it runs, what its listener saw
    (:class:`~pipeline.spark.query_group.QueryStats`), what its sink wrote."""

    active: bool
    stats: Any
    tuples_written: int


def group_status(
    config: QueryGroupConfig,
    *,
    state: str,
    held: QueryGroupHeld | None,
    held_since: float | None,
    queries: Mapping[str, QueryStatus],
    output_queues: Mapping[str, QueueSnapshot],
    discarded: Mapping[str, int],
    spark: SparkSession | None,
) -> dict[str, Any]:
    """A query group as ``GET /status`` shows it: state, hold, queries, output queues.

    Args:
        config: the group's config.
        state: its state's name.
        held / held_since: why it is held and since when (epoch seconds), or ``None``.
        queries: per query, its :class:`QueryStatus`.
        output_queues: per output stream, the last read of its queue.
        discarded: per input stream, tuples skipped by discarding releases.
        spark: the group's SparkSession, ``None`` before it started.

    Returns:
        A JSON-ready dict: ``query_group``, ``state``, ``held`` (``None`` or the
        stream, micro-batch, required and free space, sleeps, since when),
        ``queries`` (per query: active, batches, input rows, last batch and its
        duration in ms, rates in tuples/s, tuples written), ``output_queues``
        (per stream: length, max and free queue size at the last read),
        ``discarded`` (per input stream), ``on_hold_input``, ``auto_release``,
        ``spark`` (master, application id, driver host, executors' block managers
        (the driver's included), settings chosen with their source).
    """
    return {
        "query_group": config.name,
        "state": state,
        "held": None
        if held is None
        else {
            "query": held.query,
            "stream": held.stream,
            "batch_id": held.batch_id,
            "required": held.required,
            "free_queue_size": held.free,
            "max_queue_size": held.max_queue_size,
            "sleeps": held.sleeps,
            "since": held_since,
        },
        "queries": {
            name: {
                "active": q.active,
                "batches": q.stats.batches,
                "input_tuples": q.stats.input_tuples,
                "last_batch_id": q.stats.last_batch_id,
                "last_duration_ms": q.stats.last_duration_ms,
                "input_tuples_per_second": q.stats.input_tuples_per_second,
                "processed_tuples_per_second": q.stats.processed_tuples_per_second,
                "tuples_written": q.tuples_written,
            }
            for name, q in queries.items()
        },
        "output_queues": {
            name: {
                "length": snap.length,
                "max_queue_size": snap.max_queue_size,
                "free_queue_size": snap.free_queue_size,
            }
            for name, snap in sorted(output_queues.items())
        },
        "discarded": dict(discarded),
        "on_hold_input": config.query_group.on_hold_input,
        "auto_release": config.query_group.auto_release,
        "spark": spark_status(spark),
    }


def spark_status(spark: SparkSession | None) -> dict[str, Any] | None:
    """Where a group's tasks run: master, application id, the block managers of the
    driver and executors (Spark's public ``SparkStatusTracker``), and the settings
    :func:`~pipeline.spark.session.build_spark_session` chose with their source;
    ``None`` before the group's session started."""
    if spark is None:
        return None
    sc = spark.sparkContext
    try:
        infos = sc._jsc.sc().statusTracker().getExecutorInfos()
        executors = [
            {"host": i.host(), "port": i.port(), "running_tasks": i.numRunningTasks()}
            for i in infos
        ]
    except Exception:  # the context is stopping: no executors to tell
        executors = []
    return {
        "master": sc.master,
        "application_id": sc.applicationId,
        "driver_host": sc.getConf().get("spark.driver.host"),
        "executors": executors,
        "settings": spark_settings(),
    }
