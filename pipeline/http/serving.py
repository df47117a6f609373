"""Serving a FastAPI app (metrics, control, a service's API) with uvicorn in a daemon
thread: the query group's endpoint, the admission and sweeper services.

The socket is bound first, so the URL (port 0 picks a free one) is known before
anything announces it; :meth:`AppServer.start` returns once the server answers.

Every server is hardened the same way (:class:`AppServer`): a request's head must
arrive within ``header_timeout_s`` of the connection (or of its first byte, on a kept
alive one) and its body within ``body_timeout_s`` of the head, else the connection is
closed (as Apache's ``mod_reqtimeout`` and nginx's ``client_header_timeout`` /
``client_body_timeout`` do; uvicorn has only a keep-alive timeout, so
:class:`TimedH11Protocol` adds both); past ``max_connections`` open connections a
request is answered 503 (uvicorn's ``limit_concurrency``); and only a ``Host`` the
server answers to is served (:class:`~pipeline.http.gates.HostGate`: IP addresses,
``localhost`` and configured names; DNS rebinding gets 400).

A service's ``serve`` command (``floodgate admission serve``, ``floodgate sweeper
serve``) shares its frame: :func:`log_service` at start, :func:`listen` to bind its
API, then :func:`serve_until_signal` in the foreground.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from pipeline.errors import FloodgateError
from pipeline.http.gates import HostGate

log = logging.getLogger(__name__)

#: Seconds a client has to send a request's head (request line and headers).
DEFAULT_HEADER_TIMEOUT_S = 10.0

#: Seconds a client has to send a request's body once its head is in.
DEFAULT_BODY_TIMEOUT_S = 30.0

#: Open connections past which a request is answered 503.
DEFAULT_MAX_CONNECTIONS = 64


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline to receive a request's head and one to
    receive its body; past either, the connection is closed. Set the deadlines as
    class attributes of a subclass (:meth:`with_timeouts`): uvicorn makes one protocol
    object per connection from the class.

    The head's clock starts when the connection is made, or at the first byte of a
    further request on a kept-alive one (the idle time between requests is uvicorn's
    ``timeout_keep_alive``); the body's when the head is in. A client that trickles a
    byte at a time gains nothing: a clock is not reset by data.
    """

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    @classmethod
    def with_timeouts(cls, *, header_timeout_s: float, body_timeout_s: float) -> type[Any]:
        """A subclass with these deadlines (seconds, > 0).

        Raises:
            ValueError: a deadline is not positive.
        """
        if not (header_timeout_s > 0 and body_timeout_s > 0):
            raise ValueError(
                f"header_timeout_s and body_timeout_s must be positive, got "
                f"{header_timeout_s} and {body_timeout_s}"
            )
        return type(
            "TimedH11Protocol",
            (cls,),
            {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
        )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._phase: str | None = None
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch(idle_is_head=True)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch(idle_is_head=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch(idle_is_head=False)  # idle now: uvicorn's keep-alive timeout

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        super().connection_lost(exc)

    def _watch(self, *, idle_is_head: bool) -> None:
        state = self.conn.their_state
        if state is h11.IDLE:
            self._arm("head" if idle_is_head else None)
        elif state is h11.SEND_BODY:
            self._arm("body")
        else:
            self._arm(None)

    def _arm(self, phase: str | None) -> None:
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None and not self.transport.is_closing():
            timeout_s = self.header_timeout_s if phase == "head" else self.body_timeout_s
            self._deadline = self.loop.call_later(timeout_s, self._expired, phase, timeout_s)

    def _expired(self, phase: str, timeout_s: float) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info(
                "closed a connection from %s: the request's %s did not arrive within %g s",
                self.client[0] if self.client else "?",
                phase,
                timeout_s,
            )
            self.transport.close()


class AppServer:
    """One ASGI app on ``host:port``.

    Args:
        app: the ASGI app (FastAPI).
        host: interface to bind.
        port: port to bind; 0 picks a free one.
        name: for the thread and errors.
        allowed_hosts: host names it answers to besides IP addresses and
            ``localhost`` (:class:`~pipeline.http.gates.HostGate`); ``host`` is one
            when it is a name.
        hosts_setting: the setting that names them, for the 400's detail.
        header_timeout_s: seconds to receive a request's head (:class:`TimedH11Protocol`).
        body_timeout_s: seconds to receive a request's body once its head is in.
        max_connections: open connections past which a request is answered 503.

    Raises:
        OSError: the port cannot be bound (from the constructor).
        ValueError: a timeout is not positive.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        name: str,
        allowed_hosts: Iterable[str] = (),
        hosts_setting: str = "allowed_hosts",
        header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        import uvicorn

        protocol = TimedH11Protocol.with_timeouts(
            header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s
        )
        gated = HostGate(app, allowed_hosts=[*allowed_hosts, host], setting=hosts_setting)

        self.name = name
        self.host = host
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self.port = int(sock.getsockname()[1])
        self._socket = sock
        # log_config=None: uvicorn's own lines go through the root logger, in the
        # service's format (pipeline.logs), not in a format of uvicorn's.
        self._server = uvicorn.Server(
            uvicorn.Config(
                gated,
                log_level="warning",
                log_config=None,
                access_log=False,
                lifespan="off",
                http=protocol,
                limit_concurrency=max_connections,
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def bound(self) -> str:
        """``address:port`` the socket is bound to, as the kernel reports it
        (``0.0.0.0:8787`` is every interface): what to log, unlike :attr:`url`."""
        address, port = self._socket.getsockname()[:2]
        return f"{address}:{port}"

    @property
    def url(self) -> str:
        """``http://host:port`` (loopback when bound to all interfaces)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Serve in a daemon thread; return once the server has started.

        Raises:
            FloodgateError: it did not start within ``timeout_s``.
        """
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name=f"floodgate-{self.name}-http",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise FloodgateError(f"{self.name}: the HTTP endpoint on {self.url} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._socket.close()


def wait_for_signal() -> None:
    """Block until SIGTERM or SIGINT (the foreground of a ``serve`` command)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop.wait()


def log_service(verbose: bool, log_format: str = "text") -> None:
    """Log a service's lines on standard error with their time, level and logger, as
    ``text`` or ``json`` (:func:`pipeline.logs.configure_logging`), at INFO when
    ``verbose``, else WARNING; a no-op once logging is set up.

    Raises:
        ValueError: ``log_format`` is neither ``text`` nor ``json``.
    """
    from pipeline.logs import configure_logging

    configure_logging(verbose, log_format)


def listen(
    app: Any,
    *,
    host: str,
    port: int,
    name: str,
    what: str = "",
    allowed_hosts: Iterable[str] = (),
    hosts_setting: str = "allowed_hosts",
) -> AppServer:
    """An :class:`AppServer` of ``app`` bound to ``host:port`` (0: a free port), not
    serving yet.

    Args:
        what: who listens, leading the error (``"the API"``); empty: nothing.
        allowed_hosts: host names it answers to (:class:`AppServer`).
        hosts_setting: the setting that names them.

    Raises:
        FloodgateError: the port cannot be bound: ``[<what> ]could not listen on
            <host>:<port>: <the OSError>``.
    """
    try:
        return AppServer(
            app,
            host=host,
            port=port,
            name=name,
            allowed_hosts=allowed_hosts,
            hosts_setting=hosts_setting,
        )
    except OSError as exc:
        who = f"{what} " if what else ""
        raise FloodgateError(f"{who}could not listen on {host}:{port}: {exc}") from exc


def serve_until_signal(
    server: AppServer, *, announce: Iterable[str] = (), stop: Callable[[], None] | None = None
) -> None:
    """The foreground of a ``serve`` command: start ``server``, print each line of
    ``announce`` on standard output (flushed: a supervisor or a test reads them), block
    until SIGTERM or SIGINT, then stop the server and call ``stop`` (the service's own).
    The server and ``stop`` are stopped however this ends.

    Raises:
        FloodgateError: the server did not start (:meth:`AppServer.start`).
    """
    try:
        server.start()
        for line in announce:
            print(line, flush=True)
        wait_for_signal()
    finally:
        server.stop()
        if stop is not None:
            stop()
