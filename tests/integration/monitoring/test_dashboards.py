"""Every Grafana panel shows data from a real stack (README, "Monitoring
(Prometheus)").

The demo's services run as the docker-compose stack runs them, each its own process
on the session's broker: a query group (``floodgate run``, swept), the demo producer
(``floodgate produce``), the admission service and the sweeper. A real Prometheus
(Debian's ``prometheus``, installed by ``.ci/run``) scrapes them with
``prometheus/prometheus.yml``'s jobs (targets moved to this host's ports) and
evaluates ``prometheus/rules/``; every live ``/metrics`` passes ``promtool check
metrics``. Then every query of every panel of
``grafana/dashboards/`` is evaluated through Prometheus' HTTP API, with the
dashboard variables at "All"; the test lists every query that returns no series.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from pipeline.brokers.engines import free_ports
from pipeline.demo.stack import spawn, write_stack
from tests.integration.helpers import flights_raw_config
from tests.integration.promtool import ROOT, check_metrics

DASHBOARDS = ROOT / "grafana" / "dashboards"
#: How long the stack may take to come up (a cold SparkSession in the driver).
START_TIMEOUT_S = 240.0
#: How long the panels' queries may take to all return data once every target is up
#: (rates need two scrapes, recording rules one evaluation after).
SETTLE_TIMEOUT_S = 90.0
#: ``$__rate_interval`` as Grafana would set it for a 1 s scrape: 4 scrapes at least.
RATE_INTERVAL = "15s"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return f"--- {self.name} ({self.log}) ---\n" + self.log.read_text(errors="replace")[-3000:]


@contextlib.contextmanager
def processes(tmp_path: Path) -> Iterator[Any]:
    """Start processes (``start(name, argv, **env)``). At the end each gets SIGTERM, as
    ``docker stop`` sends it (to the process, not its group: a driver's JVM is its
    child and must outlive the driver's own clean stop); its group gets SIGKILL if it
    has not exited in 30 s."""
    started: list[Process] = []

    def start(name: str, argv: list[str], **env: str) -> Process:
        log = tmp_path / f"{name}.log"
        started.append(Process(name, spawn(argv, log, cwd=ROOT, **env), log))
        return started[-1]

    try:
        yield start, started
    finally:
        for process in reversed(started):
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        for process in reversed(started):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGKILL)  # whatever is left of it
            process.popen.wait(timeout=30)


def floodgate(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", *args]


def prometheus_config(targets: dict[str, str], rules: Path) -> dict[str, Any]:
    """``prometheus/prometheus.yml`` with each compose target moved to this host (every
    target it names must be running here), scraped and evaluated every second."""
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(rules / "*.yml")]
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            missing = [t for t in static["targets"] if t not in targets]
            assert not missing, f"job {job['job_name']}: no process for {missing}"
            static["targets"] = [targets[t] for t in static["targets"]]
    return config


def panel_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(panel title, PromQL)`` of every target of every panel (rows included)."""
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                yield inner["title"], target["expr"]


def variable_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """``(variable, metric selector, label)`` of every ``label_values`` variable."""
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = (
            variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        )
        found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert found, f"variable {variable['name']}: {query!r} is not label_values(...)"
        yield variable["name"], found.group(1), found.group(2)


def at_all(expr: str) -> str:
    """A panel's query with every variable at "All" (``.*``) and Grafana's intervals."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", RATE_INTERVAL)
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def test_the_dashboards_are_provisionable_and_use_the_template_variables() -> None:
    boards = dashboards()
    assert {b["uid"] for b in boards.values()} == {
        "floodgate-overview",
        "floodgate-admission",
        "floodgate-sweeper",
    }
    variables = {name: {v["name"] for v in b["templating"]["list"]} for name, b in boards.items()}
    assert {"query_group", "stream"} <= variables["floodgate-overview.json"]
    for name, board in boards.items():
        assert "datasource" in variables[name], name
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
        for panel in board["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}", (name, panel["title"])
            assert panel.get("description"), f"{name}: panel {panel['title']!r} has no description"
    provisioning = yaml.safe_load(
        (ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert provisioning["datasources"][0]["type"] == "prometheus"
    providers = yaml.safe_load((ROOT / "grafana/provisioning/dashboards/floodgate.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_every_panel_query_returns_series_from_a_real_prometheus_scraping_the_stack(
    bootstrap: str, run_id: str, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/system-deps test installs it (make test runs it)"
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", max_tuples_per_trigger=2_000)
    raw["query_group"].update(queue_metrics_interval_ms=1_000, auto_release=True)
    name = raw["query_group"]["name"]
    stack = write_stack(tmp_path, raw, bootstrap_servers=bootstrap, allowlist=["true"])
    producer, prom = free_ports(2, taken=stack.ports.values())
    ports = {**stack.ports, "producer": producer, "prom": prom}
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "prometheus" / "rules", rules)
    prometheus_yml = tmp_path / "prometheus.yml"
    prometheus_yml.write_text(
        yaml.safe_dump(
            prometheus_config(
                {
                    "query-group:8790": f"127.0.0.1:{ports['group']}",
                    "demo-producer:8791": f"127.0.0.1:{ports['producer']}",
                    "admission:8787": f"127.0.0.1:{ports['admission']}",
                    "sweeper:8788": f"127.0.0.1:{ports['sweeper']}",
                },
                rules,
            )
        )
    )
    prometheus = f"http://127.0.0.1:{ports['prom']}"

    with processes(tmp_path) as (start, started):
        start("query-group", floodgate("run", str(stack.group), "--bootstrap", bootstrap))
        start(
            "producer",
            floodgate(
                "produce",
                str(stack.group),
                "--bootstrap",
                bootstrap,
                "--rate",
                "2000",
                "--limit",
                "20000",
                "--rounds",
                "0",
                "--metrics-port",
                str(ports["producer"]),
            ),
        )
        start(
            "admission",
            floodgate("admission", "serve", "--config", str(stack.admission)),
            FLOODGATE__ADMISSION__TOKEN="dashboards-test-token-7d2e4b9c",
        )
        start("sweeper", floodgate("sweeper", "serve", "--config", str(stack.sweeper)))
        start(
            "prometheus",
            [
                binary,
                f"--config.file={prometheus_yml}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prom']}",
            ],
        )

        def logs() -> str:
            return "\n".join(p.tail() for p in started)

        def query(expr: str) -> list[dict[str, Any]]:
            answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
            body = answer.json()
            assert body["status"] == "success", f"{expr}: {body}"
            return list(body["data"]["result"])

        # Every target up: the stack runs, and prometheus.yml's jobs reach it.
        deadline = time.monotonic() + START_TIMEOUT_S
        health: dict[str, str] = {}
        while True:
            for process in started:
                assert process.popen.poll() is None, f"{process.name} exited\n{logs()}"
            # Until Prometheus is ready it answers 503 with a text body, not JSON.
            with contextlib.suppress(httpx.HTTPError, ValueError):
                targets = httpx.get(f"{prometheus}/api/v1/targets", timeout=5).json()
                health = {t["labels"]["job"]: t["health"] for t in targets["data"]["activeTargets"]}
                if len(health) == 4 and set(health.values()) == {"up"}:
                    break
            assert time.monotonic() < deadline, f"targets not up: {health}\n{logs()}"
            time.sleep(1)

        # Tuples flow: the producer puts, the query group processes.
        flowing = (
            f'floodgate:stream_put_tuples:rate1m{{query_group="{name}", result="accepted"}} > 0',
            f'floodgate_query_input_tuples_total{{query_group="{name}"}} > 0',
        )
        while not all(query(expr) for expr in flowing):
            for process in started:
                assert process.popen.poll() is None, f"{process.name} exited\n{logs()}"
            assert time.monotonic() < deadline, f"no tuples flowing: {flowing}\n{logs()}"
            time.sleep(1)

        # Every live /metrics passes Prometheus' own lint (promtool check metrics).
        for job in targets["data"]["activeTargets"]:
            check_metrics(httpx.get(job["scrapeUrl"], timeout=10).text)
        # Every target says what it runs: floodgate_build_info, one series at 1 per job.
        info = {s["metric"]["job"]: s for s in query("floodgate_build_info")}
        assert set(info) == set(health), info
        for series in info.values():
            assert series["value"][1] == "1"
            assert {"version", "pyspark", "confluent_kafka"} <= set(series["metric"])

        # Then every panel query of every dashboard returns at least one series.
        boards = dashboards()
        queries = [
            (b, title, expr) for b, board in boards.items() for title, expr in panel_queries(board)
        ]
        assert len(queries) >= 30
        empty = queries
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while empty and time.monotonic() < deadline:
            time.sleep(2)
            empty = [(b, title, expr) for b, title, expr in empty if not query(at_all(expr))]
        listing = "\n".join(f"  {b} / {title}: {at_all(expr)}" for b, title, expr in empty)
        assert not empty, f"{len(empty)} panel queries return no series:\n{listing}\n{logs()}"

        # The template variables offer the running query group, its streams, and the
        # swept stream (by its stream name, as every other family labels it).
        values: dict[tuple[str, str], set[str]] = {}
        for b, board in boards.items():
            for variable, selector, label in variable_queries(board):
                series = query(f"group by ({label}) ({at_all(selector)})")
                values[(b, variable)] = {s["metric"][label] for s in series}
        overview, sweeper = "floodgate-overview.json", "floodgate-sweeper.json"
        assert name in values[(overview, "query_group")]
        assert {"flights", "delays_by_origin_hour", "delays_by_carrier_day"} <= values[
            (overview, "stream")
        ]
        assert values[(sweeper, "query_group")] == {name}
        assert "flights" in values[(sweeper, "stream")]
        assert values[("floodgate-admission.json", "instance")] == {
            f"127.0.0.1:{ports['admission']}"
        }


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx must reach the loopback services directly."""
    for key in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(key, raising=False)
