"""Benchmark: the whole flights pipeline against Quix Streams.

What is measured, per run, on one embedded broker, with the same data:

* **Floodgate**: the main job as ``make demo`` runs it (:func:`pipeline.demo.run.run_demo`):
  every flight (or ``--limit``) replayed through the back-pressure client
  (``StreamInput.put(block=True)``, 1 000 a put) into a fresh 4-partition input
  topic while the ``flights`` query group of ``conf/flights.toml`` runs (both of its
  queries: per origin per hour *and* per carrier per day), its output stream queues
  read all along by the demo's reception application. Timed from the first tuple
  produced to every tuple processed by both queries and every output tuple read.
* **Quix Streams** (``bench/quix_flights.py``, in its own virtualenv
  ``bench/.venv-quix``, because quixstreams 3.28.1 needs confluent-kafka < 2.13): the
  per-origin-per-hour figures of the *same topic* Floodgate's replay just wrote,
  computed the way a Quix user would (``group_by("origin")``, a 1-hour tumbling
  window on ``time_hour`` with ``Count``/``Mean`` aggregations, every update to an
  output topic). Timed from its first tuple to its last. The flights are already in
  the topic, so Quix pays neither for producing nor for waiting on a producer. This
  is *today's* Quix application ("group-by" below): one of Floodgate's two queries.
* **Quix Streams, best case** (``quix_flights.py --mode keyed``): what a skilled Quix
  user would build for *both* queries when their own producer can key the data for
  Quix: the flights keyed by origin (written *instead of* the flights topic: the same
  bytes with another key, so not timed, like the topic today's application reads)
  and once more keyed by carrier (bytes the producer writes only for Quix's second
  query: timed, and added to Quix's time), each followed by one end marker per key;
  no repartition, 1-hour and 1-day tumbling windows with ``.final()`` and no grace
  (each key's flights arrive in event-time order). Its time: producing the
  carrier-keyed copy + first tuple read to the last window closed. On a broker of its
  own (:func:`run_keyed`), so that the two Quix variants' topics do not weigh on each
  other.

Each run has a broker of its own (see :func:`run_once`), and one more for the best
case; the order of the two (Floodgate + group-by first, or the best case first)
alternates from run to run. Before a run's times count, every output (the latest
row per origin-hour, and per carrier-day where computed) is checked equal to a
pandas computation of the same figures (counts exact, means to 1e-9 relative); a run
that differs fails the script.

Tuples/s = flights / time. The headlines are the medians over runs of Floodgate ÷
Quix group-by and Floodgate ÷ Quix best case (the three of a run share the
machine's state); medians and min-max of each are printed too. Target (against
today's application): >= 5x. One warm-up run of Floodgate (all flights, or
``--warmup N``) is discarded: a query group is a long-running service, and the first
runs of a JVM pay for its JIT compiling Spark's code (:data:`common.WARMUP_FLIGHTS`).

Run: ``.venv/bin/python bench/bench_flights.py [--repeat 3] [--limit N]``.
Results: a table, and JSON in ``bench/out/flights.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import common
from common import ROOT, console
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.demo.flights import flight_table, load_flights
from pipeline.demo.run import run_demo
from pipeline.serde.block import BlockEncoder
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

TARGET_RATIO = 5.0
QUIX_VENV = ROOT / "bench" / ".venv-quix"
QUIX_PYTHON = QUIX_VENV / "bin" / "python"
QUIX_SCRIPT = ROOT / "bench" / "quix_flights.py"
QUIX_REQUIREMENTS = ROOT / "bench" / "requirements-quix.txt"
QUIX_TIMEOUT_S = 1800.0
#: Partitions of the best case's keyed topics: as many as Floodgate's input topic.
KEYED_PARTITIONS = 4
#: The best case's producer, tuned for throughput on top of the same delivery
#: guarantees as Floodgate's back-pressure client (idempotent, ``acks=all``); a key's
#: flights go to one partition (murmur2 of the key), in the order produced.
KEYED_PRODUCER: dict[str, Any] = common.THROUGHPUT_PRODUCER
#: The end markers' event time and local date: 2100-01-01 (quix_flights.END_MS).
END_MS = 4_102_444_800_000


def ensure_quix_venv() -> None:
    """Create ``bench/.venv-quix`` from ``bench/requirements-quix.txt`` if it is missing."""
    if QUIX_PYTHON.exists():
        return
    console.log(f"creating {QUIX_VENV} (quixstreams and its pins)")
    subprocess.run([sys.executable, "-m", "venv", str(QUIX_VENV)], check=True)
    subprocess.run(
        [str(QUIX_PYTHON), "-m", "pip", "install", "-q", "-r", str(QUIX_REQUIREMENTS)],
        check=True,
    )


@dataclass
class Run:
    """One run: Floodgate over the flights, then Quix Streams (group-by) over the same
    topic; and the Quix best case on a broker of its own.

    Attributes:
        n: flights.
        floodgate_s / floodgate_blocked_s: Floodgate's time, and its replay's waits
            for room in the input queue (s).
        quix_s / quix_wall_s: group-by: first tuple to last; process start to exit (s).
        keyed_produce_s: best case: producing the carrier-keyed copy, first ``produce``
            to ``flush`` returned (s), counted in its time.
        quix_keyed_s / quix_keyed_wall_s: best case: Quix's first tuple to the last
            window closed; process start to exit (s).
        keyed_first: the best case ran before Floodgate in this run.
        started_quiet: the machine was quiet before Floodgate's run.
    """

    n: int
    floodgate_s: float
    floodgate_blocked_s: float
    quix_s: float
    quix_wall_s: float
    keyed_produce_s: float
    quix_keyed_s: float
    quix_keyed_wall_s: float
    keyed_first: bool
    started_quiet: bool

    @property
    def floodgate_tuples_per_s(self) -> float:
        return self.n / self.floodgate_s

    @property
    def quix_tuples_per_s(self) -> float:
        return self.n / self.quix_s

    @property
    def quix_keyed_tuples_per_s(self) -> float:
        return self.n / (self.keyed_produce_s + self.quix_keyed_s)

    @property
    def ratio(self) -> float:
        """Floodgate ÷ Quix group-by."""
        return self.floodgate_tuples_per_s / self.quix_tuples_per_s

    @property
    def ratio_keyed(self) -> float:
        """Floodgate ÷ Quix best case."""
        return self.floodgate_tuples_per_s / self.quix_keyed_tuples_per_s


def quix_env() -> dict[str, str]:
    """This environment without the project's virtualenv (Quix runs in its own)."""
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}


