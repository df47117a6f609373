"""Benchmark: Floodgate end to end against the limit of moving its tuples through the
broker: the transport limit and the codec-matched limit.

What is measured, per run, each on a broker of its own (:func:`broker`), over the same
flights, on the same topic (``flights``, its partition count and replication from
``conf/flights.toml``), with the same keys and value bytes:

* **(a) the transport limit**: two processes started together, as the pipeline runs
  its producer and its reader: a confluent-kafka ``Producer`` of values encoded before
  the clock starts (the single-object Avro bytes and ``carrier|flight|time_hour`` keys
  Floodgate's client sends, byte for byte) and a ``Consumer`` assigned every partition
  from the beginning that reads every value without decoding it. Timed from the
  producer's first ``produce`` to the consumer having read every tuple; the consumer
  reads all along, while the producer still writes.
* **(b) the codec-matched limit**: the same two processes with Floodgate's own codec in
  the timed path: the producer takes the flights as the Arrow table the demo's replay
  puts (:func:`pipeline.demo.flights.flight_table`) and encodes it ``--block`` tuples at
  a time with :class:`~pipeline.serde.block.BlockEncoder` (keys from the key columns,
  as ``StreamInput.put`` builds them from a table); the consumer decodes what it reads
  ``--block`` tuples at a time with ``block_decode.BlockDecoder`` (polars) into
  Arrow tables.
* **Floodgate**: the main job as ``make demo`` runs it and ``bench_flights.py``
  measures it (:func:`pipeline.demo.run.run_demo`: the replay process through the
  back-pressure client, the ``flights`` query group's two stateful queries, each
  reading the input, written transactionally and read by the reception), timed from
  the first tuple produced to every tuple processed and every output tuple read; its
  per-origin-per-hour output is checked against pandas first.

Both limits' clients are tuned as a user would tune them (:data:`PRODUCER_TUNING`,
:data:`CONSUMER_TUNING`: linger, batch size and count, fetch sizes; chosen by a sweep
recorded in ``bench/README.md``), with Floodgate's delivery guarantees on the producer
(idempotent, ``acks=all``, ``murmur2_random``). A limit run fails unless the consumer
read exactly the tuples and bytes produced, and for (b) decoded every block (a check
sum of the ``distance`` column).

The headline is the median over runs of Floodgate ÷ (b), with Floodgate ÷ (a) beside
it (the three of a run share the machine's state; their order rotates from run to
run). Target: Floodgate >= 0.5 of (b). One warm-up run of each is discarded
(Floodgate's over all flights, or ``--warmup N``: :data:`common.WARMUP_FLIGHTS`).

Where Floodgate's time goes, recorded in every run (the JSON's ``floodgate`` fields):
the replay's time and how much of it it waited on back-pressure; each query's
micro-batches and Spark's ``durationMs`` phases summed (a progress listener on the
session), the JVM sink's write inside ``addBatch``; and the CPU seconds of every
process role.

Run: ``.venv/bin/python bench/bench_limit.py [--repeat 5] [--limit N] [--engine E]``.
Results: a table, and JSON in ``bench/out/limit.json``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import common
import pyarrow as pa
import pyarrow.compute as pc
from block_decode import BlockDecoder
from common import console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipeline.serde.block import BlockEncoder
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

TARGET_RATIO = 0.5
#: Tuples a block: encoded, produced, consumed and decoded at a time by the limits.
#: Floodgate's replay puts 1 000 a time (``REPLAY_BATCH``) and its source decodes
#: 8 192 a time; a user tuning the limit would take larger blocks (less Python a tuple).
BLOCK = 10_000
READY_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 600.0
#: The producer as a user would tune it for throughput, on top of Floodgate's delivery
#: guarantees (the back-pressure client's idempotent ``acks=all`` ``murmur2_random``).
PRODUCER_TUNING: dict[str, Any] = {
    **common.THROUGHPUT_PRODUCER,
    "allow.auto.create.topics": False,
}
#: The consumer as a user would tune it for throughput: large fetches, a deep local queue.
CONSUMER_TUNING: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.max.bytes": 64 * 2**20,
    "max.partition.fetch.bytes": 8 * 2**20,
    "queued.max.messages.kbytes": 256 * 2**10,
    "fetch.wait.max.ms": 100,
}


# --------------------------------------------------------------------------- the data


def flights_codec() -> StreamCodec:
    """The flights stream's codec (``schemas/flight.avsc``)."""
    schemas = SchemaRepository.load()
    return StreamCodec("flights", schemas.get("flight"), schemas)


