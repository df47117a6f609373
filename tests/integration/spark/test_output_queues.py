"""Bounded output stream queues: query groups sleep, retry, then hold on overflow.

A passthrough query (``SELECT * FROM flights``) makes output counts exact: every
input tuple becomes one output tuple. Micro-batches of 250 tuples take up to
254 offsets of an output queue (one transaction marker per partition), so an
output queue of 700 holds two batches and the third does not fit until the
reception consumer reads.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.client import StreamOutput, connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import FloodgateError, QueryGroupError
from pipeline.http.client import call
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryGroupState
from tests.integration.helpers import flights_raw_config, wait_until

OUTPUT_MAX = 700
BATCH = 250


def identity(t: dict[str, Any]) -> tuple[Any, ...]:
    """A flight's identity, the same for a tuple put (``time_hour`` in epoch ms) and one
    read back (decoded as an aware ``datetime``)."""
    hour = t["time_hour"]
    ms = hour if isinstance(hour, int) else int(hour.timestamp() * 1000)
    return (t["carrier"], t["flight"], t["origin"], ms, t["sched_dep_time"])


@pytest.fixture
def bounded_config(run_id: str, tmp_path: Path) -> Callable[..., QueryGroupConfig]:
    """The passthrough group with a small output queue and the overflow settings given."""

    def make(*, output_max: int = OUTPUT_MAX, **group: Any) -> QueryGroupConfig:
        raw = flights_raw_config(
            run_id, tmp_path / "checkpoints", max_tuples_per_trigger=BATCH, only_passthrough=True
        )
        raw["query_group"].update(
            {
                "sleep_on_over_store_ms": 200,
                "sleep_on_over_store_retry_count": 3,
                "auto_release": False,
                "control_dir": str(tmp_path / "run"),
                **group,
            }
        )
        raw["output_streams"]["flights_copy"]["max_queue_size"] = output_max
        return parse_query_group(raw, env={})

    return make


@dataclass
class QueueWatch:
    """Polls an output queue's length from the broker until stopped; keeps every reading."""

    output: StreamOutput
    lengths: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.lengths.append(self.output.probe.snapshot().length)


@pytest.fixture
def started(
    start_query_group: Callable[..., QueryGroup],
) -> Callable[[QueryGroupConfig], tuple[QueryGroup, str]]:
    """A started query group with its own metrics and its endpoint's URL (stopped, and
    the endpoint with it, when the test ends)."""

    def start(config: QueryGroupConfig) -> tuple[QueryGroup, str]:
        group = start_query_group(config, registry=CollectorRegistry())
        return group, group.serve(port=0)

    return start


def wait_for(predicate: Callable[[], bool], timeout_s: float = 90.0, what: str = "") -> None:
    """:func:`~tests.integration.helpers.wait_until`, an exception of ``predicate`` raised."""
    wait_until(predicate, timeout_s, what, tolerate=False, every_s=0.05)


def metric(group: QueryGroup, name: str, **labels: str) -> float:
    value = group.registry.get_sample_value(name, {"query_group": group.name, **labels})
    return 0.0 if value is None else value


