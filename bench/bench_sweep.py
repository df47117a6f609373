"""Sweep and unsweep throughput against reading the same range from the broker.

What it measures, on the embedded broker, for every partition of a topic holding
the flights (produced once, through the back-pressure client):

* **sweep**: tuples per second moved into the local BLOB store -- the sweeper's own
  read of ``[0, high)`` (:func:`sweeper.sweep.read_range`: a read_committed
  consumer) written by :func:`pipeline.swept.blob.write_blob` (Avro container, fsynced)
  and renamed into place, as :meth:`sweeper.sweep.RangeSweeper.sweep` does;
  baseline: a plain consume of the same range (a ``consume()`` loop with the same
  consumer settings, the records only counted). Target: sweep / consume >= 0.7.
* **unsweep**: tuples per second read back from the BLOBs
  (:class:`pipeline.swept.reading.BlobReader`, what the Spark source and the data path use
  for offsets the broker no longer holds), against reading the same range from the
  broker (the baseline's plain consume, timed again). Target: >= 1.0.
* **read only** (for the record, no target): the sweeper's read without the write,
  so sweep / read only is what writing BLOBs costs. The sweeper's read pauses the
  cyclic GC while a fetch builds its ``Message`` objects, which a plain consumer
  loop does not: that alone makes it faster than the baseline.

Each run times the four in one process, alternating, ``--repeat`` times; the
figures are medians with min-max. Command: ``.venv/bin/python bench/bench_sweep.py``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import common
from common import console
from confluent_kafka import Consumer, KafkaError, TopicPartition
from rich.table import Table

from pipeline.brokers.local import resolve_broker
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.swept.blob import blob_name, write_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import BlobReader
from sweeper.policy import SweepRange
from sweeper.sweep import range_reader_settings, read_range

PARTITIONS = 4


def consume(bootstrap: str, topic: str, ranges: dict[int, int]) -> int:
    """Count the records of ``[0, high)`` of every partition with a plain consumer loop
    (the baseline): the sweeper's consumer settings, ``consume()`` until the position
    reaches the high watermark, the records counted."""
    total = 0
    for p, hw in ranges.items():
        consumer = Consumer(range_reader_settings(bootstrap))
        consumer.assign([TopicPartition(topic, p, 0)])
        position = 0
        while position < hw:
            wanted = min(10_000, hw - position)  # consume() waits for all it asks for
            for message in consumer.consume(num_messages=wanted, timeout=1.0):
                if message.error() is None:
                    total += 1
                    position = message.offset() + 1
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset())
        consumer.close()
    return total


def read(bootstrap: str, topic: str, ranges: dict[int, int]) -> int:
    """Count the records of ``[0, high)`` of every partition through the sweeper's own
    read (:func:`sweeper.sweep.read_range`), without writing them."""
    return sum(
        sum(map(len, read_range(bootstrap, topic, p, SweepRange(0, hw))))
        for p, hw in ranges.items()
    )


def sweep(
    bootstrap: str, topic: str, ranges: dict[int, int], folder: Path, catalog: SweepCatalog
) -> int:
    """Sweep ``[0, high)`` of every partition into BLOBs, registered in ``catalog``."""
    total = 0
    for p, hw in ranges.items():
        name = blob_name(topic, p, 0, hw)
        temporary, final = folder / f".tmp-{name}", folder / name
        n = write_blob(temporary, read_range(bootstrap, topic, p, SweepRange(0, hw)))
        os.replace(temporary, final)
        catalog.register(
            topic, p, 0, hw, path=str(final), size=final.stat().st_size, tuples=n, now=time.time()
        )
        total += n
    return total


def unsweep(topic: str, ranges: dict[int, int], catalog: SweepCatalog) -> int:
    """Read every BLOB back in Kafka order."""
    reader = BlobReader(catalog)
    total = 0
    for p, hw in ranges.items():
        records, _end = reader.read(topic, p, 0, hw)
        total += sum(map(len, records))
    return total


def main() -> None:
    parser = common.argument_parser(__doc__)
    common.add_flights_arguments(parser, limit_help="flights to produce (all)")
    args = parser.parse_args()
    broker = resolve_broker()
    try:
        bootstrap = broker.bootstrap_servers
        topic = f"bench.sweep.{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, {topic: (PARTITIONS, 1)})
        codec = StreamCodec(
            "flights", SchemaRepository.load().get("flight"), SchemaRepository.load()
        )
        produced, _ = common.produce_flights(bootstrap, topic, codec, args.limit)
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
        ranges = {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        probe.close()
        rows: dict[str, list[float]] = {
            "consume": [],
            "read only": [],
            "sweep": [],
            "consume again": [],
            "unsweep": [],
        }
        for run in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="floodgate-bench-sweep-") as tmp:
                catalog = SweepCatalog(f"sqlite:///{tmp}/catalog.db")
                folder = Path(tmp) / "blobs"
                folder.mkdir()
                for name in rows:
                    t0 = time.perf_counter()
                    if name == "sweep":
                        n = sweep(bootstrap, topic, ranges, folder, catalog)
                    elif name == "unsweep":
                        n = unsweep(topic, ranges, catalog)
                    elif name == "read only":
                        n = read(bootstrap, topic, ranges)
                    else:
                        n = consume(bootstrap, topic, ranges)
                    elapsed = time.perf_counter() - t0
                    if n != produced:
                        raise RuntimeError(f"{name}: {n} tuples, {produced} produced")
                    rows[name].append(n / elapsed)
                    console.log(f"run {run + 1}/{args.repeat} {name}: {n / elapsed:,.0f} tuples/s")
                catalog.close()
        table = Table(title=f"sweep and unsweep, {produced:,} flights on {PARTITIONS} partitions")
        for column in ("what", "tuples/s (median)", "min-max"):
            table.add_column(column)
        for name, rates in rows.items():
            table.add_row(
                name, f"{statistics.median(rates):,.0f}", f"{min(rates):,.0f}-{max(rates):,.0f}"
            )
        console.print(table)
        ratio_sweep = statistics.median(
            s / c for s, c in zip(rows["sweep"], rows["consume"], strict=True)
        )
        ratio_unsweep = statistics.median(
            u / c for u, c in zip(rows["unsweep"], rows["consume again"], strict=True)
        )
        ratio_write = statistics.median(
            s / r for s, r in zip(rows["sweep"], rows["read only"], strict=True)
        )
        met = {True: "met", False: "NOT met"}
        console.print(
            f"sweep / consume: {ratio_sweep:.2f} (target >= 0.7: {met[ratio_sweep >= 0.7]}); "
            f"unsweep / broker read: {ratio_unsweep:.2f} "
            f"(target >= 1.0: {met[ratio_unsweep >= 1.0]}); "
            f"sweep / the sweeper's read alone: {ratio_write:.2f} (what writing BLOBs costs)"
        )
        info: dict[str, Any] = common.machine()
        console.print(f"machine: {info}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
