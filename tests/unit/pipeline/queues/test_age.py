"""The pure part of a queue's age: which offset is a partition's oldest unconsumed
tuple, and the age of the oldest of several timestamps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.queues.age import age_seconds, oldest_offsets
from pipeline.queues.snapshot import PartitionQueue, QueueSnapshot


def test_oldest_offset_is_the_commit_or_the_log_start_and_empty_partitions_have_none() -> None:
    snapshot = QueueSnapshot(
        "s",
        100,
        {
            0: PartitionQueue(high=10, log_start=0, committed=None),  # never committed
            1: PartitionQueue(high=10, log_start=0, committed=4),
            2: PartitionQueue(high=10, log_start=6, committed=2, swept=4),  # swept [2, 6)
            3: PartitionQueue(high=10, log_start=0, committed=10),  # consumed
            4: PartitionQueue(high=0),  # never written
        },
    )
    assert oldest_offsets(snapshot) == {0: 0, 1: 4, 2: 2}


@given(
    stamps=st.lists(st.integers(min_value=0, max_value=2**42), max_size=20),
    now_ms=st.integers(min_value=0, max_value=2**42),
)
def test_the_age_is_that_of_the_oldest_timestamp_and_never_negative(
    stamps: list[int], now_ms: int
) -> None:
    age = age_seconds(stamps, now_ms / 1000)
    if not stamps:
        assert age == 0
    else:
        assert age == max(0.0, now_ms / 1000 - min(stamps) / 1000)
        # A newer tuple never makes the queue look older.
        assert age_seconds([*stamps, now_ms], now_ms / 1000) == age
