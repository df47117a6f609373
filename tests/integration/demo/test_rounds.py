"""``floodgate produce --rounds``: a stack that replays the flights round after round
processes every round, with nothing late, and ``floodgate audit`` reads it all.

Each round replays the flights a calendar year after the round before
(:func:`pipeline.demo.flights.shift_years`); replayed unchanged, from the second round
on a replay was behind the watermark the round before left, and 282 359 of 336 776
flights of a round were dead-lettered as ``late``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import tomli_w
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_query_group
from pipeline.demo.flights import load_flights, shift_years
from pipeline.demo.producer import first_round_years, latest_event_time, run_producer
from pipeline.demo.reception import read_table
from pipeline.queues.ledger import reconcile
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from tests.integration.helpers import flights_raw_config

#: Flights a round. A full round (336 776 flights) takes about 45 s here, three of them
#: over two minutes: each round replays the first 4 000 flights (2013-01-01 to
#: 2013-01-02), which is the same question: does round r + 1 start past the watermark
#: round r left? Only the event times differ, and they are shifted the same way.
ROUND = 4_000


def test_three_rounds_through_a_running_group_have_nothing_late_and_the_audit_balances(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    start_query_group: Callable[..., QueryGroup],
) -> None:
    # The demo's stream: 2 hours of watermark, micro-batches aligned in event time.
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", aligned=True)
    raw["query_group"]["max_tuples_per_trigger"] = 3_000
    config_path = tmp_path / "flights.toml"
    config_path.write_text(tomli_w.dumps(raw))
    config = load_query_group(config_path)
    started = time.monotonic()

    with start_query_group(config) as group:
        produced = run_producer(bootstrap_servers=bootstrap, config=config, limit=ROUND, rounds=3)
        group.process_all_available()
        stats = group.stats()
    replayed_s = time.monotonic() - started

    assert produced == 3 * ROUND
    for query, s in stats.items():
        assert s.input_tuples == 3 * ROUND, query
        assert s.dropped_by_watermark == 0, query
    # Nothing dead-lettered (so no FG-SOURCE-001 line either): every round processed.
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert sum(r.written for r in rows) == 3 * ROUND
    assert sum(r.dead_lettered for r in rows) == 0
    assert sum(r.processed for r in rows) == 3 * ROUND
    assert all(r.balanced for r in rows)
    # Each round's hours are a year after the last's: 2013, 2014 and 2015.
    stream = "delays_by_origin_hour"
    codec = StreamCodec(stream, schemas.get(raw["output_streams"][stream]["schema"]), schemas)
    hours = read_table(
        bootstrap,
        config.output_streams[stream].topic,
        codec,
        key_columns=("origin", "hour_start"),
    )
    assert {r["hour_start"].year for r in hours} == {2013, 2014, 2015}
    by_year: dict[int, int] = {}
    for r in hours:
        by_year[r["hour_start"].year] = by_year.get(r["hour_start"].year, 0) + r["flights"]
    assert by_year == {2013: ROUND, 2014: ROUND, 2015: ROUND}
    # floodgate audit reads it all and balances.
    result = CliRunner().invoke(
        app, ["audit", str(config_path), "--bootstrap", bootstrap, "--json"]
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)["ledger"]
    assert sum(r["processed"] for r in shown) == 3 * ROUND
    assert sum(r["dead_lettered"] for r in shown) == 0
    # A producer started again on this stream goes on in 2016, after the three rounds.
    flights = load_flights(ROUND)["time_hour_ms"]
    latest = latest_event_time(bootstrap, config, "flights", schemas)
    assert latest == shift_years(int(flights.max()), 2)
    assert first_round_years(int(flights.min()), latest) == 3
    print(f"3 rounds of {ROUND:,} flights replayed and processed in {replayed_s:.1f} s")
