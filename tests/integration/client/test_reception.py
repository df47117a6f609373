"""The data reception API: read an output stream through a consumer group, freeing its queue."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from pipeline.client import connect
from pipeline.config import QueryGroupConfig
from pipeline.errors import ConfigError
from pipeline.serde.schemas import SchemaRepository
from tests.integration.helpers import Drained


def test_get_reads_every_output_tuple_once_and_frees_the_output_queue(
    bootstrap: str,
    drain: Callable[[QueryGroupConfig], Drained],
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    flights_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
) -> None:
    config = flights_config(only_passthrough=True)
    records = flights[:1_000]
    produce(config, records)
    batches = drain(config).batches_written["copy"]

    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        with pytest.raises(ConfigError, match="no output stream 'nowhere'"):
            connector.open_stream_output(config.name, "nowhere")
        stream_output = connector.open_stream_output(config.name, "flights_copy")
        assert stream_output.group == config.reception_groups("flights_copy")[0]
        # Offsets count transaction markers too: at most one per partition per batch.
        partitions = config.output_settings("flights_copy").partitions
        assert len(records) <= stream_output.queue_length() <= len(records) + partitions * batches

        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while len(got) < len(records) and time.monotonic() < deadline:
            batch = stream_output.get(max_tuples=300, timeout_s=1.0)
            assert len(batch) <= 300
            got.extend(batch)
        assert stream_output.get(max_tuples=300, timeout_s=0.5) == []  # nothing more, nothing twice
        assert stream_output.queue_length() == 0  # what get returned is committed

    def identity(t: dict[str, Any]) -> tuple[Any, ...]:
        return (
            t["carrier"],
            t["flight"],
            t["origin"],
            t["sched_dep_time"],
            t["year"],
            t["month"],
            t["day"],
        )

    assert Counter(identity(t) for t in got) == Counter(identity(r) for r in records)
