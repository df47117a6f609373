"""Benchmark: end-to-end latency of the flights pipeline, Floodgate against the
Spark-native peer.

What is measured, on an embedded broker of its own per run (``common.fresh_broker``
says why) and this machine's 2 cores:

1. Floodgate's maximum rate: the main job (:func:`pipeline.demo.run.run_demo`) over
   every flight as fast as back-pressure lets the replay go, with
   ``conf/flights.toml`` as it is (what ``bench_flights.py`` measures); flights /
   seconds, the median of ``--repeat`` runs (or ``--max-rate``, given).
2. Then, for each trigger interval of 0 (as fast as possible), 250 ms and 1 s, the
   first ``--limit`` flights replayed at **half that maximum rate** into each system,
   ``--repeat`` runs each, the two systems' order alternating from run to run:

   * **Floodgate**: the flights group (``trigger_interval_ms`` replaced, everything
     else as in ``conf/flights.toml``) in a driver
     process of its own (``bench_spark_kafka.py --floodgate-worker``, the project's
     ``.venv``), as the peer's: neither driver shares its process with the reception;
   * **the peer**: ``bench/spark_kafka_peer.py`` with output (b) (or, with
     ``--peer-output kafka_sink``, output (a): Spark's own Kafka sink, at least once,
     no transaction: the least a micro-batch of Spark's costs on this machine), the two queries
     as a PySpark user writes them (Spark's Kafka source, ``from_avro``,
     ``maxOffsetsPerTrigger`` = Floodgate's ``max_tuples_per_trigger``, the same
     watermark; ``foreachBatch`` writing one Kafka transaction a micro-batch with
     the batch's input offsets, exactly once), started with
     ``Trigger.ProcessingTime(trigger)``, in a driver process of its own on the same
     PySpark (Spark's 4.2.0 connector in ``spark.jars``; ``bench_spark_kafka.py``
     fetches it). Its session
     has Floodgate's settings (``SPARK_DEFAULTS``: ``local[2]``, 2 shuffle partitions,
     the raw local checkpoint file system) and ``noDataMicroBatches`` off, as the
     flights group has it. Each driver gets one discarded warm-up run at trigger 0.

   Both are fed alike: the flights topic has 4 partitions, the flights are replayed
   by the demo's replay process (:class:`pipeline.demo.replay.ReplayProcess`,
   batches of 1 000 through the back-pressure client, paced at the rate, the input
   queue never full), and both systems' output is read by the same reception in
   this process (:class:`pipeline.demo.reception.Reception`, ``StreamOutput.get``,
   ``read_committed``; the peer writes Floodgate's key and single-object Avro).

The latency of a flight is the time from its *produce timestamp* (the Kafka record
timestamp librdkafka sets when the back-pressure client hands it over, read back
from the input topic after the run) to the moment the reception received the first
``delays_by_origin_hour`` tuple that counts it. The output is an aggregate, so a
flight is attributed by count: the i-th flight of an origin-hour (in produce order)
is visible once a tuple of that origin-hour with ``flights >= i`` has been received.
Every flight must be attributed, and each of the peer's queries must read every
flight, or the run fails; a failed run is reported (``failed_runs``) and left out,
and the others go on.

Reported per trigger interval and system: p50, p95, p99 and max (median over runs,
p99's min-max), the runs' end-to-end tuples/s (flights / first produce to all
output read), Floodgate's p99 / the peer's p99, and Spark's micro-batch phases
(``durationMs``: medians over the micro-batches with data of both queries, in ms)
with the batches a run and rows a batch: where the latency goes on each side. A
histogram of all flights' latencies, one curve per system and interval, goes to
``--png``. Targets: Floodgate's p99 <= the peer's at every trigger, and p99 <= 1 s
at trigger 0.

Run: ``.venv/bin/python bench/bench_latency.py [--repeat 3] [--limit 100000]
[--triggers 0,250,1000] [--systems floodgate,peer]`` (the peer's virtualenv and jars
as for ``bench_spark_kafka.py``, made on first use). Results: tables, JSON in
``bench/out/latency.json`` (``runs``: Floodgate's runs per trigger, as before;
``peer_runs``: the peer's; ``summary``: per system and trigger), written first, then
the PNG when matplotlib is installed (the ``bench`` extra: ``.venv/bin/pip install -e
'.[bench]'``, or ``make bench-peers``; without it the script says so and the JSON
stands).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import bench_spark_kafka as bsk
import common
from common import OUT_DIR, ROOT, console
from rich.table import Table

from pipeline.demo.reception import read_all
from pipeline.demo.run import run_demo
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

TRIGGERS_MS = (0, 250, 1_000)
TARGET_P99_S = 1.0
STREAM = "delays_by_origin_hour"
#: The systems measured (names in tables and JSON).
SYSTEMS = {
    "floodgate": "Floodgate",
    "peer": "peer (b): Spark Kafka source + from_avro, foreachBatch transaction",
}
#: The peer's outputs (``--peer-output``): (b), exactly once, Floodgate's peer; or (a),
#: Spark's own Kafka sink, at least once: no transaction, the least a micro-batch of
#: Spark's can cost here.
PEER_OUTPUTS = {
    "foreach_batch": SYSTEMS["peer"],
    "kafka_sink": "peer (a): Spark Kafka source + from_avro, Spark's Kafka sink (at least once)",
}
#: The peer output of this run (set from ``--peer-output``).
peer_output = "foreach_batch"
PHASES = common.SPARK_PHASES
#: How long the reception may take to read the last output tuples, and the peer's
#: queries to process what is left after the replay, seconds.
SETTLE_TIMEOUT_S = 300.0


class Arrivals:
    """Receive times of the origin-hour tuples, as the reception reads them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.versions: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)

    def __call__(self, stream: str, tuples: list[dict[str, Any]]) -> None:
        now = time.time()
        if stream != STREAM:
            return
        with self._lock:
            for t in tuples:
                self.versions[common.origin_hour_key(t)].append((now, int(t["flights"])))


