"""A checkpoint the removed Python source (``floodgate_kafka_python``) wrote resumes under
the ``floodgate_kafka`` source on the JVM, at the offsets it logged.

``tests/golden/checkpoints/python_source/`` is such a checkpoint, as Spark wrote it for
the Python source: ``metadata``, ``offsets/0`` and ``offsets/1`` (Spark's version and
batch metadata lines, then the source's offsets in the shape of
``tests/golden/offsets/``: ``{"flights": {"0": 5, "1": 5}}``) and ``commits/0`` and
``commits/1``; nothing under ``sources/`` (the Python source kept no first offsets
there; the JVM source writes them when it first needs them). The test renames the topic
to its own and starts the JVM source on it: the offsets JSON is the same, so
``KafkaMicroBatchStream.deserializeOffset`` reads the logged offsets and the query goes
on where the Python source stopped (docs/changelog.md, the migration note).
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.kafka.topics import ensure_topics
from tests.integration.helpers import offsets_read_available_now

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "checkpoints" / "python_source"


def python_source_checkpoint(target: Path, topic: str, *, committed: int) -> None:
    """The golden checkpoint in ``target``, its topic renamed to ``topic`` (the offsets
    line rewritten in the same JSON shape), with the commits of batches ``0..committed``
    only (the later batch planned but not committed, as after a crash)."""
    shutil.copytree(GOLDEN, target)
    for entry in sorted((target / "offsets").iterdir()):
        version, metadata, line = entry.read_text(encoding="utf-8").split("\n")
        renamed = {topic: json.loads(line)["flights"]}
        entry.write_text(f"{version}\n{metadata}\n{json.dumps(renamed)}", encoding="utf-8")
    for entry in (target / "commits").iterdir():
        if int(entry.name) > committed:
            entry.unlink()


@pytest.mark.parametrize(
    ("committed", "first"),
    [(1, 5), (0, 3)],
    ids=["resumes-after-the-last-commit", "replays-the-uncommitted-batch"],
)
def test_a_checkpoint_of_the_python_source_resumes_under_the_jvm_source(
    spark: Any, bootstrap: str, tmp_path: Path, committed: int, first: int
) -> None:
    """Batch 1 of the checkpoint ends at offset 5 of both partitions, batch 0 at 3. Its
    commit kept, the JVM source reads from 5; without it, Spark runs batch 1 again from
    batch 0's end, 3 (a replay, as after a crash between the two logs)."""
    topic = f"pycheckpoint.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, None)})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(18):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    checkpoint = tmp_path / "checkpoint"
    python_source_checkpoint(checkpoint, topic, committed=committed)

    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",  # not used: the checkpoint says where to go on
        "maxOffsetsPerTrigger": "6",
    }
    seen = offsets_read_available_now(spark.newSession(), options, checkpoint)
    assert seen == [(p, o) for p in (0, 1) for o in range(first, 9)]
    # The JVM source logs its offsets in the same shape.
    newest = max(int(e.name) for e in (checkpoint / "offsets").iterdir() if e.name.isdigit())
    logged = (checkpoint / "offsets" / str(newest)).read_text(encoding="utf-8").split("\n")[2]
    assert logged == json.dumps({topic: {"0": 9, "1": 9}})
