"""A pytest plugin (registered by ``tests/conftest.py``): when the test process dies on
a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL), the Python stacks of its
threads go to a file that ``scripts/pytest-or-crash`` prints after pytest has died.

Pytest's own ``faulthandler`` plugin writes them to stderr, every thread's, the thread
that crashed among them and the main thread last: a CI log that keeps only its tail
then shows pytest's own frames and not the test's. The file is printed whole, then the
thread that crashed alone, last.
"""

from __future__ import annotations

import faulthandler
import os
from pathlib import Path
from typing import IO

import pytest

#: The environment variable naming the file (set by ``scripts/pytest-or-crash``).
CRASH_LOG_ENV = "FLOODGATE_TEST_CRASH_LOG"

_log = pytest.StashKey[IO[str]]()
_test = pytest.StashKey[Path]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After pytest's ``faulthandler`` plugin: the stacks go to the file instead of
    stderr (``faulthandler.enable`` keeps one file, the last one given)."""
    path = os.environ.get(CRASH_LOG_ENV)
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # a pytest-xdist worker (make test runs two): a file of its own
        path = f"{path}.{worker}"
    log = open(path, "w", encoding="utf-8")  # noqa: SIM115 - open for the whole run
    config.stash[_log] = log
    config.stash[_test] = Path(f"{path}.test")
    faulthandler.enable(file=log, all_threads=True)


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Before pytest's plugin disables the handler: the file is closed after it."""
    log = config.stash.get(_log, None)
    if log is not None:
        faulthandler.enable()  # back on stderr until pytest's plugin disables it
        log.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The running test's id, in ``<file>.test``, before its fixtures are set up."""
    test = item.config.stash.get(_test, None)
    if test is not None:
        test.write_text(item.nodeid, encoding="utf-8")