def test_slow_reader_sleeps_then_holds_and_release_loses_and_duplicates_nothing(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    bounded_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
    started: Callable[[QueryGroupConfig], tuple[QueryGroup, str]],
) -> None:
    # Sleeps of 1 s: SLEEPING lasts 3 s, several of the monitor's passes and of this
    # test's reads of the status even on a loaded machine (at 200 ms, a pass slowed by
    # the broker's answers could end after the hold, and the status never said SLEEPING).
    config = bounded_config(sleep_on_over_store_ms=1_000)
    records = flights[:2_000]
    produce(config, records)
    out = config.output_streams["flights_copy"]
    ensure_topics(bootstrap, {out.topic: (config.output_settings("flights_copy").partitions, 1)})
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        output = connector.open_stream_output(config.name, "flights_copy")
        watch = QueueWatch(output)
        watcher = threading.Thread(target=watch.run, daemon=True)
        watcher.start()
        group, url = started(config)
        seen_states: set[str] = set()

        def state() -> str:
            current = str(call(config.name, "status", url=url)["state"])
            seen_states.add(current)
            return current

        # Nobody reads: two batches fit, the third sleeps 3 times, then the group holds.
        wait_for(lambda: state() == "HELD", what="HELD")
        status = call(config.name, "status", url=url)
        assert seen_states >= {"EXECUTING", "SLEEPING", "HELD"}
        assert status["held"]["stream"] == "flights_copy"
        assert status["held"]["sleeps"] == 3
        assert status["held"]["required"] > status["held"]["free_queue_size"]
        assert not any(q["active"] for q in status["queries"].values())
        # Tuples, in Floodgate's words, not Spark's rows.
        copy = status["queries"]["copy"]
        assert copy["input_tuples"] > 0
        assert "input_rows" not in copy and "processed_rows_per_second" not in copy
        assert metric(group, "floodgate_query_group_sleeps_total", stream="flights_copy") == 3
        assert metric(group, "floodgate_query_group_holds_total", stream="flights_copy") == 1
        # The driver's read of the queue at the start of each of the two batches written.
        assert (
            metric(
                group, "floodgate_output_stream_queue_check_seconds_count", stream="flights_copy"
            )
            == 2
        )
        assert metric(group, "floodgate_query_group_state", state="HELD") == 1
        assert metric(group, "floodgate_query_group_state", state="EXECUTING") == 0
        assert (
            metric(group, "floodgate_output_stream_queue_max_size", stream="flights_copy")
            == OUTPUT_MAX
        )
        written_before_hold = group.sinks()["copy"].tuples_written
        assert written_before_hold == 2 * BATCH
        # Lag in time: both queues hold tuples put or written before now.
        group.sample_queues()
        assert metric(group, "floodgate_input_stream_queue_length", stream="flights") > 0
        assert metric(group, "floodgate_input_stream_queue_lag_seconds", stream="flights") > 0
        # (offsets: the transaction markers of the two batches count too)
        assert metric(group, "floodgate_output_stream_queue_length", stream="flights_copy") > 0
        assert metric(group, "floodgate_output_stream_queue_lag_seconds", stream="flights_copy") > 0

        # Releasing while held is refused nowhere; releasing when not held is a 409.
        got: list[dict[str, Any]] = []
        while output.queue_length() > 0:
            got.extend(output.get(max_tuples=500, timeout_s=1.0))
        # The CLI finds the control token the group wrote beside its control file.
        control_dir = config.query_group.control_dir
        result = CliRunner().invoke(
            app,
            ["query-group", "release", config.name, "--url", url, "--control-dir", control_dir],
        )
        assert result.exit_code == 0, result.output
        with pytest.raises(FloodgateError, match="not HELD"):
            call(config.name, "release", url=url, control_dir=control_dir)

        # The reader now keeps up; should the group hold again, release it again.
        deadline = time.monotonic() + 180
        while len(got) < len(records) and time.monotonic() < deadline:
            got.extend(output.get(max_tuples=500, timeout_s=0.5))
            if group.state == QueryGroupState.HELD:
                group.hold.release()
        # Everything processed and read: both queues are empty, and so is their lag.
        # The reader steps over the last batch's transaction markers (they count in
        # the length) on a read after its last tuple; what such a read returns is kept.
        after: list[dict[str, Any]] = []

        def drained() -> bool:
            after.extend(output.get(max_tuples=500, timeout_s=0.2))
            group.sample_queues()
            return all(
                metric(group, f"floodgate_{kind}_stream_queue_length", stream=stream) == 0
                for kind, stream in (("input", "flights"), ("output", "flights_copy"))
            )

        wait_for(drained, what="input and output queues empty")
        watch.stop.set()
        watcher.join()

    assert Counter(identity(t) for t in got) == Counter(identity(r) for r in records)
    assert after == []  # no tuple twice
    for name, stream in (("input", "flights"), ("output", "flights_copy")):
        assert metric(group, f"floodgate_{name}_stream_queue_length", stream=stream) == 0
        assert metric(group, f"floodgate_{name}_stream_queue_lag_seconds", stream=stream) == 0
    # Exactly once in the topic itself, too: nothing of the held batch was written twice.
    assert len(read_all(bootstrap, config.output_streams["flights_copy"].topic)) == len(records)
    assert watch.lengths and max(watch.lengths) <= OUTPUT_MAX
    # A held batch is read again on release: input counts it twice, processed once.
    assert metric(group, "floodgate_query_input_tuples_total", query="copy") >= len(records)
    assert metric(group, "floodgate_input_stream_processed_tuples_total", stream="flights") == len(
        records
    )
    assert group.registry.get_sample_value(
        "floodgate_query_batch_duration_seconds_count", {"query_group": group.name, "query": "copy"}
    )


def test_retry_count_zero_holds_at_once_and_auto_release_resumes(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    bounded_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
    started: Callable[[QueryGroupConfig], tuple[QueryGroup, str]],
) -> None:
    config = bounded_config(sleep_on_over_store_retry_count=0, auto_release=True)
    records = flights[:1_000]
    produce(config, records)
    group, _url = started(config)
    wait_for(lambda: group.state == QueryGroupState.HELD, what="HELD")
    assert metric(group, "floodgate_query_group_sleeps_total", stream="flights_copy") == 0
    assert metric(group, "floodgate_query_group_holds_total", stream="flights_copy") == 1

    got: list[dict[str, Any]] = []
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        output = connector.open_stream_output(config.name, "flights_copy")
        deadline = time.monotonic() + 180
        while len(got) < len(records) and time.monotonic() < deadline:
            got.extend(output.get(max_tuples=500, timeout_s=0.5))
    # Nobody called release: the group resumed by itself each time the queue drained.
    assert Counter(identity(t) for t in got) == Counter(identity(r) for r in records)
    assert metric(group, "floodgate_query_group_holds_total", stream="flights_copy") >= 1
    wait_for(lambda: group.state == QueryGroupState.EXECUTING, what="EXECUTING")


