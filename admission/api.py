"""The admission service's REST API (FastAPI; OpenAPI schema at ``/openapi.json``).

Reads are open (the service binds to loopback unless configured otherwise); every
mutating call needs ``Authorization: Bearer <admission.token>``, compared in
constant time (401 without it or with a wrong one). Errors answer with the
reason: 403 a program off the allowlist, 404 no such job, 409 a job in the wrong
state, 421 a call only the leader can serve (the detail names it), 503 the queue is
full, 422 a malformed request.
"""

import secrets
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from admission.service import AdmissionError, AdmissionService, JobSpec
from admission.store import JobState
from pipeline.metrics import add_metrics_route


class JobRequest(BaseModel):
    """``POST /jobs``: a job command."""

    model_config = ConfigDict(extra="forbid")

    argv: Annotated[list[str], Field(min_length=1)]
    """The command line; ``argv[0]`` must be on the allowlist."""
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    queueable: bool = True
    expected_s: Annotated[float, Field(gt=0)] | None = None
    abnormal_exit: bool = False
    lane: Annotated[str, Field(min_length=1, max_length=200)] = "default"


class RequestBody(BaseModel):
    """``POST /requests``: a request made of parts, and an optional completion step run
    once every part has ended OK (seed 002's asynchronous request and output agent)."""

    model_config = ConfigDict(extra="forbid")

    parts: Annotated[list[JobRequest], Field(min_length=1)]
    completion: JobRequest | None = None


def build_app(service: AdmissionService) -> FastAPI:
    """The ASGI app of one :class:`AdmissionService`."""
    app = FastAPI(
        title="floodgate admission",
        description="Starts jobs when CPU and memory allow (DESIGN.md section 5).",
    )
    bearer = HTTPBearer(auto_error=False)
    token = service.settings.token.get_secret_value() if service.settings.token else ""

    def authorised(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if credentials is None or not secrets.compare_digest(
            credentials.credentials.encode(), token.encode()
        ):
            raise HTTPException(
                status_code=401,
                detail="a bearer token (admission.token) is required for this call",
                headers={"WWW-Authenticate": "Bearer"},
            )

    auth = [Depends(authorised)]

    def answer(call: Any) -> Any:
        try:
            return call()
        except AdmissionError as exc:
            raise HTTPException(status_code=exc.status, detail=str(exc)) from exc

    @app.post("/jobs", dependencies=auth, status_code=201)
    def submit(request: JobRequest) -> dict[str, Any]:
        """Submit a job: started at once, enqueued, or refused."""
        spec = JobSpec(**request.model_dump())
        return answer(lambda: service.submit(spec).as_json())

    @app.post("/requests", dependencies=auth, status_code=201)
    def submit_request(body: RequestBody) -> dict[str, Any]:
        """Schedule a request part by part; a part that fails to schedule backs out the
        others (409, with what was freed and what is in doubt)."""
        parts = [JobSpec(**p.model_dump()) for p in body.parts]
        completion = JobSpec(**body.completion.model_dump()) if body.completion else None

        def schedule() -> dict[str, Any]:
            request_id, _jobs = service.submit_request(parts, completion)
            return dict(service.request(request_id))

        return answer(schedule)

    @app.get("/requests/{request_id}")
    def request(request_id: int) -> dict[str, Any]:
        """A request: state, reason, completion step, jobs."""
        return answer(lambda: dict(service.request(request_id)))

    @app.get("/jobs")
    def jobs(
        state: JobState | None = None, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> list[dict[str, Any]]:
        """Jobs, newest first."""
        return [j.as_json() for j in service.store.recent(state=state, limit=limit)]

    @app.get("/jobs/{job_id}")
    def job(job_id: int) -> dict[str, Any]:
        """One job."""
        return answer(lambda: service._get(job_id).as_json())

    @app.post("/jobs/{job_id}/start-now", dependencies=auth)
    def start_now(job_id: int) -> dict[str, Any]:
        """Start an enqueued job at once, whatever the load (logged as forced)."""
        return answer(lambda: service.start_now(job_id).as_json())

    @app.post("/jobs/{job_id}/cancel", dependencies=auth)
    def cancel(job_id: int) -> dict[str, Any]:
        """Abort a job (taken out of the queue, or stopped)."""
        return answer(lambda: service.cancel(job_id).as_json())

    @app.post("/suspend", dependencies=auth)
    def suspend(at_once: bool = False) -> dict[str, object]:
        """Stop starting jobs; ``at_once`` also aborts running and enqueued ones."""

        def run() -> dict[str, object]:
            service.suspend(at_once=at_once)
            return service.status()

        return answer(run)

    @app.post("/resume", dependencies=auth)
    def resume() -> dict[str, object]:
        """Start jobs again."""

        def run() -> dict[str, object]:
            service.resume()
            return service.status()

        return answer(run)

    @app.get("/status")
    def status() -> dict[str, object]:
        """Load, emergency mode, load step, jobs by state, disabled lanes."""
        return service.status()

    @app.get("/stalls")
    def stalls() -> list[dict[str, Any]]:
        """The stall array: hard stalls and long-running jobs."""
        return [s.as_json() for s in service.stalls()]

    @app.post("/stalls/{stall_id}/reschedule", dependencies=auth, status_code=201)
    def reschedule(stall_id: int) -> dict[str, Any]:
        """Enqueue a hard-stalled job's command again, as a new job."""
        return answer(lambda: service.reschedule(stall_id).as_json())

    @app.post("/lanes/{name}/enable", dependencies=auth)
    def enable_lane(name: str) -> dict[str, object]:
        """Let a lane disabled by a hard stall start jobs again."""
        service.enable_lane(name)
        return service.status()

    add_metrics_route(app, service.registry)
    return app
