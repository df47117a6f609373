"""The main job: replay the NYC 2013 flights through Kafka into the ``flights`` query group.

:func:`run_demo` (``floodgate demo``, ``make demo``; README.md "The demo"):

1. resolves a broker (``--bootstrap``, ``FLOODGATE_KAFKA_BOOTSTRAP``, Docker, or the
   embedded one) and creates the topics;
2. starts the ``flights`` query group (``conf/flights.toml``);
3. replays the flights in event-time order through a :class:`FlightReplayer`
   in a process of its own (:class:`ReplayProcess`; ``--rate`` tuples/s, default
   as fast as it goes), with progress bars for producing and processing;
4. reads both output streams all along through the data reception API
   (:class:`Reception`: :meth:`~pipeline.client.reception.StreamOutput.get`, latest tuple
   per key), which frees their bounded output stream queues, and reports the
   latest hour's figures as they arrive (a live table in the CLI);
5. waits until every query has processed all input and the reception has read
   every output tuple, and prints the busiest and most delayed origin-hours;
6. checks that tuples produced == tuples processed by every query (+ dead-lettered),
   and stops cleanly.

The replay writes through the back-pressure client
(:class:`~pipeline.client.input.StreamInput`, ``put(block=True)``): when the
``flights`` input stream queue (``max_queue_size`` in ``conf/flights.toml``) is
full, producing waits until the query group has processed enough. The output
stream queues are bounded too: should the reception fall behind, the query group
sleeps, then holds, and (``auto_release`` in ``conf/flights.toml``) resumes by
itself once the reception has caught up; the demo waits that out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.brokers.local import Broker, resolve_broker
from pipeline.client import StreamInput, StreamOutput, connect
from pipeline.config import QueryGroupConfig, apply_env_overrides, parse_query_group
from pipeline.demo.flights import FlightTuples, load_flights
from pipeline.errors import FloodgateError, QueryGroupHeld
from pipeline.metrics import stream_total
from pipeline.resources import shipped_config
from pipeline.serde import SchemaRepository, StreamCodec
from pipeline.spark.query_group import QueryGroup, QueryGroupState

log = logging.getLogger(__name__)

DEFAULT_CONFIG = shipped_config("flights")
#: Tuples per ``put`` of the replay.
REPLAY_BATCH = 1_000
#: Most tuples one ``StreamOutput.get`` of the reception returns.
RECEPTION_BATCH = 5_000
#: The longest the demo waits for a held query group to be released by ``auto_release``,
#: and for the reception to read the last output tuples.
SETTLE_TIMEOUT_S = 300.0
SLEEPS = "floodgate_query_group_sleeps_total"
HOLDS = "floodgate_query_group_holds_total"


@dataclass
class FlightReplayer:
    """Replays flights in event-time order through the back-pressure client.

    Each batch is ``put(block=True)``: when the input stream queue is full the
    replay waits until the query group has made room (README.md, "Writing tuples:
    the back-pressure client").

    Args:
        writer: the flights input stream of the query group.
        records: the flight tuples, in event-time order. :class:`FlightTuples` are
            put as Arrow table slices (encoded a column at a time), anything else as
            lists of dicts.
        rate: tuples per second; ``None`` for as fast as it goes.
        batch: tuples per ``put``.
        put_timeout_s: the longest one ``put`` may wait for room.
        stop: when set, the replay ends after the ``put`` in progress (then ``put_end``).
    """

    writer: StreamInput
    records: Sequence[dict[str, Any]]
    rate: float | None = None
    batch: int = REPLAY_BATCH
    put_timeout_s: float = 600.0
    produced: int = 0
    blocked_s: float = 0.0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Replay everything, then ``put_end``; errors are kept in :attr:`error`."""
        start = time.monotonic()
        try:
            for i in range(0, len(self.records), self.batch):
                if self.stop.is_set():
                    break
                chunk: Any = (
                    self.records.table(i, i + self.batch)
                    if isinstance(self.records, FlightTuples)
                    else self.records[i : i + self.batch]
                )
                if self.rate:
                    due = start + (i + len(chunk)) / self.rate
                    delay = due - time.monotonic()
                    if delay > 0 and self.stop.wait(delay):
                        break
                result = self.writer.put(chunk, block=True, timeout_s=self.put_timeout_s)
                self.produced += result.accepted
                self.blocked_s += result.blocked_s
            self.writer.put_end()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


#: The longest the replay process may take to load the flights and connect.
REPLAY_START_TIMEOUT_S = 120.0


class ReplayProcess:
    """The replay of a :class:`FlightReplayer` in a process of its own.

    A producer is a process of its own in any real deployment, and it must be here
    too: in the query group driver's process, the replay's Avro encoding (~10 µs a
    flight, all of it under the GIL) stalled every ``foreachBatch`` call, py4j round
    trip and Arrow collect of the micro-batches (measured on the 2-core machine:
    Spark's executors idle for most of each 1.3 s micro-batch while its Python
    function waited for the GIL; ``bench/README.md``, issue 9).

    The process (``python -c``, so a caller's script is not imported again as
    ``multiprocessing``'s spawn would) loads the flights and connects to the
    cluster, then waits for :meth:`go`, so neither is timed. It reports on its
    standard output, one line at a time: ``ready <n>``, ``progress <produced>
    <blocked s>`` about 10 times a second, then ``done`` or ``error <text>``.

    Args:
        bootstrap_servers: the cluster.
        config: the query group (the process opens its ``flights`` input stream).
        limit: replay only the first ``limit`` flights.
        rate: tuples per second; ``None`` as fast as back-pressure lets it.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        config: QueryGroupConfig,
        limit: int | None,
        rate: float | None,
    ) -> None:
        self._arguments = (bootstrap_servers, config, limit, rate)
        self._process: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self.total = 0
        self.produced = 0
        self.blocked_s = 0.0
        self.error: BaseException | None = None
        self._finished = False

    def start(self) -> int:
        """Start the process and wait until it is ready to replay.

        Returns:
            The number of flights it will replay.

        Raises:
            FloodgateError: it failed or was not ready within ``REPLAY_START_TIMEOUT_S``.
        """
        with tempfile.NamedTemporaryFile(prefix="floodgate-replay-", delete=False) as f:
            pickle.dump(self._arguments, f)
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from pipeline.demo import _replay_main; _replay_main({f.name!r})",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        threading.Thread(target=self._read, name="replay-reader", daemon=True).start()
        line = self._next_line(REPLAY_START_TIMEOUT_S)
        if not line.startswith("ready "):
            self.stop()
            raise FloodgateError(f"the replay process did not start: {line}")
        self.total = int(line.split()[1])
        return self.total

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for raw in self._process.stdout:
            self._lines.put(raw.decode(errors="replace").rstrip("\n"))
        self._lines.put(f"error the replay process ended (exit code {self._process.wait()})")

    def _next_line(self, timeout_s: float) -> str:
        try:
            return self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return f"error no word from the replay process in {timeout_s:.0f} s"

    def _send(self, command: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._process.stdin.write(command.encode() + b"\n")
            self._process.stdin.flush()

    def go(self) -> None:
        """Start replaying."""
        self._send("go")

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the replay to end (``put_end`` included);
        ``True`` once it has. A failure is then in :attr:`error`; :attr:`produced`
        and :attr:`blocked_s` follow the replay meanwhile."""
        deadline = time.monotonic() + timeout_s
        while not self._finished:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            kind, _, rest = line.partition(" ")
            if kind == "progress":
                produced, blocked = rest.split()
                self.produced, self.blocked_s = int(produced), float(blocked)
            elif kind == "done":
                self._finished = True
            elif kind == "error":
                self.error = FloodgateError(f"the replay process failed: {rest}")
                self._finished = True
        return True

    def stop(self) -> None:
        """End the replay after the ``put`` in progress and wait for the process."""
        if self._process is None:
            return
        self._send("stop")
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


def _replay_main(arguments_path: str) -> None:
    """The body of a :class:`ReplayProcess` (its standard output is the protocol)."""
    out = sys.stdout

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    try:
        with open(arguments_path, "rb") as f:
            bootstrap_servers, config, limit, rate = pickle.load(f)
        os.unlink(arguments_path)
        records = FlightTuples(load_flights(limit))
        schemas = SchemaRepository.load(config.schema_dir)
        with connect(
            bootstrap_servers=bootstrap_servers, config=config, schemas=schemas
        ) as connector:
            writer = connector.open_stream_input(config.name, "flights")
            say(f"ready {len(records)}")
            replayer = FlightReplayer(writer, records, rate=rate)

            def listen() -> None:
                for raw in sys.stdin:
                    if raw.strip() == "go":
                        go.set()
                    elif raw.strip() == "stop":
                        break
                replayer.stop.set()  # "stop", or the parent went away
                go.set()

            go = threading.Event()
            threading.Thread(target=listen, name="replay-commands", daemon=True).start()
            go.wait()
            thread = threading.Thread(target=replayer.run, name="flight-replay", daemon=True)
            thread.start()
            while not replayer.done.wait(0.1):
                say(f"progress {replayer.produced} {replayer.blocked_s:.3f}")
            say(f"progress {replayer.produced} {replayer.blocked_s:.3f}")
            if replayer.error is not None:
                raise replayer.error
        say("done")
    except BaseException as exc:  # reported to the parent, which raises it
        say(f"error {type(exc).__name__}: {exc}")


@dataclass
class OutputTable:
    """The latest tuple per key of one output stream, as a reception application sees it.

    Output streams written in ``update`` mode re-emit a group's row whenever it
    changes; like a compacted topic, the latest tuple per key is the current value.

    Attributes:
        stream: the output stream's name.
        key: the stream's key columns (empty: every tuple is kept).
        rows: ``{key values: latest tuple}``.
        received: tuples read, all of them (re-emits included).
    """

    stream: str
    key: tuple[str, ...]
    rows: dict[Any, dict[str, Any]] = field(default_factory=dict)
    received: int = 0

    def add(self, tuples: list[dict[str, Any]]) -> None:
        """Take tuples in the order read: a later tuple of a key replaces the earlier."""
        for t in tuples:
            self.rows[tuple(t[k] for k in self.key) if self.key else self.received] = t
            self.received += 1


class Reception:
    """The demo's data reception application: reads output streams as they are written.

    A thread loops over the streams, :meth:`StreamOutput.get` on each (which commits
    what it returned, freeing output stream queue space), and keeps an
    :class:`OutputTable` per stream. Read the tables through :meth:`tables` (a copy,
    taken under the lock) from any thread.

    Args:
        outputs: ``{stream: StreamOutput}`` opened by the demo's connector.
        keys: ``{stream: key columns}``.
        wait_s: how long one ``get`` waits for tuples.
        idle_s: when a round read nothing, how often the paused reader asks the broker
            whether its streams have new tuples (:meth:`StreamOutput.rest`).
        on_received: called from the reading thread with ``(stream, tuples)`` as soon
            as a ``get`` returned them (the latency benchmark times them).
    """

    def __init__(
        self,
        outputs: Mapping[str, StreamOutput],
        keys: Mapping[str, Iterable[str]],
        *,
        wait_s: float = 0.1,
        idle_s: float = 0.25,
        on_received: Callable[[str, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.outputs = dict(outputs)
        self.on_received = on_received
        self.idle_s = idle_s
        self._tables = {s: OutputTable(s, tuple(keys[s])) for s in self.outputs}
        self.wait_s = wait_s
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-reception", daemon=True)

    def start(self) -> Reception:
        """Start reading in a thread of its own."""
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                read = 0
                for stream, output in self.outputs.items():
                    tuples = output.get(max_tuples=RECEPTION_BATCH, timeout_s=self.wait_s)
                    if tuples:
                        read += len(tuples)
                        if self.on_received is not None:
                            self.on_received(stream, tuples)
                        with self._lock:
                            self._tables[stream].add(tuples)
                if not read:
                    # Nothing new: rest until there is, rather than have librdkafka
                    # poll the log end all along.
                    StreamOutput.rest(self.outputs.values(), stop=self._stop, poll_s=self.idle_s)
        except BaseException as exc:
            self.error = exc
            log.exception("demo reception failed")

    def tables(self) -> dict[str, OutputTable]:
        """A copy of every stream's table now."""
        with self._lock:
            return {
                s: OutputTable(t.stream, t.key, dict(t.rows), t.received)
                for s, t in self._tables.items()
            }

    def queue_lengths(self) -> dict[str, int]:
        """Each output stream queue's length, read from the broker now (tuples)."""
        return {s: o.queue_length() for s, o in self.outputs.items()}

    def wait_until_read(self, timeout_s: float) -> None:
        """Block until every output stream queue is empty (everything written was read).

        Raises:
            FloodgateError: the reception failed, or did not catch up within ``timeout_s``
                (the message gives each queue's length).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if self.error is not None:
                raise FloodgateError(f"the demo's reception failed: {self.error}") from self.error
            lengths = self.queue_lengths()
            if not any(lengths.values()):
                return
            if time.monotonic() > deadline:
                raise FloodgateError(
                    f"the reception did not read every output tuple in {timeout_s:.0f} s; "
                    f"output stream queue lengths: {lengths}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop reading (the streams stay open; their connector closes them)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


def latest_hour(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The origin-hour tuples of the latest ``hour_start`` among ``rows``, by origin."""
    rows = list(rows)
    if not rows:
        return []
    last = max(r["hour_start"] for r in rows)
    return sorted((r for r in rows if r["hour_start"] == last), key=lambda r: r["origin"])


def read_table(
    bootstrap_servers: str,
    topic: str,
    codec: StreamCodec,
    *,
    key_columns: Iterable[str] = (),
    timeout_s: float = 60.0,
    client: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Read a whole output topic (``read_committed``) and keep the latest tuple per key.

    Output streams written in ``update`` mode re-emit a group's row when it changes;
    like a compacted topic, the latest record per key is the current value.

    Returns:
        The decoded tuples, one per key (every tuple when ``key_columns`` is empty).
    """
    records = read_all(bootstrap_servers, topic, timeout_s=timeout_s, client=client)
    latest: dict[Any, dict[str, Any]] = {}
    keyed = bool(list(key_columns))
    for i, message in enumerate(records):
        latest[message.key() if keyed else i] = codec.decode(message.value())
    return list(latest.values())


def read_all(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 60.0,
    client: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Every committed record of a topic, partition by partition, up to its end now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"floodgate-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            **(client or {}),
            "allow.auto.create.topics": False,  # issue 26: never a broker-default topic
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in partitions
        }
        pending = {p for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if (
                        error.code() == KafkaError._PARTITION_EOF
                        and (message.offset() or 0) >= ends[message.partition()][1]
                    ):
                        pending.discard(message.partition())
                    continue
                out.append(message)
                if (message.offset() or 0) + 1 >= ends[message.partition()][1]:
                    pending.discard(message.partition())
        if pending:
            raise TimeoutError(
                f"reading {topic!r}: partitions {sorted(pending)} "
                f"not read to the end in {timeout_s} s"
            )
        return out
    finally:
        consumer.close()


@dataclass
class DemoResult:
    """Figures of a demo run.

    Attributes:
        produced: flights handed to Kafka.
        processed: per query, tuples its source read (``numInputRows``, all batches).
        dead_lettered: per query, tuples sent to the dead-letter topic.
        dropped_by_watermark: per query, rows the watermark dropped as late.
        origin_hours / carrier_days: the output tables as the reception read them
            (latest tuple per key).
        seconds: wall time from the first tuple produced to all processed and read.
        blocked_s: seconds the replay waited for room in the input stream queue.
        max_queue_size: the flights input stream queue's bound.
        bootstrap_servers / broker_kind: where it ran.
        received: per output stream, tuples the reception read (re-emits included).
        output_max_queue_size: per output stream, its queue's bound (tuples).
        output_queue_peak: per output stream, the longest queue read from the broker
            (about once a second, and transaction markers included; tuples).
        sleeps / holds: times the query group slept on, and was held by, a full
            output stream queue.
        metrics_url: where the query group served its metrics and control endpoint.
        output_topics: per output stream, its topic in this run.
        input_topic: the flights input stream's topic in this run.
    """

    produced: int
    processed: dict[str, int]
    dead_lettered: dict[str, int]
    dropped_by_watermark: dict[str, int]
    origin_hours: list[dict[str, Any]]
    carrier_days: list[dict[str, Any]]
    seconds: float
    bootstrap_servers: str
    broker_kind: str
    blocked_s: float = 0.0
    max_queue_size: int = 0
    received: dict[str, int] = field(default_factory=dict)
    output_max_queue_size: dict[str, int] = field(default_factory=dict)
    output_queue_peak: dict[str, int] = field(default_factory=dict)
    sleeps: int = 0
    holds: int = 0
    metrics_url: str = ""
    output_topics: dict[str, str] = field(default_factory=dict)
    input_topic: str = ""

    @property
    def balanced(self) -> bool:
        """Every query read every produced tuple (processed + dead-lettered == produced)."""
        return all(
            self.processed[q] + self.dead_lettered.get(q, 0) == self.produced
            for q in self.processed
        )


@dataclass(frozen=True)
class DemoStatus:
    """Where a demo run is, as reported to ``on_progress`` about 5 times a second.

    Attributes:
        produced / total: flights handed to Kafka so far / to replay.
        processed: per query, tuples its source has read.
        state: the query group's state (``EXECUTING``, ``SLEEPING``, ``HELD`` ...).
        received: per output stream, tuples the reception has read.
        output_queues: per output stream, ``(length, max queue size)`` at the query
            group's last check (tuples).
        latest_hour: the origin-hour tuples of the latest hour received, by origin.
    """

    produced: int
    total: int
    processed: dict[str, int]
    state: str
    received: dict[str, int]
    output_queues: dict[str, tuple[int, int]]
    latest_hour: list[dict[str, Any]]


def demo_config(path: Path, *, run_id: str | None, checkpoint_dir: str) -> QueryGroupConfig:
    """The flights config for a demo run: a fresh checkpoint, and with ``run_id``
    topic names suffixed so a shared cluster's earlier runs do not count."""
    import os
    import tomllib

    raw = apply_env_overrides(tomllib.loads(path.read_text()), os.environ)
    raw["query_group"]["checkpoint_dir"] = checkpoint_dir
    if run_id:
        raw["query_group"]["dead_letter_topic"] = (
            f"{raw['query_group']['name']}.dead-letter.{run_id}"
        )
        for section in ("input_streams", "output_streams"):
            for stream in raw.get(section, {}).values():
                stream["topic"] = f"{stream['topic']}.{run_id}"
    return parse_query_group(raw, source=str(path), env={})


def count_dead_letters(
    bootstrap_servers: str, topic: str, *, client: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """Distinct dead-lettered tuples per query (record keys are unique per query and offset).

    Args:
        client: extra librdkafka properties (the group's ``[kafka] client``).
    """
    keys: dict[str, set[bytes]] = {}
    for message in read_all(bootstrap_servers, topic, client=client):
        headers = dict(message.headers() or [])
        query = headers.get("floodgate.query", b"").decode()
        keys.setdefault(query, set()).add(message.key())
    return {q: len(k) for q, k in keys.items()}


def run_demo(
    *,
    bootstrap_servers: str | None = None,
    engine: str | None = None,
    rate: float | None = None,
    limit: int | None = None,
    config_path: Path = DEFAULT_CONFIG,
    spark: Any = None,
    on_progress: Callable[[DemoStatus], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    spark_log_level: str = "ERROR",
    on_received: Callable[[str, list[dict[str, Any]]], None] | None = None,
) -> DemoResult:
    """Run the main job once; see the module docstring.

    Args:
        bootstrap_servers: an external cluster; default: resolved by
            :func:`pipeline.brokers.local.resolve_broker`.
        engine: the broker to start when no cluster is named (``noida-db`` or
            ``apache-kafka``; default ``FLOODGATE_KAFKA_ENGINE``, else ``noida-db``).
        rate: replay rate in tuples/s; ``None`` as fast as it goes.
        limit: replay only the first ``limit`` flights in event-time order.
        config_path: the query group file.
        spark: a SparkSession to run in (default: a new one from the config).
        on_progress: called about 5 times a second with a :class:`DemoStatus`.
        on_phase: called with a short description when a phase starts.
        spark_log_level: Spark's log level for the run (``WARN`` shows, among others,
            every micro-batch that takes longer than the trigger interval).
        on_received: passed to the reception (:class:`Reception`): called with each
            output stream's tuples as soon as they are read.

    Raises:
        QueryGroupError: a query failed.
        QueryGroupHeld: the group was held and not released within ``SETTLE_TIMEOUT_S``
            (with ``auto_release = false`` at once: release it with
            ``floodgate query-group release``, or rerun with a larger output queue).
        DeliveryError: the broker did not acknowledge some flights.
        FloodgateError: the reception did not read every output tuple in time.
    """
    phase = on_phase or (lambda _text: None)
    phase("resolving the broker")
    # The file's [kafka] client (SASL, TLS) is needed to ask a named cluster already.
    client = demo_config(config_path, run_id=None, checkpoint_dir="unused").kafka.client
    broker: Broker = resolve_broker(bootstrap_servers, engine=engine, client=client)
    with contextlib.ExitStack() as stack:
        stack.callback(broker.stop)
        checkpoints = stack.enter_context(tempfile.TemporaryDirectory(prefix="floodgate-demo-"))
        run_id = None if broker.kind == "embedded" else uuid.uuid4().hex[:8]
        config = demo_config(config_path, run_id=run_id, checkpoint_dir=checkpoints)
        schemas = SchemaRepository.load(config.schema_dir)
        phase("starting the flights query group (SparkSession)")
        group = QueryGroup(
            config, bootstrap_servers=broker.bootstrap_servers, spark=spark, schemas=schemas
        )
        group.spark.sparkContext.setLogLevel(spark_log_level)
        group.start()
        stack.callback(group.stop)
        metrics_url = group.serve()
        phase(f"query group metrics at {metrics_url}/metrics, control at {metrics_url}/status")
        connector = stack.enter_context(
            connect(bootstrap_servers=broker.bootstrap_servers, config=config, schemas=schemas)
        )
        outputs = sorted({q.output for q in config.queries.values()})
        reception = Reception(
            {s: connector.open_stream_output(config.name, s) for s in outputs},
            {s: config.output_streams[s].key for s in outputs},
            on_received=on_received,
        ).start()
        stack.callback(reception.stop)
        phase("waiting for every query's first trigger")
        _await_first_trigger(group)
        phase("loading flights (replay process)")
        replayer = ReplayProcess(
            bootstrap_servers=broker.bootstrap_servers, config=config, limit=limit, rate=rate
        )
        total = replayer.start()
        stack.callback(replayer.stop)
        phase("replaying flights")
        started = time.monotonic()
        replayer.go()
        peaks: dict[str, int] = {}

        reports = [0]

        def report() -> DemoStatus:
            status = group.status()
            queues = {
                s: (int(q["length"]), int(q["max_queue_size"]))
                for s, q in status["output_queues"].items()
            }
            reports[0] += 1
            if reports[0] % 5 == 1:  # about once a second: the queue as the reception sees it
                for s, length in reception.queue_lengths().items():
                    peaks[s] = max(peaks.get(s, 0), length)
            tables = reception.tables()
            origin_hours = tables.get("delays_by_origin_hour")
            current = DemoStatus(
                produced=replayer.produced,
                total=total,
                processed={q: s.input_rows for q, s in group.stats().items()},
                state=str(status["state"]),
                received={s: t.received for s, t in tables.items()},
                output_queues=queues,
                latest_hour=latest_hour(origin_hours.rows.values()) if origin_hours else [],
            )
            if on_progress:
                on_progress(current)
            return current

        while not replayer.wait(0.2):
            group.check()
            if reception.error is not None:
                raise FloodgateError(f"the demo's reception failed: {reception.error}")
            report()
        if replayer.error is not None:
            raise replayer.error
        phase("processing what is left")
        _drain(group, report)
        phase("reading what is left")
        reception.wait_until_read(SETTLE_TIMEOUT_S)
        seconds = time.monotonic() - started
        report()
        reception.stop()
        phase("counting dead letters")
        stats = group.stats()
        dead = count_dead_letters(
            broker.bootstrap_servers, config.dead_letter_topic, client=config.kafka.client
        )
        tables = reception.tables()
        registry = group.registry
        return DemoResult(
            produced=replayer.produced,
            processed={q: s.input_rows for q, s in stats.items()},
            dead_lettered=dead,
            dropped_by_watermark={q: s.dropped_by_watermark for q, s in stats.items()},
            origin_hours=list(tables["delays_by_origin_hour"].rows.values())
            if "delays_by_origin_hour" in tables
            else [],
            carrier_days=list(tables["delays_by_carrier_day"].rows.values())
            if "delays_by_carrier_day" in tables
            else [],
            seconds=seconds,
            bootstrap_servers=broker.bootstrap_servers,
            broker_kind=broker.engine or broker.kind,
            blocked_s=replayer.blocked_s,
            max_queue_size=config.input_settings("flights").max_queue_size,
            received={s: t.received for s, t in tables.items()},
            output_max_queue_size={s: config.output_settings(s).max_queue_size for s in outputs},
            output_queue_peak=peaks,
            sleeps=int(stream_total(registry, SLEEPS, query_group=group.name, streams=outputs)),
            holds=int(stream_total(registry, HOLDS, query_group=group.name, streams=outputs)),
            metrics_url=metrics_url,
            output_topics={s: config.output_streams[s].topic for s in outputs},
            input_topic=config.input_streams["flights"].topic,
        )


def _await_first_trigger(group: QueryGroup, timeout_s: float = 120.0) -> None:
    """Wait until every query of ``group`` has run its first trigger (its Python source
    process started, the topic's offsets read), so that the replay, and the time the
    demo measures, starts against a running pipeline as a producer would.

    Raises:
        QueryGroupError: a query failed meanwhile (:meth:`QueryGroup.check`).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        group.check()
        if all(
            q.lastProgress is not None or q.status.get("message") == "Waiting for data to arrive"
            for q in group.queries().values()
        ):
            return
        time.sleep(0.1)
    log.warning("the queries did not finish their first trigger in %.0f s; replaying", timeout_s)


def _drain(group: QueryGroup, report: Callable[[], Any]) -> None:
    """Process everything the input holds now, waiting out holds that ``auto_release``
    ends (the reception keeps reading meanwhile).

    Raises:
        QueryGroupHeld: held, and not released within ``SETTLE_TIMEOUT_S`` (at once
            without ``auto_release``).
        QueryGroupError: a query failed.
    """
    while True:
        done = threading.Event()
        failure: list[BaseException] = []

        def process(failure: list[BaseException] = failure, done: threading.Event = done) -> None:
            try:
                group.process_all_available()
            except BaseException as exc:
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=process, name="drain", daemon=True).start()
        while not done.wait(0.2):
            report()
        if not failure:
            return
        held = failure[0]
        if not isinstance(held, QueryGroupHeld) or not group.config.query_group.auto_release:
            raise held
        log.warning("demo: %s; waiting for auto release", held)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while group.state in (QueryGroupState.HELD, QueryGroupState.STARTING):
            if time.monotonic() > deadline:
                raise held
            report()
            time.sleep(0.2)


@dataclass
class ProducerStatus:
    """Where :func:`run_producer` is, as reported to ``on_progress`` about once a second.

    Attributes:
        round: the replay round (1-based).
        produced: tuples accepted so far, all rounds.
        total: tuples per round.
        received: output tuples the reception read so far, per output stream.
        queue_length: the input stream queue's length at the client's last read.
        max_queue_size: its bound.
    """

    round: int
    produced: int
    total: int
    received: dict[str, int]
    queue_length: int
    max_queue_size: int


def run_producer(
    *,
    bootstrap_servers: str,
    config: QueryGroupConfig,
    stream: str = "flights",
    rate: float | None = None,
    limit: int | None = None,
    rounds: int | None = 1,
    read_outputs: bool = True,
    registry: Any = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[ProducerStatus], None] | None = None,
) -> int:
    """The demo producer of the docker-compose stack: replay the flights into a query
    group run elsewhere (``floodgate run``), through the back-pressure client, and
    read its output streams as a reception application does.

    Unlike :func:`run_demo` it starts no query group and no broker; the client's
    metrics (``floodgate_stream_*``, docs/metrics.md) go to ``registry``, which
    ``floodgate produce`` serves on ``/metrics``.

    Args:
        bootstrap_servers: the cluster the query group runs on.
        config: the query group's file (the same one ``floodgate run`` was given).
        stream: the input stream to replay into; its schema must be ``flight``.
        rate: tuples per second; ``None`` as fast as back-pressure lets it.
        limit: replay only the first ``limit`` flights of each round.
        rounds: replay the flights this many times; ``None`` until ``stop`` is set.
        read_outputs: read every output stream of the group (frees their bounded
            output stream queues); ``False`` leaves them to other readers.
        registry: where the client's metrics go (default: a registry of its own).
        stop: set it to end after the ``put`` in progress.
        on_progress: called about once a second with a :class:`ProducerStatus`.

    Returns:
        Tuples accepted by the input stream queue, all rounds together.

    Raises:
        ConfigError: ``stream`` is not an input stream of the group.
        DeliveryError: the broker did not acknowledge some flights.
        QueueFullError: a ``put`` found no room for ``put_timeout_s`` (10 minutes).
    """
    from pipeline.errors import ConfigError
    from pipeline.kafka.topics import ensure_topics

    if stream not in config.input_streams:
        raise ConfigError(
            f"{stream!r} is not an input stream of query group {config.name!r}: "
            f"it has {sorted(config.input_streams)}",
            key="input_streams",
            value=stream,
        )
    stop = stop or threading.Event()
    records = FlightTuples(load_flights(limit))
    schemas = SchemaRepository.load(config.schema_dir)
    ensure_topics(bootstrap_servers, config.topics(), client=dict(config.kafka.client))
    produced = 0
    with contextlib.ExitStack() as stack:
        connector = stack.enter_context(
            connect(
                bootstrap_servers=bootstrap_servers,
                config=config,
                schemas=schemas,
                registry=registry,
            )
        )
        writer = connector.open_stream_input(config.name, stream)
        reception: Reception | None = None
        if read_outputs and config.output_streams:
            reception = Reception(
                {s: connector.open_stream_output(config.name, s) for s in config.output_streams},
                {s: o.key for s, o in config.output_streams.items()},
            ).start()
            stack.callback(reception.stop)
        round_ = 0
        while not stop.is_set() and (rounds is None or round_ < rounds):
            round_ += 1
            replayer = FlightReplayer(writer, records, rate=rate, stop=stop)
            thread = threading.Thread(target=replayer.run, name="flight-replay", daemon=True)
            thread.start()
            while not replayer.done.wait(1.0):
                if reception is not None and reception.error is not None:
                    stop.set()
                    raise FloodgateError(f"the reception failed: {reception.error}")
                if on_progress:
                    on_progress(
                        _producer_status(
                            round_, produced + replayer.produced, records, reception, writer
                        )
                    )
            produced += replayer.produced
            if replayer.error is not None:
                raise replayer.error
            log.info(
                "round %d: %d flights replayed (%d in all)", round_, replayer.produced, produced
            )
        if on_progress:
            on_progress(_producer_status(round_, produced, records, reception, writer))
    return produced


def _producer_status(
    round_: int,
    produced: int,
    records: Sequence[dict[str, Any]],
    reception: Reception | None,
    writer: StreamInput,
) -> ProducerStatus:
    tables = reception.tables() if reception is not None else {}
    return ProducerStatus(
        round=round_,
        produced=produced,
        total=len(records),
        received={s: t.received for s, t in tables.items()},
        queue_length=writer.queue_length(),
        max_queue_size=writer.max_queue_size,
    )
