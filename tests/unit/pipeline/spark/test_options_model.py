"""One typed model of the source's options: :class:`SourceOptions`. A query group
builds one from its config (:func:`pipeline.spark.inputs.source_options`) and renders
it (:meth:`SourceOptions.to_options`); the source parses the strings back
(:meth:`SourceOptions.parse`). Rendering then parsing gives the same options, for
every option map of the golden cases both sources are held to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.spark.options import EventTimeWindow, SourceOptions

CASES: list[dict[str, Any]] = [
    case
    for case in json.loads(
        (Path(__file__).resolve().parents[4] / "tests/golden/options/cases.json").read_text()
    )
    if "parsed" in case
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_rendering_then_parsing_gives_the_same_options(case: dict[str, Any]) -> None:
    parsed = SourceOptions.parse(case["options"])
    assert SourceOptions.parse(parsed.to_options()) == parsed


def test_every_typed_field_is_rendered_by_the_option_that_sets_it() -> None:
    options = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": "b:1",
            "subscribe": "flights",
            "schema": "flight",
            "schemas": "{}",
            "watermarkCheckpoint": "/tmp/cp/q",
            "lateWindow": "60000,10000,0",
            "maxEventTimeDriftMs": "30000",
            "discardBefore": '{"flights": {"1": 5, "0": 3}}',
        }
    )
    rendered = options.to_options()
    assert rendered["maxEventTimeDriftMs"] == "30000"
    assert rendered["lateWindow"] == "60000,10000,0"
    assert json.loads(rendered["discardBefore"]) == {"flights": {"0": 3, "1": 5}}
    assert options.late_window == EventTimeWindow(60_000, 10_000, 0)
    assert rendered["kafka.group.id"] == options.group_id  # the made-up group, kept


def test_a_query_group_configures_the_source_through_the_typed_model() -> None:
    """The shipped flights group: its stream's settings reach the source typed
    (``max_event_time_drift_ms`` an int of ms, the key required), rendered once and
    read back whole."""
    from pipeline.config import load_query_group
    from pipeline.resources import query_group_file
    from pipeline.spark.inputs import source_options

    config = load_query_group(query_group_file("flights"), env={})
    query = next(iter(config.queries))
    stream = config.input_streams["flights"]
    options = source_options(
        config,
        query,
        "flights",
        bootstrap_servers="b:1",
        schemas_json="{}",
        max_tasks=2,
        late=("/tmp/cp/q", EventTimeWindow(3_600_000, 3_600_000)),
        discard_before={0: 7},
    )
    assert options.max_event_time_drift_ms == stream.max_event_time_drift_ms == 3_600_000
    assert options.group_id == config.consumer_group(query)
    assert (options.topics, options.commit_offsets) == ((stream.topic,), False)
    assert options.discard_before == {stream.topic: {0: 7}}
    rendered = options.to_options()
    assert rendered["maxEventTimeDriftMs"] == "3600000"
    assert SourceOptions.parse(rendered) == options
