"""Benchmark: the cost of the output stream queue bound.

What is measured, in this one script, on one embedded broker and one SparkSession:
end-to-end throughput of the ``flights`` query group (``conf/flights.toml``: both
queries, 60 000-row micro-batches, output stream queues of 20 000 tuples) over
every flight (or ``--limit``), produced once beforehand to a 4-partition topic:

* ``check on``: ``output_queue_check = true`` (the default): before each
  micro-batch's output is written, the guard reads the output stream queue from
  the broker (two ``ListOffsets`` and one ``OffsetFetch`` per reception group) and
  compares its free space with the batch; the query sleeps or holds if it does not
  fit (``sleeps`` and ``holds`` are reported);
* ``check off`` (the baseline): ``output_queue_check = false``, the same group
  writing without looking.

Both variants run the same reception application as the demo
(:class:`pipeline.demo.reception.Reception`: ``StreamOutput.get`` on both output streams,
latest tuple per key), so both free their output queues the same way. Each run
has a new query group name (so new consumer groups), new output topics and a new
checkpoint; it runs with ``Trigger.AvailableNow`` and is timed from
``QueryGroup.start`` to the moment both queries have terminated and the reception
has read every output tuple (output queue lengths 0). Tuples/s = flights / that
time; each query must have read every flight.

Runs come in ``--repeat`` pairs, ordered ABBA (off-on, on-off, ...) after one discarded
warm-up run (the first job of a SparkSession costs several seconds more: 6-8 s measured
on the 2-core development machine), each starting once the broker and the machine are
quiet (``bench/common.py``). The headline ratio is the median over pairs of on/off (the
two runs of a pair are back to back, so they share the machine's drift); the ratio of
the two medians is printed too. Target: >= 0.95x. The run time spent in the checks
themselves (``floodgate_output_stream_queue_check_seconds``) is reported as well: it
bounds the cost of the check without the run-to-run noise.

Run: ``.venv/bin/python bench/bench_output.py [--repeat 5] [--limit N] [--bootstrap H:P]``.
Results: a table, and JSON in ``bench/out/output.json``.
"""

from __future__ import annotations

import statistics
import tempfile
import tomllib
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import common
from common import console
from prometheus_client import CollectorRegistry
from rich.table import Table

from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.client.connector import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.kafka.topics import ensure_topics
from pipeline.metrics import stream_total
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup

TARGET_RATIO = 0.95
RUN_TIMEOUT_S = 900.0
VARIANTS = {"check off (baseline)": False, "check on": True}


@dataclass
class Run:
    """One timed run of the flights query group."""

    check: bool
    tuples: int
    seconds: float
    machine_busy: float
    started_quiet: bool
    batches: int
    sleeps: int
    holds: int
    output_tuples: int
    checks: int
    check_s: float

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds


def group_config(topic: str, n: int, checkpoints: Path, *, check: bool) -> QueryGroupConfig:
    """``conf/flights.toml`` reading ``topic``, with fresh names, topics and checkpoint."""
    raw = tomllib.loads(common.FLIGHTS_TOML.read_text())
    run = uuid.uuid4().hex[:8]
    group = raw["query_group"]
    group.update(
        name=f"bench{run}",
        checkpoint_dir=str(checkpoints / run),
        control_dir=str(checkpoints / "run"),
        output_queue_check=check,
    )
    raw["input_streams"]["flights"].update(
        topic=topic, starting_offsets="earliest", max_queue_size=n + 1
    )
    for stream in raw["output_streams"].values():
        stream["topic"] = f"bench.{stream['topic']}.{run}"
    raw["query_group"]["dead_letter_topic"] = f"bench.dead-letter.{run}"
    return parse_query_group(raw, env={})


def run_once(
    bootstrap: str,
    spark: Any,
    schemas: SchemaRepository,
    topic: str,
    n: int,
    checkpoints: Path,
    broker_pid: int | None,
    *,
    check: bool,
) -> Run:
    config = group_config(topic, n, checkpoints, check=check)
    group = QueryGroup(
        config,
        bootstrap_servers=bootstrap,
        spark=spark,
        schemas=schemas,
        registry=CollectorRegistry(),
    )
    ensure_topics(bootstrap, group.topics())
    outputs = sorted({q.output for q in config.queries.values()})
    quiet = common.wait_until_quiet(broker_pid)
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        reception = common.open_reception(connector, config)
        meter = common.Meter(broker_pid)
        try:
            with meter.measure():
                group.start(available_now=True)
                if not group.await_termination(RUN_TIMEOUT_S):
                    raise RuntimeError(f"the query group did not finish in {RUN_TIMEOUT_S} s")
                reception.wait_until_read(RUN_TIMEOUT_S)
            stats = group.stats()
            output_tuples = sum(t.received for t in reception.tables().values())
        finally:
            reception.stop()
            group.stop()
    for query, s in stats.items():
        if s.input_tuples != n:
            raise RuntimeError(f"query {query} read {s.input_tuples} of {n} flights")

    def total(name: str) -> float:
        return stream_total(group.registry, name, query_group=config.name, streams=outputs)

    return Run(
        check=check,
        tuples=n,
        seconds=meter.seconds,
        machine_busy=meter.machine_busy,
        started_quiet=quiet.quiet,
        batches=sum(s.batches for s in stats.values()),
        sleeps=int(total("floodgate_query_group_sleeps_total")),
        holds=int(total("floodgate_query_group_holds_total")),
        output_tuples=output_tuples,
        checks=int(total("floodgate_output_stream_queue_check_seconds_count")),
        check_s=total("floodgate_output_stream_queue_check_seconds_sum"),
    )


