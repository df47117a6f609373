"""The query group of the full-disk tests; what they check is
:mod:`tests.integration.faults.checks`."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import QueryGroupConfig, parse_query_group
from tests.integration.helpers import flights_raw_config


def group_config(
    run_id: str, checkpoint_dir: Path, *, max_tuples_per_trigger: int = 400
) -> QueryGroupConfig:
    """The flights group's per-origin-hour aggregation (a query with state stores in
    its checkpoint) and the pass-through copy to count each tuple by, in micro-batches
    of ``max_tuples_per_trigger`` so that a fault lands mid-stream. (The per-carrier-day
    aggregation is left out: a third query costs Spark time and writes the same kind
    of files.)"""
    raw = flights_raw_config(
        run_id, checkpoint_dir, passthrough=True, max_tuples_per_trigger=max_tuples_per_trigger
    )
    del raw["queries"]["delays_by_carrier_day"]
    del raw["output_streams"]["delays_by_carrier_day"]
    return parse_query_group(raw, env={})
