"""Planning over several topics (docs/reference/spark-kafka-options.md, "Several
topics"): offsets keyed by ``(topic, partition)``, one budget over every topic-
partition, and the driver side of the Python source (discovery, where new topic-
partitions start, gone ones, commits) against a consumer that answers from memory.
No broker, no SparkSession."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StructType

from pipeline.errors import DataLossError
from pipeline.offsets import (
    TopicOffsets,
    TopicPartitionKey,
    plan_batch_end,
    topic_offsets_from_json,
    topic_offsets_to_json,
)
from pipeline.spark.options import SourceOptions
from pipeline.spark.partition_reader import KafkaInputPartition
from pipeline.spark.source import KafkaStreamReader, group_ranges

PROPERTY = settings(max_examples=200, deadline=None)

TOPICS = ("arrivals", "flights", "flights.eu")


@st.composite
def topic_plans(draw: st.DrawFn) -> tuple[TopicOffsets, TopicOffsets, int]:
    """``(start, latest, max_rows)`` over 1..10 topic-partitions of up to three topics."""
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(TOPICS), st.integers(0, 7)),
            min_size=1,
            max_size=10,
            unique=True,
        )
    )
    start = {k: draw(st.integers(0, 10**4)) for k in keys}
    latest = {k: start[k] + draw(st.integers(0, 200)) for k in keys}
    return start, latest, draw(st.integers(1, 60))


@PROPERTY
@given(topic_plans())
def test_one_budget_over_every_topic_never_exceeds_the_limit_and_plans_each_tuple_once(
    plan: tuple[TopicOffsets, TopicOffsets, int],
) -> None:
    """Planned again and again from where the last micro-batch ended, every batch reads
    at most ``max_rows`` tuples over all the topics, every offset of ``[start,
    latest)`` of every topic-partition is planned in exactly one batch, and it takes
    no more batches than the backlog needs."""
    start, latest, max_rows = plan
    total = sum(latest[k] - start[k] for k in start)
    planned: dict[TopicPartitionKey, list[int]] = {k: [] for k in start}
    offsets = dict(start)
    batches = 0
    while offsets != latest:
        assert batches < math.ceil(total / max_rows), "not drained in the rounds it needs"
        end = plan_batch_end(offsets, latest, max_rows)
        assert sum(end[k] - offsets[k] for k in offsets) <= max_rows
        for k in offsets:
            assert offsets[k] <= end[k] <= latest[k]
            planned[k].extend(range(offsets[k], end[k]))
        offsets = end
        batches += 1
    for k in start:
        assert planned[k] == list(range(start[k], latest[k])), k


@PROPERTY
@given(
    st.dictionaries(st.integers(0, 15), st.tuples(st.integers(0, 10**4), st.integers(0, 300))),
    st.one_of(st.none(), st.integers(1, 100)),
)
def test_one_topic_plans_as_partition_numbers_do(
    ranges: dict[int, tuple[int, int]], max_rows: int | None
) -> None:
    """Keys ``(topic, p)`` of one topic order as ``p`` does: the plan is the same as
    the one the golden planning cases pin for partition numbers."""
    start = {p: s for p, (s, _) in ranges.items()}
    latest = {p: s + n for p, (s, n) in ranges.items()}
    by_number = plan_batch_end(start, latest, max_rows)
    by_key = plan_batch_end(
        {("t", p): o for p, o in start.items()}, {("t", p): o for p, o in latest.items()}, max_rows
    )
    assert by_key == {("t", p): o for p, o in by_number.items()}


def test_topic_partitions_are_served_in_topic_then_partition_order() -> None:
    """Fewer rows than waiting topic-partitions: round-robin over ``(topic,
    partition)`` order, starting at ``sum(start) // max_rows`` (here 0)."""
    start = {("b", 0): 0, ("a", 1): 0, ("a", 0): 0}
    latest = {k: 5 for k in start}
    assert plan_batch_end(start, latest, 2) == {("a", 0): 1, ("a", 1): 1, ("b", 0): 0}


def test_offsets_json_over_topics_is_sparks_shape_in_sparks_order() -> None:
    offsets = {("flights", 1): 7, ("arrivals", 0): 3, ("flights", 0): 5}
    value = topic_offsets_to_json(offsets)
    # Topics, then partitions, in order: the text Spark's JsonUtils writes.
    assert json.dumps(value, separators=(",", ":")) == (
        '{"arrivals":{"0":3},"flights":{"0":5,"1":7}}'
    )
    assert topic_offsets_from_json(json.loads(json.dumps(value))) == offsets
    assert topic_offsets_to_json({}) == {}
    with pytest.raises(ValueError, match="'flights'"):
        topic_offsets_from_json({"flights": [1]})


