"""The soak: the whole stack at twice its service rate, under a chaos loop.

What runs, each its own process, as in production:

* the broker on a data directory of the run: the embedded ``noida-db``, or Apache
  Kafka's own (``--engine apache-kafka``; ``FLOODGATE_KAFKA_ENGINE`` is the default);
* the admission service (``floodgate admission serve``), which starts the query
  group's driver as a job (``floodgate run``, not queueable: a restart of the
  pipeline's own driver does not wait for the load to fall);
* the ``flights`` query group (``conf/flights.toml``) with its input stream queue
  swept, plus one pass-through query ``seen`` (``SELECT producer, seq FROM flights``)
  whose output proves, tuple by tuple, what was processed;
* the sweeper (``floodgate sweeper serve``), cycling every second;
* one producer process: two threads sharing one back-pressure client
  (:class:`pipeline.client.input.StreamInput`, so the queue's bound holds across them:
  ``QueueBudget``), pushing sequence-numbered flights -- each round of the data
  shifted a year on, so event time only moves forward -- at twice the service rate
  measured in a warm-up, retrying a refused batch (``QueueFullError``) with the same
  sequence numbers; and a handful of malformed tuples at the start;
* this script's reception thread, reading every output stream as a data reception
  application does (:class:`pipeline.client.reception.StreamOutput`).

The chaos loop, at random intervals (``--fault-interval``, exponential; the short
mode runs each kind once, 5 s apart: ``restart-broker`` first, while the driver runs
micro-batches, so that it hits their transactions; then ``kill-driver``, as the slowest
to recover from -- a cold SparkSession and the replay of the killed micro-batch,
40-90 s on 2 cores -- so the other faults hit a stack still recovering from it; then
the rest in a shuffled order):

* ``kill-driver``: ``kill -9`` of the driver's process group (Python driver, JVM,
  workers), then a new job through the admission service;
* ``kill-sweeper``: ``kill -9`` of the sweeper while it works (its CPU time moves),
  then a restart;
* ``restart-broker``: on Apache Kafka, ``kill -9`` of the broker (a crash); on
  noida-db, its stop (:meth:`EmbeddedBroker.stop
  <pipeline.brokers.embedded.EmbeddedBroker.stop>`: it loses acknowledged records to a
  SIGKILL by design); a pause, a restart on the same data directory and port
  (:meth:`Stack.restart_broker`);
* ``restart-admission``: 20 jobs submitted with the service suspended (so they are
  enqueued), the service stopped and started again; every one of them must end;
* ``stall-reception``: the reception stops reading for a while (the output stream
  queues fill, the group sleeps and holds), then resumes.

At the end, producers stopped, the pipeline drained, with no tolerance
(:func:`check_exactly_once`, :func:`checks`):

* every sequence number the producer had accepted is in ``flights.seen`` exactly
  once (read from the start, ``read_committed``): lost (accepted, not in ``seen``,
  not reported back) is 0;
* tuples reported back by ``put_end`` (``DeliveryError``) number at most the tuples
  of the puts that raised, and none of them was delivered;
* no valid tuple is dead-lettered, by any query; every malformed one is, with a
  reason, and is in no output;
* the producer saw only ``QueueFullError`` refusals;
* no driver ended on its own (the watchdog records one, with its log's tail, and
  starts it again so that the report tells the rest): ``driver_restarts_unplanned``
  is 0;
* no output partition held a hanging transaction (:class:`HangingTransactions`
  records them; nothing ends them but Floodgate and the broker);
* ``floodgate audit`` exits 0 (the tuple ledger balances);
* the input queue's broker-resident backlog, sampled every second, never
  exceeded its max queue size;
* every process's RSS, sampled every second, stayed within its bound
  (:data:`RSS_BOUNDS_MIB`);
* every job submitted to the admission service reached a final state (one still
  enqueued a minute after the drain while the host stays above the service's CPU
  limit is started as an operator would, and the report says so:
  :func:`wait_for_filler_jobs`).

The report is printed and written as JSON (``<out>/soak.json``); the long mode
plots memory, file descriptors, threads and backlog over time to ``<out>/soak.png``.
With ``--rounds N`` the chaos goes on until N rounds of the flights are accepted, and
the report gives each round's tuples/s and peak memory, and the last round's against
the first's (:func:`rounds_report`): what stays flat over a long run. Exit status 1
when a check fails. Commands::

    .venv/bin/python bench/soak.py --short              # each fault once
    .venv/bin/python bench/soak.py --duration 1800      # the long mode (make soak)
    make soak-long                                      # 10 rounds on Apache Kafka

The short mode is ``tests/integration/soak/test_soak.py`` (``make test-soak``); figures in
bench/README.md, "The soak". Two defects outside Floodgate shape it: noida-db 0.2.3
loses its last acknowledged records when SIGTERM stops it (the embedded broker now
stops its Kafka service first); and librdkafka (confluent-kafka
2.16.1) aborts a process whose coordinator admin request is resent across a broker
restart (``rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0``): queue
probes read commits through consumers (:class:`pipeline.queues.probe.QueueProbe`), and this
script holds its own admin requests while it restarts the broker.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import logging
import multiprocessing
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from confluent_kafka import KafkaException, Producer
from rich.console import Console
from rich.table import Table

from admission.config import AdmissionSettings
from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.brokers.engines import ENGINES
from pipeline.brokers.local import LocalBroker, local_broker
from pipeline.client import StreamOutput
from pipeline.config import QueryGroupConfig, load_query_group
from pipeline.deadletter import DLQ_QUERY, DLQ_REASON
from pipeline.demo.reception import each_record
from pipeline.demo.stack import spawn as spawn_process
from pipeline.demo.stack import write_stack
from pipeline.kafka.topics import ensure_topics
from pipeline.queues.age import StableOffsetWatch
from pipeline.spark.sink import TRANSACTION_TIMEOUT_S

log = logging.getLogger("soak")
console = Console(stderr=True)

ROOT = Path(__file__).resolve().parents[1]
#: The ``floodgate`` command of this environment: the admission service's allowlist.
FLOODGATE = str(Path(sys.executable).with_name("floodgate"))
FAULTS = ("kill-driver", "kill-sweeper", "restart-broker", "restart-admission", "stall-reception")
#: Tuples per ``put``.
BATCH = 500
#: Malformed tuples the producer writes at the start (raw bytes, bypassing the client).
MALFORMED = 10
#: The admission lane of the query group's driver: its hard stalls disable only it.
DRIVER_LANE = "drivers"
#: Jobs submitted around an admission restart.
FILLER_JOBS = 20
#: How long the filler jobs may take to end after the drain, s; and how long they may
#: wait under high load before the soak starts them as an operator would, s.
FILLER_WAIT_S = 300.0
FILLER_PATIENCE_S = 60.0
#: Job states that are not final ("None": the admission service did not answer).
PENDING_STATES = frozenset({"ENQUEUED", "RUNNING", "None"})
#: The bound each process's RSS must stay within, MiB (peaks measured on the 2-core
#: development machine, bench/README.md, plus about a half for headroom; the Python
#: workers, measured at 1 475-1 621 MiB in short runs, a quarter).
RSS_BOUNDS_MIB = {
    "broker": 1024,
    "admission": 300,
    "sweeper": 400,
    "driver": 500,
    "driver-jvm": 2048,
    "python-workers": 2048,
    "producer": 900,
    "soak": 1200,
}
#: How long the stack may take to process its first micro-batch (a cold SparkSession).
START_TIMEOUT_S = 300.0
YEAR_MS = 365 * 86_400_000
#: prctl(2): the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: An output partition whose last stable offset stays this long below its log end
#: holds a hanging transaction: the query group's own rule (FG-QG-007 and the
#: FloodgateHangingTransaction alert), twice the transaction timeout. A micro-batch's
#: transaction takes seconds, but one left open by a ``kill -9``'d driver stays open
#: until the restarted driver's ``init_transactions`` fences and aborts it (the same
#: ``transactional.id``), which takes a driver restart: 40-90 s on 2 busy cores. A
#: 30 s threshold took those for hangs.
HANGING_AFTER_S = 2 * TRANSACTION_TIMEOUT_S


# --------------------------------------------------------------------------- the stack


@dataclass
class Layout:
    """Files and ports of one run."""

    out: Path
    bootstrap: str
    group: Path
    admission: Path
    sweeper: Path
    ports: dict[str, int]
    #: The admission token: random, 128 bits (the service refuses a weaker one).
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def logs(self) -> Path:
        return self.out / "logs"


def soak_schemas(target: Path) -> None:
    """The project's schemas plus the soak's: ``soak_flight`` (a flight with the
    producer's ``producer`` and ``seq``) and ``soak_seen`` (what ``seen`` writes)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "schemas").glob("*.avsc"):
        shutil.copy(path, target / path.name)
    flight = json.loads((ROOT / "schemas" / "flight.avsc").read_text())
    seq_fields = [
        {"name": "producer", "type": "int", "doc": "the producer thread"},
        {"name": "seq", "type": "long", "doc": "unique over the soak, in put order"},
    ]
    soak_flight = {
        **flight,
        "name": "SoakFlight",
        "doc": "A flight with the soak producer's sequence number.",
        "fields": [*flight["fields"], *seq_fields],
    }
    seen = {
        "type": "record",
        "name": "SoakSeen",
        "namespace": "floodgate.soak",
        "doc": "One input tuple the query group processed.",
        "fields": seq_fields,
    }
    (target / "soak_flight.avsc").write_text(json.dumps(soak_flight, indent=1))
    (target / "soak_seen.avsc").write_text(json.dumps(seen, indent=1))


def write_layout(
    out: Path, bootstrap: str, *, max_queue_size: int, track_jvm: bool = False
) -> Layout:
    """The query group, admission and sweeper files of a run under ``out``
    (:func:`pipeline.demo.stack.write_stack`). With ``track_jvm`` (``--rounds``), the
    admission service starts drivers whose JVM tracks its native memory
    (``-XX:NativeMemoryTracking=summary``, a few % of its CPU), for :class:`JvmMemory`."""
    soak_schemas(out / "schemas")
    raw = tomllib.loads((ROOT / "conf" / "flights.toml").read_text())
    raw["schema_dir"] = str(out / "schemas")
    raw["query_group"].update(
        checkpoint_dir=str(out / "checkpoints" / "{name}"),
        max_queue_size=max_queue_size,
        # The pass-through query writes every tuple: micro-batches within its output queue.
        max_tuples_per_trigger=5_000,
        trigger_interval_ms=500,
        queue_metrics_interval_ms=1_000,
        sleep_on_over_store_ms=250,
        sleep_on_over_store_retry_count=8,
        auto_release=True,
    )
    raw["input_streams"]["flights"]["schema"] = "soak_flight"
    raw["output_streams"]["seen"] = {
        "topic": "flights.seen",
        "schema": "soak_seen",
        "partitions": 2,
        "max_queue_size": 40_000,
    }
    raw["queries"]["seen"] = {"output": "seen", "sql": "SELECT producer, seq FROM flights"}
    files = write_stack(out, raw, bootstrap_servers=bootstrap, allowlist=[FLOODGATE])
    if track_jvm:
        import tomli_w

        settings = tomllib.loads(files.admission.read_text())
        # PySpark launches the driver's JVM with these (its launch_gateway).
        settings["admission"]["job_env"] = {
            "PYSPARK_SUBMIT_ARGS": "--driver-java-options -XX:NativeMemoryTracking=summary "
            "pyspark-shell"
        }
        files.admission.write_text(tomli_w.dumps(settings))
    (out / "logs").mkdir(exist_ok=True)
    return Layout(out, bootstrap, files.group, files.admission, files.sweeper, files.ports)


def spawn(layout: Layout, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
    """A service in a process group of its own, its output appended to ``logs/<name>.log``
    (:func:`pipeline.demo.stack.spawn`)."""
    return spawn_process(argv, layout.logs / f"{name}.log", cwd=ROOT, **env)


def reap(out: Path) -> int:
    """``kill -9`` every process of a run left behind (its command line names ``out``):
    when the soak itself dies, the services it started in sessions of their own
    would run on. Returns how many were killed."""
    killed = 0
    this = psutil.Process()
    spared = {this.pid, *(p.pid for p in this.parents())}  # `make soak ARGS="--out ..."`
    for process in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if process.pid not in spared and any(
                str(out) in arg for arg in process.info["cmdline"] or ()
            ):
                process.kill()
                killed += 1
    return killed


def kill_group(process: subprocess.Popen[bytes] | int, sig: int = signal.SIGKILL) -> None:
    pid = process if isinstance(process, int) else process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    if not isinstance(process, int):
        process.wait(timeout=60)


def wait_for_filler_jobs(stack: Stack) -> dict[str, Any]:
    """Wait (at most :data:`FILLER_WAIT_S`) until every filler job has ended; the report's
    ``filler_jobs`` (count by state), ``filler_jobs_forced`` and ``admission_status``.

    Under high load the admission service starts nothing (the admission job queue's
    rule: no enqueued job starts while system CPU is above its limit), and a shared CI
    host can stay above ``system_cpu_limit`` for minutes with the pipeline idle. A filler
    job still ENQUEUED after :data:`FILLER_PATIENCE_S` while the service reports high
    load is started as an operator would (``POST /jobs/{id}/start-now``: start-now
    overrides the queue), and recorded with the load that kept it: what the soak checks
    is that no enqueued job was lost by the restart, not how busy the host was.
    A job missing, or left ENQUEUED under low load, still fails the check.
    """
    started = time.monotonic()
    forced: list[dict[str, Any]] = []
    while True:
        jobs = {j: stack.job(j) for j in stack.filler_jobs}
        states = Counter(str((job or {}).get("state")) for job in jobs.values())
        status = stack.status()
        waited = time.monotonic() - started
        if not states.keys() & PENDING_STATES or waited > FILLER_WAIT_S:
            break
        limit = AdmissionSettings.model_fields["system_cpu_limit"].default  # the soak's
        if waited > FILLER_PATIENCE_S and status and status.get("cpu_load", 0.0) > limit:
            for job_id, job in jobs.items():
                if job and job["state"] == "ENQUEUED":
                    with contextlib.suppress(httpx.HTTPError):
                        stack._post(f"/jobs/{job_id}/start-now")
                        forced.append({"job": job_id, "cpu_load": round(status["cpu_load"], 3)})
        time.sleep(1.0)
    report: dict[str, Any] = {
        "filler_jobs": dict(states),
        "filler_jobs_forced": forced,
        "admission_status": status,
    }
    if states.keys() & PENDING_STATES:  # what the service said of them, for the failure
        lines = (stack.layout.logs / "admission.log").read_text(errors="replace").splitlines()
        report["admission_log_tail"] = lines[-60:]
    return report


class Stack:
    """The broker, the admission service, the driver job and the sweeper of one run."""

    def __init__(self, layout: Layout, broker: LocalBroker) -> None:
        self.layout = layout
        self.broker = broker
        self.admission: subprocess.Popen[bytes] | None = None
        self.sweeper: subprocess.Popen[bytes] | None = None
        self.driver_job: int | None = None
        self.jobs: list[int] = []  # every job submitted
        self.filler_jobs: list[int] = []
        self.driver_restarts_unplanned = 0
        #: Each driver that ended without a fault: its job as the admission service
        #: shows it, with the last lines of its log (the soak fails on any).
        self.driver_ends_unplanned: list[dict[str, Any]] = []
        self._http = httpx.Client(
            base_url=f"http://127.0.0.1:{layout.ports['admission']}",
            headers={"Authorization": f"Bearer {layout.token}"},
            timeout=10,
        )
        self.lock = threading.Lock()  # faults and the driver watchdog, one at a time
        #: Held by every admin request of this process and by a broker restart: no request
        #: of ours is pending while the broker is down. librdkafka (2.16.1) aborts the
        #: process (``rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0``)
        #: when admin requests time out across a broker restart.
        self.admin_lock = threading.Lock()

    # -- admission --------------------------------------------------------------

    def start_admission(self) -> None:
        self.admission = spawn(
            self.layout,
            "admission",
            # At INFO: each job's enqueue and start, with the load that decided it.
            [FLOODGATE, "admission", "serve", "--verbose", "--config", str(self.layout.admission)],
            FLOODGATE__ADMISSION__TOKEN=self.layout.token,
        )
        self._until(lambda: self._get("/status") is not None, 60, "the admission service answers")

    def stop_admission(self) -> None:
        assert self.admission is not None
        self.admission.send_signal(signal.SIGTERM)
        self.admission.wait(timeout=60)

    def _get(self, path: str) -> Any:
        try:
            answer = self._http.get(path)
        except httpx.HTTPError:
            return None
        return answer.json() if answer.status_code == 200 else None

    def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = self._http.post(path, json=body)
        answer.raise_for_status()
        return answer.json()

    def submit(self, argv: list[str], *, queueable: bool, lane: str = "default") -> int:
        job = self._post("/jobs", {"argv": argv, "queueable": queueable, "lane": lane})
        self.jobs.append(int(job["id"]))
        return int(job["id"])

    def status(self) -> dict[str, Any] | None:
        """``GET /status``, or ``None`` when the service does not answer."""
        answer = self._get("/status")
        return answer if isinstance(answer, dict) else None

    def job(self, job_id: int) -> dict[str, Any] | None:
        answer = self._get(f"/jobs/{job_id}")
        return answer if isinstance(answer, dict) else None

    # -- the driver ---------------------------------------------------------------

    def start_driver(self) -> None:
        argv = [FLOODGATE, "run", str(self.layout.group), "--bootstrap", self.layout.bootstrap]
        self.driver_job = self.submit(argv, queueable=False, lane=DRIVER_LANE)
        self._until(lambda: self.driver_pid() is not None, 60, "the driver job runs")

    def driver_pid(self) -> int | None:
        job = self.job(self.driver_job) if self.driver_job is not None else None
        if job is None or job["state"] != "RUNNING" or not job.get("pid"):
            return None
        return int(job["pid"])

    def driver_ended(self) -> bool:
        job = self.job(self.driver_job) if self.driver_job is not None else None
        return job is not None and job["state"] not in ("RUNNING", "ENQUEUED")

    def kill_driver(self) -> None:
        pid = self.driver_pid()
        assert pid is not None, "no driver runs"
        kill_group(pid)
        self._until(self.driver_ended, 60, "the admission service sees the driver end")
        self.restart_driver()

    def record_unplanned_end(self) -> None:
        """Record the driver job that ended with no fault injected (its state, exit
        status, note and the last lines of its log) for the report."""
        job = self.job(self.driver_job) if self.driver_job is not None else None
        job = job or {"id": self.driver_job}
        tail: list[str] = []
        if job.get("log_path"):
            with contextlib.suppress(OSError):
                text = Path(job["log_path"]).read_text(errors="replace").splitlines()
                tail = [line for line in text if not line.startswith("%")][-40:]
        keep = ("id", "state", "exit_code", "note", "started", "finished", "log_path")
        self.driver_ends_unplanned.append({**{k: job.get(k) for k in keep}, "log_tail": tail})
        self.driver_restarts_unplanned += 1

    def restart_driver(self) -> None:
        """The operator's part after a driver's abnormal end: acknowledge the hard stall
        (a hard stall disables the job's lane until an operator enables it; README, "The
        admission service", "Stall array"), start the driver again."""
        self._post(f"/lanes/{DRIVER_LANE}/enable")
        self.start_driver()

    # -- the sweeper ----------------------------------------------------------------

    def start_sweeper(self) -> None:
        self.sweeper = spawn(
            self.layout,
            "sweeper",
            [FLOODGATE, "sweeper", "serve", "--config", str(self.layout.sweeper)],
        )

    def kill_sweeper(self) -> bool:
        """``kill -9`` the sweeper while it works (within 10 s); whether it was busy."""
        assert self.sweeper is not None
        process = psutil.Process(self.sweeper.pid)
        busy = False
        deadline = time.monotonic() + 10
        last = sum(process.cpu_times()[:2])
        while time.monotonic() < deadline:
            time.sleep(0.02)
            now = sum(process.cpu_times()[:2])
            if now - last >= 0.01:
                busy = True
                break
            last = now
        kill_group(self.sweeper)
        self.start_sweeper()
        return busy

    # -- the broker -------------------------------------------------------------------

    def restart_broker(self, down_s: float) -> str:
        """Stop the broker, wait ``down_s``, start it again on its data directory and
        port; returns how it was stopped (``SIGKILL`` or ``stop``).

        Apache Kafka is killed (``kill -9`` of its one node, then
        :meth:`~pipeline.brokers.apache_kafka.ApacheKafkaCluster.start_node`, which waits
        until it is registered again): a crash, what the brokers of a production cluster
        meet, and what Kafka's log recovery and transaction coordinator are made to
        survive. noida-db is stopped as :meth:`EmbeddedBroker.stop
        <pipeline.brokers.embedded.EmbeddedBroker.stop>` does (``noida-db stop kafka``,
        then SIGTERM): it loses acknowledged records to a SIGKILL by design (it saves
        its log on a stop, docs/kafka-engines.md), which no client can make up for.
        """
        with self.admin_lock:
            if isinstance(self.broker, ApacheKafkaCluster):
                node = self.broker.nodes[0]
                self.broker.kill_node(node)  # SIGKILL
                time.sleep(down_s)
                self.broker.start_node(node)
                return "SIGKILL"
            self.broker.stop(remove_data=False)
            time.sleep(down_s)
            self.broker.start()
            return "stop"

    # -- admission restart with jobs enqueued -----------------------------------------------

    def restart_admission(self) -> int:
        """Suspend, enqueue :data:`FILLER_JOBS`, stop, start, resume; jobs enqueued at the stop."""
        self._post("/suspend")
        for _ in range(FILLER_JOBS):
            self.filler_jobs.append(self.submit([FLOODGATE, "--help"], queueable=True))
        enqueued = sum(
            1 for j in self.filler_jobs if (self.job(j) or {}).get("state") == "ENQUEUED"
        )
        self.stop_admission()
        self.start_admission()
        self._post("/resume")
        return enqueued

    def stop(self) -> None:
        for process in (self.sweeper, self.admission):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)
                kill_group(process)
        pid = self.driver_pid() if self.admission and self.admission.poll() is None else None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).wait(timeout=60)
            kill_group(pid)
        self._http.close()

    @staticmethod
    def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting until {what}")
            time.sleep(0.2)


