"""Measurement: how far apart in event time the flights partitions' heads are during a
replay, which is what the input stream's watermark delay must cover.

Spark's watermark is the latest event time the query has read, over every partition,
less the delay (``withWatermark``); a micro-batch planned when one partition's head
is ahead of another's moves the watermark past the lagging partition's next flights,
and the source dead-letters those as late (reason ``late``).
Flights are replayed in event-time order, but a replay runs a year through in seconds
and librdkafka sends each partition its own batches (up to ``batch.num.messages``
tuples), so the heads are not written together.

Per run, on a fresh embedded broker and a fresh ``flights`` topic (4 partitions): the
demo's replay (:class:`pipeline.demo.replay.FlightReplayer`, ``put(block=True)`` through the
back-pressure client, no query group reading) of ``--limit`` flights, while a thread
reads the four high watermarks over and over. Afterwards every partition is read back
and decoded, and each sample of heads becomes a skew: the latest event time at any
head less the earliest. The input queue is as large as the replay, so the producer
never waits for room (it flows freely, as the demo's does until its queue fills).

Run: ``.venv/bin/python bench/partition_skew.py [--limit 100000] [--repeat 3] [--sequential]``.
Results: a table (hours of event time), and JSON in ``bench/out/partition_skew.json``.
"""

from __future__ import annotations

import statistics
import threading
from typing import Any

import common
from common import console

HOUR_MS = 3_600_000
PARTITIONS = 4


def head_skews(samples: list[tuple[int, ...]], event_times: dict[int, list[int]]) -> list[float]:
    """Skew (hours) of each sample of high watermarks where every partition has a tuple.

    Args:
        samples: high watermarks, one offset per partition, in partition order.
        event_times: per partition, the event time (epoch ms) of each offset.
    """
    skews = []
    for heads in samples:
        if all(heads):
            last = [event_times[p][offset - 1] for p, offset in enumerate(heads)]
            skews.append((max(last) - min(last)) / HOUR_MS)
    return skews


def one_run(limit: int, *, sequential: bool) -> dict[str, Any]:
    """Replay ``limit`` flights on a fresh broker; the skews seen at the heads (hours).

    ``sequential``: read the heads one partition at a time (``get_watermark_offsets``,
    one ListOffsets request each), else all in one request (``AdminClient.list_offsets``).
    """
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from pipeline.client import connect
    from pipeline.demo.flights import FlightTuples, load_flights
    from pipeline.demo.replay import FlightReplayer
    from pipeline.kafka.topics import ensure_topics
    from pipeline.serde.schemas import SchemaRepository

    records = FlightTuples(load_flights(limit))
    with common.fresh_broker() as bootstrap:
        config = common.flights_config("flights", max_queue_size=limit)
        ensure_topics(bootstrap, config.topics(), client=dict(config.kafka.client))
        topic = config.input_streams["flights"].topic
        samples: list[tuple[int, ...]] = []
        done, ready = threading.Event(), threading.Event()

        def sample() -> None:
            watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "skew-watcher"})
            admin = AdminClient({"bootstrap.servers": bootstrap})
            partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            try:
                while not done.is_set():
                    if sequential:
                        heads = tuple(
                            watcher.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions
                        )
                    else:
                        futures = admin.list_offsets(dict.fromkeys(partitions, OffsetSpec.latest()))
                        heads = tuple(futures[tp].result().offset for tp in partitions)
                    samples.append(heads)
                    ready.set()  # connected: the replay may start
            finally:
                watcher.close()

        schemas = SchemaRepository.load(config.schema_dir)
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
            writer = connector.open_stream_input(config.name, "flights")
            watcher = threading.Thread(target=sample, name="head-sampler")
            watcher.start()
            ready.wait(30)
            replayer = FlightReplayer(writer, records)
            replayer.run()
            done.set()
            watcher.join()
            if replayer.error is not None:
                raise replayer.error
            codec = writer.codec
        reader = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "skew-reader", "enable.auto.commit": False}
        )
        event_times: dict[int, list[int]] = {}
        try:
            for p in range(PARTITIONS):
                high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                reader.assign([TopicPartition(topic, p, 0)])
                times: list[int] = []
                while len(times) < high:
                    for message in reader.consume(5_000, 5.0):
                        if message.error() is None:
                            when = codec.decode(message.value())["time_hour"]
                            times.append(int(when.timestamp() * 1000))
                event_times[p] = times
                reader.unassign()
        finally:
            reader.close()
    skews = sorted(head_skews(samples, event_times))
    stream = config.input_streams["flights"]
    max_rows = config.input_settings("flights").max_tuples_per_trigger or limit
    drift = stream.max_event_time_drift_ms
    return {
        "flights": replayer.produced,
        "samples": len(skews),
        "max_h": skews[-1],
        "p99_h": skews[int(0.99 * (len(skews) - 1))],
        "p50_h": skews[len(skews) // 2],
        "max_tuples_per_trigger": max_rows,
        "drift_h": None if drift is None else drift / HOUR_MS,
    }


def main() -> None:
    parser = common.argument_parser(__doc__, "partition_skew.json")
    common.add_flights_arguments(parser, limit=100_000, limit_help="flights per replay")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="read the heads one partition at a time, as the source did before",
    )
    args = parser.parse_args()

    from rich.progress import track
    from rich.table import Table

    runs = [
        one_run(args.limit, sequential=args.sequential)
        for _ in track(range(args.repeat), description="replays")
    ]
    how = "one request a partition" if args.sequential else "one request for all partitions"
    table = Table(
        title=f"Skew between partition heads, {args.limit:,} flights, {how} (event-time hours)"
    )
    for column in ("run", "samples", "p50", "p99", "max"):
        table.add_column(column, justify="right")
    for i, run in enumerate(runs, 1):
        table.add_row(
            str(i),
            f"{run['samples']:,}",
            f"{run['p50_h']:.0f}",
            f"{run['p99_h']:.0f}",
            f"{run['max_h']:.0f}",
        )
    worst = [run["max_h"] for run in runs]
    table.add_row(
        "median", "", "", "", f"{statistics.median(worst):.0f} ({min(worst):.0f}-{max(worst):.0f})"
    )
    console.print(table)
    common.write_results(
        args.json,
        "skew between partition heads during a replay",
        sequential=args.sequential,
        runs=runs,
    )


if __name__ == "__main__":
    main()
