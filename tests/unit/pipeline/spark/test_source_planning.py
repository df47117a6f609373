"""Unit tests of the pure functions of :mod:`pipeline.spark.source`.

Importing :mod:`pipeline.spark.source` imports pyspark modules but starts no JVM; these
tests build no SparkSession and reach no broker.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, TimestampType

from pipeline.errors import SchemaError
from pipeline.offsets import batch_watermark, offsets_from_json, offsets_to_json, plan_batch_end
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.late_plan import interval_ms
from pipeline.spark.options import EventTimeWindow, SourceOptions
from pipeline.spark.partition_reader import KafkaInputPartition
from pipeline.spark.schema import METADATA_COLUMNS, spark_schema
from pipeline.spark.source import group_ranges

PROPERTY = settings(max_examples=200, deadline=None)

Offsets = dict[int, int]
Plan = tuple[Offsets, Offsets, int | None]


# --------------------------------------------------------------------------- strategies


@st.composite
def plans(draw: st.DrawFn, *, max_backlog: int = 10**6, max_limit: int = 10**5) -> Plan:
    """``(start, latest, max_rows)``: 1..12 partitions, latest >= start or missing."""
    partitions = draw(st.lists(st.integers(0, 63), min_size=1, max_size=12, unique=True))
    start: Offsets = {}
    latest: Offsets = {}
    for p in partitions:
        start[p] = draw(st.integers(0, 10**6))
        # Small backlogs as often as large ones, so both branches of the rule are reached.
        backlog = draw(
            st.none() | st.integers(0, min(20, max_backlog)) | st.integers(0, max_backlog)
        )
        if backlog is not None:
            latest[p] = start[p] + backlog
    max_rows = draw(st.none() | st.integers(1, min(20, max_limit)) | st.integers(1, max_limit))
    return start, latest, max_rows


def backlogs(start: Offsets, latest: Offsets) -> Offsets:
    return {p: latest.get(p, s) - s for p, s in start.items()}


def available_end(start: Offsets, latest: Offsets) -> Offsets:
    return {p: latest.get(p, s) for p, s in start.items()}


# --------------------------------------------------------------------------- plan_batch_end


@PROPERTY
@given(plans())
def test_end_stays_between_start_and_latest(plan: Plan) -> None:
    start, latest, max_rows = plan
    end = plan_batch_end(start, latest, max_rows)
    assert set(end) == set(start)
    for p in start:
        assert end[p] >= start[p]
        assert end[p] <= max(start[p], latest.get(p, start[p]))


@PROPERTY
@given(plans())
@example(({0: 0, 1: 5}, {0: 10, 1: 5}, None))
@example(({0: 0, 1: 5}, {0: 10}, 10))
def test_everything_is_taken_when_it_fits(plan: Plan) -> None:
    start, latest, max_rows = plan
    total = sum(backlogs(start, latest).values())
    end = plan_batch_end(start, latest, max_rows)
    if max_rows is None or total <= max_rows:
        assert end == available_end(start, latest)
    else:
        assert end != available_end(start, latest)


@PROPERTY
@given(plans())
@example(({0: 0, 1: 0, 2: 0}, {0: 100, 1: 100, 2: 1}, 2))
@example(({0: 0, 1: 0}, {0: 7, 1: 7}, 13))
def test_exactly_max_rows_are_taken_when_not_everything_fits(plan: Plan) -> None:
    start, latest, max_rows = plan
    total = sum(backlogs(start, latest).values())
    end = plan_batch_end(start, latest, max_rows)
    if max_rows is not None and total > max_rows:
        assert sum(end[p] - start[p] for p in start) == max_rows


@PROPERTY
@given(plans())
@example(({0: 0, 1: 0, 2: 0}, {0: 1000, 1: 1000, 2: 1}, 3))
def test_every_backlog_advances_when_the_limit_allows(plan: Plan) -> None:
    start, latest, max_rows = plan
    waiting = [p for p, b in backlogs(start, latest).items() if b > 0]
    end = plan_batch_end(start, latest, max_rows)
    if max_rows is None or max_rows >= len(waiting):
        for p in waiting:
            assert end[p] >= start[p] + 1


def _drain(start: Offsets, latest: Offsets, max_rows: int) -> list[Offsets]:
    """Plan batches with a fixed ``latest`` until everything is read; each round's end."""
    target = available_end(start, latest)
    total = sum(backlogs(start, latest).values())
    bound = math.ceil(total / max_rows)
    ends: list[Offsets] = []
    offsets = dict(start)
    while offsets != target:
        assert len(ends) < bound, f"not drained after {bound} rounds: {offsets} != {target}"
        end = plan_batch_end(offsets, latest, max_rows)
        remaining = sum(target[p] - offsets[p] for p in offsets)
        assert sum(end[p] - offsets[p] for p in offsets) == min(max_rows, remaining)
        ends.append(end)
        offsets = end
    return ends