# --------------------------------------------------------------------------- the producer


def produce(
    group: str,
    bootstrap: str,
    rate: Any,
    stop: Any,
    summary_path: str,
    threads: int = 2,
    accepted_total: Any = None,
) -> None:
    """The producer process: ``threads`` threads share one :class:`StreamInput` and one
    sequence of batches; the offered rate is ``rate.value`` tuples/s (0: not measured
    yet, see ``pace``); ``accepted_total`` (a shared value, or None) counts the tuples
    accepted so far. Writes what it did to ``summary_path`` (JSON) when ``stop`` is set."""
    from pipeline.client import connect
    from pipeline.demo.flights import flight_tuples, load_flights
    from pipeline.errors import DeliveryError, QueueFullError

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s producer %(message)s")
    with contextlib.suppress(OSError, AttributeError):  # Linux: die with the soak
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    config = load_query_group(group, env={})
    flights = list(flight_tuples(load_flights()))
    connector = connect(bootstrap_servers=bootstrap, config=config)
    writer = connector.open_stream_input(config.name, "flights")
    lock = threading.Lock()
    seqs = itertools.count()
    accepted: list[tuple[int, int]] = []
    counts: Counter[str] = Counter()
    unclean: list[str] = []
    malformed: list[int] = []

    raw = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for _ in range(MALFORMED):
        seq = next(seqs)
        raw.produce(config.input_streams["flights"].topic, b"soak-bad:%d" % seq, b"bad|%d" % seq)
        malformed.append(seq)
    raw.flush(60)

    def batch() -> tuple[int, list[dict[str, Any]]]:
        with lock:
            first = next(seqs)
            for _ in range(BATCH - 1):
                next(seqs)
        tuples = []
        for seq in range(first, first + BATCH):
            i = seq - MALFORMED
            round_, row = divmod(i, len(flights))
            flight = dict(flights[row])
            flight["year"] += round_
            flight["time_hour"] += round_ * YEAR_MS
            flight["producer"] = threading.get_ident() % 2**31
            flight["seq"] = seq
            tuples.append(flight)
        return first, tuples

    started = time.monotonic()

    paced = {"rate": 0.0, "since": started, "offered": 0.0}

    def pace() -> None:
        """Wait for the offered rate: the tuples offered (refused ones included) since
        ``rate`` last changed, at ``rate`` per second. Before the soak has measured the
        service rate (``rate`` 0), offer freely."""
        while not stop.is_set():
            with lock:
                if rate.value != paced["rate"]:
                    paced.update(rate=rate.value, since=time.monotonic(), offered=counts["offered"])
                if paced["rate"] <= 0:
                    return
                offered = counts["offered"] - paced["offered"]
                ahead = offered / paced["rate"] - (time.monotonic() - paced["since"])
                if ahead <= 0:
                    return
            time.sleep(min(ahead, 0.05))

    turn = threading.Condition(lock)
    next_put = [MALFORMED]  # batches are put in sequence order, whichever thread made them

    def run() -> None:
        while not stop.is_set():
            first, tuples = batch()
            with turn:
                # One batch spans half a day of flights: put out of order, a whole batch
                # would be late for the 2-hour watermark.
                while next_put[0] != first and not stop.is_set():
                    turn.wait(0.1)
            if stop.is_set():
                return
            while True:
                pace()
                with lock:
                    counts["offered"] += len(tuples)
                try:
                    writer.put(tuples)
                except QueueFullError:
                    with lock:
                        counts["rejected"] += len(tuples)
                        counts["rejected_puts"] += 1
                    if stop.is_set():
                        with lock:
                            counts["refused_at_stop"] += len(tuples)
                        return
                    time.sleep(0.05)
                    continue
                except Exception as exc:  # counted: the soak fails on any
                    with lock:
                        counts["unclean"] += 1
                        # The bound of what put_end may report back (check_exactly_once).
                        counts["raised_tuples"] += len(tuples)
                        if len(unclean) < 20:
                            unclean.append(f"{type(exc).__name__}: {exc}")
                    if stop.is_set():
                        return
                    time.sleep(1.0)
                    continue
                with turn:
                    accepted.append((first, first + len(tuples)))
                    counts["accepted"] += len(tuples)
                    if accepted_total is not None:
                        accepted_total.value = counts["accepted"]
                    next_put[0] = first + len(tuples)
                    turn.notify_all()
                break

    workers = [threading.Thread(target=run, name=f"producer-{i}") for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    undelivered: list[str] = []
    reported: list[int] = []  # tuples the broker did not acknowledge, reported back
    try:
        writer.put_end(timeout_s=300)
    except DeliveryError as exc:  # the client's contract: reported back, not lost
        reported = [t["seq"] for t, _ in exc.failed if isinstance(t, dict) and "seq" in t]
        if len(reported) != len(exc.failed):
            undelivered.append(f"DeliveryError with undecodable tuples: {exc}"[:2000])
    except Exception as exc:
        undelivered.append(f"{type(exc).__name__}: {exc}")
    counts["producer_replacements"] = writer.producer_replacements
    connector.close()
    Path(summary_path).write_text(
        json.dumps(
            {
                "accepted": merge_ranges(accepted),
                "counts": dict(counts),
                "unclean": unclean,
                "undelivered": undelivered,
                "reported": reported,
                "malformed": malformed,
                "seconds": time.monotonic() - started,
            }
        )
    )


def merge_ranges(ranges: list[tuple[int, int]]) -> list[list[int]]:
    """``[start, end)`` ranges sorted and joined where they touch."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and merged[-1][1] == start:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    return merged


# --------------------------------------------------------------------------- reception


class Reception:
    """Reads every output stream of the group in a thread, as a data reception
    application does; ``stalled`` set: reads nothing."""

    def __init__(self, config: QueryGroupConfig, bootstrap: str) -> None:
        from pipeline.client import connect

        self.connector = connect(bootstrap_servers=bootstrap, config=config)
        self.outputs = {
            s: self.connector.open_stream_output(config.name, s) for s in config.output_streams
        }
        self.stalled = threading.Event()
        self.stop = threading.Event()
        self.received: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._run, name="reception", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.stalled.is_set():
                time.sleep(0.1)
                continue
            read = 0
            for name, output in self.outputs.items():
                try:
                    tuples = output.get(max_tuples=5_000, timeout_s=0.1)
                except Exception as exc:
                    self.errors[type(exc).__name__] += 1
                    time.sleep(0.5)
                    continue
                self.received[name] += len(tuples)
                read += len(tuples)
            if not read:
                self._rest()

    def _rest(self) -> None:
        """Nothing was read: rest the readers until a queue has tuples (at most 5 s): an
        idle reader left fetching spins against the embedded broker
        (:meth:`pipeline.client.reception.StreamOutput.rest`)."""
        with contextlib.suppress(KafkaException):  # a broker fault: get() finds out
            StreamOutput.rest(self.outputs.values(), stop=self.stop, poll_s=0.1)

    def queue_lengths(self) -> dict[str, int]:
        return {name: output.queue_length() for name, output in self.outputs.items()}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.connector.close()


# --------------------------------------------------------------------------- sampling


@dataclass
class Sample:
    """One second of the soak: per role, memory (PSS, MiB), open file descriptors and
    threads; the input queue's backlog and the tuples its slowest query committed
    (``None`` while the broker restarts); the output queues' lengths."""

    t: float
    rss_mib: dict[str, float]
    backlog: int | None
    outputs: dict[str, int] = field(default_factory=dict)
    fds: dict[str, float] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)
    committed: int | None = None


