"""The soak's short mode (issue 8): the whole stack -- embedded broker, admission
service, the flights query group's driver as an admission job, sweeper, a producer
offering twice the service rate, a reception consumer -- with each fault of the chaos
loop injected once: ``kill -9`` of the driver and of the sweeper, a broker restart on
its data directory, an admission restart with jobs enqueued, a stalled reception.

Nothing handed to Floodgate may be lost or duplicated, the producer may only see
``QueueFullError``, the ledger must balance, the backlog stay within its max and every
process within its memory bound. ``bench/soak.py`` does the work and writes its
report; this test runs it as a user would and reads the report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from soak import reap  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.soak]


@pytest.mark.timeout(1200)
def test_nothing_is_lost_or_duplicated_under_overload_and_every_fault(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    try:
        run = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "soak.py"), "--short", "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1100,
        )
    finally:
        reap(out)  # whatever the soak left running if it died
    report_path = out / "soak.json"
    # librdkafka's own log lines (`%3|...|FAIL|...`) after the broker stops would bury
    # the soak's error: left out of the message.
    said = "\n".join(line for line in run.stderr.splitlines() if not line.startswith("%"))
    assert report_path.exists(), f"no report; exit {run.returncode}:\n{said[-6000:]}"
    report = json.loads(report_path.read_text())
    exactly = report["exactly_once"]
    fields = {
        "faults": [f["kind"] for f in report.get("faults", [])],
        "accepted": exactly["accepted"],
        "lost": exactly["lost"],
        "duplicates": exactly["duplicates"],
        "dead letters": exactly["dead_letter_reasons"],
        "unclean refusals": report["producer"].get("unclean"),
        "undelivered": report["producer"].get("undelivered"),
        "audit": report["audit"]["exit_status"],
        "peak backlog": (report["peak_backlog"], report["max_queue_size"]),
        "peak RSS MiB": report["peak_rss_mib"],
        "filler jobs": report["filler_jobs"],
        "filler jobs started by the soak under high load": report.get("filler_jobs_forced"),
        "admission status at the end": report.get("admission_status"),
        "admission log, when a job is not final": report.get("admission_log_tail"),
        "hanging transactions": report.get("hanging_transactions"),
    }
    # A string, printed whole (pytest shortens the repr of a dict message).
    summary = json.dumps(fields, indent=1, default=str)
    # Work was done under load: tuples flowed and the producer was pushed back.
    assert exactly["accepted"] > 0 and report["producer"]["counts"].get("rejected", 0) > 0, summary
    assert exactly["lost"] == 0, summary
    assert exactly["duplicates"] == 0 and exactly["unexpected"] == 0, summary
    assert exactly["seen"] + exactly["dead_lettered"] >= exactly["accepted"], summary
    failed = [name for name, ok in report["checks"].items() if not ok]
    assert not failed, (failed, summary)
    assert run.returncode == 0, run.stderr[-6000:]
