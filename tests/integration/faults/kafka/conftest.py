"""Fixtures of the broker fault tests: query groups run in the session's SparkSession,
and a failpoint that pauses a micro-batch right before its commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.config import QueryGroupConfig
from pipeline.failpoints import FAILPOINT_ENV
from pipeline.spark.query_group import QueryGroup
from tests.integration.faults.kafka.faults import PausedCommit


@pytest.fixture
def running_group(
    start_query_group: Callable[..., QueryGroup],
) -> Callable[[QueryGroupConfig, str], QueryGroup]:
    """Start a query group on the cluster ``bootstrap`` (the integration suite's one
    query-group fixture, ``start_query_group``: every group started is stopped when the
    test ends)."""
    return lambda config, bootstrap: start_query_group(config, bootstrap_servers=bootstrap)


@pytest.fixture
def pause_before_commit(
    running_group: Callable[[QueryGroupConfig, str], QueryGroup],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Callable[[int], PausedCommit]]:
    """Arm the failpoint for micro-batch ``batch_id`` of every query group this test
    starts. Released when the test ends, before its groups are stopped (this fixture
    depends on ``running_group``, so it is torn down first)."""
    armed: list[PausedCommit] = []

    def arm(batch_id: int) -> PausedCommit:
        paused = PausedCommit(batch_id, tmp_path / f"release-before-commit-{batch_id}")
        monkeypatch.setenv(FAILPOINT_ENV, f"before-commit:{batch_id}:wait={paused.release_path}")
        armed.append(paused)
        return paused

    yield arm
    for paused in armed:
        paused.release()