def produce_times(bootstrap: str, topic: str) -> dict[tuple[str, int], list[float]]:
    """Produce timestamps (epoch s) of the input topic's flights, by origin-hour, sorted."""
    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    by_key: dict[tuple[str, int], list[float]] = defaultdict(list)
    for message in read_all(bootstrap, topic):
        flight = codec.decode(message.value(), logical=False)
        by_key[(str(flight["origin"]), int(flight["time_hour"]))].append(
            message.timestamp()[1] / 1000
        )
    for times in by_key.values():
        times.sort()
    return by_key


def latencies(produced: dict[tuple[str, int], list[float]], arrivals: Arrivals) -> list[float]:
    """Every flight's latency in seconds (see the module docstring).

    Raises:
        RuntimeError: a flight no received tuple counts.
    """
    out: list[float] = []
    for key, times in produced.items():
        versions = sorted(arrivals.versions.get(key, []))
        counts = []
        best = 0
        for _, count in versions:
            best = max(best, count)
            counts.append(best)  # a later tuple never counts fewer
        for i, t in enumerate(times, start=1):
            v = bisect.bisect_left(counts, i)
            if v == len(counts):
                raise RuntimeError(f"flight {i} of {key} is in no received tuple ({counts[-1:]})")
            out.append(versions[v][0] - t)
    return out


percentile = common.percentile


