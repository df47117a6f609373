"""``docker-compose.yml`` and the ``Dockerfile`` hold together without a Docker engine
(issue 7): the file parses, every file it mounts or the image copies exists, every
scrape target and the Grafana datasource name a service and a port it listens on,
every Floodgate service's config loads under the stack's environment, and the README
documents every published port."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.config import load_admission_config
from pipeline.config import load_query_group
from sweeper.config import load_sweeper_config

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def services() -> dict[str, dict[str, Any]]:
    return dict(compose()["services"])


def environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment as compose would hand it over (``${X:?...}`` set)."""
    env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
    return {k: re.sub(r"\$\{(\w+)[^}]*\}", "compose-test-token", v) for k, v in env.items()}


def published(service: dict[str, Any]) -> dict[int, int]:
    """``{container port: host port}`` of a service."""
    ports = {}
    for entry in service.get("ports", []):
        *host, container = str(entry).split(":")
        ports[int(container)] = int(host[-1])
    return ports


def test_the_stack_has_every_component() -> None:
    assert set(services()) == {
        "kafka",
        "query-group",
        "demo-producer",
        "admission",
        "sweeper",
        "prometheus",
        "grafana",
    }
    kafka = services()["kafka"]["environment"]
    assert kafka["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, one node
    for name in ("query-group", "demo-producer", "admission", "sweeper"):
        service = services()[name]
        assert service["build"] == ".", name
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy", name
        assert environment(service)["FLOODGATE_KAFKA_BOOTSTRAP"] == "kafka:9092", name


def test_every_mounted_file_and_every_copied_path_exists() -> None:
    mounts = 0
    for name, service in services().items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
                mounts += 1
            else:
                assert source in compose()["volumes"], f"{name}: volume {source} is not declared"
    assert mounts >= 4
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", dockerfile, flags=re.MULTILINE)
    assert copied
    for line in copied:
        for source in line.split():
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"


def test_scrape_targets_and_the_datasource_name_services_and_their_ports() -> None:
    stack = services()
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    targets = [
        t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    ]
    assert len(targets) == 4
    for target in [*targets, "prometheus:9090"]:
        host, port = target.split(":")
        assert host in stack, f"{target}: no service {host}"
        assert int(port) in published(stack[host]), f"{target}: {host} does not publish {port}"
    datasource = yaml.safe_load(
        (ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090"
    rules = stack["prometheus"]["volumes"]
    assert "./prometheus/rules:/etc/prometheus/rules:ro" in rules
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]


def test_every_floodgate_service_s_config_loads_under_the_stack_s_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What each container would load at start, through the project's own loaders."""
    monkeypatch.chdir(ROOT)
    # The image installs `floodgate` on PATH; here it is next to this interpreter.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    stack = services()

    group_env = environment(stack["query-group"])
    assert stack["query-group"]["command"] == ["run", "conf/flights.toml"]
    group = load_query_group(ROOT / "conf" / "flights.toml", env=group_env)
    assert group.query_group.metrics_host == "0.0.0.0"
    assert group.query_group.metrics_port in published(stack["query-group"])
    assert group.checkpoint_root.startswith("/data/")
    assert group.query_group.sweep_catalog_url == "sqlite:////data/sweeper/catalog.db"

    producer = stack["demo-producer"]["command"]
    assert producer[:2] == ["produce", "conf/flights.toml"]
    port = int(next(a for a in producer if a.startswith("--metrics-port=")).split("=")[1])
    assert port in published(stack["demo-producer"])

    admission = load_admission_config(
        ROOT / "conf" / "admission.toml", env=environment(stack["admission"])
    )
    assert admission.host == "0.0.0.0"
    assert admission.port in published(stack["admission"])
    assert admission.database_url.startswith("sqlite:////data/")

    sweeper_env = environment(stack["sweeper"])
    sweeper, groups = load_sweeper_config(ROOT / "conf" / "sweeper.toml", env=sweeper_env)
    assert sweeper.host == "0.0.0.0"
    assert sweeper.port in published(stack["sweeper"])
    # The sweeper and the query group meet in one catalog and one checkpoint root.
    assert sweeper.catalog_url == group.query_group.sweep_catalog_url
    assert [g.checkpoint_root for g in groups] == [group.checkpoint_root]


def test_the_readme_documents_every_published_port() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, service in services().items():
        for host_port in published(service).values():
            assert f"| {host_port} |" in readme, f"README: no row for port {host_port} ({name})"


def test_the_query_group_requires_a_control_token_as_it_listens_on_the_network() -> None:
    """Issue 26: the control endpoint listens on every interface of the compose network,
    so the stack refuses to start without a token for ``/release`` and ``/stop``."""
    service = services()["query-group"]
    env = {k: str(v) for k, v in service["environment"].items()}
    assert env["FLOODGATE__QUERY_GROUP__METRICS_HOST"] == "0.0.0.0"
    assert re.fullmatch(r"\$\{FLOODGATE_CONTROL_TOKEN:\?[^}]+\}", env["FLOODGATE_CONTROL_TOKEN"])
