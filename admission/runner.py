"""Starting jobs as processes, watching them end, stopping them.

Each job runs in a session of its own (``start_new_session``), so stopping it stops
everything it started (a ``spark-submit`` and its JVM); its output goes to
``<log_dir>/<job id>.log``. The program is the allowlisted absolute path the
service resolved, never looked up on ``PATH`` again at run time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Ended:
    """A job's process ended.

    Attributes:
        job_id: the job.
        exit_code: the exit status; negative for the signal that ended it (as
            ``subprocess``); ``None`` for an adopted process (not our child), whose
            status cannot be known.
    """

    job_id: int
    exit_code: int | None


class ProcessRunner:
    """The job processes of one service.

    Args:
        log_dir: where job output goes.
    """

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._adopted: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()

    def start(
        self, job_id: int, argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str]
    ) -> tuple[int, str]:
        """Start a job's process.

        Returns:
            ``(pid, log path)``.

        Raises:
            OSError: the program could not be started (the caller records the job as
                ERROR with the reason).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{job_id}.log"
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with self._lock:
            self._children[job_id] = process
        return process.pid, str(log_path)

    def adopt(self, job_id: int, pid: int) -> bool:
        """Watch a job's process started by an earlier run of the service.

        Returns:
            Whether the process is still there to watch.
        """
        try:
            process = psutil.Process(pid)
        except psutil.Error:
            return False
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return False
        with self._lock:
            self._adopted[job_id] = process
        return True

    def running(self) -> list[int]:
        """Ids of the jobs whose processes are watched."""
        with self._lock:
            return [*self._children, *self._adopted]

    def poll(self) -> list[Ended]:
        """The jobs whose processes ended since the last call."""
        ended: list[Ended] = []
        with self._lock:
            for job_id, process in list(self._children.items()):
                code = process.poll()
                if code is not None:
                    del self._children[job_id]
                    ended.append(Ended(job_id, code))
            for job_id, adopted in list(self._adopted.items()):
                if not adopted.is_running() or adopted.status() == psutil.STATUS_ZOMBIE:
                    del self._adopted[job_id]
                    ended.append(Ended(job_id, None))
        return ended

    def stop(self, job_id: int, *, grace_s: float = 5.0) -> bool:
        """SIGTERM the job's process group, SIGKILL after ``grace_s``.

        Returns:
            Whether there was a process to stop.
        """
        with self._lock:
            child = self._children.get(job_id)
            adopted = self._adopted.get(job_id)
        pid = child.pid if child is not None else adopted.pid if adopted is not None else None
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                return True
            if adopted is not None and not adopted.is_running():
                return True
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return True
