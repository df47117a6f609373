"""The replays of an at-least-once query, counted from the sink's output log and the
output topic's high watermarks, against a simulated output topic where every copy of
every tuple is known."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.queues.replays import (
    OUTPUT_LOG,
    OutputLogEntry,
    read_output_log,
    replay_row,
)

PARTITIONS = 3


@dataclass
class OutputTopic:
    """The output topic as a list per partition of the batch each tuple came from, and
    the sink's output log as the driver writes it (``OutputLog`` on the JVM)."""

    partitions: list[list[tuple[int, int]]] = field(
        default_factory=lambda: [[] for _ in range(PARTITIONS)]
    )
    entries: dict[int, OutputLogEntry] = field(default_factory=dict)
    committed: list[int] = field(default_factory=list)  # Spark's commit log

    def run(self, batch: int, rows: list[int], sent: int) -> None:
        """A run of ``batch`` whose tasks send the first ``sent`` of its ``rows`` (the
        output partition of each tuple, its index the tuple's identity)."""
        for i, p in enumerate(rows[:sent]):
            self.partitions[p].append((batch, i))

    def commit(self, batch: int, rows: list[int], *, logged: bool) -> None:
        """A whole run of ``batch``, its entry written; ``logged``: Spark's commit log
        too (else the driver dies between the two, and the batch is run again)."""
        self.run(batch, rows, len(rows))
        before = max((b for b in self.entries if b < batch), default=None)
        previous = self.entries[before] if before is not None else OutputLogEntry(0, {})
        ends = dict(previous.ends)
        for p, queue in enumerate(self.partitions):
            if p in rows:
                ends[p] = len(queue)
        self.entries[batch] = OutputLogEntry(previous.written + len(rows), ends)
        if logged:
            self.committed.append(batch)


# A batch: its tuples' output partitions, and the runs before the one that commits: how
# many tuples each sent before it died, and whether the committing run's driver died
# before Spark's commit log.
batches = st.lists(
    st.tuples(
        st.lists(st.integers(0, PARTITIONS - 1), min_size=0, max_size=12),
        st.lists(st.integers(0, 12), max_size=3),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(batches=batches, cut=st.integers(0, 12))
def test_replayed_is_every_second_copy_below_the_last_commit_and_the_rest_is_uncommitted(
    batches: list[tuple[list[int], list[int], bool]], cut: int
) -> None:
    topic = OutputTopic()
    for batch, (rows, died_after, unlogged) in enumerate(batches):
        for sent in died_after:
            topic.run(batch, rows, min(sent, len(rows)))
        if unlogged:
            topic.commit(batch, rows, logged=False)  # entry written, then the driver died
        topic.commit(batch, rows, logged=True)
    # The next batch is running (or was cut by a stop): what it sent so far.
    next_batch = len(batches)
    topic.run(next_batch, [i % PARTITIONS for i in range(cut)], cut)

    last = max(topic.committed)
    row = replay_row(
        query_group="g",
        query="copy",
        stream="out",
        topic="out.t",
        highs={p: len(q) for p, q in enumerate(topic.partitions)},
        last_batch=last,
        entry=topic.entries[last],
    )
    copies = [c for q in topic.partitions for c in q]
    committed = [c for c in copies if c[0] <= last]
    assert row.written == len(copies)
    assert row.committed == sum(len(rows) for rows, _, _ in batches)
    # Each tuple of a committed batch is out once for its committed run; the rest of
    # their copies are the replays' duplicates.
    assert row.replayed == len(committed) - len(set(committed))
    assert row.uncommitted == cut
    assert row.written == row.committed + row.replayed + row.uncommitted


def test_no_committed_batch_gives_no_figures() -> None:
    row = replay_row(
        query_group="g",
        query="copy",
        stream="out",
        topic="out.t",
        highs={0: 4},
        last_batch=None,
        entry=None,
    )
    assert (row.written, row.committed, row.replayed, row.uncommitted) == (4, None, None, None)


def test_the_sinks_entry_is_read_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / OUTPUT_LOG
    folder.mkdir(parents=True)
    # As OutputLog.Entry.toJson writes it (Jackson, partitions in order).
    (folder / "7").write_text('{"written":9,"ends":{"0":6,"1":3}}')
    assert read_output_log(tmp_path, 7) == OutputLogEntry(9, {0: 6, 1: 3})
    assert read_output_log(tmp_path, 8) is None
    (folder / "8").write_text(json.dumps({"ends": {}}))
    with pytest.raises(ValueError, match="not an output log entry"):
        read_output_log(tmp_path, 8)
