"""Real-Time Mode rows of ``bench_latency.py --real-time``: produce-to-reception latency
of a pass-through of the flights (and, ``aggregation``, of the per-origin hourly delays:
a flight counted when the first output tuple of its origin-hour that counts it
arrives), Floodgate's real-time query group against Spark's own Real-Time Mode, in one
process and one SparkSession, one system at a time.

* **Floodgate**: a query group of ``SELECT * FROM flights`` (``conf/flights.toml``'s
  input stream, 2 partitions, to an output stream of the ``flight`` schema keyed
  ``carrier|flight|time_hour``) with ``trigger = "real-time"``,
  ``real_time_checkpoint_interval = "5 seconds"`` (Spark's least; another with
  ``--real-time-interval``), ``delivery = "at-least-once"``, its output queue bounded
  as in the file.
* **Spark's RTM** (the baseline, what a PySpark user writes): ``format("kafka")`` on
  the same topic with ``kafka.fetch.max.wait.ms = 10`` (as Spark's own RTM benchmark),
  the single-object header cut and the body decoded with ``from_avro``, then encoded
  again with ``to_avro`` behind the output stream's header with the same key, written
  by Spark's Kafka sink (at least once, no bound), ``outputMode("update")``,
  ``trigger(realTime=...)`` at the group's interval: the same bytes out as Floodgate's.

Both read a fresh embedded broker's topic of 2 partitions into which the demo's replay
process puts the flights at the rate asked, through the back-pressure client, a put
every :data:`PUT_MS` (``--real-time-put-ms``): a steady stream. A consumer in a
process of its own (``read_committed``, polling; :class:`FirstArrivals` says why not a
thread of this one) notes when each output key first arrives; a flight's latency is
that time less the produce timestamp of its input record (at least once: the first
arrival counts). The flights of the first ``WARMUP_S`` seconds are left out (each
system's first batch starts its tasks).

The SparkSession is ``local[4]``: 2 long-running read tasks of the one system running
at a time, and room for Spark's own planning; the machine has 2 cores, so the tasks
share them, as RTM's tasks mostly wait for records.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bench_spark_kafka as bsk
import common
from common import console

from pipeline.demo.reception import read_all

#: Systems of the real-time rows.
SYSTEMS = {
    "floodgate_rtm": "Floodgate, real-time query group (at least once, bounded queue)",
    "spark_rtm": "Spark RTM: Kafka source + from_avro, to_avro + Kafka sink (at least once)",
    # Not compared with Spark's (whose Kafka sink has no transactions): its output is
    # visible once per batch, so its latency is the checkpoint interval's.
    "floodgate_rtm_exactly_once": "Floodgate, real-time query group (exactly once, bounded queue)",
}
#: The systems a run compares by default: Floodgate's group and its baseline.
COMPARED = ("floodgate_rtm", "spark_rtm")
#: Flights put in the first seconds of a run, left out of its figures.
WARMUP_S = 5.0
#: Seconds of flights of a warm-up run (``--real-time-warm-up``): three batch ends.
WARM_UP_S = 15.0
#: Spark's least real-time batch: both systems' checkpoint interval unless a run asks
#: for another (``--real-time-interval``; Spark's default, and its own RTM benchmark's,
#: is 5 minutes).
INTERVAL = "5 seconds"
#: ms between the replay's puts (each of rate x PUT_MS / 1000 tuples): a steady stream,
#: as a rate of tuples/s means. The replay's batches of 1 000 (the micro-batch rows')
#: would put each second's tuples at once at 1 000 tuples/s, and a run's p99 would then
#: be about its second-worst second: whether a batch end met a burst.
PUT_MS = 10.0
#: The p99 target, at :data:`TARGET_RATE` tuples/s.
TARGET_P99_S = 0.250
TARGET_RATE = 1_000.0
KEY_SQL = bsk.KEY_SQL[bsk.PASSTHROUGH_STREAM]
#: The aggregation workload's output stream and query.
STREAM = "delays_by_origin_hour"
#: RocksDB's row count of a state store (off for both systems' aggregations).
TRACK_STATE_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


@dataclass
class RealTimeRun:
    """One system's run at one rate: latency percentiles (s) of ``n`` flights."""

    system: str
    rate: float
    n: int
    #: ``passthrough`` or ``aggregation``.
    workload: str
    p50_s: float
    p99_s: float
    p999_s: float
    max_s: float
    #: Per Spark ``durationMs`` phase, its median over the run's batches, ms.
    phases_ms: dict[str, float]


