"""ASGI gates in front of a service's API: the ``Host`` header is one the server
answers to (:class:`HostGate`), and the bearer token and the body limit are checked
before the app reads, let alone parses, a request body (:class:`RequestGate`).

FastAPI reads and parses a request's whole body before it runs any dependency, the
token check included; with no limit, four unauthenticated 50 MB POSTs took the
admission service from 239 to 803 MB. :class:`RequestGate` sits in front of the app
and, for every HTTP request:

1. a method that may change state (anything but ``GET``, ``HEAD``, ``OPTIONS``) from
   a client address that failed authentication :attr:`AuthThrottle.max_failures`
   times in the current window is answered 429 (RFC 6585 section 4) with
   ``Retry-After``, its token not checked;
2. such a method without ``Authorization: Bearer <token>`` (compared in constant time,
   :func:`~pipeline.security.credentials.same_secret`) is answered 401 with
   ``WWW-Authenticate: Bearer`` (RFC 6750 section 3) at once: no byte of the body is
   read; the failure counts against the client's address;
3. a ``Content-Length`` over the limit is answered 413 (RFC 9110 section 15.5.14,
   Content Too Large) at once, likewise;
4. otherwise the body is read as it streams in (a chunked one too), counting bytes:
   past the limit the request is answered 413 without reading more, else the app
   gets the body as the client sent it.

Every refusal closes the connection (``Connection: close``), so the server reads no
more of what the client still sends. Starlette and uvicorn offer no body limit of
their own, hence this middleware.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from pipeline.metrics import HttpAuthMetrics
from pipeline.security.credentials import carries_bearer

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Methods that read only: they need no token.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: 1 MiB: the default body limit of the services' APIs: a body is never read past it,
#: so a client cannot make a service hold an unbounded one.
DEFAULT_MAX_BODY_BYTES = 1 << 20

#: Failed authentications from one client address before it is throttled.
DEFAULT_MAX_AUTH_FAILURES = 10

#: The window those failures are counted in, seconds.
DEFAULT_AUTH_WINDOW_S = 60.0

#: Host names every server answers to, besides IP addresses: the loopback name.
LOOPBACK_NAMES = frozenset({"localhost"})


class AuthThrottle:
    """Failed authentications per client address, in fixed windows: once an address
    has failed ``max_failures`` times in a window, its calls are refused until the
    window ends (as fail2ban's ``maxretry`` in ``findtime``, but in the server).

    Memory is bounded: past ``max_addresses`` addresses the ones whose window ended are
    forgotten, then the oldest.

    Args:
        max_failures: failures that throttle an address (>= 1).
        window_s: length of a window, seconds (> 0); it starts at an address's first
            failure.
        max_addresses: most addresses remembered.
        clock: seconds, monotonic (:func:`time.monotonic`).

    Raises:
        ValueError: ``max_failures`` < 1 or ``window_s`` <= 0.
    """

    def __init__(
        self,
        *,
        max_failures: int = DEFAULT_MAX_AUTH_FAILURES,
        window_s: float = DEFAULT_AUTH_WINDOW_S,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_failures < 1:
            raise ValueError(f"max_failures must be at least 1, got {max_failures}")
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_addresses = max_addresses
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}  # address: (start, failures)

    def retry_after_s(self, address: str) -> float:
        """Seconds until ``address`` may try again; 0 when it is not throttled."""
        start, failures = self._windows.get(address, (0.0, 0))
        left = start + self.window_s - self._clock()
        return left if failures >= self.max_failures and left > 0 else 0.0

    def failed(self, address: str) -> None:
        """Count one failed authentication of ``address``."""
        now = self._clock()
        start, failures = self._windows.pop(address, (now, 0))
        if now - start >= self.window_s:
            start, failures = now, 0
        if len(self._windows) >= self.max_addresses:
            self._forget(now)
        self._windows[address] = (start, failures + 1)

    def _forget(self, now: float) -> None:
        for address, (start, _) in list(self._windows.items()):
            if now - start >= self.window_s:
                del self._windows[address]
        while len(self._windows) >= self.max_addresses:
            del self._windows[next(iter(self._windows))]


class RequestGate:
    """ASGI middleware: token first, then a counted body, then the app.

    Args:
        app: the ASGI app behind the gate.
        token: the bearer token every call whose method is not in
            :data:`READ_METHODS` must carry; must not be empty.
        max_body_bytes: most bytes of a request body (>= 1).
        token_name: how the token is named in the 401's detail (``admission.token``).
        limit_name: how the limit is named in the 413's detail
            (``admission.max_request_body_bytes``).
        registry: where :class:`~pipeline.metrics.HttpAuthMetrics` count; ``None``:
            not counted.
        throttle: failed authentications per address (default: 10 in 60 s).

    Raises:
        ValueError: ``token`` is empty or ``max_body_bytes`` < 1.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        token_name: str = "the token",
        limit_name: str = "the body limit",
        registry: CollectorRegistry | None = None,
        throttle: AuthThrottle | None = None,
    ) -> None:
        if not token:
            raise ValueError("the bearer token must not be empty (it would let anyone in)")
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, got {max_body_bytes}")
        self.app = app
        self._token = token
        self.max_body_bytes = max_body_bytes
        self.token_name = token_name
        self.limit_name = limit_name
        self.throttle = throttle if throttle is not None else AuthThrottle()
        self._metrics = HttpAuthMetrics.on(registry) if registry is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if scope["method"].upper() not in READ_METHODS:
            address = (scope.get("client") or ("", 0))[0]
            wait_s = self.throttle.retry_after_s(address)
            if wait_s > 0:
                if self._metrics is not None:
                    self._metrics.throttled.inc()
                await _refuse(
                    scope,
                    receive,
                    send,
                    429,
                    f"too many failed authentications from this address: "
                    f"{self.throttle.max_failures} in {self.throttle.window_s:g} s; "
                    f"try again in {math.ceil(wait_s)} s",
                    {"Retry-After": str(math.ceil(wait_s))},
                )
                return
            if not self._authorised(headers):
                self.throttle.failed(address)
                if self._metrics is not None:
                    self._metrics.failures.inc()
                await _refuse(
                    scope,
                    receive,
                    send,
                    401,
                    f"a bearer token ({self.token_name}) is required for this call",
                    {"WWW-Authenticate": "Bearer"},
                )
                return
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await _refuse(scope, receive, send, 413, self._too_large(f"{int(length)} bytes"))
            return
        body: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _refuse(scope, receive, send, 413, self._too_large("more"))
                return
            body.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _authorised(self, headers: dict[str, str]) -> bool:
        return carries_bearer(headers.get("authorization"), self._token)

    def _too_large(self, what: str) -> str:
        return (
            f"the request body is too large ({what}); at most {self.max_body_bytes} bytes "
            f"({self.limit_name})"
        )


