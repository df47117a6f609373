"""The admission service: starts jobs only when CPU and memory allow (README, "The
admission service").

:class:`AdmissionService` ties together the decision logic
(:class:`~admission.algorithm.Admission`), the persistent job queue
(:class:`~admission.store.JobStore`), the job processes
(:class:`~admission.runner.ProcessRunner`) and a load sampler:

* :meth:`submit` starts a job at once, enqueues it, or refuses it (queue full; a
  program off the allowlist);
* a check thread, every ``check_interval_ms``, samples load, starts the next load
  step's worth of enqueued jobs in Submitted order, and records jobs that ended;
* a monitor thread, every ``monitor_interval_s``, flags jobs running past their
  expected time (long-running entries of the stall array) and clears the flags of jobs
  that ended;
* a job killed by a signal, or ending non-zero when it declared that abnormal
  (``abnormal_exit``), is a **hard stall**: listed in the stall array, its lane
  disabled (nothing more starts in it) until an operator enables it; the entry can
  be rescheduled (the same command, enqueued again as a new job).

Several instances may share one database (PostgreSQL; a leader-elected
consumer): a :class:`~pipeline.services.leader.LeaderElection` grants one of them the
leadership at run time, and only the leader starts jobs and runs the monitor. A
follower takes submits into the queue (it never starts them itself: a job that must
start at once -- not queueable, or start-now -- is marked ``asap`` and the leader
starts it at its next check, whatever the load), serves reads, cancels enqueued
jobs, and answers 421 with the leader's address for what only the leader can do
(stop a running job, suspend, resume). Each start is a compare-and-set
``ENQUEUED -> RUNNING`` in the database before the process starts, so two instances
that both believe they lead for an instant never start a job twice. A new leader
recovers the RUNNING jobs as a restart does (adopted by pid on this host, else
UNKNOWN).

Stable log codes: ``FG-ADM-001`` emergency mode entered, ``FG-ADM-002`` left,
``FG-ADM-003`` a start forced by start-now, ``FG-ADM-004`` a submit refused,
``FG-ADM-005`` a hard stall, ``FG-ADM-006`` a long-running job; ``FG-LEAD-001`` /
``FG-LEAD-002`` leadership granted / revoked (:mod:`pipeline.services.leader`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from prometheus_client import CollectorRegistry

from admission.algorithm import Admission, Decision, Limits, Load, StartReason
from admission.config import AdmissionSettings, resolve_program
from admission.environment import (
    base_environment,
    denied_reason,
    invalid_reason,
    job_environment,
)
from admission.load import DriverHeaps, HostLoadSampler
from admission.metrics import AdmissionMetrics
from admission.runner import ProcessRunner
from admission.store import (
    FINAL_STATES,
    Job,
    JobState,
    JobStore,
    RequestState,
    Stall,
    StallKind,
)
from pipeline.errors import FloodgateError
from pipeline.services.leader import LeaderElection

log = logging.getLogger(__name__)

#: The flag (``floodgate_flags``) that keeps a suspension across restarts.
SUSPENDED = "suspended"


class AdmissionError(FloodgateError):
    """A request the admission service refuses; ``status`` is the HTTP status to answer."""

    status = 400


class CommandNotAllowed(AdmissionError, PermissionError):
    """The job's program is not on ``allowlist``; nothing was started."""

    status = 403


class EnvNotAllowed(AdmissionError, PermissionError):
    """The job's ``env`` names a variable on the deny-list (:mod:`admission.environment`:
    it would change what an allowlisted program loads, issue 26); nothing was stored or
    started.

    Attributes:
        variable: the variable named.
    """

    status = 403

    def __init__(self, message: str, *, variable: str) -> None:
        super().__init__(message)
        self.variable = variable


class InvalidJob(AdmissionError, ValueError):
    """The job holds what a process cannot be given (a NUL byte in ``argv``, ``cwd`` or
    ``env``, an empty name or ``=`` in a variable's name); nothing was stored. 422, as
    the API answers any malformed request."""

    status = 422


class AdmissionQueueFull(AdmissionError):
    """The job queue holds ``max_queue_size`` jobs; the submit failed."""

    status = 503