def test_ranges_of_several_topics_are_dealt_and_read_in_topic_partition_order() -> None:
    ranges = [
        KafkaInputPartition("arrivals", 0, 0, 10),
        KafkaInputPartition("arrivals", 1, 0, 10),
        KafkaInputPartition("flights", 0, 0, 10),
        KafkaInputPartition("flights", 1, 0, 10),
    ]
    tasks = group_ranges(ranges, 2)
    assert [[(r.topic, r.partition) for r in t.ranges] for t in tasks] == [
        [("arrivals", 0), ("flights", 0)],
        [("arrivals", 1), ("flights", 1)],
    ]
    assert len(group_ranges(ranges, None)) == 4


# --------------------------------------------------------------------------- the reader


@dataclass
class _Topic:
    partitions: dict[int, Any]
    error: Any = None


@dataclass
class _Metadata:
    topics: dict[str, _Topic]


@dataclass
class FakeCluster:
    """A consumer's answers from memory: topics' ``(low, high)`` per partition, the
    group's committed offsets, and the commits made."""

    watermarks: dict[str, dict[int, tuple[int, int]]]
    group: dict[TopicPartitionKey, int] = field(default_factory=dict)
    commits: list[list[tuple[str, int, int]]] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        names = [topic] if topic is not None else list(self.watermarks)
        return _Metadata(
            {n: _Topic(dict.fromkeys(self.watermarks[n])) for n in names if n in self.watermarks}
        )

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = -1) -> tuple[int, int]:
        return self.watermarks[tp.topic][tp.partition]

    def committed(self, tps: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.group.get((tp.topic, tp.partition), -1001))
            for tp in tps
        ]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])

    def close(self) -> None:
        pass


def reader(cluster: FakeCluster, **options: str) -> KafkaStreamReader:
    parsed = SourceOptions.parse({"kafka.bootstrap.servers": "memory:9092", **options})
    made = KafkaStreamReader(parsed, StructType())
    made._consumer = cluster  # type: ignore[assignment]
    return made


def test_a_pattern_is_found_in_names_but_never_reads_internal_topics_nor_the_dead_letters() -> None:
    cluster = FakeCluster(
        {
            "flights.eu": {0: (0, 5), 1: (0, 2)},
            "flights.us": {0: (3, 9)},
            "flights.eu.dead": {0: (0, 1)},  # the source's dead-letter topic
            "xflights.eu": {0: (0, 1)},  # matched in part: read, as Spark's findFirstIn
            "arrivals": {0: (0, 1)},  # not matched
            "__consumer_offsets": {0: (0, 1)},
        }
    )
    source = reader(
        cluster,
        subscribePattern=r"flights\.|__",
        deadLetterTopic="flights.eu.dead",
        schema="flight",
        schemas="{}",
    )
    assert source.discover() == [
        ("flights.eu", 0),
        ("flights.eu", 1),
        ("flights.us", 0),
        ("xflights.eu", 0),
    ]
    assert reader(cluster, subscribePattern="^flights$").discover() == []  # nothing matches


def test_a_topic_created_after_the_start_joins_at_its_earliest_offset() -> None:
    cluster = FakeCluster({"flights.eu": {0: (0, 5)}})
    source = reader(cluster, subscribePattern=r"flights\..*", startingOffsets="latest")
    start = source.initialOffset()
    assert start == {"flights.eu": {"0": 5}}
    cluster.watermarks["flights.us"] = {0: (2, 9), 1: (0, 4)}  # created, 2 deleted already
    cluster.watermarks["flights.eu"][0] = (0, 8)
    end = source.latestOffset(start, ReadAllAvailable())
    assert end == {"flights.eu": {"0": 8}, "flights.us": {"0": 9, "1": 4}}
    tasks = source.partitions(start, end)
    assert [(r.topic, r.partition, r.start, r.end) for t in tasks for r in t.ranges] == [
        ("flights.eu", 0, 5, 8),
        ("flights.us", 0, 2, 9),
        ("flights.us", 1, 0, 4),
    ]


def test_one_budget_spans_the_topics_subscribed() -> None:
    cluster = FakeCluster({"a": {0: (0, 100)}, "b": {0: (0, 300)}})
    source = reader(cluster, subscribe="a,b", startingOffsets="earliest", maxOffsetsPerTrigger="8")
    start = source.initialOffset()
    assert start == {"a": {"0": 0}, "b": {"0": 0}}
    end = source.latestOffset(start, source.getDefaultReadLimit())
    assert end == {"a": {"0": 2}, "b": {"0": 6}}  # 8 over both, in proportion
    assert isinstance(source.getDefaultReadLimit(), ReadMaxRows)