def main() -> None:
    parser = common.argument_parser(__doc__, "output.json", repeat=5)
    common.add_flights_arguments(parser, bootstrap=True)
    args = parser.parse_args()
    common.log_warnings()

    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    broker = None if args.bootstrap else EmbeddedBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap_servers  # type: ignore[union-attr]
    broker_pid = broker.pid if broker is not None else None
    topic = f"bench.flights.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (4, 1)})
    n, produce_s = common.produce_flights(bootstrap, topic, codec, args.limit)
    console.log(f"produced {n:,} flights to {topic} in {produce_s:.1f} s")
    spark = common.start_spark("floodgate-bench-output")
    runs: dict[str, list[Run]] = {name: [] for name in VARIANTS}
    try:
        with tempfile.TemporaryDirectory(prefix="floodgate-bench-") as tmp:
            checkpoints = Path(tmp)
            cold = run_once(
                bootstrap, spark, schemas, topic, n, checkpoints, broker_pid, check=True
            )
            console.log(f"warm-up run (discarded): {cold.tuples_per_s:,.0f} tuples/s")
            for r in range(args.repeat):
                # ABBA: every other pair runs "on" first, so a drift or an after-effect
                # of the previous run (the broker rewriting its file) hits both alike.
                order = list(VARIANTS.items())
                for name, check in order if r % 2 == 0 else order[::-1]:
                    run = run_once(
                        bootstrap, spark, schemas, topic, n, checkpoints, broker_pid, check=check
                    )
                    runs[name].append(run)
                    flag = "" if run.started_quiet else " (machine was not quiet)"
                    console.log(
                        f"run {r + 1}/{args.repeat} {name}: {run.tuples_per_s:,.0f} tuples/s "
                        f"({run.seconds:.2f} s, {run.batches} batches, {run.sleeps} sleeps, "
                        f"{run.holds} holds, {run.output_tuples:,} output tuples, "
                        f"{run.checks} checks taking {run.check_s * 1000:.0f} ms){flag}"
                    )
            java_versions = common.versions(spark)
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()

    medians = {name: statistics.median(r.tuples_per_s for r in rs) for name, rs in runs.items()}
    baseline = medians["check off (baseline)"]
    # The headline: the median over pairs of (on / off), each pair run back to back.
    pair_ratios = [
        on.tuples_per_s / off.tuples_per_s
        for on, off in zip(runs["check on"], runs["check off (baseline)"], strict=True)
    ]
    ratio = statistics.median(pair_ratios)
    table = Table(title=f"flights query group end to end, output check on vs off ({n:,} flights)")
    columns = ("variant", "median tuples/s", "runs", "÷ baseline", "sleeps", "holds", "checks")
    for column in columns:
        table.add_column(column, justify="left" if column == "variant" else "right")
    for name, rs in runs.items():
        table.add_row(
            name,
            f"{medians[name]:,.0f}",
            " ".join(f"{r.tuples_per_s:,.0f}{'' if r.started_quiet else '*'}" for r in rs),
            f"{medians[name] / baseline:.3f}x",
            str(sum(r.sleeps for r in rs)),
            str(sum(r.holds for r in rs)),
            f"{sum(r.checks for r in rs)} in {sum(r.check_s for r in rs):.2f} s",
        )
    console.print(table)
    console.print(
        "on / off per pair: "
        + " ".join(f"{r:.3f}" for r in pair_ratios)
        + f"; ratio of the medians {medians['check on'] / baseline:.3f}x"
    )
    on = runs["check on"]
    check_share = sum(r.check_s for r in on) / sum(r.seconds for r in on)
    console.print(
        f"the checks themselves: {sum(r.checks for r in on) / len(on):.0f} per run, "
        f"{1000 * sum(r.check_s for r in on) / max(1, sum(r.checks for r in on)):.1f} ms "
        f"each, {check_share:.2%} of the run time"
    )
    console.print(
        f"target check on >= {TARGET_RATIO:.2f}x check off (median pair ratio): "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'} ({ratio:.3f}x)"
    )
    common.write_results(
        args.json,
        "output stream queue bound: flights query group, check on vs off",
        versions=java_versions,
        n=n,
        warm_up_discarded=asdict(cold),
        runs={
            name: [asdict(r) | {"tuples_per_s": r.tuples_per_s} for r in rs]
            for name, rs in runs.items()
        },
        median_tuples_per_s=medians,
        pair_ratios_on_to_off=[round(r, 4) for r in pair_ratios],
        ratio_on_to_off=round(ratio, 4),
        ratio_of_medians=round(medians["check on"] / baseline, 4),
        check_share_of_run_time=round(check_share, 5),
        target=TARGET_RATIO,
    )


if __name__ == "__main__":
    main()
