"""The query group's control endpoint keeps to its own OpenAPI schema:
schemathesis sends generated requests to every operation of
``/openapi.json``, with the control token, and checks that no answer is a 5xx and
every status code, header and body is the one the schema documents. It also sends
each state-changing call without the token and expects the 401 the schema promises.

A real :class:`~pipeline.spark.query_group.QueryGroup` (not started: no Spark, no broker;
``/release`` answers 409, ``/stop`` 202) behind the real
:class:`~pipeline.spark.control.ControlServer` on a loopback port. The number of examples
is bounded so the test takes seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok

from pipeline.spark.control import ControlServer
from tests.integration.helpers import flights_raw_config, idle_query_group

pytestmark = pytest.mark.no_kafka

TOKEN = "schemathesis-control-token-0123456789"
#: Examples per operation: enough to hit every documented status (and schemathesis'
#: probes without and with a wrong token), in a few seconds.
EXAMPLES = 25


@pytest.fixture
def control_server(tmp_path: Path) -> Iterator[ControlServer]:
    raw = flights_raw_config("schema", tmp_path / "checkpoints", only_passthrough=True)
    group = idle_query_group(raw)
    # Served apart from the group: POST /stop stops the group, not this server.
    server = ControlServer(
        group, host="127.0.0.1", port=0, control_dir=str(tmp_path / "run"), token=TOKEN
    )
    server.start()
    yield server
    server.stop()


def test_the_control_endpoint_keeps_to_its_schema(control_server: ControlServer) -> None:
    # Valid requests only: no operation takes a body, and the one parameter (the
    # identity's challenge) is a bounded string. Each
    # operation's Hypothesis strategy is driven by hand: schemathesis' pytest
    # integration (schema.parametrize, from_fixture) breaks on pytest 9 (it sets
    # Function._nodeid, which pytest 9 no longer has).
    schema = schemathesis.openapi.from_url(f"{control_server.url}/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the schema itself is valid
        operations.append(result.ok())
    assert {f"{o.method.upper()} {o.path}" for o in operations} == {
        "GET /status",
        "GET /identity",
        "POST /release",
        "POST /stop",
    }
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})

        check()


def test_the_schema_documents_the_token_and_every_refusal(control_server: ControlServer) -> None:
    document = httpx.get(f"{control_server.url}/openapi.json", timeout=10).json()
    paths = document["paths"]
    assert set(paths) == {"/status", "/identity", "/release", "/stop"}
    for path in ("/release", "/stop"):
        operation = paths[path]["post"]
        assert "401" in operation["responses"], path
        assert operation["security"] == [{"HTTPBearer": []}], path
    assert "409" in paths["/release"]["post"]["responses"]
    for path in ("/status", "/identity"):
        assert "security" not in paths[path]["get"], path  # reads stay open