@PROPERTY
@given(plans(max_backlog=200, max_limit=50).filter(lambda plan: plan[2] is not None))
def test_repeated_planning_reads_everything_in_bounded_rounds(plan: Plan) -> None:
    start, latest, max_rows = plan
    assert max_rows is not None
    total = sum(backlogs(start, latest).values())
    ends = _drain(start, latest, max_rows)
    assert len(ends) == math.ceil(total / max_rows)
    if ends:
        assert ends[-1] == available_end(start, latest)


@PROPERTY
@given(plans(max_backlog=200, max_limit=50).filter(lambda plan: plan[2] is not None))
@example(({0: 0, 1: 0, 2: 0}, {0: 100, 1: 100, 2: 1}, 2))
def test_no_partition_starves(plan: Plan) -> None:
    start, latest, max_rows = plan
    assert max_rows is not None
    waiting = {p for p, b in backlogs(start, latest).items() if b > 0}
    offsets = dict(start)
    for end in _drain(start, latest, max_rows)[: len(start)]:
        waiting -= {p for p in end if end[p] > offsets[p]}
        offsets = end
    assert waiting == set(), f"partitions {sorted(waiting)} did not advance in {len(start)} rounds"


def test_plan_batch_end_examples() -> None:
    # Proportional shares: backlogs 30 and 10 share 8 rows as 6 and 2.
    assert plan_batch_end({0: 0, 1: 100}, {0: 30, 1: 110}, 8) == {0: 6, 1: 102}
    # A partition missing from latest stays where it is.
    assert plan_batch_end({0: 5, 1: 9}, {0: 20}, 4) == {0: 9, 1: 9}
    # Nothing available: nothing taken.
    assert plan_batch_end({0: 5}, {0: 5}, 1) == {0: 5}


# --------------------------------------------------------------------------- offsets JSON


def test_offsets_to_json_shape() -> None:
    assert offsets_to_json("flights", {1: 7, 0: 5}) == {"flights": {"0": 5, "1": 7}}
    assert list(offsets_to_json("flights", {3: 1, 0: 2, 1: 0})["flights"]) == ["0", "1", "3"]


@PROPERTY
@given(st.dictionaries(st.integers(0, 10_000), st.integers(0, 2**62), max_size=20))
def test_offsets_json_round_trip(offsets: Offsets) -> None:
    # Spark stores the offset as a JSON string and hands it back parsed.
    value = json.loads(json.dumps(offsets_to_json("flights", offsets)))
    assert offsets_from_json("flights", value) == offsets


def test_offsets_of_another_topic_are_empty() -> None:
    value = offsets_to_json("other", {0: 5, 1: 6})
    assert offsets_from_json("flights", value) == {}


def test_offsets_of_wrong_shape_are_refused() -> None:
    with pytest.raises(ValueError, match="'flights'"):
        offsets_from_json("flights", {"flights": [1, 2]})


# --------------------------------------------------------------------------- spark_schema

FLIGHT_NULLABLE = {"dep_time", "dep_delay", "arr_time", "arr_delay", "tailnum", "air_time"}


@pytest.fixture(scope="module")
def repo() -> SchemaRepository:
    return SchemaRepository.load()


def test_flight_spark_schema_nullability(repo: SchemaRepository) -> None:
    flight = repo.get("flight")
    schema = spark_schema("flights", flight)
    own = [f for f in schema.fields if f.name in flight.field_names]
    assert [f.name for f in own] == flight.field_names
    assert {f.name for f in own if f.nullable} == FLIGHT_NULLABLE
    assert schema["dep_time"].dataType == IntegerType()
    assert schema["tailnum"].dataType == StringType()
    assert schema["carrier"].nullable is False


def test_flight_time_hour_is_timestamp(repo: SchemaRepository) -> None:
    schema = spark_schema("flights", repo.get("flight"))
    assert schema["time_hour"].dataType == TimestampType()
    assert schema["time_hour"].nullable is False


