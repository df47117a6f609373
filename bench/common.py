"""What the benchmark scripts share: their preamble (the console, the arguments every
script takes, logging, a SparkSession), the flights stream set up on a topic of their
own, waiting for a quiet machine, CPU accounting, and the description of the machine
and the code measured.

The scripts run as files (``.venv/bin/python bench/bench_x.py``): Python puts their
folder first on ``sys.path``, so ``from common import ...`` finds this module, and the
packages they measure (``pipeline``, ``admission``, ``sweeper``) come from the
environment's install (``make`` installs the checkout in editable mode).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console

from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.flights import flight_tuples, load_flights
from pipeline.serde.codec import StreamCodec, TupleKey

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parents[1]
FLIGHTS_TOML = ROOT / "conf" / "flights.toml"
#: Where the scripts write their figures as JSON by default (git-ignored).
OUT_DIR = ROOT / "bench" / "out"
#: The scripts' console: wide enough for the tables when the output goes to a file.
console = Console(width=None if sys.stdout.isatty() else 150)
#: How long producing may wait for the last acknowledgements.
PRODUCE_TIMEOUT_S = 300.0
#: Before each timed run: the broker uses under this share of one core, and the
#: machine under this share of all its cores, over one window (see wait_until_quiet).
QUIET_BROKER_CPU = 0.05
QUIET_MACHINE_BUSY = 0.15
QUIET_WINDOW_S = 1.0
QUIET_TIMEOUT_S = 60.0
#: Flights of the discarded warm-up run of the demo (``--warmup``; ``None``: all of
#: them, as many as a timed run). A query group is a long-running service, so its
#: steady state is what a user compares: the JVM's JIT compiles Spark's and the
#: generated code over the first tens of micro-batches, and a run after a 20 000-flight
#: warm-up spent ~half of the driver JVM's CPU in its compiler threads.
WARMUP_FLIGHTS: int | None = None


# --------------------------------------------------------------------------- the preamble


def argument_parser(
    doc: str, results: str | None = None, *, repeat: int = 3
) -> argparse.ArgumentParser:
    """A script's argument parser: described by the first paragraph of ``doc`` (its
    module docstring), with ``--repeat N`` (timed runs, default ``repeat``) and, given
    ``results`` (a file name such as ``"put.json"``), ``--json PATH`` (default
    ``bench/out/<results>``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=repeat, help=f"timed runs (default {repeat})")
    if results is not None:
        default = OUT_DIR / results
        parser.add_argument(
            "--json", type=Path, default=default, help=f"results file (default {default})"
        )
    return parser


def add_flights_arguments(
    parser: argparse.ArgumentParser,
    *,
    limit: int | None = None,
    limit_help: str = "first N flights (default: all)",
    warmup: bool = False,
    bootstrap: bool = False,
) -> None:
    """``--limit N`` (flights, default ``limit``); with ``warmup``, ``--warmup N``
    (flights of the discarded warm-up run, :data:`WARMUP_FLIGHTS`); with ``bootstrap``,
    ``--bootstrap H:P`` (an existing cluster instead of an embedded broker)."""
    parser.add_argument("--limit", type=int, default=limit, help=limit_help)
    if warmup:
        parser.add_argument(
            "--warmup",
            type=int,
            default=WARMUP_FLIGHTS,
            help="flights of the discarded warm-up run (default: all)",
        )
    if bootstrap:
        parser.add_argument(
            "--bootstrap", help="an existing Kafka cluster (default: an embedded broker)"
        )


