"""The hanging-transaction watch: how long an output stream partition's last
stable offset has stayed unmoved below its high watermark."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.queues.age import StableOffsetWatch


def test_an_lso_that_moves_or_reaches_the_end_is_never_stuck() -> None:
    watch = StableOffsetWatch()
    high = {0: 100, 1: 50}
    assert watch.observe({0: 90, 1: 50}, high, now=0.0) == 0.0  # first sight of 0 at 90
    assert watch.observe({0: 95, 1: 50}, high, now=10.0) == 0.0  # moved: a new stretch
    assert watch.observe({0: 95, 1: 50}, high, now=25.0) == 15.0
    assert watch.observe({0: 95, 1: 50}, {0: 120, 1: 50}, now=40.0) == 30.0  # writes go on
    assert watch.observe({0: 120, 1: 50}, {0: 120, 1: 50}, now=41.0) == 0.0  # committed
    assert watch.observe({0: 120, 1: 40}, {0: 130, 1: 60}, now=42.0) == 0.0


def test_the_longest_stuck_partition_is_reported_and_a_vanished_one_forgotten() -> None:
    watch = StableOffsetWatch()
    watch.observe({0: 5, 1: 7}, {0: 10, 1: 10}, now=0.0)
    watch.observe({0: 5, 1: 8}, {0: 10, 1: 10}, now=100.0)
    assert watch.observe({0: 5, 1: 8}, {0: 10, 1: 10}, now=130.0) == 130.0
    assert watch.stuck_s == {0: 130.0, 1: 30.0}  # each partition, for the soak's watchdog
    assert watch.observe({1: 8}, {1: 10}, now=140.0) == 40.0  # partition 0 gone
    # A missing LSO reading counts as caught up, never as stuck.
    assert watch.observe({}, {1: 10}, now=150.0) == 0.0


readings = st.lists(
    st.tuples(
        st.floats(0.0, 100.0),  # seconds since the last reading
        st.dictionaries(st.integers(0, 3), st.tuples(st.integers(0, 50), st.integers(0, 50))),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(readings)
def test_stuck_time_is_within_the_watch_and_zero_when_every_lso_is_at_its_end(
    steps: list[tuple[float, dict[int, tuple[int, int]]]],
) -> None:
    watch = StableOffsetWatch()
    now = 0.0
    since_first: dict[int, float] = {}
    for dt, partitions in steps:
        now += dt
        stable = {p: min(a, b) for p, (a, b) in partitions.items()}
        high = {p: max(a, b) for p, (a, b) in partitions.items()}
        for p in list(since_first):
            if p not in high:
                del since_first[p]
        for p in high:
            since_first.setdefault(p, now)
        stuck = watch.observe(stable, high, now)
        assert stuck >= 0.0
        if all(stable[p] >= high[p] for p in high):
            assert stuck == 0.0
        # Never longer than the partitions have been watched without a gap.
        assert stuck <= max((now - t for t in since_first.values()), default=0.0)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.floats(0.5, 60.0), st.integers(0, 99))
def test_a_reading_repeated_unchanged_is_stuck_for_the_time_since_its_first(
    repeats: int, interval: float, lso: int
) -> None:
    watch = StableOffsetWatch()
    for i in range(repeats + 1):
        stuck = watch.observe({0: lso}, {0: 100}, now=i * interval)
    assert stuck == repeats * interval
