"""The query group's HTTP endpoint: Prometheus metrics and control, on one port.

A running query group (:meth:`pipeline.spark.query_group.QueryGroup.serve`) answers:

* ``GET /metrics`` -- its Prometheus metrics (the group's ``CollectorRegistry``);
* ``GET /status`` -- state, hold, queries and output queues as JSON
  (:meth:`~pipeline.spark.query_group.QueryGroup.status`); the driver's and the
  executors' hosts and ports only to a caller with the control token;
* ``GET /identity?challenge=<hex>`` -- the proof that this endpoint wrote its control
  file (:func:`pipeline.http.control_file.prove` under the file's identity key);
* ``POST /release`` -- release a HELD group (409 with the reason otherwise);
* ``POST /stop`` -- stop the group (202; the process that runs it exits).

The OpenAPI schema is at ``/openapi.json``.

**The control token**. Every call that changes state (``POST /release``,
``POST /stop``) needs ``Authorization: Bearer <token>``, compared in constant time
(:func:`~pipeline.security.credentials.same_secret`); without it, or with another, the
answer is 401 with ``WWW-Authenticate: Bearer`` (RFC 6750 section 3) and nothing
changes. The endpoint's :class:`~pipeline.http.gates.RequestGate` checks it before
the app, and answers 429 to an address after 10 failures in 60 s. Reads
(``/metrics``, ``/status``, ``/openapi.json``, ``/docs``) stay open: they change
nothing and show no secret, and ``/status`` shows where the driver and its
executors run (hosts, ports) only with the token. The token is
:data:`CONTROL_TOKEN_ENV` when that is set (taken as it is written, never parsed),
else a random one made at start.

**Control files.** On start the server writes ``<control_dir>/<query group>.json``
(:func:`pipeline.http.control_file.write_control_file`: the URL, its process id
and start time, and an identity key made at each start) and, when it made the token
itself, ``<control_dir>/<query group>.token``; both mode 0600, replaced atomically, never
written through a symbolic link, the folder 0700 when it is made. A control folder
that others can write to, or that another user owns, is refused before the group
starts (:func:`check_control_dir`): its files could be swapped.
So ``floodgate query-group status|release|stop NAME`` run by the same user on the
same host finds the endpoint and its token by name
(:func:`pipeline.http.client.call`, which trusts only control files of its
own user, and sends the token only to an endpoint that proves it wrote the file);
both files are removed on stop. ``--url`` reaches any other endpoint, with
the token from :data:`CONTROL_TOKEN_ENV`.

FastAPI and uvicorn do the HTTP (a well-kept library over our own code); the server
runs in a daemon thread of the driver.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from pipeline.errors import ConfigError, QueryGroupError
from pipeline.http.client import CONTROL_TOKEN_ENV
from pipeline.http.control_file import (
    IDENTITY_PATH,
    new_identity_key,
    prove,
    read_control_file,
    write_control_file,
)
from pipeline.http.gates import RequestGate
from pipeline.http.serving import AppServer
from pipeline.metrics import add_metrics_route
from pipeline.security.credentials import (
    carries_bearer,
    check_distinct,
    check_secret,
    same_secret,
)
from pipeline.state.files import private_dir, read_trusted, write_private_text

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)


class Releasable(Protocol):
    """A held query group's release (:class:`~pipeline.spark.hold.Hold`)."""

    def release(self) -> None:
        """Release a HELD group (raises ``QueryGroupError`` when it is not HELD)."""


class ControlledGroup(Protocol):
    """What the control endpoint needs of a query group
    (:class:`~pipeline.spark.query_group.QueryGroup` is one)."""

    name: str
    registry: CollectorRegistry

    def status(self) -> dict[str, Any]:
        """The group as ``GET /status`` shows it."""

    @property
    def hold(self) -> Releasable:
        """The group's hold (:class:`~pipeline.spark.hold.Hold`)."""

    def request_stop(self) -> None:
        """Stop the group from another thread."""


class Refusal(BaseModel):
    """The body of a refused call: FastAPI's ``{"detail": reason}``."""

    detail: str


#: The bearer scheme (module level: FastAPI resolves the dependency's annotation, a
#: string under ``from __future__ import annotations``, in this module's globals).
_BEARER = HTTPBearer(auto_error=False, description="The query group's control token.")


_UNAUTHORISED: dict[int | str, dict[str, Any]] = {
    401: {
        "model": Refusal,
        "description": "No bearer token, or not the control token; nothing changed.",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    },
    429: {
        "model": Refusal,
        "description": "Too many failed authentications from this address; not checked.",
        "headers": {"Retry-After": {"schema": {"type": "string"}}},
    },
}


