"""`floodgate admission serve` in a process of its own, as the admission tests and the
Kafka SASL test drive it: the token it is started with, its allowlisted ``sleep``,
and :class:`Service`, what the ``serve`` fixture (``conftest.py``) hands a test."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

TOKEN = "t0ken-for-tests"


SLEEP = "/bin/sleep" if os.path.exists("/bin/sleep") else "/usr/bin/sleep"


@dataclass
class Service:
    """A running `floodgate admission serve`."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def call(self, method: str, path: str, *, token: str | None = TOKEN, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kw)

    def submit(self, argv: list[str], **fields: Any) -> dict[str, Any]:
        response = self.call("POST", "/jobs", json={"argv": argv, **fields})
        assert response.status_code == 201, response.text
        return dict(response.json())

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.call("GET", f"/jobs/{job_id}").json())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