def consume_arrivals(
    kind: str,
    bootstrap: str,
    topic: str,
    counted: Any,
    ready: Any,
    stop: Any,
    results: Any,
) -> None:
    """The body of an arrivals process (:class:`FirstArrivals`): consume ``topic`` from
    its start until ``stop`` is set, noting arrival times (epoch s), ``counted`` kept
    up to date; then send what it noted through ``results``.

    ``kind`` ``"first"``: per output key, when it first arrived; ``counted``: the keys.
    ``"count"``: the aggregation's output decoded, per origin-hour the ``(time, count)``
    of each tuple (``bench_latency.Arrivals``' versions); ``counted``: the flights
    counted, the sum over origin-hours of the largest count received."""
    import bench_latency
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-rtm-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.subscribe([topic])
    first: dict[bytes, float] = {}
    arrivals = bench_latency.Arrivals()
    decode = None
    if kind == "count":
        from pipeline.serde.codec import StreamCodec
        from pipeline.serde.schemas import SchemaRepository

        schemas = SchemaRepository.load()
        decode = StreamCodec(STREAM, schemas.get(STREAM), schemas).decode
    ready.set()
    while not stop.is_set():
        messages = [m for m in consumer.consume(1_000, 0.05) if m.error() is None]
        if decode is None:
            for message in messages:
                first.setdefault(bytes(message.key()), time.time())
            counted.value = len(first)
            continue
        if messages:
            arrivals(STREAM, [decode(m.value()) for m in messages])
            counted.value = sum(max(c for _, c in v) for v in arrivals.versions.values())
    consumer.close()
    results.send(first if decode is None else dict(arrivals.versions))
    results.close()


class FirstArrivals:
    """A consumer of the output topic noting when each key first arrives (epoch s:
    :attr:`first`, once :meth:`stop` returned).

    It runs in a process of its own, as a deployment's reception runs apart from the
    driver: in this one it would share the GIL with the driver's Python threads, and
    those are not the same for both systems (Floodgate's query group runs its monitor,
    Spark's listener and its HTTP endpoint here; Spark's RTM query, none). A tuple that
    arrives while another thread holds the GIL is noted late, so such a consumer
    would add the query group's Python work to Floodgate's latencies only."""

    KIND = "first"

    def __init__(self, bootstrap: str, topic: str) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.first: dict[bytes, float] = {}
        self._counted = context.Value("q", 0)
        self._stop = context.Event()
        ready = context.Event()
        self._results, sending = context.Pipe(duplex=False)
        self._process = context.Process(
            target=consume_arrivals,
            args=(self.KIND, bootstrap, topic, self._counted, ready, self._stop, sending),
            name="bench-rtm-arrivals",
            daemon=True,
        )
        self._process.start()
        sending.close()
        if not ready.wait(60):
            self._process.kill()
            raise RuntimeError(f"the arrivals process of {topic} did not start in 60 s")

    def done(self, total: int) -> bool:
        """Whether every one of ``total`` flights arrived."""
        return int(self._counted.value) >= total

    def stop(self) -> None:
        """Stop the process and take what it noted."""
        self._stop.set()
        # Received before the join: a large result would fill the pipe and block it.
        if not self._results.poll(60):
            self._process.kill()
            raise RuntimeError("the arrivals process sent nothing in 60 s")
        noted = self._results.recv()
        self._process.join(30)
        self._take(noted)

    def _take(self, noted: Any) -> None:
        self.first = noted


def produce_times(bootstrap: str, topic: str) -> dict[bytes, float]:
    """Produce timestamp (epoch s) of each input key."""
    return {bytes(m.key()): m.timestamp()[1] / 1000 for m in read_all(bootstrap, topic)}


