"""``tests/golden/contract/source.json`` specifies, by hand in review, the names and
settings of the ``floodgate_kafka`` source (its ``SourceContractTest`` holds the JVM
source to it); the Python side that reads what the source writes uses the same names:
the short name a query group hands ``format(...)`` and the dead-letter headers the
ledger and ``floodgate audit`` read."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.deadletter import DLQ_HEADERS
from pipeline.spark.options import SOURCE_NAME

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden"


def test_the_python_side_reads_the_names_the_contract_gives() -> None:
    on_file = json.loads((GOLDEN / "contract" / "source.json").read_text(encoding="utf-8"))
    assert on_file["source_name"] == SOURCE_NAME
    assert on_file["dead_letter"]["headers"] == list(DLQ_HEADERS)
