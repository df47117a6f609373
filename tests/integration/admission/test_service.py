"""The admission service over HTTP, with real processes: `floodgate admission serve` in a
process of its own, jobs that are real programs, load from real CPU burners."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from sqlalchemy import create_engine, text

from admission.runner import start_since_boot
from admission.store import JobStore
from admission.tables import jobs
from tests.integration.admission_service import (
    SLEEP,
    TOKEN,
    Service,
    intake_settings,
    wait_for,
    write_request,
)
from tests.integration.postgres import fresh_database
from tests.integration.promtool import check_metrics


def hard_stall(service: Service, *, lane: str) -> dict[str, Any]:
    """Start a job in ``lane`` and ``kill -9`` it: a hard stall; the job, ended."""
    job = service.submit([SLEEP, "60"], queueable=False, lane=lane)
    os.kill(job["pid"], signal.SIGKILL)
    wait_for(lambda: service.job(job["id"])["state"] == "ERROR", "the killed job to end")
    return service.job(job["id"])


def stop(service: Service) -> None:
    service.process.send_signal(signal.SIGTERM)
    assert service.process.wait(timeout=30) == 0, service.log()


@pytest.mark.no_kafka
def test_mutations_need_the_token_and_programs_must_be_on_the_allowlist(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    service = serve()
    body = {"argv": ["true"]}
    assert service.call("POST", "/jobs", token=None, json=body).status_code == 401
    assert service.call("POST", "/jobs", token="wrong", json=body).status_code == 401
    refused = service.call("POST", "/jobs", json={"argv": ["rm", "-rf", str(tmp_path)]})
    assert refused.status_code == 403
    assert "not on admission.allowlist" in refused.json()["detail"]
    bad = service.call("POST", "/jobs", json={"argv": []})
    assert bad.status_code == 422
    assert service.call("GET", "/jobs").json() == []  # nothing stored, nothing started
    assert tmp_path.exists()
    assert "FG-ADM-004" in service.log()
    assert service.call("GET", "/openapi.json").status_code == 200


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.no_kafka
def test_a_job_env_naming_a_loader_or_interpreter_variable_is_refused_naming_it(
    serve: Callable[..., Service],
) -> None:
    """PYTHONPATH, LD_PRELOAD, SPARK_HOME and PATH in a job's env once ran code of the
    submitter's choosing inside allowlisted programs."""
    service = serve()
    for name in ("PYTHONPATH", "LD_PRELOAD", "SPARK_HOME", "PATH", "JAVA_TOOL_OPTIONS"):
        refused = service.call("POST", "/jobs", json={"argv": ["true"], "env": {name: "/tmp/x"}})
        assert refused.status_code == 403, refused.text
        assert f"env variable {name!r} is not allowed" in refused.json()["detail"]
    part = {"argv": ["true"], "env": {"ld_preload": "/tmp/x.so"}}
    refused = service.call("POST", "/requests", json={"parts": [{"argv": ["true"]}, part]})
    assert refused.status_code == 403 and "'ld_preload'" in refused.json()["detail"]
    for env in ({"A=B": "1"}, {"A": "x\0y"}):  # what execve cannot carry: malformed
        malformed = service.call("POST", "/jobs", json={"argv": ["true"], "env": env})
        assert malformed.status_code == 422, malformed.text
    assert service.call("GET", "/jobs").json() == []  # nothing stored, nothing started
    ok = service.submit(["true"], env={"MARK": "1"}, queueable=False)
    wait_for(lambda: service.job(ok["id"])["state"] == "FINISHED_OK", "a job with its own env")