def real_time_config(
    topic: str, checkpoints: Path, limit: int, interval: str = INTERVAL
) -> dict[str, Any]:
    """``conf/flights.toml`` reading ``topic`` as a real-time group checkpointed every
    ``interval`` (Spark's duration): 2 input partitions, at least once, no cap on a
    batch, no event-time alignment (the caller keeps the queries it measures)."""
    raw = bsk.run_config(topic, 10 * limit, checkpoints, "floodgate_jvm")
    group = raw["query_group"]
    group.pop("max_tuples_per_trigger", None)
    group.update(
        trigger="real-time",
        real_time_checkpoint_interval=interval,
        delivery="at-least-once",
        partitions=2,
    )
    raw["input_streams"]["flights"].pop("max_event_time_drift_ms", None)
    return raw


def config_for(
    topic: str, checkpoints: Path, limit: int, interval: str = INTERVAL
) -> dict[str, Any]:
    """The pass-through real-time group reading ``topic``."""
    raw = real_time_config(topic, checkpoints, limit, interval)
    raw["output_streams"] = {
        "flights_copy": {
            "topic": f"bench.flights.copy.{raw['query_group']['name']}",
            "schema": "flight",
            "key": ["carrier", "flight", "time_hour"],
            "max_queue_size": 10 * limit,
        }
    }
    raw["queries"] = {
        "copy": {"sql": "SELECT * FROM flights", "output": "flights_copy", "output_mode": "update"}
    }
    return raw


def aggregation_config_for(
    topic: str, checkpoints: Path, limit: int, interval: str = INTERVAL
) -> dict[str, Any]:
    """The per-origin hourly aggregation of ``conf/flights.toml`` alone, in real time,
    reading ``topic``: 2 input partitions and 2 shuffle partitions (4 slots)."""
    raw = real_time_config(topic, checkpoints, limit, interval)
    raw["queries"].pop("delays_by_carrier_day")
    raw["output_streams"].pop("delays_by_carrier_day")
    raw["output_streams"][STREAM]["max_queue_size"] = 10 * limit
    return raw


def start_spark_rtm(spark: Any, raw: dict[str, Any], bootstrap: str) -> Any:
    """Spark's own RTM pass-through, as a PySpark user writes it (module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from pipeline.serde.schemas import SchemaRepository

    schemas = SchemaRepository.load()
    flight = schemas.get("flight")
    schema = json.dumps(flight.schema)
    header = b"\xc3\x01" + flight.fingerprint
    columns = [f["name"] for f in flight.schema["fields"]]
    out = raw["output_streams"]["flights_copy"]
    flights = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", raw["input_streams"]["flights"]["topic"])
        .option("startingOffsets", "earliest")
        .option("kafka.fetch.max.wait.ms", "10")
        .load()
        .select(from_avro(F.expr("substring(value, 11)"), schema).alias("f"))
        .select("f.*")
    )
    return (
        flights.select(
            F.expr(KEY_SQL).alias("key"),
            F.concat(F.lit(header), to_avro(F.struct(*columns), schema)).alias("value"),
        )
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out["topic"])
        .option("checkpointLocation", str(Path(raw["query_group"]["checkpoint_dir"]) / "spark"))
        .outputMode("update")
        .trigger(realTime=raw["query_group"]["real_time_checkpoint_interval"])
        .start()
    )


def start_spark_rtm_aggregation(spark: Any, raw: dict[str, Any], bootstrap: str) -> Any:
    """Spark's own RTM per-origin hourly aggregation: the flights decoded with
    ``from_avro``, ``event_time`` and the group's watermark, the query's SQL, each row
    encoded with ``to_avro`` behind the output schema's header and keyed as Floodgate keys
    it, Spark's Kafka sink in ``update`` mode."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    from pipeline.serde.schemas import SchemaRepository

    schemas = SchemaRepository.load()
    flight, out_schema = schemas.get("flight"), schemas.get(STREAM)
    stream = raw["input_streams"]["flights"]
    # As Databricks' published Real-Time Mode benchmark sets it for its stateful query
    # (and a Floodgate real-time group does): RocksDB keeps no row count, so a state
    # write is not a read first. The pipelined shuffle's 10 ms buffer wait, the other
    # setting it makes, is the process's (Floodgate's session default), both systems'.
    spark.conf.set(TRACK_STATE_ROWS, "false")
    (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", stream["topic"])
        .option("startingOffsets", "earliest")
        .option("kafka.fetch.max.wait.ms", "10")
        .load()
        .select(from_avro(F.expr("substring(value, 11)"), json.dumps(flight.schema)).alias("f"))
        .select("f.*")
        .withColumn("event_time", F.col(stream["timestamp_field"]))
        .withWatermark("event_time", stream["watermark"])
        .createOrReplaceTempView("flights")
    )
    columns = [f["name"] for f in out_schema.schema["fields"]]
    header = b"\xc3\x01" + out_schema.fingerprint
    return (
        spark.sql(raw["queries"][STREAM]["sql"])
        .select(
            F.expr(bsk.KEY_SQL[STREAM]).alias("key"),
            F.concat(
                F.lit(header), to_avro(F.struct(*columns), json.dumps(out_schema.schema))
            ).alias("value"),
        )
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", raw["output_streams"][STREAM]["topic"])
        .option("checkpointLocation", str(Path(raw["query_group"]["checkpoint_dir"]) / "spark"))
        .outputMode("update")
        .trigger(realTime=raw["query_group"]["real_time_checkpoint_interval"])
        .start()
    )


