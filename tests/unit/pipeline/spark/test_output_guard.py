"""The output stream queue's rule (OutputQueueGuard): sleep, retry, then hold.

Pure logic, no broker: the guard reads free space from a scripted reader and
sleeps through an injected ``wait``, so every schedule of free space can be
tried (hypothesis) without a clock. README, "Bounded output stream queues: sleep, retry,
hold".
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import BatchInterrupted, OversizedBatchError, QueryGroupHeld
from pipeline.queues.snapshot import PartitionQueue, QueueSnapshot
from pipeline.spark.guard import OutputQueueGuard, required_space


@dataclass
class ScriptedQueue:
    """A queue whose free space at each read is given in advance (the last repeats)."""

    max_queue_size: int
    free: list[int]
    reads: int = 0

    def snapshot(self, *, wait_s: float = 0.0) -> QueueSnapshot:
        free = self.free[min(self.reads, len(self.free) - 1)]
        self.reads += 1
        length = self.max_queue_size - free
        return QueueSnapshot("out", self.max_queue_size, {0: PartitionQueue(high=length)})


@dataclass
class Events:
    """What the guard told its query group, in order."""

    seen: list[tuple[str, object]] = field(default_factory=list)

    def record_output(
        self, stream: str, snapshot: QueueSnapshot, check_s: float | None = None
    ) -> None:
        assert check_s is not None and check_s >= 0  # every read of the guard is a check
        self.seen.append(("queue", snapshot.free_queue_size))

    def on_sleep(self, query: str, stream: str, retry: int, sleep_s: float) -> None:
        self.seen.append(("sleep", retry))

    def on_awake(self, query: str, stream: str) -> None:
        self.seen.append(("awake", None))

    def on_hold(self, held: QueryGroupHeld) -> None:
        self.seen.append(("hold", held.batch_id))

    def kinds(self, kind: str) -> list[object]:
        return [v for k, v in self.seen if k == kind]


def make_guard(
    queue: ScriptedQueue | None,
    *,
    partitions: int = 2,
    retry_count: int = 3,
    sleep_ms: int = 250,
    events: Events | None = None,
    slept: list[float] | None = None,
    interrupted: threading.Event | None = None,
) -> OutputQueueGuard:
    sleeps = slept if slept is not None else []
    return OutputQueueGuard(
        query_group="g",
        stream="out",
        reader=queue,
        partitions=partitions,
        sleep_ms=sleep_ms,
        retry_count=retry_count,
        interrupted=interrupted,
        readings=events,
        hold=events,
        wait=sleeps.append,
    )


def test_required_space_counts_one_transaction_marker_per_partition_written() -> None:
    assert required_space(0, 4) == 0
    assert required_space(1, 4) == 2
    assert required_space(3, 4) == 6
    assert required_space(250, 4) == 254


@given(
    max_queue_size=st.integers(1, 2_000),
    partitions=st.integers(1, 8),
    tuples=st.integers(0, 2_500),
    retry_count=st.integers(0, 6),
    data=st.data(),
)
def test_a_batch_is_written_only_where_it_fits_else_held_after_exactly_retry_count_sleeps(
    max_queue_size: int, partitions: int, tuples: int, retry_count: int, data: st.DataObject
) -> None:
    need = required_space(tuples, partitions)
    # Free space anywhere in the queue, and often right at the edge of the batch's need.
    low, high = max(0, need - 2), min(max_queue_size, need + 2)
    near = st.integers(low, high) if need and low <= high else st.just(0)
    free = data.draw(
        st.lists(st.one_of(st.integers(0, max_queue_size), near), min_size=1, max_size=8)
    )
    free = [min(f, max_queue_size) for f in free]
    queue = ScriptedQueue(max_queue_size, free)
    events, slept = Events(), []
    guard = make_guard(
        queue,
        partitions=partitions,
        retry_count=retry_count,
        events=events,
        slept=slept,
    )
    reads = [free[min(i, len(free) - 1)] for i in range(retry_count + 1)]
    fits_at = next((i for i, f in enumerate(reads) if need <= f), None)
    written: list[int] = []

    if need > max_queue_size:
        with (
            pytest.raises(OversizedBatchError) as oversized,
            guard.reserve(tuples, query="q", batch_id=7),
        ):
            written.append(tuples)
        assert oversized.value.required == need
        assert queue.reads == 0 and slept == []
    elif need == 0:
        with guard.reserve(tuples, query="q", batch_id=7):
            written.append(tuples)
        assert queue.reads == 0 and slept == []
    elif fits_at is not None:
        with guard.reserve(tuples, query="q", batch_id=7):
            written.append(tuples)
        # Admitted at the first read with room, after one sleep per read without.
        assert queue.reads == fits_at + 1
        assert slept == [0.25] * fits_at
        assert events.kinds("sleep") == list(range(1, fits_at + 1))
        assert events.kinds("awake") == ([None] if fits_at else [])
        assert events.kinds("hold") == []
    else:
        with pytest.raises(QueryGroupHeld) as held, guard.reserve(tuples, query="q", batch_id=7):
            written.append(tuples)
        assert queue.reads == retry_count + 1
        assert slept == [0.25] * retry_count
        assert held.value.sleeps == retry_count
        assert held.value.required == need
        assert held.value.free == reads[-1] < need
        assert events.kinds("hold") == [7]
        assert guard.holds == 1

    # Never written into a queue without room for it at the read that admitted it.
    assert written == (
        [tuples] if need == 0 or (need <= max_queue_size and fits_at is not None) else []
    )
    assert guard.sleeps == len(slept)


def test_retry_count_zero_holds_at_the_first_read_without_sleeping() -> None:
    queue = ScriptedQueue(700, [100])
    events, slept = Events(), []
    guard = make_guard(queue, retry_count=0, events=events, slept=slept)
    with (
        pytest.raises(QueryGroupHeld, match="FG-QG-002") as held,
        guard.reserve(250, query="q", batch_id=3),
    ):
        pass
    assert slept == [] and held.value.sleeps == 0
    assert "release with `floodgate query-group release g`" in str(held.value)
    assert events.kinds("hold") == [3]


def test_each_sleep_logs_a_warning_with_group_stream_sleep_time_and_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = ScriptedQueue(700, [10, 10, 600])
    guard = make_guard(queue, retry_count=5, sleep_ms=1_500)
    with (
        caplog.at_level(logging.WARNING, logger="pipeline.spark.guard"),
        guard.reserve(250, query="q", batch_id=1),
    ):
        pass
    lines = [r.getMessage() for r in caplog.records if "FG-QG-001" in r.getMessage()]
    assert len(lines) == 2
    assert "query group g" in lines[0] and "output stream out" in lines[0]
    assert "sleeping 1.500 s before retry 1 of 5" in lines[0]
    assert "retry 2 of 5" in lines[1]


def test_an_oversized_batch_names_the_settings_to_change() -> None:
    guard = make_guard(ScriptedQueue(100, [100]))
    with pytest.raises(OversizedBatchError) as caught, guard.reserve(120, query="q", batch_id=0):
        pass
    message = str(caught.value)
    assert "FG-QG-005" in message
    assert "output_streams.out.max_queue_size" in message
    assert "max_tuples_per_trigger" in message


def test_a_held_or_stopped_group_wakes_a_sleeping_batch_which_gives_up_unwritten() -> None:
    interrupted = threading.Event()
    queue = ScriptedQueue(700, [0])
    guard = OutputQueueGuard(
        query_group="g",
        stream="out",
        reader=queue,
        partitions=2,
        sleep_ms=60_000,
        retry_count=100,
        interrupted=interrupted,
        wait=lambda _s: interrupted.set(),  # the group is held during the first sleep
    )
    written = []
    with pytest.raises(BatchInterrupted), guard.reserve(10, query="q", batch_id=4):
        written.append(10)
    assert written == [] and queue.reads == 1


def test_no_reader_means_no_bound() -> None:
    guard = make_guard(None)
    with guard.reserve(10_000, query="q", batch_id=0):
        pass
    assert guard.sleeps == 0 and guard.holds == 0
