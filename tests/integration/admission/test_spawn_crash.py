"""The admission service killed with SIGKILL while it starts a job: after a
restart no job is lost and none runs twice.

The kill lands at a failpoint of the scheduler (``FLOODGATE_FAILPOINT``): ``claimed``,
the job stored RUNNING and its process not started; ``spawned``, the process started
and its pid not recorded. The job is a script that appends a line to a file each time
it runs, then sleeps: the file's lines count its starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from admission.environment import JOB_ID_VARIABLE
from admission.store import JobStore
from pipeline.failpoints import FAILPOINT_ENV
from tests.integration.admission_service import SLEEP, Service, wait_for


@pytest.fixture
def job_script(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``(script, runs)``: the script appends a line to ``runs`` and sleeps its first
    argument's seconds. Every process still running it is killed after the test."""
    runs = tmp_path / "runs"
    script = tmp_path / "job.sh"
    script.write_text(f'#!/bin/sh\necho "$$" >> {runs}\nexec {SLEEP} "$1"\n')
    script.chmod(0o700)
    yield script, runs
    for process in job_processes(script):
        with contextlib.suppress(psutil.Error):
            process.kill()


def job_processes(script: Path) -> list[psutil.Process]:
    """Live processes started for a job of this test: ``FLOODGATE_ADMISSION_JOB_ID`` set,
    their start recorded in its ``runs`` file."""
    runs = script.parent / "runs"
    pids = {int(line) for line in runs.read_text().split()} if runs.exists() else set()
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE and JOB_ID_VARIABLE in process.environ():
                found.append(process)
    return found


def killed_at(serve: Callable[..., Service], script: Path, failpoint: str, seconds: str) -> int:
    """Start a service that kills itself at ``failpoint`` of its first job, submit that
    job (not queueable: started in the request), and see the service die of SIGKILL.

    Returns:
        The job's id.
    """
    service = serve(allowlist=[str(script)], service_env={FAILPOINT_ENV: f"{failpoint}:1"})
    with pytest.raises(httpx.HTTPError):  # the service dies under the request
        service.call("POST", "/jobs", json={"argv": [str(script), seconds], "queueable": False})
    assert service.process.wait(timeout=60) == -signal.SIGKILL, service.log()
    assert f"failpoint {failpoint} reached at job 1" in service.log()
    return 1


@pytest.mark.no_kafka
def test_killed_after_spawning_a_job_before_recording_it_a_restart_finds_the_job(
    serve: Callable[..., Service], tmp_path: Path, job_script: tuple[Path, Path]
) -> None:
    script, runs = job_script
    job_id = killed_at(serve, script, "spawned", "300")
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    stored = store.get(job_id)
    store.engine.dispose()
    assert stored is not None and stored.state.value == "RUNNING" and stored.pid is None
    wait_for(lambda: len(job_processes(script)) == 1, "the job's process to run")
    (orphan,) = job_processes(script)

    second = serve(allowlist=[str(script)])
    job = second.job(job_id)
    assert job["state"] == "RUNNING" and job["pid"] == orphan.pid, (job, second.log())
    assert "found by its job id" in second.log()
    # Started once: the recovery and the checks since started nothing more.
    wait_for(lambda: second.call("GET", "/status").status_code == 200, "the service to answer")
    assert [p.pid for p in job_processes(script)] == [orphan.pid]
    assert len(runs.read_text().split()) == 1
    # Watched again: a cancel stops it, as any running job's.
    assert second.call("POST", f"/jobs/{job_id}/cancel").json()["state"] == "ABORTED"
    wait_for(lambda: not job_processes(script), "the found job's process to end")
    assert len(runs.read_text().split()) == 1


@pytest.mark.no_kafka
def test_killed_after_claiming_a_job_before_spawning_it_a_restart_runs_it_once(
    serve: Callable[..., Service], tmp_path: Path, job_script: tuple[Path, Path]
) -> None:
    script, runs = job_script
    job_id = killed_at(serve, script, "claimed", "0")
    assert not runs.exists() and not (tmp_path / "logs" / f"{job_id}.log").exists()

    second = serve(allowlist=[str(script)])
    wait_for(lambda: second.job(job_id)["state"] == "FINISHED_OK", "the job to run after all")
    assert len(runs.read_text().split()) == 1
    assert "claimed but never started" in second.log()


@pytest.mark.no_kafka
def test_a_job_that_ran_and_ended_while_no_service_watched_is_unknown_not_run_again(
    serve: Callable[..., Service], tmp_path: Path, job_script: tuple[Path, Path]
) -> None:
    """The doubt the service cannot settle: its log exists and no process is the job's.
    It may have run (here it did), so it is not started again."""
    script, runs = job_script
    job_id = killed_at(serve, script, "spawned", "0")
    wait_for(lambda: runs.exists() and not job_processes(script), "the job to run and end")

    second = serve(allowlist=[str(script)])
    job = second.job(job_id)
    assert job["state"] == "UNKNOWN" and "not started again" in job["note"], job
    assert len(runs.read_text().split()) == 1
    assert os.path.exists(tmp_path / "logs" / f"{job_id}.log")
