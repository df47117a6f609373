"""The Quix Streams side of the throughput comparison, two ways: today's application
(``--mode group-by``: delays per origin per hour, ``group_by`` on the flights topic)
and the best case a Quix user could build (``--mode keyed``: both of Floodgate's
queries over topics keyed for them).

A standalone Quix Streams 3.x application (it does not import Floodgate's ``pipeline``
package, and runs with its own virtualenv, because quixstreams 3.28.1 needs
``confluent-kafka<2.13``). Create that virtualenv, on a fresh machine, from the
repository root:

    python3.11 -m venv bench/.venv-quix && \
        bench/.venv-quix/bin/pip install -r bench/requirements-quix.txt

(``bench/requirements-quix.txt`` pins quixstreams==3.28.1, confluent-kafka==2.12.2,
rocksdict, fastavro and pandas.)

Today's application (``--mode group-by``, the default)
-------------------------------------------------------

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

The best case (``--mode keyed``)
--------------------------------

What a skilled Quix user would build for *both* of Floodgate's queries, given a
producer of their own that can key the flights for Quix. Quix aggregates per message
key, so the key decides the cost: the flights topic is keyed ``carrier|flight|time_hour``
(unique per flight), which is why today's application must repartition (``group_by``:
every flight serialized to JSON, produced to the repartition topic, consumed and
deserialized once more, all in this one Python process).

* ``delays_by_origin_hour`` reads ``--topic``, the flights keyed by ``origin``: no
  repartition.
* ``delays_by_carrier_day`` (per carrier per local day of scheduled departure:
  ``make_date(year, month, day)`` on the Floodgate side) needs a carrier key. The
  user's choices: ``group_by("carrier")`` on the origin-keyed topic (the repartition
  again, for the second query: a JSON write and read of every flight in this
  process), or a second topic, ``--carrier-topic``, the same bytes keyed by
  ``carrier``, written by the producer. The second is the skilled choice: librdkafka
  writes a value already encoded for the first topic in C, at a fraction of the cost
  of a repartition in Quix's Python, and the application reads each topic once. So
  both queries read a topic of their own key, and nothing is repartitioned.
* What is counted: the origin-keyed topic *replaces* the flights topic (the same bytes
  with another key, which the producer would write anyway), so it is produced before
  the run and not timed, as the flights topic is not for today's application. The
  carrier-keyed copy is written only for Quix, so ``bench/bench_flights.py`` times its
  production and adds it to Quix's time.
* Each key's flights come in event-time order (one partition per key, written in
  ``time_hour`` order; the local date grows with ``time_hour``), so the windows need
  no grace (``--grace-ms`` defaults to 0 here; a late tuple would still be counted and
  fail the run), and ``.final()`` emits each window once, when its key's time passes
  its end: one output row per origin-hour and per carrier-day instead of one per
  flight, and the state holds only the windows still open.
* The per-carrier window is 1 day on the local date: the message timestamp is set to
  the UTC midnight of ``(year, month, day)`` (:func:`local_day_ms`), so the window's
  start is that date (written as ``day``, ``YYYY-MM-DD``).
* A final window closes only when a later tuple of the same key arrives, and a
  replay ends: so the producer ends each topic with one *end marker* per key, a
  flight of that key on 2100-01-01 (``END_MS``) with no delays. It closes the key's
  last window; its own window never closes, so it never reaches the output.
  ``--end-markers`` says how many the two topics hold together.
* The output rows go to ``--output-topic`` (as in today's application) and
  ``--carrier-output-topic`` (JSON ``{"carrier", "day", "flights", "departures",
  "mean_dep_delay", "mean_arr_delay"}``, key ``"<carrier>|<day>"``), both checked
  against pandas by ``bench/bench_flights.py``.

It stops once both queries have taken ``--n`` flights through their window step and
every end marker has gone through (so every window has been closed and emitted);
``seconds`` is from the first tuple read (either topic) to then.

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

Common to both
--------------

Output: one JSON line on stdout at the end (quixstreams logs to stderr)::

    {"mode": "group-by" | "keyed", "n": processed (per origin-hour query),
     "seconds": first input tuple -> N-th windowed tuple (keyed: and the last marker),
     "wall_s": Application created -> run() returned (topic set-up, assignment,
     final flush included), "tuples_per_s": n / seconds, "output_topic": O,
     "late_dropped": ..., "input_read": ..., "outputs": ...}

and, keyed, ``"carrier_n"``, ``"end_markers"``, ``"carrier_output_topic"``,
``"carrier_outputs"``. Exit status 0 when n == N (keyed: and carrier_n == N and every
marker came) and no tuple was dropped as late, 1 otherwise.

Run (the broker and a topic already holding the flights)::

    bench/.venv-quix/bin/python bench/quix_flights.py --bootstrap 127.0.0.1:PORT \\
        --topic flights-q --output-topic quix.delays_by_origin_hour --n 336776 \\
        --schema-dir schemas --group quix-bench-1

The best case (the two keyed topics already written, ending with their markers)::

    bench/.venv-quix/bin/python bench/quix_flights.py --mode keyed \\
        --bootstrap 127.0.0.1:PORT --topic flights-by-origin \\
        --carrier-topic flights-by-carrier --output-topic quix.delays_by_origin_hour \\
        --carrier-output-topic quix.delays_by_carrier_day --n 336776 \\
        --end-markers 19 --schema-dir schemas --group quix-bench-2

Read a result back (last update per (origin, hour_start), or per (carrier, day), a
JSON list sorted by that key, on stdout)::

    bench/.venv-quix/bin/python bench/quix_flights.py --read-output \\
        --bootstrap 127.0.0.1:PORT --output-topic quix.delays_by_origin_hour
"""

