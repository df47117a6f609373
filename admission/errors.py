"""What the admission service refuses, each with the HTTP status its API answers."""

from __future__ import annotations

from pipeline.errors import FloodgateError


class AdmissionError(FloodgateError):
    """A request the admission service refuses; ``status`` is the HTTP status to answer."""

    status = 400


class CommandNotAllowed(AdmissionError, PermissionError):
    """The job's program is not on ``allowlist``; nothing was started."""

    status = 403


class EnvNotAllowed(AdmissionError, PermissionError):
    """The job's ``env`` names a variable on the deny-list (:mod:`admission.environment`:
    it would change what an allowlisted program loads); nothing was stored or
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


class RequestNotAuthenticated(AdmissionError, PermissionError):
    """A request on the intake's topic is not signed with ``admission.intake_key``, or
    its signature is malformed, wrong, too old or too far ahead
    (:mod:`admission.signing`); nothing was stored. Dead-lettered as
    ``not-authenticated``."""

    status = 401


class RequestReplayed(AdmissionError, PermissionError):
    """A signed request the intake already took from another offset, written again
    within ``admission.intake_max_age_s``; nothing was stored. Dead-lettered as
    ``replayed``."""

    status = 409


class IntakeSignatureTaken(AdmissionError):
    """A signed request of the intake was recorded as taken while this delivery was
    submitting it (another instance, or another delivery of it, took it first); no job
    was stored. The intake then reads what the first recorded."""

    status = 409
