"""The main job (``floodgate demo``) on a slice of the flights, with bounded output queues
and its reception application reading the output streams as they are written."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from pipeline.demo.flights import load_flights
from pipeline.demo.reception import read_table
from pipeline.demo.run import DEFAULT_CONFIG, DemoStatus, run_demo
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

FLIGHTS = 3_000


def test_the_demo_reads_every_output_tuple_through_its_reception_and_balances(
    bootstrap: str, spark: Any, schemas: SchemaRepository, tmp_path: Path
) -> None:
    raw = tomllib.loads(DEFAULT_CONFIG.read_text())
    # The demo's watermark is 2 hours, and its micro-batches are aligned in event time
    # (no partition read more than an hour past another), so no flight is late however
    # far apart the partitions' heads are: planned by offsets alone, with 2 hours,
    # 115 of 3 000 were dead-lettered as late on one CI run (conf/flights.toml).
    flights = raw["input_streams"]["flights"]
    assert (flights["watermark"], flights["max_event_time_drift_ms"]) == ("2 hours", 3_600_000)
    # Small micro-batches and output queues, so the bound is checked many times.
    raw["query_group"]["max_tuples_per_trigger"] = 500
    raw["query_group"]["trigger_interval_ms"] = 100
    raw["query_group"]["control_dir"] = str(tmp_path / "run")
    for stream in raw["output_streams"].values():
        stream["max_queue_size"] = 2_000
    config_path = tmp_path / "flights.toml"
    config_path.write_text(tomli_w.dumps(raw))
    seen: list[DemoStatus] = []

    result = run_demo(
        bootstrap_servers=bootstrap,
        limit=FLIGHTS,
        config_path=config_path,
        spark=spark,
        on_progress=seen.append,
    )

    assert result.balanced
    assert result.produced == FLIGHTS
    assert result.processed == {"delays_by_origin_hour": FLIGHTS, "delays_by_carrier_day": FLIGHTS}
    # What the reception read is the whole output: the latest tuple per key of each topic.
    for stream, rows, key in (
        ("delays_by_origin_hour", result.origin_hours, ("origin", "hour_start")),
        ("delays_by_carrier_day", result.carrier_days, ("carrier", "day")),
    ):
        topic = result.output_topics[stream]
        schema = raw["output_streams"][stream]["schema"]
        expected = read_table(
            bootstrap, topic, StreamCodec(stream, schemas.get(schema), schemas), key_columns=key
        )
        assert sorted(rows, key=lambda r: tuple(str(r[k]) for k in key)) == sorted(
            expected, key=lambda r: tuple(str(r[k]) for k in key)
        )
        assert result.received[stream] >= len(rows)
        assert result.output_queue_peak[stream] <= result.output_max_queue_size[stream] == 2_000
    # The flights of every origin-hour add up to the flights replayed.
    assert sum(r["flights"] for r in result.origin_hours) == FLIGHTS
    # The live view was fed the latest hour received, one tuple per origin at most.
    last_hour = load_flights(FLIGHTS)["time_hour"].max().to_pydatetime()
    final = seen[-1]
    assert final.latest_hour and {r["hour_start"] for r in final.latest_hour} == {last_hour}
    assert len({r["origin"] for r in final.latest_hour}) == len(final.latest_hour)
    assert final.received == result.received