def test_discard_skips_and_counts_exactly_the_input_queued_while_held(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    bounded_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
    started: Callable[[QueryGroupConfig], tuple[QueryGroup, str]],
) -> None:
    config = bounded_config(sleep_on_over_store_retry_count=0, on_hold_input="discard")
    first, while_held, after = flights[:1_000], flights[1_000:1_500], flights[1_500:1_700]
    produce(config, first)
    group, url = started(config)
    wait_for(lambda: group.state == QueryGroupState.HELD, what="HELD")
    written = group.sinks()["copy"].tuples_written
    assert written == 2 * BATCH
    produce(config, while_held)

    got: list[dict[str, Any]] = []
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        output = connector.open_stream_output(config.name, "flights_copy")
        while len(got) < written:
            got.extend(output.get(max_tuples=500, timeout_s=1.0))
        call(config.name, "release", url=url, control_dir=config.query_group.control_dir)
        skipped = len(first) + len(while_held) - written
        assert group.hold.discarded == {"flights": skipped}
        assert metric(group, "floodgate_query_group_discarded_tuples_total", stream="flights") == (
            skipped
        )
        assert call(config.name, "status", url=url)["discarded"] == {"flights": skipped}

        produce(config, after)
        deadline = time.monotonic() + 120
        while len(got) < written + len(after) and time.monotonic() < deadline:
            got.extend(output.get(max_tuples=500, timeout_s=0.5))
        assert output.get(max_tuples=500, timeout_s=1.0) == []
    # The output is what was written before the hold, then exactly what came after the
    # release: nothing of the held batch nor of what arrived while held.
    before_hold = Counter(identity(t) for t in got[:written])
    assert len(before_hold) == written
    assert set(before_hold) <= {identity(r) for r in first}
    assert Counter(identity(t) for t in got[written:]) == Counter(identity(r) for r in after)


def test_a_batch_larger_than_the_output_queue_is_a_clear_error(
    flights: list[dict[str, Any]],
    bounded_config: Callable[..., QueryGroupConfig],
    produce: Callable[..., None],
    started: Callable[[QueryGroupConfig], tuple[QueryGroup, str]],
) -> None:
    config = bounded_config(output_max=100)
    produce(config, flights[:500])
    group, _url = started(config)
    with pytest.raises(QueryGroupError) as caught:
        group.process_all_available()
    message = str(caught.value)
    assert "FG-QG-005" in message
    assert "max_queue_size = 100" in message
    assert "max_tuples_per_trigger" in message
    assert group.state == QueryGroupState.FAILED
    assert group.sinks()["copy"].tuples_written == 0


def test_an_open_transaction_holds_the_last_stable_offset_and_the_watch_times_it(
    bootstrap: str, run_id: str
) -> None:
    """What ``floodgate_output_stream_unstable_seconds`` is made of, on the real broker:
    records of an open transaction are past the last stable offset until it commits."""
    from confluent_kafka import Producer

    from pipeline.queues.age import StableOffsetWatch
    from pipeline.queues.probe import QueueProbe

    topic = f"unstable.{run_id}"
    ensure_topics(bootstrap, {topic: (1, 1)})
    probe = QueueProbe(
        bootstrap_servers=bootstrap, stream="out", topic=topic, groups=[], max_queue_size=100
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t.{run_id}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    watch = StableOffsetWatch()
    high = {p: q.high for p, q in probe.snapshot().partitions.items()}
    assert high == {0: 5}
    assert probe.last_stable_offsets() == {0: 0}  # read_committed readers wait at 0
    assert watch.observe(probe.last_stable_offsets(), high, now=0.0) == 0.0
    assert watch.observe(probe.last_stable_offsets(), high, now=90.0) == 90.0
    producer.commit_transaction(30)
    # The commit marker. Apache Kafka writes it after commit_transaction returns (the
    # coordinator answers EndTxn once PREPARE_COMMIT is in its log); noida-db before.
    deadline = time.monotonic() + 30
    while probe.last_stable_offsets() != {0: 6} and time.monotonic() < deadline:
        time.sleep(0.05)
    high = {p: q.high for p, q in probe.snapshot().partitions.items()}
    assert high == {0: 6}
    assert probe.last_stable_offsets() == {0: 6}
    assert watch.observe(probe.last_stable_offsets(), high, now=91.0) == 0.0
    probe.close()
