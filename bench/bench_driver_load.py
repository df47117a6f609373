"""Benchmark: the query group driver's load, with the output written by the Python sink
on the driver (``--tree before``) and by the JVM sink on the executors (``--tree after``).

What is measured: a query group of one pass-through query, ``SELECT *, arr_delay > 15
AS late FROM flights`` (a tuple out per flight, append mode), writing output stream
``flights_late`` (schema ``schemas/flight.avsc`` plus ``{"name": "late", "type":
["null", "boolean"], "default": null}``, written with a copy of the measured tree's
``schemas/*.avsc`` to a temporary directory, the group's ``schema_dir``), keyed like
the input stream (``carrier``, ``flight``, ``time_hour``), 4 partitions, its queue
bounded above every tuple of the run (nothing sleeps or holds), exactly once. The input
is the flights, produced with ``common.produce_flights`` to a 4-partition topic of a
fresh broker (noida-db, or ``--engine apache-kafka``); micro-batches are planned by
offsets only (no event-time alignment, no watermark: the query keeps no state). The
group runs on Spark's ``local-cluster[2,1,1024]`` master: two executor JVMs of 1 GiB,
the driver JVM apart, with ``Trigger.AvailableNow`` (``QueryGroup.start(available_now=
True)``, then ``await_termination``), in a driver process of its own: this script with
``--driver``, ``PYTHONPATH`` set to the tree measured (``--tree-dir``), so each run
imports its own ``pipeline`` and finds its own jar (``pipeline/spark/jars``, not in git:
``scripts/build-jar --skip-tests`` in that tree). The driver's JVM memory is set at its
launch (``PYSPARK_SUBMIT_ARGS=--driver-memory ...``).

Two parts (``part``):

* ``cpu``: **the driver's CPU seconds per 100 000 output tuples**, over ``--limit N``
  flights (default all 336 776), ``--batch`` rows per micro-batch (default 150 000,
  conf/flights.toml's). psutil samples the driver's process tree every 0.2 s from this
  process (nothing is sampled inside the driver): the driver's Python process, the
  driver JVM (its ``java`` child, which also hosts local-cluster's master and workers),
  other processes of the driver (none expected), and, apart, the executor JVMs (command
  line ``CoarseGrainedExecutorBackend``, children of the workers in the driver JVM) with
  their children. The window runs from the ``run`` command (session and executors up,
  the machine quiet) until every query terminated; the driver's figure is the sum of its
  Python, its JVM and its other processes. Reported per role and in total, per 100 000
  output tuples (counted after the run with a ``read_committed`` consumer of the output
  topic, outside the window). Once a run of each tree is in the results file, the
  comparison: before ÷ after, target >= 5x (reported, never asserted).
* ``heap``: **the largest pass-through micro-batch a 512 MiB driver can write**
  (``--driver-memory 512m``): the flights produced ``--copies`` times (default 3,
  1 010 328 tuples; keys repeat, so the output is checked on counts only) to one topic,
  then a run per ``--batches`` size (default 150 000 and 1 000 000 rows a micro-batch,
  ``max_tuples_per_trigger``), each in a new driver over the whole topic. Per size:
  whether it completed, else the error (``OversizedBatchError``, ``OutOfMemoryError``,
  ``BufferError``, ...), the seconds, the driver JVM's heap used (``Runtime.totalMemory
  - freeMemory`` through the session's py4j every 0.2 s, peak; and the sum of the heap
  pools' own peaks, ``MemoryPoolMXBean.getPeakUsage``, reset at the start), its GC time,
  and the peak resident set (``VmHWM``) of the driver JVM and of the driver's Python.
  A driver JVM out of heap in a thread Spark does not watch (``task-result-getter``)
  hangs its query: a driver that logged an ``OutOfMemoryError`` and did not answer
  within a minute is stopped, and the run failed with ``OutOfMemoryError``.

Each run is a new driver. In ``cpu`` it first runs, before the window, a warm-up group
of the same query over a topic of its own (``--warmup N`` flights, default all, as
``common.WARMUP_FLIGHTS``; ``--warmup 0``: none), to its end: a query group is a
long-running service, and a cold driver JVM spends most of a short run compiling
(its JIT, Spark's generated code), whatever the sink. ``heap`` runs cold. One run per
part and tree by default (``--repeat N`` for more, ``cpu`` only).

Run, from each tree's checkout (``PYTHONPATH`` the tree of this script; the measured
tree is ``--tree-dir``, default this checkout):

    PYTHONPATH=. .venv/bin/python bench/bench_driver_load.py cpu --tree after
    PYTHONPATH=. .venv/bin/python bench/bench_driver_load.py cpu --tree before \\
        --tree-dir ../wt-before
    PYTHONPATH=. .venv/bin/python bench/bench_driver_load.py heap --tree after
    PYTHONPATH=. .venv/bin/python bench/bench_driver_load.py heap --tree before \\
        --tree-dir ../wt-before

Results: tables, and JSON in ``bench/out/driver_load.json``: each run replaces its own
part and tree (``cpu``/``heap``, ``before``/``after``) and keeps the others, so the
comparison is made once both trees are in (a ``heap`` run over the same tuples and
driver memory replaces only the batch sizes it measured). Each driver's log is in
``bench/out/driver_load_logs/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import common
import psutil
from common import OUT_DIR, ROOT, console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

QUERY_SQL = "SELECT *, arr_delay > 15 AS late FROM flights"
OUTPUT_STREAM = "flights_late"
MASTER = "local-cluster[2,1,1024]"
#: local-cluster's workers have 1024 MiB each: an executor takes it all.
EXECUTOR_MEMORY = "1g"
EXECUTORS = 2
PARTITIONS = 4
#: The ``cpu`` part's rows per micro-batch by default (conf/flights.toml's).
DEFAULT_BATCH = 150_000
DEFAULT_DRIVER_MEMORY = {"cpu": "1g", "heap": "512m"}
HEAP_BATCHES = (150_000, 1_000_000)
HEAP_COPIES = 3
#: Driver CPU per 100 000 output tuples, before ÷ after (reported, never asserted).
TARGET_RATIO = 5.0
#: psutil's sampling period over the driver's tree, and the heap's in the driver, s.
SAMPLE_S = 0.2
START_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 1800.0
#: How long a driver may take to stop once asked, before its process group is killed.
QUIT_TIMEOUT_S = 60.0
#: How long a driver that logged an OutOfMemoryError may take to answer, seconds.
OOM_GRACE_S = 60.0
MARKER = "@@driverload "
#: The executor JVMs' main class, in their command lines.
EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"
#: CPU roles, in report order; the driver's are summed.
DRIVER_ROLES = ("driver Python", "driver JVM", "driver, other")
ROLES = (*DRIVER_ROLES, "executors")
#: Names an error of a run is known by, most telling first (searched in its traceback).
ERRORS = (
    "OversizedBatchError",
    "OutOfMemoryError",
    "BufferError",
    "QueryGroupHeld",
    "MemoryError",
    "Py4JNetworkError",
    "Py4JError",
)
MIB = 2**20
LOG_DIR = OUT_DIR / "driver_load_logs"


# --------------------------------------------------------------------------- the driver


_stdout_lock = threading.Lock()


def answer(**fields: Any) -> None:
    """Write one answer line to the benchmark (in the driver process)."""
    with _stdout_lock:
        sys.stdout.write(MARKER + json.dumps(fields) + "\n")
        sys.stdout.flush()


def exception_chain(exc: BaseException) -> str:
    """``exc`` and its causes, each as ``Type: message`` (a Spark error's message holds
    the Java exception and its causes), one a line."""
    lines: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lines.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(lines)


def error_name(text: str) -> str:
    """The first of :data:`ERRORS` named in ``text``, else ``"error"``."""
    return next((name for name in ERRORS if name in text), "error")


class HeapSampler:
    """The driver JVM's heap used (``totalMemory - freeMemory``), every
    :data:`SAMPLE_S` through py4j, in a thread of the driver; its peak in bytes, also
    told to the benchmark every second (``sample`` lines), for a driver that never
    answers (a JVM out of heap in a thread Spark does not watch hangs its query)."""

    def __init__(self, jvm: Any) -> None:
        self._runtime = jvm.java.lang.Runtime.getRuntime()
        self._stop = threading.Event()
        self.peak = 0
        self.samples = 0
        self._thread = threading.Thread(target=self._loop, name="heap-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a JVM out of memory or gone
                used = int(self._runtime.totalMemory()) - int(self._runtime.freeMemory())
                self.peak = max(self.peak, used)
                self.samples += 1
                if self.samples % round(1 / SAMPLE_S) == 0:
                    answer(sample={"heap_sampled_peak_mib": self.peak / MIB})
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> HeapSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def heap_pools(jvm: Any) -> list[Any]:
    """The driver JVM's heap memory pools (``MemoryPoolMXBean``)."""
    pools = jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    return [p for p in pools if str(p.getType().name()) == "HEAP"]


