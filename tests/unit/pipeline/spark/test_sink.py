"""The Python side of the JVM sink: its options as Spark gets them, its counts from the
micro-batches' progress, and the hold or error a query's failure stands for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import OversizedBatchError, QueryGroupHeld
from pipeline.spark.sink import OutputSink, SinkOptions, held_from, oversized_from

#: What the JVM's OutputQueueFullException and OversizedOutputException say
#: (KafkaDataWriterTest checks the Java side of these texts).
HELD = (
    "Job aborted due to stage failure: ... io.floodgate.spark.write.OutputQueueFullException: "
    "FG-QG-002 query group g query copy: output stream flights_copy is full: micro-batch 2 "
    "task 1 of 2 needs 125 offsets, its share of the free space is 96 (max_queue_size 700) "
    "after 3 sleep(s); nothing of it was written, the query group holds\n\tat ..."
)
OVERSIZED = (
    "io.floodgate.spark.write.OversizedOutputException: FG-QG-005 query group g query copy: "
    "micro-batch 0 task 1 of 2 writes 136 offsets to output stream flights_copy, more than "
    "its share of the whole queue (max_queue_size = 100 among 2 write tasks): raise ..."
)


def options(**kw: object) -> SinkOptions:
    given_ = {
        "bootstrap_servers": "localhost:9092",
        "topic": "out",
        "stream": "flights_copy",
        "schema_name": "flight",
        "schemas_json": "{}",
        "key_columns": ("carrier", "flight"),
        "transactional_id_prefix": "floodgate.g.copy.sink",
        "checkpoint": "/tmp/c/copy",
        **kw,
    }
    return SinkOptions(**given_)  # type: ignore[arg-type]


def test_options_are_spark_s_strings_and_what_is_unset_is_left_out() -> None:
    rendered = options(max_queue_size=700, sole_writer=False, client={"linger.ms": 5}).to_options()
    assert rendered["key"] == "carrier,flight"
    assert rendered["maxQueueSize"] == "700"
    assert rendered["soleWriter"] == "false"
    assert rendered["kafka.linger.ms"] == "5"
    assert rendered["checkpointLocation"] == "/tmp/c/copy"
    assert "schemaId" not in rendered and "consumerGroup" not in rendered
    assert "maxQueueSize" not in options().to_options()  # unbounded


def test_a_task_that_gave_up_holds_the_group_with_what_the_batch_needs() -> None:
    held = held_from(HELD, query_group="g")
    assert isinstance(held, QueryGroupHeld)
    assert (held.query, held.stream, held.batch_id) == ("copy", "flights_copy", 2)
    # The task's share is 1/2 of the free space: the batch fits once 2 x 125 are free.
    assert (held.required, held.free, held.max_queue_size, held.sleeps) == (250, 192, 700, 3)
    assert held_from("java.lang.IllegalStateException: something else", query_group="g") is None


def test_a_task_over_its_share_of_the_whole_queue_is_an_oversized_batch() -> None:
    error = oversized_from(OVERSIZED, query_group="g")
    assert isinstance(error, OversizedBatchError)
    assert (error.stream, error.batch_id, error.required, error.max_queue_size) == (
        "flights_copy",
        0,
        272,
        100,
    )
    assert "FG-QG-005" in str(error) and "max_tuples_per_trigger" in str(error)
    assert oversized_from(HELD, query_group="g") is None


@st.composite
def runs(draw: st.DrawFn) -> list[list[tuple[int, int, int]]]:
    """Query runs, each a list of micro-batches ``(written, skipped, sleeps)``."""
    batch = st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 5))
    return draw(st.lists(st.lists(batch, max_size=8), min_size=1, max_size=4))


@given(runs())
def test_counts_from_the_runs_totals_add_up_whatever_the_restarts(
    query_runs: list[list[tuple[int, int, int]]],
) -> None:
    """The JVM sink reports totals since its query's run started; a hold's release
    starts a new run from 0. The group's counts are every batch's, once."""
    sink = OutputSink(options())
    slept = 0
    for i, batches in enumerate(query_runs):
        if i:
            sink.new_run()
        totals = [0, 0, 0, 0]
        for written, skipped, sleeps in batches:
            totals = [totals[0] + written, totals[1] + skipped, totals[2] + sleeps, totals[3] + 1]
            metrics = dict(
                zip(
                    ("tuplesWritten", "tuplesSkipped", "sleeps", "batches"),
                    map(str, totals),
                    strict=True,
                )
            )
            slept += sink.record(metrics)
            sink.record(metrics)  # an idle trigger's progress repeats the totals
    every = [b for batches in query_runs for b in batches]
    assert sink.tuples_written == sum(b[0] for b in every)
    assert sink.tuples_skipped == sum(b[1] for b in every)
    assert sink.sleeps == slept == sum(b[2] for b in every)
    assert sink.batches_written == sum(1 for b in every if b[0])
    assert sink.batches_skipped == sum(1 for b in every if not b[0] and b[1])
