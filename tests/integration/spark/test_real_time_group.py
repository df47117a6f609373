"""Query groups in Spark's Real-Time Mode (``trigger = "real-time"``): the JVM source's
long-running tasks hand each tuple to the JVM sink as it is read, in both deliveries
(exactly once: a transaction per task and batch, visible at the batch's end), and what
the mode cannot run is refused at start naming the key and the reason."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pipeline.client import connect
from pipeline.config import parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import ConfigError
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryGroupState
from tests.integration.helpers import (
    each_count_once,
    flights_raw_config,
    origin_hour_counts,
    real_time,
    wait_until,
)


def identity(t: Any) -> tuple[Any, ...]:
    hour = t["time_hour"]
    ms = hour if isinstance(hour, int) else int(hour.timestamp() * 1000)
    return (t["carrier"], t["flight"], t["origin"], ms, t["sched_dep_time"])


def real_time_raw(run_id: str, tmp_path: Path, **group: Any) -> dict[str, Any]:
    """The pass-through group in real-time mode (:func:`real_time`)."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    return real_time(raw, **group)


def test_a_real_time_group_writes_every_tuple_exactly_once_across_batches(
    run_id: str,
    tmp_path: Path,
    bootstrap: str,
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    start_query_group: Callable[..., QueryGroup],
    schemas: SchemaRepository,
) -> None:
    raw = real_time_raw(run_id, tmp_path, delivery="exactly-once")
    config = parse_query_group(raw, env={})
    first, second = flights[:500], flights[500:1_000]
    produce(config, first)
    group = start_query_group(config, registry=CollectorRegistry())
    out = config.output_streams["flights_copy"].topic
    codec = config.stream_codec("output", "flights_copy", schemas)

    def written() -> list[Any]:
        return [codec.decode(r.value()) for r in read_all(bootstrap, out)]

    wait_until(lambda: len(written()) >= len(first), 60, "the tuples put before the start")
    produce(config, second)  # while the batch runs: read as they come
    wait_until(lambda: len(written()) >= 1_000, 60, "the tuples put while it runs")
    query = group.queries()["copy"]
    wait_until(lambda: len(query.recentProgress) >= 2, 60, "two real-time batches")
    group.check()
    assert group.state == QueryGroupState.EXECUTING
    counts = Counter(identity(t) for t in written())
    assert counts == Counter(identity(t) for t in first + second)


def test_a_real_time_group_refuses_what_the_mode_cannot_run(
    run_id: str,
    tmp_path: Path,
    start_query_group: Callable[..., QueryGroup],
) -> None:
    raw = real_time_raw(run_id, tmp_path)
    raw["queries"]["copy"]["output_mode"] = "append"
    with pytest.raises(ConfigError, match=r"queries\.copy\.output_mode = 'append'.*'update'"):
        start_query_group(parse_query_group(raw, env={}))

    raw = real_time_raw(run_id, tmp_path, max_tuples_per_trigger=100)
    with pytest.raises(ConfigError, match=r"query_group\.max_tuples_per_trigger = 100"):
        start_query_group(parse_query_group(raw, env={}))

    raw = real_time_raw(run_id, tmp_path, partitions=3)
    with pytest.raises(ConfigError, match=r"needs a task slot per input partition.*3 \(copy"):
        start_query_group(parse_query_group(raw, env={}))

    raw = real_time_raw(run_id, tmp_path, delivery="exactly-once")
    raw.setdefault("kafka", {}).setdefault("client", {})["transaction.timeout.ms"] = 2_000
    with pytest.raises(ConfigError, match=r"transaction\.timeout\.ms = 2000.*lasts its whole"):
        start_query_group(parse_query_group(raw, env={}))

    raw = real_time_raw(run_id, tmp_path, interval="500 milliseconds")
    with pytest.raises(ConfigError, match=r"shorter than Spark's least real-time batch, 1000 ms"):
        start_query_group(parse_query_group(raw, env={}))


def test_the_per_origin_hourly_aggregation_runs_in_real_time_exactly_once(
    run_id: str,
    tmp_path: Path,
    bootstrap: str,
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    start_query_group: Callable[..., QueryGroup],
    schemas: SchemaRepository,
) -> None:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints")
    raw["queries"].pop("delays_by_carrier_day")
    raw["output_streams"].pop("delays_by_carrier_day")
    # One input partition and one shuffle partition: two slots for the whole batch.
    real_time(raw, partitions=1, delivery="exactly-once")
    raw["spark"]["conf"]["spark.sql.shuffle.partitions"] = 1
    config = parse_query_group(raw, env={})
    records = flights[:1_000]
    produce(config, records)
    group = start_query_group(config, registry=CollectorRegistry())
    want = each_count_once(records)

    def sorted_counts() -> dict[tuple[str, int], list[int]]:
        return {k: sorted(v) for k, v in origin_hour_counts(bootstrap, config, schemas).items()}

    wait_until(lambda: sorted_counts() == want, 90, "every origin-hour's count, each once")
    group.check()


def test_a_full_output_queue_slows_a_real_time_group_then_holds_it_and_nothing_is_lost(
    run_id: str,
    tmp_path: Path,
    bootstrap: str,
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    start_query_group: Callable[..., QueryGroup],
    schemas: SchemaRepository,
) -> None:
    raw = real_time_raw(
        run_id,
        tmp_path,
        sleep_on_over_store_ms=100,
        sleep_on_over_store_retry_count=3,
        control_dir=str(tmp_path / "run"),
    )
    raw["output_streams"]["flights_copy"]["max_queue_size"] = 300
    config = parse_query_group(raw, env={})
    records = flights[:1_000]
    produce(config, records)
    ensure_topics(bootstrap, config.topics())
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        output = connector.open_stream_output(config.name, "flights_copy")
        lengths: list[int] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.05):
                lengths.append(output.probe.snapshot().length)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        group = start_query_group(config, registry=CollectorRegistry())
        # Nobody reads: the long-running tasks write up to the bound and end the batch
        # there, so it commits what it wrote; the next batch finds no room, sleeps 3 times,
        # and the group holds with nothing of that batch written.
        wait_until(lambda: group.state == QueryGroupState.HELD, 90, "HELD", every_s=0.05)
        held = group.hold.held
        assert held is not None and held.stream == "flights_copy" and held.sleeps == 3
        assert held.batch_id >= 1, held
        sleeps = group.registry.get_sample_value(
            "floodgate_query_group_sleeps_total",
            {"query_group": config.name, "stream": "flights_copy"},
        )
        assert sleeps == 3
        # The reader catches up, the group is released, and the rest is written.
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while len({identity(t) for t in got}) < len(records) and time.monotonic() < deadline:
            got.extend(output.get(max_tuples=500, timeout_s=0.5))
            if group.state == QueryGroupState.HELD:
                group.hold.release()
        stop.set()
        watcher.join()
    # Filled up to its bound (less a tuple per task), never past it.
    assert 290 <= max(lengths) <= 300, max(lengths)
    # At least once: each tuple read; a batch cut by a hold writes again what it wrote.
    missing = {identity(t) for t in records} - {identity(t) for t in got}
    assert not missing, (len(missing), len(got), group.state, group.hold.held)
