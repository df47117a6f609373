"""Benchmark: the flights query group (or a pass-through query, ``--workload
passthrough``) against the Spark-native peer, Spark's own Kafka connector and Avro
module.

What is measured, per run, on a broker of its own (noida-db, or ``--engine
apache-kafka``), with the same input topic and bytes:

* **set-up, shared**: every flight (or ``--limit``) produced once to a fresh
  4-partition topic through the back-pressure client (``common.produce_flights``:
  Avro single-object encoding, the stream's key). Its CPU is the *producer* role,
  the same for every system since all of them read these bytes.
* **Floodgate**: the ``flights`` query group of ``conf/flights.toml`` (both
  queries, micro-batches of up to ``max_tuples_per_trigger`` = 150 000 rows, event-time
  alignment on, the transactional sink with its output stream queue bound, exactly
  once), with ``Trigger.AvailableNow``, in a driver process of its own (the project's
  ``.venv``; this script run with ``--floodgate-worker``), reading with
  ``floodgate_jvm``: the ``floodgate_kafka`` source on the JVM.
* **the peer, two outputs** (``bench/spark_kafka_peer.py``; by default in the project's
  ``.venv``, so on the same PySpark as Floodgate, with Spark's Kafka connector and Avro
  module 4.2.0, the newest Maven Central serves, which run on PySpark 4.3 as the test
  comparing ``format("kafka")`` with ``format("floodgate_kafka")`` shows; with
  ``--peer-spark 4.2`` in ``bench/.venv-spark-kafka``, ``pyspark==4.2.0``; the
  connector's jars fetched with Maven from ``pipeline/brokers/spark_connector/pom.xml`` into
  ``~/.cache/floodgate/spark-kafka-4.2.0/jars`` and passed in ``spark.jars``): the same
  two queries as a PySpark user writes them, ``spark.readStream.format("kafka")`` with
  ``maxOffsetsPerTrigger`` = 150 000, the 10-byte single-object header cut off in SQL
  (``substring(value, 11)``) and the body decoded by ``from_avro`` with the writer
  schema, the same watermark, ``Trigger.AvailableNow``; output encoded with
  ``to_avro`` behind the output stream's single-object header, through

  - **(a) Spark's Kafka sink** (``writeStream.format("kafka")``, at least once), or
  - **(b) ``foreachBatch`` writing one Kafka transaction a micro-batch** (confluent-kafka
    transactional producer; the batch's input end offsets from the offset log
    committed with ``send_offsets_to_transaction``; a committed batch skipped on
    replay): exactly once, the honest peer of Floodgate's sink.

Every system runs with the SparkSession settings of Floodgate's
(``pipeline.spark.session.SPARK_DEFAULTS``: ``local[2]``, 2 shuffle partitions, UTC,
the raw local checkpoint file system) and ``noDataMicroBatches`` off, as the flights
group has it. Both outputs are read by the same reception in this process (the demo's
:class:`~pipeline.demo.reception.Reception`, ``StreamOutput.get``, ``read_committed``),
which also frees Floodgate's bounded output stream queues. A run is timed from the
``run`` command to the driver (queries started) until both queries have terminated
and the reception has read every output tuple; tuples/s = flights / that time. Each
query must read every flight, and the latest tuple per origin-hour and per
carrier-day the reception holds must equal pandas' figures (counts exact, means to
1e-9 relative), or the script fails.

**The pass-through workload** (``--workload passthrough [--batch N]``): the flights
group's two aggregations emit a few thousand tuples for 336 776 flights, so the output
side, Floodgate's transactional sink on the executors against Spark's Kafka sink or a
``foreachBatch`` transaction, is a small share of their cost. A query whose output is
as large as its input shows what the sink costs: ``SELECT *, arr_delay > 15 AS late
FROM flights``, every column of ``schemas/flight.avsc`` and ``late``, one tuple out per
flight, in append mode. Floodgate runs it as a query group of that one query writing
output stream ``flights_late``: schema ``flights_late`` (flight.avsc's fields and
``{"name": "late", "type": ["null", "boolean"], "default": null}``, written with a copy
of ``schemas/*.avsc`` to a temporary directory, the group's ``schema_dir``), keyed like
the input stream (``carrier``, ``flight``, ``time_hour``), 4 partitions as the input
topic, its queue bounded for every flight plus the transactions' markers and checked
(``output_queue_check``), exactly once; ``max_tuples_per_trigger`` = ``--batch``
(default 150 000); the input and trigger as for the flights. The reception differs:
the demo's decodes each tuple in this process's Python, about 40 000 a second, which
with one tuple out per flight would time the reader, not the sink. A run is timed
until a ``read_committed`` consumer that only counts has seen every flight's tuple
(``CountingReception``: what a reader can see, the systems' committed output); the
output topic is then read back whole and decoded, untimed, for the checks. The peers run
the same SQL over the same ``from_avro`` view, ``to_avro`` of the same columns behind
``flights_late``'s single-object header, ``maxOffsetsPerTrigger`` = ``--batch``. Every
system's output must hold exactly a tuple per flight read (as many tuples as flights,
their keys those of the input) and ``late`` as ``arr_delay > 15``, or the script fails.
Headline: the medians over runs of Floodgate ÷ peer (a), target >= 1.0x (at least
once, no transaction: the sink's exactly once costing nothing against it), and
Floodgate ÷ peer (b), target >= 2.0x (both exactly once: a transaction per write task
on the executors against every tuple collected to the driver and produced from
Python). The targets are reported, never asserted.

CPU per role (psutil, sampled every 0.2 s over each process tree during the timed
window; a process that ends loses at most its last 0.2 s): the driver's Python
process, the driver JVM (local mode: driver and executors), the Python workers (the
JVM's Python children: Floodgate's source runners and task workers), the broker, and
this process (the reception); in CPU seconds per 100 000 flights.

The three systems run one after the other on each run's broker, their order rotated
from run to run, each once the broker and the machine are quiet. Each driver is a
long-lived process: one discarded warm-up run of each first (all flights, or
``--warmup N``: the JVM's JIT compiles over the first runs, :data:`common.WARMUP_FLIGHTS`).
Headline (flights): the median over runs of Floodgate's JVM source ÷ peer (b). Target:
>= 1.0x.

Run: ``.venv/bin/python bench/bench_spark_kafka.py [--repeat 5] [--limit N] [--engine E]
[--workload passthrough [--batch N]]`` (``make bench-spark-kafka``, options in
``ARGS``); it fetches the jars on first use (and, with ``--peer-spark 4.2``, creates
``bench/.venv-spark-kafka``). Results: tables, and JSON in
``bench/out/spark_kafka.json`` (the pass-through's in
``bench/out/spark_kafka_passthrough.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import common
from common import OUT_DIR, ROOT, console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipeline.brokers import spark_connector
from pipeline.brokers.spark_connector import SPARK_CONNECTOR_VERSION, connector_dir

TARGET_RATIO = 1.0
#: The workloads (``--workload``) and their results files in ``bench/out``.
RESULTS = {"flights": "spark_kafka.json", "passthrough": "spark_kafka_passthrough.json"}
#: The pass-through's query, output stream (and its schema's name) and query name.
PASSTHROUGH_SQL = "SELECT *, arr_delay > 15 AS late FROM flights"
PASSTHROUGH_STREAM = "flights_late"
#: The pass-through's targets, Floodgate ÷ each peer, tuples/s (reported, never asserted).
PASSTHROUGH_TARGETS = {"peer_kafka_sink": 1.0, "peer_foreach_batch": 2.0}
#: The pass-through's rows per micro-batch by default (``--batch``): conf/flights.toml's
#: ``max_tuples_per_trigger``.
DEFAULT_BATCH = 150_000
#: The peer's PySpark, and the version of the connector jars: the newest Spark whose
#: spark-sql-kafka-0-10_2.13 and spark-avro_2.13 Maven Central serves (4.2.1 and 4.3.0
#: are not there, checked 2026-11-25).
PEER_SPARK_VERSION = SPARK_CONNECTOR_VERSION
PEER_VENV = ROOT / "bench" / ".venv-spark-kafka"
PEER_PYTHON = PEER_VENV / "bin" / "python"
PEER_SCRIPT = ROOT / "bench" / "spark_kafka_peer.py"
PEER_REQUIREMENTS = ROOT / "bench" / "requirements-spark-kafka.txt"
#: How long one Maven fetch of the connector may take, seconds (cold: ~20-60 s).
FETCH_TIMEOUT_S = 900.0
#: How long a driver may take to start its SparkSession, and a run to finish, seconds.
START_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 900.0
#: psutil's sampling period over the process trees, seconds.
SAMPLE_S = 0.2
PARTITIONS = 4
MARKER = "@@bench "

#: The systems measured: (name in tables and JSON, driver, the peer's output variant).
SYSTEMS = {
    "floodgate_jvm": "Floodgate, JVM source (floodgate_kafka, transactional sink, bounded queues)",
    "peer_foreach_batch": "peer (b): Spark Kafka source + from_avro, foreachBatch transaction",
    "peer_kafka_sink": "peer (a): Spark Kafka source + from_avro, Spark Kafka sink",
}
#: CPU roles, in report order.
ROLES = ("driver JVM", "driver Python", "Python workers", "broker", "reception (bench process)")
PHASES = common.SPARK_PHASES
#: Key of each output stream, as Spark SQL over the query's result: the text of
#: Floodgate's TupleKey (epoch ms for a timestamp, epoch days for a date, joined by "|").
KEY_SQL = {
    "delays_by_origin_hour": "concat_ws('|', origin, cast(unix_millis(hour_start) AS STRING))",
    "delays_by_carrier_day": "concat_ws('|', carrier, cast(unix_date(day) AS STRING))",
    PASSTHROUGH_STREAM: (
        "concat_ws('|', carrier, cast(flight AS STRING), cast(unix_millis(time_hour) AS STRING))"
    ),
}


@dataclass(frozen=True)
class Workload:
    """What every system runs (``--workload``).

    Attributes:
        name: ``flights`` (conf/flights.toml's two aggregations) or ``passthrough``
            (:data:`PASSTHROUGH_SQL`, a tuple out per flight).
        batch: the pass-through's rows per micro-batch (``max_tuples_per_trigger``,
            ``maxOffsetsPerTrigger``); the flights workload keeps conf/flights.toml's.
        schema_dir: the pass-through's schemas (``schemas/*.avsc`` and its output
            schema, :func:`write_passthrough_schemas`); ``None``: ``schemas/``.
    """

    name: str = "flights"
    batch: int = DEFAULT_BATCH
    schema_dir: Path | None = None

    @property
    def passthrough(self) -> bool:
        return self.name == "passthrough"


FLIGHTS = Workload()


# --------------------------------------------------------------------------- set-up


def _spinner() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def ensure_peer_venv() -> None:
    """Create ``bench/.venv-spark-kafka`` from ``bench/requirements-spark-kafka.txt`` if
    missing (about 1.5 minutes: pyspark's ~450 MB package).

    Raises:
        subprocess.CalledProcessError: venv or pip failed (PyPI unreachable).
    """
    if PEER_PYTHON.exists() and (PEER_VENV / ".installed").exists():
        return
    with _spinner() as progress:
        progress.add_task(
            f"creating {PEER_VENV.relative_to(ROOT)} (pyspark=={PEER_SPARK_VERSION}, "
            "confluent-kafka; pip)",
            total=None,
        )
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run(
            [str(PEER_PYTHON), "-m", "pip", "install", "-q", "-r", str(PEER_REQUIREMENTS)],
            check=True,
        )
    (PEER_VENV / ".installed").write_text(PEER_REQUIREMENTS.read_text())


def fetch_connector(version: str = PEER_SPARK_VERSION) -> Path:
    """Spark's Kafka connector and Avro module of ``version``, fetched with Maven on
    first use (:func:`pipeline.brokers.spark_connector.fetch_connector`, which the
    test comparing ``format("kafka")`` with ``format("floodgate_kafka")`` shares).

    Returns:
        The directory of the jars.

    Raises:
        BrokerError: no ``mvn`` on PATH, or Maven failed (with its output's tail).
    """
    if connector_dir(version).parent.joinpath(".complete").exists():
        return connector_dir(version)
    with _spinner() as progress:
        progress.add_task(
            f"fetching spark-sql-kafka-0-10_2.13 and spark-avro_2.13 {version} with Maven "
            f"into {connector_dir(version)}",
            total=None,
        )
        return spark_connector.fetch_connector(version, timeout_s=FETCH_TIMEOUT_S)


def peer_jars(jars: Path, peer_python: Path) -> list[str]:
    """The fetched jars the peer's Spark lacks
    (:func:`pipeline.brokers.spark_connector.jars_spark_lacks` against the peer's
    pyspark).

    Returns:
        Absolute paths, sorted: the connector, spark-avro, kafka-clients,
        commons-pool2, spark-token-provider-kafka.
    """
    done = subprocess.run(
        [str(peer_python), "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return spark_connector.jars_spark_lacks(jars, Path(done.stdout.strip()) / "jars")


# --------------------------------------------------------------------------- the drivers


class Driver:
    """A long-lived driver process (a SparkSession), driven by JSON lines on its stdin
    and answering JSON lines behind :data:`MARKER` on its stdout; its stderr goes to
    ``log_path``.

    Args:
        name: the system's name (for errors).
        command: how to start it.
        hello: the first line it reads (its session's settings).
        log_path: its stderr.
        env: its environment.
    """

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        hello: Mapping[str, Any],
        log_path: Path,
        env: Mapping[str, str],
    ) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=dict(env),
            cwd=ROOT,
        )
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True).start()
        self._send(hello)
        self.hello = self._answer(START_TIMEOUT_S)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARKER):
                self._answers.put(json.loads(line[len(MARKER) :]))
        self._answers.put(None)

    def _send(self, command: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(
                f"{self.name}: no answer in {timeout_s:.0f} s; see {self.log_path}"
            ) from None
        if answer is None:
            raise RuntimeError(f"{self.name}: the driver exited; see {self.log_path}")
        if not answer.get("ok", True):
            raise RuntimeError(f"{self.name}: {answer['error']}\n{answer.get('traceback', '')}")
        return answer

    def call(self, timeout_s: float = RUN_TIMEOUT_S, **command: Any) -> dict[str, Any]:
        """Send ``command`` and return its answer.

        Raises:
            RuntimeError: the driver answered an error, exited, or did not answer.
        """
        self._send(command)
        return self._answer(timeout_s)

    def close(self) -> None:
        """Ask the driver to quit; kill it (by its PID) if it does not within 60 s."""
        with contextlib.suppress(OSError, ValueError):
            self._send({"cmd": "quit"})
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


def answer(**fields: Any) -> None:
    """Write one answer line to the benchmark (in a driver process)."""
    sys.stdout.write(MARKER + json.dumps(fields) + "\n")
    sys.stdout.flush()


def progress_figures(query: Any) -> dict[str, Any]:
    """A finished query's figures from its progress: ``input_rows`` (tuples),
    ``batches`` (micro-batches with data) and ``durations_s`` (each of Spark's
    ``durationMs`` phases, ``triggerExecution``, ``addBatch``, ``walCommit`` ..., in
    seconds summed over micro-batches)."""
    progress = [p for p in query.recentProgress if p is not None]
    durations: dict[str, float] = {}
    for p in progress:
        for phase, ms in p["durationMs"].items():
            durations[phase] = durations.get(phase, 0.0) + ms / 1000
    return {
        "input_rows": sum(int(p["numInputRows"]) for p in progress),
        "batches": sum(1 for p in progress if int(p["numInputRows"]) > 0),
        "durations_s": durations,
    }


def batch_figures(query: Any) -> list[dict[str, Any]]:
    """``{"rows": tuples, "ms": {phase: ms}}`` of each of ``query``'s micro-batches with
    data, in order (as many as ``spark.sql.streaming.numRecentProgressUpdates`` keeps),
    as the peer's driver reports them (``spark_kafka_peer.py``)."""
    return [
        {
            "rows": int(p["numInputRows"]),
            "ms": {k: int(v) for k, v in dict(p["durationMs"]).items()},
        }
        for p in query.recentProgress
        if p is not None and int(p["numInputRows"]) > 0
    ]


def alignment_reads(query: Any) -> int:
    """The rounds of event-time reads ``query``'s Floodgate source made of the broker
    (the ``alignmentReads`` source metric of its last progress; 0 without one)."""
    last = query.lastProgress
    if not last:
        return 0
    return sum(int((s.get("metrics") or {}).get("alignmentReads", 0)) for s in last["sources"])


def floodgate_worker() -> None:
    """The Floodgate driver process (``--floodgate-worker``): a ``local[2]`` SparkSession
    (``common.start_spark``); per run, a :class:`~pipeline.spark.query_group.QueryGroup`
    of the config the benchmark sends, started with ``Trigger.AvailableNow`` (``run``),
    or, for ``bench_latency.py``, with its processing-time trigger (``start``, then
    ``drain``: all input available processed, the figures of every micro-batch), as the
    peer's driver is run: the reception and the replay stay in the benchmark's process,
    never in the driver's."""
    from prometheus_client import CollectorRegistry

    from pipeline.config import parse_query_group
    from pipeline.metrics import stream_total
    from pipeline.serde.schemas import SchemaRepository
    from pipeline.spark.query_group import QueryGroup

    sys.stdin.readline()  # the hello: Floodgate's session has its own settings
    spark = common.start_spark("floodgate-bench-spark-kafka")
    answer(ready=True, versions=common.versions(spark))
    group: Any = None
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["cmd"] == "prepare":
                config = parse_query_group(command["config"], env={})
                group = QueryGroup(
                    config,
                    bootstrap_servers=command["bootstrap"],
                    spark=spark,
                    schemas=SchemaRepository.load(config.schema_dir),  # None: schemas/
                    registry=CollectorRegistry(),
                )
                answer(ok=True)
            elif command["cmd"] == "run":
                started = time.monotonic()
                group.start(available_now=True)
                start_s = time.monotonic() - started
                if not group.await_termination(RUN_TIMEOUT_S):
                    raise RuntimeError(f"the query group did not finish in {RUN_TIMEOUT_S} s")
                run_s = time.monotonic() - started
                queries = {
                    name: {
                        **progress_figures(q),
                        "per_batch": batch_figures(q),
                        "alignment_reads": alignment_reads(q),
                    }
                    for name, q in group.queries().items()
                }
                outputs = sorted({q.output for q in group.config.queries.values()})
                held = {
                    kind: int(
                        stream_total(
                            group.registry,
                            f"floodgate_query_group_{kind}_total",
                            query_group=group.name,
                            streams=outputs,
                        )
                    )
                    for kind in ("sleeps", "holds")
                }
                answer(ok=True, start_s=start_s, run_s=run_s, queries=queries, **held)
            elif command["cmd"] == "start":
                # Every micro-batch's progress kept for the report (the default keeps 100).
                group.spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "5000")
                started = time.monotonic()
                group.start()
                deadline = started + START_TIMEOUT_S
                waiting = "Waiting for data to arrive"
                while not all(
                    q.lastProgress is not None or q.status.get("message") == waiting
                    for q in group.queries().values()
                ):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the queries did not run a first trigger in time")
                    time.sleep(0.1)
                answer(ok=True, start_s=time.monotonic() - started)
            elif command["cmd"] == "drain":
                started = time.monotonic()
                group.process_all_available()
                queries = {
                    name: {**progress_figures(q), "per_batch": batch_figures(q)}
                    for name, q in group.queries().items()
                }
                answer(ok=True, drain_s=time.monotonic() - started, queries=queries)
            elif command["cmd"] == "stop":
                if group is not None:
                    group.stop()
                group = None
                answer(ok=True)
            elif command["cmd"] == "quit":
                break
        except Exception as exc:
            answer(ok=False, error=repr(exc), traceback=traceback.format_exc()[-4000:])
    spark.stop()


def start_drivers(jars: list[str], log_dir: Path, peer_python: Path) -> dict[str, Driver]:
    """Floodgate's driver (this script, ``--floodgate-worker``, in the project's
    ``.venv``) and the peer's (``bench/spark_kafka_peer.py`` in its own virtualenv);
    both peer variants share the peer's driver. Started one after the other (a cold
    SparkSession takes 6-12 s)."""
    from pipeline.spark.session import SPARK_DEFAULTS

    # The peer's pyspark must not find the project's: no venv, SPARK_HOME or Python of ours.
    ours = ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON")
    base = {k: v for k, v in os.environ.items() if k not in (*ours, "PYSPARK_DRIVER_PYTHON")}
    conf = {**SPARK_DEFAULTS, "spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    drivers: dict[str, Driver] = {}
    with _spinner() as progress:
        progress.add_task("starting Floodgate's driver (SparkSession, pyspark 4.3.0)", total=None)
        drivers["floodgate"] = Driver(
            "Floodgate",
            [sys.executable, str(Path(__file__).resolve()), "--floodgate-worker"],
            {},
            log_dir / "spark_kafka-floodgate.log",
            os.environ,
        )
        progress.add_task(f"starting the peer's driver (SparkSession, {peer_python})", total=None)
        drivers["peer"] = Driver(
            "peer",
            [str(peer_python), str(PEER_SCRIPT)],
            {"conf": conf, "jars": jars},
            log_dir / "spark_kafka-peer.log",
            {**base, "PYSPARK_PYTHON": str(peer_python)},
        )
    return drivers


# --------------------------------------------------------------------------- CPU by role


class CpuSampler:
    """CPU seconds by role over one window, from psutil samples of process trees.

    Every :data:`SAMPLE_S` the trees are listed and each process's user + system CPU
    read; a process's share is its last reading less its reading at the window's
    start (0 if it started within the window). A process that ends within the window
    loses what it used after its last sample (at most :data:`SAMPLE_S`). The JVM's
    threads are read the same way (``/proc/<pid>/task``), grouped by name: where the
    driver JVM's CPU goes (the JIT compilers, the GC, Spark's task and stream threads).

    Args:
        driver_pid: the measured driver process (role ``driver Python``); its ``java``
            descendants are ``driver JVM``, the others ``Python workers``.
        broker_pid: the broker's process (with its descendants: ``broker``).
    """

    def __init__(self, driver_pid: int, broker_pid: int | None) -> None:
        self.driver_pid = driver_pid
        self.broker_pid = broker_pid
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._labels: dict[int, str] = {}
        self._threads_first: dict[int, float] = {}
        self._threads_last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def _processes(self) -> Iterator[tuple[str, Any]]:
        import psutil

        with contextlib.suppress(psutil.Error):
            yield "reception (bench process)", psutil.Process(os.getpid())
        roots = [(self.driver_pid, True)]
        if self.broker_pid:
            roots.append((self.broker_pid, False))
        for pid, is_driver in roots:
            try:
                root = psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for p in tree:
                if not is_driver:
                    yield "broker", p
                elif p.pid == pid:
                    yield "driver Python", p
                else:
                    try:
                        name = p.name()
                    except psutil.Error:
                        continue
                    yield ("driver JVM" if name == "java" else "Python workers"), p

    def _label(self, role: str, p: Any) -> str:
        """What a process is: its role, and for a Python worker its module (``-m``),
        a fork of PySpark's daemon (a task worker) told apart from the daemon."""
        import psutil

        if role != "Python workers":
            return role
        if p.pid not in self._labels:
            try:
                cmd = p.cmdline()
                module = cmd[cmd.index("-m") + 1] if "-m" in cmd else Path(cmd[-1]).name
                parent = p.parent()
                if parent is not None and parent.cmdline() == cmd:
                    module += " (fork)"
            except (psutil.Error, IndexError, ValueError):
                module = "?"
            self._labels[p.pid] = f"Python worker: {module}"
        return self._labels[p.pid]

    def _sample_threads(self, pid: int, first: bool) -> None:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                text = (task / "stat").read_text()
            except OSError:
                continue
            name = re.sub(r"[\d#\-]+$", "", text[text.index("(") + 1 : text.rindex(")")]).strip()
            fields = text[text.rindex(")") + 2 :].split()
            cpu = (int(fields[11]) + int(fields[12])) / common._CLK_TCK
            tid = int(task.name)
            if first:
                self._threads_first[tid] = cpu
            self._threads_last[tid] = (name, cpu)

    def _sample(self, first: bool) -> None:
        import psutil

        for role, p in self._processes():
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            cpu = t.user + t.system
            if first:
                self._first[p.pid] = cpu
            self._last[p.pid] = (self._label(role, p), cpu)
            if role == "driver JVM":
                self._sample_threads(p.pid, first)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample(first=False)

    def __enter__(self) -> CpuSampler:
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(first=False)

    def by_label(self) -> dict[str, float]:
        """CPU seconds used in the window by process kind (the roles, the Python
        workers by module)."""
        out: dict[str, float] = {}
        for pid, (label, cpu) in self._last.items():
            out[label] = out.get(label, 0.0) + cpu - self._first.get(pid, 0.0)
        return out

    def by_role(self) -> dict[str, float]:
        """CPU seconds used in the window, by role (every role of :data:`ROLES`)."""
        out = dict.fromkeys(ROLES, 0.0)
        for label, cpu in self.by_label().items():
            role = "Python workers" if label.startswith("Python worker:") else label
            out[role] += cpu
        return out

    def jvm_threads(self) -> dict[str, float]:
        """CPU seconds used in the window by the driver JVM's threads, by thread name
        (numbers dropped: ``GC Thread``, ``C2 CompilerThre``, ``Executor task l``...)."""
        out: dict[str, float] = {}
        for tid, (name, cpu) in self._threads_last.items():
            out[name] = out.get(name, 0.0) + cpu - self._threads_first.get(tid, 0.0)
        return out


# --------------------------------------------------------------------------- a run


@dataclass
class Measurement:
    """One system's timed run over one run's topic.

    Attributes:
        system: a key of :data:`SYSTEMS`.
        n: flights in the topic (each query must read them all).
        seconds: ``run`` command to every output tuple read.
        queries_s: ``run`` command to both queries terminated (the driver's clock).
        start_s: starting the queries (the driver's clock).
        batches: per query, micro-batches with data.
        durations_s: Spark's ``durationMs`` phases summed over both queries' micro-batches
            (``triggerExecution``, ``latestOffset``, ``queryPlanning``, ``getBatch``,
            ``walCommit``, ``addBatch``, ``commitOffsets``; seconds).
        output_tuples: tuples the reception read, re-emits included.
        cpu_s: CPU seconds by role in the window.
        cpu_by_process_s: the same by process kind (Python workers by module).
        jvm_threads_s: the driver JVM's CPU seconds by thread name.
        machine_busy: share of both cores busy in the window (0..1).
        started_quiet: the machine and broker were quiet before it.
        sleeps / holds: Floodgate's sleeps on and holds by a full output stream queue.
        per_batch: per query, each micro-batch with data as :func:`batch_figures` gives it
            (Spark's phases in ms: where a trigger's time went).
        alignment_reads: per query, the rounds of event-time reads the source's planning
            made of the broker (its ``alignmentReads`` metric; Floodgate only).
    """

    system: str
    n: int
    seconds: float
    queries_s: float
    start_s: float
    batches: dict[str, int]
    durations_s: dict[str, float]
    output_tuples: int
    cpu_s: dict[str, float]
    cpu_by_process_s: dict[str, float]
    jvm_threads_s: dict[str, float]
    machine_busy: float
    started_quiet: bool
    sleeps: int = 0
    holds: int = 0
    per_batch: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    alignment_reads: dict[str, int] = field(default_factory=dict)

    @property
    def tuples_per_s(self) -> float:
        return self.n / self.seconds

    def cpu_per_100k(self) -> dict[str, float]:
        """CPU seconds per 100 000 flights, by role."""
        return {role: s * 100_000 / self.n for role, s in self.cpu_s.items()}


def passthrough_schema() -> dict[str, Any]:
    """The pass-through's output schema: ``schemas/flight.avsc``'s fields, then ``late``
    (``["null", "boolean"]``, null where the flight has no arrival delay)."""
    flight = json.loads((ROOT / "schemas" / "flight.avsc").read_text())
    return {
        "type": "record",
        "name": "FlightLate",
        "namespace": flight["namespace"],
        "doc": "A flight of flight.avsc and whether it arrived over 15 minutes late: the "
        "output of bench_spark_kafka.py --workload passthrough.",
        "fields": [
            *flight["fields"],
            {"name": "late", "type": ["null", "boolean"], "default": None},
        ],
    }


def write_passthrough_schemas(directory: Path) -> Path:
    """A schema directory for the pass-through in ``directory``: a copy of the
    repository's ``schemas/*.avsc`` and ``flights_late.avsc`` (:func:`passthrough_schema`).

    Returns:
        ``directory``.
    """
    for path in sorted((ROOT / "schemas").glob("*.avsc")):
        (directory / path.name).write_text(path.read_text())
    schema = json.dumps(passthrough_schema(), indent=2)
    (directory / f"{PASSTHROUGH_STREAM}.avsc").write_text(schema + "\n")
    return directory


def passthrough_queue_size(n: int, batch: int) -> int:
    """The pass-through's output stream queue bound for ``n`` flights in micro-batches of
    ``batch``: room for every flight, so that the bound is checked on every micro-batch
    but never waits on the reception, plus the transactions' commit markers (one per
    write task and output partition a micro-batch: a task per input partition, and
    twice ``n / batch`` micro-batches for the event-time alignment's shorter ones), plus
    a tenth: a write task may take ``1/tasks`` of the free space (more than that of the
    whole queue fails the query, ``FG-QG-005``), and the input partitions' parts of one
    micro-batch are not equal."""
    batches = -(-n // batch)
    markers = PARTITIONS * PARTITIONS * (2 * batches + 2)
    return n + markers + n // 10


def passthrough_config(raw: dict[str, Any], n: int, workload: Workload) -> None:
    """Make the flights group's raw config ``raw`` the pass-through's, in place: the one
    query :data:`PASSTHROUGH_SQL` in append mode, writing output stream
    :data:`PASSTHROUGH_STREAM` (schema of the same name in ``workload.schema_dir``,
    keyed like the input stream, as many partitions as the input topic, its queue
    bounded by :func:`passthrough_queue_size` and checked), ``workload.batch`` rows per
    micro-batch; the input stream and everything else as the flights workload's."""
    if workload.schema_dir is None:
        raise ValueError("the pass-through needs its schema directory")
    raw["schema_dir"] = str(workload.schema_dir)
    raw["query_group"].update(max_tuples_per_trigger=workload.batch, output_queue_check=True)
    raw["output_streams"] = {
        PASSTHROUGH_STREAM: {
            "topic": f"flights.{PASSTHROUGH_STREAM}",
            "schema": PASSTHROUGH_STREAM,
            "key": list(raw["input_streams"]["flights"]["key"]),
            "partitions": PARTITIONS,
            "max_queue_size": passthrough_queue_size(n, workload.batch),
        }
    }
    raw["queries"] = {
        PASSTHROUGH_STREAM: {
            "output": PASSTHROUGH_STREAM,
            "output_mode": "append",
            "sql": PASSTHROUGH_SQL,
        }
    }


def run_config(
    topic: str, n: int, checkpoints: Path, system: str, workload: Workload = FLIGHTS
) -> dict[str, Any]:
    """``conf/flights.toml`` as a raw TOML dict reading ``topic``, with fresh names,
    output topics and checkpoint; the input queue bounded above the ``n`` flights (the
    topic is produced beforehand); for the pass-through, its query and output stream
    (:func:`passthrough_config`)."""
    raw = tomllib.loads(common.FLIGHTS_TOML.read_text())
    run = uuid.uuid4().hex[:8]
    short = {
        "floodgate_jvm": "fj",
        "peer_foreach_batch": "pb",
        "peer_kafka_sink": "pa",
    }[system]
    raw["query_group"].update(
        name=f"bench{short}{run}",
        checkpoint_dir=str(checkpoints / run),
        control_dir=str(checkpoints / "control"),
        dead_letter_topic=f"bench.dead-letter.{run}",
    )
    raw["input_streams"]["flights"].update(
        topic=topic, starting_offsets="earliest", max_queue_size=n + 1
    )
    if workload.passthrough:
        passthrough_config(raw, n, workload)
    for stream in raw["output_streams"].values():
        stream["topic"] = f"bench.{stream['topic']}.{short}.{run}"
    return raw


def peer_settings(
    raw: Mapping[str, Any], bootstrap: str, schemas: Any, variant: str
) -> dict[str, Any]:
    """The peer's ``prepare`` command for the config ``raw``: the same topics, SQL,
    output modes, watermark, rows per trigger and schemas (``schemas``: those of the
    config's ``schema_dir``, whose fingerprints head the peer's output)."""
    flights = raw["input_streams"]["flights"]
    queries = {}
    for name, q in raw["queries"].items():
        out = raw["output_streams"][q["output"]]
        registered = schemas.get(out["schema"])
        queries[name] = {
            "sql": q["sql"],
            "topic": out["topic"],
            "schema": json.dumps(registered.schema),
            "header_hex": (b"\xc3\x01" + registered.fingerprint).hex(),
            "key_sql": KEY_SQL[q["output"]],
            "output_mode": q.get("output_mode", "append"),
        }
    return {
        "cmd": "prepare",
        "variant": variant,
        "bootstrap": bootstrap,
        "topic": flights["topic"],
        "view": "flights",
        "group": raw["query_group"]["name"],
        "checkpoint": raw["query_group"]["checkpoint_dir"],
        "input_schema": json.dumps(schemas.get(flights["schema"]).schema),
        "timestamp_field": flights["timestamp_field"],
        "watermark": flights["watermark"],
        "max_offsets_per_trigger": raw["query_group"]["max_tuples_per_trigger"],
        "queries": queries,
    }


def expected_carrier_days(limit: int | None) -> dict[tuple[str, dt.date], tuple[Any, ...]]:
    """The per-carrier-per-day figures of the first ``limit`` flights, by pandas:
    ``{(carrier, day): (flights, departures, mean_dep_delay, mean_arr_delay)}``, a mean
    ``None`` where no flight of the day has the delay."""
    from pipeline.demo.flights import load_flights

    df = load_flights(limit)
    df["day_date"] = [dt.date(y, m, d) for y, m, d in zip(df.year, df.month, df.day, strict=True)]
    out = df.groupby(["carrier", "day_date"]).agg(
        flights=("flight", "size"),
        departures=("dep_time", "count"),
        mean_dep_delay=("dep_delay", "mean"),
        mean_arr_delay=("arr_delay", "mean"),
    )
    return {
        (str(c), d): tuple(None if isinstance(v, float) and v != v else v for v in row)
        for (c, d), row in zip(out.index, out.itertuples(index=False), strict=True)
    }


def check_carrier_days(
    who: str, rows: list[dict[str, Any]], expected: Mapping[tuple[str, dt.date], tuple[Any, ...]]
) -> None:
    """Raise ``AssertionError`` unless ``rows`` (latest per carrier-day) hold exactly
    the pandas figures (counts equal, means within 1e-9 relative)."""
    got = {(str(r["carrier"]), r["day"]): r for r in rows}
    if got.keys() != expected.keys():
        raise AssertionError(
            f"{who}: {len(expected.keys() - got.keys())} carrier-days missing, "
            f"{len(got.keys() - expected.keys())} unexpected"
        )
    for key, want in expected.items():
        for column, w in zip(common.FIGURE_COLUMNS, want, strict=True):
            g = got[key][column]
            same = (
                g is None if w is None else g is not None and abs(g - w) <= 1e-9 * max(1.0, abs(w))
            )
            if not same:
                raise AssertionError(f"{who}: {key} {column} = {g}, pandas says {w}")


@dataclass
class Expected:
    """What every system's output must hold (pandas)."""

    origin_hours: dict[Any, tuple[Any, ...]]
    carrier_days: dict[Any, tuple[Any, ...]]


@dataclass
class ExpectedKeys:
    """What every system's pass-through output must hold: a tuple per input key."""

    keys: set[bytes]


def expected_keys(limit: int | None) -> ExpectedKeys:
    """The flights stream's keys of the first ``limit`` flights.

    Raises:
        AssertionError: two flights share a key (the check needs one tuple per key).
    """
    from pipeline.demo.flights import flight_tuples, load_flights

    key = common.flights_key()
    keys = [key(f) for f in flight_tuples(load_flights(limit))]
    unique = {k for k in keys if k is not None}
    if len(unique) != len(keys):
        raise AssertionError(f"{len(keys) - len(unique)} of {len(keys)} flights share a key")
    return ExpectedKeys(unique)


def check_passthrough(who: str, n: int, table: Any, expected: ExpectedKeys | None) -> None:
    """Raise ``AssertionError`` unless the pass-through's output ``table`` (an
    :class:`~pipeline.demo.reception.OutputTable`, keyed like the input) holds a tuple
    per flight read: ``n`` tuples read, ``n`` keys, those of the input (``expected``;
    ``None``: a warm-up, counts only), and ``late`` as ``arr_delay > 15``."""
    if table.received != n or len(table.rows) != n:
        raise AssertionError(
            f"{who}: {table.received} output tuples with {len(table.rows)} keys, "
            f"for {n} flights read"
        )
    key = common.flights_key()
    if expected is not None:
        got = {key(r) for r in table.rows.values()}
        if got != expected.keys:
            missing, extra = expected.keys - got, got - expected.keys
            raise AssertionError(
                f"{who}: {len(missing)} input keys missing from the output "
                f"(e.g. {sorted(missing)[:3]}), {len(extra)} unexpected (e.g. {sorted(extra)[:3]})"
            )
    for r in table.rows.values():
        want = None if r["arr_delay"] is None else r["arr_delay"] > 15
        if r["late"] != want:
            raise AssertionError(
                f"{who}: {key(r)!r} late = {r['late']}, arr_delay = {r['arr_delay']}"
            )


class CountingReception:
    """The pass-through's timed reader: one ``read_committed`` consumer over every
    partition of the output topic from its start, counting records in a thread of its
    own, decoding none.

    Why not the demo's :class:`~pipeline.demo.reception.Reception`: it decodes every
    tuple in this process's Python (about 40 000 a second here), so with an output as
    large as the input it, not the system under test, sets the end-to-end figure. What
    this one waits for is what a ``read_committed`` reader can see: the system's
    committed output. Whether that output is right is checked after the timed window
    (:func:`~pipeline.demo.reception.read_all` and the stream's codec), the same for
    every system.

    Args:
        bootstrap_servers: the run's broker.
        topic: the output topic.
    """

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        from confluent_kafka import Consumer

        from pipeline.kafka.clients import kafka_settings
        from pipeline.names import ad_hoc_group_id

        self.topic = topic
        self._consumer = Consumer(
            kafka_settings(
                bootstrap_servers,
                None,
                {
                    "group.id": ad_hoc_group_id(),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                },
            )
        )
        self.received = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-counting", daemon=True)

    def start(self) -> CountingReception:
        """Assign every partition from its start and count in a thread."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        partitions = self._consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions.partitions]
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self._consumer.consume(num_messages=10_000, timeout=0.05):
                    if message.error() is None:
                        self.received += 1
        except BaseException as exc:
            self.error = exc

    def wait_until(self, n: int, timeout_s: float) -> None:
        """Block until ``n`` records were read.

        Raises:
            FloodgateError: the reader failed, or read fewer within ``timeout_s``.
        """
        from pipeline.errors import FloodgateError

        deadline = time.monotonic() + timeout_s
        while self.received < n:
            if self.error is not None:
                raise FloodgateError(f"the counting reception failed: {self.error}")
            if time.monotonic() > deadline:
                raise FloodgateError(
                    f"{self.received} of {n} output tuples readable after {timeout_s:.0f} s"
                )
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop reading and close the consumer."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._consumer.close()


def read_output_table(bootstrap_servers: str, topic: str, codec: Any, key: Sequence[str]) -> Any:
    """Every committed tuple of ``topic``, decoded, as an
    :class:`~pipeline.demo.reception.OutputTable` (latest per ``key``)."""
    from pipeline.demo.reception import OutputTable, read_all

    table = OutputTable(topic, tuple(key))
    table.add([codec.decode(m.value()) for m in read_all(bootstrap_servers, topic)])
    return table


def timed_reception(
    driver: Driver, broker: Any, config: Any, schemas: Any, n: int
) -> tuple[dict[str, Any], dict[str, Any], CpuSampler, Any]:
    """The timed window of the flights group: from the ``run`` command until the
    queries ended and the demo's reception read every output tuple (it decodes them as
    it reads: the aggregations' output is a few thousand tuples).

    Returns:
        The driver's answer, ``{stream: OutputTable}``, the CPU sampler and the meter.
    """
    from pipeline.client.connector import connect

    with connect(
        bootstrap_servers=broker.bootstrap_servers, config=config, schemas=schemas
    ) as connector:
        reception = common.open_reception(connector, config)
        meter = common.Meter(None)
        try:
            with CpuSampler(driver.pid, broker.pid) as sampler, meter.measure():
                ran = driver.call(cmd="run")
                reception.wait_until_read(RUN_TIMEOUT_S)
            tables = reception.tables()
        finally:
            reception.stop()
            driver.call(cmd="stop")
    return ran, tables, sampler, meter


def timed_passthrough(
    driver: Driver, broker: Any, config: Any, schemas: Any, n: int
) -> tuple[dict[str, Any], dict[str, Any], CpuSampler, Any]:
    """The timed window of the pass-through: from the ``run`` command until the query
    ended and ``n`` committed output tuples were readable (:class:`CountingReception`);
    then, untimed, the whole output topic read back and decoded for the checks.

    Returns:
        As :func:`timed_reception`.
    """
    stream = config.output_streams[PASSTHROUGH_STREAM]
    reception = CountingReception(broker.bootstrap_servers, stream.topic).start()
    meter = common.Meter(None)
    try:
        with CpuSampler(driver.pid, broker.pid) as sampler, meter.measure():
            ran = driver.call(cmd="run")
            reception.wait_until(n, RUN_TIMEOUT_S)
    finally:
        reception.stop()
        driver.call(cmd="stop")
    codec = config.stream_codec("output", PASSTHROUGH_STREAM, schemas)
    table = read_output_table(broker.bootstrap_servers, stream.topic, codec, stream.key)
    return ran, {PASSTHROUGH_STREAM: table}, sampler, meter


def measure(
    system: str,
    driver: Driver,
    broker: Any,
    topic: str,
    n: int,
    checkpoints: Path,
    expected: Expected | ExpectedKeys | None,
    workload: Workload = FLIGHTS,
) -> Measurement:
    """One timed run of ``system`` over ``topic`` (see the module docstring); the
    reception and the CPU sampler run in this process."""
    from pipeline.config import parse_query_group
    from pipeline.kafka.topics import ensure_topics
    from pipeline.serde.schemas import SchemaRepository

    raw = run_config(topic, n, checkpoints, system, workload)
    config = parse_query_group(raw, env={})
    schemas = SchemaRepository.load(config.schema_dir)  # None: schemas/
    bootstrap = broker.bootstrap_servers
    ensure_topics(bootstrap, config.topics())
    if system.startswith("floodgate_"):
        driver.call(cmd="prepare", config=raw, bootstrap=bootstrap)
    else:
        variant = system.removeprefix("peer_")
        driver.call(**peer_settings(raw, bootstrap, schemas, variant))
    quiet = common.wait_until_quiet(broker.pid)
    timed = timed_passthrough if workload.passthrough else timed_reception
    ran, tables, sampler, meter = timed(driver, broker, config, schemas, n)
    for query, figures in ran["queries"].items():
        if figures["input_rows"] != n:
            raise RuntimeError(f"{system}: query {query} read {figures['input_rows']} of {n}")
    if workload.passthrough:
        assert not isinstance(expected, Expected)
        check_passthrough(system, n, tables[PASSTHROUGH_STREAM], expected)
    elif expected is not None:  # None: a warm-up over fewer flights
        assert isinstance(expected, Expected)
        common.check_origin_hours(
            system, list(tables["delays_by_origin_hour"].rows.values()), expected.origin_hours
        )
        check_carrier_days(
            system, list(tables["delays_by_carrier_day"].rows.values()), expected.carrier_days
        )
    q = ran["queries"]
    return Measurement(
        system=system,
        n=n,
        seconds=meter.seconds,
        queries_s=ran["run_s"],
        start_s=ran["start_s"],
        batches={k: int(v["batches"]) for k, v in q.items()},
        durations_s={
            phase: round(sum(v["durations_s"].get(phase, 0.0) for v in q.values()), 3)
            for phase in sorted({p for v in q.values() for p in v["durations_s"]})
        },
        output_tuples=sum(t.received for t in tables.values()),
        cpu_s={k: round(v, 3) for k, v in sampler.by_role().items()},
        cpu_by_process_s={k: round(v, 3) for k, v in sampler.by_label().items()},
        jvm_threads_s={k: round(v, 3) for k, v in sampler.jvm_threads().items() if v >= 0.005},
        machine_busy=meter.machine_busy,
        started_quiet=quiet.quiet,
        sleeps=int(ran.get("sleeps", 0)),
        holds=int(ran.get("holds", 0)),
        per_batch={k: v["per_batch"] for k, v in q.items() if "per_batch" in v},
        alignment_reads={
            k: int(v["alignment_reads"]) for k, v in q.items() if "alignment_reads" in v
        },
    )


@dataclass
class Run:
    """One run: a fresh broker and topic, produced once, then every system over it.

    Attributes:
        n: flights produced.
        produce_s: producing them (set-up, not compared).
        producer_cpu_s: CPU seconds of this process while producing (the producer role).
        order: the systems in the order they ran.
        systems: each system's :class:`Measurement`.
    """

    n: int
    produce_s: float
    producer_cpu_s: float
    order: list[str]
    systems: dict[str, Measurement] = field(default_factory=dict)

    def ratio(self, peer: str, floodgate: str = "floodgate_jvm") -> float:
        """``floodgate`` (a Floodgate system) ÷ ``peer``, tuples/s."""
        return self.systems[floodgate].tuples_per_s / self.systems[peer].tuples_per_s


def run_once(
    drivers: Mapping[str, Driver],
    engine: str,
    limit: int | None,
    expected: Expected | ExpectedKeys | None,
    order: Sequence[str],
    on_done: Any,
    workload: Workload = FLIGHTS,
) -> Run:
    """A fresh broker and topic (noida-db slows with all it holds: ``common.fresh_broker``),
    the flights produced once, then each system of ``order`` over them."""
    import psutil

    from pipeline.brokers.local import local_broker
    from pipeline.kafka.topics import ensure_topics
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    broker = local_broker(engine).start()
    try:
        topic = f"bench.flights.{uuid.uuid4().hex[:8]}"
        ensure_topics(broker.bootstrap_servers, {topic: (PARTITIONS, 1)})
        me = psutil.Process()
        before = me.cpu_times()
        n, produce_s = common.produce_flights(broker.bootstrap_servers, topic, codec, limit)
        after = me.cpu_times()
        run = Run(
            n=n,
            produce_s=produce_s,
            producer_cpu_s=(after.user + after.system) - (before.user + before.system),
            order=list(order),
        )
        with tempfile.TemporaryDirectory(prefix="floodgate-bench-sk-") as tmp:
            for system in order:
                driver = drivers["floodgate" if system.startswith("floodgate_") else "peer"]
                run.systems[system] = measure(
                    system, driver, broker, topic, n, Path(tmp), expected, workload
                )
                on_done(system, run.systems[system])
        return run
    finally:
        broker.stop()


# --------------------------------------------------------------------------- report


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def detail_table(title: str, runs: Sequence[Run], attribute: str, prefix: str) -> Table:
    """CPU seconds per 100 000 flights by the keys of each measurement's ``attribute``
    (those starting with ``prefix``), median over runs, the 12 largest."""
    keys = {k for r in runs for m in r.systems.values() for k in getattr(m, attribute)}
    keys = {k for k in keys if k.startswith(prefix)}

    def per_100k(s: str, key: str) -> float:
        return _median(
            [getattr(r.systems[s], attribute).get(key, 0.0) * 100_000 / r.n for r in runs]
        )

    ranked = sorted(keys, key=lambda k: -max(per_100k(s, k) for s in SYSTEMS))[:12]
    table = Table(title=f"CPU seconds per 100 000 flights: {title} (median over runs)")
    table.add_column("what")
    for s in SYSTEMS:
        table.add_column(s, justify="right")
    for key in ranked:
        table.add_row(key, *(f"{per_100k(s, key):.2f}" for s in SYSTEMS))
    return table


def report(runs: Sequence[Run], workload: Workload = FLIGHTS) -> dict[str, Any]:
    """Print the tables; return the summary figures for the JSON."""
    n = runs[0].n
    rates = {s: [r.systems[s].tuples_per_s for r in runs] for s in SYSTEMS}
    title = f"flights, both queries, end to end ({n:,} flights a run)"
    if workload.passthrough:
        title = (
            f"pass-through ({PASSTHROUGH_SQL}: a tuple out per flight), end to end "
            f"({n:,} flights a run, micro-batches of up to {workload.batch:,})"
        )
    console.print(common.rates_table(title, {SYSTEMS[s]: v for s, v in rates.items()}))
    ratios = {
        peer: [r.ratio(peer) for r in runs] for peer in ("peer_foreach_batch", "peer_kafka_sink")
    }
    for peer, values in ratios.items():
        console.print(
            f"Floodgate / {peer} per run: "
            + " ".join(f"{v:.2f}" for v in values)
            + f"; median {_median(values):.2f}x (min {min(values):.2f}, max {max(values):.2f})"
        )
    cpu = Table(title="CPU seconds per 100 000 flights, by role (median over runs)")
    cpu.add_column("role")
    for s in SYSTEMS:
        cpu.add_column(s, justify="right")
    for role in ROLES:
        cpu.add_row(
            role,
            *(f"{_median([r.systems[s].cpu_per_100k()[role] for r in runs]):.2f}" for s in SYSTEMS),
        )
    cpu.add_row(
        "all roles",
        *(
            f"{_median([sum(r.systems[s].cpu_per_100k().values()) for r in runs]):.2f}"
            for s in SYSTEMS
        ),
    )
    producer = _median([r.producer_cpu_s * 100_000 / r.n for r in runs])
    console.print(cpu)
    console.print(detail_table("Python workers by module", runs, "cpu_by_process_s", "Python"))
    console.print(detail_table("the driver JVM's threads, by name", runs, "jvm_threads_s", ""))
    console.print(
        f"producer (set-up, shared by all: the back-pressure client, once a run): "
        f"{producer:.2f} CPU s per 100 000 flights"
    )
    queries = "the query" if workload.passthrough else "both queries summed"
    spark = Table(
        title=f"inside Spark: seconds of each micro-batch phase, {queries} (median over runs)"
    )
    spark.add_column("system")
    spark.add_column("batches", justify="right")
    for phase in PHASES:
        spark.add_column(phase, justify="right")
    spark.add_column("start", justify="right")
    for s in SYSTEMS:
        ms = [r.systems[s] for r in runs]
        spark.add_row(
            s,
            f"{_median([sum(m.batches.values()) for m in ms]):.0f}",
            *(f"{_median([m.durations_s.get(phase, 0.0) for m in ms]):.2f}" for phase in PHASES),
            f"{_median([m.start_s for m in ms]):.2f}",
        )
    console.print(spark)
    summary: dict[str, Any] = {
        "median_tuples_per_s": {s: round(_median(v)) for s, v in rates.items()},
        "spread_tuples_per_s": {s: [round(min(v)), round(max(v))] for s, v in rates.items()},
        "ratios": {p: [round(v, 3) for v in vs] for p, vs in ratios.items()},
        "median_ratio": {p: round(_median(vs), 3) for p, vs in ratios.items()},
        "cpu_s_per_100k_median": {
            s: {
                role: round(_median([r.systems[s].cpu_per_100k()[role] for r in runs]), 3)
                for role in ROLES
            }
            for s in SYSTEMS
        },
        "producer_cpu_s_per_100k_median": round(producer, 3),
    }
    if workload.passthrough:
        met = {}
        for peer, label in (("peer_kafka_sink", "peer (a)"), ("peer_foreach_batch", "peer (b)")):
            value, target = _median(ratios[peer]), PASSTHROUGH_TARGETS[peer]
            met[peer] = value >= target
            console.print(
                f"pass-through: Floodgate / {label} {value:.2f}x, target >= {target:.1f}x: "
                f"{'met' if met[peer] else 'NOT met'}"
            )
        return summary | {"targets": PASSTHROUGH_TARGETS, "targets_met": met}
    headline = _median(ratios["peer_foreach_batch"])
    console.print(
        f"target Floodgate's JVM source >= {TARGET_RATIO:.1f}x the peer with foreachBatch "
        "output: "
        f"{'met' if headline >= TARGET_RATIO else 'NOT met'} ({headline:.2f}x)"
    )
    return summary | {"target": TARGET_RATIO, "target_met": headline >= TARGET_RATIO}


def main() -> None:
    parser = common.argument_parser(__doc__, repeat=5)
    parser.add_argument(
        "--workload",
        choices=tuple(RESULTS),
        default="flights",
        help="flights: conf/flights.toml's two aggregations (default); passthrough: "
        f"{PASSTHROUGH_SQL}, a tuple out per flight",
    )
    parser.add_argument(
        "--batch",
        type=int,
        help=f"pass-through only: rows per micro-batch (default {DEFAULT_BATCH:,}), "
        "Floodgate's max_tuples_per_trigger and the peers' maxOffsetsPerTrigger",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help=f"results file (default {OUT_DIR / RESULTS['flights']}, "
        f"or {OUT_DIR / RESULTS['passthrough']} for the pass-through)",
    )
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    parser.add_argument(
        "--peer-spark",
        choices=("same", PEER_SPARK_VERSION.rsplit(".", 1)[0]),
        default="same",
        help="the peer's PySpark: the project's, as Floodgate's (same, the default), or "
        f"{PEER_SPARK_VERSION} in bench/.venv-spark-kafka",
    )
    parser.add_argument("--floodgate-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floodgate_worker:
        floodgate_worker()
        return
    if args.batch is not None and (args.workload != "passthrough" or args.batch < 1):
        parser.error(
            "--batch N (N >= 1) is for --workload passthrough: the flights workload keeps "
            "conf/flights.toml's max_tuples_per_trigger"
        )
    if args.json is None:
        args.json = OUT_DIR / RESULTS[args.workload]
    common.log_warnings()
    peer_python = Path(sys.executable)
    if args.peer_spark != "same":
        ensure_peer_venv()
        peer_python = PEER_PYTHON
    jars = peer_jars(fetch_connector(), peer_python)
    console.log(f"connector jars ({PEER_SPARK_VERSION}): {', '.join(Path(j).name for j in jars)}")
    schema_tmp = None
    workload = FLIGHTS
    expected: Expected | ExpectedKeys
    if args.workload == "passthrough":
        schema_tmp = tempfile.TemporaryDirectory(prefix="floodgate-bench-sk-schemas-")
        workload = Workload(
            "passthrough",
            args.batch or DEFAULT_BATCH,
            write_passthrough_schemas(Path(schema_tmp.name)),
        )
        expected = expected_keys(args.limit)
    else:
        expected = Expected(
            common.expected_origin_hours(args.limit), expected_carrier_days(args.limit)
        )
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    console.log(f"uptime at start: {uptime}")
    systems = list(SYSTEMS)
    drivers = start_drivers(jars, OUT_DIR, peer_python)
    runs: list[Run] = []
    try:
        versions = {
            "floodgate": drivers["floodgate"].hello["versions"],
            "peer": drivers["peer"].hello["versions"]
            | {"connector_jars": [Path(j).name for j in jars]},
        }
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn())
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            task = progress.add_task("runs", total=len(systems) * (args.repeat + 1))

            def done(system: str, m: Measurement) -> None:
                progress.advance(task)
                flag = "" if m.started_quiet else " (machine was not quiet)"
                progress.console.log(
                    f"  {system}: {m.tuples_per_s:,.0f} tuples/s ({m.seconds:.2f} s, "
                    f"{sum(m.batches.values())} batches, {m.output_tuples:,} output tuples, "
                    f"CPU {sum(m.cpu_s.values()):.1f} s){flag}"
                )

            progress.update(task, description="warm-up (discarded)")
            warm = run_once(drivers, args.engine, args.warmup, None, systems, done, workload)
            del warm
            for r in range(args.repeat):
                order = systems[r % len(systems) :] + systems[: r % len(systems)]
                progress.update(task, description=f"run {r + 1}/{args.repeat}")
                run = run_once(drivers, args.engine, args.limit, expected, order, done, workload)
                runs.append(run)
                progress.console.log(
                    f"run {r + 1}/{args.repeat}: Floodgate JVM / peer (b) "
                    f"{run.ratio('peer_foreach_batch'):.2f}x, "
                    f"/ peer (a) {run.ratio('peer_kafka_sink'):.2f}x"
                )
    finally:
        for d in drivers.values():
            d.close()
        if schema_tmp is not None:
            schema_tmp.cleanup()
    summary = report(runs, workload)
    described: dict[str, Any] = {}
    if workload.passthrough:
        described = {
            "workload": workload.name,
            "query": PASSTHROUGH_SQL,
            "batch": workload.batch,
            "output_max_queue_size": passthrough_queue_size(runs[0].n, workload.batch),
        }
    common.write_results(
        args.json,
        f"pass-through end to end ({PASSTHROUGH_SQL}): Floodgate vs Spark's Kafka connector "
        "+ from_avro"
        if workload.passthrough
        else "flights end to end: Floodgate vs Spark's Kafka connector + from_avro",
        **described,
        engine=args.engine,
        uptime_at_start=uptime,
        versions=versions,
        n=runs[0].n,
        **summary,
        runs=[
            {
                "n": r.n,
                "produce_s": r.produce_s,
                "producer_cpu_s": r.producer_cpu_s,
                "order": r.order,
                "systems": {
                    s: asdict(m)
                    | {"tuples_per_s": m.tuples_per_s, "cpu_s_per_100k": m.cpu_per_100k()}
                    for s, m in r.systems.items()
                },
            }
            for r in runs
        ],
    )
    console.log(f"results in {args.json}")


if __name__ == "__main__":
    main()
