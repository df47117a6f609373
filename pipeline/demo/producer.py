"""``floodgate produce``: replay the flights into a running query group's input stream."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.client import StreamInput, connect
from pipeline.config import QueryGroupConfig
from pipeline.demo.flights import FlightTuples, load_flights, shift_years
from pipeline.demo.reception import Reception
from pipeline.demo.replay import FlightReplayer
from pipeline.errors import FloodgateError
from pipeline.kafka.clients import reader_settings
from pipeline.names import ad_hoc_group_id
from pipeline.serde.schemas import SchemaRepository

log = logging.getLogger(__name__)


@dataclass
class ProducerStatus:
    """Where :func:`run_producer` is, as reported to ``on_progress`` about once a second.

    Attributes:
        round: the replay round (1-based).
        produced: tuples accepted so far, all rounds.
        total: tuples per round.
        received: output tuples the reception read so far, per output stream.
        queue_length: tuples in the input stream queue, written and not yet processed
            by the query group (the slowest query's commit), read from the broker for
            this status: what ``floodgate audit`` shows as queued.
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
    metrics (``floodgate_input_stream_queue_*``, ``floodgate_stream_put_*``,
    docs/metrics.md) go to ``registry``, which ``floodgate produce`` serves on
    ``/metrics``.

    Args:
        bootstrap_servers: the cluster the query group runs on.
        config: the query group's file (the same one ``floodgate run`` was given).
        stream: the input stream to replay into; its schema must be ``flight``.
        rate: tuples per second; ``None`` as fast as back-pressure lets it.
        limit: replay only the first ``limit`` flights of each round.
        rounds: replay the flights this many times; ``None`` until ``stop`` is set.
            Round ``r`` (1-based) replays them ``r - 1`` calendar years later
            (:func:`~pipeline.demo.flights.shift_years`: event times and so keys), so
            each round starts after the one before ended and none of it is late; on a
            stream that already holds flights, the first round starts in the first
            year after them (:func:`first_round_years`).
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
        FloodgateError: the next round would reach event times further ahead of now
            than the stream's ``max_event_time_ahead_ms`` (:func:`check_ahead`).
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
    flights = load_flights(limit)
    tuples = FlightTuples(flights)
    schemas = SchemaRepository.load(config.schema_dir)
    ensure_topics(bootstrap_servers, config.topics(), client=dict(config.kafka.client))
    # A restarted producer (or a second one) goes on after what the stream holds:
    # starting again at 2013 would be behind the watermark, every flight late.
    first_ms, last_ms = int(flights["time_hour_ms"].min()), int(flights["time_hour_ms"].max())
    first_years = first_round_years(
        first_ms, latest_event_time(bootstrap_servers, config, stream, schemas)
    )
    if first_years:
        log.info(
            "the stream holds event times up to round %d: replaying on from there", first_years
        )
    ahead_ms = config.input_streams[stream].max_event_time_ahead_ms
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
            # Round r replays the flights r - 1 years later: the same event times
            # would all be behind the watermark the round before left (late).
            years = first_years + round_ - 1
            check_ahead(stream, shift_years(last_ms, years), ahead_ms, round_)
            tuples = FlightTuples(flights, years=years)
            replayer = FlightReplayer(writer, tuples, rate=rate, stop=stop)
            thread = threading.Thread(target=replayer.run, name="flight-replay", daemon=True)
            thread.start()
            while not replayer.done.wait(1.0):
                if reception is not None and reception.error is not None:
                    stop.set()
                    raise FloodgateError(f"the reception failed: {reception.error}")
                if on_progress:
                    on_progress(
                        producer_status(
                            round_, produced + replayer.produced, tuples, reception, writer
                        )
                    )
            produced += replayer.produced
            if replayer.error is not None:
                raise replayer.error
            log.info(
                "round %d: %d flights replayed (%d in all)", round_, replayer.produced, produced
            )
        if on_progress:
            on_progress(producer_status(round_, produced, tuples, reception, writer))
    return produced


def first_round_years(first_ms: int, latest_ms: int | None) -> int:
    """Whole calendar years the first round moves the flights (pure): 0 on a stream
    with no event time at or after the flights' first, else the fewest that start the
    round after ``latest_ms``, the stream's latest event time.

    Args:
        first_ms: the flights' first event time, epoch ms.
        latest_ms: the stream's latest event time, epoch ms (``None``: it is empty).
    """
    if latest_ms is None or latest_ms < first_ms:
        return 0

    def year(ms: int) -> int:
        return int(np.datetime64(ms, "ms").astype("datetime64[Y]").astype(int))

    years = max(0, year(latest_ms) - year(first_ms))
    while shift_years(first_ms, years) <= latest_ms:
        years += 1
    return years


def check_ahead(stream: str, round_last_ms: int, ahead_ms: int, round_: int) -> None:
    """Refuse a round whose last event time is further ahead of now than the stream
    accepts, before any of it is put.

    Why: each round is a year later than the last, and the flights start in 2013, so
    round 14 reaches into 2026. The back-pressure client refuses a tuple more than
    ``max_event_time_ahead_ms`` ahead of now (``EventTimeError``, mid-round); a
    replay that should run for days needs the stream's limit raised (to 9999 at
    most: ``FLOODGATE__INPUT_STREAMS__<STREAM>__MAX_EVENT_TIME_AHEAD_MS``, on the
    query group and on the producer).

    Raises:
        FloodgateError: ``round_last_ms > now + ahead_ms``, naming the round, its last
            event time and the setting.
    """
    from datetime import UTC, datetime

    if round_last_ms <= time.time() * 1000 + ahead_ms:
        return
    raise FloodgateError(
        f"round {round_} would replay flights up to "
        f"{datetime.fromtimestamp(round_last_ms / 1000, tz=UTC):%Y-%m-%d %H:%M} UTC, more "
        f"than {ahead_ms / 1000:,.0f} s ahead of now, which stream {stream!r} refuses: "
        f"raise input_streams.{stream}.max_event_time_ahead_ms (on the query group and "
        "the producer) to replay further"
    )


def latest_event_time(
    bootstrap_servers: str,
    config: QueryGroupConfig,
    stream: str,
    schemas: SchemaRepository,
    *,
    timeout_s: float = 30.0,
) -> int | None:
    """The latest event time of the last records of the stream's partitions (epoch ms):
    where a replay must go on from. ``None`` for an empty stream, or one whose event
    time is its records' timestamps (``timestamp_mode = "server"``).

    A replay writes each partition in event-time order, so its last record holds the
    partition's latest event time. Records that do not decode are passed over.

    Raises:
        KafkaException: the broker did not answer within ``timeout_s``, or a partition
            had no leader for that long (transient errors are asked again until then).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from pipeline.errors import DeserializationError
    from pipeline.kafka.fetching import bounded_fetch
    from pipeline.kafka.retries import broker_retrying, transient_kafka_error

    settings = config.input_streams[stream]
    field = settings.timestamp_field
    if settings.timestamp_mode != "data_source" or field is None:
        return None
    codec = config.stream_codec("input", stream, schemas)
    consumer = Consumer(
        reader_settings(
            bootstrap_servers,
            config.kafka.client,
            group_id=ad_hoc_group_id(),
            own={"enable.partition.eof": True, **bounded_fetch(config.kafka.client)},
        )
    )
    try:
        topic = settings.topic
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if found is None or found.error is not None:
            return None
        # A topic just created has partitions without a leader for a moment (Apache
        # Kafka answers NOT_LEADER_FOR_PARTITION until its election): asked again.
        watermarks = broker_retrying(transient_kafka_error, timeout_s, max_backoff_s=1.0)
        starts = []
        for p in found.partitions:
            low, high = watermarks(
                consumer.get_watermark_offsets, TopicPartition(topic, p), timeout=timeout_s
            )
            if high > low:
                starts.append(TopicPartition(topic, p, high - 1))
        if not starts:
            return None
        consumer.assign(starts)
        pending = {tp.partition for tp in starts}
        latest: int | None = None
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=len(starts), timeout=0.5):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    continue
                pending.discard(message.partition())
                if error is not None:
                    continue
                try:
                    value = codec.decode(message.value() or b"", logical=False).get(field)
                except DeserializationError:
                    continue
                if isinstance(value, int):
                    latest = value if latest is None else max(latest, value)
        return latest
    finally:
        consumer.close()


def producer_status(
    round_: int,
    produced: int,
    tuples: Sequence[dict[str, Any]],
    reception: Reception | None,
    writer: StreamInput,
) -> ProducerStatus:
    """The replay's :class:`ProducerStatus`: round ``round_``, ``produced`` tuples
    accepted of ``len(tuples)`` a round, what ``reception`` (if any) read per output
    stream, and the input stream queue's length and bound, read from the broker now
    through ``writer`` (a read of the broker: about a millisecond)."""
    tables = reception.tables() if reception is not None else {}
    # Read the queue now: the client reads the broker only when a put needs it, so its
    # last reading can be the one from before the replay (0 queued at the end, with the
    # replayed tuples still waiting for the query group).
    writer.free_queue_size()
    return ProducerStatus(
        round=round_,
        produced=produced,
        total=len(tuples),
        received={s: t.received for s, t in tables.items()},
        queue_length=writer.queue_length(),
        max_queue_size=writer.max_queue_size,
    )
