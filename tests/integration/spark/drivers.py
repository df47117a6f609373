"""A query group's driver as ``floodgate run`` in a process group of its own, as the
crash-recovery, query-group CLI and Spark cluster tests start, kill and watch it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

DRIVER_TIMEOUT_S = 240.0


def start_driver(
    config_path: Path, bootstrap: str, log_path: Path, **env: str
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.cli",
                "run",
                str(config_path),
                "--bootstrap",
                bootstrap,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **env},
        )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def committed_and_end(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        committed = sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10))
        end = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
        return committed, end
    finally:
        consumer.close()


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(
        f"timed out waiting for {what}; driver log:\n{log_path.read_text()[-4000:]}"
    )