def read_quix_output(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The latest row per key (origin-hour or carrier-day) of a Quix output topic."""
    rows = subprocess.run(
        [
            str(QUIX_PYTHON),
            str(QUIX_SCRIPT),
            "--bootstrap",
            bootstrap,
            "--output-topic",
            topic,
            "--read-output",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=quix_env(),
        check=True,
    )
    return json.loads(rows.stdout)


def run_quix(
    bootstrap: str, topic: str, n: int, *extra: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``bench/quix_flights.py`` over ``topic`` (``extra``: more of its arguments);
    return its figures (its JSON line) and its per-origin-hour output (the latest row
    per origin-hour)."""
    run = uuid.uuid4().hex[:8]
    output = f"bench.quix.delays_by_origin_hour.{run}"
    done = subprocess.run(
        [
            str(QUIX_PYTHON),
            str(QUIX_SCRIPT),
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--output-topic",
            output,
            "--n",
            str(n),
            "--group",
            f"bench-quix-{run}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=QUIX_TIMEOUT_S,
        env=quix_env(),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"quix_flights.py failed ({done.returncode}): {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return figures, read_quix_output(bootstrap, output)


# --------------------------------------------------------------------------- the best case


@dataclass
class KeyedFlights:
    """The best case's input, encoded once per run (outside every timing).

    Attributes:
        values: the flights as single-object Avro (the bytes Floodgate's replay writes),
            in event-time order.
        origins / carriers: each flight's origin / carrier, the Kafka keys (UTF-8).
        origin_markers / carrier_markers: ``(key, value)`` of the end markers, one per
            origin / carrier: a flight of that key on 2100-01-01, no delays.
    """

    values: list[bytes]
    origins: list[bytes]
    carriers: list[bytes]
    origin_markers: list[tuple[bytes, bytes]]
    carrier_markers: list[tuple[bytes, bytes]]

    @classmethod
    def load(cls, limit: int | None) -> KeyedFlights:
        df = load_flights(limit)
        schemas = SchemaRepository.load()
        encoder = BlockEncoder(StreamCodec("flights", schemas.get("flight"), schemas))

        def encode(frame: Any) -> list[bytes]:
            values = encoder.encode(flight_table(frame))
            if values is None:
                raise RuntimeError("the block encoder refused the flights table")
            return values

        def markers(column: str) -> list[tuple[bytes, bytes]]:
            rows = df.drop_duplicates(column).sort_values(column).copy()
            rows[["year", "month", "day", "hour", "minute"]] = (2100, 1, 1, 0, 0)
            rows[["dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"]] = None
            rows["time_hour_ms"] = END_MS
            keys = [str(k).encode() for k in rows[column]]
            return list(zip(keys, encode(rows.reset_index(drop=True)), strict=True))

        return cls(
            values=encode(df),
            origins=[o.encode() for o in df["origin"]],
            carriers=[c.encode() for c in df["carrier"]],
            origin_markers=markers("origin"),
            carrier_markers=markers("carrier"),
        )


def produce_keyed(
    bootstrap: str, topic: str, values: list[bytes], keys: list[bytes], markers: list
) -> float:
    """Create ``topic`` (:data:`KEYED_PARTITIONS`), produce ``values`` keyed by ``keys``
    then ``markers``, flush; return the seconds from the first ``produce`` to ``flush``
    returned."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, KEYED_PARTITIONS, 1)]).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, **KEYED_PRODUCER})
    start = time.perf_counter()
    for key, value in zip(keys, values, strict=True):
        try:
            producer.produce(topic, value, key)
        except BufferError:
            common.produce_waiting(producer, topic, key, value)
    for key, value in markers:
        common.produce_waiting(producer, topic, key, value)
    if producer.flush(common.PRODUCE_TIMEOUT_S) != 0:
        raise RuntimeError(f"{topic}: not every flight was acknowledged")
    return time.perf_counter() - start


def run_keyed(
    engine: str, flights: KeyedFlights, expected: dict[Any, Any], expected_days: dict[Any, Any]
) -> tuple[float, dict[str, Any]]:
    """The best case on a broker of its own: the origin-keyed topic (not timed: it
    replaces the flights topic), the carrier-keyed copy (timed), then Quix over both;
    both outputs checked against pandas. Returns ``(carrier copy's produce seconds,
    Quix's figures)``."""
    run = uuid.uuid4().hex[:8]
    by_origin, by_carrier = f"flights-by-origin-{run}", f"flights-by-carrier-{run}"
    carrier_output = f"bench.quix.delays_by_carrier_day.{run}"
    n = len(flights.values)
    with common.fresh_broker(engine) as bootstrap:
        produce_keyed(bootstrap, by_origin, flights.values, flights.origins, flights.origin_markers)
        common.wait_until_quiet(None)
        produce_s = produce_keyed(
            bootstrap, by_carrier, flights.values, flights.carriers, flights.carrier_markers
        )
        common.wait_until_quiet(None)
        quix, rows = run_quix(
            bootstrap,
            by_origin,
            n,
            "--mode",
            "keyed",
            "--carrier-topic",
            by_carrier,
            "--carrier-output-topic",
            carrier_output,
            "--end-markers",
            str(len(flights.origin_markers) + len(flights.carrier_markers)),
        )
        days = read_quix_output(bootstrap, carrier_output)
    if quix["n"] != n or quix["carrier_n"] != n:
        raise RuntimeError(f"Quix Streams (best case) processed {quix['n']}/{quix['carrier_n']}")
    common.check_origin_hours("Quix Streams (best case)", rows, expected)
    check_carrier_days("Quix Streams (best case)", days, expected_days)
    return produce_s, quix


def expected_carrier_days(limit: int | None) -> dict[tuple[str, str], tuple[Any, ...]]:
    """The per-carrier-per-day figures of the first ``limit`` flights, by pandas.

    Returns:
        ``{(carrier, local date as "YYYY-MM-DD"): (flights, departures,
        mean_dep_delay, mean_arr_delay)}``, a mean ``None`` where no flight has it.
    """
    df = load_flights(limit)
    out = df.groupby(["carrier", "year", "month", "day"]).agg(
        flights=("flight", "size"),
        departures=("dep_time", "count"),
        mean_dep_delay=("dep_delay", "mean"),
        mean_arr_delay=("arr_delay", "mean"),
    )
    return {
        (str(c), f"{y:04d}-{m:02d}-{d:02d}"): tuple(
            None if isinstance(v, float) and v != v else v for v in row
        )
        for (c, y, m, d), row in zip(out.index, out.itertuples(index=False), strict=True)
    }


def check_carrier_days(
    who: str, rows: list[dict[str, Any]], expected: dict[tuple[str, str], tuple[Any, ...]]
) -> None:
    """Raise ``AssertionError`` unless ``rows`` (latest row per carrier-day, ``day`` a
    date or an ISO string) hold exactly the pandas figures: counts equal, means within
    1e-9 relative."""
    got = {
        (str(r["carrier"]), str(r["day"])[:10]): tuple(r[c] for c in common.FIGURE_COLUMNS)
        for r in rows
    }
    if got.keys() != expected.keys():
        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        raise AssertionError(
            f"{who}: {len(missing)} carrier-days missing (e.g. {sorted(missing)[:3]}), "
            f"{len(extra)} unexpected (e.g. {sorted(extra)[:3]})"
        )
    for key, want in expected.items():
        for column, g, w in zip(common.FIGURE_COLUMNS, got[key], want, strict=True):
            if not (
                g is None if w is None else g is not None and abs(g - w) <= 1e-9 * max(1.0, abs(w))
            ):
                raise AssertionError(f"{who}: {key} {column} = {g}, pandas says {w}")


# --------------------------------------------------------------------------- a run


def run_once(
    spark: Any,
    limit: int | None,
    expected: dict[Any, Any],
    expected_days: dict[Any, Any],
    flights: KeyedFlights,
    engine: str,
    keyed_first: bool,
) -> Run:
    """Floodgate, then Quix Streams (group-by) over the topic Floodgate's replay wrote,
    on a broker of their own (:func:`common.fresh_broker` says why); and the best case
    (:func:`run_keyed`), before them if ``keyed_first``, else after."""
    if keyed_first:
        keyed_produce_s, keyed = run_keyed(engine, flights, expected, expected_days)
    with common.fresh_broker(engine) as bootstrap:
        quiet = common.wait_until_quiet(None)
        result = run_demo(bootstrap_servers=bootstrap, limit=limit, spark=spark)
        if not result.balanced:
            raise RuntimeError(f"Floodgate: not every flight was processed: {result.processed}")
        common.check_origin_hours("Floodgate", result.origin_hours, expected)
        check_carrier_days("Floodgate", result.carrier_days, expected_days)
        common.wait_until_quiet(None)
        quix, rows = run_quix(bootstrap, result.input_topic, result.produced)
    if quix["n"] != result.produced:
        raise RuntimeError(f"Quix Streams processed {quix['n']} of {result.produced} flights")
    common.check_origin_hours("Quix Streams", rows, expected)
    if not keyed_first:
        common.wait_until_quiet(None)
        keyed_produce_s, keyed = run_keyed(engine, flights, expected, expected_days)
    return Run(
        n=result.produced,
        floodgate_s=result.seconds,
        floodgate_blocked_s=result.blocked_s,
        quix_s=quix["seconds"],
        quix_wall_s=quix["wall_s"],
        keyed_produce_s=round(keyed_produce_s, 3),
        quix_keyed_s=keyed["seconds"],
        quix_keyed_wall_s=keyed["wall_s"],
        keyed_first=keyed_first,
        started_quiet=quiet.quiet,
    )


def main() -> None:
    parser = common.argument_parser(__doc__, "flights.json")
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    args = parser.parse_args()
    ensure_quix_venv()
    expected = common.expected_origin_hours(args.limit)
    expected_days = expected_carrier_days(args.limit)
    flights = KeyedFlights.load(args.limit)
    spark = common.start_spark("floodgate-bench-flights")
    runs: list[Run] = []
    try:
        with common.fresh_broker(args.engine) as bootstrap:
            warm = run_demo(bootstrap_servers=bootstrap, limit=args.warmup, spark=spark)
        console.log(f"warm-up (discarded): {warm.produced / warm.seconds:,.0f} tuples/s")
        for r in range(args.repeat):
            run = run_once(
                spark, args.limit, expected, expected_days, flights, args.engine, r % 2 == 1
            )
            runs.append(run)
            console.log(
                f"run {r + 1}/{args.repeat}{' (best case first)' if run.keyed_first else ''}: "
                f"Floodgate {run.floodgate_tuples_per_s:,.0f} tuples/s ({run.floodgate_s:.1f} s, "
                f"producer blocked {run.floodgate_blocked_s:.1f} s); Quix group-by "
                f"{run.quix_tuples_per_s:,.0f} tuples/s ({run.quix_s:.1f} s): {run.ratio:.2f}x; "
                f"Quix best case {run.quix_keyed_tuples_per_s:,.0f} tuples/s "
                f"({run.keyed_produce_s:.1f} s carrier copy + {run.quix_keyed_s:.1f} s): "
                f"{run.ratio_keyed:.2f}x; all equal to pandas"
            )
        java_versions = common.versions(spark)
    finally:
        spark.stop()

    fg = [r.floodgate_tuples_per_s for r in runs]
    qx = [r.quix_tuples_per_s for r in runs]
    qk = [r.quix_keyed_tuples_per_s for r in runs]
    ratio = statistics.median(r.ratio for r in runs)
    ratio_keyed = statistics.median(r.ratio_keyed for r in runs)
    n = runs[0].n
    console.print(
        common.rates_table(
            f"flights end to end: Floodgate vs Quix Streams ({n:,} flights)",
            {
                "Floodgate (replay + both queries + reception)": fg,
                "Quix group-by (per origin-hour, pre-produced)": qx,
                "Quix best case (both queries, keyed topics, final)": qk,
            },
        )
    )
    for name, values, median in (
        ("Quix group-by", [r.ratio for r in runs], ratio),
        ("Quix best case", [r.ratio_keyed for r in runs], ratio_keyed),
    ):
        console.print(
            f"Floodgate / {name} per run: "
            + " ".join(f"{v:.2f}" for v in values)
            + f"; median {median:.2f}x ({min(values):.2f}-{max(values):.2f})"
        )
    console.print(
        f"target Floodgate >= {TARGET_RATIO:.0f}x Quix Streams (group-by): "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'} ({ratio:.2f}x)"
    )
    fields = common.ratio_fields(
        runs,
        "floodgate_tuples_per_s",
        "quix_tuples_per_s",
        "quix_keyed_tuples_per_s",
        target=TARGET_RATIO,
    )
    for run_fields, run in zip(fields["runs"], runs, strict=True):
        run_fields["ratio_keyed"] = run.ratio_keyed
    common.write_results(
        args.json,
        "flights end to end: Floodgate vs Quix Streams (group-by and best case)",
        engine=args.engine,
        versions=java_versions,
        n=n,
        **fields,
        median_ratio_keyed=round(ratio_keyed, 3),
        median_tuples_per_s={
            "floodgate": round(statistics.median(fg), 1),
            "quix_group_by": round(statistics.median(qx), 1),
            "quix_best_case": round(statistics.median(qk), 1),
        },
    )


if __name__ == "__main__":
    main()
