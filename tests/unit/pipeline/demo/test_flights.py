"""Unit tests of :mod:`pipeline.demo.flights`: the replay's flights, built a slice at a time."""

from __future__ import annotations

from pipeline.demo.flights import FlightTuples, flight_records, load_flights


def test_flight_tuples_index_like_the_list_of_every_flight_record() -> None:
    df = load_flights(limit=2_500)
    every = list(flight_records(df))
    lazy = FlightTuples(df)
    assert len(lazy) == len(every)
    for start in range(0, len(every), 1_000):  # the replay's batches, the last one short
        assert lazy[start : start + 1_000] == every[start : start + 1_000]
    assert lazy[0] == every[0] and lazy[-1] == every[-1]
    assert lazy[10:10] == []


def test_flight_tuples_as_arrow_slices_hold_the_same_tuples() -> None:
    df = load_flights(limit=1_500)
    lazy = FlightTuples(df)
    assert lazy.table(0, 1_500).to_pylist() == list(flight_records(df))
    assert lazy.table(700, 1_200).to_pylist() == lazy[700:1_200]
    assert lazy.table(1_400, 2_000).num_rows == 100
