"""Fixtures of the Spark integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def failpoint(spark: Any) -> Iterator[Callable[[str | None], None]]:
    """Arms a JVM sink failpoint (``SinkFailpoints``, ``<name>:<batch>[:<action>]``) in
    the test session's JVM, whose executors it is in local mode; disarmed after."""
    failpoints = spark._jvm.io.floodgate.spark.write.SinkFailpoints
    yield failpoints.arm
    failpoints.arm(None)
