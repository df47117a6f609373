"""The sweeper against a real broker, a real SparkSession and real files (DESIGN.md
section 4.3; seed 001): a query group consumes an input queue more slowly than a
producer fills it; the sweeper moves the backlog into BLOBs and truncates the broker;
the query group reads through broker and BLOB ranges and outputs every tuple once,
in the producer's order."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.broker import ensure_topics
from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo import read_all
from pipeline.query_group import QueryGroup
from pipeline.serde import SchemaRepository, StreamCodec
from sweeper.config import SweeperSettings
from sweeper.service import PartitionOutcome, Sweeper

from .conftest import flights_raw_config

DEADLINE_S = 240.0


def sequenced(flights: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` flight tuples whose ``flight`` field is the sequence number 0..n-1."""
    return [{**flights[i % len(flights)], "flight": i} for i in range(n)]


def swept_group(run_id: str, tmp_path: Path, catalog_url: str, **group: Any) -> QueryGroupConfig:
    """The passthrough query group on one input and one output partition (so output
    order is input order), its input swept through ``catalog_url``."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"].update(sweep_catalog_url=catalog_url, output_queue_check=False, **group)
    raw["input_streams"]["flights"].update(partitions=1, max_queue_size=1_000_000)
    raw["output_streams"]["flights_copy"]["partitions"] = 1
    return parse_query_group(raw, env={})


@dataclass
class Run:
    sweeper: Sweeper
    outcomes: list[PartitionOutcome]
    config: QueryGroupConfig


@pytest.fixture
def sweeper_for(
    bootstrap: str, tmp_path: Path
) -> Iterator[Callable[..., tuple[Sweeper, QueryGroupConfig]]]:
    made: list[Sweeper] = []

    def make(config: QueryGroupConfig, **settings: Any) -> tuple[Sweeper, QueryGroupConfig]:
        stream = config.input_streams["flights"]
        ensure_topics(bootstrap, {stream.topic: (1, 1)})
        sweeper = Sweeper(
            SweeperSettings(
                catalog_url=config.query_group.sweep_catalog_url or "",
                blob_dir=str(tmp_path / "blobs"),
                **settings,
            ),
            [config],
            bootstrap_servers=bootstrap,
            on_written=settings.pop("on_written", None),
        )
        made.append(sweeper)
        return sweeper, config

    yield make
    for sweeper in made:
        sweeper.catalog.close()


def sample(sweeper: Sweeper) -> tuple[int, int]:
    """``(backlog, broker-resident backlog)`` of the swept queue's partition 0: tuples
    not consumed yet, and those of them the broker still holds."""
    part = sweeper.queues[0].probe.snapshot().partitions[0]
    committed = part.committed if part.committed is not None else 0
    return part.high - committed, part.high - part.position


def test_a_producer_at_three_times_the_service_rate_is_swept_and_nothing_is_lost(
    bootstrap: str,
    spark: Any,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    sweeper_for: Callable[..., tuple[Sweeper, QueryGroupConfig]],
) -> None:
    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = swept_group(
        run_id, tmp_path, catalog_url, max_rows_per_trigger=200, trigger_interval_ms=500
    )
    sweeper, _ = sweeper_for(config, sweep_interval_s=1.0)
    records = sequenced(flights, 8_000)
    samples: list[tuple[int, int]] = []
    outcomes: list[PartitionOutcome] = []
    stop = threading.Event()

    def sweep_loop() -> None:
        while not stop.wait(1.0):
            cycle = sweeper.cycle()
            outcomes.extend(cycle)

    with QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas) as group:
        group.start()
        thread = threading.Thread(target=sweep_loop, daemon=True)
        thread.start()
        try:
            with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
                stream_input = conn.open_stream_input(config.name, "flights")
                stream_input.put(records[:200])
                stream_input.put_end()
                deadline = time.monotonic() + DEADLINE_S
                while group.stats()["copy"].input_rows < 200:  # serviced: x > 0 from now
                    assert time.monotonic() < deadline, "the query group never started"
                    time.sleep(0.2)
                # About three times what the query group takes (200 per 0.5 s trigger).
                for i in range(200, len(records), 300):
                    stream_input.put(records[i : i + 300])
                    stream_input.put_end()
                    samples.append(sample(sweeper))
                    time.sleep(0.25)
            deadline = time.monotonic() + DEADLINE_S
            while group.stats()["copy"].input_rows < len(records):
                assert time.monotonic() < deadline, f"processed {group.stats()['copy'].input_rows}"
                samples.append(sample(sweeper))
                time.sleep(0.5)
        finally:
            stop.set()
            thread.join(timeout=60)
    swept = [o.blob for o in outcomes if o.blob is not None]
    assert len(swept) >= 2, [o.decision for o in outcomes]
    # The chain: each later BLOB starts at or after the end of the one before.
    assert all(b.start_offset >= a.end_offset for a, b in itertools.pairwise(swept))
    truncations = [o.truncated_to for o in outcomes if o.truncated_to is not None]
    assert truncations, "the broker was never truncated"
    # The backlog grew; the part of it the broker holds stayed well below it.
    peak_backlog = max(backlog for backlog, _ in samples)
    peak_resident = max(resident for _, resident in samples)
    print(f"peak backlog {peak_backlog}, peak broker-resident {peak_resident}, {len(swept)} BLOBs")
    assert peak_resident < 0.75 * peak_backlog
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    output = read_all(bootstrap, config.output_streams["flights_copy"].topic)
    out = [codec.decode(m.value())["flight"] for m in output]
    assert out == list(range(len(records))), "not every tuple exactly once in order"
