"""Benchmark: the admission service's check, submits through the API, storage per job.

What is measured, in this one script:

* **check with 100 000 jobs enqueued vs with 10**: ``AdmissionService.check()`` --
  record ended jobs, sample load (a fixed low load, injected), decide, take the next
  load step of jobs from the SQL queue in Submitted order, start them (real
  processes, ``/bin/true``) -- five checks of two jobs each, on a fresh SQLite queue
  holding ``--jobs`` (100 000) or 10 enqueued jobs. Target: ratio <= 2 (a check
  costs O(load step), not O(queue)). The once-a-second refresh of the jobs-by-state
  gauges (a count over the table) is timed apart: it is O(queue).
* **storage per enqueued job**: the SQLite file's bytes / jobs, and the growth of
  the process's RSS while the service starts on that queue (the queue lives in
  SQL; the service keeps only a count, so it should be ~0).
* **submits per second through the REST API** (``POST /jobs``, token checked,
  allowlist checked, stored, enqueued because the service is suspended) against
  ``GET /status`` requests per second on the same server: the HTTP floor.

Run: ``.venv/bin/python bench/bench_admission.py [--jobs 100000] [--repeat 5]``.
Results: a table, and JSON in ``bench/out/admission.json``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import common
import httpx
import psutil
import uvicorn
from common import console
from rich.table import Table
from sqlalchemy import insert

from admission.algorithm import Load
from admission.api import build_app
from admission.config import AdmissionSettings
from admission.service import AdmissionService
from admission.store import JobState, jobs

TRUE = shutil.which("true") or "/bin/true"
CHECKS = 5
STEP = 2
TOKEN = secrets.token_hex(16)  # the service refuses a token under 128 bits


def settings(tmp: Path, **extra: Any) -> AdmissionSettings:
    return AdmissionSettings(
        port=0,
        token=TOKEN,  # type: ignore[arg-type]
        allowlist=[TRUE],
        database_url=f"sqlite:///{tmp / 'jobs.db'}",
        log_dir=str(tmp / "logs"),
        initial_load_step=STEP,
        min_load_step=STEP,
        max_load_step=STEP,
        **extra,
    )


def fill(service: AdmissionService, n: int) -> None:
    """Insert ``n`` enqueued jobs straight into the table (Submitted order = id)."""
    now = time.time()
    rows = [
        {
            "argv": [TRUE],
            "cwd": None,
            "env": {},
            "queueable": True,
            "expected_s": None,
            "abnormal_exit": False,
            "lane": "default",
            "state": JobState.ENQUEUED.value,
            "submitted": now + i * 1e-6,
        }
        for i in range(n)
    ]
    with service.store.engine.begin() as conn:
        for i in range(0, n, 10_000):
            conn.execute(insert(jobs), rows[i : i + 10_000])


def measure_checks(n: int) -> dict[str, float]:
    """Seconds per check and per gauge refresh with ``n`` jobs enqueued."""
    with tempfile.TemporaryDirectory(prefix="floodgate-bench-adm-") as tmp:
        service = AdmissionService(settings(Path(tmp)), sampler=lambda: Load(cpu=0.1, memory=0.1))
        fill(service, n)
        rss0 = psutil.Process().memory_info().rss
        service.start()  # recovers the queue; its threads are stopped right away
        service.stop()
        service.election.poll()  # lead again (stop gave the lock up): checks run by hand
        rss1 = psutil.Process().memory_info().rss
        db_bytes = sum(p.stat().st_size for p in Path(tmp).glob("jobs.db*"))
        times = []
        started = 0
        for _ in range(CHECKS):
            t0 = time.perf_counter()
            started += service.check()
            times.append(time.perf_counter() - t0)
        if started != CHECKS * STEP:
            raise RuntimeError(f"{started} jobs started in {CHECKS} checks, not {CHECKS * STEP}")
        t0 = time.perf_counter()
        service.scheduler.refresh_gauges()
        refresh = time.perf_counter() - t0
        for _ in range(100):  # let the started jobs end before the folder goes
            if not service.runner.running():
                break
            service.runner.poll()
            time.sleep(0.05)
        service.store.engine.dispose()
        return {
            "check_s": statistics.median(times),
            "refresh_s": refresh,
            "db_bytes_per_job": db_bytes / n,
            "rss_bytes_per_job": max(0, rss1 - rss0) / n,
        }


def measure_api(n: int) -> dict[str, float]:
    """Submits/s and status requests/s through a real uvicorn server of the API."""
    with tempfile.TemporaryDirectory(prefix="floodgate-bench-api-") as tmp:
        service = AdmissionService(settings(Path(tmp)), sampler=lambda: Load(cpu=0.1, memory=0.1))
        service.start()
        service.suspend()  # submits are enqueued: no processes started
        server = uvicorn.Server(
            uvicorn.Config(build_app(service), host="127.0.0.1", port=0, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as client:
                client.get("/status")
                t0 = time.perf_counter()
                for _ in range(n):
                    client.get("/status").raise_for_status()
                status_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                for _ in range(n):
                    client.post("/jobs", json={"argv": [TRUE]}).raise_for_status()
                submit_s = time.perf_counter() - t0
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            service.stop()
        return {"status_per_s": n / status_s, "submits_per_s": n / submit_s}


def main() -> None:
    parser = common.argument_parser(__doc__, "admission.json", repeat=5)
    parser.add_argument("--jobs", type=int, default=100_000, help="the large queue")
    parser.add_argument("--requests", type=int, default=1_000, help="API requests per kind")
    args = parser.parse_args()

    runs: dict[int, list[dict[str, float]]] = {args.jobs: [], 10: []}
    for r in range(args.repeat):
        for n in (10, args.jobs) if r % 2 else (args.jobs, 10):
            result = measure_checks(n)
            runs[n].append(result)
            console.log(
                f"run {r + 1}/{args.repeat}, {n:,} enqueued: check "
                f"{result['check_s'] * 1000:.2f} ms, gauge refresh "
                f"{result['refresh_s'] * 1000:.2f} ms"
            )
    api = measure_api(args.requests)

    def median(n: int, key: str) -> float:
        return statistics.median(r[key] for r in runs[n])

    ratio = median(args.jobs, "check_s") / median(10, "check_s")
    table = Table(title=f"admission check: {args.jobs:,} vs 10 jobs enqueued ({STEP} started each)")
    for column in ("enqueued", "check ms (median)", "runs", "gauge refresh ms", "DB bytes/job"):
        table.add_column(column, justify="right")
    for n in (10, args.jobs):
        table.add_row(
            f"{n:,}",
            f"{median(n, 'check_s') * 1000:.2f}",
            " ".join(f"{r['check_s'] * 1000:.2f}" for r in runs[n]),
            f"{median(n, 'refresh_s') * 1000:.2f}",
            f"{median(n, 'db_bytes_per_job'):.0f}",
        )
    console.print(table)
    console.print(
        f"check ratio {args.jobs:,} / 10 enqueued: {ratio:.2f} "
        f"(target <= 2: {'met' if ratio <= 2 else 'NOT met'})"
    )
    console.print(
        f"service RSS growth per enqueued job: "
        f"{median(args.jobs, 'rss_bytes_per_job'):.1f} bytes; API: "
        f"{api['submits_per_s']:,.0f} submits/s vs {api['status_per_s']:,.0f} GET /status/s "
        f"({api['submits_per_s'] / api['status_per_s']:.2f}x the HTTP floor)"
    )
    common.write_results(
        args.json,
        "admission check, storage per job, API submits",
        pid=os.getpid(),
        runs={str(n): r for n, r in runs.items()},
        check_ratio=round(ratio, 3),
        api=api,
    )


if __name__ == "__main__":
    main()
