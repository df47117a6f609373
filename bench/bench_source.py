"""Throughput of the ``floodgate_kafka`` Spark source against a plain consumer.

What it measures: tuples per second read by Floodgate's Spark streaming source
(``format("floodgate_kafka")``, on the JVM, in a ``local[2]`` SparkSession
from :func:`pipeline.spark.session.build_spark_session`) reading every flight of
a 4-partition topic into Spark's ``noop`` sink with ``Trigger.AvailableNow``.
The time runs from ``writeStream.start()`` to the end of ``awaitTermination()``
(query start-up, planning, reading, decoding, Arrow conversion, Spark), and the
rows are counted from ``query.recentProgress`` (``numInputRows``), which must
equal the number of flights produced. Two variants: one micro-batch for the
whole topic (no ``maxRowsPerTrigger``) and ``maxRowsPerTrigger=60000`` (six
micro-batches for all flights), which shows the cost of micro-batching. The
headline figure is that wall-clock rate; the Spark table adds the rate within
triggers (tuples / sum of ``durationMs.triggerExecution``), which leaves out the
query's start-up and shut-down that a long-running stream pays once.

The baseline, measured in the same script against the same topic: one Python
process with a confluent-kafka ``Consumer`` assigned to every partition from
the beginning, looping on ``consume(num_messages=10000)`` (fewer for the last
call, as the source does: ``consume`` waits out its timeout when fewer than
``num_messages`` arrive, which would add up to a second) and decoding each
tuple with :meth:`pipeline.serde.codec.StreamCodec.decode` (``logical=False``), the
decode the source itself runs, so the ratio is about the pipeline around it.
The target is a ratio source/baseline >= 1.0 on this 2-core machine: the source costs
no more than reading the topic with a plain consumer and decoding it.

Diagnostics (not part of the ratio), to show where the time goes:

* ``consume only``: the baseline's loop without decoding;
* ``baseline tuned``: the baseline with ``queued.min.messages=10000``, the
  setting the source's readers use (see ``FETCH_TUNING``), so the baseline is
  not the only one left with librdkafka's default.

Only the two source variants count for the target, against the plain baseline.

Set-up: an embedded ``noida-db`` broker (stopped at the end) unless ``--bootstrap``
names a cluster; a new topic ``bench.flights.<id>`` with 4 partitions; all flights
(``--limit`` for fewer) produced once, in event-time order, through the
back-pressure client with the flights stream's key (:func:`produce_flights`).
The broker stays busy for 4-6 s after a burst (noida-db rewrites its data file), so
before the first and every timed run the script waits until the embedded broker's
process uses under 5 % of a core over one second; with ``--bootstrap`` it cannot see the
broker and sleeps ``--settle-s`` (default 6 s) after producing instead. The machine,
too, must be quiet (under 15 % of its cores busy over that second: another engineer's
test run would take CPU from the run). The wait lasts at most 60 s; a run that starts
without quiet is flagged ``started_quiet: false`` in the JSON and marked ``*`` in the
table.

Spark warm-up: the first job of a session costs 6-8 s more than later ones
(measured on the 2-core development machine), so one full run of the single-batch
variant is made and discarded before any timed source run (reported as
``cold_run_discarded`` in the JSON and as "cold run s" in the table).
Every run uses a new checkpoint directory, so every run reads all the flights.

Each timed figure is the median of ``--repeat`` runs (default 3). Benchmarks are
never timed tests: figures depend on the machine and on what else runs on it, so
the script reports them (a rich table, and JSON in ``bench/out/source.json``,
git-ignored) and only fails when a run does not read every tuple.

Run::

    .venv/bin/python bench/bench_source.py            # all 336 776 flights, 3 repeats
    .venv/bin/python bench/bench_source.py --limit 50000 --repeat 1
    make bench ARGS="--repeat 5"
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import common
from common import console
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from rich.table import Table

from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

log = logging.getLogger("bench.source")

#: Partitions of the benchmark topic (the flights input stream's count in conf/flights.toml).
TOPIC_PARTITIONS = 4
#: ``consume(num_messages=...)`` of the baseline; the source reads with the same.
CONSUME_BATCH = 10_000
#: The micro-batched variant's ``maxRowsPerTrigger``.
DEFAULT_MAX_ROWS_PER_TRIGGER = 60_000
#: librdkafka's consumer prefetches until ``queued.min.messages`` (default 100 000) are
#: queued. A range that fits (84 000 flights per partition here) is fetched whole, and
#: the fetcher then polls the log end; noida-db answers such a fetch at once instead of
#: holding it for ``fetch.wait.max.ms``, so broker and client spin while Python decodes.
#: ``baseline tuned`` sets 10 000, as the removed Python source's readers did.
FETCH_TUNING = {"queued.min.messages": "10000"}
TUNING_LABEL = "queued.min.messages=10000"
#: The target for source / baseline.
TARGET_RATIO = 1.0
#: A run that has not finished after this long fails the benchmark.
RUN_TIMEOUT_S = 900.0


# --------------------------------------------------------------------------- results


@dataclass
class Run:
    """One timed run."""

    tuples: int
    seconds: float
    machine_busy: float
    broker_cpu_s: float | None
    started_quiet: bool
    waited_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "tuples_per_s": round(self.tuples_per_s, 1)}


@dataclass
class Figure:
    """The runs of one measured thing and their median."""

    label: str
    runs: list[Run]
    cold: Run | None = None

    @property
    def median(self) -> float:
        return statistics.median(r.tuples_per_s for r in self.runs)

    @property
    def median_run(self) -> Run:
        """The run whose rate is the median (the lower middle one for an even count)."""
        ordered = sorted(self.runs, key=lambda r: r.tuples_per_s)
        return ordered[(len(ordered) - 1) // 2]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "median_tuples_per_s": round(self.median, 1),
            "runs": [r.as_json() for r in self.runs],
        }
        if self.cold is not None:
            out["cold_run_discarded"] = self.cold.as_json()
        return out


def say(what: str, run: Run, extra: str = "") -> None:
    """Print one run's figure as it comes."""
    flag = "" if run.started_quiet else " [red](machine was not quiet)[/red]"
    console.print(f"  {what}: {run.tuples_per_s:,.0f} tuples/s ({run.seconds:.2f} s{extra}){flag}")


