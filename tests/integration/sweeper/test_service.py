"""The sweeper against a real broker, a real SparkSession and real files (README,
"The sweeper service"): a query group consumes an input queue more slowly than a
producer fills it; the sweeper moves the backlog into BLOBs and truncates the broker;
the query group reads through broker and BLOB ranges and outputs every tuple once,
in the producer's order."""

from __future__ import annotations

import collections
import itertools
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import generate_latest
from sqlalchemy import create_engine, text

from pipeline.client import connect
from pipeline.config import QueryGroupConfig
from pipeline.demo.reception import read_all
from pipeline.errors import BlobIntegrityError, DataLossError, QueueFullError
from pipeline.kafka.topics import ensure_topics
from pipeline.queues.probe import NothingSwept, QueueProbe
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from pipeline.swept.blob import blob_name, read_blob, write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import RANGE_CONSUMER, read_partition
from pipeline.swept.tables import Blob
from sweeper.config import SweeperSettings
from sweeper.lock import LOCK_NAME
from sweeper.policy import SweepRange
from sweeper.service import PartitionOutcome, Sweeper
from tests.integration.postgres import fresh_database
from tests.integration.promtool import check_metrics
from tests.integration.sweeper.sweeping import sample, sequenced, swept_group

DEADLINE_S = 240.0


@pytest.fixture
def sweeper_for(bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., Sweeper]]:
    made: list[Sweeper] = []

    def make(
        config: QueryGroupConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_written: Callable[[str, int, SweepRange], None] | None = None,
        **settings: Any,
    ) -> Sweeper:
        stream = config.input_streams["flights"]
        ensure_topics(bootstrap, {stream.topic: (1, 1)})
        sweeper = Sweeper(
            SweeperSettings(
                catalog_url=config.query_group.sweep_catalog_url or "",
                blob_dir=str(tmp_path / "blobs"),
                **settings,
            ),
            [config],
            bootstrap_servers=bootstrap,
            clock=clock,
            on_written=on_written,
        )
        made.append(sweeper)
        return sweeper

    yield make
    for sweeper in made:
        sweeper.close()


def blob_files(blob_dir: Path) -> list[Path]:
    """The files of ``blob_dir`` but the sweepers' lock file."""
    return sorted(p for p in blob_dir.iterdir() if p.name != LOCK_NAME)


def test_a_producer_at_three_times_the_service_rate_is_swept_and_nothing_is_lost(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    sweeper_for: Callable[..., Sweeper],
    start_query_group: Callable[..., QueryGroup],
) -> None:
    config = swept_group(run_id, tmp_path, max_tuples_per_trigger=200, trigger_interval_ms=500)
    sweeper = sweeper_for(config, sweep_interval_s=1.0)
    records = sequenced(flights, 8_000)
    samples: list[tuple[int, int]] = []
    outcomes: list[PartitionOutcome] = []
    stop = threading.Event()

    def sweep_loop() -> None:
        while not stop.wait(1.0):
            cycle = sweeper.cycle()
            outcomes.extend(cycle)

    with start_query_group(config) as group:
        thread = threading.Thread(target=sweep_loop, daemon=True)
        thread.start()
        try:
            with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
                stream_input = conn.open_stream_input(config.name, "flights")
                stream_input.put(records[:200])
                stream_input.put_end()
                deadline = time.monotonic() + DEADLINE_S
                while group.stats()["copy"].input_tuples < 200:  # serviced: x > 0 from now
                    assert time.monotonic() < deadline, "the query group never started"
                    time.sleep(0.2)
                # About three times what the query group takes (200 per 0.5 s trigger).
                for i in range(200, len(records), 300):
                    stream_input.put(records[i : i + 300])
                    stream_input.put_end()
                    samples.append(sample(sweeper))
                    time.sleep(0.25)
            deadline = time.monotonic() + DEADLINE_S
            while group.stats()["copy"].input_tuples < len(records):
                assert time.monotonic() < deadline, (
                    f"processed {group.stats()['copy'].input_tuples}"
                )
                samples.append(sample(sweeper))
                time.sleep(0.5)
        finally:
            stop.set()
            thread.join(timeout=60)
    swept = [o.blob for o in outcomes if o.blob is not None]
    assert len(swept) >= 2, [o.decision for o in outcomes]
    # The chain: each later BLOB starts at or after the end of the one before.
    assert all(b.start_offset >= a.end_offset for a, b in itertools.pairwise(swept))
    truncations = [o.truncated_to for o in outcomes if o.truncated_to is not None]
    assert truncations, "the broker was never truncated"
    # The backlog grew; the part of it the broker holds stayed well below it.
    peak_backlog = max(backlog for backlog, _ in samples)
    peak_resident = max(resident for _, resident in samples)
    print(f"peak backlog {peak_backlog}, peak broker-resident {peak_resident}, {len(swept)} BLOBs")
    assert peak_resident < 0.75 * peak_backlog
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    output = read_all(bootstrap, config.output_streams["flights_copy"].topic)
    out = [codec.decode(m.value())["flight"] for m in output]
    assert out == list(range(len(records))), "not every tuple exactly once in order"


