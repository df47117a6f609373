"""The docker-compose stack, run for real (``make test-compose``): ``docker-compose.yml``
on images built on this machine (``scripts/compose-images``, layered by
``docker-compose.ci.yml``), every service but Grafana (no build of it can be had from
what CI reaches; its dashboards' queries are run against the stack's Prometheus).

Checked, in order, on one stack:

* every healthcheck turns healthy, each service after the ones it waits for;
* the demo producer's tuples reach the query group's output topics, read through the
  published Kafka port, and ``floodgate audit`` balances (run in the query group's
  container, which holds the sweep catalog: the volume's files are its user's alone);
* Prometheus has every target up, the alert rules loaded, and every dashboard panel's
  query returning data;
* the admission API answers 401 without its token and runs a job with it;
* ``docker-compose down -v`` leaves no container, volume or network behind.

Marker ``compose``: deselected unless ``FLOODGATE_TEST_COMPOSE`` is set (``make
test-compose`` sets it, after building the images).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.config import load_query_group
from tests.integration.monitoring.test_dashboards import at_all, dashboards, panel_queries
from tests.integration.promtool import ROOT

pytestmark = pytest.mark.compose

#: The compose project: its containers, volumes and network are named after it.
PROJECT = "floodgate-ci"
#: Every service but Grafana, which CI cannot build.
SERVICES = ("kafka", "query-group", "demo-producer", "admission", "sweeper", "prometheus")
#: Who waits for whom to be healthy (docker-compose.yml's depends_on).
WAITS_FOR = {
    "query-group": ("kafka",),
    "demo-producer": ("kafka", "query-group"),
    "admission": ("kafka", "query-group"),
    "sweeper": ("kafka", "query-group"),
}
#: How long the stack may take to be healthy: a cold SparkSession in a container.
UP_TIMEOUT_S = 600.0
#: How long the tuples, targets and panel queries may take once it is.
SETTLE_TIMEOUT_S = 240.0
KAFKA = "localhost:9094"
PROMETHEUS = "http://127.0.0.1:9090"
ADMISSION = "http://127.0.0.1:8787"


def compose_command() -> list[str]:
    """``docker-compose`` (Debian's 1.29) or ``docker compose``, with both files."""
    files = ["-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "docker-compose.ci.yml")]
    if shutil.which("docker-compose"):
        return ["docker-compose", "-p", PROJECT, *files]
    return ["docker", "compose", "-p", PROJECT, *files]


def docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout


@dataclass
class Stack:
    env: dict[str, str]
    admission_token: str
    #: When ``up`` was run (epoch seconds): the start of the stack's Docker events.
    since: float = 0.0

    def compose(self, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose_command(), *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def container(self, service: str) -> dict[str, Any]:
        ids = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}",
                     "--filter", f"label=com.docker.compose.service={service}").split()  # fmt: skip
        assert len(ids) == 1, f"{service}: containers {ids}"
        return dict(json.loads(docker("inspect", ids[0]))[0])

    def logs(self) -> str:
        return self.compose("logs", "--tail", "40").stdout[-8000:]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    admission_token = secrets.token_hex(16)
    env = {
        **os.environ,
        "FLOODGATE_CONTROL_TOKEN": secrets.token_hex(16),
        "FLOODGATE_ADMISSION_TOKEN": admission_token,
    }
    running = Stack(env, admission_token)
    running.compose("down", "-v")  # a stack an earlier run left
    running.since = time.time()
    up = running.compose("up", "-d", *SERVICES)
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
    try:
        yield running
    finally:
        if running.compose("ps", "-q").stdout.strip():
            running.compose("down", "-v")


def events(stack: Stack) -> list[tuple[float, str, str]]:
    """``(epoch seconds, service, "start" | "healthy")`` of the stack's containers so far,
    from Docker's event stream (a container's health log keeps its last 5 checks only)."""
    out = docker(
        "events", "--since", f"{stack.since:.0f}", "--until", f"{time.time():.0f}",
        "--filter", f"label=com.docker.compose.project={PROJECT}",
        "--filter", "event=start", "--filter", "event=health_status",
        "--format", "{{json .}}",
    )  # fmt: skip
    found = []
    for line in out.splitlines():
        event = json.loads(line)
        action = event["Action"]
        if action == "start" or action.endswith(": healthy"):
            service = event["Actor"]["Attributes"]["com.docker.compose.service"]
            kind = "start" if action == "start" else "healthy"
            found.append((int(event["timeNano"]) / 1e9, service, kind))
    return sorted(found)


def test_every_service_turns_healthy_after_the_ones_it_waits_for(stack: Stack) -> None:
    deadline = time.monotonic() + UP_TIMEOUT_S
    states: dict[str, str] = {}
    while True:
        containers = {s: stack.container(s) for s in SERVICES}
        states = {s: c["State"]["Health"]["Status"] for s, c in containers.items()}
        if set(states.values()) == {"healthy"}:
            break
        exited = [s for s, c in containers.items() if c["State"]["Status"] == "exited"]
        assert not exited, f"exited: {exited}\n{stack.logs()}"
        assert time.monotonic() < deadline, f"not healthy: {states}\n{stack.logs()}"
        time.sleep(5)
    seen = events(stack)
    started = {s: t for t, s, kind in seen if kind == "start"}  # the last start of each
    healthy = {}
    for t, s, kind in seen:
        if kind == "healthy":
            healthy.setdefault(s, t)  # the first time each was healthy
    assert set(started) == set(SERVICES), seen
    for service, waited in WAITS_FOR.items():
        for dependency in waited:
            assert healthy[dependency] <= started[service], (
                f"{service} started {started[service] - healthy[dependency]:.1f} s before "
                f"{dependency} was healthy"
            )


def test_the_producers_tuples_reach_the_output_and_the_audit_balances(stack: Stack) -> None:
    config = load_query_group(ROOT / "conf" / "flights.toml", env={})
    outputs = [s.topic for s in config.output_streams.values()]
    reader = Consumer({"bootstrap.servers": KAFKA, "group.id": "compose-test"})
    try:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        written: dict[str, int] = {}
        while True:
            metadata = reader.list_topics(timeout=10).topics
            written = {
                topic: sum(
                    reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in metadata[topic].partitions
                )
                for topic in outputs
                if topic in metadata
            }
            if len(written) == len(outputs) and all(written.values()):
                break
            assert time.monotonic() < deadline, f"output written: {written}\n{stack.logs()}"
            time.sleep(5)
    finally:
        reader.close()
    # The ledger, as an operator of the stack runs it: in the query group's container,
    # which holds its sweep catalog (the volume's files are its user's alone).
    audit = stack.compose("exec", "-T", "query-group", "floodgate", "audit", "conf/flights.toml")
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr[-2000:]


def test_prometheus_scrapes_every_target_loads_the_rules_and_feeds_every_panel(
    stack: Stack,
) -> None:
    def query(expr: str) -> list[Any]:
        answer = httpx.get(f"{PROMETHEUS}/api/v1/query", params={"query": expr}, timeout=10)
        body = answer.json()
        assert body["status"] == "success", f"{expr}: {body}"
        return list(body["data"]["result"])

    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    health: dict[str, str] = {}
    while True:
        targets = httpx.get(f"{PROMETHEUS}/api/v1/targets", timeout=10).json()
        health = {t["labels"]["job"]: t["health"] for t in targets["data"]["activeTargets"]}
        if health and set(health.values()) == {"up"}:
            break
        assert time.monotonic() < deadline, f"targets: {health}\n{stack.logs()}"
        time.sleep(5)
    assert len(health) >= 4, health
    rules = httpx.get(f"{PROMETHEUS}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = {rule["name"] for group in rules for rule in group["rules"]}
    shipped = (ROOT / "prometheus" / "rules" / "floodgate.yml").read_text()
    assert loaded and all(name in shipped for name in loaded), loaded
    queries = [(b, t, e) for b, board in dashboards().items() for t, e in panel_queries(board)]
    empty = queries
    while empty and time.monotonic() < deadline + SETTLE_TIMEOUT_S:
        empty = [(b, t, e) for b, t, e in empty if not query(at_all(e))]
        if empty:
            time.sleep(5)
    listing = "\n".join(f"  {b} / {t}: {at_all(e)}" for b, t, e in empty)
    assert not empty, f"{len(empty)} of {len(queries)} panel queries return no series:\n{listing}"


def test_the_admission_api_wants_its_token_and_runs_a_job_with_it(stack: Stack) -> None:
    job = {"argv": ["floodgate", "--help"]}
    assert httpx.post(f"{ADMISSION}/jobs", json=job, timeout=10).status_code == 401
    headers = {"Authorization": f"Bearer {stack.admission_token}"}
    answer = httpx.post(f"{ADMISSION}/jobs", json=job, headers=headers, timeout=10)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    deadline = time.monotonic() + 120
    state = ""
    while state not in ("FINISHED_OK", "ERROR", "ABORTED", "UNKNOWN"):
        assert time.monotonic() < deadline, f"job {job_id} is {state}"
        time.sleep(1)
        state = httpx.get(f"{ADMISSION}/jobs/{job_id}", headers=headers, timeout=10).json()["state"]
    assert state == "FINISHED_OK", state


def test_down_leaves_nothing_behind(stack: Stack) -> None:
    down = stack.compose("down", "-v")
    assert down.returncode == 0, down.stderr[-3000:]
    label = f"label=com.docker.compose.project={PROJECT}"
    assert docker("ps", "-aq", "--filter", label).split() == []
    assert docker("volume", "ls", "-q", "--filter", label).split() == []
    assert docker("network", "ls", "-q", "--filter", label).split() == []
