"""Unit tests of the replay rounds of :func:`pipeline.demo.producer.run_producer`: where
the first round starts on a stream that already holds flights, and the refusal of a
round further ahead of now than the stream accepts."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.demo.flights import shift_years
from pipeline.demo.producer import check_ahead, first_round_years
from pipeline.errors import FloodgateError

FIRST = int(np.datetime64("2013-01-01T10:00", "ms").astype("int64"))
LAST = int(np.datetime64("2014-01-01T04:00", "ms").astype("int64"))


def _ms(text: str) -> int:
    return int(np.datetime64(text, "ms").astype("int64"))


def test_a_new_stream_starts_at_round_zero() -> None:
    assert first_round_years(FIRST, None) == 0
    assert first_round_years(FIRST, FIRST - 1) == 0


def test_a_restarted_producer_goes_on_after_the_rounds_the_stream_holds() -> None:
    # The last flight of round 0, of round 2, and one midway through round 5.
    assert first_round_years(FIRST, LAST) == 1
    assert first_round_years(FIRST, shift_years(LAST, 2)) == 3
    assert first_round_years(FIRST, _ms("2018-06-30T12:00")) == 6


@given(st.integers(FIRST, _ms("2600-01-01T00:00")))
def test_the_first_round_starts_after_the_latest_event_time_and_no_later_than_needed(
    latest: int,
) -> None:
    years = first_round_years(FIRST, latest)
    assert shift_years(FIRST, years) > latest
    assert years == 0 or shift_years(FIRST, years - 1) <= latest


def test_a_round_ahead_of_now_is_refused_before_it_starts() -> None:
    now = time.time() * 1000
    check_ahead("flights", int(now), 3_600_000, 14)  # now: accepted
    with pytest.raises(FloodgateError, match="round 14 would replay flights up to") as info:
        check_ahead("flights", int(now + 2 * 3_600_000), 3_600_000, 14)
    assert "input_streams.flights.max_event_time_ahead_ms" in str(info.value)
