"""The admission API refuses bad input cleanly and shows no secret, against
`floodgate admission serve` in a process of its own (no Kafka
intake): env values never shown; NUL bytes, '=' in env names, huge ids, NaN and
loose booleans are 422 naming the field; the token is checked before a byte of the
body is read and the body limit before it is parsed; an empty host is refused at start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.admission_service import TOKEN, Service
from tests.integration.helpers import raw_request

pytestmark = pytest.mark.no_kafka

SECRET = "hunter2-do-not-show"


def test_reads_show_env_names_never_their_values(serve: Callable[..., Service]) -> None:
    """GET /requests/{id}, without a token, once showed a completion step's env."""
    service = serve()
    body = {
        "parts": [{"argv": ["true"], "env": {"PART_SECRET": SECRET}}],
        "completion": {"argv": ["true"], "env": {"DB_PASSWORD": SECRET, "MODE": "x"}},
    }
    created = service.call("POST", "/requests", json=body)
    assert created.status_code == 201, created.text
    assert SECRET not in created.text
    request_id = created.json()["id"]
    job_id = created.json()["jobs"][0]["id"]
    for token in (None, TOKEN):
        shown = service.call("GET", f"/requests/{request_id}", token=token)
        assert shown.status_code == 200, shown.text
        assert SECRET not in shown.text
        assert shown.json()["completion"]["env"] == ["DB_PASSWORD", "MODE"]
        assert shown.json()["jobs"][0]["env"] == ["PART_SECRET"]
        for path in ("/jobs", f"/jobs/{job_id}", "/stalls", "/status"):
            read = service.call("GET", path, token=token)
            assert read.status_code == 200 and SECRET not in read.text, path


def refused_fields(response: httpx.Response) -> list[list[object]]:
    """The ``loc`` of every field a 422 names."""
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list), detail
    return [error["loc"] for error in detail]


def test_malformed_input_is_422_naming_the_field_and_nothing_is_stored(
    serve: Callable[..., Service],
) -> None:
    """A NUL byte or '=' in an env name was once a 500 (and a job RUNNING
    with no process), ids beyond 2^63 and a NaN expected_s 500s, "no" a boolean."""
    service = serve()
    cases = {
        "argv": ({"argv": ["true", "a\0b"]}, ["body", "argv", 1]),
        "cwd": ({"argv": ["true"], "cwd": "/tmp\0x"}, ["body", "cwd"]),
        "env '='": ({"argv": ["true"], "env": {"A=B": "1"}}, ["body", "env"]),
        "env empty name": ({"argv": ["true"], "env": {"": "1"}}, ["body", "env"]),
        "env NUL name": ({"argv": ["true"], "env": {"A\0": "1"}}, ["body", "env"]),
        "env NUL value": ({"argv": ["true"], "env": {"A": "x\0y"}}, ["body", "env"]),
        "lane": ({"argv": ["true"], "lane": "a\0b"}, ["body", "lane"]),
        "queueable": ({"argv": ["true"], "queueable": "no"}, ["body", "queueable"]),
        "abnormal_exit": ({"argv": ["true"], "abnormal_exit": 1}, ["body", "abnormal_exit"]),
        "expected_s text": ({"argv": ["true"], "expected_s": "5"}, ["body", "expected_s"]),
    }
    for what, (body, loc) in cases.items():
        assert refused_fields(service.call("POST", "/jobs", json=body)) == [loc], what
    # What JSON parsers take but JSON does not have: NaN, Infinity; a lone surrogate.
    raw = {
        '{"argv": ["true"], "expected_s": NaN}': ["body", "expected_s"],
        '{"argv": ["true"], "expected_s": Infinity}': ["body", "expected_s"],
        '{"argv": ["true", "\\ud800"]}': ["body", "argv", 1],
    }
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    for content, loc in raw.items():
        response = httpx.post(f"{service.url}/jobs", content=content, headers=headers)
        assert refused_fields(response) == [loc], content
    part = {"parts": [{"argv": ["true"]}, {"argv": ["true"], "env": {"X=Y": "1"}}]}
    assert refused_fields(service.call("POST", "/requests", json=part)) == [
        ["body", "parts", 1, "env"]
    ]
    named = service.call("POST", "/jobs", json={"argv": ["true"], "env": {"A=B": "1"}})
    assert "'A=B'" in named.json()["detail"][0]["msg"]
    huge = 2**63
    for method, path, loc in (
        ("GET", f"/jobs/{huge}", ["path", "job_id"]),
        ("GET", f"/requests/{huge}", ["path", "request_id"]),
        ("POST", f"/jobs/{huge}/cancel", ["path", "job_id"]),
        ("POST", f"/jobs/{2**64}/start-now", ["path", "job_id"]),
        ("POST", f"/stalls/{huge}/reschedule", ["path", "stall_id"]),
        ("POST", "/lanes/a%00b/enable", ["path", "name"]),
    ):
        assert refused_fields(service.call(method, path)) == [loc], path
    assert service.call("GET", f"/jobs/{huge - 1}").status_code == 404  # the largest id
    assert service.call("GET", "/jobs").json() == []  # nothing stored, nothing started
    assert "Traceback" not in service.log()


