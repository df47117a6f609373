"""Property tests of queue accounting: one producer never overfills an input stream queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.queues.budget import QueueBudget
from pipeline.queues.snapshot import PartitionQueue, QueueSnapshot, slowest_commits


@dataclass
class Broker:
    """A model of one partition: produced tuples land (ack) in any order of steps."""

    committed: int = 0
    high: int = 0
    in_flight: list[int] = field(default_factory=list)  # batch sizes sent, not yet acked

    @property
    def length(self) -> int:
        return self.high - self.committed


@dataclass
class Producer:
    budget: QueueBudget
    unacked: int = 0


steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 60)),
        st.tuples(st.just("ack"), st.integers(0, 5)),
        st.tuples(st.just("consume"), st.integers(0, 80)),
        st.tuples(st.just("refresh"), st.just(0)),
        st.tuples(st.just("refresh-racing-ack"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(max_size=st.integers(1, 200), initial=st.integers(0, 200), steps=steps)
def test_one_producer_never_makes_the_queue_exceed_max(
    max_size: int, initial: int, steps: list
) -> None:
    broker = Broker(high=min(initial, max_size))
    producer = Producer(QueueBudget(max_size))
    producer.budget.refresh(broker.length, 0)
    for action, n in steps:
        if action == "put":
            if producer.budget.try_reserve(n):
                broker.in_flight.append(n)
                producer.unacked += n
        elif action == "ack" and broker.in_flight:
            batch = broker.in_flight.pop(min(n, len(broker.in_flight) - 1))
            broker.high += batch
            producer.unacked -= batch
        elif action == "consume":
            broker.committed = min(broker.high, broker.committed + n)
        elif action == "refresh":
            producer.budget.refresh(broker.length, producer.unacked)
        elif action == "refresh-racing-ack":
            # The client reads its in-flight count, then an ack lands, then it reads the
            # broker: the acked batch is counted twice, which may only err on the safe side.
            unacked_before = producer.unacked
            if broker.in_flight:
                batch = broker.in_flight.pop(0)
                broker.high += batch
                producer.unacked -= batch
            producer.budget.refresh(broker.length, unacked_before)
        # The invariant: what is in the broker plus what is on its way never exceeds max.
        assert broker.length + sum(broker.in_flight) <= max_size


@settings(max_examples=200, deadline=None)
@given(
    max_size=st.integers(1, 1000),
    length=st.integers(0, 1000),
    reserve=st.lists(st.integers(0, 300), max_size=20),
)
def test_reservations_are_all_or_nothing_and_never_exceed_the_free_space(
    max_size: int, length: int, reserve: list[int]
) -> None:
    budget = QueueBudget(max_size)
    budget.refresh(min(length, max_size), 0)
    free = max_size - min(length, max_size)
    taken = 0
    for n in reserve:
        before = budget.available
        if budget.try_reserve(n):
            taken += n
            assert budget.available == before - n
        else:
            assert n > before and budget.available == before
    assert taken <= free


def test_a_partition_without_a_commit_counts_from_the_log_start() -> None:
    assert PartitionQueue(high=100, log_start=40).length == 60
    assert PartitionQueue(high=100, log_start=40, committed=70).length == 30
    # A commit below the log start (the broker truncated past it) counts from the log start.
    assert PartitionQueue(high=100, log_start=40, committed=10).length == 60
    # Swept tuples no longer count against the queue.
    assert PartitionQueue(high=100, log_start=40, committed=70, swept=20).length == 10


def test_the_slowest_reader_decides_and_a_reader_without_commit_is_slowest() -> None:
    commits = [{0: 50, 1: 10}, {0: 20, 1: None}]
    assert slowest_commits(commits, [0, 1, 2]) == {0: 20, 1: None, 2: None}


def test_snapshot_free_space_and_ratio() -> None:
    snap = QueueSnapshot(
        "s",
        100,
        {0: PartitionQueue(high=30, committed=10), 1: PartitionQueue(high=50, committed=25)},
    )
    assert (snap.length, snap.free_queue_size, snap.free_ratio) == (45, 55, 0.55)
    full = QueueSnapshot("s", 10, {0: PartitionQueue(high=30)})
    assert (full.free_queue_size, full.free_ratio) == (0, 0.0)
