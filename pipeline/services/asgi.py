"""An ASGI gate in front of a service's API: the bearer token and the body limit are
checked before the app reads, let alone parses, a request body (issue 26).

FastAPI reads and parses a request's whole body before it runs any dependency, the
token check included; with no limit, four unauthenticated 50 MB POSTs took the
admission service from 239 to 803 MB. :class:`RequestGate` sits in front of the app
and, for every HTTP request:

1. a method that may change state (anything but ``GET``, ``HEAD``, ``OPTIONS``)
   without ``Authorization: Bearer <token>`` (compared in constant time) is answered
   401 with ``WWW-Authenticate: Bearer`` (RFC 6750 section 3) at once: no byte of the
   body is read;
2. a ``Content-Length`` over the limit is answered 413 (RFC 9110 section 15.5.14,
   Content Too Large) at once, likewise;
3. otherwise the body is read as it streams in (a chunked one too), counting bytes:
   past the limit the request is answered 413 without reading more, else the app
   gets the body as the client sent it.

Both refusals close the connection (``Connection: close``), so the server reads no
more of what the client still sends. Starlette and uvicorn offer no body limit of
their own, hence this middleware.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import JSONResponse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Methods that read only: they need no token.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: 1 MiB: the default body limit of the services' APIs (issue 26).
DEFAULT_MAX_BODY_BYTES = 1 << 20


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
    ) -> None:
        if not token:
            raise ValueError("the bearer token must not be empty (it would let anyone in)")
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, got {max_body_bytes}")
        self.app = app
        self._token = token.encode()
        self.max_body_bytes = max_body_bytes
        self.token_name = token_name
        self.limit_name = limit_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if scope["method"].upper() not in READ_METHODS and not self._authorised(headers):
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
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        given = credentials.strip().encode() if scheme.lower() == "bearer" else b""
        return hmac.compare_digest(given, self._token)

    def _too_large(self, what: str) -> str:
        return (
            f"the request body is too large ({what}); at most {self.max_body_bytes} bytes "
            f"({self.limit_name})"
        )


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