def memory(process: psutil.Process) -> float:
    """A process's proportional set size (PSS), MiB: its RSS with each page shared by
    ``n`` processes counted ``1/n``. Spark's Python workers are forks of one daemon and
    share most of their pages, so summing their RSS would count those pages once per
    worker; summing PSS counts them once."""
    return float(process.memory_full_info().pss) / 2**20


def rss_by_role(stack: Stack, producer_pid: int | None) -> dict[str, float]:
    """Resident memory (PSS, :func:`memory`) of each process of the stack, MiB; the
    driver split into its Python process, its JVM and the JVM's Python workers and
    streaming source runners (summed)."""
    return by_role(stack, producer_pid, memory)


def by_role(
    stack: Stack, producer_pid: int | None, measure: Callable[[psutil.Process], float]
) -> dict[str, float]:
    """``measure`` of each process of the stack, summed per role (see
    :func:`rss_by_role`)."""
    roles: dict[str, float] = Counter()

    def rss(pid: int | None) -> float:
        if pid is None:
            return 0.0
        with contextlib.suppress(psutil.Error):
            return measure(psutil.Process(pid))
        return 0.0

    roles["broker"] = rss(stack.broker.pid)
    roles["admission"] = rss(stack.admission.pid if stack.admission else None)
    roles["sweeper"] = rss(stack.sweeper.pid if stack.sweeper else None)
    roles["producer"] = rss(producer_pid)
    roles["soak"] = rss(os.getpid())
    driver = stack.driver_pid()
    if driver is not None:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(driver)
            roles["driver"] = measure(process)
            for child in process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    role = driver_child_role(child, driver)
                    if role is not None:
                        roles[role] += measure(child)
    return dict(roles)