class JobNotFound(AdmissionError, LookupError):
    """No job (or stall entry) with that id."""

    status = 404


class LaneDisabled(AdmissionError):
    """A part of a request, or a completion step, was scheduled into a lane disabled by a
    hard stall: scheduling fails until an operator enables the lane."""

    status = 409


class RequestBackedOut(AdmissionError):
    """A part of a request failed to schedule; the parts scheduled before it were backed
    out (freed if still enqueued, in-doubt stall entries if they may be running)."""

    status = 409


class NotLeader(AdmissionError):
    """Only the leader can do this (it owns the job processes); the message names it."""

    status = 421


class JobConflict(AdmissionError):
    """The job is not in a state that allows the request (e.g. start-now of a running job)."""

    status = 409


@dataclass(frozen=True)
class JobSpec:
    """A job command.

    Attributes:
        argv: the command line; ``argv[0]`` must be on the allowlist.
        cwd: working directory (default: the service's).
        env: the job's own environment variables, over the base set the service
            builds (:mod:`admission.environment`); none on its deny-list.
        queueable: ``False`` starts it at once whatever the load.
        expected_s: expected run time; past it the job is flagged long-running.
        abnormal_exit: a non-zero exit is abnormal (a hard stall), not only an error.
        lane: jobs of a lane stop starting while it is disabled by a hard stall.
    """

    argv: Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    queueable: bool = True
    expected_s: float | None = None
    abnormal_exit: bool = False
    lane: str = "default"

    @classmethod
    def from_fields(cls, values: Mapping[str, Any]) -> JobSpec:
        """A spec from a mapping that holds its fields -- a stored job
        (``dataclasses.asdict``), a stored completion step (:meth:`as_fields`), a
        decoded ``job_request`` tuple; other keys are ignored, missing ones default."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def as_fields(self) -> dict[str, Any]:
        """The spec as JSON-ready fields (what :meth:`from_fields` takes back)."""
        return {**asdict(self), "argv": list(self.argv), "env": dict(self.env)}


class AdmissionService:
    """The admission service.

    Args:
        settings: the ``[admission]`` config.
        registry: where its metrics go.
        sampler: returns the current :class:`Load` (default: the host's).
        clock: epoch seconds (tests inject one).
    """

    def __init__(
        self,
        settings: AdmissionSettings,
        *,
        registry: CollectorRegistry | None = None,
        sampler: Callable[[], Load] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.allowlist = settings.resolved_allowlist()
        self.registry = registry or CollectorRegistry()
        self.metrics = AdmissionMetrics(self.registry)
        #: The Spark drivers' heaps (with the host's sampler; an injected one has none).
        self.heaps: DriverHeaps | None = None
        if sampler is None:
            self.heaps = DriverHeaps(
                control_dir=settings.driver_control_dir,
                urls=settings.driver_metrics_urls,
                interval_s=settings.driver_heap_interval_s,
            )
        self.sampler = sampler or HostLoadSampler(heaps=self.heaps)
        self.clock = clock
        # The limits are the settings of the same names.
        limits = settings.model_dump(include=set(Limits.__dataclass_fields__))
        self.admission = Admission(Limits(**limits))
        self.store = JobStore(settings.database_url)
        self.runner = ProcessRunner(settings.log_dir)
        #: What every job's environment starts from (never the service's own).
        self.base_env = base_environment(job_path=settings.job_path, job_env=settings.job_env)
        #: Several instances on one PostgreSQL database: counts come from it.
        self.shared = not settings.database_url.startswith("sqlite")
        self.election = LeaderElection(
            settings.database_url,
            "admission",
            on_granted=self._granted,
            on_revoked=self._revoked,
            check_interval_s=settings.leader_check_interval_s,
        )
        #: Suspended (``POST /suspend``): kept in the database, so a restart, or a new
        #: leader, stays suspended until resumed (issue 26).
        self.suspended = self.store.flag(SUSPENDED)
        self.load = Load(cpu=0.0, memory=0.0)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._enqueued = 0
        #: Called with a job after each change of its state (the Kafka events topic).
        self.listeners: list[Callable[[Job], None]] = []
        self.metrics.cpu_limit.set(settings.system_cpu_limit)
        self.metrics.memory_limit.set(settings.memory_usage_limit)

    # -- lifecycle -------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this instance starts jobs (it holds the database lock)."""
        return self.election.is_leader

    def start(self, *, address: str | None = None) -> AdmissionService:
        """Take the leadership if free, then run the check and monitor threads.

        Args:
            address: where this instance's API answers (shown to followers).
        """
        with self._lock:
            self._enqueued = self.store.count_enqueued()
        self.election.address = address
        self.election.start()
        if self.heaps is not None:
            self.heaps.start()
        self.load = self.sampler()
        self._refresh_gauges()
        self._stop.clear()
        for target, name in ((self._check_loop, "check"), (self._monitor_loop, "monitor")):
            thread = threading.Thread(
                target=target, name=f"floodgate-admission-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        log.info(
            "admission service started (%s): %d jobs enqueued",
            "leader" if self.is_leader else "follower",
            self._enqueued,
        )
        return self

    def _granted(self) -> None:
        """Leadership granted: recover the queue as a restart does.

        A job stored RUNNING whose process is gone becomes UNKNOWN; one whose process
        is still there is watched again (its exit status cannot be known: it ends
        UNKNOWN). Enqueued jobs stay enqueued.
        """
        self.metrics.leader.set(1)
        with self._lock:
            self._recover()

    def _recover(self) -> None:
        now = self.clock()
        self.suspended = self.store.flag(SUSPENDED)
        if self.suspended:
            log.warning("admission suspended (since before this instance led): POST /resume")
        watched = set(self.runner.running())
        for job in self.store.in_state(JobState.RUNNING):
            if job.id in watched:
                continue
            why = (
                "no pid was recorded"
                if job.pid is None
                else self.runner.adopt(
                    job.id, job.pid, created=job.pid_created, cmdline=job.pid_cmdline
                )
            )
            if why is not None:
                self.store.update(
                    job.id,
                    expect=[JobState.RUNNING],
                    state=JobState.UNKNOWN.value,
                    finished=now,
                    note=f"not adopted when this instance took the lead: {why}",
                )
                log.warning("job %d: was RUNNING, not adopted (%s): UNKNOWN", job.id, why)
        self._enqueued = self.store.count_enqueued()

    def _revoked(self) -> None:
        """Leadership lost: nothing more starts here. Processes this instance started go
        on; it still records how they end (the new leader adopts them as well: the
        first to record an end wins, by compare-and-set)."""
        self.metrics.leader.set(0)

    def stop(self) -> None:
        """Stop the threads and give the leadership up; running jobs go on (they are
        adopted by the next leader)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        self.election.stop()
        if self.heaps is not None:
            self.heaps.stop()

    # -- requests --------------------------------------------------------------

    def submit(
        self,
        spec: JobSpec,
        *,
        request_id: int | None = None,
        role: str | None = None,
        client_key: str | None = None,
    ) -> Job:
        """Start a job at once, enqueue it, or refuse it (the job queue's rule).

        Args:
            spec: the job command.
            request_id / role: for the parts and the completion step of a request.
            client_key: the key of the request message it came from (Kafka intake).

        Raises:
            CommandNotAllowed: ``argv[0]`` is not on the allowlist (nothing stored).
            EnvNotAllowed: ``env`` names a variable on the deny-list (nothing stored).
            InvalidJob: ``argv``, ``cwd`` or ``env`` holds what a process cannot be
                given (a NUL byte, ``=`` in a variable's name; nothing stored).
            AdmissionQueueFull: ``max_queue_size`` jobs are enqueued already.
        """
        program = self._resolve(spec.argv)
        self._check_spec(spec)
        argv = [program, *spec.argv[1:]]
        if self.shared and self._enqueued + 1 >= 0.9 * self.settings.max_queue_size:
            # Other instances enqueue too: near the bound, count in the database.
            count = self.store.count_enqueued()
            with self._lock:
                self._enqueued = count
        with self._lock:
            outcome = self.admission.on_submit(
                queueable=spec.queueable, enqueued=self._enqueued, load=self.load
            )
            if outcome.decision is Decision.REJECT:
                self.metrics.rejections.labels("queue-full").inc()
                log.warning("FG-ADM-004 submit refused: %s", outcome.reason)
                raise AdmissionQueueFull(
                    f"job queue full: {self._enqueued} jobs enqueued, max_queue_size is "
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
            asap = outcome.start_reason is StartReason.NOT_QUEUEABLE and not self.is_leader
            start = start and self.is_leader
            job = self.store.add(
                argv=argv,
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
            )
            self._enqueued += 1
            if start:
                assert outcome.start_reason is not None
                job = self._start(job, outcome.start_reason)
            else:
                why = "for the leader to start" if asap else outcome.reason
                log.info("job %d enqueued: %s", job.id, why)
                self._notify(job.id)
        self._refresh_gauges()
        return job

    def submit_request(
        self, parts: Sequence[JobSpec], completion: JobSpec | None = None
    ) -> tuple[int, list[Job]]:
        """Schedule a request made of parts, part by part (an asynchronous request).

        Every program is checked against the allowlist first. A part fails to schedule
        when the queue is full or its lane is disabled; the parts scheduled before it
        are then backed out: an enqueued one is freed (ABORTED), one that may already
        be running is recorded as an **in-doubt** stall entry, which the monitor
        deletes once the part has ended. When every part has ended OK, the
        ``completion`` step is scheduled; if it cannot be, the request is a **hard
        stall**, re-schedulable with :meth:`reschedule`.

        Returns:
            ``(request id, the parts' jobs)``.

        Raises:
            CommandNotAllowed: a program is not on the allowlist (nothing scheduled).
            EnvNotAllowed: an ``env`` names a denied variable (nothing scheduled).
            RequestBackedOut: a part failed to schedule (the message says which, why,
                and what was backed out).
        """
        if not parts:
            raise AdmissionError("a request needs at least one part")
        for spec in [*parts, *([completion] if completion else [])]:
            self._resolve(spec.argv)
            self._check_spec(spec)
        request_id = self.store.add_request(
            None if completion is None else completion.as_fields(), self.clock()
        )
        scheduled: list[Job] = []
        for i, spec in enumerate(parts, start=1):
            try:
                scheduled.append(self._schedule(spec, request_id=request_id, role="part"))
            except (AdmissionQueueFull, LaneDisabled) as exc:
                reason = f"part {i} of {len(parts)} could not be scheduled: {exc}"
                outcome = self._back_out(request_id, scheduled, reason)
                raise RequestBackedOut(
                    f"request {request_id} backed out: {reason}; {outcome}"
                ) from exc
        log.info("request %d scheduled: %d parts", request_id, len(scheduled))
        return request_id, [self._get(j.id) for j in scheduled]

    def request(self, request_id: int) -> dict[str, object]:
        """A request: its state, reason, completion step and jobs (``GET /requests/{id}``),
        as the API shows it: the completion step's ``env`` and the jobs' are the sorted
        variables' names, never their values (a value may be a secret, issue 26).

        Raises:
            JobNotFound: no such request.
        """
        row = self.store.request(request_id)
        if row is None:
            raise JobNotFound(f"no request {request_id}")
        completion = row.get("completion")
        if completion is not None:
            completion = {**completion, "env": sorted(completion.get("env") or {})}
        return {
            **row,
            "completion": completion,
            "jobs": [j.as_json() for j in self.store.of_request(request_id)],
        }

    def _schedule(self, spec: JobSpec, *, request_id: int, role: str) -> Job:
        disabled = self.store.disabled_lanes()
        if spec.lane in disabled:
            raise LaneDisabled(f"lane {spec.lane!r} is disabled ({disabled[spec.lane]})")
        return self.submit(spec, request_id=request_id, role=role)

    def _back_out(self, request_id: int, scheduled: Sequence[Job], reason: str) -> str:
        freed, in_doubt = [], []
        now = self.clock()
        for job in scheduled:
            if self._free(job.id, f"backed out: {reason}", now):
                freed.append(job.id)
                self._notify(job.id)
                continue
            current = self._get(job.id)
            if current.state is JobState.RUNNING:
                self.store.add_stall(
                    job.id,
                    StallKind.IN_DOUBT,
                    f"request {request_id} backed out while this part may be running: {reason}",
                    now,
                    request_id=request_id,
                )
                in_doubt.append(job.id)
        self.store.set_request(request_id, RequestState.BACKED_OUT, reason)
        log.warning(
            "request %d backed out (%s): jobs %s freed, jobs %s in doubt",
            request_id,
            reason,
            freed,
            in_doubt,
        )
        self._refresh_gauges()
        return f"freed jobs {freed}, in doubt: jobs {in_doubt}"

    def _request_progress(self, request_id: int) -> None:
        """After a part ended: when all have, schedule the completion step (or fail)."""
        row = self.store.request(request_id)
        if row is None or row["state"] != RequestState.SCHEDULED.value:
            return
        parts = [j for j in self.store.of_request(request_id) if j.role == "part"]
        if any(j.state not in FINAL_STATES for j in parts):
            return
        if any(j.state is not JobState.FINISHED_OK for j in parts):
            failed = [j.id for j in parts if j.state is not JobState.FINISHED_OK]
            self.store.set_request(
                request_id, RequestState.FAILED, f"parts {failed} did not end OK"
            )
            return
        self._complete(request_id, row["completion"], last=parts[-1].id)

    def _complete(
        self, request_id: int, completion: dict[str, object] | None, *, last: int
    ) -> bool:
        if completion is None:
            self.store.set_request(request_id, RequestState.COMPLETED)
            return True
        try:
            self._schedule(
                JobSpec.from_fields(completion), request_id=request_id, role="completion"
            )
        except AdmissionError as exc:
            reason = f"completion step of request {request_id} could not be scheduled: {exc}"
            self.store.set_request(request_id, RequestState.STALLED, reason)
            self.store.add_stall(last, StallKind.HARD, reason, self.clock(), request_id=request_id)
            log.error("FG-ADM-005 request %d hard stall: %s", request_id, reason)
            self._refresh_gauges()
            return False
        self.store.set_request(request_id, RequestState.COMPLETED)
        return True

    def start_now(self, job_id: int) -> Job:
        """Start an enqueued job at once, whatever the load (logged as forced).

        Raises:
            JobNotFound, JobConflict: no such job; it is not enqueued.
        """
        with self._lock:
            job = self._get(job_id)
            if job.state is not JobState.ENQUEUED:
                raise JobConflict(f"job {job_id} is {job.state.value}, not ENQUEUED")
            if not self.is_leader:
                if not self.store.update(job_id, expect=[JobState.ENQUEUED], asap=True):
                    raise JobConflict(f"job {job_id} left ENQUEUED")
                log.warning(
                    "FG-ADM-003 job %d: start forced (start-now); the leader %s starts it",
                    job_id,
                    self._leader_name(),
                )
                return self._get(job_id)
            log.warning("FG-ADM-003 job %d: start forced (start-now)", job_id)
            return self._start(job, StartReason.FORCED)

    def cancel(self, job_id: int) -> Job:
        """Abort a job: an enqueued one is taken out of the queue, a running one stopped.

        Raises:
            JobNotFound, JobConflict: no such job; it has ended already.
        """
        job = self._get(job_id)
        if job.state in FINAL_STATES:
            raise JobConflict(f"job {job_id} has ended ({job.state.value})")
        if job.state is JobState.RUNNING:
            self._require_leader(f"stop running job {job_id}")
        self._abort(job, "cancelled")
        return self._get(job_id)

    def suspend(self, *, at_once: bool = False) -> None:
        """Stop starting jobs until :meth:`resume`, across restarts and leader changes
        (the flag is in the database); ``at_once`` also aborts every running and
        enqueued job.

        Raises:
            NotLeader: this instance does not lead (suspend the leader).
        """
        self._require_leader("suspend")
        with self._lock:
            self.store.set_flag(
                SUSPENDED, True, reason="at once" if at_once else None, now=self.clock()
            )
            self.suspended = True
        log.warning("admission suspended%s", " at once" if at_once else "")
        if at_once:
            for state in (JobState.ENQUEUED, JobState.RUNNING):
                for job in self.store.in_state(state):
                    self._abort(job, "suspended at once")

    def resume(self) -> None:
        """Start jobs again after :meth:`suspend`.

        Raises:
            NotLeader: this instance does not lead.
        """
        self._require_leader("resume")
        with self._lock:
            self.store.set_flag(SUSPENDED, False, reason=None, now=self.clock())
            self.suspended = False
        log.warning("admission resumed")

    def enable_lane(self, name: str) -> None:
        """Let jobs of a lane disabled by a hard stall start again."""
        self.store.set_lane(name, enabled=True, reason=None, now=self.clock())
        log.warning("lane %s enabled", name)

    def reschedule(self, stall_id: int) -> Job:
        """Enqueue a hard-stalled job's command again (a new job) and clear the entry.

        Raises:
            JobNotFound: no such stall entry, or its job is gone.
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
                if not self._complete(found.request_id, row["completion"], last=found.job_id):
                    raise JobConflict(
                        f"stall {stall_id}: {self.request(found.request_id)['reason']}"
                    )
                jobs = self.store.of_request(found.request_id)
                log.warning(
                    "stall %d: request %d's completion step rescheduled", stall_id, found.request_id
                )
                return jobs[-1]
        stall = self.store.delete_stall(stall_id)
        if stall is None:
            raise JobNotFound(f"no stall entry {stall_id}")
        old = self._get(stall.job_id)
        job = self.submit(JobSpec.from_fields(asdict(old)))
        log.warning("stall %d: job %d rescheduled as job %d", stall_id, old.id, job.id)
        self._refresh_gauges()
        return job

    def stalls(self) -> list[Stall]:
        """The stall array."""
        return self.store.stalls()

    def status(self) -> dict[str, object]:
        """Load, mode, load step, counts, lanes: ``GET /status``."""
        holder = self.election.holder()
        return {
            "cpu_load": None if math.isnan(self.load.cpu) else self.load.cpu,  # JSON has no NaN
            "memory_usage": self.load.memory,
            "memory_source": self.load.memory_source,
            "driver_heaps": self.heaps.ratios() if self.heaps is not None else {},
            "emergency_mode": self.admission.emergency,
            "load_step": self.admission.load_step,
            "suspended": self.store.flag(SUSPENDED),
            "leader": {
                "is_leader": self.is_leader,
                "instance": self.election.instance,
                "holder": holder.as_json() if holder is not None else None,
            },
            "jobs": {s.value: n for s, n in self.store.count_by_state().items()},
            "disabled_lanes": self.store.disabled_lanes(),
            "stalls": len(self.store.stalls()),
        }

    # -- the check -------------------------------------------------------------

    def check(self) -> int:
        """One check: record ended jobs, sample load, start the next batch.

        Returns:
            How many enqueued jobs were started.
        """
        for ended in self.runner.poll():
            self._ended(ended.job_id, ended.exit_code)
        load = self.sampler()
        with self._lock:
            self.load = load
            change = self.admission.observe(load)
            if change is not None:
                log.warning(
                    "FG-ADM-%s emergency mode %s: %s",
                    "001" if change.entered else "002",
                    "entered" if change.entered else "left",
                    change.reason,
                )
            if self.suspended or not self.is_leader:
                return 0
            started = 0
            for job in self.store.next_asap(self.settings.max_load_step):
                how = StartReason.FORCED if job.queueable else StartReason.NOT_QUEUEABLE
                if self._start(job, how).state is JobState.RUNNING:
                    started += 1
            n = self.admission.tick(enqueued=self._enqueued, load=load)
            if n:
                skip = self.store.disabled_lanes()
                for job in self.store.next_enqueued(n, skip_lanes=skip):
                    if self._start(job, StartReason.DEQUEUED).state is JobState.RUNNING:
                        started += 1
        self.metrics.cpu.set(load.cpu)
        self.metrics.memory.set(load.memory)
        self.metrics.emergency.set(1 if self.admission.emergency else 0)
        self.metrics.load_step.set(self.admission.load_step)
        return started

    def _check_loop(self) -> None:
        interval = self.settings.check_interval_ms / 1000.0
        beat = 0
        while not self._stop.wait(interval):
            try:
                self.check()
                beat += 1
                if beat % max(1, round(1.0 / interval)) == 0:
                    self._refresh_gauges()  # about once a second: counts by state
            except Exception:
                log.exception("admission check failed")

    def _monitor_loop(self) -> None:
        while not self._stop.wait(self.settings.monitor_interval_s):
            try:
                self.monitor()
            except Exception:
                log.exception("admission monitor failed")

    def monitor(self) -> None:
        """Flag jobs running past their expected time (long-running entries of the
        stall array, not errors); clear the flags of jobs that ended, and the in-doubt
        entries of backed-out parts that have ended. The leader's work: a follower does
        nothing."""
        if not self.is_leader:
            return
        now = self.clock()
        flagged = {s.job_id for s in self.store.stalls(kind=StallKind.LONG_RUNNING)}
        running = {j.id: j for j in self.store.in_state(JobState.RUNNING)}
        for job_id in flagged - set(running):
            self.store.delete_stalls(job_id=job_id, kind=StallKind.LONG_RUNNING)
        for stall in self.store.stalls(kind=StallKind.IN_DOUBT):
            if stall.job_id not in running:  # the part ended: no doubt is left
                self.store.delete_stall(stall.id)
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
                self.store.add_stall(job.id, StallKind.LONG_RUNNING, reason, now)
                log.warning("FG-ADM-006 job %d long-running: %s", job.id, reason)
        self._refresh_gauges()

    # -- internals -------------------------------------------------------------

    def _resolve(self, argv: Sequence[str]) -> str:
        if not argv:
            raise AdmissionError("a job needs a command: argv is empty")
        program = argv[0]
        resolved = resolve_program(program)
        if resolved is None or resolved not in self.allowlist:
            self.metrics.rejections.labels("not-allowed").inc()
            log.warning("FG-ADM-004 submit refused: %r is not on admission.allowlist", program)
            raise CommandNotAllowed(
                f"program {program!r} is not on admission.allowlist "
                f"(allowed: {sorted(self.allowlist.values())})"
            )
        return resolved

    def _check_spec(self, spec: JobSpec) -> None:
        """Refuse what a job may not carry: a denied variable in ``env`` (403), what a
        process cannot be given (422)."""
        for i, arg in enumerate(spec.argv):
            if "\0" in arg:
                raise InvalidJob(f"argv[{i}] holds a NUL byte (a process cannot take it)")
        if spec.cwd is not None and "\0" in spec.cwd:
            raise InvalidJob("cwd holds a NUL byte (a process cannot take it)")
        why = self._env_refusal(spec.env)
        if why is not None:
            message, variable, denied = why
            if not denied:
                raise InvalidJob(message)
            self.metrics.rejections.labels("not-allowed").inc()
            log.warning("FG-ADM-004 submit refused: %s", message)
            raise EnvNotAllowed(message, variable=variable)

    @staticmethod
    def _env_refusal(env: Mapping[str, str]) -> tuple[str, str, bool] | None:
        """``(message, variable, denied?)`` for the first variable of ``env`` refused."""
        for name, value in env.items():
            invalid = invalid_reason(name, value)
            if invalid is not None:
                return f"env: {invalid}", name, False
            denied = denied_reason(name)
            if denied is not None:
                return (
                    f"env variable {name!r} is not allowed in a job's environment: {denied} "
                    "(the deny-list of docs/admission.md)",
                    name,
                    True,
                )
        return None

    def _refusal_at_start(self, job: Job) -> str | None:
        """Why a stored job may not start now: its program left the allowlist, or its
        ``env`` holds what is refused today (it was enqueued before; issue 26)."""
        if not job.argv:
            return "it has no command"
        resolved = resolve_program(job.argv[0])
        if resolved is None or resolved not in self.allowlist:
            return (
                f"program {job.argv[0]!r} is not on admission.allowlist "
                f"(allowed: {sorted(self.allowlist.values())})"
            )
        why = self._env_refusal(job.env)
        return None if why is None else why[0]

    def _leader_name(self) -> str:
        holder = self.election.holder()
        if holder is None:
            return "(none yet)"
        return f"{holder.instance} at {holder.address or 'an unknown address'}"

    def _require_leader(self, what: str) -> None:
        if not self.is_leader:
            raise NotLeader(
                f"this instance ({self.election.instance}) does not lead: {what} at the "
                f"leader, {self._leader_name()}"
            )

    def _get(self, job_id: int) -> Job:
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        return job

    def _start(self, job: Job, how: StartReason) -> Job:
        """Claim an ENQUEUED job (``ENQUEUED -> RUNNING`` in the database), then start
        its process (under ``self._lock``). A job claimed by another instance, or
        cancelled meanwhile, is left alone and returned as it now is.

        The allowlist and the env deny-list are checked again first: a job enqueued
        before its program left the allowlist is ABORTED with the reason, not started.
        A process that cannot be spawned (a missing program, a NUL byte) ends the job
        as ERROR with the reason: never RUNNING without a process (issue 26)."""
        now = self.clock()
        refusal = self._refusal_at_start(job)
        if refusal is not None:
            if self.store.update(
                job.id,
                expect=[JobState.ENQUEUED],
                state=JobState.ABORTED.value,
                finished=now,
                note=f"refused at start: {refusal}",
            ):
                self._enqueued -= 1
                self.metrics.rejections.labels("not-allowed").inc()
                log.warning("FG-ADM-004 job %d refused at start: %s", job.id, refusal)
                self._notify(job.id)
                if job.request_id is not None and job.role == "part":
                    self._request_progress(job.request_id)
            return self._get(job.id)
        if not self.store.claim(job.id, now=now, how=how.value, instance=self.election.instance):
            return self._get(job.id)
        self._enqueued -= 1
        env = job_environment(self.base_env, job.env, job.id)
        try:
            started = self.runner.start(job.id, job.argv, cwd=job.cwd, env=env)
        except Exception as exc:  # whatever it was, no process runs
            self.store.update(
                job.id,
                expect=[JobState.RUNNING],
                state=JobState.ERROR.value,
                finished=now,
                note=f"could not start: {type(exc).__name__}: {exc}",
            )
            log.error("job %d could not start: %s: %s", job.id, type(exc).__name__, exc)
            self._notify(job.id)
            if job.request_id is not None and job.role == "part":
                self._request_progress(job.request_id)
            return self._get(job.id)
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
        self._notify(job.id)
        return self._get(job.id)

    def _ended(self, job_id: int, exit_code: int | None) -> None:
        """Record how a job's process ended, and tell the listeners.

        Under ``self._lock``, as :meth:`_start` is: a job that ends within
        milliseconds (``true``) is seen ended by the check thread while the thread
        that started it may still be announcing it. Without the lock that thread
        read the job back FINISHED_OK, so its RUNNING event was published as a second
        FINISHED_OK, possibly after the first (found on Apache Kafka under load).
        """
        with self._lock:
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
        self._notify(job_id)
        if job.request_id is not None and job.role == "part":
            self._request_progress(job.request_id)
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

    def _free(self, job_id: int, why: str, now: float) -> bool:
        """Take a job out of the queue (ABORTED) if it is still ENQUEUED; whether it was."""
        with self._lock:
            if self.store.update(
                job_id,
                expect=[JobState.ENQUEUED],
                state=JobState.ABORTED.value,
                finished=now,
                note=why,
            ):
                self._enqueued -= 1
                return True
        return False

    def _abort(self, job: Job, why: str) -> None:
        now = self.clock()
        if job.state is JobState.ENQUEUED:
            self._free(job.id, why, now)
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
        self._notify(job.id)

    def _notify(self, job_id: int) -> None:
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

    def _refresh_gauges(self) -> None:
        counts = self.store.count_by_state()
        for state, n in counts.items():
            self.metrics.jobs.labels(state.value).set(n)
        if self.shared:  # other instances enqueue and start too
            with self._lock:
                self._enqueued = counts[JobState.ENQUEUED]
        if self.heaps is not None:
            self.metrics.driver_heap.clear()  # drivers that stopped drop out
            for name, ratio in self.heaps.ratios().items():
                self.metrics.driver_heap.labels(name).set(ratio)
        kinds = {k: 0 for k in StallKind}
        for stall in self.store.stalls():
            kinds[stall.kind] += 1
        for kind, n in kinds.items():
            self.metrics.stalls.labels(kind.value).set(n)