# --------------------------------------------------------------------------- set-up


def topic_high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: high watermark}`` of ``topic``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-meta-{uuid.uuid4().hex[:8]}"}
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
    finally:
        consumer.close()


# --------------------------------------------------------------------------- baseline


def consume_all(
    bootstrap: str,
    topic: str,
    n: int,
    *,
    handle: Callable[[bytes | None], Any] | None,
    client: dict[str, Any] | None = None,
) -> int:
    """Read the ``n`` tuples of ``topic`` with one consumer, calling ``handle`` on each value.

    Args:
        client: extra librdkafka properties (none for the baseline).

    Returns:
        Tuples read (always ``n``).

    Raises:
        RuntimeError: a message error, or not all ``n`` read within ``RUN_TIMEOUT_S``.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-baseline-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",  # as the source reads
            **(client or {}),
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        read = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while read < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"baseline read {read} of {n} tuples in {RUN_TIMEOUT_S:.0f} s")
            # Never ask for more than are left: consume() waits for the whole timeout
            # when fewer than num_messages arrive (the source's reader asks the same way).
            batch = consumer.consume(num_messages=min(CONSUME_BATCH, n - read), timeout=1.0)
            for message in batch:
                if message.error() is not None:
                    raise RuntimeError(f"baseline: {message.error()}")
                if handle is not None:
                    handle(message.value())
                read += 1
        return read
    finally:
        consumer.close()


def measure_consumer(
    label: str,
    bootstrap: str,
    topic: str,
    n: int,
    codec: StreamCodec,
    *,
    decode: bool,
    repeat: int,
    broker_pid: int | None,
    client: dict[str, Any] | None = None,
) -> Figure:
    """The baseline (``decode=True``) or a consumer diagnostic, ``repeat`` times."""
    decoder = codec.decode

    def decode_value(value: bytes | None) -> Any:
        # as the source's _decode does: a null value is decoded as empty bytes
        return decoder(value if value is not None else b"", logical=False)

    handle = decode_value if decode else None
    runs = []
    for i in range(repeat):
        quiet = common.wait_until_quiet(broker_pid)
        meter = common.Meter(broker_pid)
        with meter.measure():
            read = consume_all(bootstrap, topic, n, handle=handle, client=client)
        run = Run(
            read, meter.seconds, meter.machine_busy, meter.broker_cpu_s, quiet.quiet, quiet.waited_s
        )
        say(f"{label} run {i + 1}/{repeat}", run)
        runs.append(run)
    return Figure(label, runs)


# --------------------------------------------------------------------------- source


def source_options(
    bootstrap: str, topic: str, schemas: SchemaRepository, *, max_rows_per_trigger: int | None
) -> dict[str, str]:
    """The source's options, as :meth:`QueryGroup._register_inputs` passes them for ``flights``."""
    options = {
        "bootstrap.servers": bootstrap,
        "topic": topic,
        "stream": "flights",
        "schema": "flight",
        "schemas": schemas.as_json(),
        "group.id": f"bench-source-{uuid.uuid4().hex[:8]}",
        "startingOffsets": "earliest",
        "timestampMode": "data_source",
        "timestampField": "time_hour",
        "commitOffsets": "false",
    }
    if max_rows_per_trigger:
        options["maxRowsPerTrigger"] = str(max_rows_per_trigger)
    return options


