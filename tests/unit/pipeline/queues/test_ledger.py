"""The tuple ledger's arithmetic (pipeline.queues.ledger.ledger_row): every offset of a
partition is in exactly one place, and only tuples gone from the broker before any
query read them, in no BLOB, are unaccounted for."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from pipeline.queues.ledger import ledger_row
from pipeline.queues.snapshot import PartitionQueue


def test_a_processed_partition_with_a_dead_letter_balances() -> None:
    row = ledger_row(PartitionQueue(high=100, log_start=0, committed=100), [], [7, 7, 150])
    assert (row.processed, row.dead_lettered, row.swept, row.queued) == (99, 1, 0, 0)
    assert row.balanced


def test_retention_ahead_of_the_commit_is_unaccounted_unless_a_blob_holds_it() -> None:
    behind = PartitionQueue(high=100, log_start=60, committed=20)
    lost = ledger_row(behind, [], [])
    assert (lost.processed, lost.queued, lost.unaccounted) == (20, 40, 40)
    assert not lost.balanced
    swept = ledger_row(behind, [(20, 50), (50, 70)], [])
    # [20, 60) in BLOBs, [60, 70) in BLOBs and the broker (swept), [70, 100) queued.
    assert (swept.swept, swept.queued, swept.unaccounted) == (50, 30, 0)
    assert swept.balanced


@st.composite
def partitions(draw: st.DrawFn) -> tuple[PartitionQueue, list[tuple[int, int]], set[int]]:
    high = draw(st.integers(min_value=0, max_value=500))
    log_start = draw(st.integers(min_value=0, max_value=high))
    committed = draw(st.none() | st.integers(min_value=0, max_value=high))
    cuts = sorted(draw(st.sets(st.integers(min_value=0, max_value=high), max_size=8)))
    # A BLOB chain: disjoint ranges, some of the gaps between the cuts.
    ranges = [(a, b) for a, b in itertools.pairwise(cuts) if draw(st.booleans())]
    dead = draw(st.sets(st.integers(min_value=0, max_value=high + 10), max_size=20))
    return PartitionQueue(high=high, log_start=log_start, committed=committed), ranges, dead


@given(partitions())
def test_every_offset_is_in_exactly_one_place(
    case: tuple[PartitionQueue, list[tuple[int, int]], set[int]],
) -> None:
    queue, ranges, dead = case
    row = ledger_row(queue, ranges, dead)
    parts = (row.processed, row.dead_lettered, row.swept, row.queued, row.unaccounted)
    assert all(n >= 0 for n in parts), row
    assert sum(parts) == queue.high, row
    # Unaccounted: exactly the offsets of [commit, log start) that no BLOB holds.
    committed = queue.committed or 0
    held = {o for a, b in ranges for o in range(a, b)}
    gone = set(range(committed, queue.log_start)) - held
    assert row.unaccounted == len(gone)
    # Without retention or truncation ahead of the commit, nothing is ever lost.
    if queue.log_start <= committed:
        assert row.balanced
