"""The leader's duties in the admission service: taking the leadership up, giving it
up, and naming the leader to whoever asks a follower for what only the leader does.

Several instances may share one database; a :class:`~pipeline.state.leader.LeaderElection`
grants one of them the leadership at run time. A new leader recovers the queue as a
restart does: it reads the suspension again, watches again the RUNNING jobs whose
processes are still there (adopted by pid on this host), finds, enqueues again or
gives up (UNKNOWN) the RUNNING jobs with no pid recorded, and makes the others
UNKNOWN; enqueued jobs stay enqueued. A follower refuses stopping a running job,
suspending and resuming with :class:`~admission.errors.NotLeader`, naming the leader
(the API answers 421 with its address).
"""

from __future__ import annotations

import logging
import socket

from admission.errors import NotLeader
from admission.scheduler import SUSPENDED, Scheduler
from admission.store import Job, JobState
from pipeline.state.leader import LeaderElection

log = logging.getLogger(__name__)


class Leadership:
    """This instance's part in the leadership of the admission service.

    Args:
        scheduler: the service's scheduler (its store, runner, clock, lock, metrics).
        election: who leads; :meth:`granted` and :meth:`revoked` are its
            ``on_granted`` and ``on_revoked``.
    """

    def __init__(self, scheduler: Scheduler, election: LeaderElection) -> None:
        self.scheduler = scheduler
        self.election = election

    @property
    def is_leader(self) -> bool:
        """Whether this instance starts jobs (it holds the database lock)."""
        return self.election.is_leader

    def granted(self) -> None:
        """Leadership granted: recover the queue as a restart does.

        A job stored RUNNING whose process is gone becomes UNKNOWN; one whose process
        is still there is watched again (its exit status cannot be known: it ends
        UNKNOWN). A RUNNING job with no pid recorded (the service was killed while it
        started it) is found, enqueued again, or UNKNOWN (:meth:`_recover_unrecorded`).
        Enqueued jobs stay enqueued.
        """
        self.scheduler.metrics.leader.set(1)
        with self.scheduler.lock:
            self._recover()

    def revoked(self) -> None:
        """Leadership lost: nothing more starts here. Processes this instance started go
        on; it still records how they end (the new leader adopts them as well: the
        first to record an end wins, by compare-and-set)."""
        self.scheduler.metrics.leader.set(0)

    def leader_name(self) -> str:
        """The leader as logs and refusals name it: ``<instance> at <address>``, or
        ``(none yet)`` when no instance has led."""
        holder = self.election.holder()
        if holder is None:
            return "(none yet)"
        return f"{holder.instance} at {holder.address or 'an unknown address'}"

    def require(self, what: str) -> None:
        """Refuse ``what`` (an action, as a refusal names it) unless this instance leads.

        Raises:
            NotLeader: this instance does not lead; the message names the leader.
        """
        if not self.is_leader:
            raise NotLeader(
                f"this instance ({self.election.instance}) does not lead: {what} at the "
                f"leader, {self.leader_name()}"
            )

    def _recover(self) -> None:
        store, runner = self.scheduler.store, self.scheduler.runner
        now = self.scheduler.clock()
        self.scheduler.suspended = store.flag(SUSPENDED)
        if self.scheduler.suspended:
            log.warning("admission suspended (since before this instance led): POST /resume")
        watched = set(runner.running())
        for job in store.in_state(JobState.RUNNING):
            if job.id in watched:
                continue
            why = (
                self._recover_unrecorded(job)
                if job.pid is None
                else runner.adopt(job.id, job.pid, created=job.pid_created, cmdline=job.pid_cmdline)
            )
            if why is not None:
                store.update(
                    job.id,
                    expect=[JobState.RUNNING],
                    state=JobState.UNKNOWN.value,
                    finished=now,
                    note=f"not adopted when this instance took the lead: {why}",
                )
                log.warning("job %d: was RUNNING, not adopted (%s): UNKNOWN", job.id, why)
        self.scheduler.enqueued = store.count_enqueued()

    def _recover_unrecorded(self, job: Job) -> str | None:
        """Recover a RUNNING job with no pid: a service killed between claiming it and
        recording its process. Claimed on this host, it is either

        * started: its process is found (:meth:`ProcessRunner.find
          <admission.runner.ProcessRunner.find>`), recorded and watched;
        * never started: its log, created just before the process starts, is missing;
          it is enqueued again (to start at once if it was not queueable), so it runs
          once;
        * in doubt: its log exists and no process is the job's. It may have run and
          ended while no service watched it, so it is not started again.

        Returns:
            ``None`` when recovered; otherwise why not (the job becomes UNKNOWN).
        """
        store, runner = self.scheduler.store, self.scheduler.runner
        host = (job.started_by or "").split(":", 1)[0]
        if host != socket.gethostname():
            return f"no pid was recorded, and it was started on host {host or 'unknown'}"
        found = runner.find(job.id, claimed=job.started or 0.0)
        if found is not None:
            store.update(
                job.id,
                pid=found.pid,
                log_path=found.log_path,
                pid_created=found.created,
                pid_cmdline=found.cmdline,
            )
            log.warning(
                "job %d: its process (pid %d) started before the service stopped and was "
                "not recorded: found by its job id, watched again",
                job.id,
                found.pid,
            )
            return None
        if not runner.log_path(job.id).exists():
            if store.update(
                job.id,
                expect=[JobState.RUNNING],
                state=JobState.ENQUEUED.value,
                started=None,
                start_reason=None,
                started_by=None,
                asap=not job.queueable,
            ):
                log.warning(
                    "job %d: claimed but never started before the service stopped: enqueued again",
                    job.id,
                )
            return None
        return (
            "no pid was recorded and no process is the job's: it may have run and ended "
            "while no service watched it, so it is not started again"
        )
