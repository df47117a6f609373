"""A job command, and the rules of what a job may run and carry.

A job's program must be on ``admission.allowlist`` (resolved to an absolute path);
its ``env`` may not name a variable on the deny-list of
:mod:`admission.environment` (it would change what an allowlisted program loads);
nothing in ``argv``, ``cwd`` or ``env`` may be what a process cannot be given.
The rules are checked at submit and again when a stored job starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from admission.config import resolve_program
from admission.environment import denied_reason, invalid_reason
from admission.errors import AdmissionError, CommandNotAllowed, EnvNotAllowed, InvalidJob
from admission.metrics import AdmissionMetrics
from admission.store import Job

log = logging.getLogger(__name__)


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


class JobRules:
    """The allowlist and the env rules, applied to a submitted spec or a stored job.

    Args:
        allowlist: ``{absolute path: as configured}`` of every allowlist entry
            (:meth:`~admission.config.AdmissionSettings.resolved_allowlist`).
        metrics: where refusals are counted (``reason="not-allowed"``).
    """

    def __init__(self, allowlist: Mapping[str, str], metrics: AdmissionMetrics) -> None:
        self.allowlist = allowlist
        self.metrics = metrics

    def resolve(self, argv: Sequence[str]) -> str:
        """The absolute path of ``argv[0]``, when it is on the allowlist.

        Raises:
            AdmissionError: ``argv`` is empty.
            CommandNotAllowed: the program is not on the allowlist (counted, logged
                ``FG-ADM-004``).
        """
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

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse what a job may not carry.

        Raises:
            EnvNotAllowed: ``env`` names a denied variable (403; counted, logged).
            InvalidJob: ``argv``, ``cwd`` or ``env`` holds what a process cannot be
                given (422).
        """
        for i, arg in enumerate(spec.argv):
            if "\0" in arg:
                raise InvalidJob(f"argv[{i}] holds a NUL byte (a process cannot take it)")
        if spec.cwd is not None and "\0" in spec.cwd:
            raise InvalidJob("cwd holds a NUL byte (a process cannot take it)")
        why = self.env_refusal(spec.env)
        if why is not None:
            message, variable, denied = why
            if not denied:
                raise InvalidJob(message)
            self.metrics.rejections.labels("not-allowed").inc()
            log.warning("FG-ADM-004 submit refused: %s", message)
            raise EnvNotAllowed(message, variable=variable)

    @staticmethod
    def env_refusal(env: Mapping[str, str]) -> tuple[str, str, bool] | None:
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

    def refusal_at_start(self, job: Job) -> str | None:
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
        why = self.env_refusal(job.env)
        return None if why is None else why[0]
