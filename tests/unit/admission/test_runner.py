"""Job processes and the job store, with real processes and real files: a job's
process is adopted after a restart only when it is still the job's, and
what the service writes is private (0600 files, 0700 folders, never through a
symbolic link; a log folder others can change is refused)."""

from __future__ import annotations

import os
import pwd
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from admission.config import AdmissionSettings
from admission.environment import JOB_ID_VARIABLE
from admission.runner import Ended, ProcessRunner, start_since_boot
from admission.service import AdmissionService
from admission.store import JobState, JobStore
from pipeline.errors import ConfigError, UntrustedFileError

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
    (tmp_path / "admission" / "logs").mkdir(parents=True, mode=0o700)
    runner = ProcessRunner(tmp_path / "admission" / "logs")
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


def test_a_symlink_planted_at_the_next_job_s_log_is_not_followed(tmp_path: Path) -> None:
    """A symbolic link at ``<log_dir>/<next id>.log`` once sent the job's output into the
    file it named, and set that file to 0600."""
    runner = ProcessRunner(tmp_path / "logs")
    target = tmp_path / "someone-else-s.txt"
    target.write_text("kept\n")
    target.chmod(0o644)
    (tmp_path / "logs" / "15.log").symlink_to(target)

    with pytest.raises(UntrustedFileError, match=r"15\.log is a symbolic link") as refused:
        runner.start(15, ["echo", "job output"], cwd=None, env={"PATH": "/usr/bin:/bin"})

    assert refused.value.path == str(tmp_path / "logs" / "15.log")
    assert target.read_text() == "kept\n" and mode(target) == 0o644
    assert runner.running() == []  # no process runs: the scheduler records ERROR


@pytest.mark.parametrize(
    ("folder_mode", "owner"),
    [(0o777, None), (0o770, None), (0o1777, None), (0o700, "nobody")],
    ids=["world-writable", "group-writable", "sticky-tmp-like", "another-user-s"],
)
def test_a_log_folder_others_can_change_is_refused_before_anything_is_written(
    tmp_path: Path, folder_mode: int, owner: str | None
) -> None:
    """The service once only warned of a log folder others could enter,
    and used one they could write to (where they plant the link above)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(folder_mode)
    if owner is not None:
        # chown to another user takes root, as the project's machines and CI have.
        assert os.geteuid() == 0, "chown to another user needs root"
        os.chown(logs, pwd.getpwnam(owner).pw_uid, -1)
    settings = AdmissionSettings(
        log_dir=str(logs), database_url=f"sqlite:///{tmp_path / 'db' / 'jobs.db'}"
    )

    with pytest.raises(ConfigError) as refused:
        AdmissionService(settings)

    assert refused.value.key == "admission.log_dir"
    assert str(logs) in str(refused.value)
    assert f"mode {folder_mode:04o}" in str(refused.value)
    assert not (tmp_path / "db").exists()  # refused before the job database was made
    assert list(logs.iterdir()) == []


def test_a_log_folder_others_can_only_read_is_used(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o755)
    logs.chmod(0o755)
    started = ProcessRunner(logs).start(1, ["true"], cwd=None, env={"PATH": "/usr/bin:/bin"})
    assert mode(Path(started.log_path)) == 0o600 and mode(logs) == 0o755


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


@pytest.mark.parametrize(
    ("parent_mode", "owner"),
    [(0o777, None), (0o775, None), (0o755, "nobody")],
    ids=["world-writable", "group-writable", "another-user-s"],
)
def test_a_log_folder_under_a_parent_others_can_change_is_refused_naming_the_parent(
    tmp_path: Path, parent_mode: int, owner: str | None
) -> None:
    """A 0700 log folder under a 0777 one was once used; whoever can write
    to the parent renames the log folder away and puts a symbolic link in its place, and
    the jobs' logs go where the link points."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(parent_mode)
    if owner is not None:
        assert os.geteuid() == 0, "chown to another user needs root"
        os.chown(shared, pwd.getpwnam(owner).pw_uid, -1)
    logs = shared / "logs"
    logs.mkdir(mode=0o700)
    settings = AdmissionSettings(
        log_dir=str(logs), database_url=f"sqlite:///{tmp_path / 'db' / 'jobs.db'}"
    )

    with pytest.raises(ConfigError) as refused:
        AdmissionService(settings)

    message = str(refused.value)
    assert refused.value.key == "admission.log_dir"
    assert f"its parent folder {shared} is" in message, message
    assert f"mode {parent_mode:04o}" in message
    assert not (tmp_path / "db").exists()  # refused before the job database was made
    assert list(logs.iterdir()) == []


def test_a_log_folder_under_a_sticky_parent_is_used(tmp_path: Path) -> None:
    """As under ``/tmp``: in a sticky folder only a file's owner renames or removes it."""
    shared = tmp_path / "sticky"
    shared.mkdir()
    shared.chmod(0o1777)
    started = ProcessRunner(shared / "logs").start(
        1, ["true"], cwd=None, env={"PATH": "/usr/bin:/bin"}
    )
    assert Path(started.log_path).parent == shared / "logs"
    assert mode(shared / "logs") == 0o700