@dataclass
class LatencyRun:
    """One system's latency run at one trigger.

    Attributes:
        system: a key of :data:`SYSTEMS`.
        trigger_ms: the trigger interval (0: as fast as possible).
        n: flights produced (each has a latency).
        p50_s / p95_s / p99_s / max_s: of the flights' latencies, seconds.
        tuples_per_s: flights / (first produce to every output tuple read).
        batches: micro-batches with data, both queries.
        phases_ms: per micro-batch with data of both queries, each of Spark's
            ``durationMs`` phases (:data:`PHASES`), ms, in the order they ran.
        rows: per micro-batch with data, its input rows (same order).
        latencies_s: every flight's latency (not written to the JSON).
    """

    system: str
    trigger_ms: int
    n: int
    p50_s: float
    p95_s: float
    p99_s: float
    max_s: float
    tuples_per_s: float
    batches: int
    phases_ms: dict[str, list[int]] = field(default_factory=dict)
    rows: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def of(
        cls,
        system: str,
        trigger_ms: int,
        values: list[float],
        tuples_per_s: float,
        batches: list[dict[str, Any]],
    ) -> LatencyRun:
        """From the flights' latencies ``values`` and the micro-batches with data
        (``{"rows": tuples, "ms": {phase: ms}}``)."""
        return cls(
            system=system,
            trigger_ms=trigger_ms,
            n=len(values),
            p50_s=percentile(values, 0.5),
            p95_s=percentile(values, 0.95),
            p99_s=percentile(values, 0.99),
            max_s=max(values),
            tuples_per_s=tuples_per_s,
            batches=len(batches),
            phases_ms={ph: [int(b["ms"].get(ph, 0)) for b in batches] for ph in PHASES},
            rows=[int(b["rows"]) for b in batches],
            latencies_s=values,
        )

    def brief(self) -> dict[str, Any]:
        """The JSON record of the run (without the flights' latencies)."""
        out = asdict(self)
        del out["latencies_s"]
        return out


def floodgate_run(
    driver: bsk.Driver,
    trigger: int,
    rate: float,
    limit: int | None,
    checkpoints: Path,
) -> LatencyRun:
    """One Floodgate latency run: the flights group with ``trigger`` in its own driver
    process, the flights replayed at ``rate`` and the output read here, exactly as
    :func:`peer_run` runs the peer."""
    return _run(driver, "floodgate", trigger, rate, limit, checkpoints)


def start_floodgate() -> tuple[bsk.Driver, dict[str, Any]]:
    """Floodgate's driver, a process of its own as the peer's is (``bench_spark_kafka.py
    --floodgate-worker``: its SparkSession and query groups, nothing else), so that
    neither shares its Python process with the reception that reads its output.

    Returns:
        The driver, and its versions (pyspark, Java, ...).
    """
    driver = bsk.Driver(
        "Floodgate",
        [sys.executable, str(Path(bsk.__file__).resolve()), "--floodgate-worker"],
        {},
        OUT_DIR / "latency-floodgate.log",
        os.environ,
    )
    return driver, driver.hello["versions"]


def start_peer() -> tuple[bsk.Driver, dict[str, Any]]:
    """The peer's driver (``bench/spark_kafka_peer.py`` on the project's PySpark, as
    Floodgate, with Spark's 4.2.0 connector, its jars fetched on first use), with
    Floodgate's session settings.

    Returns:
        The driver, and its versions (pyspark, Java, the connector's jars).
    """
    from pipeline.spark.session import SPARK_DEFAULTS

    peer_python = Path(sys.executable)
    jars = bsk.peer_jars(bsk.fetch_connector(), peer_python)
    ours = ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON")
    env = {k: v for k, v in os.environ.items() if k not in (*ours, "PYSPARK_DRIVER_PYTHON")}
    conf = {
        **SPARK_DEFAULTS,
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        # Every micro-batch's progress kept for the report (the default keeps 100).
        "spark.sql.streaming.numRecentProgressUpdates": "5000",
    }
    driver = bsk.Driver(
        "peer",
        [str(peer_python), str(bsk.PEER_SCRIPT)],
        {"conf": conf, "jars": jars},
        OUT_DIR / "latency-peer.log",
        {**env, "PYSPARK_PYTHON": str(peer_python)},
    )
    versions = driver.hello["versions"] | {"connector_jars": [Path(j).name for j in jars]}
    return driver, versions


def peer_run(
    driver: bsk.Driver, trigger: int, rate: float, limit: int | None, checkpoints: Path
) -> LatencyRun:
    """One peer latency run (see :func:`_run`)."""
    return _run(driver, "peer", trigger, rate, limit, checkpoints)