from __future__ import annotations

import argparse
import calendar
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
from datetime import UTC, datetime, timedelta
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
#: The event time of the best case's end markers (2100-01-01, epoch ms): past every
#: flight's, so a marker closes its key's last windows (see "The best case").
END_MS = calendar.timegm((2100, 1, 1, 0, 0, 0)) * 1000


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


def on_late_counter(stats: dict[str, Any]) -> Any:
    """An ``on_late`` callback counting the tuples a window drops as late in ``stats``."""

    def on_late(*_: Any) -> bool:
        stats["late"] += 1
        return stats["late"] <= 5  # log the first few only

    return on_late


def origin_row(value: dict[str, Any], key: Any, timestamp: int, headers: Any) -> dict:
    """A closed or updated 1-hour window (key: the origin) -> an output row."""
    return {
        "origin": key,
        "hour_start": value["start"],
        "hour_end": value["end"],
        "flights": value["flights"],
        "departures": value["departures"],
        "mean_dep_delay": value["mean_dep_delay"],
        "mean_arr_delay": value["mean_arr_delay"],
    }


def carrier_row(value: dict[str, Any], key: Any, timestamp: int, headers: Any) -> dict:
    """A closed 1-day window (key: the carrier) -> an output row, ``day`` as ISO date."""
    return {
        "carrier": key,
        "day": datetime.fromtimestamp(value["start"] / 1000, UTC).date().isoformat(),
        "flights": value["flights"],
        "departures": value["departures"],
        "mean_dep_delay": value["mean_dep_delay"],
        "mean_arr_delay": value["mean_arr_delay"],
    }


def delay_figures() -> dict[str, Any]:
    """The four aggregations both queries compute, for ``.agg(**...)``."""
    return {
        "flights": Count(),
        "departures": Count("dep_time"),
        "mean_dep_delay": Mean("dep_delay"),
        "mean_arr_delay": Mean("arr_delay"),
    }


def wall_clock(value: Any, key: Any, timestamp: int, headers: Any) -> int:
    """Now, epoch ms: the output rows' Kafka timestamp (see "Timestamps")."""
    return time.time_ns() // 10**6


