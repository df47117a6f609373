"""Every Floodgate HTTP server, as an attacker on the host or a web page in its browser
would try it: half-sent requests held open, a rebound DNS
name, guessed tokens. The real servers on loopback sockets: `floodgate admission serve`
in a process of its own, a query group's control endpoint, a bare
:class:`~pipeline.http.serving.AppServer`."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI, Request
from prometheus_client.parser import text_string_to_metric_families

from pipeline.http.serving import AppServer
from pipeline.spark.control import ControlServer
from tests.integration.admission_service import Service
from tests.integration.helpers import flights_raw_config, idle_query_group, raw_request

pytestmark = pytest.mark.no_kafka

#: A token of the control endpoint of these tests.
CONTROL_TOKEN = "control-token-of-the-hardening-tests-4b7e"

#: How long a client may wait for the server to close a connection: far past the
#: deadline under test, so a slow machine does not fail the test; a server without the
#: deadline keeps the connection open past it (65 s was seen).
GRACE_S = 60.0


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` within :data:`GRACE_S` (reading and dropping
    what it sends first); ``False`` if it is still open then."""
    sock.settimeout(GRACE_S)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


@pytest.fixture
def echo_server() -> Iterator[Callable[..., AppServer]]:
    """A bare AppServer of a small app (``POST /echo`` answers the body's size), with
    the settings a test gives; stopped after."""
    started: list[AppServer] = []

    def start(**settings: object) -> AppServer:
        app = FastAPI()

        @app.post("/echo")
        async def echo(request: Request) -> dict[str, int]:
            return {"bytes": len(await request.body())}

        @app.get("/")
        def root() -> dict[str, bool]:
            return {"ok": True}

        server = AppServer(app, host="127.0.0.1", port=0, name="echo", **settings)  # type: ignore[arg-type]
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def control_server(tmp_path: Path) -> Iterator[ControlServer]:
    """A query group's control endpoint (the group idle: no Spark, no broker)."""
    raw = flights_raw_config("hardening", tmp_path / "checkpoints", only_passthrough=True)
    server = ControlServer(
        idle_query_group(raw),
        host="127.0.0.1",
        port=0,
        control_dir=str(tmp_path / "run"),
        token=CONTROL_TOKEN,
    )
    server.start()
    yield server
    server.stop()


