"""Event-time-aligned micro-batches (pipeline.spark.alignment): the rule that caps a
planned micro-batch by event time, property-tested without a broker, and the idle
tracker with an injected clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.spark.alignment import CUT_TOLERANCE, IdleTracker, align_batch_end

HOUR = 3_600_000


@st.composite
def partitions(draw: st.DrawFn) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    """Per partition: its tuples' event times (non-decreasing, as producers write them),
    where reading begins, and the end planned by offsets."""
    count = draw(st.integers(min_value=1, max_value=6))
    times: dict[int, list[int]] = {}
    begin: dict[int, int] = {}
    end: dict[int, int] = {}
    for p in range(count):
        steps = draw(st.lists(st.integers(min_value=0, max_value=3 * HOUR), max_size=60))
        first = draw(st.integers(min_value=0, max_value=500 * HOUR))
        series, at = [], first
        for step in steps:
            at += step
            series.append(at)
        times[p] = series
        begin[p] = draw(st.integers(min_value=0, max_value=len(series)))
        end[p] = draw(st.integers(min_value=begin[p], max_value=len(series)))
    return times, begin, end


def lookup(
    times: dict[int, list[int]],
) -> Callable[[Mapping[int, int]], dict[int, int | None]]:
    """The event times at ``{partition: offset}``, as the probe answers them: ``None``
    past a partition's end."""

    def event_times_at(wanted: Mapping[int, int]) -> dict[int, int | None]:
        return {p: times[p][o] if 0 <= o < len(times[p]) else None for p, o in wanted.items()}

    return event_times_at


def planned_times(
    times: dict[int, list[int]], begin: dict[int, int], end: dict[int, int], idle: frozenset[int]
) -> dict[int, int]:
    planned = {}
    for p in times:
        if end[p] > begin[p]:
            planned[p] = times[p][end[p] - 1]
        elif p not in idle and times[p]:
            planned[p] = times[p][-1]
    return planned


@settings(max_examples=400, deadline=None)
@given(data=partitions(), drift=st.integers(min_value=0, max_value=10 * HOUR), st_idle=st.data())
def test_no_partition_is_read_past_the_least_planned_event_time_plus_the_drift(
    data: tuple[dict[int, list[int]], dict[int, int], dict[int, int]],
    drift: int,
    st_idle: st.DataObject,
) -> None:
    times, begin, end = data
    idle = frozenset(st_idle.draw(st.sets(st.sampled_from(sorted(times)))))
    latest = {p: len(series) for p, series in times.items()}
    aligned = align_batch_end(begin, end, latest, lookup(times), drift, idle)
    planned = planned_times(times, begin, end, idle)
    for p in times:
        assert begin[p] <= aligned[p] <= end[p]
    if any(not times[p] and p not in idle for p in times):
        # A partition that has never held a tuple holds everyone back until idle.
        assert aligned == begin
        return
    if not planned:
        assert aligned == end
        return
    bound = min(planned.values()) + drift
    for p in times:
        # Every tuple read is within the bound.
        assert all(t <= bound for t in times[p][begin[p] : aligned[p]])
        # A capped partition leaves out at most CUT_TOLERANCE of its planned range
        # within the bound (the search stops there), and stops before a tuple past it.
        if aligned[p] < end[p]:
            beyond = next(o for o in range(aligned[p], end[p]) if times[p][o] > bound)
            assert beyond - aligned[p] <= int((end[p] - begin[p]) * CUT_TOLERANCE)
    # The partition furthest behind keeps its planned end: the batch always progresses.
    behind = min(planned, key=lambda p: planned[p])
    assert aligned[behind] == end[behind]


@settings(max_examples=200, deadline=None)
@given(data=partitions())
def test_an_unbounded_drift_changes_nothing(
    data: tuple[dict[int, list[int]], dict[int, int], dict[int, int]],
) -> None:
    times, begin, end = data
    latest = {p: len(series) for p, series in times.items()}
    waiting = any(not series for series in times.values())  # an empty partition, not idle
    assert align_batch_end(begin, end, latest, lookup(times), 10**15) == (begin if waiting else end)


def test_a_partition_without_a_tuple_yet_holds_everyone_back_until_idle() -> None:
    # Partition 1 has received nothing yet: its first tuples may be the earliest of all.
    times = {0: [h * HOUR for h in range(0, 50)], 1: []}
    begin, end, latest = {0: 0, 1: 0}, {0: 50, 1: 0}, {0: 50, 1: 0}
    assert align_batch_end(begin, end, latest, lookup(times), HOUR) == begin
    # Idle (its head has stood still for the timeout), it holds nobody back.
    assert align_batch_end(begin, end, latest, lookup(times), HOUR, frozenset({1})) == end


