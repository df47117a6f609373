"""The query group's control endpoint needs its control token for every call that
changes state (anyone who could reach ``/stop`` or ``/release`` once stopped or
released the group).

A real :class:`~pipeline.spark.query_group.QueryGroup` (not started: no Spark, no broker)
behind the real :class:`~pipeline.spark.control.ControlServer` on a loopback port; the
requests go over HTTP, as ``curl`` or another process would send them.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import ConfigError, FloodgateError
from pipeline.http.client import CONTROL_TOKEN_ENV, call
from pipeline.spark.control import ControlServer
from pipeline.spark.query_group import QueryGroup
from tests.integration.helpers import flights_raw_config, idle_query_group

pytestmark = pytest.mark.no_kafka

runner = CliRunner()


@pytest.fixture
def group(run_id: str, tmp_path: Path) -> QueryGroup:
    """A query group that is never started (its endpoint works all the same)."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"]["control_dir"] = str(tmp_path / "run")
    return idle_query_group(raw)


@pytest.fixture
def served(group: QueryGroup, monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlServer]:
    """The group's endpoint with a generated token (no token in the environment)."""
    monkeypatch.delenv(CONTROL_TOKEN_ENV, raising=False)
    server = ControlServer(
        group, host="127.0.0.1", port=0, control_dir=group.config.query_group.control_dir
    )
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("path", ["/stop", "/release"])
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic dXNlcjpwYXNz"}],
    ids=["no-token", "wrong-token", "basic-auth"],
)
def test_a_state_changing_call_without_the_token_is_a_401_and_changes_nothing(
    served: ControlServer, group: QueryGroup, path: str, headers: dict[str, str]
) -> None:
    response = httpx.post(f"{served.url}{path}", headers=headers, timeout=10)

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "control token" in response.json()["detail"]
    assert not group.stop_requested.is_set()


def test_reads_stay_open(served: ControlServer, group: QueryGroup) -> None:
    status = httpx.get(f"{served.url}/status", timeout=10)
    metrics = httpx.get(f"{served.url}/metrics", timeout=10)

    assert status.status_code == 200 and status.json()["query_group"] == group.name
    assert metrics.status_code == 200 and "floodgate_query_group_state" in metrics.text


def test_a_generated_token_is_written_for_the_owner_only_and_the_cli_sends_it(
    served: ControlServer, group: QueryGroup
) -> None:
    control_dir = Path(group.config.query_group.control_dir)
    token_file = control_dir / f"{group.name}.token"
    assert token_file.read_text() == served.token
    assert len(served.token) >= 32
    for path in (token_file, control_dir / f"{group.name}.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(control_dir.stat().st_mode) == 0o700

    # Not held: the token got the call past authentication to the group's own answer.
    refused = runner.invoke(
        app, ["query-group", "release", group.name, "--control-dir", str(control_dir)]
    )
    assert refused.exit_code == 1 and "not HELD" in refused.stderr, refused.output

    stopped = runner.invoke(
        app, ["query-group", "stop", group.name, "--control-dir", str(control_dir)]
    )
    assert stopped.exit_code == 0, stopped.output
    assert group.stop_requested.is_set()


def test_a_token_from_the_environment_is_used_as_written_and_never_written_down(
    group: QueryGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    control_dir = Path(group.config.query_group.control_dir)
    control_dir.mkdir(parents=True)
    stale = control_dir / f"{group.name}.token"
    stale.write_text("an earlier run's generated token")
    token = '"quoted"-and=1.5e7;0x3f9c'  # not TOML: the quotes are part of it
    monkeypatch.setenv(CONTROL_TOKEN_ENV, token)
    server = ControlServer(group, host="127.0.0.1", port=0, control_dir=str(control_dir))
    server.start()
    try:
        assert server.token == token
        assert not stale.exists()
        assert json.loads((control_dir / f"{group.name}.json").read_text())["url"] == server.url
        wrong = httpx.post(
            f"{server.url}/stop", headers={"Authorization": "Bearer quoted-and=1.5"}, timeout=10
        )
        assert wrong.status_code == 401

        monkeypatch.setenv(CONTROL_TOKEN_ENV, "not-the-token-but-as-strong-5a0c")
        with pytest.raises(FloodgateError, match="stop refused: a bearer token"):
            call(group.name, "stop", control_dir=str(control_dir))
        assert not group.stop_requested.is_set()

        monkeypatch.setenv(CONTROL_TOKEN_ENV, token)
        assert call(group.name, "stop", control_dir=str(control_dir))["stopping"] is True
        assert group.stop_requested.is_set()
    finally:
        server.stop()
    assert not (control_dir / f"{group.name}.json").exists()


@pytest.mark.parametrize("value", ["", "two words", "tab\there", "caf\u00e9"])
def test_an_unusable_token_in_the_environment_is_refused_naming_the_variable(
    group: QueryGroup, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CONTROL_TOKEN_ENV, value)

    with pytest.raises(ConfigError, match=CONTROL_TOKEN_ENV) as refused:
        ControlServer(group, host="127.0.0.1", port=0, control_dir=None)

    assert refused.value.key == CONTROL_TOKEN_ENV


def test_the_status_shows_where_the_driver_and_executors_run_only_with_the_token(
    served: ControlServer, group: QueryGroup, spark: Any
) -> None:
    """Hosts and ports were once shown to whoever reached ``/status``."""
    group._spark = spark  # the suite's session: the group's own start needs a broker
    driver_host = spark.sparkContext.getConf().get("spark.driver.host")

    anyone = httpx.get(f"{served.url}/status", timeout=30).json()["spark"]
    wrong = httpx.get(
        f"{served.url}/status", headers={"Authorization": "Bearer wrong"}, timeout=30
    ).json()["spark"]
    holder = httpx.get(
        f"{served.url}/status", headers={"Authorization": f"Bearer {served.token}"}, timeout=30
    ).json()["spark"]

    assert holder["driver_host"] == driver_host
    assert holder["executors"] and all({"host", "port"} <= set(e) for e in holder["executors"])
    for shown in (anyone, wrong):
        assert "driver_host" not in shown
        assert all(set(e) == {"running_tasks"} for e in shown["executors"])
        assert len(shown["executors"]) == len(holder["executors"])
        assert shown["master"] == holder["master"]
