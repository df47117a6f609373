"""The admission service's monitor: long-running jobs and in-doubt parts in the stall array."""

from __future__ import annotations

import logging
import threading

from admission.scheduler import Scheduler
from admission.store import JobState, StallKind
from pipeline.state.leader import LeaderElection

log = logging.getLogger(__name__)


class StallMonitor:
    """Every ``monitor_interval_s``, the leader flags jobs running past their expected
    time (long-running entries of the stall array, ``FG-ADM-006``; not errors) and
    clears the entries of jobs that ended.

    Args:
        scheduler: the service's scheduler (its store, clock and gauges).
        election: who leads (a follower monitors nothing).
        interval_s: seconds between two passes.
    """

    def __init__(self, scheduler: Scheduler, election: LeaderElection, interval_s: float) -> None:
        self.scheduler = scheduler
        self.election = election
        self.interval_s = interval_s

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.monitor()
            except Exception:
                log.exception("admission monitor failed")

    def monitor(self) -> None:
        """Flag jobs running past their expected time (long-running entries of the
        stall array, not errors); clear the flags of jobs that ended, and the in-doubt
        entries of backed-out parts that have ended. The leader's work: a follower does
        nothing."""
        if not self.election.is_leader:
            return
        now = self.scheduler.clock()
        flagged = {s.job_id for s in self.scheduler.store.stalls(kind=StallKind.LONG_RUNNING)}
        running = {j.id: j for j in self.scheduler.store.in_state(JobState.RUNNING)}
        for job_id in flagged - set(running):
            self.scheduler.store.delete_stalls(job_id=job_id, kind=StallKind.LONG_RUNNING)
        for stall in self.scheduler.store.stalls(kind=StallKind.IN_DOUBT):
            if stall.job_id not in running:  # the part ended: no doubt is left
                self.scheduler.store.delete_stall(stall.id)
                log.info(
                    "stall %d: in-doubt part job %d has ended: cleared", stall.id, stall.job_id
                )
        for job in running.values():
            if (
                job.id not in flagged
                and job.expected_s is not None
                and job.started is not None
                and now - job.started > job.expected_s
            ):
                reason = f"running {now - job.started:.0f} s, expected {job.expected_s:.0f} s"
                self.scheduler.store.add_stall(job.id, StallKind.LONG_RUNNING, reason, now)
                log.warning("FG-ADM-006 job %d long-running: %s", job.id, reason)
        self.scheduler.refresh_gauges()
