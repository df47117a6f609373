"""Requests made of parts: scheduled part by part, backed out, completed.

A request's parts are scheduled one by one; when one cannot be (the queue is full,
its lane disabled), the parts scheduled before it are backed out: an enqueued one
is freed (ABORTED), one that may already run becomes an **in-doubt** entry of the
stall array. When every part has ended OK, the ``completion`` step is scheduled;
if it cannot be, the request is a **hard stall**, re-schedulable by an operator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from admission.errors import (
    AdmissionError,
    AdmissionQueueFull,
    JobNotFound,
    LaneDisabled,
    RequestBackedOut,
)
from admission.jobs import JobRules, JobSpec
from admission.scheduler import Scheduler
from admission.store import FINAL_STATES, Job, JobState, RequestState, StallKind

log = logging.getLogger(__name__)


class Requests:
    """The requests of one admission service.

    Args:
        scheduler: the service's scheduler (store, clock, free, notify, gauges).
        rules: what a job may run and carry.
        submit: the service's submit (start, enqueue or refuse one job).
    """

    def __init__(self, scheduler: Scheduler, rules: JobRules, submit: Callable[..., Job]) -> None:
        self.scheduler = scheduler
        self.rules = rules
        self.submit_job = submit

    def submit(
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
            self.rules.resolve(spec.argv)
            self.rules.check_spec(spec)
        request_id = self.scheduler.store.add_request(
            None if completion is None else completion.as_fields(), self.scheduler.clock()
        )
        scheduled: list[Job] = []
        for i, spec in enumerate(parts, start=1):
            try:
                scheduled.append(self.schedule(spec, request_id=request_id, role="part"))
            except (AdmissionQueueFull, LaneDisabled) as exc:
                reason = f"part {i} of {len(parts)} could not be scheduled: {exc}"
                outcome = self._back_out(request_id, scheduled, reason)
                raise RequestBackedOut(
                    f"request {request_id} backed out: {reason}; {outcome}"
                ) from exc
        log.info("request %d scheduled: %d parts", request_id, len(scheduled))
        return request_id, [self.scheduler.get(j.id) for j in scheduled]

    def request(self, request_id: int) -> dict[str, object]:
        """A request: its state, reason, completion step and jobs (``GET /requests/{id}``),
        as the API shows it: the completion step's ``env`` and the jobs' are the sorted
        variables' names, never their values (a value may be a secret).

        Raises:
            JobNotFound: no such request.
        """
        row = self.scheduler.store.request(request_id)
        if row is None:
            raise JobNotFound(f"no request {request_id}")
        completion = row.get("completion")
        if completion is not None:
            completion = {**completion, "env": sorted(completion.get("env") or {})}
        return {
            **row,
            "completion": completion,
            "jobs": [j.as_json() for j in self.scheduler.store.of_request(request_id)],
        }

    def schedule(self, spec: JobSpec, *, request_id: int, role: str) -> Job:
        disabled = self.scheduler.store.disabled_lanes()
        if spec.lane in disabled:
            raise LaneDisabled(f"lane {spec.lane!r} is disabled ({disabled[spec.lane]})")
        return self.submit_job(spec, request_id=request_id, role=role)

    def _back_out(self, request_id: int, scheduled: Sequence[Job], reason: str) -> str:
        freed, in_doubt = [], []
        now = self.scheduler.clock()
        for job in scheduled:
            if self.scheduler.free(job.id, f"backed out: {reason}", now):
                freed.append(job.id)
                self.scheduler.notify(job.id)
                continue
            current = self.scheduler.get(job.id)
            if current.state is JobState.RUNNING:
                self.scheduler.store.add_stall(
                    job.id,
                    StallKind.IN_DOUBT,
                    f"request {request_id} backed out while this part may be running: {reason}",
                    now,
                    request_id=request_id,
                )
                in_doubt.append(job.id)
        self.scheduler.store.set_request(request_id, RequestState.BACKED_OUT, reason)
        log.warning(
            "request %d backed out (%s): jobs %s freed, jobs %s in doubt",
            request_id,
            reason,
            freed,
            in_doubt,
        )
        self.scheduler.refresh_gauges()
        return f"freed jobs {freed}, in doubt: jobs {in_doubt}"

    def part_ended(self, request_id: int) -> None:
        """After a part ended: when all have, schedule the completion step (or fail)."""
        row = self.scheduler.store.request(request_id)
        if row is None or row["state"] != RequestState.SCHEDULED.value:
            return
        parts = [j for j in self.scheduler.store.of_request(request_id) if j.role == "part"]
        if any(j.state not in FINAL_STATES for j in parts):
            return
        if any(j.state is not JobState.FINISHED_OK for j in parts):
            failed = [j.id for j in parts if j.state is not JobState.FINISHED_OK]
            self.scheduler.store.set_request(
                request_id, RequestState.FAILED, f"parts {failed} did not end OK"
            )
            return
        self.complete(request_id, row["completion"], last=parts[-1].id)

    def complete(self, request_id: int, completion: dict[str, object] | None, *, last: int) -> bool:
        if completion is None:
            self.scheduler.store.set_request(request_id, RequestState.COMPLETED)
            return True
        try:
            self.schedule(JobSpec.from_fields(completion), request_id=request_id, role="completion")
        except AdmissionError as exc:
            reason = f"completion step of request {request_id} could not be scheduled: {exc}"
            self.scheduler.store.set_request(request_id, RequestState.STALLED, reason)
            self.scheduler.store.add_stall(
                last, StallKind.HARD, reason, self.scheduler.clock(), request_id=request_id
            )
            log.error("FG-ADM-005 request %d hard stall: %s", request_id, reason)
            self.scheduler.refresh_gauges()
            return False
        self.scheduler.store.set_request(request_id, RequestState.COMPLETED)
        return True
