"""SIGTERM to a test run tears its fixtures down (``tests/interrupt.py``): a process a
fixture started is stopped by the fixture, not left running after pytest is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: A test whose fixture starts a process and stops it at teardown; the test waits.
TEST = """
import os, subprocess, time
from pathlib import Path

import pytest

@pytest.fixture
def service():
    process = subprocess.Popen(["sleep", "600"])
    Path(os.environ["SERVICE_PID"]).write_text(str(process.pid))
    yield process
    process.terminate()
    process.wait()

def test_waits(service):
    Path(os.environ["READY"]).touch()
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
def test_sigterm_tears_the_fixtures_down(tmp_path: Path, workers: list[str]) -> None:
    """In one process, and under pytest-xdist as ``make test`` runs (``-n 2``): SIGTERM
    reaches the controller alone, as a CI runner's timeout sends it."""
    (tmp_path / "test_waiting.py").write_text(textwrap.dedent(TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SERVICE_PID": str(tmp_path / "service.pid"),
        "READY": str(tmp_path / "ready"),
    }
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.interrupt",
            "-p",
            "no:cacheprovider",
            *workers,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    service_pid = None
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "the test never started"
            time.sleep(0.05)
        service_pid = int((tmp_path / "service.pid").read_text())
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=60)[0]
        assert run.returncode == 2, output  # interrupted
        # pytest's report, or pytest-xdist's of the worker that was interrupted.
        assert "KeyboardInterrupt" in output or "keyboard-interrupt" in output, output
        assert not alive(service_pid), f"the fixture's process {service_pid} outlived the run"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if service_pid is not None and alive(service_pid):
            os.kill(service_pid, signal.SIGKILL)