#: The admission service's token variable: a driver whose environment holds it too
#: (one ``.env`` for a compose stack) refuses a control token equal to it.
ADMISSION_TOKEN_ENV = "FLOODGATE__ADMISSION__TOKEN"


def resolve_token(env: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """The control token of an endpoint about to start.

    Args:
        env: environment (default ``os.environ``), read for :data:`CONTROL_TOKEN_ENV`.

    Returns:
        ``(token, generated)``: the variable's value as written and ``False``, or a
        random 43-character URL-safe token (256 bits, :func:`secrets.token_urlsafe`)
        and ``True`` when the variable is not set.

    Raises:
        ConfigError: the variable is set but empty, holds a character an HTTP
            ``Authorization`` header cannot carry in a bearer token (whitespace,
            control characters, non-ASCII), is weaker than 128 bits
            (:func:`~pipeline.security.credentials.check_secret`), or is the admission
            token of the same environment (:data:`ADMISSION_TOKEN_ENV`); names the
            variable.
    """
    env = os.environ if env is None else env
    token = env.get(CONTROL_TOKEN_ENV)
    if token is None:
        return secrets.token_urlsafe(32), True
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise ConfigError(
            f"{CONTROL_TOKEN_ENV} is set but {'empty' if not token else 'not a bearer token'}: "
            "give it printable ASCII without spaces (e.g. openssl rand -hex 16), or unset "
            "it and the query group makes a random token and writes it to its control "
            "file <control_dir>/<name>.token",
            key=CONTROL_TOKEN_ENV,
            allowed="a non-empty string of printable ASCII characters without spaces",
        )
    check_secret(token, setting=CONTROL_TOKEN_ENV)
    check_distinct({ADMISSION_TOKEN_ENV: env.get(ADMISSION_TOKEN_ENV), CONTROL_TOKEN_ENV: token})
    return token, False


def without_hosts(status: dict[str, Any]) -> dict[str, Any]:
    """A group's ``/status`` without where its driver and executors run (``spark``'s
    ``driver_host``, each executor's ``host`` and ``port``): what a caller without the
    control token sees."""
    spark = status.get("spark")
    if not isinstance(spark, dict):
        return status
    shown = {k: v for k, v in spark.items() if k != "driver_host"}
    shown["executors"] = [
        {k: v for k, v in e.items() if k not in ("host", "port")}
        for e in spark.get("executors", [])
    ]
    return {**status, "spark": shown}


def build_app(group: ControlledGroup, *, token: str, identity_key: str | None = None) -> FastAPI:
    """The ASGI app of a query group's endpoint.

    Args:
        group: the query group.
        token: the control token every state-changing call must carry as
            ``Authorization: Bearer <token>``.
        identity_key: the key of its control file, with which ``GET /identity``
            answers a client's challenge (``None``: a new one, for an endpoint that
            writes no control file).

    Raises:
        ValueError: ``token`` is empty (an empty token would let anyone in).
    """
    if not token:
        raise ValueError("the control token must not be empty")
    key = identity_key or new_identity_key()
    app = FastAPI(
        title=f"floodgate query group {group.name}",
        description=(
            "Metrics and control of one running query group. Reads are open; POST calls "
            "need the control token as a bearer token."
        ),
    )

    def authorised(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        given = credentials.credentials if credentials is not None else ""
        if not same_secret(given, token):
            raise HTTPException(
                status_code=401,
                detail=(
                    "a bearer token (the query group's control token: "
                    f"{CONTROL_TOKEN_ENV}, or its control file <name>.token) is required "
                    "for this call"
                ),
                headers={"WWW-Authenticate": "Bearer"},
            )

    auth = [Depends(authorised)]

    @app.get("/status")
    def status(request: Request) -> dict[str, Any]:
        """State, hold, per-query figures and output queues; the driver's and
        executors' hosts only with the control token (read from the header: the read
        stays open, and its schema asks for no token)."""
        shown = group.status()
        if carries_bearer(request.headers.get("Authorization"), token):
            return shown
        return without_hosts(shown)

    @app.get(IDENTITY_PATH)
    def identity(challenge: Annotated[str, Query(min_length=16, max_length=256)]) -> dict[str, str]:
        """The proof that this endpoint wrote its control file: the HMAC-SHA256 of
        ``challenge`` under the file's identity key."""
        return {"proof": prove(key, challenge)}

    @app.post(
        "/release",
        dependencies=auth,
        responses={
            **_UNAUTHORISED,
            409: {"model": Refusal, "description": "The group is not HELD (the reason)."},
        },
    )
    def release() -> dict[str, Any]:
        """Release a HELD query group; 409 when it is not held."""
        try:
            group.hold.release()
        except QueryGroupError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc
        return group.status()

    @app.post("/stop", status_code=202, dependencies=auth, responses=_UNAUTHORISED)
    def stop() -> dict[str, Any]:
        """Stop the query group (asynchronously; poll /status or wait for the process)."""
        group.request_stop()
        return {"query_group": group.name, "stopping": True}

    add_metrics_route(app, group.registry)
    # The token checked before a body is read, failures throttled per address and
    # counted (floodgate_http_auth_*); the dependency above keeps it in the schema.
    app.add_middleware(
        RequestGate,
        token=token,
        token_name=f"the query group's control token: {CONTROL_TOKEN_ENV}, or its control "
        "file <name>.token",
        limit_name="the control endpoint's body limit",
        registry=group.registry,
    )
    return app


#: The setting that names the control folder, in refusals.
CONTROL_DIR_KEY = "query_group.control_dir"


def check_control_dir(control_dir: str | Path) -> Path:
    """Make the control folder 0700, or check the one that exists
    (:func:`~pipeline.state.files.private_dir`).

    Returns:
        The folder.

    Raises:
        ConfigError: it is owned by another user or others can write to it (key
            ``query_group.control_dir``; the message names the path and its mode).
        OSError: it cannot be created.
    """
    return private_dir(control_dir, key=CONTROL_DIR_KEY)


class ControlServer:
    """The query group's endpoint (:func:`build_app`), served by an
    :class:`~pipeline.http.serving.AppServer`, plus its control files.

    Args:
        group: the query group.
        host: interface to bind.
        port: port to bind; 0 picks a free one.
        control_dir: where the control files go (``None``: none is written).
        token: the control token; default: :func:`resolve_token` (the environment,
            else a random one).
        allowed_hosts: host names it answers to besides IP addresses and
            ``localhost`` (``query_group.allowed_hosts``).

    Raises:
        ConfigError: (from the constructor) :data:`CONTROL_TOKEN_ENV` is set but empty
            or unusable, or ``control_dir`` is refused (:func:`check_control_dir`).
        OSError: (from the constructor) ``control_dir`` cannot be created; (from
            :meth:`start`) the port cannot be bound.
    """

    def __init__(
        self,
        group: ControlledGroup,
        *,
        host: str,
        port: int,
        control_dir: str | None,
        token: str | None = None,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        self.group = group
        self.allowed_hosts = list(allowed_hosts)
        self.host = host
        self.port = port
        folder = check_control_dir(control_dir) if control_dir is not None else None
        self.control_file = folder / f"{group.name}.json" if folder is not None else None
        self.token_file = folder / f"{group.name}.token" if folder is not None else None
        self.token, self.token_generated = (token, False) if token else resolve_token()
        self.identity_key = new_identity_key()
        self._server: AppServer | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the endpoint (loopback when bound to all interfaces)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Bind, serve in a thread, wait until it answers, write the control files."""
        self._server = AppServer(
            build_app(self.group, token=self.token, identity_key=self.identity_key),
            host=self.host,
            port=self.port,
            name=self.group.name,
            allowed_hosts=self.allowed_hosts,
            hosts_setting="query_group.allowed_hosts",
        )
        self.port = self._server.port
        self._server.start(timeout_s)
        if self.control_file is not None and self.token_file is not None:
            if self.token_generated:
                write_private_text(self.token_file, self.token)
            else:
                self.token_file.unlink(missing_ok=True)  # an earlier run's, now wrong
            write_control_file(
                self.control_file,
                query_group=self.group.name,
                url=self.url,
                identity_key=self.identity_key,
            )
        log.info(
            "query group %s: metrics at %s/metrics, control at %s/status (control token %s)",
            self.group.name,
            self.url,
            self.url,
            f"in {self.token_file}"
            if self.token_generated and self.token_file is not None
            else f"from {CONTROL_TOKEN_ENV}"
            if not self.token_generated
            else "generated, not written anywhere",
        )

    def stop(self) -> None:
        """Stop serving and remove the control files (if they are still this one's)."""
        if self.control_file is not None and self.token_file is not None:
            try:
                current = read_control_file(self.control_file)
                if current.identity_key == self.identity_key:
                    self.control_file.unlink()
                    if self.token_generated and same_secret(
                        read_trusted(self.token_file), self.token
                    ):
                        self.token_file.unlink()
            except (OSError, ValueError):
                pass
        if self._server is not None:
            self._server.stop()
