"""A symbolic link planted at the next job's log name, as the service meets it (job
ids are sequential, so the name is predictable): it once received the job's output,
and the file it named became 0600. The job now ends ERROR with the
reason, and the file is left as it was."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.admission_service import Service, wait_for


@pytest.mark.no_kafka
def test_a_job_whose_log_name_is_a_planted_symlink_ends_error_and_writes_nothing_there(
    serve: Callable[..., Service], tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    target = tmp_path / "someone-else-s.txt"
    target.write_text("kept\n")
    target.chmod(0o644)
    (logs / "1.log").symlink_to(target)  # the first job's log
    service = serve(allowlist=["env"], job_path="/usr/bin:/bin")

    job = service.submit(["env"], env={}, queueable=False)
    wait_for(lambda: service.job(job["id"])["state"] == "ERROR", "the job to be refused its log")

    ended = service.job(job["id"])
    assert job["id"] == 1
    assert ended["pid"] is None
    assert "could not start" in ended["note"] and "1.log is a symbolic link" in ended["note"]
    assert target.read_text() == "kept\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
