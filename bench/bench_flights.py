"""Benchmark: the whole flights pipeline against Quix Streams (issue 9, comparison 1).

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
  the topic, so Quix pays neither for producing nor for waiting on a producer.

Each run has a broker of its own (see :func:`run_once`). Before a run's times
count, both outputs (the latest row per origin-hour) are checked equal to a pandas
computation of the same figures (counts exact, means to 1e-9 relative); a run that
differs fails the script.

Tuples/s = flights / time. The headline is the median over runs of Floodgate ÷
Quix (the two of a run share the machine's state); medians and min-max of both are
printed too. Target: >= 5x. One warm-up run of Floodgate (all flights, or
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
import uuid
from dataclasses import dataclass
from typing import Any

import common
from common import ROOT, console

from pipeline.demo.run import run_demo

TARGET_RATIO = 5.0
QUIX_VENV = ROOT / "bench" / ".venv-quix"
QUIX_PYTHON = QUIX_VENV / "bin" / "python"
QUIX_SCRIPT = ROOT / "bench" / "quix_flights.py"
QUIX_REQUIREMENTS = ROOT / "bench" / "requirements-quix.txt"
QUIX_TIMEOUT_S = 1800.0


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
    """One run: Floodgate over the flights, then Quix Streams over the same topic."""

    n: int
    floodgate_s: float
    floodgate_blocked_s: float
    quix_s: float
    quix_wall_s: float
    started_quiet: bool

    @property
    def floodgate_tuples_per_s(self) -> float:
        return self.n / self.floodgate_s

    @property
    def quix_tuples_per_s(self) -> float:
        return self.n / self.quix_s

    @property
    def ratio(self) -> float:
        return self.floodgate_tuples_per_s / self.quix_tuples_per_s


def run_quix(bootstrap: str, topic: str, n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``bench/quix_flights.py`` over ``topic``; return its figures and its output
    (the latest row per origin-hour)."""
    run = uuid.uuid4().hex[:8]
    output = f"bench.quix.delays_by_origin_hour.{run}"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
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
        ],
        capture_output=True,
        text=True,
        timeout=QUIX_TIMEOUT_S,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"quix_flights.py failed ({done.returncode}): {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    rows = subprocess.run(
        [
            str(QUIX_PYTHON),
            str(QUIX_SCRIPT),
            "--bootstrap",
            bootstrap,
            "--output-topic",
            output,
            "--read-output",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=True,
    )
    return figures, json.loads(rows.stdout)


def run_once(spark: Any, limit: int | None, expected: dict[Any, Any], engine: str) -> Run:
    """Floodgate, then Quix Streams over the topic Floodgate's replay wrote, on a broker
    of their own (:func:`common.fresh_broker` says why)."""
    with common.fresh_broker(engine) as bootstrap:
        quiet = common.wait_until_quiet(None)
        result = run_demo(bootstrap_servers=bootstrap, limit=limit, spark=spark)
        if not result.balanced:
            raise RuntimeError(f"Floodgate: not every flight was processed: {result.processed}")
        common.check_origin_hours("Floodgate", result.origin_hours, expected)
        common.wait_until_quiet(None)
        quix, rows = run_quix(bootstrap, result.input_topic, result.produced)
    if quix["n"] != result.produced:
        raise RuntimeError(f"Quix Streams processed {quix['n']} of {result.produced} flights")
    common.check_origin_hours("Quix Streams", rows, expected)
    return Run(
        n=result.produced,
        floodgate_s=result.seconds,
        floodgate_blocked_s=result.blocked_s,
        quix_s=quix["seconds"],
        quix_wall_s=quix["wall_s"],
        started_quiet=quiet.quiet,
    )


def main() -> None:
    parser = common.argument_parser(__doc__, "flights.json")
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    args = parser.parse_args()
    ensure_quix_venv()
    expected = common.expected_origin_hours(args.limit)
    spark = common.start_spark("floodgate-bench-flights")
    runs: list[Run] = []
    try:
        with common.fresh_broker(args.engine) as bootstrap:
            warm = run_demo(bootstrap_servers=bootstrap, limit=args.warmup, spark=spark)
        console.log(f"warm-up (discarded): {warm.produced / warm.seconds:,.0f} tuples/s")
        for r in range(args.repeat):
            run = run_once(spark, args.limit, expected, args.engine)
            runs.append(run)
            console.log(
                f"run {r + 1}/{args.repeat}: Floodgate {run.floodgate_tuples_per_s:,.0f} "
                f"tuples/s ({run.floodgate_s:.1f} s, producer blocked "
                f"{run.floodgate_blocked_s:.1f} s), Quix Streams {run.quix_tuples_per_s:,.0f} "
                f"tuples/s ({run.quix_s:.1f} s): {run.ratio:.2f}x; both equal to pandas"
            )
        java_versions = common.versions(spark)
    finally:
        spark.stop()

    fg = [r.floodgate_tuples_per_s for r in runs]
    qx = [r.quix_tuples_per_s for r in runs]
    ratio = statistics.median(r.ratio for r in runs)
    n = runs[0].n
    console.print(
        common.rates_table(
            f"flights end to end: Floodgate vs Quix Streams ({n:,} flights)",
            {
                "Floodgate (replay + both queries + reception)": fg,
                "Quix Streams (per origin-hour, pre-produced)": qx,
            },
        )
    )
    console.print(
        "Floodgate / Quix per run: "
        + " ".join(f"{r.ratio:.2f}" for r in runs)
        + f"; median {ratio:.2f}x, ratio of the medians "
        f"{statistics.median(fg) / statistics.median(qx):.2f}x"
    )
    console.print(
        f"target Floodgate >= {TARGET_RATIO:.0f}x Quix Streams: "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'} ({ratio:.2f}x)"
    )
    common.write_results(
        args.json,
        "flights end to end: Floodgate vs Quix Streams",
        engine=args.engine,
        versions=java_versions,
        n=n,
        **common.ratio_fields(
            runs, "floodgate_tuples_per_s", "quix_tuples_per_s", target=TARGET_RATIO
        ),
    )


if __name__ == "__main__":
    main()
