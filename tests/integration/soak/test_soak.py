"""The soak's short mode: the whole stack -- the broker, admission
service, the flights query group's driver as an admission job, sweeper, a producer
offering twice the service rate, a reception consumer -- with each fault of the chaos
loop injected once: ``kill -9`` of the driver and of the sweeper, a broker restart on
its data directory (``kill -9`` on Apache Kafka, a stop on noida-db), an admission
restart with jobs enqueued, a stalled reception.

With no tolerance: nothing handed to Floodgate may be lost or duplicated; tuples
reported back by ``put_end`` are bounded by the puts that raised; no valid tuple may
be dead-lettered; no driver may end on its own; no transaction may hang (the soak
never restarts the broker to end one); the producer may only see ``QueueFullError``,
the ledger must balance, the backlog stay within its max and every process within
its memory bound. ``bench/soak.py`` does the work and writes its report; this test
runs it as a user would and reads the report.

It runs in one of CI's two passes, Apache Kafka's (marker ``apache_kafka``), where
the broker fault is a ``kill -9``; on noida-db the same soak runs with
``FLOODGATE_KAFKA_ENGINE=noida-db make soak ARGS=--short``.
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

pytestmark = [pytest.mark.integration, pytest.mark.soak, pytest.mark.apache_kafka]


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
        "faults": report.get("faults"),
        "accepted": exactly["accepted"],
        "lost": exactly["lost"],
        "duplicates": exactly["duplicates"],
        "dead letters": exactly["dead_letter_reasons"],
        "valid tuples dead-lettered": exactly["valid_dead_lettered_first"],
        "reported back / bound": (exactly["reported_back"], exactly["reported_back_bound"]),
        "reported back but delivered": exactly["reported_but_delivered"],
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
        "drivers ended on their own": report.get("driver_ends_unplanned"),
    }
    # A string, printed whole (pytest shortens the repr of a dict message).
    summary = json.dumps(fields, indent=1, default=str)
    # Work was done under load: tuples flowed and the producer was pushed back.
    assert exactly["accepted"] > 0 and report["producer"]["counts"].get("rejected", 0) > 0, summary
    assert exactly["lost"] == 0, summary
    assert exactly["duplicates"] == 0 and exactly["unexpected"] == 0, summary
    # Reported back: only as many as the puts that raised handed over, none delivered.
    assert exactly["reported_back"] <= exactly["reported_back_bound"], summary
    assert exactly["reported_but_delivered"] == 0, summary
    assert exactly["seen"] + exactly["reported_back"] == exactly["accepted"], summary
    assert exactly["valid_dead_lettered"] == 0, summary
    # What ended the driver (its state, exit status and log tail) first: a CI log keeps the
    # head and the tail of a long message, and the summary's middle is cut.
    ends = json.dumps(report.get("driver_ends_unplanned"), indent=1, default=str)
    ended = f"drivers ended on their own:\n{ends}\n{summary}"
    assert report["driver_restarts_unplanned"] == 0, ended
    assert not report["hanging_transactions"], summary
    broker_faults = [f for f in report["faults"] if f["kind"] == "restart-broker"]
    killed = "SIGKILL" if report["engine"] == "apache-kafka" else "stop"
    assert broker_faults and all(f["stopped_by"] == killed for f in broker_faults), summary
    failed = [name for name, ok in report["checks"].items() if not ok]
    assert not failed, (failed, summary)
    assert run.returncode == 0, run.stderr[-6000:]