class CountArrivals(FirstArrivals):
    """A consumer of the aggregation's output noting when each origin-hour's count
    arrives (``bench_latency.Arrivals``: the i-th flight of an origin-hour is received
    with the first tuple counting at least i), in a process of its own."""

    KIND = "count"

    def __init__(self, bootstrap: str, topic: str) -> None:
        import bench_latency

        self.arrivals = bench_latency.Arrivals()
        super().__init__(bootstrap, topic)

    def _take(self, noted: Any) -> None:
        self.arrivals.versions.update(noted)


def aggregation_latencies(
    bootstrap: str, topic: str, arrivals: CountArrivals
) -> tuple[list[float], int]:
    """Each flight's latency (s) past the warm-up, by count (``bench_latency``'s
    attribution), and how many flights no received tuple counts."""
    import bisect

    import bench_latency

    produced = bench_latency.produce_times(bootstrap, topic)
    start = min(t for ts in produced.values() for t in ts) + WARMUP_S
    out: list[float] = []
    missing = 0
    for key, times in produced.items():
        versions = sorted(arrivals.arrivals.versions.get(key, []))
        counts, best = [], 0
        for _, count in versions:
            best = max(best, count)
            counts.append(best)
        for i, t in enumerate(times, start=1):
            v = bisect.bisect_left(counts, i)
            if v == len(counts):
                missing += 1
            elif t >= start:
                out.append(versions[v][0] - t)
    return out, missing


def one_run(
    spark: Any,
    system: str,
    rate: float,
    limit: int,
    checkpoints: Path,
    workload: str = "passthrough",
    interval: str = INTERVAL,
    put_ms: float = PUT_MS,
) -> RealTimeRun:
    """One run of ``system`` at ``rate`` tuples/s over the first ``limit`` flights, both
    systems checkpointing every ``interval``, the flights put ``put_ms`` apart."""
    from pipeline.config import parse_query_group
    from pipeline.demo.replay import ReplayProcess
    from pipeline.kafka.topics import ensure_topics
    from pipeline.spark.query_group import QueryGroup

    topic = f"bench.rtm.flights.{uuid.uuid4().hex[:8]}"
    aggregation = workload == "aggregation"
    raw = (aggregation_config_for if aggregation else config_for)(
        topic, checkpoints, limit, interval
    )
    if system == "floodgate_rtm_exactly_once":
        raw["query_group"]["delivery"] = "exactly-once"
    config = parse_query_group(raw, env={})
    query_name = STREAM if aggregation else "copy"
    out_topic = raw["output_streams"][STREAM if aggregation else "flights_copy"]["topic"]
    with common.fresh_broker() as bootstrap:
        ensure_topics(bootstrap, config.topics())
        common.wait_until_quiet(None)
        group: QueryGroup | None = None
        query = None
        if system.startswith("floodgate_rtm"):
            group = QueryGroup(config, bootstrap_servers=bootstrap, spark=spark).start()
        else:
            launch = start_spark_rtm_aggregation if aggregation else start_spark_rtm
            query = launch(spark, raw, bootstrap)
        arrivals = (CountArrivals if aggregation else FirstArrivals)(bootstrap, out_topic)
        try:
            time.sleep(2.0)  # the first batch's tasks are running
            replayer = ReplayProcess(
                bootstrap_servers=bootstrap,
                config=config,
                limit=limit,
                rate=rate,
                batch=max(1, round(rate * put_ms / 1000)),
            )
            total = replayer.start()
            try:
                replayer.go()
                while not replayer.wait(0.2):
                    if group is not None:
                        group.check()
                    elif query is not None and query.exception() is not None:
                        raise RuntimeError(f"Spark's RTM query failed: {query.exception()}")
                if replayer.error is not None:
                    raise replayer.error
            finally:
                replayer.stop()
            deadline = time.monotonic() + 120
            while not arrivals.done(total) and time.monotonic() < deadline:
                time.sleep(0.2)
            spark_query = query if query is not None else group.queries()[query_name]  # type: ignore[union-attr]
            phases = batch_phases(spark_query)
        finally:
            arrivals.stop()
            if group is not None:
                group.stop()
            if query is not None:
                with contextlib.suppress(Exception):
                    query.stop()
        if aggregation:
            values, lost = aggregation_latencies(bootstrap, topic, arrivals)  # type: ignore[arg-type]
            if lost:
                raise RuntimeError(f"{system}: {lost} flights in no received tuple")
        else:
            produced = produce_times(bootstrap, topic)
            missing = [k for k in produced if k not in arrivals.first]
            if missing:
                raise RuntimeError(
                    f"{system}: {len(missing)} of {len(produced)} flights never arrived"
                )
            start = min(produced.values()) + WARMUP_S
            values = [arrivals.first[k] - t for k, t in produced.items() if t >= start]
    return RealTimeRun(
        system=system,
        rate=rate,
        workload=workload,
        n=len(values),
        p50_s=common.percentile(values, 0.5),
        p99_s=common.percentile(values, 0.99),
        p999_s=common.percentile(values, 0.999),
        max_s=max(values),
        phases_ms=phases,
    )


