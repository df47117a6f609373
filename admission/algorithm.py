"""The admission service's decision logic: start a job now, enqueue it, or refuse it.

Pure logic, no I/O, no clock, no threads: the service samples the load, counts
its persistent queue and calls :class:`Admission`; this module only decides.
The job queue's rules (types of load, emergency mode, the algorithm;
docs/architecture.md, "The admission service"):

* **Low load**: system CPU busy ratio ``<= system_cpu_limit`` (0.85).
  **High load**: above it.
* **Emergency mode**: entered when memory usage (host, or a known JVM heap) is
  ``> memory_usage_limit`` (0.90), left when it is ``< memory_usage_limit``;
  exactly at the limit the mode does not change. It depends on memory only.
* **Submit**: a job that is not queueable starts at once. Otherwise it starts at
  once iff the load is low, the service is not in emergency mode and nothing is
  enqueued; else it is enqueued, or refused when ``max_queue_size`` jobs are
  already enqueued.
* **Check** (ten times a second): under high load start nothing; in emergency
  mode start at most ``emergency_start_count``; under low load start a batch of
  *load step* jobs, oldest Submitted first. The load step adapts additive-increase /
  multiplicative-decrease: +1 after each batch while the load stays low, halved
  whenever the load is high, always within ``[min_load_step, max_load_step]``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pipeline.errors import ConfigError

__all__ = [
    "Admission",
    "Decision",
    "Limits",
    "Load",
    "ModeChange",
    "StartReason",
    "SubmitOutcome",
]


class Decision(enum.StrEnum):
    """What :meth:`Admission.on_submit` decided for a job command."""

    START = "START"
    """Start the job now."""
    ENQUEUE = "ENQUEUE"
    """Put the job in the persistent queue; a later check starts it."""
    REJECT = "REJECT"
    """The queue is full: the submission fails."""


class StartReason(enum.StrEnum):
    """Why a job started; the values are the ``reason`` label of the starts metric."""

    IMMEDIATE = "immediate"
    """Started on submit: low load, no emergency mode, nothing enqueued."""
    DEQUEUED = "dequeued"
    """Taken from the queue by a check (:meth:`Admission.tick`)."""
    FORCED = "forced"
    """Forced out of the queue by an operator (``POST /jobs/{id}/start-now``)."""
    NOT_QUEUEABLE = "not-queueable"
    """Started on submit because the job is not queueable (``queueable: false``)."""


@dataclass(frozen=True)
class Load:
    """One load sample.

    Attributes:
        cpu: system CPU busy ratio, 0..1 (all processes of the host, not only ours).
            NaN compares as neither low nor high and is therefore treated as high load.
        memory: memory usage ratio, 0..1: the highest of host memory and the known
            JVM heaps (Spark drivers). NaN leaves the emergency mode unchanged.
        memory_source: where ``memory`` came from, for log reasons: ``"host"`` or
            ``"jvm:<name>"`` (a Spark driver's heap).
    """

    cpu: float
    memory: float
    memory_source: str = "host"


@dataclass(frozen=True)
class Limits:
    """The admission limits, validated on construction.

    Attributes:
        system_cpu_limit: low load is ``cpu <= system_cpu_limit`` (ratio, 0 < x <= 1;
            default 0.85).
        memory_usage_limit: emergency mode above it, left below it (ratio, 0 < x <= 1;
            default 0.90).
        initial_load_step: load step at start (jobs per check).
        min_load_step: lower bound of the load step (jobs per check, >= 1).
        max_load_step: upper bound of the load step (jobs per check).
        emergency_start_count: jobs started per check in emergency mode (>= 0; a minimal
            number, so the queue still moves while memory is short).
        max_queue_size: enqueued jobs beyond which a submission fails (>= 0; default
            100 000).

    Raises:
        ConfigError: (a ``ValueError``) naming the field, its value and what is allowed.
    """

    system_cpu_limit: float = 0.85
    memory_usage_limit: float = 0.90
    initial_load_step: int = 2
    min_load_step: int = 1
    max_load_step: int = 16
    emergency_start_count: int = 1
    max_queue_size: int = 100_000

    def __post_init__(self) -> None:
        for name in ("system_cpu_limit", "memory_usage_limit"):
            value = getattr(self, name)
            # `not (0 < value <= 1)` also refuses NaN.
            if not 0.0 < value <= 1.0:
                _refuse(name, value, "a ratio with 0 < value <= 1")
        if self.min_load_step < 1:
            _refuse("min_load_step", self.min_load_step, "an integer >= 1")
        if self.initial_load_step < self.min_load_step:
            _refuse(
                "initial_load_step",
                self.initial_load_step,
                f"an integer >= min_load_step ({self.min_load_step})",
            )
        if self.max_load_step < self.initial_load_step:
            _refuse(
                "max_load_step",
                self.max_load_step,
                f"an integer >= initial_load_step ({self.initial_load_step})",
            )
        if self.emergency_start_count < 0:
            _refuse("emergency_start_count", self.emergency_start_count, "an integer >= 0")
        if self.max_queue_size < 0:
            _refuse("max_queue_size", self.max_queue_size, "an integer >= 0")


@dataclass(frozen=True)
class SubmitOutcome:
    """The decision for one job command.

    Attributes:
        decision: start, enqueue or refuse.
        reason: why, in words, for the job log (``"cpu 0.93 > system_cpu_limit 0.85"``).
        start_reason: why it started, when ``decision`` is ``START``; else ``None``.
    """

    decision: Decision
    reason: str
    start_reason: StartReason | None


@dataclass(frozen=True)
class ModeChange:
    """A change of emergency mode.

    Attributes:
        entered: ``True`` when emergency mode was entered, ``False`` when it was left.
        reason: why, in words (``"memory 0.93 (host) > memory_usage_limit 0.90"``).
    """

    entered: bool
    reason: str


class Admission:
    """The job queue's decisions, one instance per leader.

    Not thread-safe: the service calls it from its one admission loop.

    Args:
        limits: the validated limits.
    """

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._load_step = limits.initial_load_step
        self._emergency = False
        # Whether the previous check started a batch under low load (additive increase).
        self._batch_started_last_tick = False

    @property
    def limits(self) -> Limits:
        """The limits this instance decides with."""
        return self._limits

    @property
    def load_step(self) -> int:
        """Current load step: jobs per low-load check, in ``[min_load_step, max_load_step]``."""
        return self._load_step

    @property
    def emergency(self) -> bool:
        """Whether the service is in emergency mode."""
        return self._emergency

    def observe(self, load: Load) -> ModeChange | None:
        """Update emergency mode from a load sample.

        Enters when ``memory > memory_usage_limit``, leaves when
        ``memory < memory_usage_limit``; exactly at the limit the mode is kept.

        Args:
            load: the current load sample.

        Returns:
            The change of mode, or ``None`` when the mode is unchanged.
        """
        limit = self._limits.memory_usage_limit
        memory, limit_text = _pair(load.memory, limit)
        if not self._emergency and load.memory > limit:
            self._emergency = True
            return ModeChange(
                entered=True,
                reason=f"memory {memory} ({load.memory_source}) > memory_usage_limit {limit_text}",
            )
        if self._emergency and load.memory < limit:
            self._emergency = False
            return ModeChange(
                entered=False,
                reason=f"memory {memory} ({load.memory_source}) < memory_usage_limit {limit_text}",
            )
        return None

    def on_submit(self, *, queueable: bool, enqueued: int, load: Load) -> SubmitOutcome:
        """Decide what happens to a job command as it arrives.

        Calls :meth:`observe` with ``load`` first. A job that is not queueable starts
        at once regardless (``NOT_QUEUEABLE``). Otherwise it starts at once
        (``IMMEDIATE``) iff ``cpu <= system_cpu_limit``, not in emergency mode and
        ``enqueued == 0``; else it is enqueued, unless ``enqueued >= max_queue_size``,
        when it is refused (the reason names ``max_queue_size``).

        Args:
            queueable: the job's ``queueable`` execution property.
            enqueued: jobs in the queue now, before this one (>= 0).
            load: the current load sample.

        Returns:
            The decision and its reason.

        Raises:
            ValueError: ``enqueued`` is negative.
        """
        _check_enqueued(enqueued)
        self.observe(load)
        if not queueable:
            return SubmitOutcome(Decision.START, "not queueable", StartReason.NOT_QUEUEABLE)
        waits = self._reasons_to_wait(load, enqueued)
        if not waits:
            return SubmitOutcome(
                Decision.START, "load low, nothing enqueued", StartReason.IMMEDIATE
            )
        if enqueued >= self._limits.max_queue_size:
            return SubmitOutcome(
                Decision.REJECT,
                f"queue full: {enqueued} of max_queue_size {self._limits.max_queue_size}"
                " enqueued; raise max_queue_size to admit more",
                None,
            )
        return SubmitOutcome(Decision.ENQUEUE, "; ".join(waits), None)

    def tick(self, *, enqueued: int, load: Load) -> int:
        """One check of the queue (ten times a second by default): how many jobs to start.

        Calls :meth:`observe` with ``load`` first, then, in this order:

        * ``enqueued == 0``: start 0; the load step is unchanged (nothing to pace).
        * High load (``cpu > system_cpu_limit``, in or out of emergency mode): start 0
          and cut the load step to ``max(min_load_step, load_step // 2)``.
        * Emergency mode, low load: start ``min(emergency_start_count, enqueued)``;
          the load step is unchanged.
        * Low load: if the previous check also started a batch under low load, first
          raise the load step by 1 (capped at ``max_load_step``); then start
          ``min(load_step, enqueued)``.

        Args:
            enqueued: jobs in the queue now (>= 0).
            load: the current load sample.

        Returns:
            How many enqueued jobs to start now (``0 <= n <= enqueued``); the caller
            takes the oldest by Submitted time.

        Raises:
            ValueError: ``enqueued`` is negative.
        """
        _check_enqueued(enqueued)
        self.observe(load)
        batch_started_last_tick = self._batch_started_last_tick
        self._batch_started_last_tick = False
        if enqueued == 0:
            return 0
        if not self._cpu_low(load):
            self._load_step = max(self._limits.min_load_step, self._load_step // 2)
            return 0
        if self._emergency:
            return min(self._limits.emergency_start_count, enqueued)
        if batch_started_last_tick:
            self._load_step = min(self._limits.max_load_step, self._load_step + 1)
        self._batch_started_last_tick = True
        return min(self._load_step, enqueued)

    def _cpu_low(self, load: Load) -> bool:
        return load.cpu <= self._limits.system_cpu_limit

    def _reasons_to_wait(self, load: Load, enqueued: int) -> list[str]:
        """Why a queueable job may not start at once (empty: it may)."""
        reasons: list[str] = []
        if not self._cpu_low(load):
            cpu, limit = _pair(load.cpu, self._limits.system_cpu_limit)
            reasons.append(f"cpu {cpu} > system_cpu_limit {limit}")
        if self._emergency:
            reasons.append("emergency mode")
        if enqueued > 0:
            reasons.append(f"{enqueued} job{'' if enqueued == 1 else 's'} enqueued")
        return reasons


def _refuse(name: str, value: object, allowed: str) -> None:
    raise ConfigError(
        f"Limits.{name} is {value!r}; allowed: {allowed}",
        key=name,
        value=value,
        allowed=allowed,
    )


def _check_enqueued(enqueued: int) -> None:
    if enqueued < 0:
        raise ValueError(f"enqueued is {enqueued}; allowed: an integer >= 0")


def _pair(value: float, limit: float) -> tuple[str, str]:
    """Format a ratio and its limit with 2 decimals, or more where 2 would show them equal."""
    for decimals in range(2, 10):
        value_text, limit_text = f"{value:.{decimals}f}", f"{limit:.{decimals}f}"
        if value_text != limit_text or value == limit:
            return value_text, limit_text
    return repr(value), repr(limit)