class Clock:
    """``time.monotonic`` for the sweeper, moved by the test: one interval per cycle."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fill(
    bootstrap: str, schemas: SchemaRepository, config: QueryGroupConfig, records: list[Any]
) -> None:
    """Put ``records`` into the group's input stream queue."""
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        stream_input = conn.open_stream_input(config.name, "flights")
        for i in range(0, len(records), 1_000):
            stream_input.put(records[i : i + 1_000])
        stream_input.put_end()


def commit(bootstrap: str, config: QueryGroupConfig, offset: int) -> None:
    """Commit ``offset`` for the query group's consumer (the queue's service)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": config.consumer_group("copy")})
    try:
        topic = config.input_streams["flights"].topic
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def cycle(sweeper: Sweeper, clock: Clock) -> PartitionOutcome:
    clock.now += sweeper.settings.sweep_interval_s
    (outcome,) = sweeper.cycle()
    return outcome


@pytest.fixture
def queue(run_id: str, tmp_path: Path) -> QueryGroupConfig:
    return swept_group(run_id, tmp_path)


@pytest.fixture
def backlog(flights: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """3 000 sequenced flights to fill a queue with."""
    return sequenced(flights, 3_000)


def test_a_stalled_queue_and_one_within_twice_its_service_rate_are_never_swept(
    bootstrap: str,
    schemas: SchemaRepository,
    queue: QueryGroupConfig,
    backlog: list[dict[str, Any]],
    sweeper_for: Callable[..., Sweeper],
) -> None:
    clock = Clock()
    sweeper = sweeper_for(queue, clock=clock)
    fill(bootstrap, schemas, queue, backlog)
    # Nobody consumes: back-pressure's business, never the sweeper's.
    assert [cycle(sweeper, clock).decision for _ in range(3)] == ["not-serviced"] * 3
    # Serviced at 1 000 an interval with 2 000 left: y = 2x, not growing past it.
    commit(bootstrap, queue, 1_000)
    outcome = cycle(sweeper, clock)
    assert (outcome.service_rate, outcome.unswept, outcome.decision) == (
        1_000,
        2_000,
        "not-growing",
    )
    commit(bootstrap, queue, 1_000)  # stalled again
    assert cycle(sweeper, clock).decision == "not-serviced"
    assert sweeper.catalog.all() == [] and blob_files(sweeper.blob_dir) == []
    # x is exported as a counter of the tuples committed, labelled as every family is
    # (its rate() in PromQL is the service rate), not as a per-second gauge by topic.
    serviced = sweeper.registry.get_sample_value(
        "floodgate_sweeper_serviced_tuples_total",
        {"query_group": queue.name, "stream": "flights", "partition": "0"},
    )
    assert serviced == 1_000


@pytest.mark.parametrize("reason", ["consumer-reached", "broker-truncated"])
def test_a_sweep_whose_range_is_reached_meanwhile_is_aborted_and_its_blob_deleted(
    bootstrap: str,
    schemas: SchemaRepository,
    queue: QueryGroupConfig,
    backlog: list[dict[str, Any]],
    sweeper_for: Callable[..., Sweeper],
    reason: str,
) -> None:
    def interfere(topic: str, partition: int, sweep: SweepRange) -> None:
        if reason == "consumer-reached":  # the consumer jumps into the range
            commit(bootstrap, queue, sweep.start + 1)
        else:  # the broker dropped the range's start first
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.delete_records(
                [TopicPartition(topic, partition, sweep.start + 1)]
            ).values():
                future.result()

    clock = Clock()
    sweeper = sweeper_for(queue, clock=clock, on_written=interfere)
    fill(bootstrap, schemas, queue, backlog)
    commit(bootstrap, queue, 0)
    cycle(sweeper, clock)
    commit(bootstrap, queue, 100)  # x = 100, y = 2 900 > 2x: sweep [205, 3000)
    outcome = cycle(sweeper, clock)
    assert outcome.decision == f"aborted:{reason}"
    assert sweeper.catalog.all() == [] and blob_files(sweeper.blob_dir) == []
    aborts = sweeper.registry.get_sample_value(
        "floodgate_sweeper_aborts_total",
        {"query_group": queue.name, "stream": "flights", "reason": reason},
    )
    assert aborts == 1


def test_a_full_blob_store_stops_sweeping_and_back_pressure_takes_over(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    flights: list[dict[str, Any]],
    sweeper_for: Callable[..., Sweeper],
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = swept_group(run_id, tmp_path, max_queue_size=3_000)
    clock = Clock()
    sweeper = sweeper_for(config, clock=clock, blob_store_max_bytes=1)
    fill(bootstrap, schemas, config, sequenced(flights, 3_000))
    commit(bootstrap, config, 0)
    cycle(sweeper, clock)
    commit(bootstrap, config, 100)
    first = cycle(sweeper, clock)
    assert first.decision == "swept" and first.blob is not None
    swept = first.blob.end_offset - first.blob.start_offset
    # Swept tuples stop counting: producers may put that many more.
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        stream_input = conn.open_stream_input(config.name, "flights")
        assert stream_input.free_queue_size() == 100 + swept
        stream_input.put(sequenced(flights, 100 + swept))
        stream_input.put_end()
        commit(bootstrap, config, 200)
        with caplog.at_level("WARNING", logger="sweeper.service"):
            full = cycle(sweeper, clock)
        assert full.decision == "store-full"
        assert "FG-SWP-003" in caplog.text
        # Not swept: the producer is back-pressured with a clean rejection.
        with pytest.raises(QueueFullError):
            stream_input.put(sequenced(flights, 300))
    # The consumer reads the BLOB's range: deleted once consumed, the store clears.
    commit(bootstrap, config, first.blob.end_offset)
    caplog.clear()
    with caplog.at_level("WARNING", logger="sweeper.service"):
        cleared = cycle(sweeper, clock)
    assert cleared.deleted == [first.blob.id]
    assert "FG-SWP-004" in caplog.text
    assert cleared.decision in ("swept", "not-growing", "nothing-to-sweep")


KILLED_SWEEPER = """
import os, signal, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
from pipeline.config import load_query_group
from sweeper.config import SweeperSettings
from sweeper.service import Sweeper

