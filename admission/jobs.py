"""A job command, and the rules of what a job may run and carry.

A job's program must be on ``admission.allowlist`` exactly (both compared as
:func:`~admission.config.resolve_program` makes them: the folder resolved, the
file's own name kept) and runs by that path with ``argv[0]`` as given; its ``env``
may set only what ``admission.job_env_allowlist`` names, and nothing on the deny-list
of :mod:`admission.environment` (it would change what an allowlisted program loads);
nothing in ``argv``, ``cwd`` or ``env`` may be what a process cannot be given.

:class:`JobRequest` is the one model of a job command as a requester sends it: the
REST API (``POST /jobs``, the parts of ``POST /requests``) and the Kafka intake
(a decoded ``job_request`` tuple) validate with it, so the same input gets the same
refusal through either door. The rules are checked at submit and again when a
stored job starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from admission.config import resolve_program
from admission.environment import denied_reason, env_allowed, invalid_reason
from admission.errors import AdmissionError, CommandNotAllowed, EnvNotAllowed, InvalidJob
from admission.metrics import AdmissionMetrics
from admission.store import Job

log = logging.getLogger(__name__)


def process_text(value: str) -> str:
    """``value``, if a process can be given it: no NUL byte (``execve`` takes
    NUL-terminated strings) and valid Unicode (no lone surrogate: it cannot be encoded
    to the bytes of an argument, a variable or a database row).

    Raises:
        ValueError: it holds a NUL byte or a lone surrogate (pydantic answers 422
            naming the field).
    """
    if "\0" in value:
        raise ValueError("holds a NUL byte (a process cannot take it)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("is not valid Unicode text (it holds a lone surrogate)") from exc
    return value


def process_env(env: dict[str, str]) -> dict[str, str]:
    """``env``, if a process can be given it: every name non-empty without ``=`` or
    a NUL byte, every name and value valid text (:func:`process_text`).

    Raises:
        ValueError: naming the first variable refused (pydantic answers 422).
    """
    for name, value in env.items():
        why = invalid_reason(name, value)
        if why is not None:
            raise ValueError(why)
        for text in (name, value):
            try:
                process_text(text)
            except ValueError as exc:
                raise ValueError(f"environment variable {name!r}: {exc}") from None
    return env


#: Text a process is given (an argument, a working directory, a lane's name).
ProcessText = Annotated[str, AfterValidator(process_text)]


class JobRequest(BaseModel):
    """A job command as a requester sends it: the body of ``POST /jobs``, a part of
    ``POST /requests``, a decoded ``job_request`` tuple of the Kafka intake. Strict: a
    boolean is ``true`` or ``false``, a number a number (no strings coerced).

    Raises (``model_validate``):
        pydantic.ValidationError: naming each refused field (REST answers 422; the
            intake dead-letters the request as ``bad-request``).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    argv: Annotated[list[ProcessText], Field(min_length=1)]
    """The command line; ``argv[0]`` must be on the allowlist."""
    cwd: ProcessText | None = None
    env: Annotated[dict[str, str], AfterValidator(process_env)] = Field(default_factory=dict)
    """Variables over the base set the service builds; names without ``=``, each on
    ``admission.job_env_allowlist`` and none on the deny-list (403). Reads show their
    names only."""
    queueable: bool = True
    expected_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Expected run time (seconds, finite); past it the job is flagged long-running."""
    abnormal_exit: bool = False
    lane: Annotated[ProcessText, Field(min_length=1, max_length=200)] = "default"

    def spec(self) -> JobSpec:
        """The command as the service takes it."""
        return JobSpec(**self.model_dump())


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
        allowlist: ``{path: as configured}`` of every allowlist entry
            (:meth:`~admission.config.AdmissionSettings.resolved_allowlist`).
        metrics: where refusals are counted (``reason="not-allowed"``).
        job_path: ``admission.job_path``, where a bare program name is looked up.
        env_allowlist: ``admission.job_env_allowlist``
            (:func:`~admission.environment.env_allowed`).
    """

    def __init__(
        self,
        allowlist: Mapping[str, str],
        metrics: AdmissionMetrics,
        *,
        job_path: str | None = None,
        env_allowlist: Sequence[str] = (),
    ) -> None:
        self.allowlist = allowlist
        self.metrics = metrics
        self.job_path = job_path
        self.env_allowlist = tuple(env_allowlist)

    def program(self, argv: Sequence[str]) -> str | None:
        """The allowlisted path ``argv[0]`` stands for, or ``None`` when it is on no
        entry (after :func:`~admission.config.resolve_program`, symlinks not followed)."""
        if not argv:
            return None
        path = resolve_program(argv[0], self.job_path)
        return path if path in self.allowlist else None

    def resolve(self, argv: Sequence[str]) -> str:
        """The allowlisted path of ``argv[0]``: the job runs that file, with ``argv`` as
        given.

        Raises:
            AdmissionError: ``argv`` is empty.
            CommandNotAllowed: the program is not on the allowlist (counted, logged
                ``FG-ADM-004``).
        """
        if not argv:
            raise AdmissionError("a job needs a command: argv is empty")
        path = self.program(argv)
        if path is None:
            self.metrics.rejections.labels("not-allowed").inc()
            log.warning("FG-ADM-004 submit refused: %r is not on admission.allowlist", argv[0])
            raise CommandNotAllowed(self._not_allowed(argv[0]))
        return path

    def _not_allowed(self, program: str) -> str:
        return (
            f"program {program!r} is not on admission.allowlist "
            f"(allowed: {sorted(self.allowlist.values())}; an entry admits that path "
            "alone, not other names of the same file)"
        )

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse what a job may not carry.

        Raises:
            EnvNotAllowed: ``env`` names a variable off the env allow-list or on the
                deny-list (403; counted, logged).
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

    def env_refusal(self, env: Mapping[str, str]) -> tuple[str, str, bool] | None:
        """``(message, variable, denied?)`` for the first variable of ``env`` refused:
        one a process cannot take (not denied: 422), one on the deny-list or off
        ``admission.job_env_allowlist`` (denied: 403)."""
        for name, value in env.items():
            invalid = invalid_reason(name, value)
            if invalid is not None:
                return f"env: {invalid}", name, False
            denied = denied_reason(name)
            if denied is not None:
                return (
                    f"env variable {name!r} is not allowed in a job's environment: {denied} "
                    "(the deny-list of docs/security.md)",
                    name,
                    True,
                )
            if not env_allowed(name, self.env_allowlist):
                return (
                    f"env variable {name!r} is not on admission.job_env_allowlist "
                    f"(allowed: {list(self.env_allowlist)}); the operator names the "
                    "variables jobs may set",
                    name,
                    True,
                )
        return None

    def refusal_at_start(self, job: Job) -> str | None:
        """Why a stored job may not start now: its program left the allowlist, or its
        ``env`` holds what is refused today (it was enqueued before the rules changed)."""
        if not job.argv:
            return "it has no command"
        if self.program(job.argv) is None:
            return self._not_allowed(job.argv[0])
        why = self.env_refusal(job.env)
        return None if why is None else why[0]
