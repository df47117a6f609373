"""The Python source's offset text against ``tests/golden/offsets/``, the files the JVM
source's ``PartitionOffsetsGoldenTest`` reads too: both write a micro-batch's offsets
byte for byte alike, so a checkpoint one source wrote resumes under the other
(docs/formats.md, "Offsets")."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.offsets import (
    offsets_from_json,
    offsets_to_json,
    parse_offset_log,
    topic_offsets_from_json,
    topic_offsets_to_json,
)

DIRECTORY = Path(__file__).resolve().parents[4] / "tests" / "golden" / "offsets"
INDEX: list[dict[str, Any]] = json.loads((DIRECTORY / "index.json").read_text(encoding="utf-8"))
TOPICS: list[dict[str, Any]] = json.loads(
    (DIRECTORY / "topics_index.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("case", INDEX, ids=[c["file"] for c in INDEX])
def test_the_source_writes_the_golden_text_byte_for_byte(case: dict[str, Any]) -> None:
    offsets = {p: o for p, o in case["offsets"]}
    written = json.dumps(offsets_to_json(case["topic"], offsets)).encode("utf-8")
    assert written == (DIRECTORY / case["file"]).read_bytes()


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
    assert topic_offsets_from_json(json.loads(golden)) == offsets
    assert topic_offsets_from_json(json.loads(case["spark"])) == offsets
    # Each topic's part is what the single-topic reader takes from it.
    for topic in {t for t, _ in offsets}:
        assert offsets_from_json(topic, json.loads(golden)) == {
            p: o for (t, p), o in offsets.items() if t == topic
        }


def test_the_golden_files_are_what_make_offsets_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_offsets", DIRECTORY.parent / "make_offsets.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = module.render()
    assert sorted(files) == sorted(p.name for p in DIRECTORY.glob("*.json"))
    for name, content in files.items():
        assert (DIRECTORY / name).read_text(encoding="utf-8") == content, name