def build_group_by(app: Any, args: argparse.Namespace, stats: dict[str, Any]) -> None:
    """Today's application: ``group_by("origin")`` on the flights topic, ``.current()``."""
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

    def count_output(row: dict[str, Any]) -> None:
        stats["outputs"] += 1

    sdf = app.dataframe(input_topic)
    sdf = sdf.update(on_input)
    sdf = sdf.group_by("origin")
    sdf = sdf.set_timestamp(lambda value, key, timestamp, headers: value["time_hour"])
    sdf = sdf.update(on_windowed)
    sdf = (
        sdf.tumbling_window(
            timedelta(hours=1),
            grace_ms=args.grace_ms,
            name="origin_hour",
            on_late=on_late_counter(stats),
        )
        .agg(**delay_figures())
        .current()
    )
    sdf = sdf.apply(origin_row, metadata=True)
    sdf = sdf.update(count_output)
    sdf = sdf.set_timestamp(wall_clock)
    sdf.to_topic(output_topic, key=lambda row: f"{row['origin']}|{row['hour_start']}")


#: ``(year, month, day)`` -> epoch ms of that date's UTC midnight (366 dates + 1).
_DAY_MS: dict[tuple[int, int, int], int] = {}


def local_day_ms(value: dict[str, Any]) -> int:
    """The flight's local date of scheduled departure (``year``, ``month``, ``day``) as
    the epoch ms of that date's UTC midnight: a 1-day tumbling window on it groups
    by the local date, as ``make_date(year, month, day)`` does on the Floodgate side."""
    ymd = (value["year"], value["month"], value["day"])
    ms = _DAY_MS.get(ymd)
    if ms is None:
        ms = _DAY_MS[ymd] = calendar.timegm((*ymd, 0, 0, 0)) * 1000
    return ms


def build_keyed(app: Any, args: argparse.Namespace, stats: dict[str, Any]) -> None:
    """The best case: an origin-keyed and a carrier-keyed topic, no repartition,
    ``.final()`` windows, both queries (see "The best case" in the module doc)."""
    deserializer = FlightDeserializer(args.schema_dir)
    by_origin = app.topic(args.topic, value_deserializer=deserializer, key_deserializer="str")
    by_carrier = app.topic(
        args.carrier_topic, value_deserializer=deserializer, key_deserializer="str"
    )
    outputs = [
        app.topic(
            name,
            key_serializer="str",
            value_serializer="json",
            config=TopicConfig(num_partitions=args.output_partitions, replication_factor=1),
        )
        for name in (args.output_topic, args.carrier_output_topic)
    ]

    def on_input(value: dict[str, Any]) -> None:
        if stats["t0"] is None:
            stats["t0"] = time.perf_counter()
        stats["input"] += 1

    def counter(name: str) -> Any:
        def on_windowed(value: dict[str, Any]) -> None:
            if value["time_hour"] >= END_MS:
                stats["markers"] += 1
            else:
                stats[name] += 1
            if (
                stats["windowed"] == args.n
                and stats["carrier_windowed"] == args.n
                and stats["markers"] == args.end_markers
            ):
                stats["t1"] = time.perf_counter()
                app.stop()  # run() finishes this message (it closes the last windows)

        return on_windowed

    def output_counter(name: str) -> Any:
        def count(row: dict[str, Any]) -> None:
            stats[name] += 1

        return count

    on_late = on_late_counter(stats)
    sdf = app.dataframe(by_origin)
    sdf = sdf.update(on_input).update(counter("windowed"))
    sdf = sdf.set_timestamp(lambda value, key, timestamp, headers: value["time_hour"])
    sdf = (
        sdf.tumbling_window(
            timedelta(hours=1), grace_ms=args.grace_ms, name="origin_hour", on_late=on_late
        )
        .agg(**delay_figures())
        .final()
    )
    sdf = sdf.apply(origin_row, metadata=True).update(output_counter("outputs"))
    sdf = sdf.set_timestamp(wall_clock)
    sdf.to_topic(outputs[0], key=lambda row: f"{row['origin']}|{row['hour_start']}")

    cdf = app.dataframe(by_carrier)
    cdf = cdf.update(on_input).update(counter("carrier_windowed"))
    cdf = cdf.set_timestamp(lambda value, key, timestamp, headers: local_day_ms(value))
    cdf = (
        cdf.tumbling_window(
            timedelta(days=1), grace_ms=args.grace_ms, name="carrier_day", on_late=on_late
        )
        .agg(**delay_figures())
        .final()
    )
    cdf = cdf.apply(carrier_row, metadata=True).update(output_counter("carrier_outputs"))
    cdf = cdf.set_timestamp(wall_clock)
    cdf.to_topic(outputs[1], key=lambda row: f"{row['carrier']}|{row['day']}")


