"""The sweeper's BLOB directory on a full disk (docs/runbook.md, "Full disks").

``blob_dir`` is a tmpfs of 1 MiB; a backlog of 3 000 tuples is due a sweep of about
450 KB. The disk is filled but for 64 KiB, so the sweep's temporary file is written
in part before ``ENOSPC``. Expected:

* the sweep is aborted (``write-failed``, ``FG-SWP-002`` naming the file and the
  bytes free in ``blob_dir``), its partial file is removed, the catalog names no BLOB
  and no sweep in progress, the broker is not truncated: the queue keeps counting
  the tuples, so back-pressure, not the sweeper, holds the producers;
* with the filler removed, the next cycle sweeps a whole BLOB that passes its
  integrity check, the broker is truncated behind it, and the query group reads
  the rest of the queue through it: every tuple once, in order, and the tuple
  ledger balances.

The consumer's progress before the query group runs is played by commits, as in
``tests/integration/sweeper/test_service.py``. Runs on both engines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.client import connect
from pipeline.config import QueryGroupConfig
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.queues.ledger import reconcile
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.swept.blob import read_blob
from pipeline.swept.registered import check_blob
from sweeper.config import SweeperSettings
from sweeper.lock import LOCK_NAME
from sweeper.service import PartitionOutcome, Sweeper
from tests.integration.faults.disk.conftest import FILLER, SmallDisk
from tests.integration.helpers import Drained
from tests.integration.sweeper.sweeping import sequenced, swept_group
from tests.integration.sweeper.test_service import Clock, commit
from tests.integration.sweeper.test_service import fill as fill_queue

TUPLES = 3_000


@pytest.fixture
def blob_disk(small_disk: Callable[[Path, int], SmallDisk], tmp_path: Path) -> Iterator[SmallDisk]:
    yield small_disk(tmp_path / "blobs", 1 << 20)


def cycle(sweeper: Sweeper, clock: Clock) -> PartitionOutcome:
    clock.now += sweeper.settings.sweep_interval_s
    (outcome,) = sweeper.cycle()
    return outcome


def test_a_full_blob_disk_aborts_the_sweep_leaves_no_blob_and_the_next_one_loses_nothing(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    blob_disk: SmallDisk,
    drain: Callable[[QueryGroupConfig], Drained],
    run_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = swept_group(run_id, tmp_path)
    topic = config.input_streams["flights"].topic
    ensure_topics(bootstrap, {topic: (1, 1)})
    clock = Clock()
    sweeper = Sweeper(
        SweeperSettings(
            catalog_url=config.query_group.sweep_catalog_url or "", blob_dir=str(blob_disk.path)
        ),
        [config],
        bootstrap_servers=bootstrap,
        clock=clock,
    )
    try:
        fill_queue(bootstrap, schemas, config, sequenced(flights, TUPLES))
        commit(bootstrap, config, 0)
        cycle(sweeper, clock)
        commit(bootstrap, config, 100)  # x = 100, y = 2 900: a sweep of [205, 3000) is due
        blob_disk.fill(leave_bytes=65_536)
        with caplog.at_level(logging.WARNING, logger="sweeper.service"):
            aborted = cycle(sweeper, clock)
        assert aborted.decision == "aborted:write-failed", aborted
        assert aborted.blob is None and aborted.truncated_to is None
        (line,) = [r.getMessage() for r in caplog.records if "FG-SWP-002" in r.getMessage()]
        assert "[Errno 28] No space left on device" in line, line
        assert f"writing {blob_disk.path}/.tmp-" in line, line
        assert f"bytes free in {blob_disk.path})" in line, line
        # Nothing half-written is kept or named: no BLOB, no sweep in progress, no file
        # but the sweepers' lock and the filler; the broker still holds every tuple.
        assert sweeper.catalog.all() == [] and sweeper.catalog.writes() == []
        assert sorted(p.name for p in blob_disk.path.iterdir()) == sorted([FILLER, LOCK_NAME])
        part = sweeper.queues[0].probe.snapshot().partitions[0]
        assert (part.log_start, part.high) == (0, TUPLES)
        assert (
            sweeper.registry.get_sample_value(
                "floodgate_sweeper_aborts_total",
                {"query_group": config.name, "stream": "flights", "reason": "write-failed"},
            )
            == 1
        )
        # Back-pressure: the unswept backlog still counts against the queue.
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
            stream_input = conn.open_stream_input(config.name, "flights")
            assert stream_input.free_queue_size() == stream_input.max_queue_size - (TUPLES - 100)

        blob_disk.unfill()
        commit(bootstrap, config, 200)
        swept = cycle(sweeper, clock)
        assert swept.decision == "swept" and swept.blob is not None, swept
        blob = swept.blob
        check_blob(blob)  # whole: its size and SHA-256 are the catalog's
        offsets = [r.offset() for r in read_blob(blob.path, topic, 0)]
        assert offsets == list(range(blob.start_offset, blob.end_offset))
        assert blob.end_offset == TUPLES
        commit(bootstrap, config, blob.start_offset)  # the consumer reaches the BLOB
        assert cycle(sweeper, clock).truncated_to == TUPLES  # the broker holds none of it
    finally:
        sweeper.close()

    # A new checkpoint: the group starts at its consumer group's committed offset (the
    # BLOB's start, which the broker no longer holds) and reads the BLOB.
    drained = drain(config)
    assert drained.stats["copy"].input_tuples == TUPLES - blob.start_offset
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    output = read_all(bootstrap, config.output_streams["flights_copy"].topic)
    out = [codec.decode(m.value())["flight"] for m in output]
    assert out == list(range(blob.start_offset, TUPLES)), "not every tuple exactly once in order"
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    assert [(row.written, row.processed) for row in rows] == [(TUPLES, TUPLES)]
