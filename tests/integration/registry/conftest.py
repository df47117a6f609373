"""The Schema Registry the tests of ``encoding = "confluent"`` share (one per session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.registry.apicurio import schema_registry


@pytest.fixture(scope="session")
def registry_url() -> Iterator[str]:
    """The Confluent-API base URL of a real Schema Registry (:mod:`.apicurio`)."""
    with schema_registry() as url:
        yield url