def gc_totals(jvm: Any) -> tuple[int, float]:
    """``(collections, seconds)`` of the driver JVM's garbage collectors so far."""
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return (
        sum(max(0, int(b.getCollectionCount())) for b in beans),
        sum(max(0, int(b.getCollectionTime())) for b in beans) / 1000,
    )


def query_figures(group: Any) -> dict[str, Any]:
    """Input rows and micro-batches with data of the group's queries (their progress)."""
    rows = batches = 0
    for query in group.queries().values():
        for p in query.recentProgress:
            if p is None:
                continue
            rows += int(p["numInputRows"])
            batches += int(int(p["numInputRows"]) > 0)
    return {"input_rows": rows, "batches": batches}


def driver_main() -> None:
    """The driver process (``--driver``): reads a hello (the group's raw config, the
    bootstrap, whether to sample the heap, a warm-up group's config or none), builds the
    session on ``local-cluster`` and waits for both executors; runs the warm-up group
    to its end and stops it; builds the group; answers ``ready``; on ``run`` runs the
    group with ``Trigger.AvailableNow`` and answers its figures; on ``quit`` stops."""
    from prometheus_client import CollectorRegistry

    import pipeline
    from pipeline.config import parse_query_group
    from pipeline.serde.schemas import SchemaRepository
    from pipeline.spark.jvm import source_jar
    from pipeline.spark.query_group import QueryGroup
    from pipeline.spark.session import build_spark_session

    def make_group(raw: dict[str, Any]) -> Any:
        config = parse_query_group(raw, env={})
        return QueryGroup(
            config,
            bootstrap_servers=hello["bootstrap"],
            spark=spark,
            schemas=SchemaRepository.load(config.schema_dir),
            registry=CollectorRegistry(),
        )

    common.log_warnings()
    hello = json.loads(sys.stdin.readline())
    spark_config = parse_query_group(hello["config"], env={}).spark
    spark = build_spark_session(
        app_name="floodgate-bench-driver-load", master=spark_config.master, conf=spark_config.conf
    )
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    jvm: Any = spark._jvm
    deadline = time.monotonic() + START_TIMEOUT_S
    # The block managers of the driver and of each executor.
    while sc._jsc.sc().getExecutorMemoryStatus().size() < EXECUTORS + 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{EXECUTORS} executors did not register in time")
        time.sleep(0.2)
    warmup: dict[str, Any] | None = None
    if hello["warmup"] is not None:
        warm = make_group(hello["warmup"])
        started = time.monotonic()
        warm.start(available_now=True)
        if not warm.await_termination(hello["timeout_s"]):
            raise RuntimeError("the warm-up group did not finish in time")
        warmup = {"seconds": round(time.monotonic() - started, 3), **query_figures(warm)}
        warm.stop()
    group = make_group(hello["config"])
    runtime = jvm.java.lang.Runtime.getRuntime()
    answer(
        ready=True,
        pid=os.getpid(),
        jvm_pid=int(jvm.java.lang.ProcessHandle.current().pid()),
        pipeline=str(Path(pipeline.__file__).resolve().parent),
        jar=str(source_jar()),
        master=sc.master,
        driver_memory=sc.getConf().get("spark.driver.memory", "unset"),
        executor_memory=sc.getConf().get("spark.executor.memory", "unset"),
        heap_max_mib=int(runtime.maxMemory()) / MIB,
        versions=common.versions(spark),
        warmup=warmup,
    )
    sys.stdin.readline()  # run
    pools = heap_pools(jvm)
    for pool in pools:
        pool.resetPeakUsage()
    gc0 = gc_totals(jvm)
    error = error_text = None
    sampler = HeapSampler(jvm) if hello["sample_heap"] else contextlib.nullcontext()
    started = time.monotonic()
    with sampler:
        try:
            group.start(available_now=True)
            if not group.await_termination(hello["timeout_s"]):
                error, error_text = "timeout", f"not done in {hello['timeout_s']:.0f} s"
        except BaseException as exc:  # every failure is a figure
            text = exception_chain(exc)
            error, error_text = error_name(text), text[:3000]
    seconds = time.monotonic() - started
    figures: dict[str, Any] = {"seconds": seconds, "error": error, "error_text": error_text}
    with contextlib.suppress(Exception):  # a JVM out of memory or gone
        figures.update(query_figures(group))
    with contextlib.suppress(Exception):
        gc1 = gc_totals(jvm)
        figures.update(gc_count=gc1[0] - gc0[0], gc_s=round(gc1[1] - gc0[1], 3))
    with contextlib.suppress(Exception):
        figures["heap_pools_peak_mib"] = sum(int(p.getPeakUsage().getUsed()) for p in pools) / MIB
    if isinstance(sampler, HeapSampler):
        figures.update(heap_sampled_peak_mib=sampler.peak / MIB, heap_samples=sampler.samples)
    answer(**figures)
    sys.stdin.readline()  # quit
    with contextlib.suppress(Exception):
        group.stop()
    with contextlib.suppress(Exception):
        spark.stop()