config = load_query_group(sys.argv[1], env={})
bootstrap, blob_dir = sys.argv[2], sys.argv[3]
now = [0.0]

def die(topic, partition, sweep):
    print("written", sweep.start, sweep.end, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # between the rename and the registration

settings = SweeperSettings(catalog_url=config.query_group.sweep_catalog_url, blob_dir=blob_dir)
sweeper = Sweeper(settings, [config], bootstrap_servers=bootstrap, clock=lambda: now[0],
                  on_written=die)
sweeper.cycle()
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": config.consumer_group("copy")})
topic = config.input_streams["flights"].topic
consumer.commit(offsets=[TopicPartition(topic, 0, 100)], asynchronous=False)
consumer.close()
now[0] += settings.sweep_interval_s
sweeper.cycle()
print("not killed", flush=True)
"""


def test_a_sweeper_killed_during_a_write_leaves_a_consistent_catalog_and_loses_nothing(
    bootstrap: str,
    schemas: SchemaRepository,
    queue: QueryGroupConfig,
    backlog: list[dict[str, Any]],
    tmp_path: Path,
    sweeper_for: Callable[..., Sweeper],
) -> None:
    ensure_topics(bootstrap, {queue.input_streams["flights"].topic: (1, 1)})
    fill(bootstrap, schemas, queue, backlog)
    commit(bootstrap, queue, 0)
    path = tmp_path / "group.toml"
    path.write_text(tomli_w.dumps(queue.model_dump(mode="json", by_alias=True, exclude_none=True)))
    blob_dir = tmp_path / "blobs"
    # Files the sweeper did not write (its recovery once deleted them).
    blob_dir.mkdir()
    notes = blob_dir / "operator-notes.txt"
    notes.write_text("do not delete\n")
    foreign = blob_dir / blob_name("another-stream", 0, 0, 100)
    foreign.write_bytes(b"another sweeper's BLOB")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_SWEEPER, str(path), bootstrap, str(blob_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert "written 205 3000" in killed.stdout
    orphans = [p for p in blob_files(blob_dir) if p not in (notes, foreign)]
    assert len(orphans) == 1  # a whole file, renamed into place, never registered

    clock = Clock()
    sweeper = sweeper_for(queue, clock=clock)
    assert sweeper.catalog.all() == []
    assert sweeper.recover() == [str(p) for p in orphans]
    assert blob_files(blob_dir) == sorted([notes, foreign])
    assert notes.read_text() == "do not delete\n" and sweeper.catalog.writes() == []
    # Sweeping goes on, and every offset is held by the broker or a whole BLOB.
    cycle(sweeper, clock)
    commit(bootstrap, queue, 200)
    outcome = cycle(sweeper, clock)
    assert outcome.decision == "swept" and outcome.blob is not None
    (blob,) = sweeper.catalog.all()
    offsets = [r.offset() for r in read_blob(blob.path, blob.topic, blob.partition)]
    assert offsets == list(range(blob.start_offset, blob.end_offset)) == list(range(305, 3_000))
    snapshot = sweeper.queues[0].probe.snapshot().partitions[0]
    assert (snapshot.log_start, snapshot.high) == (0, 3_000)


def test_a_swept_output_queue_is_read_back_through_the_reception_api_in_order(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    flights: list[dict[str, Any]],
    sweeper_for: Callable[..., Sweeper],
) -> None:
    """An output stream queue with a registered reception group is swept like an input
    queue; StreamOutput.get reads the swept tuples back from BLOBs (the broker no
    longer holds them) and then the rear range from the broker, every tuple once, in
    each partition's order, through transactional output (markers take offsets)."""
    config = swept_group(
        run_id, tmp_path, output={"swept": True, "partitions": 2, "reception_groups": [run_id]}
    )
    topic = config.output_streams["flights_copy"].topic
    ensure_topics(bootstrap, {topic: (2, 1)})
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{run_id}.tx"})
    producer.init_transactions(30)
    sent = 0

    def write(n: int) -> None:
        """``n`` sequenced tuples in transactions of 100, as a query group writes."""
        nonlocal sent
        for start in range(sent, sent + n, 100):
            producer.begin_transaction()
            for i, record in enumerate(sequenced(flights, start + 100)[start:], start):
                producer.produce(topic, codec.encode(record), partition=i % 2)
            producer.commit_transaction(30)
        sent += n

    clock = Clock()
    sweeper = sweeper_for(config, clock=clock)

    def sweep() -> list[PartitionOutcome]:
        clock.now += sweeper.settings.sweep_interval_s
        return [o for o in sweeper.cycle() if o.topic == topic]

    received: list[int] = []
    outcomes: list[PartitionOutcome] = []
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        reception = conn.open_stream_output(config.name, "flights_copy")

        def read(n: int) -> None:
            nonlocal reception
            deadline = time.monotonic() + DEADLINE_S
            goal = len(received) + n
            while len(received) < goal:
                assert time.monotonic() < deadline, f"received {len(received)} of {goal}"
                got = reception.get(max_tuples=min(50, goal - len(received)), timeout_s=0.5)
                received.extend(t["flight"] for t in got)

        unswept_probe = QueueProbe.for_output_stream(
            config, "flights_copy", bootstrap_servers=bootstrap, swept=NothingSwept()
        )
        write(3_000)
        read(50)
        outcomes += sweep()  # first look: no service rate yet
        behind_log_start = 0  # truncations that left the reception in the BLOBs
        while len(received) < sent:
            read(min(50, sent - len(received)))
            cycle_outcomes = sweep()
            outcomes += cycle_outcomes
            if any(o.blob for o in cycle_outcomes) and sent == 3_000:
                # Swept tuples stop counting in the output queue's length.
                held = sum(b.end_offset - b.start_offset for b in sweeper.catalog.all())
                assert unswept_probe.snapshot().length - reception.queue_length() == held
                write(600)  # a rear range, after the swept one
            for outcome in cycle_outcomes:
                if outcome.truncated_to is not None:
                    part = sweeper.queues[-1].probe.snapshot().partitions[outcome.partition]
                    assert part.log_start == outcome.truncated_to
                    if (part.committed or 0) < part.log_start:
                        behind_log_start += 1
                        # The reception restarts (a live one has prefetched what it
                        # reads next): its next offsets are only in BLOBs now.
                        reception.close()
                        reception = conn.open_stream_output(config.name, "flights_copy")
        assert behind_log_start, [o.decision for o in outcomes]
        extra = [t["flight"] for t in reception.get(max_tuples=10, timeout_s=1.0)]
        reception.close()
    received += extra  # more than was sent only if some came twice
    for p in (0, 1):
        mine = [i for i in received if i % 2 == p]
        twice = sorted(i for i, n in collections.Counter(mine).items() if n > 1)
        assert mine == sorted(set(mine)), f"partition {p}: out of order, or twice: {twice[:20]}"
    assert sorted(received) == list(range(sent)), "not every tuple exactly once"
    sweep()  # the reception is past every BLOB: they are deleted, counted as unswept
    assert sweeper.catalog.chain(topic, 0) == sweeper.catalog.chain(topic, 1) == []
    unswept = sweeper.registry.get_sample_value(
        "floodgate_sweeper_unswept_tuples_total",
        {"query_group": config.name, "stream": "flights_copy"},  # the stream, not its topic
    )
    assert unswept == sum(o.blob.tuples for o in outcomes if o.blob is not None)
    # Every BLOB's range was truncated from the broker before its BLOB was deleted.
    freed = sweeper.registry.get_sample_value(
        "floodgate_sweeper_broker_freed_bytes_total",
        {"query_group": config.name, "stream": "flights_copy"},
    )
    assert freed == sum(o.blob.bytes for o in outcomes if o.blob is not None)
    check_metrics(generate_latest(sweeper.registry).decode())  # what /metrics serves


def test_a_reception_whose_next_offset_neither_broker_nor_blob_holds_fails_loudly(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    flights: list[dict[str, Any]],
) -> None:
    config = swept_group(run_id, tmp_path, output={"swept": True, "reception_groups": [run_id]})
    topic = config.output_streams["flights_copy"].topic
    ensure_topics(bootstrap, {topic: (1, 1)})
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in sequenced(flights, 300):
        producer.produce(topic, codec.encode(record), partition=0)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": run_id})
    consumer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 100)]).values():
        future.result()  # [50, 100) gone, and no BLOB holds it
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        reception = conn.open_stream_output(config.name, "flights_copy")
        with pytest.raises(DataLossError) as caught:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                assert reception.get(max_tuples=10, timeout_s=0.5) == []
        reception.close()
    error = caught.value
    assert (error.topic, error.partition, error.start, error.available_from) == (
        topic,
        0,
        50,
        100,
    )
    assert "offset 50 is neither in the broker (log start 100) nor in any BLOB" in str(error)