def test_metadata_columns_come_last(repo: SchemaRepository) -> None:
    flight = repo.get("flight")
    schema = spark_schema("flights", flight)
    assert METADATA_COLUMNS == ("event_time", "_key", "_partition", "_offset", "_timestamp")
    kafka = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert schema.names == [*flight.field_names, *METADATA_COLUMNS, *kafka]
    assert [f.dataType for f in schema.fields[-12:-7]] == [
        TimestampType(),
        BinaryType(),
        IntegerType(),
        LongType(),
        TimestampType(),
    ]


def _registered(fields: list[dict[str, Any]]) -> Any:
    return SchemaRepository({"s": {"type": "record", "name": "S", "fields": fields}}).get("s")


@pytest.mark.parametrize(
    "union", [["int", "string"], ["null", "int", "string"]], ids=["two", "null-and-two"]
)
def test_union_of_two_non_null_types_is_refused(union: list[str]) -> None:
    registered = _registered([{"name": "ok", "type": "int"}, {"name": "either", "type": union}])
    with pytest.raises(SchemaError) as info:
        spark_schema("s", registered)
    assert info.value.field == "either"
    assert "'either'" in str(info.value)
    assert info.value.stream == "s"


def test_null_may_come_second_in_a_union() -> None:
    schema = spark_schema("s", _registered([{"name": "n", "type": ["long", "null"]}]))
    assert schema["n"].dataType == LongType()
    assert schema["n"].nullable is True


def test_field_clashing_with_metadata_column_is_refused() -> None:
    with pytest.raises(SchemaError, match="_offset"):
        spark_schema("s", _registered([{"name": "_offset", "type": "long"}]))


# --------------------------------------------------------------------------- SourceOptions

REQUIRED = {
    "bootstrap.servers": "broker:9092",
    "topic": "flights",
    "schema": "flight",
    "schemas": "{}",
    "group.id": "floodgate.g.q",
}


@pytest.mark.parametrize("missing", sorted(set(REQUIRED) - {"group.id"}))
def test_missing_required_option_is_named(missing: str) -> None:
    options = {k: v for k, v in REQUIRED.items() if k != missing}
    with pytest.raises(ValueError, match=f"'{missing}'"):
        SourceOptions.parse(options)


def test_defaults() -> None:
    parsed = SourceOptions.parse(REQUIRED)
    assert parsed.stream == "flights"  # the topic, when no stream is given
    assert parsed.starting_offsets == "committed"
    assert parsed.timestamp_mode == "server"
    assert parsed.max_rows_per_trigger is None
    assert parsed.commit_offsets is True
    assert parsed.client == {}


def test_bad_starting_offsets_names_allowed_values() -> None:
    with pytest.raises(ValueError) as info:
        SourceOptions.parse({**REQUIRED, "startingOffsets": "middle"})
    text = str(info.value)
    assert "'middle'" in text
    for allowed in ("committed", "earliest", "latest"):
        assert allowed in text


def test_bad_timestamp_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="wallclock"):
        SourceOptions.parse({**REQUIRED, "timestampMode": "wallclock"})


def test_kafka_options_pass_through_to_client() -> None:
    parsed = SourceOptions.parse(
        {**REQUIRED, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}
    )
    assert parsed.client == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    consumer = parsed.consumer_config()
    assert consumer["security.protocol"] == "SASL_SSL"
    assert consumer["sasl.mechanism"] == "PLAIN"
    assert consumer["bootstrap.servers"] == "broker:9092"
    assert consumer["group.id"] == "floodgate.g.q"


def test_option_keys_are_case_insensitive() -> None:
    lower = {
        **REQUIRED,
        "stream": "Flights",
        "maxrowspertrigger": "1000",
        "startingoffsets": "earliest",
        "timestampmode": "data_source",
        "timestampfield": "time_hour",
        "commitoffsets": "false",
        "deadlettertopic": "flights.dead-letter",
        "query": "q",
        "kafka.security.protocol": "SSL",
    }
    mixed = {
        "BOOTSTRAP.SERVERS": "broker:9092",
        "Topic": "flights",
        "SCHEMA": "flight",
        "Schemas": "{}",
        "Group.Id": "floodgate.g.q",
        "STREAM": "Flights",
        "maxRowsPerTrigger": "1000",
        "startingOffsets": "earliest",
        "timestampMode": "data_source",
        "timestampField": "time_hour",
        "commitOffsets": "false",
        "deadLetterTopic": "flights.dead-letter",
        "Query": "q",
        "KAFKA.security.protocol": "SSL",
    }
    parsed = SourceOptions.parse(mixed)
    assert parsed == SourceOptions.parse(lower)
    # Values keep their case; only keys are folded.
    assert parsed.stream == "Flights"
    assert parsed.max_rows_per_trigger == 1000
    assert parsed.starting_offsets == "earliest"
    assert parsed.timestamp_mode == "data_source"
    assert parsed.commit_offsets is False
    assert parsed.dead_letter_topic == "flights.dead-letter"
    assert parsed.client == {"security.protocol": "SSL"}