def batch_phases(query: Any) -> dict[str, float]:
    """Median of each ``durationMs`` phase over the query's batches, ms."""
    import statistics

    by_phase: dict[str, list[float]] = {}
    for progress in query.recentProgress:
        for phase, ms in dict(progress["durationMs"]).items():
            by_phase.setdefault(phase, []).append(float(ms))
    return {phase: statistics.median(v) for phase, v in sorted(by_phase.items())}


def measure(
    rates: list[float],
    seconds: float,
    repeat: int,
    checkpoints: Path,
    systems: list[str] | None = None,
    workloads: tuple[str, ...] = ("passthrough",),
    interval: str = INTERVAL,
    warm_up: bool = False,
    put_ms: float = PUT_MS,
) -> dict[str, Any]:
    """Both systems at each rate, ``repeat`` runs each (order alternating), each run
    ``seconds`` of flights after the warm-up (``systems``: keys of :data:`SYSTEMS`,
    default both), for each of ``workloads`` (``passthrough``, ``aggregation``), both
    checkpointing every ``interval``; the runs, and per workload, rate and system the
    medians over runs; the replay puts its flights ``put_ms`` apart. ``warm_up``:
    first, each system once per workload, unmeasured, :data:`WARM_UP_S` at 5 s batches,
    so that neither meets its first batch ends in a cold JVM while the other does not."""
    from pipeline.spark.session import build_spark_session

    common.log_warnings()
    jars = bsk.peer_jars(bsk.fetch_connector(), Path(sys.executable))
    # On the JVM's class path from its start, as spark-submit --jars puts them: PySpark's
    # gateway is up before the session's settings are read.
    given = os.environ.get("PYSPARK_SUBMIT_ARGS", "").removesuffix("pyspark-shell").strip()
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join(
        a for a in (given, f"--jars {','.join(jars)}", "pyspark-shell") if a
    )
    spark = build_spark_session(app_name="floodgate-bench-real-time", master="local[4]")
    spark.sparkContext.setLogLevel("ERROR")
    runs: list[RealTimeRun] = []
    failures: list[str] = []
    try:
        for workload in workloads if warm_up else ():
            for system in systems or list(COMPARED):
                limit = int(TARGET_RATE * (WARM_UP_S + WARMUP_S))
                try:
                    one_run(spark, system, TARGET_RATE, limit, checkpoints, workload, put_ms=put_ms)
                    console.log(f"warm-up run, {workload}, {system}: done (not measured)")
                except Exception as exc:
                    failures.append(f"warm-up {workload} {system}: {exc!r}")
        for workload, rate in [(w, r) for w in workloads for r in rates]:
            limit = int(rate * (seconds + WARMUP_S))
            for r in range(repeat):
                chosen = systems or list(COMPARED)
                order = chosen if r % 2 == 0 else chosen[::-1]
                for system in order:
                    try:
                        run = one_run(
                            spark, system, rate, limit, checkpoints, workload, interval, put_ms
                        )
                    except Exception as exc:  # one run's failure does not lose the others
                        failures.append(
                            f"{workload} {system} at {rate:,.0f}/s run {r + 1}: {exc!r} {exc}"
                        )
                        console.log(f"FAILED: {failures[-1][:2000]}")
                        continue
                    runs.append(run)
                    console.log(
                        f"real time, {workload}, {rate:,.0f} tuples/s, run {r + 1}, {system}: p50 "
                        f"{run.p50_s * 1000:.0f} ms, p99 {run.p99_s * 1000:.0f} ms, p99.9 "
                        f"{run.p999_s * 1000:.0f} ms, max {run.max_s * 1000:.0f} ms ({run.n:,}); "
                        f"batch phases (median ms) {run.phases_ms}"
                    )
        versions = common.versions(spark)
    finally:
        spark.stop()
    return {"runs": runs, "failures": failures, "versions": versions}