def test_a_partition_far_ahead_waits_for_the_one_behind() -> None:
    # Partition 0 is planned up to hour 10, partition 1 up to hour 1000: with 2 hours
    # of drift, partition 1 reads up to hour 12 only.
    times = {0: [h * HOUR for h in range(0, 11)], 1: [h * HOUR for h in range(5, 1001)]}
    begin = {0: 0, 1: 0}
    end = {0: 11, 1: len(times[1])}
    latest = {p: len(s) for p, s in times.items()}
    aligned = align_batch_end(begin, end, latest, lookup(times), 2 * HOUR)
    assert aligned[0] == 11
    assert times[1][aligned[1] - 1] == 12 * HOUR and times[1][aligned[1]] == 13 * HOUR


def test_the_partitions_searches_go_in_step_one_read_for_all() -> None:
    # Partition 0 is planned up to hour 10; partitions 1-6 each up to hour 10 000 over
    # 100 000 tuples, a different cut each. Searched one after the other they would
    # ask the reader six times as often as one partition alone; in step, as often.
    def asks(cut_partitions: int) -> int:
        times = {0: [h * HOUR for h in range(11)]}
        for p in range(1, cut_partitions + 1):
            times[p] = [(i * (10 + p)) * HOUR // 100 for i in range(100_000)]
        begin = dict.fromkeys(times, 0)
        end = latest = {p: len(s) for p, s in times.items()}
        calls = []
        answer = lookup(times)

        def counting(wanted: Mapping[int, int]) -> dict[int, int | None]:
            calls.append(dict(wanted))
            return answer(wanted)

        aligned = align_batch_end(begin, end, latest, counting, 2 * HOUR)
        for p in range(1, cut_partitions + 1):
            assert times[p][aligned[p] - 1] <= 12 * HOUR
            assert times[p][aligned[p] + int(100_000 * CUT_TOLERANCE)] > 12 * HOUR
        return len(calls)

    one = asks(1)
    assert asks(6) <= one + 2  # the slowest search sets the number of reads, not the sum


def test_an_idle_partition_holds_nobody_back() -> None:
    times = {0: [0, HOUR], 1: [h * HOUR for h in range(100)]}
    begin = {0: 2, 1: 0}  # partition 0 has nothing more to read
    end = {0: 2, 1: 100}
    latest = {0: 2, 1: 100}
    held = align_batch_end(begin, end, latest, lookup(times), HOUR)
    assert held[1] == 3  # its head (hour 1) holds partition 1 at hour 2
    free = align_batch_end(begin, end, latest, lookup(times), HOUR, frozenset({0}))
    assert free[1] == 100


def test_a_head_that_stands_still_makes_its_partition_idle() -> None:
    now = [0.0]
    tracker = IdleTracker(10.0, clock=lambda: now[0])
    assert tracker.observe({0: 5, 1: 7}) == frozenset()
    now[0] = 4.5
    assert tracker.observe({0: 5, 1: 7}) == frozenset()
    now[0] = 9.0
    assert tracker.observe({0: 5, 1: 8}) == frozenset()
    now[0] = 10.0
    assert tracker.observe({0: 5, 1: 8}) == frozenset({0})
    now[0] = 11.0
    assert tracker.observe({0: 6, 1: 8}) == frozenset()  # partition 0 moved again
    now[0] = 15.0
    assert tracker.observe({0: 6, 1: 8}) == frozenset()
    now[0] = 19.0
    assert tracker.observe({0: 6, 1: 8}) == frozenset({1})


def test_time_the_source_did_not_watch_does_not_count() -> None:
    """A broker away for 15 s: no planning meanwhile. Its partitions are not idle when it
    is back, and one whose producer has yet to deliver becomes idle only a whole timeout
    later."""
    now = [0.0]
    tracker = IdleTracker(10.0, clock=lambda: now[0])
    tracker.observe({0: 5, 1: 7})
    now[0] = 1.0
    tracker.observe({0: 6, 1: 7})
    now[0] = 16.0
    assert tracker.observe({0: 9, 1: 7}) == frozenset()
    now[0] = 20.0
    assert tracker.observe({0: 9, 1: 7}) == frozenset()
    for t in range(21, 26):
        now[0] = float(t)
        assert tracker.observe({0: 10, 1: 7}) == frozenset()
    now[0] = 26.0
    assert tracker.observe({0: 11, 1: 7}) == frozenset({1})


def test_steady_gaps_of_a_long_trigger_interval_count() -> None:
    now = [0.0]
    tracker = IdleTracker(10.0, clock=lambda: now[0])
    tracker.observe({0: 5, 1: 7})
    now[0] = 30.0
    assert tracker.observe({0: 6, 1: 7}) == frozenset()
    now[0] = 60.0
    assert tracker.observe({0: 6, 1: 7}) == frozenset({0, 1})