def flight_keys(table: pa.Table, fields: tuple[str, ...]) -> list[bytes]:
    """Kafka keys of ``table``'s rows (``n`` rows -> ``n`` keys), built from the key
    columns as ``StreamInput.put`` builds them from an Arrow table: each field's text,
    joined with ``|`` (e.g. ``b"UA|1545|1357034400000"``)."""
    texts = [pc.cast(table.column(f), pa.string()) for f in fields]
    joined = texts[0] if len(texts) == 1 else pc.binary_join_element_wise(*texts, "|")
    return pc.cast(joined, pa.binary()).to_pylist()


@dataclass(frozen=True)
class Flights:
    """The flights both limits move, written once as an Arrow IPC file.

    Attributes:
        path: the Arrow IPC file: one row per flight, the ``flight`` schema's columns
            (:func:`pipeline.demo.flights.flight_table`), in event-time order.
        n: flights (rows).
        key_fields: the flights stream's key fields, in order.
        value_bytes: the encoded values' bytes, summed (what the transport consumer
            must read).
        distance_sum: the ``distance`` column summed (what the codec-matched consumer
            must decode).
    """

    path: str
    n: int
    key_fields: tuple[str, ...]
    value_bytes: int
    distance_sum: int


def write_flights(directory: Path, limit: int | None) -> Flights:
    """The first ``limit`` flights (all: 336 776) as :class:`Flights` under ``directory``.

    Raises:
        AssertionError: the keys built from columns differ from the client's keys.
    """
    from pipeline.demo.flights import flight_table, flight_tuples, load_flights

    df = load_flights(limit)
    table = flight_table(df)
    key = common.flights_key()
    sample = list(flight_tuples(df.iloc[:1_000]))
    if flight_keys(table.slice(0, 1_000), key.fields) != [key(r) for r in sample]:
        raise AssertionError("keys built from the key columns differ from TupleKey's")
    values = encode_block(BlockEncoder(flights_codec()), table)
    path = directory / "flights.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return Flights(
        path=str(path),
        n=table.num_rows,
        key_fields=tuple(key.fields),
        value_bytes=sum(len(v) for v in values),
        distance_sum=int(pc.sum(table.column("distance")).as_py()),
    )


def read_flights(flights: Flights) -> pa.Table:
    """The Arrow table of :func:`write_flights` (memory-mapped)."""
    with pa.memory_map(flights.path) as source:
        return pa.ipc.open_file(source).read_all()


def encode_block(encoder: BlockEncoder, table: pa.Table) -> list[bytes]:
    """``table``'s rows as single-object Avro values (``n`` rows -> ``n`` values).

    Raises:
        RuntimeError: the block encoder cannot write the table (it never should: the
            flights' columns are all kinds it writes).
    """
    values = encoder.encode(table)
    if values is None:
        raise RuntimeError("the block encoder refused the flights table")
    return values


# --------------------------------------------------------------------------- the limits


@dataclass
class LimitRun:
    """One run of a limit's producer and consumer processes.

    Attributes:
        seconds: first ``produce`` to the consumer having read (and, for (b), decoded)
            every tuple.
        producer_s: first ``produce`` to the producer's ``flush`` returning (every
            tuple acknowledged).
        producer_cpu_s / consumer_cpu_s: CPU seconds (user + system, all threads) of
            each process from the start signal to its end.
        broker_cpu_s: the broker's CPU seconds over the run (``None`` if unknown).
        started_quiet: the machine was quiet before the run (:func:`common.wait_until_quiet`).
        loadavg: the 1-minute load average at the start.
    """

    seconds: float
    producer_s: float
    producer_cpu_s: float
    consumer_cpu_s: float
    broker_cpu_s: float | None
    started_quiet: bool
    loadavg: float


