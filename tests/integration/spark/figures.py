"""The flights query group's figures, computed independently with pandas, and what a
query group wrote, to compare them (the query group and Spark cluster tests)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from pipeline.config import QueryGroupConfig
from pipeline.demo.reception import read_table
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository


def expected_by_origin_hour(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The flights query's first figures, computed independently with pandas."""
    df = pd.DataFrame(records)
    df["hour_start"] = pd.to_datetime(df["time_hour"], unit="ms", utc=True)
    out = df.groupby(["origin", "hour_start"]).agg(
        flights=("flight", "size"),
        departures=("dep_time", "count"),
        mean_dep_delay=("dep_delay", "mean"),
        mean_arr_delay=("arr_delay", "mean"),
    )
    return out.sort_index()


def expected_by_carrier_day(records: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(records)
    df["day"] = pd.to_datetime(df[["year", "month", "day"]]).dt.date
    out = df.groupby(["carrier", "day"]).agg(
        flights=("flight", "size"),
        departures=("dep_time", "count"),
        mean_dep_delay=("dep_delay", "mean"),
        mean_arr_delay=("arr_delay", "mean"),
    )
    return out.sort_index()


def actual(rows: list[dict[str, Any]], keys: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if "hour_start" in df:
        df["hour_start"] = pd.to_datetime(df["hour_start"], utc=True)
        df = df.drop(columns=["hour_end"])
    return df.set_index(keys).sort_index()[
        ["flights", "departures", "mean_dep_delay", "mean_arr_delay"]
    ]


def assert_same_figures(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.index) == list(want.index)
    for column in ("flights", "departures"):
        assert got[column].tolist() == want[column].tolist(), column
    for column in ("mean_dep_delay", "mean_arr_delay"):
        for key, g, w in zip(got.index, got[column], want[column], strict=True):
            if w is None or (isinstance(w, float) and math.isnan(w)):
                assert g is None or math.isnan(g), (column, key, g)
            else:
                assert g == pytest.approx(w, rel=1e-9, abs=1e-9), (column, key, g, w)


def read_outputs(
    bootstrap: str, config: QueryGroupConfig, schemas: SchemaRepository
) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name, stream in config.output_streams.items():
        out[name] = read_table(
            bootstrap,
            stream.topic,
            StreamCodec(name, schemas.get(stream.schema_), schemas),
            key_columns=stream.key,
        )
    return out
