"""``tests/golden/contract/source.json``, the names and settings both Spark sources
share (the JVM source's ``SourceContractTest`` reads it too), is what the Python side's
owners say now: regenerating it changes nothing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from pipeline.deadletter import DLQ_HEADERS

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden"


def test_the_contract_file_is_what_the_python_owners_say() -> None:
    spec = importlib.util.spec_from_file_location("make_contract", GOLDEN / "make_contract.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    on_file = json.loads((GOLDEN / "contract" / "source.json").read_text(encoding="utf-8"))
    assert maker.contract() == on_file, "run .venv/bin/python tests/golden/make_contract.py"
    assert on_file["dead_letter"]["headers"] == list(DLQ_HEADERS)
    # What a kafka.* option may change: the transaction isolation, never the commits.
    assert on_file["consumer"]["forced"]["enable.auto.commit"] == "false"
    assert on_file["consumer"]["defaults"] == {"isolation.level": "read_committed"}