def driver_child_role(child: psutil.Process, driver: int) -> str | None:
    """``driver-jvm``, ``python-workers`` or None for a descendant of the driver.

    None is a process the JVM is starting, between its ``posix_spawn`` and its
    ``exec``: glibc spawns with ``CLONE_VM | CLONE_VFORK``, so until the ``exec`` the
    child *is* the JVM's address space, and its PSS is the JVM's whole resident
    memory. Counted as a Python worker (its name is the spawning JVM thread's), it
    made one-sample spikes of about the JVM's size (2 111 MiB against a median of
    572 MiB in long run 2). Told apart by what it runs: a ``java`` whose parent is
    not the driver is such a spawn."""
    command = child.cmdline()
    program = os.path.basename(command[0]) if command else ""
    if program == "java":
        return "driver-jvm" if child.ppid() == driver else None
    if program.startswith("python"):
        return "python-workers"
    return None


def driver_jvm_pid(stack: Stack) -> int | None:
    """The pid of the driver's JVM (:func:`driver_child_role`), None when none runs."""
    driver = stack.driver_pid()
    if driver is None:
        return None
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(driver).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if driver_child_role(child, driver) == "driver-jvm":
                    return child.pid
    return None


def jcmd(pid: int, *command: str) -> str:
    """The output of ``jcmd <pid> <command>`` (the JDK's diagnostic command tool).

    Raises:
        subprocess.CalledProcessError, subprocess.TimeoutExpired: it failed.
    """
    return subprocess.run(
        ["jcmd", str(pid), *command], capture_output=True, text=True, check=True, timeout=120
    ).stdout


def live_heap(histogram: str, top: int = 12) -> dict[str, Any]:
    """``jcmd GC.class_histogram``'s output (taken after a full collection, so only
    what is reachable) as ``{"bytes": total, "top": [[class, instances, bytes], ...]}``."""
    rows: list[list[Any]] = []
    total = 0
    for line in histogram.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].endswith(":") and fields[0][:-1].isdigit():
            rows.append([fields[3], int(fields[1]), int(fields[2])])
        elif len(fields) == 3 and fields[0] == "Total":
            total = int(fields[2])
    return {"bytes": total, "top": rows[:top]}


def native_memory(summary: str) -> dict[str, int]:
    """``jcmd VM.native_memory summary``'s committed KiB per category (``Java Heap``,
    ``Class``, ``Thread``, ``Code``, ``GC``, ``Internal``, ``Other``, ...) and in all
    (``Total``)."""
    found: dict[str, int] = {}
    for line in summary.splitlines():
        stripped = line.strip()
        if not stripped.startswith(("-", "Total:")) or "committed=" not in stripped:
            continue  # the lines under a category (malloc, mmap, stack) are its parts
        text = stripped.lstrip("-").strip()
        name = text.split("reserved=")[0].strip().rstrip("(:").strip()
        committed = text.split("committed=")[1].split("KB")[0]
        if name and committed.isdigit():
            found[name] = int(committed)
    return found