@pytest.mark.no_kafka
def test_a_job_sees_the_built_environment_and_the_service_writes_private_files(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    """Every job once inherited the service's environment, its token among them; the
    job database and job logs were 0644."""
    service = serve(
        allowlist=["env"],
        job_path="/usr/bin:/bin",
        service_env={"SERVICE_ONLY": "kept-from-jobs", "LD_LIBRARY_PATH": "/nowhere"},
    )
    job = service.submit(["env"], env={"MARK": "mine"}, queueable=False)
    wait_for(lambda: service.job(job["id"])["state"] == "FINISHED_OK", "the env job to end")
    log_path = service.job(job["id"])["log_path"]
    seen = dict(
        line.split("=", 1) for line in Path(log_path).read_text().splitlines() if "=" in line
    )
    assert TOKEN not in Path(log_path).read_text()
    assert not [name for name in seen if name.startswith("FLOODGATE__")]
    assert "SERVICE_ONLY" not in seen and "LD_LIBRARY_PATH" not in seen
    assert seen["PATH"] == "/usr/bin:/bin"
    assert seen["MARK"] == "mine" and seen["FLOODGATE_ADMISSION_JOB_ID"] == str(job["id"])
    assert mode(log_path) == 0o600
    assert mode(tmp_path / "logs") == 0o700
    assert mode(tmp_path / "jobs.db") == 0o600


@pytest.mark.no_kafka
def test_a_job_whose_program_left_the_allowlist_is_not_started_after_a_restart(
    serve: Callable[..., Service],
) -> None:
    """A job enqueued before its program was removed from the allowlist was once
    started after the restart."""
    first = serve()
    assert first.call("POST", "/suspend").status_code == 200
    removed, kept = first.submit(["false"]), first.submit(["true"])
    stop(first)
    second = serve(allowlist=[SLEEP, "true"], system_cpu_limit=1.0)  # load never high
    assert second.call("POST", "/resume").status_code == 200
    wait_for(lambda: second.job(kept["id"])["state"] == "FINISHED_OK", "the allowed job to run")
    refused = second.job(removed["id"])
    assert refused["state"] == "ABORTED" and refused["pid"] is None
    assert "refused at start" in refused["note"] and "not on admission.allowlist" in refused["note"]
    assert "FG-ADM-004" in second.log()


@pytest.mark.no_kafka
def test_a_reused_pid_is_not_adopted_and_cancel_leaves_that_process_alone(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    """A restart once adopted any live process by its pid, and cancel then killed an
    unrelated process that had reused it. Adoption checks the start time and command."""
    first = serve()
    job = first.submit([SLEEP, "300"], queueable=False)
    stop(first)  # the job goes on without a service
    unrelated = subprocess.Popen([SLEEP, "301"])
    try:
        created = start_since_boot(psutil.Process(unrelated.pid))
        store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
        common: dict[str, Any] = {
            "cwd": None,
            "env": {},
            "queueable": False,
            "expected_s": None,
            "abnormal_exit": False,
            "lane": "default",
            "state": "RUNNING",
            "submitted": time.time(),
            "started": time.time(),
            "pid": unrelated.pid,
        }
        # Its pid, another start time: the job's process ended, the pid was reused.
        other_start = store.add(
            argv=[SLEEP, "301"], **common, pid_created=created - 7, pid_cmdline=[SLEEP, "301"]
        )
        # Its start time, another command and no job id in its environment.
        other_command = store.add(
            argv=[SLEEP, "60"], **common, pid_created=created, pid_cmdline=[SLEEP, "60"]
        )
        store.engine.dispose()

        second = serve()
        for lost in (other_start, other_command):
            seen = second.job(lost.id)
            assert seen["state"] == "UNKNOWN", seen
            assert "not adopted" in seen["note"]
            assert second.call("POST", f"/jobs/{lost.id}/cancel").status_code == 409
        assert "another process now" in second.job(other_start.id)["note"]
        assert "runs another command" in second.job(other_command.id)["note"]
        assert unrelated.poll() is None  # alive: never signalled

        adopted = second.job(job["id"])  # the job's own process is adopted, and stoppable
        assert adopted["state"] == "RUNNING"
        assert second.call("POST", f"/jobs/{job['id']}/cancel").json()["state"] == "ABORTED"
        wait_for(lambda: not alive(job["pid"]), "the adopted job's process to end")
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job["pid"], signal.SIGKILL)


@pytest.mark.no_kafka
def test_a_job_that_cannot_be_spawned_ends_as_error_not_running(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    """A NUL byte reaching Popen once gave a 500 and left the job RUNNING with no
    process. Stored straight into the queue: the API refuses such a job before that."""
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    row: dict[str, Any] = {
        "cwd": None,
        "env": {},
        "queueable": True,
        "expected_s": None,
        "abnormal_exit": False,
        "lane": "default",
        "state": "ENQUEUED",
        "submitted": time.time(),
    }
    nul = store.add(**{**row, "argv": [SLEEP, "1\0"]})
    no_cwd = store.add(**{**row, "argv": [SLEEP, "1"], "cwd": str(tmp_path / "missing")})
    bad_env = store.add(**{**row, "argv": [SLEEP, "1"], "env": {"A=B": "1"}})
    store.engine.dispose()
    service = serve(system_cpu_limit=1.0)  # load is never high: the queue is taken at once
    for job, state, words in (
        (nul, "ERROR", "could not start: ValueError"),
        (no_cwd, "ERROR", "could not start: FileNotFoundError"),
        (bad_env, "ABORTED", "refused at start"),
    ):

        def ended(job_id: int = job.id) -> bool:
            return service.job(job_id)["state"] not in ("ENQUEUED", "RUNNING")

        wait_for(ended, f"job {job.id} to end")
        seen = service.job(job.id)
        assert (seen["state"], seen["pid"]) == (state, None), seen
        assert words in seen["note"], seen
    after = service.submit(["true"], queueable=False)  # the service goes on
    wait_for(lambda: service.job(after["id"])["state"] == "FINISHED_OK", "a job after them")


#: A busy loop that ends with the test process: a run stopped by a signal (SIGTERM runs
#: no fixture's teardown) would otherwise leave the cores busy for every later test.
BURNER = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"


@contextlib.contextmanager
def cpu_burners() -> Iterator[None]:
    """A busy loop on every core for the duration: real CPU load for the job queue's rules."""
    burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


@pytest.mark.no_kafka
def test_jobs_enqueue_under_real_cpu_load_and_drain_when_it_stops(
    serve: Callable[..., Service],
) -> None:
    service = serve()
    with cpu_burners():
        wait_for(lambda: service.call("GET", "/status").json()["cpu_load"] > 0.85, "high CPU load")
        jobs = [service.submit(["true"]) for _ in range(3)]
        assert [j["state"] for j in jobs] == ["ENQUEUED"] * 3
        time.sleep(1.0)
        assert {service.job(j["id"])["state"] for j in jobs} == {"ENQUEUED"}
    wait_for(
        lambda: all(service.job(j["id"])["state"] == "FINISHED_OK" for j in jobs),
        "the enqueued jobs to run once the load is gone",
    )
    started = [service.job(j["id"]) for j in jobs]
    assert [j["start_reason"] for j in started] == ["dequeued"] * 3
    # Submitted order kept.
    assert [j["started"] for j in started] == sorted(j["started"] for j in started)
    metrics = service.call("GET", "/metrics").text
    assert 'floodgate_admission_starts_total{how="dequeued"} 3.0' in metrics
    check_metrics(metrics)  # the live endpoint passes Prometheus' own lint


def run_to_the_end(service: Service) -> None:
    """Run a job that is not queueable (it starts whatever the state) and wait until the
    service has recorded its end: at least one whole check has run since this was
    called (a check records ends first, then starts what it may)."""
    for _ in range(2):
        job_id = service.submit(["true"], queueable=False)["id"]

        def ended(job_id: int = job_id) -> bool:
            return bool(service.job(job_id)["state"] == "FINISHED_OK")

        wait_for(ended, "a check to record a job's end")


@pytest.mark.no_kafka
def test_a_restart_keeps_enqueued_jobs_and_the_suspension_and_a_vanished_job_is_unknown(
    serve: Callable[..., Service],
) -> None:
    """After POST /suspend and a restart, enqueued jobs used to start at once."""
    first = serve()
    running = first.submit([SLEEP, "60"], queueable=False)
    assert running["state"] == "RUNNING"
    assert first.call("POST", "/suspend").status_code == 200
    enqueued = [first.submit(["true"]) for _ in range(2)]
    assert {j["state"] for j in enqueued} == {"ENQUEUED"}
    stop(first)
    os.kill(running["pid"], signal.SIGKILL)  # the job's process dies while no service runs

    second = serve()
    assert second.job(running["id"])["state"] == "UNKNOWN"
    assert second.call("GET", "/status").json()["suspended"] is True
    run_to_the_end(second)  # checks have run: still suspended, nothing started
    assert {second.job(j["id"])["state"] for j in enqueued} == {"ENQUEUED"}
    stop(second)
    third = serve()  # still suspended after a second restart; a submit is enqueued
    enqueued.append(third.submit(["true"]))
    assert enqueued[-1]["state"] == "ENQUEUED"
    assert third.call("POST", "/resume").json()["suspended"] is False
    wait_for(
        lambda: all(third.job(j["id"])["state"] == "FINISHED_OK" for j in enqueued),
        "the jobs enqueued before the restart to run once resumed",
    )


@pytest.mark.no_kafka
def test_a_service_restarted_on_a_busy_host_keeps_its_queue_until_the_load_goes(
    serve: Callable[..., Service],
) -> None:
    """The first CPU reading of a new service used to be a meaningless 0.0 (no time
    between two readings); it pulled the first second's mean under the limit, and a
    service started on a saturated host started its whole queue at once."""
    first = serve()
    assert first.call("POST", "/suspend").status_code == 200
    enqueued = [first.submit(["true"]) for _ in range(2)]
    stop(first)
    with cpu_burners():
        second = serve()
        assert second.call("POST", "/resume").status_code == 200  # the suspension persists
        time.sleep(1.5)  # fifteen checks
        assert second.call("GET", "/status").json()["cpu_load"] > 0.85
        assert {second.job(j["id"])["state"] for j in enqueued} == {"ENQUEUED"}
    wait_for(
        lambda: all(second.job(j["id"])["state"] == "FINISHED_OK" for j in enqueued),
        "the jobs to run once the load is gone",
    )


@pytest.mark.no_kafka
def test_a_killed_job_is_a_hard_stall_that_disables_its_lane_until_enabled(
    serve: Callable[..., Service],
) -> None:
    service = serve()
    job = hard_stall(service, lane="etl")
    assert service.job(job["id"])["exit_code"] == -9
    stalls = service.call("GET", "/stalls").json()
    assert [(s["job_id"], s["kind"]) for s in stalls] == [(job["id"], "hard")]
    assert "signal 9" in stalls[0]["reason"]
    assert "etl" in service.call("GET", "/status").json()["disabled_lanes"]

    held = service.submit(["true"], lane="etl")
    other = service.submit(["true"], lane="default")
    wait_for(lambda: service.job(other["id"])["state"] == "FINISHED_OK", "the other lane to run")
    assert service.job(held["id"])["state"] == "ENQUEUED"  # its lane is disabled

    assert service.call("POST", "/lanes/etl/enable").status_code == 200
    wait_for(lambda: service.job(held["id"])["state"] == "FINISHED_OK", "the enabled lane to run")
    again = service.call("POST", f"/stalls/{stalls[0]['id']}/reschedule")
    assert again.status_code == 201
    assert again.json()["argv"] == service.job(job["id"])["argv"]
    assert service.call("GET", "/stalls").json() == []
    assert "FG-ADM-005" in service.log()


@pytest.mark.no_kafka
def test_a_full_queue_refuses_with_the_setting_and_start_now_forces_a_start(
    serve: Callable[..., Service],
) -> None:
    service = serve(max_queue_size=2)
    service.call("POST", "/suspend")
    first, _second = service.submit(["true"]), service.submit(["true"])
    refused = service.call("POST", "/jobs", json={"argv": ["true"]})
    assert refused.status_code == 503
    assert "max_queue_size is 2" in refused.json()["detail"]
    assert "2 jobs enqueued" in refused.json()["detail"]

    forced = service.call("POST", f"/jobs/{first['id']}/start-now")
    assert forced.status_code == 200 and forced.json()["start_reason"] == "forced"
    again = service.call("POST", f"/jobs/{first['id']}/start-now")
    assert again.status_code == 409
    assert "FG-ADM-003" in service.log()
    assert service.call("POST", "/jobs/999/cancel").status_code == 404


@pytest.mark.no_kafka
def test_at_the_default_max_queue_size_the_100_001st_submit_fails_naming_the_setting(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    # 99 999 jobs already enqueued, in a lane disabled by a hard stall (so nothing
    # drains while the test submits), written straight into the service's database.
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    store.set_lane("parked", enabled=False, reason="test", now=time.time())
    row = {
        "argv": ["true"],
        "cwd": None,
        "env": {},
        "queueable": True,
        "expected_s": None,
        "abnormal_exit": False,
        "lane": "parked",
        "state": "ENQUEUED",
    }
    with store.engine.begin() as conn:
        conn.execute(jobs.insert(), [{**row, "submitted": float(i)} for i in range(99_999)])
    store.engine.dispose()
    service = serve()
    assert service.call("GET", "/status").json()["jobs"]["ENQUEUED"] == 99_999
    assert service.submit(["true"], lane="parked")["state"] == "ENQUEUED"  # the 100 000th
    refused = service.call("POST", "/jobs", json={"argv": ["true"], "lane": "parked"})
    assert refused.status_code == 503
    detail = refused.json()["detail"]
    assert "100000 jobs enqueued" in detail and "max_queue_size is 100000" in detail
    assert service.call("GET", "/status").json()["jobs"]["ENQUEUED"] == 100_000


@pytest.mark.no_kafka
def test_a_job_past_its_expected_time_is_flagged_long_running_then_cleared(
    serve: Callable[..., Service],
) -> None:
    service = serve(monitor_interval_s=0.2)
    job = service.submit([SLEEP, "2"], queueable=False, expected_s=0.5)
    wait_for(
        lambda: [s["kind"] for s in service.call("GET", "/stalls").json()] == ["long-running"],
        "the long-running flag",
    )
    assert service.job(job["id"])["state"] == "RUNNING"  # a flag, not an error
    wait_for(lambda: service.call("GET", "/stalls").json() == [], "the flag to clear")
    assert service.job(job["id"])["state"] == "FINISHED_OK"


@pytest.mark.no_kafka
def test_a_part_that_cannot_be_scheduled_backs_out_an_enqueued_part(
    serve: Callable[..., Service],
) -> None:
    service = serve(max_queue_size=1)
    service.call("POST", "/suspend")  # the first part stays enqueued
    refused = service.call(
        "POST", "/requests", json={"parts": [{"argv": ["true"]}, {"argv": ["true"]}]}
    )
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert "part 2 of 2 could not be scheduled" in detail and "max_queue_size is 1" in detail
    [first] = service.call("GET", "/jobs").json()
    assert first["state"] == "ABORTED"  # freed: it had not started
    assert service.call("GET", "/stalls").json() == []
    assert service.call("GET", f"/requests/{first['request_id']}").json()["state"] == "BACKED_OUT"


@pytest.mark.no_kafka
def test_a_backed_out_part_that_may_be_running_is_in_doubt_until_it_ends(
    serve: Callable[..., Service],
) -> None:
    service = serve(monitor_interval_s=0.2)
    # Disable lane "etl" through a hard stall.
    victim = service.submit([SLEEP, "60"], queueable=False, lane="etl")
    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: service.job(victim["id"])["state"] == "ERROR", "the hard stall")
    refused = service.call(
        "POST",
        "/requests",
        json={
            "parts": [
                {"argv": [SLEEP, "1"], "queueable": False},
                {"argv": ["true"], "lane": "etl"},
            ]
        },
    )
    assert refused.status_code == 409
    assert "lane 'etl' is disabled" in refused.json()["detail"]
    in_doubt = [s for s in service.call("GET", "/stalls").json() if s["kind"] == "in-doubt"]
    assert len(in_doubt) == 1
    part = service.job(in_doubt[0]["job_id"])
    assert part["role"] == "part" and part["state"] in ("RUNNING", "FINISHED_OK")
    wait_for(
        lambda: not [s for s in service.call("GET", "/stalls").json() if s["kind"] == "in-doubt"],
        "the monitor to clear the in-doubt entry once the part ended",
    )
    assert service.job(part["id"])["state"] == "FINISHED_OK"


@pytest.mark.no_kafka
def test_a_completion_step_that_cannot_be_scheduled_is_a_hard_stall_then_rescheduled(
    serve: Callable[..., Service],
) -> None:
    service = serve()
    hard_stall(service, lane="agents")
    created = service.call(
        "POST",
        "/requests",
        json={
            "parts": [{"argv": ["true"]}, {"argv": ["true"]}],
            "completion": {"argv": ["true"], "lane": "agents"},
        },
    )
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]

    def state() -> str:
        return str(service.call("GET", f"/requests/{request_id}").json()["state"])

    wait_for(lambda: state() == "STALLED", "the completion step's hard stall")
    [stall] = [s for s in service.call("GET", "/stalls").json() if s["request_id"] == request_id]
    assert stall["kind"] == "hard" and "completion step" in stall["reason"]
    still = service.call("POST", f"/stalls/{stall['id']}/reschedule")
    assert still.status_code == 409  # the lane is still disabled
    [stall] = [s for s in service.call("GET", "/stalls").json() if s["request_id"] == request_id]

    assert service.call("POST", "/lanes/agents/enable").status_code == 200
    done = service.call("POST", f"/stalls/{stall['id']}/reschedule")
    assert done.status_code == 201, done.text
    assert done.json()["role"] == "completion"
    wait_for(lambda: service.job(done.json()["id"])["state"] == "FINISHED_OK", "the completion")
    assert state() == "COMPLETED"


def test_requests_from_the_request_topic_run_and_refusals_are_dead_lettered(
    serve: Callable[..., Service], bootstrap: str, run_id: str
) -> None:
    from confluent_kafka import Producer

    from pipeline.demo.reception import read_all
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

    settings = intake_settings(bootstrap, run_id)
    topics = {k: settings[k] for k in ("request_topic", "events_topic", "dead_letter_topic")}
    service = serve(**settings)
    schemas = SchemaRepository.load()
    codec = StreamCodec("job_request", schemas.get("job_request"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    requests = topics["request_topic"]
    write_request(producer, requests, codec.encode({"argv": ["true"]}), key=b"ok-1")
    write_request(producer, requests, codec.encode({"argv": ["rm", "-rf", "/"]}), key=b"nope")
    write_request(producer, requests, b"not avro at all", key=b"junk")
    assert producer.flush(30) == 0

    wait_for(lambda: len(service.call("GET", "/jobs").json()) == 1, "the request to be taken")
    [job] = service.call("GET", "/jobs").json()
    assert job["client_key"] == "ok-1" and job["argv"][1:] == []
    wait_for(lambda: service.job(job["id"])["state"] == "FINISHED_OK", "the job to run")

    def dead() -> dict[bytes, str]:
        return {
            m.key(): dict(m.headers())["floodgate.reason"].decode()
            for m in read_all(bootstrap, topics["dead_letter_topic"], timeout_s=5)
        }

    wait_for(lambda: len(dead()) == 2, "two dead letters")
    assert dead() == {b"nope": "not-allowed", b"junk": "bad-request"}
    events_codec = StreamCodec("job_event", schemas.get("job_event"), schemas)

    def states() -> list[str]:
        return [
            events_codec.decode(m.value())["state"]
            for m in read_all(bootstrap, topics["events_topic"], timeout_s=5)
            if m.key() == str(job["id"]).encode()
        ]

    wait_for(lambda: states()[-1:] == ["FINISHED_OK"], "the job's events")
    assert states()[0] in ("ENQUEUED", "RUNNING")


@pytest.mark.no_kafka
def test_on_postgresql_one_instance_admits_and_another_takes_over_without_a_double_start(
    serve: Callable[..., Service], postgres: str, tmp_path: Path
) -> None:
    """Two instances on one PostgreSQL database: one leads and starts every job (those
    submitted to the follower too); the leader's lock is lost at run time (its database
    session is terminated), then the leader is killed: the other takes over each time,
    adopts what is running, and no job runs twice."""
    database = fresh_database(postgres)
    marks = tmp_path / "marks"
    marks.mkdir()
    # One start a second on each instance: jobs are still enqueued at each failover.
    slow = {
        "database_url": database,
        "check_interval_ms": 1000,
        "initial_load_step": 1,
        "max_load_step": 1,
        "system_cpu_limit": 1.0,
        "leader_check_interval_s": 0.2,
        "allowlist": [sys.executable],
    }
    first = serve(**slow)
    wait_for(lambda: first.call("GET", "/status").json()["leader"]["is_leader"], "a leader")
    second = serve(**slow)
    leader = first.call("GET", "/status").json()["leader"]
    follower = second.call("GET", "/status").json()["leader"]
    assert not follower["is_leader"]
    assert follower["holder"] == {**leader["holder"], "instance": leader["instance"]}
    assert leader["holder"]["address"] == first.url

    mark = (
        "import os, sys, time; "
        "open(os.path.join(sys.argv[1], os.environ['MARK']), 'a').write('started\\n'); "
        "time.sleep(0.3)"
    )
    jobs = [
        second.submit([sys.executable, "-c", mark, str(marks)], env={"MARK": str(i)})
        for i in range(10)
    ]
    assert {j["state"] for j in jobs} == {"ENQUEUED"}  # a follower starts nothing
    # Only the leader can stop a running job or suspend: the follower names it.
    refused = second.call("POST", "/suspend")
    assert refused.status_code == 421
    assert first.url in refused.json()["detail"]

    def started() -> list[dict[str, Any]]:
        return [j for j in (second.job(j["id"]) for j in jobs) if j["started_by"]]

    wait_for(lambda: len(started()) >= 2, "the leader to start jobs")
    assert {j["started_by"] for j in started()} == {leader["instance"]}

    # The lock is lost at run time: the leader's database session ends.
    engine = create_engine(database)
    with engine.connect() as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'")
        )
    engine.dispose()
    wait_for(lambda: "FG-LEAD-002" in first.log(), "the leader to see its lock lost")
    assert "database connection failed" in first.log()

    def current() -> Service | None:
        for service in (first, second):
            alive = service.process.poll() is None
            if alive and service.call("GET", "/status").json()["leader"]["is_leader"]:
                return service
        return None

    wait_for(lambda: current() is not None, "a leader after the lock was lost")
    before = len(started())
    wait_for(lambda: len(started()) > before, "jobs started after the lock was lost")

    # The leader is killed: the other instance takes over and finishes the queue.
    killed = current()
    assert killed is not None
    killed.process.kill()
    killed.process.wait(timeout=30)
    survivor = second if killed is first else first
    wait_for(
        lambda: survivor.call("GET", "/status").json()["leader"]["is_leader"],
        "the survivor to take over",
    )

    def ended() -> bool:
        states = {survivor.job(j["id"])["state"] for j in jobs}
        return states <= {"FINISHED_OK", "UNKNOWN"}

    wait_for(ended, "every job to end")
    final = [survivor.job(j["id"]) for j in jobs]
    assert {(marks / str(i)).read_text() for i in range(10)} == {"started\n"}, "a job ran twice"
    assert len({j["started_by"] for j in final}) >= 2  # started by more than one leader
    assert survivor.call("GET", "/status").json()["jobs"]["ENQUEUED"] == 0