def log_warnings() -> None:
    """Log warnings and errors only, each line naming its level and logger."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the element at rank ``q * len``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_spark(app_name: str) -> Any:
    """:func:`log_warnings`, then a ``local[2]`` SparkSession named ``app_name`` that
    logs errors only (a ``pyspark.sql.SparkSession``; stop it when done)."""
    from pipeline.spark.session import build_spark_session

    log_warnings()
    spark = build_spark_session(app_name=app_name, master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --------------------------------------------------------------------------- the flights


def flights_config(topic: str, max_queue_size: int) -> QueryGroupConfig:
    """``conf/flights.toml`` under a fresh group name, reading ``topic``, its input queue
    bounded at ``max_queue_size`` (set it above the data to measure without waits)."""
    raw = tomllib.loads(FLIGHTS_TOML.read_text())
    raw["query_group"]["name"] = f"bench{uuid.uuid4().hex[:8]}"
    raw["input_streams"]["flights"]["max_queue_size"] = max_queue_size
    raw["input_streams"]["flights"]["topic"] = topic
    return parse_query_group(raw, env={})


def open_reception(connector: Any, config: QueryGroupConfig, **options: Any) -> Any:
    """The demo's :class:`~pipeline.demo.reception.Reception` of every output stream of
    ``config`` through ``connector``, started; ``options`` go to ``Reception``."""
    from pipeline.demo.reception import Reception

    outputs = sorted({q.output for q in config.queries.values()})
    return Reception(
        {s: connector.open_stream_output(config.name, s) for s in outputs},
        {s: config.output_streams[s].key for s in outputs},
        **options,
    ).start()


def flights_key() -> TupleKey:
    """The flights stream's Kafka key, as the back-pressure client builds it."""
    config = parse_query_group(tomllib.loads(FLIGHTS_TOML.read_text()), env={})
    return TupleKey(config.input_streams["flights"].key)


# --------------------------------------------------------------------------- CPU accounting

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds used by ``pid`` so far (``/proc/<pid>/stat``); ``None`` if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15)