class JvmMemory:
    """At the end of each round (``--rounds``), what the driver's JVM holds: its live heap
    after a full collection (``jcmd GC.class_histogram`` collects first: a pause of about
    a second, once a round), the classes that hold most of it, and its native memory by
    category (``jcmd VM.native_memory summary``; the driver runs with native memory
    tracking, :func:`write_layout`). A leak grows the live heap or a native category
    round after round; a JVM that only grows its heap towards ``-Xmx`` between
    collections grows its resident memory, not these."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def measure(self, number: int, pid: int) -> None:
        """Measure round ``number`` of the JVM ``pid`` (in a thread of the caller's)."""
        entry: dict[str, Any] = {"round": number, "pid": pid}
        try:
            entry["native_kib"] = native_memory(jcmd(pid, "VM.native_memory", "summary"))
            entry["live_heap"] = live_heap(jcmd(pid, "GC.class_histogram"))
        except (subprocess.SubprocessError, OSError) as exc:
            entry["error"] = str(exc)
        with self._lock:
            self.rounds.append(entry)

    def report(self) -> list[dict[str, Any]]:
        """Per round, in order: live heap MiB, native committed MiB per category."""
        with self._lock:
            rounds = sorted(self.rounds, key=lambda r: r["round"])
        return [
            {
                "round": r["round"],
                "pid": r["pid"],
                "live_heap_mib": round(r["live_heap"]["bytes"] / 2**20, 1)
                if "live_heap" in r
                else None,
                "native_committed_mib": {
                    k: round(v / 1024, 1) for k, v in r.get("native_kib", {}).items()
                },
                "top_classes": r.get("live_heap", {}).get("top", []),
                **({"error": r["error"]} if "error" in r else {}),
            }
            for r in rounds
        ]


class Sampler:
    """Every second: RSS, file descriptors and threads per role, the input queue's
    broker-resident backlog (its length: high watermark - slowest commit - swept) and
    its slowest commit, the output queues."""

    def __init__(
        self,
        stack: Stack,
        config: QueryGroupConfig,
        reception: Reception,
        *,
        per_round: int = 0,
        rounds: int = 0,
    ) -> None:
        from pipeline.queues.probe import QueueProbe

        self.stack = stack
        self.probe = QueueProbe.for_input_stream(
            config, "flights", bootstrap_servers=stack.layout.bootstrap
        )
        self.reception = reception
        self.producer_pid: int | None = None
        self.samples: list[Sample] = []
        self.missed = 0
        self.stop = threading.Event()
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        #: The driver JVM at each round's end (``--rounds``).
        self.jvm = JvmMemory()
        self._per_round, self._rounds, self._next_round = per_round, rounds, 1

    def _round_ended(self, committed: int | None) -> None:
        """Measure the driver's JVM (:class:`JvmMemory`, on a thread of its own) when
        the slowest query has committed round :attr:`_next_round` (as
        :func:`rounds_report` cuts the rounds)."""
        if not self._per_round or committed is None:
            return
        while (
            self._next_round <= self._rounds
            and committed >= MALFORMED + self._next_round * self._per_round
        ):
            pid = driver_jvm_pid(self.stack)
            if pid is not None:
                threading.Thread(
                    target=self.jvm.measure,
                    args=(self._next_round, pid),
                    name=f"jvm-round-{self._next_round}",
                    daemon=True,
                ).start()
            self._next_round += 1

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            backlog: int | None = None
            committed: int | None = None
            outputs: dict[str, int] = {}
            try:
                with self.stack.admin_lock:
                    snapshot = self.probe.snapshot()
                    backlog = snapshot.length
                    committed = sum(p.committed or 0 for p in snapshot.partitions.values())
                    outputs = self.reception.queue_lengths()
            except Exception:
                self.missed += 1  # the broker is restarting
            try:
                memory_mib = rss_by_role(self.stack, self.producer_pid)
                fds = by_role(self.stack, self.producer_pid, lambda p: float(p.num_fds()))
                threads = by_role(self.stack, self.producer_pid, lambda p: float(p.num_threads()))
            except Exception:  # a process of the stack between stop and start
                log.warning("sampler: memory not read", exc_info=True)
                self.missed += 1
                continue
            self.samples.append(
                Sample(
                    time.monotonic() - self.started,
                    memory_mib,
                    backlog,
                    outputs,
                    fds=fds,
                    threads=threads,
                    committed=committed,
                )
            )
            self._round_ended(committed)


# --------------------------------------------------------------------------- checks


def check_exactly_once(
    layout: Layout, config: QueryGroupConfig, produced: dict[str, Any]
) -> dict[str, Any]:
    """Where each tuple handed to Floodgate went, counted with no tolerance.

    * Each accepted sequence number is in ``seen`` (read from the start,
      ``read_committed``) exactly once; ``lost`` is ``accepted - in seen - reported
      back``. The drain has emptied the input queue first (nothing queued), and a
      swept tuple is read from its BLOB by the queries like any other, so it is in
      ``seen`` too.
    * "Reported back" (the tuples ``put_end``'s :class:`~pipeline.errors.DeliveryError`
      handed back as not acknowledged) is bounded: at most the tuples of the puts that
      raised (the producer's ``raised_tuples``), only accepted tuples, none of them in
      ``seen`` (a tuple reported back and delivered would be written twice by an
      application that puts it again).
    * A valid tuple is dead-lettered by no query (``valid_dead_lettered``): the
      producer puts in event-time order (a year further on each round of the data),
      so none is late for the watermark, and every one matches the schema. Only the
      deliberately malformed ones are dead-lettered; each of them is, for ``seen``,
      with a reason, and is in no output.
    * Dead letters are counted once per query and record key (a retried task may
      write one again: the key names the tuple).
    """
    import numpy as np

    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

    schemas = SchemaRepository.load(config.schema_dir)
    codec = StreamCodec("seen", schemas.get("soak_seen"), schemas)
    malformed = set(produced["malformed"])
    # Per sequence number, in arrays (millions of them under --rounds): accepted or not,
    # and how many times it is in ``seen`` (at most 255).
    top = max([end for _, end in produced["accepted"]] + [m + 1 for m in malformed] + [0])
    accepted = np.zeros(top, dtype=bool)
    for start, end in produced["accepted"]:
        accepted[start:end] = True
    seen = np.zeros(top, dtype=np.uint8)
    beyond: Counter[int] = Counter()  # in ``seen`` with a number no put had
    for message in each_record(
        layout.bootstrap, config.output_streams["seen"].topic, timeout_s=1800
    ):
        number = int(codec.decode(message.value())["seq"])
        if 0 <= number < top:
            seen[number] = min(int(seen[number]) + 1, 255)
        else:
            beyond[number] += 1
    flight = StreamCodec("flights", schemas.get("soak_flight"), schemas)
    # Every query's dead letters, once per (query, key), by sequence number (None: a
    # value that is neither a malformed marker nor a soak flight).
    dead: dict[tuple[str, bytes], tuple[int | None, str]] = {}
    for message in each_record(layout.bootstrap, config.dead_letter_topic, timeout_s=600):
        headers = dict(message.headers() or [])
        query = (headers.get(DLQ_QUERY) or b"").decode()
        value = message.value() or b""
        seq: int | None
        if value.startswith(b"soak-bad:"):
            seq = int(value.split(b":")[1])
        else:
            try:
                seq = int(flight.decode(value)["seq"])
            except Exception:
                seq = None
        dead[(query, message.key())] = (seq, (headers.get(DLQ_REASON) or b"").decode())
    seen_dead = Counter(seq for (query, _), (seq, _) in dead.items() if query == "seen")
    reasons = Counter(reason for _, reason in dead.values())
    valid_dead = [
        {"query": query, "seq": seq, "reason": reason}
        for (query, _), (seq, reason) in dead.items()
        if seq not in malformed
    ]
    reported = {s for s in produced.get("reported", []) if 0 <= s < top}
    reported_beyond = len(produced.get("reported", [])) - len(reported)
    raised = int(produced["counts"].get("raised_tuples", 0))
    was_reported = np.zeros(top, dtype=bool)
    was_reported[list(reported)] = True
    is_malformed = np.zeros(top, dtype=bool)
    is_malformed[list(malformed)] = True
    in_seen = seen > 0
    return {
        "accepted": int(accepted.sum()),
        "seen": int(seen.sum()) + sum(beyond.values()),
        "lost": int((accepted & ~in_seen & ~was_reported).sum()),
        "reported_back": len(reported) + reported_beyond,
        "reported_back_bound": raised,
        "reported_not_accepted": int((was_reported & ~accepted).sum()) + reported_beyond,
        "reported_but_delivered": int((was_reported & in_seen).sum()),
        "duplicates": int((seen[seen > 1] - 1).sum())
        + sum(c - 1 for c in beyond.values() if c > 1)
        + sum(c - 1 for c in seen_dead.values() if c > 1),
        "unexpected": int((in_seen & ~accepted & ~is_malformed).sum()) + len(beyond),
        "malformed": len(malformed),
        "dead_lettered": len(dead),
        "valid_dead_lettered": len(valid_dead),
        "valid_dead_lettered_first": valid_dead[:20],
        "malformed_missing_from_dead_letters": len(malformed - set(seen_dead)),
        "malformed_in_output": int((in_seen & is_malformed).sum()),
        "dead_letter_reasons": dict(reasons),
    }


def run_audit(layout: Layout) -> dict[str, Any]:
    result = subprocess.run(
        [FLOODGATE, "audit", str(layout.group), "--bootstrap", layout.bootstrap, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    try:
        rows = json.loads(result.stdout)["ledger"]
    except (json.JSONDecodeError, KeyError, TypeError):
        rows = result.stdout[-2000:]
    return {"exit_status": result.returncode, "rows": rows, "stderr": result.stderr[-2000:]}


# --------------------------------------------------------------------------- the run


@dataclass
class Plan:
    duration_s: float
    fault_interval_s: float
    stall_s: tuple[float, float]
    broker_down_s: float
    warmup_s: float
    max_queue_size: int
    short: bool
    seed: int
    #: How long the drain may take before the run fails.
    drain_timeout_s: float = 900.0
    #: The broker's engine (``noida-db`` or ``apache-kafka``); ``None``:
    #: ``FLOODGATE_KAFKA_ENGINE``, else ``noida-db``.
    engine: str | None = None
    #: Rounds of the flights to put (``--rounds``, ``make soak-long``): the chaos goes on
    #: until the producer has had this many times the flights accepted (``duration_s``
    #: is then only a bound); 0: for ``duration_s``.
    rounds: int = 0


def chaos(
    plan: Plan,
    stack: Stack,
    reception: Reception,
    stop: threading.Event,
    injected: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Inject faults until ``stop``, each appended to ``injected`` as it ends (a new
    list by default) and returned. The short mode injects each kind once; ``--rounds``
    goes through every kind in a shuffled order, again and again, so that each is met
    as often as the others; the long mode draws each fault at random."""
    rng = random.Random(plan.seed)
    injected = [] if injected is None else injected
    cycle: list[str] = []
    kinds = [kind for kind in FAULTS if kind not in ("kill-driver", "restart-broker")]
    rng.shuffle(kinds)
    # Popped from the end: the broker fault first, while the driver runs micro-batches
    # (it hits their transactions), then the driver kill, then the rest.
    kinds += ["kill-driver", "restart-broker"]
    started = time.monotonic()
    while not stop.is_set():
        if plan.short and not kinds:
            break
        # The short mode at a fixed interval: a long exponential draw only makes it slower.
        wait = plan.fault_interval_s if plan.short else rng.expovariate(1 / plan.fault_interval_s)
        if stop.wait(max(3.0, wait)):
            break
        if plan.short:
            kind = kinds.pop()
        elif plan.rounds:
            if not cycle:
                cycle = list(FAULTS)
                rng.shuffle(cycle)
            kind = cycle.pop()
        else:
            kind = rng.choice(FAULTS)
        record: dict[str, Any] = {"kind": kind, "at_s": round(time.monotonic() - started, 1)}
        t0 = time.monotonic()
        with stack.lock:
            if kind == "kill-driver":
                stack.kill_driver()
            elif kind == "kill-sweeper":
                record["busy"] = stack.kill_sweeper()
            elif kind == "restart-broker":
                record["stopped_by"] = stack.restart_broker(plan.broker_down_s)
            elif kind == "restart-admission":
                record["enqueued_at_stop"] = stack.restart_admission()
            else:
                stall = rng.uniform(*plan.stall_s)
                record["stall_s"] = round(stall, 1)
                reception.stalled.set()
                stop.wait(stall)
                reception.stalled.clear()
        record["took_s"] = round(time.monotonic() - t0, 1)
        log.warning("fault: %s", record)
        injected.append(record)
    return injected


class HangingTransactions:
    """Finds output partitions whose last stable offset has not moved for
    :data:`HANGING_AFTER_S` while the log end is beyond it: a transaction no producer
    will end, which blocks every read_committed reader (Kafka's "hanging transaction",
    KIP-664 / KIP-890; the query group's own FG-QG-007).

    The soak only records them (``hanging_transactions`` in the report) and fails on
    any (:func:`checks`); it never ends one itself. (It used to restart the broker,
    noida-db's only abort, which hid whatever left the transaction open.)"""

    def __init__(self, config: QueryGroupConfig, bootstrap: str) -> None:
        from pipeline.queues.probe import QueueProbe

        # One probe per output stream for the whole run, as the query group reads them
        # (its floodgate_output_stream_unstable_seconds): the soak only watches.
        self.probes = {
            stream: QueueProbe.for_output_stream(config, stream, bootstrap_servers=bootstrap)
            for stream in config.output_streams
        }
        self.watches = {stream: StableOffsetWatch() for stream in self.probes}
        self.found: list[dict[str, Any]] = []
        self._seen: set[tuple[str, int, int]] = set()

    def check(self) -> list[tuple[str, int]]:
        """The partitions hanging now, as ``(topic, partition)``; each hang (a
        partition's last stable offset) is added to :attr:`found` once."""
        hanging = []
        for stream, probe in self.probes.items():
            high = {p: q.high for p, q in probe.snapshot(wait_s=30).partitions.items()}
            stable = probe.last_stable_offsets()
            watch = self.watches[stream]
            watch.observe(stable, high, time.monotonic())
            for partition, stuck in watch.stuck_s.items():
                if stuck > HANGING_AFTER_S:
                    hanging.append((probe.topic, partition))
                    if (probe.topic, partition, stable[partition]) not in self._seen:
                        self._seen.add((probe.topic, partition, stable[partition]))
                        self.found.append(
                            {
                                "topic": probe.topic,
                                "partition": partition,
                                "stable": stable[partition],
                                "high": high[partition],
                                "stuck_s": round(stuck),
                            }
                        )
        return hanging


def watchdog(stack: Stack, stop: threading.Event, hanging: HangingTransactions) -> None:
    """Every 2 s: a driver that ended with no fault injected is recorded
    (:meth:`Stack.record_unplanned_end`; the soak fails on any) and started again
    through the admission service, so that the run goes on and its report tells
    everything else; hanging transactions are recorded (:class:`HangingTransactions`;
    the soak fails on any), never ended by the soak."""
    while not stop.wait(2.0):
        with stack.lock:
            if stack.driver_ended():
                log.error("the driver ended without a fault: recorded, and started again")
                stack.record_unplanned_end()
                stack.restart_driver()
        try:
            with stack.admin_lock:
                stuck = hanging.check()
        except Exception:
            continue  # the broker is restarting
        if stuck:
            log.error("hanging transactions on %s (recorded; the soak will fail)", stuck)


def input_progress(sampler: Sampler) -> tuple[int, int]:
    """``(committed, written)``: tuples the slowest query has committed and the high
    watermarks, summed over the input topic's partitions, in one reading of the
    sampler's probe (one admin client for the run, see :class:`HangingTransactions`),
    never while the broker restarts (:attr:`Stack.admin_lock`)."""
    with sampler.stack.admin_lock:
        # wait_s: Apache Kafka answers NOT_COORDINATOR while it creates and loads
        # __consumer_offsets for the run's first consumer group (a transient error).
        partitions = sampler.probe.snapshot(wait_s=60).partitions.values()
    return sum(p.committed or 0 for p in partitions), sum(p.high for p in partitions)


def soak(plan: Plan, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    broker = local_broker(plan.engine, data_dir=out / "broker").start()
    layout = write_layout(
        out,
        broker.bootstrap_servers,
        max_queue_size=plan.max_queue_size,
        track_jvm=bool(plan.rounds),
    )
    config = load_query_group(layout.group, env={})
    ensure_topics(layout.bootstrap, config.topics())
    stack = Stack(layout, broker)
    report: dict[str, Any] = {"plan": asdict(plan), "out": str(out), "engine": broker.engine}
    ctx = multiprocessing.get_context("spawn")
    rate = ctx.Value("d", 0.0)
    accepted_total = ctx.Value("q", 0)
    per_round = 0
    if plan.rounds:
        from pipeline.demo.flights import load_flights

        per_round = len(load_flights())
    target = plan.rounds * per_round
    producer_stop = ctx.Event()
    summary_path = out / "producer.json"
    producer = ctx.Process(
        target=produce,
        # Until the warm-up has measured the service rate, freely: the (bounded) input
        # queue stays full, so the rate is measured on a backlog. A budget of two
        # queues' worth ran out within the warm-up once idle readers stopped spinning,
        # and the soak then measured (and offered twice) the producer's pace.
        args=(str(layout.group), layout.bootstrap, rate, producer_stop, str(summary_path)),
        kwargs={"accepted_total": accepted_total},
        name="producer",
    )
    reception: Reception | None = None
    hanging = HangingTransactions(config, layout.bootstrap)
    stop = threading.Event()
    watch_stop = threading.Event()  # the watchdog goes on through the drain
    threads: list[threading.Thread] = []
    try:
        stack.start_admission()
        stack.start_sweeper()
        stack.start_driver()
        # From the start: a driver that fails to start counts as one that ended on
        # its own (the run fails) and is started again, so that the report tells the rest.
        watch = threading.Thread(
            target=watchdog, args=(stack, watch_stop, hanging), name="watchdog", daemon=True
        )
        watch.start()
        reception = Reception(config, layout.bootstrap)
        reception.thread.start()
        sampler = Sampler(stack, config, reception, per_round=per_round, rounds=plan.rounds)
        sampler.thread.start()
        producer.start()
        sampler.producer_pid = producer.pid
        # Warm-up: the backlog the start built is processed; the commit rate is the service rate.
        console.print("[bold]soak[/]: waiting for the first micro-batch")
        deadline = time.monotonic() + START_TIMEOUT_S
        while input_progress(sampler)[0] == 0:
            if time.monotonic() > deadline:
                raise RuntimeError("no micro-batch committed: see " + str(layout.logs))
            time.sleep(1.0)
        # From the end of a micro-batch (the commit moves) for warmup_s.
        first = input_progress(sampler)[0]
        while (start := input_progress(sampler)[0]) == first:
            time.sleep(0.2)
        # ... to the end of the first micro-batch after warmup_s (commits move per
        # micro-batch: measured between two moves, the rate is exact).
        t0 = time.monotonic()
        time.sleep(plan.warmup_s)
        seen = input_progress(sampler)[0]
        while (end := input_progress(sampler)[0]) == seen and time.monotonic() - t0 < 120:
            time.sleep(0.2)
        service_rate = (end - start) / (time.monotonic() - t0)
        rate.value = max(2 * service_rate, 100.0)
        report["service_rate"] = round(service_rate)
        report["offered_rate"] = round(rate.value)
        console.print(
            f"[bold]soak[/]: service rate {service_rate:,.0f} tuples/s; offering {rate.value:,.0f}"
        )
        faults: list[dict[str, Any]] = []
        report["faults"] = faults
        threads = [
            threading.Thread(
                target=chaos, args=(plan, stack, reception, stop, faults), name="chaos"
            ),
        ]
        for thread in threads:
            thread.start()
        soak_started = time.monotonic()
        processed = 0
        with progress(target or plan.duration_s, "tuples processed" if target else "s") as go:
            while time.monotonic() - soak_started < plan.duration_s:
                if plan.short and not threads[0].is_alive():
                    break
                if target:
                    # The rounds are put, then processed, under the chaos; it ends once
                    # they are processed and every kind of fault has been met.
                    if accepted_total.value >= target:
                        producer_stop.set()
                    with contextlib.suppress(Exception):
                        processed = max(0, input_progress(sampler)[0] - MALFORMED)
                    met = {f["kind"] for f in faults}
                    if processed >= target and met >= set(FAULTS):
                        break
                time.sleep(1.0)
                go(processed if target else time.monotonic() - soak_started)
        if target:
            # Bounded by --duration: a run that did not put every round still drains and
            # is checked, and fails "every round put".
            report["rounds_target"] = target
        stop.set()
        threads[0].join()
        report["soak_s"] = round(time.monotonic() - soak_started, 1)
        producer_stop.set()
        producer.join(timeout=600)
        produced = json.loads(summary_path.read_text())
        report["producer"] = {k: v for k, v in produced.items() if k != "accepted"}
        # Drain: every accepted tuple processed, every output read.
        console.print("[bold]soak[/]: draining")
        drain_started = time.monotonic()
        reception.stalled.clear()
        last_said = 0.0
        while True:
            with contextlib.suppress(Exception):
                committed, high = input_progress(sampler)
                outputs = reception.queue_lengths()
                if committed >= high and all(v <= 4 for v in outputs.values()):
                    break
                if time.monotonic() - last_said > 10:
                    last_said = time.monotonic()
                    log.warning(
                        "draining: %d of %d committed; outputs %s", committed, high, outputs
                    )
            if time.monotonic() - drain_started > plan.drain_timeout_s:
                raise RuntimeError(
                    f"the pipeline did not drain in {plan.drain_timeout_s:.0f} s; hanging "
                    f"transactions {hanging.found}; drivers ended on their own "
                    f"{stack.driver_ends_unplanned}"
                )
            time.sleep(1.0)
        report["drain_s"] = round(time.monotonic() - drain_started, 1)
        watch_stop.set()
        report["reception"] = {
            "received": dict(reception.received),
            "errors": dict(reception.errors),
        }
        report["exactly_once"] = check_exactly_once(layout, config, produced)
        report["audit"] = run_audit(layout)
        report.update(wait_for_filler_jobs(stack))
        report["driver_restarts_unplanned"] = stack.driver_restarts_unplanned
        report["driver_ends_unplanned"] = stack.driver_ends_unplanned
        report["hanging_transactions"] = hanging.found
        sampler.stop.set()
        sampler.thread.join()
        report["samples"] = len(sampler.samples)
        report["samples_missed"] = sampler.missed
        report["peak_backlog"] = max((s.backlog or 0) for s in sampler.samples)
        report["max_queue_size"] = plan.max_queue_size
        peaks: dict[str, float] = {}
        for sample in sampler.samples:
            for role, mib in sample.rss_mib.items():
                peaks[role] = max(peaks.get(role, 0.0), mib)
        report["peak_rss_mib"] = {k: round(v) for k, v in sorted(peaks.items())}
        report["rss_bounds_mib"] = RSS_BOUNDS_MIB
        if plan.rounds:
            report["rounds"] = rounds_report(sampler.samples, per_round, plan.rounds)
            report["rounds"]["driver_jvm"] = sampler.jvm.report()
        (out / "samples.json").write_text(json.dumps([asdict(s) for s in sampler.samples]))
        if not plan.short:
            try:  # after the JSON, which never needs it: the bench extra may be missing
                plot(sampler.samples, plan, out / "soak.png", report.get("rounds"))
            except ImportError as exc:
                print(f"no {out / 'soak.png'}: {exc} (.venv/bin/pip install -e '.[bench]')")
    finally:
        stop.set()
        watch_stop.set()
        producer_stop.set()
        if producer.is_alive():
            producer.join(timeout=60)
            producer.kill()
        if reception is not None:
            reception.close()
        stack.stop()
        broker.stop(remove_data=False)
        reap(out)
    report["checks"] = checks(report)
    return report


def rounds_report(samples: list[Sample], per_round: int, rounds: int) -> dict[str, Any]:
    """Each round of the flights as the pipeline processed it: round ``k`` ends when the
    slowest query has committed the malformed tuples and ``k`` rounds of flights. Per
    round: its tuples/s, each role's peak PSS (MiB), and its file descriptors and
    threads at the round's end; and how the last round compares with the first (the
    flatness ``make soak-long`` reports: a leak grows, a slowdown shrinks).

    Returns:
        ``{"per_round": [...], "last_over_first": {...}}``; rounds the samples never
        saw end (the run stopped first) are left out.
    """
    ends: list[tuple[float, int]] = []  # (t, index of the sample) per round end
    k = 1
    for i, sample in enumerate(samples):
        while k <= rounds and (sample.committed or 0) >= MALFORMED + k * per_round:
            ends.append((sample.t, i))
            k += 1
    rows: list[dict[str, Any]] = []
    start_t, start_i = (samples[0].t, 0) if samples else (0.0, 0)
    for number, (end_t, end_i) in enumerate(ends, start=1):
        window = samples[start_i : end_i + 1]
        peak: dict[str, float] = {}
        for sample in window:
            for role, mib in sample.rss_mib.items():
                peak[role] = max(peak.get(role, 0.0), mib)
        last = samples[end_i]
        rows.append(
            {
                "round": number,
                "seconds": round(end_t - start_t, 1),
                "tuples_per_s": round(per_round / max(end_t - start_t, 1e-9)),
                "peak_rss_mib": {r: round(v) for r, v in sorted(peak.items())},
                "fds": {r: int(v) for r, v in sorted(last.fds.items())},
                "threads": {r: int(v) for r, v in sorted(last.threads.items())},
            }
        )
        start_t, start_i = end_t, end_i
    flat: dict[str, Any] = {}
    if len(rows) >= 2:
        first, final = rows[0], rows[-1]
        flat["tuples_per_s"] = round(final["tuples_per_s"] / max(first["tuples_per_s"], 1), 2)
        flat["peak_rss_mib"] = {  # roles running in both (the producer ends first)
            role: round(final["peak_rss_mib"][role] / mib, 2)
            for role, mib in first["peak_rss_mib"].items()
            if mib and final["peak_rss_mib"].get(role)
        }
    return {"per_round": rows, "last_over_first": flat}


def checks(report: dict[str, Any]) -> dict[str, bool]:
    exactly = report["exactly_once"]
    counts = report["producer"]["counts"]
    faults = Counter(f["kind"] for f in report.get("faults", []))
    return {
        "every fault kind injected": all(faults[k] > 0 for k in FAULTS),
        "no tuple lost": exactly["lost"] == 0,
        "no tuple duplicated": exactly["duplicates"] == 0 and exactly["unexpected"] == 0,
        "reported back only by puts that raised": exactly["reported_back"]
        <= exactly["reported_back_bound"]
        and exactly["reported_not_accepted"] == 0
        and exactly["reported_but_delivered"] == 0,
        "no valid tuple dead-lettered": exactly["valid_dead_lettered"] == 0,
        "every malformed tuple dead-lettered": exactly["malformed_missing_from_dead_letters"] == 0
        and exactly["malformed_in_output"] == 0,
        "no driver ended on its own": report["driver_restarts_unplanned"] == 0,
        "no hanging transaction": not report["hanging_transactions"],
        "the producer saw only QueueFullError": counts.get("unclean", 0) == 0
        and not report["producer"]["undelivered"],
        "floodgate audit balances": report["audit"]["exit_status"] == 0,
        "backlog within its max": report["peak_backlog"] <= report["max_queue_size"],
        "RSS within bounds": all(
            mib <= RSS_BOUNDS_MIB.get(role, 0) for role, mib in report["peak_rss_mib"].items()
        ),
        "every job reached a final state": not set(report["filler_jobs"]) & PENDING_STATES,
        "every round put": exactly["accepted"] >= report.get("rounds_target", 0),
    }


@contextlib.contextmanager
def progress(total: float, unit: str = "s") -> Iterator[Callable[[float], None]]:
    """A rich progress bar to ``total`` (seconds of chaos, or tuples accepted)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]soak[/]"),
        BarColumn(),
        TextColumn(f"{{task.completed:,.0f}} / {{task.total:,.0f}} {unit}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("soak", total=total)
        yield lambda done: bar.update(task, completed=done)


def plot(
    samples: list[Sample], plan: Plan, path: Path, rounds: dict[str, Any] | None = None
) -> None:
    """RSS, file descriptors and threads per process, and the input queue's backlog,
    over the soak; with ``rounds`` (``--rounds``), each round's end as a dotted line and
    its tuples/s in a panel of its own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 5 if rounds else 4
    fig, axes = plt.subplots(panels, 1, figsize=(11, 3 * panels))
    t = [s.t for s in samples]
    series = (
        ("PSS, MiB", "RSS (PSS) per process, sampled every second", lambda s: s.rss_mib),
        ("open file descriptors", "file descriptors per process", lambda s: s.fds),
        ("threads", "threads per process", lambda s: s.threads),
    )
    for ax, (label, title, of) in zip(axes, series, strict=False):
        roles = sorted({r for s in samples for r in of(s)})
        for role in roles:
            ax.plot(t, [of(s).get(role, 0.0) for s in samples], label=role, linewidth=1)
        ax.set_ylabel(label)
        ax.set_title(f"Floodgate soak: {title}")
        ax.legend(loc="upper left", ncol=4, fontsize=8)
    backlog = axes[3]
    backlog.plot(
        t,
        [s.backlog if s.backlog is not None else float("nan") for s in samples],
        label="input queue backlog",
    )
    backlog.axhline(plan.max_queue_size, color="red", linestyle="--", label="max queue size")
    backlog.set_ylabel("tuples")
    backlog.set_xlabel("seconds")
    backlog.legend(loc="upper left", fontsize=8)
    if rounds:
        ends = itertools.accumulate(r["seconds"] for r in rounds["per_round"])
        for end in ends:
            for ax in axes[:4]:
                ax.axvline(t[0] + end if t else end, color="grey", linestyle=":", linewidth=0.8)
        bars = axes[4]
        numbers = [r["round"] for r in rounds["per_round"]]
        bars.bar(numbers, [r["tuples_per_s"] for r in rounds["per_round"]])
        bars.set_xticks(numbers)
        bars.set_xlabel("round of the flights")
        bars.set_ylabel("tuples/s")
        bars.set_title("tuples/s per round (input committed by the slowest query)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def show(report: dict[str, Any]) -> None:
    table = Table(title="soak")
    table.add_column("figure")
    table.add_column("value", justify="right")
    exactly = report["exactly_once"]
    faults = Counter(f["kind"] for f in report.get("faults", []))
    rows = [
        ("soak duration", f"{report['soak_s']} s (+ {report['drain_s']} s drain)"),
        (
            "service rate / offered",
            f"{report['service_rate']:,} / {report['offered_rate']:,} tuples/s",
        ),
        ("tuples accepted", f"{exactly['accepted']:,}"),
        ("tuples refused (QueueFullError)", f"{report['producer']['counts'].get('rejected', 0):,}"),
        ("faults", ", ".join(f"{k} {faults[k]}" for k in FAULTS)),
        ("unplanned driver restarts", str(report["driver_restarts_unplanned"])),
        ("lost / duplicates", f"{exactly['lost']} / {exactly['duplicates']}"),
        (
            "reported back (DeliveryError) / bound (tuples of puts that raised)",
            f"{exactly['reported_back']} / {exactly['reported_back_bound']}",
        ),
        (
            "producers replaced (FG-CLIENT-003)",
            str(report["producer"]["counts"].get("producer_replacements", 0)),
        ),
        ("dead-lettered, by reason", str(exactly["dead_letter_reasons"])),
        ("valid tuples dead-lettered", str(exactly["valid_dead_lettered"])),
        ("hanging transactions", str(len(report["hanging_transactions"]))),
        ("peak backlog / max", f"{report['peak_backlog']:,} / {report['max_queue_size']:,}"),
        ("peak RSS, MiB", ", ".join(f"{k} {v}" for k, v in report["peak_rss_mib"].items())),
        ("audit exit status", str(report["audit"]["exit_status"])),
    ]
    if "rounds" in report:
        per_round = report["rounds"]["per_round"]
        rows.append(("tuples/s per round", ", ".join(f"{r['tuples_per_s']:,}" for r in per_round)))
        rows.append(("last round / first", str(report["rounds"]["last_over_first"])))
        jvm = report["rounds"].get("driver_jvm", [])
        rows.append(
            (
                "driver JVM per round: live heap / native committed MiB",
                ", ".join(
                    f"{r['round']}: {r['live_heap_mib']} / {r['native_committed_mib'].get('Total')}"
                    for r in jvm
                ),
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    for name, ok in report["checks"].items():
        table.add_row(name, "[green]ok[/]" if ok else "[red]FAILED[/]")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="each fault once, about 2 minutes")
    parser.add_argument(
        "--duration", type=float, default=1800.0, help="seconds of chaos (long mode)"
    )
    parser.add_argument(
        "--fault-interval", type=float, default=30.0, help="mean seconds between faults"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="put this many rounds of the flights (10: make soak-long), under the chaos; "
        "--duration is then only a bound",
    )
    parser.add_argument("--max-queue-size", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="the broker (default: FLOODGATE_KAFKA_ENGINE, else noida-db)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory (default bench/out/soak-<time>)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    plan = Plan(
        duration_s=600.0 if args.short else args.duration,
        fault_interval_s=5.0 if args.short else args.fault_interval,
        stall_s=(5.0, 5.0) if args.short else (10.0, 60.0),
        broker_down_s=2.0,
        warmup_s=8.0 if args.short else 30.0,
        max_queue_size=10_000 if args.short else args.max_queue_size,
        short=args.short,
        seed=args.seed,
        drain_timeout_s=420.0 if args.short else 900.0,
        engine=args.engine,
        rounds=args.rounds,
    )
    out = args.out or ROOT / "bench" / "out" / time.strftime("soak-%Y%m%d-%H%M%S")
    report = soak(plan, out)
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    show(report)
    console.print(f"report: {out / 'soak.json'}")
    sys.exit(0 if all(report["checks"].values()) else 1)


if __name__ == "__main__":
    main()
