"""The admission service's scheduling: the check that starts jobs, and how jobs end.

Every ``check_interval_ms`` the check records jobs that ended, samples the load,
and starts what the admission rule (:class:`~admission.algorithm.Admission`) allows:
jobs that must start at once first, then the next load step's worth of enqueued
jobs in Submitted order, lanes disabled by a hard stall skipped. Only the leader
starts jobs; each start is a compare-and-set ``ENQUEUED -> RUNNING`` in the database
before the process starts, so two instances never start a job twice.

A job killed by a signal, or ending non-zero when it declared that abnormal
(``abnormal_exit``), is a **hard stall**: listed in the stall array and its lane
disabled until an operator enables it (``FG-ADM-005``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from admission.algorithm import Admission, Decision, Load, StartReason
from admission.config import AdmissionSettings
from admission.environment import job_environment
from admission.errors import AdmissionQueueFull, JobNotFound
from admission.jobs import JobRules, JobSpec
from admission.load import DriverHeaps
from admission.metrics import AdmissionMetrics
from admission.runner import ProcessRunner
from admission.store import IntakeSignature, Job, JobState, JobStore, StallKind
from pipeline.failpoints import armed
from pipeline.state.leader import LeaderElection

log = logging.getLogger(__name__)

#: The flag (``floodgate_flags``) that keeps a suspension across restarts.
SUSPENDED = "suspended"

#: The scheduler's failpoints (:mod:`pipeline.failpoints`), for crash tests:
#: ``FLOODGATE_FAILPOINT=claimed:<job id>`` kills the service (its own process alone,
#: with SIGKILL) right after it claimed the job (``ENQUEUED -> RUNNING``) and before it
#: starts the job's process; ``spawned:<job id>`` right after the process started and
#: before its pid is recorded. A restart recovers both (:meth:`Leadership.granted
#: <admission.leadership.Leadership.granted>`).
#: Unset in production; a job never sees it (its environment is built, not inherited).
FAILPOINTS = ("claimed", "spawned")


def _failpoint(name: str, job_id: int) -> None:
    if armed(name, job_id) == "":
        log.error("failpoint %s reached at job %d: killing the service", name, job_id)
        os.kill(os.getpid(), signal.SIGKILL)


class Scheduler:
    """Starts jobs when the load allows, records how they end, keeps the gauges.

    Args:
        settings: the ``[admission]`` config.
        store: the persistent job queue.
        runner: the job processes.
        admission: the admission rule (load step, emergency mode).
        rules: what a job may run and carry, checked again at start.
        metrics: the service's metric families.
        election: who leads (only the leader starts jobs).
        sampler: returns the current :class:`~admission.algorithm.Load`.
        heaps: the Spark drivers' heaps, or ``None``.
        base_env: what every job's environment starts from.
        clock: epoch seconds.

    Attributes:
        lock: taken by every change of the queue's count and every start and end.
        enqueued: jobs ENQUEUED (from the database when several instances share it).
        load: the last load sample.
        suspended: starts nothing queueable while set (``POST /suspend``).
        listeners: called with a job after each change of its state.
        on_part_ended: called with a request id when one of its parts ended.
    """

    def __init__(
        self,
        *,
        settings: AdmissionSettings,
        store: JobStore,
        runner: ProcessRunner,
        admission: Admission,
        rules: JobRules,
        metrics: AdmissionMetrics,
        election: LeaderElection,
        sampler: Callable[[], Load],
        heaps: DriverHeaps | None,
        base_env: dict[str, str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.runner = runner
        self.admission = admission
        self.rules = rules
        self.metrics = metrics
        self.election = election
        self.sampler = sampler
        self.heaps = heaps
        self.base_env = base_env
        self.clock = clock
        #: Several instances on one PostgreSQL database: counts come from it.
        self.shared = not settings.database_url.startswith("sqlite")
        self.lock = threading.RLock()
        self.enqueued = 0
        self.load = Load(cpu=0.0, memory=0.0)
        self.suspended = store.flag(SUSPENDED)
        self.listeners: list[Callable[[Job], None]] = []
        self.on_part_ended: Callable[[int], None] = lambda request_id: None

    def check(self) -> int:
        """One check: record ended jobs, sample load, start the next batch.

        Returns:
            How many enqueued jobs were started.
        """
        for ended in self.runner.poll():
            self.ended(ended.job_id, ended.exit_code)
        load = self.sampler()
        with self.lock:
            self.load = load
            change = self.admission.observe(load)
            if change is not None:
                log.warning(
                    "FG-ADM-%s emergency mode %s: %s",
                    "001" if change.entered else "002",
                    "entered" if change.entered else "left",
                    change.reason,
                )
            if self.suspended or not self.election.is_leader:
                return 0
            started = 0
            for job in self.store.next_asap(self.settings.max_load_step):
                how = StartReason.FORCED if job.queueable else StartReason.NOT_QUEUEABLE
                if self.start(job, how).state is JobState.RUNNING:
                    started += 1
            n = self.admission.tick(enqueued=self.enqueued, load=load)
            if n:
                skip = self.store.disabled_lanes()
                for job in self.store.next_enqueued(n, skip_lanes=skip):
                    if self.start(job, StartReason.DEQUEUED).state is JobState.RUNNING:
                        started += 1
        self.metrics.cpu.set(load.cpu)
        self.metrics.memory.set(load.memory)
        self.metrics.emergency.set(1 if self.admission.emergency else 0)
        self.metrics.load_step.set(self.admission.load_step)
        return started

    def admit(
        self,
        spec: JobSpec,
        *,
        request_id: int | None = None,
        role: str | None = None,
        client_key: str | None = None,
        signature: IntakeSignature | None = None,
    ) -> Job:
        """Store a checked job and start it at once, or leave it enqueued (the job
        queue's rule: :meth:`Admission.on_submit <admission.algorithm.Admission.on_submit>`).

        Args:
            spec: the job command, checked by :class:`~admission.jobs.JobRules`.
            request_id / role: for the parts and the completion step of a request.
            client_key: the key of the request message it came from (Kafka intake).
            signature: the signed request it came from (Kafka intake), recorded with
                the job (:meth:`JobStore.add <admission.store.JobStore.add>`).

        Returns:
            The job as stored: RUNNING, ENQUEUED, or ended if its start failed.

        Raises:
            AdmissionQueueFull: ``max_queue_size`` jobs are enqueued already.
            IntakeSignatureTaken: ``signature`` was recorded already; nothing stored.
        """
        if self.shared and self.enqueued + 1 >= 0.9 * self.settings.max_queue_size:
            # Other instances enqueue too: near the bound, count in the database.
            count = self.store.count_enqueued()
            with self.lock:
                self.enqueued = count
        with self.lock:
            outcome = self.admission.on_submit(
                queueable=spec.queueable, enqueued=self.enqueued, load=self.load
            )
            if outcome.decision is Decision.REJECT:
                self.metrics.rejections.labels("queue-full").inc()
                log.warning("FG-ADM-004 submit refused: %s", outcome.reason)
                raise AdmissionQueueFull(
                    f"job queue full: {self.enqueued} jobs enqueued, max_queue_size is "
                    f"{self.settings.max_queue_size}; raise admission.max_queue_size or "
                    "submit later"
                )
            # A suspended service, or a lane disabled by a hard stall, starts nothing
            # but jobs that are not queueable.
            held_back = self.suspended or spec.lane in self.store.disabled_lanes()
            start = outcome.decision is Decision.START and (
                not held_back or outcome.start_reason is StartReason.NOT_QUEUEABLE
            )
            # A follower starts nothing: what must start at once is left to the leader.
            asap = outcome.start_reason is StartReason.NOT_QUEUEABLE and not self.election.is_leader
            start = start and self.election.is_leader
            job = self.store.add(
                argv=list(spec.argv),
                cwd=spec.cwd,
                env=dict(spec.env),
                queueable=spec.queueable,
                expected_s=spec.expected_s,
                abnormal_exit=spec.abnormal_exit,
                lane=spec.lane,
                state=JobState.ENQUEUED.value,
                submitted=self.clock(),
                request_id=request_id,
                role=role,
                client_key=client_key,
                asap=asap,
                signature=signature,
            )
            self.enqueued += 1
            if start:
                assert outcome.start_reason is not None
                job = self.start(job, outcome.start_reason)
            else:
                why = "for the leader to start" if asap else outcome.reason
                log.info("job %d enqueued: %s", job.id, why)
                self.notify(job.id)
        return job

    def run(self, stop: threading.Event) -> None:
        interval = self.settings.check_interval_ms / 1000.0
        beat = 0
        while not stop.wait(interval):
            try:
                self.check()
                beat += 1
                if beat % max(1, round(1.0 / interval)) == 0:
                    self.refresh_gauges()  # about once a second: counts by state
            except Exception:
                log.exception("admission check failed")

    def get(self, job_id: int) -> Job:
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        return job

    def start(self, job: Job, how: StartReason) -> Job:
        """Claim an ENQUEUED job (``ENQUEUED -> RUNNING`` in the database), then start
        its process (under ``self.lock``). A job claimed by another instance, or
        cancelled meanwhile, is left alone and returned as it now is.

        The allowlist and the env deny-list are checked again first: a job enqueued
        before its program left the allowlist is ABORTED with the reason, not started.
        A process that cannot be spawned (a missing program, a NUL byte) ends the job
        as ERROR with the reason: never RUNNING without a process."""
        now = self.clock()
        refusal = self.rules.refusal_at_start(job)
        if refusal is not None:
            if self.store.update(
                job.id,
                expect=[JobState.ENQUEUED],
                state=JobState.ABORTED.value,
                finished=now,
                note=f"refused at start: {refusal}",
            ):
                self.enqueued -= 1
                self.metrics.rejections.labels("not-allowed").inc()
                log.warning("FG-ADM-004 job %d refused at start: %s", job.id, refusal)
                self.notify(job.id)
                if job.request_id is not None and job.role == "part":
                    self.on_part_ended(job.request_id)
            return self.get(job.id)
        if not self.store.claim(job.id, now=now, how=how.value, instance=self.election.instance):
            return self.get(job.id)
        self.enqueued -= 1
        _failpoint("claimed", job.id)
        env = job_environment(self.base_env, job.env, job.id)
        try:
            program = self.rules.resolve(job.argv)  # on the allowlist: refusal_at_start
            started = self.runner.start(job.id, job.argv, program=program, cwd=job.cwd, env=env)
        except Exception as exc:  # whatever it was, no process runs
            self.store.update(
                job.id,
                expect=[JobState.RUNNING],
                state=JobState.ERROR.value,
                finished=now,
                note=f"could not start: {type(exc).__name__}: {exc}",
            )
            log.error("job %d could not start: %s: %s", job.id, type(exc).__name__, exc)
            self.notify(job.id)
            if job.request_id is not None and job.role == "part":
                self.on_part_ended(job.request_id)
            return self.get(job.id)
        _failpoint("spawned", job.id)
        self.store.update(
            job.id,
            pid=started.pid,
            log_path=started.log_path,
            pid_created=started.created,
            pid_cmdline=started.cmdline,
        )
        self.metrics.starts.labels(how.value).inc()
        self.metrics.wait.observe(max(0.0, now - job.submitted))
        log.info("job %d started (%s), pid %d", job.id, how.value, started.pid)
        self.notify(job.id)
        return self.get(job.id)

    def ended(self, job_id: int, exit_code: int | None) -> None:
        """Record how a job's process ended, and tell the listeners.

        Under ``self.lock``, as :meth:`_start` is: a job that ends within
        milliseconds (``true``) is seen ended by the check thread while the thread
        that started it may still be announcing it. Without the lock that thread
        read the job back FINISHED_OK, so its RUNNING event was published as a second
        FINISHED_OK, possibly after the first (found on Apache Kafka under load).
        """
        with self.lock:
            self._record_end(job_id, exit_code)

    def _record_end(self, job_id: int, exit_code: int | None) -> None:
        job = self.store.get(job_id)
        if job is None or job.state is not JobState.RUNNING:
            return
        now = self.clock()
        if exit_code is None:
            state, note = JobState.UNKNOWN, "adopted process ended; exit status unknown"
        elif exit_code == 0:
            state, note = JobState.FINISHED_OK, None
        else:
            state, note = JobState.ERROR, f"exit status {exit_code}"
        if not self.store.update(
            job_id,
            expect=[JobState.RUNNING],
            state=state.value,
            finished=now,
            exit_code=exit_code,
            note=note,
        ):
            return  # recorded already (another instance watching the same process)
        self.store.delete_stalls(job_id=job_id, kind=StallKind.LONG_RUNNING)
        self.notify(job_id)
        if job.request_id is not None and job.role == "part":
            self.on_part_ended(job.request_id)
        abnormal = exit_code is not None and (
            exit_code < 0 or (exit_code > 0 and job.abnormal_exit)
        )
        if abnormal:
            assert exit_code is not None
            reason = (
                f"killed by signal {-exit_code}" if exit_code < 0 else f"exit status {exit_code}"
            )
            self.store.add_stall(job_id, StallKind.HARD, reason, now)
            self.store.set_lane(
                job.lane, enabled=False, reason=f"job {job_id} hard-stalled: {reason}", now=now
            )
            log.error(
                "FG-ADM-005 job %d hard stall (%s): lane %s disabled until enabled",
                job_id,
                reason,
                job.lane,
            )

    def free(self, job_id: int, why: str, now: float) -> bool:
        """Take a job out of the queue (ABORTED) if it is still ENQUEUED; whether it was."""
        with self.lock:
            if self.store.update(
                job_id,
                expect=[JobState.ENQUEUED],
                state=JobState.ABORTED.value,
                finished=now,
                note=why,
            ):
                self.enqueued -= 1
                return True
        return False

    def abort(self, job: Job, why: str) -> None:
        now = self.clock()
        if job.state is JobState.ENQUEUED:
            self.free(job.id, why, now)
        elif job.state is JobState.RUNNING:
            self.store.update(
                job.id,
                expect=[JobState.RUNNING],
                state=JobState.ABORTED.value,
                finished=now,
                note=why,
            )
            self.runner.stop(job.id)
        log.warning("job %d aborted: %s", job.id, why)
        self.notify(job.id)

    def notify(self, job_id: int) -> None:
        """Tell the listeners a job's state changed; a failing listener is logged, not raised."""
        if not self.listeners:
            return
        job = self.store.get(job_id)
        if job is None:
            return
        for listener in self.listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job %d: a state listener failed", job_id)

    def refresh_gauges(self) -> None:
        counts = self.store.count_by_state()
        for state, n in counts.items():
            self.metrics.jobs.labels(state.value).set(n)
        if self.shared:  # other instances enqueue and start too
            with self.lock:
                self.enqueued = counts[JobState.ENQUEUED]
        if self.heaps is not None:
            self.metrics.driver_heap.clear()  # drivers that stopped drop out
            for name, ratio in self.heaps.ratios().items():
                self.metrics.driver_heap.labels(name).set(ratio)
        kinds = {k: 0 for k in StallKind}
        for stall in self.store.stalls():
            kinds[stall.kind] += 1
        for kind, n in kinds.items():
            self.metrics.stalls.labels(kind.value).set(n)
