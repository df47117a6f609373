"""Starting jobs as processes, watching them end, stopping them.

Each job runs in a session of its own (``start_new_session``), so stopping it stops
everything it started (a ``spark-submit`` and its JVM); its output goes to
``<log_dir>/<job id>.log`` (mode 0600, never opened through a symbolic link; the
folder created 0700, and refused at start when another user owns it or others can
write to it: a job's output is its owner's, and a link planted at its name could
send it to any file the service may write).
The program is the allowlisted absolute path the service resolved, never
looked up on ``PATH`` again at run time, run with ``argv[0]`` as the job gave it, and
the environment is exactly the one the service built (:mod:`admission.environment`):
nothing of the service's own is added.

A process's identity is its pid *and* its start time (:func:`start_since_boot`: the
kernel's clock ticks from boot to the process's start, which a later process on the
same pid cannot share), recorded with its command line when it starts. A service restarted while
jobs run adopts a recorded pid only when the process there has that start time and
is still the job's: its command line as recorded, or -- when the program has since
``exec``'d another (``spark-submit`` becomes ``spark-class``, then ``java``) -- the
job's id in its environment (``FLOODGATE_ADMISSION_JOB_ID``). A pid reused by an
unrelated process is not adopted, so cancelling the job never signals it.

A service killed after it started a job's process and before it recorded the pid
(SIGKILL, a power loss) leaves a RUNNING job with no pid: :meth:`ProcessRunner.find` finds its
process by what only that process has -- it leads a session of its own, carries the
job's id in its environment, writes its output to the job's log, and started after
the job was claimed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from admission.environment import JOB_ID_VARIABLE
from pipeline.state.files import private_dir, private_file

log = logging.getLogger(__name__)

#: The setting that names the log folder, in refusals.
LOG_DIR_KEY = "admission.log_dir"


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


@dataclass(frozen=True)
class Started:
    """A job's process, as started.

    Attributes:
        pid: its pid.
        log_path: where its output goes.
        created: its start time, seconds since boot (``None``: it could not be read).
        cmdline: its command line once started (a script's interpreter first, as the
            kernel ran it; ``None``: it could not be read).
    """

    pid: int
    log_path: str
    created: float | None
    cmdline: list[str] | None


def start_since_boot(process: psutil.Process) -> float:
    """When ``process`` started, in seconds since the host booted, to the clock tick
    (``SC_CLK_TCK``, 1/100 s on Linux): ``psutil``'s start time minus its boot time,
    both of the wall clock read now, so a clock step between a job's start and its
    adoption does not move it.

    Raises:
        psutil.Error: the process cannot be read.
    """
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    return round((process.create_time() - psutil.boot_time()) / tick) * tick


def process_identity(pid: int) -> tuple[float | None, list[str] | None]:
    """``(start time in seconds since boot, command line)`` of a process; either is
    ``None`` when it cannot be read (the process is gone, or not ours). Never raises."""
    try:
        process = psutil.Process(pid)
        created: float | None = start_since_boot(process)
    except Exception:  # whatever psutil raises here, the identity is unknown
        return None, None
    return created, _cmdline(process)


class ProcessRunner:
    """The job processes of one service.

    Args:
        log_dir: where job output goes; made 0700 if missing
            (:func:`~pipeline.state.files.private_dir`).

    Raises:
        ConfigError: ``log_dir`` is another user's, or others can write to it (key
            ``admission.log_dir``; names the path and its mode): a job's log could be
            swapped for a link to another file.
        OSError: ``log_dir`` cannot be created.
    """

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = private_dir(log_dir, key=LOG_DIR_KEY)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._adopted: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()

    def start(
        self,
        job_id: int,
        argv: Sequence[str],
        *,
        program: str | None = None,
        cwd: str | None,
        env: Mapping[str, str],
    ) -> Started:
        """Start a job's process: the file ``program`` (its allowlisted path; default
        ``argv[0]``), given ``argv`` as it was submitted (``argv[0]`` too: a program that
        dispatches on its name sees the name that was allowlisted), with exactly ``env``
        as its environment.

        Returns:
            The process as started (once this returns, it is watched).

        Raises:
            OSError: the program could not be started (missing, not executable, a
                missing ``cwd``, the log not writable); an
                :class:`~pipeline.errors.UntrustedFileError` when the log's name is a
                symbolic link, or not a regular file of ours (nothing is written to
                it).
            ValueError: ``argv``, ``cwd`` or ``env`` holds what ``execve`` cannot carry
                (a NUL byte, ``=`` in a name). Either way no process runs; the caller
                records the job as ERROR with the reason.
        """
        log_path = self.log_path(job_id)
        out = private_file(log_path, os.O_WRONLY | os.O_APPEND)  # an earlier run's: appended
        try:
            process = subprocess.Popen(
                list(argv),
                executable=program,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(out)
        with self._lock:
            self._children[job_id] = process
        # Popen returns once the program was exec'd: this is its command line (a
        # zombie's, if it ended already, cannot be read: None).
        created, cmdline = process_identity(process.pid)
        return Started(process.pid, str(log_path), created, cmdline)

    def adopt(
        self, job_id: int, pid: int, *, created: float | None, cmdline: Sequence[str] | None
    ) -> str | None:
        """Watch a job's process started by an earlier run of the service, if the process
        at ``pid`` is still that job's.

        Args:
            job_id: the job.
            pid: its recorded pid.
            created: its recorded start time (seconds since boot); ``None`` (not
                recorded) adopts nothing: the pid alone proves nothing.
            cmdline: its recorded command line.

        Returns:
            ``None`` when adopted; otherwise why not (the process is gone, or the pid
            is another process's now).
        """
        if created is None:
            return f"pid {pid}: no start time was recorded to tell it from a reused pid"
        try:
            process = psutil.Process(pid)
            if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                return f"pid {pid} has ended"
            now_created = start_since_boot(process)
        except psutil.NoSuchProcess:
            return f"pid {pid} has ended"
        except psutil.Error as exc:
            return f"pid {pid} cannot be inspected ({exc})"
        if abs(now_created - created) > 0.5 / os.sysconf("SC_CLK_TCK"):  # another tick
            return (
                f"pid {pid} is another process now (started {now_created:.2f} s after boot, "
                f"the job's {created:.2f} s)"
            )
        if not self._still_the_job(process, job_id, cmdline):
            return (
                f"pid {pid} runs another command now ({_cmdline(process)!r}) and does not "
                f"carry {JOB_ID_VARIABLE}={job_id}"
            )
        with self._lock:
            self._adopted[job_id] = process
        return None

    def log_path(self, job_id: int) -> Path:
        """Where the job's output goes; created just before its process starts
        (:meth:`start`), so a job whose log is missing was never started."""
        return self.log_dir / f"{job_id}.log"

    def find(self, job_id: int, *, claimed: float) -> Started | None:
        """Find and watch the process of a job started by an earlier run of the service
        that was killed before it recorded the pid.

        The job's process is the one that leads a session of its own (:meth:`start`
        makes one per job), carries ``FLOODGATE_ADMISSION_JOB_ID=<job_id>``, has the
        job's log (:meth:`log_path`) as its standard output, and started at or after
        ``claimed``: another service's job of the same id writes to another log, and
        the job's own children lead no session.

        Args:
            job_id: the job.
            claimed: when the job was claimed (epoch seconds, the ``started`` column),
                before its process started.

        Returns:
            The process, now watched (as :meth:`adopt` would), or ``None`` when no live
            process is the job's (it never started, or it ended). Never raises.
        """
        path = self.log_path(job_id)
        log_path = str(path.resolve())
        # The claim in seconds since boot, as the kernel counts a process's start (the
        # wall clock's start time psutil derives is up to 1 s early: whole-second boot
        # time); a second's slack for a clock step since.
        since_boot = claimed - time.time() + time.clock_gettime(time.CLOCK_BOOTTIME)
        for process in psutil.process_iter():
            try:
                if os.getsid(process.pid) != process.pid:
                    continue
                if process.environ().get(JOB_ID_VARIABLE) != str(job_id):
                    continue
                if os.readlink(f"/proc/{process.pid}/fd/1") != log_path:
                    continue
                created = start_since_boot(process)
                if created < since_boot - 1.0 or not _alive(process):
                    continue
            except (psutil.Error, OSError):
                continue  # gone meanwhile, or not ours to read: not the job's
            with self._lock:
                self._adopted[job_id] = process
            return Started(process.pid, str(path), created, _cmdline(process))
        return None

    @staticmethod
    def _still_the_job(process: psutil.Process, job_id: int, cmdline: Sequence[str] | None) -> bool:
        if cmdline and _cmdline(process) == list(cmdline):
            return True
        try:
            return process.environ().get(JOB_ID_VARIABLE) == str(job_id)
        except psutil.Error:
            return False

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
                if not _alive(adopted):
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
            if adopted is not None and not _alive(adopted):
                return True
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return True


def _cmdline(process: psutil.Process) -> list[str] | None:
    try:
        return list(process.cmdline())
    except Exception:  # a zombie's, or another user's: unknown
        return None


def _alive(process: psutil.Process) -> bool:
    """Whether ``process`` still runs (a zombie -- ended, its parent has not reaped it
    yet -- does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