def test_on_postgresql_one_of_two_sweepers_sweeps_and_the_other_takes_over(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    flights: list[dict[str, Any]],
    postgres: str,
    sweeper_for: Callable[..., Sweeper],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two sweepers on one PostgreSQL catalog: one leads and sweeps, the other only
    waits; when the leader's lock session dies, it stops sweeping and the other takes
    over. The catalog stays one ordered chain of whole BLOBs."""
    database = fresh_database(postgres)
    config = swept_group(run_id, tmp_path, sweep_catalog_url=database)
    settings = {"sweep_interval_s": 0.3, "leader_check_interval_s": 0.2}
    sweepers = [sweeper_for(config, **settings), sweeper_for(config, **settings)]
    committed = 0
    stop = threading.Event()

    def serve() -> None:  # the queue's consumer: 10 tuples every 0.3 s
        nonlocal committed
        while not stop.wait(0.3):
            committed += 10
            commit(bootstrap, config, committed)

    def sweeps(sweeper: Sweeper) -> float:
        value = sweeper.registry.get_sample_value(
            "floodgate_sweeper_sweeps_total", {"query_group": config.name, "stream": "flights"}
        )
        return value or 0.0

    def leaders() -> list[Sweeper]:
        return [s for s in sweepers if s.election.is_leader]

    def wait_for(condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            assert time.monotonic() < deadline, f"waited for {what}"
            time.sleep(0.1)

    fill(bootstrap, schemas, config, sequenced(flights, 3_000))
    commit(bootstrap, config, 0)
    server = threading.Thread(target=serve, daemon=True)
    with caplog.at_level("WARNING", logger="pipeline.state.leader"):
        for sweeper in sweepers:
            sweeper.start()
        server.start()
        try:
            wait_for(lambda: len(leaders()) == 1, "one leader")
            (first,) = leaders()
            (second,) = [s for s in sweepers if s is not first]
            wait_for(lambda: sweeps(first) >= 1, "the leader to sweep")
            assert sweeps(second) == 0 and not second.election.is_leader
            # The leader's lock session dies: it revokes itself, the other takes over.
            engine = create_engine(database)
            with engine.connect() as conn:
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = "
                        "'advisory' AND database = (SELECT oid FROM pg_database "
                        "WHERE datname = current_database())"
                    )
                )
            engine.dispose()
            wait_for(lambda: second.election.is_leader, "the other sweeper to take over")
            wait_for(lambda: not first.election.is_leader, "the old leader to stand down")
            swept_by_first = sweeps(first)
            fill(bootstrap, schemas, config, sequenced(flights, 3_000))  # a new backlog
            wait_for(lambda: sweeps(second) >= 1, "the new leader to sweep")
            assert sweeps(first) == swept_by_first, "the old leader swept after standing down"
        finally:
            stop.set()
            server.join(timeout=30)
            for sweeper in sweepers:
                sweeper.stop()
    assert "FG-LEAD-002" in caplog.text
    topic = config.input_streams["flights"].topic
    chain = first.catalog.chain(topic, 0)
    assert len(chain) >= 2
    assert all(b.start_offset >= a.end_offset for a, b in itertools.pairwise(chain))
    for blob in chain:  # whole files, every offset of the range (no markers here)
        offsets = [r.offset() for r in read_blob(blob.path, topic, 0)]
        assert offsets == list(range(blob.start_offset, blob.end_offset))


def _damaged_blob_of(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    flights: list[dict[str, Any]],
    config: QueryGroupConfig,
    blob_dir: Path,
) -> tuple[str, Blob]:
    """300 tuples in a swept output stream's partition 0, its reception group at 50,
    ``[50, 100)`` swept into a registered BLOB (as the sweeper writes and registers
    one) whose value of tuple 70 then has a flipped byte."""
    topic = config.output_streams["flights_copy"].topic
    ensure_topics(bootstrap, {topic: (1, 1)})
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in sequenced(flights, 300):
        producer.produce(topic, codec.encode(record), partition=0)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": run_id})
    consumer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    consumer.close()
    reader = Consumer(  # not the reception's group: this one commits nothing
        {
            **RANGE_CONSUMER,
            "bootstrap.servers": bootstrap,
            "group.id": f"{run_id}.sweep",
            "enable.auto.commit": False,
        }
    )
    blob_dir.mkdir(parents=True, exist_ok=True)
    path = blob_dir / blob_name(topic, 0, 50, 100)
    seal = write_sealed_blob(path, read_partition(reader, topic, 0, 50, 100))
    reader.close()
    catalog = SweepCatalog(config.query_group.sweep_catalog_url or "")
    blob = catalog.register(
        topic, 0, 50, 100, path=str(path), size=seal.bytes, tuples=50, now=0.0, seal=seal
    )
    catalog.close()
    data = bytearray(path.read_bytes())
    value_70 = codec.encode(sequenced(flights, 71)[70])
    data[data.index(value_70) + len(value_70) - 1] ^= 0x01
    path.write_bytes(bytes(data))
    return topic, blob


def test_a_reception_reading_a_damaged_blob_fails_and_commits_nothing_past_it(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    flights: list[dict[str, Any]],
) -> None:
    """A flipped byte in a swept value was once returned as an altered tuple. Now the
    reception's get raises a DataLossError naming the BLOB, the partition and the
    offsets, again on every later get, and the group's committed offset stays where
    the BLOB starts."""
    config = swept_group(run_id, tmp_path, output={"swept": True, "reception_groups": [run_id]})
    topic, blob = _damaged_blob_of(bootstrap, schemas, run_id, flights, config, tmp_path / "b")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 100)]).values():
        future.result()  # the broker's copy is gone: the BLOB is the only one
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        reception = conn.open_stream_output(config.name, "flights_copy")
        for _ in range(2):
            with pytest.raises(DataLossError) as caught:
                deadline = time.monotonic() + DEADLINE_S
                while time.monotonic() < deadline:
                    assert reception.get(max_tuples=10, timeout_s=0.5) == []
        reception.close()
    error = caught.value
    assert isinstance(error, BlobIntegrityError)
    assert (error.topic, error.partition, error.start, error.end) == (topic, 0, 50, 100)
    assert (error.blob_id, error.path, error.reason) == (blob.id, blob.path, "sha256")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": run_id})
    (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    consumer.close()
    assert committed.offset == 50


def test_the_sweeper_does_not_truncate_the_broker_past_a_damaged_blob(
    bootstrap: str,
    schemas: SchemaRepository,
    run_id: str,
    tmp_path: Path,
    flights: list[dict[str, Any]],
    sweeper_for: Callable[..., Sweeper],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reception reached the BLOB's start, so the broker would be truncated to its
    end; the BLOB fails its check, so the broker keeps the range (truncated only up
    to the BLOB's start), the sweeper logs FG-SWP-007 and counts it, and the reception
    reads the range from the broker, every tuple as produced."""
    config = swept_group(run_id, tmp_path, output={"swept": True, "reception_groups": [run_id]})
    topic, blob = _damaged_blob_of(bootstrap, schemas, run_id, flights, config, tmp_path / "blobs")
    sweeper = sweeper_for(config)
    with caplog.at_level(logging.ERROR, logger="sweeper.service"):
        (outcome,) = [o for o in sweeper.cycle() if o.topic == topic]
    assert outcome.truncated_to == 50
    part = sweeper.queues[-1].probe.snapshot().partitions[0]
    assert part.log_start == 50
    damaged = sweeper.registry.get_sample_value(
        "floodgate_sweeper_damaged_blobs_total",
        {"query_group": config.name, "stream": "flights_copy", "reason": "sha256"},
    )
    assert damaged == 1
    assert f"FG-SWP-007 data loss on topic '{topic}' partition 0, offsets [50, 100): BLOB " in (
        caplog.text
    )
    assert "the broker is not truncated past offset 50" in caplog.text
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        reception = conn.open_stream_output(config.name, "flights_copy")
        received: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < 250:
            assert time.monotonic() < deadline, f"received {len(received)} of 250"
            received.extend(t["flight"] for t in reception.get(max_tuples=100, timeout_s=0.5))
        reception.close()
    assert received == list(range(50, 300))
    assert Path(blob.path).exists()  # kept for inspection until the reception passes it
