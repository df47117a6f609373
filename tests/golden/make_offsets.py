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

Run from the repository's root: ``.venv/bin/python tests/golden/make_offsets.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.offsets import offsets_to_json  # noqa: E402

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
    return files


if __name__ == "__main__":
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    for name, content in render().items():
        (DIRECTORY / name).write_text(content, encoding="utf-8")
    print(f"wrote {DIRECTORY.relative_to(ROOT)}")
