"""The query group's HTTP endpoint: Prometheus metrics and control, on one port.

A running query group (:meth:`pipeline.query_group.QueryGroup.serve`) answers:

* ``GET /metrics`` -- its Prometheus metrics (the group's ``CollectorRegistry``);
* ``GET /status`` -- state, hold, queries and output queues as JSON
  (:meth:`~pipeline.query_group.QueryGroup.status`);
* ``POST /release`` -- release a HELD group (409 with the reason otherwise);
* ``POST /stop`` -- stop the group (202; the process that runs it exits).

The OpenAPI schema is at ``/openapi.json``. On start the server writes
``<control_dir>/<query group>.json`` (``{"query_group", "url", "pid"}``), so
``floodgate query-group status|release|stop NAME`` on the same host finds the
endpoint by name; the file is removed on stop. ``--url`` reaches any other.

FastAPI and uvicorn do the HTTP (DESIGN.md: a well-kept library over our own code);
the server runs in a daemon thread of the driver.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI, HTTPException

from pipeline.config import DEFAULT_CONTROL_DIR
from pipeline.errors import FloodgateError, QueryGroupError
from pipeline.metrics import add_metrics_route
from pipeline.serving import AppServer

if TYPE_CHECKING:
    from pipeline.query_group import QueryGroup

log = logging.getLogger(__name__)


def build_app(group: QueryGroup) -> FastAPI:
    """The ASGI app of a query group's endpoint."""
    app = FastAPI(
        title=f"floodgate query group {group.name}",
        description="Metrics and control of one running query group (DESIGN.md section 4.2).",
    )

    @app.get("/status")
    def status() -> dict[str, Any]:
        """State, hold, per-query figures and output queues."""
        return group.status()

    @app.post("/release")
    def release() -> dict[str, Any]:
        """Release a HELD query group; 409 when it is not held."""
        try:
            group.release()
        except QueryGroupError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from exc
        return group.status()

    @app.post("/stop", status_code=202)
    def stop() -> dict[str, Any]:
        """Stop the query group (asynchronously; poll /status or wait for the process)."""
        group.request_stop()
        return {"query_group": group.name, "stopping": True}

    add_metrics_route(app, group.registry)
    return app


class ControlServer:
    """The query group's endpoint (:func:`build_app`), served by an
    :class:`~pipeline.serving.AppServer`, plus its control file.

    Args:
        group: the query group.
        host: interface to bind.
        port: port to bind; 0 picks a free one.
        control_dir: where the control file goes (``None``: none is written).

    Raises:
        OSError: (from :meth:`start`) the port cannot be bound.
    """

    def __init__(self, group: QueryGroup, *, host: str, port: int, control_dir: str | None) -> None:
        self.group = group
        self.host = host
        self.port = port
        self.control_file = (
            Path(control_dir) / f"{group.name}.json" if control_dir is not None else None
        )
        self._server: AppServer | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the endpoint (loopback when bound to all interfaces)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Bind, serve in a thread, wait until it answers, write the control file."""
        self._server = AppServer(
            build_app(self.group), host=self.host, port=self.port, name=self.group.name
        )
        self.port = self._server.port
        self._server.start(timeout_s)
        if self.control_file is not None:
            self.control_file.parent.mkdir(parents=True, exist_ok=True)
            self.control_file.write_text(
                json.dumps({"query_group": self.group.name, "url": self.url, "pid": os.getpid()})
            )
        log.info(
            "query group %s: metrics at %s/metrics, control at %s/status",
            self.group.name,
            self.url,
            self.url,
        )

    def stop(self) -> None:
        """Stop serving and remove the control file."""
        if self.control_file is not None:
            try:
                current = json.loads(self.control_file.read_text())
                if current.get("pid") == os.getpid() and current.get("url") == self.url:
                    self.control_file.unlink()
            except (OSError, ValueError):
                pass
        if self._server is not None:
            self._server.stop()


def error_detail(response: httpx.Response) -> str:
    """The reason an HTTP API of ours gave for refusing (FastAPI's ``detail``), or the
    response's text."""
    try:
        return str(response.json().get("detail", response.text))
    except (ValueError, AttributeError):
        return response.text


def endpoint_url(
    name: str, *, url: str | None = None, control_dir: str = DEFAULT_CONTROL_DIR
) -> str:
    """The base URL of a running query group: ``url`` if given, else its control file.

    Raises:
        FloodgateError: no URL was given and no control file names the group (the
            message says where it looked).
    """
    if url:
        return url.rstrip("/")
    path = Path(control_dir) / f"{name}.json"
    try:
        return str(json.loads(path.read_text())["url"]).rstrip("/")
    except (OSError, ValueError, KeyError) as exc:
        raise FloodgateError(
            f"query group {name!r}: no running endpoint found ({path} is missing or "
            "unreadable); is it running on this host? Pass --url http://host:port otherwise"
        ) from exc


def call(
    name: str,
    action: str,
    *,
    url: str | None = None,
    control_dir: str = DEFAULT_CONTROL_DIR,
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Send ``status`` (GET) or ``release`` / ``stop`` (POST) to a running query group.

    Returns:
        The endpoint's JSON answer.

    Raises:
        FloodgateError: the endpoint cannot be found or reached, or refused (the
            message carries its reason, e.g. "not HELD").
    """
    base = endpoint_url(name, url=url, control_dir=control_dir)
    try:
        if action == "status":
            response = httpx.get(f"{base}/status", timeout=timeout_s)
        else:
            response = httpx.post(f"{base}/{action}", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise FloodgateError(f"query group {name!r} at {base}: {exc}") from exc
    if response.status_code >= 400:
        raise FloodgateError(
            f"query group {name!r} at {base}: {action} refused: {error_detail(response)}"
        )
    result: dict[str, Any] = response.json()
    return result
