"""A query group whose checkpoint disk fills mid-stream (docs/runbook.md, "Full disks").

The flights group (its per-origin-hour aggregation, with state stores, and the
pass-through copy to count each tuple by) runs in the test session's SparkSession
with its checkpoints on a tmpfs of 8 MiB. Once the copy has written output, the disk
is filled to the last byte and more tuples are put. Expected:

* every query that writes to the full disk fails, and the group is FAILED with
  ``CheckpointDiskFullError``: ``FG-QG-010``, the query's checkpoint, the bytes free
  there (in the error and in the driver's log);
* nothing half-written is taken as done: every offset-log and commit-log entry in
  the checkpoint is whole, and a batch is in the commit log only if its offsets are;
* with the filler removed, the group started again on the same checkpoint writes
  every tuple once (by key) and the tuple ledger balances.

Runs on both engines (nothing is killed; the broker is untouched).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import CheckpointDiskFullError
from pipeline.kafka.topics import ensure_topics
from pipeline.offsets import parse_offset_log
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from pipeline.spark.states import QueryGroupState
from tests.integration.faults.checks import (
    check_exactly_once,
    output_tuples,
    wait_until,
)
from tests.integration.faults.disk.conftest import SmallDisk
from tests.integration.faults.disk.faults import group_config

DEADLINE_S = 180.0


def check_logs_whole(checkpoint: Path) -> None:
    """Every entry Spark would read back from a query's offset and commit logs (the
    files named by a batch id) is whole, and each committed batch was planned."""
    planned = {int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()}
    for batch in planned:
        assert parse_offset_log((checkpoint / "offsets" / str(batch)).read_text()), batch
    commits = checkpoint / "commits"
    done = (
        {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.exists() else set()
    )
    for batch in done:
        version, body = (commits / str(batch)).read_text().split("\n", 1)
        assert version == "v1" and isinstance(json.loads(body), dict), batch
    assert done <= planned, (sorted(done), sorted(planned))


def test_a_full_checkpoint_disk_fails_the_group_by_name_and_a_restart_loses_nothing(
    bootstrap: str,
    spark: Any,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    small_disk: Callable[[Path, int], SmallDisk],
    run_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = small_disk(tmp_path / "checkpoints", 8 << 20)
    config = group_config(run_id, disk.path)
    ensure_topics(bootstrap, config.topics())
    records = flights[:1_200]
    produce(config, records[:400])
    group = QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas)
    started = time.monotonic()
    try:
        with caplog.at_level("ERROR", logger="pipeline.spark.query_group"):
            group.start()
            wait_until(lambda: output_tuples(bootstrap, config) > 0, DEADLINE_S, "the first output")
            disk.fill()
            produce(config, records[400:])
            wait_until(
                lambda: group.state == QueryGroupState.FAILED, DEADLINE_S, "the group to fail"
            )
            with pytest.raises(CheckpointDiskFullError) as failed:
                group.check()
        print(f"failed {time.monotonic() - started:.1f} s after the start")
    finally:
        group.stop()
    error = failed.value
    assert error.query is not None
    assert error.checkpoint == f"{disk.path}/{error.query}"
    # Read while the disk was still full: what it read then, or less.
    assert error.free_bytes is not None and error.free_bytes <= disk.free_bytes() < 65_536
    assert str(error).startswith(f"query group {config.name!r}, query {error.query!r}: FG-QG-010")
    assert f"checkpoint {error.checkpoint} ({error.free_bytes} bytes free there)" in str(error)
    assert "No space left on device" in str(error)
    logged = [r.getMessage() for r in caplog.records if "FG-QG-010" in r.getMessage()]
    assert any(f"checkpoint {disk.path}/" in line for line in logged), caplog.text

    for query in config.queries:
        check_logs_whole(disk.path / query)
    disk.unfill()
    again = QueryGroup(config, bootstrap_servers=bootstrap, spark=spark, schemas=schemas)
    try:
        again.start()
        again.process_all_available()
    finally:
        again.stop()
    check_exactly_once(bootstrap, config, schemas, records)
    print(f"done {time.monotonic() - started:.1f} s after the start")
