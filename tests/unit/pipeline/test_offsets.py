"""Unit tests of reading Spark's offset log from a local checkpoint (no JVM)."""

from __future__ import annotations

from pathlib import Path

from pipeline.offsets import planned_ends, replay_starts

ENTRY = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"flights":{"0":12,"1":7}}\n-\n'


def offset_entry(per_partition: dict[str, int]) -> str:
    import json

    return (
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
        + json.dumps({"flights": per_partition})
        + "\n"
    )


def test_a_restarted_query_would_read_again_from_its_last_committed_batch(
    tmp_path: Path,
) -> None:
    """The sweeper frees nothing a restarted driver would read again: batch 2 was
    planned (and maybe committed to Kafka) but not in Spark's commit log, so Spark
    replays it from batch 1's end; the slower of two queries sets the bound."""
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for checkpoint, ends, last_commit in (
        (fast, [{"0": 10, "1": 8}, {"0": 20, "1": 18}, {"0": 30, "1": 28}], 1),
        (slow, [{"0": 5, "1": 9}, {"0": 15, "1": 19}], 0),
    ):
        (checkpoint / "offsets").mkdir(parents=True)
        (checkpoint / "commits").mkdir()
        for batch, per_partition in enumerate(ends):
            (checkpoint / "offsets" / str(batch)).write_text(offset_entry(per_partition))
        for batch in range(last_commit + 1):
            (checkpoint / "commits" / str(batch)).write_text("v1\n{}\n")
    assert replay_starts([fast], "flights") == {0: 20, 1: 18}
    assert replay_starts([fast, slow], "flights") == {0: 5, 1: 9}


def test_a_query_with_no_committed_batch_lets_nothing_be_freed(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text(offset_entry({"0": 10}))
    assert replay_starts([tmp_path], "flights") is None
    assert replay_starts([tmp_path / "never-started"], "flights") == {}


def test_planned_ends_are_the_furthest_of_each_querys_latest_batch(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for checkpoint, ends in (
        (one, [{"0": 10, "1": 8}, {"0": 20, "1": 18}]),
        (two, [{"0": 25, "1": 9}]),
    ):
        (checkpoint / "offsets").mkdir(parents=True)
        for batch, per_partition in enumerate(ends):
            (checkpoint / "offsets" / str(batch)).write_text(offset_entry(per_partition))
    assert planned_ends([one, two], "flights") == {0: 25, 1: 18}
    # An entry Spark is writing (no source line yet) is not read: the next cycle will.
    (two / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n')
    assert planned_ends([one, two], "flights") == {0: 20, 1: 18}
    assert planned_ends([tmp_path / "never-started"], "flights") == {}