def _run(
    driver: bsk.Driver,
    system: str,
    trigger: int,
    rate: float,
    limit: int | None,
    checkpoints: Path,
) -> LatencyRun:
    """One latency run of ``system`` (``floodgate`` or ``peer``): a fresh broker and
    topics, the system's queries started with ``trigger`` in its own driver process,
    the flights replayed at ``rate`` as the demo replays them, the output read by the
    demo's reception in this process (see the module docstring).

    Raises:
        RuntimeError: a query did not read every flight, a flight is in no received
            tuple, or the driver failed.
    """
    from pipeline.client.connector import connect
    from pipeline.config import parse_query_group
    from pipeline.demo.replay import ReplayProcess
    from pipeline.kafka.topics import ensure_topics

    schemas = SchemaRepository.load()
    arrivals = Arrivals()
    topic = f"bench.flights.{uuid.uuid4().hex[:8]}"
    # The input queue never full nor near it (no consumer group commits for the peer).
    bound = 10 * (limit or 400_000)
    name = f"peer_{peer_output}" if system == "peer" else "floodgate_jvm"
    raw = bsk.run_config(topic, bound, checkpoints, name)
    raw["query_group"]["trigger_interval_ms"] = trigger
    config = parse_query_group(raw, env={})
    with common.fresh_broker() as bootstrap:
        ensure_topics(bootstrap, config.topics())
        if system == "peer":
            driver.call(**bsk.peer_settings(raw, bootstrap, schemas, peer_output))
        else:
            driver.call(cmd="prepare", config=raw, bootstrap=bootstrap)
        common.wait_until_quiet(None)
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
            reception = common.open_reception(connector, config, on_received=arrivals)
            try:
                driver.call(cmd="start", trigger_ms=trigger)
                replayer = ReplayProcess(
                    bootstrap_servers=bootstrap, config=config, limit=limit, rate=rate
                )
                total = replayer.start()
                try:
                    started = time.monotonic()
                    replayer.go()
                    while not replayer.wait(0.2):
                        if reception.error is not None:
                            raise RuntimeError(f"the reception failed: {reception.error}")
                    if replayer.error is not None:
                        raise replayer.error
                finally:
                    replayer.stop()
                drained = driver.call(timeout_s=SETTLE_TIMEOUT_S, cmd="drain")
                reception.wait_until_read(SETTLE_TIMEOUT_S)
                seconds = time.monotonic() - started
            finally:
                reception.stop()
                with contextlib.suppress(RuntimeError):
                    driver.call(cmd="stop")
        produced = produce_times(bootstrap, topic)
    n = sum(len(v) for v in produced.values())
    if n != total:
        raise RuntimeError(f"{n} flights in the input topic, {total} replayed")
    batches = []
    for query, figures in drained["queries"].items():
        if figures["input_rows"] != n:
            raise RuntimeError(f"{system}: query {query} read {figures['input_rows']} of {n}")
        batches += figures["per_batch"]
    values = latencies(produced, arrivals)
    return LatencyRun.of(system, trigger, values, n / seconds, batches)


