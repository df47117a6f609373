"""Calling a Floodgate service's HTTP endpoint from the CLI: URL, token, errors.

A query group's control file (``<control_dir>/<name>.json``, the URL its control
token is sent to) and token file are trusted only when they are regular files of our
own user that others cannot write to, reached without a symbolic link
(:func:`pipeline.state.files.read_trusted`): any other could have been written by
another user, so it is refused, naming its path, owner and mode, and nothing is sent.
The endpoint the file names must then prove it is the driver that wrote it
(:func:`pipeline.http.control_file.verify_endpoint`: its process alive, ours,
listening on the port, and answering the file's identity challenge) before the token
goes there; otherwise the call is refused, naming the file, the pid and the port.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from pipeline.config import DEFAULT_CONTROL_DIR
from pipeline.errors import FloodgateError, UntrustedEndpointError, UntrustedFileError
from pipeline.http.control_file import ControlFile, read_control_file, verify_endpoint
from pipeline.state.files import read_trusted

#: Environment variable holding the control token of a query group's endpoint, read
#: by the driver (``floodgate run``) and by ``floodgate query-group`` commands.
CONTROL_TOKEN_ENV = "FLOODGATE_CONTROL_TOKEN"


def error_detail(response: httpx.Response) -> str:
    """The reason an HTTP API of ours gave for refusing (FastAPI's ``detail``), or the
    response's text."""
    try:
        return str(response.json().get("detail", response.text))
    except (ValueError, AttributeError):
        return response.text


def control_file(name: str, *, control_dir: str = DEFAULT_CONTROL_DIR) -> ControlFile:
    """The control file of query group ``name`` in ``control_dir``.

    Raises:
        FloodgateError: no control file names the group (the message says where it
            looked), or it is not trusted (another user's, writable by others, a
            symbolic link: names its path, owner and mode).
    """
    path = Path(control_dir) / f"{name}.json"
    try:
        return read_control_file(path)
    except UntrustedFileError as exc:
        raise _untrusted(name, exc) from exc
    except (OSError, ValueError) as exc:
        raise FloodgateError(
            f"query group {name!r}: no running endpoint found ({path} is missing or "
            "unreadable); is it running on this host? Pass --url http://host:port otherwise"
        ) from exc


def endpoint_url(
    name: str, *, url: str | None = None, control_dir: str = DEFAULT_CONTROL_DIR
) -> str:
    """The base URL of a running query group: ``url`` if given, else its control file
    (not yet verified: :func:`call` verifies it before it sends anything).

    Raises:
        FloodgateError: as :func:`control_file`.
    """
    if url:
        return url.rstrip("/")
    return control_file(name, control_dir=control_dir).url


def client_token(
    name: str, *, control_dir: str = DEFAULT_CONTROL_DIR, env: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """The control token a client sends to query group ``name``: :data:`CONTROL_TOKEN_ENV`
    when set, else the content of ``<control_dir>/<name>.token``.

    Returns:
        ``(token or None, where it was looked for)`` -- the second for messages.

    Raises:
        FloodgateError: the token file is not trusted (as :func:`endpoint_url`).
    """
    env = os.environ if env is None else env
    if env.get(CONTROL_TOKEN_ENV):
        return env[CONTROL_TOKEN_ENV], CONTROL_TOKEN_ENV
    path = Path(control_dir) / f"{name}.token"
    try:
        return read_trusted(path), f"{CONTROL_TOKEN_ENV} (unset) or {path}"
    except UntrustedFileError as exc:
        raise _untrusted(name, exc) from exc
    except (OSError, ValueError):
        return None, f"{CONTROL_TOKEN_ENV} (unset) or {path} (missing or unreadable)"


def _untrusted(name: str, exc: FloodgateError) -> FloodgateError:
    """The refusal of a query group's control or token file that is not trusted, or of
    the endpoint its control file names."""
    return FloodgateError(
        f"query group {name!r}: {exc}; nothing was sent (a control file names where the "
        "control token goes): remove it, or pass --url http://host:port with "
        f"{CONTROL_TOKEN_ENV}"
    )


def call(
    name: str,
    action: str,
    *,
    url: str | None = None,
    control_dir: str = DEFAULT_CONTROL_DIR,
    token: str | None = None,
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """Send ``status`` (GET) or ``release`` / ``stop`` (POST) to a running query group.

    Args:
        name: the query group.
        action: ``status``, ``release`` or ``stop``.
        url: the endpoint (default: from the group's control file in ``control_dir``).
        control_dir: where the group's control files are.
        token: the control token, sent with every action (with ``status`` it shows
            the driver's and executors' hosts); default :func:`client_token`.
        timeout_s: HTTP timeout, seconds.

    Returns:
        The endpoint's JSON answer.

    Raises:
        FloodgateError: the endpoint cannot be found or reached, or refused (the
            message carries its reason, e.g. "not HELD"; for a 401, where the token
            was looked for); its control or token file is not trusted, or the endpoint
            its control file names is not proven to be the driver that wrote it
            (:func:`~pipeline.http.control_file.verify_endpoint`; nothing but the
            identity challenge sent).
    """
    control = None if url else control_file(name, control_dir=control_dir)
    base = control.url if control is not None else endpoint_url(name, url=url)
    where = "the token given"
    if token is None:
        token, where = client_token(name, control_dir=control_dir)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(timeout=timeout_s) as client:
            if control is not None:
                try:
                    verify_endpoint(control, client)
                except UntrustedEndpointError as exc:
                    raise _untrusted(name, exc) from exc
            if action == "status":
                response = client.get(f"{base}/status", headers=headers)
            else:
                response = client.post(f"{base}/{action}", headers=headers)
    except httpx.HTTPError as exc:
        raise FloodgateError(f"query group {name!r} at {base}: {exc}") from exc
    if response.status_code == 401:
        raise FloodgateError(
            f"query group {name!r} at {base}: {action} refused: {error_detail(response)} "
            f"(token looked for in {where})"
        )
    if response.status_code >= 400:
        raise FloodgateError(
            f"query group {name!r} at {base}: {action} refused: {error_detail(response)}"
        )
    result: dict[str, Any] = response.json()
    return result