def test_starting_offsets_json_must_name_every_topic_partition_read() -> None:
    cluster = FakeCluster({"a": {0: (1, 10)}, "b": {0: (0, 4), 1: (0, 6)}})
    source = reader(
        cluster,
        subscribe="a,b",
        startingOffsets='{"a": {"0": -2}, "b": {"0": -1, "1": 3}}',
    )
    assert source.initialOffset() == {"a": {"0": 1}, "b": {"0": 4, "1": 3}}
    partial = reader(cluster, subscribe="a,b", startingOffsets='{"a": {"0": 5}}')
    with pytest.raises(ValueError, match=r"names partitions a\[0\], and the source reads a\[0\]"):
        partial.initialOffset()


def test_committed_offsets_are_read_and_written_per_topic_partition() -> None:
    cluster = FakeCluster({"a": {0: (2, 10)}, "b": {0: (0, 4), 1: (0, 6)}})
    cluster.group = {("a", 0): 7, ("b", 1): 5}
    source = reader(cluster, subscribe="a,b", **{"kafka.group.id": "g"})
    start = source.initialOffset()
    assert start == {"a": {"0": 7}, "b": {"0": 0, "1": 5}}  # none committed: earliest
    source.commit({"a": {"0": 10}, "b": {"0": 4, "1": 6}})
    assert cluster.commits == [[("a", 0, 10), ("b", 0, 4), ("b", 1, 6)]]


def test_assign_reads_the_partitions_named_of_each_topic() -> None:
    cluster = FakeCluster({"a": {0: (0, 3), 1: (0, 5)}, "b": {0: (0, 2), 1: (0, 1)}})
    source = reader(cluster, assign='{"b": [1], "a": [0, 1]}', startingOffsets="earliest")
    assert source.discover() == [("a", 0), ("a", 1), ("b", 1)]
    wrong = reader(cluster, assign='{"b": [4]}')
    with pytest.raises(ValueError, match=r"assign names partitions \[4\] of 'b'"):
        wrong.discover()


def test_a_deleted_topic_fails_the_query_or_is_dropped_without_fail_on_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = FakeCluster({"f.a": {0: (0, 5)}, "f.b": {0: (0, 3)}})
    start = {"f.a": {"0": 5}, "f.b": {"0": 3}}
    del cluster.watermarks["f.b"]
    strict = reader(cluster, subscribePattern="f\\..*")
    with pytest.raises(DataLossError, match=r"partitions f\.b\[0\] .* are gone"):
        strict.latestOffset(start, ReadAllAvailable())
    lenient = reader(cluster, subscribePattern="f\\..*", failOnDataLoss="false")
    with caplog.at_level("WARNING", logger="pipeline.spark.source"):
        assert lenient.latestOffset(start, ReadAllAvailable()) == {"f.a": {"0": 5}}
    assert any(
        "FG-SOURCE-004" in r.getMessage() and "f.b[0]" in r.getMessage() for r in caplog.records
    )


def test_discard_before_moves_each_topic_partition_on_its_own() -> None:
    cluster = FakeCluster({"a": {0: (0, 50)}, "b": {0: (0, 50)}})
    source = reader(cluster, subscribe="a,b", discardBefore='{"b": {"0": 30}, "other": {"0": 9}}')
    end = source.latestOffset({"a": {"0": 10}, "b": {"0": 10}}, ReadAllAvailable())
    assert end == {"a": {"0": 50}, "b": {"0": 50}}
    tasks = source.partitions({"a": {"0": 10}, "b": {"0": 10}}, end)
    assert [(r.topic, r.start) for t in tasks for r in t.ranges] == [("a", 10), ("b", 30)]


def _keys(offsets: Mapping[str, Mapping[str, int]]) -> set[TopicPartitionKey]:
    return set(topic_offsets_from_json(offsets))


def test_the_report_holds_every_topic_partitions_high_watermark() -> None:
    cluster = FakeCluster({"a": {0: (0, 5)}, "b": {0: (1, 2), 1: (0, 0)}})
    report = reader(cluster, subscribe="b,a").reportLatestOffset()
    assert report == {"a": {"0": 5}, "b": {"0": 2, "1": 0}}
    assert _keys(report) == {("a", 0), ("b", 0), ("b", 1)}
