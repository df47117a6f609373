"""Benchmark: end-to-end latency of the flights pipeline (issue 9, comparison 3).

What is measured, on one embedded broker and one SparkSession:

1. Floodgate's maximum rate: the main job (:func:`pipeline.demo.run.run_demo`) over
   every flight as fast as back-pressure lets the replay go, with
   ``conf/flights.toml`` as it is (what ``bench_flights.py`` measures); flights /
   seconds, the median of ``--repeat`` runs (or ``--max-rate``, given).
2. Then, for each trigger interval of 0 (as fast as possible), 250 ms and 1 s
   (``trigger_interval_ms``, everything else as in ``conf/flights.toml``), the same
   job over the first ``--limit`` flights with the replay paced at **half that
   maximum rate**, ``--repeat`` runs each.

Every run has a broker of its own (``common.fresh_broker`` says why).

The latency of a flight is the time from its *produce timestamp* (the Kafka record
timestamp librdkafka sets when the back-pressure client hands it over, read back
from the input topic after the run) to the moment the demo's reception application
(:class:`pipeline.demo.reception.Reception`, ``StreamOutput.get`` with ``read_committed``)
received the first ``delays_by_origin_hour`` tuple that counts it. The output is an
aggregate, so a flight is attributed by count: the i-th flight of an origin-hour (in
produce order) is visible once a tuple of that origin-hour with ``flights >= i`` has
been received. Every flight must be attributed, or the run fails.

Reported per trigger interval: p50 and p99 (median over runs, min-max), and a
histogram of all flights' latencies, one curve per interval, as
``bench/results/latency.png``. Target: p99 <= 1 s at the fastest setting (trigger 0).

Run: ``.venv/bin/python bench/bench_latency.py [--repeat 3] [--limit 150000]``
(needs the ``bench`` extra for matplotlib: ``make bench-deps``).
Results: a table, the PNG, and JSON in ``bench/out/latency.json``.
"""

from __future__ import annotations

import bisect
import statistics
import tempfile
import threading
import time
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import common
from common import ROOT, console
from rich.table import Table

from pipeline.demo.reception import read_all
from pipeline.demo.run import run_demo
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

TRIGGERS_MS = (0, 250, 1_000)
TARGET_P99_S = 1.0
STREAM = "delays_by_origin_hour"


def config_with_trigger(trigger_ms: int | None, directory: Path) -> Path:
    """``conf/flights.toml`` with ``trigger_interval_ms`` replaced (``None``: as it is)."""
    text = common.FLIGHTS_TOML.read_text()
    if trigger_ms is None:
        return common.FLIGHTS_TOML
    raw = tomllib.loads(text)
    old = raw["query_group"]["trigger_interval_ms"]
    text = text.replace(f"trigger_interval_ms = {old}", f"trigger_interval_ms = {trigger_ms}", 1)
    if tomllib.loads(text)["query_group"]["trigger_interval_ms"] != trigger_ms:
        raise RuntimeError("could not set trigger_interval_ms in conf/flights.toml")
    path = directory / f"flights-trigger-{trigger_ms}.toml"
    path.write_text(text)
    return path


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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def plot(samples: dict[int, list[float]], path: Path, rate: float, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 5))
    top = max(max(v) for v in samples.values())
    bins = np.linspace(0, top, 120)
    for trigger, values in samples.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        ax.hist(
            values,
            bins=bins,
            histtype="step",
            linewidth=1.6,
            density=True,
            label=f"trigger {trigger} ms: p50 {p50:.2f} s, p99 {p99:.2f} s",
        )
    ax.axvline(TARGET_P99_S, color="grey", linestyle="--", linewidth=1)
    ax.text(TARGET_P99_S, ax.get_ylim()[1] * 0.95, " p99 target (trigger 0)", color="grey")
    ax.set_xlabel("produce timestamp -> output tuple received by the reception (s)")
    ax.set_ylabel("share of flights (density)")
    ax.set_title(
        f"Floodgate flights pipeline: end-to-end latency\nat {rate:,.0f} tuples/s "
        f"(half the maximum), {n:,} flights a run, all runs",
        fontsize=11,
    )
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = common.argument_parser(__doc__, "latency.json")
    common.add_flights_arguments(
        parser, limit=100_000, limit_help="flights a latency run", warmup=True
    )
    parser.add_argument("--max-rate", type=float, help="tuples/s (default: measured)")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "results" / "latency.png")
    args = parser.parse_args()
    spark = common.start_spark("floodgate-bench-latency")
    samples: dict[int, list[float]] = {}
    per_run: dict[int, list[tuple[float, float]]] = {}
    try:
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
            for trigger in TRIGGERS_MS:
                path = config_with_trigger(trigger, Path(tmp))
                samples[trigger], per_run[trigger] = [], []
                for r in range(args.repeat):
                    arrivals = Arrivals()
                    with common.fresh_broker() as bootstrap:
                        common.wait_until_quiet(None)
                        result = run_demo(
                            bootstrap_servers=bootstrap,
                            limit=args.limit,
                            spark=spark,
                            rate=rate,
                            config_path=path,
                            on_received=arrivals,
                        )
                        produced = produce_times(bootstrap, result.input_topic)
                    if not result.balanced:
                        raise RuntimeError(f"not every flight was processed: {result.processed}")
                    values = latencies(produced, arrivals)
                    if len(values) != result.produced:
                        raise RuntimeError(f"{len(values)} latencies for {result.produced} flights")
                    p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
                    samples[trigger] += values
                    per_run[trigger].append((p50, p99))
                    console.log(
                        f"trigger {trigger} ms run {r + 1}: p50 {p50:.3f} s, p99 {p99:.3f} s, "
                        f"max {max(values):.3f} s ({result.produced / result.seconds:,.0f} "
                        "tuples/s)"
                    )
        java_versions = common.versions(spark)
    finally:
        spark.stop()

    table = Table(
        title=f"end-to-end latency at {rate:,.0f} tuples/s ({args.limit:,} flights a run)"
    )
    for column in ("trigger", "p50 median", "p50 min-max", "p99 median", "p99 min-max"):
        table.add_column(column, justify="right")
    for trigger, runs in per_run.items():
        p50s, p99s = [p for p, _ in runs], [p for _, p in runs]
        table.add_row(
            f"{trigger} ms",
            f"{statistics.median(p50s):.3f} s",
            f"{min(p50s):.3f}-{max(p50s):.3f}",
            f"{statistics.median(p99s):.3f} s",
            f"{min(p99s):.3f}-{max(p99s):.3f}",
        )
    console.print(table)
    fastest = statistics.median(p for _, p in per_run[0])
    console.print(
        f"target p99 <= {TARGET_P99_S:.1f} s at trigger 0: "
        f"{'met' if fastest <= TARGET_P99_S else 'NOT met'} ({fastest:.3f} s)"
    )
    plot(samples, args.png, rate, args.limit)
    console.print(f"histogram: {args.png}")
    common.write_results(
        args.json,
        "end-to-end latency of the flights pipeline",
        versions=java_versions,
        flights_per_run=args.limit,
        max_rates=rates,
        rate=rate,
        runs={
            str(t): [{"p50_s": p50, "p99_s": p99} for p50, p99 in runs]
            for t, runs in per_run.items()
        },
        target_p99_s=TARGET_P99_S,
    )


if __name__ == "__main__":
    main()