def write_offset_log(directory: Path, batch: int, watermark_ms: int, *sources: str) -> None:
    """One entry of Spark's offset log: version, metadata, one line per source."""
    (directory / "offsets").mkdir(parents=True, exist_ok=True)
    metadata = json.dumps({"batchWatermarkMs": watermark_ms, "batchTimestampMs": 1})
    (directory / "offsets" / str(batch)).write_text("\n".join(["v1", metadata, *sources]))


def test_batch_watermark_is_the_previous_entrys_for_the_entry_whose_offsets_end_the_batch(
    tmp_path: Path,
) -> None:
    write_offset_log(tmp_path, 0, 0, '{"flights":{"0":10,"1":12}}')
    write_offset_log(tmp_path, 1, 5_000, '{"other":{"0":3}}', '{"flights":{"0":20,"1":12}}')
    write_offset_log(tmp_path, 2, 9_000, '{"flights":{"0":30,"1":31}}')
    write_offset_log(tmp_path, 3, 9_500, '{"arrivals":{"0":4},"flights":{"0":30,"1":31}}')

    def flights(first: int, second: int) -> dict[tuple[str, int], int]:
        return {("flights", 0): first, ("flights", 1): second}

    # Spark judges a batch's late tuples by the watermark of the batch before it.
    assert batch_watermark(str(tmp_path), flights(20, 12)) == (1, 0)
    assert batch_watermark(str(tmp_path), flights(10, 12)) == (0, 0)
    assert batch_watermark(str(tmp_path), flights(30, 31)) == (2, 5_000)
    # A source of several topics: its line holds every topic, matched whole.
    assert batch_watermark(str(tmp_path), {**flights(30, 31), ("arrivals", 0): 4}) == (3, 9_000)
    # Not logged (yet), or no checkpoint at all: no lateness check, never a guess.
    assert batch_watermark(str(tmp_path), flights(40, 31)) is None
    assert batch_watermark(str(tmp_path / "missing"), {("flights", 0): 10}) is None


HOUR = 3_600_000


