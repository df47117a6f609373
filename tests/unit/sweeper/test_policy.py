"""The sweeper's decisions (the slow-queue sweeper's rule: sweep only a serviced queue
whose backlog grows past twice its service rate): deterministic cases and hypothesis
properties of the ranges (never inside the front buffer, a planned batch or the chain;
never past the high watermark) and of truncation (never past what is consumed or swept)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sweeper.policy import (
    Abort,
    PartitionView,
    Skip,
    SweepRange,
    consumed,
    plan,
    truncate_to,
    verify,
)


def test_a_stalled_queue_is_never_swept() -> None:
    view = PartitionView(committed=0, high_watermark=1_000_000, log_start=0, service_rate=0)
    assert plan(view) is Skip.NOT_SERVICED


def test_a_queue_within_twice_its_service_rate_is_not_swept() -> None:
    view = PartitionView(committed=100, high_watermark=300, log_start=0, service_rate=100)
    assert plan(view) is Skip.NOT_GROWING  # y = 200 = 2x
    grown = PartitionView(committed=100, high_watermark=301, log_start=0, service_rate=100)
    assert plan(grown) == SweepRange(205, 301)  # front buffer x + 5 stays in the broker


def test_the_range_starts_after_the_chain_and_the_planned_batch() -> None:
    view = PartitionView(
        committed=100, high_watermark=2_000, log_start=0, service_rate=10, chain_end=900
    )
    assert plan(view) == SweepRange(900, 2_000)  # the rear range, chained after
    planned = PartitionView(
        committed=100, high_watermark=2_000, log_start=0, service_rate=10, planned_end=1_500
    )
    assert plan(planned) == SweepRange(1_500, 2_000)
    covered = PartitionView(
        committed=100, high_watermark=2_000, log_start=0, service_rate=10, planned_end=2_000
    )
    assert plan(covered) is Skip.NOTHING_TO_SWEEP


def test_verify_aborts_on_each_of_its_three_conditions() -> None:
    sweep = SweepRange(500, 900)
    assert verify(sweep, committed=499, planned_end=500, log_start=500) is None
    assert verify(sweep, committed=500, planned_end=None, log_start=0) is Abort.CONSUMER_REACHED
    assert verify(sweep, committed=0, planned_end=501, log_start=0) is Abort.BATCH_PLANNED
    assert verify(sweep, committed=0, planned_end=None, log_start=501) is Abort.BROKER_TRUNCATED


def test_truncation_waits_for_the_consumer_to_reach_a_and_spares_protected_groups() -> None:
    chain = [(100, 200), (200, 300), (350, 400)]
    assert truncate_to(chain, committed=99, log_start=0) is None
    # Reaching a BLOB frees the contiguous run it begins, not what lies past a gap.
    assert truncate_to(chain, committed=100, log_start=0) == 300
    assert truncate_to(chain, committed=250, log_start=0) == 300
    assert truncate_to(chain, committed=250, log_start=300) is None  # done already
    assert truncate_to(chain, committed=360, log_start=300) == 400
    assert truncate_to(chain, committed=250, log_start=0, protected=[150]) == 150
    assert consumed(chain, committed=250) == [0]


views = st.builds(
    lambda committed, backlog, x, chain, planned, start: PartitionView(
        committed=committed,
        high_watermark=committed + backlog,
        log_start=min(start, committed),
        service_rate=x,
        chain_end=None if chain is None else committed + chain,
        planned_end=None if planned is None else committed + planned,
    ),
    committed=st.integers(0, 10_000),
    backlog=st.integers(0, 10_000),
    x=st.integers(0, 3_000),
    chain=st.none() | st.integers(0, 12_000),
    planned=st.none() | st.integers(0, 12_000),
    start=st.integers(0, 10_000),
)


@given(views)
def test_a_planned_range_never_touches_the_front_buffer_chain_or_planned_batch(
    view: PartitionView,
) -> None:
    decision = plan(view)
    if isinstance(decision, Skip):
        if decision is Skip.NOT_SERVICED:
            assert view.service_rate == 0
        return
    assert view.service_rate > 0 and view.unswept > 2 * view.service_rate
    assert decision.size > 0
    assert decision.start >= view.committed + view.service_rate + 5
    assert decision.start >= max(view.chain_end or 0, view.planned_end or 0, view.log_start)
    assert decision.end == view.high_watermark
    # Registered straight away, it passes verification.
    assert (
        verify(
            decision,
            committed=view.committed,
            planned_end=view.planned_end,
            log_start=view.log_start,
        )
        is None
    )


@given(
    cuts=st.lists(st.integers(0, 1_000), unique=True, max_size=10),
    committed=st.integers(0, 1_100),
    log_start=st.integers(0, 1_100),
    protected=st.lists(st.integers(0, 1_100), max_size=3),
)
def test_truncation_never_drops_an_offset_that_is_neither_consumed_nor_swept(
    cuts: list[int], committed: int, log_start: int, protected: list[int]
) -> None:
    bounds = sorted(cuts)
    chain = list(zip(bounds[0::2], bounds[1::2], strict=False))
    target = truncate_to(chain, committed=committed, log_start=log_start, protected=protected)
    if target is None:
        return
    assert target > log_start
    assert all(target <= p for p in protected)
    for offset in range(log_start, target):
        assert offset < committed or any(s <= offset < e for s, e in chain), offset