def _produce_all(producer: Any, topic: str, keys: list[bytes], values: list[bytes]) -> None:
    """``producer.produce`` every ``(key, value)``, waiting out a full local queue."""
    produce = producer.produce
    for key, value in zip(keys, values, strict=True):
        try:
            produce(topic, value, key)
        except BufferError:
            common.produce_waiting(producer, topic, key, value)
    producer.poll(0)


def limit_producer(
    codec_matched: bool,
    bootstrap: str,
    topic: str,
    flights: Flights,
    block: int,
    tuning: dict[str, Any],
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    """Process body: produce every flight once ``go`` is set.

    (a) (``codec_matched`` false): keys and values encoded before ``ready``, then only
    produced. (b): each ``block`` rows of the Arrow table encoded (values and keys)
    after ``go``, then produced. Reports ``("producer", started, ended, count, cpu_s)``
    on ``out`` (epoch seconds; ``count`` tuples acknowledged).
    """
    from confluent_kafka import Producer

    table = read_flights(flights)
    encoder = BlockEncoder(flights_codec())
    blocks = [table.slice(i, block) for i in range(0, table.num_rows, block)]
    encoded = (
        []
        if codec_matched
        else [(flight_keys(b, flights.key_fields), encode_block(encoder, b)) for b in blocks]
    )
    producer = Producer({"bootstrap.servers": bootstrap, **tuning})
    producer.list_topics(topic, timeout=10)
    ready.set()
    go.wait()
    cpu0 = time.process_time()
    started = time.time()
    if codec_matched:
        for b in blocks:
            _produce_all(
                producer, topic, flight_keys(b, flights.key_fields), encode_block(encoder, b)
            )
    else:
        for keys, values in encoded:
            _produce_all(producer, topic, keys, values)
    undelivered = producer.flush(RUN_TIMEOUT_S)
    out.put(("producer", started, time.time(), flights.n - undelivered, time.process_time() - cpu0))


def limit_consumer(
    codec_matched: bool,
    bootstrap: str,
    topic: str,
    partitions: int,
    flights: Flights,
    block: int,
    tuning: dict[str, Any],
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    """Process body: read ``flights.n`` tuples of ``topic`` from the beginning, up to
    ``block`` a ``consume``; (b) decodes each ``block`` values read into an Arrow table.

    Reports ``("consumer", None, ended, count, cpu_s, check)`` on ``out``: ``ended``
    in epoch seconds, ``count`` tuples read (a) or rows decoded (b), ``check`` the bytes
    read (a) or the ``distance`` column's sum decoded (b); ``count`` is short of
    ``flights.n`` after :data:`RUN_TIMEOUT_S`, and ``check`` is -1 after a block the
    decoder refused.
    """
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    decoder = BlockDecoder(flights_codec())
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-limit-{uuid.uuid4().hex[:8]}",
            **tuning,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    ready.set()
    go.wait()
    cpu0 = time.process_time()
    n, count, check = flights.n, 0, 0
    pending: list[bytes] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while count < n and check >= 0 and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=block, timeout=0.1):
            if message.error() is None:
                pending.append(message.value())
        if not codec_matched:
            count += len(pending)
            check += sum(map(len, pending))
            pending = []
            continue
        while len(pending) >= block or (pending and count + len(pending) >= n):
            decoded = decoder.decode(pending[:block])
            if decoded is None:
                check = -1
                break
            pending = pending[block:]
            count += decoded.num_rows
            check += int(pc.sum(decoded.column("distance")).as_py())
    ended = time.time()
    consumer.close()
    out.put(("consumer", None, ended, count, time.process_time() - cpu0, check))


def run_limit(
    bootstrap: str,
    broker_pid: int | None,
    flights: Flights,
    *,
    codec_matched: bool,
    block: int = BLOCK,
    producer_tuning: dict[str, Any] | None = None,
    consumer_tuning: dict[str, Any] | None = None,
) -> LimitRun:
    """One run of limit (a) or, with ``codec_matched``, (b): the topic created as the
    flights query group creates it, both processes started and ready, then the go.

    Raises:
        RuntimeError: a process was not ready in time, or the consumer did not read
            (or decode) exactly what was produced.
    """
    from pipeline.demo.run import DEFAULT_CONFIG, demo_config
    from pipeline.kafka.topics import ensure_topics

    config = demo_config(DEFAULT_CONFIG, run_id=None, checkpoint_dir="unused")
    topic = config.input_streams["flights"].topic
    partitions = config.topics()[topic][0]
    ensure_topics(bootstrap, {topic: config.topics()[topic]})
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    out = context.Queue()
    ready = [context.Event(), context.Event()]
    consumer_args = (codec_matched, bootstrap, topic, partitions, flights, block)
    producer_args = (codec_matched, bootstrap, topic, flights, block)
    processes = [
        context.Process(
            target=limit_consumer,
            args=(*consumer_args, consumer_tuning or CONSUMER_TUNING, ready[0], go, out),
        ),
        context.Process(
            target=limit_producer,
            args=(*producer_args, producer_tuning or PRODUCER_TUNING, ready[1], go, out),
        ),
    ]
    quiet = common.wait_until_quiet(broker_pid)
    loadavg = os.getloadavg()[0]
    for process in processes:
        process.start()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(event.wait(0.2) for event in ready):
            if any(p.exitcode is not None for p in processes) or time.monotonic() > deadline:
                raise RuntimeError("a limit process ended or was not ready in time")
        broker0 = common.process_cpu_s(broker_pid) if broker_pid else None
        go.set()
        results = {r[0]: r for r in (out.get(timeout=RUN_TIMEOUT_S) for _ in processes)}
        broker1 = common.process_cpu_s(broker_pid) if broker_pid else None
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    _, started, produced_at, produced, producer_cpu = results["producer"]
    _, _, read_at, read, consumer_cpu, check = results["consumer"]
    want = flights.distance_sum if codec_matched else flights.value_bytes
    if produced != flights.n or read != flights.n or check != want:
        raise RuntimeError(
            f"limit run wrong: {produced} produced, {read} read of {flights.n}; "
            f"check {check}, expected {want}"
        )
    return LimitRun(
        seconds=read_at - started,
        producer_s=produced_at - started,
        producer_cpu_s=producer_cpu,
        consumer_cpu_s=consumer_cpu,
        broker_cpu_s=None if broker0 is None or broker1 is None else broker1 - broker0,
        started_quiet=quiet.quiet,
        loadavg=loadavg,
    )


# --------------------------------------------------------------------------- Floodgate


#: Spark's ``durationMs`` phases of a micro-batch, summed per query.
SPARK_PHASES = (
    "triggerExecution",
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
)


class SparkPhases:
    """Every micro-batch's progress of the query groups run in this process: batch id,
    input rows, start and ``durationMs``.

    A query group runs its queries in a child session of the one given (its listeners
    and views apart from another group's), and a listener on the parent session's
    ``StreamingQueryManager`` hears none of them; so this wraps the groups' own
    progress callback (``QueryGroup._on_progress``), which every micro-batch's
    ``QueryProgressEvent`` reaches.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap ``QueryGroup._on_progress`` for the ``with`` block."""
        from pipeline.spark.query_group import QueryGroup

        original = QueryGroup._on_progress
        record = self._on_progress

        def on_progress(group: Any, query_id: str, progress: Any) -> None:
            record(query_id, progress)
            original(group, query_id, progress)

        QueryGroup._on_progress = on_progress  # type: ignore[method-assign]
        try:
            yield
        finally:
            QueryGroup._on_progress = original  # type: ignore[method-assign]

    def _on_progress(self, _query_id: str, progress: Any) -> None:
        started = datetime.fromisoformat(str(progress.timestamp).replace("Z", "+00:00"))
        with self._lock:
            self.batches.append(
                {
                    "query": str(progress.name),
                    "batch": int(progress.batchId),
                    "rows": int(progress.numInputRows),
                    "start": started.timestamp(),
                    "ms": {k: int(v) for k, v in dict(progress.durationMs or {}).items()},
                }
            )

    def take(self) -> list[dict[str, Any]]:
        """The batches so far; starts over."""
        with self._lock:
            batches, self.batches = self.batches, []
        return batches


class CpuByRole:
    """CPU seconds of every process of this benchmark's tree over a Floodgate run, by
    role (:func:`bench_memory.role_of`: driver, driver JVM, task workers, planner
    workers, source runners, producer; the broker by its PID).

    :meth:`sample` reads each process's CPU (``/proc/<pid>/stat``); a process's seconds
    are its last reading less its first one (0 for a process born after the first
    sample), so a process that ends loses at most one sampling interval.
    """

    def __init__(self, broker_pid: int | None) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._broker_pid = broker_pid
        self._roles: dict[int, str | None] = {}
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._sampled = False

    def _role(self, process: Any) -> str | None:
        from bench_memory import role_of

        if process.pid == self._broker_pid:
            return "broker"
        role = role_of(process, self._me.pid)
        return "driver (query group, reception)" if role == "driver" else role

    def sample(self) -> None:
        """Read the CPU of every process of the tree now."""
        processes = [self._me]
        with contextlib.suppress(self._psutil.Error):
            processes += self._me.children(recursive=True)
        for process in processes:
            pid = process.pid
            if self._roles.get(pid) is None:
                with contextlib.suppress(self._psutil.Error):
                    self._roles[pid] = self._role(process)
            if self._roles.get(pid) is None:
                continue
            cpu = common.process_cpu_s(pid)
            if cpu is None:
                continue
            self._first.setdefault(pid, cpu if not self._sampled else 0.0)
            self._last[pid] = cpu
        self._sampled = True

    def seconds(self) -> dict[str, float]:
        """``{role: CPU seconds}`` between the first and the last sample."""
        out: dict[str, float] = {}
        for pid, last in self._last.items():
            role = self._roles[pid] or "?"
            out[role] = round(out.get(role, 0.0) + last - self._first[pid], 2)
        return out


@dataclass
class FloodgateRun:
    """One run of the flights pipeline, and where its time went.

    Attributes:
        seconds: first tuple produced to every tuple processed and every output read.
        blocked_s: of which the replay waited for room in the input stream queue.
        replay_s: first tuple produced to the replay having put every flight (within
            the 0.2 s of the demo's progress reports).
        processed_s: to every query having processed every flight (same precision).
        received: output tuples the reception read, per output stream.
        batches: micro-batches with input, per query.
        spark_s: Spark's ``durationMs`` phases (:data:`SPARK_PHASES`) summed over the
            run's micro-batches, per query, seconds.
        last_batch_end_s: the end of each query's last micro-batch, seconds from the start.
        cpu_s: CPU seconds per process role over the run.
        started_quiet / loadavg: as :class:`LimitRun`'s.
    """

    seconds: float
    blocked_s: float
    replay_s: float
    processed_s: float
    received: dict[str, int]
    batches: dict[str, int]
    spark_s: dict[str, dict[str, float]]
    last_batch_end_s: dict[str, float]
    cpu_s: dict[str, float]
    started_quiet: bool
    loadavg: float


def run_floodgate(
    spark: Any,
    bootstrap: str,
    broker_pid: int | None,
    limit: int | None,
    expected: dict[Any, Any],
    *,
    phases: SparkPhases,
) -> FloodgateRun:
    """One run of the demo's pipeline over the first ``limit`` flights, its output
    checked against ``expected`` (:func:`common.expected_origin_hours`).

    Raises:
        RuntimeError: not every flight was processed.
        AssertionError: the per-origin-per-hour output differs from pandas.
    """
    from pipeline.demo.run import DemoStatus, run_demo

    quiet = common.wait_until_quiet(broker_pid)
    loadavg = os.getloadavg()[0]
    cpu = CpuByRole(broker_pid)
    samples: list[tuple[float, DemoStatus]] = []

    def on_progress(status: DemoStatus) -> None:
        cpu.sample()
        samples.append((time.time(), status))

    phases.take()
    result = run_demo(
        bootstrap_servers=bootstrap, limit=limit, spark=spark, on_progress=on_progress
    )
    n = sum(v[0] for v in expected.values())
    if not result.balanced or result.produced != n or not samples:
        raise RuntimeError(f"Floodgate: not every flight was processed: {result.processed}")
    common.check_origin_hours("Floodgate", result.origin_hours, expected)
    # The demo reports once more right after its clock stops: that sample ends the run.
    ended = samples[-1][0]
    started = ended - result.seconds

    def first(done: Callable[[DemoStatus], bool]) -> float:
        return next((t - started for t, s in samples if done(s)), result.seconds)

    batches = [b for b in phases.take() if b["rows"] > 0 and b["start"] >= started - 1.0]
    queries = sorted({b["query"] for b in batches})
    spark_s = {
        q: {
            p: sum(b["ms"].get(p, 0) for b in batches if b["query"] == q) / 1000
            for p in SPARK_PHASES
        }
        for q in queries
    }
    last_end = {
        q: max(
            b["start"] + b["ms"].get("triggerExecution", 0) / 1000
            for b in batches
            if b["query"] == q
        )
        - started
        for q in queries
    }
    return FloodgateRun(
        seconds=result.seconds,
        blocked_s=result.blocked_s,
        replay_s=first(lambda s: s.produced >= s.total),
        processed_s=first(lambda s: all(v >= n for v in s.processed.values())),
        received=result.received,
        batches={q: sum(1 for b in batches if b["query"] == q) for q in queries},
        spark_s=spark_s,
        last_batch_end_s=last_end,
        cpu_s=cpu.seconds(),
        started_quiet=quiet.quiet,
        loadavg=loadavg,
    )


# --------------------------------------------------------------------------- a run


@dataclass
class Run:
    """One run: both limits and Floodgate, each on a broker of its own."""

    n: int
    order: list[str]
    transport: LimitRun
    codec: LimitRun
    floodgate: FloodgateRun

    @property
    def transport_tuples_per_s(self) -> float:
        return self.n / self.transport.seconds

    @property
    def codec_tuples_per_s(self) -> float:
        return self.n / self.codec.seconds

    @property
    def floodgate_tuples_per_s(self) -> float:
        return self.n / self.floodgate.seconds

    @property
    def ratio(self) -> float:
        """Floodgate ÷ the codec-matched limit (b): the target's ratio."""
        return self.floodgate_tuples_per_s / self.codec_tuples_per_s

    @property
    def ratio_transport(self) -> float:
        """Floodgate ÷ the transport limit (a)."""
        return self.floodgate_tuples_per_s / self.transport_tuples_per_s


@contextlib.contextmanager
def broker(engine: str) -> Iterator[tuple[str, int | None]]:
    """A new broker of ``engine`` for one measurement (:func:`common.fresh_broker`
    says why); yields ``(bootstrap address, its PID)``."""
    from pipeline.brokers.local import local_broker

    started = local_broker(engine).start()
    try:
        yield started.bootstrap_servers, getattr(started, "pid", None)
    finally:
        started.stop()


MEASUREMENTS = ("transport", "codec", "floodgate")


def describe(kind: str) -> str:
    return {
        "transport": "(a) transport limit",
        "codec": "(b) codec-matched limit",
        "floodgate": "Floodgate",
    }[kind]


def rate_table(n: int, runs: list[Run]) -> Table:
    """Tuples/s of each measurement: median, min-max, every run (:func:`common.rates_table`)."""
    return common.rates_table(
        f"Floodgate end to end vs the limits ({n:,} flights)",
        {
            "(a) transport: pre-encoded producer + non-decoding consumer": [
                r.transport_tuples_per_s for r in runs
            ],
            "(b) codec-matched: block-encoding producer + block-decoding consumer": [
                r.codec_tuples_per_s for r in runs
            ],
            "Floodgate: replay + flights query group + reception": [
                r.floodgate_tuples_per_s for r in runs
            ],
        },
    )


def median_of(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0


def where_time_goes(runs: list[Run]) -> dict[str, Any]:
    """Medians over runs of where Floodgate's time went and of each side's CPU: seconds
    (wall or CPU) per run, CPU also per 100 000 tuples."""
    fg = [r.floodgate for r in runs]
    queries = sorted({q for f in fg for q in f.batches})
    roles = sorted({role for f in fg for role in f.cpu_s})
    per_100k = 100_000 / runs[0].n
    return {
        "wall_s": {
            "floodgate": median_of([f.seconds for f in fg]),
            "codec_matched_limit": median_of([r.codec.seconds for r in runs]),
            "transport_limit": median_of([r.transport.seconds for r in runs]),
            "floodgate_replay": median_of([f.replay_s for f in fg]),
            "floodgate_replay_blocked": median_of([f.blocked_s for f in fg]),
            "floodgate_processed": median_of([f.processed_s for f in fg]),
            "codec_matched_producer": median_of([r.codec.producer_s for r in runs]),
        },
        "per_query": {
            q: {
                "batches": median_of([f.batches.get(q, 0) for f in fg]),
                "last_batch_end_s": median_of([f.last_batch_end_s.get(q, 0.0) for f in fg]),
                "spark_s": {
                    p: median_of([f.spark_s.get(q, {}).get(p, 0.0) for f in fg])
                    for p in SPARK_PHASES
                },
            }
            for q in queries
        },
        "cpu_s": {
            "floodgate": {role: median_of([f.cpu_s.get(role, 0.0) for f in fg]) for role in roles},
            "floodgate_total": median_of([sum(f.cpu_s.values()) for f in fg]),
            "codec_matched_limit": {
                "producer": median_of([r.codec.producer_cpu_s for r in runs]),
                "consumer": median_of([r.codec.consumer_cpu_s for r in runs]),
                "broker": median_of([r.codec.broker_cpu_s or 0.0 for r in runs]),
            },
            "transport_limit": {
                "producer": median_of([r.transport.producer_cpu_s for r in runs]),
                "consumer": median_of([r.transport.consumer_cpu_s for r in runs]),
                "broker": median_of([r.transport.broker_cpu_s or 0.0 for r in runs]),
            },
        },
        "cpu_s_per_100k_tuples": {
            "floodgate": round(median_of([sum(f.cpu_s.values()) for f in fg]) * per_100k, 2),
            "codec_matched_limit": round(
                median_of(
                    [
                        r.codec.producer_cpu_s
                        + r.codec.consumer_cpu_s
                        + (r.codec.broker_cpu_s or 0)
                        for r in runs
                    ]
                )
                * per_100k,
                2,
            ),
            "transport_limit": round(
                median_of(
                    [
                        r.transport.producer_cpu_s
                        + r.transport.consumer_cpu_s
                        + (r.transport.broker_cpu_s or 0)
                        for r in runs
                    ]
                )
                * per_100k,
                2,
            ),
        },
    }


def gap_table(split: dict[str, Any]) -> Table:
    """A rich table of :func:`where_time_goes`: wall seconds, then each query's."""
    table = Table(title="where Floodgate's time goes (medians over runs, seconds)")
    table.add_column("what")
    table.add_column("s", justify="right")
    for name, value in split["wall_s"].items():
        table.add_row(name.replace("_", " "), f"{value:.2f}")
    for query, figures in split["per_query"].items():
        table.add_row(f"{query}: micro-batches", f"{figures['batches']:.0f}")
        table.add_row(f"{query}: last micro-batch ends", f"{figures['last_batch_end_s']:.2f}")
        for phase, value in figures["spark_s"].items():
            table.add_row(f"{query}: Σ {phase}", f"{value:.2f}")
    for role, value in split["cpu_s"]["floodgate"].items():
        table.add_row(f"CPU s: {role}", f"{value:.2f}")
    for side in ("codec_matched_limit", "transport_limit"):
        for role, value in split["cpu_s"][side].items():
            table.add_row(f"CPU s: {side.replace('_', ' ')}, {role}", f"{value:.2f}")
    for side, value in split["cpu_s_per_100k_tuples"].items():
        table.add_row(f"CPU s per 100 000 tuples: {side.replace('_', ' ')}", f"{value:.2f}")
    return table


def main() -> None:
    parser = common.argument_parser(__doc__, "limit.json", repeat=5)
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    parser.add_argument(
        "--block", type=int, default=BLOCK, help=f"tuples a block in the limits (default {BLOCK})"
    )
    args = parser.parse_args()
    common.log_warnings()
    expected = common.expected_origin_hours(args.limit)
    n = sum(v[0] for v in expected.values())
    spark = common.start_spark("floodgate-bench-limit")
    phases = SparkPhases()
    runs: list[Run] = []
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-limit-") as directory,
            phases.installed(),
            Progress(*columns, console=console) as progress,
        ):
            flights = write_flights(Path(directory), args.limit)
            if flights.n != n:
                raise RuntimeError(f"{flights.n} flights written, pandas counts {n}")
            warm_expected = (
                expected if args.warmup == args.limit else common.expected_origin_hours(args.warmup)
            )
            task = progress.add_task("warm-up", total=3 * (args.repeat + 1))

            def measure(kind: str, warm: bool = False) -> LimitRun | FloodgateRun:
                progress.update(task, description=f"{describe(kind)}{' (warm-up)' * warm}")
                with broker(args.engine) as (bootstrap, pid):
                    if kind == "floodgate":
                        return run_floodgate(
                            spark,
                            bootstrap,
                            pid,
                            args.warmup if warm else args.limit,
                            warm_expected if warm else expected,
                            phases=phases,
                        )
                    return run_limit(
                        bootstrap, pid, flights, codec_matched=kind == "codec", block=args.block
                    )

            for kind in MEASUREMENTS:
                warm = measure(kind, warm=True)
                console.log(f"warm-up {describe(kind)} (discarded): {warm.seconds:.1f} s")
                progress.advance(task)
            for r in range(args.repeat):
                order = [*MEASUREMENTS[r % 3 :], *MEASUREMENTS[: r % 3]]
                measured: dict[str, Any] = {}
                for kind in order:
                    measured[kind] = measure(kind)
                    progress.advance(task)
                run = Run(n=n, order=order, **measured)
                runs.append(run)
                console.log(
                    f"run {r + 1}/{args.repeat}: (a) {run.transport_tuples_per_s:,.0f}, "
                    f"(b) {run.codec_tuples_per_s:,.0f}, Floodgate "
                    f"{run.floodgate_tuples_per_s:,.0f} tuples/s "
                    f"({run.floodgate.seconds:.1f} s, replay blocked "
                    f"{run.floodgate.blocked_s:.1f} s): {run.ratio:.2f} of (b), "
                    f"{run.ratio_transport:.2f} of (a)"
                )
        java_versions = common.versions(spark)
    finally:
        spark.stop()

    ratio = statistics.median(r.ratio for r in runs)
    ratio_transport = statistics.median(r.ratio_transport for r in runs)
    split = where_time_goes(runs)
    console.print(rate_table(n, runs))
    console.print(
        "Floodgate / (b) per run: "
        + " ".join(f"{r.ratio:.2f}" for r in runs)
        + f"; median {ratio:.2f}. Floodgate / (a) per run: "
        + " ".join(f"{r.ratio_transport:.2f}" for r in runs)
        + f"; median {ratio_transport:.2f}"
    )
    console.print(gap_table(split))
    console.print(
        f"target Floodgate >= {TARGET_RATIO} of the codec-matched limit: "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'} ({ratio:.2f})"
    )
    common.write_results(
        args.json,
        "Floodgate end to end vs the transport and the codec-matched limits",
        engine=args.engine,
        versions=java_versions,
        n=n,
        value_bytes=flights.value_bytes,
        block=args.block,
        producer_tuning=PRODUCER_TUNING,
        consumer_tuning=CONSUMER_TUNING,
        loadavg_at_end=list(os.getloadavg()),
        runs=[
            asdict(r)
            | {
                "transport_tuples_per_s": r.transport_tuples_per_s,
                "codec_tuples_per_s": r.codec_tuples_per_s,
                "floodgate_tuples_per_s": r.floodgate_tuples_per_s,
                "ratio": r.ratio,
                "ratio_transport": r.ratio_transport,
            }
            for r in runs
        ],
        median_ratio=round(ratio, 3),
        median_ratio_transport=round(ratio_transport, 3),
        median_tuples_per_s={
            "transport": round(statistics.median(r.transport_tuples_per_s for r in runs)),
            "codec": round(statistics.median(r.codec_tuples_per_s for r in runs)),
            "floodgate": round(statistics.median(r.floodgate_tuples_per_s for r in runs)),
        },
        where_time_goes=split,
        target=TARGET_RATIO,
    )


if __name__ == "__main__":
    main()
