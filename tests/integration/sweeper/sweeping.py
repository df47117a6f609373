"""The swept passthrough query group and its sequenced input (the sweeper and Spark
cluster tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import QueryGroupConfig, parse_query_group
from sweeper.service import Sweeper
from tests.integration.helpers import flights_raw_config


def sequenced(flights: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` flight tuples whose ``flight`` field is the sequence number 0..n-1."""
    return [{**flights[i % len(flights)], "flight": i} for i in range(n)]


def swept_group(
    run_id: str,
    tmp_path: Path,
    *,
    max_queue_size: int = 1_000_000,
    output: dict[str, Any] | None = None,
    **group: Any,
) -> QueryGroupConfig:
    """The passthrough query group on one input and one output partition (so output
    order is input order), its input swept through a catalog in ``tmp_path``;
    ``output`` updates the output stream's section."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"].update(
        {
            "sweep_catalog_url": f"sqlite:///{tmp_path / 'catalog.db'}",
            "output_queue_check": False,
            **group,
        }
    )
    raw["input_streams"]["flights"].update(partitions=1, max_queue_size=max_queue_size)
    raw["output_streams"]["flights_copy"].update({"partitions": 1, **(output or {})})
    return parse_query_group(raw, env={})


def sample(sweeper: Sweeper) -> tuple[int, int]:
    """``(backlog, broker-resident backlog)`` of the swept queue's partition 0: tuples
    not consumed yet, and those of them the broker still holds."""
    part = sweeper.queues[0].probe.snapshot().partitions[0]
    committed = part.committed if part.committed is not None else 0
    return part.high - committed, part.high - part.position