def run_source_once(
    spark: Any, options: dict[str, str], n: int, *, checkpoint_root: str, broker_pid: int | None
) -> Run:
    """One AvailableNow query from the source into the ``noop`` sink, with a new checkpoint."""
    from pipeline.spark.options import SOURCE_NAME

    quiet = common.wait_until_quiet(broker_pid)
    checkpoint = tempfile.mkdtemp(prefix="run-", dir=checkpoint_root)
    df = spark.readStream.format(SOURCE_NAME).options(**options).load()
    writer = (
        df.writeStream.format("noop")
        .queryName(f"bench_source_{uuid.uuid4().hex[:8]}")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    meter = common.Meter(broker_pid)
    with meter.measure():
        query = writer.start()
        finished = query.awaitTermination(RUN_TIMEOUT_S)
    if not finished:
        query.stop()
        raise RuntimeError(f"source run did not finish in {RUN_TIMEOUT_S:.0f} s")
    if query.exception() is not None:
        raise RuntimeError(f"source run failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(int(p.numInputRows) for p in progress)
    if rows != n:
        raise RuntimeError(f"source read {rows} rows, expected {n}")
    durations: dict[str, int] = {}
    for p in progress:
        for key, value in (p.durationMs or {}).items():
            durations[key] = durations.get(key, 0) + int(value)
    batches = sum(1 for p in progress if int(p.numInputRows) > 0)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return Run(
        rows,
        meter.seconds,
        meter.machine_busy,
        meter.broker_cpu_s,
        quiet.quiet,
        quiet.waited_s,
        detail={
            "batches": batches,
            "progress_events": len(progress),
            "duration_ms_sum": durations,
            # wall time outside every trigger: query start-up and shut-down, paid
            # once per query by a long-running stream
            "outside_triggers_s": round(
                meter.seconds - durations.get("triggerExecution", 0) / 1000, 3
            ),
            "tuples_per_s_in_triggers": round(
                rows / max(1e-3, durations.get("triggerExecution", 0) / 1000), 1
            ),
        },
    )


def measure_source(
    spark: Any,
    label: str,
    options: dict[str, str],
    n: int,
    *,
    repeat: int,
    checkpoint_root: str,
    broker_pid: int | None,
    warm_up: bool,
) -> Figure:
    """``repeat`` timed source runs, after one discarded warm-up run if ``warm_up``."""
    cold = None
    if warm_up:
        cold = run_source_once(
            spark, options, n, checkpoint_root=checkpoint_root, broker_pid=broker_pid
        )
        say(f"{label} warm-up (discarded)", cold)
    runs = []
    for i in range(repeat):
        run = run_source_once(
            spark, options, n, checkpoint_root=checkpoint_root, broker_pid=broker_pid
        )
        say(f"{label} run {i + 1}/{repeat}", run, f", {run.detail['batches']} batches")
        runs.append(run)
    return Figure(label, runs, cold=cold)


# --------------------------------------------------------------------------- environment


# --------------------------------------------------------------------------- report


def report(result: dict[str, Any], figures: list[tuple[Figure, bool]], baseline: Figure) -> None:
    """Print the results as rich tables."""
    table = Table(
        title=f"floodgate_kafka source vs one consumer + fastavro ({result['n']:,} flights)"
    )
    table.add_column("what")
    table.add_column("median tuples/s", justify="right")
    table.add_column("runs (tuples/s)", justify="right")
    table.add_column("÷ baseline", justify="right")
    table.add_column("machine CPU busy", justify="right")
    table.add_column("broker CPU s", justify="right")
    for figure, in_ratio in figures:
        run = figure.median_run
        ratio = figure.median / baseline.median
        table.add_row(
            figure.label,
            f"{figure.median:,.0f}",
            " ".join(f"{r.tuples_per_s:,.0f}{'' if r.started_quiet else '*'}" for r in figure.runs),
            f"[bold]{ratio:.2f}x[/bold]" if in_ratio else f"({ratio:.2f}x)",
            f"{run.machine_busy:.0%}",
            "-" if run.broker_cpu_s is None else f"{run.broker_cpu_s:.1f}",
        )
    console.print(table)

    spark_table = Table(title="Spark runs (median run): where the wall time goes")
    for column in (
        "variant",
        "wall s",
        "batches",
        "outside triggers s",
        "tuples/s in triggers",
        "÷ baseline",
        "Σ addBatch s",
        "Σ latestOffset s",
        "Σ queryPlanning s",
        "Σ walCommit+commitOffsets s",
        "cold run s",
    ):
        spark_table.add_column(column, justify="right")
    for figure, _ in figures:
        run = figure.median_run
        if "duration_ms_sum" not in run.detail:
            continue
        d = run.detail["duration_ms_sum"]
        spark_table.add_row(
            figure.label,
            f"{run.seconds:.2f}",
            str(run.detail["batches"]),
            f"{run.detail['outside_triggers_s']:.2f}",
            f"{run.detail['tuples_per_s_in_triggers']:,.0f}",
            f"{run.detail['tuples_per_s_in_triggers'] / baseline.median:.2f}x",
            f"{d.get('addBatch', 0) / 1000:.2f}",
            f"{d.get('latestOffset', 0) / 1000:.2f}",
            f"{d.get('queryPlanning', 0) / 1000:.2f}",
            f"{(d.get('walCommit', 0) + d.get('commitOffsets', 0)) / 1000:.2f}",
            "-" if figure.cold is None else f"{figure.cold.seconds:.2f}",
        )
    console.print(spark_table)

    env = Table(title="machine and versions", show_header=False)
    m = result["machine"]
    env.add_row(
        "machine",
        f"{m['nproc']} cores, {m['cpu_model']}, {m['ram_gib']} GiB RAM, "
        f"load at start {m['loadavg_at_start'][0]:.2f}",
    )
    env.add_row("python", f"{m['python']} on {m['os']}")
    code = result["code"]
    modified = " (pipeline/ modified)" if code["pipeline_modified"] else ""
    env.add_row("code", f"commit {code['commit']}{modified}")
    env.add_row("versions", ", ".join(f"{k} {v}" for k, v in result["versions"].items()))
    env.add_row("broker", f"{result['broker']['kind']} at {result['broker']['bootstrap']}")
    env.add_row(
        "tuples",
        f"{result['n']:,} in {TOPIC_PARTITIONS} partitions "
        f"{result['partition_sizes']}, produced at {result['produce_tuples_per_s']:,.0f}/s",
    )
    met = "met" if result["target_met"] else "NOT met"
    env.add_row(
        "target",
        f"source >= {TARGET_RATIO:.1f}x baseline: {met} (best variant {result['best_ratio']:.2f}x)",
    )
    console.print(env)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = common.argument_parser(__doc__, "source.json")
    common.add_flights_arguments(
        parser, limit_help="produce only the first N flights (default all)", bootstrap=True
    )
    parser.add_argument(
        "--max-rows-per-trigger",
        type=int,
        default=DEFAULT_MAX_ROWS_PER_TRIGGER,
        help="maxRowsPerTrigger of the micro-batched variant",
    )
    parser.add_argument(
        "--settle-s",
        type=float,
        default=6.0,
        help="with --bootstrap: seconds to let the broker settle after producing",
    )
    parser.add_argument(
        "--no-diagnostics",
        action="store_true",
        help="skip the diagnostics (consume only, tuned baseline)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.log_warnings()
    started = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {
        "benchmark": "source throughput",
        "date": started.isoformat(timespec="seconds"),
    }
    result["machine"] = common.machine()
    result["code"] = common.code_version()
    broker = None if args.bootstrap else EmbeddedBroker().start()
    checkpoint_root = tempfile.mkdtemp(prefix="floodgate-bench-")
    spark = None
    try:
        bootstrap = args.bootstrap or broker.bootstrap_servers  # type: ignore[union-attr]
        broker_pid = broker.pid if broker is not None else None
        result["broker"] = {
            "kind": "embedded noida-db" if broker else "external",
            "bootstrap": bootstrap,
        }
        schemas = SchemaRepository.load()
        codec = StreamCodec("flights", schemas.get("flight"), schemas)
        topic = f"bench.flights.{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, {topic: (TOPIC_PARTITIONS, 1)})

        console.print(f"[bold]producing flights to {topic}[/bold]")
        n, produce_s = common.produce_flights(bootstrap, topic, codec, args.limit)
        sizes = topic_high_watermarks(bootstrap, topic)
        if sum(sizes.values()) != n:
            raise RuntimeError(f"topic holds {sum(sizes.values())} tuples, {n} produced")
        if broker_pid is None:
            time.sleep(args.settle_s)  # cannot watch an external broker's CPU
        waited = common.wait_until_quiet(broker_pid).waited_s
        console.print(f"  {n:,} tuples in {produce_s:.1f} s; partitions {sizes}")
        console.print(f"  broker and machine quiet after {waited:.1f} s")
        result.update(
            n=n,
            partition_sizes=sizes,
            produce_tuples_per_s=round(n / produce_s, 1),
            settle_after_produce_s=round(waited, 1),
            repeat=args.repeat,
        )
        timing = {"repeat": args.repeat, "broker_pid": broker_pid}

        console.print("[bold]baseline: one consumer + StreamCodec.decode[/bold]")
        baseline = measure_consumer(
            "baseline: consumer + decode", bootstrap, topic, n, codec, decode=True, **timing
        )
        figures: list[tuple[Figure, bool]] = [(baseline, False)]
        single = source_options(bootstrap, topic, schemas, max_rows_per_trigger=None)
        if not args.no_diagnostics:
            console.print("[bold]diagnostics[/bold]")
            for label, decode, client in (
                ("consume only, no decode", False, None),
                (f"baseline tuned: {TUNING_LABEL}", True, FETCH_TUNING),
            ):
                figure = measure_consumer(
                    label, bootstrap, topic, n, codec, decode=decode, client=client, **timing
                )
                figures.append((figure, False))

        console.print(
            "[bold]source: floodgate_kafka -> noop, Trigger.AvailableNow, local[2][/bold]"
        )
        from pipeline.spark.session import build_spark_session

        session_start = time.perf_counter()
        spark = build_spark_session(app_name="floodgate-bench-source")
        result["spark_session_start_s"] = round(time.perf_counter() - session_start, 1)
        result["spark_master"] = spark.sparkContext.master
        source_timing = {**timing, "checkpoint_root": checkpoint_root}
        one_batch = measure_source(
            spark, "source, one batch", single, n, warm_up=True, **source_timing
        )
        batched_options = source_options(
            bootstrap, topic, schemas, max_rows_per_trigger=args.max_rows_per_trigger
        )
        batched = measure_source(
            spark,
            f"source, maxRowsPerTrigger={args.max_rows_per_trigger}",
            batched_options,
            n,
            warm_up=False,
            **source_timing,
        )
        figures += [(one_batch, True), (batched, True)]

        result["versions"] = common.versions(spark)
        result["warm_up"] = "one full run of 'source, one batch', discarded (cold_run_discarded)"
        result["baseline"] = baseline.as_json()
        result["source"] = {
            "one_batch": {
                **one_batch.as_json(),
                "ratio_to_baseline": round(one_batch.median / baseline.median, 3),
            },
            "max_rows_per_trigger": {
                **batched.as_json(),
                "max_rows_per_trigger": args.max_rows_per_trigger,
                "ratio_to_baseline": round(batched.median / baseline.median, 3),
            },
        }
        result["diagnostics"] = {
            f.label: {**f.as_json(), "ratio_to_baseline": round(f.median / baseline.median, 3)}
            for f, in_ratio in figures[1:]
            if not in_ratio
        }
        best = max(one_batch.median, batched.median) / baseline.median
        result.update(
            target_ratio=TARGET_RATIO, best_ratio=round(best, 3), target_met=best >= TARGET_RATIO
        )
        result["machine"]["loadavg_at_end"] = list(os.getloadavg())

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        report(result, figures, baseline)
        console.print(f"results written to {args.json}")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(checkpoint_root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
