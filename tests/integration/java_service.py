"""A service of the tests run as a child process from a jar (S3Proxy, Apicurio
Registry): started with its output in a log file, waited on until it answers, and
stopped by its PID after."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def running_service(
    argv: Sequence[str],
    *,
    cwd: Path,
    log_path: Path,
    answers: Callable[[], bool],
    what: str,
    timeout_s: float,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running for the duration, once ``answers()`` says it is up.

    Args:
        argv: the command (``java ... -jar ...``).
        cwd: its working directory.
        log_path: where its stdout and stderr go.
        answers: whether it answers yet (called every 0.2 s).
        what: the service and where it listens, for the error ("S3Proxy at http://...").
        timeout_s: how long it may take to answer, seconds.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout_s`` (with the last
            30 lines of its log).
    """
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            list(argv), cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not answers():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"{what} did not answer (exit status {process.poll()}):\n{tail}")
            time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
