"""Benchmark: event-time-aligned micro-batches against micro-batches planned by offsets
only, on the whole flights pipeline (the demo, ``run_demo``), in one process.

Both variants run ``conf/flights.toml`` with its 2-hour watermark; the baseline drops
``max_event_time_drift_ms``, so its source plans by offsets alone, as Spark's Kafka
source does. Each repeat runs both, in alternating order, each on a broker of its own
(:func:`common.fresh_broker`), after one discarded warm-up run. Reported per variant:
tuples/s end to end (replay, both queries, reception), and the flights dead-lettered
as late (a micro-batch that read one partition ahead of another moved the watermark
past them). Target: alignment costs under 5 % of the throughput, with 0 late.

``--aligned-only --repeat 10`` is the demo's own check: ten full replays in a row,
every one with 0 late.

Run: ``.venv/bin/python bench/bench_alignment.py [--repeat 3] [--limit N]``.
Results: a table, and JSON in ``bench/out/alignment.json``.
"""

from __future__ import annotations

import statistics
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common
import tomli_w
from bench_limit import SparkPhases
from common import console

from pipeline.demo.run import DEFAULT_CONFIG, run_demo

TARGET_COST = 0.05


@dataclass
class Variant:
    """One run of one variant: flights, seconds end to end, flights dead-lettered as
    late (per query, most of the two), rows Spark dropped as late; where the time went:
    micro-batches with data (per query, most of the two), Spark's ``latestOffset`` phase
    summed over them (the source's planning, alignment included; per query, most), the
    seconds the replay waited on a full input queue."""

    aligned: bool
    n: int
    seconds: float
    late: int
    dropped: int
    batches: int = 0
    planning_s: float = 0.0
    blocked_s: float = 0.0

    @property
    def tuples_per_s(self) -> float:
        return self.n / self.seconds


def configs(directory: Path) -> dict[bool, Path]:
    """The shipped query group file (aligned), and the same without the alignment."""
    raw = tomllib.loads(DEFAULT_CONFIG.read_text())
    assert raw["input_streams"]["flights"].get("max_event_time_drift_ms"), "demo not aligned"
    aligned = directory / "aligned.toml"
    aligned.write_text(tomli_w.dumps(raw))
    raw["input_streams"]["flights"].pop("max_event_time_drift_ms")
    offsets = directory / "offsets.toml"
    offsets.write_text(tomli_w.dumps(raw))
    return {True: aligned, False: offsets}


def run_variant(
    spark: Any, config: Path, aligned: bool, limit: int | None, engine: str, phases: SparkPhases
) -> Variant:
    """One demo run of one variant on a fresh broker."""
    with common.fresh_broker(engine) as bootstrap:
        common.wait_until_quiet(None)
        phases.take()
        result = run_demo(bootstrap_servers=bootstrap, limit=limit, spark=spark, config_path=config)
    batches = [b for b in phases.take() if b["rows"] > 0]
    queries = {b["query"] for b in batches}
    if not result.balanced:
        raise RuntimeError(f"not every flight was processed or dead-lettered: {result.processed}")
    return Variant(
        aligned=aligned,
        n=result.produced,
        seconds=result.seconds,
        late=max(result.dead_lettered.values(), default=0),
        dropped=max(result.dropped_by_watermark.values(), default=0),
        batches=max((sum(b["query"] == q for b in batches) for q in queries), default=0),
        planning_s=max(
            (
                sum(b["ms"].get("latestOffset", 0) for b in batches if b["query"] == q) / 1000
                for q in queries
            ),
            default=0.0,
        ),
        blocked_s=result.blocked_s,
    )


def main() -> None:
    parser = common.argument_parser(__doc__, "alignment.json")
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    parser.add_argument(
        "--aligned-only",
        action="store_true",
        help="run the demo's own (aligned) config only: the 0-late check",
    )
    args = parser.parse_args()
    spark = common.start_spark("floodgate-bench-alignment")
    runs: list[Variant] = []
    phases = SparkPhases()
    with tempfile.TemporaryDirectory(prefix="floodgate-alignment-") as tmp, phases.installed():
        paths = configs(Path(tmp))
        try:
            warm = run_variant(spark, paths[True], True, args.warmup, args.engine, phases)
            console.log(f"warm-up (discarded): {warm.tuples_per_s:,.0f} tuples/s")
            for r in range(args.repeat):
                order = [True] if args.aligned_only else [r % 2 == 0, r % 2 == 1]
                for aligned in order:
                    run = run_variant(
                        spark, paths[aligned], aligned, args.limit, args.engine, phases
                    )
                    runs.append(run)
                    console.log(
                        f"run {r + 1}/{args.repeat} {'aligned' if aligned else 'by offsets'}: "
                        f"{run.tuples_per_s:,.0f} tuples/s ({run.seconds:.1f} s), "
                        f"{run.late:,} late, {run.dropped:,} dropped by Spark; "
                        f"{run.batches} micro-batches, planning {run.planning_s:.2f} s, "
                        f"replay blocked {run.blocked_s:.1f} s"
                    )
            versions = common.versions(spark)
        finally:
            spark.stop()

    by = {flag: [r for r in runs if r.aligned is flag] for flag in (True, False)}
    rates = {
        "aligned in event time": [r.tuples_per_s for r in by[True]],
        **({"by offsets only": [r.tuples_per_s for r in by[False]]} if by[False] else {}),
    }
    console.print(
        common.rates_table(f"flights end to end, 2-hour watermark ({runs[0].n:,})", rates)
    )
    late = {flag: [r.late for r in rs] for flag, rs in by.items() if rs}
    console.print(f"late, aligned: {late[True]}; by offsets: {late.get(False, '-')}")
    fields: dict[str, Any] = {
        "runs": [r.__dict__ | {"tuples_per_s": r.tuples_per_s} for r in runs],
        "late_aligned": late[True],
        "zero_late_runs_in_a_row": len(late[True]) if not any(late[True]) else None,
    }
    if by[False]:
        cost = 1 - statistics.median(rates["aligned in event time"]) / statistics.median(
            rates["by offsets only"]
        )
        fields |= {"cost": round(cost, 3), "target_cost": TARGET_COST, "late_offsets": late[False]}
        console.print(
            f"throughput cost of the alignment: {cost:.1%} (target under {TARGET_COST:.0%}): "
            f"{'met' if cost < TARGET_COST else 'NOT met'}"
        )
    common.write_results(
        args.json,
        "event-time-aligned micro-batches vs planned by offsets",
        engine=args.engine,
        versions=versions,
        **fields,
    )


if __name__ == "__main__":
    main()