# --------------------------------------------------------------------------- the benchmark


def output_schema(tree: Path) -> dict[str, Any]:
    """``flights_late``: the tree's ``schemas/flight.avsc`` and ``late``."""
    flight = json.loads((tree / "schemas" / "flight.avsc").read_text())
    return {
        "type": "record",
        "name": "FlightLate",
        "namespace": flight["namespace"],
        "doc": "A flight and whether it arrived over 15 minutes late: the output of "
        "bench_driver_load.py.",
        "fields": [
            *flight["fields"],
            {"name": "late", "type": ["null", "boolean"], "default": None},
        ],
    }


def write_schemas(tree: Path, directory: Path) -> Path:
    """The tree's ``schemas/*.avsc`` and ``flights_late.avsc`` in ``directory``."""
    for path in sorted((tree / "schemas").glob("*.avsc")):
        shutil.copy(path, directory / path.name)
    text = json.dumps(output_schema(tree), indent=2) + "\n"
    (directory / f"{OUTPUT_STREAM}.avsc").write_text(text)
    return directory


def queue_size(n: int, batch: int) -> int:
    """The output stream queue's bound for ``n`` tuples in micro-batches of ``batch``:
    every tuple, the transactions' commit markers (a write task per input partition,
    one per output partition it writes, with room for retried batches) and a quarter
    more for the write tasks' unequal shares of the free space (a task may take ``1/n``
    of it)."""
    batches = -(-n // batch)
    return n + PARTITIONS * PARTITIONS * (2 * batches + 2) + n // 4


def group_config(
    tree: Path, topic: str, n: int, batch: int, schema_dir: Path, workdir: Path
) -> dict[str, Any]:
    """The tree's ``conf/flights.toml`` made the pass-through's (see the module
    docstring): fresh names, its one query and output stream, the local-cluster master."""
    raw = tomllib.loads((tree / "conf" / "flights.toml").read_text())
    run = uuid.uuid4().hex[:8]
    raw["schema_dir"] = str(schema_dir)
    raw["query_group"].update(
        name=f"benchdl{run}",
        checkpoint_dir=str(workdir / run),
        control_dir=str(workdir / "control"),
        dead_letter_topic=f"bench.dead-letter.{run}",
        max_tuples_per_trigger=batch,
    )
    flights = raw["input_streams"]["flights"]
    flights.update(topic=topic, starting_offsets="earliest", max_queue_size=n + 1)
    for key in ("watermark", "max_event_time_drift_ms"):
        flights.pop(key, None)
    raw["output_streams"] = {
        OUTPUT_STREAM: {
            "topic": f"bench.flights_late.{run}",
            "schema": OUTPUT_STREAM,
            "key": list(flights["key"]),
            "partitions": PARTITIONS,
            "max_queue_size": queue_size(n, batch),
        }
    }
    raw["queries"] = {
        OUTPUT_STREAM: {"output": OUTPUT_STREAM, "output_mode": "append", "sql": QUERY_SQL}
    }
    raw["spark"] = {"master": MASTER, "conf": {"spark.executor.memory": EXECUTOR_MEMORY}}
    return raw


def role_of(
    process: psutil.Process,
    root: int,
    jvm: int | None,
    parents: Mapping[int, int],
    executors: set[int],
) -> str:
    """The role of a process of the driver's tree (:data:`ROLES`): ``root`` is the
    driver's Python, ``jvm`` its JVM (once known)."""
    if process.pid == root:
        return "driver Python"
    if process.pid == jvm:
        return "driver JVM"
    pid = parents.get(process.pid)
    while pid is not None and pid != root:
        if pid in executors:
            return "executors"
        pid = parents.get(pid)
    if process.pid in executors:
        return "executors"
    if parents.get(process.pid) == root and os.path.basename(process.cmdline()[0]) == "java":
        return "driver JVM"
    return "driver, other"


class TreeSampler:
    """CPU seconds and resident memory of every process of the driver's tree, by role,
    sampled from this process every :data:`SAMPLE_S` (a process that ends in the window
    loses at most its last period); CPU counted from the start of the window."""

    def __init__(self, root: int) -> None:
        self.root = root
        #: The driver JVM's pid, set once the driver said it.
        self.jvm: int | None = None
        self._base: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], tuple[str, float]] = {}
        self.peak_rss_mib: dict[str, float] = {}
        self.seen: dict[int, float] = {}  # pid: create time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tree-sampler", daemon=True)

    def _processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _sample(self, first: bool = False) -> None:
        processes = self._processes()
        parents: dict[int, int] = {}
        executors: set[int] = set()
        for p in processes:
            with contextlib.suppress(psutil.Error):
                parents[p.pid] = p.ppid()
                if any(EXECUTOR_MAIN in part for part in p.cmdline()):
                    executors.add(p.pid)
        rss: dict[str, float] = {}
        for p in processes:
            with contextlib.suppress(psutil.Error, IndexError):
                key = (p.pid, p.create_time())
                role = role_of(p, self.root, self.jvm, parents, executors)
                times = p.cpu_times()
                cpu = times.user + times.system
                if first:
                    self._base[key] = cpu
                self._last[key] = (role, cpu)
                self.seen[p.pid] = key[1]
                rss[role] = rss.get(role, 0.0) + p.memory_info().rss / MIB
        for role, mib in rss.items():
            self.peak_rss_mib[role] = max(self.peak_rss_mib.get(role, 0.0), mib)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def __enter__(self) -> TreeSampler:
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample()

    def cpu_by_role(self) -> dict[str, float]:
        out = dict.fromkeys(ROLES, 0.0)
        for key, (role, cpu) in self._last.items():
            out[role] += cpu - self._base.get(key, 0.0)
        return out


