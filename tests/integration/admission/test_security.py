"""The admission service as an attacker on the same host would try it: the
request topic as a way around the token, a symlink on the allowlist as a way to other
programs, a poison request to skip the ones after it, the deny-list's gaps, the token
on the command line. `floodgate admission serve` in a process of its own, real jobs,
the session's broker."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.integration.admission_service import (
    TOKEN,
    Service,
    intake_settings,
    wait_for,
    write_request,
)

FLOODGATE = [sys.executable, "-m", "pipeline.cli"]

#: A program that dispatches on the name it is run as, as Debian's ``pg_wrapper`` and
#: busybox do: run as ``wrapper`` it runs the program its first argument names.
WRAPPER = """#!/bin/sh
case "$(basename "$0")" in
  wrapper) program="$1"; shift; exec "$program" "$@" ;;
  *) echo "ran as $(basename "$0")" >> "{marks}" ;;
esac
"""


@pytest.mark.no_kafka
def test_an_allowlisted_symlink_runs_as_its_own_name_and_admits_no_other(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    """The job once ran the symlink's target with the target's name as argv[0]
    (the wrapper then ran argv[1], /usr/bin/touch), and every other symlink to the
    same file was admitted (201)."""
    marks, victim = tmp_path / "marks", tmp_path / "victim"
    wrapper = tmp_path / "lib" / "wrapper"
    wrapper.parent.mkdir()
    wrapper.write_text(WRAPPER.format(marks=marks))
    wrapper.chmod(0o755)
    (tmp_path / "bin").mkdir()
    for name in ("pg_isready", "pg_dump"):
        (tmp_path / "bin" / name).symlink_to(wrapper)
    allowed = str(tmp_path / "bin" / "pg_isready")
    service = serve(allowlist=[allowed])

    job = service.submit([allowed, "/usr/bin/touch", str(victim)], queueable=False)
    wait_for(lambda: service.job(job["id"])["state"] == "FINISHED_OK", "the job")
    assert service.job(job["id"])["argv"][0] == allowed  # stored as given
    assert marks.read_text() == "ran as pg_isready\n"
    assert not victim.exists()
    other = service.call("POST", "/jobs", json={"argv": [str(tmp_path / "bin" / "pg_dump")]})
    assert other.status_code == 403, other.text
    direct = service.call("POST", "/jobs", json={"argv": [str(wrapper), "/usr/bin/touch"]})
    assert direct.status_code == 403, direct.text
    assert [j["id"] for j in service.call("GET", "/jobs").json()] == [job["id"]]


@pytest.mark.no_kafka
def test_env_names_are_taken_from_the_allowlist_and_glibcs_unsafe_ones_never(
    serve: Callable[..., Service],
) -> None:
    """GETCONF_DIR, LOCALDOMAIN, RES_OPTIONS, NIS_PATH, TZDIR, MALLOC_TRACE, KRB5_CONFIG
    and SASL_PATH were once accepted (201); a job could set any other name."""
    open_to_all = serve(job_env_allowlist=["*"])
    for name in (
        "GETCONF_DIR",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "NIS_PATH",
        "TZDIR",
        "MALLOC_TRACE",
        "KRB5_CONFIG",
        "SASL_PATH",
    ):
        refused = open_to_all.call("POST", "/jobs", json={"argv": ["true"], "env": {name: "/x"}})
        assert refused.status_code == 403, (name, refused.text)
        assert "is not allowed in a job's environment" in refused.json()["detail"]
    named = serve()  # the tests' allow-list: MARK, MODE, PART_SECRET, DB_PASSWORD
    refused = named.call("POST", "/jobs", json={"argv": ["true"], "env": {"OTHER": "1"}})
    assert refused.status_code == 403, refused.text
    assert "'OTHER' is not on admission.job_env_allowlist" in refused.json()["detail"]
    assert named.call("GET", "/jobs").json() == []
    named.submit(["true"], env={"MARK": "1"})


@pytest.mark.no_kafka
def test_the_cli_takes_the_token_from_a_file_and_refuses_it_in_argv(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    service = serve()
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    token_file.chmod(0o600)

    def submit(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FLOODGATE, "admission", "submit", "--url", service.url, *options, "--", "true"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )

    refused = submit("--token", TOKEN)
    assert refused.returncode == 2, refused.stderr
    assert "--token-file" in refused.stderr and TOKEN not in refused.stderr
    assert service.call("GET", "/jobs").json() == []
    taken = submit("--token-file", str(token_file))
    assert taken.returncode == 0, taken.stderr
    assert [j["argv"] for j in service.call("GET", "/jobs").json()] == [["true"]]


def test_the_intake_takes_only_signed_requests_and_a_poison_one_skips_no_other(
    serve: Callable[..., Service], bootstrap: str, run_id: str, tmp_path: Path
) -> None:
    """An unsigned ``job_request`` once ran as a job; a NUL byte in argv[0] raised
    in the intake, and the rest of its batch was skipped and committed past; lane ''
    and expected_s = -1, which REST refuses, were stored."""
    from confluent_kafka import Producer

    from pipeline.demo.reception import read_all
    from pipeline.serde.codec import StreamCodec
    from pipeline.serde.schemas import SchemaRepository

    off = serve(
        bootstrap_servers=bootstrap,
        request_topic=f"admission.requests.{run_id}",
        database_url=f"sqlite:///{tmp_path / 'off.db'}",
    )
    settings = intake_settings(bootstrap, run_id)
    service = serve(**settings)
    schemas = SchemaRepository.load()
    codec = StreamCodec("job_request", schemas.get("job_request"), schemas)
    topic = settings["request_topic"]
    producer = Producer({"bootstrap.servers": bootstrap})
    ok = codec.encode({"argv": ["true"]})
    write_request(producer, topic, ok, key=b"unsigned", secret=None)
    write_request(producer, topic, ok, key=b"wrong-key", secret="w" * 40)
    first = write_request(producer, topic, ok, key=b"good-1")
    write_request(producer, topic, codec.encode({"argv": ["tr\0ue"]}), key=b"nul")
    write_request(producer, topic, codec.encode({"argv": ["true"], "lane": ""}), key=b"lane")
    minus = codec.encode({"argv": ["true"], "expected_s": -1.0})
    write_request(producer, topic, minus, key=b"expected")
    write_request(producer, topic, ok, key=b"good-2")
    write_request(producer, topic, ok, key=b"good-1", headers=first)  # a replay
    assert producer.flush(30) == 0

    def dead() -> list[tuple[bytes, str]]:
        return [
            (m.key(), dict(m.headers())["floodgate.reason"].decode())
            for m in read_all(bootstrap, settings["dead_letter_topic"], timeout_s=5)
        ]

    wait_for(lambda: len(dead()) == 6, "six dead letters")
    assert sorted(dead()) == [
        (b"expected", "bad-request"),
        (b"good-1", "replayed"),
        (b"lane", "bad-request"),
        (b"nul", "bad-request"),
        (b"unsigned", "not-authenticated"),
        (b"wrong-key", "not-authenticated"),
    ]
    jobs = service.call("GET", "/jobs").json()
    assert sorted(j["client_key"] for j in jobs) == ["good-1", "good-2"]
    assert all(j["lane"] == "default" and j["expected_s"] is None for j in jobs)
    # A service with a cluster named but the intake off reads nothing, and says so.
    assert "admission intake off" in off.log()
    assert off.call("GET", "/jobs").json() == []


@pytest.mark.no_kafka
def test_a_job_cannot_read_the_service_s_environment_through_proc(
    serve: Callable[..., Service],
) -> None:
    """A job runs as the service's user, so it once read
    ``/proc/<service pid>/environ`` -- the admission token with it. The service is
    now non-dumpable: the kernel refuses that file to its user's other processes. Root
    reads any ``/proc``, so the service runs as ``nobody`` here."""
    cat = shutil.which("cat")
    assert cat is not None
    service = serve(user="nobody", allowlist=[cat])
    pid = service.process.pid  # setpriv execs the service in its own process
    assert psutil.Process(pid).uids().real == pwd.getpwnam("nobody").pw_uid

    job = service.submit([cat, f"/proc/{pid}/environ"], queueable=False)
    wait_for(lambda: service.job(job["id"])["state"] in ("FINISHED_OK", "ERROR"), "the job")

    done = service.job(job["id"])
    read = Path(done["log_path"]).read_text(errors="replace")
    leaked = TOKEN in read or "FLOODGATE__ADMISSION__TOKEN" in read
    assert not leaked, "the job read the service's environment, the token in it"
    assert done["state"] == "ERROR" and done["exit_code"] != 0
    assert "Permission denied" in read, read


@pytest.mark.no_kafka
def test_reads_show_process_ids_and_hosts_only_with_the_token(
    serve: Callable[..., Service],
) -> None:
    """``GET /status`` once published the leader's instance (``<host>:<pid>:<random>``),
    and the jobs their ``pid`` and ``started_by``, to anyone: the way to the
    ``/proc/<pid>/environ`` of the test above."""
    service = serve()
    wait_for(lambda: service.call("GET", "/status").json()["leader"]["is_leader"], "the lead")
    job = service.submit(["true"], queueable=False)
    wait_for(lambda: service.job(job["id"])["state"] == "FINISHED_OK", "the job")
    pid = str(service.process.pid)

    for token in (None, "wrong"):
        status = service.call("GET", "/status", token=token).json()
        assert status["leader"] == {"is_leader": True}
        jobs = service.call("GET", "/jobs", token=token).json()
        one = service.call("GET", f"/jobs/{job['id']}", token=token).json()
        for shown in (*jobs, one):
            assert "pid" not in shown and "started_by" not in shown, shown
        assert pid not in json.dumps([status, jobs, one])

    status = service.call("GET", "/status").json()
    assert status["leader"]["instance"].split(":")[1] == pid
    assert status["leader"]["holder"]["instance"] == status["leader"]["instance"]
    one = service.call("GET", f"/jobs/{job['id']}").json()
    assert one["started_by"] == status["leader"]["instance"] and one["pid"] > 0
