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

import contextlib
import signal
from types import FrameType

import psutil
import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _forward(signum: int, frame: FrameType | None) -> None:
    """In pytest-xdist's controller, which runs no test: the signal goes on to its
    workers (its only children), each of which tears its own fixtures down and ends;
    the run ends when they have. Raised here instead, the controller would stop its
    workers after 10 s, perhaps in the middle of a teardown."""
    for worker in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signum)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM into ``KeyboardInterrupt`` for this run (main thread only, where
    pytest runs the tests); under pytest-xdist (``-n 2``), forward it to the workers."""
    controller = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    signal.signal(signal.SIGTERM, _forward if controller else _interrupt)
