"""The job store's run-once record of the Kafka intake's signed requests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from admission.errors import IntakeSignatureTaken
from admission.store import IntakeSignature, JobState, JobStore, TakenSignature

JOB = {
    "argv": ["true"],
    "cwd": None,
    "env": {},
    "queueable": True,
    "expected_s": None,
    "abnormal_exit": False,
    "lane": "default",
    "state": JobState.ENQUEUED.value,
    "submitted": 1.0,
}


def test_a_database_made_before_the_run_once_columns_gets_them(tmp_path: Path) -> None:
    database = tmp_path / "jobs.db"
    JobStore(f"sqlite:///{database}").engine.dispose()
    with sqlite3.connect(database) as conn:  # as 3d81ac5 made it
        conn.execute("ALTER TABLE floodgate_intake_signatures DROP COLUMN job_id")
        conn.execute("ALTER TABLE floodgate_intake_signatures DROP COLUMN refused")
    store = JobStore(f"sqlite:///{database}")

    job = store.add(signature=IntakeSignature("ab" * 32, "t/0/7", expires=100.0), **JOB)
    store.refuse_signature(IntakeSignature("cd" * 32, "t/0/8", expires=100.0), "queue-full")

    assert store.taken_signature("ab" * 32, now=1.0) == TakenSignature("t/0/7", job.id, None)
    assert store.taken_signature("cd" * 32, now=1.0) == TakenSignature("t/0/8", None, "queue-full")


def test_a_signature_is_recorded_with_one_job_only(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    signature = IntakeSignature("ef" * 32, "t/0/1", expires=100.0)
    first = store.add(signature=signature, **JOB)

    with pytest.raises(IntakeSignatureTaken, match="t/0/2"):
        store.add(signature=IntakeSignature("ef" * 32, "t/0/2", expires=100.0), **JOB)
    store.refuse_signature(signature, "refused")  # the first record stays

    assert [j.id for j in store.recent()] == [first.id]
    assert store.taken_signature("ef" * 32, now=100.0) == TakenSignature("t/0/1", first.id, None)
    assert store.taken_signature("ef" * 32, now=100.5) is None  # past its expiry
