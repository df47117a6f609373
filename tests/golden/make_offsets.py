"""Write ``tests/golden/offsets/``: the text the Python source hands Spark for its offset
log, ``json.dumps(offsets_to_json(topic, offsets))`` (PySpark's streaming source runner
dumps the dict ``latestOffset`` returns with ``json.dumps``' default separators).

``<name>.json`` holds the text, byte for byte (no newline after it); ``index.json``
lists each file with the topic and offsets it was written from (``[[partition, offset],
...]`` in the order given, not sorted) and the same offsets in the form Spark's own
Kafka source writes (no spaces). docs/formats.md, "Offsets", specifies the format.
Both sources' tests read the files: ``tests/unit/pipeline/spark/test_golden_offsets.py``
and ``PartitionOffsetsGoldenTest`` (``PartitionOffsets.toJson`` must write each text byte
for byte and ``fromJson`` read both forms).

A source of several topics (``subscribe`` of several, ``subscribePattern``, issue 40)
writes them all in one object, topics in order: ``topics_<name>.json`` holds the text
of ``json.dumps(topic_offsets_to_json(offsets))``, and ``topics_index.json`` lists
each with its offsets as ``[[topic, partition, offset], ...]`` in the order given and
Spark's form.

Run from the repository's root: ``.venv/bin/python tests/golden/make_offsets.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.offsets import offsets_to_json, topic_offsets_to_json  # noqa: E402

DIRECTORY = ROOT / "tests" / "golden" / "offsets"

#: ``(name, topic, [(partition, offset), ...])``.
CASES: list[tuple[str, str, list[tuple[int, int]]]] = [
    ("one_partition", "flights", [(0, 1200)]),
    ("partitions_0_to_2", "flights", [(0, 1200), (1, 1187), (2, 0)]),
    # Numeric order, never the text's: "2" before "10".
    ("partitions_0_to_11_numeric_order", "flights", [(p, 100 + p) for p in range(11, -1, -1)]),
    ("sparse_partitions", "flights", [(100, 7), (3, 5), (20, 1), (10, 0)]),
    ("no_partitions", "flights", []),
    (
        "large_offsets",
        "flights",
        [(0, 2**63 - 1), (1, 2**53 + 1), (2, 2**32), (3, 2**31), (4, 1)],
    ),
    ("large_partition", "flights", [(2**31 - 1, 5), (0, 9)]),
    ("topic_name_characters", "fg.flights_v2-EU", [(1, 42), (0, 41)]),
]


#: ``(name, [(topic, partition, offset), ...])``: sources of several topics.
TOPIC_CASES: list[tuple[str, list[tuple[str, int, int]]]] = [
    # Topics in order of their names (as Spark's JsonUtils), partitions numerically.
    ("two_topics", [("flights", 1, 7), ("arrivals", 0, 310), ("flights", 0, 1200)]),
    (
        "three_topics_numeric_partitions",
        [("b", 10, 1), ("a.x", 2, 5), ("b", 2, 0), ("a", 0, 9), ("a-x", 0, 4)],
    ),
    # A pattern that matches no topic yet.
    ("no_topics", []),
]


def topics_text(offsets: list[tuple[str, int, int]]) -> str:
    """The offset text of a source of several topics."""
    return json.dumps(topic_offsets_to_json({(t, p): o for t, p, o in offsets}))


def topics_spark_text(offsets: list[tuple[str, int, int]]) -> str:
    """The same, as Spark's own Kafka source writes it (no spaces)."""
    by_key = {(t, p): o for t, p, o in offsets}
    return json.dumps(topic_offsets_to_json(by_key), separators=(",", ":"))


def text(topic: str, offsets: list[tuple[int, int]]) -> str:
    """The Python source's offset text (what it hands Spark and Spark logs)."""
    return json.dumps(offsets_to_json(topic, dict(offsets)))


def spark_text(topic: str, offsets: list[tuple[int, int]]) -> str:
    """The same offsets as Spark's own Kafka source writes them (no spaces)."""
    return json.dumps(offsets_to_json(topic, dict(offsets)), separators=(",", ":"))


def render() -> dict[str, str]:
    """File name -> content."""
    files = {f"{name}.json": text(topic, offsets) for name, topic, offsets in CASES}
    index = [
        {
            "file": f"{name}.json",
            "topic": topic,
            "offsets": [list(po) for po in offsets],
            "spark": spark_text(topic, offsets),
        }
        for name, topic, offsets in CASES
    ]
    files["index.json"] = json.dumps(index, indent=2) + "\n"
    files |= {f"topics_{name}.json": topics_text(offsets) for name, offsets in TOPIC_CASES}
    topics_index = [
        {
            "file": f"topics_{name}.json",
            "offsets": [list(tpo) for tpo in offsets],
            "spark": topics_spark_text(offsets),
        }
        for name, offsets in TOPIC_CASES
    ]
    files["topics_index.json"] = json.dumps(topics_index, indent=2) + "\n"
    return files


if __name__ == "__main__":
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    for name, content in render().items():
        (DIRECTORY / name).write_text(content, encoding="utf-8")
    print(f"wrote {DIRECTORY.relative_to(ROOT)}")
