"""Benchmark: the back-pressure client's ``StreamInput.put`` against a raw producer.

What is measured, all in this one script on the same embedded broker,
one fresh topic per run, the same 336 776 flights (or ``--limit``) in batches
of 1 000:

* ``put``: ``StreamInput.put(batch)`` then ``put_end()`` -- encoding, the queue
  check (a read of the broker at most every ``queue_refresh_interval_ms``), and
  sending, with an input queue large enough never to refuse.
* ``raw encode + produce`` (the baseline): the same ``StreamCodec.encode`` and a
  plain ``confluent_kafka.Producer.produce`` per tuple, same producer settings
  (idempotent, ``acks=all``, ``murmur2_random``, ``linger.ms=5``), then ``flush``.
  This is what an application does without Floodgate; the ratio is the cost of
  the back-pressure.
* ``raw produce, pre-encoded``: the same Avro bytes encoded beforehand, so the
  figure shows what Avro encoding itself costs (measured on the 2-core development
  machine: per-tuple Avro in Python, not the broker, is the cost centre).

Target: ``put`` >= 0.90x the baseline. Runs alternate (baseline, put, ...) so
drift hits both; the median of ``--repeat`` runs is reported.

Run: ``.venv/bin/python bench/bench_put.py [--repeat 5] [--limit N] [--bootstrap H:P]``.
Results: a table, and JSON in ``bench/out/put.json``.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import common
from common import console
from confluent_kafka import Producer
from rich.table import Table

from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.client.connector import connect
from pipeline.demo.flights import flight_tuples, load_flights
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

BATCH = 1_000


def producer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 5,
    }


def run_put(bootstrap: str, records: list[dict[str, Any]], schemas: SchemaRepository) -> float:
    topic = f"bench.put.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (4, 1)})
    config = common.flights_config(topic, len(records) + 1)  # never refuses: cost, not waits
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        stream_input = connector.open_stream_input(config.name, "flights")
        stream_input.free_queue_size()  # connected, like the baseline's warm producer
        started = time.perf_counter()
        for i in range(0, len(records), BATCH):
            stream_input.put(records[i : i + BATCH])
        stream_input.put_end()
        return time.perf_counter() - started


def run_raw(
    bootstrap: str, records: list[dict[str, Any]], codec: StreamCodec, *, pre_encoded: bool
) -> float:
    topic = f"bench.raw.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (4, 1)})
    producer = Producer(producer_config(bootstrap))
    producer.list_topics(topic, timeout=10)
    key_of = common.flights_key()
    values = [(key_of(r), codec.encode(r)) for r in records] if pre_encoded else None
    started = time.perf_counter()
    for i in range(0, len(records), BATCH):
        chunk = (
            values[i : i + BATCH]
            if values is not None
            else [(key_of(r), codec.encode(r)) for r in records[i : i + BATCH]]
        )
        for key, value in chunk:
            common.produce_waiting(producer, topic, key, value)
        producer.poll(0)
    assert producer.flush(60) == 0
    return time.perf_counter() - started


def main() -> None:
    parser = common.argument_parser(__doc__, "put.json", repeat=5)
    common.add_flights_arguments(parser, bootstrap=True)
    args = parser.parse_args()

    records = list(flight_tuples(load_flights(args.limit)))
    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    broker = None if args.bootstrap else EmbeddedBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap_servers  # type: ignore[union-attr]
    variants: dict[str, Callable[[], float]] = {
        "raw encode + produce (baseline)": lambda: run_raw(
            bootstrap, records, codec, pre_encoded=False
        ),
        "StreamInput.put": lambda: run_put(bootstrap, records, schemas),
        "raw produce, pre-encoded": lambda: run_raw(bootstrap, records, codec, pre_encoded=True),
    }
    runs: dict[str, list[float]] = {name: [] for name in variants}
    try:
        run_put(
            bootstrap, records[:5_000], schemas
        )  # warm-up (imports, first connections), discarded
        for r in range(args.repeat):
            for name, run in variants.items():
                seconds = run()
                runs[name].append(len(records) / seconds)
                console.log(
                    f"run {r + 1}/{args.repeat} {name}: {len(records) / seconds:,.0f} tuples/s"
                )
                time.sleep(2.0)  # let the embedded broker settle (busy for seconds after a burst)
    finally:
        if broker is not None:
            broker.stop()

    medians = {name: statistics.median(v) for name, v in runs.items()}
    baseline = medians["raw encode + produce (baseline)"]
    table = Table(title=f"put vs raw produce, {len(records):,} flights in batches of {BATCH:,}")
    for column in ("variant", "median tuples/s", "runs", "÷ baseline"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for name, values in runs.items():
        table.add_row(
            name,
            f"{medians[name]:,.0f}",
            " ".join(f"{v:,.0f}" for v in values),
            f"{medians[name] / baseline:.2f}x",
        )
    console.print(table)
    ratio = medians["StreamInput.put"] / baseline
    console.print(
        f"target put >= 0.90x baseline: {'met' if ratio >= 0.90 else 'NOT met'} ({ratio:.2f}x)"
    )
    common.write_results(
        args.json,
        "StreamInput.put vs raw produce",
        n=len(records),
        batch=BATCH,
        runs_tuples_per_s=runs,
        median_tuples_per_s=medians,
        ratio_put_to_baseline=round(ratio, 3),
    )


if __name__ == "__main__":
    main()
