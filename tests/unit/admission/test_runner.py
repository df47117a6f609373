"""Job processes and the job store, with real processes and real files: a job's
process is adopted after a restart only when it is still the job's (issue 26), and
what the service writes is private (0600 files, 0700 folders)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from admission.environment import JOB_ID_VARIABLE
from admission.runner import Ended, ProcessRunner, start_since_boot
from admission.store import JobState, JobStore

SLEEP = "/bin/sleep" if os.path.exists("/bin/sleep") else "/usr/bin/sleep"


@pytest.fixture
def unrelated() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is no job's: a pid a job could have had before it was reused."""
    process = subprocess.Popen([SLEEP, "300"])
    yield process
    process.kill()
    process.wait()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_process_with_another_start_time_is_not_adopted(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    runner = ProcessRunner(tmp_path / "logs")
    created = start_since_boot(psutil.Process(unrelated.pid))
    why = runner.adopt(1, unrelated.pid, created=created - 5.0, cmdline=[SLEEP, "300"])
    assert why is not None and "another process now" in why
    assert runner.running() == []
    assert runner.stop(1) is False  # nothing to stop: the unrelated process is left alone
    assert unrelated.poll() is None


def test_a_process_with_another_command_and_no_job_id_is_not_adopted(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    runner = ProcessRunner(tmp_path / "logs")
    created = start_since_boot(psutil.Process(unrelated.pid))
    why = runner.adopt(1, unrelated.pid, created=created, cmdline=[SLEEP, "60"])
    assert why is not None and "runs another command" in why and JOB_ID_VARIABLE in why
    assert runner.running() == []


def test_a_process_without_a_recorded_start_time_is_not_adopted(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    runner = ProcessRunner(tmp_path / "logs")
    why = runner.adopt(1, unrelated.pid, created=None, cmdline=[SLEEP, "300"])
    assert why is not None and "no start time was recorded" in why


def test_a_jobs_process_is_adopted_by_its_command_or_by_its_job_id(tmp_path: Path) -> None:
    first = ProcessRunner(tmp_path / "logs")
    # A program that exec's another, as spark-submit does: its command line changes,
    # the job id in its environment stays.
    script = f"import os; os.execv({SLEEP!r}, [{SLEEP!r}, '300'])"
    execs = first.start(
        1, [sys.executable, "-c", script], cwd=None, env={JOB_ID_VARIABLE: "1", "PATH": "/bin"}
    )
    plain = first.start(2, [SLEEP, "300"], cwd=None, env={JOB_ID_VARIABLE: "2"})
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(execs.pid).cmdline() != [SLEEP, "300"]:
            assert time.monotonic() < deadline, "the job never exec'd"
            time.sleep(0.01)
        second = ProcessRunner(tmp_path / "logs")  # a restarted service
        assert second.adopt(1, execs.pid, created=execs.created, cmdline=execs.cmdline) is None
        assert second.adopt(2, plain.pid, created=plain.created, cmdline=plain.cmdline) is None
        assert sorted(second.running()) == [1, 2]
        # A job's id does not adopt another job's process.
        assert second.adopt(3, plain.pid, created=plain.created, cmdline=[SLEEP, "1"]) is not None
        assert second.stop(2, grace_s=10) is True
        ended: list[Ended] = []
        while not ended:  # its parent, the first runner, sees it end: it was stopped
            ended = first.poll()
            time.sleep(0.01)
        assert [e.job_id for e in ended] == [2] and ended[0].exit_code == -15
    finally:
        first.stop(1, grace_s=10)
        first.stop(2, grace_s=10)


def test_job_logs_are_0600_in_a_0700_folder(tmp_path: Path) -> None:
    runner = ProcessRunner(tmp_path / "admission" / "logs")
    (tmp_path / "admission" / "logs").mkdir(parents=True, mode=0o700)
    old = tmp_path / "admission" / "logs" / "1.log"
    old.write_text("from an earlier run\n")
    old.chmod(0o644)
    started = runner.start(1, ["true"], cwd=None, env={"PATH": "/usr/bin:/bin"})
    fresh = ProcessRunner(tmp_path / "fresh" / "logs").start(
        2, ["true"], cwd=None, env={"PATH": "/usr/bin:/bin"}
    )
    assert mode(Path(started.log_path)) == 0o600  # an existing log is made private too
    assert mode(Path(fresh.log_path)) == 0o600
    assert mode(tmp_path / "fresh" / "logs") == 0o700


def test_a_process_that_cannot_be_spawned_raises_and_is_not_watched(tmp_path: Path) -> None:
    runner = ProcessRunner(tmp_path / "logs")
    with pytest.raises(ValueError, match="null byte"):
        runner.start(1, [SLEEP, "1\0"], cwd=None, env={})
    with pytest.raises(OSError):
        runner.start(2, [str(tmp_path / "missing")], cwd=None, env={})
    assert runner.running() == []


def test_the_sqlite_job_database_is_0600_in_a_0700_folder(tmp_path: Path) -> None:
    database = tmp_path / "admission" / "jobs.db"
    store = JobStore(f"sqlite:///{database}")
    store.set_flag("suspended", True, reason=None, now=1.0)  # a write: WAL files appear
    for path in [database, *database.parent.glob("jobs.db-*")]:
        assert mode(path) == 0o600, path
    assert mode(database.parent) == 0o700
    store.engine.dispose()
    database.chmod(0o644)  # made by an earlier version
    JobStore(f"sqlite:///{database}").engine.dispose()
    assert mode(database) == 0o600


def test_a_database_made_before_the_process_identity_columns_gets_them(tmp_path: Path) -> None:
    database = tmp_path / "jobs.db"
    store = JobStore(f"sqlite:///{database}")
    store.engine.dispose()
    with sqlite3.connect(database) as conn:  # as an earlier version made it
        conn.execute("ALTER TABLE floodgate_jobs DROP COLUMN pid_created")
        conn.execute("ALTER TABLE floodgate_jobs DROP COLUMN pid_cmdline")
    store = JobStore(f"sqlite:///{database}")
    job = store.add(
        argv=["true"],
        cwd=None,
        env={},
        queueable=True,
        expected_s=None,
        abnormal_exit=False,
        lane="default",
        state=JobState.RUNNING.value,
        submitted=1.0,
        pid=123,
        pid_created=4.5,
        pid_cmdline=["true"],
    )
    assert (job.pid_created, job.pid_cmdline) == (4.5, ["true"])
    assert "pid_created" not in job.as_json()


def test_a_flag_outlives_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = JobStore(url)
    assert store.flag("suspended") is False
    store.set_flag("suspended", True, reason="at once", now=1.0)
    store.engine.dispose()
    assert JobStore(url).flag("suspended") is True