def test_a_tuple_is_late_once_its_latest_window_has_ended_by_the_watermark() -> None:
    hourly = EventTimeWindow(HOUR, HOUR)
    assert hourly.last_end(10 * HOUR + 1) == 11 * HOUR
    assert hourly.last_end(10 * HOUR) == 11 * HOUR  # a window holds its start
    # Spark drops window.end <= watermark: the end itself is already late.
    assert hourly.is_late(10 * HOUR + 5, 11 * HOUR)
    assert not hourly.is_late(10 * HOUR + 5, 11 * HOUR - 1)
    assert not hourly.is_late(0, 0)  # watermark 0: the first batches drop nothing
    # Sliding: 1 hour every 15 minutes, offset 5 minutes; the latest window holding
    # 10:20 starts at 10:20 and ends 11:20.
    sliding = EventTimeWindow(HOUR, HOUR // 4, 5 * 60_000)
    assert sliding.last_end(10 * HOUR + 20 * 60_000) == 11 * HOUR + 20 * 60_000
    assert sliding.last_end(10 * HOUR + 19 * 60_000) == 11 * HOUR + 5 * 60_000
    assert EventTimeWindow.parse_option(sliding.option()) == sliding
    with pytest.raises(ValueError, match="lateWindow"):
        EventTimeWindow.parse_option("1h,1h,0")
    with pytest.raises(ValueError, match=">= 1"):
        EventTimeWindow.parse_option("0,1,0")


@PROPERTY
@given(
    duration=st.integers(1, 10 * HOUR),
    slide_part=st.integers(1, 10),
    start=st.integers(0, HOUR),
    event_time=st.integers(-(10**13), 10**13),
)
def test_the_latest_window_holds_the_tuple_and_is_the_last_that_does(
    duration: int, slide_part: int, start: int, event_time: int
) -> None:
    window = EventTimeWindow(duration, max(1, duration // slide_part), start)
    end = window.last_end(event_time)
    assert end - duration <= event_time < end
    # The next window on starts after the tuple.
    assert end - duration + window.slide_ms > event_time
    assert (end - duration - start) % window.slide_ms == 0


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1 hour", HOUR),
        ("2 hours", 2 * HOUR),
        ("interval 1 hour 30 minutes", HOUR + 30 * 60_000),
        ("  10 SECONDS ", 10_000),
        ("1 week", 7 * 24 * HOUR),
        ("500 milliseconds", 500),
        ("2000 microseconds", 2),
        ("1 month", None),  # not of fixed length: Spark refuses it in a window too
        ("1.5 hours", None),
        ("1 microsecond", None),  # under a millisecond
        ("hour", None),
        ("", None),
    ],
)
def test_interval_strings_are_read_as_spark_reads_them(text: str, ms: int | None) -> None:
    assert interval_ms(text) == ms


def test_a_driver_side_broker_read_is_tried_again_until_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What librdkafka answers for a moment after a broker restart
    (``_UNKNOWN_PARTITION``, seen failing ``latestOffset`` in the soak) is waited out."""
    from confluent_kafka import KafkaError, KafkaException
    from pyspark.sql.types import StructType

    from pipeline.spark.options import SourceOptions
    from pipeline.spark.source import KafkaStreamReader

    options = SourceOptions.parse(
        {
            "bootstrap.servers": "127.0.0.1:9",
            "topic": "t",
            "schema": "flight",
            "schemas": "{}",
            "group.id": "g",
        }
    )
    reader = KafkaStreamReader(options, StructType())
    answers = iter([KafkaError(KafkaError._UNKNOWN_PARTITION), KafkaError(KafkaError._TRANSPORT)])

    def read() -> dict[int, int]:
        error = next(answers, None)
        if error is not None:
            raise KafkaException(error)
        return {0: 5}

    with caplog.at_level("WARNING", logger="pipeline.spark.source"):
        assert reader._broker_read(read, "the watermarks of 't'") == {0: 5}
    retries = [r.getMessage() for r in caplog.records if "FG-SOURCE-003" in r.getMessage()]
    assert len(retries) == 2 and "the watermarks of 't'" in retries[0]


# --------------------------------------------------------------------------- tasks


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=12),
    max_tasks=st.one_of(st.none(), st.integers(min_value=1, max_value=16)),
)
def test_ranges_are_dealt_to_at_most_max_tasks_each_once(
    sizes: list[int], max_tasks: int | None
) -> None:
    """Every range goes to exactly one task, no task is empty, there are at most
    ``max_tasks`` of them, and each task reads its ranges in partition order."""
    ranges = [KafkaInputPartition("t", p, 100, 100 + n) for p, n in enumerate(sizes)]
    tasks = group_ranges(ranges, max_tasks)
    dealt = [r for t in tasks for r in t.ranges]
    assert sorted(dealt, key=lambda r: r.partition) == ranges
    assert all(t.ranges for t in tasks)
    assert len(tasks) == (len(ranges) if max_tasks is None else min(max_tasks, len(ranges)))
    for t in tasks:
        assert [r.partition for r in t.ranges] == sorted(r.partition for r in t.ranges)
    if max_tasks is not None and tasks:
        # LPT: the largest task is within one range of the most even deal.
        assert max(t.tuples for t in tasks) <= sum(sizes) / len(tasks) + max(sizes)


def test_four_equal_partitions_on_two_tasks_are_two_and_two() -> None:
    ranges = [KafkaInputPartition("t", p, 0, 1_000) for p in range(4)]
    tasks = group_ranges(ranges, 2)
    assert [[r.partition for r in t.ranges] for t in tasks] == [[0, 2], [1, 3]]


def test_max_tasks_must_be_a_whole_number_of_at_least_one() -> None:
    base = {
        "bootstrap.servers": "b:9092",
        "topic": "t",
        "schema": "flight",
        "schemas": "{}",
        "group.id": "g",
    }
    assert SourceOptions.parse({**base, "maxTasks": "2"}).max_tasks == 2
    assert SourceOptions.parse(base).max_tasks is None
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError, match=f"maxTasks = '{bad}'; allowed: a whole number >= 1"):
            SourceOptions.parse({**base, "maxTasks": bad})
