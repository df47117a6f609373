"""The admission API keeps to its own OpenAPI schema: schemathesis sends
generated requests -- valid ones and malformed ones -- to every operation of
``/openapi.json`` of a real `floodgate admission serve` (its own process, no Kafka
intake), with the admission token, and checks that no answer is a 5xx and that every
status code, content type, header and body is one the schema documents. It also sends
each state-changing call without the token and expects the 401 the schema promises.

Programs generated for ``argv`` are not on the allowlist (``true``, ``false`` and
``sleep`` are), so nothing generated runs. The number of examples is bounded so the
test takes seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode

from tests.integration.admission_service import TOKEN, Service

pytestmark = pytest.mark.no_kafka

#: Examples per operation and generation mode: enough to reach every documented status
#: of an operation (401 probes, 404 ids, 422 malformed input), in seconds.
EXAMPLES = 25

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]

OPERATIONS = {
    "POST /jobs",
    "GET /jobs",
    "POST /requests",
    "GET /requests/{request_id}",
    "GET /jobs/{job_id}",
    "POST /jobs/{job_id}/start-now",
    "POST /jobs/{job_id}/cancel",
    "POST /suspend",
    "POST /resume",
    "GET /status",
    "GET /stalls",
    "POST /stalls/{stall_id}/reschedule",
    "POST /lanes/{name}/enable",
}


def test_the_admission_api_keeps_to_its_schema(serve: Callable[..., Service]) -> None:
    service = serve()
    # A job to find, so that generated ids sometimes hit one.
    service.submit(["true"], queueable=False)
    # Each operation's Hypothesis strategy is driven by hand: schemathesis' pytest
    # integration (schema.parametrize, from_fixture) breaks on pytest 9 (it sets
    # Function._nodeid, which pytest 9 no longer has).
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the schema itself is valid
        operations.append(result.ok())
    assert {f"{o.method.upper()} {o.path}" for o in operations} == OPERATIONS
    for operation in operations:
        modes = [GenerationMode.POSITIVE]
        if _takes_input(operation):  # an operation with no input has nothing to malform
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def check(case: Any) -> None:
                case.call_and_validate(
                    headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS, timeout=30
                )

            check()
    assert service.process.poll() is None
    assert "Traceback" not in service.log()


def _takes_input(operation: Any) -> bool:
    """Whether ``operation`` has a path or query parameter or a request body."""
    definition = operation.definition.raw
    return bool(definition.get("parameters")) or "requestBody" in definition


def test_the_schema_documents_the_token_and_every_refusal(serve: Callable[..., Service]) -> None:
    service = serve()
    paths = httpx.get(f"{service.url}/openapi.json", timeout=30).json()["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = set(operation["responses"])
            if method == "post":
                assert {"401", "413"} <= responses, (method, path)
                assert operation["security"] == [{"HTTPBearer": []}], (method, path)
            else:
                assert "security" not in operation, (method, path)  # reads stay open
            if operation.get("parameters") or "requestBody" in operation:
                assert "422" in responses, (method, path)
    assert {"403", "503"} <= set(paths["/jobs"]["post"]["responses"])
    assert "421" in paths["/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "409" in paths["/requests"]["post"]["responses"]
    assert "404" in paths["/requests/{request_id}"]["get"]["responses"]