def system_cpu_jiffies() -> tuple[int, int]:
    """``(busy, total)`` jiffies of all cores since boot (``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # user..steal; guest time is already in user
    return total - idle, total


@dataclass
class Meter:
    """Wall time, share of the machine's CPU busy, and the broker's CPU over one run."""

    broker_pid: int | None
    seconds: float = 0.0
    machine_busy: float = 0.0
    broker_cpu_s: float | None = None

    @contextmanager
    def measure(self) -> Iterator[Meter]:
        busy0, total0 = system_cpu_jiffies()
        broker0 = process_cpu_s(self.broker_pid) if self.broker_pid else None
        start = time.perf_counter()
        yield self
        self.seconds = time.perf_counter() - start
        busy1, total1 = system_cpu_jiffies()
        self.machine_busy = (busy1 - busy0) / max(1, total1 - total0)
        broker1 = process_cpu_s(self.broker_pid) if self.broker_pid else None
        if broker0 is not None and broker1 is not None:
            self.broker_cpu_s = broker1 - broker0


@dataclass
class Quiet:
    """How a wait for a quiet machine went."""

    waited_s: float
    quiet: bool


def wait_until_quiet(broker_pid: int | None) -> Quiet:
    """Wait until the broker and the machine are idle, at most ``QUIET_TIMEOUT_S``.

    Idle means, over one ``QUIET_WINDOW_S`` window: the embedded broker (when its
    PID is known) used less than ``QUIET_BROKER_CPU`` of a core (noida-db rewrites
    its data file for 4-6 s after a burst), and all cores
    together were less than ``QUIET_MACHINE_BUSY`` busy (another process, e.g. a
    test run, would take CPU from the run). After the timeout the run goes ahead
    and the figure says it did not start quiet.
    """
    start = time.monotonic()
    deadline = start + QUIET_TIMEOUT_S
    while time.monotonic() < deadline:
        broker0 = process_cpu_s(broker_pid) if broker_pid else None
        busy0, total0 = system_cpu_jiffies()
        time.sleep(QUIET_WINDOW_S)
        broker1 = process_cpu_s(broker_pid) if broker_pid else None
        busy1, total1 = system_cpu_jiffies()
        broker_quiet = (
            broker0 is None
            or broker1 is None
            or (broker1 - broker0) < QUIET_BROKER_CPU * QUIET_WINDOW_S
        )
        machine_quiet = (busy1 - busy0) / max(1, total1 - total0) < QUIET_MACHINE_BUSY
        if broker_quiet and machine_quiet:
            return Quiet(time.monotonic() - start, True)
    log.warning("machine or broker still busy after %.0f s; measuring anyway", QUIET_TIMEOUT_S)
    return Quiet(time.monotonic() - start, False)


def produce_flights(
    bootstrap: str, topic: str, codec: StreamCodec, limit: int | None
) -> tuple[int, float]:
    """Produce the flights once, in event-time order; return ``(count, seconds)``.

    Set-up, not measured against anything: through the back-pressure client, as
    every producer of Floodgate's writes (``StreamInput.put`` in batches of 1 000,
    the flights stream's key and codec, its input queue bounded above the data so
    nothing waits).

    Raises:
        DeliveryError: the broker did not acknowledge every tuple.
    """
    records = list(flight_tuples(load_flights(limit)))
    config = flights_config(topic, len(records) + 1)
    start = time.perf_counter()
    with connect(bootstrap_servers=bootstrap, config=config, schemas=codec.repository) as connector:
        stream_input = connector.open_stream_input(config.name, "flights")
        for i in range(0, len(records), 1_000):
            stream_input.put(records[i : i + 1_000])
        stream_input.put_end(PRODUCE_TIMEOUT_S)
    return len(records), time.perf_counter() - start


def machine() -> dict[str, Any]:
    """nproc, CPU model, RAM, load, OS and Python of this machine."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(mem_kib / 1024 / 1024, 1),
        "loadavg_at_start": list(os.getloadavg()),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def code_version() -> dict[str, Any]:
    """The commit measured, and whether ``pipeline/`` differs from it (read-only git)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "pipeline_modified": bool(
            git("status", "--porcelain", "--untracked-files=no", "--", "pipeline")
        ),
    }


def versions(spark: Any | None) -> dict[str, str]:
    """Versions of what the figures depend on."""
    import confluent_kafka

    out = {}
    for dist in ("pyspark", "confluent-kafka", "fastavro", "pyarrow", "noida-db"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    out["librdkafka"] = confluent_kafka.libversion()[0]
    if spark is not None:
        out["java"] = str(spark.sparkContext._jvm.java.lang.System.getProperty("java.version"))
    return out


# --------------------------------------------------------------------------- the figures, by pandas

FIGURE_COLUMNS = ("flights", "departures", "mean_dep_delay", "mean_arr_delay")


def expected_origin_hours(limit: int | None) -> dict[tuple[str, int], tuple[Any, ...]]:
    """The per-origin-per-hour figures of the first ``limit`` flights, by pandas.

    Returns:
        ``{(origin, hour start as epoch ms): (flights, departures, mean_dep_delay,
        mean_arr_delay)}``, a mean ``None`` where no flight of the hour has the delay.
    """
    df = load_flights(limit)
    out = df.groupby(["origin", "time_hour_ms"]).agg(
        flights=("flight", "size"),
        departures=("dep_time", "count"),
        mean_dep_delay=("dep_delay", "mean"),
        mean_arr_delay=("arr_delay", "mean"),
    )
    return {
        (str(origin), int(hour)): tuple(None if isinstance(v, float) and v != v else v for v in row)
        for (origin, hour), row in zip(out.index, out.itertuples(index=False), strict=True)
    }


def origin_hour_key(row: dict[str, Any]) -> tuple[str, int]:
    """``(origin, hour start in epoch ms)`` of an output row (``hour_start`` as a
    ``datetime`` or as epoch ms)."""
    start = row["hour_start"]
    ms = int(start.timestamp() * 1000) if hasattr(start, "timestamp") else int(start)
    return str(row["origin"]), ms


def check_origin_hours(
    who: str, rows: list[dict[str, Any]], expected: dict[tuple[str, int], tuple[Any, ...]]
) -> None:
    """Raise ``AssertionError`` unless ``rows`` (latest row per origin-hour) hold
    exactly the pandas figures: counts equal, means within 1e-9 relative."""
    got = {origin_hour_key(r): tuple(r[c] for c in FIGURE_COLUMNS) for r in rows}
    if got.keys() != expected.keys():
        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        raise AssertionError(
            f"{who}: {len(missing)} origin-hours missing (e.g. {sorted(missing)[:3]}), "
            f"{len(extra)} unexpected (e.g. {sorted(extra)[:3]})"
        )
    for key, want in expected.items():
        have = got[key]
        for column, g, w in zip(FIGURE_COLUMNS, have, want, strict=True):
            same = (
                g is None if w is None else g is not None and abs(g - w) <= 1e-9 * max(1.0, abs(w))
            )
            if not same:
                raise AssertionError(f"{who}: {key} {column} = {g}, pandas says {w}")


# --------------------------------------------------------------------------- reporting


def rates_table(title: str, rows: Mapping[str, Sequence[float]]) -> Any:
    """A rich table of tuples/s: median, min-max and every run, a row per what was
    measured."""
    import statistics

    from rich.table import Table

    table = Table(title=title)
    for column in ("what", "median tuples/s", "min-max", "runs"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for name, values in rows.items():
        table.add_row(
            name,
            f"{statistics.median(values):,.0f}",
            f"{min(values):,.0f}-{max(values):,.0f}",
            " ".join(f"{v:,.0f}" for v in values),
        )
    return table


@contextmanager
def fresh_broker(engine: str | None = None) -> Iterator[str]:
    """A new broker of ``engine`` (``noida-db``, the default, or ``apache-kafka``) for
    one measurement; yields its bootstrap address.

    Why: noida-db rewrites its data file after every burst, at a cost that grows with
    all it holds, so runs sharing one broker each ran slower than the one before
    (21 459, 13 147, 15 101 tuples/s in the first version of ``bench_flights.py``).
    Apache Kafka gets the same treatment, so that both engines are measured alike.
    """
    from pipeline.brokers.local import local_broker

    broker = local_broker(engine or "noida-db").start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def add_engine_argument(parser: Any) -> None:
    """``--engine``: the broker each measurement starts (:func:`fresh_broker`)."""
    from pipeline.brokers.engines import ENGINES

    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="noida-db",
        help="the broker each measurement starts: the embedded noida-db (default) or "
        "Apache Kafka's own (fetched with Maven on first use)",
    )


def produce_waiting(producer: Any, topic: str, key: bytes | None, value: bytes) -> None:
    """``producer.produce``, waiting out a full local queue (``BufferError``) as a
    plain confluent-kafka producer must."""
    while True:
        try:
            producer.produce(topic, key=key, value=value)
            return
        except BufferError:
            producer.poll(0.05)


def ratio_fields(runs: Sequence[Any], *rates: str, target: float) -> dict[str, Any]:
    """The JSON fields of a comparison (Floodgate against a baseline, one ratio a run):
    ``runs``, each run's dataclass fields plus its properties named in ``rates``
    (tuples/s) and its ``ratio``; ``median_ratio`` over the runs (3 decimals); ``target``.

    Raises:
        statistics.StatisticsError: ``runs`` is empty.
    """
    import statistics
    from dataclasses import asdict

    return {
        "runs": [asdict(r) | {name: getattr(r, name) for name in (*rates, "ratio")} for r in runs],
        "median_ratio": round(statistics.median(r.ratio for r in runs), 3),
        "target": target,
    }


def plot_if_possible(draw: Callable[[], None], path: Path) -> bool:
    """Draw a figure to ``path`` with ``draw`` when matplotlib is installed; else say how
    to get it and go on. A plot comes after the script's JSON, which never needs it:
    the ``bench`` extra (``pip install -e '.[bench]'``; ``make bench-peers`` and
    ``make soak`` install it) is not in the virtualenv ``make test`` makes.

    Returns:
        Whether the figure was drawn.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        console.print(
            f"no figure at {path}: matplotlib is not installed "
            "(.venv/bin/pip install -e '.[bench]', or make bench-peers)",
            markup=False,
        )
        return False
    draw()
    return True


def write_results(path: Path, benchmark: str, **fields: Any) -> None:
    """Write a benchmark's JSON to ``path`` (made if missing): ``benchmark``, the date,
    :func:`machine`, :func:`code_version`, then ``fields``."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "code": code_version(),
        **fields,
    }
    path.write_text(json.dumps(record, indent=2))


#: A producer as a user tunes it for throughput (linger, large batches, a deep local
#: queue), with the delivery guarantees of Floodgate's back-pressure client
#: (idempotent, ``acks=all``, ``murmur2_random``): the baselines' producers.
THROUGHPUT_PRODUCER: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "partitioner": "murmur2_random",
    "linger.ms": 20,
    "batch.num.messages": 100_000,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "delivery.report.only.error": True,
}

#: Spark's micro-batch phases reported (``durationMs`` of the query progress).
SPARK_PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "walCommit",
    "addBatch",
    "commitOffsets",
)
