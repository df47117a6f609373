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

from tests.integration.helpers import wait_until

#: The admission token of the tests: 128 bits or more, as every bearer token must be.
TOKEN = "admission-token-for-tests-6f1c0e9a"
#: ``admission.intake_key`` of the tests that turn the request intake on.
INTAKE_KEY = "intake-key-for-tests-0123456789abcdef"


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
    """:func:`~tests.integration.helpers.wait_until`, an exception of ``predicate`` raised."""
    wait_until(predicate, timeout_s, what, tolerate=False, every_s=0.1)


def intake_settings(bootstrap: str, run_id: str) -> dict[str, Any]:
    """``serve`` settings that turn the signed request intake on, on topics and a
    consumer group of this test's own."""
    return {
        "intake": True,
        "intake_key": INTAKE_KEY,
        "bootstrap_servers": bootstrap,
        "consumer_group": f"admission.{run_id}",
        "request_topic": f"admission.requests.{run_id}",
        "events_topic": f"admission.events.{run_id}",
        "dead_letter_topic": f"admission.dead-letter.{run_id}",
    }


def write_request(
    producer: Any,
    topic: str,
    value: bytes,
    *,
    key: bytes | None = None,
    secret: str | None = INTAKE_KEY,
    headers: list[tuple[str, bytes]] | None = None,
) -> list[tuple[str, bytes]]:
    """Write one ``job_request`` record, signed with ``secret`` (``None``: unsigned) as
    a requester does (:func:`admission.signing.sign`); its headers."""
    from admission.signing import sign

    if headers is None:
        headers = (
            []
            if secret is None
            else sign(
                secret, topic=topic, key=key, value=value, signed_at_ms=int(time.time() * 1000)
            )
        )
    producer.produce(topic, key=key, value=value, headers=headers)
    return headers
