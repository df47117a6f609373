"""Benchmark: Floodgate end to end against the physical limit of this machine (issue 9,
comparison 2).

What is measured, per run, on one embedded broker, with the same flights:

* **the limit**: a raw confluent-kafka producer and a raw consumer, one process each,
  started together on a fresh 4-partition topic. The producer encodes every flight
  with the flights codec (``StreamCodec.encode``, Avro single-object encoding) and
  produces it with the client settings of ``bench_put.py``'s baseline (idempotent,
  ``acks=all``, ``linger.ms=5``, ``murmur2_random``, the stream's key); the consumer
  is assigned the four partitions from the beginning and decodes every value
  (``StreamCodec.decode``, fastavro, one tuple at a time) until it has all of them.
  Timed from the producer's first tuple to the consumer's last decoded one: the most
  a producer and a reader of Avro tuples written in Python move through this broker
  on this machine, with no processing in between.
* **Floodgate**: the main job as ``make demo`` runs it (:func:`pipeline.demo.run.run_demo`:
  the replay process through the back-pressure client, the ``flights`` query group's
  two stateful queries, the output topics read by the reception), timed from the
  first tuple produced to every tuple processed and every output tuple read; its
  per-origin-per-hour output is checked against pandas first.

The headline is the median over runs of Floodgate ÷ limit (the two of a run share
the machine's state). Target: >= 0.5. One warm-up run of each is discarded (Floodgate's
over all flights, or ``--warmup N``: :data:`common.WARMUP_FLIGHTS`).

Run: ``.venv/bin/python bench/bench_limit.py [--repeat 3] [--limit N]``.
Results: a table, and JSON in ``bench/out/limit.json``.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import common
from bench_put import producer_config  # the same raw producer
from common import console

from pipeline.demo.run import run_demo
from pipeline.kafka.topics import ensure_topics

TARGET_RATIO = 0.5
PARTITIONS = 4
READY_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 600.0


def _codec() -> Any:
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

    schemas = SchemaRepository.load()
    return StreamCodec("flights", schemas.get("flight"), schemas)


def raw_producer(
    bootstrap: str, topic: str, limit: int | None, ready: Any, go: Any, out: Any
) -> None:
    """Process body: encode and produce every flight once ``go`` is set."""
    from confluent_kafka import Producer

    from pipeline.demo.flights import flight_records, load_flights

    records = list(flight_records(load_flights(limit)))
    codec = _codec()
    key_of = common.flights_key()
    producer = Producer(producer_config(bootstrap))
    producer.list_topics(topic, timeout=10)
    ready.set()
    go.wait()
    started = time.time()
    for record in records:
        common.produce_waiting(producer, topic, key_of(record), codec.encode(record))
        producer.poll(0)
    undelivered = producer.flush(60)
    out.put(("producer", started, time.time(), len(records) - undelivered))


def raw_consumer(bootstrap: str, topic: str, n: int, ready: Any, go: Any, out: Any) -> None:
    """Process body: read and decode ``n`` tuples of ``topic`` from the beginning."""
    from confluent_kafka import Consumer, TopicPartition

    codec = _codec()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-limit-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    ready.set()
    go.wait()
    decoded = 0
    last = time.time()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while decoded < n and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=10_000, timeout=0.2):
            if message.error() is None:
                codec.decode(message.value(), logical=False)
                decoded += 1
        last = time.time()
    consumer.close()
    out.put(("consumer", None, last, decoded))


@dataclass
class Run:
    """One run: the raw limit, then Floodgate."""

    n: int
    limit_s: float
    floodgate_s: float
    started_quiet: bool

    @property
    def limit_tuples_per_s(self) -> float:
        return self.n / self.limit_s

    @property
    def floodgate_tuples_per_s(self) -> float:
        return self.n / self.floodgate_s

    @property
    def ratio(self) -> float:
        return self.floodgate_tuples_per_s / self.limit_tuples_per_s


def run_limit(bootstrap: str, limit: int | None, n: int) -> float:
    """One run of the raw producer and consumer; seconds from first tuple produced to
    last tuple decoded."""
    topic = f"bench.limit.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (PARTITIONS, 1)})
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    out = context.Queue()
    ready = [context.Event(), context.Event()]
    processes = [
        context.Process(target=raw_consumer, args=(bootstrap, topic, n, ready[0], go, out)),
        context.Process(target=raw_producer, args=(bootstrap, topic, limit, ready[1], go, out)),
    ]
    for process in processes:
        process.start()
    for event in ready:
        if not event.wait(READY_TIMEOUT_S):
            raise RuntimeError("a raw process was not ready in time")
    go.set()
    results = {
        kind: (start, end, count)
        for kind, start, end, count in (out.get(timeout=RUN_TIMEOUT_S) for _ in processes)
    }
    for process in processes:
        process.join(30)
    if results["producer"][2] != n or results["consumer"][2] != n:
        raise RuntimeError(f"raw run incomplete: {results}")
    return results["consumer"][1] - results["producer"][0]


def main() -> None:
    parser = common.argument_parser(__doc__, "limit.json")
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    args = parser.parse_args()
    expected = common.expected_origin_hours(args.limit)
    n = sum(v[0] for v in expected.values())
    spark = common.start_spark("floodgate-bench-limit")
    runs: list[Run] = []
    try:
        with common.fresh_broker(args.engine) as bootstrap:
            warm = run_demo(bootstrap_servers=bootstrap, limit=args.warmup, spark=spark)
            console.log(
                f"warm-up Floodgate (discarded): {warm.produced / warm.seconds:,.0f} tuples/s"
            )
            warm_s = run_limit(bootstrap, args.limit, n)
            console.log(f"warm-up limit (discarded): {n / warm_s:,.0f} tuples/s")
        for r in range(args.repeat):
            # A broker per measurement (common.fresh_broker says why).
            with common.fresh_broker(args.engine) as bootstrap:
                quiet = common.wait_until_quiet(None)
                limit_s = run_limit(bootstrap, args.limit, n)
            with common.fresh_broker(args.engine) as bootstrap:
                common.wait_until_quiet(None)
                result = run_demo(bootstrap_servers=bootstrap, limit=args.limit, spark=spark)
            if not result.balanced or result.produced != n:
                raise RuntimeError(f"Floodgate: not every flight was processed: {result.processed}")
            common.check_origin_hours("Floodgate", result.origin_hours, expected)
            run = Run(n=n, limit_s=limit_s, floodgate_s=result.seconds, started_quiet=quiet.quiet)
            runs.append(run)
            console.log(
                f"run {r + 1}/{args.repeat}: limit {run.limit_tuples_per_s:,.0f} tuples/s "
                f"({limit_s:.1f} s), Floodgate {run.floodgate_tuples_per_s:,.0f} tuples/s "
                f"({result.seconds:.1f} s): {run.ratio:.2f}"
            )
        java_versions = common.versions(spark)
    finally:
        spark.stop()

    lim = [r.limit_tuples_per_s for r in runs]
    fg = [r.floodgate_tuples_per_s for r in runs]
    ratio = statistics.median(r.ratio for r in runs)
    console.print(
        common.rates_table(
            f"Floodgate end to end vs the raw limit ({n:,} flights)",
            {
                "limit: raw producer + raw Avro consumer, a process each": lim,
                "Floodgate: replay + flights query group + reception": fg,
            },
        )
    )
    console.print(
        "Floodgate / limit per run: "
        + " ".join(f"{r.ratio:.2f}" for r in runs)
        + f"; median {ratio:.2f}"
    )
    console.print(
        f"target Floodgate >= {TARGET_RATIO} of the limit: "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'} ({ratio:.2f})"
    )
    common.write_results(
        args.json,
        "Floodgate end to end vs raw producer + raw Avro consumer",
        engine=args.engine,
        versions=java_versions,
        n=n,
        **common.ratio_fields(
            runs, "limit_tuples_per_s", "floodgate_tuples_per_s", target=TARGET_RATIO
        ),
    )


if __name__ == "__main__":
    main()
