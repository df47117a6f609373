"""What is done to the admission service's queue besides submitting: start-now,
cancel, suspend and resume, enable a lane, reschedule an entry of the stall array.

Start-now and cancelling an enqueued job work on any instance (a follower marks a
start-now job ``asap``, and the leader starts it at its next check); stopping a
running job, suspending and resuming are the leader's
(:meth:`Leadership.require <admission.leadership.Leadership.require>`). A suspension
is a flag in the database, so it outlives restarts and leader changes. Log code
``FG-ADM-003``: a start forced by start-now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict

from admission.algorithm import StartReason
from admission.errors import JobConflict, JobNotFound
from admission.jobs import JobSpec
from admission.leadership import Leadership
from admission.requests import Requests
from admission.scheduler import SUSPENDED, Scheduler
from admission.store import FINAL_STATES, Job, JobState, RequestState, StallKind

log = logging.getLogger(__name__)


class QueueControls:
    """The operator's controls of one admission service's queue, lanes and stall array.

    Args:
        scheduler: the service's scheduler (its store, lock, clock, starts and aborts).
        leadership: who leads (only the leader stops, suspends and resumes).
        requests: the service's requests (a stalled completion step is scheduled again
            through them).
        submit: the service's submit (the job's rules checked, then start, enqueue or
            refuse it), for a hard-stalled job's command scheduled again.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        leadership: Leadership,
        requests: Requests,
        submit: Callable[[JobSpec], Job],
    ) -> None:
        self.scheduler = scheduler
        self.store = scheduler.store
        self.leadership = leadership
        self.requests = requests
        self.submit_job = submit

    def start_now(self, job_id: int) -> Job:
        """Start an enqueued job at once, whatever the load (logged as forced); on a
        follower, mark it for the leader to start at its next check.

        Returns:
            The job as stored after the start (or the mark).

        Raises:
            JobNotFound, JobConflict: no such job; it is not enqueued.
        """
        with self.scheduler.lock:
            job = self.scheduler.get(job_id)
            if job.state is not JobState.ENQUEUED:
                raise JobConflict(f"job {job_id} is {job.state.value}, not ENQUEUED")
            if not self.leadership.is_leader:
                if not self.store.update(job_id, expect=[JobState.ENQUEUED], asap=True):
                    raise JobConflict(f"job {job_id} left ENQUEUED")
                log.warning(
                    "FG-ADM-003 job %d: start forced (start-now); the leader %s starts it",
                    job_id,
                    self.leadership.leader_name(),
                )
                return self.scheduler.get(job_id)
            log.warning("FG-ADM-003 job %d: start forced (start-now)", job_id)
            return self.scheduler.start(job, StartReason.FORCED)

    def cancel(self, job_id: int) -> Job:
        """Abort a job: an enqueued one is taken out of the queue, a running one stopped.

        Returns:
            The job as stored after the abort.

        Raises:
            JobNotFound, JobConflict: no such job; it has ended already.
            NotLeader: the job is running and this instance does not lead.
        """
        job = self.scheduler.get(job_id)
        if job.state in FINAL_STATES:
            raise JobConflict(f"job {job_id} has ended ({job.state.value})")
        if job.state is JobState.RUNNING:
            self.leadership.require(f"stop running job {job_id}")
        self.scheduler.abort(job, "cancelled")
        return self.scheduler.get(job_id)

    def suspend(self, *, at_once: bool = False) -> None:
        """Stop starting jobs until :meth:`resume`, across restarts and leader changes
        (the flag is in the database); ``at_once`` also aborts every running and
        enqueued job.

        Raises:
            NotLeader: this instance does not lead (suspend the leader).
        """
        self.leadership.require("suspend")
        with self.scheduler.lock:
            self.store.set_flag(
                SUSPENDED, True, reason="at once" if at_once else None, now=self.scheduler.clock()
            )
            self.scheduler.suspended = True
        log.warning("admission suspended%s", " at once" if at_once else "")
        if at_once:
            for state in (JobState.ENQUEUED, JobState.RUNNING):
                for job in self.store.in_state(state):
                    self.scheduler.abort(job, "suspended at once")

    def resume(self) -> None:
        """Start jobs again after :meth:`suspend`.

        Raises:
            NotLeader: this instance does not lead.
        """
        self.leadership.require("resume")
        with self.scheduler.lock:
            self.store.set_flag(SUSPENDED, False, reason=None, now=self.scheduler.clock())
            self.scheduler.suspended = False
        log.warning("admission resumed")

    def enable_lane(self, name: str) -> None:
        """Let jobs of a lane disabled by a hard stall start again."""
        self.store.set_lane(name, enabled=True, reason=None, now=self.scheduler.clock())
        log.warning("lane %s enabled", name)

    def reschedule(self, stall_id: int) -> Job:
        """Schedule a hard stall again and clear its entry of the stall array: a stalled
        request's completion step is scheduled again; a job's command is submitted
        again (a new job).

        Returns:
            The new job (the completion step's, or the command's).

        Raises:
            JobNotFound: no such stall entry, or its job is gone.
            JobConflict: the entry is not a hard stall; its request is being
                rescheduled; the completion step could not be scheduled again.
            CommandNotAllowed, EnvNotAllowed, InvalidJob, AdmissionQueueFull: the
                command is refused again (:meth:`AdmissionService.submit
                <admission.service.AdmissionService.submit>`).
        """
        found = self.store.stall(stall_id)
        if found is None:
            raise JobNotFound(f"no stall entry {stall_id}")
        if found.kind is not StallKind.HARD:
            raise JobConflict(f"stall entry {stall_id} is {found.kind.value}, not a hard stall")
        if found.request_id is not None:
            row = self.store.request(found.request_id)
            if row is not None and row["state"] == RequestState.STALLED.value:
                if not self.store.set_request(
                    found.request_id, RequestState.SCHEDULED, expect=[RequestState.STALLED]
                ):
                    raise JobConflict(f"request {found.request_id} is being rescheduled")
                self.store.delete_stall(stall_id)
                if not self.requests.complete(
                    found.request_id, row["completion"], last=found.job_id
                ):
                    raise JobConflict(
                        f"stall {stall_id}: {self.requests.request(found.request_id)['reason']}"
                    )
                jobs = self.store.of_request(found.request_id)
                log.warning(
                    "stall %d: request %d's completion step rescheduled", stall_id, found.request_id
                )
                return jobs[-1]
        stall = self.store.delete_stall(stall_id)
        if stall is None:
            raise JobNotFound(f"no stall entry {stall_id}")
        old = self.scheduler.get(stall.job_id)
        job = self.submit_job(JobSpec.from_fields(asdict(old)))
        log.warning("stall %d: job %d rescheduled as job %d", stall_id, old.id, job.id)
        self.scheduler.refresh_gauges()
        return job
