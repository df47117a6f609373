"""``floodgate produce``: replay the flights into a running query group's input stream."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.client import StreamInput, connect
from pipeline.config import QueryGroupConfig
from pipeline.demo.flights import FlightTuples, load_flights
from pipeline.demo.reception import Reception
from pipeline.demo.replay import FlightReplayer
from pipeline.errors import FloodgateError
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
    metrics (``floodgate_stream_*``, docs/metrics.md) go to ``registry``, which
    ``floodgate produce`` serves on ``/metrics``.

    Args:
        bootstrap_servers: the cluster the query group runs on.
        config: the query group's file (the same one ``floodgate run`` was given).
        stream: the input stream to replay into; its schema must be ``flight``.
        rate: tuples per second; ``None`` as fast as back-pressure lets it.
        limit: replay only the first ``limit`` flights of each round.
        rounds: replay the flights this many times; ``None`` until ``stop`` is set.
            Round ``r`` (1-based) replays them ``r - 1`` calendar years later
            (:func:`~pipeline.demo.flights.shift_years`: event times and so keys), so
            each round starts after the one before ended and none of it is late.
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
    flights = load_flights(limit)
    records = FlightTuples(flights)
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
            # Round r replays the flights r - 1 years later: the same event times
            # would all be behind the watermark the round before left (late).
            records = FlightTuples(flights, years=round_ - 1)
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
    # Read the queue now: the client reads the broker only when a put needs it, so its
    # last reading can be the one from before the replay (0 queued at the end, with the
    # replayed tuples still waiting for the query group).
    writer.free_queue_size()
    return ProducerStatus(
        round=round_,
        produced=produced,
        total=len(records),
        received={s: t.received for s, t in tables.items()},
        queue_length=writer.queue_length(),
        max_queue_size=writer.max_queue_size,
    )
