"""The replays of an at-least-once query: output tuples written more than once.

With ``delivery = "at-least-once"`` a query's sink writes with no transaction, so a
batch that Spark runs again (after a driver's crash, a held group's release, a retried
task) leaves in the output stream whatever its earlier run sent. Nothing is lost; those
tuples are there twice. The ledger of the input side cannot see them (the input offsets
are committed once); this module counts them, per query, from two facts:

* the sink's output log, which the driver writes once every task of a batch committed
  and before Spark's commit log (``<checkpoint>/floodgate/output/<batch>``, JSON
  ``{"written": n, "ends": {"<partition>": offset}}``): the tuples of the committed
  runs of every batch up to this one, and the offset after the last of them in each
  output partition;
* Spark's commit log (``<checkpoint>/commits/<batch>``): the last batch that counts.

With ``W`` and ``E`` the entry of the last committed batch and ``H`` the output topic's
high watermarks now, the ``sum(E)`` offsets below ``E`` hold ``W`` tuples of committed
runs and ``sum(E) - W`` **replayed** ones (the earlier runs' copies); the ``sum(H) -
sum(E)`` above ``E`` are **uncommitted**: a batch running now, or one cut short (a
crash, a hold, a stop) that Spark runs again at the next start, writing them again. So
for a stopped group, ``replayed`` is what its restarts and releases wrote twice, and
``uncommitted`` what its next start will.

Offsets are counted from the output topic's creation: a query's output topic is its
own (no other writer), as Floodgate creates it; each offset is one tuple (no
transaction markers with at-least-once delivery). The checkpoint must be local (as
for the sweeper); another location gives no figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.offsets import local_checkpoint_path, logged_batches
from pipeline.queues.probe import QueueProbe

if TYPE_CHECKING:
    from pipeline.config import QueryGroupConfig

#: The sink's output log, under a query's checkpoint (written by the JVM sink).
OUTPUT_LOG = "floodgate/output"


@dataclass(frozen=True)
class ReplayRow:
    """What one at-least-once query wrote to its output stream.

    Attributes:
        query_group / query / stream / topic: what the row is about.
        written: tuples in the output topic, offsets since its creation (``sum(H)``).
        committed: tuples of the committed runs of its batches (``W``).
        replayed: tuples an earlier run of a batch wrote, written again by the run
            that committed (``sum(E) - W``): duplicates in the output.
        uncommitted: tuples of a batch not committed yet (``sum(H) - sum(E)``).
        batch: the last batch in Spark's commit log; ``None`` before the first one or
            when the checkpoint is not local (then ``committed``, ``replayed`` and
            ``uncommitted`` are ``None``).
    """

    query_group: str
    query: str
    stream: str
    topic: str
    written: int
    committed: int | None
    replayed: int | None
    uncommitted: int | None
    batch: int | None


@dataclass(frozen=True)
class OutputLogEntry:
    """One entry of the sink's output log: ``written`` tuples of committed runs up to
    its batch, ending before ``ends`` (offset per output partition)."""

    written: int
    ends: dict[int, int]


def read_output_log(checkpoint: str | Path, batch: int) -> OutputLogEntry | None:
    """The output log's entry of ``batch`` in a local checkpoint; ``None`` if absent.

    Raises:
        ValueError: the entry is not the JSON the sink writes.
    """
    path = Path(checkpoint) / OUTPUT_LOG / str(batch)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("written"), int):
        raise ValueError(f"{path}: not an output log entry ({{'written': n, 'ends': ...}})")
    return OutputLogEntry(
        written=value["written"],
        ends={int(p): int(o) for p, o in dict(value.get("ends") or {}).items()},
    )


def replay_row(
    *,
    query_group: str,
    query: str,
    stream: str,
    topic: str,
    highs: dict[int, int],
    last_batch: int | None,
    entry: OutputLogEntry | None,
) -> ReplayRow:
    """One query's row from its output topic's high watermarks ``highs`` (per
    partition), the last batch of its commit log and that batch's output log entry (see
    the module docstring). A committed batch with no entry (a sink of a version before
    the output log) gives no figures."""
    written = sum(highs.values())
    if last_batch is None or entry is None:
        return ReplayRow(query_group, query, stream, topic, written, None, None, None, last_batch)
    below = sum(entry.ends.values())
    return ReplayRow(
        query_group=query_group,
        query=query,
        stream=stream,
        topic=topic,
        written=written,
        committed=entry.written,
        replayed=below - entry.written,
        uncommitted=written - below,
        batch=last_batch,
    )


def replays(config: QueryGroupConfig, *, bootstrap_servers: str) -> list[ReplayRow]:
    """A row per query of an at-least-once query group (none with exactly-once
    delivery: a replay there writes nothing twice).

    Raises:
        BrokerError: the broker did not answer.
        ValueError: an output log entry is not the sink's JSON.
    """
    if config.query_group.delivery != "at-least-once":
        return []
    rows = []
    for query, spec in config.queries.items():
        stream = spec.output
        # The logs first, the broker after: a batch's tuples are all in the topic before
        # its entry is written, so the high watermarks read next are at or past its ends.
        local = local_checkpoint_path(config.checkpoint(query))
        committed = logged_batches(local, "commits") if local is not None else []
        last = max(committed) if committed else None
        entry = read_output_log(local, last) if local is not None and last is not None else None
        probe = QueueProbe.for_output_stream(config, stream, bootstrap_servers=bootstrap_servers)
        try:
            highs = {p: q.high for p, q in probe.snapshot().partitions.items()}
        finally:
            probe.close()
        rows.append(
            replay_row(
                query_group=config.name,
                query=query,
                stream=stream,
                topic=config.output_streams[stream].topic,
                highs=highs,
                last_batch=last if local is not None else None,
                entry=entry,
            )
        )
    return rows


__all__ = ["OUTPUT_LOG", "OutputLogEntry", "ReplayRow", "read_output_log", "replay_row", "replays"]