def peak_rss_mib(pid: int) -> float | None:
    """The kernel's peak resident set of ``pid`` (``VmHWM``), MiB; ``None`` if gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


class Driver:
    """A driver process (this script, ``--driver``) of the measured tree, in a process
    group of its own (its JVM and executors with it), answering lines behind
    :data:`MARKER`; its stderr goes to ``log_path``."""

    def __init__(self, tree: Path, driver_memory: str, log_path: Path) -> None:
        ours = ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS", "SPARK_HOME", "MASTER", "PYSPARK_PYTHON")
        env = {k: v for k, v in os.environ.items() if k not in (*ours, "PYSPARK_DRIVER_PYTHON")}
        env["PYTHONPATH"] = str(tree)
        env["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {driver_memory} pyspark-shell"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--driver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            cwd=tree,
            start_new_session=True,
        )
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        #: The heap sampler's last figures (``sample`` lines).
        self.sample: dict[str, Any] = {}
        threading.Thread(target=self._read, name="driver-stdout", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARKER):
                fields = json.loads(line[len(MARKER) :])
                if "sample" in fields:
                    self.sample = fields["sample"]
                else:
                    self._answers.put(fields)
        self._answers.put(None)

    def send(self, command: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self, timeout_s: float) -> dict[str, Any] | None:
        """The next answer; ``None`` when the driver exited or did not answer in time."""
        try:
            return self._answers.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def out_of_memory(self) -> str | None:
        """The driver's first ``java.lang.OutOfMemoryError`` line in its log, if any."""
        with contextlib.suppress(OSError), self.log_path.open(errors="replace") as log:
            for line in log:
                if "java.lang.OutOfMemoryError" in line:
                    return line.strip()[:300]
        return None

    def await_run(self, timeout_s: float) -> dict[str, Any] | None:
        """The answer to ``run``; ``None`` when the driver exited, did not answer in
        ``timeout_s``, or logged an ``OutOfMemoryError`` and did not answer in
        :data:`OOM_GRACE_S` after (Spark hangs a job whose task results were lost with
        the thread that got them)."""
        deadline = time.monotonic() + timeout_s
        oom_at: float | None = None
        while time.monotonic() < deadline:
            try:
                return self._answers.get(timeout=1.0)
            except queue.Empty:
                pass
            if oom_at is None and self.out_of_memory() is not None:
                oom_at = time.monotonic()
            if oom_at is not None and time.monotonic() - oom_at > OOM_GRACE_S:
                return None
        return None

    def close(self, seen: Mapping[int, float] | None = None) -> None:
        """Ask the driver to quit; then kill its process group, and any process of its
        tree seen by a sampler (``seen``: pid to create time) still running."""
        with contextlib.suppress(OSError, ValueError):
            self.send({"cmd": "quit"})
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(QUIT_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        for pid, created in (seen or {}).items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == created:
                    p.kill()
        self._log.close()


def git_commit(tree: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip()


def count_output(bootstrap: str, topic: str, idle_s: float = 5.0) -> int:
    """Tuples committed to ``topic`` (a ``read_committed`` consumer from the start to
    the end of every partition, or ``idle_s`` without a record)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-driver-load-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        parts = sorted(meta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        count, at_end, last = 0, set(), time.monotonic()
        while len(at_end) < len(parts) and time.monotonic() - last < idle_s:
            for m in consumer.consume(10_000, timeout=0.5):
                last = time.monotonic()
                if m.error() is None:
                    count += 1
                    at_end.discard(m.partition())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
        return count
    finally:
        consumer.close()


def run_driver(
    *,
    tree: Path,
    raw: dict[str, Any],
    bootstrap: str,
    broker_pid: int | None,
    driver_memory: str,
    sample_heap: bool,
    warmup: dict[str, Any] | None,
    run_timeout_s: float,
    label: str,
    progress: Progress,
    task: Any,
) -> dict[str, Any]:
    """One run of the group ``raw`` in a new driver of ``tree`` (see the module
    docstring); its figures. A driver that failed to start raises RuntimeError; a run
    that failed is a figure (``error``)."""
    log_path = LOG_DIR / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    driver = Driver(tree, driver_memory, log_path)
    sampler = TreeSampler(driver.process.pid)
    try:
        progress.update(task, description=f"{label}: starting the driver and executors")
        driver.send(
            {
                "config": raw,
                "bootstrap": bootstrap,
                "sample_heap": sample_heap,
                "warmup": warmup,
                "timeout_s": run_timeout_s,
            }
        )
        hello = driver.answer(START_TIMEOUT_S)
        if hello is None:
            raise RuntimeError(f"{label}: the driver did not start; see {log_path}")
        sampler.jvm = hello["jvm_pid"]
        if not Path(hello["pipeline"]).is_relative_to(tree.resolve()):
            raise RuntimeError(f"{label}: the driver imported {hello['pipeline']}, not {tree}'s")
        progress.update(task, description=f"{label}: waiting for a quiet machine")
        quiet = common.wait_until_quiet(broker_pid)
        progress.update(task, description=f"{label}: running")
        meter = common.Meter(None)
        load_before = os.getloadavg()
        with sampler, meter.measure():
            driver.send({"cmd": "run"})
            ran = driver.await_run(run_timeout_s + 60)
        rss = {
            "driver_python": peak_rss_mib(hello["pid"]),
            "driver_jvm": peak_rss_mib(hello["jvm_pid"]),
        }
        if ran is None:
            code, oom = driver.process.poll(), driver.out_of_memory()
            if oom is not None:
                error = "OutOfMemoryError"
                text = (
                    f"the driver JVM logged {oom!r} and its query did not end within "
                    f"{OOM_GRACE_S:.0f} s: stopped; see {log_path}"
                )
            elif code is not None:
                error, text = "driver exited", f"exit code {code}; see {log_path}"
            else:
                error, text = "timeout", f"no answer in {run_timeout_s:.0f} s; see {log_path}"
            ran = {"seconds": meter.seconds, "error": error, "error_text": text, **driver.sample}
    finally:
        progress.update(task, description=f"{label}: stopping the driver")
        driver.close(sampler.seen)
    cpu = sampler.cpu_by_role()
    return {
        **ran,
        "completed": ran.get("error") is None,
        "cpu_s": {role: round(s, 3) for role, s in cpu.items()},
        "driver_cpu_s": round(sum(cpu[r] for r in DRIVER_ROLES), 3),
        "peak_rss_mib": {k: None if v is None else round(v, 1) for k, v in rss.items()},
        "sampled_peak_rss_mib": {k: round(v, 1) for k, v in sampler.peak_rss_mib.items()},
        "window_s": round(meter.seconds, 3),
        "machine_busy": round(meter.machine_busy, 3),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "started_quiet": quiet.quiet,
        "driver": {
            k: hello[k]
            for k in ("master", "driver_memory", "executor_memory", "heap_max_mib", "jar")
        },
        "warmup": hello["warmup"],
        "versions": hello["versions"],
        "log": str(log_path),
    }


def produce_copies(bootstrap: str, topic: str, codec: Any, limit: int | None, copies: int) -> int:
    """``common.produce_flights`` ``copies`` times over to one topic, the input queue
    bounded above them all; the tuples produced.

    Raises:
        DeliveryError: the broker did not acknowledge every tuple.
    """
    from pipeline.client import connect
    from pipeline.demo.flights import flight_tuples, load_flights

    records = list(flight_tuples(load_flights(limit)))
    config = common.flights_config(topic, copies * len(records) + 1)
    with connect(bootstrap_servers=bootstrap, config=config, schemas=codec.repository) as connector:
        stream_input = connector.open_stream_input(config.name, "flights")
        for _ in range(copies):
            for i in range(0, len(records), 1_000):
                stream_input.put(records[i : i + 1_000])
        stream_input.put_end(common.PRODUCE_TIMEOUT_S)
    return copies * len(records)


@contextlib.contextmanager
def input_topics(
    engine: str, *wanted: tuple[int | None, int]
) -> Iterator[tuple[Any, list[tuple[str, int]]]]:
    """A fresh broker with a 4-partition topic per ``(limit, copies)`` of ``wanted``,
    holding the first ``limit`` flights (``None``: all) ``copies`` times over; yields
    ``(broker, [(topic, tuples), ...])``."""
    from pipeline.brokers.local import local_broker
    from pipeline.kafka.topics import ensure_topics
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    broker = local_broker(engine).start()
    try:
        topics = []
        for limit, copies in wanted:
            topic = f"bench.flights.{uuid.uuid4().hex[:8]}"
            ensure_topics(broker.bootstrap_servers, {topic: (PARTITIONS, 1)})
            if copies == 1:
                n = common.produce_flights(broker.bootstrap_servers, topic, codec, limit)[0]
            else:
                n = produce_copies(broker.bootstrap_servers, topic, codec, limit, copies)
            topics.append((topic, n))
        yield broker, topics
    finally:
        broker.stop()


def per_100k(run: Mapping[str, Any]) -> dict[str, float]:
    """A run's CPU seconds per 100 000 output tuples, by role and the driver's total."""
    tuples = max(1, run["output_tuples"])
    out = {role: run["cpu_s"][role] * 100_000 / tuples for role in ROLES}
    out["driver total"] = run["driver_cpu_s"] * 100_000 / tuples
    return {k: round(v, 4) for k, v in out.items()}


def measure_cpu(args: Any, tree: Path, progress: Progress) -> dict[str, Any]:
    task = progress.add_task("producing the flights", total=None)
    runs = []
    wanted = [(args.limit, 1)] + ([(args.warmup, 1)] if args.warmup != 0 else [])
    with (
        input_topics(args.engine, *wanted) as (broker, topics),
        tempfile.TemporaryDirectory(prefix="floodgate-bench-dl-") as tmp,
    ):
        (topic, n), warm_topic = topics[0], topics[1] if len(topics) > 1 else None
        schema_dir = write_schemas(tree, Path(tmp))
        for r in range(args.repeat):
            raw = group_config(tree, topic, n, args.batch, schema_dir, Path(tmp) / "work")
            warmup = None
            if warm_topic is not None:
                warmup = group_config(
                    tree, warm_topic[0], warm_topic[1], args.batch, schema_dir, Path(tmp) / "work"
                )
            run = run_driver(
                tree=tree,
                raw=raw,
                bootstrap=broker.bootstrap_servers,
                broker_pid=broker.pid,
                driver_memory=args.driver_memory,
                sample_heap=False,
                warmup=warmup,
                run_timeout_s=args.run_timeout,
                label=f"cpu-{args.tree}-{r + 1}",
                progress=progress,
                task=task,
            )
            progress.update(task, description="counting the output")
            out_topic = raw["output_streams"][OUTPUT_STREAM]["topic"]
            run["output_tuples"] = count_output(broker.bootstrap_servers, out_topic)
            run["per_100k_s"] = per_100k(run)
            if run["completed"] and run["output_tuples"] != n:
                run["completed"] = False
                run["error"] = "output count"
                run["error_text"] = f"{run['output_tuples']} output tuples for {n} flights"
            runs.append(run)
            console.log(
                f"cpu {args.tree} run {r + 1}/{args.repeat}: {run['output_tuples']:,} tuples "
                f"in {run['window_s']:.1f} s, driver {run['per_100k_s']['driver total']:.3f} "
                f"CPU s per 100k" + (f", {run['error']}" if run["error"] else "")
            )
    progress.remove_task(task)
    medians = {
        key: round(statistics.median(r["per_100k_s"][key] for r in runs), 4)
        for key in (*ROLES, "driver total")
    }
    return {
        "tuples": n,
        "batch": args.batch,
        "warmup_flights": "all" if args.warmup is None else args.warmup,
        "runs": runs,
        "median_per_100k_s": medians,
    }


def measure_heap(args: Any, tree: Path, progress: Progress) -> dict[str, Any]:
    task = progress.add_task("producing the flights", total=None)
    batches: dict[str, Any] = {}
    with (
        input_topics(args.engine, (args.limit, args.copies)) as (broker, [(topic, n)]),
        tempfile.TemporaryDirectory(prefix="floodgate-bench-dl-") as tmp,
    ):
        schema_dir = write_schemas(tree, Path(tmp))
        for batch in args.batches:
            raw = group_config(tree, topic, n, batch, schema_dir, Path(tmp) / "work")
            run = run_driver(
                tree=tree,
                raw=raw,
                bootstrap=broker.bootstrap_servers,
                broker_pid=broker.pid,
                driver_memory=args.driver_memory,
                sample_heap=True,
                warmup=None,
                run_timeout_s=args.run_timeout,
                label=f"heap-{args.tree}-{batch}",
                progress=progress,
                task=task,
            )
            progress.update(task, description="counting the output")
            out_topic = raw["output_streams"][OUTPUT_STREAM]["topic"]
            run["output_tuples"] = count_output(broker.bootstrap_servers, out_topic)
            if run["completed"] and run["output_tuples"] != n:
                run["completed"] = False
                run["error"] = "output count"
                run["error_text"] = f"{run['output_tuples']} output tuples for {n} input tuples"
            batches[str(batch)] = run
            console.log(
                f"heap {args.tree} batch {batch:,}: "
                + ("completed" if run["completed"] else f"failed ({run['error']})")
                + f" in {run['seconds']:.1f} s, heap peak "
                f"{run.get('heap_sampled_peak_mib') or 0:,.0f} MiB"
            )
    progress.remove_task(task)
    return {"tuples": n, "copies": args.copies, "batches": batches}


# --------------------------------------------------------------------------- report


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def cpu_table(entries: Mapping[str, Any]) -> Table:
    table = Table(title=f"driver CPU s per 100 000 output tuples ({MASTER}, median over runs)")
    table.add_column("tree")
    for column in (*ROLES, "driver total", "tuples", "window s", "machine busy"):
        table.add_column(column, justify="right")
    for tree, entry in entries.items():
        m = entry["median_per_100k_s"]
        last = entry["runs"][-1]
        table.add_row(
            f"{tree} ({entry['commit']})",
            *(f"{m[r]:.3f}" for r in ROLES),
            f"{m['driver total']:.3f}",
            f"{last['output_tuples']:,}",
            f"{statistics.median(r['window_s'] for r in entry['runs']):.1f}",
            f"{statistics.median(r['machine_busy'] for r in entry['runs']):.0%}",
        )
    return table


def heap_table(entries: Mapping[str, Any]) -> Table:
    table = Table(title=f"pass-through micro-batches on {MASTER}, by driver memory")
    columns = (
        "tree",
        "driver",
        "batch",
        "result",
        "s",
        "heap peak MiB",
        "pools' peaks MiB",
        "GC s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("tree", "result") else "right")
    table.add_column("JVM RSS peak MiB", justify="right")
    table.add_column("Python RSS peak MiB", justify="right")
    for tree, entry in entries.items():
        for batch, run in entry["batches"].items():
            table.add_row(
                f"{tree} ({entry['commit']})",
                entry["driver_memory"],
                f"{int(batch):,}",
                "completed" if run["completed"] else str(run["error"]),
                f"{run['seconds']:.1f}",
                _fmt(run.get("heap_sampled_peak_mib")),
                _fmt(run.get("heap_pools_peak_mib")),
                _fmt(run.get("gc_s"), ".1f"),
                _fmt(run["peak_rss_mib"]["driver_jvm"]),
                _fmt(run["peak_rss_mib"]["driver_python"]),
            )
    return table


def comparison(cpu: Mapping[str, Any]) -> dict[str, Any] | None:
    """Before ÷ after of the driver's CPU per 100 000 output tuples, by role; ``None``
    until both trees are measured."""
    if not {"before", "after"} <= cpu.keys():
        return None
    before, after = cpu["before"]["median_per_100k_s"], cpu["after"]["median_per_100k_s"]
    ratios = {
        k: round(before[k] / after[k], 2) if after[k] > 0 else None
        for k in (*DRIVER_ROLES, "driver total")
    }
    total = ratios["driver total"]
    return {
        "before_over_after": ratios,
        "target": TARGET_RATIO,
        "target_met": total is not None and total >= TARGET_RATIO,
    }


def main() -> None:
    if "--driver" in sys.argv[1:]:
        driver_main()
        return
    parser = common.argument_parser(__doc__, "driver_load.json", repeat=1)
    parser.add_argument("part", choices=("cpu", "heap"), help="what to measure")
    parser.add_argument(
        "--tree", choices=("before", "after"), required=True, help="the code measured"
    )
    parser.add_argument(
        "--tree-dir",
        type=Path,
        default=ROOT,
        help=f"the checkout of that code (default {ROOT}); its jar built",
    )
    common.add_flights_arguments(parser, warmup=True)
    common.add_engine_argument(parser)
    parser.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help=f"cpu: rows per micro-batch ({DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--batches",
        type=lambda s: [int(x) for x in s.split(",")],
        default=list(HEAP_BATCHES),
        help="heap: micro-batch sizes, comma-separated (default 150000,1000000)",
    )
    parser.add_argument(
        "--copies",
        type=int,
        default=HEAP_COPIES,
        help=f"heap: the flights over (default {HEAP_COPIES})",
    )
    parser.add_argument(
        "--driver-memory",
        help="the driver JVM's memory (default: 1g for cpu, 512m for heap)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=RUN_TIMEOUT_S,
        help=f"seconds a run may take (default {RUN_TIMEOUT_S:.0f})",
    )
    args = parser.parse_args()
    args.driver_memory = args.driver_memory or DEFAULT_DRIVER_MEMORY[args.part]
    tree = args.tree_dir.resolve()
    jar = tree / "pipeline" / "spark" / "jars" / "floodgate-spark.jar"
    if not jar.is_file():
        parser.error(f"{jar} is missing: run scripts/build-jar --skip-tests in {tree}")
    common.log_warnings()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        if args.part == "cpu":
            entry = measure_cpu(args, tree, progress)
        else:
            entry = measure_heap(args, tree, progress)
    entry = {
        "tree": args.tree,
        "tree_dir": str(tree),
        "commit": git_commit(tree),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "master": MASTER,
        "driver_memory": args.driver_memory,
        "limit": args.limit,
        **entry,
    }
    previous: dict[str, Any] = {}
    if args.json.is_file():
        with contextlib.suppress(ValueError):
            previous = json.loads(args.json.read_text())
    cpu = dict(previous.get("cpu") or {})
    heap = dict(previous.get("heap") or {})
    old = heap.get(args.tree)
    if (
        args.part == "heap"
        and old
        and (old["tuples"], old["driver_memory"])
        == (
            entry["tuples"],
            entry["driver_memory"],
        )
    ):
        # The same input and driver: the sizes measured before stay, unless measured again.
        merged = {**old["batches"], **entry["batches"]}
        entry["batches"] = {k: merged[k] for k in sorted(merged, key=int)}
    (cpu if args.part == "cpu" else heap)[args.tree] = entry
    if cpu:
        console.print(cpu_table(cpu))
    if heap:
        console.print(heap_table(heap))
    compared = comparison(cpu)
    if compared is not None:
        total = compared["before_over_after"]["driver total"]
        console.print(
            f"driver CPU per 100 000 output tuples, before ÷ after: {_fmt(total, '.1f')}x "
            f"(target >= {TARGET_RATIO:.0f}x: {'met' if compared['target_met'] else 'not met'})"
        )
    common.write_results(
        args.json,
        "query group driver load, Python sink on the driver (before) vs JVM sink (after)",
        query=QUERY_SQL,
        cpu=cpu,
        heap=heap,
        comparison=compared,
    )
    console.print(f"results in {args.json}")


if __name__ == "__main__":
    main()
