"""The Quix Streams side of the throughput comparison: delays per origin per hour.

A standalone Quix Streams 3.x application (it does not import Floodgate's ``pipeline``
package, and runs with its own virtualenv, because quixstreams 3.28.1 needs
``confluent-kafka<2.13``). Create that virtualenv, on a fresh machine, from the
repository root:

    python3.11 -m venv bench/.venv-quix && \
        bench/.venv-quix/bin/pip install -r bench/requirements-quix.txt

(``bench/requirements-quix.txt`` pins quixstreams==3.28.1, confluent-kafka==2.12.2,
rocksdict, fastavro and pandas.)

What it computes, the same as the ``delays_by_origin_hour`` query of
``conf/flights.toml``: per origin airport per hour of ``time_hour`` (the event time,
the scheduled departure hour, epoch ms), ``flights`` = count(*), ``departures`` =
count of non-null ``dep_time``, ``mean_dep_delay`` / ``mean_arr_delay`` = mean of the
non-null ``dep_delay`` / ``arr_delay`` (null if none).

How, as a Quix user would write it:

* the input topic carries Avro *single-object encoding* (``C3 01``, the 8-byte
  little-endian CRC-64-AVRO fingerprint of the writer schema, the Avro binary body of
  ``schemas/flight.avsc``); :class:`FlightDeserializer` checks the 10-byte header
  against the flight schema's and decodes the body with ``fastavro.schemaless_reader``
  (logical types stripped, so ``time_hour`` comes out as epoch ms, as on the
  Floodgate side);
* ``sdf.group_by("origin")`` re-keys by origin through the internal topic
  ``repartition__<group>--<topic>--origin`` (JSON, as many partitions as the input,
  the input topic's retention);
* ``set_timestamp`` then makes ``time_hour`` the message timestamp, which the window
  uses (not a ``timestamp_extractor`` on the input topic: see "Timestamps" below);
* ``tumbling_window(1 h, grace --grace-ms)`` with ``.agg(Count, Count("dep_time"),
  Mean("dep_delay"), Mean("arr_delay"))`` and ``.current()``: every update of a window
  is emitted (a reader keeps the last one per (origin, hour_start), like Floodgate's
  update mode); the window state lives in RocksDB in a fresh temporary state directory
  and is backed by a changelog topic (Quix's default);
* each update goes to ``--output-topic`` as JSON
  ``{"origin", "hour_start", "hour_end", "flights", "departures", "mean_dep_delay",
  "mean_arr_delay"}`` (hour_start/hour_end in epoch ms), Kafka key
  ``"<origin>|<hour_start>"``.

It stops once ``--n`` tuples have gone through the window step (counted after the
repartition, so every one of them has been read twice and aggregated): the counting
``update`` calls ``Application.stop()``, and ``run()`` then commits its checkpoint, which
flushes the producer, before it returns. ``run(timeout=--idle-timeout)`` is a safety
net: it stops the application when no message has arrived for that long (plus 60 s at
start, quixstreams' own allowance for the first assignment). Tuples the window drops
as late (older than the key's latest timestamp minus the grace) are counted through
``on_late`` and reported; they must be 0.

The grace period, and why it is not Floodgate's 2 hours: a Quix window closes per key
on the latest timestamp that key has seen, message by message, and the consumer hands
over the input partitions' backlog chunk by chunk (librdkafka's per-partition fetch
queues, whole producer batches at least, up to a whole partition's backlog), so
on a replay from the earliest offset one origin's time runs hundreds of hours ahead in
one input partition before the next partition's older flights arrive. With 2 hours of
grace about three quarters of the flights are dropped as late (measured: 14 864 of the
first 20 000). Quix has no cross-partition watermark (its time-aligned reads, used by
joins and ``concat``, align only partitions of the same number across topics), and
smaller fetches cannot help below one producer batch, so the default grace covers the
whole replay (366 days): every flight is counted, windows stay in state until the run
ends (19 486 origin-hours for all flights, small), and every update is still emitted at once.
Floodgate's Spark side needs a smaller allowance: its watermark is the maximum event
time over a whole micro-batch read from every partition, so only the skew between the
partitions' heads when a micro-batch is planned counts (``bench/partition_skew.py``:
up to 98 hours in flowing replays, 1 055 when the broker fell behind one producer
batch; ``conf/flights.toml`` gives 60 days).
``--grace-ms 7200000`` gives the 2-hour setting (and its drops) back.

Timestamps: Quix writes every message with the timestamp of the message it comes
from (the repartitioned flight, the window's start for a window result). Stamped with
``time_hour`` (2013), they are older than any time-based retention, and the broker
deletes them as soon as it enforces it: noida-db, with the Kafka default
``retention.ms`` of 7 days that every topic gets here (the repartition topic copies the
input's), emptied the output topic within a minute of a 20 000-flight test run (log
start offset = end offset), and can do the same to the repartition topic before it
is read. So the event time is set after the repartition (the repartitioned messages
keep the input's Kafka timestamp, the time they were produced) and the output rows
are stamped with the wall-clock time they are written; ``hour_start`` carries the
window.

Output: one JSON line on stdout at the end (quixstreams logs to stderr)::

    {"n": processed, "seconds": first input tuple -> N-th windowed tuple,
     "wall_s": Application created -> run() returned (topic set-up, assignment,
     final flush included), "tuples_per_s": n / seconds, "output_topic": O,
     "late_dropped": ..., "input_read": ..., "outputs": ...}

Exit status 0 when n == N and no tuple was dropped as late, 1 otherwise.

Run (the broker and a topic already holding the flights)::

    bench/.venv-quix/bin/python bench/quix_flights.py --bootstrap 127.0.0.1:PORT \\
        --topic flights-q --output-topic quix.delays_by_origin_hour --n 336776 \\
        --schema-dir schemas --group quix-bench-1

Read the result back (last update per (origin, hour_start), a JSON list sorted by
(origin, hour_start), on stdout)::

    bench/.venv-quix/bin/python bench/quix_flights.py --read-output \\
        --bootstrap 127.0.0.1:PORT --output-topic quix.delays_by_origin_hour
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import shutil
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, to_parsing_canonical_form

# authlib (a quixstreams dependency, for Quix Cloud) warns about httpx when quixstreams
# is imported, and its import puts an "always" filter in front: let it, then ignore all.
with warnings.catch_warnings():
    with contextlib.suppress(ImportError):
        import authlib.deprecate  # noqa: F401
    warnings.simplefilter("ignore")
    from quixstreams import Application
from quixstreams.dataframe.windows import Count, Mean
from quixstreams.models import TopicConfig
from quixstreams.models.serializers import Deserializer

ROOT = Path(__file__).resolve().parents[1]
#: The two marker bytes of Avro single-object encoding.
MAGIC = b"\xc3\x01"
HEADER_SIZE = 10
HOUR_MS = 3_600_000
#: Covers a whole year's replay: see the module doc on why not 2 hours.
GRACE_MS = 366 * 24 * HOUR_MS


def strip_logical_types(schema: Any) -> Any:
    """A copy of ``schema`` without ``logicalType`` (same binary layout; timestamps as ints)."""
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [strip_logical_types(v) for v in schema]
    return schema


class FlightDeserializer(Deserializer):
    """Avro single-object encoded ``flight`` tuples -> dicts (``time_hour`` as epoch ms)."""

    def __init__(self, schema_dir: Path) -> None:
        super().__init__()
        raw = json.loads((Path(schema_dir) / "flight.avsc").read_text())
        canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(raw)))
        # fastavro gives the CRC-64-AVRO fingerprint's bytes little-endian, as hex.
        self.header = MAGIC + bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        self.schema = parse_schema(strip_logical_types(raw))

    def __call__(self, value: bytes, ctx: Any) -> dict[str, Any]:
        if value[:HEADER_SIZE] != self.header:
            raise ValueError(f"not a single-object encoded flight: header {value[:10].hex()}")
        buf = io.BytesIO(value)
        buf.seek(HEADER_SIZE)
        return schemaless_reader(buf, self.schema, None)  # type: ignore[return-value]


def run(args: argparse.Namespace) -> int:
    t_wall0 = time.perf_counter()
    state_dir = tempfile.mkdtemp(prefix="quix-flights-state-")
    stats: dict[str, Any] = {"input": 0, "windowed": 0, "late": 0, "outputs": 0, "t0": None}
    try:
        app = Application(
            broker_address=args.bootstrap,
            consumer_group=args.group,
            auto_offset_reset="earliest",
            state_dir=state_dir,
            loglevel=args.loglevel,
        )
        input_topic = app.topic(
            args.topic,
            value_deserializer=FlightDeserializer(args.schema_dir),
            key_deserializer="bytes",
        )
        output_topic = app.topic(
            args.output_topic,
            key_serializer="str",
            value_serializer="json",
            config=TopicConfig(num_partitions=args.output_partitions, replication_factor=1),
        )

        def on_input(value: dict[str, Any]) -> None:
            if stats["t0"] is None:
                stats["t0"] = time.perf_counter()
            stats["input"] += 1

        def on_windowed(value: dict[str, Any]) -> None:
            stats["windowed"] += 1
            if stats["windowed"] == args.n:
                stats["t1"] = time.perf_counter()
                app.stop()  # run() finishes this message, commits (flushes) and returns

        def on_late(*_: Any) -> bool:
            stats["late"] += 1
            return stats["late"] <= 5  # log the first few only

        def to_row(value: dict[str, Any], key: Any, timestamp: int, headers: Any) -> dict:
            stats["outputs"] += 1
            return {
                "origin": key,
                "hour_start": value["start"],
                "hour_end": value["end"],
                "flights": value["flights"],
                "departures": value["departures"],
                "mean_dep_delay": value["mean_dep_delay"],
                "mean_arr_delay": value["mean_arr_delay"],
            }

        sdf = app.dataframe(input_topic)
        sdf = sdf.update(on_input)
        sdf = sdf.group_by("origin")
        sdf = sdf.set_timestamp(lambda value, key, timestamp, headers: value["time_hour"])
        sdf = sdf.update(on_windowed)
        sdf = (
            sdf.tumbling_window(
                timedelta(hours=1), grace_ms=args.grace_ms, name="origin_hour", on_late=on_late
            )
            .agg(
                flights=Count(),
                departures=Count("dep_time"),
                mean_dep_delay=Mean("dep_delay"),
                mean_arr_delay=Mean("arr_delay"),
            )
            .current()
        )
        sdf = sdf.apply(to_row, metadata=True)
        sdf = sdf.set_timestamp(lambda value, key, timestamp, headers: time.time_ns() // 10**6)
        sdf.to_topic(output_topic, key=lambda row: f"{row['origin']}|{row['hour_start']}")

        app.run(timeout=args.idle_timeout, collect=False)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    t_end = time.perf_counter()

    n = stats["windowed"]
    t0 = stats["t0"]
    seconds = (stats.get("t1", t_end) - t0) if t0 is not None else 0.0
    print(
        json.dumps(
            {
                "n": n,
                "seconds": round(seconds, 3),
                "wall_s": round(t_end - t_wall0, 3),
                "tuples_per_s": round(n / seconds, 1) if seconds > 0 else None,
                "output_topic": args.output_topic,
                "late_dropped": stats["late"],
                "input_read": stats["input"],
                "outputs": stats["outputs"],
            }
        ),
        flush=True,
    )
    return 0 if n == args.n and stats["late"] == 0 else 1


def read_output(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every row of ``topic``, from the beginning to its end now, last per (origin, hour_start).

    Returns:
        the rows, sorted by (origin, hour_start).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"quix-flights-reader-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])  # from the beginning
        last: dict[tuple[str, int], dict[str, Any]] = {}
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: still to read up to {ends}")
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    raise RuntimeError(msg.error())
                row = json.loads(msg.value())
                last[(row["origin"], row["hour_start"])] = row
                p = msg.partition()
                if p in ends and msg.offset() + 1 >= ends[p]:
                    del ends[p]
    finally:
        consumer.close()
    return [last[k] for k in sorted(last)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT")
    parser.add_argument("--topic", help="input topic (single-object encoded flights)")
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--n", type=int, help="stop after this many tuples")
    parser.add_argument("--schema-dir", type=Path, default=ROOT / "schemas")
    parser.add_argument("--group", help="consumer group (a fresh one per run)")
    parser.add_argument(
        "--grace-ms", type=int, default=GRACE_MS, help="window grace (default 366 days)"
    )
    parser.add_argument("--output-partitions", type=int, default=1)
    parser.add_argument(
        "--idle-timeout", type=float, default=30.0, help="stop when no message came for this long"
    )
    parser.add_argument("--loglevel", default="WARNING", help="quixstreams log level (stderr)")
    parser.add_argument(
        "--read-output",
        action="store_true",
        help="print the last row per (origin, hour_start) of --output-topic as a JSON list",
    )
    args = parser.parse_args(argv)
    if args.read_output:
        json.dump(read_output(args.bootstrap, args.output_topic), sys.stdout)
        sys.stdout.write("\n")
        return 0
    if not (args.topic and args.n and args.group):
        parser.error("--topic, --n and --group are required unless --read-output")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