def run(args: argparse.Namespace) -> int:
    t_wall0 = time.perf_counter()
    state_dir = tempfile.mkdtemp(prefix="quix-flights-state-")
    stats: dict[str, Any] = {
        "input": 0,
        "windowed": 0,
        "carrier_windowed": 0,
        "markers": 0,
        "late": 0,
        "outputs": 0,
        "carrier_outputs": 0,
        "t0": None,
    }
    try:
        app = Application(
            broker_address=args.bootstrap,
            consumer_group=args.group,
            auto_offset_reset="earliest",
            state_dir=state_dir,
            loglevel=args.loglevel,
        )
        (build_keyed if args.mode == "keyed" else build_group_by)(app, args, stats)
        app.run(timeout=args.idle_timeout, collect=False)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    t_end = time.perf_counter()

    n = stats["windowed"]
    t0 = stats["t0"]
    seconds = (stats.get("t1", t_end) - t0) if t0 is not None else 0.0
    figures = {
        "mode": args.mode,
        "n": n,
        "seconds": round(seconds, 3),
        "wall_s": round(t_end - t_wall0, 3),
        "tuples_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "output_topic": args.output_topic,
        "late_dropped": stats["late"],
        "input_read": stats["input"],
        "outputs": stats["outputs"],
    }
    ok = n == args.n and stats["late"] == 0
    if args.mode == "keyed":
        figures |= {
            "carrier_n": stats["carrier_windowed"],
            "end_markers": stats["markers"],
            "carrier_output_topic": args.carrier_output_topic,
            "carrier_outputs": stats["carrier_outputs"],
        }
        ok = ok and stats["carrier_windowed"] == args.n and stats["markers"] == args.end_markers
    print(json.dumps(figures), flush=True)
    return 0 if ok else 1


def row_key(row: dict[str, Any]) -> tuple[str, Any]:
    """What a reader keeps the last row of: ``(origin, hour_start)`` or ``(carrier, day)``."""
    return (row["origin"], row["hour_start"]) if "origin" in row else (row["carrier"], row["day"])


def read_output(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every row of ``topic``, from the beginning to its end now, last per
    ``(origin, hour_start)`` (or ``(carrier, day)`` for the carrier-day output).

    Returns:
        the rows, sorted by that key.
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
        last: dict[tuple[str, Any], dict[str, Any]] = {}
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: still to read up to {ends}")
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    raise RuntimeError(msg.error())
                row = json.loads(msg.value())
                last[row_key(row)] = row
                p = msg.partition()
                if p in ends and msg.offset() + 1 >= ends[p]:
                    del ends[p]
    finally:
        consumer.close()
    return [last[k] for k in sorted(last)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT")
    parser.add_argument(
        "--mode",
        choices=("group-by", "keyed"),
        default="group-by",
        help="group-by: today's application (group_by on the flights topic, per origin-hour"
        " only); keyed: the best case (topics keyed by origin and by carrier, both queries)",
    )
    parser.add_argument(
        "--topic", help="input topic (single-object encoded flights; keyed by origin if keyed)"
    )
    parser.add_argument("--carrier-topic", help="keyed: the flights keyed by carrier")
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--carrier-output-topic", help="keyed: the per carrier-day output")
    parser.add_argument("--n", type=int, help="stop after this many flights (per query)")
    parser.add_argument(
        "--end-markers",
        type=int,
        default=0,
        help="keyed: end markers in both topics together (one per key)",
    )
    parser.add_argument("--schema-dir", type=Path, default=ROOT / "schemas")
    parser.add_argument("--group", help="consumer group (a fresh one per run)")
    parser.add_argument(
        "--grace-ms",
        type=int,
        help="window grace, ms (default: 366 days for group-by, 0 for keyed)",
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
    if args.mode == "keyed" and not (args.carrier_topic and args.carrier_output_topic):
        parser.error("keyed: --carrier-topic and --carrier-output-topic are required")
    if args.grace_ms is None:
        args.grace_ms = 0 if args.mode == "keyed" else GRACE_MS
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