def test_a_half_sent_request_is_closed_after_the_header_timeout(
    serve: Callable[..., Service],
) -> None:
    """a connection that sent half a request and no token was still open after
    65 s. The admission service closes it after its header timeout (10 s)."""
    service = serve()
    with connect(service.url) as sock:
        sock.sendall(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        assert closed_by_server(sock), f"still open after {GRACE_S} s"
    # The service goes on serving others.
    assert service.call("GET", "/jobs").status_code == 200


def test_head_and_body_deadlines_are_not_reset_by_trickled_bytes(
    echo_server: Callable[..., AppServer],
) -> None:
    server = echo_server(header_timeout_s=1.0, body_timeout_s=1.0)
    # Nothing sent at all: closed too.
    with connect(server.url) as idle:
        assert closed_by_server(idle)
    # A byte of the head every 0.3 s: the head's clock runs from the connection.
    with connect(server.url) as trickle:
        trickle.settimeout(GRACE_S)
        deadline = time.monotonic() + GRACE_S
        closed = False
        for byte in b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 1000:
            try:
                trickle.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert closed or closed_by_server(trickle)
    # The head in, the body announced and never sent: closed after the body's deadline.
    with connect(server.url) as body:
        body.sendall(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789"
        )
        assert closed_by_server(body)
    # A request sent whole is answered, on a kept-alive connection twice.
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(2):
            assert client.post("/echo", content=b"x" * 100).json() == {"bytes": 100}


def test_past_the_connection_limit_a_request_is_answered_503(
    echo_server: Callable[..., AppServer],
) -> None:
    server = echo_server(max_connections=3, header_timeout_s=GRACE_S)
    held = [connect(server.url) for _ in range(3)]
    try:
        for sock in held:
            sock.sendall(b"GET / HTTP/1.1\r\n")  # half a head: each holds a connection
        status, _ = raw_request(server.url, "GET / HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n")
        assert status == 503
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + GRACE_S
    while httpx.get(server.url, timeout=10).status_code == 503:
        assert time.monotonic() < deadline, "still 503 with the connections closed"
        time.sleep(0.1)


def test_a_rebound_host_name_is_refused_by_the_admission_api(
    serve: Callable[..., Service],
) -> None:
    """a web page that rebinds its DNS name to 127.0.0.1 read ``GET /jobs``
    (200, with argv) with ``Host: rebind.attacker.example``."""
    service = serve()
    service.submit(["true"])
    port = urlsplit(service.url).port
    rebound = httpx.get(
        f"{service.url}/jobs", headers={"Host": f"rebind.attacker.example:{port}"}, timeout=10
    )
    assert rebound.status_code == 400
    assert "admission.allowed_hosts" in rebound.json()["detail"]
    assert "argv" not in rebound.text
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", "[::1]"):
        answered = httpx.get(f"{service.url}/jobs", headers={"Host": host}, timeout=10)
        assert answered.status_code == 200, host
    status, _ = raw_request(service.url, "GET /jobs HTTP/1.0\n")  # no Host at all
    assert status == 400
    # The compose stack's name, where the setting names it.
    named = serve(allowed_hosts=["admission"])
    for host, status in (("admission:8787", 200), ("rebind.attacker.example", 400)):
        answered = httpx.get(f"{named.url}/jobs", headers={"Host": host}, timeout=10)
        assert answered.status_code == status, host


def test_a_rebound_host_name_is_refused_by_the_query_groups_endpoint(
    control_server: ControlServer,
) -> None:
    for path in ("/status", "/metrics"):
        rebound = httpx.get(
            f"{control_server.url}{path}", headers={"Host": "rebind.attacker.example"}, timeout=10
        )
        assert rebound.status_code == 400, path
        assert "query_group.allowed_hosts" in rebound.json()["detail"]
    assert httpx.get(f"{control_server.url}/status", timeout=10).status_code == 200


def auth_counts(metrics_text: str) -> tuple[float, float]:
    """``floodgate_http_auth_failures_total`` and ``_throttled_total`` of an endpoint."""
    values = {"failures": 0.0, "throttled": 0.0}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "floodgate_http_auth_failures_total":
                values["failures"] = sample.value
            if sample.name == "floodgate_http_auth_throttled_total":
                values["throttled"] = sample.value
    return values["failures"], values["throttled"]


def test_failed_tokens_from_one_address_are_throttled_then_let_through(
    serve: Callable[..., Service],
) -> None:
    """about 1 000 wrong tokens a second got 401 each, with no throttling. After
    3 failures in the window the right token gets 429 too, until the window ends."""
    service = serve(auth_max_failures=3, auth_failure_window_s=5.0)
    body = {"argv": ["true"]}
    for _ in range(3):
        assert service.call("POST", "/jobs", token="wrong-" * 8, json=body).status_code == 401
    throttled = service.call("POST", "/jobs", json=body)
    assert throttled.status_code == 429
    assert 1 <= int(throttled.headers["Retry-After"]) <= 5
    assert "too many failed authentications" in throttled.json()["detail"]
    assert service.call("GET", "/jobs").json() == []  # the right token did nothing
    assert auth_counts(service.call("GET", "/metrics").text) == (3.0, 1.0)
    deadline = time.monotonic() + GRACE_S
    while (answer := service.call("POST", "/jobs", json=body)).status_code == 429:
        assert time.monotonic() < deadline, "still throttled long after the window"
        time.sleep(0.2)
    assert answer.status_code == 201


def test_the_query_groups_endpoint_throttles_failed_tokens_and_counts_them(
    control_server: ControlServer,
) -> None:
    url = control_server.url
    wrong = {"Authorization": "Bearer not-the-control-token-of-the-tests-1234"}
    for _ in range(10):
        assert httpx.post(f"{url}/stop", headers=wrong, timeout=10).status_code == 401
    right = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    refused = httpx.post(f"{url}/stop", headers=right, timeout=10)
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert not control_server.group.stop_requested.is_set()  # type: ignore[attr-defined]
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert auth_counts(metrics) == (10.0, 1.0)
