"""The admission service: starts jobs only when CPU and memory allow.

:class:`AdmissionService` is what the API and the Kafka intake call; it ties together:

* the decision logic (:class:`~admission.algorithm.Admission`: load step, emergency
  mode), the persistent job queue (:class:`~admission.store.JobStore`) and the job
  processes (:class:`~admission.runner.ProcessRunner`);
* :class:`~admission.jobs.JobRules`: a job's program must be on the allowlist, its
  ``env`` off the deny-list; :meth:`AdmissionService.submit` checks them, then starts
  the job at once, enqueues it, or refuses it (queue full);
* :class:`~admission.scheduler.Scheduler`: a check thread, every
  ``check_interval_ms``, samples load, starts the next load step's worth of enqueued
  jobs in Submitted order, and records jobs that ended (a hard stall: killed by a
  signal, or ending non-zero when it declared that abnormal, lists the job in the
  stall array and disables its lane until an operator enables it);
* :class:`~admission.monitor.StallMonitor`: a monitor thread, every
  ``monitor_interval_s``, flags jobs running past their expected time (long-running
  entries of the stall array) and clears the flags of jobs that ended;
* :class:`~admission.requests.Requests`: requests made of parts, backed out when a
  part cannot be scheduled, completed by a completion step;
* :class:`~admission.leadership.Leadership`: the leader's duties (the queue recovered
  when the leadership is granted; a follower refuses what only the leader does);
* :class:`~admission.controls.QueueControls`: start-now, cancel, suspend and resume,
  enabling a lane, rescheduling an entry of the stall array.

Several instances may share one database (PostgreSQL; a leader-elected
consumer): a :class:`~pipeline.state.leader.LeaderElection` grants one of them the
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
``FG-ADM-005`` a hard stall, ``FG-ADM-006`` a long-running job, ``FG-ADM-007`` a
signed request of the Kafka intake read again and not run again; ``FG-LEAD-001`` /
``FG-LEAD-002`` leadership granted / revoked (:mod:`pipeline.state.leader`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry

from admission.algorithm import Admission, Limits, Load
from admission.config import AdmissionSettings
from admission.controls import QueueControls
from admission.environment import base_environment
from admission.jobs import JobRules, JobSpec
from admission.leadership import Leadership
from admission.load import DriverHeaps, HostLoadSampler
from admission.metrics import AdmissionMetrics
from admission.monitor import StallMonitor
from admission.requests import Requests
from admission.runner import ProcessRunner
from admission.scheduler import SUSPENDED, Scheduler
from admission.store import IntakeSignature, Job, JobStore, Stall
from pipeline.state.leader import LeaderElection

log = logging.getLogger(__name__)


class AdmissionService:
    """The admission service.

    Args:
        settings: the ``[admission]`` config.
        registry: where its metrics go.
        sampler: returns the current :class:`Load` (default: the host's).
        clock: epoch seconds (tests inject one).

    Raises:
        ConfigError: ``log_dir`` is another user's or others can write to it
            (:class:`~admission.runner.ProcessRunner`); nothing was written.
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
        # The log folder first: one others can change is refused before anything is
        # written (the job database included).
        self.runner = ProcessRunner(settings.log_dir)
        self.store = JobStore(settings.database_url)
        #: What every job's environment starts from (never the service's own).
        self.base_env = base_environment(job_path=settings.job_path, job_env=settings.job_env)
        self.election = LeaderElection(
            settings.database_url, "admission", check_interval_s=settings.leader_check_interval_s
        )
        #: What a job may run and carry.
        self.rules = JobRules(
            self.allowlist,
            self.metrics,
            job_path=settings.job_path,
            env_allowlist=settings.job_env_allowlist,
        )
        #: Starts jobs, records their ends. Its ``suspended`` flag is kept in the
        #: database, so a restart, or a new leader, stays suspended until resumed.
        self.scheduler = Scheduler(
            settings=settings,
            store=self.store,
            runner=self.runner,
            admission=self.admission,
            rules=self.rules,
            metrics=self.metrics,
            election=self.election,
            sampler=self.sampler,
            heaps=self.heaps,
            base_env=self.base_env,
            clock=clock,
        )
        #: Requests made of parts.
        self.requests = Requests(self.scheduler, self.rules, self.submit)
        self.scheduler.on_part_ended = self.requests.part_ended
        #: Long-running jobs and in-doubt parts.
        self.stall_monitor = StallMonitor(
            self.scheduler, self.election, settings.monitor_interval_s
        )
        #: The leader's duties: the queue recovered when the leadership is granted.
        self.leadership = Leadership(self.scheduler, self.election)
        self.election.on_granted = self.leadership.granted
        self.election.on_revoked = self.leadership.revoked
        #: Start-now, cancel, suspend and resume, lanes, rescheduling stalls.
        self.controls = QueueControls(self.scheduler, self.leadership, self.requests, self.submit)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.metrics.cpu_limit.set(settings.system_cpu_limit)
        self.metrics.memory_limit.set(settings.memory_usage_limit)

    # -- lifecycle -------------------------------------------------------------

    @property
    def load(self) -> Load:
        """The last load sample."""
        return self.scheduler.load

    @property
    def suspended(self) -> bool:
        """Whether starting jobs is suspended (``POST /suspend``)."""
        return self.scheduler.suspended

    @property
    def listeners(self) -> list[Callable[[Job], None]]:
        """Called with a job after each change of its state (the Kafka events topic)."""
        return self.scheduler.listeners

    @property
    def is_leader(self) -> bool:
        """Whether this instance starts jobs (it holds the database lock)."""
        return self.election.is_leader

    def start(self, *, address: str | None = None) -> AdmissionService:
        """Take the leadership if free, then run the check and monitor threads.

        Args:
            address: where this instance's API answers (shown to followers).
        """
        with self.scheduler.lock:
            self.scheduler.enqueued = self.store.count_enqueued()
        self.election.address = address
        self.election.start()
        if self.heaps is not None:
            self.heaps.start()
        self.scheduler.load = self.sampler()
        self.scheduler.refresh_gauges()
        self._stop.clear()
        for target, name in ((self.scheduler.run, "check"), (self.stall_monitor.run, "monitor")):
            thread = threading.Thread(
                target=target, args=(self._stop,), name=f"floodgate-admission-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        log.info(
            "admission service started (%s): %d jobs enqueued",
            "leader" if self.is_leader else "follower",
            self.scheduler.enqueued,
        )
        return self

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
        signature: IntakeSignature | None = None,
    ) -> Job:
        """Start a job at once, enqueue it, or refuse it (the job queue's rule).

        Args:
            spec: the job command.
            request_id / role: for the parts and the completion step of a request.
            client_key: the key of the request message it came from (Kafka intake).
            signature: the signed request it came from (Kafka intake): recorded with
                the job, in its transaction, so a signed request makes one job at most.

        Raises:
            CommandNotAllowed: ``argv[0]`` is not on the allowlist (nothing stored).
            EnvNotAllowed: ``env`` names a variable on the deny-list (nothing stored).
            InvalidJob: ``argv``, ``cwd`` or ``env`` holds what a process cannot be
                given (a NUL byte, ``=`` in a variable's name; nothing stored).
            AdmissionQueueFull: ``max_queue_size`` jobs are enqueued already.
            IntakeSignatureTaken: ``signature`` was recorded already (nothing stored).
        """
        self.rules.resolve(spec.argv)
        self.rules.check_spec(spec)
        job = self.scheduler.admit(
            spec, request_id=request_id, role=role, client_key=client_key, signature=signature
        )
        self.scheduler.refresh_gauges()
        return job

    def start_now(self, job_id: int) -> Job:
        """Start an enqueued job at once, whatever the load (:meth:`QueueControls.start_now
        <admission.controls.QueueControls.start_now>`).

        Raises:
            JobNotFound, JobConflict: no such job; it is not enqueued.
        """
        return self.controls.start_now(job_id)

    def cancel(self, job_id: int) -> Job:
        """Abort a job: an enqueued one is taken out of the queue, a running one stopped
        (:meth:`QueueControls.cancel <admission.controls.QueueControls.cancel>`).

        Raises:
            JobNotFound, JobConflict: no such job; it has ended already.
            NotLeader: the job is running and this instance does not lead.
        """
        return self.controls.cancel(job_id)

    def suspend(self, *, at_once: bool = False) -> None:
        """Stop starting jobs until :meth:`resume`; ``at_once`` also aborts every running
        and enqueued job (:meth:`QueueControls.suspend
        <admission.controls.QueueControls.suspend>`).

        Raises:
            NotLeader: this instance does not lead (suspend the leader).
        """
        self.controls.suspend(at_once=at_once)

    def resume(self) -> None:
        """Start jobs again after :meth:`suspend`.

        Raises:
            NotLeader: this instance does not lead.
        """
        self.controls.resume()

    def enable_lane(self, name: str) -> None:
        """Let jobs of a lane disabled by a hard stall start again."""
        self.controls.enable_lane(name)

    def reschedule(self, stall_id: int) -> Job:
        """Schedule a hard stall again and clear its entry (:meth:`QueueControls.reschedule
        <admission.controls.QueueControls.reschedule>`).

        Raises:
            JobNotFound: no such stall entry, or its job is gone.
            JobConflict: the entry is not a hard stall, or cannot be scheduled again.
        """
        return self.controls.reschedule(stall_id)

    def submit_request(
        self, parts: Sequence[JobSpec], completion: JobSpec | None = None
    ) -> tuple[int, list[Job]]:
        """Schedule a request made of parts (:meth:`Requests.submit
        <admission.requests.Requests.submit>`).

        Returns:
            ``(request id, the parts' jobs)``.

        Raises:
            CommandNotAllowed, EnvNotAllowed: a part or the completion step is refused
                (nothing scheduled).
            RequestBackedOut: a part failed to schedule.
        """
        return self.requests.submit(parts, completion)

    def request(self, request_id: int) -> dict[str, object]:
        """A request as ``GET /requests/{id}`` shows it (:meth:`Requests.request
        <admission.requests.Requests.request>`).

        Raises:
            JobNotFound: no such request.
        """
        return self.requests.request(request_id)

    def check(self) -> int:
        """One check (:meth:`Scheduler.check <admission.scheduler.Scheduler.check>`).

        Returns:
            How many enqueued jobs were started.
        """
        return self.scheduler.check()

    def monitor(self) -> None:
        """One monitor pass (:meth:`StallMonitor.monitor
        <admission.monitor.StallMonitor.monitor>`)."""
        self.stall_monitor.monitor()

    def job(self, job_id: int) -> Job:
        """One job as stored.

        Raises:
            JobNotFound: no such job.
        """
        return self.scheduler.get(job_id)

    def stalls(self) -> list[Stall]:
        """The stall array."""
        return self.store.stalls()

    def status(self) -> dict[str, object]:
        """Load, mode, load step, counts, lanes: ``GET /status``."""
        holder = self.election.holder()
        load = self.scheduler.load
        return {
            "cpu_load": None if math.isnan(load.cpu) else load.cpu,  # JSON has no NaN
            "memory_usage": load.memory,
            "memory_source": load.memory_source,
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
