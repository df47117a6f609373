"""The admission service's REST API (FastAPI; OpenAPI schema at ``/openapi.json``).

Reads are open (the service binds to loopback unless configured otherwise) and never
show a job's ``env`` values, only the variables' names; every call that may change
state (every ``POST``) needs ``Authorization: Bearer <admission.token>``, compared in
constant time (401 without it or with a wrong one), checked before a byte of the body
is read; a body over ``admission.max_request_body_bytes`` (1 MiB) is 413 before it is
parsed (:class:`~pipeline.http.gates.RequestGate`). Errors answer with the reason:
403 a program off the allowlist or a denied ``env`` variable, 404 no such job, 409 a
job in the wrong state, 421 a call only the leader can serve (the detail names it),
503 the queue is full, 400 a body that is not UTF-8, 422 a malformed request (the
detail names the field: a NUL byte in ``argv``, ``cwd``, ``env`` or ``lane``; an empty
name or ``=`` in an ``env`` name; an id beyond 2^63 - 1; a NaN or infinite
``expected_s``; a boolean given as anything but ``true``/``false``). Every status is
in the schema.
"""

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from admission.errors import AdmissionError
from admission.jobs import JobRequest, ProcessText
from admission.service import AdmissionService
from admission.store import JobState
from pipeline.http.gates import AuthThrottle, RequestGate
from pipeline.metrics import add_metrics_route
from pipeline.security.credentials import carries_bearer, same_secret

#: The largest id a job, request or stall entry can have: a signed 64-bit SQL integer.
MAX_ID = 2**63 - 1


#: An id in a path: a positive 64-bit integer.
Id = Annotated[int, Path(ge=1, le=MAX_ID, description="A positive 64-bit integer.")]


class RequestBody(BaseModel):
    """``POST /requests``: a request made of parts, and an optional completion step run
    once every part has ended OK (an asynchronous request and its output step)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    parts: Annotated[list[JobRequest], Field(min_length=1)]
    completion: JobRequest | None = None


class Refusal(BaseModel):
    """The body of a refused call: ``{"detail": reason}``."""

    detail: str


class Malformed(BaseModel):
    """The body of a 422: FastAPI's list of refused fields (``loc`` names each one),
    or the service's reason."""

    detail: str | list[dict[str, Any]]


def _refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route that may answer ``statuses`` (and their meaning)."""
    meaning = {
        400: "The body could not be read as JSON text (it is not UTF-8).",
        401: "No bearer token, or a wrong one (WWW-Authenticate: Bearer); the body was not read.",
        429: "Too many failed authentications from this address (Retry-After); not checked.",
        403: "The program is not on admission.allowlist, or env names a denied variable.",
        404: "No such job, request or stall entry.",
        409: "The job, request or stall entry is not in a state that allows this.",
        413: "The body is over admission.max_request_body_bytes; it was not read further.",
        421: "Only the leader can do this; the detail names it.",
        422: "A malformed request; the detail names the field.",
        503: "The job queue holds admission.max_queue_size jobs.",
    }
    return {
        status: {"model": Malformed if status == 422 else Refusal, "description": meaning[status]}
        for status in sorted(statuses)
    }


#: A job's fields that tell where its process and the service run (``pid``;
#: ``started_by``, the instance ``<host>:<pid>:<random>`` that started it).
PROCESS_FIELDS = ("pid", "started_by")


def without_process(job: dict[str, Any]) -> dict[str, Any]:
    """A job as a read without the token shows it: without :data:`PROCESS_FIELDS`."""
    return {k: v for k, v in job.items() if k not in PROCESS_FIELDS}


def without_instances(status: dict[str, Any]) -> dict[str, Any]:
    """``/status`` as a read without the token shows it: the leadership without any
    instance (``<host>:<pid>:<random>``) or address; whether this one leads stays.
    Knowing the service's process id is the first step to its ``/proc`` files."""
    leader = status.get("leader")
    if not isinstance(leader, dict):
        return status
    return {**status, "leader": {"is_leader": leader.get("is_leader")}}


