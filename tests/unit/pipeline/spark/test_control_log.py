"""The control endpoint's URL line is news, not a warning: logged at INFO by
``pipeline.spark.control``, so ``floodgate run`` at its default level (WARNING) does not
flag it, and ``-v`` or a JSON log shows it with the right level."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pipeline.spark.control import ControlServer


class _Group:
    name = "flights"

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def status(self) -> dict[str, Any]:
        return {"query_group": self.name, "state": "EXECUTING"}

    def release(self) -> None:
        pass

    def request_stop(self) -> None:
        pass


def test_the_metrics_url_is_logged_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ControlServer(
        _Group(),
        host="127.0.0.1",
        port=0,
        control_dir=str(tmp_path),
        token="control-token-for-the-log-test-0123",
    )
    with caplog.at_level(logging.DEBUG, logger="pipeline.spark.control"):
        server.start()
    try:
        lines = [r for r in caplog.records if f"{server.url}/metrics" in r.getMessage()]
    finally:
        server.stop()

    assert [(r.levelno, r.name) for r in lines] == [(logging.INFO, "pipeline.spark.control")]
