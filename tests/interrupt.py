"""A pytest plugin (registered by ``tests/conftest.py``): SIGTERM ends a test run
as Ctrl-C does.

A CI runner's timeout, ``timeout(1)`` or ``kill`` sends SIGTERM, whose default action
ends pytest at once: no fixture is torn down, and the brokers, PostgreSQL, Prometheus,
drivers and services the fixtures started outlive the run, holding their ports and
data directories. Raised as ``KeyboardInterrupt``, the signal makes pytest stop the
run and tear every fixture down (``pytest_sessionfinish``), as for Ctrl-C, then exit
with status 2 (interrupted).
"""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM into ``KeyboardInterrupt`` for this run (main thread only, where
    pytest runs the tests)."""
    signal.signal(signal.SIGTERM, _interrupt)
