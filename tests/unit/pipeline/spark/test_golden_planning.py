"""The Python source's batch planning against ``tests/golden/planning/``, the file the
JVM source's ``BatchPlannerGoldenTest`` reads too: both plan the same micro-batch ends
(``plan_batch_end``) and deal the same ranges to the same tasks (``group_ranges``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.offsets import plan_batch_end
from pipeline.spark.partition_reader import KafkaInputPartition
from pipeline.spark.source import group_ranges

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "golden"
CASES: dict[str, list[dict[str, Any]]] = json.loads(
    (GOLDEN / "planning" / "plan_batch_end.json").read_text(encoding="utf-8")
)
PLANS = CASES["plan_batch_end"]
GROUPS = CASES["group_ranges"]


@pytest.mark.parametrize("case", PLANS, ids=[c["name"] for c in PLANS])
def test_plan_batch_end_gives_the_golden_end(case: dict[str, Any]) -> None:
    start = {p: o for p, o in case["start"]}
    latest = {p: o for p, o in case["latest"]}
    if "error" in case:
        with pytest.raises(ValueError, match=case["error"]):
            plan_batch_end(start, latest, case["max_rows"])
        return
    end = plan_batch_end(start, latest, case["max_rows"])
    assert sorted(end.items()) == [(p, o) for p, o in case["end"]]


@pytest.mark.parametrize("case", GROUPS, ids=[c["name"] for c in GROUPS])
def test_group_ranges_gives_the_golden_tasks(case: dict[str, Any]) -> None:
    ranges = [KafkaInputPartition("flights", p, s, e) for p, s, e in case["ranges"]]
    tasks = group_ranges(ranges, case["max_tasks"])
    assert [[r.partition for r in t.ranges] for t in tasks] == case["tasks"]


def test_the_golden_file_is_what_make_planning_writes() -> None:
    spec = importlib.util.spec_from_file_location("make_planning", GOLDEN / "make_planning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (GOLDEN / "planning" / "plan_batch_end.json").read_text(encoding="utf-8") == (
        module.render()
    )
    # The cases reach every branch: no limit, all fits, round robin, shares, refusals.
    assert any(c["max_rows"] is None for c in PLANS)
    assert sum("error" in c for c in PLANS) >= 2
    assert len(PLANS) > 300 and len(GROUPS) > 100
