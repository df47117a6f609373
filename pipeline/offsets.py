"""Spark's offset log, read and written in one place; no PySpark import.

Spark's Kafka source, and so Floodgate's source, records a micro-batch's
end offsets as JSON per topic and partition, the *next* offset to read of each
topic-partition: ``{"arrivals": {"0": 310}, "flights": {"0": 1200, "1": 1187}}``
(``tests/golden/offsets/``). A query group writes offsets in that shape for the
source's options (:func:`topic_offsets_to_json`, keyed by :data:`TopicPartitionKey`);
:func:`offsets_from_json` reads one topic's part. The JVM sink reads a batch's
entry back (``InputOffsets``) to commit the same offsets to the query's consumer
group, and the sweeper reads the logs of a query group it
sweeps for: how far its queries have planned (:func:`planned_ends`) and where a
restarted query would read again (:func:`replay_starts`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


#: Offsets of one topic, per partition.
Offsets = dict[int, int]

#: A Kafka topic-partition as the source keys it: ``(topic, partition)``; ordered by
#: topic, then partition (as Spark's Kafka source orders ``TopicPartition``).
TopicPartitionKey = tuple[str, int]


def offsets_from_json(topic: str, value: Mapping[str, Any]) -> Offsets:
    """``{"topic": {"0": 5}}`` (Spark's Kafka offset shape) -> ``{0: 5}``, the offsets of
    ``topic``; a missing topic is an empty dict.

    Raises:
        ValueError: the offset does not have the expected shape.
    """
    per_partition = value.get(topic, {})
    if not isinstance(per_partition, Mapping):
        raise ValueError(f"offset for topic {topic!r} is not an object: {value!r}")
    return {int(p): int(o) for p, o in per_partition.items()}


def topic_offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """``{("flights", 0): 5, ("arrivals", 1): 2}`` -> ``{"arrivals": {"1": 2}, "flights":
    {"0": 5}}``: Spark's Kafka offsets JSON over every topic, topics then partitions in
    order (as Spark's ``JsonUtils.partitionOffsets`` writes them); no offsets is ``{}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def local_checkpoint_path(checkpoint_dir: str) -> str | None:
    """The local directory of a ``file:`` or scheme-less checkpoint location, else None
    (a location with another scheme, ``hdfs://`` say)."""
    if checkpoint_dir.startswith("file:"):
        return "/" + checkpoint_dir[len("file:") :].lstrip("/")
    return None if "://" in checkpoint_dir else checkpoint_dir


def local_offset_log(offsets_dir: str, batch_id: int) -> str | None:
    """The text of ``<offsets_dir>/<batch_id>`` in a local checkpoint; ``None`` when
    absent or not yet complete (version, metadata and at least one source line)."""
    try:
        with open(os.path.join(offsets_dir, str(batch_id)), encoding="utf-8") as log_file:
            text = log_file.read()
    except OSError:
        return None
    return text if len(text.splitlines()) >= 3 else None


def parse_offset_log(text: str) -> list[dict[str, Any]]:
    """The source offsets of one entry of Spark's offset log (its text): line 1 is the
    log version, line 2 the batch metadata, then one line per source (``-`` for a
    source with no offset, left out)."""
    offsets = []
    for line in text.splitlines()[2:]:
        line = line.strip()
        if line.startswith("{"):
            offsets.append(json.loads(line))
    return offsets


def logged_batches(checkpoint: str | Path, log_name: str = "offsets") -> list[int]:
    """The batch ids in one of Spark's logs of a local checkpoint: ``offsets`` (planned:
    written before a micro-batch runs) or ``commits`` (written after it committed)."""
    folder = Path(checkpoint) / log_name
    if not folder.is_dir():
        return []
    return [int(entry.name) for entry in folder.iterdir() if entry.name.isdigit()]


def logged_offsets(checkpoint: str | Path, batch_id: int, topic: str) -> Offsets | None:
    """``topic``'s end offset per partition in a local checkpoint's offset log entry
    ``batch_id`` (other sources' lines are skipped); ``None`` when the entry cannot be
    read now (absent, or being written: :func:`local_offset_log`)."""
    text = local_offset_log(os.path.join(checkpoint, "offsets"), batch_id)
    if text is None:
        return None
    offsets: Offsets = {}
    try:
        logged = parse_offset_log(text)
    except ValueError:
        return None
    for source in logged:
        with contextlib.suppress(ValueError, AttributeError):
            offsets.update(offsets_from_json(topic, source))  # else another source's shape
    return offsets


def planned_ends(checkpoints: Iterable[str | Path], topic: str) -> Offsets:
    """Per partition, the furthest end offset of the latest micro-batch any of the
    queries (their local ``checkpoints``) planned for ``topic``: what they may be
    reading now. An entry being written is skipped (the sweeper asks again next cycle)."""
    ends: Offsets = {}
    for checkpoint in checkpoints:
        planned = logged_batches(checkpoint)
        if not planned:
            continue
        for p, o in (logged_offsets(checkpoint, max(planned), topic) or {}).items():
            ends[p] = max(ends.get(p, 0), o)
    return ends


def replay_starts(checkpoints: Iterable[str | Path], topic: str) -> Offsets | None:
    """Per partition, the lowest offset any query may still read ``topic`` from: where
    Spark would start again after a restart of its driver, the end offsets of its
    latest micro-batch in the commit log (``<checkpoint>/commits/<batch>``). ``None``
    when a query planned a batch and has committed none yet, or its log is being
    written: then nothing may be freed this cycle.

    Why: the query group commits a batch's input offsets to Kafka in the batch's
    output transaction, and Spark writes its commit log after. A driver killed between
    the two replays the batch from its start, below the group's committed offset
    (its output is then skipped as already written, but its input is read again); a
    BLOB deleted, or a broker truncated, up to the committed offset had lost it (the
    soak met it: ``DataLossError`` on the replay after a ``kill -9`` of the driver).
    """
    starts: Offsets = {}
    for checkpoint in checkpoints:
        if not logged_batches(checkpoint):
            continue
        committed = logged_batches(checkpoint, "commits")
        if not committed:
            return None
        offsets = logged_offsets(checkpoint, max(committed), topic)
        if offsets is None:
            return None
        for p, o in offsets.items():
            starts[p] = min(starts.get(p, o), o)
    return starts