def build_app(service: AdmissionService) -> FastAPI:
    """The ASGI app of one :class:`AdmissionService`, behind its
    :class:`~pipeline.http.gates.RequestGate` (token, then body limit)."""
    app = FastAPI(
        title="floodgate admission",
        description=(
            "Starts jobs when CPU and memory allow. Reads are open and show no env "
            "values; every POST needs the admission token as a bearer token."
        ),
    )
    bearer = HTTPBearer(auto_error=False, description="The admission token (admission.token).")
    token = service.settings.token.get_secret_value() if service.settings.token else ""
    app.add_middleware(
        RequestGate,
        token=token,
        max_body_bytes=service.settings.max_request_body_bytes,
        token_name="admission.token",
        limit_name="admission.max_request_body_bytes",
        registry=service.registry,
        throttle=AuthThrottle(
            max_failures=service.settings.auth_max_failures,
            window_s=service.settings.auth_failure_window_s,
        ),
    )

    @app.exception_handler(RequestValidationError)
    async def malformed(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each refused field (``loc``) and why, without echoing the input:
        it may hold a secret (an ``env`` value), or a NaN that JSON cannot carry."""
        errors = [
            {k: v for k, v in error.items() if k not in ("input", "ctx", "url")}
            for error in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})

    def authorised(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if credentials is None or not same_secret(credentials.credentials, token):
            raise HTTPException(
                status_code=401,
                detail="a bearer token (admission.token) is required for this call",
                headers={"WWW-Authenticate": "Bearer"},
            )

    auth = [Depends(authorised)]

    def holds_token(request: Request) -> bool:
        """Whether a read carries the admission token: only then does it show where the
        service and its jobs run (process ids, host names). Read from the header, not
        through ``bearer``: reads stay open, and their schema asks for no token."""
        return carries_bearer(request.headers.get("Authorization"), token)

    Caller = Annotated[bool, Depends(holds_token)]

    def answer(call: Any) -> Any:
        try:
            return call()
        except AdmissionError as exc:
            raise HTTPException(status_code=exc.status, detail=str(exc)) from exc

    @app.post(
        "/jobs",
        dependencies=auth,
        status_code=201,
        responses=_refusals(400, 401, 429, 403, 413, 422, 503),
    )
    def submit(request: JobRequest) -> dict[str, Any]:
        """Submit a job: started at once, enqueued, or refused."""
        spec = request.spec()
        return answer(lambda: service.submit(spec).as_json())

    @app.post(
        "/requests",
        dependencies=auth,
        status_code=201,
        responses=_refusals(400, 401, 429, 403, 409, 413, 422, 503),
    )
    def submit_request(body: RequestBody) -> dict[str, Any]:
        """Schedule a request part by part; a part that fails to schedule backs out the
        others (409, with what was freed and what is in doubt)."""
        parts = [p.spec() for p in body.parts]
        completion = body.completion.spec() if body.completion else None

        def schedule() -> dict[str, Any]:
            request_id, _jobs = service.submit_request(parts, completion)
            return dict(service.request(request_id))

        return answer(schedule)

    @app.get("/requests/{request_id}", responses=_refusals(404, 422))
    def request(request_id: Id, trusted: Caller) -> dict[str, Any]:
        """A request: state, reason, completion step (its env's names only), jobs
        (their process ids only with the token)."""
        shown = answer(lambda: dict(service.request(request_id)))
        if not trusted:
            shown["jobs"] = [without_process(j) for j in shown.get("jobs", [])]
        return shown

    @app.get("/jobs", responses=_refusals(422))
    def jobs(
        trusted: Caller,
        state: JobState | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> list[dict[str, Any]]:
        """Jobs, newest first (their env's names only; process ids only with the token)."""
        shown = [j.as_json() for j in service.store.recent(state=state, limit=limit)]
        return shown if trusted else [without_process(j) for j in shown]

    @app.get("/jobs/{job_id}", responses=_refusals(404, 422))
    def job(job_id: Id, trusted: Caller) -> dict[str, Any]:
        """One job (its env's names only; its process id only with the token)."""
        shown = answer(lambda: service.job(job_id).as_json())
        return shown if trusted else without_process(shown)

    @app.post(
        "/jobs/{job_id}/start-now",
        dependencies=auth,
        responses=_refusals(401, 429, 404, 409, 413, 422),
    )
    def start_now(job_id: Id) -> dict[str, Any]:
        """Start an enqueued job at once, whatever the load (logged as forced)."""
        return answer(lambda: service.start_now(job_id).as_json())

    @app.post(
        "/jobs/{job_id}/cancel",
        dependencies=auth,
        responses=_refusals(401, 429, 404, 409, 413, 421, 422),
    )
    def cancel(job_id: Id) -> dict[str, Any]:
        """Abort a job (taken out of the queue, or stopped)."""
        return answer(lambda: service.cancel(job_id).as_json())

    @app.post("/suspend", dependencies=auth, responses=_refusals(401, 429, 413, 421, 422))
    def suspend(at_once: bool = False) -> dict[str, object]:
        """Stop starting jobs; ``at_once`` also aborts running and enqueued ones."""

        def run() -> dict[str, object]:
            service.suspend(at_once=at_once)
            return service.status()

        return answer(run)

    @app.post("/resume", dependencies=auth, responses=_refusals(401, 429, 413, 421))
    def resume() -> dict[str, object]:
        """Start jobs again."""

        def run() -> dict[str, object]:
            service.resume()
            return service.status()

        return answer(run)

    @app.get("/status")
    def status(trusted: Caller) -> dict[str, object]:
        """Load, emergency mode, load step, jobs by state, disabled lanes; the leader's
        instance (host, process id) and address only with the token."""
        shown = service.status()
        return shown if trusted else without_instances(shown)

    @app.get("/stalls")
    def stalls() -> list[dict[str, Any]]:
        """The stall array: hard stalls and long-running jobs."""
        return [s.as_json() for s in service.stalls()]

    @app.post(
        "/stalls/{stall_id}/reschedule",
        dependencies=auth,
        status_code=201,
        responses=_refusals(401, 429, 403, 404, 409, 413, 422, 503),
    )
    def reschedule(stall_id: Id) -> dict[str, Any]:
        """Enqueue a hard-stalled job's command again, as a new job."""
        return answer(lambda: service.reschedule(stall_id).as_json())

    @app.post("/lanes/{name}/enable", dependencies=auth, responses=_refusals(401, 429, 413, 422))
    def enable_lane(name: Annotated[ProcessText, Path(max_length=200)]) -> dict[str, object]:
        """Let a lane disabled by a hard stall start jobs again."""
        service.enable_lane(name)
        return service.status()

    add_metrics_route(app, service.registry)
    return app
