"""Query groups in Spark's Real-Time Mode (``trigger = "real-time"``): the JVM source's
long-running tasks hand each tuple to the JVM sink as it is read, in both deliveries,
and what the mode cannot run is refused at start naming the key and the reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pipeline.config import parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import ConfigError
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryGroupState
from tests.integration.helpers import flights_raw_config, wait_until

#: A real-time batch of 2 s (Spark's least is 5 s; lowered for the test's pace).
REAL_TIME = {
    "trigger": "real-time",
    "real_time_checkpoint_interval": "2 seconds",
}
SPARK_CONF = {"spark.sql.streaming.realTimeMode.minBatchDuration": "1000"}


def identity(t: Any) -> tuple[Any, ...]:
    hour = t["time_hour"]
    ms = hour if isinstance(hour, int) else int(hour.timestamp() * 1000)
    return (t["carrier"], t["flight"], t["origin"], ms, t["sched_dep_time"])


def real_time_raw(run_id: str, tmp_path: Path, **group: Any) -> dict[str, Any]:
    """The pass-through group, 2 input partitions (one slot each on ``local[2]``), in
    real-time mode and update output."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"].pop("max_tuples_per_trigger", None)
    raw["query_group"].update({**REAL_TIME, "partitions": 2, **group})
    raw["queries"]["copy"]["output_mode"] = "update"
    raw["spark"] = {"conf": dict(SPARK_CONF)}
    return raw


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_real_time_group_writes_every_tuple_once_across_batches(
    delivery: str,
    run_id: str,
    tmp_path: Path,
    bootstrap: str,
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    start_query_group: Callable[..., QueryGroup],
    schemas: SchemaRepository,
) -> None:
    config = parse_query_group(real_time_raw(run_id, tmp_path, delivery=delivery), env={})
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

    raw = real_time_raw(run_id, tmp_path, real_time_checkpoint_interval="500 milliseconds")
    with pytest.raises(ConfigError, match=r"shorter than Spark's least real-time batch, 1000 ms"):
        start_query_group(parse_query_group(raw, env={}))