class HostGate:
    """ASGI middleware: answer only requests whose ``Host`` is one this server answers
    to, 400 to others, so a web page cannot reach a loopback server through a name it
    controls (DNS rebinding: the browser sends the page's name as ``Host``). Answered
    to: an IP address (v4, or v6 in brackets; a page reached by address is not
    rebinding), ``localhost``, and ``allowed_hosts``; the port is ignored, names are
    matched without case. A request without ``Host`` is refused too.

    Args:
        app: the ASGI app behind the gate.
        allowed_hosts: more host names (``admission`` in a compose stack).
        setting: the setting that adds names, for the 400's detail.
    """

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str] = (), setting: str) -> None:
        self.app = app
        self.allowed_hosts = LOOPBACK_NAMES | {name.lower() for name in allowed_hosts}
        self.setting = setting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _headers(scope).get("host", "")
            if not self.answers_to(host):
                await _refuse(
                    scope,
                    receive,
                    send,
                    400,
                    f"this server does not answer to the Host {host[:100]!r}: only to an "
                    f"IP address, localhost or a name of {self.setting}",
                )
                return
        await self.app(scope, receive, send)

    def answers_to(self, host: str) -> bool:
        """Whether a request with ``Host: host`` is answered."""
        name = host_name(host)
        if not name:
            return False
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return name.lower() in self.allowed_hosts
        return True


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header (RFC 9110 section 7.2): without its
    port, an IPv6 address without its brackets; empty when it is malformed."""
    if host.startswith("["):
        address, bracket, rest = host[1:].partition("]")
        return address if bracket and (not rest or rest[:1] == ":") else ""
    name, _, port = host.partition(":")
    return name if not port or port.isdigit() else ""


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers, names lower-cased (the last of a repeated name wins)."""
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    detail: str,
    headers: dict[str, str] | None = None,
) -> None:
    """Answer ``{"detail": detail}`` with ``status`` and close the connection."""
    response = JSONResponse(
        {"detail": detail}, status_code=status, headers={**(headers or {}), "Connection": "close"}
    )
    await response(scope, receive, send)