def summary(runs: list[RealTimeRun]) -> dict[str, Any]:
    """Per rate and system: medians over runs (ms), and the targets."""
    import statistics

    from rich.table import Table

    out: dict[str, Any] = {}
    table = Table(title="real-time mode, produce -> reception latency (ms)")
    for column in (
        "workload",
        "tuples/s",
        "system",
        "runs",
        "p50",
        "p99 (min-max)",
        "p99.9",
        "max",
    ):
        table.add_column(column, justify="left" if column == "system" else "right")
    for workload, rate in sorted({(r.workload, r.rate) for r in runs}):
        per: dict[str, Any] = {}
        for system in SYSTEMS:
            rs = [
                r for r in runs if r.rate == rate and r.system == system and r.workload == workload
            ]
            if not rs:
                continue
            p99s = [r.p99_s * 1000 for r in rs]
            f = {
                "runs": len(rs),
                "p50_ms": statistics.median(r.p50_s * 1000 for r in rs),
                "p99_ms": statistics.median(p99s),
                "p99_min_max_ms": [min(p99s), max(p99s)],
                "p999_ms": statistics.median(r.p999_s * 1000 for r in rs),
                "max_ms": statistics.median(r.max_s * 1000 for r in rs),
            }
            per[system] = f
            table.add_row(
                workload,
                f"{rate:,.0f}",
                SYSTEMS[system].split(":")[0].split(",")[0],
                str(len(rs)),
                f"{f['p50_ms']:.0f}",
                f"{f['p99_ms']:.0f} ({min(p99s):.0f}-{max(p99s):.0f})",
                f"{f['p999_ms']:.0f}",
                f"{f['max_ms']:.0f}",
            )
        if "floodgate_rtm" in per and "spark_rtm" in per:
            fg, sp = per["floodgate_rtm"], per["spark_rtm"]
            per["targets"] = {
                "p99_at_most_spark_rtm": fg["p99_ms"] <= sp["p99_ms"],
                "p99_ratio": fg["p99_ms"] / sp["p99_ms"],
            }
            if rate == TARGET_RATE:
                per["targets"]["p99_at_most_target"] = fg["p99_ms"] <= TARGET_P99_S * 1000
        out[f"{workload} {rate:.0f}"] = per
    console.print(table)
    for rate, per in out.items():
        if "targets" in per:
            t = per["targets"]
            line = (
                f"{rate} tuples/s: Floodgate p99 / Spark RTM p99 = {t['p99_ratio']:.2f} "
                f"(target <= 1: {'met' if t['p99_at_most_spark_rtm'] else 'NOT met'})"
            )
            if "p99_at_most_target" in t:
                met = "met" if t["p99_at_most_target"] else "NOT met"
                line += f"; p99 <= {TARGET_P99_S * 1000:.0f} ms: {met}"
            console.print(line)
    return out


def brief(runs: list[RealTimeRun]) -> list[dict[str, Any]]:
    return [asdict(r) for r in runs]
