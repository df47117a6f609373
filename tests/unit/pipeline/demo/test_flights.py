"""Unit tests of :mod:`pipeline.demo.flights`: the replay's flights, built a slice at a time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.demo.flights import (
    FlightTuples,
    flight_tuples,
    load_flights,
    shift_flights,
    shift_years,
)


def test_flight_tuples_index_like_the_list_of_every_flight_tuple() -> None:
    df = load_flights(limit=2_500)
    every = list(flight_tuples(df))
    lazy = FlightTuples(df)
    assert len(lazy) == len(every)
    for start in range(0, len(every), 1_000):  # the replay's batches, the last one short
        assert lazy[start : start + 1_000] == every[start : start + 1_000]
    assert lazy[0] == every[0] and lazy[-1] == every[-1]
    assert lazy[10:10] == []


def test_flight_tuples_as_arrow_slices_hold_the_same_tuples() -> None:
    df = load_flights(limit=1_500)
    lazy = FlightTuples(df)
    assert lazy.table(0, 1_500).to_pylist() == list(flight_tuples(df))
    assert lazy.table(700, 1_200).to_pylist() == lazy[700:1_200]
    assert lazy.table(1_400, 2_000).num_rows == 100


# Replay rounds: each round r (0-based) replays the flights r calendar years later.

_MS_HOUR = 3_600_000
_MS_DAY = 24 * _MS_HOUR
_START_2013 = 1_356_998_400_000  # 2013-01-01 00:00 UTC
_START_2014 = 1_388_534_400_000


def test_round_zero_replays_the_flights_unchanged() -> None:
    df = load_flights(limit=300)
    assert shift_flights(df, 0) is df
    assert shift_years(1_357_034_400_000, 0) == 1_357_034_400_000


def test_a_shift_moves_each_flight_whole_calendar_years_in_utc() -> None:
    df = load_flights(limit=300)
    shifted = shift_flights(df, 3)
    assert (shifted["year"] == 2016).all()
    assert (shifted["month"] == df["month"]).all() and (shifted["hour"] == df["hour"]).all()
    assert shifted["time_hour"].iloc[0] == pd.Timestamp("2016-01-01 10:00", tz="UTC")
    assert (shifted["time_hour_ms"] == shifted["time_hour"].dt.as_unit("ms").astype("int64")).all()
    # Past 2016-02-29: 2013-03-01 10:00 is 2016-03-01 10:00, not a day early as 3 x 365 days.
    march_first = int(pd.Timestamp("2013-03-01 10:00", tz="UTC").value // 1_000_000)
    assert shift_years(march_first, 3) == pd.Timestamp("2016-03-01 10:00", tz="UTC").value // 1e6
    # The replay's tuples carry the shifted event time (and so the shifted key).
    assert FlightTuples(df, years=3)[0]["time_hour"] == shifted["time_hour_ms"].iloc[0]
    assert FlightTuples(df, years=3).table(0, 10).column("time_hour").to_pylist() == (
        shifted["time_hour_ms"].iloc[:10].tolist()
    )


def test_every_round_of_the_whole_year_starts_after_the_round_before_ends() -> None:
    times = load_flights()["time_hour_ms"].to_numpy()
    for r in range(5):
        this, following = shift_years(times, r), shift_years(times, r + 1)
        assert (np.diff(this) >= 0).all()  # still in event-time order
        # More than the demo's 2-hour watermark apart: nothing of round r + 1 is late.
        assert following.min() - this.max() > 2 * _MS_HOUR


@given(
    st.lists(st.integers(_START_2013, _START_2014 - 1), min_size=2, max_size=50),
    st.integers(0, 40),
)
def test_a_shift_keeps_order_hours_and_days_and_each_round_follows_the_last(
    times: list[int], years: int
) -> None:
    times = sorted(times)
    shifted = shift_years(np.array(times, dtype="int64"), years)
    following = shift_years(np.array(times, dtype="int64"), years + 1)
    assert (np.diff(shifted) >= 0).all()
    assert all(
        (a < b) == (c < d)
        for a, b, c, d in zip(times, times[1:], shifted, shifted[1:], strict=False)
    )
    # A time keeps its place in its hour and in its UTC day: windows keep their tuples.
    assert [t % _MS_DAY for t in times] == [int(t) % _MS_DAY for t in shifted]
    # Times within one year (2013: no 29 February): round r + 1 starts after round r.
    if times[-1] - times[0] < 365 * _MS_DAY:
        assert following[0] > shifted[-1]
    assert shift_years(times[0], years) == shifted[0]


def test_a_negative_shift_or_one_past_9999_is_refused() -> None:
    with pytest.raises(ValueError, match="years must be >= 0"):
        shift_years(0, -1)
    last = load_flights()["time_hour_ms"].to_numpy()[-1:]  # 2014-01-01 04:00
    assert pd.Timestamp(int(shift_years(last, 7_985)[0]), unit="ms") == pd.Timestamp(
        "9999-01-01 04:00"
    )
    with pytest.raises(ValueError, match="past 9999"):
        shift_years(last, 7_986)


def test_a_replay_runs_past_2262_where_pandas_timestamps_end() -> None:
    df = load_flights(limit=100)
    shifted = shift_flights(df, 500)  # 2513
    assert (shifted["year"] == 2513).all()
    assert shifted["time_hour"].iloc[0].isoformat() == "2513-01-01T10:00:00+00:00"
    assert FlightTuples(df, years=500)[0]["time_hour"] == shifted["time_hour_ms"].iloc[0]


def test_29_february_moves_to_the_28th_in_a_year_without_one() -> None:
    leap = int(pd.Timestamp("2016-02-29 13:00").value // 1_000_000)
    assert shift_years(leap, 1) == pd.Timestamp("2017-02-28 13:00").value // 1_000_000
    assert shift_years(leap, 4) == pd.Timestamp("2020-02-29 13:00").value // 1_000_000
