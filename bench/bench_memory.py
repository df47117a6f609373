"""Benchmark: peak resident memory of every process of the demo.

What is measured: ``floodgate demo`` (the command ``make demo`` runs: its own
embedded broker, the ``flights`` query group, the replay process, the reception),
run ``--repeat`` times as a child of this script; every 0.2 s, the resident set
(RSS) and the proportional set (PSS: a page shared by ``n`` processes counts
``1/n``) of every process of its tree, each process given a role from its command
line:

==================  ==========================================================
driver              the ``floodgate demo`` Python process (query group driver,
                    reception)
driver JVM          Spark's JVM (``local[2]``: driver and executors)
task workers        ``pyspark.daemon pyspark.worker`` and its forks: the Python
                    workers that run the source's reads
planner workers     the ``pyspark.sql.worker.*`` daemons and forks that look up,
                    create and plan the Python data source
source runners      ``python_streaming_source_runner``: a query's source planner
producer            the replay process (``ReplayProcess``)
broker              the embedded broker (``noida-db``)
==================  ==========================================================

Reported: per role, the peak over the run of the role's summed RSS and summed PSS
(the median and min-max over runs), and the largest single process. A process the
JVM is still spawning (between ``posix_spawn`` and ``exec``, when it shares the JVM's
pages) is not counted (``bench/soak.py``, ``driver_child_role``).

Run: ``.venv/bin/python bench/bench_memory.py [--repeat 3] [--limit N]``.
Results: a table, and JSON in ``bench/out/memory.json``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import time
from collections import Counter
from typing import Any

import common
import psutil
from common import ROOT, console
from rich.table import Table

ROLES = (
    "driver",
    "driver JVM",
    "task workers",
    "planner workers",
    "source runners",
    "producer",
    "broker",
)
SAMPLE_S = 0.2
MIB = 2**20


def role_of(process: psutil.Process, driver: int) -> str | None:
    """The role of a process of the demo's tree (see the module docstring), or None."""
    if process.pid == driver:
        return "driver"
    command = process.cmdline()
    if not command:
        return None
    program = os.path.basename(command[0])
    text = " ".join(command)
    if program == "java":
        return "driver JVM" if process.ppid() == driver else None  # None: mid-spawn
    if "noida-db" in program or "noida" in text.split(" ")[0]:
        return "broker"
    if not program.startswith("python"):
        return None
    if "_replay_main" in text:
        return "producer"
    if "python_streaming_source_runner" in text:
        return "source runners"
    if "pyspark.sql.worker" in text:
        return "planner workers"
    if "pyspark" in text:
        return "task workers"
    return None


def run_once(limit: int | None) -> dict[str, Any]:
    """One ``floodgate demo``, sampled; peak MiB per role and per process."""
    argv = [str(ROOT / ".venv" / "bin" / "floodgate"), "demo"]
    if limit:
        argv += ["--limit", str(limit)]
    demo = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(demo.pid)
    peak_rss: Counter[str] = Counter()
    peak_pss: Counter[str] = Counter()
    largest: dict[str, tuple[float, str]] = {}
    samples = 0
    while demo.poll() is None:
        rss: Counter[str] = Counter()
        pss: Counter[str] = Counter()
        with contextlib.suppress(psutil.Error):
            for process in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    role = role_of(process, demo.pid)
                    if role is None:
                        continue
                    info = process.memory_full_info()
                    rss[role] += info.rss / MIB
                    pss[role] += info.pss / MIB
                    if info.rss / MIB > largest.get(role, (0.0, ""))[0]:
                        largest[role] = (info.rss / MIB, " ".join(process.cmdline())[:80])
        for role in rss:
            peak_rss[role] = max(peak_rss[role], rss[role])
            peak_pss[role] = max(peak_pss[role], pss[role])
        samples += 1
        time.sleep(SAMPLE_S)
    if demo.returncode != 0:
        raise RuntimeError(f"floodgate demo failed with exit code {demo.returncode}")
    return {
        "peak_rss_mib": dict(peak_rss),
        "peak_pss_mib": dict(peak_pss),
        "largest_process_rss_mib": {r: v[0] for r, v in largest.items()},
        "largest_process": {r: v[1] for r, v in largest.items()},
        "samples": samples,
    }


def main() -> None:
    parser = common.argument_parser(__doc__, "memory.json")
    common.add_flights_arguments(parser)
    args = parser.parse_args()
    runs = []
    for r in range(args.repeat):
        run = run_once(args.limit)
        runs.append(run)
        total = sum(run["peak_rss_mib"].values())
        console.log(
            f"run {r + 1}/{args.repeat}: {run['samples']} samples, sum of peaks {total:,.0f} MiB"
        )

    def figures(key: str, role: str) -> list[float]:
        return [run[key].get(role, 0.0) for run in runs]

    table = Table(title="floodgate demo: peak resident memory by process role (MiB)")
    for column in ("role", "RSS median", "RSS min-max", "PSS median", "largest process RSS"):
        table.add_column(column, justify="left" if column == "role" else "right")
    for role in sorted(ROLES, key=lambda r: -statistics.median(figures("peak_rss_mib", r))):
        rss, pss = figures("peak_rss_mib", role), figures("peak_pss_mib", role)
        table.add_row(
            role,
            f"{statistics.median(rss):,.0f}",
            f"{min(rss):,.0f}-{max(rss):,.0f}",
            f"{statistics.median(pss):,.0f}",
            f"{statistics.median(figures('largest_process_rss_mib', role)):,.0f}",
        )
    console.print(table)
    common.write_results(args.json, "floodgate demo: peak memory by process role", runs=runs)


if __name__ == "__main__":
    main()
