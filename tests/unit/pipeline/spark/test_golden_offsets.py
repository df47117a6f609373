"""The Python readers and writer of Spark's offsets JSON against ``tests/golden/offsets/``,
the reviewed specification the JVM source's ``PartitionOffsetsGoldenTest`` holds the
source to (docs/formats.md, "Offsets"): the sweeper reads the offsets the source logged
(:func:`~pipeline.offsets.offsets_from_json`, :func:`~pipeline.offsets.parse_offset_log`),
and a query group writes ``startingOffsets`` and ``discardBefore`` in that shape
(:func:`~pipeline.offsets.topic_offsets_to_json`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.offsets import offsets_from_json, parse_offset_log, topic_offsets_to_json

DIRECTORY = Path(__file__).resolve().parents[4] / "tests" / "golden" / "offsets"
INDEX: list[dict[str, Any]] = json.loads((DIRECTORY / "index.json").read_text(encoding="utf-8"))
TOPICS: list[dict[str, Any]] = json.loads(
    (DIRECTORY / "topics_index.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("case", INDEX, ids=[c["file"] for c in INDEX])
def test_the_golden_text_and_sparks_form_read_back_to_the_offsets(case: dict[str, Any]) -> None:
    offsets = {p: o for p, o in case["offsets"]}
    golden = (DIRECTORY / case["file"]).read_text(encoding="utf-8")
    assert offsets_from_json(case["topic"], json.loads(golden)) == offsets
    assert offsets_from_json(case["topic"], json.loads(case["spark"])) == offsets
    # As a line of Spark's offset log (version, metadata, one line per source).
    entry = f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1}}\n{golden}\n-\n'
    assert parse_offset_log(entry) == [json.loads(golden)]


@pytest.mark.parametrize("case", TOPICS, ids=[c["file"] for c in TOPICS])
def test_several_topics_are_written_in_order_and_read_back(case: dict[str, Any]) -> None:
    offsets = {(t, p): o for t, p, o in case["offsets"]}
    written = json.dumps(topic_offsets_to_json(offsets)).encode("utf-8")
    golden = (DIRECTORY / case["file"]).read_bytes()
    assert written == golden
    # Each topic's part is what the single-topic reader takes from it.
    for topic in {t for t, _ in offsets}:
        assert offsets_from_json(topic, json.loads(golden)) == {
            p: o for (t, p), o in offsets.items() if t == topic
        }
