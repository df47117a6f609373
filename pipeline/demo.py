"""The main job: replay the NYC 2013 flights through Kafka into the ``flights`` query group.

:func:`run_demo` (``floodgate demo``, ``make demo``; DESIGN.md section 7):

1. resolves a broker (``--bootstrap``, ``FLOODGATE_KAFKA_BOOTSTRAP``, Docker, or the
   embedded one) and creates the topics;
2. starts the ``flights`` query group (``conf/flights.toml``);
3. replays the flights in event-time order through a :class:`FlightReplayer`
   (``--rate`` tuples/s, default as fast as it goes), with progress bars for
   producing and processing;
4. waits until every query has processed all input, reads the output streams,
   and prints the busiest and most delayed origin-hours;
5. checks that tuples produced == tuples processed by every query (+ dead-lettered),
   and stops cleanly.

The replay writes through the back-pressure client
(:class:`~pipeline.client.StreamInput`, ``put(block=True)``): when the
``flights`` input stream queue (``max_queue_size`` in ``conf/flights.toml``) is
full, producing waits until the query group has processed enough.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.broker import Broker, resolve_broker
from pipeline.client import StreamInput, connect
from pipeline.config import QueryGroupConfig, apply_env_overrides, parse_query_group
from pipeline.flights import flight_records, load_flights
from pipeline.query_group import QueryGroup
from pipeline.serde import SchemaRepository, StreamCodec

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "flights.toml"
#: Tuples per ``put`` of the replay.
REPLAY_BATCH = 1_000


@dataclass
class FlightReplayer:
    """Replays flights in event-time order through the back-pressure client.

    Each batch is ``put(block=True)``: when the input stream queue is full the
    replay waits until the query group has made room (DESIGN.md section 4.1).

    Args:
        writer: the flights input stream of the query group.
        records: the flight tuples, in event-time order.
        rate: tuples per second; ``None`` for as fast as it goes.
        batch: tuples per ``put``.
        put_timeout_s: the longest one ``put`` may wait for room.
    """

    writer: StreamInput
    records: list[dict[str, Any]]
    rate: float | None = None
    batch: int = REPLAY_BATCH
    put_timeout_s: float = 600.0
    produced: int = 0
    blocked_s: float = 0.0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Replay everything, then ``put_end``; errors are kept in :attr:`error`."""
        start = time.monotonic()
        try:
            for i in range(0, len(self.records), self.batch):
                chunk = self.records[i : i + self.batch]
                if self.rate:
                    due = start + (i + len(chunk)) / self.rate
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                result = self.writer.put(chunk, block=True, timeout_s=self.put_timeout_s)
                self.produced += result.accepted
                self.blocked_s += result.blocked_s
            self.writer.put_end()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


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
        origin_hours / carrier_days: the output tables (latest per key).
        seconds: wall time from the first tuple produced to all processed.
        blocked_s: seconds the replay waited for room in the input stream queue.
        max_queue_size: the flights input stream queue's bound.
        bootstrap_servers / broker_kind: where it ran.
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

    @property
    def balanced(self) -> bool:
        """Every query read every produced tuple (processed + dead-lettered == produced)."""
        return all(
            self.processed[q] + self.dead_lettered.get(q, 0) == self.produced
            for q in self.processed
        )


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


def count_dead_letters(bootstrap_servers: str, topic: str) -> dict[str, int]:
    """Distinct dead-lettered tuples per query (record keys are unique per query and offset)."""
    keys: dict[str, set[bytes]] = {}
    for message in read_all(bootstrap_servers, topic):
        headers = dict(message.headers() or [])
        query = headers.get("floodgate.query", b"").decode()
        keys.setdefault(query, set()).add(message.key())
    return {q: len(k) for q, k in keys.items()}


def run_demo(
    *,
    bootstrap_servers: str | None = None,
    rate: float | None = None,
    limit: int | None = None,
    config_path: Path = DEFAULT_CONFIG,
    spark: Any = None,
    on_progress: Callable[[int, int, dict[str, int]], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> DemoResult:
    """Run the main job once; see the module docstring.

    Args:
        bootstrap_servers: an external cluster; default: resolved (DESIGN.md section 3).
        rate: replay rate in tuples/s; ``None`` as fast as it goes.
        limit: replay only the first ``limit`` flights in event-time order.
        config_path: the query group file.
        spark: a SparkSession to run in (default: a new one from the config).
        on_progress: called about 5 times a second with ``(produced, total, processed
            per query)``.
        on_phase: called with a short description when a phase starts.

    Raises:
        QueryGroupError: a query failed.
        DeliveryError: the broker did not acknowledge some flights.
    """
    phase = on_phase or (lambda _text: None)
    phase("loading flights")
    flights = load_flights(limit)
    records = list(flight_records(flights))
    phase("resolving the broker")
    broker: Broker = resolve_broker(bootstrap_servers)
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
        group.start()
        stack.callback(group.stop)
        connector = stack.enter_context(
            connect(bootstrap_servers=broker.bootstrap_servers, config=config, schemas=schemas)
        )
        writer = connector.open_stream_input(config.name, "flights")
        replayer = FlightReplayer(writer, records, rate=rate)
        phase("replaying flights")
        started = time.monotonic()
        producer_thread = threading.Thread(target=replayer.run, name="flight-replay", daemon=True)
        producer_thread.start()
        total = len(records)

        def report() -> dict[str, int]:
            processed = {q: s.input_rows for q, s in group.stats().items()}
            if on_progress:
                on_progress(replayer.produced, total, processed)
            return processed

        while not replayer.done.wait(0.2):
            group.check()
            report()
        if replayer.error is not None:
            raise replayer.error
        phase("processing what is left")
        drained = threading.Event()
        failure: list[BaseException] = []

        def drain() -> None:
            try:
                group.process_all_available()
            except BaseException as exc:
                failure.append(exc)
            finally:
                drained.set()

        threading.Thread(target=drain, name="drain", daemon=True).start()
        while not drained.wait(0.2):
            report()
        if failure:
            raise failure[0]
        seconds = time.monotonic() - started
        report()
        phase("reading the results")
        stats = group.stats()
        dead = count_dead_letters(broker.bootstrap_servers, config.dead_letter_topic)
        outputs = {}
        for query, qc in config.queries.items():
            out = config.output_streams[qc.output]
            outputs[query] = read_table(
                broker.bootstrap_servers,
                out.topic,
                StreamCodec(qc.output, schemas.get(out.schema_), schemas),
                key_columns=out.key,
            )
        return DemoResult(
            produced=replayer.produced,
            processed={q: s.input_rows for q, s in stats.items()},
            dead_lettered=dead,
            dropped_by_watermark={q: s.dropped_by_watermark for q, s in stats.items()},
            origin_hours=outputs.get("delays_by_origin_hour", []),
            carrier_days=outputs.get("delays_by_carrier_day", []),
            seconds=seconds,
            bootstrap_servers=broker.bootstrap_servers,
            broker_kind=broker.kind,
            blocked_s=replayer.blocked_s,
            max_queue_size=writer.max_queue_size,
        )