def test_the_token_is_checked_before_the_body_and_the_limit_before_parsing(
    serve: Callable[..., Service],
) -> None:
    """Bodies were once read and parsed before the token was checked, with no limit.
    Each refusal below comes while the client has sent (next to) none of the body it
    announced: the server cannot have read it."""
    service = serve(max_request_body_bytes=4096)
    announce = "POST /jobs HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
    status, received = raw_request(service.url, f"{announce}Content-Length: 52428800\n", b"{")
    assert status == 401 and b"www-authenticate: bearer" in received.lower()
    authorised = f"{announce}Authorization: Bearer {TOKEN}\n"
    status, received = raw_request(service.url, f"{authorised}Content-Length: 52428800\n", b"{")
    assert status == 413 and b"admission.max_request_body_bytes" in received
    # A chunked body has no length to look at: counted as it comes, refused past 4096.
    chunk = b"1000\r\n" + b" " * 0x1000 + b"\r\n"
    status, received = raw_request(
        service.url, f"{authorised}Transfer-Encoding: chunked\n", b"1\r\n{\r\n" + chunk * 2
    )
    assert status == 413 and b"at most 4096 bytes" in received
    # Under the limit, the same service takes a job.
    assert service.call("POST", "/jobs", json={"argv": ["true"]}).status_code == 201
    assert service.process.poll() is None


def serve_command(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `floodgate admission serve` with ``env`` over a test config; it must exit."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "admission", "serve"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("FLOODGATE")},
            "FLOODGATE__ADMISSION__TOKEN": TOKEN,
            "FLOODGATE__ADMISSION__DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
            "FLOODGATE__ADMISSION__LOG_DIR": str(tmp_path / "logs"),
            **env,
        },
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def test_an_empty_or_invalid_host_is_refused_and_the_bound_address_is_logged(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    """An empty host once bound every interface while the log printed 127.0.0.1."""
    for host in ("", "not a host"):
        ran = serve_command({"FLOODGATE__ADMISSION__HOST": host}, tmp_path)
        assert ran.returncode == 1, ran.stdout + ran.stderr
        output = " ".join((ran.stdout + ran.stderr).split())
        assert "admission.host" in output and "an IPv4 address" in output, output
        assert not (tmp_path / "jobs.db").exists()  # refused before anything started
    service = serve(host="0.0.0.0")
    port = urlsplit(service.url).port
    assert f"admission API listening on 0.0.0.0:{port} (every interface)" in service.log()
    loopback = serve()
    assert f"admission API listening on 127.0.0.1:{urlsplit(loopback.url).port}" in (loopback.log())