def plot(
    samples: dict[tuple[str, int], list[float]], path: Path, rate: float, n: int | None
) -> None:
    """A histogram of the flights' latencies (all runs), one curve per system and
    trigger: Floodgate solid, the peer dashed, a colour per trigger."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(10, 5.5))
    top = max(max(v) for v in samples.values())
    bins = np.linspace(0, top, 150)
    colours = {}
    for (system, trigger), values in samples.items():
        colour = colours.setdefault(trigger, f"C{len(colours)}")
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        ax.hist(
            values,
            bins=bins,
            histtype="step",
            linewidth=1.6,
            linestyle="-" if system == "floodgate" else "--",
            color=colour,
            density=True,
            label=f"{SYSTEMS[system].split(':')[0]}, trigger "
            f"{trigger} ms: p50 {p50:.2f} s, p99 {p99:.2f} s",
        )
    ax.axvline(TARGET_P99_S, color="grey", linestyle=":", linewidth=1)
    ax.text(TARGET_P99_S, ax.get_ylim()[1] * 0.95, " p99 target (trigger 0)", color="grey")
    ax.set_xlabel("produce timestamp -> output tuple received by the reception (s)")
    ax.set_ylabel("share of flights (density)")
    ax.set_title(
        f"flights pipeline end-to-end latency, Floodgate (solid) and the Spark-native peer "
        f"(dashed)\nat {rate:,.0f} tuples/s (half Floodgate's maximum), "
        f"{'all' if n is None else f'{n:,}'} flights a run, all runs",
        fontsize=11,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    runs: dict[tuple[str, int], list[LatencyRun]], rate: float, n: int | None
) -> dict[str, Any]:
    """Print the tables; return the summary for the JSON (per system, per trigger)."""
    triggers = sorted({t for _, t in runs})
    systems = [s for s in SYSTEMS if any(k[0] == s for k in runs)]
    flights = "all" if n is None else f"{n:,}"
    table = Table(title=f"end-to-end latency at {rate:,.0f} tuples/s ({flights} flights a run)")
    for column in (
        "trigger",
        "system",
        "p50",
        "p95",
        "p99 (min-max)",
        "max",
        "tuples/s of the runs",
    ):
        table.add_column(column, justify="left" if column == "system" else "right")
    summary: dict[str, Any] = {s: {} for s in systems}
    for trigger in triggers:
        for system in systems:
            rs = runs.get((system, trigger), [])
            if not rs:
                continue
            p99s = [r.p99_s for r in rs]
            figures = {
                "p50_s": _median([r.p50_s for r in rs]),
                "p95_s": _median([r.p95_s for r in rs]),
                "p99_s": _median(p99s),
                "p99_min_max_s": [min(p99s), max(p99s)],
                "max_s": _median([r.max_s for r in rs]),
                "tuples_per_s": [round(r.tuples_per_s) for r in rs],
                "batches": _median([r.batches for r in rs]),
                "rows_per_batch": _median([x for r in rs for x in r.rows]),
                "phases_ms_median": {
                    ph: _median([x for r in rs for x in r.phases_ms[ph]]) for ph in PHASES
                },
                "phases_ms_p95": {
                    ph: percentile([x for r in rs for x in r.phases_ms[ph]] or [0], 0.95)
                    for ph in PHASES
                },
            }
            summary[system][str(trigger)] = figures
            table.add_row(
                f"{trigger} ms",
                SYSTEMS[system].split(":")[0],
                f"{figures['p50_s']:.2f} s",
                f"{figures['p95_s']:.2f} s",
                f"{figures['p99_s']:.2f} s ({min(p99s):.2f}-{max(p99s):.2f})",
                f"{figures['max_s']:.2f} s",
                " ".join(f"{v:,}" for v in figures["tuples_per_s"]),
            )
    console.print(table)
    phases = Table(
        title="Spark's micro-batch phases, ms: median (p95) over the micro-batches with data "
        "of both queries, all runs"
    )
    for column in ("trigger", "system", "batches a run", "rows a batch", *PHASES):
        phases.add_column(column, justify="left" if column == "system" else "right")
    for trigger in triggers:
        for system in systems:
            f = summary[system].get(str(trigger))
            if f is None:
                continue
            phases.add_row(
                f"{trigger} ms",
                system,
                f"{f['batches']:.0f}",
                f"{f['rows_per_batch']:,.0f}",
                *(
                    f"{f['phases_ms_median'][ph]:.0f} ({f['phases_ms_p95'][ph]:.0f})"
                    for ph in PHASES
                ),
            )
    console.print(phases)
    targets: dict[str, Any] = {}
    if "floodgate" in summary and "peer" in summary:
        for trigger in triggers:
            fg, peer = summary["floodgate"].get(str(trigger)), summary["peer"].get(str(trigger))
            if fg is None or peer is None:
                continue
            ratio = fg["p99_s"] / peer["p99_s"]
            targets[str(trigger)] = {"p99_ratio": ratio, "met": fg["p99_s"] <= peer["p99_s"]}
            console.print(
                f"trigger {trigger} ms: Floodgate p99 / peer p99 = {fg['p99_s']:.2f} / "
                f"{peer['p99_s']:.2f} s = {ratio:.2f}: target (<= 1) "
                f"{'met' if ratio <= 1 else 'NOT met'}"
            )
    fastest = summary.get("floodgate", {}).get("0")
    if fastest is not None:
        met = fastest["p99_s"] <= TARGET_P99_S
        targets["floodgate_p99_at_trigger_0"] = {"p99_s": fastest["p99_s"], "met": met}
        console.print(
            f"target Floodgate p99 <= {TARGET_P99_S:.1f} s at trigger 0: "
            f"{'met' if met else 'NOT met'} ({fastest['p99_s']:.3f} s)"
        )
    return {"summary": summary, "targets": targets}


def main() -> None:
    parser = common.argument_parser(__doc__, "latency.json")
    common.add_flights_arguments(
        parser, limit=100_000, limit_help="flights a latency run", warmup=True
    )
    parser.add_argument("--max-rate", type=float, help="tuples/s (default: measured)")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "results" / "latency.png")
    parser.add_argument(
        "--triggers",
        default=",".join(str(t) for t in TRIGGERS_MS),
        help="trigger intervals, ms, comma-separated (default 0,250,1000)",
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: both)",
    )
    parser.add_argument(
        "--peer-output",
        choices=sorted(PEER_OUTPUTS),
        default="foreach_batch",
        help="the peer's output: foreach_batch, (b), a transaction a micro-batch "
        "(default); kafka_sink, (a), Spark's Kafka sink, at least once",
    )
    parser.add_argument(
        "--real-time",
        action="store_true",
        help="measure the Real-Time Mode rows instead (real_time_latency.py): Floodgate's "
        "real-time group against Spark's own RTM, at --real-time-rates; with "
        "--systems floodgate-exactly-once, Floodgate's group with exactly-once delivery "
        "alone (bench/out/latency_real_time_exactly_once.json)",
    )
    parser.add_argument(
        "--real-time-rates",
        default="1000,half",
        help="tuples/s of the real-time rows, comma-separated; 'half': half the maximum "
        "rate (--max-rate, else measured) (default 1000,half)",
    )
    parser.add_argument(
        "--real-time-workloads",
        default="passthrough,aggregation",
        help="the real-time rows' queries, comma-separated: passthrough (every flight "
        "out), aggregation (the per-origin hourly delays) (default: both)",
    )
    parser.add_argument(
        "--real-time-interval",
        default="5 seconds",
        help="both systems' real-time checkpoint interval, Spark's duration (default "
        "'5 seconds', Spark's least; Spark's default is '5 minutes'); another than the "
        "default writes latency_real_time_<interval>.json",
    )
    parser.add_argument(
        "--real-time-warm-up",
        action="store_true",
        help="before the measured runs, run each system once per workload, unmeasured "
        "(the first runs in a JVM are slower, whichever system they are)",
    )
    parser.add_argument(
        "--real-time-put-ms",
        type=float,
        help="ms between the replay's puts in the real-time rows, each of rate x this many "
        "tuples (default: real_time_latency.PUT_MS, 10, a steady stream); 1000 puts each "
        "second's tuples at once (the micro-batch rows' batches of 1 000 at 1 000 tuples/s)",
    )
    parser.add_argument(
        "--real-time-seconds",
        type=float,
        default=30.0,
        help="seconds of flights a real-time run measures, after its warm-up (default 30)",
    )
    args = parser.parse_args()
    if args.real_time:
        real_time_main(args)
        return
    global peer_output
    peer_output = args.peer_output
    SYSTEMS["peer"] = PEER_OUTPUTS[peer_output]
    triggers = [int(t) for t in args.triggers.split(",")]
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems: {sorted(unknown)}")
    uptime = Path("/proc/loadavg").read_text().strip()
    console.log(f"load average at start: {uptime}")
    spark = common.start_spark("floodgate-bench-latency")
    driver: bsk.Driver | None = None
    floodgate: bsk.Driver | None = None
    runs: dict[tuple[str, int], list[LatencyRun]] = defaultdict(list)
    versions: dict[str, Any] = {}
    failures: list[str] = []
    try:
        if "peer" in systems:
            driver, versions["peer"] = start_peer()
            console.log(f"peer driver ready: {versions['peer']}")
        if "floodgate" in systems:
            floodgate, versions["floodgate"] = start_floodgate()
            console.log(f"Floodgate's driver ready: {versions['floodgate']}")
        with tempfile.TemporaryDirectory(prefix="floodgate-latency-") as tmp:
            with common.fresh_broker() as bootstrap:
                warm = run_demo(bootstrap_servers=bootstrap, limit=args.warmup, spark=spark)
            console.log(f"warm-up (discarded): {warm.produced / warm.seconds:,.0f} tuples/s")
            rates = [args.max_rate] if args.max_rate else []
            for r in range(0 if args.max_rate else args.repeat):
                with common.fresh_broker() as bootstrap:
                    common.wait_until_quiet(None)
                    result = run_demo(bootstrap_servers=bootstrap, spark=spark)
                rates.append(result.produced / result.seconds)
                console.log(f"maximum rate run {r + 1}: {rates[-1]:,.0f} tuples/s")
            max_rate = statistics.median(rates)
            rate = max_rate / 2
            console.log(f"maximum {max_rate:,.0f} tuples/s; measuring latency at {rate:,.0f}")
            if driver is not None:
                warm_peer = peer_run(driver, 0, rate, args.warmup or args.limit, Path(tmp))
                console.log(
                    f"peer warm-up at trigger 0 (discarded): p99 {warm_peer.p99_s:.2f} s, "
                    f"{warm_peer.tuples_per_s:,.0f} tuples/s"
                )
            if floodgate is not None:
                warm_fg = floodgate_run(floodgate, 0, rate, args.warmup or args.limit, Path(tmp))
                console.log(
                    f"Floodgate warm-up at trigger 0 (discarded): p99 {warm_fg.p99_s:.2f} s, "
                    f"{warm_fg.tuples_per_s:,.0f} tuples/s"
                )
            for trigger in triggers:
                for r in range(args.repeat):
                    order = systems if r % 2 == 0 else systems[::-1]
                    for system in order:
                        try:
                            if system == "floodgate":
                                assert floodgate is not None
                                run = floodgate_run(floodgate, trigger, rate, args.limit, Path(tmp))
                            else:
                                assert driver is not None
                                run = peer_run(driver, trigger, rate, args.limit, Path(tmp))
                        except Exception as exc:  # one run's failure does not lose the others
                            failures.append(f"trigger {trigger} ms run {r + 1} {system}: {exc!r}")
                            console.log(f"FAILED: {failures[-1][:2000]}")
                            continue
                        runs[(system, trigger)].append(run)
                        console.log(
                            f"trigger {trigger} ms run {r + 1} {system}: p50 {run.p50_s:.3f} s, "
                            f"p95 {run.p95_s:.3f} s, p99 {run.p99_s:.3f} s, max "
                            f"{run.max_s:.3f} s ({run.tuples_per_s:,.0f} tuples/s, "
                            f"{run.batches} batches)"
                        )
        versions.setdefault("floodgate", common.versions(spark))
    finally:
        for process in (driver, floodgate):
            if process is not None:
                process.close()
        spark.stop()

    figures = report(runs, rate, args.limit)
    for failure in failures:
        console.print(f"failed run (left out): {failure[:300]}")
    samples = {k: [x for r in rs for x in r.latencies_s] for k, rs in runs.items()}
    common.write_results(
        args.json,
        "end-to-end latency of the flights pipeline, Floodgate and the Spark-native peer",
        versions=versions.get("floodgate", {}),
        peer_versions=versions.get("peer", {}),
        peer_output=peer_output,
        load_average_at_start=uptime,
        flights_per_run=args.limit,
        max_rates=rates,
        rate=rate,
        runs={
            str(t): [{"p50_s": r.p50_s, "p99_s": r.p99_s} | r.brief() for r in rs]
            for (s, t), rs in runs.items()
            if s == "floodgate"
        },
        peer_runs={str(t): [r.brief() for r in rs] for (s, t), rs in runs.items() if s == "peer"},
        target_p99_s=TARGET_P99_S,
        failed_runs=failures,
        **figures,
    )
    console.print(f"results: {args.json}")
    # The JSON first: a missing matplotlib must not lose minutes of measurements.
    if common.plot_if_possible(lambda: plot(samples, args.png, rate, args.limit), args.png):
        console.print(f"histogram: {args.png}")


def real_time_main(args: Any) -> None:
    """``--real-time``: the Real-Time Mode rows (:mod:`real_time_latency`), written to
    ``bench/out/latency_real_time.json``."""
    import real_time_latency as rtl

    rates: list[float] = []
    max_rates: list[float] = []
    for text in args.real_time_rates.split(","):
        if text.strip() != "half":
            rates.append(float(text))
            continue
        if not max_rates:
            if args.max_rate:
                max_rates = [args.max_rate]
            else:
                spark = common.start_spark("floodgate-bench-latency-max")
                try:
                    for r in range(args.repeat):
                        with common.fresh_broker() as bootstrap:
                            common.wait_until_quiet(None)
                            result = run_demo(bootstrap_servers=bootstrap, spark=spark)
                        max_rates.append(result.produced / result.seconds)
                        console.log(f"maximum rate run {r + 1}: {max_rates[-1]:,.0f} tuples/s")
                finally:
                    spark.stop()
        rates.append(statistics.median(max_rates) / 2)
    put_ms = rtl.PUT_MS if args.real_time_put_ms is None else args.real_time_put_ms
    uptime = Path("/proc/loadavg").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="floodgate-latency-rtm-") as tmp:
        chosen = [
            {
                "floodgate": "floodgate_rtm",
                "peer": "spark_rtm",
                "floodgate-exactly-once": "floodgate_rtm_exactly_once",
            }[s]
            for s in args.systems.split(",")
            if s
        ]
        measured = rtl.measure(
            rates,
            args.real_time_seconds,
            args.repeat,
            Path(tmp),
            chosen,
            tuple(args.real_time_workloads.split(",")),
            args.real_time_interval,
            args.real_time_warm_up,
            put_ms,
        )
    figures = rtl.summary(measured["runs"])
    for failure in measured["failures"]:
        console.print(f"failed run (left out): {failure[:300]}")
    # Exactly once alone is a row of its own (no baseline): its own file.
    exactly_once_only = chosen == ["floodgate_rtm_exactly_once"]
    name = "latency_real_time_exactly_once" if exactly_once_only else "latency_real_time"
    if args.real_time_interval != rtl.INTERVAL:
        name += "_" + "_".join(args.real_time_interval.split())
    if put_ms != rtl.PUT_MS:
        name += f"_puts_{put_ms:g}ms"
    path = args.json.with_name(f"{name}.json")
    common.write_results(
        path,
        "produce-to-reception latency in Spark's Real-Time Mode, Floodgate and Spark's own",
        versions=measured["versions"],
        load_average_at_start=uptime,
        max_rates=max_rates,
        rates=rates,
        seconds_per_run=args.real_time_seconds,
        warmup_s=rtl.WARMUP_S,
        checkpoint_interval=args.real_time_interval,
        put_interval_ms=put_ms,
        warm_up_runs=args.real_time_warm_up,
        runs=rtl.brief(measured["runs"]),
        summary=figures,
        target_p99_s=rtl.TARGET_P99_S,
        failed_runs=measured["failures"],
    )
    console.print(f"results: {path}")


if __name__ == "__main__":
    main()
