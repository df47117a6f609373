"""``pipeline/names.py`` against ``tests/golden/contract/names.json``, the examples the
JVM's twin (``io.floodgate.spark.kafka.Names``, ``NamesContractTest``) is held to as well: a
name derived on the driver and the same name derived on an executor never differ."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline import names

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "contract" / "names.json"
CONTRACT = json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_a_query_groups_names_are_the_contracts() -> None:
    g = CONTRACT["query_group"]
    group_id = names.query_group_id(g["prefix"], g["name"], g["query"])
    assert group_id == g["query_group_id"]
    assert (
        names.reception_group_id(g["prefix"], g["name"], g["output_stream"])
        == (g["reception_group_id"])
    )
    assert names.sink_transactional_id(group_id) == g["sink_transactional_id"]
    assert names.dead_letter_topic(g["name"]) == g["dead_letter_topic"]


def test_a_write_tasks_names_are_the_contracts() -> None:
    sink = CONTRACT["sink"]
    assert sink["transactional_id_prefix"] == CONTRACT["query_group"]["sink_transactional_id"]
    for task in sink["tasks"]:
        assert (
            names.task_transactional_id(sink["transactional_id_prefix"], task["task"])
            == (task["transactional_id"])
        )
    assert (
        names.input_marker_group_id(sink["transactional_id_prefix"])
        == (sink["input_marker_group_id"])
    )


def test_the_names_of_one_off_readers_are_their_own() -> None:
    first, second = names.ad_hoc_group_id(), names.ad_hoc_group_id()
    assert first != second
    assert first.startswith("floodgate-reader-")
