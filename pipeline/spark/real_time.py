"""A query group in Spark's Real-Time Mode (``trigger = "real-time"``).

Spark 4.1 added Real-Time Mode (``DataStreamWriter.trigger(realTime=...)``): each
input partition is read by one long-running task that hands every record on as it
arrives, and a batch ends only at its deadline, the trigger's duration, when its
offsets and state are checkpointed. The engine refuses what the mode cannot run, but
late or in words only a Spark developer reads: a sink off its allowlist (every
third-party sink, so ``floodgate_kafka`` too), a query with too few task slots (a
stateless query then stalls without a word). A real-time group is checked here when
it starts instead, and each refusal names the key or the query and the reason
(:func:`check_real_time`, :func:`check_plan`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import QueryGroupConfig
from pipeline.config.query_group import QueryGroupSection
from pipeline.errors import ConfigError, compact_error

log = logging.getLogger(__name__)

#: Spark's least real-time batch (``spark.sql.streaming.realTimeMode.minBatchDuration``).
MIN_BATCH_DURATION = "spark.sql.streaming.realTimeMode.minBatchDuration"

#: Spark's sink allowlist check: on, it refuses every sink but its own Kafka, memory,
#: console and ``foreach`` sinks.
ALLOWLIST_CHECK = "spark.sql.streaming.realTimeMode.allowlistCheck"

#: The tasks after a shuffle: in real-time mode each holds a slot for the whole batch.
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"

#: RocksDB's count of a state store's rows: kept, each write of a key first reads it
#: (Spark's ``RocksDB.put``). A real-time aggregation writes its state for every tuple,
#: so a real-time group turns the count off unless its file sets it (Databricks'
#: published Real-Time Mode benchmark does the same); the state operators' row totals
#: in a query's progress then read 0.
TRACK_STATE_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"

#: A real-time write task's transaction stays open for its whole batch: its
#: ``transaction.timeout.ms`` is the batch's duration and this much more.
TRANSACTION_MARGIN_MS = 60_000


def real_time_transaction_timeout_ms(group: QueryGroupSection) -> int:
    """The ``transaction.timeout.ms`` of a real-time group's write tasks, ms: the batch's
    duration and :data:`TRANSACTION_MARGIN_MS` (a task commits at the batch's end; the
    broker's ``transaction.max.timeout.ms``, 15 minutes by default, must allow it)."""
    return group.real_time_checkpoint_interval_ms + TRANSACTION_MARGIN_MS


def session_settings(config: QueryGroupConfig) -> dict[str, str]:
    """What a real-time group sets on its own SparkSession: the sink allowlist check off
    (Spark refuses any sink but its own otherwise; the group checks the query's
    operators itself, :func:`check_plan`), RocksDB's row count off
    (:data:`TRACK_STATE_ROWS`), and the file's ``spark.sql.streaming.realTimeMode.*``
    settings, its ``spark.sql.shuffle.partitions`` (each is a task slot held for the
    whole batch after a shuffle) and its row count setting, which a session shared by
    several groups would otherwise not carry."""
    settings = {TRACK_STATE_ROWS: "false"}
    settings.update(
        {
            key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in config.spark.conf.items()
            if key.startswith("spark.sql.streaming.realTimeMode.")
            or key in (SHUFFLE_PARTITIONS, TRACK_STATE_ROWS)
        }
    )
    settings[ALLOWLIST_CHECK] = "false"
    return settings


def check_real_time(config: QueryGroupConfig, spark: SparkSession) -> None:
    """Refuse, before any query starts, a real-time group that Spark cannot run.

    Refused: a query whose ``output_mode`` is not ``update`` (Spark's
    ``UnsupportedOperationChecker`` for Real-Time Mode); a read that caps, splits or
    aligns a batch (``max_tuples_per_trigger`` set, ``max_event_time_drift_ms``): a
    real-time batch has no end offset (Spark's Kafka source refuses
    ``maxOffsetsPerTrigger`` and ``minPartitions`` for the same reason); adaptive query
    execution set on (Spark turns it off in this mode); a
    ``real_time_checkpoint_interval`` below Spark's ``minBatchDuration``; and, on a
    local master, more input partitions than task slots (each is one task that runs
    the whole batch: Spark runs the others only after the deadline, so their
    partitions never move). With ``delivery = "exactly-once"``, a
    ``transaction.timeout.ms`` in ``[kafka.client]`` no longer than the interval (a
    task's transaction lasts its batch).

    Args:
        config: the group's config, ``trigger = "real-time"``.
        spark: the group's own SparkSession.

    Raises:
        ConfigError: naming the key (and query or stream) and why.
    """
    group = config.query_group
    for name, query in config.queries.items():
        if query.output_mode != "update":
            raise ConfigError(
                f"queries.{name}.output_mode = {query.output_mode!r}: a real-time query "
                "writes each result as its tuples arrive, so Spark runs it only in "
                "'update' mode",
                key=f"queries.{name}.output_mode",
                value=query.output_mode,
                allowed="update",
            )
    for stream, settings in config.input_streams.items():
        for section, level in ((f"input_streams.{stream}", settings), ("query_group", group)):
            if level.max_tuples_per_trigger is not None:
                raise _uncapped(f"{section}.max_tuples_per_trigger", level.max_tuples_per_trigger)
        if settings.max_event_time_drift_ms is not None:
            raise ConfigError(
                f"input_streams.{stream}.max_event_time_drift_ms is set: event-time "
                "alignment cuts a batch at an end offset, and a real-time batch has none; "
                "remove it (the watermark still holds back late tuples) or use "
                'trigger = "processing-time"',
                key=f"input_streams.{stream}.max_event_time_drift_ms",
                value=settings.max_event_time_drift_ms,
                allowed="unset with trigger = 'real-time'",
            )
    if str(config.spark.conf.get("spark.sql.adaptive.enabled", "false")).lower() == "true":
        raise ConfigError(
            "spark.conf.spark.sql.adaptive.enabled = true: Spark runs a real-time query "
            "without adaptive query execution (its plan is fixed for the whole batch); "
            "remove the setting",
            key="spark.conf.spark.sql.adaptive.enabled",
            value="true",
            allowed="false or unset with trigger = 'real-time'",
        )
    least = _ms(spark, spark.conf.get(MIN_BATCH_DURATION, "5000") or "5000")
    interval = group.real_time_checkpoint_interval_ms
    if interval < least:
        raise ConfigError(
            f"query_group.real_time_checkpoint_interval = "
            f"{group.real_time_checkpoint_interval!r} is shorter than Spark's least "
            f"real-time batch, {least} ms ({MIN_BATCH_DURATION})",
            key="query_group.real_time_checkpoint_interval",
            value=group.real_time_checkpoint_interval,
            allowed=f"at least {least} ms",
        )
    given = str(config.kafka.client.get("transaction.timeout.ms", "")).strip()
    if group.delivery == "exactly-once" and given.isdigit() and int(given) <= interval:
        raise ConfigError(
            f"kafka.client.transaction.timeout.ms = {given}: with delivery = 'exactly-once' "
            "a real-time write task's transaction lasts its whole batch, "
            f"real_time_checkpoint_interval = {group.real_time_checkpoint_interval!r} "
            f"({interval} ms), and the broker would abort it first; remove the setting "
            f"(Floodgate then gives {real_time_transaction_timeout_ms(group)} ms) or make "
            "it longer",
            key="kafka.client.transaction.timeout.ms",
            value=given,
            allowed=f"more than {interval} ms",
        )
    _check_slots(config, spark)


def _uncapped(key: str, value: int) -> ConfigError:
    return ConfigError(
        f"{key} = {value}: a real-time batch reads each input partition from where the "
        "last ended until its deadline, with no end offset to cap; remove it or use "
        'trigger = "processing-time"',
        key=key,
        value=value,
        allowed="unset with trigger = 'real-time'",
    )


def _check_slots(config: QueryGroupConfig, spark: SparkSession) -> None:
    """Refuse a group on a local master that reads more input partitions than it has
    cores; on a cluster the executors may not have registered yet: logged only."""
    needed = {
        name: sum(
            config.input_settings(stream).partitions
            for stream in config.input_streams
            if name in config.readers(stream)
        )
        for name in config.queries
    }
    slots = spark.sparkContext.defaultParallelism
    total = sum(needed.values())
    if total <= slots:
        return
    reading = ", ".join(f"{name} reads {n}" for name, n in needed.items())
    message = (
        f"query group {config.name} in real-time mode needs a task slot per input partition "
        f"for the whole batch, {total} ({reading}), and its Spark has {slots}"
    )
    if (spark.sparkContext.master or "").startswith("local"):
        raise ConfigError(
            f"{message}: the partitions past the slots would never be read; give the "
            "master more cores or the input streams fewer partitions",
            key="spark.master",
            value=spark.sparkContext.master,
            allowed=f"at least {total} cores",
        )
    log.warning("%s now (more executors may still register)", message)


def _ms(spark: SparkSession, text: str) -> int:
    """Milliseconds of a Spark time setting (``5000``, ``5s``), as Spark reads it."""
    jvm = spark._jvm
    assert jvm is not None  # a classic (not Connect) session
    return int(jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(text))


def check_plan(
    spark: SparkSession,
    query: Any,
    *,
    query_group: str,
    name: str,
    exactly_once: bool,
    timeout_s: float = 60.0,
) -> None:
    """Refuse a started real-time query whose plan holds an operator Spark's Real-Time
    Mode does not run (``RealTimeModeAllowlist``: the check the group's session turns
    off with the sink's, done here for operators only).

    With ``delivery = "exactly-once"``, log how its write tasks commit exactly once: a
    task that reads its own input (no shuffle) commits the input position its rows came
    from (the JVM sink's ``InputMarker``); after a shuffle it commits its batch marker,
    as in a micro-batch, and a batch run again after a crash reads to where its first
    run stopped, which the source logs (:func:`pipeline.names.real_time_ends_group_id`).

    Spark plans the first real-time batch right after the start; this waits for that
    plan, then checks it.

    Args:
        spark: the group's SparkSession.
        query: the started ``StreamingQuery``.
        query_group, name: the group's and the query's names, for the error.
        exactly_once: the group's ``delivery`` is ``exactly-once``.
        timeout_s: how long to wait for the first plan, s; a query that ended or has no
            plan by then is left to the group's own failure handling.

    Raises:
        ConfigError: an operator is not on Spark's list (Spark's message names it).
    """
    import time

    execution = query._jsq.streamingQuery()
    deadline = time.monotonic() + timeout_s
    last = execution.lastExecution()
    while last is None and query.isActive and time.monotonic() < deadline:
        time.sleep(0.05)
        last = execution.lastExecution()
    if last is None:
        return
    jvm = spark._jvm
    assert jvm is not None  # a classic (not Connect) session
    allowlist = jvm.org.apache.spark.sql.execution.streaming.runtime.RealTimeModeAllowlist
    try:
        allowlist.checkAllowedPhysicalOperator(last.executedPlan(), True)
    except Exception as exc:
        raise ConfigError(
            f"query group {query_group} query {name}: Spark's real-time mode does not run "
            f"this query: {compact_error(exc)}",
            key=f"queries.{name}.sql",
            allowed="a query real-time mode runs (docs/real-time-mode.md)",
        ) from exc
    shuffle = shuffle_of(last.executedPlan().treeString())
    if exactly_once and shuffle is not None:
        log.info(
            "query group %s query %s: %s lies between its source and its sink: each write "
            "task commits its batch marker, and a batch run again reads to where its first "
            "run stopped",
            query_group,
            name,
            shuffle,
        )


#: A shuffle in a physical plan's tree string: Spark's ``ShuffleExchangeExec`` is
#: printed ``Exchange <partitioning>``; a broadcast (``BroadcastExchange``) stays in
#: the task that reads the stream, and a reused exchange is a shuffle already found.
_SHUFFLE = re.compile(r"^[\s:+\-]*(Exchange \S.*)$", re.MULTILINE)


def shuffle_of(plan: str) -> str | None:
    """The first shuffle in a physical plan's tree string (Spark's
    ``SparkPlan.treeString``), without its plan id; ``None`` when it has none."""
    found = _SHUFFLE.search(plan)
    return None if found is None else re.sub(r",? \[plan_id=\d+\]", "", found.group(1)).strip()
